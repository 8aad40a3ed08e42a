//! Spawning, enrolling and reaping sandbox helpers.
//!
//! A helper is the `shellgate` binary re-executed with `__sandbox-helper`
//! (see [`crate::helper`]). Starting one costs an exec and, on cgroup v1, a
//! cgroup migration (several milliseconds: it waits for an RCU grace
//! period; on v2 the helper is born in its cgroup instead), so the engine
//! keeps a few *spare* helpers already enrolled in fresh cgroups; a
//! container start then only sends the spec.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use tokio::io::unix::AsyncFd;

use crate::backend::ContainerSpec;
use crate::cgroup::Cgroups;
use crate::children::{reap, register, spawn_process};
use crate::error::{IoContext, SandboxError};
use crate::forked_helper::ForkedHelper;
use crate::helper::HELPER_ARG;
use crate::protocol::{Enrollment, FileViewSpec, HelperTask, Report, MAX_REPORT};
use crate::sys;
use crate::zygote::Zygote;

/// How long a helper may take to enrol or to build its container.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

/// A helper that joined its cgroups and waits for a container spec.
pub(crate) struct Helper {
    control: AsyncFd<OwnedFd>,
    pidfd: OwnedFd,
    /// Name of the helper's cgroup (one folder per hierarchy).
    pub slot: String,
}

/// A container whose init is up and waiting for commands.
pub(crate) struct Started {
    pub control: AsyncFd<OwnedFd>,
    pub init_pid: i32,
    pub slot: String,
    /// The container's `/mnt/data`, opened by init, or its disk's own
    /// `data` for a disk shown through an idmapped mount.
    pub data: OwnedFd,
    /// The loop device its disk is on.
    pub loop_device: Option<u32>,
    /// The egress proxy's sockets (HTTP, HTTPS, DNS), if init made them.
    pub proxy: Vec<OwnedFd>,
}

impl Helper {
    /// Starts a helper (forked by `zygote` when given, see
    /// [`crate::zygote`]) and enrols it in a new cgroup `slot` with
    /// `limits`.
    pub async fn spawn(
        binary: &Path,
        zygote: Option<&Zygote>,
        cgroups: &Cgroups,
        slot: String,
        limits: &ContainerSpec,
    ) -> Result<Helper, SandboxError> {
        let cgroup_procs = cgroups
            .create(&slot, limits)
            .context(|| format!("create cgroup {slot}"))?;
        // On cgroup v2 the helper is born in its cgroup (no migration at
        // all). Elsewhere the engine, not the helper, moves it into its
        // cgroups as soon as it exists: the first migration after a quiet
        // spell waits for an RCU grace period (7–20 ms, see BENCHMARKS.md),
        // and this way that wait overlaps the helper's own start (loading a
        // large binary) instead of following it. Either way the helper
        // waits for the (empty) enrollment before it makes anything.
        let into = cgroups
            .unified_dir(&slot)
            .and_then(|dir| std::fs::File::open(dir).ok())
            .map(OwnedFd::from);
        let launched = Self::launch(binary, zygote, slot.clone(), into.as_ref()).await;
        let (helper, pid, born_in_cgroup) = match launched {
            Ok(launched) => launched,
            Err(e) => {
                let _ = cgroups.remove(&slot, Duration::from_secs(2)).await;
                return Err(e);
            }
        };
        helper
            .enrol(cgroups, pid, (!born_in_cgroup).then_some(cgroup_procs))
            .await
    }

