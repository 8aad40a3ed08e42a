//! The local namespace backend: containers as namespaced process trees on
//! this host.
//!
//! The engine owns a data directory:
//!
//! ```text
//! <data>/engine.lock            one engine per data directory (flock)
//! <data>/containers/<id>/       spec.json, uid-slot and the disk (disk.img or disk/)
//! <data>/images/                image store (see `image`)
//! <data>/pool/                  formatted disk images ready to hand out
//! <data>/warm/<name>/           started, unassigned containers
//! <data>/run/root, run/disk     empty mount points, used only inside
//!                               private mount namespaces
//! ```
//!
//! A running container is one process on the host, its init, a child of the
//! server (see `helper`). The engine talks to it over a `SOCK_SEQPACKET`
//! socket and reaps it through a pidfd; a watcher task notices when it dies.
//!
//! [`LocalEngine`] composes components that each own their state and
//! methods, and its trait methods each call into one of them:
//! [`container`] (one container's state, and `Containers`, the engine's by
//! id), [`lifecycle`] (a container started, stopped and torn down, its
//! files reached), [`command`] (`Commands`: the command path),
//! [`processes`] (`Processes`: each container's processes, their output in
//! an [`output_buffer`]), [`fs_paths`] (`FileWorkers`: files by path),
//! [`network`] (`Networks`: a container's way out through the egress
//! proxy), [`pools`] (`Pools`: disks, spare helpers and warm containers
//! made ahead of demand), [`ports`] (a container's port reached from
//! outside, through its init), [`pump`] (the one output pump of commands
//! and processes), [`slots`] (host id ranges), [`spec`] (what the helper
//! is told), [`recovery`] (start-up after a crash), [`unread`] (how fast
//! output nobody waits for is read), [`snapshots`] (a container's disk
//! saved, and disks filled from it), [`freezer`] (its processes frozen
//! meanwhile).

mod command;
mod container;
mod descriptors;
mod freezer;
mod image_archive;
// Files by path (`engine/fs.rs`; `fs` here is `std::fs`).
#[path = "fs.rs"]
mod fs_paths;
mod lifecycle;
mod loops;
mod mount_hold;
mod network;
mod output_buffer;
mod pools;
mod ports;
mod processes;
mod pump;
mod recovery;
mod slots;
mod snapshot_archive;
mod snapshots;
mod spec;
mod unread;

use std::fs;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use crate::backend::{
    validate_container_id, ActivityHold, CommandResult, ContainerInfo, ContainerSpec,
    ContainerState, DeltaSink, FileListing, RunRequest, SandboxBackend, SnapshotTaken,
};
use crate::cgroup::Cgroups;
use crate::disk::{self, DiskKind};
use crate::error::{IoContext, SandboxError};
use crate::image::ImageStore;
use command::Commands;
use container::{Container, Containers, Entry, Wake};
use fs_paths::FileWorkers;
pub use network::EgressSettings;
use network::Networks;
use pools::{FormattedDisk, Pools, SpareHelper, WarmContainer};
use processes::Processes;
use shellgate_sandbox_api::fs::{
    ArchiveImported, FsDownload, FsEntry, FsListing, Upload, WriteOptions,
};
use shellgate_sandbox_api::process::{OutputRead, ProcessInfo, ProcessOutput, ProcessSpec};
use slots::{DiskIds, IdSlots};

pub use crate::sandbox_user::{SANDBOX_HOME, SANDBOX_UID, SANDBOX_USER, SANDBOX_WORKSPACE};

/// How the local engine is set up.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Where containers, images and disks live.
    pub data_dir: PathBuf,
    /// The `shellgate` binary, re-executed as the sandbox helper.
    pub helper_binary: PathBuf,
    /// Host uid (and gid) that container root maps to; the container's ids
    /// `0..65536` map to `uid_base..uid_base+65536`. Chosen high so it meets
    /// no real user nor another tool's subordinate ids.
    pub uid_base: u32,
    /// Formatted disks of the default size kept ready.
    pub pool_size: usize,
    /// Helpers kept spawned and enrolled in a cgroup, ready for a container.
    pub spare_helpers: usize,
    /// Containers of the default spec kept started and unassigned, so that
    /// creating one is a rename (see `LocalEngine::create`).
    pub warm_containers: usize,
    /// Disk size the pool prepares (the default `disk_bytes`).
    pub pool_disk_bytes: u64,
    /// How long to keep reading output after a command ends while a
    /// background process still holds its pipes.
    pub drain_grace: Duration,
    /// Bytes a second of output nobody waits for that are read, per
    /// process or command (see `unread`); `None`: all of it, as fast as it
    /// comes (a one-shot command line, whose reading is its own user's CPU).
    pub unread_output_rate: Option<u64>,
    /// Host name inside containers.
    pub hostname: String,
    /// A file transfer (files by path) that moves no byte for this long
    /// is ended and its worker killed.
    pub transfer_stall: Duration,
    /// Memory every sandbox together may use (the limit of the engine's
    /// parent cgroup); `None`: the host's memory less a reserve for the
    /// server and the host (see [`default_memory_ceiling`]). A container
    /// whose own limit is larger is refused.
    pub memory_ceiling: Option<u64>,
    /// Show the host's `/usr/local` inside `host`-image containers (off:
    /// it holds whatever was installed on the host by hand).
    pub expose_host_usr_local: bool,
    /// The egress proxy's settings; `None`: no container may have network
    /// access (a network policy is refused).
    pub egress: Option<EgressSettings>,
    /// The image store's directory; `None`: `<data_dir>/images`.
    pub images_dir: Option<PathBuf>,
    /// Whether this engine owns the image store's retired trees and removes
    /// those none of its containers uses. Off for an engine that shares the
    /// store with another one (a one-shot `exec` beside `serve`): it cannot
    /// know the other's containers.
    pub prune_images: bool,
    /// Map the invoking user (root too) to the sandbox user alone, as
    /// rootless mode does, instead of a private host id range: for
    /// `shellgate local --sandbox`, whose commands write the user's own
    /// working directory as the user.
    pub map_invoking_user: bool,
}

impl EngineConfig {
    /// Defaults for a data directory, with this executable as the helper.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            helper_binary: PathBuf::from("/proc/self/exe"),
            uid_base: 3_000_000_000,
            pool_size: 2,
            spare_helpers: 2,
            warm_containers: 2,
            pool_disk_bytes: ContainerSpec::default().disk_bytes,
            drain_grace: Duration::from_millis(100),
            unread_output_rate: Some(unread::UNREAD_RATE),
            hostname: "sandbox".to_owned(),
            transfer_stall: fs_paths::TRANSFER_STALL,
            memory_ceiling: None,
            expose_host_usr_local: false,
            egress: None,
            images_dir: None,
            prune_images: true,
            map_invoking_user: false,
        }
    }
}

