//! The engine interface the API layer talks to, and the values that cross it.
//!
//! Every backend (the local namespace backend today; a microVM or Kubernetes
//! backend later) implements [`SandboxBackend`]. Nothing above this trait knows
//! how a container is made.

use std::sync::Arc;

use async_trait::async_trait;

use crate::process::{process_limits, OutputRead, ProcessInfo, ProcessOutput, ProcessSpec};
use serde::{Deserialize, Serialize};

use crate::error::SandboxError;
use crate::fs::{ArchiveImported, FsDownload, FsEntry, FsListing, Upload, WriteOptions};
use crate::image::ImageInfo;

/// Default and maximum per-call limits (see `shared/reference/limits.md`).
pub mod limits {
    /// Default command timeout.
    pub const DEFAULT_TIMEOUT_MS: u64 = 120_000;
    /// Largest timeout a caller may ask for.
    pub const MAX_TIMEOUT_MS: u64 = 300_000;
    /// Default cap on characters kept per stream.
    pub const DEFAULT_MAX_OUTPUT_LENGTH: usize = 16_384;
    /// Largest cap a caller may ask for.
    pub const MAX_OUTPUT_LENGTH: usize = 65_536;
    /// Most commands one call may carry.
    pub const MAX_COMMANDS: usize = 100;
    /// Longest single command, in bytes. The kernel refuses a single
    /// `execve` argument longer than 128 KiB (`MAX_ARG_STRLEN`) anyway.
    pub const MAX_COMMAND_BYTES: usize = 128 * 1024 - 1;
    /// Deepest directory nesting a file listing goes.
    pub const MAX_LISTED_DEPTH: usize = 32;
    /// Most files a listing holds.
    pub const MAX_LISTED_FILES: usize = 100_000;
}

/// Parses `512m`, `1g`, `4G`, `1048576` into bytes.
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(split) => text.split_at(split),
        None => (text, ""),
    };
    let number: u64 = digits.parse().ok()?;
    let shift = match unit.to_ascii_lowercase().trim_end_matches(['b', 'i']) {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return None,
    };
    number.checked_mul(1u64 << shift)
}

/// What a container is made of and how much it may use.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ContainerSpec {
    /// Image name: `host` or a directory under the engine's image store.
    pub image: String,
    /// Memory limit in bytes (cgroup `memory.max`).
    pub memory_bytes: u64,
    /// Most processes and threads alive at once.
    pub pids_max: u64,
    /// CPU weight relative to other containers (cgroup v2 scale, 1..=10000, 100 is fair).
    pub cpu_weight: u64,
    /// Hard CPU ceiling in cores (`None`: no ceiling beyond the host). One
    /// core by default, so a spinning background process can never take
    /// every core of the host.
    pub cpu_cores: Option<f64>,
    /// Size cap of the container's `/tmp` (and `/dev/shm`) tmpfs, in bytes.
    pub tmp_bytes: u64,
    /// Disk quota of the container's persistent files (`/mnt/data`, home, writable layer).
    pub disk_bytes: u64,
    /// A throwaway container (`shellgate exec`): if a crash leaves it
    /// behind, the next engine start removes it instead of keeping it.
    #[serde(default)]
    pub ephemeral: bool,
    /// What the container may reach on the network; by default nothing.
    #[serde(default, skip_serializing_if = "NetworkSpec::is_disabled")]
    pub network: NetworkSpec,
    /// Its skills: a directory (one folder per skill) shown read-only at
    /// `/mnt/skills`. At create, the engine moves the directory given into
    /// the container's own directory (same file system), so it lives and
    /// goes with the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skills: Option<std::path::PathBuf>,
    /// The image's revision at create, recorded by the engine: the
    /// container keeps that tree even if the image is built again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_revision: Option<String>,
    /// Host directories shown inside at the same path (for `shellgate
    /// local --sandbox`; never set from the HTTP API): read-only ones are
    /// bound with the image's system directories, writable ones after
    /// `/tmp`, so a writable directory may sit inside a read-only one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_binds: Vec<HostBind>,
    /// Paths (inside) covered by an empty directory, e.g. the data
    /// directory below a bound host directory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hidden: Vec<String>,
    /// Volumes: host directories that outlive the container, bound
    /// read-write at their paths (each checked by [`check_volume_path`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeBind>,
    /// A build sandbox (the image builder's; never set from the HTTP API):
    /// every command and file operation runs as the root of the
    /// container's user namespace (an unprivileged host id) with the
    /// build capabilities alone, writing anywhere in the root's writable
    /// layer, so a build step can install packages. A host that maps only
    /// one id (rootless) cannot make one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub build_root: bool,
}

/// A volume shown in a container (see [`ContainerSpec::volumes`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct VolumeBind {
    /// The volume's directory on the host.
    pub source: std::path::PathBuf,
    /// Where it is mounted inside.
    pub target: String,
}

/// Top-level directories a volume may not be mounted in or over: the
/// system's own trees, the kernel's file systems, and the directories whose
/// content the sandbox writes (a link it planted there would redirect the
/// mount at the next start).
const VOLUME_REFUSED_TOPS: &[&str] = &[
    "bin",
    "boot",
    "dev",
    "etc",
    "home",
    "lib",
    "lib32",
    "lib64",
    "libx32",
    "nix",
    "opt",
    "proc",
    "root",
    "run",
    "sbin",
    "snap",
    "srv",
    "sys",
    "tmp",
    "usr",
    "var",
    "workspace",
];

/// Directories below `/mnt` that are the container's own.
const VOLUME_REFUSED_MNT: &[&str] = &["data", "skills"];

