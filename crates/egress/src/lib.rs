//! shellgate's egress proxy: a container's only way out.
//!
//! A container with an allowlist gets no route anywhere but to this proxy:
//! inside its network namespace, TCP to ports 80 and 443 and DNS are
//! redirected (nftables) to sockets the proxy serves, and everything else is
//! refused at once. The proxy decides per connection from the HTTP `Host`
//! or the TLS SNI, refuses names outside the list, IP literals, names that
//! do not match the address the container connected to, and addresses no
//! container may reach (loopback, private, link-local, CGNAT, multicast,
//! metadata); it connects to the exact address it checked. Every attempt is
//! recorded in the egress log.
//!
//! Modules: [`policy`] (patterns and forbidden addresses), [`budget`]
//! (DNS rate limits and the log's budget for lookups), [`denials`] (the
//! refusals a running command is told of, in its stderr), [`wire`] (TLS
//! server names, HTTP heads parsed strictly, chunked bodies), [`dns`] (the
//! container's resolver), [`proxy`] (serving one container's sockets),
//! `exchange` (one request forwarded by its framing, its answer masked),
//! [`intercept`] (TLS terminated, `Host` checked against the SNI, secrets
//! put in), [`secrets`] (values that never print, and their masker), `escapes`
//! (the escapes of reflected text, undone for the masker).

pub mod budget;
mod connection;
pub mod denials;
pub mod dns;
pub(crate) mod escapes;
pub(crate) mod exchange;
pub mod intercept;
pub mod policy;
pub mod proxy;
mod relay;
pub mod resolve;
pub mod secrets;
pub mod wire;
