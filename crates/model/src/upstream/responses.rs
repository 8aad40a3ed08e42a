//! OpenAI's Responses API (`POST {url}/responses`) as an upstream, streamed.
//!
//! The conversation is sent as items (`function_call` / `function_call_output`
//! for tool calls), nothing is stored upstream (`store: false`): shellgate
//! keeps the conversation itself. Text streams out as
//! `response.output_text.delta`; the reply is read from the final
//! `response.completed` object.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Map;
use shellgate_wire::chat::ApiError;
use shellgate_wire::responses::{
    CustomTool, CustomToolCall, CustomToolCallOutput, CustomToolFormat, FunctionCall,
    FunctionCallOutput, FunctionTool, IncompleteDetails, Item, Message as MessageItem,
    MessageContent, NamespaceTool, Role, Tool, ToolChoice as ResponsesToolChoice, ToolOutput,
};

use super::transport::{excerpt, Auth, Dialect, Endpoint, Route};
use super::{
    CustomFormat, Delta, DeltaSink, Finish, Message, Protocol, Reply, ToolCall, ToolChoice,
    ToolSpec, Turn, Upstream, UpstreamConfig, UpstreamError, Usage,
};
use crate::tools::namespaced_name;

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

/// What shellgate asks of a Responses upstream: the conversation as items,
/// its function tools, nothing stored there.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Request {
    pub model: String,
    pub input: Vec<Item>,
    pub store: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Tool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ResponsesToolChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
}

fn message(role: Role, text: &str) -> Item {
    Item::Message(MessageItem {
        id: None,
        role,
        status: None,
        content: MessageContent::Text(text.to_owned()),
        extra: Map::new(),
    })
}

/// The request body for a turn.
pub fn request_body(turn: &Turn, stream: bool) -> Request {
    let mut instructions = Vec::new();
    let mut input = Vec::new();
    // Calls of freeform tools: their results are `custom_tool_call_output`s.
    let mut custom_calls = std::collections::HashSet::new();
    for entry in &turn.messages {
        match entry {
            Message::System(text) => instructions.push(text.clone()),
            Message::User(text) => input.push(message(Role::User, text)),
            Message::Assistant { text, tool_calls } => {
                if !text.is_empty() {
                    input.push(message(Role::Assistant, text));
                }
                for call in tool_calls {
                    let item = call_item(call, &turn.tools);
                    if matches!(item, Item::CustomToolCall(_)) {
                        custom_calls.insert(call.id.as_str());
                    }
                    input.push(item);
                }
            }
            Message::Tool { call_id, output } => input.push(tool_output_item(
                call_id,
                output,
                custom_calls.contains(call_id.as_str()),
            )),
            // Reasoning items and the Responses API's own items: not yet
            // carried.
            Message::Reasoning(_) | Message::Native(_) => {}
        }
    }
    let tools = request_tools(turn);
    let has_tools = !tools.is_empty();
    Request {
        model: turn.model.clone(),
        input,
        store: false,
        instructions: (!instructions.is_empty()).then(|| instructions.join("\n\n")),
        tools,
        tool_choice: has_tools.then(|| request_tool_choice(turn)),
        parallel_tool_calls: turn.parallel_tool_calls.filter(|_| has_tools),
        temperature: turn.temperature,
        top_p: turn.top_p,
        max_output_tokens: turn.max_output_tokens,
        stream: stream.then_some(true),
    }
}

/// A turn's tools as Responses tools: functions, freeform tools as
/// `custom` tools, the tools of a namespace as that `namespace` group
/// again (one per namespace, where its first tool was), then the hosted
/// tools shellgate does not run, as the client wrote them.
fn request_tools(turn: &Turn) -> Vec<Tool> {
    let mut tools: Vec<Tool> = Vec::new();
    for spec in &turn.tools {
        let Some(group) = &spec.namespace else {
            tools.push(own_tool(spec, &spec.name));
            continue;
        };
        let tool = own_tool(spec, &group.name);
        let existing = tools.iter_mut().find_map(|tool| match tool {
            Tool::Namespace(namespace) if namespace.name.as_deref() == Some(&group.namespace) => {
                Some(namespace)
            }
            _ => None,
        });
        match existing {
            Some(namespace) => namespace.tools.push(tool),
            None => tools.push(Tool::Namespace(NamespaceTool {
                name: Some(group.namespace.clone()),
                description: Some(group.description.clone()),
                tools: vec![tool],
                extra: Map::new(),
            })),
        }
    }
    tools.extend(
        turn.carry
            .native_tools_for(Protocol::Responses)
            .filter_map(|tool| tool.as_object().cloned().map(Tool::Other)),
    );
    tools
}

