//! Anthropic's Messages API (`POST {url}/messages`) as an upstream, streamed.
//!
//! System messages become `system`; tool calls are `tool_use` blocks of the
//! assistant and their results `tool_result` blocks of the next user
//! message; consecutive messages of one role are merged, as the API wants
//! them to alternate. `max_tokens` is required there: 4096 unless the
//! request sets `max_output_tokens`. Reasoning an Anthropic model gave
//! goes back as the `thinking` / `redacted_thinking` block it was, in its
//! assistant message, where the API checks its signature; reasoning of
//! another protocol is left out (no signature to check).
//!
//! Pass-through ([`Carry`]): a Messages client's own fields
//! (`carry.anthropic`: `thinking`, `context_management`, `output_config`,
//! `container`, `mcp_servers`, `metadata`, `top_k`, `stop_sequences`,
//! `service_tier`...) are sent as the client wrote them, with its
//! `anthropic-beta` header, its server tools (`carry.native_tools`) and its
//! own keys on its tools (`carry.anthropic_tool_extras`: `strict`,
//! `defer_loading`...); shellgate's own fields win where they collide
//! ([`OWN`]: the model, conversation, tools and stream are the loop's). For a client of another protocol the neutral fields are mapped:
//! a reasoning effort becomes a thinking budget ([`budget_for`]), a JSON
//! schema `output_config.format`, `stop` `stop_sequences`, and
//! `safety_identifier` `metadata.user_id`; what has no place here is named
//! by [`Upstream::uncarried`]. What the model returns beside text and
//! calls (server tools' blocks: `server_tool_use`, `web_search_tool_result`,
//! ...) is kept whole in `Reply.native`.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Map, Value};
use shellgate_wire::chat::ApiError;
use shellgate_wire::messages::{
    ContentBlock, CreateMessage, CustomTool, Delta as BlockDelta, MessageParam, Metadata,
    OutputConfig, OutputFormat as MessagesOutputFormat, ParallelUse, RedactedThinkingBlock, Role,
    StopReason, TextBlock, TextOrBlocks, ThinkingBlock, ThinkingConfig, TokenCount, Tool,
    ToolChoice as MessagesToolChoice, ToolResultBlock, ToolUseBlock,
};

use super::transport::{check_arguments, excerpt, Auth, Dialect, Endpoint, Route};
use super::{
    Carry, Delta, DeltaSink, Finish, Message, NativeItem, OutputFormat, Protocol, Reasoning, Reply,
    Sealed, ToolCall, ToolChoice, Turn, Upstream, UpstreamConfig, UpstreamError, Usage,
};

/// The API version this adapter speaks.
const VERSION: &str = "2023-06-01";
/// `max_tokens` when the request gives none.
const DEFAULT_MAX_TOKENS: u32 = 4096;
/// The smallest thinking budget the API takes.
const MIN_BUDGET: u32 = 1024;

/// A Messages request's fields shellgate sets itself: a client's value of
/// one of these in `carry.anthropic` is not sent over the loop's.
pub const OWN: &[&str] = &[
    "model",
    "messages",
    "system",
    "tools",
    "tool_choice",
    "stream",
    "max_tokens",
    "temperature",
    "top_p",
    // OpenRouter's, read by shellgate: the upstream has no such field.
    "session_id",
];

/// Fields of a Messages request `messages/count_tokens` takes too (the
/// SDK's `MessageCountTokensParams`, the beta's included).
/// The typed ones here; the carried ones are the wire's
/// [`shellgate_wire::messages::COUNT_CARRIED`].
const COUNTED: &[&str] = &[
    "model",
    "messages",
    "system",
    "tools",
    "tool_choice",
    "thinking",
    "output_config",
];

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

