//! The `tools` and `tool_choice` of a request, checked, and as the upstream
//! model sees them: every tool becomes a function tool. The hosted `shell`
//! (OpenAI's `shell`, or OpenRouter's `openrouter:shell`) is a function
//! `shell` taking a `commands` array, whose description says what the
//! environment is; OpenRouter's `openrouter:bash` (Anthropic's bash tool
//! shape, Messages API only) is a function `bash` taking one `command`;
//! Anthropic's text editor (`text_editor_*`) is a function of its name
//! taking its documented commands, run by the client; the
//! legacy `local_shell` is a function `local_shell` taking an argv
//! `command`; user functions pass through, and so do user `custom`
//! (freeform) tools, as freeform [`ToolSpec`]s each adapter says its own
//! way. Codex's `namespace` groups are flattened: each tool in one is named
//! `{namespace}__{name}` ([`namespaced_name`]) for the model, and its calls
//! are handed back with the namespace and the tool's own name. Hosted tools
//! shellgate does not run (`web_search`, `mcp`, any other type) are kept
//! whole ([`NativeTool`]) for an upstream that runs them.

use serde_json::{json, Value};

use crate::error::RequestError;
use shellgate_wire::messages;
use shellgate_wire::responses as wire;

use crate::turn::{Carry, CustomFormat, NativeItem, Protocol, ToolChoice, ToolNamespace, ToolSpec};

/// Name of the hosted (and `local`) shell as a function tool.
pub const SHELL: &str = "shell";
/// Name of the legacy `local_shell` tool as a function tool.
pub const LOCAL_SHELL: &str = "local_shell";
/// Name of the bash tool (`openrouter:bash`, Anthropic's `bash_*`) as a
/// function tool.
pub const BASH: &str = "bash";
/// Name of Anthropic's code execution's command tool (taking `command`).
pub const BASH_CODE_EXECUTION: &str = "bash_code_execution";
/// Name of Anthropic's code execution's file editor (taking `command`
/// `view`, `create` or `str_replace`, and `path`).
pub const TEXT_EDITOR_CODE_EXECUTION: &str = "text_editor_code_execution";
/// Name of Anthropic's code execution's Python tool (taking `code`).
pub const CODE_EXECUTION: &str = "code_execution";

/// Name of OpenAI's `code_interpreter` as a function tool (taking `code`).
pub const CODE_INTERPRETER: &str = "code_interpreter";
/// Name of Google's code execution (Gemini's `codeExecution` tool) as a
/// function tool (taking `code`).
pub const GOOGLE_CODE_EXECUTION: &str = "code_execution";

/// What the model is told the code interpreter is.
const CODE_INTERPRETER_DESCRIPTION: &str = "Runs Python code in a stateful kernel (like a Jupyter \
     notebook) in an isolated Linux container: variables, imports and the working directory \
     persist between calls. The value of the last expression is shown, as are printed output, \
     errors with their traceback, and matplotlib figures (shown to the user as images). The \
     working directory is /mnt/data: files the user provides are there, and files written there \
     are given to the user. There is no network access unless the user allowed some.";

/// Google's documented limit on one run of code execution's code.
pub const GOOGLE_CODE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Google's code execution: Python cells run on the container's kernel
/// (the code interpreter's), each interrupted after `timeout`, its outcome
/// told apart (ok, raised, out of time).
#[derive(Debug, Clone, PartialEq)]
pub struct GoogleCodeExecution {
    /// The container its code runs in.
    pub environment: Environment,
    /// How long one call's code may run.
    pub timeout: std::time::Duration,
}

impl GoogleCodeExecution {
    /// What the model is told of the tool.
    fn description(&self) -> String {
        format!(
            "Runs Python code in a sandbox and returns its outcome and what it printed (stdout, \
             and the traceback when it raises). Variables persist between calls in the same \
             request. Matplotlib figures it shows are returned as images. The code is stopped \
             after {} seconds. Common scientific libraries (numpy, pandas, matplotlib, sympy...) \
             are available; print the values you need.",
            self.timeout.as_secs_f64()
        )
    }
}

/// Longest `sleep_after_seconds` (30 days).
pub const MAX_SLEEP_AFTER_SECONDS: u64 = 2_592_000;
/// Longest `container_reference` id of OpenRouter's tools.
pub const MAX_REFERENCE_ID: usize = 40;

/// How the hosted shell's calls appear in a response's output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ShellShape {
    /// OpenAI's `shell_call` and `shell_call_output` items.
    #[default]
    OpenAi,
    /// OpenRouter's single `openrouter:shell` item: the container, the
    /// commands and each command's result.
    OpenRouter,
}

/// The bash tool of a Messages request.
#[derive(Debug, Clone, PartialEq)]
pub struct Bash {
    /// Where its commands run: `None` hands each call back to the client
    /// (`engine` `auto` or `native`, and Anthropic's own bash tool).
    pub hosted: Option<Environment>,
}

/// Anthropic's code execution of a Messages request: its sub-tools run
/// in the sandbox.
#[derive(Debug, Clone, PartialEq)]
pub struct CodeExecution {
    pub version: CodeExecutionVersion,
    /// Its container: the request's `container`, else a new one.
    pub environment: Environment,
    /// How long one Python cell may run when the version bounds it
    /// (`_20260521`: past it the cell ends as a result with a non-zero
    /// `return_code` and a `detection_timeout` status); `None`: a cell
    /// runs as long as the code interpreter's, past it
    /// `execution_time_exceeded`.
    pub cell_timeout: Option<std::time::Duration>,
    /// The client's tools, as its Python cells see them (Anthropic's
    /// programmatic tool calling): each a function of the cell, callable
    /// when its `allowed_callers` lists this version's caller, else
    /// refusing with a message saying so. Empty for a version whose code
    /// calls no tools (`_20250522`).
    pub client_tools: Vec<CodeTool>,
    /// A cell paused on its calls of the client's tools that this request
    /// resumes with the client's results.
    pub resume: Option<PausedCell>,
}

impl CodeExecution {
    /// The `caller` of the `tool_use` blocks its code's calls become:
    /// `code_execution_20250825`, or `code_execution_20260120` (for
    /// `_20260120` and `_20260521`, as Anthropic tags both); `None` for a
    /// version whose code calls no tools.
    pub fn caller(&self) -> Option<&'static str> {
        self.version.caller()
    }

    /// Whether some client tool may be called from its code.
    pub fn calls_tools(&self) -> bool {
        self.client_tools.iter().any(|tool| tool.refused.is_none())
    }

    /// Whether the model sees `code_execution` (Python): its version's
    /// cells, or `_20250825`'s when its code may call the client's tools
    /// (programmatic tool calling runs Python).
    pub fn python(&self) -> bool {
        self.version.python() || self.calls_tools()
    }
}

/// A client's tool as a Python cell sees it: a function `name` whose
/// positional arguments are `params` (its input schema's properties, in
/// order), which sends the call to the client and returns its result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeTool {
    pub name: String,
    pub params: Vec<String>,
    pub description: String,
    /// `Some`: its `allowed_callers` do not let code call it; a call
    /// raises this message.
    pub refused: Option<String>,
}

/// The properties of a tool's input schema (its parameters, by name).
#[derive(Debug, Default, serde::Deserialize)]
struct Schema {
    #[serde(default)]
    properties: serde_json::Map<String, Value>,
}

/// A cell paused on the client's tools, and the client's results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PausedCell {
    /// The `server_tool_use` id of the call that runs the cell.
    pub cell: String,
    /// Its input (its code), as the client replayed it.
    pub input: serde_json::Map<String, Value>,
    /// The client's result for each call, in the order given.
    pub answers: Vec<ToolAnswer>,
}

/// The client's `tool_result` for a call its code made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolAnswer {
    pub call_id: String,
    pub content: String,
    pub is_error: bool,
}

/// Anthropic's documented limit on one Python cell of
/// `code_execution_20260521`.
pub const CODE_EXECUTION_CELL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(90);

