//! Bytes relayed both ways between a container's connection and its
//! upstream, counted as they are written.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Relays both ways until both sides are done or either fails; returns
/// the bytes written each way (client to upstream, upstream to client).
///
/// The counts are of bytes actually written, kept even when the relay ends
/// in an error: `copy_bidirectional` reports nothing at all then, so a
/// download cut short by a reset was logged as if it had carried no bytes.
pub async fn relay<A, B>(client: &mut A, upstream: &mut B) -> (u64, u64)
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let (mut upstream_read, mut upstream_write) = tokio::io::split(upstream);
    let (mut out, mut back) = (0u64, 0u64);
    {
        let to_upstream = pump(&mut client_read, &mut upstream_write, &mut out);
        let to_client = pump(&mut upstream_read, &mut client_write, &mut back);
        tokio::pin!(to_upstream, to_client);
        // One direction ending cleanly (end of file, passed on as a
        // shutdown) leaves the other running; an error ends both.
        tokio::select! {
            done = &mut to_upstream => if done.is_ok() { let _ = to_client.await; },
            done = &mut to_client => if done.is_ok() { let _ = to_upstream.await; },
        }
    }
    (out, back)
}

/// Copies `from` to `to` until end of file (then shuts `to` down),
/// adding every byte written to `written`.
async fn pump<R, W>(from: &mut R, to: &mut W, written: &mut u64) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let read = from.read(&mut buffer).await?;
        if read == 0 {
            return to.shutdown().await;
        }
        let mut at = 0;
        while at < read {
            let n = to.write(&buffer[at..read]).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            at += n;
            *written += n as u64;
        }
        to.flush().await?;
    }
}
