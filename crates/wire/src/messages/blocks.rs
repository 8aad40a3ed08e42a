//! Content blocks: what a message of a request holds and what a response's
//! `content` is (one type for both: a client replays the blocks it got),
//! with OpenRouter's server tools' result blocks.
//!
//! Every block keeps the keys it does not type (`cache_control`,
//! `citations`, ...) in `extra`, so a replayed block round-trips whole; a
//! block of a `type` not listed here is kept raw as [`ContentBlock::Unknown`]
//! (an upstream may send new ones; the request handler refuses them).

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

pub use crate::code_execution::{
    BashOutputFile, BashOutputKind, BashResult, BashToolError, BashToolResultContent,
    CodeExecutionResult, CreateResult, PythonOutputFile, PythonOutputKind, PythonResult,
    PythonToolError, PythonToolResultContent, StrReplaceResult, TextEditorToolError,
    TextEditorToolResultContent, ViewResult,
};
use crate::param::{unknown_type, Tagged};
use crate::responses::ShellResult;

/// Keys of a block this crate does not type, kept as they came.
pub type Extra = Map<String, Value>;

/// The key of a prompt-caching breakpoint, on a block, a tool or the
/// request.
pub const CACHE_CONTROL: &str = "cache_control";

/// An object of a `type` this crate does not know, whole (its `type`
/// included).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(transparent)]
#[schema(value_type = Object)]
pub struct Raw(pub Map<String, Value>);

impl Raw {
    /// Its `type` (`""` if it has none).
    pub fn kind(&self) -> &str {
        self.0.get("type").and_then(Value::as_str).unwrap_or("")
    }
}

/// Whether a block of `kind` is one of Anthropic's server tools' (a call,
/// `server_tool_use` / `mcp_tool_use`, or a result, `*_tool_result`,
/// `container_upload`): the upstream runs them, a client replays them, and
/// only an Anthropic upstream reads them. No Responses item's `type` is one
/// of these, so a conversation item holding such a block is known by it.
pub fn is_server_tool_block(kind: &str) -> bool {
    matches!(
        kind,
        "server_tool_use" | "mcp_tool_use" | "container_upload"
    ) || kind.ends_with("_tool_result")
}

/// Whether `object` (an item kept whole) is a server tool's block
/// ([`is_server_tool_block`]).
pub fn holds_server_tool_block(object: &Map<String, Value>) -> bool {
    object
        .get("type")
        .and_then(Value::as_str)
        .is_some_and(is_server_tool_block)
}

/// A content block, by its `type`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text(TextBlock),
    Image(ImageBlock),
    Document(DocumentBlock),
    Thinking(ThinkingBlock),
    RedactedThinking(RedactedThinkingBlock),
    ToolUse(ToolUseBlock),
    ToolResult(ToolResultBlock),
    /// A server tool's call (OpenRouter's `shell`, `bash_code_execution`).
    ServerToolUse(ToolUseBlock),
    /// The result of an `openrouter:shell` call (a block the SDK does not
    /// know and keeps raw).
    OpenrouterShellToolResult(ShellToolResultBlock),
    /// The result of a `bash_code_execution` call.
    BashCodeExecutionToolResult(BashToolResultBlock),
    /// The result of a `text_editor_code_execution` call.
    TextEditorCodeExecutionToolResult(TextEditorToolResultBlock),
    /// The result of a `code_execution` (Python) call.
    CodeExecutionToolResult(PythonToolResultBlock),
    /// A Files API file to put into code execution's container.
    ContainerUpload(ContainerUploadBlock),
    /// A block of another `type`, whole (its `type` included).
    #[serde(untagged)]
    Unknown(Raw),
}

impl ContentBlock {
    /// Its `type`, as on the wire.
    pub fn kind(&self) -> &str {
        match self {
            ContentBlock::Text(_) => "text",
            ContentBlock::Image(_) => "image",
            ContentBlock::Document(_) => "document",
            ContentBlock::Thinking(_) => "thinking",
            ContentBlock::RedactedThinking(_) => "redacted_thinking",
            ContentBlock::ToolUse(_) => "tool_use",
            ContentBlock::ToolResult(_) => "tool_result",
            ContentBlock::ServerToolUse(_) => "server_tool_use",
            ContentBlock::OpenrouterShellToolResult(_) => "openrouter_shell_tool_result",
            ContentBlock::BashCodeExecutionToolResult(_) => "bash_code_execution_tool_result",
            ContentBlock::TextEditorCodeExecutionToolResult(_) => {
                "text_editor_code_execution_tool_result"
            }
            ContentBlock::CodeExecutionToolResult(_) => "code_execution_tool_result",
            ContentBlock::ContainerUpload(_) => "container_upload",
            ContentBlock::Unknown(raw) => raw.kind(),
        }
    }

