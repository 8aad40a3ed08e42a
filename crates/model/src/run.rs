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
//! engine's command path guarantees it). A call of OpenAI's
//! `code_interpreter` runs its code through [`Sandbox::interpret`] (the
//! kernel, in the same container as the hosted shell's) and becomes one
//! `code_interpreter_call` item (in progress, interpreting, completed; its
//! logs and images); the files it wrote are cited on the response's final
//! message as `container_file_citation` annotations ([`citations`]).
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
use crate::tools::{
    Environment, ShellShape, Tools, BASH, BASH_CODE_EXECUTION, CODE_EXECUTION, CODE_INTERPRETER,
    GOOGLE_CODE_EXECUTION, LOCAL_SHELL, SHELL, TEXT_EDITOR_CODE_EXECUTION,
};
use crate::upstream::{Delta, Finish, Reply, ToolCall, ToolChoice, Turn, Upstream, Usage};

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

    /// Runs Python `code` in the container's code interpreter (its kernel
    /// state kept between calls of one response and across responses on
    /// the same container). A sandbox without one says so: the response
    /// fails.
    async fn interpret(&self, container: &str, code: &str) -> Result<Interpretation, HostError> {
        let _ = (container, code);
        Err(HostError {
            code: "server_error",
            message: "the code interpreter is not supported by this server's sandbox".into(),
        })
    }

    /// Runs Python `code` as [`Sandbox::interpret`] does, interrupted after
    /// `timeout` (a tool with a documented limit of its own: Google's code
    /// execution), and tells how it ended.
    async fn interpret_within(
        &self,
        container: &str,
        code: &str,
        timeout: std::time::Duration,
    ) -> Result<(Interpretation, Ended), HostError> {
        let _ = (container, code, timeout);
        Err(HostError {
            code: "server_error",
            message: "code execution is not supported by this server's sandbox".into(),
        })
    }

    /// Runs a Python cell whose code may call the client's `tools`
    /// (Anthropic's programmatic tool calling) as [`Sandbox::interpret`]
    /// does (within `timeout`, if given; the time it waits on the client
    /// does not count): it ends, or pauses at its calls, waiting for the
    /// client's results under the name `cell` (its `server_tool_use` id)
    /// until [`Sandbox::resume_cell`] gives them, in this request or a
    /// later one. A sandbox without one says so: the response fails.
    async fn interpret_calling(
        &self,
        container: &str,
        cell: &str,
        code: &str,
        tools: &[crate::tools::CodeTool],
        timeout: Option<std::time::Duration>,
    ) -> Result<Cell, HostError> {
        let _ = (container, cell, code, tools, timeout);
        Err(HostError {
            code: "server_error",
            message: "code calling the client's tools is not supported by this server's sandbox"
                .into(),
        })
    }

    /// Gives the paused cell `cell` the client's results of its calls: it
    /// goes on until it ends or pauses again.
    async fn resume_cell(
        &self,
        container: &str,
        cell: &str,
        answers: &[crate::tools::ToolAnswer],
    ) -> Result<Cell, HostError> {
        let _ = (container, cell, answers);
        Ok(Cell::Gone)
    }

    /// The container's files now, so that [`Sandbox::output_files`] can
    /// tell which a call then wrote (Anthropic's code execution returns
    /// them). A sandbox that keeps no files marks none.
    async fn mark_files(&self, container: &str) -> Result<FileMark, HostError> {
        let _ = container;
        Ok(FileMark::default())
    }

    /// The files created or changed in the container since `mark`, each
    /// stored as a Files API file for the client to download.
    async fn output_files(
        &self,
        container: &str,
        mark: &FileMark,
    ) -> Result<OutputFiles, HostError> {
        let _ = (container, mark);
        Ok(OutputFiles::default())
    }
}

/// A call a cell made of one of the client's tools.
#[derive(Debug, Clone, PartialEq)]
pub struct CodeCall {
    /// Its id, which the client's `tool_result` names (`toolu_...`).
    pub id: String,
    pub name: String,
    pub input: serde_json::Map<String, serde_json::Value>,
}

