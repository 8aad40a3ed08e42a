//! The local namespace backend: containers as namespaced process trees on
//! this host.
//!
//! The engine owns a data directory:
//!
//! ```text
//! <data>/engine.lock            one engine per data directory (flock)
//! <data>/containers/<id>/       spec.json and the disk (disk.img or disk/)
//! <data>/images/                image store (see `image`)
//! <data>/pool/                  formatted disk images ready to hand out
//! <data>/run/root, run/disk     empty mount points, used only inside each
//!                               container's private mount namespace
//! ```
//!
//! A running container is one process on the host, its init, a child of the
//! server (see `helper`). The engine talks to it over a `SOCK_SEQPACKET`
//! socket and reaps it through a pidfd; a watcher task notices when it dies.

use std::collections::HashMap;
use std::fs;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::unix::AsyncFd;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::backend::{
    validate_container_id, CommandResult, ContainerInfo, ContainerSpec, ContainerState, DeltaSink,
    FileEntry, Outcome, OutputDelta, RunRequest, SandboxBackend, StreamKind,
};
use crate::cgroup::Cgroups;
use crate::disk::{self, DiskKind};
use crate::error::{IoContext, SandboxError};
use crate::files::DataDir;
use crate::image::ImageStore;
use crate::launcher::{register, wait_exit, Helper};
use crate::output::{CappedOutput, DeltaEncoder};
use crate::protocol::{HelperSpec, IdRange, Request, RootSpec, Status};
use crate::sys;

/// The sandbox user inside every container.
pub const SANDBOX_UID: u32 = 1000;
/// Its home directory inside every container.
pub const SANDBOX_HOME: &str = "/home/sandbox";
/// How many id slots fit above `uid_base`: every range must end below
/// `u32::MAX`, which is `(uid_t)-1`, never a real id.
fn id_slot_capacity(uid_base: u32) -> u32 {
    let room = u64::from(u32::MAX).saturating_sub(u64::from(uid_base));
    (room / u64::from(ID_RANGE)).min(u64::from(u32::MAX)) as u32
}

/// How long background refills wait after something was taken from a pool.
const REFILL_DELAY: Duration = Duration::from_millis(20);
/// Ids mapped into a container in root mode.
const ID_RANGE: u32 = 65_536;

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
    /// Host name inside containers.
    pub hostname: String,
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
            hostname: "sandbox".to_owned(),
        }
    }
}

/// A started container: its init and the channel to it.
struct Running {
    control: AsyncFd<OwnedFd>,
    init_pid: i32,
    /// The container's cgroup (see `launcher`).
    slot: String,
    pidfd: Arc<AsyncFd<OwnedFd>>,
    exited: watch::Receiver<bool>,
}

impl Running {
    fn alive(&self) -> bool {
        !*self.exited.borrow()
    }

    /// Sends one request, with descriptors attached.
    async fn send(&self, request: &Request, fds: &[&OwnedFd]) -> Result<(), SandboxError> {
        let bytes = request.encode();
        let raw: Vec<i32> = fds.iter().map(|f| f.as_raw_fd()).collect();
        loop {
            let mut guard = self
                .control
                .writable()
                .await
                .context(|| "wait on control socket".into())?;
            match guard.try_io(|fd| sys::send_with_fds(fd.as_raw_fd(), &bytes, &raw)) {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e))
                    if matches!(e.raw_os_error(), Some(libc::EPIPE) | Some(libc::ECONNRESET)) =>
                {
                    return Err(SandboxError::ContainerGone)
                }
                Ok(Err(e)) => return Err(SandboxError::io("send to init", e)),
                Err(_would_block) => continue,
            }
        }
    }

    /// Asks init to exit (its pid namespace dies with it) and waits; kills
    /// it outright if it does not go within `patience`.
    async fn shut_down(&self, patience: Duration) {
        // shutdown() rather than close: in-flight commands still hold the fd.
        // SAFETY: shutdown on a socket we own.
        unsafe { libc::shutdown(self.control.as_raw_fd(), libc::SHUT_RDWR) };
        let mut exited = self.exited.clone();
        if tokio::time::timeout(patience, exited.wait_for(|e| *e))
            .await
            .is_err()
        {
            let _ = sys::pidfd_kill(self.pidfd.get_ref(), libc::SIGKILL);
            let _ = exited.wait_for(|e| *e).await;
        }
    }
}

struct Container {
    id: String,
    spec: ContainerSpec,
    dir: PathBuf,
    /// `None` while stopped. The lock serialises start, stop and destroy.
    state: tokio::sync::Mutex<Option<Arc<Running>>>,
    /// Commands running now; counted under the state lock, so that
    /// `suspend_if_idle` can never cut one short.
    in_flight: Arc<std::sync::atomic::AtomicUsize>,
    /// Which host id range the container maps to (see `LocalEngine::id_base`);
    /// persisted in its `uid-slot` file.
    id_slot: std::sync::atomic::AtomicU32,
}