/// One function or freeform tool, named `name`.
fn own_tool(spec: &ToolSpec, name: &str) -> Tool {
    match &spec.custom {
        Some(format) => Tool::Custom(CustomTool {
            name: Some(name.to_owned()),
            description: Some(spec.description.clone()).filter(|d| !d.is_empty()),
            format: Some(match format {
                CustomFormat::Text => CustomToolFormat {
                    kind: "text".into(),
                    syntax: None,
                    definition: None,
                    extra: Map::new(),
                },
                CustomFormat::Grammar { syntax, definition } => CustomToolFormat {
                    kind: "grammar".into(),
                    syntax: Some(syntax.clone()),
                    definition: Some(definition.clone()),
                    extra: Map::new(),
                },
            }),
            extra: Map::new(),
        }),
        None => Tool::Function(FunctionTool {
            name: Some(name.to_owned()),
            description: Some(spec.description.clone()),
            parameters: Some(spec.parameters.clone()),
            strict: None,
            extra: Map::new(),
        }),
    }
}

/// The turn's `tool_choice`: a hosted tool's as the client wrote it; a
/// named freeform tool's as `custom`; a tool of a namespace by its own name.
fn request_tool_choice(turn: &Turn) -> ResponsesToolChoice {
    if let Some(choice) = turn
        .carry
        .native_tool_choice
        .as_ref()
        .filter(|choice| choice.protocol == Protocol::Responses)
        .and_then(|choice| choice.item.as_object())
    {
        return ResponsesToolChoice::Other(choice.clone());
    }
    match &turn.tool_choice {
        ToolChoice::Auto => ResponsesToolChoice::Auto,
        ToolChoice::Required => ResponsesToolChoice::Required,
        ToolChoice::None => ResponsesToolChoice::None,
        ToolChoice::Named(name) => {
            let spec = turn.tools.iter().find(|spec| &spec.name == name);
            let own = spec
                .and_then(|spec| spec.namespace.as_ref())
                .map_or(name, |group| &group.name)
                .clone();
            if spec.is_some_and(|spec| spec.custom.is_some()) {
                ResponsesToolChoice::Custom { name: own }
            } else {
                ResponsesToolChoice::Function { name: own }
            }
        }
    }
}

/// A call of the conversation as the item the Responses API has for it:
/// a freeform tool's call is a `custom_tool_call` (its arguments are the
/// input), a namespaced tool's names its namespace.
fn call_item(call: &ToolCall, tools: &[ToolSpec]) -> Item {
    let spec = tools.iter().find(|spec| spec.name == call.name);
    let (name, namespace) = match spec.and_then(|spec| spec.namespace.as_ref()) {
        Some(group) => (group.name.clone(), Some(group.namespace.clone())),
        None => (call.name.clone(), None),
    };
    if spec.is_some_and(|spec| spec.custom.is_some()) {
        return Item::CustomToolCall(CustomToolCall {
            id: None,
            call_id: Some(call.id.clone()),
            name,
            namespace,
            input: call.arguments.clone(),
            extra: Map::new(),
        });
    }
    Item::FunctionCall(FunctionCall {
        id: None,
        call_id: Some(call.id.clone()),
        name,
        namespace,
        arguments: call.arguments.clone(),
        status: None,
        extra: Map::new(),
    })
}

/// A tool's result as the item answering its call.
fn tool_output_item(call_id: &str, output: &str, custom: bool) -> Item {
    if custom {
        return Item::CustomToolCallOutput(CustomToolCallOutput {
            id: None,
            call_id: Some(call_id.to_owned()),
            output: ToolOutput::Text(output.to_owned()),
            extra: Map::new(),
        });
    }
    Item::FunctionCallOutput(FunctionCallOutput {
        id: None,
        call_id: Some(call_id.to_owned()),
        output: ToolOutput::Text(output.to_owned()),
        status: None,
        extra: Map::new(),
    })
}