/// Where a cell calling the client's tools is.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// It ended: what it gave (its `raised` and `timed_out` say how).
    Done(Interpretation),
    /// It waits for the client's results of these calls.
    Paused(Vec<CodeCall>),
    /// No cell of that name waits here (its container was suspended or
    /// removed, or the server restarted).
    Gone,
}

/// A container's files at one moment: path → (size, modification second).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileMark(pub std::collections::HashMap<String, (u64, i64)>);

/// The files a call wrote, as Files API files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutputFiles {
    /// Their Files API ids, in the order of their paths.
    pub file_ids: Vec<String>,
    /// Some were larger than a Files API file may be, and are left out.
    pub too_large: bool,
}

/// How a call's code ended, for the tools that tell it apart from its logs
/// (Google's `outcome`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ended {
    /// It raised (its traceback is in the logs).
    pub raised: bool,
    /// It ran past its time and was interrupted.
    pub timed_out: bool,
}

/// What running code in the code interpreter gave.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interpretation {
    /// What it printed (stdout, stderr), its last expression's text and
    /// its error's traceback, in order.
    pub logs: String,
    /// The PNG images it showed (matplotlib figures), base64.
    pub images: Vec<String>,
    /// The files it created or changed under `/mnt/data`, as container
    /// files of the container it ran in.
    pub files: Vec<WrittenFile>,
    /// It raised (its traceback is in the logs).
    pub raised: bool,
    /// It ran past its time and was interrupted (the kernel keeps its
    /// state).
    pub timed_out: bool,
    /// It ran on a new kernel where the container had one before, whose
    /// state (variables, imports) is gone: the container was suspended
    /// (its processes ended) or the kernel died.
    pub kernel_lost: bool,
}

/// A file the code interpreter's code wrote: a container file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenFile {
    /// Its `cfile_...` id.
    pub file_id: String,
    /// Its name (the last part of its path).
    pub filename: String,
    /// Its path in the container (`/mnt/data/...`).
    pub path: String,
}

/// A step of a `code_interpreter_call`, for streaming.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InterpreterStep {
    /// Announced (after its item was added).
    InProgress,
    /// Its code, whole.
    Code(String),
    /// Its code is running.
    Interpreting,
    /// Its code ran (its item is done next).
    Completed,
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
    /// A part of the summary of the reasoning at `index` begins.
    ReasoningSummaryPart {
        index: usize,
        item_id: String,
        summary_index: usize,
    },
    /// More of part `summary_index` of the summary of the reasoning at
    /// `index`.
    ReasoningSummaryDelta {
        index: usize,
        item_id: String,
        summary_index: usize,
        delta: String,
    },
    /// Part `summary_index` of the summary of the reasoning at `index` is
    /// complete.
    ReasoningSummaryDone {
        index: usize,
        item_id: String,
        summary_index: usize,
        text: String,
    },
    /// A step of the code interpreter call at `index`.
    Interpreter {
        index: usize,
        item_id: String,
        step: InterpreterStep,
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
    cited_message_item(id, text, status, Vec::new())
}

