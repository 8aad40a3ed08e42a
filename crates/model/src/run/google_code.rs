//! Google's code execution as a hosted tool of the loop: a call's Python
//! runs on the container's kernel (the code interpreter's, through
//! [`Sandbox::interpret_within`]) for at most the tool's time, and becomes
//! one `code_interpreter_call` item whose status is the run's outcome:
//! `completed` (Google's `OUTCOME_OK`), `failed` (it raised:
//! `OUTCOME_FAILED`) or `incomplete` (interrupted at its time:
//! `OUTCOME_DEADLINE_EXCEEDED`). The model reads the outcome's name before
//! the logs (`google_outcome::told`), as Google's model reads its tool's
//! result.

use shellgate_wire::responses::Item;

use super::cell::CellTool;
use super::{EventSink, OutputGuard, Sandbox, Status};
use crate::upstream::ToolCall;

/// Runs one call of Google's code execution: its `code_interpreter_call`
/// item ([`super::cell::run`]) is added to `output`, its status the
/// code's outcome. Code the model did not give is answered as a failure
/// saying so, so it can correct itself.
pub(super) async fn run(
    sandbox: &dyn Sandbox,
    call: &ToolCall,
    timeout: std::time::Duration,
    output: &mut Vec<Item>,
    events: Option<&EventSink>,
    guardrail: Option<&OutputGuard<'_>>,
) -> Result<(), Status> {
    let tool = CellTool {
        id: call.id.clone(),
        name: "code_execution",
        timeout: Some(timeout),
        outcome: true,
    };
    super::cell::run(sandbox, call, tool, output, events, guardrail)
        .await
        .map(drop)
}
