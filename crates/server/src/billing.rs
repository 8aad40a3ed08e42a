//! Command time, written to the store in batches.
//!
//! Every exec bills its commands' time and renews its container's expiry.
//! Written one by one, that is a store write (a trip to a blocking thread)
//! per exec; under load the writes of many execs are gathered and written in
//! one transaction instead. A write never waits for the answer to its
//! request, and happens whatever the client does; anything that ends a
//! session (suspension, deletion, shutdown) flushes first, so no second of a
//! command is lost or billed to a session it did not belong to.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::{now, AppState};

/// Time gathered per container: (latest activity, command seconds).
#[derive(Default)]
pub struct Billing {
    pending: Mutex<HashMap<String, (i64, f64)>>,
    /// Whether a flush task is running.
    flushing: AtomicBool,
}

impl Billing {
    fn take(&self) -> Vec<(String, i64, f64)> {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending
            .drain()
            .map(|(id, (at, seconds))| (id, at, seconds))
            .collect()
    }
}

impl AppState {
    /// Bills `seconds` of commands to container `id` and renews its expiry,
    /// soon, in a batch.
    pub(crate) fn bill(self: &Arc<Self>, id: &str, seconds: f64) {
        {
            let mut pending = self
                .billing
                .pending
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let entry = pending.entry(id.to_owned()).or_insert((0, 0.0));
            entry.0 = entry.0.max(now());
            entry.1 += seconds;
        }
        if self.billing.flushing.swap(true, Ordering::SeqCst) {
            return;
        }
        let state = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                state.flush_billing().await;
                state.billing.flushing.store(false, Ordering::SeqCst);
                // Something may have arrived after the last take: go on
                // unless another flush task already took over.
                let more = !state
                    .billing
                    .pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .is_empty();
                if !more || state.billing.flushing.swap(true, Ordering::SeqCst) {
                    return;
                }
            }
        });
    }

    /// Records the commands of a run in the command audit (in a task of its
    /// own: the answer does not wait for it).
    pub(crate) fn audit(
        self: &Arc<Self>,
        project: &str,
        container: &str,
        response: Option<&str>,
        commands: &[String],
        results: &[shellgate_sandbox::CommandResult],
    ) {
        let created_at = now();
        let rows: Vec<shellgate_store::CommandRow> = commands
            .iter()
            .zip(results)
            .map(|(command, result)| {
                let (outcome, exit_code) = match result.outcome {
                    shellgate_wire::Outcome::Exit { exit_code } => ("exit", Some(exit_code)),
                    shellgate_wire::Outcome::Timeout => ("timeout", None),
                };
                shellgate_store::CommandRow {
                    id: crate::new_id("cmd_"),
                    project: project.to_owned(),
                    container_id: container.to_owned(),
                    response_id: response.map(str::to_owned),
                    command: command.clone(),
                    outcome: outcome.to_owned(),
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
        let state = Arc::clone(self);
        tokio::spawn(async move {
            if let Err(e) = state.db(move |s| s.record_commands(&rows)).await {
                tracing::error!("could not record commands in the audit: {}", e.message);
            }
        });
    }

    /// Writes everything gathered so far.
    pub(crate) async fn flush_billing(&self) {
        let batch = self.billing.take();
        if batch.is_empty() {
            return;
        }
        let written = self.db(move |s| s.record_activities(&batch)).await;
        if let Err(e) = written {
            tracing::error!("could not record command time: {}", e.message);
        }
    }
}
