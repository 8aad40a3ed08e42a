//! The command path: one command sent to init, its output read as it comes,
//! its end (exit, timeout, deadline) and the limits it ran into reported.
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

use shellgate_egress::secrets::MaskStream;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::time::Instant;

use super::container::{Container, Running};
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

/// The most one read of a command's pipe takes.
const READ_BYTES: usize = 64 * 1024;

/// Reads at most `limit` bytes into `buf`'s spare capacity.
async fn read_at_most(
    pipe: &mut pipe::Receiver,
    buf: &mut Vec<u8>,
    limit: usize,
) -> std::io::Result<usize> {
    pipe.take(limit as u64).read_buf(buf).await
}

fn note(text: &str) -> String {
    format!("shellgate: {text}\n")
}

impl LocalEngine {
    pub(super) async fn run_all(
        &self,
        id: &str,
        request: RunRequest,
        deltas: Option<DeltaSink>,
    ) -> Result<Vec<CommandResult>, SandboxError> {
        request.validate()?;
        let container = self.container(id)?;
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
            let (running, _in_flight) = self.enter(&container).await?;
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
        let mut out_deltas = DeltaEncoder::new(max_output_length);
        let mut err_deltas = DeltaEncoder::new(max_output_length);
        let emit = |encoder: &mut DeltaEncoder, stream: StreamKind, bytes: &[u8]| {
            if let Some((command, sink)) = deltas {
                let text = encoder.push(bytes);
                if !text.is_empty() {
                    let _ = sink.send(OutputDelta {
                        command,
                        stream,
                        text,
                    });
                }
            }
        };
        // A secret's value never reaches the container, but a server may
        // echo it back and a command may assemble it: each stream of the
        // command goes through one mask stream before anything (the
        // capture, its head/tail cut, the deltas) sees it, so a value
        // split across reads, deltas or the cut is still masked whole.
        let (mut out_mask, mut err_mask) = match container.masker() {
            Some(masker) => (Some(masker.stream()), Some(masker.stream())),
            None => (None, None),
        };

        let pids_max = container.spec.pids_max;
        // Forks failed at the process limit since the last command
        // started: what it or an earlier one left running may still hold
        // the container at its limit (a fork bomb), and this command could
        // not start bash's pipelines. Init first ends what no running
        // command holds (see init's `reclaim`). The kernel's count of
        // failed forks only grows, so this does not depend on when the
        // container's process count is sampled: a bomb's count dips below
        // its limit between forks, and a command started in such a dip
        // would retry its own forks until it timed out. Counted from the
        // last start, not its end: a bomb that reached the limit while its
        // own command still ran may fail no fork between that end and this
        // start (bash's fork retries sleep), and is there all the same. A
        // container merely busy near its limit (no failed forks) is left
        // alone.
        let failed_forks = running.counters.events().pids_max;
        let reclaim = failed_forks
            > running
                .forks_failed_at_last_start
                .swap(failed_forks, std::sync::atomic::Ordering::Relaxed);
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

        let mut stdout =
            pipe::Receiver::from_owned_fd(stdout_read).context(|| "stdout pipe".into())?;
        let mut stderr =
            pipe::Receiver::from_owned_fd(stderr_read).context(|| "stderr pipe".into())?;
        let mut status =
            pipe::Receiver::from_owned_fd(status_read).context(|| "status pipe".into())?;
        // Declared after the pipes, so dropped before them.
        let mut guard = KillOnDrop {
            running,
            id,
            ended: false,
        };
        let mut out = CappedOutput::new(max_output_length);
        let mut err = CappedOutput::new(max_output_length);
        // Read into spare capacity (never zeroed): most commands print
        // nothing, and zeroing 128 KiB per command showed in profiles.
        let (mut out_buf, mut err_buf) = (
            Vec::<u8>::with_capacity(READ_BYTES),
            Vec::<u8>::with_capacity(READ_BYTES),
        );
        let mut status_bytes = Vec::with_capacity(Status::SIZE * 4);
        let mut status_buf = [0u8; Status::SIZE * 4];
        let (mut out_open, mut err_open, mut status_open) = (true, true, true);
        let mut exit_status = None;
        let mut spawn_error = None;
        let mut reclaimed = 0;
        let mut timed_out = false;
        let started = Instant::now();
        let far = Instant::now() + Duration::from_secs(86_400 * 365);
        let deadline = Instant::now() + timeout;
        // Set once the command ended (or was killed): how long pipes held
        // by leftover background processes may keep us.
        let mut stop_reading_at = far;

        // Two timers for the whole command, reset rather than made anew on
        // every wake-up.
        let deadline_sleep = tokio::time::sleep_until(deadline);
        tokio::pin!(deadline_sleep);
        let stop_sleep = tokio::time::sleep_until(stop_reading_at);
        tokio::pin!(stop_sleep);
        // Past its first COMMAND_BURST bytes, a command's output is read at
        // the unread rate: its result keeps a head and a tail and its
        // deltas are spent long before, so the rest would only be thrown
        // away on the server's CPU (see `unread`). Once it ended, what its
        // pipes still hold is read at once.
        let mut unread = DrainRate::new(
            self.inner.config.unread_output_rate,
            COMMAND_BURST,
            Instant::now(),
        );
        while out_open || err_open || status_open {
            let allowed = if status_open {
                unread.allowance(Instant::now()).min(READ_BYTES)
            } else {
                READ_BYTES
            };
            let paused = allowed == 0;
            let resume_at = unread.ready_at();
            tokio::select! {
                read = read_at_most(&mut stdout, &mut out_buf, allowed), if out_open && !paused => match read {
                    Ok(n) if n > 0 => {
                        unread.spend(n);
                        let bytes = masked(&mut out_mask, &out_buf, false);
                        out.push(&bytes);
                        emit(&mut out_deltas, StreamKind::Stdout, &bytes);
                        drop(bytes);
                        out_buf.clear();
                    }
                    _ => out_open = false,
                },
                read = read_at_most(&mut stderr, &mut err_buf, allowed), if err_open && !paused => match read {
                    Ok(n) if n > 0 => {
                        unread.spend(n);
                        let bytes = masked(&mut err_mask, &err_buf, false);
                        err.push(&bytes);
                        emit(&mut err_deltas, StreamKind::Stderr, &bytes);
                        drop(bytes);
                        err_buf.clear();
                    }
                    _ => err_open = false,
                },
                read = status.read(&mut status_buf), if status_open => match read {
                    Ok(n) if n > 0 => {
                        status_bytes.extend_from_slice(&status_buf[..n]);
                        while status_bytes.len() >= Status::SIZE {
                            let record: [u8; Status::SIZE] = status_bytes[..Status::SIZE].try_into().unwrap_or_default();
                            status_bytes.drain(..Status::SIZE);
                            match Status::decode(record) {
                                Some(Status::Exited(s)) => {
                                    exit_status = Some(s);
                                    guard.ended = true;
                                }
                                Some(Status::SpawnFailed(e)) => spawn_error = Some(e),
                                Some(Status::Reclaimed(n)) => reclaimed = n,
                                // Only processes announce their pid.
                                Some(Status::Spawned(_)) | None => {}
                            }
                        }
                    }
                    _ => {
                        status_open = false;
                        stop_reading_at = Instant::now() + self.inner.config.drain_grace;
                        stop_sleep.as_mut().reset(stop_reading_at);
                    }
                },
                () = tokio::time::sleep_until(resume_at), if paused => {}
                () = &mut deadline_sleep, if !timed_out && status_open => {
                    timed_out = true;
                    let _ = running.send(&Request::KillCommand { id }, &[]).await;
                    // If init never reports the exit (it died), give up after a while.
                    stop_reading_at = Instant::now() + Duration::from_secs(5);
                    stop_sleep.as_mut().reset(stop_reading_at);
                },
                () = &mut stop_sleep => break,
            }
        }
        guard.ended = true;
        // The tails the mask streams held back.
        let tail = masked(&mut out_mask, &[], true);
        out.push(&tail);
        emit(&mut out_deltas, StreamKind::Stdout, &tail);
        let tail = masked(&mut err_mask, &[], true);
        err.push(&tail);
        emit(&mut err_deltas, StreamKind::Stderr, &tail);
        let mut stderr_text = String::new();
        if reclaimed > 0 {
            stderr_text.push_str(&note(&format!(
                "the container was at its process limit ({pids_max} processes and threads): \
                 the {reclaimed} processes an earlier command left running were ended to run this one"
            )));
        }
        let bytes_out = out.total_bytes() + err.total_bytes();
        stderr_text.push_str(&err.finish());
        if let (Some(denials), Some(mark)) = (running.denials(), denial_mark) {
            let report = denials.since(mark).report();
            if !report.is_empty() {
                if !stderr_text.is_empty() && !stderr_text.ends_with('\n') {
                    stderr_text.push('\n');
                }
                // A name or reason may quote what the program sent; it goes
                // through the container's masker like the program's output.
                let mut mask = container.masker().map(|masker| masker.stream());
                let report = masked(&mut mask, report.as_bytes(), true);
                stderr_text.push_str(&String::from_utf8_lossy(&report));
            }
        }
        let outcome = match (exit_status, spawn_error) {
            _ if timed_out => Outcome::Timeout,
            (Some(status), None) => Outcome::Exit {
                exit_code: sys::exit_code_of(status),
            },
            (status, Some(errno)) => {
                if errno == libc::EAGAIN {
                    stderr_text.push_str(&note(&format!(
                        "cannot start the command: the container is at its process limit \
                         ({pids_max} processes and threads) and no earlier command's processes \
                         could be ended to make room. Delete the container and create another, \
                         or let it be suspended when idle (its files stay, its processes end)"
                    )));
                } else {
                    let reason = std::io::Error::from_raw_os_error(errno);
                    stderr_text.push_str(&note(&format!("could not start the command: {reason}")));
                }
                Outcome::Exit {
                    exit_code: status.map(sys::exit_code_of).unwrap_or(126),
                }
            }
            (None, None) => return Err(SandboxError::ContainerGone),
        };
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

/// `bytes` of a command's stream as they may leave: through its mask
/// stream if it has one (less what the stream holds back; with `end`, the
/// held tail too), else as they are. Processes' pumps use it too.
pub(super) fn masked<'a>(
    mask: &mut Option<MaskStream>,
    bytes: &'a [u8],
    end: bool,
) -> std::borrow::Cow<'a, [u8]> {
    match mask {
        None => std::borrow::Cow::Borrowed(bytes),
        Some(mask) => {
            let mut out = Vec::with_capacity(bytes.len());
            mask.push(bytes, &mut out);
            if end {
                mask.finish(&mut out);
            }
            std::borrow::Cow::Owned(out)
        }
    }
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
