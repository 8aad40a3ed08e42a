//! One-shot engines, for the commands that run sandboxes without a server
//! (`exec`, `image`, `local`): each in a lane of its own, sharing the data
//! directory's images, with the network a command line asks for.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use shellgate_sandbox::{EngineConfig, LocalEngine};

/// The engine's directory inside a data directory (shared by `serve`,
/// `exec` and `image`, so images built once serve all three).
pub(crate) fn sandbox_dir(data_dir: Option<PathBuf>) -> PathBuf {
    data_dir
        .unwrap_or_else(shellgate_server::config::default_data_dir)
        .join("sandbox")
}

/// A one-shot engine's lane: its own engine directory (so `exec` and
/// `image` run beside a `serve` that holds the main one), its own cgroup
/// group (named after that directory), and its own host id range, below
/// the server's, so no two sandboxes ever share host ids. Held, by an
/// exclusive `flock`, for as long as the process runs; a lane left by a
/// crashed process is cleaned up by the next one that takes it (the
/// engine's recovery).
pub(crate) struct Lane {
    _lock: std::fs::File,
    /// The machine-wide claim on this lane's host id range, when it is
    /// held apart from the lane's folder (see [`id_lanes_dir`]).
    _ids: Option<std::fs::File>,
    /// Which of the machine's lane id ranges it maps (its own index when
    /// its folder is the machine's).
    id_range: u32,
    dir: PathBuf,
}

impl Lane {
    /// The folder that holds every lane.
    pub(crate) fn root(&self) -> &std::path::Path {
        self.dir.parent().unwrap_or(&self.dir)
    }
}

/// How many one-shot engines one user may run at once (see [`lanes_root`]).
const LANES: u32 = 256;
/// Host ids of the lanes: `ONESHOT_UID_BASE + range × LANE_SLOTS × 65536`,
/// all below the server's 3,000,000,000.
const ONESHOT_UID_BASE: u32 = 2_000_000_000;
const LANE_SLOTS: u32 = 4;

/// Where one-shot lanes live: the `oneshot_dir` setting, else on a RAM file system (`/run` as root or
/// `$XDG_RUNTIME_DIR` otherwise when they are one, else `/dev/shm`), in a
/// folder of this user's shared by every data directory (so lanes, and the
/// host ids they own, are unique on the machine, and their number bounded);
/// else in the data directory itself.
///
/// Why: nothing in a lane outlives its command (its containers are
/// throwaway, their disks tmpfs, its images the data directory's), but
/// making and deleting its files costs disk I/O, and on some disks a lot: on
/// an ext4 without a journal mounted with `discard` (this project's CI
/// machine), every freed block is discarded synchronously (off-CPU profile
/// in BENCHMARKS.md). What a crash leaves in a lane, the next command to
/// take it removes, and a reboot clears. Returns the folder and the
/// directory it was made under.
fn lanes_root(
    sandbox_dir: &std::path::Path,
    settings: &shellgate_server::Config,
) -> (PathBuf, PathBuf) {
    if let Some(dir) = settings.sandbox.oneshot_dir() {
        let parent = dir.parent().map(PathBuf::from).unwrap_or_default();
        return (dir, parent);
    }
    let euid = shellgate_sandbox::sys::geteuid();
    let canonical = std::fs::canonicalize(sandbox_dir).unwrap_or_else(|_| sandbox_dir.into());
    let mut places = Vec::new();
    if euid == 0 {
        places.push(PathBuf::from("/run"));
    } else if let Some(runtime) = std::env::var_os("XDG_RUNTIME_DIR") {
        places.push(PathBuf::from(runtime));
    }
    places.push(PathBuf::from("/dev/shm"));
    for place in places {
        let own = place.join(format!("shellgate-{euid}"));
        if shellgate_sandbox::sys::is_tmpfs(&place) && owned_private_dir(&own) {
            return (own.join("oneshot"), own);
        }
    }
    (canonical.join("oneshot"), canonical)
}

/// Makes `dir` (mode 0711) or finds it, and says whether it is a real
/// directory of this user's that no one else may write to: in a shared,
/// world-writable place such as `/dev/shm`, anything else may be another
/// user's trap (a symbolic link, or a folder they can fill).
fn owned_private_dir(dir: &std::path::Path) -> bool {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let _ = std::fs::DirBuilder::new().mode(0o711).create(dir);
    std::fs::symlink_metadata(dir).is_ok_and(|meta| {
        meta.is_dir() && meta.uid() == shellgate_sandbox::sys::geteuid() && meta.mode() & 0o022 == 0
    })
}

fn claim_lane(sandbox_dir: &std::path::Path, settings: &shellgate_server::Config) -> Result<Lane> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(sandbox_dir)
        .with_context(|| format!("cannot create {}", sandbox_dir.display()))?;
    let (root, base) = lanes_root(sandbox_dir, settings);
    std::fs::create_dir_all(&root).with_context(|| format!("cannot create {}", root.display()))?;
    // Sandboxes run as unprivileged host users: they traverse, never list.
    let _ = std::fs::set_permissions(sandbox_dir, std::fs::Permissions::from_mode(0o711));
    for dir in root.ancestors().take_while(|dir| *dir != base) {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711))?;
    }
    // The lane is the folder's lowest free one (so the next command cleans
    // up what a crashed one left); its host ids, the lowest range no lane
    // of any folder holds.
    let (lock, index) = lowest_free(&root)?
        .ok_or_else(|| anyhow::anyhow!("{LANES} one-shot sandboxes are already running"))?;
    let (ids, id_range) = match id_lanes_dir(&root) {
        Some(dir) => {
            let (held, range) = lowest_free(&dir)?.ok_or_else(|| {
                anyhow::anyhow!("{LANES} one-shot sandboxes are already running on this machine")
            })?;
            (Some(held), range)
        }
        None => (None, index),
    };
    Ok(Lane {
        _lock: lock,
        _ids: ids,
        id_range,
        dir: root.join(index.to_string()),
    })
}

