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

use async_trait::async_trait;
use serde_json::{json, Value};
use shellgate_sandbox::backend::{limits, CommandResult, OutputDelta, RunRequest, StreamKind};

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
        deltas: Option<shellgate_sandbox::backend::DeltaSink>,
    ) -> Result<Vec<CommandResult>, HostError>;
}

/// What happens in a response, for streaming.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// An output item began at `index` of `output`.
    ItemAdded { index: usize, item: Value },
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
        result: Value,
    },
    /// The output item at `index` is complete.
    ItemDone { index: usize, item: Value },
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
    pub output: Vec<Value>,
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
    pub items: Vec<Value>,
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
}

/// A new item id: `prefix` and 32 hex digits.
pub use shellgate_wire::new_id as item_id;

fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({
        "type": "message",
        "id": id,
        "role": "assistant",
        "status": status,
        "content": if text.is_empty() && status == "in_progress" {
            json!([])
        } else {
            json!([{"type": "output_text", "text": text, "annotations": []}])
        },
    })
}

/// Sends an event if anyone listens.
fn emit(events: Option<&EventSink>, event: Event) {
    if let Some(sink) = events {
        let _ = sink.send(event);
    }
}

/// The arguments of a shell call, checked; an explanation for the model if
/// they are wrong.
fn shell_request(arguments: &Value) -> Result<RunRequest, String> {
    let commands: Vec<String> = arguments
        .get("commands")
        .and_then(Value::as_array)
        .map(|c| {
            c.iter()
                .filter_map(|c| c.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let request = RunRequest {
        commands,
        timeout_ms: arguments
            .get("timeout_ms")
            .and_then(Value::as_u64)
            .unwrap_or(limits::DEFAULT_TIMEOUT_MS)
            .clamp(1, limits::MAX_TIMEOUT_MS),
        max_output_length: arguments
            .get("max_output_length")
            .and_then(Value::as_u64)
            .map(|n| n as usize)
            .unwrap_or(limits::DEFAULT_MAX_OUTPUT_LENGTH)
            .clamp(1, limits::MAX_OUTPUT_LENGTH),
        deadline_ms: None,
    };
    request.validate().map_err(|e| e.to_string())?;
    Ok(request)
}

/// Runs the loop. `events` receives what happens as it happens.
pub async fn run(
    upstream: &dyn Upstream,
    sandbox: Option<&dyn Sandbox>,
    request: &Request,
    events: Option<&EventSink>,
) -> Outcome {
    let mut output: Vec<Value> = Vec::new();
    let mut usage = Usage::default();
    let mut tool_calls = 0u32;
    let specs = request
        .tools
        .specs(&|_: &Environment| request.environment_description.clone());
    let end = |output: Vec<Value>, usage, tool_calls, status| Outcome {
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
        let mut items = request.items.clone();
        items.extend(output.iter().cloned());
        let turn = Turn {
            model: request.model.clone(),
            messages: conversation::messages(request.instructions.as_deref(), &items),
            tools: specs.clone(),
            tool_choice: tool_choice.clone(),
            temperature: request.temperature,
            top_p: request.top_p,
            max_output_tokens: request.max_output_tokens,
            parallel_tool_calls: request.parallel_tool_calls,
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
                                item: message_item(&message_id, "", "in_progress"),
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
            let item = message_item(&message_id, &reply.text, "completed");
            if !started {
                emit(
                    events,
                    Event::ItemAdded {
                        index: message_index,
                        item: message_item(&message_id, "", "in_progress"),
                    },
                );
            }
            emit(
                events,
                Event::ItemDone {
                    index: message_index,
                    item: item.clone(),
                },
            );
            output.push(item);
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
                let item = client_call(call, &request.tools);
                emit(
                    events,
                    Event::ItemAdded {
                        index,
                        item: in_progress(&item),
                    },
                );
                if item["type"] == "function_call" {
                    emit(
                        events,
                        Event::Arguments {
                            index,
                            item_id: item["id"].as_str().unwrap_or_default().to_owned(),
                            arguments: call.arguments.clone(),
                        },
                    );
                }
                emit(
                    events,
                    Event::ItemDone {
                        index,
                        item: item.clone(),
                    },
                );
                output.push(item);
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
fn withhold(result: &mut Value, rules: &[String]) {
    result["stdout"] = json!("");
    result["stderr"] = json!(format!(
        "shellgate: this command's output was withheld: it matched the prompt-injection \
         guardrail ({})\n",
        rules.join(", ")
    ));
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
fn guard_results(guard: &OutputGuard<'_>, results: Vec<Value>) -> Vec<Value> {
    use crate::guardrail::{Action, REDACTED};
    let mut results = guard_call(guard.rules, results);
    let streams: Vec<String> = results
        .iter()
        .flat_map(|r| {
            ["stdout", "stderr"].map(|key| r[key].as_str().unwrap_or_default().to_owned())
        })
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
                    for key in ["stdout", "stderr"] {
                        if result[key].as_str().is_some_and(|s| !s.is_empty()) {
                            result[key] = json!(REDACTED);
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
        .flat_map(|r| ["stdout", "stderr"].map(|key| r[key].as_str().unwrap_or_default()))
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
fn guard_call(guardrail: &crate::guardrail::Guardrail, mut results: Vec<Value>) -> Vec<Value> {
    use crate::guardrail::Action;
    let text = |result: &Value, key: &str| result[key].as_str().unwrap_or_default().to_owned();
    let streams = |results: &[Value]| -> Vec<String> {
        results
            .iter()
            .flat_map(|r| [text(r, "stdout"), text(r, "stderr")])
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
                result["stdout"] = json!(pair[0]);
                result["stderr"] = json!(pair[1]);
            }
        }
        Some(Action::Block) => {
            tracing::warn!(rules = ?verdict.rules, "prompt-injection guardrail: command output withheld");
            // The commands whose own output blocks are withheld; if what is
            // left still blocks, a match spans commands: all are withheld.
            let mut kept = Vec::new();
            for result in results.iter_mut() {
                let own =
                    guardrail.check_parts(&[&text(result, "stdout"), &text(result, "stderr")]);
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

fn in_progress(item: &Value) -> Value {
    let mut item = item.clone();
    item["status"] = json!("in_progress");
    item
}

/// The item for a call the client must answer.
fn client_call(call: &ToolCall, tools: &Tools) -> Value {
    let arguments: Value = serde_json::from_str(&call.arguments).unwrap_or(json!({}));
    if call.name == SHELL && tools.shell.is_some() {
        return json!({
            "type": "shell_call",
            "id": item_id("sh_"),
            "call_id": call.id,
            "action": {
                "commands": arguments.get("commands").cloned().unwrap_or(json!([])),
                "timeout_ms": arguments.get("timeout_ms").cloned().unwrap_or(Value::Null),
                "max_output_length": arguments.get("max_output_length").cloned().unwrap_or(Value::Null),
            },
            "status": "completed",
            "environment": {"type": "local"},
        });
    }
    if call.name == LOCAL_SHELL && tools.local_shell {
        return json!({
            "type": "local_shell_call",
            "id": item_id("lsh_"),
            "call_id": call.id,
            "action": {
                "type": "exec",
                "command": arguments.get("command").cloned().unwrap_or(json!([])),
                "env": {},
                "timeout_ms": arguments.get("timeout_ms").cloned().unwrap_or(Value::Null),
                "working_directory": arguments.get("working_directory").cloned().unwrap_or(Value::Null),
                "user": Value::Null,
            },
            "status": "completed",
        });
    }
    json!({
        "type": "function_call",
        "id": item_id("fc_"),
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments,
        "status": "completed",
    })
}

/// Runs one hosted shell call: its `shell_call` and `shell_call_output`
/// items are added to `output`. A call the model got wrong is answered with
/// the error as the output (exit code 2), so the model can correct itself.
async fn run_hosted(
    sandbox: &dyn Sandbox,
    call: &ToolCall,
    output: &mut Vec<Value>,
    events: Option<&EventSink>,
    guardrail: Option<&OutputGuard<'_>>,
) -> Result<(), Status> {
    let (arguments, container) = hosted_call(sandbox, call).await?;
    let checked = shell_request(&arguments);
    let (commands, timeout_ms, max_output_length) = match &checked {
        Ok(request) => (
            request.commands.clone(),
            json!(request.timeout_ms),
            json!(request.max_output_length),
        ),
        Err(_) => (asked_commands(&arguments), Value::Null, Value::Null),
    };
    let call_index = output.len();
    let shell_call = json!({
        "type": "shell_call",
        "id": item_id("sh_"),
        "call_id": call.id,
        "action": {
            "commands": commands,
            "timeout_ms": timeout_ms,
            "max_output_length": max_output_length,
        },
        "status": "completed",
        "environment": {"type": "container_reference", "container_id": container},
    });
    let mut added = shell_call.clone();
    added["status"] = json!("in_progress");
    added["action"]["commands"] = json!([]);
    emit(
        events,
        Event::ItemAdded {
            index: call_index,
            item: added,
        },
    );
    for (command_index, command) in commands.iter().enumerate() {
        emit(
            events,
            Event::ShellCommand {
                index: call_index,
                command_index,
                command: command.clone(),
            },
        );
    }
    emit(
        events,
        Event::ItemDone {
            index: call_index,
            item: shell_call.clone(),
        },
    );
    output.push(shell_call);

    let output_index = output.len();
    let output_id = item_id("sho_");
    let max = checked
        .as_ref()
        .map(|r| r.max_output_length)
        .unwrap_or(limits::DEFAULT_MAX_OUTPUT_LENGTH);
    emit(
        events,
        Event::ItemAdded {
            index: output_index,
            item: json!({
                "type": "shell_call_output",
                "id": output_id,
                "call_id": call.id,
                "status": "in_progress",
                "output": [],
                "max_output_length": max,
            }),
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
                result: result.clone(),
            },
        );
    }
    let shell_output = json!({
        "type": "shell_call_output",
        "id": output_id,
        "call_id": call.id,
        "status": "completed",
        "output": results,
        "max_output_length": max,
    });
    emit(
        events,
        Event::ItemDone {
            index: output_index,
            item: shell_output.clone(),
        },
    );
    output.push(shell_output);
    Ok(())
}

/// The commands a shell call asked for, as far as they can be read.
fn asked_commands(arguments: &Value) -> Vec<String> {
    arguments
        .get("commands")
        .and_then(Value::as_array)
        .map(|c| {
            c.iter()
                .filter_map(|c| c.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn host_failed(e: HostError) -> Status {
    Status::Failed {
        code: e.code,
        message: e.message,
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
) -> Result<Vec<Value>, Status> {
    let results: Vec<Value> = match checked {
        Err(problem) => vec![json!({
            "stdout": "",
            "stderr": format!("shellgate: the shell call was not run: {problem}\n"),
            "outcome": {"type": "exit", "exit_code": 2},
        })],
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
                .into_iter()
                .map(|r| serde_json::to_value(r).unwrap_or(Value::Null))
                .collect()
        }
    };
    Ok(match guardrail {
        Some(guardrail) => guard_results(guardrail, results),
        None => results,
    })
}

/// The arguments of a hosted call (what could be read of them) and the
/// container it runs in.
async fn hosted_call(sandbox: &dyn Sandbox, call: &ToolCall) -> Result<(Value, String), Status> {
    let arguments: Value = serde_json::from_str(&call.arguments).unwrap_or(json!({}));
    let container = sandbox.container().await.map_err(host_failed)?;
    Ok((arguments, container))
}

/// Adds one of OpenRouter's items, which hold a call and its result
/// together: announced in progress, its `output` filled by `result`, done.
async fn add_openrouter_item(
    output: &mut Vec<Value>,
    events: Option<&EventSink>,
    mut item: Value,
    result: impl std::future::Future<Output = Result<Value, Status>>,
) -> Result<(), Status> {
    let index = output.len();
    emit(
        events,
        Event::ItemAdded {
            index,
            item: item.clone(),
        },
    );
    item["output"] = result.await?;
    item["status"] = json!("completed");
    emit(
        events,
        Event::ItemDone {
            index,
            item: item.clone(),
        },
    );
    output.push(item);
    Ok(())
}

/// Runs one hosted call of `openrouter:shell`: one `openrouter:shell` item
/// (the container, the commands, each command's result) is added to
/// `output`.
async fn run_openrouter_shell(
    sandbox: &dyn Sandbox,
    call: &ToolCall,
    output: &mut Vec<Value>,
    events: Option<&EventSink>,
    guardrail: Option<&OutputGuard<'_>>,
) -> Result<(), Status> {
    let (arguments, container) = hosted_call(sandbox, call).await?;
    let checked = shell_request(&arguments);
    let commands = match &checked {
        Ok(request) => request.commands.clone(),
        Err(_) => asked_commands(&arguments),
    };
    let item = json!({
        "type": "openrouter:shell",
        "id": item_id("orsh_"),
        "call_id": call.id,
        "container_id": container,
        "action": {"commands": commands},
        "output": [],
        "status": "in_progress",
    });
    let results = async {
        Ok(json!(
            execute(sandbox, &container, checked, None, guardrail).await?
        ))
    };
    add_openrouter_item(output, events, item, results).await
}

/// What Anthropic's bash tool answers to `restart`: each command already
/// runs in a fresh `bash`, so there is nothing else to restart.
const BASH_RESTARTED: &str = "The bash tool has been restarted.";

/// Runs one hosted call of `openrouter:bash` (`command`, or `restart`):
/// one `openrouter:bash` item (the container, the command, its result) is
/// added to `output`.
async fn run_hosted_bash(
    sandbox: &dyn Sandbox,
    call: &ToolCall,
    output: &mut Vec<Value>,
    events: Option<&EventSink>,
    guardrail: Option<&OutputGuard<'_>>,
) -> Result<(), Status> {
    let (arguments, container) = hosted_call(sandbox, call).await?;
    let restart = arguments.get("restart").and_then(Value::as_bool) == Some(true);
    let command = arguments
        .get("command")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let item = json!({
        "type": "openrouter:bash",
        "id": item_id("orb_"),
        "call_id": call.id,
        "container_id": container,
        "action": {"command": command, "restart": restart},
        "output": Value::Null,
        "status": "in_progress",
    });
    let result = async {
        if restart {
            return Ok(json!({
                "stdout": BASH_RESTARTED,
                "stderr": "",
                "outcome": {"type": "exit", "exit_code": 0},
            }));
        }
        let checked = if command.trim().is_empty() {
            Err("the bash tool needs a command".to_owned())
        } else {
            shell_request(&json!({ "commands": [command] }))
        };
        Ok(execute(sandbox, &container, checked, None, guardrail)
            .await?
            .into_iter()
            .next()
            .unwrap_or(Value::Null))
    };
    add_openrouter_item(output, events, item, result).await
}

#[cfg(test)]
mod tests;
