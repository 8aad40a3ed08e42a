//! Things made ahead of demand, so that creating a container is cheap:
//! formatted disks, spare helpers (spawned and enrolled in a cgroup) and
//! warm containers (started, unassigned).
//!
//! The three pools share one shape ([`Pooled`]): a target size, a background
//! refill that runs at most once at a time and stops when the engine closes,
//! and a way to discard what is no longer wanted.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use super::container::{Container, Running};
use super::slots::{DiskIds, IdSlots};
use super::{lock, LocalEngine};
use crate::backend::ContainerSpec;
use crate::disk::{self, DiskKind};
use crate::error::{IoContext, SandboxError};
use crate::forked_helper::ForkedHelper;
use crate::launcher::Helper;

/// Items of one kind, ready to hand out.
pub(super) struct Pool<T> {
    items: Mutex<Vec<T>>,
    /// Held by the refill in progress.
    filling: tokio::sync::Mutex<()>,
    target: usize,
}

impl<T> Pool<T> {
    pub fn new(target: usize) -> Self {
        Self {
            items: Mutex::new(Vec::new()),
            filling: tokio::sync::Mutex::new(()),
            target,
        }
    }

    fn len(&self) -> usize {
        lock(&self.items).len()
    }

    pub fn push(&self, item: T) {
        lock(&self.items).push(item);
    }

    pub fn pop(&self) -> Option<T> {
        lock(&self.items).pop()
    }

    /// Takes the first item that fits.
    fn take(&self, fits: impl FnMut(&T) -> bool) -> Option<T> {
        let mut items = lock(&self.items);
        let index = items.iter().position(fits)?;
        Some(items.swap_remove(index))
    }

    pub fn replace_all(&self, items: Vec<T>) {
        *lock(&self.items) = items;
    }
}

/// Something a pool holds.
#[async_trait]
pub(super) trait Pooled: Sized + Send + 'static {
    /// What log messages call one.
    const KIND: &'static str;
    /// How long a refill waits after a take: a warm container's refill
    /// would compete with the first command of the one just handed out.
    const DELAY: Duration = Duration::ZERO;
    fn pool(pools: &Pools) -> &Pool<Self>;
    /// Whether this host can make them at all.
    fn possible(_engine: &LocalEngine) -> bool {
        true
    }
    async fn make(engine: &LocalEngine) -> Result<Self, SandboxError>;
    async fn discard(self, engine: &LocalEngine);
}

/// The engine's pools: formatted disks, spare helpers, warm containers.
pub(super) struct Pools {
    disks: Pool<FormattedDisk>,
    spares: Pool<SpareHelper>,
    warm: Pool<WarmContainer>,
    /// A helper the engine's owner forked ahead, for the next container
    /// no spare serves (see `LocalEngine::adopt_forked_helper`).
    forked: Mutex<Option<ForkedHelper>>,
}

impl Pools {
    /// Empty pools that refills top up to these sizes.
    pub fn new(disks: usize, spares: usize, warm: usize) -> Self {
        Self {
            disks: Pool::new(disks),
            spares: Pool::new(spares),
            warm: Pool::new(warm),
            forked: Mutex::new(None),
        }
    }

    /// Keeps a helper forked ahead for the next container no spare serves.
    pub fn adopt_forked(&self, helper: ForkedHelper) {
        *lock(&self.forked) = Some(helper);
    }

    /// The formatted disks a previous engine left (see `recovery`).
    pub fn adopt_disks(&self, disks: Vec<FormattedDisk>) {
        self.disks.replace_all(disks);
    }

    /// Tops every pool up in the background.
    pub fn refill_all(&self, engine: &LocalEngine) {
        self.refill::<FormattedDisk>(engine);
        self.refill::<SpareHelper>(engine);
        self.refill::<WarmContainer>(engine);
    }

    /// Tops a pool up in the background (one refill at a time).
    pub fn refill<T: Pooled>(&self, engine: &LocalEngine) {
        if T::pool(self).target == 0 || !T::possible(engine) {
            return;
        }
        let engine = engine.clone();
        tokio::spawn(async move {
            if !T::DELAY.is_zero() {
                tokio::time::sleep(T::DELAY).await;
            }
            let pool = T::pool(&engine.inner.pools);
            let Ok(_filling) = pool.filling.try_lock() else {
                return;
            };
            while pool.len() < pool.target && !engine.closing() {
                match T::make(&engine).await {
                    Ok(item) if engine.closing() => item.discard(&engine).await,
                    Ok(item) => pool.push(item),
                    Err(e) => {
                        tracing::warn!("could not prepare {}: {e}", T::KIND);
                        return;
                    }
                }
            }
        });
    }