/// The name the model's call of `name` (in `namespace`) is known by.
fn called_name(name: Option<String>, namespace: Option<String>) -> String {
    let name = name.unwrap_or_default();
    match namespace {
        Some(namespace) => namespaced_name(&namespace, &name),
        None => name,
    }
}

/// Tokens an answer counted (either may be left out).
#[derive(Debug, Default, Deserialize)]
struct Counts {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
}

/// A response object as an upstream answers it, read for what the reply
/// needs: its output items (required), usage and why it is incomplete; or
/// an error. Read more leniently than the API's own [`Item`]s (which the
/// request uses): a model server's message without a `role`, or a call
/// without a `call_id`, still gives its text and call.
#[derive(Debug, Deserialize)]
pub struct Answer {
    #[serde(default)]
    output: Option<Vec<OutputItem>>,
    #[serde(default)]
    usage: Option<Counts>,
    #[serde(default)]
    incomplete_details: Option<IncompleteDetails>,
    #[serde(default)]
    error: Option<ApiError>,
}

/// An output item, for what a reply takes of it.
#[derive(Debug, Deserialize)]
#[serde(tag = "type")]
enum OutputItem {
    #[serde(rename = "message")]
    Message {
        #[serde(default)]
        content: Option<Parts>,
    },
    #[serde(rename = "function_call")]
    FunctionCall {
        #[serde(default)]
        call_id: Option<String>,
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        namespace: Option<String>,
        #[serde(default)]
        arguments: Option<String>,
    },
    #[serde(rename = "custom_tool_call")]
    CustomToolCall {
        #[serde(default)]
        call_id: Option<String>,
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        namespace: Option<String>,
        #[serde(default)]
        input: Option<String>,
    },
    #[serde(other)]
    Other,
}

/// A message's content parts (content of another shape has no text).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Parts {
    Parts(Vec<Part>),
    Other(serde::de::IgnoredAny),
}

/// A content part, for its text (`output_text`'s, or any part's that has
/// one).
#[derive(Debug, Deserialize)]
struct Part {
    #[serde(default)]
    text: Option<String>,
}

/// Reads a response object (the whole answer).
pub fn parse_response(response: Answer) -> Result<Reply, UpstreamError> {
    if let Some(message) = response.error.and_then(|error| error.message()) {
        return Err(UpstreamError::Malformed(excerpt(&message)));
    }
    let output = response
        .output
        .ok_or_else(|| UpstreamError::Malformed("a response without output".into()))?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for item in output {
        match item {
            OutputItem::Message {
                content: Some(Parts::Parts(parts)),
            } => {
                for piece in parts.into_iter().filter_map(|part| part.text) {
                    text.push_str(&piece);
                }
            }
            OutputItem::FunctionCall {
                call_id,
                name,
                namespace,
                arguments,
            } => tool_calls.push(ToolCall {
                id: call_id.unwrap_or_else(|| "call".to_owned()),
                name: called_name(name, namespace),
                arguments: arguments.unwrap_or_else(|| "{}".to_owned()),
            }),
            OutputItem::CustomToolCall {
                call_id,
                name,
                namespace,
                input,
            } => tool_calls.push(ToolCall {
                id: call_id.unwrap_or_else(|| "call".to_owned()),
                name: called_name(name, namespace),
                arguments: input.unwrap_or_default(),
            }),
            OutputItem::Message { .. } | OutputItem::Other => {}
        }
    }
    let usage = response.usage.unwrap_or_default();
    let finish = match response
        .incomplete_details
        .as_ref()
        .map(|d| d.reason.as_str())
    {
        Some("max_output_tokens") => Finish::Length,
        Some("content_filter") => Finish::ContentFilter,
        _ => Finish::Stop,
    };
    Ok(Reply {
        text,
        tool_calls,
        usage: Usage {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
        },
        finish,
        ..Default::default()
    })
}

