//! A request's `network_policy` turned into a container's network: the one
//! rule the HTTP API and the command line (`--allow`) share.

use std::collections::HashSet;

use shellgate_egress::policy::{Allowlist, MAX_PATTERNS};
use shellgate_egress::secrets::{self, SecretValue};
use shellgate_wire::NetworkPolicy;

use crate::backend::NetworkSpec;

/// What the operator allows containers' networks.
#[derive(Debug, Clone)]
pub struct EgressRules {
    /// Whether the egress proxy is on at all.
    pub enabled: bool,
    /// Whether `*` (every domain) may be asked for.
    pub allow_any_domain: bool,
    /// The organization allowlist a request can only narrow.
    pub org_allowlist: Allowlist,
}

/// A network policy refused: `param` names the field, as a 400 does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PolicyError {
    pub param: String,
    pub message: String,
}

impl PolicyError {
    fn new(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            param: param.into(),
            message: message.into(),
        }
    }
}

/// A request's `network_policy` as a container's network: the domains
/// checked against the organization allowlist (a request can only narrow
/// it), at most 50 of them, `*` only if the operator allows it, and each
/// secret given a placeholder (its value stays in memory only).
pub fn network_spec(
    rules: &EgressRules,
    policy: Option<&NetworkPolicy>,
    param: &str,
) -> Result<NetworkSpec, PolicyError> {
    let Some(NetworkPolicy::Allowlist {
        allowed_domains,
        domain_secrets,
        tls_passthrough_domains,
    }) = policy
    else {
        return Ok(NetworkSpec::default());
    };
    let domains_param = format!("{param}.allowed_domains");
    if !rules.enabled {
        return Err(PolicyError::new(
            param,
            "this server's egress proxy is off, so containers cannot have network access here \
             (the operator can set egress = true)",
        ));
    }
    if allowed_domains.is_empty() {
        return Err(PolicyError::new(
            domains_param,
            "an allowlist needs at least one domain",
        ));
    }
    if allowed_domains.len() > MAX_PATTERNS {
        return Err(PolicyError::new(
            domains_param,
            format!(
                "{} allowed domains given; at most {MAX_PATTERNS} are allowed",
                allowed_domains.len()
            ),
        ));
    }
    if !rules.allow_any_domain && allowed_domains.iter().any(|d| d.trim() == "*") {
        return Err(PolicyError::new(
            domains_param,
            "'*' (every domain) is not allowed on this server (egress_allow_any_domain)",
        ));
    }
    let allowlist = Allowlist::parse(allowed_domains, &rules.org_allowlist)
        .map_err(|e| PolicyError::new(domains_param.clone(), e.to_string()))?;
    let secrets_param = format!("{param}.domain_secrets");
    let mut names = HashSet::new();
    let mut secrets = Vec::with_capacity(domain_secrets.len());
    for secret in domain_secrets {
        let domain = shellgate_egress::policy::normalize(&secret.domain);
        if !allowed_domains
            .iter()
            .any(|d| shellgate_egress::policy::normalize(d) == domain)
        {
            return Err(PolicyError::new(
                secrets_param,
                format!(
                    "secret {} is for {}, which is not one of the allowed domains",
                    secret.name, secret.domain
                ),
            ));
        }
        // One rule for every path that takes secrets (secrets.rs): a
        // name that cannot steer the shell, a value masking cannot leak.
        secrets::check_secret(&secret.name, &secret.value)
            .map_err(|e| PolicyError::new(secrets_param.clone(), e.to_string()))?;
        if !names.insert(secret.name.clone()) {
            return Err(PolicyError::new(
                secrets_param,
                format!("secret {} is given twice", secret.name),
            ));
        }
        let (inject, methods, paths) = secret_scope(secret, &secrets_param)?;
        secrets.push(secrets::DomainSecret {
            domain,
            name: secret.name.clone(),
            placeholder: secrets::placeholder(&secret.name),
            value: Some(SecretValue::new(secret.value.as_str())),
            inject,
            methods,
            paths,
        });
    }
    let tls_passthrough = passthrough_domains(
        &allowlist,
        tls_passthrough_domains,
        &secrets,
        &format!("{param}.tls_passthrough_domains"),
    )?;
    Ok(NetworkSpec {
        allowed_domains: allowed_domains
            .iter()
            .map(|d| shellgate_egress::policy::normalize(d))
            .collect(),
        secrets,
        tls_passthrough,
        // Made by the engine when it creates the container.
        verifiers: Vec::new(),
        egress_kept: false,
    })
}

