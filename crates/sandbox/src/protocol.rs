//! The messages between the engine (in the server) and a container's helper
//! and init process.
//!
//! The control channel is a `SOCK_SEQPACKET` socket pair: one JSON message per
//! packet, with file descriptors attached where a command needs them. Each
//! command also gets a *status pipe* on which init writes fixed-size records
//! (started, exited, spawn failed), so the engine never has to route replies:
//! whoever waits on a command owns that command's pipe.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// File descriptor number of the control socket in the helper.
pub const CONTROL_FD: i32 = 3;

/// Largest control message (a command is at most 128 KiB of JSON-escaped text).
pub const MAX_MESSAGE: usize = 1 << 20;

/// Largest report from the helper or init (reports are a pid or a short
/// error message; the sender trims longer messages to fit).
pub const MAX_REPORT: usize = 16 * 1024;

/// Default `RLIMIT_NOFILE` (soft and hard) of a container's processes:
/// commands never inherit the server's limit, which is raised to serve many
/// connections.
pub const DEFAULT_NOFILE: u64 = 4096;

fn default_nofile() -> u64 {
    DEFAULT_NOFILE
}

/// A `(inside, outside, count)` line of a uid or gid map.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct IdRange {
    pub inside: u32,
    pub outside: u32,
    pub count: u32,
}

/// How the container's root file system is assembled.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RootSpec {
    /// A small tmpfs holding read-only binds of host directories and links.
    HostBinds {
        /// (host directory, path inside the container)
        binds: Vec<(PathBuf, String)>,
        /// (link path inside, link target)
        symlinks: Vec<(String, String)>,
        /// Read-only host directories shown through an overlay of their own
        /// rather than a bind, so the container's mount table never names
        /// where they live on the host (the generated `/etc`, and
        /// `/usr/local`: shellgate's `sudo`, over the host's own only if
        /// it is exposed).
        #[serde(default)]
        layers: Vec<Layer>,
    },
    /// An overlay of a read-only image root and a persistent writable layer.
    Overlay {
        lower: PathBuf,
        upper: PathBuf,
        work: PathBuf,
    },
}

/// A read-only overlay of host directories, shown at one or more paths
/// inside: one overlay (one superblock) for all of them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Layer {
    /// Host directories, the uppermost first (overlay's lower layers).
    pub sources: Vec<PathBuf>,
    /// Its name in the container's mount table (the overlay's `lowerdir=`).
    pub name: String,
    /// Where it shows inside the container: `(directory of the merged tree,
    /// relative, or "" for all of it; path inside)`.
    pub shows: Vec<(String, String)>,
}

/// The first message to a helper: it is in its cgroups (the engine moved
/// it there) and may go on. Joining (a cgroup migration) is the slowest step
/// of a start, so the engine keeps helpers enrolled ahead of time and sends
/// the [`HelperSpec`] only when a container starts.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Enrollment {}

