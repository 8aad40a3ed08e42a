//! OpenAI Chat Completions (`POST {url}/chat/completions`), streamed.
//!
//! The lowest common denominator of model servers: vLLM, Ollama,
//! llama.cpp's server, LiteLLM and OpenRouter all speak it. Tool calls come
//! as `function` tool calls; their arguments may arrive in any number of
//! pieces, assembled by index. A server that answers with one JSON body
//! instead of an event stream is understood too.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde_json::{json, Value};

use super::{
    excerpt, Delta, DeltaSink, Finish, Message, Reply, ToolCall, ToolChoice, Turn, Upstream,
    UpstreamConfig, UpstreamError, Usage,
};

/// The Chat Completions adapter.
pub struct ChatCompletions {
    endpoint: super::Endpoint,
}

impl ChatCompletions {
    pub fn new(config: UpstreamConfig) -> Result<Self, UpstreamError> {
        Ok(Self {
            endpoint: super::Endpoint::new(config)?,
        })
    }
}

/// The request body for a turn.
pub fn request_body(turn: &Turn, stream: bool) -> Value {
    let messages: Vec<Value> = turn
        .messages
        .iter()
        .map(|message| match message {
            Message::System(text) => json!({"role": "system", "content": text}),
            Message::User(text) => json!({"role": "user", "content": text}),
            Message::Assistant { text, tool_calls } => {
                let mut value = json!({
                    "role": "assistant",
                    "content": if text.is_empty() { Value::Null } else { json!(text) },
                });
                if !tool_calls.is_empty() {
                    value["tool_calls"] = tool_calls
                        .iter()
                        .map(|call| {
                            json!({
                                "id": call.id,
                                "type": "function",
                                "function": {"name": call.name, "arguments": call.arguments},
                            })
                        })
                        .collect();
                }
                value
            }
            Message::Tool { call_id, output } => {
                json!({"role": "tool", "tool_call_id": call_id, "content": output})
            }
        })
        .collect();
    let mut body = json!({"model": turn.model, "messages": messages});
    if !turn.tools.is_empty() {
        body["tools"] = turn
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                    },
                })
            })
            .collect();
        body["tool_choice"] = match &turn.tool_choice {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::Required => json!("required"),
            ToolChoice::None => json!("none"),
            ToolChoice::Named(name) => json!({"type": "function", "function": {"name": name}}),
        };
        if let Some(parallel) = turn.parallel_tool_calls {
            body["parallel_tool_calls"] = json!(parallel);
        }
    }
    super::sampling(&mut body, turn);
    if let Some(n) = turn.max_output_tokens {
        body["max_tokens"] = json!(n);
    }
    if stream {
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
    }
    body
}

/// Assembles a reply from chunks (streamed) or one completion.
#[derive(Default)]
struct Assembly {
    text: String,
    /// Tool calls by index: (id, name, arguments).
    calls: BTreeMap<usize, (String, String, String)>,
    usage: Usage,
    finish: Option<Finish>,
}

fn finish_of(reason: &str) -> Finish {
    match reason {
        "length" => Finish::Length,
        "content_filter" => Finish::ContentFilter,
        _ => Finish::Stop,
    }
}

