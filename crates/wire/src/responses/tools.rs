//! The `tools` and `tool_choice` of a Responses request, as written.
//!
//! Deserialization reads their shapes (a wrong type is an error naming the
//! field); what a tool means and whether this server can honour it is
//! decided by `shellgate_model::tools::Tools::parse`, which keeps the
//! messages the API always gave. A tool of another `type` (a hosted tool
//! shellgate does not run: `web_search`, `mcp`, ...) is kept whole as
//! [`Tool::Other`], for an upstream that runs it. Keys not named are kept
//! in `extra` (echoed in the response object).

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::items::{variant, Extra};
use crate::containers::{MemoryLimit, NetworkPolicy};

/// A tool of a request.
#[derive(Debug, Clone, PartialEq, utoipa::ToSchema)]
pub enum Tool {
    /// `shell`: OpenAI's hosted shell (or `local`, handed back).
    Shell(ShellTool),
    /// `local_shell`: the legacy local shell, handed back.
    LocalShell(LocalShellTool),
    /// `function`: a user's function, handed back.
    Function(FunctionTool),
    /// `openrouter:shell`.
    OpenRouterShell(OpenRouterTool),
    /// `openrouter:bash` (served on the Messages API only).
    OpenRouterBash(OpenRouterTool),
    /// `custom`: a user's freeform tool (its input is text, maybe in a
    /// grammar), handed back.
    Custom(CustomTool),
    /// `namespace`: a named group of function and custom tools (Codex's).
    Namespace(NamespaceTool),
    /// `code_interpreter`: OpenAI's hosted Python, run by shellgate's kernel.
    CodeInterpreter(CodeInterpreterTool),
    /// A tool of another `type`, kept whole (a hosted tool shellgate does
    /// not run: passed to an upstream that does, else left out).
    #[schema(value_type = Object)]
    Other(Extra),
}

/// The `type` tag of each known [`Tool`] variant.
pub mod tool_type {
    pub const SHELL: &str = "shell";
    pub const LOCAL_SHELL: &str = "local_shell";
    pub const FUNCTION: &str = "function";
    pub const OPENROUTER_SHELL: &str = "openrouter:shell";
    pub const OPENROUTER_BASH: &str = "openrouter:bash";
    pub const CUSTOM: &str = "custom";
    pub const NAMESPACE: &str = "namespace";
    pub const CODE_INTERPRETER: &str = "code_interpreter";
}

impl Tool {
    /// The tool's `type` (`None`: it has none, or not a string).
    pub fn kind(&self) -> Option<&str> {
        use tool_type::*;
        Some(match self {
            Tool::Shell(_) => SHELL,
            Tool::LocalShell(_) => LOCAL_SHELL,
            Tool::Function(_) => FUNCTION,
            Tool::OpenRouterShell(_) => OPENROUTER_SHELL,
            Tool::OpenRouterBash(_) => OPENROUTER_BASH,
            Tool::Custom(_) => CUSTOM,
            Tool::Namespace(_) => NAMESPACE,
            Tool::CodeInterpreter(_) => CODE_INTERPRETER,
            Tool::Other(map) => return map.get("type").and_then(Value::as_str),
        })
    }

    /// The `server_label` of a hosted tool (`mcp`'s), if it has one.
    pub fn server_label(&self) -> Option<&str> {
        match self {
            Tool::Other(map) => map.get("server_label").and_then(Value::as_str),
            _ => None,
        }
    }
}

