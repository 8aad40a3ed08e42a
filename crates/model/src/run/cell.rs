//! One cell run on the container's kernel as a `code_interpreter_call`
//! item: the runner OpenAI's code interpreter and Google's code execution
//! share. The item is added to the output and told in progress, its code,
//! interpreting, completed; its outputs are the cell's logs (checked by
//! the output guardrail) and its figures. The two tools differ only in
//! what [`CellTool`] says: the item's id, the name a call without code is
//! told it needs, the cell's time, and whether the item's status tells how
//! the code ended (Google's outcome).

use std::time::Duration;

use shellgate_wire::responses::{self as wire, CodeInterpreterStatus, Item};

use super::{
    announce, complete, emit, guarded_logs, host_failed, image_outputs, Ended, Event, EventSink,
    Interpretation, InterpreterStep, OutputGuard, Sandbox, Status, WrittenFile,
};
use crate::arguments::InterpreterArguments;
use crate::upstream::ToolCall;

/// What sets a tool's cells apart.
pub(super) struct CellTool {
    /// The item's id.
    pub id: String,
    /// The tool's name, in the logs answering a call without code.
    pub name: &'static str,
    /// How long the cell may run: `None` is the code interpreter's own
    /// limit ([`Sandbox::interpret`]).
    pub timeout: Option<Duration>,
    /// Google's shape: the item's status tells how the code ended
    /// ([`status`]) and its logs are an output even
    /// when empty (the outcome always has an output); otherwise the status
    /// is `completed` and empty logs are left out.
    pub outcome: bool,
}

/// Runs one call's cell: its `code_interpreter_call` item is added to
/// `output`. Code the model did not give is answered as logs saying so
/// (a failure, for the outcome), so it can correct itself. Returns the
/// container and the files the code wrote there.
pub(super) async fn run(
    sandbox: &dyn Sandbox,
    call: &ToolCall,
    tool: CellTool,
    output: &mut Vec<Item>,
    events: Option<&EventSink>,
    guardrail: Option<&OutputGuard<'_>>,
) -> Result<(String, Vec<WrittenFile>), Status> {
    let code = InterpreterArguments::read(&call.arguments).code;
    let container = sandbox.container().await.map_err(host_failed)?;
    let mut item = wire::CodeInterpreterCall {
        id: Some(tool.id.clone()),
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
                item_id: tool.id.clone(),
                step,
            },
        )
    };
    step(InterpreterStep::InProgress);
    step(InterpreterStep::Code(code.clone()));
    step(InterpreterStep::Interpreting);
    let (interpretation, ended) = if code.trim().is_empty() {
        let logs = format!(
            "shellgate: the code was not run: {} needs code\n",
            tool.name
        );
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
        match tool.timeout {
            Some(timeout) => sandbox
                .interpret_within(&container, &code, timeout)
                .await
                .map_err(host_failed)?,
            None => (
                sandbox
                    .interpret(&container, &code)
                    .await
                    .map_err(host_failed)?,
                Ended::default(),
            ),
        }
    };
    let logs = guarded_logs(guardrail, interpretation.logs);
    let mut outputs = Vec::new();
    if tool.outcome || !logs.is_empty() {
        outputs.push(wire::CodeInterpreterOutput::Logs {
            logs,
            extra: wire::Extra::new(),
        });
    }
    outputs.extend(image_outputs(&interpretation.images));
    step(InterpreterStep::Completed);
    item.code = Some(code);
    item.outputs = Some(outputs);
    item.status = Some(if tool.outcome {
        status(ended)
    } else {
        CodeInterpreterStatus::Completed
    });
    complete(output, events, index, Item::CodeInterpreterCall(item));
    Ok((container, interpretation.files))
}

/// The status of a call's item for how its code ended (Google's outcome
/// reads it back).
pub fn status(ended: Ended) -> CodeInterpreterStatus {
    if ended.timed_out {
        CodeInterpreterStatus::Incomplete
    } else if ended.raised {
        CodeInterpreterStatus::Failed
    } else {
        CodeInterpreterStatus::Completed
    }
}
