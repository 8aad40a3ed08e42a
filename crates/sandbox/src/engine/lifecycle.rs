//! A container's life: started when something enters it (a command, a
//! file operation, a process), stopped and torn down, and its files
//! reached while it runs or through a view of its disk while it is stopped.
//! Each step decides under the container's state lock (see `container`).

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::watch;

use super::container::{Container, InFlight, Running, Wake, STOP_PATIENCE, VIEW_LIFETIME};
use super::mount_hold::MountHold;
use super::slots::DiskIds;
use super::{lock, spec, LocalEngine, SANDBOX_UID};
use crate::children::register;
use crate::disk::{self, DiskKind};
use crate::error::{IoContext, SandboxError};
use crate::files::DataDir;
use crate::launcher::Helper;
use crate::protocol::FileViewSpec;
use crate::sys;

impl LocalEngine {
    /// The running handle of a container, counted in flight, starting it if
    /// it is stopped or its processes died.
    pub(super) async fn enter(
        &self,
        container: &Container,
    ) -> Result<(Arc<Running>, InFlight), SandboxError> {
        let mut state = container.state.lock().await;
        if container.destroyed() {
            return Err(SandboxError::Deleted(container.id.clone()));
        }
        let guard = container.begin();
        let running = self.ensure_running_locked(container, &mut state).await?;
        Ok((running, guard))
    }

    /// The running handle, starting the container if needed.
    pub(super) async fn ensure_running(
        &self,
        container: &Container,
    ) -> Result<Arc<Running>, SandboxError> {
        let mut state = container.state.lock().await;
        if container.destroyed() {
            return Err(SandboxError::NotFound(container.id.clone()));
        }
        self.ensure_running_locked(container, &mut state).await
    }

    async fn ensure_running_locked(
        &self,
        container: &Container,
        state: &mut Option<Arc<Running>>,
    ) -> Result<Arc<Running>, SandboxError> {
        if let Some(running) = state.as_ref() {
            if running.alive() {
                return Ok(Arc::clone(running));
            }
            tracing::warn!(container = %container.id, "init died; starting the container again");
            self.stop_locked(container, state).await;
        }
        let running = self.launch(container).await?;
        *state = Some(Arc::clone(&running));
        Ok(running)
    }

    /// Starts a container's processes; the caller holds its state lock.
    pub(super) async fn launch(&self, container: &Container) -> Result<Arc<Running>, SandboxError> {
        // A file view must not outlive the stop it served: from here on the
        // container's own mount is the one way in (downloads still open keep
        // the old file system alive, and `reuse_loop` shares it).
        lock(&container.view).take();
        self.inner
            .networks
            .prepare(container, &self.inner.images)
            .await?;
        // A disk holding the container's own ids is shown through a range
        // leased for this run; a host-id disk's range is the container's.
        let (id_slot, id_lease) = match container.disk_ids() {
            DiskIds::Shifted(slot) => (slot, None),
            DiskIds::Own => {
                let lease = self.inner.slots.lease()?;
                (lease.slot(), Some(lease))
            }
        };
        let spec = spec::helper_spec(&self.inner, container, id_slot)?;
        // Its control socket and `/mnt/data`, and the egress proxy's three
        // sockets when it has a way out.
        let descriptors = self
            .inner
            .descriptors
            .admit(if spec.egress { 5 } else { 2 })
            .await?;
        let data_owner = spec.disk_sandbox_ids;
        let spec = serde_json::to_vec(&crate::protocol::HelperTask::Container(Box::new(spec)))
            .map_err(|e| SandboxError::Setup(format!("encode spec: {e}")))?;
        let helper = self.inner.pools.helper_for(self, &container.spec).await?;
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
        container.set_last_loop(started.loop_device);
        self.inner.loop_devices.run_started(started.loop_device);
        let control = Arc::new(started.control);
        let reaped = Arc::new(Mutex::new(false));
        let (exited_tx, exited) = watch::channel(false);
        {
            let (control, reaped) = (Arc::clone(&control), Arc::clone(&reaped));
            let (id, pid) = (container.id.clone(), started.init_pid);
            let (loop_devices, loop_device) =
                (Arc::clone(&self.inner.loop_devices), started.loop_device);
            tokio::spawn(async move {
                watch_init(&control, pid, &reaped).await;
                tracing::debug!(container = %id, "init exited");
                // Before the exit is told: a shutdown that waited for it
                // writes the device down.
                loop_devices.run_ended(loop_device);
                let _ = exited_tx.send(true);
            });
        }
        let egress = match self.inner.networks.serve(container, started.proxy) {
            Ok(egress) => egress,
            Err(e) => {
                if !*lock(&reaped) {
                    // SAFETY: our unreaped child (see `Running::kill_init`).
                    unsafe { libc::kill(started.init_pid, libc::SIGKILL) };
                }
                // SAFETY: shutdown on a socket we own; init exits.
                unsafe { libc::shutdown(control.as_raw_fd(), libc::SHUT_RDWR) };
                let _ = self
                    .inner
                    .cgroups
                    .remove(&started.slot, Duration::from_secs(2))
                    .await;
                return Err(e);
            }
        };
        let counters = self.inner.cgroups.counters(&started.slot);
        let limits_seen = Mutex::new(counters.events());
        let forks_failed_at_last_start =
            std::sync::atomic::AtomicU64::new(counters.events().pids_max);
        Ok(Arc::new(Running {
            control,
            init_pid: started.init_pid,
            reaped,
            slot: started.slot,
            exited,
            data: MountHold::new(started.data),
            data_owner,
            id_lease,
            counters,
            limits_seen,
            forks_failed_at_last_start,
            egress,
            commands: std::sync::atomic::AtomicU32::new(0),
            started: std::time::Instant::now(),
            _descriptors: descriptors,
        }))
    }

