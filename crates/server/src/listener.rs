//! The HTTP listener: connections are accepted under a cap and served by
//! hyper with timeouts, so that sockets nobody uses cannot take the server
//! down.
//!
//! - **A cap on open connections** (`max_connections`), with the limit on
//!   open files raised at start-up where allowed. At the cap, the oldest
//!   connection that has not yet sent a request is closed to make room: idle
//!   unauthenticated sockets are shed first, clients that talk are served.
//! - **A header-read timeout**: a connection must send a whole request
//!   header within `header_read_timeout_secs` of opening or of its previous
//!   response (slow headers and idle keep-alive connections are closed).
//! - **Slow bodies are cut off**: a request body that sends nothing for
//!   `body_read_timeout_secs`, or less than [`MIN_BODY_RATE`] on average
//!   after that, fails (the request gets a 408).
//! - Out of descriptors (`EMFILE`), the accept loop sheds a connection and
//!   backs off instead of spinning.
//! - Upgrades (`101 Switching Protocols`: WebSockets, a container's ports'
//!   relayed upgrades) are served; each request carries the client's
//!   address ([`ClientAddr`], for `X-Forwarded-For`).
//! - Every request's target is checked before the router sees it
//!   (`canonical::guard`: one spelling of each path, for every role).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::Router;
use http_body::{Body as _, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};
use tokio::time::{Instant, Sleep};

use crate::config::Config;

/// The slowest average rate a request body may arrive at once its first
/// `body_read_timeout_secs` have passed.
pub const MIN_BODY_RATE: u64 = 1024;

/// The most a connection buffers each way: a request's head must fit (a
/// larger one is refused with 431), and a response body's pieces are taken
/// from it only while less than this waits to be written. So a client that
/// stops reading a stream (a process's output, a model's events) holds this
/// much of the server's memory, not hyper's default of ~400 KiB.
const CONNECTION_BUFFER_BYTES: usize = 64 * 1024;

/// Text of the error a cut-off body reports (mapped to 408 by the extractors).
pub const BODY_TIMEOUT: &str = "the request body arrived too slowly";

/// The listener's bounds.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
}

impl Limits {
    pub fn from_config(config: &Config) -> Self {
        Self {
            max_connections: config.server.max_connections,
            header_read_timeout: Duration::from_secs(config.server.header_read_timeout_secs),
            body_read_timeout: Duration::from_secs(config.server.body_read_timeout_secs),
        }
    }
}

/// The address a request's connection came from (a request extension).
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub std::net::SocketAddr);

/// What the accept loop knows of one connection.
#[derive(Default)]
struct Connection {
    /// Whether it has sent a complete request header.
    served: AtomicBool,
    /// Closes it.
    close: Notify,
}

/// Connections that have not sent a request yet, oldest first (others
/// and dead ones are skipped lazily).
#[derive(Default)]
struct Unserved(Mutex<VecDeque<Weak<Connection>>>);

impl Unserved {
    fn push(&self, connection: &Arc<Connection>, cap: usize) {
        let mut queue = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if queue.len() > cap.saturating_mul(2) {
            queue.retain(|c| {
                c.upgrade()
                    .is_some_and(|c| !c.served.load(Ordering::Relaxed))
            });
        }
        queue.push_back(Arc::downgrade(connection));
    }

    /// Closes the oldest connection that never sent a request; whether one was.
    fn evict_one(&self) -> bool {
        let mut queue = self.0.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(weak) = queue.pop_front() {
            if let Some(connection) = weak.upgrade() {
                if !connection.served.load(Ordering::Relaxed) {
                    connection.close.notify_one();
                    return true;
                }
            }
        }
        false
    }
}

/// Raises the soft limit on open files to the hard one (and, as root, the
/// hard one up to the kernel's `nr_open`), so the connection cap, not the
/// descriptor table, is what bounds connections. Returns the soft limit.
fn raise_open_file_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the rlimit we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 1024;
    }
    let nr_open: u64 = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(limit.rlim_max);
    let wanted = libc::rlimit {
        rlim_cur: limit.rlim_max.max(nr_open.min(1 << 20)),
        rlim_max: limit.rlim_max.max(nr_open.min(1 << 20)),
    };
    // SAFETY: setrlimit reads the rlimit we pass. Raising the hard limit
    // needs CAP_SYS_RESOURCE; without it, fall back to soft = hard.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &wanted) } == 0 {
        return wanted.rlim_cur;
    }
    let soft = libc::rlimit {
        rlim_cur: limit.rlim_max,
        rlim_max: limit.rlim_max,
    };
    // SAFETY: as above, within the current hard limit.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &soft) } == 0 {
        return soft.rlim_cur;
    }
    limit.rlim_cur
}

