//! The server's side of the egress proxy: the operator's settings, a
//! request's `network_policy` turned into a container's network (checked
//! against the organization allowlist, secrets given placeholders), the
//! egress log (written in batches on blocking threads; read at
//! `GET /v1/containers/{id}/egress`, see `container_egress`) and its counts
//! in `/metrics`.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shellgate_egress::proxy::{Attempt, Settings, Verdict};
use shellgate_sandbox_api::backend::NetworkSpec;
use shellgate_sandbox_api::network;
use shellgate_sandbox_api::SandboxBackend;
use shellgate_store::{EgressRow, EgressVerdict};
use shellgate_wire::{new_id, NetworkPolicy};
use tokio::sync::mpsc;

use crate::config::Config;
use crate::db::Db;
use crate::error::{ApiError, ApiResult, ServeError};

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
    if !config.egress.egress {
        return Ok(None);
    }
    let (settings, log) =
        Settings::configure(&config.egress.proxy_options()).map_err(ServeError::Setup)?;
    Ok(Some((Arc::new(settings), log)))
}

/// A request's `network_policy` as a container's network, by the rule the
/// command line shares ([`shellgate_sandbox_api::network::network_spec`]),
/// with the operator's settings of `config`.
pub fn network_spec(
    config: &Config,
    policy: Option<&NetworkPolicy>,
    param: &str,
) -> ApiResult<NetworkSpec> {
    // Checked at start-up (`Config::validate`): an error cannot reach here.
    let rules = config
        .egress
        .rules()
        .map_err(|e| ApiError::internal(e.to_string()))?;
    network::network_spec(&rules, policy, param).map_err(|e| ApiError::invalid(e.param, e.message))
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

/// Writes the proxy's attempts to the store, in batches, until the proxy
/// is gone. Every record that reaches the queue is written: the budgets
/// (lookups per container, logged one by one or in aggregate rows) are
/// applied by the proxy before queueing, so a flood of cheap events cannot
/// crowd out a connection's record; connection records are never
/// budgeted (a connection's slot is held until its record is queued).
pub(crate) fn spawn_log_writer(
    db: Db,
    engine: Arc<dyn SandboxBackend>,
    counts: Arc<EgressCounts>,
    mut attempts: mpsc::Receiver<Attempt>,
) {
    tokio::spawn(async move {
        let mut batch = Vec::with_capacity(256);
        while attempts.recv_many(&mut batch, 512).await > 0 {
            let rows: Vec<EgressRow> = batch
                .drain(..)
                .map(|attempt| {
                    counts.count(&attempt);
                    let mut row = row_of(attempt);
                    // A name a container asked for may hold a value it
                    // assembled (`$(...).example`): the log keeps it masked.
                    if let Some(masker) = engine.masker(&row.container_id) {
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
            if let Err(e) = db.run(move |s| s.record_egress(&rows)).await {
                tracing::error!("could not write the egress log: {}", e.message);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
}

/// Deletes egress rows older than `egress_log_retention_secs` (0: kept
/// forever), whatever their container, in bounded batches on the store's
/// blocking threads; returns how many went.
pub(crate) async fn sweep_old_rows(db: &Db, retention: u64, now: i64) -> Result<usize, ApiError> {
    if retention == 0 {
        return Ok(0);
    }
    let cutoff = now.saturating_sub(i64::try_from(retention).unwrap_or(i64::MAX));
    let mut deleted = 0;
    for _ in 0..RETENTION_BATCHES_PER_SWEEP {
        let batch = db
            .run(move |s| s.delete_egress_before(cutoff, RETENTION_BATCH))
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
