//! A container's processes frozen while its disk is copied (see
//! `snapshots`): cgroup v2's `cgroup.freeze` in the container's own
//! cgroup; on a v1 (or hybrid) host, a freezer cgroup made for the
//! snapshot alone, the container's processes moved into it, frozen, thawed
//! and moved back, the cgroup removed. Containers are not kept in a v1
//! freezer cgroup: it limits nothing, and only a snapshot needs it.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::cgroup::Cgroups;
use crate::error::{IoContext, SandboxError};

/// How long a container's processes may take to freeze.
const PATIENCE: Duration = Duration::from_secs(10);

/// The v1 freezer hierarchy's mount.
const V1_FREEZER: &str = "/sys/fs/cgroup/freezer";

/// Frozen processes, thawed by [`Frozen::thaw`].
pub(super) enum Frozen {
    V2(PathBuf),
    /// The snapshot's freezer cgroup, and the server's own (where the
    /// processes go back).
    V1 {
        dir: PathBuf,
        home: PathBuf,
    },
}

/// This process's v1 freezer cgroup, if the hierarchy is mounted.
fn own_v1_freezer() -> Option<PathBuf> {
    let mount = Path::new(V1_FREEZER);
    if !mount.join("cgroup.procs").exists() {
        return None;
    }
    let self_cgroup = fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = crate::cgroup::own_cgroup(&self_cgroup, "freezer")?;
    Some(mount.join(own.trim_start_matches('/')))
}

/// The freezer cgroups this engine's snapshots use (`<group>-snapshot-*`
/// beside the server's own).
fn v1_dirs(group: &str) -> Vec<PathBuf> {
    let Some(home) = own_v1_freezer() else {
        return Vec::new();
    };
    let prefix = format!("{group}-snapshot-");
    fs::read_dir(&home)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect()
}

fn pids(procs: &Path) -> io::Result<HashSet<u32>> {
    Ok(fs::read_to_string(procs)?
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect())
}

/// Whether process `pid` has exited (a zombie, or gone): its state in
/// `/proc/<pid>/stat`, the field after the command's closing parenthesis.
fn exited(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| matches!(state, 'Z' | 'X')),
        Err(_) => true,
    }
}

/// Moves `pids` into the cgroup whose `cgroup.procs` is `procs`; one that
/// has exited meanwhile is no error.
fn move_into(procs: &Path, pids: impl IntoIterator<Item = u32>) -> io::Result<()> {
    for pid in pids {
        match fs::write(procs, pid.to_string()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

async fn wait_state(file: &Path, wanted: &str) -> Result<(), SandboxError> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let state = fs::read_to_string(file).context(|| format!("read {}", file.display()))?;
        if state.lines().any(|l| l.trim() == wanted) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(SandboxError::Setup(format!(
                "the container's processes did not reach {wanted:?} within {PATIENCE:?} ({}: {state:?})",
                file.display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Freezes the processes of the container in cgroup `slot`; `None` where
/// this host has no freezer the engine can use.
pub(super) async fn freeze(
    cgroups: &Cgroups,
    group: &str,
    slot: &str,
) -> Result<Option<Frozen>, SandboxError> {
    if let Some(dir) = cgroups.unified_dir(slot) {
        fs::write(dir.join("cgroup.freeze"), "1")
            .context(|| format!("write {}/cgroup.freeze", dir.display()))?;
        let frozen = Frozen::V2(dir.clone());
        if let Err(e) = wait_state(&dir.join("cgroup.events"), "frozen 1").await {
            frozen.thaw().await?;
            return Err(e);
        }
        return Ok(Some(frozen));
    }
    let (Some(members), Some(home)) = (cgroups.procs_file(slot), own_v1_freezer()) else {
        return Ok(None);
    };
    let dir = home.join(format!("{group}-snapshot-{slot}"));
    match fs::create_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(SandboxError::io(format!("create {}", dir.display()), e)),
    }
    let frozen = Frozen::V1 { dir, home };
    if let Err(e) = frozen.freeze_v1(&members).await {
        let _ = frozen.thaw().await;
        return Err(e);
    }
    Ok(Some(frozen))
}

impl Frozen {
    /// Moves every member of the container into the freezer cgroup and
    /// freezes it, again while a process forked before the freeze is
    /// outside it.
    async fn freeze_v1(&self, members: &Path) -> Result<(), SandboxError> {
        let Frozen::V1 { dir, .. } = self else {
            return Ok(());
        };
        let procs = dir.join("cgroup.procs");
        for _ in 0..20 {
            let outside: Vec<u32> = pids(members)
                .and_then(|all| {
                    let inside = pids(&procs)?;
                    // A zombie stays listed where it died and cannot be
                    // moved (its parent, frozen, will not reap it yet); it
                    // has no memory or files to change.
                    Ok(all
                        .difference(&inside)
                        .copied()
                        .filter(|&pid| !exited(pid))
                        .collect())
                })
                .context(|| "list the container's processes".into())?;
            if outside.is_empty() {
                return Ok(());
            }
            move_into(&procs, outside).context(|| "move processes into the freezer".into())?;
            fs::write(dir.join("freezer.state"), "FROZEN")
                .context(|| format!("freeze {}", dir.display()))?;
            wait_state(&dir.join("freezer.state"), "FROZEN").await?;
        }
        Err(SandboxError::Setup(
            "the container's processes kept forking outside the freezer".into(),
        ))
    }

    /// Thaws the processes (and, on v1, moves them back and removes the
    /// snapshot's freezer cgroup).
    pub(super) async fn thaw(&self) -> Result<(), SandboxError> {
        match self {
            Frozen::V2(dir) => {
                fs::write(dir.join("cgroup.freeze"), "0")
                    .context(|| format!("write {}/cgroup.freeze", dir.display()))?;
                wait_state(&dir.join("cgroup.events"), "frozen 0").await
            }
            Frozen::V1 { dir, home } => thaw_v1(dir, home).await,
        }
    }
}

async fn thaw_v1(dir: &Path, home: &Path) -> Result<(), SandboxError> {
    fs::write(dir.join("freezer.state"), "THAWED").context(|| format!("thaw {}", dir.display()))?;
    wait_state(&dir.join("freezer.state"), "THAWED").await?;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let inside = pids(&dir.join("cgroup.procs")).unwrap_or_default();
        move_into(&home.join("cgroup.procs"), inside)
            .context(|| "move processes out of the freezer".into())?;
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            // A process forked while being moved: move it too.
            Err(e) if Instant::now() < deadline && e.raw_os_error() == Some(libc::EBUSY) => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => return Err(SandboxError::io(format!("remove {}", dir.display()), e)),
        }
    }
}

/// Thaws and removes the freezer cgroups a crashed snapshot left (frozen
/// processes would not even die of `SIGKILL`).
pub(super) async fn recover(group: &str) {
    let Some(home) = own_v1_freezer() else {
        return;
    };
    for dir in v1_dirs(group) {
        tracing::info!("thawing {}, left by a previous run", dir.display());
        if let Err(e) = thaw_v1(&dir, &home).await {
            tracing::warn!("could not thaw {}: {e}", dir.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::exited;

    #[test]
    fn a_running_process_has_not_exited_and_a_zombie_or_a_reaped_one_has() {
        assert!(!exited(std::process::id()), "this test's own process");
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = child.id();
        // Not reaped yet: a zombie once it ends.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !exited(pid) {
            assert!(
                std::time::Instant::now() < deadline,
                "{pid} never read as exited: {:?}",
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
            );
            std::thread::yield_now();
        }
        child.wait().expect("reap");
        assert!(exited(pid), "a reaped process reads as exited");
    }
}
