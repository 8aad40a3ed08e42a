//! Fixtures for testing the loop through its two traits, without a model or
//! a container: a [`ScriptedUpstream`] answers each turn from a script and
//! records every [`Turn`] it was sent (the request the loop makes
//! upstream), a [`RecordingSandbox`] records every [`RunRequest`] and
//! answers scripted results, or blocks until the run is dropped (so a test
//! sees the cancel arrive).
//!
//! Compiled for this crate's tests and behind the `testing` feature, for
//! other crates' tests (the server's handlers); never in a release build.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use shellgate_sandbox_api::backend::{
    CommandResult, DeltaSink, OutputDelta, RunRequest, StreamKind,
};
use shellgate_wire::Outcome as Exit;

use crate::run::{Ended, HostError, Interpretation, Sandbox};
use crate::upstream::{Delta, Finish, ToolCall, Turn, Upstream, UpstreamError, Usage};

/// Locks a fixture's state; a test that panicked while holding it has
/// failed already, so its state is read as it was left.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What the scripted upstream does for one turn.
#[derive(Debug, Clone)]
pub enum Step {
    /// Streams `deltas` (in order), then answers `reply`.
    Reply {
        deltas: Vec<Delta>,
        reply: crate::upstream::Reply,
    },
    /// Fails the turn.
    Error(UpstreamError),
}

impl Step {
    /// A turn answering `text` only (not streamed).
    pub fn text(text: &str) -> Self {
        Step::Reply {
            deltas: Vec::new(),
            reply: reply(text, Vec::new()),
        }
    }

    /// A turn answering `text`, streamed in `pieces`.
    pub fn streamed(pieces: &[&str]) -> Self {
        Step::Reply {
            deltas: pieces
                .iter()
                .map(|p| Delta::Text((*p).to_owned()))
                .collect(),
            reply: reply(&pieces.concat(), Vec::new()),
        }
    }

    /// A turn making `calls` (and no text).
    pub fn calls(calls: Vec<ToolCall>) -> Self {
        Step::Reply {
            deltas: Vec::new(),
            reply: reply("", calls),
        }
    }

    /// A turn ending for `finish` with `text`.
    pub fn finished(text: &str, finish: Finish) -> Self {
        let mut answer = reply(text, Vec::new());
        answer.finish = finish;
        Step::Reply {
            deltas: Vec::new(),
            reply: answer,
        }
    }
}

/// A reply of `text` and `calls` that stopped normally.
pub fn reply(text: &str, tool_calls: Vec<ToolCall>) -> crate::upstream::Reply {
    crate::upstream::Reply {
        text: text.to_owned(),
        tool_calls,
        usage: Usage {
            input_tokens: 10,
            output_tokens: 1,
            ..Usage::default()
        },
        finish: Finish::Stop,
        ..Default::default()
    }
}

/// A call of `name` with `arguments` (a JSON value, written as text).
pub fn call(id: &str, name: &str, arguments: serde_json::Value) -> ToolCall {
    ToolCall {
        id: id.to_owned(),
        name: name.to_owned(),
        arguments: arguments.to_string(),
    }
}

/// A call of the hosted `shell` running `commands`.
pub fn shell(id: &str, commands: &[&str]) -> ToolCall {
    call(
        id,
        crate::tools::SHELL,
        serde_json::json!({ "commands": commands }),
    )
}

/// An upstream that answers each turn with the next [`Step`] of its
/// script and records the turns it was asked. A turn past the end of the
/// script fails (`Malformed`), so a test sees a loop that asks once too
/// often.
#[derive(Debug, Default)]
pub struct ScriptedUpstream {
    script: Mutex<VecDeque<Step>>,
    turns: Mutex<Vec<Turn>>,
}

/// What the scripted upstream says when asked past its script.
pub const SCRIPT_ENDED: &str = "the scripted upstream has no more turns";

