//! `POST /v1/messages`'s request: [`CreateMessage`], its messages, tools,
//! `tool_choice`, `thinking` and `output_config`; and
//! `POST /v1/messages/count_tokens`'s ([`CountTokens`]).
//!
//! One rule for the top-level fields, decided here, as the Responses side
//! does: a field of [`CreateMessage`] is *consumed* (typed; a wrong type is
//! a 400 naming it); a field the `anthropic` SDK's `MessageCreateParams`
//! (and its beta's) has that shellgate does not act on is *carried*
//! ([`CARRIED`], kept as given in `carried`, for an Anthropic upstream);
//! any other key is *refused* ([`CreateMessage::read`]: a 400 naming it,
//! "Extra inputs are not permitted", as Anthropic's API answers). Inside a
//! block or a tool, keys not typed are carried in `extra`.

use serde::de::Deserializer;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::blocks::{ContentBlock, Extra, Raw, TextOrBlocks};
use crate::param::{unknown_type, ParamError, Tagged};
pub use crate::responses::{OpenRouterParameters, OpenRouterTool};

/// Fields of the SDK's `MessageCreateParams` (and the beta's) that are
/// accepted and carried as given to an Anthropic upstream, not acted on.
/// (`betas` is not here: the SDK sends it as the `anthropic-beta` header.)
pub const CARRIED: &[&str] = &[
    "billing_policy",
    "cache_control",
    "compaction",
    "container",
    "context_management",
    "diagnostics",
    "fallback_credit_token",
    "fallbacks",
    "inference_geo",
    "mcp_servers",
    "speed",
    "thread",
    "user_profile_id",
    "workspace_id",
];

/// The message for a key that is neither consumed nor carried, Anthropic's
/// own words.
const EXTRA_INPUT: &str = "Extra inputs are not permitted";

/// The first of `carried`'s keys that `allowed` does not list, as the
/// error a request with it is.
fn refuse(carried: &Map<String, Value>, allowed: &[&str]) -> Result<(), ParamError> {
    match carried.keys().find(|key| !allowed.contains(&key.as_str())) {
        Some(key) => Err(ParamError {
            param: key.clone(),
            message: EXTRA_INPUT.to_owned(),
        }),
        None => Ok(()),
    }
}

/// The body of `POST /v1/messages`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CreateMessage {
    pub model: String,
    pub max_tokens: u32,
    pub messages: Vec<MessageParam>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<TextOrBlocks>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Tool>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Metadata>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_sequences: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_tier: Option<ServiceTier>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<ThinkingConfig>,
    /// The answer's effort and format (structured output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_config: Option<OutputConfig>,
    /// OpenRouter's stable session id: requests of one session share a
    /// container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Every other key: [`CARRIED`] ones are kept, others refused by
    /// [`CreateMessage::read`].
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub carried: Map<String, Value>,
}

impl CreateMessage {
    /// Reads a request body: a wrong type is an error naming its param, and
    /// so is a key neither consumed nor [`CARRIED`].
    pub fn read(body: &Value) -> Result<Self, ParamError> {
        let request: Self = crate::param::parse(body)?;
        refuse(&request.carried, CARRIED)?;
        Ok(request)
    }

    /// Its `container` (carried as given: Anthropic's, unless shellgate
    /// runs the code execution it is for), read; a malformed one is an
    /// error naming it.
    pub fn container(&self) -> Result<Option<ContainerParam>, ParamError> {
        self.carried
            .get("container")
            .map(|value| {
                crate::param::parse(value).map_err(|e| ParamError {
                    param: format!("container{}", e.param),
                    message: e.message,
                })
            })
            .transpose()
    }
}

/// Fields of the SDK's `MessageCountTokensParams` (and the beta's) that
/// are carried as given to an Anthropic upstream.
pub const COUNT_CARRIED: &[&str] = &[
    "billing_policy",
    "cache_control",
    "compaction",
    "context_management",
    "mcp_servers",
    "speed",
    "user_profile_id",
    "workspace_id",
];

