//! The loop: ask the model, run what it asks of the hosted shell, feed the
//! results back, until it answers.
//!
//! Each turn's reply becomes output items: its text a `message`, each call
//! of the hosted shell a `shell_call` (its environment the container, by
//! reference) followed by the `shell_call_output` of running it, each call
//! the client must answer (a user function, a `local` shell, the legacy
//! `local_shell`) a `function_call` / `shell_call` / `local_shell_call` that
//! ends the response: the client runs it and continues with
//! `previous_response_id`. Several calls in one turn run in order. The loop
//! stops at `max_tool_calls` hosted calls (`incomplete`), at the model's
//! output limit (`incomplete`), or at an upstream error (`failed`).
//! Dropping the future cancels the run; commands it started are killed (the
//! engine's command path guarantees it).
//!
//! Items are typed ([`shellgate_wire::responses::Item`]) from the request
//! to the output: the loop builds each as the wire type, the server sends
//! and stores what it gets. The model's arguments are read by
//! [`crate::arguments`]; a shell call's limits follow exec's rule
//! (`RunRequest::from_parts`). Tested through the two traits in
//! `run/tests.rs`, with the `testing` module's fixtures.

use async_trait::async_trait;
use shellgate_sandbox_api::backend::{limits, CommandResult, OutputDelta, RunRequest, StreamKind};
use shellgate_wire::responses::{
    self as wire, CallEnvironment, CustomToolCall, FunctionCall, Item, ItemStatus,
    LocalShellAction, LocalShellActionType, LocalShellCall, OpenRouterBash, OpenRouterBashAction,
    OpenRouterShell, OpenRouterShellAction, OutputText, Role, ShellAction, ShellCall,
    ShellCallOutput, ShellResult,
};

use crate::arguments::{BashArguments, LocalShellArguments, ShellArguments};
use crate::conversation;
use crate::tools::{Environment, ShellShape, Tools, BASH, LOCAL_SHELL, SHELL};
use crate::upstream::{Delta, Finish, ToolCall, ToolChoice, Turn, Upstream, Usage};

/// Most hosted tool calls in one response (also the default).
pub const MAX_TOOL_CALLS: u32 = 30;

/// Why the hosted shell could not serve a call; ends the response `failed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostError {
    /// An `error.code` of the Responses API.
    pub code: &'static str,
    pub message: String,
}

/// Where the hosted shell's commands run: the server's side of the loop.
#[async_trait]
pub trait Sandbox: Send + Sync {
    /// The container of this response (made on first use for `container_auto`).
    async fn container(&self) -> Result<String, HostError>;
    /// Runs commands in it, sending output to `deltas` as it comes.
    async fn run(
        &self,
        container: &str,
        request: RunRequest,
        deltas: Option<shellgate_sandbox_api::backend::DeltaSink>,
    ) -> Result<Vec<CommandResult>, HostError>;
}

/// What happens in a response, for streaming.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// An output item began at `index` of `output`.
    ItemAdded { index: usize, item: Item },
    /// Text of the message at `index`.
    TextDelta {
        index: usize,
        item_id: String,
        delta: String,
    },
    /// The arguments of the function call at `index`, whole.
    Arguments {
        index: usize,
        item_id: String,
        arguments: String,
    },
    /// The input of the custom tool call at `index`, whole.
    CustomInput {
        index: usize,
        item_id: String,
        input: String,
    },
    /// A command of the shell call at `index`.
    ShellCommand {
        index: usize,
        command_index: usize,
        command: String,
    },
    /// Output of a running command of the shell call output at `index`.
    ShellOutput {
        index: usize,
        item_id: String,
        command_index: usize,
        stream: StreamKind,
        text: String,
    },
    /// A command of the shell call output at `index` ended.
    ShellCommandDone {
        index: usize,
        item_id: String,
        command_index: usize,
        result: ShellResult,
    },
    /// The output item at `index` is complete.
    ItemDone { index: usize, item: Item },
}

pub type EventSink = tokio::sync::mpsc::UnboundedSender<Event>;

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    Completed,
    /// `incomplete_details.reason`.
    Incomplete(&'static str),
    Failed {
        code: &'static str,
        message: String,
    },
}

