//! A container's TCP port reached from outside: the engine asks
//! the container's init for a socket connected (or connecting) to
//! `127.0.0.1:<port>` inside the container's own network namespace, awaits
//! the connection and hands it to the server as a [`PortConnection`].
//!
//! Nothing is opened towards the container otherwise: it keeps no inbound
//! interface, and a socket made here can only reach its loopback, so never
//! another container or the host. A stopped container is not started for
//! it (nothing could be listening in it). Each open connection counts in
//! flight (the container is busy: not suspended under an open WebSocket)
//! and against the container's cap of [`MAX_PORT_CONNECTIONS`].

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::container::{Container, InFlight};
use crate::children::register;
use crate::error::{IoContext, SandboxError};
use crate::protocol::{ConnectReply, Request};
use crate::sys;
use shellgate_sandbox_api::ports::{PortConnection, PortFailure, MIN_EXPOSED_PORT};

/// Most proxied connections one container may have open at once: each holds
/// a descriptor in the server and a socket in the container.
pub const MAX_PORT_CONNECTIONS: usize = 256;

/// How long a listener in the container has to accept: a loopback connect
/// finishes at once unless the listener's backlog is full.
const ACCEPT_WITHIN: Duration = Duration::from_secs(10);

/// One of a container's open port connections (see [`MAX_PORT_CONNECTIONS`]).
struct PortSlot(Arc<AtomicUsize>);

impl PortSlot {
    fn take(open: &Arc<AtomicUsize>, port: u16) -> Result<Self, SandboxError> {
        let taken = open.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            (n < MAX_PORT_CONNECTIONS).then_some(n + 1)
        });
        match taken {
            Ok(_) => Ok(Self(Arc::clone(open))),
            Err(_) => Err(SandboxError::Port {
                port,
                failure: PortFailure::TooManyConnections {
                    limit: MAX_PORT_CONNECTIONS,
                },
            }),
        }
    }
}

impl Drop for PortSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What an open connection holds until it is dropped.
struct Held {
    _in_flight: InFlight,
    _slot: PortSlot,
}

/// A connection to `port` in running container `id`, counted in flight
/// and against its cap until dropped.
pub(super) async fn connect(
    container: Arc<Container>,
    id: &str,
    port: u16,
) -> Result<PortConnection, SandboxError> {
    if port < MIN_EXPOSED_PORT {
        return Err(SandboxError::InvalidRequest {
            param: "port",
            message: format!(
                "port {port} is privileged: only ports {MIN_EXPOSED_PORT} to 65535 can be reached"
            ),
        });
    }
    let (running, in_flight) = {
        let state = container.state.lock().await;
        if container.destroyed() {
            return Err(SandboxError::NotFound(id.to_owned()));
        }
        match state.as_ref() {
            // Counted under the state lock, so a suspension decided
            // after this sees the container busy.
            Some(running) if running.alive() => (Arc::clone(running), container.begin()),
            _ => {
                return Err(SandboxError::Port {
                    port,
                    failure: PortFailure::Suspended,
                })
            }
        }
    };
    let slot = PortSlot::take(container.port_connections(), port)?;
    let (ours, theirs) = sys::seqpacket_pair().context(|| "socketpair".into())?;
    running.send(&Request::Connect { port }, &[&theirs]).await?;
    // Only init holds the other end now: its exit (or an init that
    // does not know the request) shows as end of stream, never a hang.
    drop(theirs);
    let reply = register(ours).context(|| "register the connect reply socket".into())?;
    let mut record = [0u8; ConnectReply::SIZE + 1];
    let (length, mut fds) = loop {
        let mut guard = reply
            .readable()
            .await
            .context(|| "wait for init's connect reply".into())?;
        match guard.try_io(|fd| sys::recv_with_fds(fd.as_raw_fd(), &mut record, libc::MSG_DONTWAIT))
        {
            Ok(Ok(received)) => break received,
            Ok(Err(e)) => return Err(SandboxError::io("read init's connect reply", e)),
            Err(_would_block) => continue,
        }
    };
    let answer = ConnectReply::decode(&record[..length]).ok_or(SandboxError::ContainerGone)?;
    match (answer.errno, fds.pop()) {
        (0, Some(socket)) if fds.is_empty() => {
            let held = Held {
                _in_flight: in_flight,
                _slot: slot,
            };
            finish_connect(socket, port, held).await
        }
        (0, _) => Err(SandboxError::Setup(
            "init's connect reply came without exactly one socket".into(),
        )),
        (errno, _) => Err(connect_error(port, errno)),
    }
}

/// Awaits a connect init started and reads its outcome (`SO_ERROR`).
async fn finish_connect(
    socket: std::os::fd::OwnedFd,
    port: u16,
    held: Held,
) -> Result<PortConnection, SandboxError> {
    let stream = std::net::TcpStream::from(socket);
    stream
        .set_nonblocking(true)
        .context(|| "set the port connection non-blocking".into())?;
    let stream = tokio::net::TcpStream::from_std(stream)
        .context(|| "register the port connection".into())?;
    match tokio::time::timeout(ACCEPT_WITHIN, stream.writable()).await {
        Err(_) => {
            return Err(SandboxError::Port {
                port,
                failure: PortFailure::TimedOut,
            })
        }
        Ok(waited) => waited.context(|| "wait for the port connection".into())?,
    }
    match stream.take_error() {
        Ok(None) => {}
        Ok(Some(e)) => return Err(connect_error(port, e.raw_os_error().unwrap_or(libc::EIO))),
        Err(e) => return Err(SandboxError::io("read the port connection's SO_ERROR", e)),
    }
    // Writable with no error can still be a refused connect seen late on
    // some kernels: a connected socket has a peer.
    if let Err(e) = stream.peer_addr() {
        return Err(connect_error(port, e.raw_os_error().unwrap_or(libc::EIO)));
    }
    let _ = stream.set_nodelay(true);
    Ok(PortConnection::new(stream, held))
}

fn connect_error(port: u16, errno: i32) -> SandboxError {
    match errno {
        libc::ECONNREFUSED | libc::ENOTCONN | libc::ECONNRESET => SandboxError::Port {
            port,
            failure: PortFailure::NotListening,
        },
        libc::ETIMEDOUT => SandboxError::Port {
            port,
            failure: PortFailure::TimedOut,
        },
        errno => SandboxError::io(
            format!("connect to port {port} in the container"),
            std::io::Error::from_raw_os_error(errno),
        ),
    }
}
