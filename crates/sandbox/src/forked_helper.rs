//! A sandbox helper forked from the process that will use it, not started
//! from the binary: for a one-shot command line (`shellgate exec`), the
//! process acts as its own helper.
//!
//! Why: a helper started by `posix_spawn` executes the `shellgate` binary
//! again, and loading it (mapping ~100 MB, ~28,000 relocations, the
//! runtime's start) is a large part of a one-shot command's time. A fork
//! of the command line, made before it starts any thread, is that same
//! program already loaded: it calls the helper's entry point directly, and
//! from there on is the helper a spawn would have started (the same
//! control socket on descriptor 3, `/dev/null` as stdin and stdout, an
//! empty environment, default signal dispositions, nothing else open).
//!
//! Only where the engine would move the helper into its cgroups anyway
//! (cgroup v1, or no cgroups): on cgroup v2 a spawned helper is born in
//! its cgroup (`sys::spawn_in_cgroup`), which saves more, after a quiet
//! spell, than the fork saves.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use crate::protocol::CONTROL_FD;
use crate::sys;

/// A helper forked ahead, waiting for its enrollment; the engine takes it
/// over for its first container (see `LocalEngine::adopt_forked_helper`).
/// Dropped unused, its control socket closes and it exits.
pub struct ForkedHelper {
    pub(crate) control: OwnedFd,
    pub(crate) pidfd: OwnedFd,
    pub(crate) pid: libc::pid_t,
}

impl std::fmt::Debug for ForkedHelper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForkedHelper")
            .field("pid", &self.pid)
            .finish()
    }
}

impl ForkedHelper {
    /// Forks a helper when it saves time on this host (see the module's
    /// doc) and this process can fork safely (it has one thread); `None`
    /// otherwise, and the engine spawns its helper as usual.
    pub fn fork() -> Option<ForkedHelper> {
        if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() || !single_threaded() {
            return None;
        }
        let (ours, theirs) = sys::seqpacket_pair().ok()?;
        // SAFETY: this process has one thread (checked above, and no thread
        // can appear between the check and the fork: only this one could
        // start it), so the child's copy of every lock and of the
        // allocator is consistent and it may run ordinary code.
        let pid = unsafe { libc::fork() };
        match pid {
            0 => {
                drop(ours);
                become_helper(theirs)
            }
            pid if pid > 0 => {
                drop(theirs);
                let Ok(pidfd) = sys::pidfd_open(pid) else {
                    // Closing our end ends it; its zombie goes with us.
                    return None;
                };
                Some(ForkedHelper {
                    control: ours,
                    pidfd,
                    pid,
                })
            }
            _ => None,
        }
    }
}

/// Whether this process has exactly one thread.
fn single_threaded() -> bool {
    std::fs::read_dir("/proc/self/task").is_ok_and(|tasks| tasks.count() == 1)
}

/// The forked child: arranges its descriptors and environment as a spawned
/// helper's, then runs the helper. Never returns.
fn become_helper(control: OwnedFd) -> ! {
    // SAFETY: descriptor and environment calls on values this process
    // owns, in a process of one thread (the fork's child).
    unsafe {
        if control.as_raw_fd() != CONTROL_FD {
            libc::dup2(control.as_raw_fd(), CONTROL_FD);
        }
        let dev_null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if dev_null >= 0 {
            libc::dup2(dev_null, 0);
            libc::dup2(dev_null, 1);
        }
        // Nothing of the command line's beyond stdio (its caller's
        // descriptors, its own) stays open in the helper, and so in init.
        libc::syscall(libc::SYS_close_range, CONTROL_FD as u32 + 1, u32::MAX, 0u32);
        libc::clearenv();
    }
    std::mem::forget(control);
    crate::helper::helper_main()
}