/// [`message_item`] with these annotations on its text.
fn cited_message_item(
    id: &str,
    text: &str,
    status: ItemStatus,
    annotations: Vec<wire::Annotation>,
) -> Item {
    // A message announced before its text has no part yet.
    let content = if text.is_empty() && status == ItemStatus::InProgress {
        Vec::new()
    } else {
        vec![wire::ContentPart::OutputText(OutputText::answer(
            text.to_owned(),
            annotations,
        ))]
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

/// An output item starts: it is told added, in progress, at the index it
/// will have in `output` once complete, which this returns.
fn announce(output: &[Item], events: Option<&EventSink>, item: Item) -> usize {
    let index = output.len();
    emit(events, Event::ItemAdded { index, item });
    index
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
    let mut run = Run {
        request,
        events,
        output: Vec::new(),
        usage: Usage::default(),
        tool_calls: 0,
        answered: 0,
        written: Vec::new(),
    };
    let status = run.turns(upstream, sandbox).await;
    Outcome {
        output: run.output,
        usage: run.usage,
        status,
        tool_calls: run.tool_calls,
    }
}

/// A run under way: what it made so far.
struct Run<'a> {
    request: &'a Request,
    events: Option<&'a EventSink>,
    output: Vec<Item>,
    usage: Usage,
    /// Hosted tool calls run.
    tool_calls: u32,
    /// Bytes the model wrote over the turns so far (see
    /// `Request::max_answer_bytes`).
    answered: usize,
    /// The files the code interpreter wrote, with their container: cited on
    /// the final message.
    written: Vec<(String, WrittenFile)>,
}

impl Run<'_> {
    /// Turns until one ends the response: how it ended.
    async fn turns(&mut self, upstream: &dyn Upstream, sandbox: Option<&dyn Sandbox>) -> Status {
        let request = self.request;
        let specs = request
            .tools
            .specs(&|_: &Environment| request.environment_description.clone());
        let mut tool_choice = request.tool_choice.clone();
        let output_guard = request
            .output_guardrail
            .as_deref()
            .map(|rules| OutputGuard {
                rules,
                earlier: std::sync::Mutex::new(String::new()),
            });
        // A cell paused on the client's tools goes on first with their
        // results; paused again, the response ends with its new calls.
        if let Some(execution) = &request.tools.code_execution {
            if let Some(paused) = &execution.resume {
                let Some(sandbox) = sandbox else {
                    return Status::Failed {
                        code: "server_error",
                        message: "code execution has no sandbox".into(),
                    };
                };
                match code_execution::resume(
                    sandbox,
                    paused,
                    execution,
                    &mut self.output,
                    self.events,
                    output_guard.as_ref(),
                )
                .await
                {
                    Err(status) => return status,
                    Ok(Some(calls)) => {
                        self.hand_back_code_calls(&calls, execution, &paused.cell);
                        return Status::Completed;
                    }
                    Ok(None) => {}
                }
            }
        }
        loop {
            let turn = Turn {
                model: request.model.clone(),
                messages: conversation::messages_offering(
                    request.instructions.as_deref(),
                    request.items.iter().chain(&self.output),
                    &|name| request.tools.function(name).is_some() || request.tools.hosted(name),
                ),
                tools: specs.clone(),
                tool_choice: tool_choice.clone(),
                temperature: request.temperature,
                top_p: request.top_p,
                max_output_tokens: request.max_output_tokens,
                parallel_tool_calls: request.parallel_tool_calls,
                carry: request.tools.carry(request.carry.clone()),
            };
            let base = self.output.len();
            let message_id = item_id("msg_");
            let (reply, slots, open) =
                stream_turn(upstream, &turn, self.events, base, &message_id).await;
            let reply = match reply {
                Ok(reply) => reply,
                Err(e) => {
                    return Status::Failed {
                        code: e.code(),
                        message: e.to_string(),
                    }
                }
            };
            self.usage += reply.usage;
            if let Err(status) = self.count_answer(&reply) {
                return status;
            }
            self.place_reply(&reply, slots, open, base, &message_id);
            // A call of a tool shellgate does not know (the upstream's own
            // item) is the client's to answer: the response ends with it.
            let foreign_call = self.output[base..]
                .iter()
                .any(|item| matches!(item, Item::FunctionCall(_) | Item::CustomToolCall(_)));
            if reply.tool_calls.is_empty() {
                return match reply.finish {
                    Finish::Length => Status::Incomplete("max_output_tokens"),
                    Finish::ContentFilter => Status::Incomplete("content_filter"),
                    Finish::Stop => Status::Completed,
                };
            }
            match self
                .tool_round(&reply.tool_calls, sandbox, output_guard.as_ref())
                .await
            {
                Err(status) => return status,
                Ok(handed_back) if handed_back || foreign_call => return Status::Completed,
                Ok(_) => {}
            }
            // After a forced first call, the model must be free to answer.
            if matches!(tool_choice, ToolChoice::Required | ToolChoice::Named(_)) {
                tool_choice = ToolChoice::Auto;
            }
        }
    }

    /// Adds what the model wrote this turn to what it wrote before: past
    /// `max_answer_bytes` the run fails.
    fn count_answer(&mut self, reply: &Reply) -> Result<(), Status> {
        self.answered = reply
            .tool_calls
            .iter()
            .map(|call| call.id.len() + call.name.len() + call.arguments.len())
            .chain(reply.reasoning.iter().map(reasoning_bytes))
            .chain(
                reply
                    .native
                    .iter()
                    .map(|native| native.item.to_string().len()),
            )
            .fold(
                self.answered.saturating_add(reply.text.len()),
                usize::saturating_add,
            );
        if self.answered > self.request.max_answer_bytes {
            return Err(Status::Failed {
                code: "server_error",
                message: format!(
                    "the upstream model's answers in this response are larger than the limit \
                     of {} bytes together",
                    self.request.max_answer_bytes
                ),
            });
        }
        Ok(())
    }

    /// Puts a turn's items in the output, in the order the upstream told
    /// them, telling done what was not yet: a reasoning still open, what
    /// the upstream did not stream, the message.
    fn place_reply(
        &mut self,
        reply: &Reply,
        mut slots: Vec<Slot>,
        open: Option<OpenReasoning>,
        base: usize,
        message_id: &str,
    ) {
        let events = self.events;
        let started = slots.contains(&Slot::Message);
        // A reasoning whose summary streamed but that was not told done:
        // done with the reply's reasoning in its place.
        if let Some(open) = open {
            let place = slots[..open.slot]
                .iter()
                .filter(|slot| matches!(slot, Slot::Reasoning(_) | Slot::Open))
                .count();
            let reasoning =
                reply
                    .reasoning
                    .get(place)
                    .cloned()
                    .unwrap_or_else(|| crate::upstream::Reasoning {
                        summary: open.parts.clone(),
                        ..Default::default()
                    });
            open.finish(events, &mut slots, base, &reasoning);
        }
        // What the upstream did not tell as it came: after what it told
        // (before the message, unless that has begun).
        let told = |reasoning: bool| {
            slots
                .iter()
                .filter(|slot| match slot {
                    Slot::Reasoning(_) | Slot::Open => reasoning,
                    Slot::Native(_) => !reasoning,
                    Slot::Message => false,
                })
                .count()
        };
        let untold: Vec<Slot> = (reply.reasoning.iter().skip(told(true)))
            .map(|reasoning| Slot::Reasoning(reasoning_output(reasoning)))
            .chain(
                (reply.native.iter().skip(told(false)))
                    .map(|native| Slot::Native(native_output(native))),
            )
            .collect();
        for slot in untold {
            slot.tell(events, base + slots.len());
            slots.push(slot);
        }
        if !reply.text.is_empty() && !started {
            slots.push(Slot::Message);
            emit(
                events,
                Event::ItemAdded {
                    index: base + slots.len() - 1,
                    item: message_item(message_id, "", ItemStatus::InProgress),
                },
            );
        }
        for slot in slots {
            match slot {
                Slot::Reasoning(item) | Slot::Native(item) => self.output.push(item),
                // Every open reasoning was finished above.
                Slot::Open => {}
                Slot::Message => {
                    // The final answer (no call follows) cites the files.
                    let cited = if reply.tool_calls.is_empty() {
                        citations(&reply.text, &self.written)
                    } else {
                        Vec::new()
                    };
                    let item =
                        cited_message_item(message_id, &reply.text, ItemStatus::Completed, cited);
                    let index = self.output.len();
                    complete(&mut self.output, events, index, item);
                }
            }
        }
    }

    /// Runs a turn's tool calls in order: the hosted ones here, the others
    /// told as the client's to answer. Whether any was handed back; the
    /// run's end if a hosted call ended it.
    async fn tool_round(
        &mut self,
        calls: &[ToolCall],
        sandbox: Option<&dyn Sandbox>,
        guardrail: Option<&OutputGuard<'_>>,
    ) -> Result<bool, Status> {
        let (request, events) = (self.request, self.events);
        let mut handed_back = false;
        for call in calls {
            if !request.tools.hosted(&call.name) {
                handed_back = true;
                self.hand_back(call);
                continue;
            }
            if self.tool_calls >= request.max_tool_calls {
                return Err(Status::Incomplete("max_messages"));
            }
            let Some(sandbox) = sandbox else {
                return Err(Status::Failed {
                    code: "server_error",
                    message: "the hosted shell has no sandbox".into(),
                });
            };
            self.tool_calls += 1;
            let output = &mut self.output;
            match (call.name.as_str(), request.tools.shell_shape) {
                (CODE_INTERPRETER, _) => {
                    let (container, files) =
                        run_interpreter(sandbox, call, output, events, guardrail).await?;
                    self.written
                        .extend(files.into_iter().map(|f| (container.clone(), f)));
                }
                (BASH, _) => run_hosted_bash(sandbox, call, output, events, guardrail).await?,
                // Google's tool shares its name with Anthropic's Python tool; a
                // request offers one or the other (its dialect's).
                (GOOGLE_CODE_EXECUTION, _) if request.tools.google_code_execution.is_some() => {
                    let timeout = request
                        .tools
                        .google_code_execution
                        .as_ref()
                        .map_or(crate::tools::GOOGLE_CODE_TIMEOUT, |tool| tool.timeout);
                    google_code::run(sandbox, call, timeout, output, events, guardrail).await?
                }
                (BASH_CODE_EXECUTION | TEXT_EDITOR_CODE_EXECUTION | CODE_EXECUTION, _) => {
                    let Some(execution) = request.tools.code_execution.as_ref() else {
                        continue;
                    };
                    let paused =
                        code_execution::run(sandbox, call, execution, output, events, guardrail)
                            .await?;
                    // The cell waits on the client's tools: the response
                    // ends with its calls, for the client to answer.
                    if let Some(calls) = paused {
                        self.hand_back_code_calls(&calls, execution, &call.id);
                        return Ok(true);
                    }
                }
                (_, ShellShape::OpenRouter) => {
                    run_openrouter_shell(sandbox, call, output, events, guardrail).await?
                }
                (_, ShellShape::OpenAi) => {
                    run_hosted(sandbox, call, output, events, guardrail).await?
                }
            }
        }
        Ok(handed_back)
    }

    /// The calls a paused cell (the `server_tool_use` `cell`) made of the
    /// client's tools, handed back: each a `function_call` whose `caller`
    /// names the code execution and the cell.
    fn hand_back_code_calls(
        &mut self,
        calls: &[CodeCall],
        execution: &crate::tools::CodeExecution,
        cell: &str,
    ) {
        let caller = shellgate_wire::messages::ToolCaller {
            kind: execution
                .caller()
                .unwrap_or(crate::tools::CALLER_20260120)
                .to_owned(),
            tool_id: Some(cell.to_owned()),
        };
        for call in calls {
            let mut extra = wire::Extra::new();
            if let Ok(caller) = serde_json::to_value(&caller) {
                extra.insert("caller".to_owned(), caller);
            }
            let arguments = serde_json::Value::Object(call.input.clone()).to_string();
            let item = Item::FunctionCall(FunctionCall {
                id: Some(item_id("fc_")),
                call_id: Some(call.id.clone()),
                name: call.name.clone(),
                namespace: None,
                arguments: arguments.clone(),
                status: Some(ItemStatus::Completed),
                extra,
            });
            let index = announce(&self.output, self.events, in_progress(&item));
            emit(
                self.events,
                Event::Arguments {
                    index,
                    item_id: item_id_of(&item),
                    arguments,
                },
            );
            complete(&mut self.output, self.events, index, item);
        }
    }

    /// A call the client answers: told whole, and part of the output.
    fn hand_back(&mut self, call: &ToolCall) {
        let events = self.events;
        let item = client_call(call, &self.request.tools, ItemStatus::Completed);
        let index = announce(&self.output, events, in_progress(&item));
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
        complete(&mut self.output, events, index, item);
    }
}

