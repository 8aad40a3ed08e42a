//! OpenAI's Responses API (`POST {url}/responses`) as an upstream, streamed.
//!
//! The conversation is sent as items (`function_call` / `function_call_output`
//! for tool calls), nothing is stored upstream (`store: false`): shellgate
//! keeps the conversation itself. Text streams out as
//! `response.output_text.delta`; the reply is read from the final
//! `response.completed` object.

use async_trait::async_trait;
use serde_json::{json, Value};

use super::transport::{error_message, excerpt, Auth, Dialect, Endpoint, Route};
use super::{
    Delta, DeltaSink, Finish, Message, Reply, ToolCall, ToolChoice, Turn, Upstream, UpstreamConfig,
    UpstreamError, Usage,
};

pub struct Responses {
    endpoint: Endpoint,
}

impl Responses {
    pub fn new(config: UpstreamConfig) -> Result<Self, UpstreamError> {
        let route = Route {
            path: "responses",
            auth: Auth::Bearer,
            headers: &[],
        };
        Ok(Self {
            endpoint: Endpoint::new(config, route)?,
        })
    }
}

/// The request body for a turn.
pub fn request_body(turn: &Turn, stream: bool) -> Value {
    let mut instructions = Vec::new();
    let mut input = Vec::new();
    for message in &turn.messages {
        match message {
            Message::System(text) => instructions.push(text.clone()),
            Message::User(text) => input.push(json!({"role": "user", "content": text})),
            Message::Assistant { text, tool_calls } => {
                if !text.is_empty() {
                    input.push(json!({"role": "assistant", "content": text}));
                }
                for call in tool_calls {
                    input.push(json!({
                        "type": "function_call",
                        "call_id": call.id,
                        "name": call.name,
                        "arguments": call.arguments,
                    }));
                }
            }
            Message::Tool { call_id, output } => input.push(json!({
                "type": "function_call_output",
                "call_id": call_id,
                "output": output,
            })),
        }
    }
    let mut body = json!({"model": turn.model, "input": input, "store": false});
    if !instructions.is_empty() {
        body["instructions"] = json!(instructions.join("\n\n"));
    }
    if !turn.tools.is_empty() {
        body["tools"] = turn
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "type": "function",
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                })
            })
            .collect();
        body["tool_choice"] = match &turn.tool_choice {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::Required => json!("required"),
            ToolChoice::None => json!("none"),
            ToolChoice::Named(name) => json!({"type": "function", "name": name}),
        };
        if let Some(parallel) = turn.parallel_tool_calls {
            body["parallel_tool_calls"] = json!(parallel);
        }
    }
    if let Some(t) = turn.temperature {
        body["temperature"] = json!(t);
    }
    if let Some(p) = turn.top_p {
        body["top_p"] = json!(p);
    }
    if let Some(n) = turn.max_output_tokens {
        body["max_output_tokens"] = json!(n);
    }
    if stream {
        body["stream"] = json!(true);
    }
    body
}

/// Reads a response object (the whole answer).
pub fn parse_response(response: &Value) -> Result<Reply, UpstreamError> {
    if let Some(message) = error_message(response) {
        return Err(UpstreamError::Malformed(excerpt(&message)));
    }
    let output = response
        .get("output")
        .and_then(Value::as_array)
        .ok_or_else(|| UpstreamError::Malformed("a response without output".into()))?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for item in output {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                for part in item
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if let Some(piece) = part.get("text").and_then(Value::as_str) {
                        text.push_str(piece);
                    }
                }
            }
            Some("function_call") => tool_calls.push(ToolCall {
                id: item
                    .get("call_id")
                    .and_then(Value::as_str)
                    .unwrap_or("call")
                    .to_owned(),
                name: item
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                arguments: item
                    .get("arguments")
                    .and_then(Value::as_str)
                    .unwrap_or("{}")
                    .to_owned(),
            }),
            _ => {}
        }
    }
    let usage = response.get("usage");
    let count = |key: &str| {
        usage
            .and_then(|u| u.get(key))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    let finish = match response
        .get("incomplete_details")
        .and_then(|d| d.get("reason"))
        .and_then(Value::as_str)
    {
        Some("max_output_tokens") => Finish::Length,
        Some("content_filter") => Finish::ContentFilter,
        _ => Finish::Stop,
    };
    Ok(Reply {
        text,
        tool_calls,
        usage: Usage {
            input_tokens: count("input_tokens"),
            output_tokens: count("output_tokens"),
        },
        finish,
    })
}

