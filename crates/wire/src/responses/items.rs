//! Conversation items of the Responses API, input and output alike, and the
//! content parts of a message.
//!
//! One enum, [`Item`], tagged by `type`. What a client replays is read
//! tolerantly, as the SDKs write it and as shellgate wrote it: `id`,
//! `status` and `call_id` may be missing (a legacy `local_shell_call_output`
//! names its call by `id`), `exit_code` may be `null`, and keys this module
//! does not name are kept in each item's `extra` map, so a replayed item goes
//! back to the upstream (and into the store) with everything it had. An item
//! of a `type` shellgate does not know (`item_reference`, `compaction`, ...)
//! is kept whole as [`Item::Other`]: the loop skips it, the store keeps it.
//! A message without a `type` but with a `role` is a message (the SDKs'
//! `EasyInputMessage`).
//!
//! Fields the server always writes (`timeout_ms: null` in a shell call's
//! action, an `openrouter:bash` item's `output: null` while it runs) are
//! always serialized; fields a client may leave out are omitted when absent.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// Keys an item or part carries beyond those named (kept, passed along).
pub type Extra = Map<String, Value>;

/// The `status` of an item.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ItemStatus {
    InProgress,
    Completed,
    Incomplete,
}

/// Who speaks a message.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
    System,
    Developer,
}

/// A conversation item (`input[i]`, `output[i]`, a stored conversation's).
#[derive(Debug, Clone, PartialEq, utoipa::ToSchema)]
pub enum Item {
    /// `message`.
    Message(Message),
    /// `function_call`: a call of a user's function, answered by the client.
    FunctionCall(FunctionCall),
    /// `function_call_output`.
    FunctionCallOutput(FunctionCallOutput),
    /// `shell_call`: hosted (run here) or `local` (handed back).
    ShellCall(ShellCall),
    /// `shell_call_output`.
    ShellCallOutput(ShellCallOutput),
    /// `local_shell_call` (the legacy `local_shell` tool).
    LocalShellCall(LocalShellCall),
    /// `local_shell_call_output`.
    LocalShellCallOutput(LocalShellCallOutput),
    /// `reasoning`: kept in the conversation, meaningless to other models.
    Reasoning(Reasoning),
    /// `custom_tool_call`.
    CustomToolCall(CustomToolCall),
    /// `custom_tool_call_output`.
    CustomToolCallOutput(CustomToolCallOutput),
    /// `openrouter:shell`: OpenRouter's call and result in one item.
    OpenRouterShell(OpenRouterShell),
    /// `openrouter:bash`: OpenRouter's bash call and result in one item.
    OpenRouterBash(OpenRouterBash),
    /// `code_interpreter_call`: code the `code_interpreter` tool ran, and
    /// its outputs, in one item.
    CodeInterpreterCall(CodeInterpreterCall),
    /// `code_execution_call`: a call of a sub-tool of Anthropic's code
    /// execution (`bash_code_execution`, `text_editor_code_execution`) and
    /// its result, in one item (the Messages API's).
    CodeExecutionCall(CodeExecutionCall),
    /// An item of another `type`, kept whole (its `type` included).
    #[schema(value_type = Object)]
    Other(Extra),
}

/// The `type` tag of each known [`Item`] variant.
pub mod item_type {
    pub const MESSAGE: &str = "message";
    pub const FUNCTION_CALL: &str = "function_call";
    pub const FUNCTION_CALL_OUTPUT: &str = "function_call_output";
    pub const SHELL_CALL: &str = "shell_call";
    pub const SHELL_CALL_OUTPUT: &str = "shell_call_output";
    pub const LOCAL_SHELL_CALL: &str = "local_shell_call";
    pub const LOCAL_SHELL_CALL_OUTPUT: &str = "local_shell_call_output";
    pub const REASONING: &str = "reasoning";
    pub const CUSTOM_TOOL_CALL: &str = "custom_tool_call";
    pub const CUSTOM_TOOL_CALL_OUTPUT: &str = "custom_tool_call_output";
    pub const OPENROUTER_SHELL: &str = "openrouter:shell";
    pub const OPENROUTER_BASH: &str = "openrouter:bash";
    pub const CODE_INTERPRETER_CALL: &str = "code_interpreter_call";
    pub const CODE_EXECUTION_CALL: &str = "code_execution_call";
}

