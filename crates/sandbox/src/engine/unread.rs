//! How fast the engine reads output that nobody is waiting for.
//!
//! A program's output is read by the server, on its own CPU, outside every
//! container's cgroup. Reading what a reader waits for, or what a buffer
//! keeps for a reader still to come, is the server's work; reading output
//! that would only be thrown away is not: a process whose buffer already
//! holds [`process_limits::OUTPUT_BUFFER`] bytes nobody read, or an exec
//! command past its first [`COMMAND_BURST`] bytes (its result keeps only a
//! head and a tail, and its streamed deltas are long spent). Such output is
//! read at most at the engine's `unread_output_rate` (by default
//! [`UNREAD_RATE`]; a one-shot command line, whose reading is its own
//! user's CPU, sets none): in between, the pipe (or terminal)
//! fills and the writer blocks, so a program flooding its output costs the
//! server next to nothing, while one that writes at a human or log rate (a
//! background server's access log) never notices. Nothing that is read is
//! lost to the semantics: a process's buffer still keeps the newest bytes,
//! an exec's result still has its exact head and tail; a flood only takes
//! longer to reach its end or its timeout.
//!
//! [`process_limits::OUTPUT_BUFFER`]: shellgate_sandbox_api::process::process_limits::OUTPUT_BUFFER

use std::time::Duration;

use tokio::time::Instant;

/// Bytes per second of output nobody waits for that are read, per process
/// or exec command (the engine's default `unread_output_rate`).
pub(super) const UNREAD_RATE: u64 = 1 << 20;

/// The output of an exec command read at full speed before [`UNREAD_RATE`]
/// applies (and what a quiet command saves up again): a command that prints
/// a large file or a long build log is not slowed.
pub(super) const COMMAND_BURST: u64 = 16 << 20;

/// The least a paused reader waits for before it reads again: one read's
/// worth, so that a flood is read in a few large pieces a second, not in
/// many small ones.
pub(super) const STEP: u64 = 64 * 1024;

/// A token bucket of bytes: `rate` a second, at most `burst` saved up;
/// or, without a rate, no bound at all.
#[derive(Debug)]
pub(super) struct DrainRate {
    /// `None`: unbounded.
    rate: Option<u64>,
    burst: u64,
    /// Bytes that may be read now.
    tokens: u64,
    /// When `tokens` was last brought up to date.
    at: Instant,
}

impl DrainRate {
    /// Full at `now`: the first `burst` bytes go at once, then `rate` a
    /// second (`None`: everything, always).
    pub(super) fn new(rate: Option<u64>, burst: u64, now: Instant) -> Self {
        Self {
            rate: rate.map(|rate| rate.max(1)),
            burst: burst.max(STEP),
            tokens: burst.max(STEP),
            at: now,
        }
    }

    fn refill(&mut self, rate: u64, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at);
        let earned = (elapsed.as_nanos() * u128::from(rate) / 1_000_000_000) as u64;
        if earned > 0 {
            self.tokens = self.tokens.saturating_add(earned).min(self.burst);
            // Only the time that earned whole bytes is used up.
            let used = Duration::from_nanos(
                (u128::from(earned) * 1_000_000_000 / u128::from(rate)) as u64,
            );
            self.at = if self.tokens == self.burst {
                now
            } else {
                self.at + used
            };
        }
    }

    /// How many bytes may be read now: none until at least a [`STEP`] has
    /// been saved up.
    pub(super) fn allowance(&mut self, now: Instant) -> usize {
        let Some(rate) = self.rate else {
            return usize::MAX;
        };
        self.refill(rate, now);
        if self.tokens < STEP {
            return 0;
        }
        usize::try_from(self.tokens).unwrap_or(usize::MAX)
    }

    /// `bytes` were read.
    pub(super) fn spend(&mut self, bytes: usize) {
        self.tokens = self.tokens.saturating_sub(bytes as u64);
    }

    /// When [`Self::allowance`] is next above zero.
    pub(super) fn ready_at(&self) -> Instant {
        let Some(rate) = self.rate else {
            return self.at;
        };
        let missing = STEP.saturating_sub(self.tokens);
        self.at
            + Duration::from_nanos((u128::from(missing) * 1_000_000_000 / u128::from(rate)) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_goes_at_once_then_the_rate_holds() {
        let start = Instant::now();
        let mut rate = DrainRate::new(Some(1 << 20), 4 << 20, start);
        assert_eq!(rate.allowance(start), 4 << 20);
        rate.spend(4 << 20);
        assert_eq!(rate.allowance(start), 0);
        // Nothing until a step is saved up, and exactly then.
        let ready = rate.ready_at();
        assert_eq!(
            ready - start,
            Duration::from_millis(62) + Duration::from_micros(500)
        );
        assert_eq!(rate.allowance(ready - Duration::from_millis(1)), 0);
        assert_eq!(rate.allowance(ready), STEP as usize);
        rate.spend(STEP as usize);
        // A second's worth over a second, whatever the reads' sizes.
        let mut read = 0;
        let mut now = ready;
        while now < ready + Duration::from_secs(1) {
            now += Duration::from_millis(7);
            let allowed = rate.allowance(now).min(20_000);
            rate.spend(allowed);
            read += allowed;
        }
        assert!(read.abs_diff(1 << 20) < STEP as usize + 20_000, "{read}");
        // A quiet while saves up no more than the burst.
        assert_eq!(rate.allowance(now + Duration::from_secs(3600)), 4 << 20);
    }

    #[test]
    fn a_small_burst_is_a_step_and_no_rate_no_bound() {
        let start = Instant::now();
        let mut rate = DrainRate::new(Some(1000), 10, start);
        assert_eq!(rate.allowance(start), STEP as usize);
        let mut unbounded = DrainRate::new(None, STEP, start);
        unbounded.spend(usize::MAX);
        assert_eq!(unbounded.allowance(start), usize::MAX);
    }
}