/// The body of `POST /v1/messages/count_tokens`: a message's request
/// without what only generating needs (`max_tokens`, `stream`...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CountTokens {
    pub model: String,
    pub messages: Vec<MessageParam>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<TextOrBlocks>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Tool>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<ThinkingConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_config: Option<OutputConfig>,
    /// Every other key: [`COUNT_CARRIED`] ones are kept, others refused by
    /// [`CountTokens::read`].
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub carried: Map<String, Value>,
}

impl CountTokens {
    /// Reads a request body, as [`CreateMessage::read`] does.
    pub fn read(body: &Value) -> Result<Self, ParamError> {
        let request: Self = crate::param::parse(body)?;
        refuse(&request.carried, COUNT_CARRIED)?;
        Ok(request)
    }
}

/// The answer of `POST /v1/messages/count_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TokenCount {
    pub input_tokens: u64,
}

/// `output_config`: how hard the model works, and the shape of its text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct OutputConfig {
    /// `low`, `medium`, `high`, `xhigh` or `max` (kept as written: newer
    /// models add levels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<OutputFormat>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `output_config.format`: JSON matching a schema (structured output).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputFormat {
    JsonSchema {
        #[schema(value_type = Object)]
        schema: Map<String, Value>,
        #[serde(flatten)]
        #[schema(value_type = Object)]
        extra: Extra,
    },
}

/// One turn of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct MessageParam {
    pub role: Role,
    pub content: TextOrBlocks,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Metadata {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ServiceTier {
    Auto,
    StandardOnly,
}

/// Extended thinking (`display` and newer keys are kept in `extra`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ThinkingConfig {
    /// Thinking within a budget of tokens (part of `max_tokens`).
    Enabled {
        budget_tokens: u32,
        #[serde(flatten)]
        #[schema(value_type = Object)]
        extra: Extra,
    },
    Disabled {
        #[serde(flatten)]
        #[schema(value_type = Object)]
        extra: Extra,
    },
    /// The model decides when and how much to think.
    Adaptive {
        #[serde(flatten)]
        #[schema(value_type = Object)]
        extra: Extra,
    },
    /// Thinking only between tool calls.
    BetweenTools {
        #[serde(flatten)]
        #[schema(value_type = Object)]
        extra: Extra,
    },
}

/// How the model may use the tools.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    Auto(ParallelUse),
    /// The model must call one of the tools.
    Any(ParallelUse),
    /// The model must call the tool `name`.
    Tool {
        name: String,
        #[serde(flatten)]
        parallel: ParallelUse,
    },
    /// The model may not call tools.
    None {},
}

/// `disable_parallel_tool_use` of a `tool_choice`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ParallelUse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_parallel_tool_use: Option<bool>,
}

impl ToolChoice {
    /// Its `disable_parallel_tool_use`, if given.
    pub fn disable_parallel_tool_use(&self) -> Option<bool> {
        match self {
            ToolChoice::Auto(p) | ToolChoice::Any(p) | ToolChoice::Tool { parallel: p, .. } => {
                p.disable_parallel_tool_use
            }
            ToolChoice::None {} => None,
        }
    }
}

#[derive(Deserialize)]
struct NamedChoice {
    name: String,
    #[serde(flatten)]
    parallel: ParallelUse,
}

impl<'de> Deserialize<'de> for ToolChoice {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let choice = Tagged::deserialize(deserializer)?;
        let tag = choice.tag()?;
        Ok(match tag.as_deref() {
            Some("auto") => ToolChoice::Auto(choice.variant()?),
            Some("any") => ToolChoice::Any(choice.variant()?),
            Some("tool") => {
                let NamedChoice { name, parallel } = choice.variant()?;
                ToolChoice::Tool { name, parallel }
            }
            Some("none") => ToolChoice::None {},
            other => return Err(unknown_type(other, "'auto', 'any', 'tool' or 'none'")),
        })
    }
}

