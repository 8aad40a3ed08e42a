//! A container's network, set up by init as root of the container's user
//! namespace (which owns its network namespace), before anything runs.
//!
//! Without an egress policy the namespace has `lo` and nothing else: every
//! address but loopback is unreachable, at once.
//!
//! With one, the whole IPv4 space is made *local* to the namespace (one
//! `local 0.0.0.0/0 dev lo` route, the "AnyIP" trick): a connection to any
//! address never leaves the namespace, it lands on whatever listens on that
//! port here. Init then creates the egress proxy's three sockets — TCP 80,
//! TCP 443 on every address, DNS on 127.0.0.1:53 — and hands them to the
//! engine, which serves them from the host (see `shellgate_egress::proxy`).
//! So every program reaches the proxy transparently, whether or not it
//! honours `HTTP(S)_PROXY`; the address it connected to is the accepted
//! socket's own local address, checked by the proxy against the name asked
//! for. Every other port is refused at once (nothing listens), IPv6 has no
//! route but loopback, ICMP and raw sockets need privileges no command
//! has. Ports below 1024 need a capability no command has, so no command
//! can take the proxy's ports, and commands cannot change routes either.
//! The namespace has no interface that leads anywhere: the only way out is
//! the descriptors the engine holds.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::sys;
use shellgate_sandbox_api::setup_error::{SetupError, SetupResult, SetupStep, StepContext};

/// Where the container's DNS queries go (its `resolv.conf` names it).
pub const DNS_ADDRESS: [u8; 4] = [127, 0, 0, 1];
/// The ports the egress proxy serves.
pub const HTTP_PORT: u16 = 80;
pub const HTTPS_PORT: u16 = 443;
pub const DNS_PORT: u16 = 53;
/// Connections a proxy socket queues before the engine accepts them.
const BACKLOG: libc::c_int = 1024;

/// The proxy's sockets, in the order the engine receives them.
pub struct ProxySockets {
    pub http: OwnedFd,
    pub https: OwnedFd,
    pub dns: OwnedFd,
}

/// Routes every IPv4 address to this namespace itself.
pub fn route_everything_locally() -> SetupResult<()> {
    let loopback = if_index("lo")?;
    // SAFETY: socket() with constant arguments.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return Err(SetupError::last_os(SetupStep::Routes, "netlink socket"));
    }
    // SAFETY: `fd` is a new descriptor owned here.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    let message = new_local_route(loopback);
    sys::write_all(socket.as_raw_fd(), &message)
        .step(SetupStep::Routes, || "netlink send".into())?;
    // The acknowledgement: an `nlmsgerr` whose error is 0 on success.
    let mut answer = [0u8; 512];
    // SAFETY: recv into a buffer we own, at most its length.
    let length = unsafe {
        libc::recv(
            socket.as_raw_fd(),
            answer.as_mut_ptr().cast(),
            answer.len(),
            0,
        )
    };
    if length < 0 {
        return Err(SetupError::last_os(SetupStep::Routes, "netlink receive"));
    }
    let header_length = std::mem::size_of::<libc::nlmsghdr>();
    let answer = &answer[..length as usize];
    if answer.len() < header_length + 4 {
        return Err(SetupError::other(
            SetupStep::Routes,
            "netlink",
            "short answer",
        ));
    }
    let message_type = u16::from_ne_bytes([answer[4], answer[5]]);
    if message_type != libc::NLMSG_ERROR as u16 {
        return Err(SetupError::other(
            SetupStep::Routes,
            "netlink",
            format!("unexpected answer type {message_type}"),
        ));
    }
    let error = i32::from_ne_bytes([
        answer[header_length],
        answer[header_length + 1],
        answer[header_length + 2],
        answer[header_length + 3],
    ]);
    if error != 0 {
        return Err(SetupError::os(
            SetupStep::Routes,
            "add the local route",
            std::io::Error::from_raw_os_error(-error),
        ));
    }
    Ok(())
}