/// Longest volume path, in bytes.
pub const MAX_VOLUME_PATH: usize = 255;

/// Checks where a volume is mounted: an absolute path of plain components
/// (no `.`, `..`, empty component or trailing slash; ASCII letters,
/// digits, `-`, `_`, `.`): below `/mnt` but not in or over `/mnt/data` or
/// `/mnt/skills`, or at or below a top-level directory that is not a
/// system one (`/data`), never in the home directory.
pub fn check_volume_path(path: &str) -> Result<(), String> {
    let refuse = |why: &str| Err(format!("volume path {path:?} {why}"));
    if path.len() > MAX_VOLUME_PATH {
        return refuse(&format!("is longer than {MAX_VOLUME_PATH} bytes"));
    }
    let Some(relative) = path.strip_prefix('/') else {
        return refuse("must be absolute");
    };
    let components: Vec<&str> = relative.split('/').collect();
    for component in &components {
        if component.is_empty() || *component == "." || *component == ".." {
            return refuse("must be plain names separated by single slashes");
        }
        if !component
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        {
            return refuse("may hold only letters, digits, '-', '_' and '.'");
        }
    }
    match components.as_slice() {
        ["mnt"] => refuse("must name a directory below /mnt, not /mnt itself"),
        ["mnt", own, ..] if VOLUME_REFUSED_MNT.contains(own) => {
            refuse("is inside the container's own /mnt/data or /mnt/skills")
        }
        [top, ..] if VOLUME_REFUSED_TOPS.contains(top) => {
            refuse(&format!("is inside the system directory /{top}"))
        }
        _ => Ok(()),
    }
}

/// A host directory shown in a container (see [`ContainerSpec::host_binds`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct HostBind {
    pub source: std::path::PathBuf,
    pub target: String,
    pub writable: bool,
}

/// A container's network: none (the default), or the host names its
/// egress proxy lets it reach, and the secrets added on the way.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct NetworkSpec {
    /// Host names and `*.domain` patterns, already checked against the
    /// operator's list; empty: no network at all.
    #[serde(default)]
    pub allowed_domains: Vec<String>,
    /// Secrets (placeholders kept, values never written anywhere).
    #[serde(default)]
    pub secrets: Vec<shellgate_egress::secrets::DomainSecret>,
    /// What persists of each secret's value (salted digests of it and its
    /// encodings, never the value): after a restart the container's output
    /// and files are still masked. Filled in by the engine at create.
    #[serde(default)]
    pub verifiers: Vec<shellgate_egress::secrets::SecretVerifier>,
    /// Names (within `allowed_domains`, never a secret's) whose TLS the
    /// proxy does not terminate: it checks their SNI only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tls_passthrough: Vec<String>,
    /// A networked container whose `allowed_domains` a network update
    /// emptied: it keeps its way out (the proxy, refusing every name), so
    /// a later update can open it again without restarting its processes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub egress_kept: bool,
}

/// One of a container's secrets as the API may show it: never its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretStatus {
    pub domain: String,
    pub name: String,
    /// Whether this process holds the value (it does not after a restart,
    /// until the client supplies it again).
    pub held: bool,
    /// Where the value goes and for which requests, canonical
    /// (`shellgate_egress::secrets::DomainSecret::scope_key`).
    pub scope: String,
}

impl NetworkSpec {
    /// No way out at all: created without network (an emptied list of a
    /// networked container keeps its proxy, see `egress_kept`).
    pub fn is_disabled(&self) -> bool {
        self.allowed_domains.is_empty() && !self.egress_kept
    }
}

impl Default for ContainerSpec {
    fn default() -> Self {
        Self {
            image: "host".to_owned(),
            memory_bytes: 1 << 30,
            pids_max: 512,
            cpu_weight: 100,
            cpu_cores: Some(1.0),
            tmp_bytes: 256 << 20,
            disk_bytes: 4 << 30,
            ephemeral: false,
            network: NetworkSpec::default(),
            skills: None,
            image_revision: None,
            host_binds: Vec::new(),
            hidden: Vec::new(),
            volumes: Vec::new(),
            build_root: false,
        }
    }
}

/// One `run` call: commands executed one after another in the container.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RunRequest {
    pub commands: Vec<String>,
    /// Per-command timeout.
    pub timeout_ms: u64,
    /// Characters kept per stream (stdout, stderr) of each command.
    pub max_output_length: usize,
    /// Time the whole call may take, on top of each command's timeout:
    /// once it passes, the running command is killed and the commands not
    /// yet started get a `timeout` outcome without running.
    #[serde(default)]
    pub deadline_ms: Option<u64>,
}

impl RunRequest {
    /// A request with the default limits.
    pub fn new(commands: Vec<String>) -> Self {
        Self {
            commands,
            timeout_ms: limits::DEFAULT_TIMEOUT_MS,
            max_output_length: limits::DEFAULT_MAX_OUTPUT_LENGTH,
            deadline_ms: None,
        }
    }

    /// A run of `commands` with the limits a caller asked for (`None`: the
    /// default), checked. The one rule for every caller, `POST
    /// /v1/containers/{id}/exec` and a model's shell call alike: a limit
    /// out of range is refused, naming it, never clamped (a clamp would
    /// quietly run something other than what was asked: a model that asks
    /// for ten minutes would be killed at five without knowing why). Exec
    /// answers the refusal as a 400; the model loop as the call's result,
    /// so that the model can correct itself.
    pub fn from_parts(
        commands: Vec<String>,
        timeout_ms: Option<u64>,
        max_output_length: Option<u64>,
        deadline_ms: Option<u64>,
    ) -> Result<Self, SandboxError> {
        let request = Self {
            commands,
            timeout_ms: timeout_ms.unwrap_or(limits::DEFAULT_TIMEOUT_MS),
            max_output_length: max_output_length.map_or(limits::DEFAULT_MAX_OUTPUT_LENGTH, |n| {
                usize::try_from(n).unwrap_or(usize::MAX)
            }),
            deadline_ms,
        };
        request.validate()?;
        Ok(request)
    }

