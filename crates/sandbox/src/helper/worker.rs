//! The file worker: one file task ([`crate::fs_ops::Task`]) run
//! inside the container by a child of init that became the sandbox user.
//!
//! Init `fork`s (it is single-threaded, so the child may allocate). The
//! child closes every descriptor but the task's pipes, becomes the sandbox
//! user exactly as a command does (`init::become_sandbox_user`: its own
//! session, the OOM score reset, a marker group of its own, the sandbox
//! ids, no capabilities), starts in `/mnt/data`, runs the task and
//! `_exit`s. It stays in the container's namespaces, cgroups, seccomp
//! filter and `no_new_privs`: it can do what a command can, nothing more.
//!
//! Init knows the worker as it knows a command: by the engine's id, with
//! its status pipe watched (the engine closing it, a client that left,
//! kills the worker and everything carrying its marker) and `Exited`
//! written there once it is reaped.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::fs_ops::{self, Message, Task, TaskError, WorkerPipes};
use crate::protocol::Status;
use crate::sys;

fn send_status(fd: &OwnedFd, status: Status) {
    // The engine may have given up on the task; a broken pipe is fine.
    let _ = sys::write_all(fd.as_raw_fd(), &status.encode());
}

/// Starts a worker for `task` (JSON). `passed` holds the status pipe, the
/// result pipe, and the task's data and commit pipes if it has them;
/// `become_sandbox_user` is init's (the steps a command's child takes).
/// Returns the worker's pid and its status pipe, for init to watch.
pub(super) fn start(
    task: &[u8],
    passed: Vec<OwnedFd>,
    become_sandbox_user: impl FnOnce() -> Result<(), i32>,
) -> Option<(libc::pid_t, OwnedFd)> {
    let mut passed = passed.into_iter();
    let status = passed.next()?;
    let (Some(result), Ok(task)) = (passed.next(), serde_json::from_slice::<Task>(task)) else {
        send_status(&status, Status::SpawnFailed(libc::EINVAL));
        return None;
    };
    let data = passed.next();
    let commit = passed.next();
    // SAFETY: init is single-threaded, so the child is a whole copy of it
    // and may allocate; it ends with `_exit`, never returning here.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let errno = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        send_status(&status, Status::SpawnFailed(errno));
        return None;
    }
    if pid == 0 {
        drop(status);
        run(
            become_sandbox_user,
            task,
            WorkerPipes {
                result,
                data,
                commit,
            },
        )
    }
    // Init keeps only the status pipe: the engine sees the others end when
    // the worker does.
    Some((pid, status))
}

/// In the forked child: become the sandbox user and run the task.
fn run(become_sandbox_user: impl FnOnce() -> Result<(), i32>, task: Task, pipes: WorkerPipes) -> ! {
    let mut keep: Vec<RawFd> = [
        Some(&pipes.result),
        pipes.data.as_ref(),
        pipes.commit.as_ref(),
    ]
    .into_iter()
    .flatten()
    .map(AsRawFd::as_raw_fd)
    .collect();
    keep.sort_unstable();
    close_all_but(&keep);
    if let Err(errno) = become_sandbox_user() {
        let message = Message::Failed {
            error: TaskError::Os {
                op: "become the sandbox user".into(),
                path: String::new(),
                errno,
            },
        };
        if let Ok(mut line) = serde_json::to_vec(&message) {
            line.push(b'\n');
            let _ = sys::write_all(pipes.result.as_raw_fd(), &line);
        }
        // SAFETY: _exit ends the child without running init's destructors.
        unsafe { libc::_exit(1) }
    }
    // SAFETY: plain syscalls with valid arguments in the single-threaded
    // worker: a download whose reader left gets EPIPE (and says so) rather
    // than dying silently; files are made with the usual umask; relative
    // names start where commands do.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        libc::umask(0o022);
        libc::chdir(c"/mnt/data".as_ptr());
    }
    fs_ops::run_in_worker(task, pipes);
    // SAFETY: as above.
    unsafe { libc::_exit(0) }
}

/// Closes every descriptor above 2 but `keep` (sorted): the worker must
/// hold no other command's status pipe, nor init's control socket.
fn close_all_but(keep: &[RawFd]) {
    let mut first: u32 = 3;
    for &fd in keep {
        let Ok(fd) = u32::try_from(fd) else { continue };
        if fd > first {
            close_range(first, fd - 1);
        }
        first = first.max(fd + 1);
    }
    close_range(first, u32::MAX);
}

fn close_range(first: u32, last: u32) {
    // SAFETY: close_range(2) closes only descriptors of this process, none
    // of which is used afterwards but the ones kept.
    unsafe { libc::syscall(libc::SYS_close_range, first, last, 0) };
}
