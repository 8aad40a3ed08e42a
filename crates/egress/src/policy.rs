//! Which names a container may reach, and which addresses nobody may.
//!
//! A pattern is a host name (`pypi.org`) or `*.` and one (`*.github.com`,
//! which matches subdomains only, never `github.com` itself nor
//! `evilgithub.com`). `*` alone matches every name, and is only ever allowed
//! by an operator. Names are compared lowercase, without a trailing dot.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Most patterns in one allowlist.
pub const MAX_PATTERNS: usize = 50;

/// A checked pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// Every name (operator lists only).
    Any,
    /// Exactly this name.
    Exact(String),
    /// Any name ending in `.` + this suffix.
    Subdomains(String),
}

/// Why a pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PatternError(pub String);

/// A name as compared: lowercase, without the one trailing dot of its
/// absolute form (`a.test.` is `a.test`; `a.test..` keeps a dot, so it
/// matches no pattern and is no valid name).
pub fn normalize(name: &str) -> String {
    let name = name.trim();
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

/// Whether `name` is a syntactically valid host name (not an IP literal).
pub fn valid_host_name(name: &str) -> bool {
    let name = normalize(name);
    !name.is_empty()
        && name.len() <= 253
        && name.parse::<IpAddr>().is_err()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

impl Pattern {
    /// Reads a pattern; `*` is refused unless `allow_any`.
    pub fn parse(text: &str, allow_any: bool) -> Result<Self, PatternError> {
        // Checked as given (`valid_host_name` takes off the one trailing
        // dot itself), kept normalized.
        let given = text.trim();
        let text = normalize(given);
        if text == "*" {
            return if allow_any {
                Ok(Pattern::Any)
            } else {
                Err(PatternError("'*' (every domain) is not allowed".into()))
            };
        }
        if let Some(suffix) = given.strip_prefix("*.") {
            if valid_host_name(suffix) {
                return Ok(Pattern::Subdomains(normalize(suffix)));
            }
        } else if valid_host_name(given) {
            return Ok(Pattern::Exact(text));
        }
        Err(PatternError(format!(
            "{text:?} is not a host name or a '*.domain' pattern (IP addresses are not allowed)"
        )))
    }

    /// Whether `name` (normalized) matches.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            Pattern::Any => true,
            Pattern::Exact(exact) => name == exact,
            Pattern::Subdomains(suffix) => name
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
        }
    }

    /// Whether every name this pattern matches, `outer` matches too.
    pub fn within(&self, outer: &Pattern) -> bool {
        match (outer, self) {
            (Pattern::Any, _) => true,
            (_, Pattern::Any) => false,
            (outer, Pattern::Exact(name)) => outer.matches(name),
            (Pattern::Exact(_), Pattern::Subdomains(_)) => false,
            (Pattern::Subdomains(outer), Pattern::Subdomains(inner)) => {
                inner == outer || Pattern::Subdomains(outer.clone()).matches(inner)
            }
        }
    }

    fn text(&self) -> String {
        match self {
            Pattern::Any => "*".into(),
            Pattern::Exact(name) => name.clone(),
            Pattern::Subdomains(suffix) => format!("*.{suffix}"),
        }
    }
}

impl std::fmt::Display for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text())
    }
}

/// A container's allowlist.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowlist {
    patterns: Vec<Pattern>,
}

impl Allowlist {
    /// Reads a container's `allowed_domains`, each within the operator's
    /// `org` list (a request can only narrow it, never widen it).
    pub fn parse(domains: &[String], org: &Allowlist) -> Result<Self, PatternError> {
        if domains.is_empty() {
            return Err(PatternError(
                "an allowlist needs at least one domain".into(),
            ));
        }
        if domains.len() > MAX_PATTERNS {
            return Err(PatternError(format!(
                "{} domains given; at most {MAX_PATTERNS} are allowed",
                domains.len()
            )));
        }
        let mut patterns = Vec::with_capacity(domains.len());
        for domain in domains {
            let allow_any = org.patterns.contains(&Pattern::Any);
            let pattern = Pattern::parse(domain, allow_any)?;
            if !org.patterns.iter().any(|outer| pattern.within(outer)) {
                return Err(PatternError(format!(
                    "{pattern} is outside the domains this server allows (egress_allowed_domains)"
                )));
            }
            patterns.push(pattern);
        }
        Ok(Self { patterns })
    }