/// Everything the helper needs to build a container; the second message.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HelperSpec {
    pub hostname: String,
    pub uid_map: Vec<IdRange>,
    pub gid_map: Vec<IdRange>,
    /// Whether the helper runs without root on the host (single-id maps,
    /// `setgroups` denied).
    pub rootless: bool,
    /// The unprivileged user (inside ids) commands run as.
    pub sandbox_uid: u32,
    /// Commands and file workers run as the namespace's root with the
    /// build capabilities (`ContainerSpec::build_root`) rather than as the
    /// sandbox user with none.
    #[serde(default)]
    pub build_root: bool,
    pub sandbox_gid: u32,
    /// An empty host directory used as the mount point of the new root
    /// (only inside the container's own mount namespace).
    pub root_mount: PathBuf,
    pub root: RootSpec,
    /// Read-only files bound over the image: (host file, path inside).
    pub file_binds: Vec<(PathBuf, String)>,
    /// Read-only *executable* files bound over the image, as `file_binds`
    /// but without `noexec` (shellgate's `sudo`): (host file, path inside).
    #[serde(default)]
    pub program_binds: Vec<(PathBuf, String)>,
    /// Persistent writable directories: (host directory, path inside).
    pub data_binds: Vec<(PathBuf, String)>,
    pub tmp_bytes: u64,
    pub home: String,
    /// The container's disk image, loop-mounted at `disk_root` by the helper
    /// in a private mount namespace; `None` when `disk_root` is a plain
    /// host directory.
    pub disk_image: Option<PathBuf>,
    pub disk_root: PathBuf,
    /// (uid, gid) of the sandbox user and of the container's root as the
    /// disk stores them, for its directories: host ids, or the container's
    /// own with `idmap_disk`.
    pub disk_sandbox_ids: (u32, u32),
    pub disk_root_ids: (u32, u32),
    /// The disk image holds the container's own ids: once its directories
    /// are made, the helper covers `disk_root` with an idmapped mount of
    /// itself through `uid_map`/`gid_map`, so the container sees its ids
    /// and the host stores them unshifted. The engine is sent a descriptor
    /// of `data` on the mount beneath (with `InitPid`): host root, whose
    /// ids map to none in the container's range, could create nothing on
    /// the idmapped one.
    #[serde(default)]
    pub idmap_disk: bool,
    /// The volumes are shown through idmapped mounts of the same maps (made
    /// by the helper as host root, each over its source in its own mount
    /// namespace): what the container writes there is stored as its own
    /// ids, so it stays its own in whichever range the container runs
    /// next, and is every container of the project's user.
    #[serde(default)]
    pub idmap_volumes: bool,
    /// The loop device this container's disk was last attached to, if it
    /// may still be: the helper mounts that device again when it still
    /// holds this image, so one disk never has two live file systems.
    #[serde(default)]
    pub reuse_loop: Option<u32>,
    /// `RLIMIT_NOFILE` (soft and hard) init sets for itself and its commands.
    #[serde(default = "default_nofile")]
    pub nofile: u64,
    /// A way out through the egress proxy (see `helper::network`): init
    /// routes every IPv4 address locally and sends the proxy's sockets
    /// with `Ready`. Off: loopback only.
    #[serde(default)]
    pub egress: bool,
    /// Variables added to every command's environment (proxy settings,
    /// secret placeholders), after the fixed ones.
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// Where commands start when they name no directory (an OCI image's
    /// `WorkingDir`); `None`: the data directory.
    #[serde(default)]
    pub workdir: Option<String>,
    /// Host directories shown read-only: (host directory, path inside).
    #[serde(default)]
    pub read_only_binds: Vec<(PathBuf, String)>,
    /// Volumes, bound read-write after the persistent directories: (host
    /// directory, path inside). No component of the path inside may be a
    /// symbolic link.
    #[serde(default)]
    pub volume_binds: Vec<(PathBuf, String)>,
    /// An empty directory init can traverse, where the helper mounts the
    /// volumes for init to bind (their own directories are host root's
    /// alone): a tmpfs of the helper's mount namespace covers it there.
    #[serde(default)]
    pub volume_stage: PathBuf,
    /// A throwaway container's disk: a tmpfs of this many bytes mounted at
    /// `disk_root` (in the helper's private mount namespace) instead of a
    /// disk image. Its pages are charged to the container's memory.
    #[serde(default)]
    pub disk_tmpfs_bytes: Option<u64>,
    /// Paths inside covered by an empty directory after every bind (so
    /// nothing bound later shows them again).
    #[serde(default)]
    pub hide: Vec<String>,
}

/// A look at a stopped container's files without starting it: the helper
/// mounts the disk in a private mount namespace, sends a descriptor of its
/// `data` directory and exits; the descriptor keeps the mount alive.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileViewSpec {
    pub disk_image: PathBuf,
    /// Empty directory the disk is mounted on (inside the helper's own
    /// mount namespace only).
    pub mount_point: PathBuf,
    pub reuse_loop: Option<u32>,
    /// A disk never started has no directories yet: made first, owned by
    /// (the sandbox user's, container root's) host ids, as a container's
    /// start would make them.
    #[serde(default)]
    pub prepare_layout: Option<((u32, u32), (u32, u32))>,
}

