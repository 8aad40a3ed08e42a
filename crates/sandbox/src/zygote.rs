//! The zygote: one helper process, loaded once, that forks every other
//! helper (and so every container's init) instead of the engine executing
//! the `shellgate` binary again for each.
//!
//! Why: a helper started by `posix_spawn` loads the binary afresh, and the
//! dynamic loader's relocations (the binary is position-independent) write
//! every page of its relocated data (`.data.rel.ro`, the GOT: vtables,
//! string tables' pointers): megabytes in a debug build, hundreds of KiB in
//! a release one, private to each process. Init is a clone of its helper,
//! so every live container kept its own copy. Forked from the zygote, those
//! pages are the zygote's, shared copy-on-write by every helper and init,
//! and each init keeps only what it writes itself.
//!
//! How: the engine starts the zygote as it would start a helper (the same
//! binary, an empty environment, `/dev/null` as stdin and stdout, its
//! socket to the engine on descriptor 3) with [`ZYGOTE_ARG`]. For each
//! helper the engine sends it one byte and the helper's end of a new
//! control socket (and, on cgroup v2, the helper's cgroup directory); the
//! zygote forks with `CLONE_PARENT` (born in that cgroup when it can), so
//! the helper is the *engine's* child exactly as a spawned one is (the
//! engine reaps it through a pidfd, and the helper's `CLONE_PARENT` clone
//! of init makes init the engine's child too), and answers with its pid.
//! The child puts the control socket on descriptor 3, closes every other
//! descriptor beyond stdio and runs [`crate::helper::helper_main`], as a
//! freshly executed helper does from there on.
//!
//! The zygote is single-threaded and holds nothing but its socket: it is
//! executed with an empty environment and receives no spec, no secret and
//! no container's descriptor beyond the one it hands on and closes. It ends
//! when the engine closes its socket (a dead server included). One cost:
//! helpers and inits share the zygote's address-space layout instead of
//! each exec drawing its own; init is not dumpable, so no process in a
//! container can read that layout, and nothing a container sends reaches
//! init's memory but the engine's own messages.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::io::unix::AsyncFd;

use crate::protocol::CONTROL_FD;
use crate::sys;

/// The argument that makes the `shellgate` binary act as the zygote.
pub const ZYGOTE_ARG: &str = "__sandbox-zygote";

/// A request: one byte, the control socket and maybe a cgroup directory.
const REQUEST: &[u8] = b"f";
/// An answer: the helper's pid (or a negated errno) and whether it was
/// born in the cgroup, each a little-endian `i32`.
const ANSWER_BYTES: usize = 8;

/// Entry point of the zygote process. Never returns.
pub fn zygote_main() -> ! {
    // As a helper does (see `helper_main`): default dispositions, an empty
    // mask, SIGPIPE ignored; every helper forked from here inherits them.
    sys::reset_signals();
    // SAFETY: signal() with a valid signal number and SIG_IGN.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let mut buf = [0u8; 16];
    loop {
        let (len, fds) = match sys::recv_with_fds(CONTROL_FD, &mut buf, 0) {
            Ok((0, _)) | Err(_) => std::process::exit(0),
            Ok(received) => received,
        };
        let answer = match (&buf[..len], fds.as_slice()) {
            (REQUEST, [control]) => fork_helper(control, None),
            (REQUEST, [control, cgroup]) => fork_helper(control, Some(cgroup)),
            _ => Err(io::Error::from_raw_os_error(libc::EINVAL)),
        };
        // Our copies of the descriptors: the helper has its own.
        drop(fds);
        let (pid, born) = match answer {
            Ok((pid, born)) => (pid, i32::from(born)),
            Err(e) => (-e.raw_os_error().unwrap_or(libc::EIO), 0),
        };
        let mut bytes = [0u8; ANSWER_BYTES];
        bytes[..4].copy_from_slice(&pid.to_le_bytes());
        bytes[4..].copy_from_slice(&born.to_le_bytes());
        if sys::send_with_fds(CONTROL_FD, &bytes, &[]).is_err() {
            std::process::exit(0);
        }
    }
}