/// A version of Anthropic's code execution tool, by the sub-tools the
/// model sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeExecutionVersion {
    /// `code_execution_20250522`: Python cells (`code_execution`).
    Python,
    /// `code_execution_20250825`: commands and the file editor
    /// (`bash_code_execution`, `text_editor_code_execution`).
    Commands,
    /// `code_execution_20260120` and `_20260521`: the commands, the file
    /// editor and Python cells.
    CommandsAndPython,
}

impl CodeExecutionVersion {
    /// The version a tool `type` names, if it is one run here.
    pub fn of(kind: &str) -> Option<Self> {
        match kind {
            "code_execution_20250522" => Some(Self::Python),
            "code_execution_20250825" => Some(Self::Commands),
            "code_execution_20260120" | "code_execution_20260521" => Some(Self::CommandsAndPython),
            _ => None,
        }
    }

    /// Whether the model sees `bash_code_execution` and
    /// `text_editor_code_execution`.
    pub fn commands(self) -> bool {
        self != Self::Python
    }

    /// Whether the model sees `code_execution` (Python).
    pub fn python(self) -> bool {
        self != Self::Commands
    }

    /// The caller its code's tool calls carry (`None`: its code calls no
    /// client tools).
    pub fn caller(self) -> Option<&'static str> {
        match self {
            Self::Python => None,
            Self::Commands => Some(CALLER_20250825),
            Self::CommandsAndPython => Some(CALLER_20260120),
        }
    }
}

/// The caller of `code_execution_20250825`'s code.
pub const CALLER_20250825: &str = "code_execution_20250825";
/// The caller of `code_execution_20260120`'s and `_20260521`'s code.
pub const CALLER_20260120: &str = "code_execution_20260120";

/// Whether an `allowed_callers` entry lets code of `caller` call the tool
/// (`_20260120` and `_20260521` are one caller, as Anthropic takes them).
fn admits(entry: &str, caller: &str) -> bool {
    match caller {
        CALLER_20260120 => matches!(entry, CALLER_20260120 | "code_execution_20260521"),
        _ => entry == caller,
    }
}

/// What the model is told of the client's tools its code may call.
fn code_tools_description(tools: &[CodeTool]) -> String {
    let callable: Vec<&CodeTool> = tools.iter().filter(|t| t.refused.is_none()).collect();
    if callable.is_empty() {
        return String::new();
    }
    let mut text = String::from(
        "\n\nThe code may call these functions, which run the user's tools and return each \
         result as a string (a result the tool reports as an error raises ToolError; call them \
         plainly, or `await` them, e.g. with asyncio.gather to run several at once); print \
         what you need from their results:",
    );
    for tool in callable {
        text.push_str(&format!("\n- {}({})", tool.name, tool.params.join(", ")));
        if !tool.description.is_empty() {
            text.push_str(&format!(": {}", tool.description));
        }
    }
    text
}

/// Where the `shell` tool's commands run.
#[derive(Debug, Clone, PartialEq)]
pub enum Environment {
    /// A container made for the response (on its first command).
    ContainerAuto(wire::ContainerAuto),
    /// An existing container of the project.
    ContainerReference(String),
    /// On the client's machine: the response hands the call back.
    Local { skills: Vec<Value> },
}

impl Environment {
    pub fn hosted(&self) -> bool {
        !matches!(self, Environment::Local { .. })
    }
}

/// A user's function tool (or freeform `custom` tool).
#[derive(Debug, Clone, PartialEq)]
pub struct Function {
    /// The name the model calls it by (flattened for a tool of a namespace).
    pub name: String,
    pub description: String,
    pub parameters: Value,
    /// `Some`: a `custom` tool, whose call's input is text in this format.
    pub custom: Option<CustomFormat>,
    /// `Some`: the tool is in a `namespace` group.
    pub namespace: Option<ToolNamespace>,
}

/// A tool shellgate does not run (`web_search`, `mcp`, ...): kept whole
/// for a Responses upstream, left out (and reported) for the others.
#[derive(Debug, Clone, PartialEq)]
pub struct NativeTool {
    /// Where the request had it: `tools[7]`.
    pub param: String,
    /// Its `type`.
    pub kind: String,
    /// Its `server_label` (an `mcp` tool's).
    pub label: Option<String>,
    /// The tool as the client wrote it.
    pub tool: wire::Extra,
}

/// The separator of a namespace and a tool's name in a flattened name.
pub const NAMESPACE_SEPARATOR: &str = "__";

/// Longest tool name every upstream protocol takes.
const MAX_NAME: usize = 64;

/// The name a model calls the tool `name` of the namespace `namespace`
/// by: `{namespace}__{name}`, or, past 64 characters, its first 55 and a
/// hash of the whole (`_` and 8 hex digits), so that it stays unique and
/// the same on every turn.
pub fn namespaced_name(namespace: &str, name: &str) -> String {
    let full = format!("{namespace}{NAMESPACE_SEPARATOR}{name}");
    if full.len() <= MAX_NAME {
        return full;
    }
    // FNV-1a: stable across builds and runs (a replayed call must map to
    // the same name), and short.
    let hash = full.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    });
    // The name's characters are ASCII (checked), so any index is a boundary.
    format!("{}_{hash:08x}", &full[..MAX_NAME - 9])
}

/// The one-string schema a freeform tool has where a protocol has only
/// function tools: its input is the `input` string.
pub fn freeform_parameters(format: &CustomFormat) -> Value {
    let description = match format {
        CustomFormat::Text => "The tool's input, as free text.".to_owned(),
        CustomFormat::Grammar { syntax, definition } => {
            format!("The tool's input: text that matches this {syntax} grammar:\n{definition}")
        }
    };
    json!({
        "type": "object",
        "properties": {"input": {"type": "string", "description": description}},
        "required": ["input"],
    })
}

/// The tools of a request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tools {
    pub shell: Option<Environment>,
    pub shell_shape: ShellShape,
    pub bash: Option<Bash>,
    pub local_shell: bool,
    /// OpenAI's `code_interpreter`: the container its code runs in (one
    /// container with the hosted shell's, if both are given).
    pub code_interpreter: Option<Environment>,
    /// Anthropic's code execution (Messages API).
    pub code_execution: Option<CodeExecution>,
    /// Google's code execution (a Gemini request's `codeExecution`).
    pub google_code_execution: Option<GoogleCodeExecution>,
    pub functions: Vec<Function>,
    /// `sleep_after_seconds` of an OpenRouter tool: the container sleeps
    /// after this long without a command.
    pub sleep_after_seconds: Option<u64>,
    /// Tools shellgate does not run, for an upstream that does.
    pub native: Vec<NativeTool>,
    /// A `tool_choice` of one of `native` (a hosted tool's type), kept whole.
    pub native_choice: Option<wire::Extra>,
}

/// A tool's `name`, checked: 1 to 64 letters, digits, `_` or `-` (a 400
/// naming `{param}.name` otherwise).
fn tool_name<'a>(name: Option<&'a str>, param: &str) -> Result<&'a str, RequestError> {
    name.filter(|n| valid_name(n)).ok_or_else(|| {
        invalid(
            &format!("{param}.name"),
            "a tool needs a name of 1 to 64 letters, digits, '_' or '-'",
        )
    })
}

impl Function {
    /// A Messages request's user tool (its `input_schema` is required, an
    /// object by its type).
    fn from_custom(tool: &messages::CustomTool, param: &str) -> Result<Self, RequestError> {
        tool_name(Some(&tool.name), param)?;
        Ok(Function {
            name: tool.name.clone(),
            description: tool.description.clone().unwrap_or_default(),
            parameters: Value::Object(tool.input_schema.clone()),
            custom: None,
            namespace: None,
        })
    }