/// The lowest `n` below [`LANES`] whose `dir/<n>.lock` no process holds,
/// held (by `flock`) while the returned file is open.
fn lowest_free(dir: &std::path::Path) -> Result<Option<(std::fs::File, u32)>> {
    for n in 0..LANES {
        if let Some(held) = try_lock(&dir.join(format!("{n}.lock")))? {
            return Ok(Some((held, n)));
        }
    }
    Ok(None)
}

/// Takes an exclusive `flock` on `path` (made if missing) without waiting:
/// the open file while it is held, `None` if another process holds it.
fn try_lock(path: &std::path::Path) -> Result<Option<std::fs::File>> {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    // SAFETY: flock on a descriptor this function owns.
    let taken = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
    Ok(taken.then_some(file))
}

/// Where root claims lanes' host id ranges when the lanes live elsewhere
/// (an `oneshot_dir`, or a data directory): one folder for the whole
/// machine, so that lanes of two folders never run at once with the same
/// host ids. `None` when the lanes' own folder
/// is that place, or for an ordinary user, whose sandboxes all run as
/// that user anyway.
fn id_lanes_dir(root: &std::path::Path) -> Option<PathBuf> {
    if shellgate_sandbox::sys::geteuid() != 0 {
        return None;
    }
    let machine = PathBuf::from("/run/shellgate-0");
    let dir = machine.join("oneshot");
    if root == dir {
        return None;
    }
    // /run is root's on every Linux host; made 0711 as in lanes_root.
    owned_private_dir(&machine).then(|| {
        let _ = std::fs::create_dir(&dir);
        dir
    })
}

/// The settings the command line's engines take from the environment
/// (`SHELLGATE_IMAGES_DIR`, `SHELLGATE_ONESHOT_DIR`): the defaults if they
/// cannot be read.
pub(crate) fn env_settings() -> shellgate_server::Config {
    shellgate_server::Config::load(None, std::env::vars()).unwrap_or_default()
}

/// The images directory the server uses: `images_dir`, else the engine
/// directory's own.
pub(crate) fn images_dir(
    sandbox_dir: &std::path::Path,
    settings: &shellgate_server::Config,
) -> PathBuf {
    settings
        .sandbox
        .images_dir()
        .unwrap_or_else(|| sandbox_dir.join("images"))
}

/// A throwaway container's id: `PREFIX-<pid>-<nanoseconds>`.
pub(crate) fn throwaway_id(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{prefix}-{}-{nanos}", std::process::id())
}

/// Opens a one-shot engine in a lane of its own, sharing the data
/// directory's images.
pub(crate) async fn open_engine(
    sandbox_dir: PathBuf,
    egress: Option<shellgate_sandbox::engine::EgressSettings>,
    map_invoking_user: bool,
) -> Result<(LocalEngine, Lane)> {
    let settings = env_settings();
    let lane = claim_lane(&sandbox_dir, &settings)?;
    let mut config = EngineConfig::new(lane.dir.clone());
    config.egress = egress;
    config.images_dir = Some(images_dir(&sandbox_dir, &settings));
    config.prune_images = false;
    config.map_invoking_user = map_invoking_user;
    config.uid_base = ONESHOT_UID_BASE + lane.id_range * LANE_SLOTS * 65_536;
    // Its output is read as fast as it comes: the reading is its own
    // user's CPU, on a machine no other tenant shares.
    config.unread_output_rate = None;
    // A one-shot command has no use for anything made ahead.
    config.pool_size = 0;
    config.spare_helpers = 0;
    config.warm_containers = 0;
    let (engine, warnings) = LocalEngine::open(config)
        .await
        .context("cannot open the sandbox engine")?;
    for warning in warnings {
        tracing::warn!("{warning}");
    }
    Ok((engine, lane))
}

/// The network of a one-shot sandbox: none, or these host names through
/// the egress proxy (each refusal told in the stderr of the command that
/// met it, so a failing command says why).
pub(crate) fn egress_for(
    allow: &[String],
    config_file: Option<&std::path::Path>,
) -> Result<(
    shellgate_sandbox::backend::NetworkSpec,
    Option<shellgate_sandbox::engine::EgressSettings>,
)> {
    if allow.is_empty() {
        return Ok((Default::default(), None));
    }
    let config = shellgate_server::Config::load(config_file, std::env::vars())?;
    config.validate()?;
    let policy = shellgate_wire::NetworkPolicy::Allowlist {
        allowed_domains: allow.to_vec(),
        domain_secrets: Vec::new(),
        tls_passthrough_domains: Vec::new(),
    };
    // The rule the API's network_policy follows, from the crate that owns it.
    let network = shellgate_sandbox_api::network::network_spec(
        &config.egress.rules()?,
        Some(&policy),
        "--allow",
    )
    .map_err(|e| anyhow::anyhow!("--allow: {}", e.message))?;
    anyhow::ensure!(
        config.egress.egress,
        "egress is off in the configuration (egress = false)"
    );
    let (settings, mut attempts) =
        shellgate_egress::proxy::Settings::configure(&config.egress.proxy_options())
            .map_err(anyhow::Error::msg)?;
    let settings = std::sync::Arc::new(settings);
    // No store to keep the log in: it is drained. Each refusal is told in
    // the stderr of the command that met it, by the engine's command path.
    tokio::spawn(async move { while attempts.recv().await.is_some() {} });
    Ok((network, Some(settings)))
}
