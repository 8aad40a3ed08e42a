//! Processes: a command started in a container with optional
//! stdin and an optional terminal, whose output is kept in a bounded buffer
//! and read by byte offset, and which can be written to, signalled, resized
//! and killed while it runs. The values that cross [`crate::SandboxBackend`]'s
//! process methods, and their errors (their checks, `ProcessSpec::validate`,
//! are in `backend` beside `RunRequest`'s).

use std::time::Duration;

use shellgate_wire::Outcome;

/// Limits of processes, per container.
pub mod process_limits {
    /// Live processes at once in one container (the Agents SDK's own cap).
    pub const MAX_LIVE: usize = 64;
    /// Ended processes kept (for their output and outcome) at most.
    pub const MAX_ENDED: usize = 64;
    /// How long an ended process is kept, in seconds.
    pub const ENDED_KEPT_SECS: u64 = 600;
    /// Output kept per process: older bytes are dropped (and counted).
    pub const OUTPUT_BUFFER: usize = 1 << 20;
    /// Most environment variables a start may add.
    pub const MAX_ENV: usize = 64;
    /// Longest environment entry (`NAME=value`).
    pub const MAX_ENV_ENTRY: usize = 32 * 1024;
    /// Longest working directory.
    pub const MAX_CWD: usize = 4096;
    /// Longest `TERM`.
    pub const MAX_TERM: usize = 64;
    /// Largest terminal side, in cells.
    pub const MAX_CELLS: u16 = 4096;
    /// Longest a reader may wait for new output.
    pub const MAX_WAIT_MS: u64 = 30_000;
    /// Largest stdin write of one call.
    pub const MAX_STDIN_WRITE: usize = 1 << 20;
    /// Longest timeout a process may ask for, in milliseconds (a day; `0`
    /// is no timeout at all).
    pub const MAX_TIMEOUT_MS: u64 = 86_400_000;
}

/// A terminal's size and type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PtySpec {
    pub cols: u16,
    pub rows: u16,
    pub term: String,
}

/// What to start: a command run as exec's are (`bash -c`, the sandbox
/// user), with what an interactive process needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessSpec {
    pub command: String,
    /// A pipe as stdin (written with `write_process_stdin`) rather than
    /// `/dev/null`. A terminal always has its input.
    pub stdin: bool,
    /// A terminal as stdin, stdout and stderr (one stream, `pty`).
    pub pty: Option<PtySpec>,
    /// Killed (with every descendant) when it passes, whatever clients do;
    /// `0` arms no timeout (a *service* process: it runs until it is killed
    /// or its container stops, suspends or is destroyed). At most
    /// [`process_limits::MAX_TIMEOUT_MS`]; each API keeps its own tighter
    /// rule (`/v1/.../processes`: exec's 1 to 300 000).
    pub timeout_ms: u64,
    /// Whether it holds its container awake: `true` counts it in flight
    /// (the container is never idle-suspended while it runs, as a client's
    /// command); `false` for a service (a kernel, a daemon) that must not
    /// keep an idle container alive, and dies when idle suspension or
    /// expiry stops the container.
    pub keeps_awake: bool,
    /// Variables added to (or replacing in) the command's environment.
    pub env: Vec<(String, String)>,
    /// Working directory; `/mnt/data` when `None`.
    pub cwd: Option<String>,
}

/// Where a process stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessStatus {
    Running,
    /// It ended by itself (an exit or a signal it did not get from us).
    Exited,
    /// Killed by a client (`kill_process`, or SIGKILL sent to it).
    Killed,
    /// Killed at its timeout.
    Timeout,
}

/// Which stream a piece of a process's output came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessStream {
    Stdout,
    Stderr,
    /// The terminal (stdout and stderr together).
    Pty,
}

/// What a backend knows about one process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo {
    pub id: String,
    pub container_id: String,
    pub command: String,
    /// Its pid inside the container, once known.
    pub pid: Option<i32>,
    pub status: ProcessStatus,
    pub pty: Option<PtySpec>,
    pub stdin: bool,
    /// Unix seconds.
    pub created_at: u64,
    pub ended_at: Option<u64>,
    /// How it ended (`None` while it runs).
    pub outcome: Option<Outcome>,
    /// Bytes it produced so far (all streams; masked as clients see them).
    pub output_bytes: u64,
    /// How long it ran (so far, while it runs).
    pub duration: Duration,
}

impl ProcessInfo {
    /// Its exit code, if it ended by an exit or a signal (`128 + signal`).
    pub fn exit_code(&self) -> Option<i32> {
        match self.outcome {
            Some(Outcome::Exit { exit_code }) => Some(exit_code),
            _ => None,
        }
    }
}

