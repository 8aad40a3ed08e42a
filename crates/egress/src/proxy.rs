//! Serving one container's egress: its HTTP (port 80) and TLS (port 443)
//! connections and its DNS queries, arriving on sockets that live in the
//! container's network namespace (created there by its init, served here).
//!
//! Names come from the request itself (TLS SNI, HTTP `Host`, a `CONNECT`
//! target, an absolute URL), never from the address alone. For a
//! transparent connection the address the container connected to must be
//! one this proxy's DNS gave it for that very name (a `Host` or SNI that
//! differs from the name resolved is refused), and the proxy connects to
//! that exact, already checked address: no second lookup to rebind. For a
//! connection through `HTTP(S)_PROXY` the proxy resolves the name itself,
//! once, and connects to the address it checked. TLS is terminated (see
//! [`crate::intercept`]) unless the policy lets the name through
//! untouched (`tls_passthrough_domains`). Every HTTP request, plain or
//! inside TLS, is read strictly ([`wire::request_head`]: a malformed one
//! is a 400, never forwarded) and forwarded rebuilt, one request per
//! connection (`Connection: close`) with exactly its body (see
//! [`crate::exchange`]), so every request is one the proxy checked.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::Semaphore;

use crate::budget::{TokenBucket, Unlogged};
use crate::connection::{connect_to, read_head, Seen};
use crate::denials::{Denial, Denials, Told};
use crate::dns;
use crate::exchange::{self, error_response, Answering, ExchangeError, Exchanged, Outgoing};
use crate::intercept::{ConnectionLog, Interceptor};
use crate::policy::{forbidden_address, normalize, Allowlist, Exceptions, Pattern};
use crate::relay::relay;
use crate::resolve::Resolver;
use crate::secrets::Masker;
use crate::wire::{self, Head, Hello, RequestHead};

/// Connections one container may have through the proxy at once.
const MAX_CONNECTIONS: usize = 256;
/// DNS lookups one container may have in flight at once.
const MAX_LOOKUPS: usize = 16;
/// How long a DNS answer may be cached by the container.
const DNS_TTL: u32 = 30;
/// Most (address, name) pairs remembered from DNS answers; past it the
/// memory starts again (the container resolves again after its TTL).
const MAX_ANSWERS: usize = 16_384;
/// How often the aggregate row of lookups not logged one by one is
/// written (when there are any).
const AGGREGATE_EVERY: Duration = Duration::from_secs(1);
/// Connection records one container may have waiting for room in the log
/// queue. Each connection waits (holding its connection slot) until its
/// record is queued, so at most about [`MAX_CONNECTIONS`] wait at once.
const MAX_BACKLOG: usize = 4 * MAX_CONNECTIONS;

/// How many DNS lookups a container may make, and log one row each.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LookupLimits {
    /// Lookups answered per second (beyond `burst`); the rest are refused
    /// at once (REFUSED), never asked upstream: a wildcard allowlist
    /// cannot carry thousands of names a second out.
    pub rate: f64,
    pub burst: f64,
    /// Lookups logged one row each per second (beyond `log_burst`); the
    /// rest, and the refused ones, are counted in one aggregate row a
    /// second.
    pub log_rate: f64,
    pub log_burst: f64,
}

impl Default for LookupLimits {
    fn default() -> Self {
        Self {
            rate: 50.0,
            burst: 100.0,
            log_rate: 20.0,
            log_burst: 50.0,
        }
    }
}

/// The verdict on one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Allowed,
    Denied,
    /// Not an attempt: something the container's user should know (its
    /// secrets are gone after a restart).
    Notice,
    /// Not one attempt: DNS lookups counted together (see
    /// [`Attempt::unlogged`]).
    Aggregated,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allowed => "allowed",
            Verdict::Denied => "denied",
            Verdict::Notice => "notice",
            Verdict::Aggregated => "aggregated",
        }
    }
}

/// One attempt to leave a container, for the egress log.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Attempt {
    /// Seconds since the Unix epoch.
    pub time: i64,
    pub container: String,
    /// `http`, `https`, `connect` (through a proxy variable), `dns`, or
    /// `secret` (a note about a container's secrets).
    pub kind: &'static str,
    /// The name the container asked for: its DNS question, the name its
    /// DNS answer gave the address it connected to, a `CONNECT` target or
    /// an absolute URL's host.
    pub requested_name: Option<String>,
    /// The TLS SNI or HTTP `Host` the connection carried.
    pub server_name: Option<String>,
    /// The address connected to (or that the container tried).
    pub address: Option<IpAddr>,
    pub port: u16,
    pub verdict: Verdict,
    pub reason: String,
    /// Bytes from the container to the destination, and back.
    pub bytes_out: u64,
    pub bytes_in: u64,
    pub duration_ms: u64,
    /// For an aggregate row (verdict `aggregated`): the lookups it stands
    /// for, which have no row of their own.
    pub unlogged: Option<Unlogged>,
}

/// Where attempts go: one bounded queue with two lanes. DNS lookups may
/// only use its first half (beyond that, and beyond a container's log
/// budget, they are counted in an aggregate row); connection attempts and
/// aggregate rows may use all of it and, when it is full, wait for room
/// (each connection holds its slot until its record is queued), so a
/// flood of lookups never costs a connection its record, and a flood of
/// connections slows down the flooder instead of losing records.
pub type AttemptSink = tokio::sync::mpsc::Sender<Attempt>;

/// What every container's proxy shares: the operator's settings.
#[derive(Debug)]
pub struct Settings {
    pub resolver: Resolver,
    /// Names and address ranges the operator lets reach otherwise
    /// forbidden addresses.
    pub exceptions: Exceptions,
    pub log: AttemptSink,
    /// Records lost: the log closed, or a container's backlog of
    /// connection records full (not expected: see [`MAX_BACKLOG`]).
    pub dropped: AtomicU64,
    /// Each container's DNS budget.
    pub lookups: LookupLimits,
    /// How the proxy verifies the servers it forwards secrets to.
    pub upstream_tls: Arc<rustls::ClientConfig>,
}

/// Records queued for the log (DNS lookups may use half of it; see
/// [`AttemptSink`]).
const LOG_QUEUE: usize = 8192;

/// What the operator configures of the proxy, as the configuration file
/// spells it.
#[derive(Debug, Clone, Default)]
pub struct ProxyOptions {
    /// Roots the proxy trusts for the servers it forwards secrets to
    /// (PEM files; none: the system's).
    pub trusted_roots: Vec<std::path::PathBuf>,
    /// The DNS server the proxy asks (`""`: the system's resolver).
    pub dns_server: String,
    /// Names answered with fixed addresses.
    pub hosts: std::collections::BTreeMap<String, Vec<IpAddr>>,
    /// Private addresses or names containers may reach all the same.
    pub private_exceptions: Vec<String>,
}

