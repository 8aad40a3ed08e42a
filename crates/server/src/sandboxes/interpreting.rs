//! The Responses API's `code_interpreter` on the container's kernel (the
//! same `shellgate_interpreter::Interpreters` that serves E2B's `/execute`):
//! one Python context per container, its working directory `/mnt/data`,
//! kept across the calls of a response and across responses on the same
//! container (it is found again by its working directory); each call's
//! events become the call's logs and images; the files the code created or
//! changed under `/mnt/data` become the container's files (`cfile_` ids),
//! for the final message to cite.
//!
//! A call holds one of the project's exec slots, is billed for its time
//! and audited with its code as the command, as an exec is.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use shellgate_interpreter::{
    CodeTool, ExecutionEvent, InterpreterError, Interruption, Language, ToolFailure,
};
use shellgate_model::run::{HostError, Interpretation, WrittenFile};
use shellgate_model::tools::ToolAnswer;
use shellgate_sandbox_api::backend::{limits, CommandResult, FileListing};
use tokio::sync::mpsc;

use crate::error::host_error;
use crate::sandboxes::exec::Exec;
use crate::sandboxes::paused_cells::{CellOwner, Found, Paused, Progress, Step};
use crate::state::AppState;

/// The working directory of the code interpreter's context (OpenAI's).
pub const WORKDIR: &str = "/mnt/data";

/// Longest a call's code runs before it is interrupted (the kernel keeps
/// its state): a shell command's longest timeout.
pub const TIMEOUT: Duration = Duration::from_millis(limits::MAX_TIMEOUT_MS);

/// Most bytes of logs a call keeps (head and tail, the middle named as
/// left out): a shell command's most output.
pub const MAX_LOGS: usize = limits::MAX_OUTPUT_LENGTH;

/// Most images a call keeps.
pub const MAX_IMAGES: usize = 16;

/// Most bytes of images (base64) a call keeps together: a response holds
/// its images inline, and is stored.
pub const MAX_IMAGE_BYTES: usize = 16 << 20;

/// Most files one call cites (a call writing more still writes them: they
/// are the container's files; only the citations are bounded).
pub const MAX_CITED_FILES: usize = 64;

pub use shellgate_model::run::Ended;

/// Runs `code` in `container`'s code interpreter for `request` of
/// `project`, interrupted after `timeout` (the kernel keeps its state).
/// Returns what it gave, how it ended, and whether the container was
/// woken for it (a session begun).
pub async fn interpret_within(
    state: &Arc<AppState>,
    project: &str,
    request: &str,
    container: &str,
    code: &str,
    timeout: Duration,
) -> Result<(Interpretation, Ended, bool), HostError> {
    let exec = Exec::admit(state, project, container)
        .await
        .map_err(host_error)?
        .in_response(request);
    let woke = exec.woke();
    // Dropped with the call (a cancelled response): the execution is
    // interrupted and its time until then billed.
    let mut running = exec.begin(vec![code.to_owned()]);
    let before = listing(state, container).await?;
    let ran = execute(state, container, code, timeout, &[], None).await;
    running.succeeded(ran.is_ok());
    let (mut interpretation, ended) = ran?;
    interpretation.raised = ended.raised;
    interpretation.timed_out = ended.timed_out;
    let after = listing(state, container).await?;
    interpretation.files = written(state, container, &before, &after).await?;
    running.end(Some(&[cell_record(&interpretation)])).await;
    Ok((interpretation, ended, woke))
}

/// What the exec's audit records of a cell that ran: its logs as stdout,
/// and an exit of 0 (an exception is the cell's result, not a failed
/// command).
fn cell_record(interpretation: &Interpretation) -> CommandResult {
    CommandResult {
        stdout: interpretation.logs.clone(),
        stderr: String::new(),
        outcome: shellgate_wire::Outcome::Exit { exit_code: 0 },
        duration_ms: 0,
        bytes_out: interpretation.logs.len() as u64,
    }
}

