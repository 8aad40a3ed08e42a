//! How the proxy finds a name's addresses: the operator's fixed hosts
//! first, then the operator's DNS server (if one is set), else the host's
//! own resolver. The container never reaches any of them: it only ever
//! sees the answers the proxy checked.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::dns;

/// How long one upstream DNS query may take (and it is tried twice).
const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Default)]
pub struct Resolver {
    /// Names with fixed addresses (like `/etc/hosts`).
    pub static_hosts: HashMap<String, Vec<IpAddr>>,
    /// A DNS server to ask instead of the host's resolver.
    pub server: Option<SocketAddr>,
}

impl Resolver {
    /// `name`'s addresses (none if it does not resolve).
    pub async fn resolve(&self, name: &str) -> Vec<IpAddr> {
        if let Some(addresses) = self.static_hosts.get(name) {
            return addresses.clone();
        }
        match self.server {
            Some(server) => {
                let (a, aaaa) =
                    tokio::join!(ask(server, name, dns::A), ask(server, name, dns::AAAA));
                a.into_iter().chain(aaaa).collect()
            }
            None => match tokio::net::lookup_host((name, 0)).await {
                Ok(addresses) => addresses.map(|a| a.ip()).collect(),
                Err(_) => Vec::new(),
            },
        }
    }
}

async fn ask(server: SocketAddr, name: &str, qtype: u16) -> Vec<IpAddr> {
    let id: u16 = rand_id();
    let Some(query) = dns::query(id, name, qtype) else {
        return Vec::new();
    };
    let bind: SocketAddr = if server.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let Ok(socket) = tokio::net::UdpSocket::bind(bind).await else {
        return Vec::new();
    };
    if socket.connect(server).await.is_err() {
        return Vec::new();
    }
    let mut buffer = [0u8; 1500];
    for _ in 0..2 {
        if socket.send(&query).await.is_err() {
            return Vec::new();
        }
        let deadline = tokio::time::Instant::now() + QUERY_TIMEOUT;
        while let Ok(Ok(length)) = tokio::time::timeout_at(deadline, socket.recv(&mut buffer)).await
        {
            if let Some(addresses) = dns::parse_response(&buffer[..length], id) {
                return addresses;
            }
        }
    }
    Vec::new()
}

fn rand_id() -> u16 {
    let mut id = [0u8; 2];
    // SAFETY: getrandom writes at most two bytes into `id`.
    unsafe { libc::getrandom(id.as_mut_ptr().cast(), 2, 0) };
    u16::from_ne_bytes(id)
}
