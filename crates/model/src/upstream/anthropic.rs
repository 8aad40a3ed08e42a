//! Anthropic's Messages API (`POST {url}/messages`) as an upstream, streamed.
//!
//! System messages become `system`; tool calls are `tool_use` blocks of the
//! assistant and their results `tool_result` blocks of the next user
//! message; consecutive messages of one role are merged, as the API wants
//! them to alternate. `max_tokens` is required there: 4096 unless the
//! request sets `max_output_tokens`.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Map, Value};
use shellgate_wire::chat::ApiError;
use shellgate_wire::messages::{
    ContentBlock, CreateMessage, CustomTool, Delta as BlockDelta, MessageParam, ParallelUse, Role,
    StopReason, TextBlock, TextOrBlocks, Tool, ToolChoice as MessagesToolChoice, ToolResultBlock,
    ToolUseBlock,
};

use super::transport::{check_arguments, excerpt, Auth, Dialect, Endpoint, Route};
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
fn push(messages: &mut Vec<MessageParam>, role: Role, blocks: Vec<ContentBlock>) {
    if blocks.is_empty() {
        return;
    }
    if let Some(MessageParam {
        role: last_role,
        content: TextOrBlocks::Blocks(content),
    }) = messages.last_mut()
    {
        if *last_role == role {
            content.extend(blocks);
            return;
        }
    }
    messages.push(MessageParam {
        role,
        content: TextOrBlocks::Blocks(blocks),
    });
}

fn text_block(text: &str) -> ContentBlock {
    ContentBlock::Text(TextBlock {
        text: text.to_owned(),
        extra: Map::new(),
    })
}

/// The request body for a turn.
pub fn request_body(turn: &Turn, stream: bool) -> CreateMessage {
    let mut system = Vec::new();
    let mut messages = Vec::new();
    for message in &turn.messages {
        match message {
            Message::System(text) => system.push(text.clone()),
            Message::User(text) => push(&mut messages, Role::User, vec![text_block(text)]),
            Message::Assistant { text, tool_calls } => {
                let mut blocks = Vec::new();
                if !text.is_empty() {
                    blocks.push(text_block(text));
                }
                for call in tool_calls {
                    // Arguments that are no JSON object are sent as none.
                    let input = serde_json::from_str(&call.arguments).unwrap_or_default();
                    blocks.push(ContentBlock::ToolUse(ToolUseBlock {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        input,
                        extra: Map::new(),
                    }));
                }
                push(&mut messages, Role::Assistant, blocks);
            }
            Message::Tool { call_id, output } => push(
                &mut messages,
                Role::User,
                vec![ContentBlock::ToolResult(ToolResultBlock {
                    tool_use_id: call_id.clone(),
                    content: Some(TextOrBlocks::Text(output.clone())),
                    is_error: None,
                    extra: Map::new(),
                })],
            ),
            // Thinking blocks and Anthropic's own items: not yet carried.
            Message::Reasoning(_) | Message::Native(_) => {}
        }
    }
    let (tools, tool_choice) = if turn.tools.is_empty() {
        (None, None)
    } else {
        let tools = turn
            .tools
            .iter()
            .map(|tool| {
                Tool::Custom(CustomTool {
                    kind: None,
                    name: tool.name.clone(),
                    description: Some(tool.description.clone()),
                    input_schema: match &tool.parameters {
                        Value::Object(schema) => schema.clone(),
                        _ => Map::new(),
                    },
                    extra: Map::new(),
                })
            })
            .collect();
        let parallel = ParallelUse {
            disable_parallel_tool_use: (turn.parallel_tool_calls == Some(false)).then_some(true),
        };
        let choice = match &turn.tool_choice {
            ToolChoice::Auto => MessagesToolChoice::Auto(parallel),
            ToolChoice::Required => MessagesToolChoice::Any(parallel),
            ToolChoice::None => MessagesToolChoice::None {},
            ToolChoice::Named(name) => MessagesToolChoice::Tool {
                name: name.clone(),
                parallel,
            },
        };
        (Some(tools), Some(choice))
    };
    CreateMessage {
        model: turn.model.clone(),
        max_tokens: turn.max_output_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        messages,
        system: (!system.is_empty()).then(|| TextOrBlocks::Text(system.join("\n\n"))),
        tools,
        tool_choice,
        stream: stream.then_some(true),
        metadata: None,
        temperature: turn.temperature,
        top_p: turn.top_p,
        top_k: None,
        stop_sequences: None,
        service_tier: None,
        thinking: None,
        session_id: None,
    }
}

