//! The command path: one command sent to init, its output read as it comes
//! (by the engine's one output pump, `super::pump`, into the command's
//! result and deltas), its end (exit, timeout, deadline) and the limits it
//! ran into reported.
//!
//! Whatever happens to the caller, a started command never outlives its
//! timeout: if the future running it is dropped (a caller gave up), a guard
//! asks init to kill the command and every process it started.
//!
//! What the container's egress proxy refused while the command ran is
//! told in its stderr, one line per refusal (see
//! `shellgate_egress::denials`: every command that overlapped a refusal
//! hears of it, since the proxy cannot tell a container's commands apart).
//! Those lines, like the engine's other notes, come after the capped
//! output: the program's own output is capped as it always is, and what is
//! added is bounded (at most `denials::REPORTED_LINES` lines of bounded
//! length, then a count), so no program can push its output past the cap
//! through them; they cannot be cut off by the program's output either.

use std::time::Duration;

use tokio::net::unix::pipe;
use tokio::time::Instant;

use super::container::{Container, Running};
use super::pump::{masked, Pump, Pumped, Sink, Source};
use super::unread::{DrainRate, COMMAND_BURST};
use super::{lock, LocalEngine};
use crate::backend::{CommandResult, DeltaSink, Outcome, OutputDelta, RunRequest, StreamKind};
use crate::error::{IoContext, SandboxError};
use crate::output::{CappedOutput, DeltaEncoder};
use crate::protocol::{Request, Status};
use crate::sys;

/// Kills a started command if its future is dropped before it ends. (Init
/// also kills it when the status pipe's read end, dropped with the future,
/// closes: this only makes it immediate.)
struct KillOnDrop<'a> {
    running: &'a Running,
    id: u32,
    ended: bool,
}

impl Drop for KillOnDrop<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.running.send_now(&Request::KillCommand { id: self.id });
        }
    }
}

/// A command's output goes to its result (a head and a tail of each
/// stream) and, when the caller streams, out as deltas.
struct CommandSink<'a> {
    /// stdout, stderr.
    captured: [CappedOutput; 2],
    encoders: [DeltaEncoder; 2],
    /// The command's index in its request, and where its deltas go.
    deltas: Option<(usize, &'a DeltaSink)>,
    exit_status: Option<i32>,
    spawn_error: Option<i32>,
    reclaimed: i32,
    guard: KillOnDrop<'a>,
}

impl Sink for CommandSink<'_> {
    fn room(&self) -> Option<usize> {
        None
    }

    async fn demand(&self) {
        std::future::pending().await
    }

    fn output(&mut self, stream: usize, bytes: &[u8]) {
        self.captured[stream].push(bytes);
        if let Some((command, sink)) = self.deltas {
            let text = self.encoders[stream].push(bytes);
            if !text.is_empty() {
                let _ = sink.send(OutputDelta {
                    command,
                    stream: if stream == 0 {
                        StreamKind::Stdout
                    } else {
                        StreamKind::Stderr
                    },
                    text,
                });
            }
        }
    }

    fn status(&mut self, status: Status) {
        match status {
            Status::Exited(status) => {
                self.exit_status = Some(status);
                self.guard.ended = true;
            }
            Status::SpawnFailed(errno) => self.spawn_error = Some(errno),
            Status::Reclaimed(count) => self.reclaimed = count,
            // Only processes announce their pid.
            Status::Spawned(_) => {}
        }
    }

    async fn kill(&mut self) {
        let _ = self
            .guard
            .running
            .send(&Request::KillCommand { id: self.guard.id }, &[])
            .await;
    }
}

fn note(text: &str) -> String {
    format!("shellgate: {text}\n")
}

/// The engine's command path, and how it reads a command's output.
pub(super) struct Commands {
    drain_grace: Duration,
    /// Bytes a second of a command's output read past its first
    /// `COMMAND_BURST` (`None`: no bound).
    unread_rate: Option<u64>,
}

impl Commands {
    pub fn new(drain_grace: Duration, unread_rate: Option<u64>) -> Self {
        Self {
            drain_grace,
            unread_rate,
        }
    }

