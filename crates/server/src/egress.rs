//! The server's side of the egress proxy: the operator's settings, a
//! request's `network_policy` turned into a container's network (checked
//! against the organization allowlist, secrets given placeholders), the
//! egress log (written in batches on blocking threads, read at
//! `GET /v1/containers/{id}/egress`) and its counts in `/metrics`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::Json;
use shellgate_egress::policy::{Allowlist, Exceptions, MAX_PATTERNS};
use shellgate_egress::proxy::{Attempt, LookupLimits, Settings, Verdict};
use shellgate_egress::resolve::Resolver;
use shellgate_egress::secrets::{self, SecretValue};
use shellgate_sandbox::backend::NetworkSpec;
use shellgate_store::{EgressRow, EgressVerdict};
use shellgate_wire::{List, NetworkPolicy};
use tokio::sync::mpsc;

use crate::config::{comma_list, Config};
use crate::error::{ApiError, ApiResult};
use crate::http::{ApiQuery, ListParams, Project};
use crate::{new_id, AppState, ServeError};

/// Records queued for the log (DNS lookups may use half of it; see
/// [`shellgate_egress::proxy::AttemptSink`]).
const LOG_QUEUE: usize = 8192;
/// Oldest egress rows deleted in one store call by the sweeper, and most
/// such calls in one sweep (the rest wait for the next sweep).
const RETENTION_BATCH: usize = 5_000;
const RETENTION_BATCHES_PER_SWEEP: usize = 100;

/// Counts of the egress log, for `/metrics`.
#[derive(Debug, Default)]
pub struct EgressCounts {
    /// (kind, verdict) → attempts.
    attempts: Mutex<BTreeMap<(String, String), u64>>,
    /// Bytes each way through the proxy.
    bytes_out: AtomicU64,
    bytes_in: AtomicU64,
    /// DNS lookups without a row of their own (in aggregate rows): past
    /// the log budget, answered or refused; over the rate limit.
    unlogged_allowed: AtomicU64,
    unlogged_denied: AtomicU64,
    rate_limited: AtomicU64,
    /// Connections reset unread: a container at its limit of connections.
    over_connection_limit: AtomicU64,
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
    let exceptions = Exceptions::parse(&comma_list(&config.egress_private_exceptions))
        .map_err(|e| setup(format!("egress_private_exceptions: {e}")))?;
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
            lookups: LookupLimits::default(),
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
        // One rule for every path that takes secrets (secrets.rs): a
        // name that cannot steer the shell, a value masking cannot leak.
        secrets::check_secret(&secret.name, &secret.value)
            .map_err(|e| ApiError::invalid(secrets_param.clone(), e.to_string()))?;
        if !names.insert(secret.name.clone()) {
            return Err(ApiError::invalid(
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
    })
}

/// `POST /v1/containers/{id}/secrets` (our extension): the body.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SupplySecrets {
    pub domain_secrets: Vec<shellgate_wire::DomainSecret>,
}

/// `POST /v1/containers/{id}/secrets` (our extension): gives a container
/// whose server restarted the values of its secrets again (every one of
/// them, each the value it was made with, checked against its salted
/// digest). Until then its network is off; after it, its next command
/// starts it with its network (a running container is stopped first: its
/// processes end, its files stay). Answers the container object.
pub async fn supply(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    crate::http::ApiJson(body): crate::http::ApiJson<SupplySecrets>,
) -> ApiResult<Json<shellgate_wire::Container>> {
    let row = crate::containers::owned(&state, &project, &id).await?;
    let mut supplied = Vec::with_capacity(body.domain_secrets.len());
    for secret in &body.domain_secrets {
        secrets::check_secret(&secret.name, &secret.value)
            .map_err(|e| ApiError::invalid("domain_secrets", e.to_string()))?;
        supplied.push(secrets::DomainSecret {
            domain: shellgate_egress::policy::normalize(&secret.domain),
            name: secret.name.clone(),
            placeholder: String::new(),
            value: Some(SecretValue::new(secret.value.as_str())),
            ..Default::default()
        });
    }
    crate::to_completion(async move {
        state
            .engine
            .supply_secrets(&id, supplied)
            .await
            .map_err(|e| crate::engine_error(&id, e))?;
        if row.session_open {
            let key = id.clone();
            state
                .db(move |s| s.close_session(&key, shellgate_store::ContainerStatus::Suspended))
                .await?;
        }
        let (owner, key) = (project.0.clone(), id.clone());
        let row = state
            .db(move |s| s.container(&owner, &key))
            .await?
            .ok_or_else(|| ApiError::not_found("container", &id))?;
        Ok(Json(crate::containers::shown_container(&state, &row)))
    })
    .await
}

/// What replaces a secret's value wherever a request is echoed or stored.
pub const REDACTED: &str = "<redacted>";

