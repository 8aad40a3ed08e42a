//! Google's code execution's outcome as the loop's items say it: a
//! `code_interpreter_call`'s status is the outcome of its code (`completed`
//! `OUTCOME_OK`, `failed` `OUTCOME_FAILED`, `incomplete`
//! `OUTCOME_DEADLINE_EXCEEDED`), and what the model reads of a call is the
//! outcome's name before the logs. Below the loop and the conversation,
//! which both read it.

use shellgate_wire::gemini::Outcome;
use shellgate_wire::responses::{self as wire, CodeInterpreterStatus};

/// Google's outcome of a call whose item has `status` (one not yet run
/// has none).
pub fn outcome(status: Option<CodeInterpreterStatus>) -> Outcome {
    match status {
        Some(CodeInterpreterStatus::Completed) => Outcome::OutcomeOk,
        Some(CodeInterpreterStatus::Failed) => Outcome::OutcomeFailed,
        Some(CodeInterpreterStatus::Incomplete) => Outcome::OutcomeDeadlineExceeded,
        _ => Outcome::OutcomeUnspecified,
    }
}

/// The outcome's name as the model reads it.
pub fn outcome_name(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::OutcomeOk => "OUTCOME_OK",
        Outcome::OutcomeFailed => "OUTCOME_FAILED",
        Outcome::OutcomeDeadlineExceeded => "OUTCOME_DEADLINE_EXCEEDED",
        Outcome::OutcomeUnspecified => "OUTCOME_UNSPECIFIED",
    }
}

/// What the model reads of a call: the outcome's name, the logs, and how
/// many figures the user was shown.
pub fn told(call: &wire::CodeInterpreterCall) -> String {
    let mut logs = String::new();
    let mut figures = 0;
    for output in call.outputs.iter().flatten() {
        match output {
            wire::CodeInterpreterOutput::Logs { logs: text, .. } => logs.push_str(text),
            wire::CodeInterpreterOutput::Image { .. } => figures += 1,
        }
    }
    let mut told = format!("{}\n{logs}", outcome_name(outcome(call.status)));
    if figures > 0 {
        told.push_str(&format!("\n[{figures} figure(s) shown to the user]"));
    }
    told
}