    /// Anthropic's text editor tool (`text_editor_*`), a function the
    /// client runs: its documented commands and their inputs.
    fn from_text_editor(
        tool: &messages::TextEditorTool,
        param: &str,
    ) -> Result<Self, RequestError> {
        let default = if tool.has_undo() {
            "str_replace_editor"
        } else {
            messages::TEXT_EDITOR_NAME
        };
        let name = tool_name(Some(tool.name.as_deref().unwrap_or(default)), param)?;
        let mut commands = vec!["view", "create", "str_replace", "insert"];
        if tool.has_undo() {
            commands.push("undo_edit");
        }
        let mut description = "Views, creates and edits text files on the user's machine; the \
                               user's client runs each command and returns its result. `view` \
                               shows a file (with line numbers) or lists a directory; `create` \
                               writes `file_text` to a new file; `str_replace` replaces \
                               `old_str`, which must occur exactly once, with `new_str`; \
                               `insert` puts `insert_text` after line `insert_line`."
            .to_owned();
        if tool.has_undo() {
            description.push_str(" `undo_edit` reverts the last edit of `path`.");
        }
        if let Some(max) = tool.max_characters {
            description.push_str(&format!(" A view shows at most {max} characters."));
        }
        Ok(Function {
            name: name.to_owned(),
            description,
            parameters: json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "enum": commands},
                    "path": {"type": "string", "description": "The file or directory's absolute path."},
                    "file_text": {"type": "string", "description": "`create`: the new file's content."},
                    "old_str": {"type": "string", "description": "`str_replace`: the text to replace (exactly once in the file)."},
                    "new_str": {"type": "string", "description": "`str_replace`: the text to put in its place."},
                    "insert_line": {"type": "integer", "description": "`insert`: the line after which to insert (0: at the start)."},
                    "insert_text": {"type": "string", "description": "`insert`: the text to insert."},
                    "view_range": {
                        "type": "array", "items": {"type": "integer"},
                        "description": "`view`: the first and last line to show (-1: to the end).",
                    },
                },
                "required": ["command", "path"],
            }),
            custom: None,
            namespace: None,
        })
    }

    /// A Responses request's `function` tool.
    fn from_tool(tool: &wire::FunctionTool, param: &str) -> Result<Self, RequestError> {
        let name = tool_name(tool.name.as_deref(), param)?;
        let parameters = match &tool.parameters {
            Some(schema) if schema.is_object() => schema.clone(),
            None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
            Some(_) => {
                return Err(invalid(
                    &format!("{param}.parameters"),
                    "parameters must be a JSON schema object",
                ))
            }
        };
        Ok(Function {
            name: name.to_owned(),
            description: tool.description.clone().unwrap_or_default(),
            parameters,
            custom: None,
            namespace: None,
        })
    }

    /// A Responses request's `custom` tool.
    fn from_custom_tool(tool: &wire::CustomTool, param: &str) -> Result<Self, RequestError> {
        let name = tool_name(tool.name.as_deref(), param)?;
        let format = match &tool.format {
            None => CustomFormat::Text,
            Some(format) if format.kind == "text" => CustomFormat::Text,
            Some(format) if format.kind == "grammar" => {
                let syntax = format
                    .syntax
                    .as_deref()
                    .filter(|s| ["lark", "regex"].contains(s))
                    .ok_or_else(|| {
                        invalid(
                            &format!("{param}.format.syntax"),
                            "a grammar's syntax must be 'lark' or 'regex'",
                        )
                    })?;
                let definition = format.definition.clone().ok_or_else(|| {
                    invalid(
                        &format!("{param}.format.definition"),
                        "a grammar needs a definition",
                    )
                })?;
                CustomFormat::Grammar {
                    syntax: syntax.to_owned(),
                    definition,
                }
            }
            Some(_) => {
                return Err(invalid(
                    &format!("{param}.format.type"),
                    "a custom tool's format.type must be 'text' or 'grammar'",
                ))
            }
        };
        Ok(Function {
            name: name.to_owned(),
            description: tool.description.clone().unwrap_or_default(),
            parameters: freeform_parameters(&format),
            custom: Some(format),
            namespace: None,
        })
    }

    /// The name the model's call of it comes back with, for the client:
    /// the tool's own name and its namespace, if it has one.
    pub fn client_name(&self) -> (&str, Option<&str>) {
        match &self.namespace {
            Some(group) => (&group.name, Some(&group.namespace)),
            None => (&self.name, None),
        }
    }
}

/// The tools of a `namespace` group, flattened.
fn namespace_tools(
    group: &wire::NamespaceTool,
    param: &str,
) -> Result<Vec<Function>, RequestError> {
    let namespace = group
        .name
        .as_deref()
        .filter(|n| valid_name(n))
        .ok_or_else(|| {
            invalid(
                &format!("{param}.name"),
                "a namespace needs a name of 1 to 64 letters, digits, '_' or '-'",
            )
        })?;
    let description = group.description.clone().unwrap_or_default();
    let mut functions = Vec::new();
    for (index, tool) in group.tools.iter().enumerate() {
        let param = format!("{param}.tools[{index}]");
        let mut function = match tool {
            wire::Tool::Function(function) => Function::from_tool(function, &param)?,
            wire::Tool::Custom(custom) => Function::from_custom_tool(custom, &param)?,
            _ => {
                return Err(invalid(
                    &format!("{param}.type"),
                    "a namespace holds 'function' and 'custom' tools only",
                ))
            }
        };
        function.namespace = Some(ToolNamespace {
            namespace: namespace.to_owned(),
            description: description.clone(),
            name: function.name.clone(),
        });
        function.name = namespaced_name(namespace, &function.name);
        functions.push(function);
    }
    Ok(functions)
}

fn invalid(param: &str, message: impl Into<String>) -> RequestError {
    RequestError {
        param: param.to_owned(),
        message: message.into(),
    }
}

impl Tools {
    /// Reads the `tools` of a Responses request, refusing what this server
    /// cannot honour.
    pub fn parse(tools: &[wire::Tool]) -> Result<Self, RequestError> {
        let mut parsed = Tools::default();
        for (index, tool) in tools.iter().enumerate() {
            let param = format!("tools[{index}]");
            match tool {
                wire::Tool::Shell(shell) => {
                    if parsed.shell.is_some() {
                        return Err(invalid(&param, "only one shell tool may be given"));
                    }
                    parsed.shell = Some(environment(shell.environment.as_ref(), &param)?);
                }
                wire::Tool::OpenRouterShell(tool) => parsed.add_openrouter_shell(tool, &param)?,
                wire::Tool::OpenRouterBash(_) => {
                    return Err(invalid(
                        &format!("{param}.type"),
                        "openrouter:bash is served on the Messages API (POST /v1/messages) only; \
                         use openrouter:shell here",
                    ))
                }
                wire::Tool::LocalShell(_) => parsed.local_shell = true,
                wire::Tool::CodeInterpreter(tool) => {
                    if parsed.code_interpreter.is_some() {
                        return Err(invalid(
                            &param,
                            "only one code_interpreter tool may be given",
                        ));
                    }
                    parsed.code_interpreter = Some(interpreter_container(tool, &param)?);
                }
                wire::Tool::Function(function) => parsed
                    .functions
                    .push(Function::from_tool(function, &param)?),
                wire::Tool::Custom(custom) => parsed
                    .functions
                    .push(Function::from_custom_tool(custom, &param)?),
                wire::Tool::Namespace(group) => {
                    parsed.functions.extend(namespace_tools(group, &param)?)
                }
                wire::Tool::Other(map) => {
                    let Some(kind) = tool.kind() else {
                        return Err(invalid(&param, "every tool needs a 'type'"));
                    };
                    parsed.native.push(NativeTool {
                        param,
                        kind: kind.to_owned(),
                        label: tool.server_label().map(str::to_owned),
                        tool: map.clone(),
                    });
                }
            }
        }
        if let (Some(shell), Some(interpreter)) = (
            parsed.shell.as_ref().filter(|e| e.hosted()),
            &parsed.code_interpreter,
        ) {
            if shell != interpreter {
                return Err(invalid(
                    "tools",
                    "the shell and code_interpreter tools share one container: give the same \
                     container to both (or the code_interpreter alone)",
                ));
            }
        }
        parsed.check_names()?;
        Ok(parsed)
    }