/// The events of the stream the adapter reads (others are skipped).
#[derive(Debug, Deserialize)]
#[serde(tag = "type")]
enum Event {
    #[serde(rename = "response.output_text.delta")]
    TextDelta {
        #[serde(default)]
        delta: Option<String>,
    },
    #[serde(rename = "response.completed", alias = "response.incomplete")]
    Finished { response: Answer },
    #[serde(rename = "response.failed")]
    Failed {
        #[serde(default)]
        response: Option<Failed>,
    },
    #[serde(rename = "error")]
    Error {
        #[serde(default)]
        message: Option<String>,
    },
    #[serde(other)]
    Other,
}

/// A failed response, for its error.
#[derive(Debug, Deserialize)]
struct Failed {
    #[serde(default)]
    error: Option<ApiError>,
}

/// Reads the stream: text as it comes, the reply from the final response.
#[derive(Default)]
struct Stream {
    finished: Option<Answer>,
}

impl Dialect for Stream {
    type Body = Answer;
    type Event = Event;

    fn whole(body: Answer) -> Result<Reply, UpstreamError> {
        parse_response(body)
    }

    fn event(
        &mut self,
        event: Event,
        deltas: Option<&DeltaSink>,
        _max_arguments: usize,
    ) -> Result<bool, UpstreamError> {
        match event {
            Event::TextDelta { delta } => {
                if let (Some(sink), Some(delta)) = (deltas, delta) {
                    let _ = sink.send(Delta::Text(delta));
                }
            }
            Event::Finished { response } => {
                self.finished = Some(response);
                return Ok(false);
            }
            Event::Failed { response } => {
                let message = response
                    .and_then(|r| r.error)
                    .and_then(|e| e.message())
                    .unwrap_or_else(|| "the upstream response failed".into());
                return Err(UpstreamError::Malformed(excerpt(&message)));
            }
            Event::Error { message } => {
                let message = message.unwrap_or_else(|| "an error event".into());
                return Err(UpstreamError::Malformed(excerpt(&message)));
            }
            Event::Other => {}
        }
        Ok(true)
    }

    fn finish(self) -> Result<Reply, UpstreamError> {
        let response = self.finished.ok_or_else(|| {
            UpstreamError::Malformed("the event stream ended without a response".into())
        })?;
        parse_response(response)
    }
}

#[async_trait]
impl Upstream for Responses {
    fn protocol(&self) -> Option<super::Protocol> {
        Some(super::Protocol::Responses)
    }

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

    // The model list and the start-up summary (issue 18's `chat` branch).
    fn url(&self) -> Option<&str> {
        Some(&self.endpoint.config.url)
    }