/// The helper's second message: what to build.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "task", rename_all = "snake_case")]
pub enum HelperTask {
    /// Start a container (its init).
    Container(Box<HelperSpec>),
    /// Open a stopped container's files without starting it.
    FileView(FileViewSpec),
}

/// What the helper and init report to the engine.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Report {
    /// The helper joined its cgroups and waits for a spec.
    Enrolled,
    /// The helper created init; this is init's pid on the host, and the
    /// loop device the container's disk is on (if it has one). With
    /// `idmap_disk`, the message carries the descriptor of the disk's
    /// `data` directory the engine reaches its files through (instead of
    /// init's).
    InitPid {
        pid: i32,
        #[serde(default)]
        loop_device: Option<u32>,
    },
    /// Init finished setting up and waits for commands. The message carries
    /// a descriptor of the container's `/mnt/data` (`O_PATH`), through which
    /// the engine reaches its files: no `/proc/<pid>` path that a recycled
    /// pid could redirect. With egress, the egress proxy's HTTP, HTTPS and
    /// DNS sockets follow, in that order.
    Ready,
    /// A file view is mounted; the message carries a descriptor of its
    /// `data` directory.
    FileView { loop_device: Option<u32> },
    /// A setup step failed.
    Error {
        error: shellgate_sandbox_api::SetupError,
    },
}

/// What the engine asks of init. Encoded as one tag byte and raw bytes, so a
/// command of any content costs exactly its length (plus five bytes) on the
/// wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Start `command`, known from now on as `id` (the engine numbers its
    /// commands); the message carries stdout, stderr and status pipes. With
    /// `reclaim`, forks failed at the container's process limit since the
    /// last command ended: first end the runaway an earlier command left
    /// (the processes of its marker), if it holds most of the container.
    Run {
        id: u32,
        command: Vec<u8>,
        reclaim: bool,
    },
    /// Kill command `id`, if it still runs, and every process it started,
    /// wherever they went (`setsid`, double forks): they all carry the
    /// command's marker.
    KillCommand { id: u32 },
    /// Start a process: a command as `Run` starts one, with what
    /// an interactive one needs (see [`StartProcess`]). The message carries
    /// its status pipe first; then, with a terminal, one end of a seqpacket
    /// pair on which init sends the terminal's master back (or an errno
    /// record, see [`PtyReply`]), else the stdout and stderr pipes; then,
    /// with `stdin` and no terminal, the read end of its stdin pipe.
    Start { id: u32, start: StartProcess },
    /// Send `signal` to the process group of command or process `id`
    /// (SIGKILL: as `KillCommand`, every process of its marker).
    SignalCommand { id: u32, signal: i32 },
    /// Start a TCP connection to `127.0.0.1:port` in the container's network
    /// namespace and send the (non-blocking, maybe still connecting) socket
    /// back on the `SOCK_SEQPACKET` socket the message carries: a
    /// [`ConnectReply`] with the socket attached, or with an errno and none.
    Connect { port: u16 },
    /// Run one file task (`crate::fs_ops::Task`, as JSON) in a worker, known
    /// from now on as `id` (killed by `KillCommand` like a command): init
    /// forks a child that becomes the sandbox user and runs it. The message
    /// carries the status pipe, the result pipe, and the task's data pipe
    /// and commit pipe where it has them (see `helper::worker`).
    Work { id: u32, task: Vec<u8> },
}

/// A process to start (see [`Request::Start`]): raw bytes, as init passes
/// them to `execve`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartProcess {
    pub command: Vec<u8>,
    /// A stdin pipe (without a terminal).
    pub stdin: bool,
    /// A terminal of this many (columns, rows), and its `TERM`.
    pub pty: Option<(u16, u16, Vec<u8>)>,
    /// Working directory (empty: `/mnt/data`).
    pub cwd: Vec<u8>,
    /// `NAME=value` entries added to (or replacing in) the environment.
    pub env: Vec<Vec<u8>>,
    /// As `Run`'s: forks failed at the process limit since the last start.
    pub reclaim: bool,
}