    /// Reads the `tools` of a Messages request: user tools (`name`,
    /// `description`, `input_schema`), Anthropic's bash tool (`bash_*`,
    /// run by the client), `openrouter:shell` and `openrouter:bash`.
    pub fn parse_messages(tools: &[messages::Tool]) -> Result<Self, RequestError> {
        let mut parsed = Tools::default();
        // User tools with their `allowed_callers`.
        let mut callers: Vec<(Function, Option<Vec<String>>)> = Vec::new();
        for (index, tool) in tools.iter().enumerate() {
            let param = format!("tools[{index}]");
            match tool {
                messages::Tool::OpenRouterShell(tool) => {
                    parsed.add_openrouter_shell(tool, &param)?
                }
                messages::Tool::OpenRouterBash(tool) => {
                    if parsed.bash.is_some() {
                        return Err(invalid(&param, "only one bash tool may be given"));
                    }
                    let server =
                        OpenRouterTool::read(tool, &param, &["auto", "native", "openrouter"])?;
                    let hosted = (server.engine == "openrouter").then_some(server.environment);
                    parsed.bash = Some(Bash { hosted });
                    parsed.merge_sleep(server.sleep_after_seconds);
                }
                messages::Tool::Bash(_) => {
                    if parsed.bash.is_some() {
                        return Err(invalid(&param, "only one bash tool may be given"));
                    }
                    parsed.bash = Some(Bash { hosted: None });
                }
                messages::Tool::Custom(tool) => {
                    let function = Function::from_custom(tool, &param)?;
                    callers.push((function.clone(), tool.allowed_callers.clone()));
                    parsed.functions.push(function)
                }
                messages::Tool::TextEditor(tool) => parsed
                    .functions
                    .push(Function::from_text_editor(tool, &param)?),
                messages::Tool::CodeExecution(tool) => {
                    let Some(version) = CodeExecutionVersion::of(&tool.kind) else {
                        return Err(invalid(
                            &format!("{param}.type"),
                            format!(
                                "tool type '{}' is not run here; use 'code_execution_20250522', \
                                 '_20250825', '_20260120' or '_20260521'",
                                tool.kind
                            ),
                        ));
                    };
                    if parsed.code_execution.is_some() {
                        return Err(invalid(&param, "only one code execution tool may be given"));
                    }
                    parsed.code_execution = Some(CodeExecution {
                        version,
                        environment: Environment::ContainerAuto(wire::ContainerAuto::default()),
                        cell_timeout: (tool.kind == "code_execution_20260521")
                            .then_some(CODE_EXECUTION_CELL_TIMEOUT),
                        client_tools: Vec::new(),
                        resume: None,
                    });
                }
                messages::Tool::Unknown(_) => {
                    return Err(invalid(
                        &format!("{param}.type"),
                        format!(
                            "tool type '{}' is not supported here; use a tool with an \
                             input_schema, 'openrouter:shell', 'openrouter:bash', \
                             'bash_20250124' or 'text_editor_20250728'",
                            tool.kind().unwrap_or_default()
                        ),
                    ))
                }
            }
        }
        parsed.client_tools_for_code(callers);
        if let (Some(shell), Some(Bash { hosted: Some(bash) })) = (&parsed.shell, &parsed.bash) {
            if shell != bash {
                return Err(invalid(
                    "tools",
                    "openrouter:shell and openrouter:bash share one container: give its \
                     environment once, or the same in both",
                ));
            }
        }
        parsed.check_names()?;
        Ok(parsed)
    }

    /// Gives code execution's cells the user tools (programmatic tool
    /// calling), each callable when its `allowed_callers` list the
    /// version's caller; a tool whose `allowed_callers` leave out `direct`
    /// is not offered to the model itself. Without a code execution that
    /// calls tools, every tool is the model's.
    fn client_tools_for_code(&mut self, callers: Vec<(Function, Option<Vec<String>>)>) {
        let Some(execution) = self.code_execution.as_mut() else {
            return;
        };
        let Some(caller) = execution.caller() else {
            return;
        };
        let mut indirect = Vec::new();
        for (function, allowed) in callers {
            let allowed = allowed.unwrap_or_else(|| vec!["direct".to_owned()]);
            let from_code = allowed.iter().any(|entry| admits(entry, caller));
            if from_code && !allowed.iter().any(|entry| entry == "direct") {
                indirect.push(function.name.clone());
            }
            let params = serde_json::from_value::<Schema>(function.parameters.clone())
                .map(|schema| schema.properties.keys().cloned().collect())
                .unwrap_or_default();
            execution.client_tools.push(CodeTool {
                refused: (!from_code).then(|| {
                    format!(
                        "the tool '{}' may not be called from code: its allowed_callers ({}) do                          not include '{caller}'; the model may call it directly",
                        function.name,
                        allowed.join(", ")
                    )
                }),
                name: function.name,
                params,
                description: function.description,
            });
        }
        self.functions.retain(|f| !indirect.contains(&f.name));
    }

    /// Adds an `openrouter:shell` tool.
    fn add_openrouter_shell(
        &mut self,
        tool: &wire::OpenRouterTool,
        param: &str,
    ) -> Result<(), RequestError> {
        if self.shell.is_some() {
            return Err(invalid(param, "only one shell tool may be given"));
        }
        // `auto` would keep a provider's own hosted shell where one exists;
        // shellgate is the provider here, so both run in its sandbox.
        let server = OpenRouterTool::read(tool, param, &["auto", "openrouter"])?;
        self.shell = Some(server.environment);
        self.shell_shape = ShellShape::OpenRouter;
        self.merge_sleep(server.sleep_after_seconds);
        Ok(())
    }

    fn merge_sleep(&mut self, seconds: Option<u64>) {
        if let Some(seconds) = seconds {
            self.sleep_after_seconds =
                Some(self.sleep_after_seconds.map_or(seconds, |s| s.max(seconds)));
        }
    }

    /// Whether an OpenRouter server tool runs in the sandbox (its rules
    /// for choosing and keeping a container apply).
    pub fn openrouter(&self) -> bool {
        self.shell_shape == ShellShape::OpenRouter
            || self.bash.as_ref().is_some_and(|b| b.hosted.is_some())
    }

    /// The container environment of the tools that run in the sandbox.
    pub fn hosted_environment(&self) -> Option<&Environment> {
        self.shell
            .as_ref()
            .filter(|e| e.hosted())
            .or_else(|| self.bash.as_ref().and_then(|b| b.hosted.as_ref()))
            .or(self.code_interpreter.as_ref())
            .or(self.code_execution.as_ref().map(|c| &c.environment))
            .or(self
                .google_code_execution
                .as_ref()
                .map(|tool| &tool.environment))
    }

    /// Whether a call of `name` runs in the sandbox.
    pub fn hosted(&self, name: &str) -> bool {
        match name {
            SHELL => self.shell.as_ref().is_some_and(Environment::hosted),
            BASH => self.bash.as_ref().is_some_and(|b| b.hosted.is_some()),
            CODE_INTERPRETER => self.code_interpreter.is_some(),
            BASH_CODE_EXECUTION | TEXT_EDITOR_CODE_EXECUTION => self
                .code_execution
                .as_ref()
                .is_some_and(|c| c.version.commands()),
            // One name, two vendors' Python tools (a request offers one).
            CODE_EXECUTION => {
                self.code_execution
                    .as_ref()
                    .is_some_and(CodeExecution::python)
                    || self.google_code_execution.is_some()
            }
            _ => false,
        }
    }