    /// Checks every limit, naming the offending parameter.
    pub fn validate(&self) -> Result<(), SandboxError> {
        let invalid =
            |param: &'static str, message: String| SandboxError::InvalidRequest { param, message };
        if self.commands.is_empty() {
            return Err(invalid(
                "commands",
                "at least one command is required".into(),
            ));
        }
        if self.commands.len() > limits::MAX_COMMANDS {
            return Err(invalid(
                "commands",
                format!(
                    "{} commands given; at most {} are allowed",
                    self.commands.len(),
                    limits::MAX_COMMANDS
                ),
            ));
        }
        if let Some(long) = self
            .commands
            .iter()
            .find(|c| c.len() > limits::MAX_COMMAND_BYTES)
        {
            return Err(invalid(
                "commands",
                format!(
                    "a command of {} bytes is longer than the {} allowed",
                    long.len(),
                    limits::MAX_COMMAND_BYTES
                ),
            ));
        }
        if self.commands.iter().any(|c| c.contains('\0')) {
            return Err(invalid(
                "commands",
                "commands may not contain NUL bytes".into(),
            ));
        }
        if self.timeout_ms == 0 || self.timeout_ms > limits::MAX_TIMEOUT_MS {
            return Err(invalid(
                "timeout_ms",
                format!(
                    "timeout_ms must be between 1 and {}",
                    limits::MAX_TIMEOUT_MS
                ),
            ));
        }
        if self.deadline_ms == Some(0) {
            return Err(invalid("deadline_ms", "a deadline must be positive".into()));
        }
        if self.max_output_length == 0 || self.max_output_length > limits::MAX_OUTPUT_LENGTH {
            return Err(invalid(
                "max_output_length",
                format!(
                    "max_output_length must be between 1 and {}",
                    limits::MAX_OUTPUT_LENGTH
                ),
            ));
        }
        Ok(())
    }
}

/// How a command ended (`{"type":"exit","exit_code":N}` or
/// `{"type":"timeout"}`; a signal death reports `128 + signal`), and one
/// command's result: the engine speaks OpenAI's `shell_call_output` shapes
/// directly, so no layer above converts them.
pub use shellgate_wire::{Outcome, ShellOutputEntry as CommandResult};

/// Which stream a piece of output came from.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum StreamKind {
    Stdout,
    Stderr,
}

/// Output of a running command as it arrives (for streaming). At most
/// `max_output_length` characters per stream and command are streamed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputDelta {
    /// Index of the command in the request.
    pub command: usize,
    pub stream: StreamKind,
    pub text: String,
}

/// Where streamed output goes.
pub type DeltaSink = tokio::sync::mpsc::UnboundedSender<OutputDelta>;

/// Whether a container's processes are alive.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ContainerState {
    Running,
    Stopped,
}

/// What a backend knows about one container.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ContainerInfo {
    pub id: String,
    pub state: ContainerState,
    pub spec: ContainerSpec,
}

/// What a running container uses now: its cgroup's counters and its
/// disk's file system.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ContainerUsage {
    /// CPU time its processes used since this start, in microseconds.
    pub cpu_usec: u64,
    /// How long this start has run, in microseconds.
    pub running_usec: u64,
    /// Memory charged to it, page cache excluded.
    pub memory_bytes: u64,
    /// Its page cache.
    pub memory_cache_bytes: u64,
    /// Its memory limit.
    pub memory_limit_bytes: u64,
    /// The cores it may use (`None`: the host's).
    pub cpu_cores: Option<f64>,
    /// Bytes its disk holds, and the disk's size. Without disk images
    /// (no quota: plain directories) `disk_used_bytes` is not measured (0).
    pub disk_used_bytes: u64,
    pub disk_total_bytes: u64,
}

/// A file under the container's `/mnt/data`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileEntry {
    /// Path inside the container, e.g. `/mnt/data/report.csv`.
    pub path: String,
    pub bytes: u64,
    /// Modification time, seconds since the Unix epoch.
    pub modified_unix: i64,
}

/// Every regular file under `/mnt/data` that a listing could name, and
/// what it had to leave out, so nothing goes missing silently.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileListing {
    /// Sorted by path.
    pub files: Vec<FileEntry>,
    pub skipped: SkippedFiles,
}

/// What a listing left out, by reason.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SkippedFiles {
    /// Files and directories whose names are not UTF-8 (the API speaks JSON).
    pub non_utf8_names: u64,
    /// Directories nested deeper than the listing goes (their files unseen).
    pub too_deep_directories: u64,
    /// Whether the listing stopped at its most entries.
    pub entry_limit_reached: bool,
}

impl SkippedFiles {
    /// Whether anything was left out.
    pub fn any(&self) -> bool {
        self.non_utf8_names > 0 || self.too_deep_directories > 0 || self.entry_limit_reached
    }
}

/// The engine interface. Container ids are chosen by the caller (1 to 64
/// characters of letters, digits, `_` and `-`), so the API layer owns naming.
///
/// "Busy" has one meaning: a command or file operation the backend counts as
/// in flight. `suspend_if_idle` and `destroy_if_idle` decide atomically with
/// that count, so the API layer keeps no count of its own.
#[async_trait]
pub trait SandboxBackend: Send + Sync {
    /// The images containers can be made from (reads the image store:
    /// call it off the async workers).
    fn images(&self) -> Vec<ImageInfo> {
        Vec::new()
    }

