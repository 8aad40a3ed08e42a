//! OpenAI's Responses API (`POST {url}/responses`) as an upstream, streamed.
//!
//! The conversation is sent as items (`function_call` / `function_call_output`
//! for tool calls), nothing is stored upstream (`store: false`): shellgate
//! keeps the conversation itself. What the client asked beyond the neutral
//! turn goes along verbatim ([`super::Carry::responses`]: `reasoning`,
//! `include`, `prompt_cache_key`, `text`, ...), and so do the hosted tools
//! shellgate does not run ([`super::Carry::native_tools`]). Reasoning items
//! the upstream returns (with their `encrypted_content` when `include`
//! asked for it) and items of types the loop does not act on (a hosted
//! tool's `web_search_call`, ...) come back in the reply, as soon as each
//! is done (`response.output_item.done`), and are replayed in place on the
//! next turn. Text streams out as `response.output_text.delta`; the reply
//! is read from the final `response.completed` object.

use async_trait::async_trait;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use shellgate_wire::chat::ApiError;
use shellgate_wire::responses::INPUT_TOKENS_CARRIED;
use shellgate_wire::responses::{
    CustomTool, CustomToolCall, CustomToolCallOutput, CustomToolFormat, FunctionCall,
    FunctionCallOutput, FunctionTool, IncompleteDetails, InputTokenCount, Item,
    Message as MessageItem, MessageContent, NamespaceTool, Role, Tool,
    ToolChoice as ResponsesToolChoice, ToolOutput,
};

use super::transport::{excerpt, Auth, Dialect, Endpoint, Route};
use super::{
    Carry, CustomFormat, Delta, DeltaSink, Finish, Message, NativeItem, OutputFormat, Protocol,
    Reasoning, Reply, Sealed, ToolCall, ToolChoice, ToolSpec, Turn, Upstream, UpstreamConfig,
    UpstreamError, Usage,
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
/// its function tools, nothing stored there, and what the client asked
/// beyond that ([`Request::carried`]).
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
    /// The client's fields shellgate does not act on, as it sent them
    /// (`reasoning`, `include`, `prompt_cache_key`, `text`, `truncation`,
    /// `service_tier`, `safety_identifier`, `client_metadata`, ...). Never
    /// one of the fields above ([`OWN_FIELDS`]).
    #[serde(flatten)]
    pub carried: Map<String, Value>,
}

/// The fields of [`Request`] shellgate sets itself, which win over a
/// carried key of the same name: `model` (the routed name), `input` and
/// `instructions` (the loop's conversation), `tools`, `tool_choice` and
/// `parallel_tool_calls` (the loop's tools, the hosted shell as a
/// function), `store` (always `false`: shellgate keeps the conversation),
/// `stream` (the adapter reads a stream), and the sampling fields the
/// turn has typed.
pub const OWN_FIELDS: &[&str] = &[
    "model",
    "input",
    "store",
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "temperature",
    "top_p",
    "max_output_tokens",
    "stream",
];

/// The body of `responses/input_tokens`: the request's fields that make
/// the model's input (the endpoint takes no sampling, output, storage or
/// stream fields), its carried ones among them too.
#[derive(Serialize)]
struct CountBody<'a> {
    model: &'a str,
    input: &'a [Item],
    #[serde(skip_serializing_if = "Option::is_none")]
    instructions: Option<&'a str>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tools: &'a [Tool],
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'a ResponsesToolChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<bool>,
    #[serde(flatten)]
    carried: Map<String, Value>,
}

impl<'a> CountBody<'a> {
    fn of(request: &'a Request) -> Self {
        CountBody {
            model: &request.model,
            input: &request.input,
            instructions: request.instructions.as_deref(),
            tools: &request.tools,
            tool_choice: request.tool_choice.as_ref(),
            parallel_tool_calls: request.parallel_tool_calls,
            carried: request
                .carried
                .iter()
                .filter(|(key, _)| INPUT_TOKENS_CARRIED.contains(&key.as_str()))
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect(),
        }
    }
}

/// `reasoning` as shellgate writes it from the neutral request (a client
/// of another protocol: a Messages client's thinking, mapped).
#[derive(Serialize)]
struct ReasoningBody<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    effort: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    summary: Option<&'a str>,
}

