//! Client processes (with stdin and a terminal) started in a container:
//! admitted through the exec pipeline ([`Exec`]) and kept in their slot
//! until they end; their end is awaited by a task of the server, not by any
//! client, which then bills their time and writes them to the command
//! audit.

use std::sync::Arc;

use shellgate_sandbox_api::process::{ProcessInfo, ProcessSpec};

use crate::engine::engine_error;
use crate::error::ApiResult;
use crate::http::to_completion;
use crate::sandboxes::exec::Exec;
use crate::state::AppState;

/// The most output a stream reads at once (one SSE event's chunks, one
/// WebSocket frame): a stream reads its next page only when its client
/// took the last, so a client that never reads pins this much and its
/// connection's write buffer, not a queue of pages.
pub(crate) const STREAM_PAGE_BYTES: usize = 16 * 1024;
/// What a process is admitted as.
pub(crate) enum Kind {
    /// A command of the API: under the project's concurrent-exec quota.
    Exec,
    /// A terminal of the web console: under the console terminals' own
    /// bound, ended a grace after its last viewer left.
    ConsoleTerminal,
}

/// Starts a checked process in a project's container: admitted as its
/// `kind` says (an exec as `Exec::admit` admits one), it keeps its slot
/// until it ends, and its end is awaited by a task of the server, not by
/// any client, which then bills its time and writes it to the command
/// audit. Every API that starts client processes (`/v1/.../processes`, the
/// console's terminals, E2B's `process.Process/Start`) comes through here.
pub(crate) async fn start(
    state: &Arc<AppState>,
    project: &str,
    id: &str,
    process_id: String,
    spec: ProcessSpec,
    kind: Kind,
) -> ApiResult<ProcessInfo> {
    // A console terminal holds its own bound's slot; an exec, the
    // project's exec slot (in the exec).
    let (exec, terminal_slot) = match kind {
        Kind::Exec => (Exec::admit(state, project, id).await?, None),
        Kind::ConsoleTerminal => {
            let slot = state.terminals.admit(project).await?;
            (Exec::admitted(state, project, id).await?, Some(slot))
        }
    };
    let (state, id) = (Arc::clone(state), id.to_owned());
    to_completion(async move {
        let running = exec.begin(vec![spec.command.clone()]);
        let info = state
            .engine
            .start_process(&id, &process_id, spec)
            .await
            .map_err(|e| engine_error(&id, e))?;
        let terminal = terminal_slot.is_some();
        if terminal {
            state.terminals.started(&id, &process_id);
        }
        // Its end, awaited here rather than by a client: it keeps its
        // slot until then, and is billed and audited then.
        tokio::spawn(async move {
            let mut running = running;
            let ended = state.engine.wait_process(&id, &process_id).await;
            if terminal {
                state.terminals.ended(&id, &process_id);
            }
            drop(terminal_slot);
            running.succeeded(ended.is_ok());
            let result = ended
                .ok()
                .map(|ended| shellgate_sandbox_api::CommandResult {
                    stdout: String::new(),
                    stderr: String::new(),
                    outcome: ended.outcome.unwrap_or(shellgate_wire::Outcome::Timeout),
                    duration_ms: ended.duration.as_millis() as u64,
                    bytes_out: ended.output_bytes,
                });
            running.end(result.as_ref().map(std::slice::from_ref)).await;
        });
        Ok(info)
    })
    .await
}