impl Settings {
    /// The settings `options` describe, and the receiving end of the log;
    /// an error names the option that is wrong.
    pub fn configure(
        options: &ProxyOptions,
    ) -> Result<(Settings, tokio::sync::mpsc::Receiver<Attempt>), String> {
        let upstream_tls = crate::intercept::upstream_tls(&options.trusted_roots)
            .map_err(|e| format!("egress_trusted_roots: {e}"))?;
        let server = match options.dns_server.as_str() {
            "" => None,
            text => Some(
                text.parse()
                    .map_err(|_| format!("egress_dns_server = {text:?} is not an address"))?,
            ),
        };
        let static_hosts: HashMap<String, Vec<IpAddr>> = options
            .hosts
            .iter()
            .map(|(name, addresses)| (normalize(name), addresses.clone()))
            .collect();
        let exceptions = Exceptions::parse(&options.private_exceptions)
            .map_err(|e| format!("egress_private_exceptions: {e}"))?;
        let (log, receiver) = tokio::sync::mpsc::channel(LOG_QUEUE);
        Ok((
            Settings {
                resolver: Resolver {
                    static_hosts,
                    server,
                },
                exceptions,
                log,
                dropped: AtomicU64::new(0),
                lookups: LookupLimits::default(),
                upstream_tls: Arc::new(upstream_tls),
            },
            receiver,
        ))
    }
}

/// What one container's proxy knows.
pub struct ContainerEgress {
    pub container: String,
    /// The names it may reach: replaced whole by [`Serving::set_allowlist`]
    /// (a network update), read once per connection, request and lookup.
    allowlist: std::sync::RwLock<Arc<Allowlist>>,
    settings: Arc<Settings>,
    /// Terminates TLS (every allowed name but the passthrough ones).
    intercept: Option<Arc<Interceptor>>,
    /// Names whose TLS goes through untouched (SNI checked only).
    passthrough: Vec<Pattern>,
    /// Masks the container's secret values in every answer (if it has any).
    masker: Option<Arc<Masker>>,
    /// Addresses this proxy's DNS gave the container, and for which names.
    answers: Mutex<Answers>,
    connections: Arc<Semaphore>,
    /// The DNS budget: lookups answered, lookups logged one by one, and
    /// what was not logged since the last aggregate row.
    lookups: Mutex<LookupBudget>,
    /// Connection records waiting for room in the log queue.
    backlog: Mutex<VecDeque<Attempt>>,
    /// Connections reset unread over [`MAX_CONNECTIONS`] since the last
    /// aggregate row: to port 80, and to port 443.
    over_limit: Mutex<[Unlogged; 2]>,
    /// Its recent denials, for the commands running (see [`crate::denials`]).
    denials: Arc<Denials>,
}

struct LookupBudget {
    answered: TokenBucket,
    logged: TokenBucket,
    unlogged: Unlogged,
}

#[derive(Default)]
struct Answers {
    names: HashMap<IpAddr, HashSet<String>>,
    count: usize,
}

/// The sockets of a container's network namespace the proxy serves.
pub struct Sockets {
    pub http: std::net::TcpListener,
    pub https: std::net::TcpListener,
    pub dns: std::net::UdpSocket,
}

/// The serving tasks of one container; dropping this stops them.
pub struct Serving {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    denials: Arc<Denials>,
    egress: Arc<ContainerEgress>,
}

impl Serving {
    /// The container's recent denials: what its command path tells each
    /// command of (see [`crate::denials`]).
    pub fn denials(&self) -> &Denials {
        &self.denials
    }

    /// Replaces the container's allowlist: every connection, request and
    /// lookup begun from now on is checked against `allowlist`; one open
    /// already keeps the verdict it had (nothing is cut).
    pub fn set_allowlist(&self, allowlist: Allowlist) {
        *self
            .egress
            .allowlist
            .write()
            .unwrap_or_else(|p| p.into_inner()) = Arc::new(allowlist);
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Drop for ContainerEgress {
    fn drop(&mut self) {
        // The last aggregate row, and what waits, if the queue has room;
        // what does not fit now is lost, and counted.
        self.flush_unlogged();
        self.try_flush_backlog();
        let lost = self.backlog.get_mut().map_or(0, |b| b.len());
        self.settings
            .dropped
            .fetch_add(lost as u64, Ordering::Relaxed);
    }
}

pub(crate) fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Resets a connection (RST, not FIN): a refused TLS client fails at once.
fn reset(stream: TcpStream) {
    if let Ok(stream) = stream.into_std() {
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: setsockopt reads the linger struct we pass.
        unsafe {
            libc::setsockopt(
                stream.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&linger as *const libc::linger).cast(),
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            )
        };
    }
}

/// A 403 that says why, for a refused HTTP request.
fn forbidden_response(reason: &str, host: Option<&str>) -> Vec<u8> {
    error_response(403, "policy_denied", reason, host)
}

async fn read_client_hello<S: AsyncRead + Unpin>(
    stream: &mut S,
    buffer: &mut Vec<u8>,
) -> Option<Hello> {
    read_head(stream, buffer, |bytes| match wire::client_hello(bytes) {
        Hello::Incomplete => None,
        other => Some(other),
    })
    .await
}

/// A request head, strictly read: `Err(Some(why))` for a malformed one
/// (answered with a 400), `Err(None)` when none came.
async fn read_request_head<S: AsyncRead + Unpin>(
    stream: &mut S,
    buffer: &mut Vec<u8>,
) -> Result<RequestHead, Option<String>> {
    match read_head(stream, buffer, |bytes| match wire::request_head(bytes) {
        Head::Incomplete => None,
        other => Some(other),
    })
    .await
    {
        Some(Head::Request(head)) => Ok(head),
        Some(Head::Bad(why)) => Err(Some(why)),
        _ => Err(None),
    }
}

impl ContainerEgress {
    pub fn new(
        container: String,
        allowlist: Allowlist,
        settings: Arc<Settings>,
        intercept: Option<Arc<Interceptor>>,
        masker: Option<Arc<Masker>>,
        passthrough: &[String],
    ) -> Arc<Self> {
        let limits = settings.lookups;
        let now = Instant::now();
        let egress = Arc::new(Self {
            container,
            allowlist: std::sync::RwLock::new(Arc::new(allowlist)),
            settings,
            intercept,
            passthrough: passthrough
                .iter()
                .filter_map(|p| Pattern::parse(p, false).ok())
                .collect(),
            masker,
            answers: Mutex::new(Answers::default()),
            connections: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
            lookups: Mutex::new(LookupBudget {
                answered: TokenBucket::new(limits.rate, limits.burst, now),
                logged: TokenBucket::new(limits.log_rate, limits.log_burst, now),
                unlogged: Unlogged::default(),
            }),
            backlog: Mutex::new(VecDeque::new()),
            over_limit: Mutex::new([Unlogged::default(); 2]),
            denials: Arc::new(Denials::new()),
        });
        egress
    }