/// Asks the upstream for one turn. Text streams out as the upstream writes
/// it; a reasoning or an item of the upstream's own is told whole as soon
/// as it is done. Each takes the next index of the output from `base` (the
/// message its index when its text begins). The reply, and the items told
/// so far in their order (with the reasoning still open, if any).
async fn stream_turn(
    upstream: &dyn Upstream,
    turn: &Turn,
    events: Option<&EventSink>,
    base: usize,
    message_id: &str,
) -> (
    Result<Reply, crate::upstream::UpstreamError>,
    Vec<Slot>,
    Option<OpenReasoning>,
) {
    let (delta_tx, mut delta_rx) = tokio::sync::mpsc::unbounded_channel::<Delta>();
    let forward = async {
        let mut slots: Vec<Slot> = Vec::new();
        let mut message_index = None;
        // The reasoning whose summary is streaming, announced.
        let mut open: Option<OpenReasoning> = None;
        while let Some(delta) = delta_rx.recv().await {
            match delta {
                Delta::Text(text) => {
                    let index = *message_index.get_or_insert_with(|| {
                        slots.push(Slot::Message);
                        let index = base + slots.len() - 1;
                        emit(
                            events,
                            Event::ItemAdded {
                                index,
                                item: message_item(message_id, "", ItemStatus::InProgress),
                            },
                        );
                        index
                    });
                    emit(
                        events,
                        Event::TextDelta {
                            index,
                            item_id: message_id.to_owned(),
                            delta: text,
                        },
                    );
                }
                Delta::ReasoningSummary {
                    id,
                    summary_index,
                    delta,
                } => {
                    let open = open.get_or_insert_with(|| {
                        OpenReasoning::announce(events, &mut slots, base, id)
                    });
                    open.summary(events, base, summary_index, delta);
                }
                Delta::Reasoning(reasoning) => match open.take() {
                    Some(open) => open.finish(events, &mut slots, base, &reasoning),
                    None => {
                        let slot = Slot::Reasoning(reasoning_output(&reasoning));
                        slot.tell(events, base + slots.len());
                        slots.push(slot);
                    }
                },
                Delta::Native(native) => {
                    let slot = Slot::Native(native_output(&native));
                    slot.tell(events, base + slots.len());
                    slots.push(slot);
                }
                Delta::ToolCall { .. } | Delta::ToolArguments { .. } => {}
            }
        }
        (slots, open)
    };
    let ask = async {
        let reply = upstream.complete(turn, Some(&delta_tx)).await;
        drop(delta_tx);
        reply
    };
    let (reply, (slots, open)) = tokio::join!(ask, forward);
    (reply, slots, open)
}

