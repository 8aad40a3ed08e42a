//! A container's TCP port reached from outside: the connection
//! a backend hands the server, and why one could not be made.
//!
//! The server proxies HTTP and WebSocket traffic over a [`PortConnection`];
//! the backend decides how the socket reaches the container's own network
//! (the local engine has the container's init create it inside the
//! container's network namespace), so the sandbox never gains an inbound
//! interface.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Lowest port a container may expose: below it only the egress proxy's
/// sockets listen (and no command can bind there).
pub use shellgate_wire::ports::MIN_EXPOSED_PORT;

/// A connected TCP stream to a port inside a container. While it is open
/// the container counts it in flight (it is busy: not suspended under an
/// open WebSocket), through whatever the backend put in `held`.
pub struct PortConnection {
    stream: tokio::net::TcpStream,
    /// Dropped with the connection: the backend's in-flight mark and its
    /// share of the container's connection cap.
    _held: Box<dyn Send + Sync>,
}

impl PortConnection {
    pub fn new(stream: tokio::net::TcpStream, held: impl Send + Sync + 'static) -> Self {
        Self {
            stream,
            _held: Box::new(held),
        }
    }
}

impl std::fmt::Debug for PortConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortConnection")
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

impl AsyncRead for PortConnection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for PortConnection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// Why a port of a container could not be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortFailure {
    /// Nothing listens there (the connection was refused).
    NotListening,
    /// The container is stopped (suspended): nothing can listen in it, and
    /// a request to a port does not wake it.
    Suspended,
    /// The listener did not accept in time (its backlog is full).
    TimedOut,
    /// The container has as many proxied connections open as it may.
    TooManyConnections { limit: usize },
}

impl std::fmt::Display for PortFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PortFailure::NotListening => f.write_str("nothing listens on it in the container"),
            PortFailure::Suspended => f.write_str(
                "the container is suspended, so nothing listens in it (a request to a port does \
                 not wake it: run a command, or start the server again, first)",
            ),
            PortFailure::TimedOut => {
                f.write_str("its listener did not accept the connection in time")
            }
            PortFailure::TooManyConnections { limit } => write!(
                f,
                "the container already has {limit} proxied connections open, its limit"
            ),
        }
    }
}