/// Serves `router` on `listener` until `shutdown` completes, then lets the
/// requests in flight finish (for at most 30 s).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let open_files = raise_open_file_limit();
    // Descriptors are also needed by containers (a few each), the store and
    // uploads: connections get at most half of them.
    let cap = limits
        .max_connections
        .min((open_files / 2).max(64) as usize);
    if cap < limits.max_connections {
        tracing::warn!(
            open_files,
            "max_connections lowered to {cap}: the open-file limit cannot hold more"
        );
    }
    // Checked before any routing: no router (nor a replica's client)
    // reads a path differently from what was checked.
    let router = tower::Layer::layer(&axum::middleware::from_fn(crate::canonical::guard), router);
    // Outermost: every error, the path guard's too, in the envelope of the
    // dialect the request's route speaks.
    let router = tower::Layer::layer(&axum::middleware::from_fn(crate::error::in_dialect), router);
    let slots = Arc::new(Semaphore::new(cap));
    let unserved = Arc::new(Unserved::default());
    // Graceful shutdown by hand (hyper-util's watcher cannot take a
    // connection with upgrades): each connection task holds an `alive`
    // sender and watches `stop`; at shutdown they finish their requests,
    // and the last sender dropped ends the wait.
    // Memory the connections freed goes back to the kernel (see `allocator`).
    let trimmer = crate::allocator::spawn_trimmer();
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let (alive, mut all_done) = tokio::sync::mpsc::channel::<()>(1);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(CONNECTION_BUFFER_BYTES)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors (or memory): make room, and back off
                // rather than spin on an error that repeats at once.
                tracing::warn!("accept failed: {e}");
                unserved.evict_one();
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let permit = match Arc::clone(&slots).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                unserved.evict_one();
                let wait = Arc::clone(&slots).acquire_owned();
                match tokio::time::timeout(Duration::from_secs(1), wait).await {
                    Ok(Ok(permit)) => permit,
                    // Every connection is busy with a request: refuse this one.
                    _ => continue,
                }
            }
        };
        let _ = stream.set_nodelay(true);
        let connection = Arc::new(Connection::default());
        unserved.push(&connection, cap);
        let service = {
            let connection = Arc::clone(&connection);
            let router = router.clone();
            hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
                connection.served.store(true, Ordering::Relaxed);
                let mut router = router.clone();
                let mut request = request.map(|body| Body::new(TimedBody::new(body, limits)));
                request.extensions_mut().insert(ClientAddr(peer));
                tower_service::Service::call(&mut router, request)
            })
        };
        // With upgrades: a process's WebSocket takes over its
        // connection after the 101.
        let served = builder
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades();
        let mut stopping = stopping.clone();
        let alive = alive.clone();
        tokio::spawn(async move {
            let _alive = alive;
            tokio::pin!(served);
            tokio::select! {
                _ = served.as_mut() => {}
                () = connection.close.notified() => {}
                _ = async { stopping.wait_for(|stop| *stop).await.map(|_| ()) } => {
                    served.as_mut().graceful_shutdown();
                    tokio::select! {
                        _ = served.as_mut() => {}
                        () = connection.close.notified() => {}
                    }
                }
            }
            drop(permit);
            crate::allocator::trim_soon();
        });
    }
    drop(listener);
    let _ = stop.send(true);
    drop(alive);
    if tokio::time::timeout(Duration::from_secs(30), all_done.recv())
        .await
        .is_err()
    {
        tracing::warn!("requests still running after 30 s of shutdown were cut off");
    }
    trimmer.abort();
    Ok(())
}

/// Most bytes of a request body its handler left unread (an early refusal:
/// 401, 403, 413) that are still read after the answer, and for how long.
/// hyper closes a connection whose body is unread, and a client still
/// writing that body then sees a broken pipe instead of the answer.
const DRAIN_UNREAD_BYTES: u64 = 1 << 20;
const DRAIN_UNREAD_FOR: Duration = Duration::from_secs(5);

/// A request body with an idle timeout and a minimum average rate; what
/// its handler leaves unread is drained (within bounds) when it is dropped.
struct TimedBody {
    /// Always there but in `drop`, which hands it to the drain.
    inner: Option<Incoming>,
    idle: Duration,
    started: Instant,
    received: u64,
    timer: Pin<Box<Sleep>>,
    /// It was cut off as too slow: not worth draining.
    cut_off: bool,
}

impl TimedBody {
    fn new(inner: Incoming, limits: Limits) -> Self {
        let idle = limits.body_read_timeout;
        Self {
            inner: Some(inner),
            idle,
            started: Instant::now(),
            received: 0,
            timer: Box::pin(tokio::time::sleep(idle)),
            cut_off: false,
        }
    }

    fn too_slow(&mut self) -> axum::BoxError {
        self.cut_off = true;
        format!(
            "{BODY_TIMEOUT} ({} bytes in {} s; at least {MIN_BODY_RATE} bytes/s is needed, and no \
             pause over {} s)",
            self.received,
            self.started.elapsed().as_secs(),
            self.idle.as_secs()
        )
        .into()
    }
}

impl http_body::Body for TimedBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.received += data.len() as u64;
                }
                let elapsed = this.started.elapsed();
                if let Some(after_grace) = elapsed.checked_sub(this.idle) {
                    if this.received < MIN_BODY_RATE * after_grace.as_secs() {
                        return Poll::Ready(Some(Err(this.too_slow())));
                    }
                }
                this.timer.as_mut().reset(Instant::now() + this.idle);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                if this.timer.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Some(Err(this.too_slow())));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Incoming::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Incoming::size_hint)
    }
}

impl Drop for TimedBody {
    fn drop(&mut self) {
        let Some(mut unread) = self.inner.take() else {
            return;
        };
        if self.cut_off || unread.is_end_stream() {
            return;
        }
        // A body declared longer than the bound is not read: the
        // connection closes, as it would have.
        if unread.size_hint().lower() > DRAIN_UNREAD_BYTES {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let drained = async {
                let mut read = 0u64;
                while let Some(Ok(frame)) =
                    std::future::poll_fn(|cx| Pin::new(&mut unread).poll_frame(cx)).await
                {
                    read += frame.data_ref().map_or(0, |data| data.len() as u64);
                    if read > DRAIN_UNREAD_BYTES {
                        return;
                    }
                }
            };
            let _ = tokio::time::timeout(DRAIN_UNREAD_FOR, drained).await;
        });
    }
}