/// Runs `code`, whose code may call the client's `tools`, in `container`'s
/// code interpreter for `request` of `project`, as the cell `owner.cell`
/// (Anthropic's programmatic tool calling): it runs in a task of its own,
/// and this follows it until it ends, or pauses at calls of the client's
/// tools (then it waits in [`crate::sandboxes::paused_cells`] for
/// [`resume`]). Returns where it is, and whether the container was woken
/// for it. Its exec slot is held, and its time billed, until it ends.
pub(crate) async fn interpret_calling(
    state: &Arc<AppState>,
    owner: CellOwner,
    request: &str,
    code: &str,
    tools: Vec<CodeTool>,
    timeout: Duration,
) -> Result<(Progress, bool), HostError> {
    let exec = Exec::admit(state, &owner.project, &owner.container)
        .await
        .map_err(host_error)?
        .in_response(request);
    let woke = exec.woke();
    let (steps, followed) = mpsc::unbounded_channel();
    let running_state = Arc::clone(state);
    let (container, code) = (owner.container.clone(), code.to_owned());
    // Not the request's: the cell outlives it while it waits on the
    // client.
    tokio::spawn(async move {
        let state = running_state;
        let mut running = exec.begin(vec![code.clone()]);
        let ran = execute(&state, &container, &code, timeout, &tools, Some(&steps)).await;
        running.succeeded(ran.is_ok());
        let ended = match ran {
            Ok((mut interpretation, ended)) => {
                interpretation.raised = ended.raised;
                interpretation.timed_out = ended.timed_out;
                running.end(Some(&[cell_record(&interpretation)])).await;
                Ok((interpretation, ended))
            }
            Err(e) => {
                running.end(None).await;
                Err(e)
            }
        };
        let _ = steps.send(Step::Ended(ended));
    });
    Ok((follow(state, owner, followed).await?, woke))
}

/// Gives the paused cell of `owner` the client's results (a call it gave
/// none for raises `ToolError` saying so) and follows it on. A cell that
/// ended meanwhile (its client came too late) answers what it gave; one
/// unknown here is [`Progress::Gone`].
pub(crate) async fn resume(
    state: &Arc<AppState>,
    owner: CellOwner,
    answers: &[ToolAnswer],
) -> Result<Progress, HostError> {
    let paused = match state.paused_cells.take(&owner) {
        Found::Paused(paused) => paused,
        Found::Ended(ended) => return ended.map(|(ran, _)| Progress::Done(ran)),
        Found::Nothing => return Ok(Progress::Gone),
    };
    for call in &paused.calls {
        let (content, failure) = match answers.iter().find(|a| a.call_id == *call) {
            Some(answer) => (
                answer.content.as_str(),
                answer.is_error.then_some(ToolFailure::Tool),
            ),
            None => (
                "the client gave no result for this call",
                Some(ToolFailure::Tool),
            ),
        };
        answer_call(state, &paused, call, content, failure).await;
    }
    follow(state, paused.owner, paused.steps).await
}

/// Follows a cell's `steps` until it ends or pauses; a paused cell is kept
/// under its name until its client answers or its deadline
/// (`code_execution_tool_result_timeout_secs`) passes.
async fn follow(
    state: &Arc<AppState>,
    owner: CellOwner,
    mut steps: mpsc::UnboundedReceiver<Step>,
) -> Result<Progress, HostError> {
    match steps.recv().await {
        Some(Step::Ended(ended)) => ended.map(|(ran, _)| Progress::Done(ran)),
        Some(Step::Paused { context, calls }) => {
            let cell = owner.cell.clone();
            let pause = state.paused_cells.keep(Paused {
                owner,
                context,
                calls: calls.iter().map(|call| call.id.clone()).collect(),
                steps,
                pause: 0,
            });
            let timeout =
                Duration::from_secs(state.config.model.code_execution_tool_result_timeout_secs);
            let expiring = Arc::clone(state);
            tokio::spawn(async move {
                tokio::time::sleep(timeout).await;
                expire(&expiring, &cell, pause, timeout).await;
            });
            Ok(Progress::Paused(calls))
        }
        None => Err(HostError {
            code: "server_error",
            message: "the code's run ended without a result".into(),
        }),
    }
}

/// Gives the paused cell's call `call` its result (a kernel gone takes
/// none: its cell ends, and says so, without it).
async fn answer_call(
    state: &AppState,
    paused: &Paused,
    call: &str,
    content: &str,
    failure: Option<ToolFailure>,
) {
    if let Err(e) = state
        .interpreters
        .answer_tool_call(
            &paused.owner.container,
            &paused.context,
            call,
            content,
            failure,
        )
        .await
    {
        tracing::info!(container = %paused.owner.container, call, "a tool result reached no kernel: {e}");
    }
}

