//! Serving one container's egress: its HTTP (port 80) and TLS (port 443)
//! connections and its DNS queries, arriving on sockets that live in the
//! container's network namespace (created there by its init, served here).
//!
//! Names come from the request itself (TLS SNI, HTTP `Host`, a `CONNECT`
//! target, an absolute URL), never from the address alone. For a
//! transparent connection the address the container connected to must be
//! one this proxy's DNS gave it for that very name (a `Host` or SNI that
//! differs from the name resolved is refused, and the proxy connects to
//! that exact, already checked address: no second lookup to rebind). For a
//! connection through `HTTP(S)_PROXY` the proxy resolves the name itself and
//! connects to an address it checked. TLS is not terminated.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::Semaphore;

use crate::dns;
use crate::policy::{forbidden_address, normalize, Allowlist};
use crate::wire::{self, Head, Hello, MAX_HEAD};

/// How long a client may take to say where it goes.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connecting to a destination may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections one container may have through the proxy at once.
const MAX_CONNECTIONS: usize = 256;
/// How long a DNS answer may be cached by the container.
const DNS_TTL: u32 = 30;

/// The verdict on one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Allowed,
    Denied,
}

/// One attempt to leave a container, for the egress log.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Attempt {
    /// Seconds since the Unix epoch.
    pub time: i64,
    pub container: String,
    /// `http`, `https`, `connect` (through a proxy variable) or `dns`.
    pub kind: &'static str,
    /// The name asked for (SNI, Host, CONNECT target or DNS question).
    pub name: Option<String>,
    /// The address connected to (or that the container tried).
    pub address: Option<IpAddr>,
    pub port: u16,
    pub verdict: Verdict,
    pub reason: String,
    /// Bytes from the container to the destination, and back.
    pub bytes_out: u64,
    pub bytes_in: u64,
    pub duration_ms: u64,
}

/// Where attempts go.
pub type AttemptSink = tokio::sync::mpsc::UnboundedSender<Attempt>;

/// How the proxy resolves names: the operator's static hosts first, then
/// the host's resolver.
#[derive(Debug, Clone, Default)]
pub struct Resolver {
    pub static_hosts: HashMap<String, Vec<IpAddr>>,
}

impl Resolver {
    pub async fn resolve(&self, name: &str) -> Vec<IpAddr> {
        if let Some(addresses) = self.static_hosts.get(name) {
            return addresses.clone();
        }
        match tokio::net::lookup_host((name, 0)).await {
            Ok(addresses) => addresses.map(|a| a.ip()).collect(),
            Err(_) => Vec::new(),
        }
    }
}

/// What one container's proxy knows.
pub struct ContainerEgress {
    pub container: String,
    pub allowlist: Allowlist,
    /// Names the operator lets resolve to otherwise forbidden addresses.
    pub exceptions: Arc<HashSet<String>>,
    pub resolver: Arc<Resolver>,
    pub log: AttemptSink,
    /// Addresses this proxy's DNS gave the container, and for which names.
    answers: Mutex<HashMap<IpAddr, HashSet<String>>>,
    connections: Arc<Semaphore>,
}

/// The sockets of a container's network namespace the proxy serves.
pub struct Sockets {
    pub http: std::net::TcpListener,
    pub https: std::net::TcpListener,
    pub dns: std::net::UdpSocket,
}