#[derive(Serialize)]
#[serde(tag = "type")]
enum TaggedTool<'a> {
    #[serde(rename = "shell")]
    Shell(&'a ShellTool),
    #[serde(rename = "local_shell")]
    LocalShell(&'a LocalShellTool),
    #[serde(rename = "function")]
    Function(&'a FunctionTool),
    #[serde(rename = "openrouter:shell")]
    OpenRouterShell(&'a OpenRouterTool),
    #[serde(rename = "openrouter:bash")]
    OpenRouterBash(&'a OpenRouterTool),
    #[serde(rename = "custom")]
    Custom(&'a CustomTool),
    #[serde(rename = "namespace")]
    Namespace(&'a NamespaceTool),
    #[serde(rename = "code_interpreter")]
    CodeInterpreter(&'a CodeInterpreterTool),
}

impl Serialize for Tool {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let tagged = match self {
            Tool::Shell(t) => TaggedTool::Shell(t),
            Tool::LocalShell(t) => TaggedTool::LocalShell(t),
            Tool::Function(t) => TaggedTool::Function(t),
            Tool::OpenRouterShell(t) => TaggedTool::OpenRouterShell(t),
            Tool::OpenRouterBash(t) => TaggedTool::OpenRouterBash(t),
            Tool::Custom(t) => TaggedTool::Custom(t),
            Tool::Namespace(t) => TaggedTool::Namespace(t),
            Tool::CodeInterpreter(t) => TaggedTool::CodeInterpreter(t),
            Tool::Other(map) => return map.serialize(serializer),
        };
        tagged.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Tool {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use tool_type::*;
        let mut map = Extra::deserialize(deserializer)?;
        let kind = match map.get("type") {
            Some(Value::String(kind)) => kind.clone(),
            _ => return Ok(Tool::Other(map)),
        };
        if ![
            SHELL,
            LOCAL_SHELL,
            FUNCTION,
            OPENROUTER_SHELL,
            OPENROUTER_BASH,
            CUSTOM,
            NAMESPACE,
            CODE_INTERPRETER,
        ]
        .contains(&kind.as_str())
        {
            return Ok(Tool::Other(map));
        }
        map.remove("type");
        Ok(match kind.as_str() {
            SHELL => Tool::Shell(variant(map)?),
            LOCAL_SHELL => Tool::LocalShell(variant(map)?),
            FUNCTION => Tool::Function(variant(map)?),
            OPENROUTER_SHELL => Tool::OpenRouterShell(variant(map)?),
            CUSTOM => Tool::Custom(variant(map)?),
            NAMESPACE => Tool::Namespace(variant(map)?),
            CODE_INTERPRETER => Tool::CodeInterpreter(variant(map)?),
            _ => Tool::OpenRouterBash(variant(map)?),
        })
    }
}

/// `shell`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ShellTool {
    /// Omitted: `local` (as both Agents SDKs default it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<ShellEnvironment>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `local_shell`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct LocalShellTool {
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `function`: its arguments' JSON schema is the user's, kept as given.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct FunctionTool {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    pub parameters: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `custom`: a freeform tool; the model's call of it carries raw text.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct CustomTool {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Omitted: any text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<CustomToolFormat>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// A custom tool's input `format`: `{"type": "text"}`, or `{"type":
/// "grammar", "syntax": "lark" | "regex", "definition": ...}` (checked by
/// the server).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct CustomToolFormat {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syntax: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition: Option<String>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `namespace`: function and custom tools under one name; the model's
/// call of one names the namespace beside the tool.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct NamespaceTool {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `function` and `custom` tools (others are refused by the server).
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    pub tools: Vec<Tool>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `code_interpreter`: where its code runs.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct CodeInterpreterTool {
    /// Omitted: refused by the server (OpenAI requires it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<CodeInterpreterContainer>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// A `code_interpreter`'s `container`: a container id (or `"auto"`), or
/// `{"type": "auto", ...}` (another `type` is refused by the server).
#[derive(Debug, Clone, PartialEq, utoipa::ToSchema)]
pub enum CodeInterpreterContainer {
    /// A string: `cntr_...` of the project, or `auto`.
    Id(String),
    /// An object.
    Auto(CodeInterpreterAuto),
}

impl Serialize for CodeInterpreterContainer {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            CodeInterpreterContainer::Id(id) => serializer.serialize_str(id),
            CodeInterpreterContainer::Auto(auto) => auto.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for CodeInterpreterContainer {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::String(id) => Ok(CodeInterpreterContainer::Id(id)),
            object @ Value::Object(_) => {
                Ok(CodeInterpreterContainer::Auto(super::nested("", object)?))
            }
            _ => Err(super::custom(
                "",
                "container must be a container id or {\"type\": \"auto\"}",
            )),
        }
    }
}

/// `{"type": "auto", "file_ids"?, "memory_limit"?, "network_policy"?}`: a
/// container made for the conversation, as `POST /v1/containers` makes one.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct CodeInterpreterAuto {
    /// `auto` (anything else is refused by the server).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_ids: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub memory_limit: Option<MemoryLimit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub network_policy: Option<NetworkPolicy>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// OpenRouter's server tools (`openrouter:shell`, `openrouter:bash`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct OpenRouterTool {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<OpenRouterParameters>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// The `parameters` of an OpenRouter server tool.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct OpenRouterParameters {
    /// `auto`, `native` or `openrouter` (which apply: the server decides).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<ShellEnvironment>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sleep_after_seconds: Option<u64>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// Where a shell tool's commands run.
#[derive(Debug, Clone, PartialEq, utoipa::ToSchema)]
pub enum ShellEnvironment {
    /// `container_auto`: a container made for the response.
    ContainerAuto(ContainerAuto),
    /// `container_reference`: an existing container of the project.
    ContainerReference(ContainerReference),
    /// `local`: the client's machine.
    Local(LocalEnvironment),
    /// Another `type` (or none), kept whole: refused by the server.
    #[schema(value_type = Object)]
    Other(Extra),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum TaggedEnvironment<'a> {
    ContainerAuto(&'a ContainerAuto),
    ContainerReference(&'a ContainerReference),
    Local(&'a LocalEnvironment),
}

impl Serialize for ShellEnvironment {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ShellEnvironment::ContainerAuto(e) => TaggedEnvironment::ContainerAuto(e),
            ShellEnvironment::ContainerReference(e) => TaggedEnvironment::ContainerReference(e),
            ShellEnvironment::Local(e) => TaggedEnvironment::Local(e),
            ShellEnvironment::Other(map) => return map.serialize(serializer),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ShellEnvironment {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = Extra::deserialize(deserializer)?;
        let kind = match map.get("type") {
            Some(Value::String(kind)) => kind.clone(),
            _ => return Ok(ShellEnvironment::Other(map)),
        };
        let read = |mut map: Extra| {
            map.remove("type");
            map
        };
        Ok(match kind.as_str() {
            "container_auto" => ShellEnvironment::ContainerAuto(variant(read(map))?),
            "container_reference" => ShellEnvironment::ContainerReference(variant(read(map))?),
            "local" => ShellEnvironment::Local(variant(read(map))?),
            _ => ShellEnvironment::Other(map),
        })
    }
}

/// `container_auto`: the container `POST /v1/containers` would make.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ContainerAuto {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_ids: Option<Vec<String>>,
    /// `skill_reference` or `inline` entries (checked by the server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub skills: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub memory_limit: Option<MemoryLimit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub network_policy: Option<NetworkPolicy>,
    /// shellgate's extension: the image to make it from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// shellgate's extension: ports reachable through the server, as
    /// `POST /v1/containers` takes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exposed_ports: Option<Vec<u32>>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `container_reference` (`container_id` checked by the server).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ContainerReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `local`: the skills the client's machine has (told to the model).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct LocalEnvironment {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub skills: Option<Vec<Value>>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `tool_choice`.
#[derive(Debug, Clone, PartialEq, Eq, utoipa::ToSchema)]
pub enum ToolChoice {
    /// `"auto"`.
    Auto,
    /// `"required"`.
    Required,
    /// `"none"`.
    None,
    /// `{"type": "shell"}`.
    Shell,
    /// `{"type": "openrouter:shell"}`.
    OpenRouterShell,
    /// `{"type": "local_shell"}`.
    LocalShell,
    /// `{"type": "function", "name": ...}` (a missing name is `""`).
    Function { name: String },
    /// `{"type": "custom", "name": ...}` (a missing name is `""`).
    Custom { name: String },
    /// `{"type": "code_interpreter"}`.
    CodeInterpreter,
    /// `{"type": "allowed_tools", "mode": "auto" | "required", "tools":
    /// [...]}`: the model may call only these tools.
    AllowedTools {
        mode: String,
        tools: Vec<AllowedTool>,
    },
    /// `{"type": ...}` of another tool (a hosted tool, `mcp`...), kept whole.
    #[schema(value_type = Object)]
    Other(Extra),
}

/// Today's messages for a `tool_choice` the API cannot read.
pub const TOOL_CHOICE_OBJECT: &str = "tool_choice must be 'auto', 'required', 'none', \
     {\"type\": \"shell\"} or a named function";

impl Serialize for ToolChoice {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let (kind, name) = match self {
            ToolChoice::AllowedTools { mode, tools } => {
                let mut map = serializer.serialize_map(Some(3))?;
                map.serialize_entry("type", "allowed_tools")?;
                map.serialize_entry("mode", mode)?;
                map.serialize_entry("tools", tools)?;
                return map.end();
            }
            ToolChoice::Other(other) => return other.serialize(serializer),
            ToolChoice::Custom { name } => ("custom", Some(name)),
            ToolChoice::Auto => return serializer.serialize_str("auto"),
            ToolChoice::Required => return serializer.serialize_str("required"),
            ToolChoice::None => return serializer.serialize_str("none"),
            ToolChoice::Shell => ("shell", None),
            ToolChoice::OpenRouterShell => ("openrouter:shell", None),
            ToolChoice::LocalShell => ("local_shell", None),
            ToolChoice::CodeInterpreter => ("code_interpreter", None),
            ToolChoice::Function { name } => ("function", Some(name)),
        };
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("type", kind)?;
        if let Some(name) = name {
            map.serialize_entry("name", name)?;
        }
        map.end()
    }
}

/// A tool an `allowed_tools` choice lists: its `type`, and what names it
/// among tools of that type.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct AllowedTool {
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// A function's or custom tool's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A namespaced tool's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// An `mcp` tool's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_label: Option<String>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// A `tool_choice` object's `name` (`""` if it has none).
fn name_of(object: &Extra) -> String {
    object
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

impl<'de> Deserialize<'de> for ToolChoice {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::String(mode) => match mode.as_str() {
                "auto" => Ok(ToolChoice::Auto),
                "required" => Ok(ToolChoice::Required),
                "none" => Ok(ToolChoice::None),
                other => Err(super::custom(
                    "",
                    format!("tool_choice '{other}' is not 'auto', 'required' or 'none'"),
                )),
            },
            Value::Object(object) => match object.get("type").and_then(Value::as_str) {
                Some("shell") => Ok(ToolChoice::Shell),
                Some("openrouter:shell") => Ok(ToolChoice::OpenRouterShell),
                Some("local_shell") => Ok(ToolChoice::LocalShell),
                Some("code_interpreter") => Ok(ToolChoice::CodeInterpreter),
                Some("function") => Ok(ToolChoice::Function {
                    name: name_of(&object),
                }),
                Some("custom") => Ok(ToolChoice::Custom {
                    name: name_of(&object),
                }),
                Some("allowed_tools") => {
                    let mode = match object.get("mode") {
                        Some(Value::String(mode)) if mode == "auto" || mode == "required" => {
                            mode.clone()
                        }
                        _ => {
                            return Err(super::custom(
                                "mode",
                                "allowed_tools' mode must be 'auto' or 'required'",
                            ))
                        }
                    };
                    let tools = match object.get("tools") {
                        Some(Value::Array(tools)) => tools
                            .iter()
                            .map(|tool| match tool {
                                Value::Object(_) => AllowedTool::deserialize(tool)
                                    .map_err(|e| super::custom("tools", e)),
                                _ => Err(super::custom(
                                    "tools",
                                    "allowed_tools' tools are tool objects",
                                )),
                            })
                            .collect::<Result<Vec<_>, _>>()?,
                        _ => {
                            return Err(super::custom(
                                "tools",
                                "allowed_tools needs a 'tools' array",
                            ))
                        }
                    };
                    Ok(ToolChoice::AllowedTools { mode, tools })
                }
                Some(_) => Ok(ToolChoice::Other(object)),
                None => Err(super::custom("", TOOL_CHOICE_OBJECT)),
            },
            _ => Err(super::custom(
                "",
                "tool_choice must be a string or an object",
            )),
        }
    }
}

/// Codex's `additional_tools` input item (the tools of its code mode,
/// declared in the conversation instead of in `tools`), read leniently: its
/// entries stay JSON until each is read as a [`Tool`], so an entry that does
/// not read is the client's to be told of, never a 400.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct AdditionalTools {
    /// `None`: the item declares none.
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
}

impl AdditionalTools {
    /// The item's `type`.
    pub const TYPE: &'static str = "additional_tools";
}

/// The `type` of a tool entry, whatever else it holds (`None`: it has none
/// that is a string).
pub fn entry_type(entry: &Value) -> Option<String> {
    #[derive(Deserialize)]
    struct Tagged {
        #[serde(rename = "type")]
        kind: String,
    }
    serde_json::from_value::<Tagged>(entry.clone())
        .ok()
        .map(|tagged| tagged.kind)
}