    /// Runs a request's commands one after another in container `id`
    /// (starting it if it is stopped), each within its timeout and the
    /// request's deadline.
    pub async fn run(
        &self,
        engine: &LocalEngine,
        id: &str,
        request: RunRequest,
        deltas: Option<DeltaSink>,
    ) -> Result<Vec<CommandResult>, SandboxError> {
        request.validate()?;
        let container = engine.container(id).await?;
        let timeout = Duration::from_millis(request.timeout_ms);
        let deadline = request
            .deadline_ms
            .map(|ms| (Instant::now() + Duration::from_millis(ms), ms));
        let mut results = Vec::with_capacity(request.commands.len());
        for (index, command) in request.commands.iter().enumerate() {
            let remaining = deadline.map(|(at, _)| at.saturating_duration_since(Instant::now()));
            if remaining.is_some_and(|r| r.is_zero()) {
                let seconds = deadline.map(|(_, ms)| ms / 1000).unwrap_or(0);
                results.push(CommandResult {
                    duration_ms: 0,
                    bytes_out: 0,
                    stdout: String::new(),
                    stderr: note(&format!(
                        "not run: the request's deadline ({seconds} s) passed before this command's turn"
                    )),
                    outcome: Outcome::Timeout,
                });
                continue;
            }
            let (running, _in_flight) = engine.enter(&container).await?;
            let cut_by_deadline = remaining.is_some_and(|r| r < timeout);
            let limit = remaining.map_or(timeout, |r| r.min(timeout));
            let stream = deltas.as_ref().map(|sink| (index, sink));
            let result = self
                .run_command(
                    &container,
                    &running,
                    command,
                    limit,
                    request.max_output_length,
                    stream,
                )
                .await;
            let mut result = match result {
                Err(_) if container.destroyed() => {
                    return Err(SandboxError::Deleted(id.to_owned()))
                }
                other => other?,
            };
            if cut_by_deadline && result.outcome == Outcome::Timeout {
                let seconds = deadline.map(|(_, ms)| ms / 1000).unwrap_or(0);
                result.stderr.push_str(&note(&format!(
                    "killed at the request's deadline ({seconds} s), before its own timeout"
                )));
            }
            results.push(result);
        }
        Ok(results)
    }

    async fn run_command(
        &self,
        container: &Container,
        running: &Running,
        command: &str,
        timeout: Duration,
        max_output_length: usize,
        deltas: Option<(usize, &DeltaSink)>,
    ) -> Result<CommandResult, SandboxError> {
        // A secret's value never reaches the container, but a server may
        // echo it back and a command may assemble it: each stream of the
        // command goes through one mask stream before anything (the
        // capture, its head/tail cut, the deltas) sees it, so a value
        // split across reads, deltas or the cut is still masked whole.
        let masks = match container.masker() {
            Some(masker) => [Some(masker.stream()), Some(masker.stream())],
            None => [None, None],
        };
        let sent = send(running, command).await?;
        let started = Instant::now();
        let pump = Pump {
            streams: sent.streams,
            masks,
            status: sent.status,
            deadline: Some(Instant::now() + timeout),
            drain_grace: self.drain_grace,
            // Past its first COMMAND_BURST bytes, a command's output is
            // read at the unread rate: its result keeps a head and a tail
            // and its deltas are spent long before, so the rest would only
            // be thrown away on the server's CPU (see `unread`). Once it
            // ended, what its pipes still hold is read at once.
            unread: DrainRate::new(self.unread_rate, COMMAND_BURST, Instant::now()),
        };
        let mut sink = CommandSink {
            captured: [
                CappedOutput::new(max_output_length),
                CappedOutput::new(max_output_length),
            ],
            encoders: [
                DeltaEncoder::new(max_output_length),
                DeltaEncoder::new(max_output_length),
            ],
            deltas,
            exit_status: None,
            spawn_error: None,
            reclaimed: 0,
            guard: KillOnDrop {
                running,
                id: sent.id,
                ended: false,
            },
        };
        let Pumped { timed_out } = pump.run(&mut sink).await;
        sink.guard.ended = true;
        let CommandSink {
            captured: [out, err],
            exit_status,
            spawn_error,
            reclaimed,
            ..
        } = sink;
        let pids_max = container.spec.pids_max;
        let mut stderr_text = String::new();
        if reclaimed > 0 {
            stderr_text.push_str(&note(&format!(
                "the container was at its process limit ({pids_max} processes and threads): \
                 the {reclaimed} processes an earlier command left running were ended to run this one"
            )));
        }
        let bytes_out = out.total_bytes() + err.total_bytes();
        stderr_text.push_str(&err.finish());
        report_denials(container, running, sent.denial_mark, &mut stderr_text);
        let outcome = outcome(
            timed_out,
            exit_status,
            spawn_error,
            pids_max,
            &mut stderr_text,
        )?;
        report_limits(container, running, &mut stderr_text);
        Ok(CommandResult {
            duration_ms: started.elapsed().as_millis() as u64,
            bytes_out,
            stdout: out.finish(),
            stderr: stderr_text,
            outcome,
        })
    }
}