    /// Refuses user functions named like a built-in tool, and twins.
    pub fn check_names(&self) -> Result<(), RequestError> {
        let parsed = self;
        let reserved = [
            (parsed.shell.is_some(), SHELL),
            (parsed.local_shell, LOCAL_SHELL),
            (parsed.bash.is_some(), BASH),
            (parsed.code_interpreter.is_some(), CODE_INTERPRETER),
            (parsed.code_execution.is_some(), BASH_CODE_EXECUTION),
            (parsed.code_execution.is_some(), TEXT_EDITOR_CODE_EXECUTION),
            (parsed.code_execution.is_some(), CODE_EXECUTION),
            (
                parsed.google_code_execution.is_some(),
                GOOGLE_CODE_EXECUTION,
            ),
        ];
        for (present, name) in reserved {
            if present && parsed.functions.iter().any(|f| f.name == name) {
                return Err(invalid(
                    "tools",
                    format!("a function may not be named '{name}' beside the {name} tool"),
                ));
            }
        }
        let mut names: Vec<&str> = parsed.functions.iter().map(|f| f.name.as_str()).collect();
        names.sort_unstable();
        if let Some(pair) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(invalid(
                "tools",
                format!("two functions are named '{}'", pair[0]),
            ));
        }
        Ok(())
    }

    /// The tools as function tools for the upstream; `describe` says what
    /// a hosted shell's environment is.
    pub fn specs(&self, describe: &dyn Fn(&Environment) -> String) -> Vec<ToolSpec> {
        let mut specs = Vec::new();
        if let Some(environment) = &self.shell {
            specs.push(ToolSpec {
                name: SHELL.to_owned(),
                description: describe(environment),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "commands": {
                            "type": "array",
                            "items": {"type": "string"},
                            "description": "Shell commands, run one after another, each with bash -c.",
                        },
                        "timeout_ms": {
                            "type": "integer",
                            "description": "Most milliseconds each command may take (default 120000, at most 300000).",
                        },
                        "max_output_length": {
                            "type": "integer",
                            "description": "Most characters kept of each command's stdout and of its stderr.",
                        },
                    },
                    "required": ["commands"],
                }),
            ..Default::default()
});
        }
        if let Some(bash) = &self.bash {
            specs.push(ToolSpec {
                name: BASH.to_owned(),
                description: match &bash.hosted {
                    Some(environment) => {
                        format!("Runs one bash command. {}", describe(environment))
                    }
                    None => "Runs a bash command on the user's machine; the user's client \
                             executes it and returns its output."
                        .to_owned(),
                },
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "command": {
                            "type": "string",
                            "description": "The bash command to run.",
                        },
                        "restart": {
                            "type": "boolean",
                            "description": "Restart the shell instead of running a command.",
                        },
                    },
                }),
                ..Default::default()
            });
        }
        if self.local_shell {
            specs.push(ToolSpec {
                name: LOCAL_SHELL.to_owned(),
                description: "Runs a command on the user's machine; the user's client executes it \
                              and returns its output."
                    .to_owned(),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "command": {
                            "type": "array",
                            "items": {"type": "string"},
                            "description": "The program and its arguments, e.g. [\"bash\", \"-lc\", \"ls\"].",
                        },
                        "timeout_ms": {"type": "integer"},
                        "working_directory": {"type": "string"},
                    },
                    "required": ["command"],
                }),
            ..Default::default()
});
        }
        if self.code_interpreter.is_some() {
            specs.push(ToolSpec {
                name: CODE_INTERPRETER.to_owned(),
                description: CODE_INTERPRETER_DESCRIPTION.to_owned(),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "code": {
                            "type": "string",
                            "description": "The Python code to run.",
                        },
                    },
                    "required": ["code"],
                }),
                ..Default::default()
            });
        }
        if let Some(execution) = self
            .code_execution
            .as_ref()
            .filter(|c| c.version.commands())
        {
            specs.push(ToolSpec {
                name: BASH_CODE_EXECUTION.to_owned(),
                description: format!(
                    "Runs a bash command in the code execution container and returns its \
                     stdout, stderr and exit code. {}",
                    describe(&execution.environment)
                ),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "command": {"type": "string", "description": "The bash command to run."},
                    },
                    "required": ["command"],
                }),
                ..Default::default()
            });
            specs.push(ToolSpec {
                name: TEXT_EDITOR_CODE_EXECUTION.to_owned(),
                description: "Views, creates and edits text files in the code execution \
                              container. `view` shows a file's text; `create` writes `file_text` \
                              to a file (made or replaced); `str_replace` replaces `old_str`, \
                              which must occur exactly once in the file, with `new_str`."
                    .to_owned(),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "command": {"type": "string", "enum": ["view", "create", "str_replace"]},
                        "path": {"type": "string", "description": "The file's path (relative to the working directory, or absolute)."},
                        "file_text": {"type": "string", "description": "`create`: the file's content."},
                        "old_str": {"type": "string", "description": "`str_replace`: the text to replace."},
                        "new_str": {"type": "string", "description": "`str_replace`: the text to put in its place."},
                    },
                    "required": ["command", "path"],
                }),
                ..Default::default()
            });
        }
        if let Some(execution) = self.code_execution.as_ref().filter(|c| c.python()) {
            specs.push(ToolSpec {
                name: CODE_EXECUTION.to_owned(),
                description: format!(
                    "Runs Python code in a stateful kernel in the code execution container: \
                     variables, imports and functions stay defined for the next call, in this \
                     request and in later requests on the same container. Returns what it \
                     printed; a raised exception's traceback comes back with return code 1. \
                     {}{}",
                    describe(&execution.environment),
                    code_tools_description(&execution.client_tools)
                ),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "code": {"type": "string", "description": "The Python code to run."},
                    },
                    "required": ["code"],
                }),
                ..Default::default()
            });
        }
        if let Some(tool) = &self.google_code_execution {
            specs.push(ToolSpec {
                name: GOOGLE_CODE_EXECUTION.to_owned(),
                description: tool.description(),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "code": {"type": "string", "description": "The Python code to run"},
                    },
                    "required": ["code"],
                }),
                ..Default::default()
            });
        }
        for function in &self.functions {
            specs.push(ToolSpec {
                name: function.name.clone(),
                description: function.description.clone(),
                parameters: function.parameters.clone(),
                custom: function.custom.clone(),
                namespace: function.namespace.clone(),
            });
        }
        specs
    }

    /// A user tool by the name the model calls it.
    pub fn function(&self, name: &str) -> Option<&Function> {
        self.functions.iter().find(|f| f.name == name)
    }

    /// `carry` with the native tools and tool choice of these tools, for
    /// an upstream of the Responses protocol (the only one that has them).
    pub fn carry(&self, mut carry: Carry) -> Carry {
        for tool in &self.native {
            carry.native_tools.push(NativeItem {
                protocol: Protocol::Responses,
                item: Value::Object(tool.tool.clone()),
            });
            carry
                .native_tool_names
                .push(format!("{} ({})", tool.param, tool.kind));
        }
        if let Some(choice) = &self.native_choice {
            carry.native_tool_choice = Some(NativeItem {
                protocol: Protocol::Responses,
                item: Value::Object(choice.clone()),
            });
        }
        carry
    }

    /// Keeps only the tools an `allowed_tools` choice lists (each named by
    /// its `type`, and `name` for a function or custom tool; a hosted tool
    /// by its `type`, and `server_label` for `mcp`).
    fn keep_allowed(&mut self, allowed: &[wire::AllowedTool]) {
        let listed = |kind: &str| {
            allowed
                .iter()
                .any(|entry| entry.kind.as_deref() == Some(kind))
        };
        if !listed(wire::tool_type::SHELL) && !listed(wire::tool_type::OPENROUTER_SHELL) {
            self.shell = None;
        }
        if !listed(wire::tool_type::LOCAL_SHELL) {
            self.local_shell = false;
        }
        if !listed(wire::tool_type::CODE_INTERPRETER) {
            self.code_interpreter = None;
        }
        self.functions.retain(|function| {
            let kind = if function.custom.is_some() {
                wire::tool_type::CUSTOM
            } else {
                wire::tool_type::FUNCTION
            };
            let (own, namespace) = function.client_name();
            allowed.iter().any(|entry| {
                entry.kind.as_deref() == Some(kind)
                    && entry.name.as_deref().is_some_and(|name| {
                        name == function.name
                            || (name == own
                                && entry
                                    .namespace
                                    .as_deref()
                                    .is_none_or(|n| Some(n) == namespace))
                    })
            })
        });
        self.native.retain(|tool| {
            allowed.iter().any(|entry| {
                entry.kind.as_deref() == Some(tool.kind.as_str())
                    && entry
                        .server_label
                        .as_deref()
                        .is_none_or(|label| tool.label.as_deref() == Some(label))
            })
        });
    }

    /// Reads `tool_choice` against these tools: an `allowed_tools` choice
    /// keeps only the tools it lists; a hosted tool's is kept whole
    /// (`native_choice`) and is `auto` for the neutral turn.
    pub fn choose(
        &mut self,
        choice: Option<&wire::ToolChoice>,
    ) -> Result<ToolChoice, RequestError> {
        match choice {
            Some(wire::ToolChoice::AllowedTools { mode, tools }) => {
                self.keep_allowed(tools);
                Ok(if mode == "required" {
                    ToolChoice::Required
                } else {
                    ToolChoice::Auto
                })
            }
            Some(wire::ToolChoice::Other(other)) => {
                self.native_choice = Some(other.clone());
                Ok(ToolChoice::Auto)
            }
            other => self.choice(other),
        }
    }

    /// Reads `tool_choice` against these tools.
    pub fn choice(&self, choice: Option<&wire::ToolChoice>) -> Result<ToolChoice, RequestError> {
        let named = |name: &str, present: bool| {
            if present {
                Ok(ToolChoice::Named(name.to_owned()))
            } else {
                Err(invalid(
                    "tool_choice",
                    format!("tool_choice names '{name}', which is not among the tools"),
                ))
            }
        };
        match choice {
            None | Some(wire::ToolChoice::Auto) => Ok(ToolChoice::Auto),
            Some(wire::ToolChoice::Required) => Ok(ToolChoice::Required),
            Some(wire::ToolChoice::None) => Ok(ToolChoice::None),
            Some(wire::ToolChoice::Shell | wire::ToolChoice::OpenRouterShell) => {
                named(SHELL, self.shell.is_some())
            }
            Some(wire::ToolChoice::LocalShell) => named(LOCAL_SHELL, self.local_shell),
            Some(wire::ToolChoice::CodeInterpreter) => {
                named(CODE_INTERPRETER, self.code_interpreter.is_some())
            }
            Some(wire::ToolChoice::Function { name }) => self.named_user_tool(name, false),
            Some(wire::ToolChoice::Custom { name }) => self.named_user_tool(name, true),
            // Read by `choose`, which keeps these; alone, they leave the
            // model free.
            Some(wire::ToolChoice::AllowedTools { .. } | wire::ToolChoice::Other(_)) => {
                Ok(ToolChoice::Auto)
            }
        }
    }

    /// A `tool_choice` naming a function (or a `custom` tool): by the name
    /// the model calls it, or by its own name within a namespace.
    fn named_user_tool(&self, name: &str, custom: bool) -> Result<ToolChoice, RequestError> {
        let kind = |f: &&Function| f.custom.is_some() == custom;
        self.functions
            .iter()
            .filter(kind)
            .find(|f| f.name == name)
            .or_else(|| {
                self.functions
                    .iter()
                    .filter(kind)
                    .find(|f| f.client_name().0 == name)
            })
            .map(|f| ToolChoice::Named(f.name.clone()))
            .ok_or_else(|| {
                invalid(
                    "tool_choice",
                    format!("tool_choice names '{name}', which is not among the tools"),
                )
            })
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn environment(
    value: Option<&wire::ShellEnvironment>,
    param: &str,
) -> Result<Environment, RequestError> {
    // Both Agents SDKs always send one; an omitted environment is local,
    // as they default it.
    let Some(value) = value else {
        return Ok(Environment::Local { skills: Vec::new() });
    };
    let param = format!("{param}.environment");
    match value {
        wire::ShellEnvironment::ContainerAuto(auto) => Ok(Environment::ContainerAuto(auto.clone())),
        wire::ShellEnvironment::ContainerReference(reference) => reference
            .container_id
            .as_deref()
            .filter(|id| !id.is_empty())
            .map(|id| Environment::ContainerReference(id.to_owned()))
            .ok_or_else(|| {
                invalid(
                    &format!("{param}.container_id"),
                    "a container_id is required",
                )
            }),
        wire::ShellEnvironment::Local(local) => Ok(Environment::Local {
            skills: local.skills.clone().unwrap_or_default(),
        }),
        wire::ShellEnvironment::Other(_) => Err(invalid(
            &format!("{param}.type"),
            "environment.type must be 'container_auto', 'container_reference' or 'local'",
        )),
    }
}

/// A `code_interpreter`'s container: `auto` (a string, or the object
/// whose `file_ids`, `memory_limit` and `network_policy` are a
/// `container_auto`'s) or a container id of the project.
fn interpreter_container(
    tool: &wire::CodeInterpreterTool,
    param: &str,
) -> Result<Environment, RequestError> {
    let param = format!("{param}.container");
    match &tool.container {
        None => Err(invalid(
            &param,
            "the code_interpreter tool needs a container",
        )),
        Some(wire::CodeInterpreterContainer::Id(id)) if id == "auto" => {
            Ok(Environment::ContainerAuto(wire::ContainerAuto::default()))
        }
        Some(wire::CodeInterpreterContainer::Id(id)) if valid_name(id) => {
            Ok(Environment::ContainerReference(id.clone()))
        }
        Some(wire::CodeInterpreterContainer::Id(_)) => Err(invalid(
            &param,
            "container is 'auto', {\"type\": \"auto\"} or a container id",
        )),
        Some(wire::CodeInterpreterContainer::Auto(auto)) => {
            if auto.kind.as_deref() != Some("auto") {
                return Err(invalid(
                    &format!("{param}.type"),
                    "container.type must be 'auto'",
                ));
            }
            Ok(Environment::ContainerAuto(wire::ContainerAuto {
                file_ids: auto.file_ids.clone(),
                memory_limit: auto.memory_limit,
                network_policy: auto.network_policy.clone(),
                ..wire::ContainerAuto::default()
            }))
        }
    }
}

/// The `parameters` of an OpenRouter server tool, checked.
struct OpenRouterTool {
    engine: String,
    environment: Environment,
    sleep_after_seconds: Option<u64>,
}

impl OpenRouterTool {
    fn read(
        tool: &wire::OpenRouterTool,
        param: &str,
        engines: &[&str],
    ) -> Result<Self, RequestError> {
        let parameters = tool.parameters.clone().unwrap_or_default();
        let param = format!("{param}.parameters");
        let engine = match parameters.engine.as_deref() {
            None => "auto".to_owned(),
            Some(engine) if engines.contains(&engine) => engine.to_owned(),
            Some(_) => {
                return Err(invalid(
                    &format!("{param}.engine"),
                    format!("engine must be one of: {}", engines.join(", ")),
                ))
            }
        };
        let environment = match &parameters.environment {
            None => Environment::ContainerAuto(wire::ContainerAuto::default()),
            Some(value) => {
                let environment = environment(Some(value), &param)?;
                if let Environment::ContainerReference(id) = &environment {
                    if !valid_reference(id) {
                        return Err(invalid(
                            &format!("{param}.environment.container_id"),
                            format!(
                                "a container_id is 1 to {MAX_REFERENCE_ID} letters, digits, '_' \
                                 or '-'"
                            ),
                        ));
                    }
                }
                if !environment.hosted() {
                    return Err(invalid(
                        &format!("{param}.environment.type"),
                        "this tool runs in the sandbox: environment.type must be \
                         'container_auto' or 'container_reference'",
                    ));
                }
                environment
            }
        };
        let sleep_after_seconds = match parameters.sleep_after_seconds {
            None => None,
            Some(seconds) if (1..=MAX_SLEEP_AFTER_SECONDS).contains(&seconds) => Some(seconds),
            Some(_) => {
                return Err(invalid(
                    &format!("{param}.sleep_after_seconds"),
                    format!(
                        "sleep_after_seconds is a whole number from 1 to \
                         {MAX_SLEEP_AFTER_SECONDS}"
                    ),
                ))
            }
        };
        Ok(OpenRouterTool {
            engine,
            environment,
            sleep_after_seconds,
        })
    }
}

/// A `container_reference` id OpenRouter's tools accept: kept whole.
pub fn valid_reference(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_REFERENCE_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tools as a Responses request writes them.
    fn typed(tools: &[Value]) -> Vec<wire::Tool> {
        tools
            .iter()
            .map(|t| wire::from_value(t.clone()).unwrap())
            .collect()
    }

    fn choice(value: Value) -> wire::ToolChoice {
        wire::from_value(value).unwrap()
    }

    #[test]
    fn tools_are_read_and_checked() {
        let tools = Tools::parse(&typed(&[
            json!({"type": "shell", "environment": {"type": "container_auto"}}),
            json!({"type": "function", "name": "lookup", "parameters": {"type": "object"}}),
        ]))
        .unwrap();
        assert!(matches!(tools.shell, Some(Environment::ContainerAuto(_))));
        assert_eq!(tools.functions[0].name, "lookup");
        let specs = tools.specs(&|_| "a container".into());
        assert_eq!(specs[0].name, "shell");
        assert_eq!(specs[0].description, "a container");
        assert_eq!(
            tools
                .choice(Some(&choice(json!({"type": "shell"}))))
                .unwrap(),
            ToolChoice::Named("shell".into())
        );
        assert!(tools
            .choice(Some(&choice(json!({"type": "local_shell"}))))
            .is_err());
        // A hosted tool shellgate does not run is kept whole, for an
        // upstream that runs it.
        let hosted = Tools::parse(&typed(&[json!({"type": "web_search"})])).unwrap();
        assert_eq!(hosted.native[0].param, "tools[0]");
        assert_eq!(hosted.native[0].kind, "web_search");
        assert!(Tools::parse(&typed(&[json!({"name": "typeless"})])).is_err());
        assert!(Tools::parse(&typed(&[
            json!({"type": "shell"}),
            json!({"type": "function", "name": "shell"})
        ]))
        .is_err());
        let local = Tools::parse(&typed(&[json!({"type": "shell"})])).unwrap();
        assert_eq!(local.shell, Some(Environment::Local { skills: vec![] }));
    }

    #[test]
    fn the_code_interpreter_is_a_hosted_function_taking_code() {
        let tools = Tools::parse(&typed(&[
            json!({"type": "code_interpreter", "container": {"type": "auto", "memory_limit": "4g"}}),
        ]))
        .unwrap();
        let Some(Environment::ContainerAuto(auto)) = &tools.code_interpreter else {
            panic!("{tools:?}")
        };
        assert_eq!(auto.memory_limit.map(|m| m.as_str()), Some("4g"));
        assert!(tools.hosted(CODE_INTERPRETER) && !tools.hosted(SHELL));
        assert_eq!(tools.hosted_environment(), tools.code_interpreter.as_ref());
        let specs = tools.specs(&|_| "a container".into());
        assert_eq!(specs[0].name, CODE_INTERPRETER);
        assert_eq!(specs[0].parameters["required"], json!(["code"]));
        assert_eq!(
            tools.choice(Some(&choice(json!({"type": "code_interpreter"})))),
            Ok(ToolChoice::Named(CODE_INTERPRETER.into()))
        );
        for auto in [json!("auto"), json!({"type": "auto"})] {
            let tools = Tools::parse(&typed(&[
                json!({"type": "code_interpreter", "container": auto}),
            ]))
            .unwrap();
            assert!(matches!(
                tools.code_interpreter,
                Some(Environment::ContainerAuto(_))
            ));
        }
        let by_id = Tools::parse(&typed(&[
            json!({"type": "code_interpreter", "container": "cntr_1"}),
        ]))
        .unwrap();
        assert_eq!(
            by_id.code_interpreter,
            Some(Environment::ContainerReference("cntr_1".into()))
        );
        // Beside a hosted shell, one container for both.
        assert!(Tools::parse(&typed(&[
            json!({"type": "shell", "environment": {"type": "container_auto"}}),
            json!({"type": "code_interpreter", "container": "auto"}),
        ]))
        .is_ok());
        let param = |tools: &[Value]| Tools::parse(&typed(tools)).unwrap_err().param;
        assert_eq!(
            param(&[
                json!({"type": "shell", "environment": {"type": "container_auto"}}),
                json!({"type": "code_interpreter", "container": "cntr_2"}),
            ]),
            "tools"
        );
        assert_eq!(
            param(&[json!({"type": "code_interpreter"})]),
            "tools[0].container"
        );
        assert_eq!(
            param(&[json!({"type": "code_interpreter", "container": {"type": "manual"}})]),
            "tools[0].container.type"
        );
        assert_eq!(
            param(&[json!({"type": "code_interpreter", "container": "a b"})]),
            "tools[0].container"
        );
        assert_eq!(
            param(&[
                json!({"type": "code_interpreter", "container": "auto"}),
                json!({"type": "function", "name": "code_interpreter"}),
            ]),
            "tools"
        );
    }

    #[test]
    fn custom_namespaced_and_hosted_tools_are_read_and_checked() {
        let mut tools = Tools::parse(&typed(&[
            json!({"type": "custom", "name": "notes"}),
            json!({"type": "namespace", "name": "crm", "description": "The CRM.", "tools": [
                {"type": "function", "name": "find", "parameters": {"type": "object"}},
                {"type": "custom", "name": "query", "format": {"type": "grammar", "syntax": "regex", "definition": "[a-z]+"}},
            ]}),
            json!({"type": "mcp", "server_label": "wiki"}),
            json!({"type": "web_search"}),
        ]))
        .unwrap();
        let names: Vec<&str> = tools.functions.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["notes", "crm__find", "crm__query"]);
        assert_eq!(tools.functions[0].custom, Some(CustomFormat::Text));
        assert_eq!(tools.functions[2].client_name(), ("query", Some("crm")));
        // A tool_choice by a namespaced tool's own name, or a hosted tool's.
        assert_eq!(
            tools.choice(Some(&choice(json!({"type": "custom", "name": "query"})))),
            Ok(ToolChoice::Named("crm__query".into()))
        );
        assert!(tools
            .choice(Some(&choice(json!({"type": "function", "name": "notes"}))))
            .is_err());
        assert_eq!(
            tools.choose(Some(&choice(json!({"type": "web_search"})))),
            Ok(ToolChoice::Auto)
        );
        let carry = tools.carry(Carry::default());
        assert_eq!(
            carry.native_tool_names,
            ["tools[2] (mcp)", "tools[3] (web_search)"]
        );
        assert_eq!(
            carry.native_uncarried(Protocol::Chat),
            [
                "tools[2] (mcp)",
                "tools[3] (web_search)",
                "tool_choice (web_search)"
            ]
        );
        assert!(carry.native_uncarried(Protocol::Responses).is_empty());
        // allowed_tools keeps what it lists.
        let mut allowed = tools.clone();
        assert_eq!(
            allowed.choose(Some(&choice(json!({"type": "allowed_tools", "mode": "required",
                "tools": [{"type": "function", "name": "find"}, {"type": "mcp", "server_label": "wiki"}]})))),
            Ok(ToolChoice::Required)
        );
        let names: Vec<&str> = allowed.functions.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["crm__find"]);
        assert_eq!(allowed.native.len(), 1);
        // Each refusal names its field.
        let param = |tool: Value| Tools::parse(&typed(&[tool])).unwrap_err().param;
        assert_eq!(
            param(
                json!({"type": "custom", "name": "x", "format": {"type": "grammar", "syntax": "ebnf", "definition": "x"}})
            ),
            "tools[0].format.syntax"
        );
        assert_eq!(
            param(json!({"type": "custom", "name": "x", "format": {"type": "json"}})),
            "tools[0].format.type"
        );
        assert_eq!(
            param(json!({"type": "namespace", "name": "n", "tools": [{"type": "shell"}]})),
            "tools[0].tools[0].type"
        );
        assert_eq!(
            param(json!({"type": "namespace", "name": "a b", "tools": []})),
            "tools[0].name"
        );
        // A flattened name that collides with a function is refused.
        assert!(Tools::parse(&typed(&[
            json!({"type": "function", "name": "crm__find"}),
            json!({"type": "namespace", "name": "crm", "tools": [{"type": "function", "name": "find"}]}),
        ]))
        .is_err());
        let long = namespaced_name(&"n".repeat(40), &"f".repeat(40));
        assert_eq!(long.len(), 64);
        assert_eq!(long, namespaced_name(&"n".repeat(40), &"f".repeat(40)));
        assert_ne!(long, namespaced_name(&"n".repeat(40), &"g".repeat(40)));
        assert!(valid_name(&long));
    }

    /// A Messages request's `tools` as the server reads them: typed (a
    /// wrong shape refused there), then checked.
    fn messages_tools(tools: &[Value]) -> Result<Tools, RequestError> {
        let typed: Vec<messages::Tool> =
            shellgate_wire::param::parse(&Value::Array(tools.to_vec())).map_err(|e| {
                RequestError {
                    param: format!("tools{}", e.param),
                    message: e.message,
                }
            })?;
        Tools::parse_messages(&typed)
    }

    #[test]
    fn openrouter_tools_are_read_with_their_parameters() {
        let tools = Tools::parse(&typed(&[json!({
            "type": "openrouter:shell",
            "parameters": {"engine": "openrouter", "sleep_after_seconds": 60}
        })]))
        .unwrap();
        assert_eq!(tools.shell_shape, ShellShape::OpenRouter);
        assert!(matches!(tools.shell, Some(Environment::ContainerAuto(_))));
        assert_eq!(tools.sleep_after_seconds, Some(60));
        assert!(tools.hosted(SHELL));
        // Anthropic's shapes: a user tool, the client's bash, the hosted bash.
        let messages = messages_tools(&[
            json!({"name": "lookup", "input_schema": {"type": "object"}}),
            json!({"type": "bash_20250124", "name": "bash"}),
        ])
        .unwrap();
        assert_eq!(messages.functions[0].name, "lookup");
        assert_eq!(messages.bash, Some(Bash { hosted: None }));
        assert!(!messages.hosted(BASH));
        let hosted = messages_tools(&[
            json!({"type": "openrouter:bash", "parameters": {"engine": "openrouter"}}),
            json!({"type": "openrouter:shell"}),
        ])
        .unwrap();
        assert!(hosted.hosted(BASH) && hosted.hosted(SHELL));
        assert!(hosted
            .specs(&|_| "box".into())
            .iter()
            .any(|s| s.name == BASH));
        for bad in [
            json!({"type": "openrouter:bash", "parameters": {"engine": "elsewhere"}}),
            json!({"type": "web_search_20250305", "name": "web_search"}),
            json!({"name": "no_schema"}),
            json!({"name": "bash", "input_schema": {"type": "object"}}),
        ] {
            let tools = if bad.get("name") == Some(&json!("bash")) {
                vec![
                    json!({"type": "bash_20250124", "name": "bash"}),
                    bad.clone(),
                ]
            } else {
                vec![bad.clone()]
            };
            assert!(messages_tools(&tools).is_err(), "{bad}");
        }
        // Each refusal names its field.
        let param = |tool: Value| messages_tools(&[tool]).unwrap_err().param;
        assert_eq!(
            param(json!({"type": "openrouter:bash", "parameters": {"engine": "elsewhere"}})),
            "tools[0].parameters.engine"
        );
        assert_eq!(
            param(json!({"type": "openrouter:shell", "parameters": {"engine": "native"}})),
            "tools[0].parameters.engine"
        );
        assert_eq!(
            param(json!({"type": "openrouter:shell", "parameters": {"sleep_after_seconds": 0}})),
            "tools[0].parameters.sleep_after_seconds"
        );
        assert_eq!(
            param(json!({"type": "web_search_20250305", "name": "w"})),
            "tools[0].type"
        );
        assert_eq!(param(json!({"name": "no_schema"})), "tools[0].input_schema");
        assert_eq!(
            param(json!({"name": "a b", "input_schema": {}})),
            "tools[0].name"
        );
        assert!(valid_reference(&"a".repeat(40)) && !valid_reference(&"a".repeat(41)));
        assert!(!valid_reference("has space"));
    }
    #[test]
    fn the_text_editor_is_a_client_function_of_its_version() {
        let tools = messages_tools(&[
            json!({"type": "text_editor_20250728", "name": "str_replace_based_edit_tool",
                   "max_characters": 500}),
        ])
        .unwrap();
        let [editor] = tools.functions.as_slice() else {
            panic!("one function: {:?}", tools.functions)
        };
        assert_eq!(editor.name, "str_replace_based_edit_tool");
        assert!(editor.description.contains("500 characters"));
        assert_eq!(
            editor.parameters["properties"]["command"]["enum"],
            json!(["view", "create", "str_replace", "insert"])
        );
        assert!(!tools.hosted(&editor.name));
        // The first version is named otherwise and can undo an edit.
        let first = messages_tools(&[json!({"type": "text_editor_20250124"})]).unwrap();
        assert_eq!(first.functions[0].name, "str_replace_editor");
        assert!(
            first.functions[0].parameters["properties"]["command"]["enum"]
                .as_array()
                .is_some_and(|commands| commands.contains(&json!("undo_edit")))
        );
    }
}

