//! Which names a container may reach, and which addresses nobody may.
//!
//! A pattern is a host name (`pypi.org`) or `*.` and one (`*.github.com`,
//! which matches subdomains only, never `github.com` itself nor
//! `evilgithub.com`). `*` alone matches every name, and is only ever allowed
//! by an operator. Names are compared lowercase, without a trailing dot.

use std::net::IpAddr;

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

/// A name as compared: lowercase, no trailing dot.
pub fn normalize(name: &str) -> String {
    name.trim().trim_end_matches('.').to_ascii_lowercase()
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
        let text = normalize(text);
        if text == "*" {
            return if allow_any {
                Ok(Pattern::Any)
            } else {
                Err(PatternError("'*' (every domain) is not allowed".into()))
            };
        }
        if let Some(suffix) = text.strip_prefix("*.") {
            if valid_host_name(suffix) {
                return Ok(Pattern::Subdomains(suffix.to_owned()));
            }
        } else if valid_host_name(&text) {
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

/// Why an address may not be reached, if it may not.
pub fn forbidden_address(address: IpAddr) -> Option<&'static str> {
    match address {
        IpAddr::V4(v4) => {
            let octets = v4.octets();
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
            } else if octets[0] == 100 && (64..128).contains(&octets[1]) {
                Some("a carrier-grade NAT address")
            } else if v4.is_multicast() || v4.is_broadcast() {
                Some("a multicast or broadcast address")
            } else if v4.is_unspecified() || octets[0] == 0 {
                Some("an unspecified address")
            } else if octets[0] >= 240 {
                Some("a reserved address")
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return forbidden_address(IpAddr::V4(v4));
            }
            let segments = v6.segments();
            if v6.is_loopback() {
                Some("a loopback address")
            } else if v6.is_unspecified() {
                Some("an unspecified address")
            } else if v6.is_multicast() {
                Some("a multicast address")
            } else if segments[0] & 0xfe00 == 0xfc00 {
                Some("a private (unique local) address")
            } else if segments[0] & 0xffc0 == 0xfe80 {
                Some("a link-local address")
            } else if segments == [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254] {
                Some("a cloud metadata address")
            } else if segments[0] == 0x64 && segments[1] == 0xff9b {
                // NAT64 embeds an IPv4 address in its last 32 bits.
                let embedded = std::net::Ipv4Addr::new(
                    (segments[6] >> 8) as u8,
                    segments[6] as u8,
                    (segments[7] >> 8) as u8,
                    segments[7] as u8,
                );
                forbidden_address(IpAddr::V4(embedded))
            } else {
                None
            }
        }
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
            "203.0.113.10",
            "2606:4700::1111",
            "64:ff9b::5db8:d822",
        ] {
            let ip: IpAddr = address.parse().unwrap();
            assert_eq!(forbidden_address(ip), None, "{address} refused");
        }
    }
}