    /// Takes over a helper forked ahead (see [`ForkedHelper`]) and enrols
    /// it in a new cgroup `slot` with `limits`, as [`Helper::spawn`] does
    /// with one it starts.
    pub async fn adopt(
        forked: ForkedHelper,
        cgroups: &Cgroups,
        slot: String,
        limits: &ContainerSpec,
    ) -> Result<Helper, SandboxError> {
        let ForkedHelper {
            control,
            pidfd,
            pid,
        } = forked;
        let cgroup_procs = match cgroups.create(&slot, limits) {
            Ok(procs) => procs,
            Err(e) => {
                let _ = sys::pidfd_kill(&pidfd, libc::SIGKILL);
                reap(pidfd).await;
                return Err(SandboxError::io(format!("create cgroup {slot}"), e));
            }
        };
        let helper = async {
            set_nonblocking(&control)?;
            let control = register(control).context(|| "register control socket".into())?;
            Ok::<_, SandboxError>(control)
        }
        .await;
        let control = match helper {
            Ok(control) => control,
            Err(e) => {
                let _ = sys::pidfd_kill(&pidfd, libc::SIGKILL);
                reap(pidfd).await;
                let _ = cgroups.remove(&slot, Duration::from_secs(2)).await;
                return Err(e);
            }
        };
        let helper = Helper {
            control,
            pidfd,
            slot,
        };
        helper.enrol(cgroups, pid, Some(cgroup_procs)).await
    }

    /// Moves the helper into its cgroups (`cgroup_procs`; `None`: it was
    /// born there), then sends its enrollment and waits for its answer;
    /// discards it on failure.
    async fn enrol(
        self,
        cgroups: &Cgroups,
        pid: libc::pid_t,
        cgroup_procs: Option<Vec<std::path::PathBuf>>,
    ) -> Result<Helper, SandboxError> {
        let helper = self;
        let enrollment = serde_json::to_vec(&Enrollment {})
            .map_err(|e| SandboxError::Setup(format!("encode enrollment: {e}")))?;
        let enrolled = async {
            if let Some(cgroup_procs) = cgroup_procs {
                let pid = pid.to_string();
                tokio::task::spawn_blocking(move || {
                    for procs in &cgroup_procs {
                        sys::write_file(procs, &pid).map_err(|e| {
                            SandboxError::Setup(format!("join cgroup {}: {e}", procs.display()))
                        })?;
                    }
                    Ok::<_, SandboxError>(())
                })
                .await
                .map_err(|e| SandboxError::Setup(format!("cgroup enrolment: {e}")))??;
            }
            send_raw(&helper.control, &enrollment).await?;
            match recv_report(&helper.control).await? {
                Some((Report::Enrolled, _)) => Ok(()),
                Some((Report::Error { error }, _)) => Err(SandboxError::Helper(error)),
                other => Err(SandboxError::Setup(format!(
                    "unexpected helper report {:?}",
                    other.map(|(report, _)| report)
                ))),
            }
        };
        match tokio::time::timeout(SETUP_TIMEOUT, enrolled).await {
            Ok(Ok(())) => Ok(helper),
            Ok(Err(e)) => {
                helper.discard(cgroups).await;
                Err(e)
            }
            Err(_) => {
                helper.discard(cgroups).await;
                Err(SandboxError::Setup(
                    "the sandbox helper did not enrol in time".into(),
                ))
            }
        }
    }

    /// Starts the helper process with its end of a new control socket,
    /// born in the cgroup v2 directory `into` if given and the kernel can;
    /// returns it, its pid and whether it was born there. Forked by the
    /// zygote when there is one, else (or if it fails) executed.
    async fn launch(
        binary: &Path,
        zygote: Option<&Zygote>,
        slot: String,
        into: Option<&OwnedFd>,
    ) -> Result<(Helper, libc::pid_t, bool), SandboxError> {
        let (ours, theirs) = sys::seqpacket_pair().context(|| "socketpair".into())?;
        let forked = match zygote {
            Some(zygote) => match zygote.fork(&theirs, into).await {
                Ok(forked) => Some((forked.pid, forked.pidfd, forked.born_in_cgroup)),
                Err(e) => {
                    tracing::warn!(
                        "the sandbox zygote could not fork a helper ({e}); executing one"
                    );
                    None
                }
            },
            None => None,
        };
        let (pid, pidfd, born_in_cgroup) = match forked {
            Some(forked) => forked,
            None => {
                let (pid, born_in_cgroup) = spawn_process(binary, HELPER_ARG, &theirs, into)
                    .context(|| format!("start helper {}", binary.display()))?;
                let pidfd = sys::pidfd_open(pid).context(|| "pidfd of helper".into())?;
                (pid, pidfd, born_in_cgroup)
            }
        };
        drop(theirs);
        set_nonblocking(&ours)?;
        let control = register(ours).context(|| "register control socket".into())?;
        Ok((
            Helper {
                control,
                pidfd,
                slot,
            },
            pid,
            born_in_cgroup,
        ))
    }