/// Most methods or path prefixes one secret may be scoped to.
const MAX_SCOPES: usize = 16;

/// A secret's scope (our extension): the parts of a request it goes into
/// (`header` by default; `query`, `body`), and the methods and path
/// prefixes it is limited to. Each list, when given, is non-empty and
/// without repeats; methods are uppercase tokens; paths start with `/`
/// and hold nothing a server could read as another path.
#[allow(clippy::type_complexity)]
fn secret_scope(
    secret: &shellgate_wire::DomainSecret,
    param: &str,
) -> Result<(Vec<secrets::InjectInto>, Vec<String>, Vec<String>), PolicyError> {
    use shellgate_wire::InjectInto as Wire;
    let invalid = |message: String| Err(PolicyError::new(param, message));
    let name = &secret.name;
    let inject = match &secret.inject {
        None => Vec::new(),
        Some(parts) if parts.is_empty() => {
            return invalid(format!(
                "secret {name}: inject needs at least one of header, query, body"
            ))
        }
        Some(parts) => {
            let mut out = Vec::new();
            for part in parts {
                let part = match part {
                    Wire::Header => secrets::InjectInto::Header,
                    Wire::Query => secrets::InjectInto::Query,
                    Wire::Body => secrets::InjectInto::Body,
                };
                if out.contains(&part) {
                    return invalid(format!("secret {name}: inject lists a part twice"));
                }
                out.push(part);
            }
            out
        }
    };
    let list = |values: &Option<Vec<String>>, what: &str| -> Result<Vec<String>, PolicyError> {
        match values {
            None => Ok(Vec::new()),
            Some(values) if values.is_empty() || values.len() > MAX_SCOPES => {
                Err(PolicyError::new(
                    param,
                    format!("secret {name}: {what} needs 1 to {MAX_SCOPES} entries"),
                ))
            }
            Some(values) => {
                let unique: HashSet<&String> = values.iter().collect();
                if unique.len() != values.len() {
                    return Err(PolicyError::new(
                        param,
                        format!("secret {name}: {what} lists an entry twice"),
                    ));
                }
                Ok(values.clone())
            }
        }
    };
    let methods = list(&secret.methods, "methods")?;
    if let Some(method) = methods
        .iter()
        .find(|m| m.is_empty() || m.len() > 20 || !m.bytes().all(|b| b.is_ascii_uppercase()))
    {
        return invalid(format!(
            "secret {name}: {method:?} is not a method (uppercase letters, like GET or POST)"
        ));
    }
    let paths = list(&secret.paths, "paths")?;
    for path in &paths {
        let ambiguous =
            shellgate_egress::intercept::ambiguous_path(path) || path.contains(['?', '#']);
        if !path.starts_with('/')
            || path.len() > 1024
            || !path.bytes().all(|b| (0x21..0x7f).contains(&b))
            || ambiguous
        {
            return invalid(format!(
                "secret {name}: {path:?} is not a path prefix (it starts with '/', holds \
                 visible ASCII, no query, no dot segments (also with ';'), no escaped '.', '/', '\\', ';' \
                 or '%')"
            ));
        }
    }
    Ok((inject, methods, paths))
}