fn finish_of(reason: Option<&StopReason>) -> Finish {
    match reason {
        Some(StopReason::MaxTokens) => Finish::Length,
        Some(StopReason::Refusal) => Finish::ContentFilter,
        _ => Finish::Stop,
    }
}

/// Tokens an answer counted (either may be left out).
#[derive(Debug, Default, Deserialize)]
struct Counts {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
}

/// A whole message as an upstream answers it, read for what the reply
/// needs: its blocks (required), why it stopped, its usage; or an error.
#[derive(Debug, Deserialize)]
pub struct Answer {
    #[serde(default)]
    content: Option<Vec<ContentBlock>>,
    #[serde(default)]
    stop_reason: Option<StopReason>,
    #[serde(default)]
    usage: Option<Counts>,
    #[serde(default)]
    error: Option<ApiError>,
}

/// Reads a whole message.
pub fn parse_message(message: Answer) -> Result<Reply, UpstreamError> {
    if let Some(error) = message.error.and_then(|error| error.message()) {
        return Err(UpstreamError::Malformed(excerpt(&error)));
    }
    let content = message
        .content
        .ok_or_else(|| UpstreamError::Malformed("a message without content".into()))?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in content {
        match block {
            ContentBlock::Text(block) => text.push_str(&block.text),
            ContentBlock::ToolUse(call) => tool_calls.push(ToolCall {
                id: call.id,
                name: call.name,
                arguments: Value::Object(call.input).to_string(),
            }),
            _ => {}
        }
    }
    let usage = message.usage.unwrap_or_default();
    Ok(Reply {
        text,
        tool_calls,
        usage: Usage {
            input_tokens: usage.input_tokens.unwrap_or(0),
            output_tokens: usage.output_tokens.unwrap_or(0),
            ..Usage::default()
        },
        finish: finish_of(message.stop_reason.as_ref()),
        ..Default::default()
    })
}

/// The events of the stream the adapter reads (others are skipped).
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    MessageStart {
        #[serde(default)]
        message: Option<Started>,
    },
    ContentBlockStart {
        #[serde(default)]
        index: usize,
        content_block: ContentBlock,
    },
    ContentBlockDelta {
        #[serde(default)]
        index: usize,
        delta: BlockDelta,
    },
    MessageDelta {
        #[serde(default)]
        delta: Option<Stopped>,
        #[serde(default)]
        usage: Option<Counts>,
    },
    MessageStop,
    Error {
        #[serde(default)]
        error: Option<ApiError>,
    },
    #[serde(other)]
    Other,
}

/// `message_start`'s message, for its usage.
#[derive(Debug, Deserialize)]
struct Started {
    #[serde(default)]
    usage: Option<Counts>,
}

/// `message_delta`'s delta, for why the message stopped.
#[derive(Debug, Deserialize)]
struct Stopped {
    #[serde(default)]
    stop_reason: Option<StopReason>,
}

/// Reads the stream: text and tool uses by block index.
#[derive(Default)]
struct Stream {
    text: String,
    /// Tool uses by block index: (id, name, input JSON so far).
    calls: BTreeMap<usize, (String, String, String)>,
    usage: Usage,
    stop: Option<StopReason>,
    ended: bool,
}

impl Dialect for Stream {
    type Body = Answer;
    type Event = Event;

    fn whole(self, body: Answer) -> Result<Reply, UpstreamError> {
        parse_message(body)
    }