    /// Waits for a refill in progress, then discards everything pooled.
    pub async fn drain<T: Pooled>(&self, engine: &LocalEngine) {
        let pool = T::pool(self);
        let _filling = pool.filling.lock().await;
        let items: Vec<T> = lock(&pool.items).drain(..).collect();
        for item in items {
            item.discard(engine).await;
        }
    }

    /// Gives `dir` a disk of `bytes`: a pooled image when one fits.
    pub async fn provision_disk(
        &self,
        engine: &LocalEngine,
        dir: &Path,
        bytes: u64,
    ) -> Result<(), SandboxError> {
        let inner = &engine.inner;
        match inner.disk_kind {
            DiskKind::Directory => {
                fs::create_dir(dir.join("disk")).context(|| "create disk directory".into())
            }
            DiskKind::Image => {
                let target = dir.join("disk.img");
                if bytes == inner.config.pool_disk_bytes {
                    let pooled = self.disks.pop();
                    self.refill::<FormattedDisk>(engine);
                    if let Some(FormattedDisk(image)) = pooled {
                        if fs::rename(&image, &target).is_ok() {
                            return Ok(());
                        }
                    }
                }
                disk::format_image(&target, bytes, inner.new_disk_root_owner())
                    .await
                    .context(|| "format the container's disk".into())
            }
        }
    }

    /// A helper enrolled in a cgroup with `spec`'s limits: a spare if one is
    /// ready, else a new one.
    pub async fn helper_for(
        &self,
        engine: &LocalEngine,
        spec: &ContainerSpec,
    ) -> Result<Helper, SandboxError> {
        let inner = &engine.inner;
        if let Some(SpareHelper(helper)) = self.spares.pop() {
            self.refill::<SpareHelper>(engine);
            match inner.cgroups.apply(&helper.slot, spec) {
                Ok(()) => return Ok(helper),
                Err(e) => {
                    tracing::warn!("spare helper unusable ({e}); starting a new one");
                    helper.discard(&inner.cgroups).await;
                }
            }
        }
        let forked = lock(&self.forked).take();
        if let Some(forked) = forked {
            return Helper::adopt(forked, &inner.cgroups, engine.next_name("s"), spec).await;
        }
        Helper::spawn(
            &inner.config.helper_binary,
            Some(&inner.zygote),
            &inner.cgroups,
            engine.next_name("s"),
            spec,
        )
        .await
    }

    /// A warm container whose fixed properties (image, `/tmp` size, disk)
    /// match `spec`, with `spec`'s limits applied: its directory, its
    /// processes, the ids its disk holds and the loop device it is on.
    pub async fn take_warm(
        &self,
        engine: &LocalEngine,
        spec: &ContainerSpec,
    ) -> Option<(PathBuf, Arc<Running>, DiskIds, Option<u32>)> {
        let inner = &engine.inner;
        let effective_tmp = |s: &ContainerSpec| s.tmp_bytes.min(s.memory_bytes / 2);
        let WarmContainer(warm) = self.warm.take(|WarmContainer(w)| {
            // A warm container was started without mounts of its own.
            spec.network.is_disabled()
                && spec.skills.is_none()
                && spec.volumes.is_empty()
                && w.spec.image == spec.image
                && w.spec.disk_bytes == spec.disk_bytes
                && effective_tmp(&w.spec) == effective_tmp(spec)
        })?;
        self.refill::<WarmContainer>(engine);
        let running = warm.state.lock().await.take()?;
        if running.alive() && inner.cgroups.apply(&running.slot, spec).is_ok() {
            return Some((warm.dir.clone(), running, warm.disk_ids(), warm.last_loop()));
        }
        engine.tear_down(&warm.id, &running).await;
        drop(running);
        let _ = fs::remove_dir_all(&warm.dir);
        release_kept(engine, warm.disk_ids());
        None
    }
}