/// `RTM_NEWROUTE`: `local 0.0.0.0/0 dev <loopback> table local`.
fn new_local_route(loopback: u32) -> Vec<u8> {
    let header_length = std::mem::size_of::<libc::nlmsghdr>();
    let route_length = 12; // struct rtmsg: eight bytes and a u32 of flags
    let attribute_length = 4 + 4; // rtattr + the interface index
    let total = header_length + route_length + attribute_length;
    let mut message = Vec::with_capacity(total);
    // nlmsghdr
    message.extend_from_slice(&(total as u32).to_ne_bytes());
    message.extend_from_slice(&libc::RTM_NEWROUTE.to_ne_bytes());
    let flags = libc::NLM_F_REQUEST | libc::NLM_F_ACK | libc::NLM_F_CREATE | libc::NLM_F_EXCL;
    message.extend_from_slice(&(flags as u16).to_ne_bytes());
    message.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    message.extend_from_slice(&0u32.to_ne_bytes()); // port: the kernel
                                                    // rtmsg
    message.push(libc::AF_INET as u8); // family
    message.push(0); // destination prefix length: everything
    message.push(0); // source prefix length
    message.push(0); // type of service
    message.push(libc::RT_TABLE_LOCAL);
    message.push(libc::RTPROT_BOOT);
    message.push(libc::RT_SCOPE_HOST);
    message.push(libc::RTN_LOCAL);
    message.extend_from_slice(&0u32.to_ne_bytes()); // flags
                                                    // rtattr RTA_OIF
    message.extend_from_slice(&(attribute_length as u16).to_ne_bytes());
    message.extend_from_slice(&libc::RTA_OIF.to_ne_bytes());
    message.extend_from_slice(&loopback.to_ne_bytes());
    message
}

fn if_index(name: &str) -> SetupResult<u32> {
    let name = std::ffi::CString::new(name)
        .map_err(|e| SetupError::other(SetupStep::Routes, "interface name", e))?;
    // SAFETY: if_nametoindex reads a NUL-terminated string.
    match unsafe { libc::if_nametoindex(name.as_ptr()) } {
        0 => Err(SetupError::last_os(SetupStep::Routes, "if_nametoindex")),
        index => Ok(index),
    }
}

/// Creates the proxy's sockets: TCP 80 and 443 listening on every address,
/// UDP 53 on the resolver address.
pub fn proxy_sockets() -> SetupResult<ProxySockets> {
    Ok(ProxySockets {
        http: listening([0, 0, 0, 0], HTTP_PORT)?,
        https: listening([0, 0, 0, 0], HTTPS_PORT)?,
        dns: bound_datagram(DNS_ADDRESS, DNS_PORT)?,
    })
}

fn bound(kind: rustix::net::SocketType, address: [u8; 4], port: u16) -> SetupResult<OwnedFd> {
    use rustix::net::{AddressFamily, SocketFlags};
    let socket = rustix::net::socket_with(AddressFamily::INET, kind, SocketFlags::CLOEXEC, None)
        .map_err(std::io::Error::from)
        .step(SetupStep::ProxySockets, || "proxy socket".into())?;
    let address = std::net::SocketAddrV4::new(address.into(), port);
    rustix::net::bind(&socket, &address)
        .map_err(std::io::Error::from)
        .step(SetupStep::ProxySockets, || {
            format!("bind the proxy's port {port}")
        })?;
    Ok(socket)
}

fn listening(address: [u8; 4], port: u16) -> SetupResult<OwnedFd> {
    let socket = bound(rustix::net::SocketType::STREAM, address, port)?;
    rustix::net::listen(&socket, BACKLOG)
        .map_err(std::io::Error::from)
        .step(SetupStep::ProxySockets, || "listen".into())?;
    Ok(socket)
}

fn bound_datagram(address: [u8; 4], port: u16) -> SetupResult<OwnedFd> {
    bound(rustix::net::SocketType::DGRAM, address, port)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_route_message_is_well_formed() {
        let message = new_local_route(1);
        let total = u32::from_ne_bytes([message[0], message[1], message[2], message[3]]);
        assert_eq!(total as usize, message.len());
        assert_eq!(message.len() % 4, 0, "netlink messages are 4-byte aligned");
        let header = std::mem::size_of::<libc::nlmsghdr>();
        assert_eq!(message[header], libc::AF_INET as u8);
        assert_eq!(message[header + 1], 0, "every destination");
        assert_eq!(message[header + 7], libc::RTN_LOCAL);
    }
}