/// What a run made.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub output: Vec<Item>,
    pub usage: Usage,
    pub status: Status,
    /// Hosted shell calls run.
    pub tool_calls: u32,
}

/// One response's request, resolved.
pub struct Request {
    pub model: String,
    pub instructions: Option<String>,
    /// The conversation so far: earlier responses' items and this input.
    pub items: Vec<Item>,
    pub tools: Tools,
    pub tool_choice: ToolChoice,
    pub max_tool_calls: u32,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub max_output_tokens: Option<u32>,
    pub parallel_tool_calls: Option<bool>,
    /// What a hosted shell's environment is, for the tool's description.
    pub environment_description: String,
    /// Checks commands' output before the model reads it.
    pub output_guardrail: Option<std::sync::Arc<crate::guardrail::Guardrail>>,
    /// Bytes the model may write over every turn of the run together (its
    /// text and tool calls): past them the run fails. An upstream turn is
    /// bounded while it is read; this bounds a loop of turns each under
    /// that bound, whose answers the run keeps and sends back each turn.
    pub max_answer_bytes: usize,
    /// What the client asked that shellgate does not act on, for the
    /// upstream to carry as its protocol allows.
    pub carry: crate::upstream::Carry,
}

/// A new item id: `prefix` and 32 hex digits.
pub use shellgate_wire::new_id as item_id;

/// The assistant's message `id`: its `text` as one `output_text` part.
fn message_item(id: &str, text: &str, status: ItemStatus) -> Item {
    // A message announced before its text has no part yet.
    let content = if text.is_empty() && status == ItemStatus::InProgress {
        Vec::new()
    } else {
        vec![wire::ContentPart::OutputText(OutputText {
            text: text.to_owned(),
            annotations: Some(Vec::new()),
            extra: wire::Extra::new(),
        })]
    };
    Item::Message(wire::Message {
        id: Some(id.to_owned()),
        role: Role::Assistant,
        status: Some(status),
        content: wire::MessageContent::Parts(content),
        extra: wire::Extra::new(),
    })
}

/// Sends an event if anyone listens.
fn emit(events: Option<&EventSink>, event: Event) {
    if let Some(sink) = events {
        let _ = sink.send(event);
    }
}

/// The output item at `index` is complete: it is told done (a copy for the
/// listeners, only when there are any) and becomes part of `output`.
fn complete(output: &mut Vec<Item>, events: Option<&EventSink>, index: usize, item: Item) {
    if let Some(sink) = events {
        let _ = sink.send(Event::ItemDone {
            index,
            item: item.clone(),
        });
    }
    output.push(item);
}

