//! Init's part of reaching a container's port from outside:
//! a TCP connection to `127.0.0.1:<port>` started from inside the
//! container's network namespace, its socket handed to the engine.
//!
//! The namespace keeps no inbound interface: the only way in is a socket
//! init makes here, on the engine's request, to loopback. Init is pid 1
//! and single-threaded, so nothing here may block: the socket is
//! non-blocking and the connect only *started* (the engine awaits it and
//! reads `SO_ERROR`), and the reply socket is non-blocking too (a fresh
//! pair holds one small record without waiting; an engine that gave up
//! already costs an `EPIPE`, ignored).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::protocol::ConnectReply;
use crate::sys;
use shellgate_sandbox_api::ports::MIN_EXPOSED_PORT;

/// Serves one `Request::Connect`: `passed` must be the reply socket alone
/// (anything else is dropped, which the engine sees as end of stream).
pub(super) fn connect(port: u16, passed: Vec<OwnedFd>) {
    let Ok([reply]) = <[OwnedFd; 1]>::try_from(passed) else {
        return;
    };
    // SAFETY: fcntl on a descriptor we own; O_NONBLOCK changes only how
    // our sends on it wait.
    unsafe { libc::fcntl(reply.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
    // Below 1024 listen only the egress proxy's sockets (no command can
    // bind there): never a way back out through them. The engine refuses
    // these ports too; this holds even if it did not.
    let started = if port < MIN_EXPOSED_PORT {
        Err(libc::EACCES)
    } else {
        start_connect(port)
    };
    let _ = match started {
        Ok(socket) => sys::send_with_fds(
            reply.as_raw_fd(),
            &ConnectReply { errno: 0 }.encode(),
            &[socket.as_raw_fd()],
        ),
        Err(errno) => sys::send_with_fds(reply.as_raw_fd(), &ConnectReply { errno }.encode(), &[]),
    };
}

/// A non-blocking TCP socket whose connect to `127.0.0.1:port` has been
/// started (or already finished, either way: its `SO_ERROR` tells).
fn start_connect(port: u16) -> Result<OwnedFd, i32> {
    // SAFETY: socket() with constant arguments.
    let fd = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(last_errno());
    }
    // SAFETY: `fd` is a new descriptor owned here alone.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    let address = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: `address` is a valid sockaddr_in for the length given.
    let connected = unsafe {
        libc::connect(
            socket.as_raw_fd(),
            (&address as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if connected == 0 {
        return Ok(socket);
    }
    match last_errno() {
        // Under way: the engine waits for it to finish, not init.
        libc::EINPROGRESS | libc::EINTR => Ok(socket),
        errno => Err(errno),
    }
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}
