//! The server's side of the egress proxy: the operator's settings, a
//! request's `network_policy` turned into a container's network (checked
//! against the organization allowlist, secrets given placeholders), the
//! egress log (written in batches on blocking threads, read at
//! `GET /v1/containers/{id}/egress`) and its counts in `/metrics`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::Json;
use shellgate_egress::policy::{Allowlist, MAX_PATTERNS};
use shellgate_egress::proxy::{Attempt, Settings};
use shellgate_egress::resolve::Resolver;
use shellgate_egress::secrets::{self, SecretValue};
use shellgate_sandbox::backend::NetworkSpec;
use shellgate_store::EgressRow;
use shellgate_wire::{List, NetworkPolicy};
use tokio::sync::mpsc;

use crate::config::{comma_list, Config};
use crate::error::{ApiError, ApiResult};
use crate::http::{ApiQuery, ListParams, Project};
use crate::{new_id, AppState, ServeError};

/// Attempts queued for the log before new ones are counted, not kept.
const LOG_QUEUE: usize = 8192;
/// Attempts one container may log per second (beyond a burst of as many
/// again); the rest are counted as dropped.
const LOG_RATE_PER_CONTAINER: f64 = 200.0;
/// Largest secret value (the seeds' limit).
const MAX_SECRET_BYTES: usize = 10 * 1024 * 1024;

/// Counts of the egress log, for `/metrics`.
#[derive(Debug, Default)]
pub struct EgressCounts {
    /// (kind, verdict) → attempts.
    attempts: Mutex<BTreeMap<(String, String), u64>>,
    /// Bytes each way through the proxy.
    bytes_out: AtomicU64,
    bytes_in: AtomicU64,
    /// Attempts not logged (queue full, or a container over its rate).
    dropped: AtomicU64,
}

/// The proxy's settings, and the receiving end of its log.
pub type Egress = (Arc<Settings>, mpsc::Receiver<Attempt>);

/// The proxy's settings from the configuration, and the receiving end of
/// its log; `None` when egress is off.
pub fn settings(config: &Config) -> Result<Option<Egress>, ServeError> {
    if !config.egress {
        return Ok(None);
    }
    let setup = |e: String| ServeError::Setup(e);
    let roots: Vec<PathBuf> = comma_list(&config.egress_trusted_roots)
        .into_iter()
        .map(PathBuf::from)
        .collect();
    let upstream_tls = shellgate_egress::intercept::upstream_tls(&roots)
        .map_err(|e| setup(format!("egress_trusted_roots: {e}")))?;
    let server = match config.egress_dns_server.as_str() {
        "" => None,
        text => Some(
            text.parse()
                .map_err(|_| setup(format!("egress_dns_server = {text:?} is not an address")))?,
        ),
    };
    let static_hosts: HashMap<String, Vec<std::net::IpAddr>> = config
        .egress_hosts
        .iter()
        .map(|(name, addresses)| (shellgate_egress::policy::normalize(name), addresses.clone()))
        .collect();
    let exceptions: HashSet<String> = comma_list(&config.egress_private_exceptions)
        .iter()
        .map(|name| shellgate_egress::policy::normalize(name))
        .collect();
    let (log, receiver) = mpsc::channel(LOG_QUEUE);
    Ok(Some((
        Arc::new(Settings {
            resolver: Resolver {
                static_hosts,
                server,
            },
            exceptions,
            log,
            dropped: AtomicU64::new(0),
            upstream_tls: Arc::new(upstream_tls),
        }),
        receiver,
    )))
}