/// An output item of one turn, in the order the upstream told them.
#[derive(Debug, PartialEq)]
enum Slot {
    /// A `reasoning` item, told done.
    Reasoning(Item),
    /// An item of the upstream's own, told done.
    Native(Item),
    /// The assistant's message (told when its text began, done at the end
    /// of the turn).
    Message,
    /// A reasoning announced while its summary streams (done later).
    Open,
}

/// A reasoning announced while its summary streams: where it is, its id,
/// and the summary's parts so far.
struct OpenReasoning {
    slot: usize,
    id: String,
    parts: Vec<String>,
}

impl OpenReasoning {
    /// Announces a reasoning at the next index (its id the upstream's, or
    /// one of its own).
    fn announce(
        events: Option<&EventSink>,
        slots: &mut Vec<Slot>,
        base: usize,
        id: Option<String>,
    ) -> Self {
        let id = id.unwrap_or_else(|| item_id("rs_"));
        let slot = slots.len();
        slots.push(Slot::Open);
        emit(
            events,
            Event::ItemAdded {
                index: base + slot,
                item: Item::Reasoning(wire::Reasoning {
                    id: Some(id.clone()),
                    status: Some(ItemStatus::InProgress),
                    ..wire::Reasoning::default()
                }),
            },
        );
        OpenReasoning {
            slot,
            id,
            parts: Vec::new(),
        }
    }

