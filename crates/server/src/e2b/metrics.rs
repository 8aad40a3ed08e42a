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

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::extract::{Path, Query, State};
use axum::Json;
use serde::Deserialize;
use shellgate_sandbox_api::backend::ContainerUsage;
use shellgate_wire::e2b::{SandboxMetric, SandboxesWithMetrics};
use shellgate_wire::time::rfc3339;

use super::request::{bad_request, e2b_error, E2bProject};
use super::E2bError;
use crate::state::AppState;

/// How often the sampler reads every running sandbox (E2B's own interval).
pub(crate) const SAMPLE_INTERVAL: Duration = Duration::from_secs(5);
/// Samples kept per sandbox: an hour at the interval (56 bytes each).
const MAX_SAMPLES: usize = 720;
/// Sandboxes one `GET /sandboxes/metrics` may name (E2B's own bound).
const MAX_LISTED: usize = 100;

/// One sample, as kept (converted to E2B's shape when answered).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Sample {
    at: i64,
    cpu_pct: f32,
    cpu_count: u32,
    mem_used: u64,
    mem_cache: u64,
    mem_total: u64,
    disk_used: u64,
    disk_total: u64,
}

impl Sample {
    fn shown(&self) -> SandboxMetric {
        SandboxMetric {
            timestamp: rfc3339(self.at),
            timestamp_unix: self.at,
            cpu_count: self.cpu_count,
            // Two decimals, as E2B rounds it.
            cpu_used_pct: (f64::from(self.cpu_pct) * 100.0).round() / 100.0,
            mem_used: self.mem_used,
            mem_total: self.mem_total,
            mem_cache: self.mem_cache,
            disk_used: self.disk_used,
            disk_total: self.disk_total,
        }
    }
}

/// One sandbox's samples and the CPU reading the next one is measured from.
#[derive(Debug, Default)]
struct Series {
    /// CPU time (µs) and when it was read; `None` before the first sample.
    last_cpu: Option<(u64, Instant)>,
    samples: VecDeque<Sample>,
}

/// Every sandbox's samples, by id (see the module's documentation).
#[derive(Debug, Default)]
pub(crate) struct MetricsHistory {
    series: Mutex<HashMap<String, Series>>,
}