/// Init's answer on a terminal's reply socket: nothing but the master
/// descriptor (one byte of payload, 0) on success, or an errno record.
pub struct PtyReply;

impl PtyReply {
    /// The payload sent with the master.
    pub const OK: [u8; 4] = [0; 4];

    /// The payload of a failure: its errno, never 0.
    pub fn failed(errno: i32) -> [u8; 4] {
        errno.max(1).to_le_bytes()
    }

    /// The errno a payload names (0: success).
    pub fn errno(payload: &[u8]) -> i32 {
        payload
            .get(..4)
            .and_then(|b| b.try_into().ok())
            .map_or(libc::EIO, i32::from_le_bytes)
    }
}

const START_STDIN: u8 = 1;
const START_PTY: u8 = 2;
const START_RECLAIM: u8 = 4;

impl StartProcess {
    fn encode_into(&self, out: &mut Vec<u8>) {
        let mut flags = 0;
        if self.stdin {
            flags |= START_STDIN;
        }
        if self.pty.is_some() {
            flags |= START_PTY;
        }
        if self.reclaim {
            flags |= START_RECLAIM;
        }
        out.push(flags);
        let (cols, rows, term) = match &self.pty {
            Some((cols, rows, term)) => (*cols, *rows, term.as_slice()),
            None => (0, 0, &[][..]),
        };
        out.extend_from_slice(&cols.to_le_bytes());
        out.extend_from_slice(&rows.to_le_bytes());
        // Lengths as the fields' caps allow (the engine checks them first:
        // `ProcessSpec::validate`); a longer one is cut, never mis-framed.
        let term = &term[..term.len().min(u8::MAX as usize)];
        out.push(term.len() as u8);
        out.extend_from_slice(term);
        let cwd = &self.cwd[..self.cwd.len().min(u16::MAX as usize)];
        out.extend_from_slice(&(cwd.len() as u16).to_le_bytes());
        out.extend_from_slice(cwd);
        let env = &self.env[..self.env.len().min(u8::MAX as usize)];
        out.push(env.len() as u8);
        for entry in env {
            let entry = &entry[..entry.len().min(u16::MAX as usize)];
            out.extend_from_slice(&(entry.len() as u16).to_le_bytes());
            out.extend_from_slice(entry);
        }
        out.extend_from_slice(&self.command);
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let mut rest = bytes;
        let mut take = |n: usize| -> Option<&[u8]> {
            let (head, tail) = rest.split_at_checked(n)?;
            rest = tail;
            Some(head)
        };
        let flags = *take(1)?.first()?;
        if flags & !(START_STDIN | START_PTY | START_RECLAIM) != 0 {
            return None;
        }
        let cols = u16::from_le_bytes(take(2)?.try_into().ok()?);
        let rows = u16::from_le_bytes(take(2)?.try_into().ok()?);
        let term_len = *take(1)?.first()? as usize;
        let term = take(term_len)?.to_vec();
        let pty = if flags & START_PTY != 0 {
            Some((cols, rows, term))
        } else if cols == 0 && rows == 0 && term.is_empty() {
            None
        } else {
            return None;
        };
        let cwd_len = u16::from_le_bytes(take(2)?.try_into().ok()?) as usize;
        let cwd = take(cwd_len)?.to_vec();
        let count = *take(1)?.first()?;
        let mut env = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let len = u16::from_le_bytes(take(2)?.try_into().ok()?) as usize;
            env.push(take(len)?.to_vec());
        }
        Some(Self {
            command: rest.to_vec(),
            stdin: flags & START_STDIN != 0,
            pty,
            cwd,
            env,
            reclaim: flags & START_RECLAIM != 0,
        })
    }
}

/// Init's answer to [`Request::Connect`], on the socket passed with it: an
/// errno, 0 when the connection's socket is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectReply {
    pub errno: i32,
}

impl ConnectReply {
    /// Size of the record on the wire.
    pub const SIZE: usize = 4;

