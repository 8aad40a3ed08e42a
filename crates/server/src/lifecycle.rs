//! Container lifecycle beyond single requests: expiry, idle suspension,
//! retention, crash recovery and shutdown.
//!
//! - **Expiry**: `expires_after` (anchor `last_active_at`) deletes the
//!   container and its files.
//! - **Suspension**: idle for `idle_suspend_after_secs`, a container's
//!   processes end and its files stay; the next command wakes it (new
//!   processes, same files). Never while an exec runs.
//! - **Retention**: a suspended container's files are kept `retention_days`.
//! - **Recovery**: after a crash (even `kill -9` mid-command) the store and
//!   the engine are reconciled before serving.

use std::sync::Arc;
use std::time::Duration;

use shellgate_sandbox::SandboxBackend;

use crate::error::ApiError;
use crate::{destroy_quietly, now, AppState};

/// Reconciles the store with the engine after a (possibly unclean) stop.
pub async fn recover(state: &Arc<AppState>) -> Result<(), ApiError> {
    let rows = state.store.all_containers()?;
    let engine_ids: Vec<String> = state
        .engine
        .list()
        .await?
        .into_iter()
        .map(|c| c.id)
        .collect();
    for row in &rows {
        if row.status == "creating" || !engine_ids.contains(&row.id) {
            // Half-made, or its directory is gone: nothing to keep.
            tracing::info!(container = %row.id, "removing a container a crash left unfinished");
            destroy_quietly(&state.engine, &row.id).await;
            state.store.delete_container(&row.id)?;
        } else if row.session_open {
            // Its processes died with the previous server.
            state.store.close_session(&row.id, "suspended")?;
        }
    }
    for id in engine_ids {
        if !rows.iter().any(|r| r.id == id) {
            tracing::info!(container = %id, "removing a container the store does not know");
            destroy_quietly(&state.engine, &id).await;
        }
    }
    Ok(())
}

/// One pass of expiry, suspension and retention.
pub async fn sweep(state: &Arc<AppState>) -> Result<(), ApiError> {
    let now = now();
    let idle_limit = state.config.idle_suspend_after_secs as i64;
    let retention = state.config.retention_days as i64 * 86_400;
    for row in state.store.all_containers()? {
        if row.status == "creating" || state.is_busy(&row.id) {
            continue;
        }
        let idle = now - row.last_active_at;
        let expired = idle >= row.expires_minutes as i64 * 60;
        let retained_too_long = row.status == "suspended" && idle >= retention;
        if expired || retained_too_long {
            tracing::info!(container = %row.id, idle, "container expired");
            destroy_quietly(&state.engine, &row.id).await;
            state.store.delete_container(&row.id)?;
        } else if row.session_open && idle >= idle_limit {
            tracing::info!(container = %row.id, idle, "suspending idle container");
            match state.engine.suspend_if_idle(&row.id).await {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    tracing::warn!(container = %row.id, "could not suspend: {e}");
                    continue;
                }
            }
            state.store.close_session(&row.id, "suspended")?;
        }
    }
    Ok(())
}

/// Sweeps every `sweep_interval_secs` until the task is aborted.
pub async fn sweep_forever(state: Arc<AppState>) {
    let interval = Duration::from_secs(state.config.sweep_interval_secs.max(1));
    loop {
        tokio::time::sleep(interval).await;
        if let Err(e) = sweep(&state).await {
            tracing::error!("lifecycle sweep failed: {}", e.message);
        }
    }
}

/// Closes every open session (the processes are about to end).
pub async fn suspend_all(state: &Arc<AppState>) {
    let Ok(rows) = state.store.all_containers() else {
        return;
    };
    for row in rows.iter().filter(|r| r.session_open) {
        let _ = state.store.close_session(&row.id, "suspended");
    }
}