/// `tls_passthrough_domains` (our extension): names or `*.` patterns whose
/// TLS the proxy does not terminate, each within the allowlist. Not with
/// secrets: a passthrough answer cannot be checked for a secret's value
/// (and a secret is put in only where TLS is terminated), so a policy with
/// `domain_secrets` has none, failing closed.
fn passthrough_domains(
    allowlist: &Allowlist,
    domains: &[String],
    secrets: &[secrets::DomainSecret],
    param: &str,
) -> Result<Vec<String>, PolicyError> {
    use shellgate_egress::policy::Pattern;
    if domains.is_empty() {
        return Ok(Vec::new());
    }
    if let Some(secret) = secrets.first() {
        return Err(PolicyError::new(
            param,
            format!(
                "TLS passthrough cannot be combined with domain_secrets (secret {}): answers \
                 that pass through unread cannot be checked for a secret's value",
                secret.name
            ),
        ));
    }
    if domains.len() > MAX_PATTERNS {
        return Err(PolicyError::new(
            param,
            format!("at most {MAX_PATTERNS} passthrough domains are allowed"),
        ));
    }
    let mut out = Vec::with_capacity(domains.len());
    for domain in domains {
        let pattern =
            Pattern::parse(domain, false).map_err(|e| PolicyError::new(param, e.to_string()))?;
        if !allowlist
            .patterns()
            .iter()
            .any(|outer| pattern.within(outer))
        {
            return Err(PolicyError::new(
                param,
                format!("{domain} is not within the allowed domains"),
            ));
        }
        out.push(pattern.to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> EgressRules {
        EgressRules {
            enabled: true,
            allow_any_domain: false,
            org_allowlist: Allowlist::any(),
        }
    }

    fn allowlist(domains: &[&str], secrets: Vec<shellgate_wire::DomainSecret>) -> NetworkPolicy {
        NetworkPolicy::Allowlist {
            allowed_domains: domains.iter().map(|d| d.to_string()).collect(),
            domain_secrets: secrets,
            tls_passthrough_domains: Vec::new(),
        }
    }

    fn secret(domain: &str, name: &str) -> shellgate_wire::DomainSecret {
        shellgate_wire::DomainSecret {
            domain: domain.to_owned(),
            name: name.to_owned(),
            value: "a-long-enough-value".to_owned(),
            inject: None,
            methods: None,
            paths: None,
        }
    }

    #[test]
    fn no_policy_is_no_network_and_an_allowlist_is_normalized() {
        assert!(network_spec(&rules(), None, "p").unwrap().is_disabled());
        let spec = network_spec(
            &rules(),
            Some(&allowlist(&["API.Example.com"], vec![])),
            "p",
        );
        assert_eq!(spec.unwrap().allowed_domains, ["api.example.com"]);
    }

    #[test]
    fn refusals_name_the_field() {
        let off = EgressRules {
            enabled: false,
            ..rules()
        };
        let policy = allowlist(&["a.test"], vec![]);
        assert_eq!(
            network_spec(&off, Some(&policy), "p").unwrap_err().param,
            "p"
        );
        let empty = allowlist(&[], vec![]);
        let error = network_spec(&rules(), Some(&empty), "p").unwrap_err();
        assert_eq!(error.param, "p.allowed_domains");
        let any = allowlist(&["*"], vec![]);
        let error = network_spec(&rules(), Some(&any), "p").unwrap_err();
        assert_eq!(error.param, "p.allowed_domains");
        let elsewhere = allowlist(&["a.test"], vec![secret("b.test", "T")]);
        let error = network_spec(&rules(), Some(&elsewhere), "p").unwrap_err();
        assert_eq!(error.param, "p.domain_secrets");
        let twice = allowlist(
            &["a.test"],
            vec![secret("a.test", "T"), secret("a.test", "T")],
        );
        let error = network_spec(&rules(), Some(&twice), "p").unwrap_err();
        assert!(error.message.contains("twice"), "{error}");
    }

    #[test]
    fn a_secret_gets_a_placeholder_and_keeps_its_value_out_of_it() {
        let policy = allowlist(&["a.test"], vec![secret("a.test", "TOKEN")]);
        let spec = network_spec(&rules(), Some(&policy), "p").unwrap();
        assert_eq!(spec.secrets.len(), 1);
        assert!(!spec.secrets[0].placeholder.contains("a-long-enough-value"));
    }
}