    pub fn encode(self) -> [u8; Self::SIZE] {
        self.errno.to_le_bytes()
    }

    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let errno = i32::from_le_bytes(bytes.try_into().ok()?);
        Some(Self { errno })
    }
}

impl Request {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Request::Run {
                id,
                command,
                reclaim,
            } => {
                let mut out = Vec::with_capacity(command.len() + 5);
                out.push(if *reclaim { b'r' } else { b'R' });
                out.extend_from_slice(&id.to_le_bytes());
                out.extend_from_slice(command);
                out
            }
            Request::KillCommand { id } => {
                let mut out = vec![b'K'];
                out.extend_from_slice(&id.to_le_bytes());
                out
            }
            Request::Start { id, start } => {
                let mut out = Vec::with_capacity(start.command.len() + 64);
                out.push(b'S');
                out.extend_from_slice(&id.to_le_bytes());
                start.encode_into(&mut out);
                out
            }
            Request::SignalCommand { id, signal } => {
                let mut out = vec![b'G'];
                out.extend_from_slice(&id.to_le_bytes());
                out.extend_from_slice(&signal.to_le_bytes());
                out
            }
            Request::Connect { port } => {
                let mut out = vec![b'C'];
                out.extend_from_slice(&u32::from(*port).to_le_bytes());
                out
            }
            Request::Work { id, task } => {
                let mut out = Vec::with_capacity(task.len() + 5);
                out.push(b'W');
                out.extend_from_slice(&id.to_le_bytes());
                out.extend_from_slice(task);
                out
            }
        }
    }

    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let (tag, rest) = bytes.split_first()?;
        let id = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?);
        let rest = &rest[4..];
        match tag {
            b'R' | b'r' => Some(Request::Run {
                id,
                command: rest.to_vec(),
                reclaim: *tag == b'r',
            }),
            b'K' if rest.is_empty() => Some(Request::KillCommand { id }),
            b'W' => Some(Request::Work {
                id,
                task: rest.to_vec(),
            }),
            b'S' => Some(Request::Start {
                id,
                start: StartProcess::decode(rest)?,
            }),
            b'G' if rest.len() == 4 => Some(Request::SignalCommand {
                id,
                signal: i32::from_le_bytes(rest.try_into().ok()?),
            }),
            b'C' if rest.is_empty() => Some(Request::Connect {
                port: u16::try_from(id).ok()?,
            }),
            _ => None,
        }
    }
}

/// A record on a command's status pipe, written by init when the command
/// ends (or could not start). Nothing is written while it runs: the engine
/// is not woken until there is something to tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The command ended with this raw wait status.
    Exited(i32),
    /// The command could not be started: this errno.
    SpawnFailed(i32),
    /// Before starting the command, init ended this many processes that an
    /// earlier command left running (the container was at its process limit).
    Reclaimed(i32),
    /// A process (`Request::Start`) started: its pid inside the container.
    Spawned(i32),
}

impl Status {
    /// Size of one record on the wire.
    pub const SIZE: usize = 8;

    pub fn encode(self) -> [u8; Self::SIZE] {
        let (tag, value) = match self {
            Status::Exited(v) => (2u32, v),
            Status::SpawnFailed(v) => (3, v),
            Status::Reclaimed(v) => (4, v),
            Status::Spawned(v) => (5, v),
        };
        let mut out = [0u8; Self::SIZE];
        out[..4].copy_from_slice(&tag.to_le_bytes());
        out[4..].copy_from_slice(&value.to_le_bytes());
        out
    }

    pub fn decode(bytes: [u8; Self::SIZE]) -> Option<Self> {
        let tag = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let value = i32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        match tag {
            2 => Some(Status::Exited(value)),
            3 => Some(Status::SpawnFailed(value)),
            4 => Some(Status::Reclaimed(value)),
            5 => Some(Status::Spawned(value)),
            _ => None,
        }
    }
}