impl Item {
    /// The item's `type`.
    pub fn kind(&self) -> &str {
        use item_type::*;
        match self {
            Item::Message(_) => MESSAGE,
            Item::FunctionCall(_) => FUNCTION_CALL,
            Item::FunctionCallOutput(_) => FUNCTION_CALL_OUTPUT,
            Item::ShellCall(_) => SHELL_CALL,
            Item::ShellCallOutput(_) => SHELL_CALL_OUTPUT,
            Item::LocalShellCall(_) => LOCAL_SHELL_CALL,
            Item::LocalShellCallOutput(_) => LOCAL_SHELL_CALL_OUTPUT,
            Item::Reasoning(_) => REASONING,
            Item::CustomToolCall(_) => CUSTOM_TOOL_CALL,
            Item::CustomToolCallOutput(_) => CUSTOM_TOOL_CALL_OUTPUT,
            Item::OpenRouterShell(_) => OPENROUTER_SHELL,
            Item::OpenRouterBash(_) => OPENROUTER_BASH,
            Item::CodeInterpreterCall(_) => CODE_INTERPRETER_CALL,
            Item::CodeExecutionCall(_) => CODE_EXECUTION_CALL,
            Item::Other(map) => map.get("type").and_then(Value::as_str).unwrap_or(""),
        }
    }

    /// The item's `id`, if it has one.
    pub fn id(&self) -> Option<&str> {
        match self {
            Item::Message(i) => i.id.as_deref(),
            Item::FunctionCall(i) => i.id.as_deref(),
            Item::FunctionCallOutput(i) => i.id.as_deref(),
            Item::ShellCall(i) => i.id.as_deref(),
            Item::ShellCallOutput(i) => i.id.as_deref(),
            Item::LocalShellCall(i) => i.id.as_deref(),
            Item::LocalShellCallOutput(i) => i.id.as_deref(),
            Item::Reasoning(i) => i.id.as_deref(),
            Item::CustomToolCall(i) => i.id.as_deref(),
            Item::CustomToolCallOutput(i) => i.id.as_deref(),
            Item::OpenRouterShell(i) => i.id.as_deref(),
            Item::OpenRouterBash(i) => i.id.as_deref(),
            Item::CodeInterpreterCall(i) => i.id.as_deref(),
            Item::CodeExecutionCall(i) => i.id.as_deref(),
            Item::Other(map) => map.get("id").and_then(Value::as_str),
        }
    }

    /// Gives the item `id` if it has none (input items get one when stored).
    pub fn ensure_id(&mut self, id: impl FnOnce() -> String) {
        let slot = match self {
            Item::Message(i) => &mut i.id,
            Item::FunctionCall(i) => &mut i.id,
            Item::FunctionCallOutput(i) => &mut i.id,
            Item::ShellCall(i) => &mut i.id,
            Item::ShellCallOutput(i) => &mut i.id,
            Item::LocalShellCall(i) => &mut i.id,
            Item::LocalShellCallOutput(i) => &mut i.id,
            Item::Reasoning(i) => &mut i.id,
            Item::CustomToolCall(i) => &mut i.id,
            Item::CustomToolCallOutput(i) => &mut i.id,
            Item::OpenRouterShell(i) => &mut i.id,
            Item::OpenRouterBash(i) => &mut i.id,
            Item::CodeInterpreterCall(i) => &mut i.id,
            Item::CodeExecutionCall(i) => &mut i.id,
            Item::Other(map) => {
                map.entry("id").or_insert_with(|| Value::String(id()));
                return;
            }
        };
        if slot.is_none() {
            *slot = Some(id());
        }
    }

    /// Sets the item's `status` (an item without that field keeps it
    /// among its other keys, as the API writes it for every item).
    pub fn set_status(&mut self, status: ItemStatus) {
        let slot = match self {
            Item::Message(i) => &mut i.status,
            Item::FunctionCall(i) => &mut i.status,
            Item::FunctionCallOutput(i) => &mut i.status,
            Item::ShellCall(i) => &mut i.status,
            Item::ShellCallOutput(i) => &mut i.status,
            Item::LocalShellCall(i) => &mut i.status,
            Item::LocalShellCallOutput(i) => &mut i.status,
            Item::OpenRouterShell(i) => &mut i.status,
            Item::OpenRouterBash(i) => &mut i.status,
            Item::CodeExecutionCall(i) => &mut i.status,
            Item::Reasoning(i) => &mut i.status,
            Item::CodeInterpreterCall(i) => {
                i.status = Some(status.into());
                return;
            }
            Item::CustomToolCall(CustomToolCall { extra, .. })
            | Item::CustomToolCallOutput(CustomToolCallOutput { extra, .. })
            | Item::Other(extra) => {
                let value = serde_json::to_value(status).unwrap_or(Value::Null);
                extra.insert("status".to_owned(), value);
                return;
            }
        };
        *slot = Some(status);
    }