/// The host's memory less what the server and the host keep: a tenth of
/// it, at least 1 GiB and at most 8 GiB.
pub fn default_memory_ceiling() -> u64 {
    let total = fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map(|kib| kib * 1024)
        .unwrap_or(4 << 30);
    let reserve = (total / 10).clamp(1 << 30, 8 << 30);
    total.saturating_sub(reserve).max(256 << 20)
}

pub(crate) struct Inner {
    config: EngineConfig,
    cgroups: Cgroups,
    disk_kind: DiskKind,
    rootless: bool,
    images: ImageStore,
    memory_ceiling: u64,
    networks: Networks,
    containers: Containers,
    /// Each container's processes, live and recently ended;
    /// gone with the container.
    commands: Commands,
    processes: Processes,
    file_workers: FileWorkers,
    slots: Arc<IdSlots>,
    pools: Pools,
    /// Forks the helpers (`crate::zygote`): their inits share its pages.
    zygote: crate::zygote::Zygote,
    /// Set by `shutdown`: background refills stop and nothing is kept.
    closing: AtomicBool,
    /// Makes names unique (cgroup slots, warm and trash directories).
    counter: AtomicU64,
    /// Teardowns of destroyed containers still finishing in the background.
    teardowns: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// The check of the stored containers after start-up (see
    /// `recovery::tidy`), awaited by `shutdown`: it holds the engine (and
    /// its data directory's lock) while it runs.
    tidying: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// What each stored container was made from, as `recovery::tidy` read
    /// it: each spec is read once, not at every prune.
    stored_made_from: recovery::MadeFrom,
    /// The loop devices its containers' runs ended on, removed once
    /// detached (see `loops`), and the task that removes them.
    loop_devices: Arc<loops::LoopDevices>,
    loop_remover: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The descriptors live containers hold: a start that would leave too
    /// few for the rest is refused (see `descriptors`).
    descriptors: Arc<descriptors::DescriptorBudget>,
    /// How snapshots share blocks on this host, probed once.
    snapshot_sharing: std::sync::OnceLock<snapshots::Sharing>,
    /// Held for the engine's lifetime: one engine per data directory.
    _lock: fs::File,
}

impl Inner {
    /// Whether a new container's disk holds its own ids, shown to it
    /// through an idmapped mount (see `slots`): disk images, mounted by
    /// the helper as host root, on a host with ranges to map.
    fn disks_hold_own_ids(&self) -> bool {
        self.disk_kind == DiskKind::Image && !self.slots.maps_one_id()
    }

    /// Who owns a freshly formatted disk's root directory: the container's
    /// root as a disk holding its own ids stores it, else slot 0's, which
    /// no container is given.
    fn new_disk_root_owner(&self) -> (u32, u32) {
        match self.disks_hold_own_ids() {
            true => (0, 0),
            false => self.slots.host_ids(0, SANDBOX_UID).1,
        }
    }
}

/// Containers a shutting-down engine stops at once.
const STOPS_AT_ONCE: usize = 64;

/// The local namespace backend.
#[derive(Clone)]
pub struct LocalEngine {
    inner: Arc<Inner>,
}

fn lock_data_dir(data_dir: &Path) -> Result<fs::File, SandboxError> {
    let path = data_dir.join("engine.lock");
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .context(|| format!("open {}", path.display()))?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(SandboxError::Setup(format!(
            "another shellgate engine is using {} (lock {} is held)",
            data_dir.display(),
            path.display()
        )));
    }
    Ok(file)
}

/// Container root is an unprivileged host uid that builds the container's
/// mounts from paths under the data directory: it must be able to traverse
/// (not list) every directory down to it. The data directory itself is made
/// `o+x`; an ancestor that forbids it is reported, not changed.
fn make_traversable(data_dir: &Path) -> Result<(), SandboxError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = fs::metadata(data_dir).context(|| format!("stat {}", data_dir.display()))?;
    let mode = meta.permissions().mode();
    if mode & 0o001 == 0 {
        fs::set_permissions(
            data_dir,
            fs::Permissions::from_mode((mode & 0o7777) | 0o001),
        )
        .context(|| format!("chmod o+x {}", data_dir.display()))?;
    }
    for ancestor in data_dir.ancestors().skip(1) {
        let mode = fs::metadata(ancestor)
            .map(|m| m.permissions().mode())
            .unwrap_or(0o755);
        if mode & 0o001 == 0 {
            return Err(SandboxError::Setup(format!(
                "{} is not traversable by other users (mode {:o}); sandboxes run as unprivileged \
                 host users and must reach {}: run `chmod o+x {}` or choose another --data-dir",
                ancestor.display(),
                mode & 0o777,
                data_dir.display(),
                ancestor.display()
            )));
        }
    }
    Ok(())
}