/// A formatted disk image of the default size.
pub(super) struct FormattedDisk(pub PathBuf);

#[async_trait]
impl Pooled for FormattedDisk {
    const KIND: &'static str = "a disk for the pool";

    fn pool(pools: &Pools) -> &Pool<Self> {
        &pools.disks
    }

    fn possible(engine: &LocalEngine) -> bool {
        engine.inner.disk_kind == DiskKind::Image
    }

    async fn make(engine: &LocalEngine) -> Result<Self, SandboxError> {
        let inner = &engine.inner;
        let n = inner.counter.fetch_add(1, Ordering::Relaxed);
        let pool_dir = inner.config.data_dir.join("pool");
        let staging = pool_dir.join(format!("{}-{n}.tmp", std::process::id()));
        let ready = staging.with_extension("img");
        let owner = inner.new_disk_root_owner();
        if let Err(e) = disk::format_image(&staging, inner.config.pool_disk_bytes, owner).await {
            let _ = fs::remove_file(&staging);
            return Err(SandboxError::io("format a disk", e));
        }
        fs::rename(&staging, &ready).context(|| "name a formatted disk".into())?;
        Ok(FormattedDisk(ready))
    }

    async fn discard(self, _engine: &LocalEngine) {
        let _ = fs::remove_file(&self.0);
    }
}

/// A helper enrolled in a cgroup with the default limits.
pub(super) struct SpareHelper(pub Helper);

#[async_trait]
impl Pooled for SpareHelper {
    const KIND: &'static str = "a spare sandbox helper";

    fn pool(pools: &Pools) -> &Pool<Self> {
        &pools.spares
    }

    async fn make(engine: &LocalEngine) -> Result<Self, SandboxError> {
        let inner = &engine.inner;
        Helper::spawn(
            &inner.config.helper_binary,
            Some(&inner.zygote),
            &inner.cgroups,
            engine.next_name("s"),
            &ContainerSpec::default(),
        )
        .await
        .map(SpareHelper)
    }

    async fn discard(self, engine: &LocalEngine) {
        self.0.discard(&engine.inner.cgroups).await;
    }
}

/// A started container of the default spec, not yet anyone's.
pub(super) struct WarmContainer(pub Container);

#[async_trait]
impl Pooled for WarmContainer {
    const KIND: &'static str = "a warm container";
    const DELAY: Duration = Duration::from_millis(20);

    fn pool(pools: &Pools) -> &Pool<Self> {
        &pools.warm
    }

    async fn make(engine: &LocalEngine) -> Result<Self, SandboxError> {
        let inner = &engine.inner;
        let name = engine.next_name("warm-");
        let dir = inner.config.data_dir.join("warm").join(&name);
        let disk_ids = match inner.disks_hold_own_ids() {
            true => DiskIds::Own,
            false => DiskIds::Shifted(inner.slots.allocate()?),
        };
        let warm = Container::new(name, ContainerSpec::default(), dir.clone(), disk_ids);
        let made = async {
            fs::create_dir(&dir).context(|| format!("create {}", dir.display()))?;
            IdSlots::write(&dir, disk_ids)?;
            inner
                .pools
                .provision_disk(engine, &dir, warm.spec.disk_bytes)
                .await?;
            engine.launch(&warm).await
        }
        .await;
        match made {
            Ok(running) => {
                *warm.state.lock().await = Some(running);
                Ok(WarmContainer(warm))
            }
            Err(e) => {
                let _ = fs::remove_dir_all(&dir);
                release_kept(engine, disk_ids);
                Err(e)
            }
        }
    }

    async fn discard(self, engine: &LocalEngine) {
        let WarmContainer(warm) = self;
        if let Some(running) = warm.state.lock().await.take() {
            engine.tear_down(&warm.id, &running).await;
        }
        let _ = fs::remove_dir_all(&warm.dir);
        release_kept(engine, warm.disk_ids());
    }
}

/// Returns the slot a warm container kept for its disk's host ids, once
/// its files are gone (a leased one went with its run).
fn release_kept(engine: &LocalEngine, disk_ids: DiskIds) {
    if let DiskIds::Shifted(slot) = disk_ids {
        engine.inner.slots.release(slot);
    }
}