/// The records' invariants over any bytes, shared by the unit tests, the
/// fuzz target `sandbox_protocol` (`fuzz/`) and the stable runner: what
/// the engine reads from a helper or init it does not trust (reports,
/// status records), and the requests init reads.
#[cfg(any(test, feature = "fuzzing"))]
// A broken invariant is meant to panic here: that is what a fuzzer finds.
#[allow(clippy::expect_used)]
pub mod fuzzing {
    use super::*;

    /// Inputs to start from: each request, status record and report.
    pub fn seeds() -> Vec<Vec<u8>> {
        let mut seeds = vec![
            Request::Run {
                id: 7,
                command: b"echo hi".to_vec(),
                reclaim: true,
            }
            .encode(),
            Request::KillCommand { id: 9 }.encode(),
            Request::Start {
                id: 3,
                start: StartProcess {
                    command: b"python3 -i".to_vec(),
                    stdin: true,
                    pty: Some((80, 24, b"xterm".to_vec())),
                    cwd: b"/tmp".to_vec(),
                    env: vec![b"A=1".to_vec()],
                    reclaim: false,
                },
            }
            .encode(),
            Request::SignalCommand { id: 3, signal: 2 }.encode(),
            Status::Spawned(12).encode().to_vec(),
            Request::Connect { port: 8000 }.encode(),
            Request::Work {
                id: 11,
                task: br#"{"op":"stat","path":"/mnt/data"}"#.to_vec(),
            }
            .encode(),
            [
                Status::Exited(256).encode(),
                Status::SpawnFailed(2).encode(),
            ]
            .concat(),
            Status::Reclaimed(3).encode().to_vec(),
        ];
        for report in [
            Report::Enrolled,
            Report::InitPid {
                pid: 42,
                loop_device: Some(3),
            },
            Report::Ready,
            Report::FileView { loop_device: None },
            Report::Error {
                error: shellgate_sandbox_api::SetupError::os(
                    shellgate_sandbox_api::SetupStep::PivotRoot,
                    "pivot_root",
                    std::io::Error::from_raw_os_error(libc::EPERM),
                ),
            },
        ] {
            seeds.extend(serde_json::to_vec(&report).ok());
        }
        seeds
    }