    /// The container an OpenRouter item ran in, or a `shell_call`'s
    /// referenced container.
    pub fn container_id(&self) -> Option<&str> {
        match self {
            Item::OpenRouterShell(i) => i.container_id.as_deref(),
            Item::OpenRouterBash(i) => i.container_id.as_deref(),
            Item::CodeInterpreterCall(i) => i.container_id.as_deref(),
            Item::CodeExecutionCall(i) => i.container_id.as_deref(),
            Item::ShellCall(ShellCall {
                environment: Some(CallEnvironment::ContainerReference { container_id }),
                ..
            }) => Some(container_id),
            _ => None,
        }
    }

    /// A user message of one text part.
    pub fn user_text(text: impl Into<String>) -> Self {
        Item::Message(Message {
            id: None,
            role: Role::User,
            status: None,
            content: MessageContent::Parts(vec![ContentPart::InputText(InputText {
                text: text.into(),
                extra: Extra::new(),
            })]),
            extra: Extra::new(),
        })
    }
}

/// The borrowed, tagged form [`Item`] serializes through.
#[derive(Serialize)]
#[serde(tag = "type")]
enum TaggedItem<'a> {
    #[serde(rename = "message")]
    Message(&'a Message),
    #[serde(rename = "function_call")]
    FunctionCall(&'a FunctionCall),
    #[serde(rename = "function_call_output")]
    FunctionCallOutput(&'a FunctionCallOutput),
    #[serde(rename = "shell_call")]
    ShellCall(&'a ShellCall),
    #[serde(rename = "shell_call_output")]
    ShellCallOutput(&'a ShellCallOutput),
    #[serde(rename = "local_shell_call")]
    LocalShellCall(&'a LocalShellCall),
    #[serde(rename = "local_shell_call_output")]
    LocalShellCallOutput(&'a LocalShellCallOutput),
    #[serde(rename = "reasoning")]
    Reasoning(&'a Reasoning),
    #[serde(rename = "custom_tool_call")]
    CustomToolCall(&'a CustomToolCall),
    #[serde(rename = "custom_tool_call_output")]
    CustomToolCallOutput(&'a CustomToolCallOutput),
    #[serde(rename = "openrouter:shell")]
    OpenRouterShell(&'a OpenRouterShell),
    #[serde(rename = "openrouter:bash")]
    OpenRouterBash(&'a OpenRouterBash),
    #[serde(rename = "code_interpreter_call")]
    CodeInterpreterCall(&'a CodeInterpreterCall),
    #[serde(rename = "code_execution_call")]
    CodeExecutionCall(&'a CodeExecutionCall),
}

impl Serialize for Item {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let tagged = match self {
            Item::Message(i) => TaggedItem::Message(i),
            Item::FunctionCall(i) => TaggedItem::FunctionCall(i),
            Item::FunctionCallOutput(i) => TaggedItem::FunctionCallOutput(i),
            Item::ShellCall(i) => TaggedItem::ShellCall(i),
            Item::ShellCallOutput(i) => TaggedItem::ShellCallOutput(i),
            Item::LocalShellCall(i) => TaggedItem::LocalShellCall(i),
            Item::LocalShellCallOutput(i) => TaggedItem::LocalShellCallOutput(i),
            Item::Reasoning(i) => TaggedItem::Reasoning(i),
            Item::CustomToolCall(i) => TaggedItem::CustomToolCall(i),
            Item::CustomToolCallOutput(i) => TaggedItem::CustomToolCallOutput(i),
            Item::OpenRouterShell(i) => TaggedItem::OpenRouterShell(i),
            Item::OpenRouterBash(i) => TaggedItem::OpenRouterBash(i),
            Item::CodeInterpreterCall(i) => TaggedItem::CodeInterpreterCall(i),
            Item::CodeExecutionCall(i) => TaggedItem::CodeExecutionCall(i),
            Item::Other(map) => return map.serialize(serializer),
        };
        tagged.serialize(serializer)
    }
}

/// Reads a tagged object: its `type` picks the struct; the rest is that
/// struct's (a wrong field's error names the field).
pub(crate) fn variant<T: serde::de::DeserializeOwned, E: serde::de::Error>(
    map: Extra,
) -> Result<T, E> {
    super::nested("", Value::Object(map))
}

impl<'de> Deserialize<'de> for Item {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use item_type::*;
        let Value::Object(mut map) = Value::deserialize(deserializer)? else {
            return Err(super::custom("", "each input item must be an object"));
        };
        let kind = match map.get("type") {
            Some(Value::String(kind)) => kind.clone(),
            // The SDKs' EasyInputMessage: a role and content, no type.
            None | Some(Value::Null) if map.contains_key("role") => MESSAGE.to_owned(),
            None | Some(Value::Null) => {
                return Err(super::custom(
                    "type",
                    "each input item needs a 'type' (or a 'role', for a message)",
                ))
            }
            Some(_) => return Err(super::custom("type", "an item's type must be a string")),
        };
        let known = [
            MESSAGE,
            FUNCTION_CALL,
            FUNCTION_CALL_OUTPUT,
            SHELL_CALL,
            SHELL_CALL_OUTPUT,
            LOCAL_SHELL_CALL,
            LOCAL_SHELL_CALL_OUTPUT,
            REASONING,
            CUSTOM_TOOL_CALL,
            CUSTOM_TOOL_CALL_OUTPUT,
            OPENROUTER_SHELL,
            OPENROUTER_BASH,
            CODE_INTERPRETER_CALL,
            CODE_EXECUTION_CALL,
        ];
        if !known.contains(&kind.as_str()) {
            return Ok(Item::Other(map));
        }
        map.remove("type");
        Ok(match kind.as_str() {
            MESSAGE => Item::Message(variant(map)?),
            FUNCTION_CALL => Item::FunctionCall(variant(map)?),
            FUNCTION_CALL_OUTPUT => Item::FunctionCallOutput(variant(map)?),
            SHELL_CALL => Item::ShellCall(variant(map)?),
            SHELL_CALL_OUTPUT => Item::ShellCallOutput(variant(map)?),
            LOCAL_SHELL_CALL => Item::LocalShellCall(variant(map)?),
            LOCAL_SHELL_CALL_OUTPUT => Item::LocalShellCallOutput(variant(map)?),
            REASONING => Item::Reasoning(variant(map)?),
            CUSTOM_TOOL_CALL => Item::CustomToolCall(variant(map)?),
            CUSTOM_TOOL_CALL_OUTPUT => Item::CustomToolCallOutput(variant(map)?),
            OPENROUTER_SHELL => Item::OpenRouterShell(variant(map)?),
            CODE_INTERPRETER_CALL => Item::CodeInterpreterCall(variant(map)?),
            CODE_EXECUTION_CALL => Item::CodeExecutionCall(variant(map)?),
            _ => Item::OpenRouterBash(variant(map)?),
        })
    }
}

/// A `message` item.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct Message {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ItemStatus>,
    pub content: MessageContent,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// A message's `content`: a string (input shorthand) or parts.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

impl<'de> Deserialize<'de> for MessageContent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::String(text) => Ok(MessageContent::Text(text)),
            Value::Array(parts) => Ok(MessageContent::Parts(super::nested_list(parts)?)),
            _ => Err(super::custom(
                "",
                "content must be a string or an array of content parts",
            )),
        }
    }
}

impl MessageContent {
    /// The parts (a string is one text part: `output_text` for the
    /// assistant, `input_text` for anyone else).
    pub fn into_parts(self, role: Role) -> Vec<ContentPart> {
        match self {
            MessageContent::Parts(parts) => parts,
            MessageContent::Text(text) if role == Role::Assistant => {
                vec![ContentPart::OutputText(OutputText {
                    text,
                    annotations: None,
                    extra: Extra::new(),
                })]
            }
            MessageContent::Text(text) => vec![ContentPart::InputText(InputText {
                text,
                extra: Extra::new(),
            })],
        }
    }
}

/// A content part of a message (or of a function call's output).
#[derive(Debug, Clone, PartialEq, utoipa::ToSchema)]
pub enum ContentPart {
    /// `input_text`.
    InputText(InputText),
    /// `output_text`.
    OutputText(OutputText),
    /// `refusal`.
    Refusal(Refusal),
    /// `input_image`.
    InputImage(InputImage),
    /// `input_file`.
    InputFile(InputFile),
    /// A part of another `type` (`text`, `input_audio`, ...), kept whole.
    #[schema(value_type = Object)]
    Other(Extra),
}

#[derive(Serialize)]
#[serde(tag = "type")]
enum TaggedPart<'a> {
    #[serde(rename = "input_text")]
    InputText(&'a InputText),
    #[serde(rename = "output_text")]
    OutputText(&'a OutputText),
    #[serde(rename = "refusal")]
    Refusal(&'a Refusal),
    #[serde(rename = "input_image")]
    InputImage(&'a InputImage),
    #[serde(rename = "input_file")]
    InputFile(&'a InputFile),
}

impl Serialize for ContentPart {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let tagged = match self {
            ContentPart::InputText(p) => TaggedPart::InputText(p),
            ContentPart::OutputText(p) => TaggedPart::OutputText(p),
            ContentPart::Refusal(p) => TaggedPart::Refusal(p),
            ContentPart::InputImage(p) => TaggedPart::InputImage(p),
            ContentPart::InputFile(p) => TaggedPart::InputFile(p),
            ContentPart::Other(map) => return map.serialize(serializer),
        };
        tagged.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ContentPart {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let Value::Object(mut map) = Value::deserialize(deserializer)? else {
            return Err(super::custom("", "each content part must be an object"));
        };
        let kind = match map.get("type") {
            Some(Value::String(kind)) => kind.clone(),
            _ => return Err(super::custom("type", "each content part needs a 'type'")),
        };
        let known = [
            "input_text",
            "output_text",
            "refusal",
            "input_image",
            "input_file",
        ];
        if !known.contains(&kind.as_str()) {
            return Ok(ContentPart::Other(map));
        }
        map.remove("type");
        Ok(match kind.as_str() {
            "input_text" => ContentPart::InputText(variant(map)?),
            "output_text" => ContentPart::OutputText(variant(map)?),
            "refusal" => ContentPart::Refusal(variant(map)?),
            "input_image" => ContentPart::InputImage(variant(map)?),
            _ => ContentPart::InputFile(variant(map)?),
        })
    }
}

/// `input_text`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct InputText {
    pub text: String,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `output_text` (the model's text has `annotations: []`; a client's
/// string content made into a part has none).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct OutputText {
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub annotations: Option<Vec<Annotation>>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

impl OutputText {
    /// A model's text as the API answers it: with its annotations and
    /// `logprobs`, which the API reference (and the Open Responses
    /// specification) require on every `output_text` part, empty as no
    /// log probabilities are asked of the upstream.
    pub fn answer(text: String, annotations: Vec<Annotation>) -> Self {
        let mut extra = Extra::new();
        extra.insert("logprobs".to_owned(), Value::Array(Vec::new()));
        OutputText {
            text,
            annotations: Some(annotations),
            extra,
        }
    }
}

/// `refusal`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct Refusal {
    pub refusal: String,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `input_image` (the model is told one was attached; it is not shown).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct InputImage {
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `input_file`: a Files API `file_id`, or inline `file_data` (a data URL).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct InputFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `function_call`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct FunctionCall {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    pub name: String,
    /// The `namespace` tool the function belongs to (Codex's groups).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub arguments: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ItemStatus>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// A tool's output: text, or content parts.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(untagged)]
pub enum ToolOutput {
    Text(String),
    Parts(Vec<ContentPart>),
}

impl<'de> Deserialize<'de> for ToolOutput {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::String(text) => Ok(ToolOutput::Text(text)),
            Value::Array(parts) => Ok(ToolOutput::Parts(super::nested_list(parts)?)),
            _ => Err(super::custom(
                "",
                "output must be a string or an array of content parts",
            )),
        }
    }
}

/// `function_call_output`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct FunctionCallOutput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    pub output: ToolOutput,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ItemStatus>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// Where a `shell_call` ran: `local` (the client) or a container.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum CallEnvironment {
    Local,
    ContainerReference { container_id: String },
}

/// A `shell_call`'s `action` (`timeout_ms` and `max_output_length`
/// always written, `null` when unknown).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ShellAction {
    #[serde(default)]
    pub commands: Vec<String>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub max_output_length: Option<u64>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `shell_call`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ShellCall {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    pub action: ShellAction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ItemStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<CallEnvironment>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// How a command ended (`exit_code` may be `null` in a replayed item;
/// keys a client added are kept: the model reads the outcome as JSON).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ShellOutcome {
    Exit {
        exit_code: Option<i64>,
        #[serde(flatten)]
        #[schema(value_type = Object)]
        extra: Extra,
    },
    Timeout {
        #[serde(flatten)]
        #[schema(value_type = Object)]
        extra: Extra,
    },
}

impl ShellOutcome {
    /// An exit with `code`.
    pub fn exit(code: i64) -> Self {
        ShellOutcome::Exit {
            exit_code: Some(code),
            extra: Extra::new(),
        }
    }

    /// A timeout.
    pub fn timeout() -> Self {
        ShellOutcome::Timeout {
            extra: Extra::new(),
        }
    }
}

fn empty_text() -> TextOrJson {
    TextOrJson::Text(String::new())
}

/// One command's result in a shell call's output. A replayed result's
/// `stdout` or `stderr` that is not a string is kept (the model reads it
/// as JSON), as are keys a client added.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ShellResult {
    #[serde(default = "empty_text")]
    pub stdout: TextOrJson,
    #[serde(default = "empty_text")]
    pub stderr: TextOrJson,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<ShellOutcome>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

impl From<&crate::exec::ShellOutputEntry> for ShellResult {
    fn from(entry: &crate::exec::ShellOutputEntry) -> Self {
        ShellResult {
            stdout: TextOrJson::Text(entry.stdout.clone()),
            stderr: TextOrJson::Text(entry.stderr.clone()),
            outcome: Some(match entry.outcome {
                crate::outcome::Outcome::Exit { exit_code } => {
                    ShellOutcome::exit(i64::from(exit_code))
                }
                crate::outcome::Outcome::Timeout => ShellOutcome::timeout(),
            }),
            extra: Extra::new(),
        }
    }
}

/// `shell_call_output`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ShellCallOutput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ItemStatus>,
    #[serde(default)]
    pub output: Vec<ShellResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_length: Option<u64>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// The only `local_shell_call` action.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LocalShellActionType {
    #[default]
    Exec,
}

/// A `local_shell_call`'s `action` (every key always written).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct LocalShellAction {
    #[serde(rename = "type", default)]
    pub kind: LocalShellActionType,
    #[serde(default)]
    pub command: Vec<String>,
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub working_directory: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `local_shell_call`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct LocalShellCall {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    pub action: LocalShellAction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ItemStatus>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// Text, or any JSON a client put there (told to the model as JSON).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
#[serde(untagged)]
pub enum TextOrJson {
    Text(String),
    #[schema(value_type = Object)]
    Json(Value),
}

/// `local_shell_call_output` (a legacy one names its call by `id`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct LocalShellCallOutput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<TextOrJson>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ItemStatus>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `reasoning`: a model's reasoning, as a Responses upstream returned it
/// and a client replays it (Codex sends it back with its
/// `encrypted_content`, `content: null`). Another protocol's sealed
/// reasoning (an Anthropic model's thinking, through the Responses API)
/// rides in `encrypted_content` too, under a prefix naming it (the model
/// crate's `reasoning` module).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct Reasoning {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Always written, as the API does (`[]` when there is none).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub summary: Vec<ReasoningText>,
    /// The reasoning's own text, where the upstream shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<ReasoningText>>,
    /// The sealed reasoning (OpenAI's, asked for with
    /// `include: ["reasoning.encrypted_content"]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ItemStatus>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// A part of a reasoning's `summary` (`summary_text`) or `content`
/// (`reasoning_text`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ReasoningText {
    /// `summary_text` or `reasoning_text`, as given.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: String,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

impl ReasoningText {
    /// The `type` of a summary's part.
    pub const SUMMARY: &'static str = "summary_text";
    /// The `type` of a content part.
    pub const CONTENT: &'static str = "reasoning_text";

    /// A part of `kind` holding `text`.
    pub fn new(kind: &str, text: impl Into<String>) -> Self {
        ReasoningText {
            kind: kind.to_owned(),
            text: text.into(),
            extra: Extra::new(),
        }
    }
}

/// A list that may be written `null` (read as empty).
fn null_as_empty<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Vec<T>, D::Error> {
    Ok(Option::<Vec<T>>::deserialize(deserializer)?.unwrap_or_default())
}

/// `custom_tool_call`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct CustomToolCall {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    pub name: String,
    /// The `namespace` tool the custom tool belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub input: String,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `custom_tool_call_output`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct CustomToolCallOutput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    pub output: ToolOutput,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `openrouter:shell`'s `action`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct OpenRouterShellAction {
    #[serde(default)]
    pub commands: Vec<String>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `openrouter:shell`: the container, the commands, each one's result.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct OpenRouterShell {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    pub action: OpenRouterShellAction,
    #[serde(default)]
    pub output: Vec<ShellResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ItemStatus>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `openrouter:bash`'s `action` (`restart` always written).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct OpenRouterBashAction {
    #[serde(default)]
    pub command: String,
    #[serde(default)]
    pub restart: bool,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `openrouter:bash`: the container, the command, its result (`null`
/// while it runs).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct OpenRouterBash {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    pub action: OpenRouterBashAction,
    #[serde(default)]
    pub output: Option<ShellResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ItemStatus>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `code_execution_call`: a code execution sub-tool's call (its name and
/// input, as the model gave them) and its result (`null` while it runs).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct CodeExecutionCall {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    /// `bash_code_execution` or `text_editor_code_execution`.
    pub name: String,
    #[serde(default)]
    #[schema(value_type = Object)]
    pub input: Extra,
    #[serde(default)]
    pub result: Option<crate::code_execution::CodeExecutionResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ItemStatus>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// An annotation of an `output_text` part: a `container_file_citation`
/// (a file the code interpreter wrote), or another kind kept whole.
#[derive(Debug, Clone, PartialEq, utoipa::ToSchema)]
pub enum Annotation {
    /// `container_file_citation`.
    ContainerFileCitation(ContainerFileCitation),
    /// An annotation of another `type` (`url_citation`, `file_citation`,
    /// ...), kept whole.
    #[schema(value_type = Object)]
    Other(Extra),
}

impl Serialize for Annotation {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(tag = "type", rename_all = "snake_case")]
        enum Tagged<'a> {
            ContainerFileCitation(&'a ContainerFileCitation),
        }
        match self {
            Annotation::ContainerFileCitation(c) => {
                Tagged::ContainerFileCitation(c).serialize(serializer)
            }
            Annotation::Other(map) => map.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for Annotation {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut map = Extra::deserialize(deserializer)?;
        if map.get("type").and_then(Value::as_str) != Some(ContainerFileCitation::TYPE) {
            return Ok(Annotation::Other(map));
        }
        map.remove("type");
        Ok(Annotation::ContainerFileCitation(variant(map)?))
    }
}

/// `container_file_citation`: a file of a container, cited by the text
/// between `start_index` and `end_index` (character offsets).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ContainerFileCitation {
    pub container_id: String,
    pub file_id: String,
    pub filename: String,
    pub start_index: u64,
    pub end_index: u64,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

impl ContainerFileCitation {
    /// Its `type`.
    pub const TYPE: &'static str = "container_file_citation";
}

/// The `status` of a `code_interpreter_call`: an item's, and
/// `interpreting` (its code is running) and `failed`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CodeInterpreterStatus {
    InProgress,
    Interpreting,
    Completed,
    Incomplete,
    Failed,
}

impl From<ItemStatus> for CodeInterpreterStatus {
    fn from(status: ItemStatus) -> Self {
        match status {
            ItemStatus::InProgress => CodeInterpreterStatus::InProgress,
            ItemStatus::Completed => CodeInterpreterStatus::Completed,
            ItemStatus::Incomplete => CodeInterpreterStatus::Incomplete,
        }
    }
}

/// An output of a `code_interpreter_call`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum CodeInterpreterOutput {
    /// What the code printed (stdout, stderr, its result's text, its error).
    Logs {
        logs: String,
        #[serde(flatten)]
        #[schema(value_type = Object)]
        extra: Extra,
    },
    /// An image it showed: a `data:image/png;base64,...` URL.
    Image {
        url: String,
        #[serde(flatten)]
        #[schema(value_type = Object)]
        extra: Extra,
    },
}

/// `code_interpreter_call`: the code, the container it ran in, its outputs
/// (`null` until it ran).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct CodeInterpreterCall {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default)]
    pub code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    #[serde(default)]
    pub outputs: Option<Vec<CodeInterpreterOutput>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<CodeInterpreterStatus>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}
