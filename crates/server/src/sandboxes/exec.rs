//! One exec pipeline for every way a command reaches a container (an
//! exec, a streamed exec, the hosted shell, a process, the code
//! interpreter, E2B's `/execute`): admit → bill → tap → run → bill →
//! audit.
//!
//! [`Exec::admit`] takes one of the project's concurrent-exec slots, checks
//! ownership (404 otherwise) and wakes a suspended container (a billed
//! session opened, under the running-container quotas). [`Exec::begin`]
//! starts the bill's clock; the [`Running`] it returns bills the time when
//! it ends or is dropped (a cancelled request: its commands are killed and
//! their time until then billed), frees the slot, and writes the commands
//! to the audit. [`Exec::run`] is the whole pipeline for shell commands.

use std::sync::Arc;
use std::time::Instant;

use shellgate_sandbox_api::backend::{CommandResult, DeltaSink, RunRequest};
use shellgate_sandbox_api::ContainerState;
use shellgate_store::ContainerRow;
use shellgate_wire::ExecRequest;

use crate::admission::ExecPermit;
use crate::engine::engine_error;
use crate::error::{ApiError, ApiResult};
use crate::live_output::Tap;
use crate::state::AppState;
use crate::time::now;

/// Checks an exec body against the limits, naming the offending `param`.
/// (`RunRequest::from_parts`: the same rule as a model's shell call.)
pub(crate) fn run_request(body: &ExecRequest, deadline_secs: u64) -> ApiResult<RunRequest> {
    Ok(RunRequest::from_parts(
        body.commands.clone(),
        body.timeout_ms,
        body.max_output_length.map(|n| n as u64),
        Some(deadline_secs.saturating_mul(1000)),
    )?)
}

/// An exec admitted in a project's container, not started yet.
pub(crate) struct Exec {
    state: Arc<AppState>,
    project: String,
    container: String,
    /// The response whose tool call this is, for the audit.
    response: Option<String>,
    /// The project's concurrent-exec slot, held until the exec ends
    /// (`None`: the caller holds another bound's slot, as a console
    /// terminal does).
    permit: Option<ExecPermit>,
    woke: bool,
}

impl Exec {
    /// Admits an exec: the project's concurrent-exec quota, ownership (404
    /// otherwise), and a suspended container woken.
    pub(crate) async fn admit(
        state: &Arc<AppState>,
        project: &str,
        container: &str,
    ) -> ApiResult<Self> {
        let permit = state.admission.exec(project).await?;
        let mut exec = Self::admitted(state, project, container).await?;
        exec.permit = Some(permit);
        Ok(exec)
    }

    /// An exec whose slot the caller already holds under another bound
    /// (a console terminal's): ownership and waking only.
    pub(crate) async fn admitted(
        state: &Arc<AppState>,
        project: &str,
        container: &str,
    ) -> ApiResult<Self> {
        let woke = prepare_command(state, project, container).await?;
        Ok(Self {
            state: Arc::clone(state),
            project: project.to_owned(),
            container: container.to_owned(),
            response: None,
            permit: None,
            woke,
        })
    }

    /// The exec as a tool call of `response` (the audit names it).
    pub(crate) fn in_response(mut self, response: &str) -> Self {
        self.response = Some(response.to_owned());
        self
    }

    /// Whether admitting it woke the container (a session began).
    pub(crate) fn woke(&self) -> bool {
        self.woke
    }

    /// Starts the bill's clock for `commands` (what the audit records).
    pub(crate) fn begin(self, commands: Vec<String>) -> Running {
        Running {
            bill: Some(Bill {
                state: Arc::clone(&self.state),
                container: self.container.clone(),
                commands: commands.len(),
                started: Instant::now(),
                ok: false,
            }),
            exec: self,
            commands,
        }
    }

    /// The whole pipeline for shell commands: their output tapped for the
    /// live view (and sent on to `deltas`), run, billed, audited.
    pub(crate) async fn run(
        self,
        request: RunRequest,
        deltas: Option<DeltaSink>,
    ) -> ApiResult<Vec<CommandResult>> {
        let container = self.container.clone();
        let state = Arc::clone(&self.state);
        let mut running = self.begin(request.commands.clone());
        let (sink, mut tap) = running.tap(deltas);
        let (result, ()) = tokio::join!(
            state.engine.run_streaming(&container, request, sink),
            tap.forward()
        );
        drop(tap);
        running.succeeded(result.is_ok());
        running.end(result.as_deref().ok()).await;
        result.map_err(|e| engine_error(&container, e))
    }
}

/// An exec whose time is being billed: billed when it ends or is dropped.
pub(crate) struct Running {
    exec: Exec,
    commands: Vec<String>,
    /// Taken once the time is billed.
    bill: Option<Bill>,
}