    /// Any bytes: no decoder panics; a request, status record or report
    /// that is accepted encodes back to what it was read from (requests,
    /// records) or reads back the same (reports).
    pub fn check_records(bytes: &[u8]) {
        if let Some(request) = Request::decode(bytes) {
            assert_eq!(request.encode(), bytes, "{request:?}");
        }
        for record in bytes.chunks_exact(Status::SIZE) {
            let mut raw = [0u8; Status::SIZE];
            raw.copy_from_slice(record);
            if let Some(status) = Status::decode(raw) {
                assert_eq!(status.encode(), raw, "{status:?}");
            }
        }
        // As the engine reads a report: at most MAX_REPORT bytes of JSON.
        let report = &bytes[..bytes.len().min(MAX_REPORT)];
        if let Ok(report) = serde_json::from_slice::<Report>(report) {
            let again = serde_json::to_vec(&report).expect("a report serializes");
            let back: Report = serde_json::from_slice(&again).expect("its own JSON reads back");
            assert_eq!(back, report);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_step_reaches_the_engine_with_its_step_and_errno() {
        let sent = Report::Error {
            error: shellgate_sandbox_api::SetupError::os(
                shellgate_sandbox_api::SetupStep::PivotRoot,
                "pivot_root",
                std::io::Error::from_raw_os_error(libc::EINVAL),
            ),
        };
        let bytes = serde_json::to_vec(&sent).unwrap();
        let Report::Error { error } = serde_json::from_slice(&bytes).unwrap() else {
            panic!("not an error report");
        };
        assert_eq!(error.step, crate::SetupStep::PivotRoot);
        assert_eq!(error.errno, Some(libc::EINVAL));
        let shown = crate::SandboxError::Helper(error).to_string();
        assert!(
            shown.starts_with("sandbox setup failed: pivot_root: Invalid argument"),
            "{shown}"
        );
    }

    #[test]
    fn hostile_records_are_refused_or_round_trip() {
        for bytes in [
            &b""[..],
            b"R\x01\x00\x00\x00echo hi",
            b"K\x01\x00\x00\x00",
            b"K\x01\x00\x00\x00extra",
            b"C\x40\x1f\x00\x00",
            b"C\x40\x1f\x01\x00",
            b"C\x40\x1f\x00\x00x",
            b"r\x01\x00",
            b"\x02\x00\x00\x00\xff\xff\xff\xff\x09\x00\x00\x00\x00\x00\x00\x00",
            br#"{"type":"init_pid","pid":7,"loop_device":3}"#,
            br#"{"type":"error","error":{"step":"pivot_root","context":"\u0000\ud800"}}"#,
            br#"{"type":"ready","extra":1}"#,
        ] {
            fuzzing::check_records(bytes);
        }
    }

    #[test]
    fn requests_round_trip() {
        for request in [
            Request::Run {
                id: 1,
                command: b"echo \"hi\"\n\x01".to_vec(),
                reclaim: false,
            },
            Request::Run {
                id: u32::MAX,
                command: b"true".to_vec(),
                reclaim: true,
            },
            Request::Run {
                id: 3,
                command: Vec::new(),
                reclaim: false,
            },
            Request::KillCommand { id: 42 },
            Request::SignalCommand { id: 1, signal: 9 },
            Request::Start {
                id: 5,
                start: StartProcess {
                    command: b"cat".to_vec(),
                    stdin: true,
                    pty: None,
                    cwd: Vec::new(),
                    env: vec![b"A=1".to_vec(), b"B=".to_vec()],
                    reclaim: true,
                },
            },
            Request::Start {
                id: 6,
                start: StartProcess {
                    command: Vec::new(),
                    stdin: false,
                    pty: Some((0, 0, Vec::new())),
                    cwd: b"/tmp".to_vec(),
                    env: Vec::new(),
                    reclaim: false,
                },
            },
            Request::Connect { port: 8000 },
            Request::Connect { port: u16::MAX },
            Request::Work {
                id: 5,
                task: br#"{"op":"read","path":"/tmp/x"}"#.to_vec(),
            },
        ] {
            assert_eq!(Request::decode(&request.encode()), Some(request));
        }
        assert_eq!(Request::decode(b""), None);
        assert_eq!(Request::decode(b"K12"), None);
        assert_eq!(Request::decode(b"K1234x"), None);
        assert_eq!(Request::decode(b"Rabc"), None);
        // A start without a terminal carries no terminal fields; unknown
        // flags and short fields are refused.
        assert_eq!(
            Request::decode(b"S\x01\x00\x00\x00\x00\x50\x00\x18\x00\x00\x00\x00\x00"),
            None
        );
        assert_eq!(
            Request::decode(b"S\x01\x00\x00\x00\x80\x00\x00\x00\x00\x00\x00\x00\x00"),
            None
        );
        assert_eq!(
            Request::decode(b"S\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x09\x00ab"),
            None
        );
        assert_eq!(Request::decode(b"G\x01\x00\x00\x00\x02"), None);
        // A port past u16 is not a port.
        assert_eq!(Request::decode(b"C\x00\x00\x01\x00"), None);
        assert_eq!(
            ConnectReply::decode(&ConnectReply { errno: 111 }.encode()),
            Some(ConnectReply { errno: 111 })
        );
        assert_eq!(ConnectReply::decode(b"\x00\x00"), None);
    }

    #[test]
    fn status_records_round_trip() {
        for status in [
            Status::Exited(137 << 8),
            Status::SpawnFailed(libc::ENOENT),
            Status::Reclaimed(509),
            Status::Spawned(17),
        ] {
            assert_eq!(Status::decode(status.encode()), Some(status));
        }
        assert_eq!(Status::decode([9, 0, 0, 0, 0, 0, 0, 0]), None);
        // The retired `Started` record is not read as anything.
        assert_eq!(Status::decode([1, 0, 0, 0, 7, 0, 0, 0]), None);
    }
}
