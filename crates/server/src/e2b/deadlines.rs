//! E2B sandboxes' armed timeout timers, one per running sandbox by id: a
//! timer armed again replaces (aborts) the one it had, a sandbox killed
//! drops its own, and a timer that ran out forgets itself. What a timer
//! does when it runs out is `e2b::timeouts`'s; this registry only holds
//! them, so the server's state can own it.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The armed timers, by sandbox id.
#[derive(Debug, Default)]
pub(crate) struct Deadlines {
    timers: Arc<Mutex<HashMap<String, Timer>>>,
    /// Tells an armed timer from the one that replaced it.
    generation: AtomicU64,
}

#[derive(Debug)]
struct Timer {
    generation: u64,
    task: tokio::task::AbortHandle,
}

fn lock(timers: &Mutex<HashMap<String, Timer>>) -> MutexGuard<'_, HashMap<String, Timer>> {
    timers.lock().unwrap_or_else(|p| p.into_inner())
}

impl Deadlines {
    /// Runs `timer` as sandbox `id`'s timer, replacing the one it had.
    pub(crate) fn arm(&self, id: &str, timer: impl Future<Output = ()> + Send + 'static) {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed);
        let timers = Arc::clone(&self.timers);
        let key = id.to_owned();
        let task = tokio::spawn(async move {
            timer.await;
            // Forgets this timer, not one that replaced it.
            let mut timers = lock(&timers);
            if timers.get(&key).is_some_and(|t| t.generation == generation) {
                timers.remove(&key);
            }
        });
        let mut timers = lock(&self.timers);
        if let Some(old) = timers.insert(
            id.to_owned(),
            Timer {
                generation,
                task: task.abort_handle(),
            },
        ) {
            old.task.abort();
        }
        // A timer that ended before it was recorded is dropped as the map
        // grows.
        if timers.len() > 1024 {
            timers.retain(|_, timer| !timer.task.is_finished());
        }
    }

    /// The sandboxes with a timer armed: every running sandbox of this
    /// node (what the metrics sampler samples).
    pub(crate) fn ids(&self) -> Vec<String> {
        lock(&self.timers)
            .iter()
            .filter(|(_, timer)| !timer.task.is_finished())
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Drops sandbox `id`'s timer (it was killed).
    pub(crate) fn disarm(&self, id: &str) {
        if let Some(timer) = lock(&self.timers).remove(id) {
            timer.task.abort();
        }
    }
}