impl ScriptedUpstream {
    pub fn new(script: impl IntoIterator<Item = Step>) -> Self {
        Self {
            script: Mutex::new(script.into_iter().collect()),
            turns: Mutex::new(Vec::new()),
        }
    }

    /// Every turn asked so far, in order.
    pub fn turns(&self) -> Vec<Turn> {
        lock(&self.turns).clone()
    }
}

#[async_trait]
impl Upstream for ScriptedUpstream {
    async fn complete(
        &self,
        turn: &Turn,
        deltas: Option<&crate::upstream::DeltaSink>,
    ) -> Result<crate::upstream::Reply, UpstreamError> {
        lock(&self.turns).push(turn.clone());
        let step = lock(&self.script).pop_front();
        match step {
            None => Err(UpstreamError::Malformed(SCRIPT_ENDED.to_owned())),
            Some(Step::Error(error)) => Err(error),
            Some(Step::Reply {
                deltas: pieces,
                reply,
            }) => {
                if let Some(sink) = deltas {
                    for piece in pieces {
                        let _ = sink.send(piece);
                    }
                }
                Ok(reply)
            }
        }
    }
}

/// What the recording sandbox does for one run.
#[derive(Debug, Clone)]
pub enum Run {
    /// Streams `deltas` (when the loop listens), then answers `results`.
    Results {
        deltas: Vec<OutputDelta>,
        results: Vec<CommandResult>,
    },
    /// Fails the run.
    Error(HostError),
    /// Never answers: the run waits until its future is dropped.
    Block,
}

impl Run {
    /// Each command's stdout, exit code 0.
    pub fn stdout(outputs: &[&str]) -> Self {
        Run::Results {
            deltas: Vec::new(),
            results: outputs.iter().map(|out| result(out, "", 0)).collect(),
        }
    }
}

/// One command's result.
pub fn result(stdout: &str, stderr: &str, exit_code: i32) -> CommandResult {
    CommandResult {
        stdout: stdout.to_owned(),
        stderr: stderr.to_owned(),
        outcome: Exit::Exit { exit_code },
        duration_ms: 0,
        bytes_out: 0,
    }
}

/// Output of command `command` on stdout, streamed.
pub fn stdout_delta(command: usize, text: &str) -> OutputDelta {
    OutputDelta {
        command,
        stream: StreamKind::Stdout,
        text: text.to_owned(),
    }
}

/// The id of the recording sandbox's container, unless told otherwise.
pub const CONTAINER: &str = "cntr_test";

/// A sandbox that records what it is asked and answers from a script. A
/// run past the end of the script answers each command with stdout
/// `ran <command>`, exit code 0.
#[derive(Debug)]
pub struct RecordingSandbox {
    container: Result<String, HostError>,
    script: Mutex<VecDeque<Run>>,
    runs: Mutex<Vec<(String, RunRequest)>>,
    /// Runs whose future was dropped before they answered.
    cancelled: AtomicUsize,
    /// Woken when a [`Run::Block`] run has started.
    blocked: tokio::sync::Notify,
    /// What the code interpreter answers, in order (past the end: logs
    /// `ran <code>`).
    interpretations: Mutex<VecDeque<Result<Interpretation, HostError>>>,
    /// Every code interpreted: the container and the code.
    codes: Mutex<Vec<(String, String)>>,
    /// How code run within a time ends, in order (past the end: it ran).
    endings: Mutex<VecDeque<Ended>>,
    /// The time each code run within a time was given.
    timeouts: Mutex<Vec<std::time::Duration>>,
}

impl Default for RecordingSandbox {
    fn default() -> Self {
        Self::new([])
    }
}

impl RecordingSandbox {
    pub fn new(script: impl IntoIterator<Item = Run>) -> Self {
        Self {
            container: Ok(CONTAINER.to_owned()),
            script: Mutex::new(script.into_iter().collect()),
            runs: Mutex::new(Vec::new()),
            cancelled: AtomicUsize::new(0),
            blocked: tokio::sync::Notify::new(),
            interpretations: Mutex::new(VecDeque::new()),
            codes: Mutex::new(Vec::new()),
            endings: Mutex::new(VecDeque::new()),
            timeouts: Mutex::new(Vec::new()),
        }
    }

