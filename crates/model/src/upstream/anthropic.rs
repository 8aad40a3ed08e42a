//! Anthropic's Messages API (`POST {url}/messages`) as an upstream, streamed.
//!
//! System messages become `system`; tool calls are `tool_use` blocks of the
//! assistant and their results `tool_result` blocks of the next user
//! message; consecutive messages of one role are merged, as the API wants
//! them to alternate. `max_tokens` is required there: 4096 unless the
//! request sets `max_output_tokens`.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde_json::{json, Value};

use super::transport::{check_arguments, error_message, excerpt, Auth, Dialect, Endpoint, Route};
use super::{
    Delta, DeltaSink, Finish, Message, Reply, ToolCall, ToolChoice, Turn, Upstream, UpstreamConfig,
    UpstreamError, Usage,
};

/// The API version this adapter speaks.
const VERSION: &str = "2023-06-01";
/// `max_tokens` when the request gives none.
const DEFAULT_MAX_TOKENS: u32 = 4096;

pub struct Anthropic {
    endpoint: Endpoint,
}

impl Anthropic {
    pub fn new(config: UpstreamConfig) -> Result<Self, UpstreamError> {
        let route = Route {
            path: "messages",
            auth: Auth::Header("x-api-key"),
            headers: &[("anthropic-version", VERSION)],
        };
        Ok(Self {
            endpoint: Endpoint::new(config, route)?,
        })
    }
}

/// Adds content blocks to the conversation, merging with the last message
/// when it has the same role.
fn push(messages: &mut Vec<Value>, role: &str, blocks: Vec<Value>) {
    if blocks.is_empty() {
        return;
    }
    if let Some(last) = messages.last_mut() {
        if last["role"] == role {
            if let Some(content) = last["content"].as_array_mut() {
                content.extend(blocks);
                return;
            }
        }
    }
    messages.push(json!({"role": role, "content": blocks}));
}

/// The request body for a turn.
pub fn request_body(turn: &Turn, stream: bool) -> Value {
    let mut system = Vec::new();
    let mut messages: Vec<Value> = Vec::new();
    for message in &turn.messages {
        match message {
            Message::System(text) => system.push(text.clone()),
            Message::User(text) => push(
                &mut messages,
                "user",
                vec![json!({"type": "text", "text": text})],
            ),
            Message::Assistant { text, tool_calls } => {
                let mut blocks = Vec::new();
                if !text.is_empty() {
                    blocks.push(json!({"type": "text", "text": text}));
                }
                for call in tool_calls {
                    let input: Value = serde_json::from_str(&call.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    blocks.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
                }
                push(&mut messages, "assistant", blocks);
            }
            Message::Tool { call_id, output } => push(
                &mut messages,
                "user",
                vec![json!({"type": "tool_result", "tool_use_id": call_id, "content": output})],
            ),
        }
    }
    let mut body = json!({
        "model": turn.model,
        "max_tokens": turn.max_output_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        "messages": messages,
    });
    if !system.is_empty() {
        body["system"] = json!(system.join("\n\n"));
    }
    if !turn.tools.is_empty() {
        body["tools"] = turn
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "name": tool.name,
                    "description": tool.description,
                    "input_schema": tool.parameters,
                })
            })
            .collect();
        let mut choice = match &turn.tool_choice {
            ToolChoice::Auto => json!({"type": "auto"}),
            ToolChoice::Required => json!({"type": "any"}),
            ToolChoice::None => json!({"type": "none"}),
            ToolChoice::Named(name) => json!({"type": "tool", "name": name}),
        };
        if turn.parallel_tool_calls == Some(false) && choice["type"] != "none" {
            choice["disable_parallel_tool_use"] = json!(true);
        }
        body["tool_choice"] = choice;
    }
    if let Some(t) = turn.temperature {
        body["temperature"] = json!(t);
    }
    if let Some(p) = turn.top_p {
        body["top_p"] = json!(p);
    }
    if stream {
        body["stream"] = json!(true);
    }
    body
}

fn finish_of(reason: Option<&str>) -> Finish {
    match reason {
        Some("max_tokens") => Finish::Length,
        Some("refusal") => Finish::ContentFilter,
        _ => Finish::Stop,
    }
}

/// Reads a whole message.
pub fn parse_message(message: &Value) -> Result<Reply, UpstreamError> {
    if let Some(error) = error_message(message) {
        return Err(UpstreamError::Malformed(excerpt(&error)));
    }
    let content = message
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| UpstreamError::Malformed("a message without content".into()))?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in content {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("tool_use") => tool_calls.push(ToolCall {
                id: block
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or("call")
                    .to_owned(),
                name: block
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                arguments: block.get("input").cloned().unwrap_or(json!({})).to_string(),
            }),
            _ => {}
        }
    }
    let usage = message.get("usage");
    let count = |key: &str| {
        usage
            .and_then(|u| u.get(key))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    Ok(Reply {
        text,
        tool_calls,
        usage: Usage {
            input_tokens: count("input_tokens"),
            output_tokens: count("output_tokens"),
        },
        finish: finish_of(message.get("stop_reason").and_then(Value::as_str)),
    })
}

/// Reads the stream: text and tool uses by block index.
#[derive(Default)]
struct Stream {
    text: String,
    /// Tool uses by block index: (id, name, input JSON so far).
    calls: BTreeMap<usize, (String, String, String)>,
    usage: Usage,
    stop: Option<String>,
    ended: bool,
}

