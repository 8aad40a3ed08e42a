//! The engine's own child processes: the helpers and the zygote, started
//! with their control socket on fd 3 and a name that says nothing of the
//! host, their descriptors registered with the tokio reactor, and each
//! reaped through its pidfd when it exits.
//!
//! Both the launcher (which starts helpers) and the zygote (which forks
//! them) start and reap processes this way.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use tokio::io::unix::AsyncFd;

use crate::sys;

/// Registers a descriptor with the tokio reactor.
pub(crate) fn register(fd: OwnedFd) -> std::io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an OwnedFd stays open, and names the same file, until the
    // AsyncFd that owns it is dropped.
    unsafe { AsyncFd::register(fd) }.map_err(|e| e.into_parts().1)
}

/// Waits until the process behind a pidfd (our child) exits, and reaps it.
pub(crate) async fn wait_exit(pidfd: &AsyncFd<OwnedFd>) {
    loop {
        match sys::reap_pidfd(pidfd.get_ref()) {
            Ok(Some(_)) => return,
            Ok(None) => {}
            // ECHILD: already reaped; anything else: nothing more to wait for.
            Err(_) => return,
        }
        match pidfd.readable().await {
            Ok(mut guard) => guard.clear_ready(),
            Err(_) => return,
        }
    }
}

pub(crate) async fn reap(pidfd: OwnedFd) {
    match register(pidfd) {
        Ok(fd) => wait_exit(&fd).await,
        Err(e) => tracing::warn!("cannot watch helper: {e}"),
    }
}

/// What the helper (and so every container's init, a clone of it) is called
/// in its argument vector.
///
/// `argv[0]` is whatever the spawner chooses, and `/proc/<pid>/cmdline` is
/// readable by everyone in the pid namespace: with the binary's path there,
/// every sandbox could read where the server is installed (the data
/// directory often sits next to it). A plain name says nothing; the kernel
/// still runs `binary`. (`/proc/1/exe` also names the path, but it needs
/// ptrace access to init, which is not dumpable.)
const HELPER_ARGV0: &CStr = c"shellgate";

/// Starts the helper (`arg`: [`HELPER_ARG`], or the zygote's), the control socket on fd 3: born in the cgroup v2
/// directory `into` (`clone3` with `CLONE_INTO_CGROUP`, see
/// [`sys::spawn_in_cgroup`]) when given and the kernel can, else with
/// `posix_spawn` (a vfork-style clone: safe and cheap from a multithreaded
/// server, unlike fork). Returns its pid and whether it was born in `into`.
pub(crate) fn spawn_process(
    binary: &Path,
    arg: &str,
    control: &OwnedFd,
    into: Option<&OwnedFd>,
) -> std::io::Result<(libc::pid_t, bool)> {
    let path = sys::cstr(binary)?;
    let arg = CString::new(arg).map_err(std::io::Error::other)?;
    let argv = [HELPER_ARGV0.as_ptr(), arg.as_ptr(), std::ptr::null()];
    if let Some(cgroup) = into {
        match sys::spawn_in_cgroup(&path, &argv, control.as_raw_fd(), cgroup.as_raw_fd()) {
            Ok(pid) => return Ok((pid, true)),
            // An older kernel (no clone3, no CLONE_INTO_CGROUP) or a
            // cgroup it may not start processes in: the caller moves the
            // helper instead, as on v1.
            Err(e) => tracing::debug!("cannot start the helper in its cgroup ({e}); moving it"),
        }
    }
    let envp: [*const libc::c_char; 1] = [std::ptr::null()];
    let dev_null = c"/dev/null";
    let mut pid: libc::pid_t = 0;
    // SAFETY: the file-actions and attribute objects are initialised before
    // use and destroyed after; every pointer passed is valid for the call.
    unsafe {
        let mut actions: libc::posix_spawn_file_actions_t = std::mem::zeroed();
        let mut attr: libc::posix_spawnattr_t = std::mem::zeroed();
        libc::posix_spawn_file_actions_init(&mut actions);
        libc::posix_spawnattr_init(&mut attr);
        // dup2 onto fd 3 clears close-on-exec (glibc also when it already is fd 3).
        libc::posix_spawn_file_actions_adddup2(
            &mut actions,
            control.as_raw_fd(),
            crate::protocol::CONTROL_FD,
        );
        libc::posix_spawn_file_actions_addopen(
            &mut actions,
            0,
            dev_null.as_ptr(),
            libc::O_RDONLY,
            0,
        );
        libc::posix_spawn_file_actions_addopen(
            &mut actions,
            1,
            dev_null.as_ptr(),
            libc::O_WRONLY,
            0,
        );
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::posix_spawnattr_setsigmask(&mut attr, &empty);
        libc::posix_spawnattr_setflags(&mut attr, libc::POSIX_SPAWN_SETSIGMASK as libc::c_short);
        let ret = libc::posix_spawn(
            &mut pid,
            path.as_ptr(),
            &actions,
            &attr,
            argv.as_ptr().cast(),
            envp.as_ptr().cast(),
        );
        libc::posix_spawn_file_actions_destroy(&mut actions);
        libc::posix_spawnattr_destroy(&mut attr);
        if ret != 0 {
            return Err(std::io::Error::from_raw_os_error(ret));
        }
    }
    Ok((pid, false))
}