impl Running {
    /// The live output tap of these commands: a sink for the engine, which
    /// the console's live view reads and which sends on to `onward`.
    pub(crate) fn tap(&self, onward: Option<DeltaSink>) -> (DeltaSink, Tap) {
        let exec = &self.exec;
        exec.state.live_output.tap(
            &exec.container,
            &self.commands,
            exec.state.engine.masker(&exec.container).as_deref(),
            onward,
        )
    }

    /// Whether the run succeeded, for the metrics (a run dropped before
    /// this counts as failed).
    pub(crate) fn succeeded(&mut self, ok: bool) {
        if let Some(bill) = self.bill.as_mut() {
            bill.ok = ok;
        }
    }

    /// Ends the exec: its slot freed (waiting until every server sees it
    /// free: its client may start the next at once), its time billed, and
    /// `results` (if it ran) written to the command audit.
    pub(crate) async fn end(mut self, results: Option<&[CommandResult]>) {
        if let Some(permit) = self.exec.permit.take() {
            permit.release().await;
        }
        drop(self.bill.take());
        if let Some(results) = results {
            let exec = &self.exec;
            exec.state.billing.audit(
                &exec.project,
                &exec.container,
                exec.response.as_deref(),
                &self.commands,
                results,
            );
        }
    }
}

/// Bills a run of commands when dropped, whether it finished or was cut
/// short: the one place an exec's time is billed.
struct Bill {
    state: Arc<AppState>,
    container: String,
    commands: usize,
    started: Instant,
    ok: bool,
}

impl Drop for Bill {
    fn drop(&mut self) {
        let seconds = self.started.elapsed().as_secs_f64();
        self.state.metrics.exec(self.commands, seconds, self.ok);
        self.state.billing.bill(&self.container, seconds);
    }
}

/// Before a command: a suspended container is woken, which opens a billed
/// session and is admitted against the project's quotas; activity renews
/// the expiry (at most once a second: `last_active_at` has second
/// resolution).
pub(crate) async fn begin_activity(state: &AppState, row: &ContainerRow) -> ApiResult<()> {
    let id = row.id.clone();
    if !row.session_open {
        state
            .admission
            .open_session(&row.project, &id, row.memory_limit)
            .await?;
        return Ok(());
    }
    let now = now();
    if now > row.last_active_at {
        state.db(move |s| s.record_activity(&id, now, 0.0)).await?;
    }
    Ok(())
}

/// Before a command in a project's container (once it was admitted):
/// ownership (404 otherwise), and a suspended container woken (a billed
/// session opened, under the running-container quotas). True if a session
/// began.
async fn prepare_command(state: &Arc<AppState>, project: &str, id: &str) -> ApiResult<bool> {
    let mut woke = false;
    // A container this project was already seen to own, whose processes
    // run (so its session is open), needs no trip to the store before its
    // commands: the time they take is billed, and the expiry renewed, after.
    let known_running = state.owner_of(id).is_some_and(|owner| owner == project)
        && state
            .engine
            .inspect(id)
            .await
            .is_ok_and(|info| info.state == ContainerState::Running);
    if !known_running {
        // One trip: the row, and the activity of a running one.
        let (owner, key, started_at) = (project.to_owned(), id.to_owned(), now());
        let row = state
            .db(move |s| {
                let row = s.container(&owner, &key)?;
                if let Some(row) = row.as_ref().filter(|r| r.session_open) {
                    if started_at > row.last_active_at {
                        s.record_activity(&row.id, started_at, 0.0)?;
                    }
                }
                Ok(row)
            })
            .await?
            .ok_or_else(|| ApiError::not_found("container", id))?;
        if !row.session_open {
            begin_activity(state, &row).await?;
            woke = true;
        }
        state.remember_owner(id, project);
    }
    Ok(woke)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_limits_name_their_param() {
        let body = |json: &str| serde_json::from_str::<ExecRequest>(json).unwrap();
        let param = |r: ApiResult<RunRequest>| r.err().and_then(|e| e.param);
        let run_request = |body: &ExecRequest| run_request(body, 600);
        assert_eq!(
            param(run_request(&body(
                r#"{"commands":["true"],"timeout_ms":300001}"#
            )))
            .as_deref(),
            Some("timeout_ms")
        );
        assert_eq!(
            param(run_request(&body(
                r#"{"commands":["true"],"max_output_length":65537}"#
            )))
            .as_deref(),
            Some("max_output_length")
        );
        let many = format!(r#"{{"commands":[{}]}}"#, vec!["\"x\""; 101].join(","));
        assert_eq!(
            param(run_request(&body(&many))).as_deref(),
            Some("commands")
        );
        assert!(run_request(&body(r#"{"commands":["true"]}"#)).is_ok());
    }
}