/// A request's `network_policy` as a container's network: the domains
/// checked against the organization allowlist (a request can only narrow
/// it), at most 50 of them, `*` only if the operator allows it, and each
/// secret given a placeholder (its value stays in memory only).
pub fn network_spec(
    config: &Config,
    policy: Option<&NetworkPolicy>,
    param: &str,
) -> ApiResult<NetworkSpec> {
    let Some(NetworkPolicy::Allowlist {
        allowed_domains,
        domain_secrets,
        tls_passthrough_domains,
    }) = policy
    else {
        return Ok(NetworkSpec::default());
    };
    let domains_param = format!("{param}.allowed_domains");
    if !config.egress {
        return Err(ApiError::invalid(
            param,
            "this server's egress proxy is off, so containers cannot have network access here \
             (the operator can set egress = true)",
        ));
    }
    if allowed_domains.is_empty() {
        return Err(ApiError::invalid(
            domains_param,
            "an allowlist needs at least one domain",
        ));
    }
    if allowed_domains.len() > MAX_PATTERNS {
        return Err(ApiError::invalid(
            domains_param,
            format!(
                "{} allowed domains given; at most {MAX_PATTERNS} are allowed",
                allowed_domains.len()
            ),
        ));
    }
    if !config.egress_allow_any_domain && allowed_domains.iter().any(|d| d.trim() == "*") {
        return Err(ApiError::invalid(
            domains_param,
            "'*' (every domain) is not allowed on this server (egress_allow_any_domain)",
        ));
    }
    let org = config
        .egress_org_allowlist()
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let allowlist = Allowlist::parse(allowed_domains, &org)
        .map_err(|e| ApiError::invalid(domains_param.clone(), e.to_string()))?;
    let secrets_param = format!("{param}.domain_secrets");
    let mut names = HashSet::new();
    let mut secrets = Vec::with_capacity(domain_secrets.len());
    for secret in domain_secrets {
        let domain = shellgate_egress::policy::normalize(&secret.domain);
        if !allowed_domains
            .iter()
            .any(|d| shellgate_egress::policy::normalize(d) == domain)
        {
            return Err(ApiError::invalid(
                secrets_param,
                format!(
                    "secret {} is for {}, which is not one of the allowed domains",
                    secret.name, secret.domain
                ),
            ));
        }
        if !secrets::valid_name(&secret.name) {
            return Err(ApiError::invalid(
                secrets_param,
                format!(
                    "{:?} is not an environment variable name (letters, digits and _, not \
                     starting with a digit)",
                    secret.name
                ),
            ));
        }
        if !names.insert(secret.name.clone()) {
            return Err(ApiError::invalid(
                secrets_param,
                format!("secret {} is given twice", secret.name),
            ));
        }
        if secret.value.is_empty() || secret.value.len() > MAX_SECRET_BYTES {
            return Err(ApiError::invalid(
                secrets_param,
                format!(
                    "the value of secret {} must be 1 to {MAX_SECRET_BYTES} bytes",
                    secret.name
                ),
            ));
        }
        if secret.value.contains(['\r', '\n', '\0']) {
            return Err(ApiError::invalid(
                secrets_param,
                format!(
                    "the value of secret {} may not contain line breaks or NUL (it goes into \
                     HTTP headers)",
                    secret.name
                ),
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
) -> ApiResult<(Vec<secrets::InjectInto>, Vec<String>, Vec<String>)> {
    use shellgate_wire::InjectInto as Wire;
    let invalid = |message: String| Err(ApiError::invalid(param, message));
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
    let list = |values: &Option<Vec<String>>, what: &str| -> ApiResult<Vec<String>> {
        match values {
            None => Ok(Vec::new()),
            Some(values) if values.is_empty() || values.len() > MAX_SCOPES => {
                Err(ApiError::invalid(
                    param,
                    format!("secret {name}: {what} needs 1 to {MAX_SCOPES} entries"),
                ))
            }
            Some(values) => {
                let unique: HashSet<&String> = values.iter().collect();
                if unique.len() != values.len() {
                    return Err(ApiError::invalid(
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
        let lower = path.to_ascii_lowercase();
        let ambiguous = path.split('/').any(|s| s == "." || s == "..")
            || ["%2e", "%2f", "%5c", "\\", "//", "?", "#"]
                .iter()
                .any(|bad| lower.contains(bad));
        if !path.starts_with('/')
            || path.len() > 1024
            || !path.bytes().all(|b| (0x21..0x7f).contains(&b))
            || ambiguous
        {
            return invalid(format!(
                "secret {name}: {path:?} is not a path prefix (it starts with '/', holds \
                 visible ASCII, no query, no dot segments, no escaped '.', '/' or '\\')"
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
) -> ApiResult<Vec<String>> {
    use shellgate_egress::policy::Pattern;
    if domains.is_empty() {
        return Ok(Vec::new());
    }
    if let Some(secret) = secrets.first() {
        return Err(ApiError::invalid(
            param,
            format!(
                "TLS passthrough cannot be combined with domain_secrets (secret {}): answers \
                 that pass through unread cannot be checked for a secret's value",
                secret.name
            ),
        ));
    }
    if domains.len() > MAX_PATTERNS {
        return Err(ApiError::invalid(
            param,
            format!("at most {MAX_PATTERNS} passthrough domains are allowed"),
        ));
    }
    let mut out = Vec::with_capacity(domains.len());
    for domain in domains {
        let pattern =
            Pattern::parse(domain, false).map_err(|e| ApiError::invalid(param, e.to_string()))?;
        if !allowlist
            .patterns()
            .iter()
            .any(|outer| pattern.within(outer))
        {
            return Err(ApiError::invalid(
                param,
                format!("{domain} is not within the allowed domains"),
            ));
        }
        out.push(pattern.to_string());
    }
    Ok(out)
}

/// Writes the proxy's attempts to the store, in batches, until the proxy
/// is gone.
pub(crate) fn spawn_log_writer(state: Arc<AppState>, mut attempts: mpsc::Receiver<Attempt>) {
    tokio::spawn(async move {
        let mut buckets: HashMap<String, (f64, Instant)> = HashMap::new();
        let mut batch = Vec::with_capacity(256);
        while attempts.recv_many(&mut batch, 512).await > 0 {
            let mut rows = Vec::with_capacity(batch.len());
            for attempt in batch.drain(..) {
                state.egress_counts.count(&attempt);
                // A token bucket per container: one flooding container
                // neither fills the disk nor crowds out the others.
                let now = Instant::now();
                if buckets.len() > 10_000 {
                    buckets.clear();
                }
                let (tokens, last) = buckets
                    .entry(attempt.container.clone())
                    .or_insert((LOG_RATE_PER_CONTAINER, now));
                *tokens = (*tokens
                    + now.duration_since(*last).as_secs_f64() * LOG_RATE_PER_CONTAINER)
                    .min(LOG_RATE_PER_CONTAINER);
                *last = now;
                if *tokens < 1.0 {
                    state
                        .egress_counts
                        .dropped
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    continue;
                }
                *tokens -= 1.0;
                rows.push(row_of(attempt));
            }
            if rows.is_empty() {
                continue;
            }
            if let Err(e) = state.db(move |s| s.record_egress(&rows)).await {
                tracing::error!("could not write the egress log: {}", e.message);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
}

fn row_of(attempt: Attempt) -> EgressRow {
    EgressRow {
        id: new_id("egr_"),
        project: String::new(),
        container_id: attempt.container,
        created_at: attempt.time,
        kind: attempt.kind.to_owned(),
        requested_name: attempt.requested_name,
        server_name: attempt.server_name,
        address: attempt.address.map(|a| a.to_string()),
        port: attempt.port,
        verdict: attempt.verdict.as_str().to_owned(),
        reason: attempt.reason,
        bytes_out: attempt.bytes_out,
        bytes_in: attempt.bytes_in,
        duration_ms: attempt.duration_ms,
    }
}

impl EgressCounts {
    fn count(&self, attempt: &Attempt) {
        use std::sync::atomic::Ordering::Relaxed;
        *self
            .attempts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((attempt.kind.to_owned(), attempt.verdict.as_str().to_owned()))
            .or_default() += 1;
        self.bytes_out.fetch_add(attempt.bytes_out, Relaxed);
        self.bytes_in.fetch_add(attempt.bytes_in, Relaxed);
    }

    /// The exposition text of the counts; `queue_dropped` is the proxy's.
    pub(crate) fn render(&self, queue_dropped: u64) -> String {
        use std::fmt::Write;
        use std::sync::atomic::Ordering::Relaxed;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP shellgate_egress_attempts_total Attempts to leave a container, by kind and verdict."
        );
        let _ = writeln!(out, "# TYPE shellgate_egress_attempts_total counter");
        for ((kind, verdict), count) in self
            .attempts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let _ = writeln!(
                out,
                "shellgate_egress_attempts_total{{kind=\"{kind}\",verdict=\"{verdict}\"}} {count}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP shellgate_egress_bytes_total Bytes through the egress proxy."
        );
        let _ = writeln!(out, "# TYPE shellgate_egress_bytes_total counter");
        let _ = writeln!(
            out,
            "shellgate_egress_bytes_total{{direction=\"out\"}} {}",
            self.bytes_out.load(Relaxed)
        );
        let _ = writeln!(
            out,
            "shellgate_egress_bytes_total{{direction=\"in\"}} {}",
            self.bytes_in.load(Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP shellgate_egress_log_dropped_total Attempts counted but not written to the egress log."
        );
        let _ = writeln!(out, "# TYPE shellgate_egress_log_dropped_total counter");
        let _ = writeln!(
            out,
            "shellgate_egress_log_dropped_total {}",
            self.dropped.load(Relaxed) + queue_dropped
        );
        out
    }
}

/// `GET /v1/containers/{id}/egress`: the container's egress log, paged like
/// every list (our extension).
pub async fn list(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    ApiQuery(params): ApiQuery<ListParams>,
) -> ApiResult<Json<List<serde_json::Value>>> {
    crate::containers::owned(&state, &project, &id).await?;
    let page = params.page()?;
    let key = id.clone();
    let (rows, has_more) = state.db(move |s| s.list_egress(&key, &page)).await?;
    let data = rows
        .iter()
        .map(|row| {
            serde_json::json!({
                "id": row.id,
                "object": "container.egress",
                "container_id": row.container_id,
                "created_at": row.created_at,
                "kind": row.kind,
                "requested_name": row.requested_name,
                "server_name": row.server_name,
                "address": row.address,
                "port": row.port,
                "verdict": row.verdict,
                "reason": row.reason,
                "bytes_out": row.bytes_out,
                "bytes_in": row.bytes_in,
                "duration_ms": row.duration_ms,
            })
        })
        .collect();
    Ok(Json(List::page(data, has_more, |c: &serde_json::Value| {
        c["id"].as_str().unwrap_or_default().to_owned()
    })))
}
