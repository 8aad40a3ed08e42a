//! One pump for what a program in a container writes, a command's output
//! (kept for its result, streamed as deltas) and a process's (kept in its
//! buffer for readers) alike: it reads the program's two streams through
//! their mask streams and its status pipe, kills the program at its
//! deadline, reads output nobody reads at the unread rate (see `unread`),
//! and once the program ended reads what its pipes still hold for the drain
//! grace. A fix to how output is read, drained or cut off is made here once;
//! what becomes of the bytes and the statuses is the [`Sink`]'s.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use shellgate_egress::secrets::MaskStream;
use tokio::io::unix::AsyncFd;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::time::Instant;

use super::unread::DrainRate;
use crate::protocol::Status;

/// The most one read of a stream takes.
pub(super) const READ_BYTES: usize = 64 * 1024;

/// How long the pump waits for init to report a killed program's end
/// before it gives up on it (init died).
const KILL_PATIENCE: Duration = Duration::from_secs(5);

/// One output stream of a program.
pub(super) enum Source {
    Pipe(pipe::Receiver),
    /// A terminal's master: its one stream.
    Terminal(Arc<AsyncFd<OwnedFd>>),
    /// No such stream (the second of a program on a terminal).
    Absent,
}

impl Source {
    /// Reads at most `limit` bytes into `buf` (empty), into its spare
    /// capacity for a pipe: most commands print nothing, and zeroing a
    /// read buffer per command showed in profiles.
    async fn read_at_most(&mut self, buf: &mut Vec<u8>, limit: usize) -> io::Result<usize> {
        match self {
            Source::Pipe(pipe) => pipe.take(limit as u64).read_buf(buf).await,
            Source::Terminal(master) => {
                buf.resize(limit, 0);
                let read = read_terminal(master, buf).await;
                buf.truncate(*read.as_ref().unwrap_or(&0));
                read
            }
            Source::Absent => Ok(0),
        }
    }
}

/// Reads from a terminal master; its end (every slave closed) reads as
/// `EIO`, told as end-of-file.
async fn read_terminal(master: &AsyncFd<OwnedFd>, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        let mut guard = master.readable().await?;
        match guard.try_io(|fd| rustix::io::read(fd.get_ref(), &mut *buf).map_err(Into::into)) {
            Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Ok(0),
            Ok(result) => return result,
            Err(_would_block) => continue,
        }
    }
}

/// Where a pump's output and statuses go.
pub(super) trait Sink {
    /// Bytes that may be read now without the unread rate (a process's
    /// buffer room); `None`: every byte past the burst is metered.
    fn room(&self) -> Option<usize>;
    /// Resolves when a reader made room (a paused pump reads again).
    async fn demand(&self);
    /// Masked output of stream 0 (stdout, or the terminal) or 1 (stderr).
    fn output(&mut self, stream: usize, bytes: &[u8]);
    /// A status init reported.
    fn status(&mut self, status: Status);
    /// Asks init to kill the program: its deadline passed.
    async fn kill(&mut self);
}

/// What the pump reads and how.
pub(super) struct Pump {
    pub streams: [Source; 2],
    pub masks: [Option<MaskStream>; 2],
    pub status: pipe::Receiver,
    /// When the program is killed (`None`: it runs until it ends).
    pub deadline: Option<Instant>,
    /// How long pipes held by what the program left running may keep the
    /// pump once it ended.
    pub drain_grace: Duration,
    pub unread: DrainRate,
}

/// How the pump ended.
pub(super) struct Pumped {
    /// The program was killed at its deadline.
    pub timed_out: bool,
}

impl Pump {
    /// Pumps until the program ended and its streams closed or the drain
    /// grace ran out; the masks' held tails go to the sink last.
    pub async fn run(self, sink: &mut impl Sink) -> Pumped {
        let Pump {
            streams: [mut out, mut err],
            mut masks,
            mut status,
            deadline,
            drain_grace,
            mut unread,
        } = self;
        let (mut out_buf, mut err_buf) = (
            Vec::<u8>::with_capacity(READ_BYTES),
            Vec::<u8>::with_capacity(READ_BYTES),
        );
        let mut status_bytes = Vec::with_capacity(Status::SIZE * 4);
        let mut status_buf = [0u8; Status::SIZE * 4];
        let mut out_open = !matches!(out, Source::Absent);
        let mut err_open = !matches!(err, Source::Absent);
        let mut status_open = true;
        let mut timed_out = false;
        let far = Instant::now() + Duration::from_secs(86_400 * 365);
        // Two timers for the whole run, reset rather than made anew on
        // every wake-up.
        let deadline_sleep = tokio::time::sleep_until(deadline.unwrap_or(far));
        tokio::pin!(deadline_sleep);
        let stop_sleep = tokio::time::sleep_until(far);
        tokio::pin!(stop_sleep);
        while out_open || err_open || status_open {
            // What may be read now: once the program ended, what its pipes
            // still hold (for the drain grace); else up to the sink's room,
            // or what the unread rate allows. With nothing allowed, the pipe
            // fills and the program blocks on its next write until a reader
            // comes or the rate allows another step.
            let (allowed, metered) = if !status_open {
                (READ_BYTES, false)
            } else {
                match sink.room() {
                    Some(room) if room > 0 => (room.min(READ_BYTES), false),
                    _ => (unread.allowance(Instant::now()).min(READ_BYTES), true),
                }
            };
            let paused = allowed == 0;
            let resume_at = unread.ready_at();
            tokio::select! {
                read = out.read_at_most(&mut out_buf, allowed), if out_open && !paused => match read {
                    Ok(n) if n > 0 => {
                        if metered {
                            unread.spend(n);
                        }
                        let bytes = masked(&mut masks[0], &out_buf, false);
                        sink.output(0, &bytes);
                        drop(bytes);
                        out_buf.clear();
                    }
                    _ => out_open = false,
                },
                read = err.read_at_most(&mut err_buf, allowed), if err_open && !paused => match read {
                    Ok(n) if n > 0 => {
                        if metered {
                            unread.spend(n);
                        }
                        let bytes = masked(&mut masks[1], &err_buf, false);
                        sink.output(1, &bytes);
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
                            if let Some(decoded) = Status::decode(record) {
                                sink.status(decoded);
                            }
                        }
                    }
                    _ => {
                        status_open = false;
                        stop_sleep.as_mut().reset(Instant::now() + drain_grace);
                    }
                },
                () = sink.demand(), if paused => {}
                () = tokio::time::sleep_until(resume_at), if paused => {}
                () = &mut deadline_sleep, if deadline.is_some() && !timed_out && status_open => {
                    timed_out = true;
                    sink.kill().await;
                    stop_sleep.as_mut().reset(Instant::now() + KILL_PATIENCE);
                },
                () = &mut stop_sleep => break,
            }
        }
        for (stream, mask) in masks.iter_mut().enumerate() {
            let tail = masked(mask, &[], true);
            sink.output(stream, &tail);
        }
        Pumped { timed_out }
    }
}

/// `bytes` of a program's stream as they may leave: through its mask
/// stream if it has one (less what the stream holds back; with `end`, the
/// held tail too), else as they are.
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