    async fn models(&self) -> Option<Result<Vec<super::UpstreamModel>, UpstreamError>> {
        Some(self.endpoint.models().await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::ToolSpec;
    use serde_json::json;

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
                ..Default::default()
            }],
            tool_choice: ToolChoice::Named("shell".into()),
            temperature: None,
            top_p: None,
            max_output_tokens: None,
            parallel_tool_calls: None,
            ..Default::default()
        };
        let body = serde_json::to_value(request_body(&turn, false)).unwrap();
        assert_eq!(body["instructions"], "sys");
        assert_eq!(body["input"][1]["type"], "function_call");
        assert_eq!(body["input"][2]["type"], "function_call_output");
        assert_eq!(body["tool_choice"]["name"], "shell");
        assert_eq!(body["store"], false);
        let reply = parse_response(serde_json::from_value(json!({
            "output": [
                {"type": "message", "content": [{"type": "output_text", "text": "hi"}]},
                {"type": "function_call", "call_id": "c2", "name": "shell", "arguments": "{\"commands\":[]}"},
            ],
            "usage": {"input_tokens": 3, "output_tokens": 4},
        })).unwrap())
        .unwrap();
        assert_eq!(reply.text, "hi");
        assert_eq!(reply.tool_calls[0].id, "c2");
        assert_eq!(reply.usage.output_tokens, 4);
    }

    #[test]
    fn custom_namespaced_and_hosted_tools_go_as_the_responses_api_has_them() {
        use crate::upstream::{Carry, CustomFormat, NativeItem, ToolNamespace};
        let group = |name: &str| ToolNamespace {
            namespace: "multi_agent_v1".into(),
            description: "Sub-agents.".into(),
            name: name.into(),
        };
        let turn = Turn {
            model: "m".into(),
            messages: vec![
                Message::Assistant {
                    text: String::new(),
                    tool_calls: vec![
                        ToolCall {
                            id: "c1".into(),
                            name: "apply_patch".into(),
                            arguments: "raw".into(),
                        },
                        ToolCall {
                            id: "c2".into(),
                            name: "multi_agent_v1__spawn_agent".into(),
                            arguments: "{}".into(),
                        },
                    ],
                },
                Message::Tool {
                    call_id: "c1".into(),
                    output: "patched".into(),
                },
                Message::Tool {
                    call_id: "c2".into(),
                    output: "spawned".into(),
                },
            ],
            tools: vec![
                ToolSpec {
                    name: "apply_patch".into(),
                    description: "Edit files.".into(),
                    custom: Some(CustomFormat::Grammar {
                        syntax: "lark".into(),
                        definition: "start: /.+/".into(),
                    }),
                    ..Default::default()
                },
                ToolSpec {
                    name: "multi_agent_v1__spawn_agent".into(),
                    description: "Spawn.".into(),
                    parameters: json!({"type": "object"}),
                    namespace: Some(group("spawn_agent")),
                    ..Default::default()
                },
                ToolSpec {
                    name: "multi_agent_v1__close_agent".into(),
                    description: "Close.".into(),
                    parameters: json!({"type": "object"}),
                    namespace: Some(group("close_agent")),
                    ..Default::default()
                },
            ],
            tool_choice: ToolChoice::Named("apply_patch".into()),
            carry: Carry {
                native_tools: vec![NativeItem {
                    protocol: Protocol::Responses,
                    item: json!({"type": "web_search", "external_web_access": false}),
                }],
                ..Default::default()
            },
            ..Default::default()
        };
        let body = serde_json::to_value(request_body(&turn, true)).unwrap();
        assert_eq!(
            body["tools"],
            json!([
                {"type": "custom", "name": "apply_patch", "description": "Edit files.",
                 "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}},
                {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.", "tools": [
                    {"type": "function", "name": "spawn_agent", "description": "Spawn.", "parameters": {"type": "object"}},
                    {"type": "function", "name": "close_agent", "description": "Close.", "parameters": {"type": "object"}},
                ]},
                {"type": "web_search", "external_web_access": false},
            ])
        );
        assert_eq!(
            body["tool_choice"],
            json!({"type": "custom", "name": "apply_patch"})
        );
        assert_eq!(
            body["input"],
            json!([
                {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "raw"},
                {"type": "function_call", "call_id": "c2", "name": "spawn_agent",
                 "namespace": "multi_agent_v1", "arguments": "{}"},
                {"type": "custom_tool_call_output", "call_id": "c1", "output": "patched"},
                {"type": "function_call_output", "call_id": "c2", "output": "spawned"},
            ])
        );
        // A hosted tool's tool_choice goes as the client wrote it.
        let mut hosted = turn.clone();
        hosted.carry.native_tool_choice = Some(NativeItem {
            protocol: Protocol::Responses,
            item: json!({"type": "web_search"}),
        });
        let body = serde_json::to_value(request_body(&hosted, false)).unwrap();
        assert_eq!(body["tool_choice"], json!({"type": "web_search"}));
        // The model's custom and namespaced calls come back as the neutral
        // turn names them.
        let reply = parse_response(
            serde_json::from_value(json!({
                "output": [
                    {"type": "custom_tool_call", "call_id": "c3", "name": "apply_patch", "input": "*** Begin Patch"},
                    {"type": "function_call", "call_id": "c4", "name": "close_agent",
                     "namespace": "multi_agent_v1", "arguments": "{}"},
                ],
            }))
            .unwrap(),
        )
        .unwrap();
        assert_eq!(reply.tool_calls[0].name, "apply_patch");
        assert_eq!(reply.tool_calls[0].arguments, "*** Begin Patch");
        assert_eq!(reply.tool_calls[1].name, "multi_agent_v1__close_agent");
    }
}