    /// More of part `summary_index` of the summary (the parts before it
    /// begin first).
    fn summary(
        &mut self,
        events: Option<&EventSink>,
        base: usize,
        summary_index: usize,
        delta: String,
    ) {
        let index = base + self.slot;
        while self.parts.len() <= summary_index {
            emit(
                events,
                Event::ReasoningSummaryPart {
                    index,
                    item_id: self.id.clone(),
                    summary_index: self.parts.len(),
                },
            );
            self.parts.push(String::new());
        }
        if let Some(part) = self.parts.get_mut(summary_index) {
            part.push_str(&delta);
        }
        emit(
            events,
            Event::ReasoningSummaryDelta {
                index,
                item_id: self.id.clone(),
                summary_index,
                delta,
            },
        );
    }

    /// The reasoning is done as `reasoning` says (under the id it was
    /// announced with): each part of its summary, then the item.
    fn finish(
        self,
        events: Option<&EventSink>,
        slots: &mut [Slot],
        base: usize,
        reasoning: &crate::upstream::Reasoning,
    ) {
        let index = base + self.slot;
        let mut item = crate::reasoning::to_item(reasoning);
        item.id = Some(self.id.clone());
        for (summary_index, streamed) in self.parts.iter().enumerate() {
            let text = item
                .summary
                .get(summary_index)
                .map_or(streamed, |part| &part.text);
            emit(
                events,
                Event::ReasoningSummaryDone {
                    index,
                    item_id: self.id.clone(),
                    summary_index,
                    text: text.clone(),
                },
            );
        }
        let item = Item::Reasoning(item);
        emit(
            events,
            Event::ItemDone {
                index,
                item: item.clone(),
            },
        );
        if let Some(slot) = slots.get_mut(self.slot) {
            *slot = Slot::Reasoning(item);
        }
    }
}

