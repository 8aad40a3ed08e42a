//! The `tools` and `tool_choice` of a request, checked, and as the upstream
//! model sees them: every tool becomes a function tool. The hosted `shell`
//! (OpenAI's `shell`, or OpenRouter's `openrouter:shell`) is a function
//! `shell` taking a `commands` array, whose description says what the
//! environment is; OpenRouter's `openrouter:bash` (Anthropic's bash tool
//! shape, Messages API only) is a function `bash` taking one `command`; the
//! legacy `local_shell` is a function `local_shell` taking an argv
//! `command`; user functions pass through.

use serde_json::{json, Value};

use crate::error::RequestError;
use shellgate_wire::messages;
use shellgate_wire::responses as wire;

use crate::upstream::{ToolChoice, ToolSpec};

/// Name of the hosted (and `local`) shell as a function tool.
pub const SHELL: &str = "shell";
/// Name of the legacy `local_shell` tool as a function tool.
pub const LOCAL_SHELL: &str = "local_shell";
/// Name of the bash tool (`openrouter:bash`, Anthropic's `bash_*`) as a
/// function tool.
pub const BASH: &str = "bash";

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

/// A user's function tool.
#[derive(Debug, Clone, PartialEq)]
pub struct Function {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// The tools of a request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tools {
    pub shell: Option<Environment>,
    pub shell_shape: ShellShape,
    pub bash: Option<Bash>,
    pub local_shell: bool,
    pub functions: Vec<Function>,
    /// `sleep_after_seconds` of an OpenRouter tool: the container sleeps
    /// after this long without a command.
    pub sleep_after_seconds: Option<u64>,
}

impl Function {
    /// A Messages request's user tool (its `input_schema` is required, an
    /// object by its type).
    fn from_custom(tool: &messages::CustomTool, param: &str) -> Result<Self, RequestError> {
        if !valid_name(&tool.name) {
            return Err(invalid(
                &format!("{param}.name"),
                "a tool needs a name of 1 to 64 letters, digits, '_' or '-'",
            ));
        }
        Ok(Function {
            name: tool.name.clone(),
            description: tool.description.clone().unwrap_or_default(),
            parameters: Value::Object(tool.input_schema.clone()),
        })
    }

    /// A Responses request's `function` tool.
    fn from_tool(tool: &wire::FunctionTool, param: &str) -> Result<Self, RequestError> {
        let name = tool
            .name
            .as_deref()
            .filter(|n| valid_name(n))
            .ok_or_else(|| {
                invalid(
                    &format!("{param}.name"),
                    "a tool needs a name of 1 to 64 letters, digits, '_' or '-'",
                )
            })?;
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
        })
    }
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
                wire::Tool::Function(function) => parsed
                    .functions
                    .push(Function::from_tool(function, &param)?),
                wire::Tool::Other(_) => {
                    let Some(other) = tool.kind() else {
                        return Err(invalid(&param, "every tool needs a 'type'"));
                    };
                    return Err(invalid(
                        &format!("{param}.type"),
                        format!(
                            "tool type '{other}' is not supported here; use 'shell', \
                             'openrouter:shell', 'local_shell' or 'function'"
                        ),
                    ));
                }
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
                    parsed.functions.push(Function::from_custom(tool, &param)?)
                }
                messages::Tool::Unknown(_) => {
                    return Err(invalid(
                        &format!("{param}.type"),
                        format!(
                            "tool type '{}' is not supported here; use a tool with an \
                             input_schema, 'openrouter:shell', 'openrouter:bash' or \
                             'bash_20250124'",
                            tool.kind().unwrap_or_default()
                        ),
                    ))
                }
            }
        }
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
    }

    /// Whether a call of `name` runs in the sandbox.
    pub fn hosted(&self, name: &str) -> bool {
        match name {
            SHELL => self.shell.as_ref().is_some_and(Environment::hosted),
            BASH => self.bash.as_ref().is_some_and(|b| b.hosted.is_some()),
            _ => false,
        }
    }

    /// Refuses user functions named like a built-in tool, and twins.
    fn check_names(&self) -> Result<(), RequestError> {
        let parsed = self;
        let reserved = [
            (parsed.shell.is_some(), SHELL),
            (parsed.local_shell, LOCAL_SHELL),
            (parsed.bash.is_some(), BASH),
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
        for function in &self.functions {
            specs.push(ToolSpec {
                name: function.name.clone(),
                description: function.description.clone(),
                parameters: function.parameters.clone(),
                ..Default::default()
            });
        }
        specs
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
            Some(wire::ToolChoice::Function { name }) => {
                named(name, self.functions.iter().any(|f| &f.name == name))
            }
        }
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
        assert!(Tools::parse(&typed(&[json!({"type": "web_search"})])).is_err());
        assert!(Tools::parse(&typed(&[
            json!({"type": "shell"}),
            json!({"type": "function", "name": "shell"})
        ]))
        .is_err());
        let local = Tools::parse(&typed(&[json!({"type": "shell"})])).unwrap();
        assert_eq!(local.shell, Some(Environment::Local { skills: vec![] }));
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
}