/// A tool of a request, by its `type`.
#[derive(Debug, Clone, PartialEq, ToSchema)]
pub enum Tool {
    /// A user's tool (no `type`, or `custom`): the model's calls come back
    /// as `tool_use`.
    Custom(CustomTool),
    /// Anthropic's bash tool (`bash_20250124`, any `bash_*`): run by the
    /// client.
    Bash(BashTool),
    /// Anthropic's text editor tool (`text_editor_20250728`, any
    /// `text_editor_*`): run by the client.
    TextEditor(TextEditorTool),
    /// `openrouter:shell`: run in the sandbox (the same shape as the
    /// Responses API's).
    OpenRouterShell(OpenRouterTool),
    /// `openrouter:bash`: run in the sandbox with `engine: openrouter`,
    /// else by the client.
    OpenRouterBash(OpenRouterTool),
    /// Anthropic's code execution (`code_execution_20250825`, any
    /// `code_execution_*`): run in the sandbox.
    CodeExecution(CodeExecutionTool),
    /// A tool of another `type`, whole (the handler refuses it).
    Unknown(Raw),
}

impl Tool {
    /// Its `type` (`None` for a user's tool without one).
    pub fn kind(&self) -> Option<&str> {
        match self {
            Tool::Custom(tool) => tool.kind.map(|_| "custom"),
            Tool::Bash(tool) => Some(&tool.kind),
            Tool::TextEditor(tool) => Some(&tool.kind),
            Tool::CodeExecution(tool) => Some(&tool.kind),
            Tool::OpenRouterShell(_) => Some(OPENROUTER_SHELL),
            Tool::OpenRouterBash(_) => Some(OPENROUTER_BASH),
            Tool::Unknown(raw) => Some(raw.kind()).filter(|kind| !kind.is_empty()),
        }
    }
}

impl Tool {
    /// Its `cache_control` marker, if any.
    pub fn cache_control(&self) -> Option<&Value> {
        match self {
            Tool::Custom(tool) => tool.extra.get(super::blocks::CACHE_CONTROL),
            Tool::Bash(tool) => tool.extra.get(super::blocks::CACHE_CONTROL),
            Tool::TextEditor(tool) => tool.extra.get(super::blocks::CACHE_CONTROL),
            Tool::CodeExecution(tool) => tool.extra.get(super::blocks::CACHE_CONTROL),
            Tool::Unknown(raw) => raw.0.get(super::blocks::CACHE_CONTROL),
            Tool::OpenRouterShell(_) | Tool::OpenRouterBash(_) => None,
        }
    }
}

impl CreateMessage {
    /// The last prompt-caching breakpoint of the request (on its tools,
    /// system blocks or messages' blocks, in the order the API caches
    /// them), if any.
    pub fn last_cache_control(&self) -> Option<&Value> {
        let tools = self.tools.iter().flatten().filter_map(Tool::cache_control);
        let system = self.system.iter().flat_map(markers);
        let messages = self.messages.iter().flat_map(|m| markers(&m.content));
        tools.chain(system).chain(messages).last()
    }
}

/// The `cache_control` markers of `content`'s blocks.
fn markers(content: &TextOrBlocks) -> Vec<&Value> {
    match content {
        TextOrBlocks::Text(_) => Vec::new(),
        TextOrBlocks::Blocks(blocks) => blocks
            .iter()
            .filter_map(ContentBlock::cache_control)
            .collect(),
    }
}

const OPENROUTER_SHELL: &str = "openrouter:shell";
const OPENROUTER_BASH: &str = "openrouter:bash";