    /// Serves the container's sockets until the result is dropped.
    pub fn serve(self: &Arc<Self>, sockets: Sockets) -> std::io::Result<Serving> {
        for listener in [&sockets.http, &sockets.https] {
            listener.set_nonblocking(true)?;
        }
        sockets.dns.set_nonblocking(true)?;
        let http = TcpListener::from_std(sockets.http)?;
        let https = TcpListener::from_std(sockets.https)?;
        let dns = Arc::new(UdpSocket::from_std(sockets.dns)?);
        let mut tasks = Vec::new();
        for (listener, tls) in [(http, false), (https, true)] {
            let egress = Arc::clone(self);
            tasks.push(tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        // Out of descriptors, say: try again shortly.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    };
                    let Ok(permit) = Arc::clone(&egress.connections).try_acquire_owned() else {
                        // Not a row each (a flood of them would be one),
                        // but counted in the next aggregate row.
                        egress.over_limit.lock().unwrap_or_else(|p| p.into_inner())
                            [usize::from(tls)]
                        .add_over_connection_limit(now());
                        egress.denials.note(Denial::new(
                            if tls { "https" } else { "http" },
                            None,
                            if tls { 443 } else { 80 },
                            &format!(
                                "reset unread: over the limit of {MAX_CONNECTIONS} connections \
                                 open at once"
                            ),
                        ));
                        reset(stream);
                        continue;
                    };
                    let egress = Arc::clone(&egress);
                    tokio::spawn(async move {
                        let _permit = permit;
                        let _ = stream.set_nodelay(true);
                        if tls {
                            egress.tls(stream).await;
                        } else {
                            egress.http(stream).await;
                        }
                        // The slot is given back once the record is queued.
                        egress.flush_backlog().await;
                    });
                }
            }));
        }
        let egress = Arc::clone(self);
        tasks.push(tokio::spawn(async move { egress.dns(dns).await }));
        Ok(Serving {
            tasks,
            denials: Arc::clone(&self.denials),
            egress: Arc::clone(self),
        })
    }

    pub(crate) fn record(
        &self,
        kind: &'static str,
        seen: Seen,
        verdict: Verdict,
        reason: String,
        (bytes_out, bytes_in): (u64, u64),
        started: Instant,
    ) {
        if verdict == Verdict::Denied {
            tracing::debug!(container = %self.container, kind, %reason, "egress denied");
        }
        let attempt = Attempt {
            time: now(),
            container: self.container.clone(),
            kind,
            requested_name: seen.requested,
            server_name: seen.server_name,
            address: seen.address,
            port: seen.port,
            verdict,
            reason,
            bytes_out,
            bytes_in,
            duration_ms: started.elapsed().as_millis() as u64,
            unlogged: None,
        };
        if kind == "dns" {
            self.log_lookup(attempt);
        } else {
            self.log_always(attempt);
        }
    }

    /// A lookup's record: queued within the container's log budget and the
    /// lookups' half of the queue, else counted for the aggregate row.
    fn log_lookup(&self, attempt: Attempt) {
        let (time, allowed) = (attempt.time, attempt.verdict == Verdict::Allowed);
        let mut budget = self.lookups.lock().unwrap_or_else(|p| p.into_inner());
        let log = &self.settings.log;
        let room = log.capacity() > log.max_capacity() / 2;
        if room && budget.logged.take(Instant::now()) && log.try_send(attempt).is_ok() {
            return;
        }
        budget.unlogged.add(time, allowed, false);
    }

    /// A record that must not be lost (a connection attempt, an aggregate
    /// row, a notice): queued, or kept in the container's backlog until
    /// there is room (see [`Self::flush_backlog`]).
    fn log_always(&self, attempt: Attempt) {
        let mut backlog = self.backlog.lock().unwrap_or_else(|p| p.into_inner());
        let attempt = if backlog.is_empty() {
            match self.settings.log.try_send(attempt) {
                Ok(()) => return,
                Err(tokio::sync::mpsc::error::TrySendError::Full(attempt)) => attempt,
                Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => {
                    self.settings.dropped.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
        } else {
            attempt
        };
        if backlog.len() >= MAX_BACKLOG {
            self.settings.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(container = %self.container, "egress log backlog full: a record was lost");
            return;
        }
        backlog.push_back(attempt);
    }

    /// Waits until the container's backlog of records is queued.
    async fn flush_backlog(&self) {
        loop {
            let next = self
                .backlog
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop_front();
            let Some(attempt) = next else {
                return;
            };
            if self.settings.log.send(attempt).await.is_err() {
                self.settings.dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    }

    /// Queues what of the backlog fits now, without waiting.
    fn try_flush_backlog(&self) {
        let mut backlog = self.backlog.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(attempt) = backlog.pop_front() {
            match self.settings.log.try_send(attempt) {
                Ok(()) => {}
                Err(tokio::sync::mpsc::error::TrySendError::Full(attempt)) => {
                    backlog.push_front(attempt);
                    return;
                }
                Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => {
                    self.settings.dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Whether a lookup of `name` may be answered now (else it is counted
    /// for the aggregate row, noted for the running commands, and refused).
    fn take_lookup(&self, name: &str) -> bool {
        let mut budget = self.lookups.lock().unwrap_or_else(|p| p.into_inner());
        if budget.answered.take(Instant::now()) {
            return true;
        }
        budget.unlogged.add(now(), false, true);
        drop(budget);
        let limits = self.settings.lookups;
        self.denials.note(Denial::new(
            "dns",
            Some(&normalize(name)),
            53,
            &format!(
                "refused unanswered: over this container's DNS rate limit ({} lookups/s, {} at once)",
                limits.rate, limits.burst
            ),
        ));
        false
    }

    /// Writes the aggregate rows of what was not logged one by one since
    /// the last ones (lookups; connections over the limit), if anything.
    fn flush_unlogged(&self) {
        let lookups = std::mem::take(
            &mut self
                .lookups
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .unlogged,
        );
        let [http, https] =
            std::mem::take(&mut *self.over_limit.lock().unwrap_or_else(|p| p.into_inner()));
        for (kind, port, unlogged) in [
            ("dns", 53, lookups),
            ("http", 80, http),
            ("https", 443, https),
        ] {
            if unlogged.total() == 0 {
                continue;
            }
            let time = now();
            let limits = self.settings.lookups;
            self.log_always(Attempt {
                time,
                container: self.container.clone(),
                kind,
                requested_name: None,
                server_name: None,
                address: None,
                port,
                verdict: Verdict::Aggregated,
                reason: unlogged.describe(limits.log_rate, limits.rate, MAX_CONNECTIONS),
                bytes_out: 0,
                bytes_in: 0,
                duration_ms: (time - unlogged.since).max(0) as u64 * 1000,
                unlogged: Some(unlogged),
            });
        }
    }

    /// Logs a refusal and notes it for the running commands: called
    /// *before* the client is told (its 403, 400, 502, reset or NXDOMAIN),
    /// so that a command whose program saw the refusal hears of it (see
    /// [`crate::denials`]).
    pub(crate) fn deny(&self, kind: &'static str, seen: Seen, started: Instant, reason: String) {
        self.note_denial(kind, &seen, &reason);
        self.record(kind, seen, Verdict::Denied, reason, (0, 0), started);
    }

    /// Notes a refusal for the running commands (without logging it).
    pub(crate) fn note_denial(&self, kind: &'static str, seen: &Seen, reason: &str) {
        self.denials
            .note(Self::told(Told::Denied, kind, seen, reason));
    }

    /// Notes, for the running commands, a request that went out with a
    /// placeholder that stays one (see [`Interceptor::stray_placeholders`]).
    pub(crate) fn note_stray(&self, kind: &'static str, seen: &Seen, reason: &str) {
        self.denials
            .note(Self::told(Told::Note, kind, seen, reason));
    }

    /// What a command is told of `seen`.
    fn told(told: Told, kind: &'static str, seen: &Seen, reason: &str) -> Denial {
        // What the program asked for: the name it looked up or tunnelled
        // to, or the SNI or Host it sent, else the address it reached.
        let named = match kind {
            "dns" | "connect" => seen.requested.as_ref().or(seen.server_name.as_ref()),
            _ => seen.server_name.as_ref().or(seen.requested.as_ref()),
        };
        let address = seen.address.map(|a| a.to_string());
        let target = named.or(address.as_ref()).map(String::as_str);
        match told {
            Told::Denied => Denial::new(kind, target, seen.port, reason),
            Told::Note => Denial::note(kind, target, seen.port, reason),
        }
    }

    /// The masker of the container's secret values, if it has any.
    pub(crate) fn masker(&self) -> Option<&Arc<Masker>> {
        self.masker.as_ref()
    }

    /// Logs an exchange: allowed (`allowed`, or `allowed; ` and `note`,
    /// and how it ended if it was cut short), or denied if its answer was
    /// refused.
    pub(crate) fn log_exchange(
        &self,
        kind: &'static str,
        seen: Seen,
        started: Instant,
        (exchanged, result): (Exchanged, Result<(), ExchangeError>),
        note: Option<&str>,
    ) {
        let bytes = (exchanged.bytes_out, exchanged.bytes_in);
        let allowed = match note {
            Some(note) => format!("allowed; {note}"),
            None => "allowed".to_owned(),
        };
        match result {
            Ok(()) => self.record(kind, seen, Verdict::Allowed, allowed, bytes, started),
            // Noted for the running commands by the exchange, before its
            // 502 (`Answering::on_refusal`).
            Err(ExchangeError::Refused(reason)) => {
                self.record(kind, seen, Verdict::Denied, reason, (0, 0), started)
            }
            Err(ExchangeError::Broken(reason)) => self.record(
                kind,
                seen,
                Verdict::Allowed,
                format!("{allowed}; ended early: {reason}"),
                bytes,
                started,
            ),
        }
    }

    /// Whether `name` may be reached at all (listed, not an IP literal).
    fn check_name(&self, name: &str) -> Result<String, String> {
        let name = normalize(name);
        if name.is_empty() {
            return Err("no host name given".into());
        }
        if name.trim_matches(['[', ']']).parse::<IpAddr>().is_ok() {
            return Err(format!(
                "{name} is an IP address; only host names in the allowlist may be reached"
            ));
        }
        let allowlist = Arc::clone(&self.allowlist.read().unwrap_or_else(|p| p.into_inner()));
        if !allowlist.allows(&name) {
            return Err(format!("{name} is not in this container's allowlist"));
        }
        Ok(name)
    }

    fn check_address(&self, name: &str, address: IpAddr) -> Result<(), String> {
        if self.settings.exceptions.allows(name, address) {
            return Ok(());
        }
        match forbidden_address(address) {
            Some(kind) => Err(format!("{name} resolves to {address}, {kind}")),
            None => Ok(()),
        }
    }

    /// The addresses `name` may be reached at (at least one, or why not).
    async fn resolve_checked(&self, name: &str) -> Result<Vec<IpAddr>, String> {
        let addresses = self.settings.resolver.resolve(name).await;
        if addresses.is_empty() {
            return Err(format!("{name} does not resolve"));
        }
        let mut allowed = Vec::new();
        let mut refusal = None;
        for address in addresses {
            match self.check_address(name, address) {
                Ok(()) => allowed.push(address),
                Err(reason) => refusal = Some(reason),
            }
        }
        match (allowed.is_empty(), refusal) {
            (true, Some(reason)) => Err(reason),
            _ => Ok(allowed),
        }
    }

    /// For a transparent connection: the address must be one this proxy's
    /// DNS gave for `name`.
    fn check_answered(&self, name: &str, address: IpAddr) -> Result<(), String> {
        let answered = self
            .answers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .names
            .get(&address)
            .is_some_and(|names| names.contains(name));
        if answered {
            Ok(())
        } else {
            Err(format!(
                "the connection to {address} names {name}, but {address} is not an address \
                 {name} resolved to here"
            ))
        }
    }

    /// The name the container resolved to reach `address`, for the log:
    /// `server_name` if it was one, else every name that gave `address`.
    fn answered_names(&self, address: IpAddr, server_name: Option<&str>) -> Option<String> {
        let answers = self.answers.lock().unwrap_or_else(|p| p.into_inner());
        let names = answers.names.get(&address)?;
        if let Some(name) = server_name.filter(|n| names.contains(*n)) {
            return Some(name.to_owned());
        }
        let mut names: Vec<&str> = names.iter().map(String::as_str).collect();
        names.sort_unstable();
        Some(names.join(","))
    }

    fn remember(&self, name: &str, addresses: &[IpAddr]) {
        let mut answers = self.answers.lock().unwrap_or_else(|p| p.into_inner());
        if answers.count + addresses.len() > MAX_ANSWERS {
            *answers = Answers::default();
        }
        for address in addresses {
            if answers
                .names
                .entry(*address)
                .or_default()
                .insert(name.to_owned())
            {
                answers.count += 1;
            }
        }
    }

    /// The interceptor, unless the policy lets `name`'s TLS through.
    fn intercepting(&self, name: &str) -> Option<&Arc<Interceptor>> {
        if self.passthrough.iter().any(|p| p.matches(name)) {
            return None;
        }
        self.intercept.as_ref()
    }

    /// A connection to port 443: checked by its SNI, then forwarded as is
    /// (or intercepted to put a secret in).
    async fn tls(&self, mut stream: TcpStream) {
        let started = Instant::now();
        let destination = match stream.local_addr() {
            Ok(address) => address,
            Err(_) => return,
        };
        let mut seen = Seen {
            address: Some(destination.ip()),
            port: destination.port(),
            ..Seen::default()
        };
        let mut buffer = Vec::new();
        let hello = read_client_hello(&mut stream, &mut buffer).await;
        if let Some(Hello::ServerName(Some(sni))) = &hello {
            seen.server_name = Some(normalize(sni));
        }
        seen.requested = self.answered_names(destination.ip(), seen.server_name.as_deref());
        let decided = match hello {
            Some(Hello::ServerName(Some(sni))) => self.check_name(&sni).and_then(|name| {
                self.check_answered(&name, destination.ip())?;
                self.check_address(&name, destination.ip())?;
                Ok(name)
            }),
            Some(Hello::ServerName(None)) => Err("TLS without a server name (SNI)".into()),
            _ => Err("not a TLS connection".into()),
        };
        match decided {
            Ok(name) => match self.intercepting(&name) {
                Some(intercept) => {
                    let intercept = Arc::clone(intercept);
                    intercept
                        .serve(
                            self,
                            "https",
                            stream,
                            buffer,
                            name,
                            destination,
                            seen,
                            started,
                        )
                        .await
                }
                None => {
                    self.forward(stream, buffer, "https", seen, destination, started)
                        .await
                }
            },
            Err(reason) => {
                self.deny("https", seen, started, reason);
                reset(stream);
            }
        }
    }

    /// A connection to port 80: a transparent request (checked by its
    /// `Host` against the address), a request through `HTTP_PROXY`
    /// (absolute URL) or a `CONNECT` through `HTTPS_PROXY`.
    async fn http(&self, mut stream: TcpStream) {
        let started = Instant::now();
        let destination = match stream.local_addr() {
            Ok(address) => address,
            Err(_) => return,
        };
        let mut buffer = Vec::new();
        let head = match read_request_head(&mut stream, &mut buffer).await {
            Ok(head) => head,
            Err(why) => {
                let reason = match why {
                    Some(why) => format!("a malformed request: {why}"),
                    None => "not an HTTP request".to_owned(),
                };
                let answer = error_response(400, "bad_request", &reason, None);
                let seen = Seen {
                    address: Some(destination.ip()),
                    port: destination.port(),
                    ..Seen::default()
                };
                self.deny("http", seen, started, reason);
                let _ = stream.write_all(&answer).await;
                return;
            }
        };
        if head.method.eq_ignore_ascii_case("CONNECT") {
            return self.connect(stream, buffer, head, started).await;
        }
        let mut seen = Seen {
            server_name: Some(head.host.host.clone()),
            port: 80,
            ..Seen::default()
        };
        let decided: Result<SocketAddr, String> = async {
            match &head.target_authority {
                // Through HTTP_PROXY (absolute form; the Host agrees, as
                // the parser checked).
                Some(authority) => {
                    seen.requested = Some(authority.host.clone());
                    let name = self.check_name(&authority.host)?;
                    let port = authority.port.unwrap_or(80);
                    if port != 80 {
                        return Err(format!(
                            "port {port} of {name}: only ports 80 and 443 may be reached"
                        ));
                    }
                    let address = self.resolve_checked(&name).await?[0];
                    seen.address = Some(address);
                    Ok(SocketAddr::new(address, 80))
                }
                None => {
                    seen.address = Some(destination.ip());
                    seen.requested =
                        self.answered_names(destination.ip(), seen.server_name.as_deref());
                    let name = self.check_name(&head.host.host)?;
                    if head
                        .host
                        .port
                        .is_some_and(|port| port != destination.port())
                    {
                        return Err(format!(
                            "the Host header names port {:?} on a connection to port {}",
                            head.host.port,
                            destination.port()
                        ));
                    }
                    self.check_answered(&name, destination.ip())?;
                    self.check_address(&name, destination.ip())?;
                    Ok(destination)
                }
            }
        }
        .await;
        match decided {
            Ok(upstream) => {
                self.forward_http(stream, buffer, head, "http", seen, upstream, started)
                    .await
            }
            Err(reason) => {
                let answer = forbidden_response(&reason, seen.server_name.as_deref());
                self.deny("http", seen, started, reason);
                let _ = stream.write_all(&answer).await;
                let _ = stream.shutdown().await;
            }
        }
    }

    /// A checked plain HTTP request (`buffer` holds its head and what
    /// followed it) to the checked `destination`: sent rebuilt, with its
    /// body by its framing; the answer back (masked, for a container with
    /// secrets). No secret is ever put into plain HTTP.
    #[allow(clippy::too_many_arguments)]
    async fn forward_http(
        &self,
        mut client: TcpStream,
        mut buffer: Vec<u8>,
        mut head: RequestHead,
        kind: &'static str,
        seen: Seen,
        destination: SocketAddr,
        started: Instant,
    ) {
        let mut upstream = match connect_to(destination).await {
            Ok(upstream) => upstream,
            Err(reason) => {
                let answer = error_response(502, "upstream_unreachable", &reason, None);
                self.deny(kind, seen, started, reason);
                let _ = client.write_all(&answer).await;
                return;
            }
        };
        if self.masker.is_some() {
            // Frames after an upgrade would reach the container unmasked.
            head.websocket = false;
        }
        let outgoing = Outgoing {
            head: head.forwarded_lines(&head.origin_form, self.masker.is_some(), |_, v| {
                v.to_owned()
            }),
            framing: head.framing,
            body: None,
            http11: head.version == "HTTP/1.1",
        };
        // No secret is put into plain HTTP: a placeholder it carries is
        // told (before anything is forwarded) and logged.
        let strays = match &self.intercept {
            Some(intercept) => intercept.stray_placeholders(&head, &head.host.host, false),
            None => Vec::new(),
        };
        for stray in &strays {
            self.note_stray(kind, &seen, stray);
        }
        let leftover = buffer.split_off(head.length);
        let on_refusal = |reason: &str| self.note_denial(kind, &seen, reason);
        let result = exchange::exchange(
            &mut client,
            leftover,
            outgoing,
            head.expect_continue,
            &mut upstream,
            Answering {
                method: &head.method,
                masker: self.masker.as_ref(),
                websocket: head.websocket,
                client_http11: head.version == "HTTP/1.1",
                on_refusal: Some(&on_refusal),
            },
        )
        .await;
        let note = (!strays.is_empty()).then(|| strays.join("; "));
        self.log_exchange(kind, seen, started, result, note.as_deref());
    }

    /// `CONNECT host:port` through `HTTPS_PROXY`; what goes through the
    /// tunnel must name the same host (TLS SNI, or `Host` for port 80).
    async fn connect(
        &self,
        mut stream: TcpStream,
        mut buffer: Vec<u8>,
        head: RequestHead,
        started: Instant,
    ) {
        // The parser checked the target strictly (host:port, port 1 to
        // 65535 in digits, no user information).
        let Some(target) = head.target_authority.clone() else {
            return;
        };
        let host = target.host.clone();
        let port = target.port.unwrap_or(443);
        let mut seen = Seen {
            requested: Some(host.clone()),
            port,
            ..Seen::default()
        };
        let decided: Result<(String, SocketAddr), String> = async {
            let name = self.check_name(&host)?;
            if port != 443 && port != 80 {
                return Err(format!(
                    "port {port} of {name}: only ports 80 and 443 may be reached"
                ));
            }
            let address = self.resolve_checked(&name).await?[0];
            seen.address = Some(address);
            Ok((name, SocketAddr::new(address, port)))
        }
        .await;
        let (name, destination) = match decided {
            Ok(decided) => decided,
            Err(reason) => {
                let answer = forbidden_response(&reason, seen.requested.as_deref());
                self.deny("connect", seen, started, reason);
                let _ = stream.write_all(&answer).await;
                return;
            }
        };
        buffer.drain(..head.length);
        if stream
            .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            .await
            .is_err()
        {
            return;
        }
        if port == 443 {
            let sni = match read_client_hello(&mut stream, &mut buffer).await {
                Some(Hello::ServerName(Some(sni))) => normalize(&sni),
                _ => String::new(),
            };
            seen.server_name = Some(sni.clone());
            if sni != name {
                self.deny(
                    "connect",
                    seen,
                    started,
                    format!("the tunnel to {name} carried TLS for {sni:?}"),
                );
                reset(stream);
                return;
            }
            if let Some(intercept) = self.intercepting(&name) {
                let intercept = Arc::clone(intercept);
                return intercept
                    .serve(
                        self,
                        "connect",
                        stream,
                        buffer,
                        name,
                        destination,
                        seen,
                        started,
                    )
                    .await;
            }
            return self
                .forward(stream, buffer, "connect", seen, destination, started)
                .await;
        }
        let inner = match read_request_head(&mut stream, &mut buffer).await {
            Ok(inner) if !inner.method.eq_ignore_ascii_case("CONNECT") => inner,
            refused => {
                let reason = match refused {
                    Err(Some(why)) => format!("a malformed request inside the tunnel: {why}"),
                    _ => "not an HTTP request inside the tunnel".to_owned(),
                };
                let answer = error_response(400, "bad_request", &reason, None);
                self.deny("connect", seen, started, reason);
                let _ = stream.write_all(&answer).await;
                return;
            }
        };
        seen.server_name = Some(inner.host.host.clone());
        if inner.host.host != name || inner.host.port.is_some_and(|p| p != 80) {
            let reason = format!(
                "the tunnel to {name} carried a request for {}",
                inner.host.host
            );
            let answer = forbidden_response(&reason, Some(&inner.host.host));
            self.deny("connect", seen, started, reason);
            let _ = stream.write_all(&answer).await;
            return;
        }
        self.forward_http(stream, buffer, inner, "connect", seen, destination, started)
            .await;
    }

    /// Connects to the checked destination, sends `first`, and relays both
    /// ways until either side closes.
    async fn forward(
        &self,
        mut client: TcpStream,
        first: Vec<u8>,
        kind: &'static str,
        seen: Seen,
        destination: SocketAddr,
        started: Instant,
    ) {
        let mut upstream = match connect_to(destination).await {
            Ok(upstream) => upstream,
            Err(reason) => {
                self.deny(kind, seen, started, reason);
                reset(client);
                return;
            }
        };
        if upstream.write_all(&first).await.is_err() {
            let reason = format!("allowed; {destination} closed before the request was sent");
            self.record(kind, seen, Verdict::Allowed, reason, (0, 0), started);
            return;
        }
        let (out, back) = relay(&mut client, &mut upstream).await;
        self.record(
            kind,
            seen,
            Verdict::Allowed,
            "allowed".into(),
            (first.len() as u64 + out, back),
            started,
        );
    }

    /// The container's resolver: allowed names get their checked addresses,
    /// remembered for the connections that follow; anything else is
    /// refused at once.
    async fn dns(self: Arc<Self>, socket: Arc<UdpSocket>) {
        let lookups = Arc::new(Semaphore::new(MAX_LOOKUPS));
        let mut packet = [0u8; 1500];
        let mut aggregate = tokio::time::interval_at(
            tokio::time::Instant::now() + AGGREGATE_EVERY,
            AGGREGATE_EVERY,
        );
        aggregate.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let received = tokio::select! {
                received = socket.recv_from(&mut packet) => received,
                _ = aggregate.tick() => {
                    self.flush_unlogged();
                    self.try_flush_backlog();
                    continue;
                }
            };
            let Ok((length, peer)) = received else {
                continue;
            };
            let Some(question) = dns::parse_query(&packet[..length]) else {
                continue;
            };
            if !self.take_lookup(&question.name) {
                // Over the rate: refused at once, never asked upstream.
                let _ = socket.send_to(&dns::refused(&question), peer).await;
                continue;
            }
            let Ok(permit) = Arc::clone(&lookups).acquire_owned().await else {
                return;
            };
            let (egress, socket) = (Arc::clone(&self), Arc::clone(&socket));
            tokio::spawn(async move {
                let _permit = permit;
                let reply = egress.answer(&question).await;
                let _ = socket.send_to(&reply, peer).await;
            });
        }
    }

    async fn answer(&self, question: &dns::Question) -> Vec<u8> {
        let started = Instant::now();
        let mut seen = Seen {
            requested: Some(normalize(&question.name)),
            port: 53,
            ..Seen::default()
        };
        let name = match self.check_name(&question.name) {
            Ok(name) => name,
            Err(reason) => {
                self.deny("dns", seen, started, reason);
                return dns::answer(question, &[], DNS_TTL, true);
            }
        };
        if question.qtype != dns::A {
            // AAAA and the rest: no records (the container reaches the
            // proxy over IPv4 only), so resolvers move on at once.
            return dns::answer(question, &[], DNS_TTL, false);
        }
        match self.resolve_checked(&name).await {
            Ok(addresses) => {
                let addresses: Vec<IpAddr> =
                    addresses.into_iter().filter(IpAddr::is_ipv4).collect();
                if addresses.is_empty() {
                    return dns::answer(question, &[], DNS_TTL, false);
                }
                self.remember(&name, &addresses);
                seen.address = addresses.first().copied();
                self.record(
                    "dns",
                    seen,
                    Verdict::Allowed,
                    "allowed".into(),
                    (0, 0),
                    started,
                );
                dns::answer(question, &addresses, DNS_TTL, false)
            }
            Err(reason) => {
                self.deny("dns", seen, started, reason);
                dns::answer(question, &[], DNS_TTL, true)
            }
        }
    }
}

/// The interceptor reports each connection it serves to the container's
/// proxy, which logs it.
impl ConnectionLog for ContainerEgress {
    fn deny(&self, kind: &'static str, seen: Seen, started: Instant, reason: String) {
        ContainerEgress::deny(self, kind, seen, started, reason)
    }

    fn note_denial(&self, kind: &'static str, seen: &Seen, reason: &str) {
        ContainerEgress::note_denial(self, kind, seen, reason)
    }

    fn note_stray(&self, kind: &'static str, seen: &Seen, reason: &str) {
        ContainerEgress::note_stray(self, kind, seen, reason)
    }

    fn masker(&self) -> Option<&Arc<Masker>> {
        ContainerEgress::masker(self)
    }

    fn log_exchange(
        &self,
        kind: &'static str,
        seen: Seen,
        started: Instant,
        outcome: (Exchanged, Result<(), ExchangeError>),
        note: Option<&str>,
    ) {
        ContainerEgress::log_exchange(self, kind, seen, started, outcome, note)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use tokio::io::AsyncReadExt;

    /// A proxy for a container allowed `*.a.test`, whose names resolve (by
    /// the operator's fixed hosts, as an exception) to a loopback address
    /// this test serves on port 80; its sockets are plain loopback ones.
    async fn proxy(
        upstream: Ipv4Addr,
    ) -> (
        Arc<ContainerEgress>,
        Serving,
        SocketAddr,
        SocketAddr,
        tokio::sync::mpsc::Receiver<Attempt>,
    ) {
        proxy_with(upstream, LookupLimits::default(), 64).await
    }

    /// [`proxy`] with these DNS limits and a log queue of `queue` records.
    async fn proxy_with(
        upstream: Ipv4Addr,
        lookups: LookupLimits,
        queue: usize,
    ) -> (
        Arc<ContainerEgress>,
        Serving,
        SocketAddr,
        SocketAddr,
        tokio::sync::mpsc::Receiver<Attempt>,
    ) {
        let (log, attempts) = tokio::sync::mpsc::channel(queue);
        let settings = Arc::new(Settings {
            resolver: Resolver {
                static_hosts: [
                    ("x.a.test".to_owned(), vec![IpAddr::V4(upstream)]),
                    (
                        "loop.a.test".to_owned(),
                        vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
                    ),
                ]
                .into(),
                server: None,
            },
            exceptions: Exceptions::parse(&["x.a.test"]).unwrap(),
            log,
            dropped: AtomicU64::new(0),
            lookups,
            upstream_tls: Arc::new(crate::intercept::upstream_tls(&[]).unwrap()),
        });
        let allowlist = Allowlist::parse(&["*.a.test".to_owned()], &Allowlist::any()).unwrap();
        let egress = ContainerEgress::new("c1".into(), allowlist, settings, None, None, &[]);
        let http = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let dns = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let (http_address, dns_address) = (http.local_addr().unwrap(), dns.local_addr().unwrap());
        let https = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let serving = egress.serve(Sockets { http, https, dns }).unwrap();
        (egress, serving, http_address, dns_address, attempts)
    }

    async fn exchange(proxy: SocketAddr, request: &str) -> String {
        let mut stream = TcpStream::connect(proxy).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer
    }

    #[tokio::test]
    async fn requests_through_the_proxy_are_checked_rewritten_and_logged() {
        // A loopback address of its own, so the test needs no free port 80.
        let upstream_address = Ipv4Addr::new(127, 88, 0, 1);
        let upstream = TcpListener::bind((upstream_address, 80))
            .await
            .expect("bind 127.88.0.1:80 (the tests run as root)");
        let seen = tokio::spawn(async move {
            let (mut stream, _) = upstream.accept().await.unwrap();
            let mut buffer = Vec::new();
            let head = read_request_head(&mut stream, &mut buffer).await.unwrap();
            stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .await
                .unwrap();
            let connection = head.header("connection").map(str::to_owned);
            (head.target, connection)
        });
        let (_egress, serving, http, _, mut attempts) = proxy(upstream_address).await;
        let answer = exchange(
            http,
            "GET http://x.a.test/path?q=1 HTTP/1.1\r\nHost: x.a.test\r\nProxy-Connection: keep-alive\r\n\r\n",
        )
        .await;
        assert!(answer.ends_with("ok"), "{answer}");
        let (target, connection) = seen.await.unwrap();
        assert_eq!(target, "/path?q=1");
        assert_eq!(connection.as_deref(), Some("close"));
        let attempt = attempts.recv().await.unwrap();
        assert_eq!(attempt.verdict, Verdict::Allowed);
        assert_eq!(attempt.requested_name.as_deref(), Some("x.a.test"));
        assert_eq!(attempt.address, Some(IpAddr::V4(upstream_address)));
        assert!(attempt.bytes_in > 0 && attempt.bytes_out > 0);

        // Refusals: not listed, a forbidden address without an exception,
        // an IP literal, another port, a Host that disagrees.
        for (request, reason) in [
            (
                "GET http://b.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n",
                "not in this container's allowlist",
            ),
            (
                "GET http://loop.a.test/ HTTP/1.1\r\nHost: loop.a.test\r\n\r\n",
                "a loopback address",
            ),
            (
                "GET http://127.0.0.1/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                "is an IP address",
            ),
            (
                "GET http://x.a.test:8080/ HTTP/1.1\r\nHost: x.a.test:8080\r\n\r\n",
                "only ports 80 and 443",
            ),
            (
                "CONNECT b.test:443 HTTP/1.1\r\nHost: b.test:443\r\n\r\n",
                "not in this container's allowlist",
            ),
            (
                "CONNECT x.a.test:22 HTTP/1.1\r\nHost: x.a.test:22\r\n\r\n",
                "only ports 80 and 443",
            ),
        ] {
            let mark = serving.denials().mark();
            let answer = exchange(http, request).await;
            assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
            assert!(
                answer.contains("policy_denied") && answer.contains(reason),
                "{answer}"
            );
            // The reason is in the status line too (all a client shows of
            // a refused CONNECT).
            let status = answer.lines().next().unwrap();
            assert!(
                status.starts_with("HTTP/1.1 403 Forbidden (shellgate egress proxy: ")
                    && status.contains(reason),
                "{status}"
            );
            // Noted for the running command before the client was told.
            let report = serving.denials().since(mark).report();
            assert_eq!(report.lines().count(), 1, "{report}");
            assert!(
                report.starts_with("shellgate: egress denied: ") && report.contains(reason),
                "{report}"
            );
            let attempt = attempts.recv().await.unwrap();
            assert_eq!(attempt.verdict, Verdict::Denied);
            assert!(attempt.reason.contains(reason), "{}", attempt.reason);
        }
        let mark = serving.denials().mark();
        exchange(
            http,
            "CONNECT b.test:443 HTTP/1.1\r\nHost: b.test:443\r\n\r\n",
        )
        .await;
        assert_eq!(
            serving.denials().since(mark).report(),
            "shellgate: egress denied: CONNECT b.test:443: b.test is not in this container's \
             allowlist\n"
        );
        // Transparent: the address the client connected to (here the
        // proxy's own) was never an answer for the name.
        let answer = exchange(http, "GET / HTTP/1.1\r\nHost: x.a.test\r\n\r\n").await;
        assert!(
            answer.contains("is not an address x.a.test resolved to"),
            "{answer}"
        );
    }

    #[tokio::test]
    async fn relay_counts_the_bytes_relayed_when_the_upstream_resets() {
        const BODY: usize = 3 << 20;
        let upstream_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream_address = upstream_listener.local_addr().unwrap();
        let (go_reset, reset_now) = tokio::sync::oneshot::channel::<()>();
        let upstream_side = tokio::spawn(async move {
            let (mut stream, _) = upstream_listener.accept().await.unwrap();
            let mut hello = [0u8; 5];
            stream.read_exact(&mut hello).await.unwrap();
            stream.write_all(&vec![7u8; BODY]).await.unwrap();
            let _ = reset_now.await;
            reset(stream);
        });
        let client_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut container_end = TcpStream::connect(client_listener.local_addr().unwrap())
            .await
            .unwrap();
        let (mut proxy_client, _) = client_listener.accept().await.unwrap();
        let relaying = tokio::spawn(async move {
            let mut proxy_upstream = TcpStream::connect(upstream_address).await.unwrap();
            relay(&mut proxy_client, &mut proxy_upstream).await
        });
        container_end.write_all(b"hello").await.unwrap();
        let mut received = vec![0u8; BODY];
        container_end.read_exact(&mut received).await.unwrap();
        // Everything arrived; now the upstream ends with a reset.
        go_reset.send(()).unwrap();
        let mut rest = Vec::new();
        let _ = container_end.read_to_end(&mut rest).await;
        upstream_side.await.unwrap();
        let (out, back) = relaying.await.unwrap();
        assert_eq!((out, back), (5, (BODY + rest.len()) as u64));
    }

    /// Asks `name` (A) and returns the reply's rcode.
    async fn lookup(socket: &UdpSocket, id: u16, name: &str) -> u8 {
        socket
            .send(&dns::query(id, name, dns::A).unwrap())
            .await
            .unwrap();
        let mut buffer = [0u8; 512];
        let n = socket.recv(&mut buffer).await.unwrap();
        assert!(n >= 12 && buffer[..2] == id.to_be_bytes());
        buffer[3] & 0x0f
    }

    #[tokio::test]
    async fn lookups_over_the_rate_are_refused_and_counted_in_one_aggregate_row() {
        let limits = LookupLimits {
            rate: 0.0,
            burst: 3.0,
            log_rate: 0.0,
            log_burst: 1.0,
        };
        let (_egress, serving, _, dns_address, mut attempts) =
            proxy_with(Ipv4Addr::new(127, 88, 0, 3), limits, 64).await;
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        socket.connect(dns_address).await.unwrap();
        let mut rcodes = Vec::new();
        let mark = serving.denials().mark();
        for id in 0..6 {
            rcodes.push(lookup(&socket, id, "x.a.test").await);
        }
        // Three answered, then REFUSED at once (never asked upstream).
        assert_eq!(rcodes, [0, 0, 0, 5, 5, 5]);
        // The running command hears of the refused ones, in one line.
        assert_eq!(
            serving.denials().since(mark).report(),
            "shellgate: egress denied: DNS lookup of x.a.test: refused unanswered: over this \
             container's DNS rate limit (0 lookups/s, 3 at once) (3 times)\n"
        );
        // One row of its own (the log's burst), then one row for the rest.
        let first = attempts.recv().await.unwrap();
        assert_eq!((first.kind, first.verdict), ("dns", Verdict::Allowed));
        assert_eq!(first.unlogged, None);
        let aggregate = attempts.recv().await.unwrap();
        assert_eq!(
            (aggregate.kind, aggregate.verdict),
            ("dns", Verdict::Aggregated)
        );
        let unlogged = aggregate.unlogged.unwrap();
        assert_eq!(
            (unlogged.allowed, unlogged.denied, unlogged.rate_limited),
            (2, 0, 3)
        );
        assert!(
            aggregate.reason.starts_with("5 DNS lookups"),
            "{}",
            aggregate.reason
        );
    }

    #[tokio::test]
    async fn a_lookup_flood_never_costs_a_connection_its_record() {
        let generous = LookupLimits {
            rate: 1e6,
            burst: 1e6,
            log_rate: 1e6,
            log_burst: 1e6,
        };
        // Nobody reads the log while the container floods it.
        let (_egress, _serving, http, dns_address, mut attempts) =
            proxy_with(Ipv4Addr::new(127, 88, 0, 4), generous, 4).await;
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        socket.connect(dns_address).await.unwrap();
        for id in 0..20 {
            assert_eq!(lookup(&socket, id, "flood.b.test").await, 3);
        }
        // More connections than the queue holds: their records wait.
        let connections = 6;
        for i in 0..connections {
            let answer = exchange(
                http,
                &format!("GET http://c{i}.b.test/ HTTP/1.1\r\nHost: c{i}.b.test\r\n\r\n"),
            )
            .await;
            assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        }
        let (mut lookups, mut refused) = (0, Vec::new());
        let mut unlogged = 0;
        while refused.len() < connections || lookups + unlogged < 20 {
            // (A guard against a hang, should a record be lost.)
            let attempt = tokio::time::timeout(Duration::from_secs(60), attempts.recv())
                .await
                .expect("a connection's record never came")
                .unwrap();
            match (attempt.kind, attempt.verdict) {
                ("dns", Verdict::Denied) => lookups += 1,
                ("dns", Verdict::Aggregated) => unlogged += attempt.unlogged.unwrap().denied,
                ("http", Verdict::Denied) => refused.push(attempt.requested_name.unwrap()),
                other => panic!("unexpected {other:?}"),
            }
        }
        // The lookups had half the queue; every connection has its row.
        assert_eq!(lookups, 2);
        assert_eq!(unlogged, 18);
        refused.sort();
        let expected: Vec<String> = (0..connections).map(|i| format!("c{i}.b.test")).collect();
        assert_eq!(refused, expected);
    }

    #[tokio::test]
    async fn connections_over_the_limit_are_counted_in_an_aggregate_row() {
        let (_egress, _serving, http, _, mut attempts) = proxy(Ipv4Addr::new(127, 88, 0, 5)).await;
        // Connections that say nothing hold their slots (until the head's
        // timeout); past the limit, the next are reset unread.
        let over = 20;
        let mut open = Vec::new();
        for _ in 0..MAX_CONNECTIONS + over {
            // (One over the limit may be reset before connect returns.)
            if let Ok(stream) = TcpStream::connect(http).await {
                open.push(stream);
            }
        }
        let mut counted = 0;
        while counted < over as u64 {
            let attempt = tokio::time::timeout(Duration::from_secs(60), attempts.recv())
                .await
                .expect("no aggregate row of the connections over the limit")
                .unwrap();
            if attempt.verdict == Verdict::Aggregated {
                assert_eq!((attempt.kind, attempt.port), ("http", 80));
                assert!(
                    attempt.reason.contains("over the limit of 256"),
                    "{}",
                    attempt.reason
                );
                counted += attempt.unlogged.unwrap().over_connection_limit;
            }
        }
        assert_eq!(counted, over as u64);
        drop(open);
    }

    #[tokio::test]
    async fn dns_answers_listed_names_and_nothing_else() {
        let (egress, serving, _, dns_address, mut attempts) =
            proxy(Ipv4Addr::new(127, 88, 0, 2)).await;
        let mark = serving.denials().mark();
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        socket.connect(dns_address).await.unwrap();
        let mut buffer = [0u8; 512];
        for (name, expected) in [
            (
                "x.a.test",
                Some(vec![IpAddr::V4(Ipv4Addr::new(127, 88, 0, 2))]),
            ),
            ("loop.a.test", None),
            ("elsewhere.test", None),
        ] {
            socket
                .send(&dns::query(7, name, dns::A).unwrap())
                .await
                .unwrap();
            let n = socket.recv(&mut buffer).await.unwrap();
            let answer = dns::parse_response(&buffer[..n], 7).unwrap();
            assert_eq!(answer, expected.clone().unwrap_or_default(), "{name}");
            let rcode = buffer[3] & 0x0f;
            assert_eq!(rcode, if expected.is_some() { 0 } else { 3 }, "{name}");
            let attempt = attempts.recv().await.unwrap();
            assert_eq!(attempt.kind, "dns");
            assert_eq!(attempt.verdict == Verdict::Allowed, expected.is_some());
        }
        // The refusals were noted before their answers went out.
        assert_eq!(
            serving.denials().since(mark).report(),
            "shellgate: egress denied: DNS lookup of loop.a.test: loop.a.test resolves to \
             127.0.0.1, a loopback address\n\
             shellgate: egress denied: DNS lookup of elsewhere.test: elsewhere.test is not in \
             this container's allowlist\n"
        );
        // The answer is remembered for the connections that follow.
        assert!(egress
            .check_answered("x.a.test", IpAddr::V4(Ipv4Addr::new(127, 88, 0, 2)))
            .is_ok());
        assert!(egress
            .check_answered("y.a.test", IpAddr::V4(Ipv4Addr::new(127, 88, 0, 2)))
            .is_err());
    }

    #[tokio::test]
    async fn a_new_allowlist_decides_every_lookup_after_it() {
        let (_egress, serving, _, dns_address, mut attempts) =
            proxy(Ipv4Addr::new(127, 88, 0, 3)).await;
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        socket.connect(dns_address).await.unwrap();
        let mut buffer = [0u8; 512];
        let other = Allowlist::parse(&["other.test".to_owned()], &Allowlist::any()).unwrap();
        let original = Allowlist::parse(&["*.a.test".to_owned()], &Allowlist::any()).unwrap();
        // Listed, then nothing listed (every name refused), then listed
        // again, then another list: each lookup sees the list of its time.
        for (id, allowlist, answered) in [
            (1, None, true),
            (2, Some(Allowlist::default()), false),
            (3, Some(original), true),
            (4, Some(other), false),
        ] {
            if let Some(allowlist) = allowlist {
                serving.set_allowlist(allowlist);
            }
            socket
                .send(&dns::query(id, "x.a.test", dns::A).unwrap())
                .await
                .unwrap();
            let n = socket.recv(&mut buffer).await.unwrap();
            let answer = dns::parse_response(&buffer[..n], id).unwrap();
            assert_eq!(!answer.is_empty(), answered, "lookup {id}");
            let attempt = attempts.recv().await.unwrap();
            assert_eq!(attempt.verdict == Verdict::Allowed, answered, "lookup {id}");
            if !answered {
                assert!(attempt.reason.contains("not in this container's allowlist"));
            }
        }
    }
}