/// A short stable name for the engine's cgroup folder, from its data dir.
fn group_name(data_dir: &Path) -> String {
    use std::hash::Hasher;
    let mut hash = crate::sys::Fnv1a::default();
    hash.write(data_dir.as_os_str().as_encoded_bytes());
    format!("shellgate-{:012x}", hash.finish() & 0xffff_ffff_ffff)
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic elsewhere cannot leave these maps inconsistent (each update is
    // a single insert or remove), so a poisoned lock is still usable.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Logs that a phase of the engine's start took since `started` (the
/// server's `start-up phase` events: what an operator reads when a start
/// is slow).
fn phase_done(phase: &'static str, started: std::time::Instant) {
    let millis = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    tracing::info!(phase, millis, "start-up phase");
}

impl LocalEngine {
    /// The host's cgroup layout as the engine uses it (`v2`, `v1`,
    /// `disabled`).
    pub fn cgroup_layout(&self) -> &'static str {
        self.inner.cgroups.layout()
    }

    /// Opens (or creates) an engine on `config.data_dir`, cleaning up whatever
    /// a crashed predecessor left. Returns warnings about limits this host
    /// cannot enforce.
    pub async fn open(config: EngineConfig) -> Result<(Self, Vec<String>), SandboxError> {
        let data_dir = &config.data_dir;
        fs::create_dir_all(data_dir).context(|| format!("create {}", data_dir.display()))?;
        let data_dir =
            fs::canonicalize(data_dir).context(|| format!("resolve {}", data_dir.display()))?;
        let lock = lock_data_dir(&data_dir)?;
        let rootless = crate::sys::geteuid() != 0;
        if !rootless {
            make_traversable(&data_dir)?;
        }
        // Warm containers die with the engine that made them.
        let _ = fs::remove_dir_all(data_dir.join("warm"));
        // Containers' disks are private to the server: other host users may
        // traverse (sandboxes must, to reach their mounts) but never list.
        for (sub, mode) in [
            ("containers", 0o711),
            ("pool", 0o700),
            ("warm", 0o711),
            ("run/root", 0o755),
            ("run/disk", 0o755),
            // Empty on the host: each helper's own tmpfs covers it (the
            // volumes' stage, see `HelperSpec::volume_stage`).
            ("run/volumes", 0o755),
        ] {
            let dir = data_dir.join(sub);
            fs::create_dir_all(&dir).context(|| format!("create {sub}"))?;
            if !rootless {
                use std::os::unix::fs::PermissionsExt;
                fs::set_permissions(&dir, fs::Permissions::from_mode(mode))
                    .context(|| format!("chmod {sub}"))?;
            }
        }
        let networks = Networks::open(&data_dir, config.egress.clone())?;
        let mut warnings = Vec::new();
        let (cgroups, cgroup_warnings) = Cgroups::setup(&group_name(&data_dir));
        warnings.extend(cgroup_warnings);
        let memory_ceiling = config.memory_ceiling.unwrap_or_else(default_memory_ceiling);
        if let Err(e) = cgroups.set_ceiling(memory_ceiling) {
            warnings.push(format!(
                "cannot cap all sandboxes' memory at {} MiB ({e}): only per-container limits hold",
                memory_ceiling >> 20
            ));
        }
        let (disk_kind, disk_warning) = disk::detect(rootless);
        warnings.extend(disk_warning);
        let images = ImageStore::open_with(
            &config
                .images_dir
                .clone()
                .unwrap_or_else(|| data_dir.join("images")),
            &config.hostname,
            crate::image::HostImageOptions {
                expose_usr_local: config.expose_host_usr_local,
            },
        )?;
        let config = EngineConfig { data_dir, ..config };
        let engine = LocalEngine {
            inner: Arc::new(Inner {
                slots: Arc::new(IdSlots::new(
                    config.uid_base,
                    rootless || config.map_invoking_user,
                )),
                pools: Pools::new(
                    config.pool_size,
                    config.spare_helpers,
                    config.warm_containers,
                ),
                commands: Commands::new(config.drain_grace, config.unread_output_rate),
                processes: Processes::new(config.drain_grace, config.unread_output_rate),
                file_workers: FileWorkers::new(config.transfer_stall),
                zygote: crate::zygote::Zygote::new(&config.helper_binary),
                config,
                cgroups,
                disk_kind,
                rootless,
                images,
                memory_ceiling,
                networks,
                containers: Containers::default(),
                closing: AtomicBool::new(false),
                counter: AtomicU64::new(0),
                teardowns: Mutex::new(Vec::new()),
                tidying: Mutex::new(None),
                stored_made_from: recovery::MadeFrom::default(),
                loop_devices: Arc::default(),
                loop_remover: Mutex::new(None),
                descriptors: Arc::default(),
                snapshot_sharing: std::sync::OnceLock::new(),
                _lock: lock,
            }),
        };
        // Thawed first: a frozen process does not die of the SIGKILL that
        // removes a leftover cgroup.
        let started = std::time::Instant::now();
        freezer::recover(&group_name(&engine.inner.config.data_dir)).await;
        recovery::recover(&engine.inner).await?;
        phase_done("engine: containers loaded", started);
        let started = std::time::Instant::now();
        snapshots::recover(&engine.inner.config.data_dir);
        phase_done("engine: snapshots", started);
        // The containers no request has read yet are checked once the
        // engine serves (see `recovery::tidy`), and the image trees none
        // uses pruned then.
        let tidying = engine.clone();
        let tidy = tokio::task::spawn_blocking(move || {
            let started = std::time::Instant::now();
            match tidying.inner.config.prune_images {
                true => tidying.prune_retired_images(),
                false => {
                    let _ = recovery::tidy(&tidying.inner, || tidying.closing());
                }
            }
            phase_done("engine: stored containers checked (background)", started);
        });
        *self::lock(&engine.inner.tidying) = Some(tidy);
        engine
            .inner
            .loop_devices
            .load(&engine.inner.config.data_dir.join(LOOPS_ENDED));
        *self::lock(&engine.inner.loop_remover) = Some(loops::LoopDevices::spawn_remover(
            Arc::clone(&engine.inner.loop_devices),
        ));
        engine.inner.pools.refill_all(&engine);
        Ok((engine, warnings))
    }

    /// Removes the retired image trees no container was made from.
    fn prune_retired_images(&self) {
        if !self.inner.config.prune_images {
            return;
        }
        // What the containers not loaded yet were made from is read from
        // their specs; one that cannot be read keeps every tree.
        match recovery::tidy(&self.inner, || self.closing()) {
            Some(stored) => self.prune_retired_images_beside(stored),
            None => tracing::info!("image pruning skipped: not every container's spec was read"),
        }
    }

    /// Removes the retired image trees that neither a loaded container,
    /// nor `stored` (image, revision) pairs, nor a snapshot uses.
    fn prune_retired_images_beside(&self, stored: Vec<(String, String)>) {
        let in_use: std::collections::HashSet<(String, String)> = self
            .inner
            .containers
            .loaded_all()
            .iter()
            .filter_map(|c| {
                let revision = c.spec.image_revision.clone()?;
                Some((c.spec.image.clone(), revision))
            })
            .chain(stored)
            // A deleted image's snapshots are not restored (no create
            // names a deleted image): they keep no tree.
            .chain(
                self.snapshot_revisions()
                    .into_iter()
                    .filter(|(image, _)| self.inner.images.exists(image)),
            )
            .collect();
        self.inner.images.prune_retired(&|image, revision| {
            in_use.contains(&(image.to_owned(), revision.to_owned()))
        });
    }

    /// Hands the engine a helper its owner forked ahead (a one-shot
    /// command line, see [`crate::forked_helper`]): the next container no
    /// spare helper serves is built by it instead of a helper spawned then.
    pub fn adopt_forked_helper(&self, helper: crate::forked_helper::ForkedHelper) {
        self.inner.pools.adopt_forked(helper);
    }

    /// The image store of this engine.
    pub fn images(&self) -> &ImageStore {
        &self.inner.images
    }

    /// A container's record, read from its directory at its first use.
    async fn container(&self, id: &str) -> Result<Arc<Container>, SandboxError> {
        match self.inner.containers.find(id)? {
            Entry::Loaded(container) => Ok(container),
            Entry::Stored(disk_ids) => {
                let (inner, id) = (Arc::clone(&self.inner), id.to_owned());
                blocking(move || recovery::load_stored(&inner, &id, disk_ids)).await
            }
        }
    }

    /// [`Self::container`] for the backend's synchronous calls (masking,
    /// secrets), which come after a request has loaded the container: a
    /// record read there is one small file, once.
    fn container_now(&self, id: &str) -> Result<Arc<Container>, SandboxError> {
        match self.inner.containers.find(id)? {
            Entry::Loaded(container) => Ok(container),
            Entry::Stored(disk_ids) => recovery::load_stored(&self.inner, id, disk_ids),
        }
    }

    /// Host pid of a running container's init (for tests and reports).
    pub async fn init_pid(&self, id: &str) -> Result<Option<i32>, SandboxError> {
        let container = self.container(id).await?;
        let state = container.state.lock().await;
        Ok(state.as_ref().filter(|r| r.alive()).map(|r| r.init_pid))
    }

    fn closing(&self) -> bool {
        self.inner.closing.load(Ordering::SeqCst)
    }

    /// A name unique to this engine's run: `prefix`, the pid, a counter.
    fn next_name(&self, prefix: &str) -> String {
        format!(
            "{prefix}{}-{}",
            std::process::id(),
            self.inner.counter.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// Refuses a spec no container may have on this host.
    fn admit(&self, spec: &ContainerSpec) -> Result<(), SandboxError> {
        crate::backend::check_memory(spec.memory_bytes, self.inner.memory_ceiling)?;
        self.inner.networks.check(spec)
    }

    /// Removes a container's processes, cgroup and directory; the caller
    /// holds its state lock, which this releases. Commands running in it
    /// end with `Deleted`.
    async fn destroy_locked(
        &self,
        container: Arc<Container>,
        mut state: tokio::sync::MutexGuard<'_, Option<Arc<container::Running>>>,
    ) -> Result<(), SandboxError> {
        // Move the directory out of the way first: from here on the id is
        // free, and a crash mid-teardown leaves only a `.trash-` directory,
        // which the next start removes.
        let trash = self.inner.config.data_dir.join("containers").join(format!(
            ".trash-{}",
            self.next_name(&format!("{}-", container.id))
        ));
        match fs::rename(&container.dir, &trash) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(SandboxError::io(
                    format!("remove {}", container.dir.display()),
                    e,
                ))
            }
        }
        container.mark_destroyed();
        self.inner.containers.remove(&container.id);
        self.inner.processes.forget(&container.id);
        let running = state.take();
        drop(state);
        let disk_ids = container.disk_ids();
        // Made from a revision its image has since replaced: that tree may
        // now be unused.
        let retired_image = container.spec.image_revision.is_some()
            && container.spec.image_revision
                != self.inner.images.current_revision(&container.spec.image);
        // Processes, cgroup and disk go in the background; `settle` waits.
        let engine = self.clone();
        let id = container.id.clone();
        let task = tokio::spawn(async move {
            if let Some(running) = running {
                engine.tear_down(&id, &running).await;
            }
            let removed = tokio::task::spawn_blocking(move || fs::remove_dir_all(&trash)).await;
            if let Ok(Err(e)) = removed {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(container = %id, "could not remove its directory: {e}");
                }
            }
            // Only now, with its files gone, may another container map to
            // the host ids they hold.
            if let DiskIds::Shifted(slot) = disk_ids {
                engine.inner.slots.release(slot);
            }
            if retired_image {
                let _ = tokio::task::spawn_blocking(move || engine.prune_retired_images()).await;
            }
        });
        let mut teardowns = lock(&self.inner.teardowns);
        teardowns.retain(|t| !t.is_finished());
        teardowns.push(task);
        Ok(())
    }
}

