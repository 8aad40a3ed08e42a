//! E2B sandboxes' sampled resource use, as the server keeps it: a ring of
//! samples per sandbox (`e2b::metrics` takes them and answers them).

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use shellgate_sandbox_api::backend::ContainerUsage;
use shellgate_wire::e2b::SandboxMetric;
use shellgate_wire::time::rfc3339;

/// Samples kept per sandbox: an hour at the interval (56 bytes each).
pub(crate) const MAX_SAMPLES: usize = 720;
/// One sample, as kept (converted to E2B's shape when answered).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Sample {
    pub(crate) at: i64,
    pub(crate) cpu_pct: f32,
    pub(crate) cpu_count: u32,
    pub(crate) mem_used: u64,
    pub(crate) mem_cache: u64,
    pub(crate) mem_total: u64,
    pub(crate) disk_used: u64,
    pub(crate) disk_total: u64,
}

impl Sample {
    pub(crate) fn shown(&self) -> SandboxMetric {
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
    pub(crate) fn record(
        &self,
        id: &str,
        usage: &ContainerUsage,
        now: i64,
        host_cores: f64,
    ) -> Sample {
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
    pub(crate) fn window(&self, id: &str, start: i64, end: i64) -> Vec<Sample> {
        self.lock().get(id).map_or_else(Vec::new, |series| {
            series
                .samples
                .iter()
                .filter(|s| s.at >= start && s.at <= end)
                .copied()
                .collect()
        })
    }

    pub(crate) fn latest(&self, id: &str) -> Option<Sample> {
        self.lock()
            .get(id)
            .and_then(|series| series.samples.back().copied())
    }

    /// Drops sandbox `id`'s samples (it was killed).
    pub(crate) fn forget(&self, id: &str) {
        self.lock().remove(id);
    }

    /// Drops the series whose last sample is older than `oldest`.
    pub(crate) fn prune(&self, oldest: i64) {
        self.lock()
            .retain(|_, series| series.samples.back().is_some_and(|s| s.at >= oldest));
    }
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
}