impl Slot {
    /// Tells a reasoning or native item at `index`: added (in progress,
    /// without its content), then done.
    fn tell(&self, events: Option<&EventSink>, index: usize) {
        let (Slot::Reasoning(item) | Slot::Native(item)) = self else {
            return;
        };
        let Some(sink) = events else {
            return;
        };
        let mut added = item.clone();
        if let Item::Reasoning(reasoning) = &mut added {
            *reasoning = wire::Reasoning {
                id: reasoning.id.take(),
                ..wire::Reasoning::default()
            };
        }
        added.set_status(ItemStatus::InProgress);
        let _ = sink.send(Event::ItemAdded { index, item: added });
        let _ = sink.send(Event::ItemDone {
            index,
            item: item.clone(),
        });
    }
}

/// The output item of a reasoning the upstream returned (an id of its own
/// if the upstream gave none).
fn reasoning_output(reasoning: &crate::upstream::Reasoning) -> Item {
    let mut item = Item::Reasoning(crate::reasoning::to_item(reasoning));
    item.ensure_id(|| item_id("rs_"));
    item
}

/// The output item of an item of the upstream's own, as it gave it (typed
/// when it is of a type shellgate knows: a call of a tool it does not).
fn native_output(native: &crate::upstream::NativeItem) -> Item {
    match &native.item {
        serde_json::Value::Object(item) => {
            wire::from_value(native.item.clone()).unwrap_or_else(|_| Item::Other(item.clone()))
        }
        // Not an item (no protocol returns one): kept, under a key.
        other => {
            let mut item = wire::Extra::new();
            item.insert("value".to_owned(), other.clone());
            Item::Other(item)
        }
    }
}