    /// Creates a container and starts its processes.
    async fn create(&self, id: &str, spec: ContainerSpec) -> Result<ContainerInfo, SandboxError>;
    /// Runs commands one after another; one result per command, in order.
    /// A container destroyed meanwhile ends the call with
    /// [`SandboxError::Deleted`].
    async fn run(&self, id: &str, request: RunRequest) -> Result<Vec<CommandResult>, SandboxError>;
    /// As `run`, also sending output to `deltas` as it arrives.
    async fn run_streaming(
        &self,
        id: &str,
        request: RunRequest,
        deltas: DeltaSink,
    ) -> Result<Vec<CommandResult>, SandboxError>;
    /// Ends every process of the container; its files stay.
    async fn stop(&self, id: &str) -> Result<(), SandboxError>;
    /// Stops the container unless a command or file operation is in flight;
    /// returns whether it is stopped.
    async fn suspend_if_idle(&self, id: &str) -> Result<bool, SandboxError>;
    /// Starts a stopped container again: new processes, the same files.
    async fn start(&self, id: &str) -> Result<(), SandboxError>;
    /// Ends the container's processes and removes everything it had.
    /// Commands running in it end with [`SandboxError::Deleted`].
    async fn destroy(&self, id: &str) -> Result<(), SandboxError>;
    /// Destroys the container unless a command or file operation is in
    /// flight; returns whether it was destroyed.
    async fn destroy_if_idle(&self, id: &str) -> Result<bool, SandboxError>;
    /// Counts the container in use while the returned hold lives, so that
    /// [`suspend_if_idle`](Self::suspend_if_idle) and
    /// [`destroy_if_idle`](Self::destroy_if_idle) leave it be: for work made
    /// of several calls (a code interpreter's kernel starting, then its
    /// cell), between which nothing else is in flight.
    async fn hold(&self, _id: &str) -> Result<ActivityHold, SandboxError> {
        Ok(ActivityHold::default())
    }
    /// What the backend knows about a container.
    async fn inspect(&self, id: &str) -> Result<ContainerInfo, SandboxError>;
    /// What a container uses now; `None` while it is stopped. Reads
    /// in-memory counters (cgroupfs, the disk's `statfs`): cheap enough for
    /// a sampler's pass over every container.
    async fn usage(&self, _id: &str) -> Result<Option<ContainerUsage>, SandboxError> {
        Err(SandboxError::NotSupported("resource usage"))
    }
    /// Every container the backend holds, running or stopped.
    async fn list(&self) -> Result<Vec<ContainerInfo>, SandboxError>;
    /// The ids of every container the backend holds (what [`Self::list`]
    /// names, without inspecting each: a start with thousands on disk
    /// needs only the names).
    async fn container_ids(&self) -> Result<Vec<String>, SandboxError> {
        Ok(self.list().await?.into_iter().map(|c| c.id).collect())
    }
    /// Every container the backend holds and whether it runs (what
    /// [`Self::list`] says of each, without reading each one's spec).
    async fn states(&self) -> Result<Vec<(String, ContainerState)>, SandboxError> {
        Ok(self
            .list()
            .await?
            .into_iter()
            .map(|c| (c.id, c.state))
            .collect())
    }
    /// Memory all containers together may use: no container may have a
    /// larger limit (`create` refuses it).
    fn memory_ceiling(&self) -> u64;
    /// Reads a file under `/mnt/data`; never follows a link out of it. A
    /// stopped container is not started.
    async fn read_file(&self, id: &str, path: &str) -> Result<Vec<u8>, SandboxError>;
    /// Opens a file under `/mnt/data` for streaming; never follows a link
    /// out of it. A stopped container is not started. A file larger than the
    /// container's disk quota (a sparse file) is refused.
    async fn open_file(&self, id: &str, path: &str) -> Result<std::fs::File, SandboxError>;
    /// Writes (creates or replaces) a file under `/mnt/data`, owned by the sandbox user.
    async fn write_file(&self, id: &str, path: &str, contents: &[u8]) -> Result<(), SandboxError>;
    /// As `write_file`, copying from an open file (large uploads are
    /// spooled to disk first, never held in memory); returns the bytes written.
    async fn write_file_from(
        &self,
        id: &str,
        path: &str,
        source: std::fs::File,
    ) -> Result<u64, SandboxError>;
    /// Removes a file under `/mnt/data`.
    async fn delete_file(&self, id: &str, path: &str) -> Result<(), SandboxError>;
    /// Every regular file under `/mnt/data` (bounded; see [`FileListing`]).
    /// A stopped container is not started.
    async fn list_files(&self, id: &str) -> Result<FileListing, SandboxError>;
    /// Waits for background teardowns of destroyed containers to finish.
    async fn settle(&self);
    /// The masker of a container's secrets (values held, or known by their
    /// digests), for bytes of it that reach a client other than through
    /// commands (file downloads, promote); `None`: nothing to mask.
    fn masker(&self, _id: &str) -> Option<Arc<shellgate_egress::secrets::Masker>> {
        None
    }
    /// Gives a container the values of its secrets again (after a
    /// restart of the server: until then its network is off). Every secret
    /// of the container, each value matching its verifier; a running
    /// container is stopped (its next command starts it with its network).
    async fn supply_secrets(
        &self,
        _id: &str,
        _secrets: Vec<shellgate_egress::secrets::DomainSecret>,
    ) -> Result<(), SandboxError> {
        Err(SandboxError::InvalidRequest {
            param: "domain_secrets",
            message: "this sandbox backend cannot take secrets again".into(),
        })
    }
    /// Whether `secrets` (domain, name, value) are exactly the container's,
    /// each with the value it was made with (held, or by its verifier).
    fn secrets_match(
        &self,
        _id: &str,
        secrets: &[shellgate_egress::secrets::DomainSecret],
    ) -> bool {
        secrets.is_empty()
    }
    /// The container's secrets, without their values.
    fn secret_status(&self, _id: &str) -> Vec<SecretStatus> {
        Vec::new()
    }
    /// Replaces the host names a networked container may reach (already
    /// checked against the operator's list; empty: none), kept with the
    /// container and in force for its every connection begun after this
    /// returns. A container created without network has no way out to
    /// change (`Conflict`): giving it one would restart its processes.
    async fn update_network(
        &self,
        _id: &str,
        _allowed_domains: Vec<String>,
    ) -> Result<(), SandboxError> {
        Err(SandboxError::NotSupported("a network update"))
    }
    /// Stops every running container (their files stay) and ends the
    /// backend's background work.
    async fn shutdown(&self);