impl Assembly {
    /// Takes one chunk (`delta`) or one choice's `message`; a tool call
    /// whose arguments grow past `max_arguments` bytes is an error.
    fn take(
        &mut self,
        part: &Value,
        deltas: Option<&DeltaSink>,
        max_arguments: usize,
    ) -> Result<(), UpstreamError> {
        if let Some(text) = part.get("content").and_then(Value::as_str) {
            if !text.is_empty() {
                self.text.push_str(text);
                if let Some(sink) = deltas {
                    let _ = sink.send(Delta::Text(text.to_owned()));
                }
            }
        }
        let Some(calls) = part.get("tool_calls").and_then(Value::as_array) else {
            return Ok(());
        };
        for (position, call) in calls.iter().enumerate() {
            let index = call
                .get("index")
                .and_then(Value::as_u64)
                .map(|i| i as usize)
                .unwrap_or(position);
            let function = call.get("function");
            let id = call.get("id").and_then(Value::as_str);
            let name = function.and_then(|f| f.get("name")).and_then(Value::as_str);
            let arguments = function
                .and_then(|f| f.get("arguments"))
                .map(|a| match a {
                    Value::String(s) => s.clone(),
                    // Some servers send arguments as an object.
                    other => other.to_string(),
                })
                .unwrap_or_default();
            let new = !self.calls.contains_key(&index);
            let entry = self
                .calls
                .entry(index)
                .or_insert_with(|| (String::new(), String::new(), String::new()));
            if let Some(id) = id {
                entry.0 = id.to_owned();
            }
            if let Some(name) = name {
                entry.1.push_str(name);
            }
            if let Some(sink) = deltas {
                if new {
                    let _ = sink.send(Delta::ToolCall {
                        index,
                        id: entry.0.clone(),
                        name: entry.1.clone(),
                    });
                }
                if !arguments.is_empty() {
                    let _ = sink.send(Delta::ToolArguments {
                        index,
                        delta: arguments.clone(),
                    });
                }
            }
            entry.2.push_str(&arguments);
            super::check_arguments(&entry.2, max_arguments)?;
        }
        Ok(())
    }

    fn take_usage(&mut self, usage: Option<&Value>) {
        if let Some(usage) = usage.filter(|u| u.is_object()) {
            let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
            self.usage = Usage {
                input_tokens: count("prompt_tokens"),
                output_tokens: count("completion_tokens"),
            };
        }
    }

    fn reply(self) -> Reply {
        let tool_calls = self
            .calls
            .into_values()
            .enumerate()
            .map(|(n, (id, name, arguments))| ToolCall {
                id: if id.is_empty() {
                    format!("call_{n}")
                } else {
                    id
                },
                name,
                arguments: if arguments.trim().is_empty() {
                    "{}".to_owned()
                } else {
                    arguments
                },
            })
            .collect();
        Reply {
            text: self.text,
            tool_calls,
            usage: self.usage,
            finish: self.finish.unwrap_or(Finish::Stop),
        }
    }
}

use super::error_message as error_in;

/// Reads one whole completion (a server that does not stream).
pub fn parse_completion(body: &Value) -> Result<Reply, UpstreamError> {
    if let Some(message) = error_in(body) {
        return Err(UpstreamError::Malformed(excerpt(&message)));
    }
    let choice = body
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or_else(|| UpstreamError::Malformed("no choices in the completion".into()))?;
    let message = choice
        .get("message")
        .ok_or_else(|| UpstreamError::Malformed("a choice without a message".into()))?;
    let mut assembly = Assembly::default();
    // A whole completion's size was bounded as it was read; its tool calls
    // are checked by the caller.
    assembly.take(message, None, usize::MAX)?;
    assembly.finish = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .map(finish_of);
    assembly.take_usage(body.get("usage"));
    Ok(assembly.reply())
}