/// Marks a command as running in its container until dropped.
struct InFlight(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

struct Inner {
    config: EngineConfig,
    cgroups: Cgroups,
    disk_kind: DiskKind,
    rootless: bool,
    images: ImageStore,
    containers: Mutex<HashMap<String, Arc<Container>>>,
    pool: Mutex<Vec<PathBuf>>,
    pool_filling: tokio::sync::Mutex<()>,
    pool_counter: AtomicU64,
    spares: Mutex<Vec<Helper>>,
    spares_filling: tokio::sync::Mutex<()>,
    warm: Mutex<Vec<Container>>,
    /// Host id ranges in use (slot 0 is never handed out: it owns the
    /// formatted disks' root directories).
    id_slots: Mutex<std::collections::BTreeSet<u32>>,
    warm_filling: tokio::sync::Mutex<()>,
    /// Set by `shutdown`: background refills stop and spares are not kept.
    closing: std::sync::atomic::AtomicBool,
    slot_counter: AtomicU64,
    /// Teardowns of destroyed containers still finishing in the background.
    teardowns: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Held for the engine's lifetime: one engine per data directory.
    _lock: fs::File,
}

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
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in data_dir.as_os_str().as_encoded_bytes() {
        hash = (hash ^ *byte as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("shellgate-{:012x}", hash & 0xffff_ffff_ffff)
}

impl LocalEngine {
    /// Opens (or creates) an engine on `config.data_dir`, cleaning up whatever
    /// a crashed predecessor left. Returns warnings about limits this host
    /// cannot enforce.
    pub async fn open(config: EngineConfig) -> Result<(Self, Vec<String>), SandboxError> {
        let data_dir = &config.data_dir;
        fs::create_dir_all(data_dir).context(|| format!("create {}", data_dir.display()))?;
        let data_dir =
            fs::canonicalize(data_dir).context(|| format!("resolve {}", data_dir.display()))?;
        let lock = lock_data_dir(&data_dir)?;
        let rootless = sys::geteuid() != 0;
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
        ] {
            let dir = data_dir.join(sub);
            fs::create_dir_all(&dir).context(|| format!("create {sub}"))?;
            if !rootless {
                use std::os::unix::fs::PermissionsExt;
                fs::set_permissions(&dir, fs::Permissions::from_mode(mode))
                    .context(|| format!("chmod {sub}"))?;
            }
        }
        let mut warnings = Vec::new();
        let (cgroups, cgroup_warnings) = Cgroups::setup(&group_name(&data_dir));
        warnings.extend(cgroup_warnings);
        let (disk_kind, disk_warning) = disk::detect(rootless);
        warnings.extend(disk_warning);
        let images = ImageStore::open(&data_dir.join("images"), &config.hostname)?;
        let config = EngineConfig { data_dir, ..config };
        let engine = LocalEngine {
            inner: Arc::new(Inner {
                config,
                cgroups,
                disk_kind,
                rootless,
                images,
                containers: Mutex::new(HashMap::new()),
                pool: Mutex::new(Vec::new()),
                pool_filling: tokio::sync::Mutex::new(()),
                pool_counter: AtomicU64::new(0),
                spares: Mutex::new(Vec::new()),
                spares_filling: tokio::sync::Mutex::new(()),
                closing: std::sync::atomic::AtomicBool::new(false),
                warm: Mutex::new(Vec::new()),
                id_slots: Mutex::new(std::collections::BTreeSet::new()),
                warm_filling: tokio::sync::Mutex::new(()),
                slot_counter: AtomicU64::new(0),
                teardowns: Mutex::new(Vec::new()),
                _lock: lock,
            }),
        };
        engine.recover().await?;
        engine.refill_pool_in_background();
        engine.refill_spares_in_background();
        engine.refill_warm_in_background();
        Ok((engine, warnings))
    }

    /// The image store of this engine.
    pub fn images(&self) -> &ImageStore {
        &self.inner.images
    }

    /// Cleans up after a crash: kills and removes leftover cgroups, drops
    /// half-made containers and pool images, and loads every container as
    /// stopped.
    async fn recover(&self) -> Result<(), SandboxError> {
        let inner = &self.inner;
        for id in inner.cgroups.existing() {
            tracing::info!(container = %id, "removing cgroup left by a previous run");
            if let Err(e) = inner.cgroups.remove(&id, Duration::from_secs(5)).await {
                tracing::warn!(container = %id, "could not remove leftover cgroup: {e}");
            }
        }
        let pool_dir = inner.config.data_dir.join("pool");
        let mut pool = Vec::new();
        for entry in fs::read_dir(&pool_dir)
            .context(|| "read pool".into())?
            .flatten()
        {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "img") {
                pool.push(path);
            } else {
                let _ = fs::remove_file(&path);
            }
        }
        *lock(&inner.pool) = pool;
        let containers_dir = inner.config.data_dir.join("containers");
        let mut loaded = HashMap::new();
        for entry in fs::read_dir(&containers_dir)
            .context(|| "read containers".into())?
            .flatten()
        {
            let dir = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let spec: Option<ContainerSpec> = fs::read(dir.join("spec.json"))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            match (validate_container_id(&name), spec) {
                (Ok(()), Some(spec)) if !spec.ephemeral => {
                    // Containers made before id slots existed use slot 0.
                    let slot = fs::read_to_string(dir.join("uid-slot"))
                        .ok()
                        .and_then(|s| s.trim().parse().ok())
                        .unwrap_or(0);
                    lock(&inner.id_slots).insert(slot);
                    loaded.insert(
                        name.clone(),
                        Arc::new(Container::new(name, spec, dir, slot)),
                    );
                }
                _ => {
                    tracing::info!(dir = %dir.display(), "removing a half-created, destroyed or throwaway container");
                    let _ = fs::remove_dir_all(&dir);
                }
            }
        }
        *lock(&inner.containers) = loaded;
        Ok(())
    }

    fn container(&self, id: &str) -> Result<Arc<Container>, SandboxError> {
        lock(&self.inner.containers)
            .get(id)
            .cloned()
            .ok_or_else(|| SandboxError::NotFound(id.to_owned()))
    }

    /// First host id of the range of id slot `slot`: every container maps
    /// its ids 0..65536 to a range of its own, so no two containers share a
    /// host uid.
    fn id_base(&self, slot: u32) -> u32 {
        self.inner.config.uid_base + slot * ID_RANGE
    }

    /// Host (uid, gid) of the sandbox user and of container root in `slot`.
    fn host_ids(&self, slot: u32) -> ((u32, u32), (u32, u32)) {
        if self.inner.rootless {
            // SAFETY: getuid/getgid cannot fail.
            let me = unsafe { (libc::getuid(), libc::getgid()) };
            (me, me)
        } else {
            let base = self.id_base(slot);
            ((base + SANDBOX_UID, base + SANDBOX_UID), (base, base))
        }
    }

    /// A free id slot (the lowest), reserved until `release_slot`.
    fn allocate_slot(&self) -> Result<u32, SandboxError> {
        let capacity = id_slot_capacity(self.inner.config.uid_base);
        let mut slots = lock(&self.inner.id_slots);
        let slot = (1..capacity)
            .find(|s| !slots.contains(s))
            .ok_or_else(|| SandboxError::Setup("every host id range is in use".into()))?;
        slots.insert(slot);
        Ok(slot)
    }

    fn release_slot(&self, slot: u32) {
        lock(&self.inner.id_slots).remove(&slot);
    }

    /// Records a container's id slot in its directory.
    fn write_slot(dir: &Path, slot: u32) -> Result<(), SandboxError> {
        fs::write(dir.join("uid-slot"), slot.to_string()).context(|| "write uid-slot".into())
    }

    fn refill_pool_in_background(&self) {
        if self.inner.disk_kind != DiskKind::Image || self.inner.config.pool_size == 0 {
            return;
        }
        let engine = self.clone();
        tokio::spawn(async move {
            let Ok(_filling) = engine.inner.pool_filling.try_lock() else {
                return;
            };
            while lock(&engine.inner.pool).len() < engine.inner.config.pool_size
                && !engine.closing()
            {
                let n = engine.inner.pool_counter.fetch_add(1, Ordering::Relaxed);
                let pool_dir = engine.inner.config.data_dir.join("pool");
                let staging = pool_dir.join(format!("{}-{n}.tmp", std::process::id()));
                let ready = staging.with_extension("img");
                let (_, root_ids) = engine.host_ids(0);
                if let Err(e) =
                    disk::format_image(&staging, engine.inner.config.pool_disk_bytes, root_ids)
                        .await
                {
                    tracing::warn!("could not prepare a disk for the pool: {e}");
                    let _ = fs::remove_file(&staging);
                    return;
                }
                if fs::rename(&staging, &ready).is_ok() {
                    lock(&engine.inner.pool).push(ready);
                }
            }
        });
    }

    /// Gives `dir` a disk of `bytes`: a pooled image when one fits.
    async fn provision_disk(&self, dir: &Path, bytes: u64) -> Result<(), SandboxError> {
        match self.inner.disk_kind {
            DiskKind::Directory => {
                fs::create_dir(dir.join("disk")).context(|| "create disk directory".into())
            }
            DiskKind::Image => {
                let target = dir.join("disk.img");
                if bytes == self.inner.config.pool_disk_bytes {
                    let pooled = lock(&self.inner.pool).pop();
                    self.refill_pool_in_background();
                    if let Some(image) = pooled {
                        if fs::rename(&image, &target).is_ok() {
                            return Ok(());
                        }
                    }
                }
                let (_, root_ids) = self.host_ids(0);
                disk::format_image(&target, bytes, root_ids)
                    .await
                    .context(|| "format the container's disk".into())
            }
        }
    }

    fn closing(&self) -> bool {
        self.inner.closing.load(Ordering::SeqCst)
    }

    fn next_slot(&self) -> String {
        format!(
            "s{}-{}",
            std::process::id(),
            self.inner.slot_counter.fetch_add(1, Ordering::Relaxed)
        )
    }

    fn refill_spares_in_background(&self) {
        if self.inner.config.spare_helpers == 0 {
            return;
        }
        let engine = self.clone();
        tokio::spawn(async move {
            let Ok(_filling) = engine.inner.spares_filling.try_lock() else {
                return;
            };
            while lock(&engine.inner.spares).len() < engine.inner.config.spare_helpers
                && !engine.closing()
            {
                let inner = &engine.inner;
                let spawned = Helper::spawn(
                    &inner.config.helper_binary,
                    &inner.cgroups,
                    engine.next_slot(),
                    &ContainerSpec::default(),
                )
                .await;
                match spawned {
                    Ok(helper) if engine.closing() => helper.discard(&inner.cgroups).await,
                    Ok(helper) => lock(&inner.spares).push(helper),
                    Err(e) => {
                        tracing::warn!("could not prepare a spare sandbox helper: {e}");
                        return;
                    }
                }
            }
        });
    }

    fn refill_warm_in_background(&self) {
        if self.inner.config.warm_containers == 0 {
            return;
        }
        let engine = self.clone();
        tokio::spawn(async move {
            // Refilling right away would compete with the first command of
            // the container just handed out; let that go first.
            tokio::time::sleep(REFILL_DELAY).await;
            let Ok(_filling) = engine.inner.warm_filling.try_lock() else {
                return;
            };
            while lock(&engine.inner.warm).len() < engine.inner.config.warm_containers
                && !engine.closing()
            {
                let n = engine.inner.slot_counter.fetch_add(1, Ordering::Relaxed);
                let dir = engine
                    .inner
                    .config
                    .data_dir
                    .join("warm")
                    .join(n.to_string());
                let slot = match engine.allocate_slot() {
                    Ok(slot) => slot,
                    Err(e) => {
                        tracing::warn!("could not prepare a warm container: {e}");
                        return;
                    }
                };
                let warm = Container::new(
                    format!("warm-{n}"),
                    ContainerSpec::default(),
                    dir.clone(),
                    slot,
                );
                let made = async {
                    fs::create_dir(&dir).context(|| format!("create {}", dir.display()))?;
                    Self::write_slot(&dir, slot)?;
                    engine.provision_disk(&dir, warm.spec.disk_bytes).await?;
                    engine.launch(&warm).await
                }
                .await;
                match made {
                    Ok(running) if !engine.closing() => {
                        *warm.state.lock().await = Some(running);
                        lock(&engine.inner.warm).push(warm);
                    }
                    Ok(running) => {
                        engine.tear_down(&warm.id, &running).await;
                        let _ = fs::remove_dir_all(&dir);
                        engine.release_slot(slot);
                    }
                    Err(e) => {
                        tracing::warn!("could not prepare a warm container: {e}");
                        let _ = fs::remove_dir_all(&dir);
                        engine.release_slot(slot);
                        return;
                    }
                }
            }
        });
    }

    /// A warm container whose fixed properties (image, `/tmp` size, disk)
    /// match `spec`, with `spec`'s limits applied.
    async fn take_warm(&self, spec: &ContainerSpec) -> Option<(PathBuf, Arc<Running>, u32)> {
        let effective_tmp = |s: &ContainerSpec| s.tmp_bytes.min(s.memory_bytes / 2);
        let warm = {
            let mut warm = lock(&self.inner.warm);
            let index = warm.iter().position(|w| {
                w.spec.image == spec.image
                    && w.spec.disk_bytes == spec.disk_bytes
                    && effective_tmp(&w.spec) == effective_tmp(spec)
            })?;
            warm.swap_remove(index)
        };
        self.refill_warm_in_background();
        let running = warm.state.lock().await.take()?;
        if running.alive() && self.inner.cgroups.apply(&running.slot, spec).is_ok() {
            let slot = warm.id_slot();
            return Some((warm.dir, running, slot));
        }
        self.tear_down(&warm.id, &running).await;
        let _ = fs::remove_dir_all(&warm.dir);
        self.release_slot(warm.id_slot());
        None
    }

    /// A helper enrolled in a cgroup with `spec`'s limits: a spare if one is
    /// ready, else a new one.
    async fn helper_for(&self, spec: &ContainerSpec) -> Result<Helper, SandboxError> {
        let inner = &self.inner;
        let spare = lock(&inner.spares).pop();
        if let Some(helper) = spare {
            self.refill_spares_in_background();
            match inner.cgroups.apply(&helper.slot, spec) {
                Ok(()) => return Ok(helper),
                Err(e) => {
                    tracing::warn!("spare helper unusable ({e}); starting a new one");
                    helper.discard(&inner.cgroups).await;
                }
            }
        }
        Helper::spawn(
            &inner.config.helper_binary,
            &inner.cgroups,
            self.next_slot(),
            spec,
        )
        .await
    }

    /// Starts a container's processes; the caller holds its state lock.
    async fn launch(&self, container: &Container) -> Result<Arc<Running>, SandboxError> {
        let spec = self.helper_spec(container)?;
        let spec = serde_json::to_vec(&spec)
            .map_err(|e| SandboxError::Setup(format!("encode spec: {e}")))?;
        let helper = self.helper_for(&container.spec).await?;
        let slot = helper.slot.clone();
        let started = match helper.start(&spec).await {
            Ok(started) => started,
            Err(e) => {
                let _ = self
                    .inner
                    .cgroups
                    .remove(&slot, Duration::from_secs(2))
                    .await;
                return Err(e);
            }
        };
        let pidfd = sys::pidfd_open(started.init_pid).context(|| "pidfd of init".into())?;
        let pidfd = Arc::new(register(pidfd).context(|| "register pidfd".into())?);
        let (exited_tx, exited) = watch::channel(false);
        let watched = Arc::clone(&pidfd);
        let id = container.id.clone();
        tokio::spawn(async move {
            wait_exit(&watched).await;
            tracing::debug!(container = %id, "init exited");
            let _ = exited_tx.send(true);
        });
        Ok(Arc::new(Running {
            control: started.control,
            init_pid: started.init_pid,
            slot: started.slot,
            pidfd,
            exited,
        }))
    }

    fn helper_spec(&self, container: &Container) -> Result<HelperSpec, SandboxError> {
        let inner = &self.inner;
        let image = inner.images.resolve(&container.spec.image)?;
        let (disk_image, disk_root) = match inner.disk_kind {
            DiskKind::Image => (
                Some(container.dir.join("disk.img")),
                inner.config.data_dir.join("run/disk"),
            ),
            DiskKind::Directory => (None, container.dir.join("disk")),
        };
        let root = match image.root {
            RootSpec::Overlay { lower, .. } => RootSpec::Overlay {
                lower,
                upper: disk_root.join(disk::UPPER_DIR),
                work: disk_root.join(disk::WORK_DIR),
            },
            other => other,
        };
        let slot = container.id_slot();
        let (sandbox_ids, root_ids) = self.host_ids(slot);
        let (uid_map, gid_map) = if inner.rootless {
            (
                vec![IdRange {
                    inside: SANDBOX_UID,
                    outside: sandbox_ids.0,
                    count: 1,
                }],
                vec![IdRange {
                    inside: SANDBOX_UID,
                    outside: sandbox_ids.1,
                    count: 1,
                }],
            )
        } else {
            let range = IdRange {
                inside: 0,
                outside: self.id_base(slot),
                count: ID_RANGE,
            };
            (vec![range], vec![range])
        };
        Ok(HelperSpec {
            hostname: inner.config.hostname.clone(),
            uid_map,
            gid_map,
            rootless: inner.rootless,
            sandbox_uid: SANDBOX_UID,
            sandbox_gid: SANDBOX_UID,
            root_mount: inner.config.data_dir.join("run/root"),
            root,
            file_binds: image.file_binds,
            data_binds: vec![
                (
                    disk_root.join(disk::DATA_DIR),
                    crate::backend::WORKDIR.to_owned(),
                ),
                (disk_root.join(disk::HOME_DIR), SANDBOX_HOME.to_owned()),
            ],
            // tmpfs pages are charged to the memory limit but to no process:
            // keep /tmp (and /dev/shm) well below the limit.
            tmp_bytes: container
                .spec
                .tmp_bytes
                .min(container.spec.memory_bytes / 2),
            home: SANDBOX_HOME.to_owned(),
            disk_image,
            disk_root,
            host_sandbox_ids: sandbox_ids,
            host_root_ids: root_ids,
            nofile: crate::protocol::DEFAULT_NOFILE,
        })
    }

    /// The running handle of a container, starting it if it is stopped or
    /// its processes died.
    async fn ensure_running(&self, container: &Container) -> Result<Arc<Running>, SandboxError> {
        let state = container.state.lock().await;
        self.ensure_running_locked(container, state).await
    }

    /// As `ensure_running`, and counts a command in flight until the guard drops.
    async fn enter(&self, container: &Container) -> Result<(Arc<Running>, InFlight), SandboxError> {
        let state = container.state.lock().await;
        container.in_flight.fetch_add(1, Ordering::SeqCst);
        let guard = InFlight(Arc::clone(&container.in_flight));
        Ok((self.ensure_running_locked(container, state).await?, guard))
    }

    async fn ensure_running_locked(
        &self,
        container: &Container,
        mut state: tokio::sync::MutexGuard<'_, Option<Arc<Running>>>,
    ) -> Result<Arc<Running>, SandboxError> {
        if let Some(running) = state.as_ref() {
            if running.alive() {
                return Ok(Arc::clone(running));
            }
            tracing::warn!(container = %container.id, "init died; starting the container again");
            self.stop_locked(container, &mut state).await;
        }
        let running = self.launch(container).await?;
        *state = Some(Arc::clone(&running));
        Ok(running)
    }

    async fn stop_locked(&self, container: &Container, state: &mut Option<Arc<Running>>) {
        if let Some(running) = state.take() {
            self.tear_down(&container.id, &running).await;
        }
    }

    /// Ends a container's processes and removes its cgroup.
    async fn tear_down(&self, id: &str, running: &Running) {
        running.shut_down(Duration::from_secs(2)).await;
        if let Err(e) = self
            .inner
            .cgroups
            .remove(&running.slot, Duration::from_secs(5))
            .await
        {
            tracing::warn!(container = %id, "could not remove cgroup {}: {e}", running.slot);
        }
    }

    async fn run_command(
        &self,
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
        let (stdout_read, stdout_write) = sys::pipe().context(|| "pipe".into())?;
        let (stderr_read, stderr_write) = sys::pipe().context(|| "pipe".into())?;
        let (status_read, status_write) = sys::pipe().context(|| "pipe".into())?;
        running
            .send(
                &Request::Run {
                    command: command.as_bytes().to_vec(),
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
        let mut out = CappedOutput::new(max_output_length);
        let mut err = CappedOutput::new(max_output_length);
        let (mut out_buf, mut err_buf) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
        let mut status_bytes = Vec::with_capacity(Status::SIZE * 4);
        let mut status_buf = [0u8; Status::SIZE * 4];
        let (mut out_open, mut err_open, mut status_open) = (true, true, true);
        let mut pid = None;
        let mut exit_status = None;
        let mut spawn_error = None;
        let mut timed_out = false;
        let far = Instant::now() + Duration::from_secs(86_400 * 365);
        let deadline = Instant::now() + timeout;
        // Set once the command ended (or was killed): how long pipes held
        // by leftover background processes may keep us.
        let mut stop_reading_at = far;

        while out_open || err_open || status_open {
            tokio::select! {
                read = stdout.read(&mut out_buf), if out_open => match read {
                    Ok(n) if n > 0 => {
                        out.push(&out_buf[..n]);
                        emit(&mut out_deltas, StreamKind::Stdout, &out_buf[..n]);
                    }
                    _ => out_open = false,
                },
                read = stderr.read(&mut err_buf), if err_open => match read {
                    Ok(n) if n > 0 => {
                        err.push(&err_buf[..n]);
                        emit(&mut err_deltas, StreamKind::Stderr, &err_buf[..n]);
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
                                Some(Status::Started(p)) => {
                                    pid = Some(p);
                                    if timed_out {
                                        let _ = running.send(&Request::KillGroup { pid: p }, &[]).await;
                                    }
                                }
                                Some(Status::Exited(s)) => exit_status = Some(s),
                                Some(Status::SpawnFailed(e)) => spawn_error = Some(e),
                                None => {}
                            }
                        }
                    }
                    _ => {
                        status_open = false;
                        stop_reading_at = Instant::now() + self.inner.config.drain_grace;
                    }
                },
                _ = tokio::time::sleep_until(deadline), if !timed_out && status_open => {
                    timed_out = true;
                    if let Some(p) = pid {
                        let _ = running.send(&Request::KillGroup { pid: p }, &[]).await;
                    }
                    // If init never reports the exit (it died), give up after a while.
                    stop_reading_at = Instant::now() + Duration::from_secs(5);
                },
                _ = tokio::time::sleep_until(stop_reading_at) => break,
            }
        }
        let mut stderr_text = err.finish();
        let outcome = match (exit_status, spawn_error) {
            _ if timed_out => Outcome::Timeout,
            (Some(status), None) => Outcome::Exit {
                exit_code: sys::exit_code_of(status),
            },
            (status, Some(errno)) => {
                let reason = std::io::Error::from_raw_os_error(errno);
                stderr_text.push_str(&format!(
                    "shellgate: could not start the command: {reason}\n"
                ));
                Outcome::Exit {
                    exit_code: status.map(sys::exit_code_of).unwrap_or(126),
                }
            }
            (None, None) => return Err(SandboxError::ContainerGone),
        };
        Ok(CommandResult {
            stdout: out.finish(),
            stderr: stderr_text,
            outcome,
        })
    }

    async fn run_all(
        &self,
        id: &str,
        request: RunRequest,
        deltas: Option<DeltaSink>,
    ) -> Result<Vec<CommandResult>, SandboxError> {
        request.validate()?;
        let container = self.container(id)?;
        let timeout = Duration::from_millis(request.timeout_ms);
        let mut results = Vec::with_capacity(request.commands.len());
        for (index, command) in request.commands.iter().enumerate() {
            let (running, _in_flight) = self.enter(&container).await?;
            let stream = deltas.as_ref().map(|sink| (index, sink));
            results.push(
                self.run_command(
                    &running,
                    command,
                    timeout,
                    request.max_output_length,
                    stream,
                )
                .await?,
            );
        }
        Ok(results)
    }

    /// Stops every running container (their files stay), waits for pending
    /// teardowns and ends the spare helpers.
    pub async fn shutdown(&self) {
        self.inner.closing.store(true, Ordering::SeqCst);
        // Wait for refills in progress: they see `closing` and stop.
        drop(self.inner.spares_filling.lock().await);
        drop(self.inner.pool_filling.lock().await);
        self.settle().await;
        drop(self.inner.warm_filling.lock().await);
        let warm: Vec<Container> = lock(&self.inner.warm).drain(..).collect();
        for container in warm {
            if let Some(running) = container.state.lock().await.take() {
                self.tear_down(&container.id, &running).await;
            }
            let _ = fs::remove_dir_all(&container.dir);
            self.release_slot(container.id_slot());
        }
        let spares: Vec<Helper> = lock(&self.inner.spares).drain(..).collect();
        for helper in spares {
            helper.discard(&self.inner.cgroups).await;
        }
        let containers: Vec<Arc<Container>> =
            lock(&self.inner.containers).values().cloned().collect();
        for container in containers {
            let mut state = container.state.lock().await;
            if state.is_some() {
                self.stop_locked(&container, &mut state).await;
            }
        }
    }

    /// Host pid of a running container's init (for tests and reports).
    pub async fn init_pid(&self, id: &str) -> Result<Option<i32>, SandboxError> {
        let container = self.container(id)?;
        let state = container.state.lock().await;
        Ok(state.as_ref().filter(|r| r.alive()).map(|r| r.init_pid))
    }

    /// Stops a container unless a command is running in it; returns whether
    /// it stopped (or already was). Races with `run` are impossible: both
    /// decide under the container's state lock.
    pub async fn suspend_if_idle(&self, id: &str) -> Result<bool, SandboxError> {
        let container = self.container(id)?;
        let mut state = container.state.lock().await;
        if container.in_flight.load(Ordering::SeqCst) > 0 {
            return Ok(false);
        }
        self.stop_locked(&container, &mut state).await;
        Ok(true)
    }

    /// Waits for background teardowns of destroyed containers to finish.
    pub async fn settle(&self) {
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

    async fn data_dir(&self, id: &str) -> Result<DataDir, SandboxError> {
        let container = self.container(id)?;
        let running = self.ensure_running(&container).await?;
        DataDir::open(running.init_pid, self.host_ids(container.id_slot()).0)
    }
}

impl Container {
    fn id_slot(&self) -> u32 {
        self.id_slot.load(Ordering::SeqCst)
    }

    fn new(id: String, spec: ContainerSpec, dir: PathBuf, id_slot: u32) -> Self {
        Self {
            id,
            spec,
            dir,
            state: tokio::sync::Mutex::new(None),
            in_flight: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            id_slot: std::sync::atomic::AtomicU32::new(id_slot),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic elsewhere cannot leave these maps inconsistent (each update is
    // a single insert or remove), so a poisoned lock is still usable.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[async_trait]
impl SandboxBackend for LocalEngine {
    async fn create(&self, id: &str, spec: ContainerSpec) -> Result<ContainerInfo, SandboxError> {
        validate_container_id(id)?;
        self.inner.images.resolve(&spec.image)?;
        let containers_dir = self.inner.config.data_dir.join("containers");
        let dir = containers_dir.join(id);
        let staging = containers_dir.join(format!(".creating-{id}"));
        let container = {
            let mut containers = lock(&self.inner.containers);
            if containers.contains_key(id) {
                return Err(SandboxError::AlreadyExists(id.to_owned()));
            }
            let container = Arc::new(Container::new(id.to_owned(), spec.clone(), dir.clone(), 0));
            containers.insert(id.to_owned(), Arc::clone(&container));
            container
        };
        let spec_json =
            serde_json::to_vec_pretty(&spec).map_err(|e| SandboxError::Setup(e.to_string()))?;
        let mut state = container.state.lock().await;
        let made = async {
            if let Some((warm_dir, running, slot)) = self.take_warm(&spec).await {
                // A started container of the same shape: give it this id
                // (it keeps its id slot, already written in its directory).
                container.id_slot.store(slot, Ordering::SeqCst);
                let committed = fs::write(warm_dir.join("spec.json"), &spec_json)
                    .and_then(|()| fs::rename(&warm_dir, &dir));
                match committed {
                    Ok(()) => {
                        *state = Some(running);
                        return Ok(());
                    }
                    Err(e) => {
                        self.tear_down(id, &running).await;
                        let _ = fs::remove_dir_all(&warm_dir);
                        self.release_slot(slot);
                        tracing::warn!("could not use a warm container ({e}); starting one");
                    }
                }
            }
            let slot = self.allocate_slot()?;
            container.id_slot.store(slot, Ordering::SeqCst);
            fs::create_dir(&staging).context(|| format!("create {}", staging.display()))?;
            Self::write_slot(&staging, slot)?;
            self.provision_disk(&staging, spec.disk_bytes).await?;
            fs::write(staging.join("spec.json"), &spec_json)
                .context(|| "write spec.json".into())?;
            // The rename is the commit point: a crash before it leaves only a
            // staging directory, which the next start removes.
            fs::rename(&staging, &dir).context(|| "commit container directory".into())?;
            *state = Some(self.launch(&container).await?);
            Ok::<_, SandboxError>(())
        }
        .await;
        drop(state);
        if let Err(e) = made {
            lock(&self.inner.containers).remove(id);
            let _ = fs::remove_dir_all(&staging);
            let _ = fs::remove_dir_all(&dir);
            let slot = container.id_slot();
            if slot != 0 {
                self.release_slot(slot);
            }
            return Err(e);
        }
        Ok(ContainerInfo {
            id: id.to_owned(),
            state: ContainerState::Running,
            spec,
        })
    }

    async fn run(&self, id: &str, request: RunRequest) -> Result<Vec<CommandResult>, SandboxError> {
        self.run_all(id, request, None).await
    }

    async fn run_streaming(
        &self,
        id: &str,
        request: RunRequest,
        deltas: DeltaSink,
    ) -> Result<Vec<CommandResult>, SandboxError> {
        self.run_all(id, request, Some(deltas)).await
    }

    async fn stop(&self, id: &str) -> Result<(), SandboxError> {
        let container = self.container(id)?;
        let mut state = container.state.lock().await;
        self.stop_locked(&container, &mut state).await;
        Ok(())
    }

    async fn start(&self, id: &str) -> Result<(), SandboxError> {
        let container = self.container(id)?;
        self.ensure_running(&container).await.map(drop)
    }

    async fn destroy(&self, id: &str) -> Result<(), SandboxError> {
        let container = self.container(id)?;
        let mut state = container.state.lock().await;
        // Move the directory out of the way first: from here on the id is
        // free, and a crash mid-teardown leaves only a `.trash-` directory,
        // which the next start removes.
        let n = self.inner.slot_counter.fetch_add(1, Ordering::Relaxed);
        let trash = self
            .inner
            .config
            .data_dir
            .join("containers")
            .join(format!(".trash-{id}-{n}"));
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
        lock(&self.inner.containers).remove(id);
        let running = state.take();
        drop(state);
        let slot = container.id_slot();
        // Processes, cgroup and disk go in the background; `settle` waits.
        let engine = self.clone();
        let id = id.to_owned();
        let task = tokio::spawn(async move {
            if let Some(running) = running {
                engine.tear_down(&id, &running).await;
            }
            if let Err(e) = fs::remove_dir_all(&trash) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(container = %id, "could not remove {}: {e}", trash.display());
                }
            }
            // Only now may another container map to these host ids.
            engine.release_slot(slot);
        });
        let mut teardowns = lock(&self.inner.teardowns);
        teardowns.retain(|t| !t.is_finished());
        teardowns.push(task);
        Ok(())
    }

    async fn inspect(&self, id: &str) -> Result<ContainerInfo, SandboxError> {
        let container = self.container(id)?;
        let state = container.state.lock().await;
        let running = state.as_ref().is_some_and(|r| r.alive());
        Ok(ContainerInfo {
            id: container.id.clone(),
            state: if running {
                ContainerState::Running
            } else {
                ContainerState::Stopped
            },
            spec: container.spec.clone(),
        })
    }

    async fn list(&self) -> Result<Vec<ContainerInfo>, SandboxError> {
        let ids: Vec<String> = lock(&self.inner.containers).keys().cloned().collect();
        let mut infos = Vec::with_capacity(ids.len());
        for id in ids {
            if let Ok(info) = self.inspect(&id).await {
                infos.push(info);
            }
        }
        infos.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(infos)
    }

    async fn read_file(&self, id: &str, path: &str) -> Result<Vec<u8>, SandboxError> {
        let data = self.data_dir(id).await?;
        let path = path.to_owned();
        blocking(move || data.read(&path)).await
    }

    async fn open_file(&self, id: &str, path: &str) -> Result<std::fs::File, SandboxError> {
        let data = self.data_dir(id).await?;
        let path = path.to_owned();
        blocking(move || data.open_file(&path)).await
    }

    async fn write_file(&self, id: &str, path: &str, contents: &[u8]) -> Result<(), SandboxError> {
        let data = self.data_dir(id).await?;
        let (path, contents) = (path.to_owned(), contents.to_vec());
        blocking(move || data.write(&path, &contents)).await
    }

    async fn write_file_from(
        &self,
        id: &str,
        path: &str,
        mut source: std::fs::File,
    ) -> Result<u64, SandboxError> {
        let data = self.data_dir(id).await?;
        let path = path.to_owned();
        blocking(move || data.write_from(&path, &mut source)).await
    }

    async fn delete_file(&self, id: &str, path: &str) -> Result<(), SandboxError> {
        let data = self.data_dir(id).await?;
        let path = path.to_owned();
        blocking(move || data.delete(&path)).await
    }

    async fn list_files(&self, id: &str) -> Result<Vec<FileEntry>, SandboxError> {
        let data = self.data_dir(id).await?;
        blocking(move || data.list()).await
    }
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, SandboxError> + Send + 'static,
) -> Result<T, SandboxError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| SandboxError::Setup(format!("file worker failed: {e}")))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_id_range_ends_below_the_invalid_id() {
        for base in [0u32, 100_000, 3_000_000_000, u32::MAX - ID_RANGE, u32::MAX] {
            let capacity = id_slot_capacity(base);
            if capacity == 0 {
                continue;
            }
            // Slots run 1..capacity; the last range must fit entirely.
            let last = u64::from(capacity - 1);
            let end = u64::from(base) + last * u64::from(ID_RANGE) + u64::from(ID_RANGE);
            assert!(
                end <= u64::from(u32::MAX),
                "base {base}: range ends at {end}"
            );
        }
        assert_eq!(id_slot_capacity(3_000_000_000), 19_759);
        assert_eq!(id_slot_capacity(u32::MAX), 0);
    }
}