/// The client's `anthropic-beta` values, as one header.
fn beta_headers(carry: &Carry) -> Vec<(&'static str, String)> {
    if carry.anthropic_beta.is_empty() {
        Vec::new()
    } else {
        vec![("anthropic-beta", carry.anthropic_beta.join(","))]
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

/// The block an Anthropic model's reasoning was (`None`: another
/// protocol's, which this API cannot verify).
fn thinking_block(reasoning: &Reasoning) -> Option<ContentBlock> {
    match &reasoning.sealed {
        Some(Sealed::AnthropicSignature(signature)) => {
            Some(ContentBlock::Thinking(ThinkingBlock {
                thinking: reasoning.text.clone(),
                signature: Some(signature.clone()),
                extra: Map::new(),
            }))
        }
        Some(Sealed::AnthropicRedacted(data)) => {
            Some(ContentBlock::RedactedThinking(RedactedThinkingBlock {
                data: data.clone(),
                extra: Map::new(),
            }))
        }
        Some(Sealed::OpenAi(_)) | None => None,
    }
}

/// The thinking budget for a reasoning effort: low 1024, medium 4096,
/// high 16384, above that 32768 tokens; always below `max_tokens` (the
/// budget is part of it), and no thinking when that leaves less than the
/// API's least budget or the effort asks for none.
pub fn budget_for(effort: &str, max_tokens: u32) -> Option<u32> {
    let wanted = match effort {
        "none" | "minimal" => return None,
        "low" => 1024,
        "medium" => 4096,
        "high" => 16_384,
        // `xhigh`, `max` and whatever comes above.
        _ => 32_768,
    };
    let budget = wanted.min(max_tokens.saturating_sub(1));
    (budget >= MIN_BUDGET).then_some(budget)
}

/// The reasoning effort a thinking budget stands for, for an upstream of
/// another protocol ([`budget_for`] the other way): below 4096 tokens
/// `low`, below 16384 `medium`, else `high`.
pub fn effort_for_budget(budget_tokens: u64) -> &'static str {
    match budget_tokens {
        0..=4095 => "low",
        4096..=16_383 => "medium",
        _ => "high",
    }
}

/// `thinking` for a client of another protocol: its budget, or its effort
/// as one. None on a turn the API refuses thinking for: one that forces a
/// tool call, or samples at a temperature other than 1 (or with `top_k`).
fn thinking_of(turn: &Turn, max_tokens: u32) -> Option<ThinkingConfig> {
    let carry = &turn.carry;
    let forced = matches!(
        turn.tool_choice,
        ToolChoice::Required | ToolChoice::Named(_)
    );
    let sampled = turn.temperature.is_some_and(|t| t != 1.0) || carry.top_k.is_some();
    if forced || sampled {
        return None;
    }
    let reasoning = carry.reasoning.as_ref()?;
    let budget = match (reasoning.budget_tokens, reasoning.effort.as_deref()) {
        (Some(budget), _) => u32::try_from(budget)
            .ok()
            .map(|budget| budget.min(max_tokens.saturating_sub(1)))
            .filter(|budget| *budget >= MIN_BUDGET),
        (None, Some(effort)) => budget_for(effort, max_tokens),
        (None, None) => None,
    }?;
    Some(ThinkingConfig::Enabled {
        budget_tokens: budget,
        extra: Map::new(),
    })
}

/// `output_config` for a client of another protocol's JSON schema.
fn output_config_of(carry: &Carry) -> Option<OutputConfig> {
    match &carry.output_format {
        Some(OutputFormat::JsonSchema {
            schema: Value::Object(schema),
            ..
        }) => Some(OutputConfig {
            effort: None,
            format: Some(MessagesOutputFormat::JsonSchema {
                schema: schema.clone(),
                extra: Map::new(),
            }),
            extra: Map::new(),
        }),
        _ => None,
    }
}

/// The request body for a turn: the loop's conversation and tools, the
/// neutral fields mapped, then the Messages client's own fields over them.
pub fn request_body(turn: &Turn, stream: bool) -> Result<CreateMessage, UpstreamError> {
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
                        caller: None,
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
            // In the assistant message it belongs to, before the text and
            // calls that follow it (merged into it by `push`).
            Message::Reasoning(reasoning) => {
                push(
                    &mut messages,
                    Role::Assistant,
                    thinking_block(reasoning).into_iter().collect(),
                );
            }
            // A server tool's blocks the model gave (`server_tool_use`,
            // `web_search_tool_result`...), in the assistant message.
            Message::Native(NativeItem {
                protocol: Protocol::Anthropic,
                item,
            }) => {
                if let Ok(block) = ContentBlock::deserialize(item) {
                    push(&mut messages, Role::Assistant, vec![block]);
                }
            }
            Message::Native(_) => {}
        }
    }
    // The client's server tools (`web_search_20250305`...), as it wrote them.
    let native_tools = turn.carry.native_tools.iter().filter_map(|tool| {
        (tool.protocol == Protocol::Anthropic)
            .then(|| Tool::deserialize(&tool.item).ok())
            .flatten()
    });
    let (tools, tool_choice) = if turn.tools.is_empty() && turn.carry.native_tools.is_empty() {
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
                    // Code calling the client's tools runs here, not
                    // upstream: the model calls each tool directly.
                    allowed_callers: None,
                    extra: tool_extras(&turn.carry, &tool.name),
                })
            })
            .chain(native_tools)
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
    let carry = &turn.carry;
    let max_tokens = turn.max_output_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    // A Responses client's end-user id is Anthropic's `metadata.user_id`.
    let user_id = ResponsesFields::of(carry).safety_identifier;
    let mapped = CreateMessage {
        model: turn.model.clone(),
        max_tokens,
        messages,
        system: (!system.is_empty()).then(|| TextOrBlocks::Text(system.join("\n\n"))),
        tools,
        tool_choice,
        stream: stream.then_some(true),
        metadata: user_id.map(|user_id| Metadata {
            user_id: Some(user_id),
            extra: Map::new(),
        }),
        temperature: turn.temperature,
        top_p: turn.top_p,
        top_k: carry.top_k,
        stop_sequences: (!carry.stop.is_empty()).then(|| carry.stop.clone()),
        service_tier: None,
        thinking: thinking_of(turn, max_tokens),
        output_config: output_config_of(carry),
        session_id: None,
        carried: Map::new(),
    };
    if carry.anthropic.is_empty() {
        return Ok(mapped);
    }
    // The client's own fields over the mapped ones (shellgate's win), read
    // back as the request they make: a field the server let through is
    // one the request type reads.
    let Value::Object(mut body) = serde_json::to_value(&mapped)
        .map_err(|e| UpstreamError::Malformed(format!("the request: {e}")))?
    else {
        return Err(UpstreamError::Malformed(
            "the request is not an object".into(),
        ));
    };
    for (key, value) in &carry.anthropic {
        if !OWN.contains(&key.as_str()) {
            body.insert(key.clone(), value.clone());
        }
    }
    serde_json::from_value(Value::Object(body))
        .map_err(|e| UpstreamError::Malformed(format!("the request: {e}")))
}