#[async_trait]
impl Upstream for ChatCompletions {
    async fn complete(
        &self,
        turn: &Turn,
        deltas: Option<&DeltaSink>,
    ) -> Result<Reply, UpstreamError> {
        let body = request_body(turn, true);
        let config = &self.endpoint.config;
        let max_arguments = config.limits.max_tool_call_bytes;
        let mut budget = super::Budget::turn(config);
        let response = super::send(config, &budget, || {
            let request = self
                .endpoint
                .client
                .post(self.endpoint.url("chat/completions"))
                .json(&body);
            match &self.endpoint.config.api_key {
                Some(key) => request.bearer_auth(key),
                None => request,
            }
        })
        .await?;
        if !super::is_event_stream(&response) {
            let reply = parse_completion(&super::json_body(response, &mut budget).await?)?;
            let reply = super::check_reply(reply, max_arguments)?;
            if let Some(sink) = deltas {
                if !reply.text.is_empty() {
                    let _ = sink.send(Delta::Text(reply.text.clone()));
                }
            }
            return Ok(reply);
        }
        let mut assembly = Assembly::default();
        super::read_events_within(response, &mut budget, |event| {
            if let Some(message) = error_in(&event) {
                return Err(UpstreamError::Malformed(excerpt(&message)));
            }
            if let Some(choice) = event.get("choices").and_then(|c| c.get(0)) {
                if let Some(delta) = choice.get("delta") {
                    assembly.take(delta, deltas, max_arguments)?;
                }
                if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                    assembly.finish = Some(finish_of(reason));
                }
            }
            assembly.take_usage(event.get("usage"));
            Ok(true)
        })
        .await?;
        if assembly.finish.is_none() && assembly.text.is_empty() && assembly.calls.is_empty() {
            return Err(UpstreamError::Malformed(
                "the event stream ended without an answer".into(),
            ));
        }
        Ok(assembly.reply())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::ToolSpec;

    fn turn() -> Turn {
        Turn {
            model: "m".into(),
            messages: vec![
                Message::System("be brief".into()),
                Message::User("hi".into()),
                Message::Assistant {
                    text: String::new(),
                    tool_calls: vec![ToolCall {
                        id: "c1".into(),
                        name: "shell".into(),
                        arguments: "{\"commands\":[\"ls\"]}".into(),
                    }],
                },
                Message::Tool {
                    call_id: "c1".into(),
                    output: "a.txt".into(),
                },
            ],
            tools: vec![ToolSpec {
                name: "shell".into(),
                description: "run".into(),
                parameters: json!({"type": "object"}),
            }],
            tool_choice: ToolChoice::Required,
            temperature: Some(0.2),
            top_p: None,
            max_output_tokens: Some(100),
            parallel_tool_calls: None,
        }
    }

    #[test]
    fn a_turn_becomes_chat_messages_and_function_tools() {
        let body = request_body(&turn(), true);
        assert_eq!(body["messages"][0]["role"], "system");
        assert_eq!(body["messages"][2]["content"], Value::Null);
        assert_eq!(
            body["messages"][2]["tool_calls"][0]["function"]["name"],
            "shell"
        );
        assert_eq!(body["messages"][3]["tool_call_id"], "c1");
        assert_eq!(body["tools"][0]["type"], "function");
        assert_eq!(body["tool_choice"], "required");
        assert_eq!(body["max_tokens"], 100);
        assert_eq!(body["stream_options"]["include_usage"], true);
    }

    #[test]
    fn pieces_of_tool_calls_are_assembled_by_index() {
        let mut assembly = Assembly::default();
        for delta in [
            json!({"content": "Let me look."}),
            json!({"tool_calls": [{"index": 0, "id": "c9", "function": {"name": "shell", "arguments": "{\"comm"}}]}),
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "ands\":[\"ls\"]}"}}]}),
            json!({"tool_calls": [{"index": 1, "id": "c10", "function": {"name": "f", "arguments": ""}}]}),
        ] {
            assembly.take(&delta, None, usize::MAX).unwrap();
        }
        let reply = assembly.reply();
        assert_eq!(reply.text, "Let me look.");
        assert_eq!(reply.tool_calls.len(), 2);
        assert_eq!(reply.tool_calls[0].arguments, "{\"commands\":[\"ls\"]}");
        assert_eq!(reply.tool_calls[1].arguments, "{}");
    }

    #[test]
    fn garbage_is_a_clear_error() {
        assert!(matches!(
            parse_completion(&json!({"nothing": 1})),
            Err(UpstreamError::Malformed(_))
        ));
        assert!(matches!(
            parse_completion(&json!({"error": {"message": "model overloaded"}})),
            Err(UpstreamError::Malformed(m)) if m.contains("overloaded")
        ));
    }
}