    /// Its `cache_control` marker (a prompt-caching breakpoint), if any.
    pub fn cache_control(&self) -> Option<&Value> {
        let extra = match self {
            ContentBlock::Text(block) => &block.extra,
            ContentBlock::Image(block) => &block.extra,
            ContentBlock::Document(block) => &block.extra,
            ContentBlock::Thinking(block) => &block.extra,
            ContentBlock::RedactedThinking(block) => &block.extra,
            ContentBlock::ToolUse(block) | ContentBlock::ServerToolUse(block) => &block.extra,
            ContentBlock::ToolResult(block) => &block.extra,
            ContentBlock::OpenrouterShellToolResult(block) => &block.extra,
            ContentBlock::BashCodeExecutionToolResult(block) => &block.extra,
            ContentBlock::TextEditorCodeExecutionToolResult(block) => &block.extra,
            ContentBlock::CodeExecutionToolResult(block) => &block.extra,
            ContentBlock::ContainerUpload(block) => &block.extra,
            ContentBlock::Unknown(raw) => &raw.0,
        };
        extra.get(CACHE_CONTROL)
    }

    /// A text block of `text`.
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text(TextBlock {
            text: text.into(),
            extra: Extra::new(),
        })
    }
}

impl<'de> Deserialize<'de> for ContentBlock {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let block = Tagged::deserialize(deserializer)?;
        let tag = block.tag()?;
        Ok(match tag.as_deref() {
            Some("text") => ContentBlock::Text(block.variant()?),
            Some("image") => ContentBlock::Image(block.variant()?),
            Some("document") => ContentBlock::Document(block.variant()?),
            Some("thinking") => ContentBlock::Thinking(block.variant()?),
            Some("redacted_thinking") => ContentBlock::RedactedThinking(block.variant()?),
            Some("tool_use") => ContentBlock::ToolUse(block.variant()?),
            Some("tool_result") => ContentBlock::ToolResult(block.variant()?),
            Some("server_tool_use") => ContentBlock::ServerToolUse(block.variant()?),
            Some("openrouter_shell_tool_result") => {
                ContentBlock::OpenrouterShellToolResult(block.variant()?)
            }
            Some("bash_code_execution_tool_result") => {
                ContentBlock::BashCodeExecutionToolResult(block.variant()?)
            }
            Some("text_editor_code_execution_tool_result") => {
                ContentBlock::TextEditorCodeExecutionToolResult(block.variant()?)
            }
            Some("code_execution_tool_result") => {
                ContentBlock::CodeExecutionToolResult(block.variant()?)
            }
            Some("container_upload") => ContentBlock::ContainerUpload(block.variant()?),
            Some(_) => ContentBlock::Unknown(Raw(block.object)),
            None => return Err(unknown_type(None, "a content block type")),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TextBlock {
    pub text: String,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// An image (`base64`, `url` or `file` source).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ImageBlock {
    pub source: Source,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// A document (a PDF or plain text, by `base64`, `text`, `content`, `url`
/// or `file` source).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DocumentBlock {
    pub source: Source,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// Where an image's or a document's bytes are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Source {
    Base64 {
        media_type: String,
        data: String,
    },
    Url {
        url: String,
    },
    File {
        file_id: String,
    },
    /// A plain-text document.
    Text {
        media_type: String,
        data: String,
    },
    /// A document given as content blocks.
    Content {
        #[schema(no_recursion)]
        content: TextOrBlocks,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ThinkingBlock {
    pub thinking: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RedactedThinkingBlock {
    pub data: String,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// A tool call: the model's (`tool_use`) or a server tool's
/// (`server_tool_use`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolUseBlock {
    pub id: String,
    pub name: String,
    /// The call's arguments (a JSON object of the tool's schema).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub input: Map<String, Value>,
    /// Who made the call: the model (`direct`), or code running in code
    /// execution (programmatic tool calling: the code execution's version
    /// and its `server_tool_use`'s id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<ToolCaller>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// A `tool_use`'s `caller`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ToolCaller {
    /// `direct`, `code_execution_20250825` or `code_execution_20260120`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The `server_tool_use` whose code made the call (a code execution
    /// caller's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_id: Option<String>,
}

impl ToolCaller {
    /// The caller that is the model itself.
    pub const DIRECT: &'static str = "direct";

    /// Whether the call came from code (a code execution's caller).
    pub fn from_code(&self) -> bool {
        self.kind != Self::DIRECT
    }
}

/// The `input` of OpenRouter's `shell` server tool.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ShellToolInput {
    #[serde(default)]
    pub commands: Vec<String>,
}

/// The `input` of the `bash_code_execution` server tool: a command, or a
/// restart of the shell.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BashToolInput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<bool>,
}

impl ToolUseBlock {
    /// The `input` read as `T` (a server tool's own shape); `None` if it
    /// is not one.
    pub fn input_as<T: serde::de::DeserializeOwned>(&self) -> Option<T> {
        serde_json::from_value(Value::Object(self.input.clone())).ok()
    }
}

/// `input` for a block, from a server tool's typed input.
pub fn input_of<T: Serialize>(input: &T) -> Map<String, Value> {
    match serde_json::to_value(input) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

/// The client's answer to a `tool_use`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolResultBlock {
    pub tool_use_id: String,
    /// (`no_recursion`: blocks hold blocks; the schema refers back.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(no_recursion)]
    pub content: Option<TextOrBlocks>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// An `openrouter:shell` call's result: each command's output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ShellToolResultBlock {
    pub tool_use_id: String,
    #[serde(default)]
    pub container_id: Option<String>,
    /// Each command's result: the loop's own shape (the `output` of an
    /// `openrouter:shell` item), so a replayed block is the item it was.
    #[serde(default)]
    pub content: Vec<ShellResult>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// A `bash_code_execution` call's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BashToolResultBlock {
    pub tool_use_id: String,
    /// shellgate's container (a key the SDK keeps as an extra), given for
    /// `openrouter:bash`; Anthropic's code execution has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    pub content: BashToolResultContent,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// A `text_editor_code_execution` call's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TextEditorToolResultBlock {
    pub tool_use_id: String,
    pub content: TextEditorToolResultContent,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// A `code_execution` (Python) call's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PythonToolResultBlock {
    pub tool_use_id: String,
    pub content: PythonToolResultContent,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// A user's `container_upload`: the Files API file `file_id`, to be put
/// into the container's input directory for code execution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ContainerUploadBlock {
    pub file_id: String,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// A string, or an array of content blocks (`content` of a message or a
/// `tool_result`, a `system` prompt).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(untagged)]
pub enum TextOrBlocks {
    Text(String),
    Blocks(Vec<ContentBlock>),
}

impl TextOrBlocks {
    /// As blocks: a string is one text block.
    pub fn into_blocks(self) -> Vec<ContentBlock> {
        match self {
            TextOrBlocks::Text(text) => vec![ContentBlock::text(text)],
            TextOrBlocks::Blocks(blocks) => blocks,
        }
    }
}

impl<'de> Deserialize<'de> for TextOrBlocks {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // A visitor, not `untagged`: an error inside a block keeps its path.
        struct TextOrBlocksVisitor;
        impl<'de> Visitor<'de> for TextOrBlocksVisitor {
            type Value = TextOrBlocks;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string or an array of content blocks")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<TextOrBlocks, E> {
                Ok(TextOrBlocks::Text(text.to_owned()))
            }
            fn visit_string<E: de::Error>(self, text: String) -> Result<TextOrBlocks, E> {
                Ok(TextOrBlocks::Text(text))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<TextOrBlocks, A::Error> {
                let mut blocks = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
                while let Some(block) = seq.next_element()? {
                    blocks.push(block);
                }
                Ok(TextOrBlocks::Blocks(blocks))
            }
        }
        deserializer.deserialize_any(TextOrBlocksVisitor)
    }
}