#[cfg(test)]
mod code_tools {
    use super::*;

    fn parsed(tools: Value) -> Tools {
        let typed: Vec<messages::Tool> = serde_json::from_value(tools).expect("tools");
        Tools::parse_messages(&typed).expect("parsed")
    }

    fn tool(name: &str, callers: Option<&[&str]>) -> Value {
        let mut tool = json!({"name": name, "input_schema": {"type": "object",
            "properties": {"b": {}, "a": {}}}});
        if let Some(callers) = callers {
            tool["allowed_callers"] = json!(callers);
        }
        tool
    }

    #[test]
    fn allowed_callers_decide_what_code_and_the_model_may_call() {
        let tools = parsed(json!([
            {"type": "code_execution_20260521", "name": "code_execution"},
            tool("code_only", Some(&["code_execution_20260120"])),
            tool("both", Some(&["direct", "code_execution_20260521"])),
            tool("model_only", None),
            tool("older", Some(&["code_execution_20250825"])),
        ]));
        let execution = tools.code_execution.as_ref().expect("code execution");
        assert_eq!(execution.caller(), Some(CALLER_20260120));
        let callable: Vec<(&str, bool)> = execution
            .client_tools
            .iter()
            .map(|t| (t.name.as_str(), t.refused.is_none()))
            .collect();
        assert_eq!(
            callable,
            [
                ("code_only", true),
                ("both", true),
                ("model_only", false),
                ("older", false)
            ]
        );
        assert_eq!(execution.client_tools[0].params, ["a", "b"]);
        let refused = execution.client_tools[3]
            .refused
            .as_deref()
            .unwrap_or_default();
        assert!(refused.contains("code_execution_20250825"), "{refused}");
        // A tool for code alone is not the model's own.
        let offered: Vec<&str> = tools.functions.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(offered, ["both", "model_only", "older"]);
        let specs = tools.specs(&|_| String::new());
        let cell = specs
            .iter()
            .find(|s| s.name == CODE_EXECUTION)
            .expect("code_execution");
        assert!(
            cell.description.contains("- code_only(a, b)"),
            "{}",
            cell.description
        );
        assert!(
            !cell.description.contains("model_only("),
            "{}",
            cell.description
        );
        // `_20250825` calling tools gets Python for it; without code
        // execution, `allowed_callers` change nothing.
        let older = parsed(json!([
            {"type": "code_execution_20250825", "name": "code_execution"},
            tool("older", Some(&["code_execution_20250825"])),
        ]));
        assert!(older.hosted(CODE_EXECUTION));
        let plain = parsed(json!([tool(
            "code_only",
            Some(&["code_execution_20260120"])
        )]));
        assert_eq!(plain.functions.len(), 1);
    }
}