/// The carried Responses fields this adapter reads (each left out when
/// it is not of its type: it is then named as uncarried).
#[derive(Debug, Default, Deserialize)]
struct ResponsesFields {
    #[serde(default)]
    safety_identifier: Option<String>,
    #[serde(default)]
    include: Option<Vec<String>>,
    /// `text`'s keys (`format`, `verbosity`...).
    #[serde(default)]
    text: Option<Map<String, Value>>,
}

impl ResponsesFields {
    fn of(carry: &Carry) -> Self {
        serde_json::from_value(Value::Object(carry.responses.clone())).unwrap_or_default()
    }
}

/// A client tool's own keys: a Messages client's as it wrote them, with
/// a Responses client's `strict`.
fn tool_extras(carry: &Carry, name: &str) -> Map<String, Value> {
    let mut extras = carry
        .anthropic_tool_extras
        .get(name)
        .cloned()
        .unwrap_or_default();
    if let Some(strict) = carry.tool_strict.get(name) {
        extras.entry("strict").or_insert(Value::Bool(*strict));
    }
    extras
}

/// What of `carry` this adapter has no place for, as the client named it.
pub fn uncarried_fields(carry: &Carry) -> Vec<String> {
    let mut names = Vec::new();
    let fields = ResponsesFields::of(carry);
    for key in carry.responses.keys() {
        match key.as_str() {
            // Mapped: a thinking budget, `metadata.user_id`.
            "reasoning" | "safety_identifier" => {}
            // The answer's format: a JSON schema is `output_config.format`.
            "text" => {
                let schema = matches!(carry.output_format, Some(OutputFormat::JsonSchema { .. }));
                for part in fields.text.iter().flat_map(|text| text.keys()) {
                    if part != "format" || !schema {
                        names.push(format!("text.{part}"));
                    }
                }
            }
            // Anthropic returns every thinking block's signature anyway.
            "include" => {
                let all_reasoning = fields.include.as_ref().is_some_and(|include| {
                    include.iter().all(|v| v == "reasoning.encrypted_content")
                });
                if !all_reasoning {
                    names.push(key.clone());
                }
            }
            _ => names.push(key.clone()),
        }
    }
    // Any JSON object (a Chat client's `response_format`): no such format
    // here (a Responses client's is named by `text.format` above).
    if carry.output_format == Some(OutputFormat::JsonObject)
        && !carry.responses.contains_key("text")
    {
        names.push("response_format".into());
    }
    names
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

/// What a block the loop does not read itself is: reasoning, or a block
/// kept whole for the client and the next turn.
enum Beside {
    Reasoning(Reasoning),
    Native(NativeItem),
}

/// A block of the answer other than text and `tool_use` (`None`: nothing
/// to keep, e.g. an empty block).
fn beside(block: ContentBlock) -> Option<Beside> {
    match block {
        ContentBlock::Thinking(thinking) => Some(Beside::Reasoning(Reasoning {
            id: None,
            summary: Vec::new(),
            text: thinking.thinking,
            sealed: thinking.signature.map(Sealed::AnthropicSignature),
        })),
        ContentBlock::RedactedThinking(redacted) => Some(Beside::Reasoning(Reasoning {
            id: None,
            summary: Vec::new(),
            text: String::new(),
            sealed: Some(Sealed::AnthropicRedacted(redacted.data)),
        })),
        ContentBlock::Text(_) | ContentBlock::ToolUse(_) => None,
        other => serde_json::to_value(other).ok().map(|item| {
            Beside::Native(NativeItem {
                protocol: Protocol::Anthropic,
                item,
            })
        }),
    }
}

/// Reads a whole message.
pub fn parse_message(message: Answer) -> Result<Reply, UpstreamError> {
    if let Some(error) = message.error.and_then(|error| error.message()) {
        return Err(UpstreamError::Malformed(excerpt(&error)));
    }
    let content = message
        .content
        .ok_or_else(|| UpstreamError::Malformed("a message without content".into()))?;
    let mut reply = Reply::default();
    for block in content {
        match block {
            ContentBlock::Text(block) => reply.text.push_str(&block.text),
            ContentBlock::ToolUse(call) => reply.tool_calls.push(ToolCall {
                id: call.id,
                name: call.name,
                arguments: Value::Object(call.input).to_string(),
            }),
            other => match beside(other) {
                Some(Beside::Reasoning(reasoning)) => reply.reasoning.push(reasoning),
                Some(Beside::Native(native)) => reply.native.push(native),
                None => {}
            },
        }
    }
    let usage = message.usage.unwrap_or_default();
    reply.usage = Usage {
        input_tokens: usage.input_tokens.unwrap_or(0),
        output_tokens: usage.output_tokens.unwrap_or(0),
        ..Usage::default()
    };
    reply.finish = finish_of(message.stop_reason.as_ref());
    Ok(reply)
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

/// Reads the stream: text and tool uses by block index, and the blocks
/// beside them.
#[derive(Default)]
struct Stream {
    text: String,
    /// Tool uses by block index: (id, name, input JSON so far).
    calls: BTreeMap<usize, (String, String, String)>,
    /// Other blocks by index, as they started, with what their deltas add.
    others: BTreeMap<usize, Streamed>,
    usage: Usage,
    stop: Option<StopReason>,
    ended: bool,
}

/// A block other than text and `tool_use`, as it streams: a thinking
/// block grows by `thinking_delta` and gets its `signature_delta`; a
/// server tool's call grows by `input_json_delta`.
struct Streamed {
    block: ContentBlock,
    input: String,
}

impl Streamed {
    fn add(&mut self, delta: BlockDelta) {
        match (&mut self.block, delta) {
            (ContentBlock::Thinking(block), BlockDelta::ThinkingDelta { thinking }) => {
                block.thinking.push_str(&thinking)
            }
            (ContentBlock::Thinking(block), BlockDelta::SignatureDelta { signature }) => block
                .signature
                .get_or_insert_with(String::new)
                .push_str(&signature),
            (_, BlockDelta::InputJsonDelta { partial_json }) => self.input.push_str(&partial_json),
            _ => {}
        }
    }

    /// The whole block.
    fn done(mut self) -> ContentBlock {
        if let (ContentBlock::ServerToolUse(call), false) =
            (&mut self.block, self.input.trim().is_empty())
        {
            if let Ok(input) = serde_json::from_str(&self.input) {
                call.input = input;
            }
        }
        self.block
    }
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
            Event::ContentBlockStart {
                content_block: ContentBlock::Text(block),
                ..
            } => {
                // Text comes by its deltas (a start's text is empty, but
                // would count).
                if !block.text.is_empty() {
                    if let Some(sink) = deltas {
                        let _ = sink.send(Delta::Text(block.text.clone()));
                    }
                    self.text.push_str(&block.text);
                }
            }
            Event::ContentBlockStart {
                index,
                content_block,
            } => {
                self.others.insert(
                    index,
                    Streamed {
                        block: content_block,
                        input: String::new(),
                    },
                );
            }
            Event::ContentBlockDelta { index, delta } if self.others.contains_key(&index) => {
                if let BlockDelta::InputJsonDelta { partial_json } = &delta {
                    check_arguments(partial_json, max_arguments)?;
                }
                if let Some(block) = self.others.get_mut(&index) {
                    block.add(delta);
                }
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
            Event::Other => {}
        }
        Ok(true)
    }

    fn finish(self) -> Result<Reply, UpstreamError> {
        if !self.ended && self.text.is_empty() && self.calls.is_empty() {
            return Err(UpstreamError::Malformed(
                "the event stream ended without a message".into(),
            ));
        }
        let (mut reasoning, mut native) = (Vec::new(), Vec::new());
        for streamed in self.others.into_values() {
            match beside(streamed.done()) {
                Some(Beside::Reasoning(r)) => reasoning.push(r),
                Some(Beside::Native(n)) => native.push(n),
                None => {}
            }
        }
        Ok(Reply {
            reasoning,
            native,
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
        let body = request_body(&super::freeform::as_functions(turn), true)?;
        let mut reply = self
            .endpoint
            .complete_with(&body, &beta_headers(&turn.carry), Stream::default(), deltas)
            .await?;
        super::freeform::unwrap_calls(&mut reply, &turn.tools);
        Ok(reply)
    }

    /// Anthropic's own count (`POST {url}/messages/count_tokens`) of the
    /// turn's request, without what only generating takes.
    async fn count_tokens(&self, turn: &Turn) -> Result<Option<u64>, UpstreamError> {
        let body = count_body(&super::freeform::as_functions(turn))?;
        let count: TokenCount = self
            .endpoint
            .post_json("messages/count_tokens", &body, &beta_headers(&turn.carry))
            .await?;
        Ok(Some(count.input_tokens))
    }

    // The model list and the start-up summary.
    fn url(&self) -> Option<&str> {
        Some(&self.endpoint.config.url)
    }

    async fn models(&self) -> Option<Result<Vec<super::UpstreamModel>, UpstreamError>> {
        Some(self.endpoint.models().await)
    }
}

/// The body of `messages/count_tokens` for a turn: its request's fields
/// that endpoint takes ([`COUNTED`]).
pub fn count_body(turn: &Turn) -> Result<Map<String, Value>, UpstreamError> {
    match serde_json::to_value(request_body(turn, false)?) {
        Ok(Value::Object(mut body)) => {
            body.retain(|key, _| {
                COUNTED.contains(&key.as_str())
                    || shellgate_wire::messages::COUNT_CARRIED.contains(&key.as_str())
            });
            Ok(body)
        }
        _ => Err(UpstreamError::Malformed(
            "the request is not an object".into(),
        )),
    }
}

/// What of a turn's [`super::Carry`] this protocol cannot send, named as
/// the client wrote it: the hosted tools (and a tool choice of one) of
/// another protocol, and the fields it has no place for.
pub fn uncarried(carry: &super::Carry) -> Vec<String> {
    let mut names = carry.native_uncarried(super::Protocol::Anthropic);
    names.extend(uncarried_fields(carry));
    names
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
        let body = serde_json::to_value(request_body(&turn, false).unwrap()).unwrap();
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

    fn turn_with(carry: Carry, messages: Vec<Message>) -> Turn {
        Turn {
            model: "claude".into(),
            messages,
            max_output_tokens: Some(8000),
            carry,
            ..Default::default()
        }
    }

    #[test]
    fn a_messages_clients_fields_go_as_sent_and_thinking_goes_back_in_place() {
        let carry = Carry {
            anthropic: serde_json::from_value(serde_json::json!({
                "thinking": {"type": "enabled", "budget_tokens": 2048, "display": "omitted"},
                "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
                "output_config": {"effort": "high"},
                "mcp_servers": [{"type": "url", "url": "https://mcp.example", "name": "m"}],
                "top_k": 5,
                // shellgate's own: the loop's wins.
                "model": "other",
                "max_tokens": 1,
            }))
            .unwrap(),
            anthropic_beta: vec!["context-management-2025-06-27".into(), "b2".into()],
            ..Default::default()
        };
        let messages = vec![
            Message::User("go".into()),
            Message::Reasoning(Reasoning {
                text: "hmm".into(),
                sealed: Some(Sealed::AnthropicSignature("sig".into())),
                ..Default::default()
            }),
            Message::Reasoning(Reasoning {
                sealed: Some(Sealed::AnthropicRedacted("data".into())),
                ..Default::default()
            }),
            // Another protocol's: no signature this API could check.
            Message::Reasoning(Reasoning {
                text: "openai".into(),
                sealed: Some(Sealed::OpenAi("gAAA".into())),
                ..Default::default()
            }),
            Message::Assistant {
                text: String::new(),
                tool_calls: vec![ToolCall {
                    id: "t1".into(),
                    name: "Bash".into(),
                    arguments: "{}".into(),
                }],
            },
            Message::Tool {
                call_id: "t1".into(),
                output: "ok".into(),
            },
        ];
        let turn = turn_with(carry.clone(), messages);
        let body = serde_json::to_value(request_body(&turn, true).unwrap()).unwrap();
        assert_eq!(body["model"], "claude");
        assert_eq!(body["max_tokens"], 8000);
        assert_eq!(body["thinking"]["display"], "omitted");
        assert_eq!(
            body["context_management"],
            turn.carry.anthropic["context_management"]
        );
        assert_eq!(body["mcp_servers"][0]["name"], "m");
        assert_eq!(body["output_config"], serde_json::json!({"effort": "high"}));
        assert_eq!(body["top_k"], 5);
        let assistant = &body["messages"][1]["content"];
        assert_eq!(
            assistant,
            &serde_json::json!([
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "redacted_thinking", "data": "data"},
                {"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}
            ])
        );
        assert_eq!(
            beta_headers(&carry),
            [(
                "anthropic-beta",
                "context-management-2025-06-27,b2".to_owned()
            )]
        );
        // The count leaves out what only generating takes.
        let count = count_body(&turn).unwrap();
        assert!(count.contains_key("context_management") && count.contains_key("thinking"));
        assert!(!count.contains_key("max_tokens") && !count.contains_key("stream"));
        assert!(!count.contains_key("top_k"));
        assert!(uncarried_fields(&carry).is_empty());
        // A client tool's own keys go on it.
        let mut tooled = turn_with(
            Carry {
                anthropic_tool_extras: [(
                    "Bash".to_owned(),
                    serde_json::from_value(serde_json::json!({"strict": true})).unwrap(),
                )]
                .into(),
                ..Default::default()
            },
            vec![Message::User("q".into())],
        );
        tooled.tools = vec![super::super::ToolSpec {
            name: "Bash".into(),
            ..Default::default()
        }];
        let body = serde_json::to_value(request_body(&tooled, false).unwrap()).unwrap();
        assert_eq!(body["tools"][0]["strict"], true);
        // A Responses client's `strict` too, where the Messages client's own
        // keys do not say it.
        tooled.carry.tool_strict = [("Bash".to_owned(), false), ("Read".to_owned(), true)].into();
        tooled.tools.push(super::super::ToolSpec {
            name: "Read".into(),
            ..Default::default()
        });
        let body = serde_json::to_value(request_body(&tooled, false).unwrap()).unwrap();
        assert_eq!(body["tools"][0]["strict"], true);
        assert_eq!(body["tools"][1]["strict"], true);
        // The client's server tools, and their blocks replayed, go as given.
        let carry = Carry {
            native_tools: vec![NativeItem {
                protocol: Protocol::Anthropic,
                item: serde_json::json!({"type": "web_search_20250305", "name": "web_search"}),
            }],
            ..Default::default()
        };
        let block = serde_json::json!({"type": "web_search_tool_result", "tool_use_id": "s", "content": []});
        let messages = vec![
            Message::User("q".into()),
            Message::Native(NativeItem {
                protocol: Protocol::Anthropic,
                item: block.clone(),
            }),
            Message::Native(NativeItem {
                protocol: Protocol::Responses,
                item: serde_json::json!({"type": "web_search_call"}),
            }),
        ];
        let body = serde_json::to_value(request_body(&turn_with(carry, messages), false).unwrap())
            .unwrap();
        assert_eq!(
            body["tools"],
            serde_json::json!([{"type": "web_search_20250305", "name": "web_search"}])
        );
        assert_eq!(body["messages"][1]["content"], serde_json::json!([block]));
        assert_eq!(body["messages"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn another_protocols_client_is_mapped_and_the_rest_named() {
        let carry = Carry {
            reasoning: Some(super::super::ReasoningRequest {
                effort: Some("high".into()),
                ..Default::default()
            }),
            output_format: Some(OutputFormat::JsonSchema {
                name: "x".into(),
                description: None,
                schema: serde_json::json!({"type": "object"}),
                strict: Some(true),
            }),
            stop: vec!["END".into()],
            responses: serde_json::from_value(serde_json::json!({
                "reasoning": {"effort": "high"},
                "text": {"format": {"type": "json_schema"}, "verbosity": "low"},
                "include": ["reasoning.encrypted_content"],
                "prompt_cache_key": "k",
                "safety_identifier": "user-1",
            }))
            .unwrap(),
            ..Default::default()
        };
        let body = serde_json::to_value(
            request_body(
                &turn_with(carry.clone(), vec![Message::User("q".into())]),
                false,
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            body["thinking"],
            serde_json::json!({"type": "enabled", "budget_tokens": 7999})
        );
        assert_eq!(
            body["output_config"],
            serde_json::json!({"format": {"type": "json_schema", "schema": {"type": "object"}}})
        );
        assert_eq!(body["stop_sequences"], serde_json::json!(["END"]));
        assert_eq!(body["metadata"]["user_id"], "user-1");
        assert!(body.get("prompt_cache_key").is_none());
        assert_eq!(
            uncarried_fields(&carry),
            ["prompt_cache_key", "text.verbosity"]
        );
        // No thinking where the API refuses it: a forced call.
        let mut forced = turn_with(carry.clone(), vec![Message::User("q".into())]);
        forced.tool_choice = ToolChoice::Required;
        assert!(request_body(&forced, false).unwrap().thinking.is_none());
        assert_eq!(budget_for("low", 8000), Some(1024));
        assert_eq!(budget_for("medium", 2000), Some(1999));
        assert_eq!(budget_for("high", 1024), None);
        assert_eq!(budget_for("minimal", 64_000), None);
        assert_eq!(effort_for_budget(31_999), "high");
        assert_eq!(effort_for_budget(1024), "low");
    }

    #[test]
    fn thinking_and_server_tool_blocks_are_read_from_the_stream_and_whole() {
        let events = serde_json::json!([
            {"type": "message_start", "message": {"usage": {"input_tokens": 3}}},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Let me "}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "see."}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "EqQB"}},
            {"type": "content_block_stop", "index": 0},
            {"type": "content_block_start", "index": 1, "content_block": {"type": "redacted_thinking", "data": "red"}},
            {"type": "content_block_start", "index": 2, "content_block": {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {}}},
            {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"query\": \"x\"}"}},
            {"type": "content_block_start", "index": 3, "content_block": {"type": "web_search_tool_result", "tool_use_id": "srv_1", "content": []}},
            {"type": "content_block_start", "index": 4, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 4, "delta": {"type": "text_delta", "text": "Found."}},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}},
            {"type": "message_stop"}
        ]);
        let mut stream = Stream::default();
        for event in events.as_array().unwrap() {
            let event: Event = serde_json::from_value(event.clone()).unwrap();
            stream.event(event, None, 1 << 20).unwrap();
        }
        let reply = stream.finish().unwrap();
        assert_eq!(reply.text, "Found.");
        assert_eq!(
            reply.reasoning,
            [
                Reasoning {
                    text: "Let me see.".into(),
                    sealed: Some(Sealed::AnthropicSignature("EqQB".into())),
                    ..Default::default()
                },
                Reasoning {
                    sealed: Some(Sealed::AnthropicRedacted("red".into())),
                    ..Default::default()
                }
            ]
        );
        let native: Vec<&Value> = reply.native.iter().map(|n| &n.item).collect();
        assert_eq!(native[0]["input"], serde_json::json!({"query": "x"}));
        assert_eq!(native[1]["type"], "web_search_tool_result");
        assert!(reply
            .native
            .iter()
            .all(|n| n.protocol == Protocol::Anthropic));
        let whole = parse_message(
            serde_json::from_value(serde_json::json!({
                "content": [{"type": "thinking", "thinking": "t", "signature": "s"},
                            {"type": "text", "text": "x"}],
                "stop_reason": "end_turn",
            }))
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            whole.reasoning[0].sealed,
            Some(Sealed::AnthropicSignature("s".into()))
        );
    }
}