/// The deadline of pause `pause` of cell `cell`: if it still waits on
/// that pause, each call it waits on (and any it makes after) raises
/// `TimeoutError`, and what the cell then gives is kept for its client.
async fn expire(state: &Arc<AppState>, cell: &str, pause: u64, timeout: Duration) {
    let Some(mut paused) = state.paused_cells.take_pause(cell, pause) else {
        return;
    };
    let message = format!(
        "no result for this call came from the client within {} s",
        timeout.as_secs()
    );
    for call in std::mem::take(&mut paused.calls) {
        answer_call(state, &paused, &call, &message, Some(ToolFailure::Timeout)).await;
    }
    let ended = loop {
        match paused.steps.recv().await {
            Some(Step::Paused { calls, .. }) => {
                for call in &calls {
                    answer_call(
                        state,
                        &paused,
                        &call.id,
                        &message,
                        Some(ToolFailure::Timeout),
                    )
                    .await;
                }
            }
            Some(Step::Ended(ended)) => break ended,
            None => {
                break Err(HostError {
                    code: "server_error",
                    message: "the code's run ended without a result".into(),
                })
            }
        }
    };
    tracing::info!(container = %paused.owner.container, cell, "a cell's calls of the client's tools timed out");
    state
        .paused_cells
        .keep_ended(cell.to_owned(), paused.owner.project.clone(), ended);
}

/// `container` was suspended or stopped: its kernels ended. Forgets its
/// contexts, remembering that it had a code interpreter's (whose state
/// the next cell is told is gone).
pub async fn kernels_ended(state: &AppState, container: &str) {
    if context_of(state, container).await.is_some() {
        state.kernels_slept.remember(container);
    }
    state.interpreters.forget_container(container);
}

/// The container's code interpreter context, if it has one: the Python
/// one working in [`WORKDIR`].
async fn context_of(state: &AppState, container: &str) -> Option<String> {
    state
        .interpreters
        .contexts(container)
        .await
        .into_iter()
        .find(|c| c.language == Language::Python && c.cwd == WORKDIR)
        .map(|c| c.id)
}

/// The container's code interpreter context, made if there is none (the
/// first call, or after the container slept and its kernels ended), and
/// whether it replaces one whose kernel ended with a suspension.
async fn context(state: &AppState, container: &str) -> Result<(String, bool), HostError> {
    if let Some(found) = context_of(state, container).await {
        return Ok((found, false));
    }
    let made = state
        .interpreters
        .create_context(container, Language::Python, Some(WORKDIR), &[])
        .await
        .map(|info| info.id)
        .map_err(interpreter_error)?;
    let lost = state.kernels_slept.take(container);
    Ok((made, lost))
}

fn interpreter_error(error: impl std::fmt::Display) -> HostError {
    HostError {
        code: "server_error",
        message: format!("the code interpreter failed: {error}"),
    }
}

/// Runs `code` in the container's context; its events become logs and
/// images as they come. Code the kernel refuses (too large) is answered as
/// logs saying why, for the model to correct; a context gone meanwhile
/// (the container slept) is made again, once.
async fn execute(
    state: &AppState,
    container: &str,
    code: &str,
    timeout: Duration,
    tools: &[CodeTool],
    steps: Option<&mpsc::UnboundedSender<Step>>,
) -> Result<(Interpretation, Ended), HostError> {
    // A cell is many engine calls (the kernel's start, its stdin, reads of
    // its output) with moments between them when none is in flight: held,
    // the container is not suspended as idle under a starting kernel.
    let _in_use = state
        .engine
        .hold(container)
        .await
        .map_err(|e| host_error(crate::engine::engine_error(container, e)))?;
    let mut retried = false;
    let mut kernel_lost = false;
    loop {
        let (context, lost) = context(state, container).await?;
        kernel_lost |= lost;
        let (sender, mut events) = tokio::sync::mpsc::channel(64);
        let execute = shellgate_interpreter::Execute {
            code: code.to_owned(),
            context_id: Some(context.clone()),
            language: None,
            env_vars: Vec::new(),
            timeout,
            tools: tools.to_vec(),
        };
        let ran = state.interpreters.execute(container, execute, sender);
        let gather = async {
            let mut gathered = Gathered::default();
            while let Some(event) = events.recv().await {
                if let ExecutionEvent::ToolCalls(calls) = event {
                    paused_at(state, container, &context, calls, steps).await;
                    continue;
                }
                gathered.add(event);
            }
            gathered
        };
        let (ran, mut gathered) = tokio::join!(ran, gather);
        match ran {
            Ok(summary) => {
                if summary.restarted {
                    gathered.logs.insert_str(
                        0,
                        "[the kernel was started again for this code: earlier variables and \
                         imports are gone]\n",
                    );
                }
                let timed_out = summary.interrupted == Some(Interruption::TimedOut);
                if timed_out {
                    gathered.line(&format!(
                        "[interrupted: the code ran longer than {} s; the kernel keeps its state]",
                        timeout.as_secs()
                    ));
                }
                let ended = Ended {
                    raised: gathered.raised,
                    timed_out,
                };
                let mut interpretation = gathered.into_interpretation();
                interpretation.kernel_lost = kernel_lost || summary.restarted;
                return Ok((interpretation, ended));
            }
            Err(InterpreterError::ContextNotFound(_)) if !retried => retried = true,
            Err(InterpreterError::InvalidRequest { message, .. }) => {
                gathered.line(&format!("shellgate: the code was not run: {message}"));
                let ended = Ended {
                    raised: true,
                    timed_out: false,
                };
                return Ok((gathered.into_interpretation(), ended));
            }
            Err(e) => return Err(interpreter_error(e)),
        }
    }
}

