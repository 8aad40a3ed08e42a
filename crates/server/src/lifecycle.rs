//! Container lifecycle beyond single requests: expiry, idle suspension,
//! retention, file expiry, crash recovery and shutdown.
//!
//! - **Expiry**: `expires_after` (anchor `last_active_at`) deletes the
//!   container and its files.
//! - **Suspension**: idle for `idle_suspend_after_secs` (or the container's
//!   own `sleep_after_seconds`, set by OpenRouter's tools), a container's
//!   processes end and its files stay; the next command wakes it (new
//!   processes, same files).
//! - **Retention**: a suspended container's files are kept `retention_days`.
//! - **E2B's sandboxes** (`e2b::timeouts::sweep_sandboxes`): at their
//!   `end_at` killed, or paused (`autoPause`); never idle-suspended or
//!   idle-expired before it; a paused one is retained like a suspended
//!   container.
//! - **Files API expiry**: a file uploaded with `expires_after` is deleted
//!   when its `expires_at` passes.
//! - **Abandoned uploads**: a Gemini resumable upload nothing was written
//!   to for a day has its session and chunks deleted
//!   (`gemini::files::sweep_abandoned_uploads`, at most hourly).
//! - **Egress log retention**: rows older than `egress_log_retention_secs`
//!   are deleted, in bounded batches, whether or not their container still
//!   exists (like the command audit, the log outlives a deleted container,
//!   for as long as it is kept).
//! - **Recovery**: after a crash (even `kill -9` mid-command), before
//!   serving, half-made containers are removed and open sessions closed
//!   ([`recover`], over those rows alone); once serving, every row is
//!   compared with every directory in the background ([`reconcile`]), so
//!   a start with thousands of suspended containers does not wait for it.
//!
//! - **A cluster's node** looks after its own containers only. Those its
//!   replicas declared lost (it was silent too long: a stall, a
//!   partition, a restart) are left alone while it is lost, and given
//!   back when it is live again
//!   ([`reclaim_lost`]): each one whose disk it still has, running or
//!   suspended as its engine holds it; one its tenant deleted meanwhile
//!   has its processes and disk removed. Nothing else is removed: a lost
//!   container without its disk here stays lost until deleted.
//!
//! A pass reads only the rows it acts on (the store's index ranges:
//! `containers_to_expire`, `containers_to_suspend`, the E2B sandboxes past
//! `end_at`, the node's lost containers), so with thousands of containers
//! on a node, mostly suspended and kept for days, it costs what is due,
//! not what exists.
//!
//! Whether a container is busy is the engine's to say: suspension and
//! expiry use `suspend_if_idle` / `destroy_if_idle`, which decide atomically
//! with the engine's count of commands and file operations in flight.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;

use crate::engine::destroy_quietly;
use crate::error::ApiError;
use crate::state::AppState;

/// What a restart must settle before it serves, after a (possibly
/// unclean) stop: half-made containers (`creating`, or lost while being
/// made) are removed, and the sessions of those whose processes died with
/// the previous server are closed, suspended. Only those rows are read,
/// one query whatever the node holds. Returns what the start found on
/// disk, for [`reconcile`] to compare with the store once serving.
pub async fn recover(state: &Arc<AppState>) -> Result<OnDisk, ApiError> {
    // Taken before anything is served: nothing is being made yet, so
    // whatever is here was left by the previous run.
    let mut on_disk = OnDisk {
        containers: state.engine.container_ids().await?,
        snapshots: Vec::new(),
    };
    if crate::snapshot_archives::archived(state) {
        // The snapshots held are the node's cache of the archives, which
        // serving needs (a few: the cache is bounded).
        crate::snapshot_archives::adopt(state).await?;
    } else {
        on_disk.snapshots = state.engine.snapshot_ids().await?;
    }
    let node = state.node_name.clone();
    let rows = state.db(move |s| s.containers_to_settle(&node)).await?;
    let mut died = Vec::new();
    for row in &rows {
        let id = row.id.clone();
        match row.status {
            shellgate_store::ContainerStatus::Creating => {
                tracing::info!(container = %row.id, "removing a container a crash left unfinished");
            }
            // The only lost ones settled here: declared lost while being
            // made, and their create ended with the previous process. (The
            // others are given back once this node is registered again,
            // `reclaim_lost`, if their disks are here.)
            shellgate_store::ContainerStatus::Lost => {
                tracing::info!(container = %row.id, "removing a container lost while being made");
            }
            // Its processes died with the previous server (one whose
            // directory is gone too is removed by `reconcile`).
            _ => {
                died.push(id);
                continue;
            }
        }
        destroy_quietly(state.engine.as_ref(), &row.id).await;
        state.db(move |s| s.delete_container(&id)).await?;
    }
    // In one transaction: after a crash with thousands of containers live,
    // one each made the start-up wait thousands of commits.
    if !died.is_empty() {
        state
            .db(move |s| s.close_sessions(&died, shellgate_store::ContainerStatus::Suspended))
            .await?;
    }
    Ok(on_disk)
}