impl MetricsHistory {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Series>> {
        self.series.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a reading of sandbox `id` taken at `now` (the server's
    /// clock), with the cores it may use (`host_cores` when unlimited).
    fn record(&self, id: &str, usage: &ContainerUsage, now: i64, host_cores: f64) -> Sample {
        let cores = usage.cpu_cores.unwrap_or(host_cores).max(0.01);
        let read_at = Instant::now();
        let mut series = self.lock();
        let series = series.entry(id.to_owned()).or_default();
        // Since the previous reading of this start; a counter that went
        // back is a new start (a resume): measured since it began.
        let (used_usec, wall_usec) = match series.last_cpu {
            Some((cpu, at)) if usage.cpu_usec >= cpu => (
                usage.cpu_usec - cpu,
                u64::try_from(read_at.duration_since(at).as_micros()).unwrap_or(u64::MAX),
            ),
            _ => (usage.cpu_usec, usage.running_usec),
        };
        series.last_cpu = Some((usage.cpu_usec, read_at));
        let cpu_pct = if wall_usec == 0 {
            0.0
        } else {
            (used_usec as f64 / (wall_usec as f64 * cores) * 100.0).clamp(0.0, 100.0)
        };
        let sample = Sample {
            at: now,
            cpu_pct: cpu_pct as f32,
            cpu_count: cores.ceil().max(1.0) as u32,
            mem_used: usage.memory_bytes,
            mem_cache: usage.memory_cache_bytes,
            mem_total: usage.memory_limit_bytes,
            disk_used: usage.disk_used_bytes,
            disk_total: usage.disk_total_bytes,
        };
        // One sample per second at most: a request's fresh sample and the
        // sampler's in the same second are one.
        if series.samples.back().is_some_and(|last| last.at == now) {
            series.samples.pop_back();
        }
        series.samples.push_back(sample);
        while series.samples.len() > MAX_SAMPLES {
            series.samples.pop_front();
        }
        sample
    }

    /// Sandbox `id`'s samples from `start` to `end` (inclusive), oldest
    /// first.
    fn window(&self, id: &str, start: i64, end: i64) -> Vec<Sample> {
        self.lock().get(id).map_or_else(Vec::new, |series| {
            series
                .samples
                .iter()
                .filter(|s| s.at >= start && s.at <= end)
                .copied()
                .collect()
        })
    }

    fn latest(&self, id: &str) -> Option<Sample> {
        self.lock()
            .get(id)
            .and_then(|series| series.samples.back().copied())
    }

    /// Drops sandbox `id`'s samples (it was killed).
    pub(crate) fn forget(&self, id: &str) {
        self.lock().remove(id);
    }

    /// Drops the series whose last sample is older than `oldest`.
    fn prune(&self, oldest: i64) {
        self.lock()
            .retain(|_, series| series.samples.back().is_some_and(|s| s.at >= oldest));
    }
}

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
pub(super) async fn sandbox_metrics(
    State(state): State<Arc<AppState>>,
    E2bProject(project): E2bProject,
    Path(id): Path<String>,
    query: Result<Query<WindowQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<SandboxMetric>>, E2bError> {
    let Query(query) = query.map_err(|e| bad_request(e.body_text()))?;
    let (sandbox, _) = super::control::owned(&state, &project, &id).await?;
    let now = state.clock.now();
    let start = query.start.map(seconds).unwrap_or(sandbox.created_at);
    let end = query.end.map(seconds).unwrap_or(now);
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
pub(super) async fn sandboxes_metrics(
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

    fn usage(cpu_usec: u64, running_usec: u64) -> ContainerUsage {
        ContainerUsage {
            cpu_usec,
            running_usec,
            memory_bytes: 64 << 20,
            memory_cache_bytes: 8 << 20,
            memory_limit_bytes: 512 << 20,
            cpu_cores: Some(2.0),
            disk_used_bytes: 1 << 20,
            disk_total_bytes: 1 << 30,
        }
    }

    #[test]
    fn the_first_sample_measures_cpu_since_the_start_and_windows_select_by_time() {
        let history = MetricsHistory::default();
        // 1 s of CPU over 1 s of two cores: 50 %.
        let first = history.record("s", &usage(1_000_000, 1_000_000), 100, 8.0);
        assert_eq!(first.cpu_pct, 50.0);
        assert_eq!(first.cpu_count, 2);
        assert_eq!((first.mem_used, first.mem_total), (64 << 20, 512 << 20));
        // A counter that went back is a new start, measured since it.
        let resumed = history.record("s", &usage(0, 1_000_000), 105, 8.0);
        assert_eq!(resumed.cpu_pct, 0.0);
        history.record("s", &usage(10, 1), 110, 8.0);
        assert_eq!(history.window("s", 101, 110).len(), 2);
        assert_eq!(history.window("s", 0, 100).len(), 1);
        assert!(history.window("other", 0, 200).is_empty());
        // One sample per second.
        history.record("s", &usage(20, 1), 110, 8.0);
        assert_eq!(history.window("s", 110, 110).len(), 1);
        // Unlimited CPU: the host's cores.
        let open = ContainerUsage {
            cpu_cores: None,
            ..usage(4_000_000, 1_000_000)
        };
        assert_eq!(history.record("t", &open, 1, 8.0).cpu_count, 8);
        assert_eq!(history.record("u", &open, 1, 8.0).cpu_pct, 50.0);
    }

    #[test]
    fn history_is_bounded_and_pruned() {
        let history = MetricsHistory::default();
        for at in 0..(MAX_SAMPLES as i64 + 50) {
            history.record("s", &usage(at as u64, 1), at, 1.0);
        }
        let kept = history.window("s", 0, i64::MAX);
        assert_eq!(kept.len(), MAX_SAMPLES);
        assert_eq!(kept.first().map(|s| s.at), Some(50));
        history.record("old", &usage(1, 1), 10, 1.0);
        history.prune(20);
        assert!(history.latest("old").is_none());
        assert!(history.latest("s").is_some());
        history.forget("s");
        assert!(history.latest("s").is_none());
    }

    #[test]
    fn bounds_in_milliseconds_are_read_as_seconds() {
        assert_eq!(seconds(1_760_000_000), 1_760_000_000);
        assert_eq!(seconds(1_760_000_000_123), 1_760_000_000);
    }
}