/// A command sent to init: its number, the ends of its output and status
/// pipes, and where its egress refusals start.
struct Sent {
    id: u32,
    streams: [Source; 2],
    status: pipe::Receiver,
    denial_mark: Option<shellgate_egress::denials::DenialMark>,
}

/// Sends `command` to init with its pipes.
async fn send(running: &Running, command: &str) -> Result<Sent, SandboxError> {
    let reclaim = running.reclaim_due();
    let (stdout_read, stdout_write) = sys::pipe().context(|| "pipe".into())?;
    let (stderr_read, stderr_write) = sys::pipe().context(|| "pipe".into())?;
    let (status_read, status_write) = sys::pipe().context(|| "pipe".into())?;
    let id = running.next_command();
    // Taken before the command can start: its refusals come after.
    let denial_mark = running.denials().map(|denials| denials.mark());
    running
        .send(
            &Request::Run {
                id,
                command: command.as_bytes().to_vec(),
                reclaim,
            },
            &[&stdout_write, &stderr_write, &status_write],
        )
        .await?;
    drop((stdout_write, stderr_write, status_write));
    let stdout = pipe::Receiver::from_owned_fd(stdout_read).context(|| "stdout pipe".into())?;
    let stderr = pipe::Receiver::from_owned_fd(stderr_read).context(|| "stderr pipe".into())?;
    let status = pipe::Receiver::from_owned_fd(status_read).context(|| "status pipe".into())?;
    Ok(Sent {
        id,
        streams: [Source::Pipe(stdout), Source::Pipe(stderr)],
        status,
        denial_mark,
    })
}

/// Adds to a command's stderr what the container's egress proxy refused
/// since `mark` (see the module's doc).
fn report_denials(
    container: &Container,
    running: &Running,
    mark: Option<shellgate_egress::denials::DenialMark>,
    stderr: &mut String,
) {
    let (Some(denials), Some(mark)) = (running.denials(), mark) else {
        return;
    };
    let report = denials.since(mark).report();
    if report.is_empty() {
        return;
    }
    if !stderr.is_empty() && !stderr.ends_with('\n') {
        stderr.push('\n');
    }
    // A name or reason may quote what the program sent; it goes
    // through the container's masker like the program's output.
    let mut mask = container.masker().map(|masker| masker.stream());
    let report = masked(&mut mask, report.as_bytes(), true);
    stderr.push_str(&String::from_utf8_lossy(&report));
}

/// How a command ended, from what init reported; why it could not start
/// goes to its stderr.
fn outcome(
    timed_out: bool,
    exit_status: Option<i32>,
    spawn_error: Option<i32>,
    pids_max: u64,
    stderr: &mut String,
) -> Result<Outcome, SandboxError> {
    Ok(match (exit_status, spawn_error) {
        _ if timed_out => Outcome::Timeout,
        (Some(status), None) => Outcome::Exit {
            exit_code: sys::exit_code_of(status),
        },
        (status, Some(errno)) => {
            if errno == libc::EAGAIN {
                stderr.push_str(&note(&format!(
                    "cannot start the command: the container is at its process limit \
                     ({pids_max} processes and threads) and no earlier command's processes \
                     could be ended to make room. Delete the container and create another, \
                     or let it be suspended when idle (its files stay, its processes end)"
                )));
            } else {
                let reason = std::io::Error::from_raw_os_error(errno);
                stderr.push_str(&note(&format!("could not start the command: {reason}")));
            }
            Outcome::Exit {
                exit_code: status.map(sys::exit_code_of).unwrap_or(126),
            }
        }
        (None, None) => return Err(SandboxError::ContainerGone),
    })
}

/// Adds to a command's stderr the limits the container ran into while it
/// ran (counted by the kernel in the container's cgroup).
fn report_limits(container: &Container, running: &Running, stderr: &mut String) {
    let now = running.counters.events();
    let before = std::mem::replace(&mut *lock(&running.limits_seen), now);
    if now.pids_max > before.pids_max {
        stderr.push_str(&note(&format!(
            "the container hit its process limit ({} processes and threads) while this \
             command ran: {} process or thread starts failed",
            container.spec.pids_max,
            now.pids_max - before.pids_max
        )));
    }
    if now.oom_kills > before.oom_kills {
        stderr.push_str(&note(&format!(
            "the container ran out of memory (limit {} MiB) while this command ran: the \
             kernel ended {} process(es)",
            container.spec.memory_bytes >> 20,
            now.oom_kills - before.oom_kills
        )));
    }
}
