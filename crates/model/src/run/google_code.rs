//! Google's code execution as a hosted tool of the loop: a call's Python
//! runs on the container's kernel (the code interpreter's, through
//! [`Sandbox::interpret_within`]) for at most the tool's time, and becomes
//! one `code_interpreter_call` item whose status is the run's outcome:
//! `completed` (Google's `OUTCOME_OK`), `failed` (it raised:
//! `OUTCOME_FAILED`) or `incomplete` (interrupted at its time:
//! `OUTCOME_DEADLINE_EXCEEDED`). The model reads the outcome's name before
//! the logs (`google_outcome::told`), as Google's model reads its tool's
//! result.

use shellgate_wire::responses::{self as wire, CodeInterpreterStatus, Item};

use super::{
    announce, complete, emit, guarded_logs, host_failed, image_outputs, Ended, Event, EventSink,
    Interpretation, InterpreterStep, OutputGuard, Sandbox, Status,
};
use crate::arguments::InterpreterArguments;
use crate::upstream::ToolCall;

/// The status of a call's item for how its code ended.
pub fn status(ended: Ended) -> CodeInterpreterStatus {
    if ended.timed_out {
        CodeInterpreterStatus::Incomplete
    } else if ended.raised {
        CodeInterpreterStatus::Failed
    } else {
        CodeInterpreterStatus::Completed
    }
}

/// Runs one call of Google's code execution: its `code_interpreter_call`
/// item is added to `output`, told in progress, its code, interpreting,
/// completed. Code the model did not give is answered as a failure saying
/// so, so it can correct itself.
pub(super) async fn run(
    sandbox: &dyn Sandbox,
    call: &ToolCall,
    timeout: std::time::Duration,
    output: &mut Vec<Item>,
    events: Option<&EventSink>,
    guardrail: Option<&OutputGuard<'_>>,
) -> Result<(), Status> {
    let code = InterpreterArguments::read(&call.arguments).code;
    let container = sandbox.container().await.map_err(host_failed)?;
    let mut item = wire::CodeInterpreterCall {
        id: Some(call.id.clone()),
        code: Some(String::new()),
        container_id: Some(container.clone()),
        outputs: None,
        status: Some(CodeInterpreterStatus::InProgress),
        extra: wire::Extra::new(),
    };
    let index = announce(output, events, Item::CodeInterpreterCall(item.clone()));
    let step = |step| {
        emit(
            events,
            Event::Interpreter {
                index,
                item_id: call.id.clone(),
                step,
            },
        )
    };
    step(InterpreterStep::InProgress);
    step(InterpreterStep::Code(code.clone()));
    step(InterpreterStep::Interpreting);
    let (interpretation, ended) = if code.trim().is_empty() {
        let logs = "shellgate: the code was not run: code_execution needs code\n".to_owned();
        let raised = Ended {
            raised: true,
            timed_out: false,
        };
        (
            Interpretation {
                logs,
                ..Interpretation::default()
            },
            raised,
        )
    } else {
        sandbox
            .interpret_within(&container, &code, timeout)
            .await
            .map_err(host_failed)?
    };
    let logs = guarded_logs(guardrail, interpretation.logs);
    let mut outputs = vec![wire::CodeInterpreterOutput::Logs {
        logs,
        extra: wire::Extra::new(),
    }];
    outputs.extend(image_outputs(&interpretation.images));
    step(InterpreterStep::Completed);
    item.code = Some(code);
    item.outputs = Some(outputs);
    item.status = Some(status(ended));
    complete(output, events, index, Item::CodeInterpreterCall(item));
    Ok(())
}
