//! Command time and the command audit, written to the store in batches.
//!
//! Every exec bills its commands' time, renews its container's expiry and
//! records its commands in the audit. Written one by one, that is a store
//! write (a trip to a blocking thread and a transaction) per exec; under
//! load the writes of many execs are gathered and written in one trip
//! instead. A write never waits for the answer to its request, and happens
//! whatever the client does; anything that ends a session (suspension,
//! deletion, shutdown) flushes first, so no second of a command is lost or
//! billed to a session it did not belong to.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use shellgate_sandbox_api::SandboxBackend;

use crate::db::Db;
use crate::time::now;

/// What waits to be written.
#[derive(Default)]
struct Pending {
    /// Per container: (latest activity, command seconds).
    activity: HashMap<String, (i64, f64)>,
    /// Audit rows, in the order their commands ran.
    commands: Vec<shellgate_store::CommandRow>,
}

/// Writes gathered in memory, flushed by at most one task at a time.
pub struct Billing {
    /// Where they are written.
    db: Db,
    /// Whose maskers hide secret values in audited commands.
    engine: Arc<dyn SandboxBackend>,
    pending: Mutex<Pending>,
    /// Whether a flush task is running.
    flushing: AtomicBool,
    /// Held by a flush from taking the pending writes until they are
    /// written: a flush that finds nothing pending because another took it
    /// a moment ago waits for that write, so "flushed" always means
    /// "written" (what a suspension or deletion relies on).
    writing: tokio::sync::Mutex<()>,
}

impl Billing {
    pub fn new(db: Db, engine: Arc<dyn SandboxBackend>) -> Self {
        Self {
            db,
            engine,
            pending: Mutex::default(),
            flushing: AtomicBool::new(false),
            writing: tokio::sync::Mutex::new(()),
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bills `seconds` of commands to container `id` and renews its expiry,
    /// soon, in a batch.
    pub fn bill(self: &Arc<Self>, id: &str, seconds: f64) {
        {
            let mut pending = self.pending();
            let entry = pending.activity.entry(id.to_owned()).or_insert((0, 0.0));
            entry.0 = entry.0.max(now());
            entry.1 += seconds;
        }
        self.flush_soon();
    }

    /// Starts a flush task unless one runs; it goes on while writes arrive.
    fn flush_soon(self: &Arc<Self>) {
        if self.flushing.swap(true, Ordering::SeqCst) {
            return;
        }
        let state = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                state.flush().await;
                state.flushing.store(false, Ordering::SeqCst);
                // Something may have arrived after the last take: go on
                // unless another flush task already took over.
                let more = {
                    let pending = state.pending();
                    !pending.activity.is_empty() || !pending.commands.is_empty()
                };
                if !more || state.flushing.swap(true, Ordering::SeqCst) {
                    return;
                }
            }
        });
    }

    /// Records the commands of a run in the command audit, soon, in a batch
    /// (the answer does not wait for it).
    pub fn audit(
        self: &Arc<Self>,
        project: &str,
        container: &str,
        response: Option<&str>,
        commands: &[String],
        results: &[shellgate_sandbox_api::CommandResult],
    ) {
        let created_at = now();
        // A command that spells a secret's value out is kept masked.
        let masker = self.engine.masker(container);
        let rows: Vec<shellgate_store::CommandRow> = commands
            .iter()
            .zip(results)
            .map(|(command, result)| {
                let (outcome, exit_code) = match result.outcome {
                    shellgate_wire::Outcome::Exit { exit_code } => {
                        (shellgate_store::CommandOutcome::Exit, Some(exit_code))
                    }
                    shellgate_wire::Outcome::Timeout => {
                        (shellgate_store::CommandOutcome::Timeout, None)
                    }
                };
                shellgate_store::CommandRow {
                    id: shellgate_wire::new_id("cmd_"),
                    project: project.to_owned(),
                    container_id: container.to_owned(),
                    response_id: response.map(str::to_owned),
                    command: match &masker {
                        Some(masker) => masker.mask_str(command),
                        None => command.clone(),
                    },
                    outcome,
                    exit_code,
                    duration_ms: result.duration_ms,
                    bytes_out: result.bytes_out,
                    created_at,
                }
            })
            .collect();
        if rows.is_empty() {
            return;
        }
        self.pending().commands.extend(rows);
        self.flush_soon();
    }

    /// Writes everything gathered so far, in one trip to the store.
    pub async fn flush(&self) {
        let _writing = self.writing.lock().await;
        let Pending { activity, commands } = std::mem::take(&mut *self.pending());
        if activity.is_empty() && commands.is_empty() {
            return;
        }
        let activity: Vec<(String, i64, f64)> = activity
            .into_iter()
            .map(|(id, (at, seconds))| (id, at, seconds))
            .collect();
        let written = self
            .db
            .run(move |s| {
                // Each written whatever the other does: time is billed even
                // if the audit cannot be written.
                let billed = match activity.is_empty() {
                    true => Ok(()),
                    false => s.record_activities(&activity),
                };
                let audited = match commands.is_empty() {
                    true => Ok(()),
                    false => s.record_commands(&commands),
                };
                Ok((billed, audited))
            })
            .await;
        match written {
            Ok((billed, audited)) => {
                if let Err(e) = billed {
                    tracing::error!("could not record command time: {e}");
                }
                if let Err(e) = audited {
                    tracing::error!("could not record commands in the audit: {e}");
                }
            }
            Err(e) => tracing::error!("could not record command time: {}", e.message),
        }
    }
}