    // Snapshots: a container's disk (its overlay's upper layer, `/mnt/data`,
    // the home and the workspace) saved under an id the caller chooses,
    // and new containers made from one. Files only: no process survives.

    /// Saves container `id`'s disk as snapshot `snapshot_id`. A running
    /// container's processes are frozen while its disk is copied.
    async fn snapshot(&self, _id: &str, _snapshot_id: &str) -> Result<SnapshotTaken, SandboxError> {
        Err(SandboxError::NotSupported("snapshots"))
    }
    /// Removes a snapshot (a missing one is not an error).
    async fn delete_snapshot(&self, _snapshot_id: &str) -> Result<(), SandboxError> {
        Err(SandboxError::NotSupported("snapshots"))
    }
    /// The ids of the snapshots this backend holds.
    async fn snapshot_ids(&self) -> Result<Vec<String>, SandboxError> {
        Ok(Vec::new())
    }
    /// Makes container `id` from `spec` with snapshot `snapshot_id`'s disk
    /// and image revision (the spec's `image` must be the snapshot's).
    async fn create_from_snapshot(
        &self,
        _id: &str,
        _spec: ContainerSpec,
        _snapshot_id: &str,
    ) -> Result<ContainerInfo, SandboxError> {
        Err(SandboxError::NotSupported("snapshots"))
    }
    /// Snapshot `snapshot_id` as one archive (a compressed tar of its
    /// files, holes kept, owners and extended attributes with them), read
    /// as it is made: what a cluster's node puts in the object store so
    /// that any node can restore it. The reader fails at its end if the
    /// archive could not be made whole.
    fn export_snapshot(
        &self,
        _snapshot_id: &str,
    ) -> Result<Box<dyn std::io::Read + Send>, SandboxError> {
        Err(SandboxError::NotSupported("snapshot archives"))
    }
    /// Makes snapshot `snapshot_id` from `archive` (one
    /// [`export_snapshot`](Self::export_snapshot) made, verified by the
    /// caller): committed whole or not at all. One already held is
    /// [`SandboxError::AlreadyExists`].
    async fn import_snapshot(
        &self,
        _snapshot_id: &str,
        _archive: std::fs::File,
    ) -> Result<(), SandboxError> {
        Err(SandboxError::NotSupported("snapshot archives"))
    }
    /// How a snapshot's blocks are shared with the copies made from it on
    /// this host (`reflink`, `copy`), or `None` without snapshots.
    fn snapshot_sharing(&self) -> Option<&'static str> {
        None
    }
    /// Makes image `name` of `project` (a new one, or a new revision of
    /// the project's own `name`) from container `id`'s image tree with its
    /// upper layer applied and its home as the home of the containers made
    /// from it, and `config` (or else the base image's) as its run
    /// configuration. A running container's processes are frozen while
    /// its disk is copied.
    async fn commit_image(
        &self,
        _id: &str,
        _name: &str,
        _project: &str,
        _config: Option<crate::image::ImageConfig>,
    ) -> Result<ImageInfo, SandboxError> {
        Err(SandboxError::NotSupported("committing images"))
    }

    /// Installs image `name` of `project` (a new one, or a new revision of
    /// the project's own) imported from `source`: an OCI image layout (a
    /// directory or its tar) or a `docker save`/`podman save` archive,
    /// each member checked as the engine checks an import. Blocking work
    /// runs off the async workers.
    async fn import_image(
        &self,
        _name: &str,
        _project: &str,
        _source: &std::path::Path,
    ) -> Result<ImageInfo, SandboxError> {
        Err(SandboxError::NotSupported("importing images"))
    }

    /// Project image `name`'s current tree as one archive (the snapshot
    /// archive's form), read as it is made, and its details (revision,
    /// project, run configuration): what a cluster's node puts in the
    /// object store so that any node can install it. The image cannot
    /// change until the reader is dropped; the reader fails at its end if
    /// the archive could not be made whole.
    fn export_image(
        &self,
        _name: &str,
    ) -> Result<(crate::image::ImageDetails, Box<dyn std::io::Read + Send>), SandboxError> {
        Err(SandboxError::NotSupported("image archives"))
    }

    /// Installs project image `name` from `archive` (one
    /// [`export_image`](Self::export_image) made, verified by the caller)
    /// with `details`, its revision kept: whole or not at all, nothing
    /// done if the image is at that revision already.
    async fn import_image_archive(
        &self,
        _name: &str,
        _details: crate::image::ImageDetails,
        _archive: std::fs::File,
    ) -> Result<crate::image::ImageInfo, SandboxError> {
        Err(SandboxError::NotSupported("image archives"))
    }

    /// Deletes image `name` of `project` (one of its own: a missing one,
    /// another project's, is [`SandboxError::ImageNotFound`]; shellgate's
    /// and the operator's images are refused). No container is made from
    /// it afterwards; its tree stays on disk while containers made from
    /// it or snapshots of them still use it, and goes with the last.
    async fn delete_image(&self, _name: &str, _project: &str) -> Result<(), SandboxError> {
        Err(SandboxError::NotSupported("deleting images"))
    }

    // Processes: see `crate::process`. A process counts as in
    // flight in its container (busy: never suspended) until it ends, and
    // is killed at its timeout, with every descendant, whatever clients do.
    // A service process (`keeps_awake: false`) is not counted, and
    // `timeout_ms: 0` arms no timeout: it ends when it is killed or its
    // container stops (idle suspension, expiry, destruction).

    /// Starts a process known from now on as `process_id` (chosen by the
    /// caller), waking a stopped container.
    async fn start_process(
        &self,
        _id: &str,
        _process_id: &str,
        _spec: ProcessSpec,
    ) -> Result<ProcessInfo, SandboxError> {
        Err(SandboxError::NotSupported("interactive processes"))
    }
    /// The container's live processes and the ended ones still kept.
    async fn list_processes(&self, _id: &str) -> Result<Vec<ProcessInfo>, SandboxError> {
        Err(SandboxError::NotSupported("interactive processes"))
    }
    /// One process.
    async fn process(&self, _id: &str, _process_id: &str) -> Result<ProcessInfo, SandboxError> {
        Err(SandboxError::NotSupported("interactive processes"))
    }
    /// Its output from an offset, waiting (bounded) for more or its end.
    async fn read_process_output(
        &self,
        _id: &str,
        _process_id: &str,
        _read: OutputRead,
    ) -> Result<ProcessOutput, SandboxError> {
        Err(SandboxError::NotSupported("interactive processes"))
    }
    /// Writes to its stdin (or terminal); with `eof`, closes it after.
    async fn write_process_stdin(
        &self,
        _id: &str,
        _process_id: &str,
        _bytes: Vec<u8>,
        _eof: bool,
    ) -> Result<(), SandboxError> {
        Err(SandboxError::NotSupported("interactive processes"))
    }
    /// Sends a signal to its process group (SIGKILL: every descendant).
    async fn signal_process(
        &self,
        _id: &str,
        _process_id: &str,
        _signal: i32,
    ) -> Result<(), SandboxError> {
        Err(SandboxError::NotSupported("interactive processes"))
    }
    /// Changes its terminal's size.
    async fn resize_process(
        &self,
        _id: &str,
        _process_id: &str,
        _cols: u16,
        _rows: u16,
    ) -> Result<(), SandboxError> {
        Err(SandboxError::NotSupported("interactive processes"))
    }
    /// Kills it and every descendant; returns it once it ended.
    async fn kill_process(
        &self,
        _id: &str,
        _process_id: &str,
    ) -> Result<ProcessInfo, SandboxError> {
        Err(SandboxError::NotSupported("interactive processes"))
    }
    /// Waits until it ended (at its timeout at the latest, if it has one).
    async fn wait_process(
        &self,
        _id: &str,
        _process_id: &str,
    ) -> Result<ProcessInfo, SandboxError> {
        Err(SandboxError::NotSupported("interactive processes"))
    }

    // Ports

    /// A TCP connection to `127.0.0.1:port` inside the running container,
    /// made from within its own network (never the host's). A stopped
    /// container is not started ([`crate::PortFailure::Suspended`]); while
    /// the connection is open the container is busy.
    async fn connect_port(
        &self,
        _id: &str,
        _port: u16,
    ) -> Result<crate::ports::PortConnection, SandboxError> {
        Err(SandboxError::NotSupported(
            "connecting to a container's ports",
        ))
    }

    // Files by path. Absolute container paths (see
    // `fs::container_path`); each runs with the sandbox user's rights.
    // A stopped container is started, except for reads (`fs_read`,
    // `fs_stat`, `fs_list`, `fs_export`) of `/mnt/data`, served from its
    // disk. A FIFO, device or socket is never opened for reading.

    /// Streams a regular file.
    async fn fs_read(&self, _id: &str, _path: &str) -> Result<FsDownload, SandboxError> {
        Err(SandboxError::NotSupported("reading files by path"))
    }
    /// Writes a file from a stream: to a temporary file beside it, renamed
    /// over it once the upload is finished (a cut one leaves the old file).
    async fn fs_write(
        &self,
        _id: &str,
        _path: &str,
        _options: WriteOptions,
    ) -> Result<Box<dyn Upload<FsEntry>>, SandboxError> {
        Err(SandboxError::NotSupported("writing files by path"))
    }
    /// The entry at a path (`lstat`).
    async fn fs_stat(&self, _id: &str, _path: &str) -> Result<FsEntry, SandboxError> {
        Err(SandboxError::NotSupported("stat by path"))
    }
    /// A directory's entries, `depth` levels down, at most `limit`.
    async fn fs_list(
        &self,
        _id: &str,
        _path: &str,
        _depth: u32,
        _limit: u32,
    ) -> Result<FsListing, SandboxError> {
        Err(SandboxError::NotSupported("listing directories by path"))
    }
    /// Makes a directory (with its parents, if asked).
    async fn fs_mkdir(
        &self,
        _id: &str,
        _path: &str,
        _parents: bool,
        _mode: u32,
    ) -> Result<FsEntry, SandboxError> {
        Err(SandboxError::NotSupported("making directories by path"))
    }
    /// Renames `from` to `to` (refusing to replace `to` unless `overwrite`).
    async fn fs_move(
        &self,
        _id: &str,
        _from: &str,
        _to: &str,
        _overwrite: bool,
    ) -> Result<FsEntry, SandboxError> {
        Err(SandboxError::NotSupported("moving files by path"))
    }
    /// Removes a file, link or empty directory; a directory's whole tree
    /// with `recursive`, which is refused before anything is removed when
    /// the tree cannot be removed whole (a mount point in it or at it, an
    /// entry the sandbox user may not remove): a failed remove changed
    /// nothing, or says what it removed.
    async fn fs_remove(
        &self,
        _id: &str,
        _path: &str,
        _recursive: bool,
    ) -> Result<(), SandboxError> {
        Err(SandboxError::NotSupported("removing files by path"))
    }
    /// Streams a directory as a tar archive, leaving out what `excludes`
    /// (globs relative to it) match. The directory is opened and checked
    /// before this returns: a path that is missing, unreadable or not a
    /// directory is an error here, never a stream that ends in one.
    async fn fs_export(
        &self,
        _id: &str,
        _path: &str,
        _excludes: Vec<String>,
    ) -> Result<FsDownload, SandboxError> {
        Err(SandboxError::NotSupported("exporting archives"))
    }
    /// Unpacks a tar stream into a directory; a refused or cut archive
    /// leaves nothing behind.
    async fn fs_import(
        &self,
        _id: &str,
        _path: &str,
    ) -> Result<Box<dyn Upload<ArchiveImported>>, SandboxError> {
        Err(SandboxError::NotSupported("importing archives"))
    }
}