/// The serving tasks of one container; dropping this stops them.
pub struct Serving(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Serving {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// The destination a redirected connection had (`SO_ORIGINAL_DST`).
fn original_destination(stream: &TcpStream) -> Option<SocketAddr> {
    const SO_ORIGINAL_DST: libc::c_int = 80;
    // SAFETY: sockaddr_in is plain data; getsockopt fills at most `length`
    // bytes of it from a socket we own.
    unsafe {
        let mut address: libc::sockaddr_in = std::mem::zeroed();
        let mut length = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let ret = libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_IP,
            SO_ORIGINAL_DST,
            (&mut address as *mut libc::sockaddr_in).cast(),
            &mut length,
        );
        if ret != 0 || address.sin_family != libc::AF_INET as libc::sa_family_t {
            return None;
        }
        let ip = Ipv4Addr::from(u32::from_be(address.sin_addr.s_addr));
        Some(SocketAddr::new(
            IpAddr::V4(ip),
            u16::from_be(address.sin_port),
        ))
    }
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

/// What a connection is refused for.
struct Refusal {
    name: Option<String>,
    address: Option<IpAddr>,
    reason: String,
}

fn refuse(name: Option<&str>, address: Option<IpAddr>, reason: impl Into<String>) -> Refusal {
    Refusal {
        name: name.map(str::to_owned),
        address,
        reason: reason.into(),
    }
}

impl ContainerEgress {
    pub fn new(
        container: String,
        allowlist: Allowlist,
        exceptions: Arc<HashSet<String>>,
        resolver: Arc<Resolver>,
        log: AttemptSink,
    ) -> Arc<Self> {
        Arc::new(Self {
            container,
            allowlist,
            exceptions,
            resolver,
            log,
            answers: Mutex::new(HashMap::new()),
            connections: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
        })
    }

    /// Serves the container's sockets until the result is dropped.
    pub fn serve(self: &Arc<Self>, sockets: Sockets) -> std::io::Result<Serving> {
        for listener in [&sockets.http, &sockets.https] {
            listener.set_nonblocking(true)?;
        }
        sockets.dns.set_nonblocking(true)?;
        let http = TcpListener::from_std(sockets.http)?;
        let https = TcpListener::from_std(sockets.https)?;
        let dns = UdpSocket::from_std(sockets.dns)?;
        let mut tasks = Vec::new();
        for (listener, tls) in [(http, false), (https, true)] {
            let egress = Arc::clone(self);
            tasks.push(tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    };
                    let Ok(permit) = Arc::clone(&egress.connections).try_acquire_owned() else {
                        reset(stream);
                        continue;
                    };
                    let egress = Arc::clone(&egress);
                    tokio::spawn(async move {
                        let _permit = permit;
                        if tls {
                            egress.tls(stream).await;
                        } else {
                            egress.http(stream).await;
                        }
                    });
                }
            }));
        }
        let egress = Arc::clone(self);
        tasks.push(tokio::spawn(async move { egress.dns(dns).await }));
        Ok(Serving(tasks))
    }

    fn record(&self, attempt: Attempt) {
        let _ = self.log.send(attempt);
    }

    fn denied(&self, kind: &'static str, port: u16, started: Instant, refusal: Refusal) {
        tracing::debug!(container = %self.container, kind, reason = %refusal.reason, "egress denied");
        self.record(Attempt {
            time: now(),
            container: self.container.clone(),
            kind,
            name: refusal.name,
            address: refusal.address,
            port,
            verdict: Verdict::Denied,
            reason: refusal.reason,
            bytes_out: 0,
            bytes_in: 0,
            duration_ms: started.elapsed().as_millis() as u64,
        });
    }

    /// Whether `name` may be reached at all (listed, not an IP literal).
    fn check_name(&self, name: &str) -> Result<String, Refusal> {
        let name = normalize(name);
        if name.parse::<IpAddr>().is_ok() {
            return Err(refuse(
                Some(&name),
                None,
                "IP addresses are not allowed; use a host name",
            ));
        }
        if !self.allowlist.allows(&name) {
            return Err(refuse(
                Some(&name),
                None,
                format!("{name} is not in this container's allowlist"),
            ));
        }
        Ok(name)
    }

    fn check_address(&self, name: &str, address: IpAddr) -> Result<(), Refusal> {
        if self.exceptions.contains(name) {
            return Ok(());
        }
        match forbidden_address(address) {
            Some(kind) => Err(refuse(
                Some(name),
                Some(address),
                format!("{name} resolves to {address}, {kind}"),
            )),
            None => Ok(()),
        }
    }

    /// The addresses `name` may be reached at (at least one, or why not).
    async fn resolve_checked(&self, name: &str) -> Result<Vec<IpAddr>, Refusal> {
        let addresses = self.resolver.resolve(name).await;
        if addresses.is_empty() {
            return Err(refuse(Some(name), None, format!("{name} does not resolve")));
        }
        let mut allowed = Vec::new();
        let mut last = None;
        for address in addresses {
            match self.check_address(name, address) {
                Ok(()) => allowed.push(address),
                Err(refusal) => last = Some(refusal),
            }
        }
        match (allowed.is_empty(), last) {
            (true, Some(refusal)) => Err(refusal),
            _ => Ok(allowed),
        }
    }

    /// For a transparent connection: the address must be one this proxy's
    /// DNS gave for `name`.
    fn check_answered(&self, name: &str, address: IpAddr) -> Result<(), Refusal> {
        let answered = self
            .answers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&address)
            .is_some_and(|names| names.contains(name));
        if answered {
            Ok(())
        } else {
            Err(refuse(
                Some(name),
                Some(address),
                format!("{address} is not an address {name} resolved to (the name and the connection disagree)"),
            ))
        }
    }

    /// Reads from `stream` into `buffer` until `done` says enough (or the
    /// head is too long, the client stops, or it takes too long).
    async fn read_head<T>(
        stream: &mut TcpStream,
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

    async fn tls(&self, mut stream: TcpStream) {
        let started = Instant::now();
        let original = original_destination(&stream);
        let port = original.map(|a| a.port()).unwrap_or(443);
        let mut buffer = Vec::new();
        let hello = Self::read_head(&mut stream, &mut buffer, |bytes| {
            match wire::client_hello(bytes) {
                Hello::Incomplete => None,
                other => Some(other),
            }
        })
        .await;
        let decided = match hello {
            Some(Hello::ServerName(Some(name))) => self.check_name(&name).and_then(|name| {
                let address = original.map(|a| a.ip()).ok_or_else(|| {
                    refuse(Some(&name), None, "the connection's destination is unknown")
                })?;
                self.check_answered(&name, address)?;
                self.check_address(&name, address)?;
                Ok((name, SocketAddr::new(address, port)))
            }),
            Some(Hello::ServerName(None)) => Err(refuse(
                None,
                original.map(|a| a.ip()),
                "TLS without a server name (SNI)",
            )),
            _ => Err(refuse(
                None,
                original.map(|a| a.ip()),
                "not a TLS connection",
            )),
        };
        match decided {
            Ok((name, destination)) => {
                self.forward(stream, buffer, "https", name, destination, started)
                    .await
            }
            Err(refusal) => {
                self.denied("https", port, started, refusal);
                reset(stream);
            }
        }
    }

    async fn http(&self, mut stream: TcpStream) {
        let started = Instant::now();
        let original = original_destination(&stream);
        let mut buffer = Vec::new();
        let head = Self::read_head(&mut stream, &mut buffer, |bytes| {
            match wire::request_head(bytes) {
                Head::Incomplete => None,
                other => Some(other),
            }
        })
        .await;
        let Some(Head::Request(head)) = head else {
            self.denied(
                "http",
                80,
                started,
                refuse(None, original.map(|a| a.ip()), "not an HTTP request"),
            );
            return;
        };
        if head.method.eq_ignore_ascii_case("CONNECT") {
            return self.connect(stream, buffer, head, started).await;
        }
        // Through a proxy variable: an absolute URL; transparent: the Host
        // header and the address the container connected to.
        let through_proxy = wire::absolute_host(&head.target);
        let decided = async {
            match &through_proxy {
                Some((host, port)) => {
                    let name = self.check_name(host)?;
                    if port.unwrap_or(80) != 80 {
                        return Err(refuse(
                            Some(&name),
                            None,
                            "only ports 80 and 443 may be reached",
                        ));
                    }
                    let address = self.resolve_checked(&name).await?[0];
                    Ok((name, SocketAddr::new(address, 80)))
                }
                None => {
                    let host = head.host.as_deref().ok_or_else(|| {
                        refuse(None, None, "an HTTP request without a Host header")
                    })?;
                    let (host, _) = wire::split_authority(host);
                    let name = self.check_name(&host)?;
                    let destination = original.ok_or_else(|| {
                        refuse(Some(&name), None, "the connection's destination is unknown")
                    })?;
                    self.check_answered(&name, destination.ip())?;
                    self.check_address(&name, destination.ip())?;
                    Ok((name, destination))
                }
            }
        }
        .await;
        match decided {
            Ok((name, destination)) => {
                self.forward(stream, buffer, "http", name, destination, started)
                    .await
            }
            Err(refusal) => {
                let body = serde_json::json!({"error": {
                    "code": "policy_denied",
                    "message": format!("shellgate egress proxy: {}", refusal.reason),
                    "host": refusal.name,
                }})
                .to_string();
                let response = format!(
                    "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
                let _ = stream.shutdown().await;
                self.denied("http", 80, started, refusal);
            }
        }
    }

    /// `CONNECT host:443` through `HTTPS_PROXY`.
    async fn connect(
        &self,
        mut stream: TcpStream,
        mut buffer: Vec<u8>,
        head: wire::RequestHead,
        started: Instant,
    ) {
        let (host, port) = wire::split_authority(&head.target);
        let port = port.unwrap_or(443);
        let decided = async {
            let name = self.check_name(&host)?;
            if port != 443 && port != 80 {
                return Err(refuse(
                    Some(&name),
                    None,
                    "only ports 80 and 443 may be reached",
                ));
            }
            let address = self.resolve_checked(&name).await?[0];
            Ok((name, SocketAddr::new(address, port)))
        }
        .await;
        let (name, destination) = match decided {
            Ok(decided) => decided,
            Err(refusal) => {
                let body = format!("shellgate egress proxy: {}", refusal.reason);
                let response = format!(
                    "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
                self.denied("connect", port, started, refusal);
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
            // The tunnel's TLS must name the host it was opened for.
            let hello =
                Self::read_head(&mut stream, &mut buffer, |bytes| {
                    match wire::client_hello(bytes) {
                        Hello::Incomplete => None,
                        other => Some(other),
                    }
                })
                .await;
            let sni = match hello {
                Some(Hello::ServerName(Some(sni))) => normalize(&sni),
                _ => String::new(),
            };
            if sni != name {
                self.denied(
                    "connect",
                    port,
                    started,
                    refuse(
                        Some(&name),
                        Some(destination.ip()),
                        format!("the tunnel to {name} carried TLS for {sni:?}"),
                    ),
                );
                reset(stream);
                return;
            }
        }
        self.forward(stream, buffer, "connect", name, destination, started)
            .await;
    }

    /// Connects to the checked destination, sends what was read, and
    /// relays both ways until either side closes.
    async fn forward(
        &self,
        mut client: TcpStream,
        head: Vec<u8>,
        kind: &'static str,
        name: String,
        destination: SocketAddr,
        started: Instant,
    ) {
        let connected =
            tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(destination)).await;
        let mut upstream = match connected {
            Ok(Ok(upstream)) => upstream,
            Ok(Err(e)) => {
                self.denied(
                    kind,
                    destination.port(),
                    started,
                    refuse(
                        Some(&name),
                        Some(destination.ip()),
                        format!("{destination} could not be reached: {e}"),
                    ),
                );
                reset(client);
                return;
            }
            Err(_) => {
                self.denied(
                    kind,
                    destination.port(),
                    started,
                    refuse(
                        Some(&name),
                        Some(destination.ip()),
                        format!("{destination} did not answer"),
                    ),
                );
                reset(client);
                return;
            }
        };
        let _ = upstream.set_nodelay(true);
        let _ = client.set_nodelay(true);
        let mut bytes_out = head.len() as u64;
        if upstream.write_all(&head).await.is_err() {
            return;
        }
        let (out, back) = tokio::io::copy_bidirectional(&mut client, &mut upstream)
            .await
            .unwrap_or((0, 0));
        bytes_out += out;
        self.record(Attempt {
            time: now(),
            container: self.container.clone(),
            kind,
            name: Some(name),
            address: Some(destination.ip()),
            port: destination.port(),
            verdict: Verdict::Allowed,
            reason: "allowed".into(),
            bytes_out,
            bytes_in: back,
            duration_ms: started.elapsed().as_millis() as u64,
        });
    }

    /// The container's resolver: allowed names get their (checked, public)
    /// addresses, remembered for the connections that follow; anything else
    /// is refused at once.
    async fn dns(&self, socket: UdpSocket) {
        let mut packet = [0u8; 1500];
        loop {
            let Ok((length, peer)) = socket.recv_from(&mut packet).await else {
                continue;
            };
            let Some(question) = dns::parse_query(&packet[..length]) else {
                continue;
            };
            let started = Instant::now();
            let reply = match self.check_name(&question.name) {
                Err(refusal) => {
                    self.denied("dns", 53, started, refusal);
                    dns::answer(&question, &[], DNS_TTL, true)
                }
                Ok(name) if question.qtype == dns::A => match self.resolve_checked(&name).await {
                    Ok(addresses) => {
                        let addresses: Vec<IpAddr> =
                            addresses.into_iter().filter(IpAddr::is_ipv4).collect();
                        {
                            let mut answers =
                                self.answers.lock().unwrap_or_else(|p| p.into_inner());
                            for address in &addresses {
                                answers.entry(*address).or_default().insert(name.clone());
                            }
                        }
                        self.record(Attempt {
                            time: now(),
                            container: self.container.clone(),
                            kind: "dns",
                            name: Some(name),
                            address: addresses.first().copied(),
                            port: 53,
                            verdict: Verdict::Allowed,
                            reason: "allowed".into(),
                            bytes_out: 0,
                            bytes_in: 0,
                            duration_ms: started.elapsed().as_millis() as u64,
                        });
                        dns::answer(&question, &addresses, DNS_TTL, false)
                    }
                    Err(refusal) => {
                        self.denied("dns", 53, started, refusal);
                        dns::answer(&question, &[], DNS_TTL, true)
                    }
                },
                // AAAA and the rest: no records (the container reaches the
                // proxy over IPv4 only), so resolvers move on at once.
                Ok(_) => dns::answer(&question, &[], DNS_TTL, false),
            };
            let _ = socket.send_to(&reply, peer).await;
        }
    }
}