impl LocalEngine {
    /// Makes a container, its disk filled from `restore` if given (then
    /// on the snapshot's image revision, never from a warm container).
    async fn create_container(
        &self,
        id: &str,
        spec: ContainerSpec,
        restore: Option<snapshots::Restore>,
    ) -> Result<ContainerInfo, SandboxError> {
        validate_container_id(id)?;
        self.admit(&spec)?;
        self.inner.images.resolve(&spec.image)?;
        let containers_dir = self.inner.config.data_dir.join("containers");
        let dir = containers_dir.join(id);
        let staging = containers_dir.join(format!(".creating-{id}"));
        // The skills directory given is adopted: it moves into the
        // container's directory, and the spec names it there.
        let mut spec = spec;
        spec.image_revision = match &restore {
            Some(restore) => {
                let revision = restore.recorded.taken.image_revision.clone();
                self.inner
                    .images
                    .resolve_revision(&spec.image, revision.as_deref())?;
                revision
            }
            None => self.inner.images.current_revision(&spec.image),
        };
        // A committed image's home is every new container's first home; a
        // copy from a snapshot has its own.
        let home_seed = match &restore {
            Some(_) => None,
            None => self
                .inner
                .images
                .home_seed(&spec.image, spec.image_revision.as_deref()),
        };
        // What persists of each value: its verifier (salted digests), so
        // a restarted server still masks what it no longer holds.
        for secret in &spec.network.secrets {
            if !spec.network.verifiers.iter().any(|v| v.name == secret.name) {
                if let Some(verifier) = shellgate_egress::secrets::SecretVerifier::of(secret) {
                    spec.network.verifiers.push(verifier);
                }
            }
        }
        let adopt = spec.skills.take();
        if adopt.is_some() {
            spec.skills = Some(dir.join("skills"));
        }
        let own_ids = self.inner.disks_hold_own_ids();
        let container = Arc::new(Container::new(
            id.to_owned(),
            spec.clone(),
            dir.clone(),
            DiskIds::Own,
        ));
        self.inner.containers.add(&container)?;
        let spec_json =
            serde_json::to_vec_pretty(&spec).map_err(|e| SandboxError::Setup(e.to_string()))?;
        let mut state = container.state.lock().await;
        // A slot kept for the container's life (host-id disks), released
        // if the create fails.
        let mut kept_slot = None;
        let made = async {
            let warm = match (&restore, &home_seed) {
                (None, None) => self.inner.pools.take_warm(self, &spec).await,
                _ => None,
            };
            if let Some((warm_dir, running, disk_ids, loop_device)) = warm {
                // A started container of the same shape: give it this id
                // (its disk, already named in its directory, and the
                // disk's loop device).
                container.set_disk_ids(disk_ids);
                container.set_last_loop(loop_device);
                let committed = fs::write(warm_dir.join("spec.json"), &spec_json)
                    .and_then(|()| fs::rename(&warm_dir, &dir));
                match committed {
                    Ok(()) => {
                        *state = Some(running);
                        return Ok(());
                    }
                    Err(e) => {
                        self.tear_down(id, &running).await;
                        drop(running);
                        let _ = fs::remove_dir_all(&warm_dir);
                        if let DiskIds::Shifted(slot) = disk_ids {
                            self.inner.slots.release(slot);
                        }
                        tracing::warn!("could not use a warm container ({e}); starting one");
                    }
                }
            }
            let disk_ids = if own_ids {
                DiskIds::Own
            } else {
                let slot = self.inner.slots.allocate()?;
                kept_slot = Some(slot);
                DiskIds::Shifted(slot)
            };
            container.set_disk_ids(disk_ids);
            fs::create_dir(&staging).context(|| format!("create {}", staging.display()))?;
            IdSlots::write(&staging, disk_ids)?;
            // A throwaway container's disk is a tmpfs its helper mounts; a
            // whole-image restore's is the snapshot's image, cloned.
            let tmpfs_disk = spec.ephemeral && self.inner.disk_kind == DiskKind::Image;
            let cloned_disk = restore.as_ref().is_some_and(|r| r.clones_whole_disk());
            if !(tmpfs_disk || cloned_disk) {
                self.inner
                    .pools
                    .provision_disk(self, &staging, spec.disk_bytes)
                    .await?;
            }
            if let Some(restore) = &restore {
                self.fill_disk(&staging, disk_ids, restore).await?;
            }
            // A throwaway container's tmpfs disk is made by its helper, after
            // this: its home starts empty.
            if let Some(seed) = &home_seed {
                if !(spec.ephemeral && self.inner.disk_kind == DiskKind::Image) {
                    self.seed_home(&staging, disk_ids, seed).await?;
                }
            }
            fs::write(staging.join("spec.json"), &spec_json)
                .context(|| "write spec.json".into())?;
            if let Some(skills) = &adopt {
                fs::rename(skills, staging.join("skills"))
                    .context(|| format!("adopt the skills in {}", skills.display()))?;
            }
            // The rename is the commit point: a crash before it leaves only a
            // staging directory, which the next start removes.
            fs::rename(&staging, &dir).context(|| "commit container directory".into())?;
            *state = Some(self.launch(&container).await?);
            Ok::<_, SandboxError>(())
        }
        .await;
        drop(state);
        if let Err(e) = made {
            self.inner.containers.remove(id);
            let _ = fs::remove_dir_all(&staging);
            let _ = fs::remove_dir_all(&dir);
            if let Some(slot) = kept_slot {
                self.inner.slots.release(slot);
            }
            return Err(e);
        }
        Ok(ContainerInfo {
            id: id.to_owned(),
            state: ContainerState::Running,
            spec,
        })
    }
}