/// The containers and snapshots the engine held when the server started.
#[derive(Debug, Default)]
pub struct OnDisk {
    containers: Vec<String>,
    snapshots: Vec<String>,
}

/// Compares the store with what the engine held at the start ([`OnDisk`])
/// while the server serves: removes the containers whose rows are gone
/// (deleted while their disks were left, or never finished), the rows
/// whose directories are gone, and the snapshots no row names. Runs once,
/// in the background, after [`recover`]: it reads every row of the node,
/// which a start with 100,000 suspended containers must not wait for.
///
/// Until it is done a request may reach a container whose directory is
/// gone: the engine answers that it is not found (a 404 in the request's
/// dialect), as after the row's removal. Creates meanwhile are never
/// taken for leftovers: a directory made after the start is not in
/// `on_disk`, and a row without a directory in `on_disk` is removed only
/// once the engine, asked again, does not know it (its create finished
/// after the start otherwise).
pub async fn reconcile(state: Arc<AppState>, on_disk: OnDisk) {
    let reconciled = reconcile_once(&state, on_disk);
    if let Err(e) = crate::startup::timed("reconciled (in the background)", reconciled).await {
        tracing::warn!("reconciling the store with the engine: {}", e.message);
    }
}

async fn reconcile_once(state: &Arc<AppState>, on_disk: OnDisk) -> Result<(), ApiError> {
    let node = state.node_name.clone();
    let rows = state.db(move |s| s.containers_on_node(&node)).await?;
    let held: std::collections::HashSet<&str> =
        on_disk.containers.iter().map(String::as_str).collect();
    for row in &rows {
        if held.contains(row.id.as_str())
            || matches!(
                row.status,
                shellgate_store::ContainerStatus::Creating | shellgate_store::ContainerStatus::Lost
            )
        {
            continue;
        }
        if !matches!(
            state.engine.inspect(&row.id).await,
            Err(shellgate_sandbox_api::SandboxError::NotFound(_))
        ) {
            continue;
        }
        tracing::info!(container = %row.id, "removing a container whose directory is gone");
        state.forget_container(&row.id);
        let id = row.id.clone();
        state.db(move |s| s.delete_container(&id)).await?;
    }
    let known: std::collections::HashSet<&str> = rows.iter().map(|r| r.id.as_str()).collect();
    for id in &on_disk.containers {
        if !known.contains(id.as_str()) {
            tracing::info!(container = %id, "removing a container the store does not know");
            destroy_quietly(state.engine.as_ref(), id).await;
        }
    }
    crate::sandboxes::snapshots::remove_unknown(state, on_disk.snapshots).await
}

