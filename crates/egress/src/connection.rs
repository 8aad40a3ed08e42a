//! One connection of a container's proxy before it is checked: what is
//! known of it for its log entry, its head read within a deadline, and
//! the connection to where it goes.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::TcpStream;

use crate::wire::MAX_HEAD;

/// How long a client may take to say where it goes.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connecting to a destination may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What is known of one connection so far, for its log entry.
#[derive(Debug, Clone, Default)]
pub(crate) struct Seen {
    pub requested: Option<String>,
    pub server_name: Option<String>,
    pub address: Option<IpAddr>,
    pub port: u16,
}

/// Reads from `stream` into `buffer` until `done` says enough (or the head
/// is too long, the client stops, or it takes too long).
pub(crate) async fn read_head<S: AsyncRead + Unpin, T>(
    stream: &mut S,
    buffer: &mut Vec<u8>,
    mut done: impl FnMut(&[u8]) -> Option<T>,
) -> Option<T> {
    let deadline = tokio::time::Instant::now() + HEAD_TIMEOUT;
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(result) = done(buffer) {
            return Some(result);
        }
        if buffer.len() >= MAX_HEAD {
            return None;
        }
        let read = tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await;
        match read {
            Ok(Ok(n)) if n > 0 => buffer.extend_from_slice(&chunk[..n]),
            _ => return None,
        }
    }
}

/// Connects to `destination` within [`CONNECT_TIMEOUT`].
pub(crate) async fn connect_to(destination: SocketAddr) -> Result<TcpStream, String> {
    match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(destination)).await {
        Ok(Ok(stream)) => {
            let _ = stream.set_nodelay(true);
            Ok(stream)
        }
        Ok(Err(e)) => Err(format!("{destination} could not be reached: {e}")),
        Err(_) => Err(format!("{destination} did not answer")),
    }
}
