//! Init's side of processes: a command started with a stdin pipe
//! or a terminal, its own environment additions and working directory, and
//! signals sent to a running command's process group.
//!
//! A terminal is a pair of the container's own devpts instance (mounted by
//! `mounts`, never the host's): init opens its master, unlocks it, opens
//! the slave with `TIOCGPTPEER` (no path lookup a command could redirect),
//! gives the slave to the sandbox user and sets its size. The child makes
//! it its controlling terminal and its stdin, stdout and stderr; the master
//! goes to the engine on the reply socket that came with the request, and
//! init keeps no copy. Everything the vfork'd child uses (descriptors, the
//! environment, the working directory) is made here, before `clone`.
//!
//! Markers, the status pipe and kills are those of every command (`init`):
//! a process is a command whose engine side stays attached.

use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::{
    kill_command, send_status, start_marked, ChildIo, Launcher, Markers, RunningCommand, Start,
};
use crate::protocol::{PtyReply, StartProcess, Status};
use crate::sys;

/// Where the container's own terminals come from (see `mounts`).
const PTMX: &std::ffi::CStr = c"/dev/pts/ptmx";

/// A terminal pair of the container's devpts.
struct Terminal {
    master: OwnedFd,
    slave: OwnedFd,
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Opens a terminal of `cols` × `rows` whose slave belongs to the sandbox
/// user; an errno on failure.
fn open_terminal(launcher: &Launcher, cols: u16, rows: u16) -> Result<Terminal, i32> {
    // SAFETY: open with a constant NUL-terminated path; the descriptor is
    // owned at once.
    let master = unsafe {
        let fd = libc::open(
            PTMX.as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return Err(last_errno());
        }
        OwnedFd::from_raw_fd(fd)
    };
    let unlock: libc::c_int = 0;
    // SAFETY: TIOCSPTLCK reads one int through a valid pointer.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSPTLCK, &unlock) } < 0 {
        return Err(last_errno());
    }
    // SAFETY: TIOCGPTPEER takes open flags and returns a new descriptor of
    // the master's own slave, owned at once.
    let slave = unsafe {
        let fd = libc::ioctl(
            master.as_raw_fd(),
            libc::TIOCGPTPEER,
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return Err(last_errno());
        }
        OwnedFd::from_raw_fd(fd)
    };
    if launcher.change_ids {
        // SAFETY: fchown of a descriptor we own.
        let owned = unsafe {
            libc::fchown(
                slave.as_raw_fd(),
                launcher.sandbox_uid,
                launcher.sandbox_gid,
            )
        };
        if owned < 0 {
            return Err(last_errno());
        }
    }
    let size = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads a winsize through a valid pointer.
    if unsafe { libc::ioctl(slave.as_raw_fd(), libc::TIOCSWINSZ, &size) } < 0 {
        return Err(last_errno());
    }
    Ok(Terminal { master, slave })
}

/// The environment of one process: every entry of the commands' own but
/// those it replaces, then its additions (`TERM` first with a terminal).
fn environment(launcher: &Launcher, start: &StartProcess) -> Vec<CString> {
    let mut additions: Vec<Vec<u8>> = Vec::with_capacity(start.env.len() + 1);
    if let Some((_, _, term)) = &start.pty {
        let mut entry = b"TERM=".to_vec();
        entry.extend_from_slice(term);
        additions.push(entry);
    }
    additions.extend(start.env.iter().cloned());
    let name = |entry: &[u8]| -> Vec<u8> {
        entry
            .iter()
            .position(|b| *b == b'=')
            .map_or(entry.to_vec(), |at| entry[..at].to_vec())
    };
    let replaced: Vec<Vec<u8>> = additions.iter().map(|e| name(e)).collect();
    launcher
        .env
        .iter()
        .filter(|entry| !replaced.contains(&name(entry.as_bytes())))
        .cloned()
        .chain(
            additions
                .into_iter()
                .filter(|entry| entry.contains(&b'='))
                .filter_map(|entry| CString::new(entry).ok()),
        )
        .collect()
}