impl Dialect for Stream {
    type Body = Value;
    type Event = Value;

    fn whole(body: Value) -> Result<Reply, UpstreamError> {
        parse_message(&body)
    }

    fn event(
        &mut self,
        event: Value,
        deltas: Option<&DeltaSink>,
        max_arguments: usize,
    ) -> Result<bool, UpstreamError> {
        let index = event.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
        match event.get("type").and_then(Value::as_str) {
            Some("message_start") => {
                self.usage.input_tokens = event
                    .pointer("/message/usage/input_tokens")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
            }
            Some("content_block_start") => {
                let block = event.get("content_block").cloned().unwrap_or(json!({}));
                if block.get("type").and_then(Value::as_str) == Some("tool_use") {
                    let id = block
                        .get("id")
                        .and_then(Value::as_str)
                        .unwrap_or("call")
                        .to_owned();
                    let name = block
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned();
                    if let Some(sink) = deltas {
                        let _ = sink.send(Delta::ToolCall {
                            index,
                            id: id.clone(),
                            name: name.clone(),
                        });
                    }
                    self.calls.insert(index, (id, name, String::new()));
                }
            }
            Some("content_block_delta") => {
                let delta = event.get("delta").cloned().unwrap_or(json!({}));
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let piece = delta.get("text").and_then(Value::as_str).unwrap_or("");
                        self.text.push_str(piece);
                        if let Some(sink) = deltas {
                            let _ = sink.send(Delta::Text(piece.to_owned()));
                        }
                    }
                    Some("input_json_delta") => {
                        let piece = delta
                            .get("partial_json")
                            .and_then(Value::as_str)
                            .unwrap_or("");
                        if let Some(call) = self.calls.get_mut(&index) {
                            call.2.push_str(piece);
                            check_arguments(&call.2, max_arguments)?;
                        }
                        if let Some(sink) = deltas {
                            let _ = sink.send(Delta::ToolArguments {
                                index,
                                delta: piece.to_owned(),
                            });
                        }
                    }
                    _ => {}
                }
            }
            Some("message_delta") => {
                self.stop = event
                    .pointer("/delta/stop_reason")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                if let Some(n) = event
                    .pointer("/usage/output_tokens")
                    .and_then(Value::as_u64)
                {
                    self.usage.output_tokens = n;
                }
            }
            Some("message_stop") => {
                self.ended = true;
                return Ok(false);
            }
            Some("error") => {
                let message = error_message(&event).unwrap_or_else(|| "an error event".into());
                return Err(UpstreamError::Malformed(excerpt(&message)));
            }
            _ => {}
        }
        Ok(true)
    }

    fn finish(self) -> Result<Reply, UpstreamError> {
        if !self.ended && self.text.is_empty() && self.calls.is_empty() {
            return Err(UpstreamError::Malformed(
                "the event stream ended without a message".into(),
            ));
        }
        Ok(Reply {
            text: self.text,
            tool_calls: self
                .calls
                .into_values()
                .map(|(id, name, input)| ToolCall {
                    id,
                    name,
                    arguments: if input.trim().is_empty() {
                        "{}".into()
                    } else {
                        input
                    },
                })
                .collect(),
            usage: self.usage,
            finish: finish_of(self.stop.as_deref()),
        })
    }
}

#[async_trait]
impl Upstream for Anthropic {
    async fn complete(
        &self,
        turn: &Turn,
        deltas: Option<&DeltaSink>,
    ) -> Result<Reply, UpstreamError> {
        let body = request_body(turn, true);
        self.endpoint
            .complete(&body, Stream::default(), deltas)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_results_join_the_next_user_message_and_roles_alternate() {
        let turn = Turn {
            model: "claude".into(),
            messages: vec![
                Message::System("sys".into()),
                Message::User("go".into()),
                Message::Assistant {
                    text: "ok".into(),
                    tool_calls: vec![
                        ToolCall {
                            id: "t1".into(),
                            name: "shell".into(),
                            arguments: "{\"commands\":[\"ls\"]}".into(),
                        },
                        ToolCall {
                            id: "t2".into(),
                            name: "shell".into(),
                            arguments: "{}".into(),
                        },
                    ],
                },
                Message::Tool {
                    call_id: "t1".into(),
                    output: "a".into(),
                },
                Message::Tool {
                    call_id: "t2".into(),
                    output: "b".into(),
                },
            ],
            tools: vec![],
            tool_choice: ToolChoice::Auto,
            temperature: None,
            top_p: None,
            max_output_tokens: None,
            parallel_tool_calls: None,
        };
        let body = request_body(&turn, false);
        assert_eq!(body["system"], "sys");
        assert_eq!(body["max_tokens"], 4096);
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[1]["content"][1]["input"]["commands"][0], "ls");
        assert_eq!(messages[2]["content"].as_array().unwrap().len(), 2);
        let reply = parse_message(&json!({
            "content": [{"type": "text", "text": "x"}, {"type": "tool_use", "id": "t3", "name": "shell", "input": {"commands": ["pwd"]}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 1, "output_tokens": 2},
        }))
        .unwrap();
        assert_eq!(reply.tool_calls[0].arguments, "{\"commands\":[\"pwd\"]}");
    }
}