/// Runs the loop. `events` receives what happens as it happens.
pub async fn run(
    upstream: &dyn Upstream,
    sandbox: Option<&dyn Sandbox>,
    request: &Request,
    events: Option<&EventSink>,
) -> Outcome {
    let mut output: Vec<Item> = Vec::new();
    let mut usage = Usage::default();
    let mut tool_calls = 0u32;
    let specs = request
        .tools
        .specs(&|_: &Environment| request.environment_description.clone());
    let end = |output: Vec<Item>, usage, tool_calls, status| Outcome {
        output,
        usage,
        status,
        tool_calls,
    };
    let mut tool_choice = request.tool_choice.clone();
    let mut answered = 0usize;
    let output_guard = request
        .output_guardrail
        .as_deref()
        .map(|rules| OutputGuard {
            rules,
            earlier: std::sync::Mutex::new(String::new()),
        });
    loop {
        let turn = Turn {
            model: request.model.clone(),
            messages: conversation::messages(
                request.instructions.as_deref(),
                request.items.iter().chain(&output),
            ),
            tools: specs.clone(),
            tool_choice: tool_choice.clone(),
            temperature: request.temperature,
            top_p: request.top_p,
            max_output_tokens: request.max_output_tokens,
            parallel_tool_calls: request.parallel_tool_calls,
            carry: request.tools.carry(request.carry.clone()),
        };
        // Text streams out as the upstream writes it.
        let message_index = output.len();
        let message_id = item_id("msg_");
        let (delta_tx, mut delta_rx) = tokio::sync::mpsc::unbounded_channel::<Delta>();
        let forward = async {
            let mut started = false;
            while let Some(delta) = delta_rx.recv().await {
                if let Delta::Text(text) = delta {
                    if !started {
                        started = true;
                        emit(
                            events,
                            Event::ItemAdded {
                                index: message_index,
                                item: message_item(&message_id, "", ItemStatus::InProgress),
                            },
                        );
                    }
                    emit(
                        events,
                        Event::TextDelta {
                            index: message_index,
                            item_id: message_id.clone(),
                            delta: text,
                        },
                    );
                }
            }
            started
        };
        let ask = async {
            let reply = upstream.complete(&turn, Some(&delta_tx)).await;
            drop(delta_tx);
            reply
        };
        let (reply, started) = tokio::join!(ask, forward);
        let reply = match reply {
            Ok(reply) => reply,
            Err(e) => {
                let status = Status::Failed {
                    code: e.code(),
                    message: e.to_string(),
                };
                return end(output, usage, tool_calls, status);
            }
        };
        usage += reply.usage;
        answered = reply
            .tool_calls
            .iter()
            .map(|call| call.id.len() + call.name.len() + call.arguments.len())
            .fold(
                answered.saturating_add(reply.text.len()),
                usize::saturating_add,
            );
        if answered > request.max_answer_bytes {
            let status = Status::Failed {
                code: "server_error",
                message: format!(
                    "the upstream model's answers in this response are larger than the limit \
                     of {} bytes together",
                    request.max_answer_bytes
                ),
            };
            return end(output, usage, tool_calls, status);
        }
        if !reply.text.is_empty() || started {
            let item = message_item(&message_id, &reply.text, ItemStatus::Completed);
            if !started {
                emit(
                    events,
                    Event::ItemAdded {
                        index: message_index,
                        item: message_item(&message_id, "", ItemStatus::InProgress),
                    },
                );
            }
            complete(&mut output, events, message_index, item);
        }
        if reply.tool_calls.is_empty() {
            let status = match reply.finish {
                Finish::Length => Status::Incomplete("max_output_tokens"),
                Finish::ContentFilter => Status::Incomplete("content_filter"),
                Finish::Stop => Status::Completed,
            };
            return end(output, usage, tool_calls, status);
        }
        let mut handed_back = false;
        for call in &reply.tool_calls {
            if request.tools.hosted(&call.name) {
                if tool_calls >= request.max_tool_calls {
                    return end(
                        output,
                        usage,
                        tool_calls,
                        Status::Incomplete("max_messages"),
                    );
                }
                let Some(sandbox) = sandbox else {
                    let status = Status::Failed {
                        code: "server_error",
                        message: "the hosted shell has no sandbox".into(),
                    };
                    return end(output, usage, tool_calls, status);
                };
                tool_calls += 1;
                let guardrail = output_guard.as_ref();
                let ran = match (call.name.as_str(), request.tools.shell_shape) {
                    (BASH, _) => {
                        run_hosted_bash(sandbox, call, &mut output, events, guardrail).await
                    }
                    (_, ShellShape::OpenRouter) => {
                        run_openrouter_shell(sandbox, call, &mut output, events, guardrail).await
                    }
                    (_, ShellShape::OpenAi) => {
                        run_hosted(sandbox, call, &mut output, events, guardrail).await
                    }
                };
                if let Err(status) = ran {
                    return end(output, usage, tool_calls, status);
                }
            } else {
                handed_back = true;
                let index = output.len();
                let item = client_call(call, &request.tools, ItemStatus::Completed);
                emit(
                    events,
                    Event::ItemAdded {
                        index,
                        item: in_progress(&item),
                    },
                );
                match &item {
                    Item::FunctionCall(function) => emit(
                        events,
                        Event::Arguments {
                            index,
                            item_id: function.id.clone().unwrap_or_default(),
                            arguments: call.arguments.clone(),
                        },
                    ),
                    Item::CustomToolCall(custom) => emit(
                        events,
                        Event::CustomInput {
                            index,
                            item_id: custom.id.clone().unwrap_or_default(),
                            input: call.arguments.clone(),
                        },
                    ),
                    _ => {}
                }
                complete(&mut output, events, index, item);
            }
        }
        if handed_back {
            return end(output, usage, tool_calls, Status::Completed);
        }
        // After a forced first call, the model must be free to answer.
        if matches!(tool_choice, ToolChoice::Required | ToolChoice::Named(_)) {
            tool_choice = ToolChoice::Auto;
        }
    }
}