/// A container counted in use until this is dropped ([`SandboxBackend::hold`]).
#[derive(Default)]
pub struct ActivityHold(Option<Box<dyn std::any::Any + Send + Sync>>);

impl ActivityHold {
    /// A hold that lasts as long as `guard` (which releases it when dropped).
    pub fn new(guard: impl std::any::Any + Send + Sync) -> Self {
        Self(Some(Box::new(guard)))
    }
}

impl std::fmt::Debug for ActivityHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ActivityHold")
            .field(&self.0.is_some())
            .finish()
    }
}

/// What a snapshot holds, as the engine took it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SnapshotTaken {
    /// Bytes its files occupy (allocated blocks, not apparent sizes).
    pub size_bytes: u64,
    /// The image the container was made from and the revision it ran on:
    /// the snapshot's upper layer only makes sense over that tree.
    pub image: String,
    pub image_revision: Option<String>,
    /// The container's disk size: a copy gets the same.
    pub disk_bytes: u64,
    /// How long the container's processes were frozen, in milliseconds
    /// (0 for a stopped container).
    pub frozen_ms: u64,
    /// Why the snapshot holds files only, not the processes' memory (the
    /// engine's checkpoint probe); `None` from an engine that says nothing.
    #[serde(default)]
    pub memory_unavailable_reason: Option<String>,
}