    /// A helper enrolled in no cgroup, for work that starts no container.
    async fn spawn_unenrolled(binary: &Path) -> Result<Helper, SandboxError> {
        let (helper, _, _) = Self::launch(binary, None, String::new(), None).await?;
        let enrollment = serde_json::to_vec(&Enrollment {})
            .map_err(|e| SandboxError::Setup(format!("encode enrollment: {e}")))?;
        send_raw(&helper.control, &enrollment).await?;
        match recv_report(&helper.control).await? {
            Some((Report::Enrolled, _)) => Ok(helper),
            other => {
                let _ = sys::pidfd_kill(&helper.pidfd, libc::SIGKILL);
                reap(helper.pidfd).await;
                Err(SandboxError::Setup(format!(
                    "unexpected helper report {:?}",
                    other.map(|(report, _)| report)
                )))
            }
        }
    }

    /// Mounts a stopped container's disk in a short-lived helper and returns
    /// a descriptor of its `data` directory (and the loop device used).
    pub async fn open_view(
        binary: &Path,
        spec: &FileViewSpec,
    ) -> Result<(OwnedFd, Option<u32>), SandboxError> {
        let task = serde_json::to_vec(&HelperTask::FileView(spec.clone()))
            .map_err(|e| SandboxError::Setup(format!("encode file view: {e}")))?;
        let Helper { control, pidfd, .. } = Self::spawn_unenrolled(binary).await?;
        let answer = tokio::time::timeout(SETUP_TIMEOUT, async {
            send_raw(&control, &task).await?;
            recv_report(&control).await
        })
        .await;
        let result = match answer {
            Ok(Ok(Some((Report::FileView { loop_device }, fds)))) => fds
                .into_iter()
                .next()
                .map(|fd| (fd, loop_device))
                .ok_or_else(|| {
                    SandboxError::Setup("the file view came without a descriptor".into())
                }),
            Ok(Ok(Some((Report::Error { error }, _)))) => Err(SandboxError::Helper(error)),
            Ok(Ok(other)) => Err(SandboxError::Setup(format!(
                "unexpected helper report {:?}",
                other.map(|(report, _)| report)
            ))),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(SandboxError::Setup(
                "the file view took more than 30 s to open".into(),
            )),
        };
        if result.is_err() {
            let _ = sys::pidfd_kill(&pidfd, libc::SIGKILL);
        }
        reap(pidfd).await;
        result
    }