/// Forks a helper onto `control`, in `cgroup` if the kernel can place it
/// there; returns its pid and whether it was born in `cgroup`.
fn fork_helper(control: &OwnedFd, cgroup: Option<&OwnedFd>) -> io::Result<(libc::pid_t, bool)> {
    let attempts: &[Option<RawFd>] = match cgroup {
        Some(dir) => &[Some(dir.as_raw_fd()), None],
        None => &[None],
    };
    let mut last = io::Error::from_raw_os_error(libc::EINVAL);
    for &into in attempts {
        // SAFETY: the zygote has one thread: it is entered before anything
        // else in `main` and starts none.
        match unsafe { sys::fork_sibling(into) } {
            Ok(0) => become_helper(control.as_raw_fd()),
            Ok(pid) => return Ok((pid, into.is_some())),
            // An older kernel or a cgroup it may not start processes in:
            // born outside it, the engine moves it (as on cgroup v1).
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// The forked child: the control socket onto descriptor 3 (which closes
/// the zygote's own socket there), nothing else open beyond stdio, then the
/// helper. Never returns.
fn become_helper(control: RawFd) -> ! {
    // SAFETY: descriptor calls on descriptors this process owns, in a
    // process of one thread (a fork of the single-threaded zygote).
    let placed = unsafe {
        libc::dup2(control, CONTROL_FD) == CONTROL_FD
            && libc::syscall(libc::SYS_close_range, CONTROL_FD as u32 + 1, u32::MAX, 0u32) == 0
    };
    if !placed {
        // The engine sees the control socket close without a report.
        // SAFETY: _exit ends this process at once.
        unsafe { libc::_exit(127) };
    }
    crate::helper::helper_main()
}

/// The engine's handle on its zygote: started when the first helper is
/// needed, started again if it died.
pub(crate) struct Zygote {
    binary: PathBuf,
    process: Arc<tokio::sync::Mutex<Option<Running>>>,
}

struct Running {
    socket: AsyncFd<OwnedFd>,
    pidfd: OwnedFd,
}

/// A helper the zygote forked: the engine's child.
pub(crate) struct Forked {
    pub pid: libc::pid_t,
    pub pidfd: OwnedFd,
    pub born_in_cgroup: bool,
}

impl Zygote {
    pub(crate) fn new(binary: &Path) -> Zygote {
        Zygote {
            binary: binary.to_owned(),
            process: Arc::new(tokio::sync::Mutex::new(None)),
        }
    }

    /// Has the zygote fork a helper onto `control` (the helper's end of
    /// its control socket), in the cgroup v2 directory `into` if given.
    ///
    /// The exchange runs as a task of its own, so a caller that gives up
    /// cannot leave an answer unread for the next request, nor a helper
    /// unreaped: a helper nobody takes is reaped by that task (its control
    /// socket closed, it exits).
    pub(crate) async fn fork(
        &self,
        control: &OwnedFd,
        into: Option<&OwnedFd>,
    ) -> io::Result<Forked> {
        let control = control.try_clone()?;
        let into = into.map(OwnedFd::try_clone).transpose()?;
        let (process, binary) = (self.process.clone(), self.binary.clone());
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let forked = Self::exchange(&process, &binary, control, into).await;
            if let Err(Ok(forked)) = tx.send(forked) {
                crate::children::reap(forked.pidfd).await;
            }
        });
        rx.await
            .unwrap_or_else(|_| Err(io::Error::other("the zygote's task ended")))
    }

    /// Ends the zygote (its socket closed, it exits) and reaps it; a later
    /// helper starts a new one.
    pub(crate) async fn end(&self) {
        let running = self.process.lock().await.take();
        if let Some(Running { socket, pidfd }) = running {
            drop(socket);
            crate::children::reap(pidfd).await;
        }
    }

    async fn exchange(
        process: &tokio::sync::Mutex<Option<Running>>,
        binary: &Path,
        control: OwnedFd,
        into: Option<OwnedFd>,
    ) -> io::Result<Forked> {
        let mut guard = process.lock().await;
        let running = match guard.take() {
            Some(running) => running,
            None => Running::start(binary)?,
        };
        let mut fds = vec![control.as_raw_fd()];
        fds.extend(into.as_ref().map(AsRawFd::as_raw_fd));
        match running.request(&fds).await {
            Ok(Answer::Forked(pid, born_in_cgroup)) => {
                *guard = Some(running);
                // The helper is our child (CLONE_PARENT) and unreaped: its
                // pid names it until we reap it.
                let pidfd = sys::pidfd_open(pid)?;
                Ok(Forked {
                    pid,
                    pidfd,
                    born_in_cgroup,
                })
            }
            Ok(Answer::Failed(error)) => {
                *guard = Some(running);
                Err(error)
            }
            Err(error) => {
                // Gone or confused: reaped, and a new one next time.
                drop(running.socket);
                let pidfd = running.pidfd;
                tokio::spawn(crate::children::reap(pidfd));
                Err(error)
            }
        }
    }
}

enum Answer {
    Forked(libc::pid_t, bool),
    Failed(io::Error),
}

impl Running {
    fn start(binary: &Path) -> io::Result<Running> {
        let (ours, theirs) = sys::seqpacket_pair()?;
        let (pid, _) = crate::children::spawn_process(binary, ZYGOTE_ARG, &theirs, None)?;
        drop(theirs);
        let pidfd = sys::pidfd_open(pid)?;
        let flags = rustix::fs::fcntl_getfl(&ours)?;
        rustix::fs::fcntl_setfl(&ours, flags | rustix::fs::OFlags::NONBLOCK)?;
        let socket = crate::children::register(ours)?;
        Ok(Running { socket, pidfd })
    }

    async fn request(&self, fds: &[RawFd]) -> io::Result<Answer> {
        loop {
            let mut guard = self.socket.writable().await?;
            match guard.try_io(|fd| sys::send_with_fds(fd.as_raw_fd(), REQUEST, fds)) {
                Ok(result) => break result?,
                Err(_would_block) => continue,
            }
        }
        let mut buf = [0u8; ANSWER_BYTES];
        let len = loop {
            let mut guard = self.socket.readable().await?;
            match guard
                .try_io(|fd| sys::recv_with_fds(fd.as_raw_fd(), &mut buf, libc::MSG_DONTWAIT))
            {
                Ok(result) => break result?.0,
                Err(_would_block) => continue,
            }
        };
        if len != ANSWER_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the zygote ended",
            ));
        }
        let word = |at: usize| i32::from_le_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
        Ok(match word(0) {
            pid if pid > 0 => Answer::Forked(pid, word(4) != 0),
            errno => Answer::Failed(io::Error::from_raw_os_error(-errno)),
        })
    }
}