/// The bytes of a reasoning, as the loop sends it back each turn.
fn reasoning_bytes(reasoning: &crate::upstream::Reasoning) -> usize {
    use crate::upstream::Sealed;
    let sealed = match &reasoning.sealed {
        Some(Sealed::OpenAi(text))
        | Some(Sealed::AnthropicSignature(text))
        | Some(Sealed::AnthropicRedacted(text)) => text.len(),
        None => 0,
    };
    reasoning
        .summary
        .iter()
        .map(String::len)
        .fold(reasoning.text.len() + sealed, usize::saturating_add)
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

/// A function call's item id.
fn item_id_of(item: &Item) -> String {
    match item {
        Item::FunctionCall(call) => call.id.clone().unwrap_or_default(),
        _ => String::new(),
    }
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
    let index = announce(output, events, Item::OpenRouterShell(item.clone()));
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

/// A cell's logs as the model and client may see them: checked by the
/// output guardrail as a command's output is.
fn guarded_logs(guardrail: Option<&OutputGuard<'_>>, logs: String) -> String {
    match guardrail {
        Some(guardrail) => guard_results(guardrail, vec![exited(&logs, String::new(), 0)])
            .into_iter()
            .map(|result| result.stdout)
            .collect(),
        None => logs,
    }
}

/// A cell's figures (base64 PNGs) as `code_interpreter_call` outputs.
fn image_outputs(images: &[String]) -> impl Iterator<Item = wire::CodeInterpreterOutput> + '_ {
    images.iter().map(|png| wire::CodeInterpreterOutput::Image {
        url: format!("data:image/png;base64,{png}"),
        extra: wire::Extra::new(),
    })
}

/// Runs one call of `code_interpreter`: one `code_interpreter_call` item
/// (the code, the container, its logs and images; [`cell::run`]). Returns
/// the container and the files the code wrote there.
async fn run_interpreter(
    sandbox: &dyn Sandbox,
    call: &ToolCall,
    output: &mut Vec<Item>,
    events: Option<&EventSink>,
    guardrail: Option<&OutputGuard<'_>>,
) -> Result<(String, Vec<WrittenFile>), Status> {
    let tool = cell::CellTool {
        id: item_id("ci_"),
        name: "the code_interpreter",
        timeout: None,
        outcome: false,
    };
    cell::run(sandbox, call, tool, output, events, guardrail).await
}

/// The annotations citing `files` (each with its container) on the final
/// message's `text`, once each (the last write of a path wins). Indices
/// count characters (as the SDKs' strings do): a file the text names —
/// by its `sandbox:` link, its path or its name, the first found — is
/// cited where the text names it; one it does not name is cited at the
/// end of the text (an empty span), so every file written is cited.
pub fn citations(text: &str, files: &[(String, WrittenFile)]) -> Vec<wire::Annotation> {
    let mut cited: Vec<&(String, WrittenFile)> = Vec::new();
    for entry in files.iter().rev() {
        if !cited
            .iter()
            .any(|(container, file)| *container == entry.0 && file.path == entry.1.path)
        {
            cited.push(entry);
        }
    }
    cited.reverse();
    let chars = |bytes: usize| text[..bytes].chars().count() as u64;
    let end = chars(text.len());
    cited
        .into_iter()
        .map(|(container, file)| {
            let link = format!("sandbox:{}", file.path);
            let span = [link.as_str(), file.path.as_str(), file.filename.as_str()]
                .into_iter()
                .filter(|needle| !needle.is_empty())
                .find_map(|needle| text.find(needle).map(|at| (at, at + needle.len())));
            let (start_index, end_index) = match span {
                Some((start, stop)) => (chars(start), chars(stop)),
                None => (end, end),
            };
            wire::Annotation::ContainerFileCitation(wire::ContainerFileCitation {
                container_id: container.clone(),
                file_id: file.file_id.clone(),
                filename: file.filename.clone(),
                start_index,
                end_index,
                extra: wire::Extra::new(),
            })
        })
        .collect()
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
    let index = announce(output, events, Item::OpenRouterBash(item.clone()));
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

mod cell;
mod code_execution;
pub mod google_code;

#[cfg(test)]
mod tests;