    /// Sends the container task and waits until init is ready.
    pub async fn start(self, task: &[u8]) -> Result<Started, SandboxError> {
        let Helper {
            control,
            pidfd,
            slot,
        } = self;
        let mut init_pid = None;
        let mut loop_device = None;
        let mut data = None;
        // An idmapped disk's `data` as the host stores it (see
        // `HelperSpec::idmap_disk`): the engine's way in, when sent.
        let mut disk_data = None;
        let mut proxy = Vec::new();
        let handshake = async {
            send_raw(&control, task).await?;
            loop {
                match recv_report(&control).await? {
                    Some((
                        Report::InitPid {
                            pid,
                            loop_device: device,
                        },
                        fds,
                    )) => {
                        init_pid = Some(pid);
                        loop_device = device;
                        disk_data = fds.into_iter().next();
                    }
                    Some((Report::Ready, fds)) => {
                        let mut fds = fds.into_iter();
                        data = fds.next();
                        proxy = fds.collect();
                        return Ok(());
                    }
                    Some((Report::Error { error }, _)) => return Err(SandboxError::Helper(error)),
                    Some((Report::Enrolled | Report::FileView { .. }, _)) => {}
                    None => {
                        return Err(SandboxError::Setup(
                            "the sandbox helper exited without a report".into(),
                        ))
                    }
                }
            }
        };
        let result = match tokio::time::timeout(SETUP_TIMEOUT, handshake).await {
            Ok(result) => result,
            Err(_) => Err(SandboxError::Setup(
                "the sandbox took more than 30 s to start".into(),
            )),
        };
        if result.is_err() {
            let _ = sys::pidfd_kill(&pidfd, libc::SIGKILL);
        }
        reap(pidfd).await;
        let result = match (result, data) {
            (Ok(()), None) => Err(SandboxError::Setup(
                "init reported ready without its /mnt/data descriptor".into(),
            )),
            (result, data) => result.map(|()| disk_data.or(data)),
        };
        match (result, init_pid) {
            (Ok(Some(data)), Some(init_pid)) => Ok(Started {
                control,
                init_pid,
                slot,
                data,
                loop_device,
                proxy,
            }),
            (Ok(_), _) => Err(SandboxError::Setup(
                "init reported ready before its pid".into(),
            )),
            (Err(e), pid) => {
                // Init, our child through CLONE_PARENT, may exist: end and reap it.
                drop(control);
                if let Some(pidfd) = pid.and_then(|p| sys::pidfd_open(p).ok()) {
                    let _ = sys::pidfd_kill(&pidfd, libc::SIGKILL);
                    reap(pidfd).await;
                }
                Err(e)
            }
        }
    }

    /// Ends an unused helper and removes its cgroup.
    pub async fn discard(self, cgroups: &Cgroups) {
        let Helper {
            control,
            pidfd,
            slot,
        } = self;
        drop(control);
        let _ = sys::pidfd_kill(&pidfd, libc::SIGKILL);
        reap(pidfd).await;
        let _ = cgroups.remove(&slot, Duration::from_secs(2)).await;
    }
}

fn set_nonblocking(fd: &OwnedFd) -> Result<(), SandboxError> {
    // (A failed F_GETFL is an error now, not flags of -1 written back.)
    let flags = rustix::fs::fcntl_getfl(fd).map_err(std::io::Error::from);
    flags
        .and_then(|flags| {
            rustix::fs::fcntl_setfl(fd, flags | rustix::fs::OFlags::NONBLOCK)
                .map_err(std::io::Error::from)
        })
        .context(|| "set O_NONBLOCK".into())?;
    Ok(())
}

async fn send_raw(control: &AsyncFd<OwnedFd>, bytes: &[u8]) -> Result<(), SandboxError> {
    loop {
        let mut guard = control
            .writable()
            .await
            .context(|| "wait on control socket".into())?;
        match guard.try_io(|fd| sys::send_with_fds(fd.as_raw_fd(), bytes, &[])) {
            Ok(result) => return result.context(|| "send spec to helper".into()),
            Err(_would_block) => continue,
        }
    }
}

/// Receives one report and the descriptors that came with it; `None` once
/// the other side closed.
async fn recv_report(
    control: &AsyncFd<OwnedFd>,
) -> Result<Option<(Report, Vec<OwnedFd>)>, SandboxError> {
    // Reports are small: a stack buffer, not a megabyte per report on the
    // container-start path.
    let mut buf = [0u8; MAX_REPORT];
    loop {
        let mut guard = control
            .readable()
            .await
            .context(|| "wait on control socket".into())?;
        match guard.try_io(|fd| sys::recv_with_fds(fd.as_raw_fd(), &mut buf, libc::MSG_DONTWAIT)) {
            Ok(Ok((0, _))) => return Ok(None),
            Ok(Ok((len, fds))) => {
                return serde_json::from_slice(&buf[..len])
                    .map(|report| Some((report, fds)))
                    .map_err(|e| SandboxError::Setup(format!("bad report from helper: {e}")))
            }
            Ok(Err(e)) if e.raw_os_error() == Some(libc::ECONNRESET) => return Ok(None),
            Ok(Err(e)) => return Err(SandboxError::io("read from helper", e)),
            Err(_would_block) => continue,
        }
    }
}