/// One piece of output at its offset in the process's output sequence
/// (every stream together, in arrival order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputChunk {
    pub stream: ProcessStream,
    pub offset: u64,
    pub data: Vec<u8>,
}

/// What a read of a process's output returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessOutput {
    pub chunks: Vec<OutputChunk>,
    /// Where the next read starts.
    pub next_offset: u64,
    /// Bytes past the asked offset that the bounded buffer no longer holds.
    pub dropped_bytes: u64,
    /// The process as it was after the read (ended: nothing more will come
    /// once `next_offset` reaches its `output_bytes`).
    pub process: ProcessInfo,
}

/// A read of a process's output: from `after`, at most `max_bytes`,
/// waiting at most `wait` for something new (or its end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputRead {
    pub after: u64,
    pub max_bytes: usize,
    pub wait: Duration,
}

/// What can go wrong with a process, beyond the container's own errors.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// No process with that id in that container (or it was forgotten).
    #[error("no process with id {0:?}")]
    NotFound(String),
    /// The container already has its most live processes.
    #[error(
        "the container already runs {limit} processes (its limit); wait for one to end or kill one"
    )]
    TooMany { limit: usize },
    /// The process ended: its stdin, terminal and signals are gone.
    #[error("process {0:?} has exited")]
    Exited(String),
    /// A process with that id exists already.
    #[error("a process with id {0:?} already exists")]
    AlreadyExists(String),
}

/// A signal by its name (`SIGINT`, `INT`) or number, as the API accepts
/// it: the ones a client may send.
pub fn signal_number(name: &str) -> Option<i32> {
    const NAMED: [(&str, i32); 10] = [
        ("HUP", 1),
        ("INT", 2),
        ("QUIT", 3),
        ("KILL", 9),
        ("USR1", 10),
        ("USR2", 12),
        ("TERM", 15),
        ("CONT", 18),
        ("STOP", 19),
        ("WINCH", 28),
    ];
    let bare = name.strip_prefix("SIG").unwrap_or(name);
    NAMED
        .iter()
        .find(|(known, _)| *known == bare)
        .map(|(_, number)| *number)
}

/// Whether a signal number may be sent (1 to 31, the standard ones).
pub fn signal_allowed(number: i32) -> bool {
    (1..=31).contains(&number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SandboxError;

    fn spec() -> ProcessSpec {
        ProcessSpec {
            command: "python3 -i".into(),
            stdin: true,
            pty: Some(PtySpec {
                cols: 80,
                rows: 24,
                term: "xterm-256color".into(),
            }),
            timeout_ms: 1000,
            keeps_awake: true,
            env: vec![("A_1".into(), "x".into())],
            cwd: Some("/tmp".into()),
        }
    }

    #[test]
    fn a_start_is_checked_naming_the_field() {
        assert!(spec().validate().is_ok());
        type Change = fn(&mut ProcessSpec);
        let cases: [(Change, &str); 7] = [
            (|s| s.command.clear(), "command"),
            (
                |s| s.timeout_ms = process_limits::MAX_TIMEOUT_MS + 1,
                "timeout_ms",
            ),
            (|s| s.env = vec![("1A".into(), "x".into())], "env"),
            (|s| s.env = vec![("A=B".into(), "x".into())], "env"),
            (|s| s.cwd = Some("relative".into()), "cwd"),
            (|s| s.pty.as_mut().unwrap().cols = 0, "cols"),
            (|s| s.pty.as_mut().unwrap().term = "a b".into(), "pty.term"),
        ];
        for (change, param) in cases {
            let mut asked = spec();
            change(&mut asked);
            match asked.validate() {
                Err(SandboxError::InvalidRequest { param: named, .. }) => {
                    assert_eq!(named, param)
                }
                other => panic!("{param}: {other:?}"),
            }
        }
    }

    #[test]
    fn no_timeout_and_long_ones_are_a_service_s_to_ask() {
        let service = ProcessSpec {
            timeout_ms: 0,
            keeps_awake: false,
            ..spec()
        };
        assert!(service.validate().is_ok());
        let long = ProcessSpec {
            timeout_ms: process_limits::MAX_TIMEOUT_MS,
            ..spec()
        };
        assert!(long.validate().is_ok());
    }

    #[test]
    fn signals_are_named_or_numbered() {
        assert_eq!(signal_number("SIGINT"), Some(2));
        assert_eq!(signal_number("KILL"), Some(9));
        assert_eq!(signal_number("SIGWINCH"), Some(28));
        assert_eq!(signal_number("SIGFOO"), None);
        assert!(signal_allowed(15));
        assert!(!signal_allowed(0));
        assert!(!signal_allowed(64));
    }
}
