//! Containers' network access: whether they have any, the organization's
//! allowlist, and the egress proxy's resolver and trust.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{comma_list, ConfigError};

/// Containers' network access through the egress proxy.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct EgressSettings {
    /// Whether containers may have network access at all (through the
    /// egress proxy, by allowlist). Off: every `network_policy` allowlist
    /// is refused (400).
    pub egress: bool,
    /// The organization allowlist: the host names and `*.domain` patterns
    /// any container may be allowed (comma separated); a container's list
    /// must stay within it. `*`: any name.
    pub egress_allowed_domains: String,
    /// Whether a container's own list may be `*` (every name); off by
    /// default even when the organization list is `*`.
    pub egress_allow_any_domain: bool,
    /// Exceptions to the forbidden addresses, comma separated: host names
    /// that may resolve to private, loopback, link-local or reserved
    /// addresses (an internal package mirror, say), and address ranges
    /// (`10.20.0.0/16`, `fd00:1::/64`, or one address) any allowed name
    /// may resolve to.
    pub egress_private_exceptions: String,
    /// The DNS server the proxy asks (`IP:port`); empty: the host's resolver.
    pub egress_dns_server: String,
    /// More trusted roots (PEM files, comma separated) for the servers the
    /// proxy forwards intercepted TLS to, besides the host's.
    pub egress_trusted_roots: String,
    /// Fixed addresses for names (config file only), like `/etc/hosts`:
    /// `[egress_hosts] "mirror.internal" = ["10.0.0.5"]`.
    pub egress_hosts: std::collections::BTreeMap<String, Vec<std::net::IpAddr>>,
    /// How long egress log rows are kept (seconds); older ones are deleted
    /// by the lifecycle sweeper. 0: kept forever.
    pub egress_log_retention_secs: u64,
}

impl Default for EgressSettings {
    fn default() -> Self {
        Self {
            egress: true,
            egress_allowed_domains: "*".to_owned(),
            egress_allow_any_domain: false,
            egress_private_exceptions: String::new(),
            egress_dns_server: String::new(),
            egress_trusted_roots: String::new(),
            egress_hosts: Default::default(),
            egress_log_retention_secs: 30 * 86_400,
        }
    }
}

impl EgressSettings {
    /// The organization allowlist.
    pub fn org_allowlist(&self) -> Result<shellgate_egress::policy::Allowlist, ConfigError> {
        shellgate_egress::policy::Allowlist::operator(&comma_list(&self.egress_allowed_domains))
            .map_err(|e| ConfigError(format!("egress_allowed_domains: {e}")))
    }

    /// What the operator allows containers' networks: the rule a request's
    /// `network_policy` (and the CLI's `--allow`) is held to.
    pub fn rules(&self) -> Result<shellgate_sandbox_api::network::EgressRules, ConfigError> {
        Ok(shellgate_sandbox_api::network::EgressRules {
            enabled: self.egress,
            allow_any_domain: self.egress_allow_any_domain,
            org_allowlist: self.org_allowlist()?,
        })
    }

    /// The egress proxy's own options (trusted roots, DNS server, fixed
    /// hosts, private exceptions), for `Settings::configure`.
    pub fn proxy_options(&self) -> shellgate_egress::proxy::ProxyOptions {
        shellgate_egress::proxy::ProxyOptions {
            trusted_roots: comma_list(&self.egress_trusted_roots)
                .into_iter()
                .map(PathBuf::from)
                .collect(),
            dns_server: self.egress_dns_server.clone(),
            hosts: self.egress_hosts.clone(),
            private_exceptions: comma_list(&self.egress_private_exceptions),
        }
    }
}