/// The tagged form the OpenRouter tools serialize through (the others
/// carry their own `type`).
#[derive(Serialize)]
#[serde(tag = "type")]
enum TaggedTool<'a> {
    #[serde(rename = "openrouter:shell")]
    OpenRouterShell(&'a OpenRouterTool),
    #[serde(rename = "openrouter:bash")]
    OpenRouterBash(&'a OpenRouterTool),
}

impl Serialize for Tool {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Tool::Custom(tool) => tool.serialize(serializer),
            Tool::Bash(tool) => tool.serialize(serializer),
            Tool::TextEditor(tool) => tool.serialize(serializer),
            Tool::CodeExecution(tool) => tool.serialize(serializer),
            Tool::OpenRouterShell(tool) => TaggedTool::OpenRouterShell(tool).serialize(serializer),
            Tool::OpenRouterBash(tool) => TaggedTool::OpenRouterBash(tool).serialize(serializer),
            Tool::Unknown(raw) => raw.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for Tool {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let tool = Tagged::deserialize(deserializer)?;
        let tag = tool.tag()?;
        Ok(match tag.as_deref() {
            None | Some("custom") => Tool::Custom(tool.whole()?),
            Some(OPENROUTER_SHELL) => Tool::OpenRouterShell(tool.variant()?),
            Some(OPENROUTER_BASH) => Tool::OpenRouterBash(tool.variant()?),
            Some(kind) if kind.starts_with("bash_") => Tool::Bash(tool.whole()?),
            Some(kind) if kind.starts_with(TEXT_EDITOR_PREFIX) => Tool::TextEditor(tool.whole()?),
            Some(kind) if kind.starts_with(CODE_EXECUTION_PREFIX) => {
                Tool::CodeExecution(tool.whole()?)
            }
            Some(_) => Tool::Unknown(Raw(tool.object)),
        })
    }
}

/// A user's tool: its name, description and input's JSON schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CustomTool {
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<CustomKind>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The input's JSON schema.
    #[schema(value_type = Object)]
    pub input_schema: Map<String, Value>,
    /// Who may call it: `direct` (the model; the default) and code
    /// execution's code (`code_execution_20250825`, `_20260120`,
    /// `_20260521`: programmatic tool calling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_callers: Option<Vec<String>>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CustomKind {
    Custom,
}

/// Anthropic's bash tool (`{"type": "bash_20250124", "name": "bash"}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BashTool {
    /// `bash_` and a version date.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// The `type` prefix of Anthropic's text editor tools.
pub const TEXT_EDITOR_PREFIX: &str = "text_editor_";

/// The name Anthropic's text editor tool is called by (since
/// `text_editor_20250429`; `text_editor_20250124`'s is
/// `str_replace_editor`).
pub const TEXT_EDITOR_NAME: &str = "str_replace_based_edit_tool";

/// Anthropic's text editor tool (`{"type": "text_editor_20250728", "name":
/// "str_replace_based_edit_tool"}`): the model views and edits files on
/// the client's machine, the client runs each call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TextEditorTool {
    /// `text_editor_` and a version date.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Most characters of a file a `view` shows (`text_editor_20250728`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_characters: Option<u64>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

impl TextEditorTool {
    /// Whether this version has `undo_edit` (`text_editor_20250124`'s
    /// `str_replace_editor` does; later versions do not).
    pub fn has_undo(&self) -> bool {
        self.kind.as_str() <= "text_editor_20250124"
    }
}

/// The `type` prefix of Anthropic's code execution tools.
pub const CODE_EXECUTION_PREFIX: &str = "code_execution_";

/// Anthropic's code execution tool (`{"type": "code_execution_20250825",
/// "name": "code_execution"}`): the model runs commands and edits files in
/// a container the server keeps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CodeExecutionTool {
    /// `code_execution_` and a version date.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// A request's `container`: a container's id, or its id and skills.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ContainerParam {
    Id(String),
    Params(ContainerParams),
}

impl ContainerParam {
    /// The container's id, if the request names one.
    pub fn id(&self) -> Option<&str> {
        match self {
            ContainerParam::Id(id) => Some(id),
            ContainerParam::Params(params) => params.id.as_deref(),
        }
    }
}

/// `container` as an object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ContainerParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skills: Option<Vec<SkillParam>>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// A skill a container is to hold (`container.skills[i]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SkillParam {
    pub skill_id: String,
    /// `anthropic` or `custom`.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}