#[async_trait]
impl SandboxBackend for LocalEngine {
    fn images(&self) -> Vec<crate::image::ImageInfo> {
        self.inner.images.list()
    }

    async fn create(&self, id: &str, spec: ContainerSpec) -> Result<ContainerInfo, SandboxError> {
        self.create_container(id, spec, None).await
    }

    async fn snapshot(&self, id: &str, snapshot_id: &str) -> Result<SnapshotTaken, SandboxError> {
        self.take_snapshot(id, snapshot_id).await
    }

    async fn delete_snapshot(&self, snapshot_id: &str) -> Result<(), SandboxError> {
        self.remove_snapshot(snapshot_id).await
    }

    async fn snapshot_ids(&self) -> Result<Vec<String>, SandboxError> {
        Ok(self.list_snapshot_ids())
    }

    async fn create_from_snapshot(
        &self,
        id: &str,
        mut spec: ContainerSpec,
        snapshot_id: &str,
    ) -> Result<ContainerInfo, SandboxError> {
        let restore = self.snapshot_record(snapshot_id)?;
        let taken = &restore.recorded.taken;
        if spec.image != taken.image {
            return Err(SandboxError::InvalidRequest {
                param: "image",
                message: format!(
                    "the snapshot was taken over image {:?}; a container made from it runs on that image",
                    taken.image
                ),
            });
        }
        if spec.ephemeral {
            // Its disk would be a fresh tmpfs: the snapshot's files nowhere.
            return Err(SandboxError::InvalidRequest {
                param: "snapshot_id",
                message: "a throwaway container cannot be made from a snapshot".into(),
            });
        }
        spec.disk_bytes = taken.disk_bytes;
        self.create_container(id, spec, Some(restore)).await
    }

