//! Where the server's lifecycle reads the time (expiry, idle suspension,
//! retention, file expiry): the system's clock, or in tests a clock that
//! moves only when told, so a test sees a container expire without waiting
//! for it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// Seconds since the Unix epoch, from the system or from a test.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    /// `None`: the system's clock. `Some`: a manual clock's current time.
    manual: Option<Arc<AtomicI64>>,
}

impl Clock {
    /// The system's clock (what a server runs on).
    pub fn system() -> Self {
        Self::default()
    }

    /// A clock that reads `start` until [`Clock::advance`] moves it.
    pub fn manual(start: i64) -> Self {
        Self {
            manual: Some(Arc::new(AtomicI64::new(start))),
        }
    }

    /// The time now, in seconds since the Unix epoch.
    pub fn now(&self) -> i64 {
        match &self.manual {
            Some(time) => time.load(Ordering::SeqCst),
            None => crate::time::now(),
        }
    }

    /// Sets a manual clock to `time` (the system's clock cannot be set:
    /// nothing happens to it).
    pub fn set(&self, time: i64) {
        if let Some(now) = &self.manual {
            now.store(time, Ordering::SeqCst);
        }
    }

    /// Moves a manual clock forward by `seconds` (the system's clock cannot
    /// be moved: nothing happens to it).
    pub fn advance(&self, seconds: i64) {
        if let Some(time) = &self.manual {
            time.fetch_add(seconds, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Clock;

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let clock = Clock::manual(1_000);
        assert_eq!(clock.now(), 1_000);
        clock.advance(61);
        assert_eq!(clock.clone().now(), 1_061, "clones share the time");
        clock.set(5);
        assert_eq!(clock.now(), 5);
        let system = Clock::system();
        system.advance(1_000_000);
        assert!((system.now() - crate::now()).abs() < 1_000_000);
    }
}