/// Refuses a container memory limit above what all containers together may
/// use (a backend's [`SandboxBackend::memory_ceiling`]).
pub fn check_memory(memory_bytes: u64, ceiling: u64) -> Result<(), SandboxError> {
    if memory_bytes > ceiling {
        return Err(SandboxError::InvalidRequest {
            param: "memory_limit",
            message: format!(
                "a memory limit of {} MiB is more than this host gives all sandboxes together \
                 ({} MiB); choose a smaller memory_limit",
                memory_bytes >> 20,
                ceiling >> 20
            ),
        });
    }
    Ok(())
}

impl ProcessSpec {
    /// Checks every field, naming the offending parameter (exec's command
    /// rule; the timeout may be `0`, none, or up to a day: an API that
    /// offers processes keeps its own tighter timeout rule).
    pub fn validate(&self) -> Result<(), SandboxError> {
        let invalid = |param: &'static str, message: String| {
            Err(SandboxError::InvalidRequest { param, message })
        };
        if self.command.is_empty() || self.command.len() > limits::MAX_COMMAND_BYTES {
            return invalid(
                "command",
                format!(
                    "command must be 1 to {} bytes long",
                    limits::MAX_COMMAND_BYTES
                ),
            );
        }
        if self.command.contains('\0') {
            return invalid("command", "command must not contain NUL".into());
        }
        if self.timeout_ms > process_limits::MAX_TIMEOUT_MS {
            return invalid(
                "timeout_ms",
                format!(
                    "timeout_ms must be at most {} (0: no timeout)",
                    process_limits::MAX_TIMEOUT_MS
                ),
            );
        }
        if self.env.len() > process_limits::MAX_ENV {
            return invalid(
                "env",
                format!("at most {} variables", process_limits::MAX_ENV),
            );
        }
        for (name, value) in &self.env {
            let name_ok = !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !name_ok {
                return invalid(
                    "env",
                    format!("{name:?} is not a variable name (letters, digits, '_')"),
                );
            }
            if value.contains('\0') || name.len() + value.len() + 1 > process_limits::MAX_ENV_ENTRY
            {
                return invalid(
                    "env",
                    format!(
                        "the value of {name} must hold no NUL and be under {} bytes",
                        process_limits::MAX_ENV_ENTRY
                    ),
                );
            }
        }
        if let Some(cwd) = &self.cwd {
            if !cwd.starts_with('/') || cwd.contains('\0') || cwd.len() > process_limits::MAX_CWD {
                return invalid(
                    "cwd",
                    "cwd must be an absolute path inside the container".into(),
                );
            }
        }
        if let Some(pty) = &self.pty {
            check_terminal_size(pty.cols, pty.rows)?;
            let term_ok = !pty.term.is_empty()
                && pty.term.len() <= process_limits::MAX_TERM
                && pty
                    .term
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.+".contains(&b));
            if !term_ok {
                return invalid(
                    "pty.term",
                    "term must be 1 to 64 letters, digits, '-', '_', '.' or '+'".into(),
                );
            }
        }
        Ok(())
    }
}