    fn snapshot_sharing(&self) -> Option<&'static str> {
        Some(self.sharing().name())
    }

    fn export_snapshot(
        &self,
        snapshot_id: &str,
    ) -> Result<Box<dyn std::io::Read + Send>, SandboxError> {
        self.snapshot_archive(snapshot_id)
    }

    async fn import_snapshot(
        &self,
        snapshot_id: &str,
        archive: std::fs::File,
    ) -> Result<(), SandboxError> {
        self.unpack_snapshot(snapshot_id, archive).await
    }

    async fn commit_image(
        &self,
        id: &str,
        name: &str,
        project: &str,
        config: Option<shellgate_sandbox_api::image::ImageConfig>,
    ) -> Result<crate::image::ImageInfo, SandboxError> {
        self.commit_container(id, name, project, config).await
    }

    fn export_image(
        &self,
        name: &str,
    ) -> Result<(crate::image::ImageDetails, Box<dyn std::io::Read + Send>), SandboxError> {
        self.image_archive(name)
    }

    async fn import_image_archive(
        &self,
        name: &str,
        details: crate::image::ImageDetails,
        archive: std::fs::File,
    ) -> Result<crate::image::ImageInfo, SandboxError> {
        self.unpack_image(name, details, archive).await
    }

    async fn delete_image(&self, name: &str, project: &str) -> Result<(), SandboxError> {
        let engine = self.clone();
        let (name, project) = (name.to_owned(), project.to_owned());
        blocking(move || {
            engine.inner.images.remove(&name, &project)?;
            // Its tree goes now if nothing uses it (else with the last user:
            // a container's destruction, a snapshot's removal, prunes).
            engine.prune_retired_images();
            Ok(())
        })
        .await
    }

    async fn import_image(
        &self,
        name: &str,
        project: &str,
        source: &std::path::Path,
    ) -> Result<crate::image::ImageInfo, SandboxError> {
        let images = self.inner.images.clone();
        let detected = source.to_owned();
        let format = tokio::task::spawn_blocking(move || crate::image::oci::detect(&detected))
            .await
            .map_err(|e| SandboxError::Setup(format!("inspect the source: {e}")))?;
        if format.is_none() {
            return Err(SandboxError::InvalidRequest {
                param: "file",
                message: "not an OCI image layout or a docker/podman save archive \
                          (no oci-layout or manifest.json at its top)"
                    .into(),
            });
        }
        images
            .import_oci_of(
                name,
                project,
                source,
                crate::image::oci::OciLimits::default(),
            )
            .await
    }

    async fn run(&self, id: &str, request: RunRequest) -> Result<Vec<CommandResult>, SandboxError> {
        self.inner.commands.run(self, id, request, None).await
    }

    async fn connect_port(
        &self,
        id: &str,
        port: u16,
    ) -> Result<shellgate_sandbox_api::PortConnection, SandboxError> {
        ports::connect(self.container(id).await?, id, port).await
    }

    async fn run_streaming(
        &self,
        id: &str,
        request: RunRequest,
        deltas: DeltaSink,
    ) -> Result<Vec<CommandResult>, SandboxError> {
        let commands = &self.inner.commands;
        commands.run(self, id, request, Some(deltas)).await
    }

    fn masker(&self, id: &str) -> Option<Arc<shellgate_egress::secrets::Masker>> {
        self.container_now(id).ok()?.masker()
    }

    fn secrets_match(&self, id: &str, asked: &[shellgate_egress::secrets::DomainSecret]) -> bool {
        let container = self.container_now(id);
        container.is_ok_and(|container| container.secrets_match(asked))
    }

    fn secret_status(&self, id: &str) -> Vec<crate::backend::SecretStatus> {
        let container = self.container_now(id);
        container.map_or_else(|_| Vec::new(), |container| container.secret_status())
    }

    async fn supply_secrets(
        &self,
        id: &str,
        supplied: Vec<shellgate_egress::secrets::DomainSecret>,
    ) -> Result<(), SandboxError> {
        let container = self.container(id).await?;
        let mut state = container.state.lock().await;
        if container.destroyed() {
            return Err(SandboxError::NotFound(id.to_owned()));
        }
        let secrets = container.with_supplied(&supplied)?;
        if container.busy() {
            return Err(SandboxError::Conflict(
                "the container is running commands; supply its secrets when they end".into(),
            ));
        }
        // Its network is set up when it starts: a running container (with
        // its network off) is stopped, and its next command starts it
        // with the secrets' interceptor.
        self.stop_locked(&container, &mut state).await;
        container.set_secrets(secrets);
        Ok(())
    }

    async fn update_network(
        &self,
        id: &str,
        allowed_domains: Vec<String>,
    ) -> Result<(), SandboxError> {
        let container = self.container(id).await?;
        if container.spec.network.is_disabled() {
            // Its namespace has no proxy sockets, resolver or trust store:
            // only a new init could have them, and that ends its processes.
            return Err(SandboxError::Conflict(
                "the sandbox was created without network, so it has no way out to open (giving \
                 it one would restart its processes); create it with a network policy, even one \
                 that allows nothing yet"
                    .into(),
            ));
        }
        let allowlist = self.inner.networks.check_update(&allowed_domains)?;
        // Under the state lock: a start serves either the old list (and
        // is updated below) or the new one, never loses it.
        let state = container.state.lock().await;
        if container.destroyed() {
            return Err(SandboxError::NotFound(id.to_owned()));
        }
        let mut spec = container.spec.clone();
        spec.network.allowed_domains = allowed_domains.clone();
        spec.network.egress_kept = true;
        let dir = container.dir.clone();
        tokio::task::spawn_blocking(move || write_spec(&dir, &spec))
            .await
            .map_err(|e| SandboxError::Setup(format!("the spec writer failed: {e}")))??;
        container.set_allowed_domains(allowed_domains);
        if let Some(serving) = state.as_ref().and_then(|running| running.egress.as_ref()) {
            serving.set_allowlist(allowlist);
        }
        Ok(())
    }

    async fn stop(&self, id: &str) -> Result<(), SandboxError> {
        let container = self.container(id).await?;
        let mut state = container.state.lock().await;
        self.stop_locked(&container, &mut state).await;
        Ok(())
    }

    async fn suspend_if_idle(&self, id: &str) -> Result<bool, SandboxError> {
        let container = self.container(id).await?;
        let mut state = container.state.lock().await;
        if container.busy() {
            return Ok(false);
        }
        self.stop_locked(&container, &mut state).await;
        Ok(true)
    }

    async fn start(&self, id: &str) -> Result<(), SandboxError> {
        let container = self.container(id).await?;
        self.ensure_running(&container).await.map(drop)
    }

    async fn destroy(&self, id: &str) -> Result<(), SandboxError> {
        let container = self.container(id).await?;
        let state = container.state.lock().await;
        if container.destroyed() {
            return Err(SandboxError::NotFound(id.to_owned()));
        }
        self.destroy_locked(Arc::clone(&container), state).await
    }

    async fn destroy_if_idle(&self, id: &str) -> Result<bool, SandboxError> {
        let container = self.container(id).await?;
        let state = container.state.lock().await;
        if container.destroyed() {
            return Err(SandboxError::NotFound(id.to_owned()));
        }
        if container.busy() {
            return Ok(false);
        }
        self.destroy_locked(Arc::clone(&container), state)
            .await
            .map(|()| true)
    }

    async fn hold(&self, id: &str) -> Result<ActivityHold, SandboxError> {
        let container = self.container(id).await?;
        // Under the state lock, as every in-flight count is taken: an idle
        // check holding it sees this hold or runs before it.
        let _state = container.state.lock().await;
        if container.destroyed() {
            return Err(SandboxError::NotFound(id.to_owned()));
        }
        Ok(ActivityHold::new(container.begin()))
    }

    async fn inspect(&self, id: &str) -> Result<ContainerInfo, SandboxError> {
        let container = self.container(id).await?;
        let state = container.state.lock().await;
        let running = state.as_ref().is_some_and(|r| r.alive());
        Ok(ContainerInfo {
            id: container.id.clone(),
            state: if running {
                ContainerState::Running
            } else {
                ContainerState::Stopped
            },
            spec: container.current_spec(),
        })
    }

    async fn usage(
        &self,
        id: &str,
    ) -> Result<Option<crate::backend::ContainerUsage>, SandboxError> {
        let container = self.container(id).await?;
        let running = container.state.lock().await.clone();
        let Some(running) = running.filter(|r| r.alive()) else {
            return Ok(None);
        };
        let cgroup = self.inner.cgroups.usage(&running.slot);
        // The disk image's file system, through `/mnt/data` as init opened
        // it; plain directories share the host's and have no size of
        // their own to measure against.
        let disk = match self.inner.disk_kind {
            DiskKind::Image => rustix::fs::fstatvfs(&running.data).ok().map(|fs| {
                let block = fs.f_frsize.max(1);
                (
                    fs.f_blocks.saturating_sub(fs.f_bfree).saturating_mul(block),
                    fs.f_blocks.saturating_mul(block),
                )
            }),
            DiskKind::Directory => None,
        };
        let (disk_used_bytes, disk_total_bytes) = disk.unwrap_or((0, container.spec.disk_bytes));
        Ok(Some(crate::backend::ContainerUsage {
            cpu_usec: cgroup.cpu_usec,
            running_usec: u64::try_from(running.started.elapsed().as_micros()).unwrap_or(u64::MAX),
            memory_bytes: cgroup.memory_bytes,
            memory_cache_bytes: cgroup.memory_cache_bytes,
            memory_limit_bytes: container.spec.memory_bytes,
            cpu_cores: container.spec.cpu_cores,
            disk_used_bytes,
            disk_total_bytes,
        }))
    }

    async fn list(&self) -> Result<Vec<ContainerInfo>, SandboxError> {
        let ids = self.inner.containers.ids();
        let mut infos = Vec::with_capacity(ids.len());
        for id in ids {
            if let Ok(info) = self.inspect(&id).await {
                infos.push(info);
            }
        }
        infos.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(infos)
    }

    async fn container_ids(&self) -> Result<Vec<String>, SandboxError> {
        Ok(self.inner.containers.ids())
    }

    async fn states(&self) -> Result<Vec<(String, ContainerState)>, SandboxError> {
        // Only a loaded container can run: those stored are stopped as
        // they are, unread.
        let mut running = std::collections::HashSet::new();
        for container in self.inner.containers.loaded_all() {
            if container
                .state
                .lock()
                .await
                .as_ref()
                .is_some_and(|r| r.alive())
            {
                running.insert(container.id.clone());
            }
        }
        Ok(self
            .inner
            .containers
            .ids()
            .into_iter()
            .map(|id| {
                let state = match running.contains(&id) {
                    true => ContainerState::Running,
                    false => ContainerState::Stopped,
                };
                (id, state)
            })
            .collect())
    }

    fn memory_ceiling(&self) -> u64 {
        self.inner.memory_ceiling
    }

    async fn read_file(&self, id: &str, path: &str) -> Result<Vec<u8>, SandboxError> {
        let limit = self.container(id).await?.spec.disk_bytes;
        let (data, in_flight) = self.files(id, Wake::No).await?;
        let path = path.to_owned();
        blocking(move || {
            let _in_flight = in_flight;
            data.read(&path, limit)
        })
        .await
    }

    async fn open_file(&self, id: &str, path: &str) -> Result<std::fs::File, SandboxError> {
        let limit = self.container(id).await?.spec.disk_bytes;
        let (data, in_flight) = self.files(id, Wake::No).await?;
        let path = path.to_owned();
        blocking(move || {
            let _in_flight = in_flight;
            let file = data.open_file(&path)?;
            check_size(&file, &path, limit)?;
            Ok(file)
        })
        .await
    }

    async fn write_file(&self, id: &str, path: &str, contents: &[u8]) -> Result<(), SandboxError> {
        let (data, in_flight) = self.files(id, Wake::Yes).await?;
        let (path, contents) = (path.to_owned(), contents.to_vec());
        blocking(move || {
            let _in_flight = in_flight;
            data.write(&path, &contents)
        })
        .await
    }

    async fn write_file_from(
        &self,
        id: &str,
        path: &str,
        mut source: std::fs::File,
    ) -> Result<u64, SandboxError> {
        let (data, in_flight) = self.files(id, Wake::Yes).await?;
        let path = path.to_owned();
        blocking(move || {
            let _in_flight = in_flight;
            data.write_from(&path, &mut source)
        })
        .await
    }

    async fn delete_file(&self, id: &str, path: &str) -> Result<(), SandboxError> {
        let (data, in_flight) = self.files(id, Wake::Yes).await?;
        let path = path.to_owned();
        blocking(move || {
            let _in_flight = in_flight;
            data.delete(&path)
        })
        .await
    }

    async fn list_files(&self, id: &str) -> Result<FileListing, SandboxError> {
        let (data, in_flight) = self.files(id, Wake::No).await?;
        blocking(move || {
            let _in_flight = in_flight;
            data.list()
        })
        .await
    }

    async fn settle(&self) {
        loop {
            let pending: Vec<_> = lock(&self.inner.teardowns).drain(..).collect();
            if pending.is_empty() {
                return;
            }
            for task in pending {
                let _ = task.await;
            }
        }
    }

    async fn start_process(
        &self,
        id: &str,
        process_id: &str,
        spec: ProcessSpec,
    ) -> Result<ProcessInfo, SandboxError> {
        self.inner.processes.start(self, id, process_id, spec).await
    }

    async fn list_processes(&self, id: &str) -> Result<Vec<ProcessInfo>, SandboxError> {
        self.inner.processes.list(&self.inner.containers, id)
    }

    async fn process(&self, id: &str, process_id: &str) -> Result<ProcessInfo, SandboxError> {
        let containers = &self.inner.containers;
        self.inner.processes.info(containers, id, process_id)
    }

    async fn read_process_output(
        &self,
        id: &str,
        process_id: &str,
        read: OutputRead,
    ) -> Result<ProcessOutput, SandboxError> {
        let containers = &self.inner.containers;
        let processes = &self.inner.processes;
        processes
            .read_output(containers, id, process_id, read)
            .await
    }

    async fn write_process_stdin(
        &self,
        id: &str,
        process_id: &str,
        bytes: Vec<u8>,
        eof: bool,
    ) -> Result<(), SandboxError> {
        let containers = &self.inner.containers;
        let processes = &self.inner.processes;
        processes
            .write_stdin(containers, id, process_id, bytes, eof)
            .await
    }

    async fn signal_process(
        &self,
        id: &str,
        process_id: &str,
        signal: i32,
    ) -> Result<(), SandboxError> {
        let containers = &self.inner.containers;
        let processes = &self.inner.processes;
        processes.signal(containers, id, process_id, signal).await
    }

    async fn resize_process(
        &self,
        id: &str,
        process_id: &str,
        cols: u16,
        rows: u16,
    ) -> Result<(), SandboxError> {
        let containers = &self.inner.containers;
        let processes = &self.inner.processes;
        processes.resize(containers, id, process_id, cols, rows)
    }

    async fn kill_process(&self, id: &str, process_id: &str) -> Result<ProcessInfo, SandboxError> {
        let containers = &self.inner.containers;
        self.inner.processes.kill(containers, id, process_id).await
    }

    async fn wait_process(&self, id: &str, process_id: &str) -> Result<ProcessInfo, SandboxError> {
        let containers = &self.inner.containers;
        self.inner.processes.wait(containers, id, process_id).await
    }

    async fn fs_read(&self, id: &str, path: &str) -> Result<FsDownload, SandboxError> {
        self.inner.file_workers.read(self, id, path).await
    }

    async fn fs_write(
        &self,
        id: &str,
        path: &str,
        options: WriteOptions,
    ) -> Result<Box<dyn Upload<FsEntry>>, SandboxError> {
        self.inner.file_workers.write(self, id, path, options).await
    }

    async fn fs_stat(&self, id: &str, path: &str) -> Result<FsEntry, SandboxError> {
        self.inner.file_workers.stat(self, id, path).await
    }

    async fn fs_list(
        &self,
        id: &str,
        path: &str,
        depth: u32,
        limit: u32,
    ) -> Result<FsListing, SandboxError> {
        let workers = &self.inner.file_workers;
        workers.list(self, id, path, depth, limit).await
    }

    async fn fs_mkdir(
        &self,
        id: &str,
        path: &str,
        parents: bool,
        mode: u32,
    ) -> Result<FsEntry, SandboxError> {
        let workers = &self.inner.file_workers;
        workers.mkdir(self, id, path, parents, mode).await
    }

    async fn fs_move(
        &self,
        id: &str,
        from: &str,
        to: &str,
        overwrite: bool,
    ) -> Result<FsEntry, SandboxError> {
        let workers = &self.inner.file_workers;
        workers.rename(self, id, from, to, overwrite).await
    }

    async fn fs_remove(&self, id: &str, path: &str, recursive: bool) -> Result<(), SandboxError> {
        let workers = &self.inner.file_workers;
        workers.remove(self, id, path, recursive).await
    }

    async fn fs_export(
        &self,
        id: &str,
        path: &str,
        excludes: Vec<String>,
    ) -> Result<FsDownload, SandboxError> {
        let workers = &self.inner.file_workers;
        workers.export(self, id, path, excludes).await
    }

    async fn fs_import(
        &self,
        id: &str,
        path: &str,
    ) -> Result<Box<dyn Upload<ArchiveImported>>, SandboxError> {
        self.inner.file_workers.import(self, id, path).await
    }

    async fn shutdown(&self) {
        self.inner.closing.store(true, Ordering::SeqCst);
        // Devices it had not removed stay registered (see `loops`).
        if let Some(remover) = lock(&self.inner.loop_remover).take() {
            remover.abort();
        }
        // Stops at its next container, seeing `closing`.
        let tidying = lock(&self.inner.tidying).take();
        if let Some(tidying) = tidying {
            let _ = tidying.await;
        }
        let pools = &self.inner.pools;
        pools.drain::<SpareHelper>(self).await;
        pools.drain::<FormattedDisk>(self).await;
        self.settle().await;
        pools.drain::<WarmContainer>(self).await;
        // Containers stop side by side: each stop mostly waits (for its init
        // to exit, for the kernel to let go of its cgroup), and one after
        // another a server with thousands of containers took minutes to end.
        // In two passes: every container's processes end first, and their
        // mounts with them (the kernel drops each superblock's reclaim
        // lists), then the cgroups go. Removing a memory cgroup walks every
        // such list on the machine (`memcg_reparent_list_lrus`, under one
        // global mutex): beside thousands of live containers' superblocks
        // each removal took milliseconds, one after another (a stop with
        // 3,000 live took 17 s).
        let stopping = Arc::new(tokio::sync::Semaphore::new(STOPS_AT_ONCE));
        let mut ending = tokio::task::JoinSet::new();
        for container in self.inner.containers.loaded_all() {
            let stopping = Arc::clone(&stopping);
            ending.spawn(async move {
                let _permit = stopping.acquire_owned().await.ok()?;
                // Held until its processes are gone, as a stop holds it.
                let mut state = container.state.lock().await;
                let running = state.take()?;
                running.shut_down(container::STOP_PATIENCE).await;
                // Its descriptors closed, and with the server's `/mnt/data`
                // the last hold on its disk's mount: unmounted now (on the
                // blocking pool), not after its cgroup.
                let slot = running.slot.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    mount_hold::closing_here(|| drop(running));
                })
                .await;
                drop(state);
                Some((container.id.clone(), slot))
            });
        }
        let mut ended = Vec::new();
        while let Some(one) = ending.join_next().await {
            ended.extend(one.ok().flatten());
        }
        let mut removing = tokio::task::JoinSet::new();
        for (id, slot) in ended {
            let (engine, stopping) = (self.clone(), Arc::clone(&stopping));
            removing.spawn(async move {
                let Ok(_permit) = stopping.acquire_owned().await else {
                    return;
                };
                engine.remove_cgroup(&id, &slot).await;
            });
        }
        while removing.join_next().await.is_some() {}
        self.inner
            .loop_devices
            .save(&self.inner.config.data_dir.join(LOOPS_ENDED));
        self.inner.zygote.end().await;
        self.inner.cgroups.remove_base();
    }
}