/// Withholds a command's output: what the model reads instead.
fn withhold(result: &mut CommandResult, rules: &[String]) {
    result.stdout = String::new();
    result.stderr = format!(
        "shellgate: this command's output was withheld: it matched the prompt-injection \
         guardrail ({})\n",
        rules.join(", ")
    );
}

/// One shell call's results as the model may read them: checked by the
/// guardrail, redacted or withheld as its rules say. Each command's stdout
/// and stderr are checked apart and joined, and so are all the call's
/// outputs together (the model reads them together), so an injection split
/// between streams or commands is found: a block then withholds every
/// command it spans, a redaction it cannot cut out of one stream redacts
/// them whole. The end of what the model read from earlier calls of the
/// run is checked with it too: a match only the two make together
/// redacts (or withholds) this call's output whole.
fn guard_results(guard: &OutputGuard<'_>, results: Vec<CommandResult>) -> Vec<CommandResult> {
    use crate::guardrail::{Action, REDACTED};
    let mut results = guard_call(guard.rules, results);
    let streams: Vec<String> = results
        .iter()
        .flat_map(|r| [r.stdout.clone(), r.stderr.clone()])
        .collect();
    let mut earlier = guard.earlier.lock().unwrap_or_else(|p| p.into_inner());
    let views: Vec<&str> = streams.iter().map(String::as_str).collect();
    // A match only the earlier calls' output and this one's make
    // together: the earlier is read already, so this one gives way.
    if let Some(across) = guard.rules.check_across(&earlier, &views) {
        match across.action {
            Some(Action::Block) => {
                tracing::warn!(rules = ?across.rules, "prompt-injection guardrail: command output withheld (a match across calls)");
                results.iter_mut().for_each(|r| withhold(r, &across.rules));
            }
            Some(Action::Redact) => {
                tracing::warn!(rules = ?across.rules, "prompt-injection guardrail: command output redacted (a match across calls)");
                for result in &mut results {
                    for stream in [&mut result.stdout, &mut result.stderr] {
                        if !stream.is_empty() {
                            *stream = REDACTED.to_owned();
                        }
                    }
                }
            }
            _ => {
                tracing::warn!(rules = ?across.rules, "prompt-injection guardrail: command output flagged (a match across calls)");
            }
        }
    }
    // What the model has read last, for the next call.
    let read: Vec<&str> = results
        .iter()
        .flat_map(|r| [r.stdout.as_str(), r.stderr.as_str()])
        .collect();
    crate::guardrail::remember(&mut earlier, &read);
    results
}

/// A run's output guardrail: its rules, and the end of the command output
/// the model has read so far in the run.
struct OutputGuard<'a> {
    rules: &'a crate::guardrail::Guardrail,
    earlier: std::sync::Mutex<String>,
}

/// [`guard_results`] within one call.
fn guard_call(
    guardrail: &crate::guardrail::Guardrail,
    mut results: Vec<CommandResult>,
) -> Vec<CommandResult> {
    use crate::guardrail::Action;
    let streams = |results: &[CommandResult]| -> Vec<String> {
        results
            .iter()
            .flat_map(|r| [r.stdout.clone(), r.stderr.clone()])
            .collect()
    };
    let all = streams(&results);
    let views: Vec<&str> = all.iter().map(String::as_str).collect();
    let verdict = guardrail.check_parts(&views);
    match verdict.action {
        None => {}
        Some(Action::Flag) => {
            tracing::warn!(rules = ?verdict.rules, "prompt-injection guardrail: command output flagged");
        }
        Some(Action::Redact) => {
            tracing::warn!(rules = ?verdict.rules, "prompt-injection guardrail: command output redacted");
            let redacted = guardrail.redact_parts(&views);
            for (result, pair) in results.iter_mut().zip(redacted.chunks(2)) {
                if let [stdout, stderr] = pair {
                    result.stdout.clone_from(stdout);
                    result.stderr.clone_from(stderr);
                }
            }
        }
        Some(Action::Block) => {
            tracing::warn!(rules = ?verdict.rules, "prompt-injection guardrail: command output withheld");
            // The commands whose own output blocks are withheld; if what is
            // left still blocks, a match spans commands: all are withheld.
            let mut kept = Vec::new();
            for result in results.iter_mut() {
                let own = guardrail.check_parts(&[&result.stdout, &result.stderr]);
                if own.action == Some(Action::Block) {
                    withhold(result, &own.rules);
                } else {
                    kept.push(result.clone());
                }
            }
            let left = streams(&kept);
            let left: Vec<&str> = left.iter().map(String::as_str).collect();
            if guardrail.check_parts(&left).action == Some(Action::Block) {
                for result in results.iter_mut() {
                    withhold(result, &verdict.rules);
                }
            }
        }
    }
    results
}