    /// This sandbox, its code interpreter answering these in order.
    pub fn interpreting(
        self,
        answers: impl IntoIterator<Item = Result<Interpretation, HostError>>,
    ) -> Self {
        *lock(&self.interpretations) = answers.into_iter().collect();
        self
    }

    /// This sandbox, code run within a time ending as these say, in order.
    pub fn ending(self, endings: impl IntoIterator<Item = Ended>) -> Self {
        *lock(&self.endings) = endings.into_iter().collect();
        self
    }

    /// The time each code run within a time was given, so far.
    pub fn timeouts(&self) -> Vec<std::time::Duration> {
        lock(&self.timeouts).clone()
    }

    /// Every code interpreted so far: the container and the code.
    pub fn codes(&self) -> Vec<(String, String)> {
        lock(&self.codes).clone()
    }

    /// A sandbox whose container cannot be had.
    pub fn without_container(error: HostError) -> Self {
        Self {
            container: Err(error),
            ..Self::default()
        }
    }

    /// Every run asked so far: the container and the request.
    pub fn runs(&self) -> Vec<(String, RunRequest)> {
        lock(&self.runs).clone()
    }

    /// The commands of every run, in order.
    pub fn commands(&self) -> Vec<Vec<String>> {
        self.runs().into_iter().map(|(_, r)| r.commands).collect()
    }

    /// How many runs were dropped before they answered.
    pub fn cancelled(&self) -> usize {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// Waits until a [`Run::Block`] run has started.
    pub async fn blocking(&self) {
        self.blocked.notified().await;
    }
}

/// Counts a run as cancelled when dropped before it answered.
struct CancelGuard<'a> {
    cancelled: &'a AtomicUsize,
    answered: bool,
}

impl Drop for CancelGuard<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[async_trait]
impl Sandbox for RecordingSandbox {
    async fn container(&self) -> Result<String, HostError> {
        self.container.clone()
    }

    async fn run(
        &self,
        container: &str,
        request: RunRequest,
        deltas: Option<DeltaSink>,
    ) -> Result<Vec<CommandResult>, HostError> {
        let mut guard = CancelGuard {
            cancelled: &self.cancelled,
            answered: false,
        };
        lock(&self.runs).push((container.to_owned(), request.clone()));
        let step = lock(&self.script).pop_front();
        let answer = match step {
            None => Ok(request
                .commands
                .iter()
                .map(|command| result(&format!("ran {command}"), "", 0))
                .collect()),
            Some(Run::Error(error)) => Err(error),
            Some(Run::Results {
                deltas: pieces,
                results,
            }) => {
                if let Some(sink) = deltas {
                    for piece in pieces {
                        let _ = sink.send(piece);
                    }
                }
                Ok(results)
            }
            Some(Run::Block) => {
                // `notify_one` keeps a permit, so a test that starts
                // waiting only after this still wakes.
                self.blocked.notify_one();
                std::future::pending::<()>().await;
                Ok(Vec::new())
            }
        };
        guard.answered = true;
        answer
    }

    async fn interpret_within(
        &self,
        container: &str,
        code: &str,
        timeout: std::time::Duration,
    ) -> Result<(Interpretation, Ended), HostError> {
        lock(&self.timeouts).push(timeout);
        let interpretation = self.interpret(container, code).await?;
        let ended = lock(&self.endings).pop_front().unwrap_or_default();
        Ok((interpretation, ended))
    }

    async fn interpret(&self, container: &str, code: &str) -> Result<Interpretation, HostError> {
        lock(&self.codes).push((container.to_owned(), code.to_owned()));
        let answer = lock(&self.interpretations).pop_front();
        answer.unwrap_or_else(|| {
            Ok(Interpretation {
                logs: format!("ran {code}"),
                ..Interpretation::default()
            })
        })
    }
}