/// `body` with the value of every `domain_secrets` entry replaced, wherever
/// in it a `domain_secrets` list appears (OpenAI's `shell`
/// `tools[].environment`, `openrouter:shell` `tools[].parameters.environment`,
/// or any other place): the one pass every request goes through before it
/// is echoed, stored or logged, so no tool type or path is forgotten.
pub fn without_secret_values(body: &serde_json::Value) -> serde_json::Value {
    let mut body = body.clone();
    redact_secret_values(&mut body);
    body
}

/// [`without_secret_values`] in place.
pub fn redact_secret_values(value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            for (key, inner) in map.iter_mut() {
                if key == "domain_secrets" {
                    redact_secret_list(inner);
                } else {
                    redact_secret_values(inner);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_secret_values),
        _ => {}
    }
}

/// A `domain_secrets` list with its values (and anything that is not an
/// entry, which might be one misspelt) replaced.
fn redact_secret_list(list: &mut serde_json::Value) {
    use serde_json::Value;
    let Value::Array(entries) = list else {
        *list = Value::String(REDACTED.to_owned());
        return;
    };
    for entry in entries {
        match entry {
            Value::Object(fields) => {
                for (key, field) in fields.iter_mut() {
                    if !matches!(key.as_str(), "domain" | "name") {
                        *field = Value::String(REDACTED.to_owned());
                    }
                }
            }
            other => *other = Value::String(REDACTED.to_owned()),
        }
    }
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
/// is gone. Every record that reaches the queue is written: the budgets
/// (lookups per container, logged one by one or in aggregate rows) are
/// applied by the proxy before queueing, so a flood of cheap events cannot
/// crowd out a connection's record; connection records are never
/// budgeted (a connection's slot is held until its record is queued).
pub(crate) fn spawn_log_writer(state: Arc<AppState>, mut attempts: mpsc::Receiver<Attempt>) {
    tokio::spawn(async move {
        let mut batch = Vec::with_capacity(256);
        while attempts.recv_many(&mut batch, 512).await > 0 {
            let rows: Vec<EgressRow> = batch
                .drain(..)
                .map(|attempt| {
                    state.egress_counts.count(&attempt);
                    let mut row = row_of(attempt);
                    // A name a container asked for may hold a value it
                    // assembled (`$(...).example`): the log keeps it masked.
                    if let Some(masker) = state.engine.masker(&row.container_id) {
                        for text in [&mut row.requested_name, &mut row.server_name]
                            .into_iter()
                            .flatten()
                        {
                            *text = masker.mask_str(text);
                        }
                        row.reason = masker.mask_str(&row.reason);
                    }
                    row
                })
                .collect();
            if let Err(e) = state.db(move |s| s.record_egress(&rows)).await {
                tracing::error!("could not write the egress log: {}", e.message);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
}

/// Deletes egress rows older than `egress_log_retention_secs` (0: kept
/// forever), whatever their container, in bounded batches on the store's
/// blocking threads; returns how many went.
pub(crate) async fn sweep_old_rows(state: &Arc<AppState>, now: i64) -> Result<usize, ApiError> {
    let retention = state.config.egress_log_retention_secs;
    if retention == 0 {
        return Ok(0);
    }
    let cutoff = now.saturating_sub(i64::try_from(retention).unwrap_or(i64::MAX));
    let mut deleted = 0;
    for _ in 0..RETENTION_BATCHES_PER_SWEEP {
        let batch = state
            .db(move |s| s.delete_egress_before(cutoff, RETENTION_BATCH))
            .await?;
        deleted += batch;
        if batch < RETENTION_BATCH {
            break;
        }
    }
    Ok(deleted)
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
        verdict: match attempt.verdict {
            Verdict::Allowed => EgressVerdict::Allowed,
            Verdict::Denied => EgressVerdict::Denied,
            Verdict::Notice => EgressVerdict::Notice,
            Verdict::Aggregated => EgressVerdict::Aggregated,
        },
        reason: attempt.reason,
        bytes_out: attempt.bytes_out,
        bytes_in: attempt.bytes_in,
        duration_ms: attempt.duration_ms,
        aggregated: attempt.unlogged.map_or(0, |u| u.total()),
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
        if let Some(unlogged) = &attempt.unlogged {
            self.unlogged_allowed.fetch_add(unlogged.allowed, Relaxed);
            self.unlogged_denied.fetch_add(unlogged.denied, Relaxed);
            self.rate_limited.fetch_add(unlogged.rate_limited, Relaxed);
            self.over_connection_limit
                .fetch_add(unlogged.over_connection_limit, Relaxed);
        }
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
            "# HELP shellgate_egress_lookups_unlogged_total DNS lookups without a row of their own in the egress log (counted in aggregate rows), by why: past the log budget (answered or refused) or over the rate limit (refused unanswered)."
        );
        let _ = writeln!(
            out,
            "# TYPE shellgate_egress_lookups_unlogged_total counter"
        );
        for (reason, count) in [
            ("log_budget_allowed", &self.unlogged_allowed),
            ("log_budget_denied", &self.unlogged_denied),
            ("rate_limited", &self.rate_limited),
        ] {
            let _ = writeln!(
                out,
                "shellgate_egress_lookups_unlogged_total{{reason=\"{reason}\"}} {}",
                count.load(Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP shellgate_egress_connections_over_limit_total Connections reset unread because their container had as many open as it may (counted in aggregate rows)."
        );
        let _ = writeln!(
            out,
            "# TYPE shellgate_egress_connections_over_limit_total counter"
        );
        let _ = writeln!(
            out,
            "shellgate_egress_connections_over_limit_total {}",
            self.over_connection_limit.load(Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP shellgate_egress_log_dropped_total Egress records lost (the log closed, or a container's backlog of connection records full)."
        );
        let _ = writeln!(out, "# TYPE shellgate_egress_log_dropped_total counter");
        let _ = writeln!(out, "shellgate_egress_log_dropped_total {queue_dropped}");
        out
    }
}

/// One row of a container's egress log, as `GET /v1/containers/{id}/egress`
/// shows it.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct EgressEntry {
    pub id: String,
    /// `container.egress`.
    pub object: &'static str,
    pub container_id: String,
    pub created_at: i64,
    /// `dns`, `http`, `https`, `connect` or `secret`.
    pub kind: String,
    pub requested_name: Option<String>,
    pub server_name: Option<String>,
    pub address: Option<String>,
    pub port: u16,
    /// `allowed`, `denied`, `notice`, or `aggregated` (a row standing for
    /// `aggregated` events that have none of their own).
    pub verdict: String,
    pub reason: String,
    pub bytes_out: u64,
    pub bytes_in: u64,
    pub duration_ms: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub aggregated: u64,
}

fn is_zero(count: &u64) -> bool {
    *count == 0
}

/// A page of the egress log, with the container's count of events that
/// have no row of their own.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct EgressPage {
    #[serde(flatten)]
    pub list: List<EgressEntry>,
    /// Events of this container (DNS lookups past its log budget or over
    /// its rate limit, connections reset unread over its limit of
    /// connections) counted in aggregate rows instead of a row each, since
    /// it was created (our extension).
    pub dropped: u64,
}

/// `GET /v1/containers/{id}/egress`: the container's egress log, paged like
/// every list (our extension).
pub async fn list(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    ApiQuery(params): ApiQuery<ListParams>,
) -> ApiResult<Json<EgressPage>> {
    crate::containers::owned(&state, &project, &id).await?;
    let page = params.page()?;
    let key = id.clone();
    let ((rows, has_more), dropped) = state
        .db(move |s| Ok((s.list_egress(&key, &page)?, s.egress_unlogged(&key)?)))
        .await?;
    let data = rows
        .into_iter()
        .map(|row| EgressEntry {
            id: row.id,
            object: "container.egress",
            container_id: row.container_id,
            created_at: row.created_at,
            kind: row.kind,
            requested_name: row.requested_name,
            server_name: row.server_name,
            address: row.address,
            port: row.port,
            verdict: row.verdict.as_str().to_owned(),
            reason: row.reason,
            bytes_out: row.bytes_out,
            bytes_in: row.bytes_in,
            duration_ms: row.duration_ms,
            aggregated: row.aggregated,
        })
        .collect();
    Ok(Json(EgressPage {
        list: List::page(data, has_more, |entry: &EgressEntry| entry.id.clone()),
        dropped,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_values_are_redacted_wherever_a_list_appears() {
        let body = json!({
            "tools": [
                {"type": "shell", "environment": {"type": "container_auto", "network_policy": {
                    "type": "allowlist", "allowed_domains": ["a.test"],
                    "domain_secrets": [{"domain": "a.test", "name": "T", "value": "v1-secret"}]}}},
                {"type": "openrouter:shell", "parameters": {"environment": {
                    "type": "container_auto", "network_policy": {
                    "type": "allowlist", "allowed_domains": ["a.test"],
                    "domain_secrets": [{"domain": "a.test", "name": "U", "value": "v2-secret",
                                        "extra": "v3-secret"}, "v4-secret"]}}}},
            ],
            "metadata": {"domain_secrets": "v5-secret"},
            "input": "keep me",
        });
        let text = without_secret_values(&body).to_string();
        for leaked in [
            "v1-secret",
            "v2-secret",
            "v3-secret",
            "v4-secret",
            "v5-secret",
        ] {
            assert!(!text.contains(leaked), "{leaked} in {text}");
        }
        assert!(text.contains("keep me") && text.contains("\"name\":\"U\""));
    }
}