/// Where a stop writes down the loop devices it left for removal (see
/// `loops`).
const LOOPS_ENDED: &str = "run/loops-ended";

/// Replaces a container's `spec.json` whole (a copy renamed over it), so
/// a crash leaves the old spec or the new one.
fn write_spec(dir: &Path, spec: &ContainerSpec) -> Result<(), SandboxError> {
    let json = serde_json::to_vec_pretty(spec).map_err(|e| SandboxError::Setup(e.to_string()))?;
    let staging = dir.join("spec.json.new");
    fs::write(&staging, json).context(|| format!("write {}", staging.display()))?;
    fs::rename(&staging, dir.join("spec.json")).context(|| "replace spec.json".into())
}

/// Refuses a file whose size the container's disk could never hold: only a
/// sparse file claims more, and streaming its holes would never end.
fn check_size(file: &std::fs::File, path: &str, limit: u64) -> Result<(), SandboxError> {
    let bytes = file
        .metadata()
        .map_err(|e| SandboxError::io("stat", e))?
        .len();
    if bytes > limit {
        return Err(SandboxError::FileTooLarge {
            path: path.to_owned(),
            bytes,
            limit,
        });
    }
    Ok(())
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, SandboxError> + Send + 'static,
) -> Result<T, SandboxError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| SandboxError::Setup(format!("file worker failed: {e}")))?
}
