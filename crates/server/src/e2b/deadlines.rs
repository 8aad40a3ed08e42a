//! E2B sandboxes' timeouts as timers: one per running sandbox, armed at
//! its `end_at` (at create, and again whenever `set_timeout`, `connect` or
//! a resume moves it), so a sandbox is killed, or paused when its create
//! said `autoPause`, within a second of its deadline rather than at the
//! lifecycle sweeper's next pass. The store's `end_at` stays the truth: a
//! timer that fires reads it again and acts only when it has passed, and at
//! start-up every running sandbox of this node gets its timer back
//! ([`arm_stored`]), so a restart leaves none running past its end. The
//! sweeper still checks every sandbox on its pass, the backstop for a
//! timer that could not act.
//!
//! A timer holds the server's state weakly: a server that is dropped is
//! not kept alive by its sandboxes' timers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::error::ApiError;
use crate::state::AppState;

/// The armed timers, by sandbox id.
#[derive(Debug, Default)]
pub(crate) struct Deadlines {
    timers: Mutex<HashMap<String, Timer>>,
    /// Tells an armed timer from the one that replaced it.
    generation: std::sync::atomic::AtomicU64,
}

#[derive(Debug)]
struct Timer {
    generation: u64,
    task: tokio::task::AbortHandle,
}

impl Deadlines {
    fn timers(&self) -> std::sync::MutexGuard<'_, HashMap<String, Timer>> {
        self.timers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Arms sandbox `id`'s timer for `end_at` (seconds since the epoch, on
    /// the server's clock), replacing the one it had.
    pub(crate) fn arm(&self, state: &Arc<AppState>, id: &str, end_at: i64) {
        let generation = self
            .generation
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let weak = Arc::downgrade(state);
        let key = id.to_owned();
        let task = tokio::spawn(async move {
            run_timer(Weak::clone(&weak), &key, end_at).await;
            if let Some(state) = weak.upgrade() {
                state.e2b_deadlines.finished(&key, generation);
            }
        });
        let mut timers = self.timers();
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

    /// Forgets sandbox `id`'s timer `generation`, which ended (not one
    /// that replaced it).
    fn finished(&self, id: &str, generation: u64) {
        let mut timers = self.timers();
        if timers.get(id).is_some_and(|t| t.generation == generation) {
            timers.remove(id);
        }
    }

    /// Drops sandbox `id`'s timer (it was killed).
    pub(crate) fn disarm(&self, id: &str) {
        if let Some(timer) = self.timers().remove(id) {
            timer.task.abort();
        }
    }
}

/// Waits until `end_at` on the server's clock, then ends the sandbox if
/// its stored `end_at` has passed; waits again while it has not (moved by
/// a path that re-arms it too, or a manual clock in tests).
async fn run_timer(state: Weak<AppState>, id: &str, end_at: i64) {
    let mut end_at = end_at;
    loop {
        let wait = {
            let Some(state) = state.upgrade() else { return };
            end_at - state.clock.now()
        };
        if wait > 0 {
            tokio::time::sleep(Duration::from_secs(wait.unsigned_abs())).await;
        }
        let Some(state) = state.upgrade() else { return };
        match end_if_due(&state, id).await {
            Ok(Some(later)) => end_at = later.max(state.clock.now() + 1),
            Ok(None) => return,
            Err(error) => {
                // The sweeper's pass tries it again.
                tracing::warn!(sandbox = %id, "timeout not carried out: {}", error.message);
                return;
            }
        }
    }
}

/// Ends sandbox `id` when its stored `end_at` has passed and it runs on
/// this node: `None` when there is nothing more to wait for, or the
/// `end_at` still ahead.
async fn end_if_due(state: &Arc<AppState>, id: &str) -> Result<Option<i64>, ApiError> {
    let key = id.to_owned();
    let Some(row) = state.db(move |s| s.e2b_sandbox_by_id(&key)).await? else {
        return Ok(None);
    };
    if row.paused {
        return Ok(None);
    }
    if state.clock.now() < row.end_at {
        return Ok(Some(row.end_at));
    }
    // A cluster's node ends its own sandboxes only (a request naming a
    // sandbox is served by its node, so this is where it was armed).
    if state.engine.inspect(id).await.is_err() {
        return Ok(None);
    }
    super::control::end_sandbox(state, &row).await?;
    Ok(None)
}

/// Arms the timer of every running sandbox on this node, from the store
/// (at start-up: one whose end passed while the server was down is ended
/// at once).
pub(crate) async fn arm_stored(state: &Arc<AppState>) -> Result<(), ApiError> {
    let node = state.node_name.clone();
    let local: std::collections::HashSet<String> = state
        .db(move |s| s.containers_on_node(&node))
        .await?
        .into_iter()
        .filter(|row| row.status != shellgate_store::ContainerStatus::Lost)
        .map(|row| row.id)
        .collect();
    let rows = state.db(|s| s.all_e2b_sandboxes()).await?;
    for row in rows
        .iter()
        .filter(|row| !row.paused && local.contains(&row.container_id))
    {
        state
            .e2b_deadlines
            .arm(state, &row.container_id, row.end_at);
    }
    Ok(())
}