/// Refuses a terminal size of zero or past [`process_limits::MAX_CELLS`].
pub fn check_terminal_size(cols: u16, rows: u16) -> Result<(), SandboxError> {
    for (param, value) in [("cols", cols), ("rows", rows)] {
        if value == 0 || value > process_limits::MAX_CELLS {
            return Err(SandboxError::InvalidRequest {
                param,
                message: format!(
                    "{param} must be between 1 and {}",
                    process_limits::MAX_CELLS
                ),
            });
        }
    }
    Ok(())
}

/// Where the sandbox's own working directory lives inside a container.
pub const WORKDIR: &str = "/mnt/data";

/// Checks a caller-chosen container id.
pub fn validate_container_id(id: &str) -> Result<(), SandboxError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(SandboxError::InvalidRequest {
            param: "id",
            message: format!(
                "invalid container id {id:?}: use 1 to 64 letters, digits, '_' or '-'"
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_volume_path_is_plain_and_outside_the_system_and_the_containers_own_trees() {
        for fine in ["/mnt/vol", "/mnt/a/b-c_d.e", "/data", "/shared/cache"] {
            assert_eq!(super::check_volume_path(fine), Ok(()), "{fine}");
        }
        for refused in [
            "mnt/vol",
            "/",
            "/mnt",
            "/mnt/",
            "/mnt//vol",
            "/mnt/vol/",
            "/mnt/./vol",
            "/mnt/../etc",
            "/mnt/data",
            "/mnt/data/vol",
            "/mnt/skills/x",
            "/home/user/vol",
            "/proc/self",
            "/etc",
            "/tmp/vol",
            "/usr/local/vol",
            "/mnt/v ol",
            "/mnt/v\\ol",
            "/mnt/völ",
        ] {
            let refusal = super::check_volume_path(refused);
            assert!(refusal.is_err(), "{refused:?} was accepted: {refusal:?}");
        }
        assert!(super::check_volume_path(&format!("/mnt/{}", "a".repeat(300))).is_err());
    }

    use super::*;

    #[test]
    fn limits_are_defaulted_or_refused_never_clamped() {
        let run = |timeout: Option<u64>, output: Option<u64>| {
            RunRequest::from_parts(vec!["true".into()], timeout, output, None)
        };
        let defaults = run(None, None).unwrap();
        assert_eq!(defaults.timeout_ms, limits::DEFAULT_TIMEOUT_MS);
        assert_eq!(
            defaults.max_output_length,
            limits::DEFAULT_MAX_OUTPUT_LENGTH
        );
        assert_eq!(
            run(Some(limits::MAX_TIMEOUT_MS), None).unwrap().timeout_ms,
            300_000
        );
        for (timeout, output, param) in [
            (Some(0), None, "timeout_ms"),
            (Some(limits::MAX_TIMEOUT_MS + 1), None, "timeout_ms"),
            (None, Some(0), "max_output_length"),
            (None, Some(u64::MAX), "max_output_length"),
        ] {
            match run(timeout, output) {
                Err(SandboxError::InvalidRequest { param: named, .. }) => assert_eq!(named, param),
                other => panic!("{timeout:?} {output:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_size("1g"), Some(1 << 30));
        assert_eq!(parse_size("512M"), Some(512 << 20));
        assert_eq!(parse_size("64GiB"), Some(64 << 30));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("12x"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("99999999999999t"), None);
    }

    #[test]
    fn requests_are_validated_with_the_offending_param() {
        let mut request = RunRequest::new(vec!["true".into()]);
        assert!(request.validate().is_ok());
        request.timeout_ms = limits::MAX_TIMEOUT_MS + 1;
        assert!(matches!(
            request.validate(),
            Err(SandboxError::InvalidRequest {
                param: "timeout_ms",
                ..
            })
        ));
        let mut request = RunRequest::new(vec!["x".into(); limits::MAX_COMMANDS + 1]);
        assert!(matches!(
            request.validate(),
            Err(SandboxError::InvalidRequest {
                param: "commands",
                ..
            })
        ));
        request.commands = vec![];
        assert!(request.validate().is_err());
        let mut request = RunRequest::new(vec!["true".into()]);
        request.max_output_length = 0;
        assert!(matches!(
            request.validate(),
            Err(SandboxError::InvalidRequest {
                param: "max_output_length",
                ..
            })
        ));
    }

    #[test]
    fn outcome_serializes_like_openai() {
        let exit = serde_json::to_string(&Outcome::Exit { exit_code: 3 }).unwrap();
        assert_eq!(exit, r#"{"type":"exit","exit_code":3}"#);
        assert_eq!(
            serde_json::to_string(&Outcome::Timeout).unwrap(),
            r#"{"type":"timeout"}"#
        );
    }

    #[test]
    fn files_by_path_start_where_commands_do() {
        assert_eq!(crate::fs::WORKDIR, WORKDIR);
    }

    #[test]
    fn container_ids_are_checked() {
        assert!(validate_container_id("cntr_abc-1").is_ok());
        assert!(validate_container_id("").is_err());
        assert!(validate_container_id("../etc").is_err());
        assert!(validate_container_id(&"a".repeat(65)).is_err());
    }
}