/// A call handed back to the client, as announced before it is done.
fn in_progress(item: &Item) -> Item {
    let mut item = item.clone();
    match &mut item {
        Item::FunctionCall(FunctionCall { status, .. })
        | Item::ShellCall(ShellCall { status, .. })
        | Item::LocalShellCall(LocalShellCall { status, .. }) => {
            *status = Some(ItemStatus::InProgress)
        }
        _ => {}
    }
    item
}

/// The item for a call the client must answer. Its arguments are the
/// model's, as far as they can be read ([`crate::arguments`]); the client
/// runs them as it sees fit.
fn client_call(call: &ToolCall, tools: &Tools, status: ItemStatus) -> Item {
    if call.name == SHELL && tools.shell.is_some() {
        let arguments = ShellArguments::read(&call.arguments);
        return Item::ShellCall(ShellCall {
            id: Some(item_id("sh_")),
            call_id: Some(call.id.clone()),
            action: ShellAction {
                commands: arguments.commands,
                timeout_ms: arguments.timeout_ms.given(),
                max_output_length: arguments.max_output_length.given(),
                extra: wire::Extra::new(),
            },
            status: Some(status),
            environment: Some(CallEnvironment::Local),
            extra: wire::Extra::new(),
        });
    }
    if call.name == LOCAL_SHELL && tools.local_shell {
        let arguments = LocalShellArguments::read(&call.arguments);
        return Item::LocalShellCall(LocalShellCall {
            id: Some(item_id("lsh_")),
            call_id: Some(call.id.clone()),
            action: LocalShellAction {
                kind: LocalShellActionType::Exec,
                command: arguments.command,
                env: Default::default(),
                timeout_ms: arguments.timeout_ms.given(),
                working_directory: arguments.working_directory,
                user: None,
                extra: wire::Extra::new(),
            },
            status: Some(status),
            extra: wire::Extra::new(),
        });
    }
    user_call(call, tools, status)
}

/// The item for a call of a user's tool: a `function_call`, or a
/// `custom_tool_call` whose `input` is the raw text the model wrote; a
/// tool of a `namespace` group is named as the client named it, with its
/// namespace.
fn user_call(call: &ToolCall, tools: &Tools, status: ItemStatus) -> Item {
    let function = tools.function(&call.name);
    let (name, namespace) = function
        .map(|f| f.client_name())
        .unwrap_or((call.name.as_str(), None));
    let (name, namespace) = (name.to_owned(), namespace.map(str::to_owned));
    if function.is_some_and(|f| f.custom.is_some()) {
        return Item::CustomToolCall(CustomToolCall {
            id: Some(item_id("ctc_")),
            call_id: Some(call.id.clone()),
            name,
            namespace,
            input: call.arguments.clone(),
            extra: wire::Extra::new(),
        });
    }
    Item::FunctionCall(FunctionCall {
        id: Some(item_id("fc_")),
        call_id: Some(call.id.clone()),
        name,
        namespace,
        arguments: call.arguments.clone(),
        status: Some(status),
        extra: wire::Extra::new(),
    })
}

