//! Containers: their images, lifetimes, resources, quotas per project,
//! and their price.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{ByteSize, MemoryCeiling};

/// Containers: images, lifetimes, resources, per-project quotas, price.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxSettings {
    /// The image containers are made from when a request names none; while
    /// it is not there (not built yet), `host` is used and the log says so.
    pub default_image: String,
    /// Build the default image in the background on a start that finds it
    /// missing (progress in the log and in `/healthz`); off, e.g. for tests,
    /// containers use `host` until `shellgate image build` is run.
    pub build_default_image: bool,
    /// Where images live; empty: `<data_dir>/sandbox/images`. Servers on
    /// one host may share a directory of built images.
    pub images_dir: String,
    /// Where the command line's short-lived engines (`exec`, `image`,
    /// `local --sandbox`) keep their state; empty: a RAM file system
    /// (`/run`, `$XDG_RUNTIME_DIR` or `/dev/shm`), else
    /// `<data_dir>/sandbox/oneshot`.
    pub oneshot_dir: String,
    /// Show the host's `/usr/local` inside `host`-image containers (off by
    /// default: host-installed tools are not vetted for sandboxes).
    pub expose_host_usr_local: bool,
    /// The first host uid of the sandboxes' id ranges (nodes sharing one
    /// host, as in the tests, each need ranges of their own).
    pub sandbox_uid_base: u32,
    /// Default `expires_after.minutes` of a container.
    pub default_expires_minutes: u32,
    /// Largest `expires_after.minutes` accepted (default 30 days).
    pub max_expires_minutes: u32,
    /// Idle time after which a container's processes end (its files stay).
    pub idle_suspend_after_secs: u64,
    /// How long a suspended container's files are kept.
    pub retention_days: u64,
    /// How often expiry, suspension and retention are checked.
    pub sweep_interval_secs: u64,
    /// Containers started ahead of demand (see the sandbox engine).
    pub warm_containers: usize,
    /// A file transfer by path that moves no byte for this
    /// many seconds is ended (its worker killed): a client that stops
    /// reading cannot keep a container busy for ever.
    pub transfer_stall_secs: u64,
    /// CPU ceiling of each container, in cores (0: none).
    pub container_cpus: f64,
    /// Memory all sandboxes together may use (their parent cgroup's limit):
    /// `auto` (the host's memory less a tenth, at least 1 GiB and at most
    /// 8 GiB kept for the server and the host) or a size such as `16g`. A
    /// container whose `memory_limit` is larger is refused (400).
    pub sandbox_memory_ceiling: MemoryCeiling,
    /// Most time one exec request may take, whatever its commands'
    /// timeouts; commands still pending then get a `timeout` outcome. A
    /// model's Python cell (the code interpreter's, Anthropic's code
    /// execution's) is interrupted past it too.
    pub request_deadline_secs: u64,
    /// Containers holding processes (running or being created) a project
    /// may have at once; suspended ones do not count (429 beyond).
    pub max_running_containers_per_project: u32,
    /// Sum of the `memory_limit`s of a project's running containers (429
    /// beyond). Limits are ceilings, not reservations: the host is protected
    /// by `sandbox_memory_ceiling`, this bounds one tenant's claim.
    pub max_memory_per_project: ByteSize,
    /// Exec requests a project may have running at once (429 beyond); a
    /// cluster's nodes share it. The console's terminals are not counted.
    pub max_execs_per_project: u32,
    /// Streams of one process's output (server-sent events, WebSockets,
    /// E2B's `Start` and `Connect`) open at once (429 beyond).
    pub max_streams_per_process: u32,
    /// Streams of process output a project may have open at once, on all
    /// its processes (429 beyond).
    pub max_streams_per_project: u32,
    /// Volumes a project may hold (429 beyond).
    pub max_volumes_per_project: u32,
    /// Bytes all of a project's volumes together may hold on disk, measured
    /// when a container that mounts a volume is made (429 beyond: no
    /// volume is mounted until files or volumes are deleted); a running
    /// container's writes into a volume are not cut short.
    pub max_volume_bytes_per_project: ByteSize,
    /// Snapshots a project may hold (429 beyond).
    pub max_snapshots_per_project: u32,
    /// Bytes all of a project's snapshots together may hold on disk
    /// (allocated blocks, measured when each is taken; 429 beyond, and
    /// the snapshot just taken is removed).
    pub max_snapshot_bytes_per_project: ByteSize,
    /// Price of a second of sandbox time (`server_tool_cost`).
    pub sandbox_price_per_second: f64,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        Self {
            default_image: "debian-12".to_owned(),
            build_default_image: true,
            images_dir: String::new(),
            oneshot_dir: String::new(),
            expose_host_usr_local: false,
            sandbox_uid_base: 3_000_000_000,
            default_expires_minutes: 20,
            max_expires_minutes: 30 * 24 * 60,
            idle_suspend_after_secs: 5 * 60,
            retention_days: 30,
            sweep_interval_secs: 10,
            warm_containers: 2,
            transfer_stall_secs: 60,
            container_cpus: 1.0,
            sandbox_memory_ceiling: MemoryCeiling::Auto,
            request_deadline_secs: 600,
            max_running_containers_per_project: 1000,
            max_memory_per_project: ByteSize {
                text: "1t".to_owned(),
                bytes: 1 << 40,
            },
            max_execs_per_project: 64,
            max_streams_per_process: 32,
            max_streams_per_project: 256,
            max_volumes_per_project: 100,
            max_volume_bytes_per_project: ByteSize {
                text: "10g".to_owned(),
                bytes: 10 << 30,
            },
            max_snapshots_per_project: 100,
            max_snapshot_bytes_per_project: ByteSize {
                text: "20g".to_owned(),
                bytes: 20 << 30,
            },
            sandbox_price_per_second: 0.0001,
        }
    }
}

impl SandboxSettings {
    /// The image store's directory, when set apart from the data directory.
    pub fn images_dir(&self) -> Option<PathBuf> {
        (!self.images_dir.is_empty()).then(|| PathBuf::from(&self.images_dir))
    }

    /// Where the command line's one-shot engines live, when set.
    pub fn oneshot_dir(&self) -> Option<PathBuf> {
        (!self.oneshot_dir.is_empty()).then(|| PathBuf::from(&self.oneshot_dir))
    }

    /// The CPU ceiling of a container (`None`: none).
    pub fn container_cpu_ceiling(&self) -> Option<f64> {
        (self.container_cpus > 0.0).then_some(self.container_cpus)
    }
}
