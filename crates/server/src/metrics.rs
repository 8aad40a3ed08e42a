//! Prometheus metrics, rendered in the text exposition format.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds (seconds) of the exec latency histogram.
const BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0, 300.0,
];

/// Counters the server keeps in memory.
#[derive(Debug, Default)]
pub struct Metrics {
    commands: AtomicU64,
    exec_requests: AtomicU64,
    exec_errors: AtomicU64,
    buckets: [AtomicU64; BUCKETS.len()],
    exec_count: AtomicU64,
    /// Sum of exec durations in microseconds.
    exec_sum_micros: AtomicU64,
}

impl Metrics {
    /// Records one exec request of `commands` commands that took `seconds`.
    pub fn exec(&self, commands: usize, seconds: f64, ok: bool) {
        self.exec_requests.fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.exec_errors.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.commands.fetch_add(commands as u64, Ordering::Relaxed);
        self.exec_count.fetch_add(1, Ordering::Relaxed);
        self.exec_sum_micros
            .fetch_add((seconds * 1e6) as u64, Ordering::Relaxed);
        for (bound, bucket) in BUCKETS.iter().zip(&self.buckets) {
            if seconds <= *bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The exposition text; `containers` by status and `sandbox_seconds`
    /// come from the store.
    pub fn render(&self, containers: &[(String, u64)], sandbox_seconds: f64) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# HELP shellgate_containers Containers by status.");
        let _ = writeln!(out, "# TYPE shellgate_containers gauge");
        for status in ["running", "suspended", "creating"] {
            let count = containers
                .iter()
                .find(|(s, _)| s == status)
                .map(|(_, c)| *c)
                .unwrap_or(0);
            let _ = writeln!(out, "shellgate_containers{{status=\"{status}\"}} {count}");
        }
        let _ = writeln!(out, "# HELP shellgate_commands_total Commands run.");
        let _ = writeln!(out, "# TYPE shellgate_commands_total counter");
        let _ = writeln!(
            out,
            "shellgate_commands_total {}",
            self.commands.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP shellgate_exec_requests_total Exec requests, failed ones included."
        );
        let _ = writeln!(out, "# TYPE shellgate_exec_requests_total counter");
        let _ = writeln!(
            out,
            "shellgate_exec_requests_total {}",
            self.exec_requests.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "shellgate_exec_errors_total {}",
            self.exec_errors.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP shellgate_exec_duration_seconds Latency of exec requests."
        );
        let _ = writeln!(out, "# TYPE shellgate_exec_duration_seconds histogram");
        for (bound, bucket) in BUCKETS.iter().zip(&self.buckets) {
            let _ = writeln!(
                out,
                "shellgate_exec_duration_seconds_bucket{{le=\"{bound}\"}} {}",
                bucket.load(Ordering::Relaxed)
            );
        }
        let count = self.exec_count.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "shellgate_exec_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let sum = self.exec_sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "shellgate_exec_duration_seconds_sum {sum}");
        let _ = writeln!(out, "shellgate_exec_duration_seconds_count {count}");
        let _ = writeln!(out, "# HELP shellgate_sandbox_seconds_total Billed sandbox time (30 s minimum per session).");
        let _ = writeln!(out, "# TYPE shellgate_sandbox_seconds_total counter");
        let _ = writeln!(out, "shellgate_sandbox_seconds_total {sandbox_seconds}");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let metrics = Metrics::default();
        metrics.exec(1, 0.002, true);
        metrics.exec(2, 0.2, true);
        metrics.exec(1, 1.0, false);
        let text = metrics.render(&[("running".into(), 3)], 42.0);
        assert!(text.contains("shellgate_exec_duration_seconds_bucket{le=\"0.0025\"} 1"));
        assert!(text.contains("shellgate_exec_duration_seconds_bucket{le=\"0.25\"} 2"));
        assert!(text.contains("shellgate_exec_duration_seconds_bucket{le=\"+Inf\"} 2"));
        assert!(text.contains("shellgate_commands_total 3"));
        assert!(text.contains("shellgate_containers{status=\"running\"} 3"));
        assert!(text.contains("shellgate_sandbox_seconds_total 42"));
    }
}
