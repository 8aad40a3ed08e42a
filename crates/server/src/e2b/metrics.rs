//! E2B's sandbox metrics (`GET /sandboxes/{id}/metrics`,
//! `GET /sandboxes/metrics`): the container's own counters, sampled by
//! the server.
//!
//! Every [`SAMPLE_INTERVAL`] the sampler reads each running E2B sandbox
//! of this node (those with a timeout timer armed) through the backend's
//! `usage`: its cgroup's CPU time and memory, and its disk image's file
//! system. A sandbox keeps its last [`MAX_SAMPLES`] samples (an hour), a
//! ring in memory; a request reads the samples of the window it asks for,
//! and when that window reaches now and the latest sample is older than
//! the interval (a sandbox just made or resumed), a sample is taken for it
//! first. CPU is in percent of the cores the sandbox may use, over the time
//! since its previous sample (the first one of a start: since that start),
//! as E2B's envd reports it. History is not kept across a restart of the
//! server, and a series whose last sample is older than the history's span
//! is dropped (its sandbox ended or paused long ago).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::Json;
use serde::Deserialize;
use shellgate_wire::e2b::{SandboxMetric, SandboxesWithMetrics};

use super::metrics_history::{Sample, MAX_SAMPLES};
use super::request::{bad_request, e2b_error, E2bProject};
use super::E2bError;
use crate::state::AppState;

/// The metrics routes, beside the control plane's (`control`, whose
/// ownership check they use).
pub(crate) fn routes(table: crate::route_table::RouteTable) -> crate::route_table::RouteTable {
    table
        .route(
            "/sandboxes/{sandbox_id}/metrics",
            axum::routing::get(sandbox_metrics),
        )
        .route("/sandboxes/metrics", axum::routing::get(sandboxes_metrics))
}

/// How often the sampler reads every running sandbox (E2B's own interval).
pub(crate) const SAMPLE_INTERVAL: Duration = Duration::from_secs(5);
/// Sandboxes one `GET /sandboxes/metrics` may name (E2B's own bound).
const MAX_LISTED: usize = 100;

fn host_cores() -> f64 {
    std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
}

/// Reads sandbox `id` now and records it; `None` when it is not running on
/// this node (stopped, paused, gone).
async fn sample(state: &AppState, id: &str) -> Option<Sample> {
    match state.engine.usage(id).await {
        Ok(Some(usage)) => {
            let cores = state
                .config
                .sandbox
                .container_cpu_ceiling()
                .unwrap_or_else(host_cores);
            Some(
                state
                    .e2b_metrics
                    .record(id, &usage, state.clock.now(), cores),
            )
        }
        Ok(None) => None,
        Err(error) => {
            tracing::debug!(sandbox = %id, "no metrics sample: {error}");
            None
        }
    }
}

/// A sample of `id` no older than the interval: the latest, or one taken
/// now.
async fn fresh_sample(state: &AppState, id: &str) -> Option<Sample> {
    let now = state.clock.now();
    let interval = SAMPLE_INTERVAL.as_secs() as i64;
    match state.e2b_metrics.latest(id) {
        Some(latest) if now - latest.at < interval => Some(latest),
        _ => sample(state, id).await,
    }
}

/// Samples every running E2B sandbox of this node every
/// [`SAMPLE_INTERVAL`], until the task is aborted.
pub async fn sample_forever(state: Arc<AppState>) {
    let mut ticks = tokio::time::interval(SAMPLE_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        for id in state.e2b_deadlines.ids() {
            sample(&state, &id).await;
        }
        let span = SAMPLE_INTERVAL.as_secs() as i64 * MAX_SAMPLES as i64;
        state.e2b_metrics.prune(state.clock.now() - span);
    }
}

/// The window's query: Unix seconds (older SDKs sent milliseconds).
#[derive(Debug, Default, Deserialize)]
pub(super) struct WindowQuery {
    start: Option<i64>,
    end: Option<i64>,
}

/// Seconds of a bound the SDK sent in seconds or (older SDKs) in
/// milliseconds: no second of this millennium is 10^11.
fn seconds(value: i64) -> i64 {
    if value.abs() >= 100_000_000_000 {
        value / 1000
    } else {
        value
    }
}

/// `GET /sandboxes/{id}/metrics`: the samples from `start` (the sandbox's
/// start when omitted) to `end` (now), oldest first.
async fn sandbox_metrics(
    State(state): State<Arc<AppState>>,
    E2bProject(project): E2bProject,
    Path(id): Path<String>,
    query: Result<Query<WindowQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<SandboxMetric>>, E2bError> {
    let Query(query) = query.map_err(|e| bad_request(e.body_text()))?;
    let (sandbox, _) = super::control::owned(&state, &project, &id).await?;
    let now = state.clock.now();
    let end = query.end.map(seconds).unwrap_or(now);
    // Unasked, the window opens at the sandbox's creation, never after its
    // end: a creation time that read a second past the clock (seen once, a
    // sandbox made just before the request) was answered 400.
    let start = query
        .start
        .map(seconds)
        .unwrap_or_else(|| sandbox.created_at.min(end));
    if start < 0 || end < 0 {
        return Err(bad_request("start and end must be Unix times"));
    }
    if start > end {
        return Err(bad_request("start must not be after end"));
    }
    if !sandbox.paused && end >= now - SAMPLE_INTERVAL.as_secs() as i64 {
        fresh_sample(&state, &id).await;
    }
    Ok(Json(
        state
            .e2b_metrics
            .window(&id, start, end)
            .iter()
            .map(Sample::shown)
            .collect(),
    ))
}

/// `GET /sandboxes/metrics`'s query.
#[derive(Debug, Default, Deserialize)]
pub(super) struct ListedQuery {
    sandbox_ids: Option<String>,
}

/// `GET /sandboxes/metrics?sandbox_ids=a,b`: each named sandbox's latest
/// sample, for the project's running sandboxes among them (others are
/// left out, as E2B leaves them).
async fn sandboxes_metrics(
    State(state): State<Arc<AppState>>,
    E2bProject(project): E2bProject,
    query: Result<Query<ListedQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<SandboxesWithMetrics>, E2bError> {
    let Query(query) = query.map_err(|e| bad_request(e.body_text()))?;
    let Some(ids) = query.sandbox_ids else {
        return Err(bad_request("sandbox_ids is required"));
    };
    let mut wanted: Vec<String> = ids
        .split(',')
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .collect();
    wanted.sort();
    wanted.dedup();
    if wanted.is_empty() || wanted.len() > MAX_LISTED {
        return Err(bad_request(format!(
            "sandbox_ids must name 1 to {MAX_LISTED} sandboxes"
        )));
    }
    let (owner, asked) = (project.clone(), wanted.clone());
    let running = state
        .db(move |s| {
            let mut running = Vec::new();
            for id in &asked {
                if let Some(row) = s.e2b_sandbox(&owner, id)? {
                    if !row.paused {
                        running.push(row.container_id);
                    }
                }
            }
            Ok(running)
        })
        .await
        .map_err(e2b_error)?;
    let mut sandboxes = BTreeMap::new();
    for id in running {
        if let Some(sample) = fresh_sample(&state, &id).await {
            sandboxes.insert(id, sample.shown());
        }
    }
    Ok(Json(SandboxesWithMetrics { sandboxes }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_in_milliseconds_are_read_as_seconds() {
        assert_eq!(seconds(1_760_000_000), 1_760_000_000);
        assert_eq!(seconds(1_760_000_000_123), 1_760_000_000);
    }
}
