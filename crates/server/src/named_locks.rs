//! Async locks looked up by name: one build per project, one fetch per
//! image or snapshot, one file sync or network update per container. A
//! lock exists while someone holds or waits for it; the ones nobody holds
//! are dropped as the map grows, so names never seen again cost nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The map grows to this many names before the idle ones are dropped.
const PRUNE_AT: usize = 1024;

/// Async locks by name.
#[derive(Default)]
pub(crate) struct NamedLocks(Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

impl NamedLocks {
    /// The lock of `name` (the same one for every caller while anyone
    /// holds it or waits for it).
    pub(crate) fn of(&self, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if locks.len() > PRUNE_AT {
            locks.retain(|_, lock| Arc::strong_count(lock) > 1);
        }
        Arc::clone(locks.entry(name.to_owned()).or_default())
    }

    /// Drops `name`'s lock now if nobody holds or waits for it.
    pub(crate) fn forget(&self, name: &str) {
        let mut locks = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if locks
            .get(name)
            .is_some_and(|lock| Arc::strong_count(lock) == 1)
        {
            locks.remove(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_name_is_one_lock_and_idle_names_are_dropped_as_the_map_grows() {
        let locks = NamedLocks::default();
        let held = locks.of("a");
        let guard = held.lock().await;
        assert!(
            locks.of("a").try_lock().is_err(),
            "the same name is the same lock"
        );
        assert!(
            locks.of("b").try_lock().is_ok(),
            "another name is another lock"
        );
        for n in 0..=PRUNE_AT {
            drop(locks.of(&format!("idle-{n}")));
        }
        drop(locks.of("after"));
        // Pruned once past PRUNE_AT (to the held "a"), then the few since.
        let kept = locks.0.lock().unwrap().len();
        assert!(kept < 8, "idle locks dropped: {kept} left");
        assert!(
            locks.of("a").try_lock().is_err(),
            "a held lock survives the pruning"
        );
        drop(guard);
    }
}