/// The code waits on the client's results of `calls`: told to whoever
/// follows the cell; with no one to tell (its request ended), each call
/// raises `TimeoutError` at once.
async fn paused_at(
    state: &AppState,
    container: &str,
    context: &str,
    calls: Vec<shellgate_interpreter::CodeToolCall>,
    steps: Option<&mpsc::UnboundedSender<Step>>,
) {
    let ids: Vec<String> = calls.iter().map(|call| call.id.clone()).collect();
    let told = steps.is_some_and(|steps| {
        steps
            .send(Step::Paused {
                context: context.to_owned(),
                calls,
            })
            .is_ok()
    });
    if told {
        return;
    }
    for id in ids {
        let _ = state
            .interpreters
            .answer_tool_call(
                container,
                context,
                &id,
                "no one waits for this call's result: the request running the code ended",
                Some(ToolFailure::Timeout),
            )
            .await;
    }
}

/// A call's events, gathered.
#[derive(Debug, Default)]
struct Gathered {
    logs: String,
    images: Vec<String>,
    /// Bytes of `images`.
    image_bytes: usize,
    /// Images left out past [`MAX_IMAGES`] or [`MAX_IMAGE_BYTES`].
    images_left_out: usize,
    /// The code raised.
    raised: bool,
}

impl Gathered {
    fn add(&mut self, event: ExecutionEvent) {
        match event {
            ExecutionEvent::Stdout { text, .. } | ExecutionEvent::Stderr { text, .. } => {
                self.logs.push_str(&text)
            }
            ExecutionEvent::Result(data) => match data.png {
                // A figure's text (`<Figure size ...>`) says nothing more.
                Some(png)
                    if self.images.len() < MAX_IMAGES
                        && self.image_bytes + png.len() <= MAX_IMAGE_BYTES =>
                {
                    self.image_bytes += png.len();
                    self.images.push(png);
                }
                Some(_) => self.images_left_out += 1,
                None => {
                    if let Some(text) = data.text {
                        self.line(&text);
                    }
                }
            },
            ExecutionEvent::Error {
                name,
                value,
                traceback,
            } => {
                self.raised = true;
                if traceback.is_empty() {
                    self.line(&format!("{name}: {value}"));
                } else {
                    self.line(&traceback);
                }
            }
            ExecutionEvent::ExecutionCount(_) | ExecutionEvent::ToolCalls(_) => {}
        }
    }

    /// Appends `text` on a line of its own.
    fn line(&mut self, text: &str) {
        if !self.logs.is_empty() && !self.logs.ends_with('\n') {
            self.logs.push('\n');
        }
        self.logs.push_str(text);
    }

    fn into_interpretation(mut self) -> Interpretation {
        if self.images_left_out > 0 {
            let note = format!(
                "[{} more images were left out: a call shows at most {MAX_IMAGES}, {} MiB \
                 together]",
                self.images_left_out,
                MAX_IMAGE_BYTES >> 20
            );
            self.line(&note);
        }
        Interpretation {
            logs: bounded(self.logs, MAX_LOGS),
            images: self.images,
            ..Interpretation::default()
        }
    }
}

/// `text` within `max` bytes: its head and its tail, the middle named as
/// left out.
fn bounded(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let half = max / 2;
    let mut head = half;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - half;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{}\n[... {} bytes left out ...]\n{}",
        &text[..head],
        tail - head,
        &text[tail..]
    )
}

/// The files under `/mnt/data`: path → (size, modification time).
pub(crate) async fn listing(
    state: &AppState,
    container: &str,
) -> Result<HashMap<String, (u64, i64)>, HostError> {
    let FileListing { files, .. } = state
        .engine
        .list_files(container)
        .await
        .map_err(|e| host_error(crate::engine::engine_error(container, e)))?;
    Ok(files
        .into_iter()
        .map(|f| (f.path, (f.bytes, f.modified_unix)))
        .collect())
}

