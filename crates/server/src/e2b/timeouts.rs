//! E2B sandboxes' timeouts as timers: one per running sandbox, armed at
//! its `end_at` (at create, and again whenever `set_timeout`, `connect` or
//! a resume moves it), so a sandbox is killed, or paused when its create
//! said `autoPause`, within a second of its deadline rather than at the
//! lifecycle sweeper's next pass. The store's `end_at` stays the truth: a
//! timer that fires reads it again and acts only when it has passed, and at
//! start-up every running sandbox of this node gets its timer back
//! ([`arm_stored`]), so a restart leaves none running past its end. The
//! sweeper's pass still ends every one of its node's sandboxes past its
//! `end_at` (read by `end_at`), the backstop for a timer that could not
//! act.
//!
//! A timer holds the server's state weakly: a server that is dropped is
//! not kept alive by its sandboxes' timers. What ends a sandbox lives here
//! too ([`end_sandbox`], [`pause_sandbox`], the sweeper's
//! [`sweep_sandboxes`]), below the control plane's handlers that arm the
//! timers (`e2b::control`); the armed timers themselves are
//! `e2b::deadlines`'s.

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::error::ApiError;
use crate::state::AppState;
use shellgate_store::E2bSandboxRow;

/// Arms sandbox `id`'s timer for `end_at` (seconds since the epoch, on
/// the server's clock), replacing the one it had.
pub(crate) fn arm(state: &Arc<AppState>, id: &str, end_at: i64) {
    let timer = run_timer(Arc::downgrade(state), id.to_owned(), end_at);
    state.e2b_deadlines.arm(id, timer);
}

/// Waits until `end_at` on the server's clock, then ends the sandbox if
/// its stored `end_at` has passed; waits again while it has not (moved by
/// a path that re-arms it too, or a manual clock in tests).
async fn run_timer(state: Weak<AppState>, id: String, end_at: i64) {
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
        match end_if_due(&state, &id).await {
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
    end_sandbox(state, &row).await?;
    Ok(None)
}

/// Arms the timer of every running sandbox on this node, from the store
/// (at start-up: one whose end passed while the server was down is ended
/// at once).
pub(crate) async fn arm_stored(state: &Arc<AppState>) -> Result<(), ApiError> {
    let node = state.node_name.clone();
    let running = state
        .db(move |s| s.running_e2b_sandboxes_ending(&node, i64::MAX))
        .await?;
    for row in &running {
        arm(state, &row.container_id, row.end_at);
    }
    Ok(())
}

/// Pauses a sandbox: its processes end, its files stay, its session (and
/// billing) closes. Shared by `pause` and the sweeper's auto-pause.
pub(crate) async fn pause_sandbox(state: &Arc<AppState>, id: &str) -> Result<(), ApiError> {
    // Refused from now on, before the processes go.
    state.e2b_access.set_paused(id, true);
    let key = id.to_owned();
    state.db(move |s| s.pause_e2b_sandbox(&key)).await?;
    match state.engine.stop(id).await {
        Ok(()) | Err(shellgate_sandbox_api::SandboxError::NotFound(_)) => {}
        Err(error) => return Err(error.into()),
    }
    // Its code interpreter's kernels ended with its processes.
    state.interpreters.forget_container(id);
    state.billing.flush().await;
    let key = id.to_owned();
    state
        .db(move |s| s.close_session(&key, shellgate_store::ContainerStatus::Suspended))
        .await
}

/// The lifecycle sweeper's part for E2B's sandboxes: at `end_at` a
/// running sandbox is killed, or paused when its create said `autoPause`.
/// Only this server's own (a cluster node's; the others are their nodes'
/// to sweep), and only those due: the store reads them by `end_at`.
pub(crate) async fn sweep_sandboxes(state: &Arc<AppState>, now: i64) -> Result<(), ApiError> {
    let node = state.node_name.clone();
    let due = state
        .db(move |s| s.running_e2b_sandboxes_ending(&node, now))
        .await?;
    for row in &due {
        end_sandbox(state, row).await?;
    }
    Ok(())
}

/// A sandbox past its `end_at`: killed, or paused when its create said
/// `autoPause` (a pause that fails is logged, and tried again later).
pub(crate) async fn end_sandbox(
    state: &Arc<AppState>,
    row: &E2bSandboxRow,
) -> Result<(), ApiError> {
    if row.auto_pause {
        tracing::info!(sandbox = %row.container_id, "E2B sandbox timed out: paused");
        if let Err(e) = pause_sandbox(state, &row.container_id).await {
            tracing::warn!(sandbox = %row.container_id, "could not pause: {}", e.message);
        }
    } else {
        tracing::info!(sandbox = %row.container_id, "E2B sandbox timed out: killed");
        crate::sandboxes::containers::remove_container(state, &row.container_id).await?;
    }
    Ok(())
}