    /// Every name: the outer list of a list already checked.
    pub fn any() -> Self {
        Self {
            patterns: vec![Pattern::Any],
        }
    }

    /// The operator's own list (may hold `*`).
    pub fn operator(domains: &[String]) -> Result<Self, PatternError> {
        let patterns = domains
            .iter()
            .map(|d| Pattern::parse(d, true))
            .collect::<Result<_, _>>()?;
        Ok(Self { patterns })
    }

    /// Whether `name` may be reached.
    pub fn allows(&self, name: &str) -> bool {
        let name = normalize(name);
        self.patterns.iter().any(|p| p.matches(&name))
    }

    pub fn patterns(&self) -> &[Pattern] {
        &self.patterns
    }

    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }
}

/// Why an address may not be reached, if it may not: everything IANA's
/// special-purpose registries mark as not globally reachable (loopback,
/// private, shared, link-local, documentation, benchmarking, reserved,
/// multicast and broadcast), cloud metadata, and IPv6 forms that embed an
/// IPv4 address (mapped, translated, IPv4-compatible, NAT64, 6to4, Teredo)
/// whose IPv4 address is forbidden. IPv6 outside global unicast
/// (`2000::/3`) is unassigned and refused too.
pub fn forbidden_address(address: IpAddr) -> Option<&'static str> {
    match address {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

fn forbidden_v4(v4: Ipv4Addr) -> Option<&'static str> {
    let octets = v4.octets();
    let within = |network: [u8; 4], prefix: u32| in_v4_network(v4, Ipv4Addr::from(network), prefix);
    if v4.is_loopback() {
        Some("a loopback address")
    } else if v4.is_private() {
        Some("a private address")
    } else if v4.is_link_local() {
        Some(if octets == [169, 254, 169, 254] {
            "a cloud metadata address"
        } else {
            "a link-local address"
        })
    } else if within([100, 64, 0, 0], 10) {
        Some("a carrier-grade NAT address")
    } else if v4.is_multicast() || v4.is_broadcast() {
        Some("a multicast or broadcast address")
    } else if v4.is_unspecified() || octets[0] == 0 {
        Some("an unspecified address")
    } else if within([192, 0, 2, 0], 24)
        || within([198, 51, 100, 0], 24)
        || within([203, 0, 113, 0], 24)
    {
        Some("a documentation (TEST-NET) address")
    } else if within([198, 18, 0, 0], 15) {
        Some("a benchmarking address")
    } else if within([192, 0, 0, 0], 24) {
        Some("an IETF protocol assignment address")
    } else if within([192, 88, 99, 0], 24) {
        Some("a deprecated 6to4 relay address")
    } else if octets[0] >= 240 {
        Some("a reserved address")
    } else {
        None
    }
}