    fn event(
        &mut self,
        event: Event,
        deltas: Option<&DeltaSink>,
        max_arguments: usize,
    ) -> Result<bool, UpstreamError> {
        match event {
            Event::MessageStart { message } => {
                self.usage.input_tokens = message
                    .and_then(|m| m.usage)
                    .and_then(|u| u.input_tokens)
                    .unwrap_or(0);
            }
            Event::ContentBlockStart {
                index,
                content_block: ContentBlock::ToolUse(call),
            } => {
                if let Some(sink) = deltas {
                    let _ = sink.send(Delta::ToolCall {
                        index,
                        id: call.id.clone(),
                        name: call.name.clone(),
                    });
                }
                self.calls
                    .insert(index, (call.id, call.name, String::new()));
            }
            Event::ContentBlockDelta { index, delta } => match delta {
                BlockDelta::TextDelta { text } => {
                    self.text.push_str(&text);
                    if let Some(sink) = deltas {
                        let _ = sink.send(Delta::Text(text));
                    }
                }
                BlockDelta::InputJsonDelta { partial_json } => {
                    if let Some(call) = self.calls.get_mut(&index) {
                        call.2.push_str(&partial_json);
                        check_arguments(&call.2, max_arguments)?;
                    }
                    if let Some(sink) = deltas {
                        let _ = sink.send(Delta::ToolArguments {
                            index,
                            delta: partial_json,
                        });
                    }
                }
                _ => {}
            },
            Event::MessageDelta { delta, usage } => {
                self.stop = delta.and_then(|d| d.stop_reason);
                if let Some(n) = usage.and_then(|u| u.output_tokens) {
                    self.usage.output_tokens = n;
                }
            }
            Event::MessageStop => {
                self.ended = true;
                return Ok(false);
            }
            Event::Error { error } => {
                let message = error
                    .and_then(|e| e.message())
                    .unwrap_or_else(|| "an error event".into());
                return Err(UpstreamError::Malformed(excerpt(&message)));
            }
            Event::ContentBlockStart { .. } | Event::Other => {}
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
            finish: finish_of(self.stop.as_ref()),
            ..Default::default()
        })
    }
}

#[async_trait]
impl Upstream for Anthropic {
    fn protocol(&self) -> Option<super::Protocol> {
        Some(super::Protocol::Anthropic)
    }

    fn uncarried(&self, carry: &super::Carry) -> Vec<String> {
        uncarried(carry)
    }

    async fn complete(
        &self,
        turn: &Turn,
        deltas: Option<&DeltaSink>,
    ) -> Result<Reply, UpstreamError> {
        // Freeform tools are functions of one string here.
        let body = request_body(&super::freeform::as_functions(turn), true);
        let mut reply = self
            .endpoint
            .complete(&body, Stream::default(), deltas)
            .await?;
        super::freeform::unwrap_calls(&mut reply, &turn.tools);
        Ok(reply)
    }

    // The model list and the start-up summary (issue 18's `chat` branch).
    fn url(&self) -> Option<&str> {
        Some(&self.endpoint.config.url)
    }

    async fn models(&self) -> Option<Result<Vec<super::UpstreamModel>, UpstreamError>> {
        Some(self.endpoint.models().await)
    }
}

/// What of a turn's [`super::Carry`] this protocol cannot send, named as
/// the client wrote it: the hosted tools (and a tool choice of one) of
/// another protocol.
pub fn uncarried(carry: &super::Carry) -> Vec<String> {
    carry.native_uncarried(super::Protocol::Anthropic)
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
            ..Default::default()
        };
        let body = serde_json::to_value(request_body(&turn, false)).unwrap();
        assert_eq!(body["system"], "sys");
        assert_eq!(body["max_tokens"], 4096);
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[1]["content"][1]["input"]["commands"][0], "ls");
        assert_eq!(messages[2]["content"].as_array().unwrap().len(), 2);
        let reply = parse_message(serde_json::from_value(serde_json::json!({
            "content": [{"type": "text", "text": "x"}, {"type": "tool_use", "id": "t3", "name": "shell", "input": {"commands": ["pwd"]}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 1, "output_tokens": 2},
        })).unwrap())
        .unwrap();
        assert_eq!(reply.tool_calls[0].arguments, "{\"commands\":[\"pwd\"]}");
    }
}