/// The paths created or changed between two listings (a size or a
/// modification second that differs), in path order.
pub(crate) fn changed(
    before: &HashMap<String, (u64, i64)>,
    after: &HashMap<String, (u64, i64)>,
) -> Vec<String> {
    let mut paths: Vec<String> = after
        .iter()
        .filter(|(path, seen)| before.get(*path) != Some(seen))
        .map(|(path, _)| path.clone())
        .collect();
    paths.sort_unstable();
    paths
}

/// The files a call wrote, as the container's files: the container's
/// files synced (each gets its `cfile_` id, as listing them would give
/// it), then each changed path's row (one whose name holds a secret has
/// none: it is not cited).
async fn written(
    state: &Arc<AppState>,
    container: &str,
    before: &HashMap<String, (u64, i64)>,
    after: &HashMap<String, (u64, i64)>,
) -> Result<Vec<WrittenFile>, HostError> {
    let mut paths = changed(before, after);
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    if paths.len() > MAX_CITED_FILES {
        tracing::info!(
            container,
            files = paths.len(),
            "code interpreter call wrote more files than it cites: the first {MAX_CITED_FILES} by path are cited"
        );
        paths.truncate(MAX_CITED_FILES);
    }
    crate::sandboxes::files::sync_files(state, container)
        .await
        .map_err(host_error)?;
    let key = container.to_owned();
    let rows = state
        .db(move |s| {
            paths
                .iter()
                .filter_map(|path| s.container_file_at(&key, path).transpose())
                .collect::<Result<Vec<_>, _>>()
        })
        .await
        .map_err(host_error)?;
    Ok(rows
        .into_iter()
        .map(|row| WrittenFile {
            filename: row
                .path
                .rsplit('/')
                .next()
                .unwrap_or(row.path.as_str())
                .to_owned(),
            file_id: row.id,
            path: row.path,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(entries: &[(&str, u64, i64)]) -> HashMap<String, (u64, i64)> {
        entries
            .iter()
            .map(|(path, bytes, at)| ((*path).to_owned(), (*bytes, *at)))
            .collect()
    }

    #[test]
    fn files_created_or_changed_are_found_and_the_rest_left_alone() {
        let before = files(&[
            ("/mnt/data/a", 1, 10),
            ("/mnt/data/b", 2, 10),
            ("/mnt/data/gone", 1, 1),
        ]);
        let after = files(&[
            ("/mnt/data/a", 1, 10),
            ("/mnt/data/b", 2, 11),
            ("/mnt/data/c", 5, 12),
        ]);
        assert_eq!(changed(&before, &after), ["/mnt/data/b", "/mnt/data/c"]);
        assert!(changed(&after, &after).is_empty());
    }

    #[test]
    fn logs_gather_output_results_and_errors_in_order_within_bounds() {
        let mut gathered = Gathered::default();
        gathered.add(ExecutionEvent::Stdout {
            text: "a".into(),
            timestamp_us: 0,
        });
        gathered.add(ExecutionEvent::Result(Box::new(
            shellgate_interpreter::DisplayData {
                text: Some("2".into()),
                is_main_result: true,
                ..Default::default()
            },
        )));
        gathered.add(ExecutionEvent::Result(Box::new(
            shellgate_interpreter::DisplayData {
                text: Some("<Figure>".into()),
                png: Some("iVBO".into()),
                ..Default::default()
            },
        )));
        gathered.add(ExecutionEvent::Error {
            name: "ValueError".into(),
            value: "no".into(),
            traceback: String::new(),
        });
        let interpretation = gathered.into_interpretation();
        assert_eq!(interpretation.logs, "a\n2\nValueError: no");
        assert_eq!(interpretation.images, ["iVBO"]);
        let mut many = Gathered::default();
        for _ in 0..=MAX_IMAGES {
            many.add(ExecutionEvent::Result(Box::new(
                shellgate_interpreter::DisplayData {
                    png: Some("iVBO".into()),
                    ..Default::default()
                },
            )));
        }
        many.add(ExecutionEvent::Result(Box::new(
            shellgate_interpreter::DisplayData {
                png: Some("x".repeat(MAX_IMAGE_BYTES)),
                ..Default::default()
            },
        )));
        let interpretation = many.into_interpretation();
        assert_eq!(interpretation.images.len(), MAX_IMAGES);
        assert!(
            interpretation.logs.contains("2 more images were left out"),
            "{}",
            interpretation.logs
        );
        let long = "é".repeat(MAX_LOGS);
        let kept = bounded(long.clone(), MAX_LOGS);
        assert!(
            kept.len() < long.len() && kept.contains("bytes left out"),
            "{}",
            kept.len()
        );
    }
}