/// Gives this node, registered and live again after its replicas declared
/// it lost, back the lost containers whose disks it still has (as its
/// engine holds them: running, or suspended), stops the processes of one
/// its project's quotas no longer admit running, and removes the
/// processes and disk of every container whose row is gone (deleted by
/// its tenant while this node was lost). A no-op while the store still
/// says this node is lost.
///
/// Called when the node registers (at its start, and when a heartbeat
/// finds it was declared lost) and by the sweep while a lost container's
/// disk is here. The engine is listed before the rows are read: a
/// container being made has its row written before its disk, so a disk
/// without a row is one deleted, never one being made.
pub async fn reclaim_lost(state: &Arc<AppState>) -> Result<(), ApiError> {
    let held: Vec<shellgate_store::HeldContainer> = state
        .engine
        .states()
        .await?
        .into_iter()
        .map(|(id, running)| shellgate_store::HeldContainer {
            running: running == shellgate_sandbox_api::ContainerState::Running,
            id,
        })
        .collect();
    let (node, now, quotas) = (
        state.node_name.clone(),
        state.clock.now(),
        state.admission.quotas(),
    );
    let disks = held.clone();
    let restored = state
        .db(move |s| s.restore_lost_containers(&node, now, &disks, quotas))
        .await?;
    let running: std::collections::HashSet<&str> = held
        .iter()
        .filter(|disk| disk.running)
        .map(|disk| disk.id.as_str())
        .collect();
    for container in restored.iter().flatten() {
        tracing::info!(
            container = %container.id,
            status = container.status.as_str(),
            "a lost container is back (its node is live again, its disk intact)"
        );
        if running.contains(container.id.as_str())
            && container.status != shellgate_store::ContainerStatus::Running
        {
            // Its project's quotas are full now: back suspended, its
            // processes stopped (its files stay).
            if let Err(e) = state.engine.stop(&container.id).await {
                tracing::warn!(container = %container.id, "could not suspend: {e}");
            }
            crate::sandboxes::interpreting::kernels_ended(state, &container.id).await;
        }
    }
    let node = state.node_name.clone();
    let rows: std::collections::HashSet<String> = state
        .db(move |s| s.containers_on_node(&node))
        .await?
        .into_iter()
        .map(|row| row.id)
        .collect();
    for disk in held.iter().filter(|disk| !rows.contains(&disk.id)) {
        tracing::info!(container = %disk.id, "removing a container deleted while its node was lost");
        state.forget_container(&disk.id);
        destroy_quietly(state.engine.as_ref(), &disk.id).await;
    }
    Ok(())
}