fn forbidden_v6(v6: Ipv6Addr) -> Option<&'static str> {
    let segments = v6.segments();
    let within = |network: Ipv6Addr, prefix: u32| in_v6_network(v6, network, prefix);
    // The IPv4 address in the last 32 bits.
    let last_v4 = || Ipv4Addr::from((u32::from(segments[6]) << 16) | u32::from(segments[7]));
    if let Some(v4) = v6.to_ipv4_mapped() {
        return forbidden_v4(v4);
    }
    if v6.is_loopback() {
        Some("a loopback address")
    } else if v6.is_unspecified() {
        Some("an unspecified address")
    } else if within(Ipv6Addr::UNSPECIFIED, 96) {
        // ::a.b.c.d, deprecated since 2006: nothing legitimate uses it.
        Some("an IPv4-compatible address")
    } else if within(Ipv6Addr::new(0, 0, 0, 0, 0xffff, 0, 0, 0), 96) {
        // ::ffff:0:a.b.c.d (SIIT's IPv4-translated addresses).
        forbidden_v4(last_v4())
    } else if v6.is_multicast() {
        Some("a multicast address")
    } else if segments[0] & 0xfe00 == 0xfc00 {
        if segments == [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254] {
            Some("a cloud metadata address")
        } else {
            Some("a private (unique local) address")
        }
    } else if segments[0] & 0xffc0 == 0xfe80 {
        Some("a link-local address")
    } else if segments[0] & 0xffc0 == 0xfec0 {
        Some("a site-local address")
    } else if within(Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96) {
        // NAT64 embeds an IPv4 address in its last 32 bits.
        forbidden_v4(last_v4())
    } else if within(Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48) {
        Some("a local-use NAT64 address")
    } else if within(Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0), 64) {
        Some("a discard-only address")
    } else if within(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0), 32)
        || within(Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0), 20)
    {
        Some("a documentation address")
    } else if within(Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 0), 48) {
        Some("a benchmarking address")
    } else if within(Ipv6Addr::new(0x2001, 0x10, 0, 0, 0, 0, 0, 0), 28) {
        Some("a deprecated ORCHID address")
    } else if within(Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 32) {
        // Teredo: the server's IPv4 address in bits 32..64, the client's
        // (inverted) in the last 32.
        let server = Ipv4Addr::from((u32::from(segments[2]) << 16) | u32::from(segments[3]));
        let client = Ipv4Addr::from(!u32::from(last_v4()));
        forbidden_v4(server).or(forbidden_v4(client))
    } else if within(Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16) {
        // 6to4: an IPv4 address in bits 16..48.
        forbidden_v4(Ipv4Addr::from(
            (u32::from(segments[1]) << 16) | u32::from(segments[2]),
        ))
    } else if within(Ipv6Addr::new(0x5f00, 0, 0, 0, 0, 0, 0, 0), 16) {
        Some("an SRv6 segment identifier")
    } else if !within(Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0), 3) {
        Some("a reserved address")
    } else {
        None
    }
}

fn in_v4_network(address: Ipv4Addr, network: Ipv4Addr, prefix: u32) -> bool {
    let mask = u32::MAX.checked_shl(32 - prefix.min(32)).unwrap_or(0);
    u32::from(address) & mask == u32::from(network) & mask
}

fn in_v6_network(address: Ipv6Addr, network: Ipv6Addr, prefix: u32) -> bool {
    let mask = u128::MAX.checked_shl(128 - prefix.min(128)).unwrap_or(0);
    u128::from(address) & mask == u128::from(network) & mask
}

/// An address range (`203.0.113.0/24`, `fd00:1::/64`, or one address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Network {
    address: IpAddr,
    prefix: u32,
}

impl Network {
    /// Reads `address/prefix` or a bare address (a /32 or /128).
    pub fn parse(text: &str) -> Result<Self, PatternError> {
        let text = text.trim();
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let address: IpAddr = address
            .parse()
            .map_err(|_| PatternError(format!("{text:?} is not an address or address/prefix")))?;
        let most = if address.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => most,
            Some(prefix) => match prefix.parse::<u32>() {
                // Every address: that would turn the check off, surely
                // not what an operator meant.
                Ok(0) => {
                    return Err(PatternError(format!(
                        "{text:?} covers every address (a /0 would turn the address check off)"
                    )))
                }
                Ok(prefix) if prefix <= most => prefix,
                _ => {
                    return Err(PatternError(format!(
                        "{text:?}: the prefix length must be 0 to {most}"
                    )))
                }
            },
        };
        Ok(Self { address, prefix })
    }

    /// Whether `address` is in this range (IPv4-mapped IPv6 addresses are
    /// compared as the IPv4 address they carry).
    pub fn contains(&self, address: IpAddr) -> bool {
        let address = match address {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
            v4 => v4,
        };
        match (self.address, address) {
            (IpAddr::V4(network), IpAddr::V4(address)) => {
                in_v4_network(address, network, self.prefix)
            }
            (IpAddr::V6(network), IpAddr::V6(address)) => {
                in_v6_network(address, network, self.prefix)
            }
            _ => false,
        }
    }
}

