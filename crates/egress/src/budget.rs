//! Budgets for what a container can make the proxy do cheaply and often:
//! a token bucket (DNS lookups answered per second, lookups logged one row
//! each per second) and the counts of events that were not logged one by
//! one (lookups; connections reset unread over the limit of connections at
//! once), which become one aggregate row of the egress log a second.
//!
//! Why: a container can send thousands of DNS queries a second. Answering
//! them all lets a wildcard allowlist carry data out in the names; logging
//! them all used to spend the log's whole budget, so the connection that
//! really took data out went unrecorded. Real connection attempts are
//! never budgeted here (see [`crate::proxy`]).

use std::time::Instant;

/// A token bucket: `rate` tokens a second, at most `burst` saved up.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(rate: f64, burst: f64, now: Instant) -> Self {
        Self {
            rate,
            burst,
            tokens: burst,
            last: now,
        }
    }

    /// Takes one token if there is one (refilled up to `now` first).
    pub fn take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.last = now.max(self.last);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Events not logged one row each since the last aggregate row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Unlogged {
    /// Answered with addresses, past the log budget.
    pub allowed: u64,
    /// Refused by the allowlist or the forbidden addresses, past the log
    /// budget.
    pub denied: u64,
    /// Not answered at all: over the container's DNS rate limit.
    pub rate_limited: u64,
    /// Connections reset before a byte was read: the container had as
    /// many open through the proxy as it may.
    pub over_connection_limit: u64,
    /// The first of them, seconds since the Unix epoch.
    pub since: i64,
}

impl Unlogged {
    /// How many events these are.
    pub fn total(&self) -> u64 {
        self.allowed + self.denied + self.rate_limited + self.over_connection_limit
    }

    /// Adds one lookup that happened at `time`.
    pub fn add(&mut self, time: i64, allowed: bool, rate_limited: bool) {
        self.start(time);
        if rate_limited {
            self.rate_limited += 1;
        } else if allowed {
            self.allowed += 1;
        } else {
            self.denied += 1;
        }
    }

    /// Adds one connection reset over the limit, at `time`.
    pub fn add_over_connection_limit(&mut self, time: i64) {
        self.start(time);
        self.over_connection_limit += 1;
    }

    fn start(&mut self, time: i64) {
        if self.total() == 0 {
            self.since = time;
        }
    }

    /// The aggregate row's reason.
    pub fn describe(&self, log_rate: f64, dns_rate: f64, connection_limit: usize) -> String {
        let mut parts = Vec::new();
        let lookups = self.allowed + self.denied + self.rate_limited;
        if lookups > 0 {
            parts.push(format!(
                "{lookups} DNS lookups not logged one by one: {} answered and {} refused past \
                 the log's {log_rate}/s, {} refused unanswered over the rate limit of {dns_rate} \
                 lookups/s",
                self.allowed, self.denied, self.rate_limited
            ));
        }
        if self.over_connection_limit > 0 {
            parts.push(format!(
                "{} connections reset unread: over the limit of {connection_limit} open at once",
                self.over_connection_limit
            ));
        }
        parts.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_bucket_allows_its_burst_then_its_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(10.0, 5.0, start);
        assert_eq!((0..8).filter(|_| bucket.take(start)).count(), 5);
        // A tenth of a second later: one more token.
        let later = start + Duration::from_millis(100);
        assert!(bucket.take(later));
        assert!(!bucket.take(later));
        // Long idle: the bucket is full again, never fuller.
        let much_later = later + Duration::from_secs(60);
        assert_eq!((0..8).filter(|_| bucket.take(much_later)).count(), 5);
        // Time going backwards gives nothing.
        assert!(!bucket.take(start));
    }

    #[test]
    fn unlogged_lookups_are_counted_by_what_happened_to_them() {
        let mut unlogged = Unlogged::default();
        unlogged.add(100, true, false);
        unlogged.add(101, false, false);
        unlogged.add(102, false, true);
        unlogged.add(103, true, true);
        assert_eq!(
            unlogged,
            Unlogged {
                allowed: 1,
                denied: 1,
                rate_limited: 2,
                over_connection_limit: 0,
                since: 100
            }
        );
        assert_eq!(unlogged.total(), 4);
        let reason = unlogged.describe(20.0, 50.0, 256);
        assert!(reason.starts_with("4 DNS lookups"), "{reason}");
        assert!(reason.contains("2 refused unanswered"), "{reason}");
        assert!(!reason.contains("connections"), "{reason}");
        let mut connections = Unlogged::default();
        connections.add_over_connection_limit(200);
        connections.add_over_connection_limit(201);
        assert_eq!((connections.total(), connections.since), (2, 200));
        assert_eq!(
            connections.describe(20.0, 50.0, 256),
            "2 connections reset unread: over the limit of 256 open at once"
        );
    }
}
