//! OpenAI Chat Completions (`POST {url}/chat/completions`), streamed.
//!
//! The lowest common denominator of model servers: vLLM, Ollama,
//! llama.cpp's server, LiteLLM and OpenRouter all speak it. Tool calls come
//! as `function` tool calls; their arguments may arrive in any number of
//! pieces, assembled by index. A server that answers with one JSON body
//! instead of an event stream is understood too.

use std::collections::BTreeMap;

use async_trait::async_trait;
use shellgate_wire::chat::served::{JsonSchemaFormat, ResponseFormat};
use shellgate_wire::chat::{
    ChatChunk, ChatCompletion, ChatMessage, ChatRequest, ChatTool, ChatToolCall, ChatToolChoice,
    ChatUsage, ChoiceMessage, FunctionCall, FunctionDefinition, FunctionKind, FunctionName,
    NamedToolChoice, StreamOptions, ToolChoiceMode,
};

use super::transport::{check_arguments, excerpt, Auth, Dialect, Endpoint, Route};
use super::{
    Carry, Delta, DeltaSink, Finish, Message, OutputFormat, Reply, ToolCall, ToolChoice, Turn,
    Upstream, UpstreamConfig, UpstreamError, Usage,
};

/// The Chat Completions adapter.
pub struct ChatCompletions {
    endpoint: Endpoint,
}

impl ChatCompletions {
    pub fn new(config: UpstreamConfig) -> Result<Self, UpstreamError> {
        let route = Route {
            path: "chat/completions",
            auth: Auth::Bearer,
            headers: &[],
        };
        Ok(Self {
            endpoint: Endpoint::new(config, route)?,
        })
    }
}

/// The request body for a turn.
pub fn request_body(turn: &Turn, stream: bool) -> ChatRequest {
    let messages = turn
        .messages
        .iter()
        .filter_map(|message| match message {
            Message::System(text) => Some(ChatMessage::System {
                content: text.clone(),
            }),
            Message::User(text) => Some(ChatMessage::User {
                content: text.clone(),
            }),
            Message::Assistant { text, tool_calls } => Some(ChatMessage::Assistant {
                content: (!text.is_empty()).then(|| text.clone()),
                tool_calls: tool_calls
                    .iter()
                    .map(|call| ChatToolCall {
                        id: call.id.clone(),
                        kind: FunctionKind::Function,
                        function: FunctionCall {
                            name: call.name.clone(),
                            arguments: call.arguments.clone(),
                        },
                    })
                    .collect(),
            }),
            Message::Tool { call_id, output } => Some(ChatMessage::Tool {
                tool_call_id: call_id.clone(),
                content: output.clone(),
            }),
            // Chat Completions has no place for another protocol's
            // reasoning or items.
            Message::Reasoning(_) | Message::Native(_) => None,
        })
        .collect();
    let has_tools = !turn.tools.is_empty();
    ChatRequest {
        model: turn.model.clone(),
        messages,
        tools: turn
            .tools
            .iter()
            .map(|tool| ChatTool {
                kind: FunctionKind::Function,
                function: FunctionDefinition {
                    name: tool.name.clone(),
                    description: tool.description.clone(),
                    parameters: tool.parameters.clone(),
                    strict: turn.carry.tool_strict.get(&tool.name).copied(),
                },
            })
            .collect(),
        // A tool choice without tools is an error to some servers.
        tool_choice: has_tools.then(|| match &turn.tool_choice {
            ToolChoice::Auto => ChatToolChoice::Mode(ToolChoiceMode::Auto),
            ToolChoice::Required => ChatToolChoice::Mode(ToolChoiceMode::Required),
            ToolChoice::None => ChatToolChoice::Mode(ToolChoiceMode::None),
            ToolChoice::Named(name) => ChatToolChoice::Function(NamedToolChoice {
                kind: FunctionKind::Function,
                function: FunctionName { name: name.clone() },
            }),
        }),
        parallel_tool_calls: turn.parallel_tool_calls.filter(|_| has_tools),
        temperature: turn.temperature,
        top_p: turn.top_p,
        max_tokens: turn.max_output_tokens,
        stream: stream.then_some(true),
        stream_options: stream.then_some(StreamOptions {
            include_usage: true,
        }),
        ..carried(&turn.carry)
    }
}