/// Runs one hosted shell call: its `shell_call` and `shell_call_output`
/// items are added to `output`. A call the model got wrong is answered with
/// the error as the output (exit code 2), so the model can correct itself.
async fn run_hosted(
    sandbox: &dyn Sandbox,
    call: &ToolCall,
    output: &mut Vec<Item>,
    events: Option<&EventSink>,
    guardrail: Option<&OutputGuard<'_>>,
) -> Result<(), Status> {
    let arguments = ShellArguments::read(&call.arguments);
    let container = sandbox.container().await.map_err(host_failed)?;
    let checked = arguments.run_request();
    // The limits the call runs with, unknown (`null`) when it cannot run.
    let (timeout_ms, max_output_length) = match &checked {
        Ok(request) => (
            Some(request.timeout_ms),
            Some(request.max_output_length as u64),
        ),
        Err(_) => (None, None),
    };
    let call_index = output.len();
    let shell_call = ShellCall {
        id: Some(item_id("sh_")),
        call_id: Some(call.id.clone()),
        action: ShellAction {
            commands: arguments.commands,
            timeout_ms,
            max_output_length,
            extra: wire::Extra::new(),
        },
        status: Some(ItemStatus::Completed),
        environment: Some(CallEnvironment::ContainerReference {
            container_id: container.clone(),
        }),
        extra: wire::Extra::new(),
    };
    // Announced without its commands: they follow one by one.
    let mut added = shell_call.clone();
    added.status = Some(ItemStatus::InProgress);
    added.action.commands = Vec::new();
    emit(
        events,
        Event::ItemAdded {
            index: call_index,
            item: Item::ShellCall(added),
        },
    );
    for (command_index, command) in shell_call.action.commands.iter().enumerate() {
        emit(
            events,
            Event::ShellCommand {
                index: call_index,
                command_index,
                command: command.clone(),
            },
        );
    }
    let shell_call = Item::ShellCall(shell_call);
    complete(output, events, call_index, shell_call);

    let output_index = output.len();
    let output_id = item_id("sho_");
    let max = checked
        .as_ref()
        .map(|r| r.max_output_length)
        .unwrap_or(limits::DEFAULT_MAX_OUTPUT_LENGTH) as u64;
    let mut shell_output = ShellCallOutput {
        id: Some(output_id.clone()),
        call_id: Some(call.id.clone()),
        status: Some(ItemStatus::InProgress),
        output: Vec::new(),
        max_output_length: Some(max),
        extra: wire::Extra::new(),
    };
    emit(
        events,
        Event::ItemAdded {
            index: output_index,
            item: Item::ShellCallOutput(shell_output.clone()),
        },
    );
    let live = events.map(|events| (events, output_index, output_id.as_str()));
    let results = execute(sandbox, &container, checked, live, guardrail).await?;
    for (command_index, result) in results.iter().enumerate() {
        emit(
            events,
            Event::ShellCommandDone {
                index: output_index,
                item_id: output_id.clone(),
                command_index,
                result: ShellResult::from(result),
            },
        );
    }
    shell_output.status = Some(ItemStatus::Completed);
    shell_output.output = results.iter().map(ShellResult::from).collect();
    let shell_output = Item::ShellCallOutput(shell_output);
    complete(output, events, output_index, shell_output);
    Ok(())
}

fn host_failed(e: HostError) -> Status {
    Status::Failed {
        code: e.code,
        message: e.message,
    }
}

/// What a command that exited with `exit_code` having written `stdout`
/// and `stderr` answers (for answers the loop gives itself, not run).
fn exited(stdout: &str, stderr: String, exit_code: i32) -> CommandResult {
    CommandResult {
        stdout: stdout.to_owned(),
        stderr,
        outcome: shellgate_wire::Outcome::Exit { exit_code },
        duration_ms: 0,
        bytes_out: 0,
    }
}

/// Runs a checked shell call in `container` and returns each command's
/// result as the model may read it (through the guardrail). A call the
/// model got wrong is answered with the problem (exit code 2), so the model
/// can correct itself. `live`: where output goes as it comes (the events,
/// and the index and id of the output item it belongs to).
async fn execute(
    sandbox: &dyn Sandbox,
    container: &str,
    checked: Result<RunRequest, String>,
    live: Option<(&EventSink, usize, &str)>,
    guardrail: Option<&OutputGuard<'_>>,
) -> Result<Vec<CommandResult>, Status> {
    let results: Vec<CommandResult> = match checked {
        Err(problem) => vec![exited(
            "",
            format!("shellgate: the shell call was not run: {problem}\n"),
            2,
        )],
        Ok(request) => {
            let (sink, mut deltas) = tokio::sync::mpsc::unbounded_channel::<OutputDelta>();
            let forward = async {
                while let Some(delta) = deltas.recv().await {
                    if let Some((events, index, item_id)) = live {
                        emit(
                            Some(events),
                            Event::ShellOutput {
                                index,
                                item_id: item_id.to_owned(),
                                command_index: delta.command,
                                stream: delta.stream,
                                text: delta.text,
                            },
                        );
                    }
                }
            };
            let sink = live.map(|_| sink);
            let ran = async { sandbox.run(container, request, sink).await };
            let (ran, ()) = tokio::join!(ran, forward);
            ran.map_err(host_failed)?
        }
    };
    Ok(match guardrail {
        Some(guardrail) => guard_results(guardrail, results),
        None => results,
    })
}