/// One pass of expiry, suspension, retention and file expiry.
pub async fn sweep(state: &Arc<AppState>) -> Result<(), ApiError> {
    // Sessions may end below: their command time is written first.
    state.billing.flush().await;
    let now = state.clock.now();
    let idle_limit =
        i64::try_from(state.config.sandbox.idle_suspend_after_secs).unwrap_or(i64::MAX);
    let retention = i64::try_from(state.config.sandbox.retention_days)
        .unwrap_or(i64::MAX)
        .saturating_mul(86_400);
    // A lost container is not this pass's (nor is its E2B sandbox's
    // timeout): it is given back, or removed once deleted, by
    // `reclaim_lost`, tried again here while one whose disk is here is
    // still lost (a restore that failed, or this node still lost).
    let node = state.node_name.clone();
    let lost = state.db(move |s| s.lost_containers_on_node(&node)).await?;
    let mut lost_here = false;
    for id in &lost {
        lost_here |= state.engine.inspect(id).await.is_ok();
    }
    if lost_here {
        if let Err(e) = reclaim_lost(state).await {
            tracing::error!("taking back lost containers failed: {}", e.message);
        }
    }
    // E2B's sandboxes end at their own timeout (killed or paused), never
    // idle: the rest of this pass only keeps a paused one `retention_days`
    // (the store's queries leave them out of idle expiry, and the running
    // ones out of idle suspension).
    crate::e2b::timeouts::sweep_sandboxes(state, now).await?;
    // Only the rows due now, read after the sandboxes' timeouts acted.
    let node = state.node_name.clone();
    let (to_expire, to_suspend) = state
        .db(move |s| {
            Ok((
                s.containers_to_expire(&node, now, retention)?,
                s.containers_to_suspend(&node, now, idle_limit)?,
            ))
        })
        .await?;
    let expiring: std::collections::HashSet<String> =
        to_expire.iter().map(|row| row.id.clone()).collect();
    for row in to_expire {
        let idle = now - row.last_active_at;
        let id = row.id.clone();
        match state.engine.destroy_if_idle(&row.id).await {
            Ok(true) | Err(shellgate_sandbox_api::SandboxError::NotFound(_)) => {}
            // A command or file operation started meanwhile: not idle.
            Ok(false) => continue,
            Err(e) => {
                tracing::warn!(container = %row.id, "could not remove an expired container: {e}");
                continue;
            }
        }
        tracing::info!(container = %row.id, idle, "container expired");
        state.forget_container(&id);
        state.db(move |s| s.delete_container(&id)).await?;
    }
    // One due to expire is not suspended, even when it was busy (it is
    // tried again next pass). Several at once: each waits on its init to
    // end and on a commit, and one after another fell behind a server
    // creating containers at a few dozen a second.
    let suspended = futures_util::stream::iter(
        to_suspend
            .into_iter()
            .filter(|row| !expiring.contains(&row.id)),
    )
    .map(|row| suspend_idle(state, row, now))
    .buffer_unordered(SUSPENDS_AT_ONCE)
    .collect::<Vec<_>>()
    .await;
    suspended.into_iter().collect::<Result<(), ApiError>>()?;
    for file in state.db(move |s| s.expired_files(now)).await? {
        tracing::info!(file = %file.id, "file expired");
        crate::sandboxes::files::remove_file(state, &file.project, &file.id).await?;
    }
    if let Err(e) = crate::gemini::files::sweep_abandoned_uploads(state, now).await {
        tracing::warn!("sweeping abandoned Gemini uploads failed: {}", e.message);
    }
    if crate::snapshot_archives::archived(state) {
        if let Err(e) = crate::snapshot_archives::sweep(state, now).await {
            tracing::warn!("sweeping snapshot archives failed: {}", e.message);
        }
        if let Err(e) = crate::image_archives::sweep(state, now).await {
            tracing::warn!("sweeping image archives failed: {}", e.message);
        }
    }
    let old_egress = crate::egress::sweep_old_rows(
        &state.store,
        state.config.egress.egress_log_retention_secs,
        now,
    )
    .await?;
    if old_egress > 0 {
        tracing::info!(rows = old_egress, "old egress log rows deleted");
    }
    Ok(())
}

/// How many idle containers one sweep suspends at once.
const SUSPENDS_AT_ONCE: usize = 16;

/// Suspends one container found idle, unless a command or file operation
/// started meanwhile; its session closes right after its processes end
/// (a wake in between finds the session still open and the engine's
/// container stopped, as with one suspend at a time).
async fn suspend_idle(
    state: &Arc<AppState>,
    row: shellgate_store::ContainerRow,
    now: i64,
) -> Result<(), ApiError> {
    let idle = now - row.last_active_at;
    match state.engine.suspend_if_idle(&row.id).await {
        Ok(true) => {}
        Ok(false) => return Ok(()),
        Err(e) => {
            tracing::warn!(container = %row.id, "could not suspend: {e}");
            return Ok(());
        }
    }
    tracing::info!(container = %row.id, idle, "suspended an idle container");
    // Its kernels ended with it (its next cell says so).
    crate::sandboxes::interpreting::kernels_ended(state, &row.id).await;
    let id = row.id;
    state
        .db(move |s| s.close_session(&id, shellgate_store::ContainerStatus::Suspended))
        .await
}

/// Sweeps every `sweep_interval_secs` until the task is aborted.
pub async fn sweep_forever(state: Arc<AppState>) {
    let interval = Duration::from_secs(state.config.sandbox.sweep_interval_secs.max(1));
    loop {
        tokio::time::sleep(interval).await;
        if let Err(e) = sweep(&state).await {
            tracing::error!("lifecycle sweep failed: {}", e.message);
        }
    }
}

/// Closes every open session (the processes are about to end).
pub async fn suspend_all(state: &Arc<AppState>) {
    state.billing.flush().await;
    let node = state.node_name.clone();
    let Ok(open) = state.db(move |s| s.open_sessions_on_node(&node)).await else {
        return;
    };
    let _ = state
        .db(move |s| s.close_sessions(&open, shellgate_store::ContainerStatus::Suspended))
        .await;
}