/// Keys of the Responses request's carried fields that Chat Completions
/// takes under the same name and meaning.
const SAME_NAME: &[&str] = &[
    "frequency_penalty",
    "metadata",
    "presence_penalty",
    "prompt_cache_key",
    "safety_identifier",
    "service_tier",
    "user",
];

/// Keys of the verbatim maps whose meaning the neutral fields of
/// [`Carry`] hold (`reasoning` is `carry.reasoning`, `text.format` is
/// `carry.output_format`, `stop_sequences` is `carry.stop`...): carried or
/// reported through those, never twice.
const NEUTRAL: &[&str] = &[
    "reasoning",
    "text",
    "thinking",
    "output_config",
    "stop_sequences",
    "top_k",
];

/// Where a thinking budget (Anthropic's `budget_tokens`) falls among
/// Chat Completions' efforts: up to 4k tokens is `low`, up to 16k
/// `medium`, more `high` (OpenAI's efforts think about that much).
fn effort_of_budget(budget: u64) -> &'static str {
    match budget {
        0..=4096 => "low",
        4097..=16384 => "medium",
        _ => "high",
    }
}

/// What of a turn's [`Carry`] Chat Completions can say: the reasoning
/// effort (or a thinking budget's nearest effort), the output format, the
/// stop sequences and the same-named fields of a Responses request.
fn carried(carry: &Carry) -> ChatRequest {
    let reasoning_effort = carry.reasoning.as_ref().and_then(|reasoning| {
        reasoning.effort.clone().or_else(|| {
            reasoning
                .budget_tokens
                .map(|budget| effort_of_budget(budget).to_owned())
        })
    });
    let response_format = carry.output_format.as_ref().map(|format| match format {
        OutputFormat::JsonObject => ResponseFormat {
            kind: "json_object".to_owned(),
            json_schema: None,
        },
        OutputFormat::JsonSchema {
            name,
            description,
            schema,
            strict,
        } => ResponseFormat {
            kind: "json_schema".to_owned(),
            json_schema: Some(JsonSchemaFormat {
                name: name.clone(),
                description: description.clone(),
                schema: Some(schema.clone()),
                strict: *strict,
            }),
        },
    });
    let extra = carry
        .responses
        .iter()
        .filter(|(key, _)| SAME_NAME.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    ChatRequest {
        reasoning_effort,
        response_format,
        stop: carry.stop.clone(),
        extra,
        ..Default::default()
    }
}

/// What of `carry` a Chat Completions request has no place for, named as
/// the client wrote it.
fn uncarried_fields(carry: &Carry) -> Vec<String> {
    let mut names = Vec::new();
    if carry
        .reasoning
        .as_ref()
        .is_some_and(|reasoning| reasoning.summary.is_some())
    {
        names.push("reasoning.summary".to_owned());
    }
    if carry.top_k.is_some() {
        names.push("top_k".to_owned());
    }
    let other = |map: &serde_json::Map<String, serde_json::Value>, names: &mut Vec<String>| {
        for key in map.keys() {
            if !SAME_NAME.contains(&key.as_str()) && !NEUTRAL.contains(&key.as_str()) {
                names.push(key.clone());
            }
        }
    };
    other(&carry.responses, &mut names);
    // None of the Messages request's own fields has a Chat Completions
    // name (its `metadata` and `service_tier` mean other things).
    for key in carry.anthropic.keys() {
        if !NEUTRAL.contains(&key.as_str()) {
            names.push(key.clone());
        }
    }
    if !carry.anthropic_beta.is_empty() {
        names.push("anthropic-beta".to_owned());
    }
    names
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
    /// Takes one chunk's `delta` or one choice's `message`; a tool call
    /// whose arguments grow past `max_arguments` bytes is an error.
    fn take(
        &mut self,
        part: ChoiceMessage,
        deltas: Option<&DeltaSink>,
        max_arguments: usize,
    ) -> Result<(), UpstreamError> {
        if let Some(text) = part.content.filter(|text| !text.is_empty()) {
            self.text.push_str(&text);
            if let Some(sink) = deltas {
                let _ = sink.send(Delta::Text(text));
            }
        }
        for (position, call) in part.tool_calls.into_iter().enumerate() {
            let index = call
                .index
                .and_then(|i| usize::try_from(i).ok())
                .unwrap_or(position);
            let (name, arguments) = match call.function {
                Some(function) => (
                    function.name,
                    function
                        .arguments
                        .map(|arguments| arguments.into_text())
                        .unwrap_or_default(),
                ),
                None => (None, String::new()),
            };
            let new = !self.calls.contains_key(&index);
            let entry = self.calls.entry(index).or_default();
            if let Some(id) = call.id {
                entry.0 = id;
            }
            if let Some(name) = name {
                entry.1.push_str(&name);
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
            check_arguments(&entry.2, max_arguments)?;
        }
        Ok(())
    }

    fn take_usage(&mut self, usage: Option<ChatUsage>) {
        if let Some(usage) = usage {
            self.usage = Usage {
                input_tokens: usage.prompt_tokens,
                output_tokens: usage.completion_tokens,
                ..Usage::default()
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
            ..Default::default()
        }
    }
}

/// Reads one whole completion (a server that does not stream).
pub fn parse_completion(body: ChatCompletion) -> Result<Reply, UpstreamError> {
    if let Some(message) = body.error.and_then(|error| error.message()) {
        return Err(UpstreamError::Malformed(excerpt(&message)));
    }
    let choice = body
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| UpstreamError::Malformed("no choices in the completion".into()))?;
    let message = choice
        .message
        .ok_or_else(|| UpstreamError::Malformed("a choice without a message".into()))?;
    let mut assembly = Assembly::default();
    // A whole completion's size was bounded as it was read; its tool calls
    // are checked by the caller.
    assembly.take(message, None, usize::MAX)?;
    assembly.finish = choice.finish_reason.as_deref().map(finish_of);
    assembly.take_usage(body.usage);
    Ok(assembly.reply())
}

impl Dialect for Assembly {
    type Body = ChatCompletion;
    type Event = ChatChunk;

    fn whole(self, body: ChatCompletion) -> Result<Reply, UpstreamError> {
        parse_completion(body)
    }

    fn event(
        &mut self,
        chunk: ChatChunk,
        deltas: Option<&DeltaSink>,
        max_arguments: usize,
    ) -> Result<bool, UpstreamError> {
        if let Some(message) = chunk.error.and_then(|error| error.message()) {
            return Err(UpstreamError::Malformed(excerpt(&message)));
        }
        if let Some(choice) = chunk.choices.into_iter().next() {
            if let Some(delta) = choice.delta {
                self.take(delta, deltas, max_arguments)?;
            }
            if let Some(reason) = choice.finish_reason {
                self.finish = Some(finish_of(&reason));
            }
        }
        self.take_usage(chunk.usage);
        Ok(true)
    }

    fn finish(self) -> Result<Reply, UpstreamError> {
        if self.finish.is_none() && self.text.is_empty() && self.calls.is_empty() {
            return Err(UpstreamError::Malformed(
                "the event stream ended without an answer".into(),
            ));
        }
        Ok(self.reply())
    }
}

#[async_trait]
impl Upstream for ChatCompletions {
    fn protocol(&self) -> Option<super::Protocol> {
        Some(super::Protocol::Chat)
    }

    fn uncarried(&self, carry: &Carry) -> Vec<String> {
        let mut names = uncarried(carry);
        names.extend(uncarried_fields(carry));
        names
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
            .complete(&body, Assembly::default(), deltas)
            .await?;
        super::freeform::unwrap_calls(&mut reply, &turn.tools);
        Ok(reply)
    }

    fn url(&self) -> Option<&str> {
        Some(&self.endpoint.config.url)
    }

    async fn models(&self) -> Option<Result<Vec<super::UpstreamModel>, UpstreamError>> {
        Some(self.endpoint.models().await)
    }

    async fn forward_chat(&self, body: Vec<u8>) -> Option<Result<super::Forwarded, UpstreamError>> {
        Some(self.endpoint.forward(body).await)
    }
}

/// What of a turn's [`super::Carry`] this protocol cannot send, named as
/// the client wrote it: the hosted tools (and a tool choice of one) of
/// another protocol.
pub fn uncarried(carry: &super::Carry) -> Vec<String> {
    carry.native_uncarried(super::Protocol::Chat)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::ToolSpec;
    use serde_json::{json, Value};

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
                ..Default::default()
            }],
            tool_choice: ToolChoice::Required,
            temperature: Some(0.2),
            top_p: None,
            max_output_tokens: Some(100),
            parallel_tool_calls: None,
            ..Default::default()
        }
    }

    #[test]
    fn a_turn_becomes_chat_messages_and_function_tools() {
        let body = serde_json::to_value(request_body(&turn(), true)).unwrap();
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
    fn a_functions_strict_and_the_penalties_are_carried() {
        let mut turn = turn();
        turn.carry.tool_strict = [("shell".to_owned(), false)].into();
        turn.carry.responses = serde_json::from_value(
            json!({"presence_penalty": 0.5, "frequency_penalty": -1, "top_logprobs": 2}),
        )
        .unwrap();
        let body = serde_json::to_value(request_body(&turn, true)).unwrap();
        assert_eq!(body["tools"][0]["function"]["strict"], false);
        assert_eq!(body["presence_penalty"], 0.5);
        assert_eq!(body["frequency_penalty"], -1);
        assert!(body.get("top_logprobs").is_none());
        assert_eq!(uncarried_fields(&turn.carry), ["top_logprobs"]);
        // Unset, it is the server's default.
        let plain = serde_json::to_value(request_body(&self::turn(), true)).unwrap();
        assert!(plain["tools"][0]["function"].get("strict").is_none());
    }

    #[test]
    fn what_a_turn_carries_becomes_chat_fields_and_the_rest_is_named() {
        use crate::upstream::ReasoningRequest;
        let mut turn = turn();
        turn.carry = Carry {
            reasoning: Some(ReasoningRequest {
                effort: Some("high".into()),
                summary: Some("auto".into()),
                budget_tokens: None,
            }),
            output_format: Some(OutputFormat::JsonSchema {
                name: "answer".into(),
                description: None,
                schema: json!({"type": "object"}),
                strict: Some(true),
            }),
            stop: vec!["END".into()],
            top_k: Some(40),
            responses: serde_json::from_value(json!({
                "reasoning": {"effort": "high"}, "prompt_cache_key": "k1",
                "include": ["reasoning.encrypted_content"], "metadata": {"a": "b"},
            }))
            .unwrap(),
            anthropic_beta: vec!["context-1m".into()],
            ..Default::default()
        };
        let body = serde_json::to_value(request_body(&turn, true)).unwrap();
        assert_eq!(body["reasoning_effort"], "high");
        assert_eq!(
            body["response_format"],
            json!({"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": true}})
        );
        assert_eq!(body["stop"], json!(["END"]));
        assert_eq!(body["prompt_cache_key"], "k1");
        assert_eq!(body["metadata"], json!({"a": "b"}));
        assert!(body.get("top_k").is_none() && body.get("include").is_none());
        let mut dropped = uncarried_fields(&turn.carry);
        dropped.sort();
        assert_eq!(
            dropped,
            ["anthropic-beta", "include", "reasoning.summary", "top_k"]
        );
        // A thinking budget is the nearest effort; an object format is one.
        turn.carry = Carry {
            reasoning: Some(ReasoningRequest {
                budget_tokens: Some(10_000),
                ..Default::default()
            }),
            output_format: Some(OutputFormat::JsonObject),
            ..Default::default()
        };
        let body = serde_json::to_value(request_body(&turn, false)).unwrap();
        assert_eq!(body["reasoning_effort"], "medium");
        assert_eq!(body["response_format"], json!({"type": "json_object"}));
        assert!(uncarried_fields(&turn.carry).is_empty());
        // Nothing carried: none of the keys appear.
        turn.carry = Carry::default();
        let body = serde_json::to_value(request_body(&turn, false)).unwrap();
        for key in ["reasoning_effort", "response_format", "stop"] {
            assert!(body.get(key).is_none(), "{key}: {body}");
        }
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
            let delta = serde_json::from_value(delta).unwrap();
            assembly.take(delta, None, usize::MAX).unwrap();
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
            parse_completion(serde_json::from_value(json!({"nothing": 1})).unwrap()),
            Err(UpstreamError::Malformed(_))
        ));
        assert!(matches!(
            parse_completion(
                serde_json::from_value(json!({"error": {"message": "model overloaded"}})).unwrap()
            ),
            Err(UpstreamError::Malformed(m)) if m.contains("overloaded")
        ));
    }
}