/// `Request::Start`: see the module's doc for the descriptors it carries.
pub(super) fn start(
    launcher: &Launcher,
    id: u32,
    start: StartProcess,
    passed: Vec<OwnedFd>,
    running: &mut HashMap<libc::pid_t, RunningCommand>,
    markers: &mut Markers,
) {
    let mut passed = passed.into_iter();
    let Some(status) = passed.next() else {
        return;
    };
    let fail = |status: &OwnedFd, errno: i32| send_status(status, Status::SpawnFailed(errno));
    let Ok(command) = CString::new(start.command.clone()) else {
        return fail(&status, libc::EINVAL);
    };
    let workdir = if start.cwd.is_empty() {
        Ok(launcher.workdir.clone())
    } else {
        CString::new(start.cwd.clone())
    };
    let Ok(workdir) = workdir else {
        return fail(&status, libc::EINVAL);
    };
    let env = environment(launcher, &start);
    let env_pointers: Vec<*const libc::c_char> = env
        .iter()
        .map(|v| v.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let order = Start {
        id,
        reclaim_first: start.reclaim,
        announce: true,
    };
    match &start.pty {
        Some((cols, rows, _)) => {
            let Some(reply) = passed.next() else {
                return fail(&status, libc::EINVAL);
            };
            let terminal = match open_terminal(launcher, *cols, *rows) {
                Ok(terminal) => terminal,
                Err(errno) => {
                    let _ = sys::send_with_fds(reply.as_raw_fd(), &PtyReply::failed(errno), &[]);
                    return fail(&status, errno);
                }
            };
            // The reply socket is new and empty: this never blocks.
            if let Err(e) = sys::send_with_fds(
                reply.as_raw_fd(),
                &PtyReply::OK,
                &[terminal.master.as_raw_fd()],
            ) {
                return fail(&status, e.raw_os_error().unwrap_or(libc::EIO));
            }
            // Init keeps no copy of the master: the engine's is the only one.
            drop(terminal.master);
            let slave = terminal.slave.as_raw_fd();
            let io = ChildIo {
                stdin: slave,
                stdout: slave,
                stderr: slave,
                terminal: true,
                env: env_pointers.as_ptr(),
                workdir: workdir.as_ptr(),
            };
            start_marked(launcher, &order, &command, &io, status, running, markers);
            // The child holds the slave now; ours must close, or the
            // engine would never see the terminal's end.
            drop(terminal.slave);
        }
        None => {
            let (Some(stdout), Some(stderr)) = (passed.next(), passed.next()) else {
                return fail(&status, libc::EINVAL);
            };
            let stdin = if start.stdin { passed.next() } else { None };
            if start.stdin && stdin.is_none() {
                return fail(&status, libc::EINVAL);
            }
            let io = ChildIo {
                stdin: stdin
                    .as_ref()
                    .map_or(launcher.dev_null.as_raw_fd(), |fd| fd.as_raw_fd()),
                stdout: stdout.as_raw_fd(),
                stderr: stderr.as_raw_fd(),
                terminal: false,
                env: env_pointers.as_ptr(),
                workdir: workdir.as_ptr(),
            };
            start_marked(launcher, &order, &command, &io, status, running, markers);
            drop((stdout, stderr, stdin));
        }
    }
}

/// `Request::SignalCommand`: `signal` to the command's process group (its
/// own session's, made by `setsid`); SIGKILL also ends every process of its
/// marker, wherever it went, as a timeout does.
pub(super) fn signal(id: u32, signal: i32, running: &mut HashMap<libc::pid_t, RunningCommand>) {
    if !shellgate_sandbox_api::process::signal_allowed(signal) {
        return;
    }
    let Some(pid) = running
        .iter()
        .find(|(_, command)| command.id == id)
        .map(|(pid, _)| *pid)
    else {
        return;
    };
    if signal == libc::SIGKILL {
        return kill_command(pid, running);
    }
    // SAFETY: kill with a negative pid signals the process group of a
    // command init started and has not reaped (so the group is its own).
    unsafe { libc::kill(-pid, signal) };
}