    pub(super) async fn stop_locked(
        &self,
        container: &Container,
        state: &mut Option<Arc<Running>>,
    ) {
        if let Some(running) = state.take() {
            self.tear_down(&container.id, &running).await;
        }
    }

    /// Ends a container's processes and removes its cgroup.
    pub(super) async fn tear_down(&self, id: &str, running: &Running) {
        running.shut_down(STOP_PATIENCE).await;
        self.remove_cgroup(id, &running.slot).await;
    }

    /// Removes the cgroup `slot` of container `id`, whose processes ended.
    pub(super) async fn remove_cgroup(&self, id: &str, slot: &str) {
        if let Err(e) = self
            .inner
            .cgroups
            .remove(slot, Duration::from_secs(5))
            .await
        {
            tracing::warn!(container = %id, "could not remove cgroup {}: {e}", slot);
        }
    }

    /// A container's `/mnt/data`, counted in flight while the caller uses
    /// it. A stopped container is started (`Wake::Yes`) or read through a
    /// file view of its disk (`Wake::No`).
    pub(super) async fn files(
        &self,
        id: &str,
        wake: Wake,
    ) -> Result<(DataDir, InFlight), SandboxError> {
        let container = self.container(id).await?;
        let mut state = container.state.lock().await;
        if container.destroyed() {
            return Err(SandboxError::NotFound(id.to_owned()));
        }
        let guard = container.begin();
        let running = match state.as_ref() {
            Some(running) if running.alive() => Some(Arc::clone(running)),
            _ if wake == Wake::Yes => {
                Some(self.ensure_running_locked(&container, &mut state).await?)
            }
            _ => None,
        };
        let (dir, owner) = match running {
            Some(running) => (running.data.try_clone(), running.data_owner),
            None => (
                self.file_view(&container).await?.try_clone(),
                self.inner
                    .slots
                    .disk_owners(container.disk_ids(), SANDBOX_UID)
                    .0,
            ),
        };
        let dir = dir.context(|| "duplicate the /mnt/data descriptor".into())?;
        Ok((DataDir::from_dir(dir, owner), guard))
    }

    /// A stopped container's `data` directory; the caller holds its state
    /// lock, so it cannot start meanwhile.
    pub(super) async fn file_view(
        &self,
        container: &Arc<Container>,
    ) -> Result<Arc<MountHold>, SandboxError> {
        if let Some(view) = lock(&container.view).as_ref() {
            return Ok(Arc::clone(view));
        }
        let view = match self.inner.disk_kind {
            DiskKind::Directory => {
                let data = container.dir.join("disk").join(disk::DATA_DIR);
                OwnedFd::from(
                    std::fs::File::open(&data).context(|| format!("open {}", data.display()))?,
                )
            }
            DiskKind::Image => {
                let spec = FileViewSpec {
                    disk_image: container.dir.join("disk.img"),
                    mount_point: self.inner.config.data_dir.join("run/disk"),
                    reuse_loop: container.last_loop(),
                    prepare_layout: None,
                };
                let (dir, loop_device) =
                    Helper::open_view(&self.inner.config.helper_binary, &spec).await?;
                container.set_last_loop(loop_device);
                dir
            }
        };
        let view = Arc::new(MountHold::new(view));
        *lock(&container.view) = Some(Arc::clone(&view));
        // Dropped after a while, so thousands of polled suspended containers
        // do not each keep a mounted file system.
        let container = Arc::clone(container);
        let kept = Arc::downgrade(&view);
        tokio::spawn(async move {
            tokio::time::sleep(VIEW_LIFETIME).await;
            let mut slot = lock(&container.view);
            if slot
                .as_ref()
                .is_some_and(|v| kept.upgrade().is_some_and(|k| Arc::ptr_eq(v, &k)))
            {
                slot.take();
            }
        });
        Ok(view)
    }
}

/// Waits until init exits, and reaps it (marking it reaped under `reaped`'s
/// lock, which `Running::kill_init` takes). Init's end of the control
/// socket closes only when init exits (it sends nothing after `Ready`), so
/// the watcher waits on the socket the engine holds anyway; only then does
/// it open a pidfd, for the moments until the exit is complete.
async fn watch_init(control: &AsyncFd<OwnedFd>, pid: i32, reaped: &Mutex<bool>) {
    loop {
        let Ok(mut guard) = control.ready(Interest::READABLE).await else {
            break;
        };
        if guard.ready().is_read_closed() {
            break;
        }
        let mut buf = [0u8; 64];
        // A hang-up, or an error that ends the channel; anything else that
        // came (nothing is sent after `Ready`) is dropped.
        let received =
            guard.try_io(|fd| sys::recv_with_fds(fd.as_raw_fd(), &mut buf, libc::MSG_DONTWAIT));
        if let Ok(Ok((0, _)) | Err(_)) = received {
            break;
        }
    }
    // The pid still names init: only this task reaps it.
    let pidfd = match sys::pidfd_open(pid).and_then(register) {
        Ok(pidfd) => pidfd,
        Err(e) => {
            tracing::warn!(pid, "cannot watch init: {e}");
            *lock(reaped) = true;
            return;
        }
    };
    loop {
        {
            let mut reaped = lock(reaped);
            match sys::reap_pidfd(pidfd.get_ref()) {
                Ok(None) => {}
                // Reaped now; ECHILD: nothing left to wait for.
                Ok(Some(_)) | Err(_) => {
                    *reaped = true;
                    return;
                }
            }
        }
        match pidfd.readable().await {
            Ok(mut guard) => guard.clear_ready(),
            Err(_) => {
                *lock(reaped) = true;
                return;
            }
        }
    }
}