/// Runs one hosted call of `openrouter:shell`: one `openrouter:shell` item
/// (the container, the commands, each command's result) is added to
/// `output`, announced in progress and done when its results are in.
async fn run_openrouter_shell(
    sandbox: &dyn Sandbox,
    call: &ToolCall,
    output: &mut Vec<Item>,
    events: Option<&EventSink>,
    guardrail: Option<&OutputGuard<'_>>,
) -> Result<(), Status> {
    let arguments = ShellArguments::read(&call.arguments);
    let container = sandbox.container().await.map_err(host_failed)?;
    let checked = arguments.run_request();
    let mut item = OpenRouterShell {
        id: Some(item_id("orsh_")),
        call_id: Some(call.id.clone()),
        container_id: Some(container.clone()),
        action: OpenRouterShellAction {
            commands: arguments.commands,
            extra: wire::Extra::new(),
        },
        output: Vec::new(),
        status: Some(ItemStatus::InProgress),
        extra: wire::Extra::new(),
    };
    let index = output.len();
    emit(
        events,
        Event::ItemAdded {
            index,
            item: Item::OpenRouterShell(item.clone()),
        },
    );
    item.output = execute(sandbox, &container, checked, None, guardrail)
        .await?
        .iter()
        .map(ShellResult::from)
        .collect();
    item.status = Some(ItemStatus::Completed);
    let item = Item::OpenRouterShell(item);
    complete(output, events, index, item);
    Ok(())
}

/// What Anthropic's bash tool answers to `restart`: each command already
/// runs in a fresh `bash`, so there is nothing else to restart.
const BASH_RESTARTED: &str = "The bash tool has been restarted.";

/// Runs one hosted call of `openrouter:bash` (`command`, or `restart`):
/// one `openrouter:bash` item (the container, the command, its result) is
/// added to `output`, announced in progress (its `output` null) and done
/// when the result is in.
async fn run_hosted_bash(
    sandbox: &dyn Sandbox,
    call: &ToolCall,
    output: &mut Vec<Item>,
    events: Option<&EventSink>,
    guardrail: Option<&OutputGuard<'_>>,
) -> Result<(), Status> {
    let arguments = BashArguments::read(&call.arguments);
    let container = sandbox.container().await.map_err(host_failed)?;
    let mut item = OpenRouterBash {
        id: Some(item_id("orb_")),
        call_id: Some(call.id.clone()),
        container_id: Some(container.clone()),
        action: OpenRouterBashAction {
            command: arguments.command.clone(),
            restart: arguments.restart,
            extra: wire::Extra::new(),
        },
        output: None,
        status: Some(ItemStatus::InProgress),
        extra: wire::Extra::new(),
    };
    let index = output.len();
    emit(
        events,
        Event::ItemAdded {
            index,
            item: Item::OpenRouterBash(item.clone()),
        },
    );
    let result = if arguments.restart {
        Some(exited(BASH_RESTARTED, String::new(), 0))
    } else {
        let checked = if arguments.command.trim().is_empty() {
            Err("the bash tool needs a command".to_owned())
        } else {
            ShellArguments {
                commands: vec![arguments.command],
                ..ShellArguments::default()
            }
            .run_request()
        };
        execute(sandbox, &container, checked, None, guardrail)
            .await?
            .into_iter()
            .next()
    };
    item.output = result.as_ref().map(ShellResult::from);
    item.status = Some(ItemStatus::Completed);
    let item = Item::OpenRouterBash(item);
    complete(output, events, index, item);
    Ok(())
}

#[cfg(test)]
mod tests;