/// The operator's exceptions to [`forbidden_address`]
/// (`egress_private_exceptions`): names that may resolve to any address
/// (an internal mirror), and address ranges any allowed name may resolve
/// to (an internal network).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exceptions {
    names: HashSet<String>,
    networks: Vec<Network>,
}

impl Exceptions {
    /// Reads the comma-separated entries: an address or `address/prefix`
    /// is a range, anything else a host name.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, PatternError> {
        let mut exceptions = Self::default();
        for entry in entries {
            let entry = entry.as_ref().trim();
            if entry.is_empty() {
                continue;
            }
            let looks_like_address =
                entry.contains('/') || entry.contains(':') || entry.parse::<IpAddr>().is_ok();
            if looks_like_address {
                exceptions.networks.push(Network::parse(entry)?);
            } else if valid_host_name(entry) {
                exceptions.names.insert(normalize(entry));
            } else {
                return Err(PatternError(format!(
                    "{entry:?} is neither a host name nor an address range"
                )));
            }
        }
        Ok(exceptions)
    }

    /// Whether `name` (normalized) may reach `address` although it is
    /// forbidden.
    pub fn allows(&self, name: &str, address: IpAddr) -> bool {
        self.names.contains(name) || self.networks.iter().any(|n| n.contains(address))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn org_any() -> Allowlist {
        Allowlist::operator(&["*".into()]).unwrap()
    }

    #[test]
    fn subdomain_patterns_match_subdomains_only() {
        let list =
            Allowlist::parse(&["*.allowed.test".into(), "pypi.org".into()], &org_any()).unwrap();
        assert!(list.allows("a.allowed.test"));
        assert!(list.allows("A.B.Allowed.Test."));
        // One trailing dot is the absolute form of the name; two are no
        // name at all.
        assert!(!list.allows("a.allowed.test.."));
        assert!(!list.allows("pypi.org.."));
        assert!(list.allows("pypi.org."));
        assert!(!list.allows("allowed.test"));
        assert!(!list.allows("allowed.test.evil.test"));
        assert!(!list.allows("evilallowed.test"));
        assert!(list.allows("pypi.org"));
        assert!(!list.allows("files.pypi.org"));
    }

    #[test]
    fn bad_patterns_ip_literals_and_too_many_are_refused() {
        for bad in [
            "1.2.3.4",
            "[::1]",
            "a..b",
            "a.b..",
            "*.a.b..",
            ".a.b",
            "exa mple.com",
            "-x.com",
            "*.1.2.3.4",
        ] {
            assert!(
                Allowlist::parse(&[bad.into()], &org_any()).is_err(),
                "{bad}"
            );
        }
        let many: Vec<String> = (0..51).map(|i| format!("d{i}.test")).collect();
        assert!(Allowlist::parse(&many, &org_any()).is_err());
        assert!(Allowlist::parse(&many[..50], &org_any()).is_ok());
    }

    #[test]
    fn a_request_can_only_narrow_the_operators_list() {
        let org = Allowlist::operator(&["*.example.com".into(), "pypi.org".into()]).unwrap();
        assert!(Allowlist::parse(&["api.example.com".into()], &org).is_ok());
        assert!(Allowlist::parse(&["*.api.example.com".into()], &org).is_ok());
        assert!(Allowlist::parse(&["*.example.com".into()], &org).is_ok());
        let refused = Allowlist::parse(&["example.com".into()], &org).unwrap_err();
        assert!(refused.0.contains("example.com"));
        assert!(Allowlist::parse(&["evil.test".into()], &org).is_err());
        assert!(Allowlist::parse(&["*".into()], &org).is_err());
        assert!(Allowlist::parse(&["*".into()], &org_any()).is_ok());
    }

    #[test]
    fn private_loopback_metadata_and_mapped_addresses_are_forbidden() {
        for address in [
            "127.0.0.1",
            "10.0.0.1",
            "172.16.5.4",
            "192.168.1.1",
            "169.254.169.254",
            "169.254.1.1",
            "100.64.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "0.0.0.0",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "ff02::1",
            "::",
            "fd00:ec2::254",
            "64:ff9b::a00:1",
        ] {
            let ip: IpAddr = address.parse().unwrap();
            assert!(forbidden_address(ip).is_some(), "{address} allowed");
        }
        for address in [
            "93.184.216.34",
            "198.20.0.1",
            "192.0.3.1",
            "203.0.114.1",
            "2606:4700::1111",
            "64:ff9b::5db8:d822",
            "2002:5db8:d822::1",
            "2001:0:5db8:d822::a247:2ddd",
            "::ffff:0:5db8:d822",
        ] {
            let ip: IpAddr = address.parse().unwrap();
            assert_eq!(forbidden_address(ip), None, "{address} refused");
        }
    }

    #[test]
    fn reserved_documentation_benchmarking_and_embedded_addresses_are_forbidden() {
        for (address, kind) in [
            ("198.18.0.1", "benchmarking"),
            ("198.19.255.254", "benchmarking"),
            ("192.0.2.1", "documentation"),
            ("198.51.100.53", "documentation"),
            ("203.0.113.10", "documentation"),
            ("192.0.0.8", "IETF protocol"),
            ("192.88.99.1", "6to4 relay"),
            ("240.0.0.1", "reserved"),
            ("255.255.255.254", "reserved"),
            ("fec0::1", "site-local"),
            ("feff::1", "site-local"),
            ("::7f00:1", "IPv4-compatible"),
            ("::a00:1", "IPv4-compatible"),
            ("::8.8.8.8", "IPv4-compatible"),
            ("::ffff:0:7f00:1", "loopback"),
            ("2002:7f00:1::1", "loopback"),
            ("2002:a9fe:a9fe::", "metadata"),
            ("2002:c000:201::1", "documentation"),
            ("2001:0:7f00:1::1", "loopback"),
            ("2001:0:5db8:d822::f5ff:fffe", "private"),
            ("64:ff9b::c633:6435", "documentation"),
            ("64:ff9b:1::1", "local-use NAT64"),
            ("100::1", "discard-only"),
            ("2001:db8::1", "documentation"),
            ("3fff::1", "documentation"),
            ("2001:2::1", "benchmarking"),
            ("2001:10::1", "ORCHID"),
            ("5f00::1", "SRv6"),
            ("4000::1", "reserved"),
            ("1::1", "reserved"),
        ] {
            let ip: IpAddr = address.parse().unwrap();
            let refused = forbidden_address(ip);
            assert!(
                refused.is_some_and(|why| why.contains(kind)),
                "{address}: {refused:?}, not {kind}"
            );
        }
    }

    #[test]
    fn exceptions_are_names_or_address_ranges() {
        let exceptions = Exceptions::parse(&[
            "Mirror.Internal.",
            "203.0.113.0/24",
            "10.1.2.3",
            "fd00:1::/64",
        ])
        .unwrap();
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        assert!(exceptions.allows("mirror.internal", ip("127.0.0.1")));
        assert!(exceptions.allows("any.test", ip("203.0.113.10")));
        assert!(exceptions.allows("any.test", ip("::ffff:203.0.113.99")));
        assert!(!exceptions.allows("any.test", ip("203.0.114.1")));
        assert!(exceptions.allows("any.test", ip("10.1.2.3")));
        assert!(!exceptions.allows("any.test", ip("10.1.2.4")));
        assert!(exceptions.allows("any.test", ip("fd00:1::5")));
        assert!(!exceptions.allows("any.test", ip("fd00:2::5")));
        assert_eq!(
            Exceptions::parse(&["", " "]).unwrap(),
            Exceptions::default()
        );
        for bad in [
            "10.0.0.0/33",
            "fd00::/129",
            "10.0.0/8",
            "a b",
            "1.2.3.4/x",
            "0.0.0.0/0",
            "::/0",
        ] {
            assert!(Exceptions::parse(&[bad]).is_err(), "{bad}");
        }
    }
}