/// `text` as shellgate writes it from the neutral output format.
#[derive(Serialize)]
struct TextBody<'a> {
    format: FormatBody<'a>,
}

/// `text.format`.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum FormatBody<'a> {
    JsonSchema {
        name: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        description: Option<&'a str>,
        schema: &'a Value,
        #[serde(skip_serializing_if = "Option::is_none")]
        strict: Option<bool>,
    },
    JsonObject,
}

/// The carried fields of a turn's body: the client's Responses fields as
/// it sent them (but never shellgate's own), then what the neutral request
/// says that they do not (`reasoning` and `text` from a client of another
/// protocol).
fn carried(carry: &Carry) -> Map<String, Value> {
    let mut carried: Map<String, Value> = carry
        .responses
        .iter()
        .filter(|(key, _)| !OWN_FIELDS.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    if let Some(reasoning) = &carry.reasoning {
        let body = ReasoningBody {
            effort: reasoning.effort.as_deref(),
            summary: reasoning.summary.as_deref(),
        };
        if body.effort.is_some() || body.summary.is_some() {
            if let Ok(value) = serde_json::to_value(body) {
                carried.entry("reasoning").or_insert(value);
            }
        }
    }
    if let Some(format) = &carry.output_format {
        let format = match format {
            OutputFormat::JsonSchema {
                name,
                description,
                schema,
                strict,
            } => FormatBody::JsonSchema {
                name,
                description: description.as_deref(),
                schema,
                strict: *strict,
            },
            OutputFormat::JsonObject => FormatBody::JsonObject,
        };
        if let Ok(value) = serde_json::to_value(TextBody { format }) {
            carried.entry("text").or_insert(value);
        }
    }
    carried
}

/// A reasoning as a Responses upstream reads it back: only OpenAI's own
/// (sealed in `encrypted_content`). Nothing is stored upstream, so a
/// reasoning without it could only be named by an id the upstream no
/// longer has (an error there); another protocol's means nothing to it.
/// Either is left out: the model goes on without its earlier reasoning,
/// as a stateless model does.
fn reasoning_input(reasoning: &Reasoning) -> Option<Item> {
    let Some(Sealed::OpenAi(_)) = &reasoning.sealed else {
        return None;
    };
    Some(Item::Reasoning(crate::reasoning::to_item(reasoning)))
}

/// An item of the Responses API's own, replayed verbatim (another
/// protocol's is left out).
fn native_input(native: &NativeItem) -> Option<Item> {
    match (&native.protocol, &native.item) {
        (Protocol::Responses, Value::Object(item)) => Some(Item::Other(item.clone())),
        _ => None,
    }
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
            Message::Reasoning(reasoning) => input.extend(reasoning_input(reasoning)),
            Message::Native(native) => input.extend(native_input(native)),
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
        carried: carried(&turn.carry),
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
            tools.push(own_tool(spec, &spec.name, &turn.carry));
            continue;
        };
        let tool = own_tool(spec, &group.name, &turn.carry);
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

/// One function or freeform tool, named `name` (a function with the
/// client's `strict`, if it said).
fn own_tool(spec: &ToolSpec, name: &str, carry: &Carry) -> Tool {
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
            strict: carry.tool_strict.get(&spec.name).copied(),
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

/// Tokens an answer counted (any may be left out).
#[derive(Debug, Default, Deserialize)]
struct Counts {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    input_tokens_details: Option<InputDetails>,
    #[serde(default)]
    output_tokens_details: Option<OutputDetails>,
}

/// `usage.input_tokens_details`.
#[derive(Debug, Default, Deserialize)]
struct InputDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

/// `usage.output_tokens_details`.
#[derive(Debug, Default, Deserialize)]
struct OutputDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

impl Counts {
    fn usage(&self) -> Usage {
        Usage {
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            cached_input_tokens: self
                .input_tokens_details
                .as_ref()
                .and_then(|d| d.cached_tokens)
                .unwrap_or(0),
            reasoning_tokens: self
                .output_tokens_details
                .as_ref()
                .and_then(|d| d.reasoning_tokens)
                .unwrap_or(0),
        }
    }
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
#[derive(Debug)]
enum OutputItem {
    Message {
        content: Option<Parts>,
    },
    FunctionCall {
        call_id: Option<String>,
        name: Option<String>,
        namespace: Option<String>,
        arguments: Option<String>,
        /// The item as the upstream wrote it.
        raw: Map<String, Value>,
    },
    CustomToolCall {
        call_id: Option<String>,
        name: Option<String>,
        namespace: Option<String>,
        input: Option<String>,
        raw: Map<String, Value>,
    },
    Reasoning(UpstreamReasoning),
    /// An item of a type the loop does not act on (a hosted tool's call,
    /// a compaction...): kept whole, for the client and the next turn.
    Native(Map<String, Value>),
}

/// The items the loop reads, by their `type`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type")]
enum KnownItem {
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
    #[serde(rename = "reasoning")]
    Reasoning(UpstreamReasoning),
}

/// An item's `type`, to tell the known ones from the rest.
#[derive(Deserialize)]
struct ItemType {
    #[serde(rename = "type", default)]
    kind: Option<String>,
}

impl<'de> Deserialize<'de> for OutputItem {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let item = Map::<String, Value>::deserialize(deserializer)?;
        let value = Value::Object(item);
        let kind = ItemType::deserialize(&value)
            .map_err(D::Error::custom)?
            .kind;
        let known = matches!(
            kind.as_deref(),
            Some("message" | "function_call" | "custom_tool_call" | "reasoning")
        );
        let read = if known {
            Some(KnownItem::deserialize(&value).map_err(D::Error::custom)?)
        } else {
            None
        };
        let Value::Object(raw) = value else {
            return Err(D::Error::custom("an output item must be an object"));
        };
        let Some(read) = read else {
            return Ok(OutputItem::Native(raw));
        };
        Ok(match read {
            KnownItem::Message { content } => OutputItem::Message { content },
            KnownItem::FunctionCall {
                call_id,
                name,
                namespace,
                arguments,
            } => OutputItem::FunctionCall {
                call_id,
                name,
                namespace,
                arguments,
                raw,
            },
            KnownItem::CustomToolCall {
                call_id,
                name,
                namespace,
                input,
            } => OutputItem::CustomToolCall {
                call_id,
                name,
                namespace,
                input,
                raw,
            },
            KnownItem::Reasoning(reasoning) => OutputItem::Reasoning(reasoning),
        })
    }
}

/// A `reasoning` item, read leniently (parts of another shape have no
/// text).
#[derive(Debug, Deserialize)]
struct UpstreamReasoning {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    summary: Option<Parts>,
    #[serde(default)]
    content: Option<Parts>,
    #[serde(default)]
    encrypted_content: Option<String>,
}

impl UpstreamReasoning {
    fn into_reasoning(self) -> Reasoning {
        let texts = |parts: Option<Parts>| -> Vec<String> {
            match parts {
                Some(Parts::Parts(parts)) => parts.into_iter().filter_map(|p| p.text).collect(),
                _ => Vec::new(),
            }
        };
        Reasoning {
            id: self.id,
            summary: texts(self.summary),
            text: texts(self.content).join("\n"),
            sealed: self.encrypted_content.map(Sealed::OpenAi),
        }
    }
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

/// Reads a response object (the whole answer), every call the loop's.
pub fn parse_response(response: Answer) -> Result<Reply, UpstreamError> {
    read_response(response, &Offered::default())
}

/// The tools a turn offered, by the names the loop knows them by (`None`:
/// any). A freeform or namespaced call of a tool it did not offer (one the
/// client declared where shellgate does not read it, such as Codex's
/// `additional_tools` item) is not the loop's: it goes back to the client
/// as the upstream wrote it, a native item ([`OutputItem::foreign`]).
#[derive(Debug, Default)]
struct Offered(Option<Vec<String>>);

impl Offered {
    fn of(turn: &Turn) -> Self {
        Offered(Some(
            turn.tools.iter().map(|spec| spec.name.clone()).collect(),
        ))
    }

    fn has(&self, name: &str) -> bool {
        self.0
            .as_ref()
            .is_none_or(|names| names.iter().any(|offered| offered == name))
    }
}

impl OutputItem {
    /// A call of a tool `offered` does not have, that the neutral turn
    /// cannot say (freeform or namespaced), as the upstream wrote it.
    fn foreign(&self, offered: &Offered) -> Option<&Map<String, Value>> {
        match self {
            OutputItem::FunctionCall {
                name,
                namespace: namespace @ Some(_),
                raw,
                ..
            }
            | OutputItem::CustomToolCall {
                name,
                namespace,
                raw,
                ..
            } => {
                let called = called_name(name.clone(), namespace.clone());
                (!offered.has(&called)).then_some(raw)
            }
            _ => None,
        }
    }
}

/// Reads a response object (the whole answer) of a turn that offered
/// `offered`.
fn read_response(response: Answer, offered: &Offered) -> Result<Reply, UpstreamError> {
    if let Some(message) = response.error.and_then(|error| error.message()) {
        return Err(UpstreamError::Malformed(excerpt(&message)));
    }
    let output = response
        .output
        .ok_or_else(|| UpstreamError::Malformed("a response without output".into()))?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    let mut reasoning = Vec::new();
    let mut native = Vec::new();
    for item in output {
        if let Some(raw) = item.foreign(offered) {
            native.push(NativeItem {
                protocol: Protocol::Responses,
                item: Value::Object(raw.clone()),
            });
            continue;
        }
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
                ..
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
                ..
            } => tool_calls.push(ToolCall {
                id: call_id.unwrap_or_else(|| "call".to_owned()),
                name: called_name(name, namespace),
                arguments: input.unwrap_or_default(),
            }),
            OutputItem::Reasoning(item) => reasoning.push(item.into_reasoning()),
            OutputItem::Native(item) => native.push(NativeItem {
                protocol: Protocol::Responses,
                item: Value::Object(item),
            }),
            OutputItem::Message { .. } => {}
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
        usage: usage.usage(),
        finish,
        reasoning,
        native,
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
    #[serde(rename = "response.reasoning_summary_text.delta")]
    SummaryDelta {
        #[serde(default)]
        item_id: Option<String>,
        #[serde(default)]
        summary_index: usize,
        #[serde(default)]
        delta: String,
    },
    /// An output item is complete: a reasoning or an item the loop does
    /// not act on is told at once (text and calls come from the final
    /// response).
    #[serde(rename = "response.output_item.done")]
    ItemDone { item: OutputItem },
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
    offered: Offered,
}

impl Dialect for Stream {
    type Body = Answer;
    type Event = Event;

    fn whole(self, body: Answer) -> Result<Reply, UpstreamError> {
        read_response(body, &self.offered)
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
            Event::SummaryDelta {
                item_id,
                summary_index,
                delta,
            } => {
                if let Some(sink) = deltas {
                    let _ = sink.send(Delta::ReasoningSummary {
                        id: item_id,
                        summary_index,
                        delta,
                    });
                }
            }
            Event::ItemDone { item } => {
                if let Some(raw) = item.foreign(&self.offered) {
                    if let Some(sink) = deltas {
                        let _ = sink.send(Delta::Native(NativeItem {
                            protocol: Protocol::Responses,
                            item: Value::Object(raw.clone()),
                        }));
                    }
                    return Ok(true);
                }
                let delta = match item {
                    OutputItem::Reasoning(item) => Delta::Reasoning(item.into_reasoning()),
                    OutputItem::Native(item) => Delta::Native(NativeItem {
                        protocol: Protocol::Responses,
                        item: Value::Object(item),
                    }),
                    OutputItem::Message { .. }
                    | OutputItem::FunctionCall { .. }
                    | OutputItem::CustomToolCall { .. } => return Ok(true),
                };
                if let Some(sink) = deltas {
                    let _ = sink.send(delta);
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
        read_response(response, &self.offered)
    }
}

#[async_trait]
impl Upstream for Responses {
    fn protocol(&self) -> Option<super::Protocol> {
        Some(super::Protocol::Responses)
    }

    fn uncarried(&self, carry: &Carry) -> Vec<String> {
        uncarried(carry)
    }

    async fn complete(
        &self,
        turn: &Turn,
        deltas: Option<&DeltaSink>,
    ) -> Result<Reply, UpstreamError> {
        let body = request_body(turn, true);
        self.endpoint
            .complete(
                &body,
                Stream {
                    finished: None,
                    offered: Offered::of(turn),
                },
                deltas,
            )
            .await
    }

    /// The Responses API's own count (`POST {url}/responses/input_tokens`)
    /// of the turn's input, without what only generating takes.
    async fn count_tokens(&self, turn: &Turn) -> Result<Option<u64>, UpstreamError> {
        let request = request_body(turn, false);
        let count: InputTokenCount = self
            .endpoint
            .post_json("responses/input_tokens", &CountBody::of(&request), &[])
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

/// What a Responses upstream cannot be sent of `carry`: a Messages
/// client's fields (but those the neutral request carries:
/// `thinking` as `reasoning`, `output_config` as `text.format`), `top_k`,
/// stop sequences, beta headers, and another protocol's hosted tools and
/// tool choice.
fn uncarried(carry: &Carry) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut name = |text: &str| {
        if !names.iter().any(|n| n == text) {
            names.push(text.to_owned());
        }
    };
    for key in carry.anthropic.keys() {
        let mapped = match key.as_str() {
            // Said as `reasoning` when there is an effort (or a summary)
            // to say: a budget alone has no Responses equivalent.
            "thinking" => carry
                .reasoning
                .as_ref()
                .is_some_and(|r| r.effort.is_some() || r.summary.is_some()),
            "output_config" => carry.output_format.is_some(),
            _ => false,
        };
        if !mapped {
            name(key);
        }
    }
    if carry.top_k.is_some() {
        name("top_k");
    }
    if !carry.stop.is_empty() {
        name("stop_sequences");
    }
    if !carry.anthropic_beta.is_empty() {
        name("anthropic-beta");
    }
    for native in carry.native_uncarried(Protocol::Responses) {
        name(&native);
    }
    names
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
        let mut turn = turn;
        turn.carry.tool_strict = [("shell".to_owned(), false)].into();
        let body = serde_json::to_value(request_body(&turn, false)).unwrap();
        assert_eq!(body["instructions"], "sys");
        assert_eq!(body["tools"][0]["strict"], false);
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

    fn sealed(id: &str, sealed: Option<Sealed>) -> Message {
        Message::Reasoning(Reasoning {
            id: Some(id.into()),
            summary: vec![format!("summary of {id}")],
            text: String::new(),
            sealed,
        })
    }

    #[test]
    fn the_body_carries_the_clients_fields_and_replays_reasoning_and_native_items_in_place() {
        let mut responses = Map::new();
        for (key, value) in [
            ("reasoning", json!({"effort": "high", "summary": "auto"})),
            ("include", json!(["reasoning.encrypted_content"])),
            ("prompt_cache_key", json!("cache-1")),
            ("client_metadata", json!({"session_id": "s"})),
            // shellgate's own fields win.
            ("model", json!("other")),
            ("store", json!(true)),
        ] {
            responses.insert(key.into(), value);
        }
        let web_search = json!({"type": "web_search_call", "id": "ws_1", "status": "completed"});
        let turn = Turn {
            model: "m".into(),
            messages: vec![
                Message::User("hi".into()),
                sealed("rs_1", Some(Sealed::OpenAi("opaque".into()))),
                // Not readable by the upstream: left out.
                sealed("rs_2", None),
                sealed("rs_3", Some(Sealed::AnthropicSignature("sig".into()))),
                Message::Native(NativeItem {
                    protocol: Protocol::Responses,
                    item: web_search.clone(),
                }),
                Message::Native(NativeItem {
                    protocol: Protocol::Anthropic,
                    item: json!({"type": "server_tool_use"}),
                }),
                Message::Assistant {
                    text: "answer".into(),
                    tool_calls: Vec::new(),
                },
            ],
            carry: Carry {
                responses,
                // The client's own `reasoning` wins over the neutral one.
                reasoning: Some(super::super::ReasoningRequest {
                    effort: Some("low".into()),
                    ..Default::default()
                }),
                native_tools: vec![
                    NativeItem {
                        protocol: Protocol::Responses,
                        item: json!({"type": "web_search", "external_web_access": false}),
                    },
                    NativeItem {
                        protocol: Protocol::Anthropic,
                        item: json!({"type": "web_search_20250305", "name": "web_search"}),
                    },
                ],
                ..Default::default()
            },
            ..Default::default()
        };
        let body = serde_json::to_value(request_body(&turn, true)).unwrap();
        assert_eq!(body["model"], "m");
        assert_eq!(body["store"], false);
        assert_eq!(body["stream"], true);
        assert_eq!(
            body["reasoning"],
            json!({"effort": "high", "summary": "auto"})
        );
        assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(body["prompt_cache_key"], "cache-1");
        assert_eq!(body["client_metadata"], json!({"session_id": "s"}));
        assert_eq!(
            body["input"],
            json!([
                {"type": "message", "role": "user", "content": "hi"},
                {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "summary of rs_1"}],
                 "encrypted_content": "opaque"},
                web_search,
                {"type": "message", "role": "assistant", "content": "answer"},
            ])
        );
        assert_eq!(
            body["tools"],
            json!([{"type": "web_search", "external_web_access": false}])
        );
        assert_eq!(
            uncarried(&turn.carry),
            ["tools (web_search_20250305)".to_owned()]
        );
    }

    #[test]
    fn a_client_of_another_protocol_has_its_reasoning_and_format_said_in_the_responses_way() {
        let turn = Turn {
            model: "m".into(),
            messages: vec![Message::User("hi".into())],
            carry: Carry {
                reasoning: Some(super::super::ReasoningRequest {
                    effort: Some("medium".into()),
                    budget_tokens: Some(4096),
                    ..Default::default()
                }),
                output_format: Some(OutputFormat::JsonSchema {
                    name: "answer".into(),
                    description: None,
                    schema: json!({"type": "object"}),
                    strict: Some(true),
                }),
                top_k: Some(5),
                stop: vec!["END".into()],
                anthropic: [
                    (
                        "thinking".to_owned(),
                        json!({"type": "enabled", "budget_tokens": 4096}),
                    ),
                    ("context_management".to_owned(), json!({})),
                ]
                .into_iter()
                .collect(),
                anthropic_beta: vec!["context-1m".into()],
                ..Default::default()
            },
            ..Default::default()
        };
        let body = serde_json::to_value(request_body(&turn, false)).unwrap();
        assert_eq!(body["reasoning"], json!({"effort": "medium"}));
        assert_eq!(
            body["text"],
            json!({"format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"}, "strict": true}})
        );
        assert!(body.get("context_management").is_none() && body.get("top_k").is_none());
        assert_eq!(
            uncarried(&turn.carry),
            [
                "context_management",
                "top_k",
                "stop_sequences",
                "anthropic-beta"
            ]
        );
        // A thinking budget alone says nothing the Responses API has.
        let budget_only = Carry {
            reasoning: Some(super::super::ReasoningRequest {
                budget_tokens: Some(2048),
                ..Default::default()
            }),
            anthropic: [(
                "thinking".to_owned(),
                json!({"type": "enabled", "budget_tokens": 2048}),
            )]
            .into_iter()
            .collect(),
            ..Default::default()
        };
        assert_eq!(uncarried(&budget_only), ["thinking"]);
        let json_object = Turn {
            carry: Carry {
                output_format: Some(OutputFormat::JsonObject),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(request_body(&json_object, false)).unwrap()["text"],
            json!({"format": {"type": "json_object"}})
        );
    }

    #[test]
    fn reasoning_native_items_and_detailed_usage_are_read_back() {
        let reply = parse_response(
            serde_json::from_value(json!({
                "output": [
                    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "plan"}],
                     "content": null, "encrypted_content": "opaque"},
                    {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "q"}},
                    {"type": "reasoning", "id": "rs_2", "summary": "not parts",
                     "content": [{"type": "reasoning_text", "text": "a"}, {"type": "reasoning_text", "text": "b"}]},
                    {"type": "message", "content": [{"type": "output_text", "text": "hi"}]},
                ],
                "usage": {"input_tokens": 10, "output_tokens": 7,
                          "input_tokens_details": {"cached_tokens": 4},
                          "output_tokens_details": {"reasoning_tokens": 5}},
            }))
            .unwrap(),
        )
        .unwrap();
        assert_eq!(reply.text, "hi");
        assert_eq!(
            reply.reasoning,
            [
                Reasoning {
                    id: Some("rs_1".into()),
                    summary: vec!["plan".into()],
                    text: String::new(),
                    sealed: Some(Sealed::OpenAi("opaque".into())),
                },
                Reasoning {
                    id: Some("rs_2".into()),
                    summary: Vec::new(),
                    text: "a\nb".into(),
                    sealed: None,
                },
            ]
        );
        assert_eq!(
            reply.native,
            [NativeItem {
                protocol: Protocol::Responses,
                item: json!({"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "q"}}),
            }]
        );
        assert_eq!(
            reply.usage,
            Usage {
                input_tokens: 10,
                output_tokens: 7,
                cached_input_tokens: 4,
                reasoning_tokens: 5,
            }
        );
        // A known item of the wrong shape is an error, not a native item.
        let wrong = serde_json::from_value::<Answer>(
            json!({"output": [{"type": "function_call", "name": 5}]}),
        );
        assert!(wrong.is_err());
    }

    #[test]
    fn a_stream_tells_each_reasoning_and_native_item_as_it_is_done() {
        let (sink, mut deltas) = tokio::sync::mpsc::unbounded_channel();
        let mut stream = Stream::default();
        let events = [
            json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "reasoning", "id": "rs_1", "summary": []}}),
            json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "output_index": 0, "summary_index": 0, "delta": "pl"}),
            json!({"type": "response.output_item.done", "output_index": 0, "item": {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "plan"}], "encrypted_content": "opaque"}}),
            json!({"type": "response.output_item.done", "output_index": 1, "item": {"type": "image_generation_call", "id": "ig_1", "result": "b64"}}),
            json!({"type": "response.output_text.delta", "delta": "hi"}),
            json!({"type": "response.output_item.done", "output_index": 2, "item": {"type": "message", "content": [{"type": "output_text", "text": "hi"}]}}),
        ];
        for event in events {
            let event: Event = serde_json::from_value(event).unwrap();
            assert!(stream.event(event, Some(&sink), usize::MAX).unwrap());
        }
        drop(sink);
        let mut told = Vec::new();
        while let Ok(delta) = deltas.try_recv() {
            told.push(delta);
        }
        assert_eq!(
            told,
            [
                Delta::ReasoningSummary {
                    id: Some("rs_1".into()),
                    summary_index: 0,
                    delta: "pl".into(),
                },
                Delta::Reasoning(Reasoning {
                    id: Some("rs_1".into()),
                    summary: vec!["plan".into()],
                    text: String::new(),
                    sealed: Some(Sealed::OpenAi("opaque".into())),
                }),
                Delta::Native(NativeItem {
                    protocol: Protocol::Responses,
                    item: json!({"type": "image_generation_call", "id": "ig_1", "result": "b64"}),
                }),
                Delta::Text("hi".into()),
            ]
        );
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

    #[test]
    fn a_call_of_a_tool_the_turn_did_not_offer_goes_back_as_the_upstream_wrote_it() {
        // Codex's code mode: `exec` (freeform) of the `functions` namespace,
        // declared in an `additional_tools` input item shellgate passes on.
        let foreign = json!({"type": "custom_tool_call", "id": "ctc_1", "call_id": "c1",
                             "namespace": "functions", "name": "exec", "input": "text(1)",
                             "status": "completed"});
        let turn = Turn {
            tools: vec![ToolSpec {
                name: "lookup".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let offered = Offered::of(&turn);
        let answer = || -> Answer {
            serde_json::from_value(json!({"output": [
                foreign.clone(),
                // Said whole by the neutral turn: the loop's, offered or not.
                {"type": "function_call", "call_id": "c2", "name": "lookup", "arguments": "{}"},
                {"type": "function_call", "call_id": "c3", "name": "unknown", "arguments": "{}"},
            ]}))
            .unwrap()
        };
        let reply = read_response(answer(), &offered).unwrap();
        assert_eq!(
            reply.native,
            [NativeItem {
                protocol: Protocol::Responses,
                item: foreign.clone(),
            }]
        );
        let names: Vec<&str> = reply.tool_calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["lookup", "unknown"]);
        // Without a turn's tools (a test's answer), every call is the loop's.
        assert_eq!(parse_response(answer()).unwrap().tool_calls.len(), 3);
        // Streamed, it is told as soon as it is done.
        let (sink, mut deltas) = tokio::sync::mpsc::unbounded_channel();
        let mut stream = Stream {
            finished: None,
            offered,
        };
        let event =
            json!({"type": "response.output_item.done", "output_index": 0, "item": foreign});
        assert!(stream
            .event(
                serde_json::from_value(event).unwrap(),
                Some(&sink),
                usize::MAX
            )
            .unwrap());
        assert_eq!(
            deltas.try_recv().ok(),
            Some(Delta::Native(NativeItem {
                protocol: Protocol::Responses,
                item: foreign,
            }))
        );
    }
}