/// Reads the stream: text as it comes, the reply from the final response.
#[derive(Default)]
struct Stream {
    finished: Option<Value>,
}

impl Dialect for Stream {
    type Body = Value;
    type Event = Value;

    fn whole(body: Value) -> Result<Reply, UpstreamError> {
        parse_response(&body)
    }

    fn event(
        &mut self,
        event: Value,
        deltas: Option<&DeltaSink>,
        _max_arguments: usize,
    ) -> Result<bool, UpstreamError> {
        match event.get("type").and_then(Value::as_str) {
            Some("response.output_text.delta") => {
                if let (Some(sink), Some(delta)) =
                    (deltas, event.get("delta").and_then(Value::as_str))
                {
                    let _ = sink.send(Delta::Text(delta.to_owned()));
                }
            }
            Some("response.completed" | "response.incomplete") => {
                self.finished = event.get("response").cloned();
                return Ok(false);
            }
            Some("response.failed") => {
                let message = event
                    .get("response")
                    .and_then(error_message)
                    .unwrap_or_else(|| "the upstream response failed".into());
                return Err(UpstreamError::Malformed(excerpt(&message)));
            }
            Some("error") => {
                let message = event
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("an error event")
                    .to_owned();
                return Err(UpstreamError::Malformed(excerpt(&message)));
            }
            _ => {}
        }
        Ok(true)
    }

    fn finish(self) -> Result<Reply, UpstreamError> {
        let response = self.finished.ok_or_else(|| {
            UpstreamError::Malformed("the event stream ended without a response".into())
        })?;
        parse_response(&response)
    }
}

#[async_trait]
impl Upstream for Responses {
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
    use crate::upstream::ToolSpec;

    #[test]
    fn a_turn_becomes_items_and_a_reply_is_read_back() {
        let turn = Turn {
            model: "m".into(),
            messages: vec![
                Message::System("sys".into()),
                Message::User("hi".into()),
                Message::Assistant {
                    text: String::new(),
                    tool_calls: vec![ToolCall {
                        id: "c1".into(),
                        name: "shell".into(),
                        arguments: "{}".into(),
                    }],
                },
                Message::Tool {
                    call_id: "c1".into(),
                    output: "ok".into(),
                },
            ],
            tools: vec![ToolSpec {
                name: "shell".into(),
                description: "d".into(),
                parameters: json!({"type": "object"}),
            }],
            tool_choice: ToolChoice::Named("shell".into()),
            temperature: None,
            top_p: None,
            max_output_tokens: None,
            parallel_tool_calls: None,
        };
        let body = request_body(&turn, false);
        assert_eq!(body["instructions"], "sys");
        assert_eq!(body["input"][1]["type"], "function_call");
        assert_eq!(body["input"][2]["type"], "function_call_output");
        assert_eq!(body["tool_choice"]["name"], "shell");
        assert_eq!(body["store"], false);
        let reply = parse_response(&json!({
            "output": [
                {"type": "message", "content": [{"type": "output_text", "text": "hi"}]},
                {"type": "function_call", "call_id": "c2", "name": "shell", "arguments": "{\"commands\":[]}"},
            ],
            "usage": {"input_tokens": 3, "output_tokens": 4},
        }))
        .unwrap();
        assert_eq!(reply.text, "hi");
        assert_eq!(reply.tool_calls[0].id, "c2");
        assert_eq!(reply.usage.output_tokens, 4);
    }
}
