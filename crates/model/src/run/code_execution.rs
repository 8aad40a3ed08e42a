//! Anthropic's code execution sub-tools, run in the sandbox:
//! `bash_code_execution` (a command), `text_editor_code_execution`
//! (`view`, `create` or `str_replace` of a file) and `code_execution` (a
//! Python cell, in the container's stateful kernel: the code
//! interpreter's, so its variables outlive the request). Each call is one
//! `code_execution_call` item holding the call and its result in
//! Anthropic's shapes, told in progress and done as the hosted bash's is.
//!
//! The sandbox runs commands only, so the editor's file operations are
//! commands too (the text an edit writes is a quoted argument, within the
//! sandbox's longest command). Errors are Anthropic's error objects, which
//! the model reads and can correct: `invalid_tool_input` (no command, an
//! `old_str` not found exactly once), `file_not_found`,
//! `execution_time_exceeded` (the command ran past its time).
//!
//! The files a command or a cell creates or changes come back in its
//! result's `content` as Files API files (`file_id`s), as Anthropic's do:
//! the sandbox marks the container's files before the call and stores
//! what differs after it ([`Sandbox::mark_files`],
//! [`Sandbox::output_files`]); a command's file too large to store is
//! `output_file_too_large`.
//!
//! A Python cell of `_20260521` has Anthropic's per-cell limit
//! (`cell_timeout`): past it the cell is interrupted (the kernel keeps its
//! state) and ends as a normal result, `return_code` 1 and a
//! `detection_timeout` status in `stderr`, as Anthropic's tool reports it.
//! A cell run on a new kernel where the container had one (it was
//! suspended when idle, which ends its processes) says in `stderr` that
//! the earlier variables are gone.

use std::time::Duration;

use serde::Deserialize;
use shellgate_wire::code_execution::{
    BashOutputFile, BashOutputKind, BashResult, BashToolError, BashToolResultContent,
    CodeExecutionResult, CreateResult, PythonOutputFile, PythonOutputKind, PythonResult,
    PythonToolError, PythonToolResultContent, StrReplaceResult, TextEditorToolError,
    TextEditorToolResultContent, ViewResult,
};
use shellgate_wire::responses::{self as wire, CodeExecutionCall, Item, ItemStatus};
use shellgate_wire::Outcome;

use super::{
    announce, complete, execute, exited, guard_results, host_failed, item_id, Cell, CodeCall,
    EventSink, Interpretation, OutputGuard, Sandbox, Status,
};
use crate::arguments::ShellArguments;
use crate::tools::{CodeExecution, PausedCell, BASH_CODE_EXECUTION, CODE_EXECUTION};
use crate::upstream::ToolCall;

/// The exit code the editor's commands give for a path that is not a file.
const NOT_FOUND: i32 = 44;
/// The exit code of a `str_replace` whose file is larger than it edits.
const TOO_LARGE: i32 = 45;
/// Largest file `str_replace` edits: the most a command's output keeps.
const EDITABLE_BYTES: usize = shellgate_sandbox_api::backend::limits::MAX_OUTPUT_LENGTH;

/// The `bash_code_execution` input.
#[derive(Debug, Default, Deserialize)]
struct BashInput {
    #[serde(default)]
    command: Option<String>,
}

/// The `code_execution` input.
#[derive(Debug, Default, Deserialize)]
struct PythonInput {
    #[serde(default)]
    code: Option<String>,
}

/// The `text_editor_code_execution` input.
#[derive(Debug, Default, Deserialize)]
struct EditorInput {
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    file_text: Option<String>,
    #[serde(default)]
    old_str: Option<String>,
    #[serde(default)]
    new_str: Option<String>,
}

/// Runs one call of a code execution sub-tool: one `code_execution_call`
/// item is added to `output`, in progress (its result `null`), then done.
/// A Python cell that calls the client's tools may pause at its calls:
/// its item is then done without a result, and the calls are returned for
/// the client to answer.
pub(super) async fn run(
    sandbox: &dyn Sandbox,
    call: &ToolCall,
    execution: &CodeExecution,
    output: &mut Vec<Item>,
    events: Option<&EventSink>,
    guardrail: Option<&OutputGuard<'_>>,
) -> Result<Option<Vec<CodeCall>>, Status> {
    let cell_timeout = execution.cell_timeout;
    // Arguments that are not a JSON object (a model's slip) are no input.
    let input: wire::Extra = serde_json::from_str(&call.arguments).unwrap_or_default();
    let container = sandbox.container().await.map_err(host_failed)?;
    let mut item = CodeExecutionCall {
        id: Some(item_id("cex_")),
        call_id: Some(call.id.clone()),
        container_id: Some(container.clone()),
        name: call.name.clone(),
        input: input.clone(),
        result: None,
        status: Some(ItemStatus::InProgress),
        extra: wire::Extra::new(),
    };
    let index = announce(output, events, Item::CodeExecutionCall(item.clone()));
    let input = serde_json::Value::Object(input);
    let result = if call.name == BASH_CODE_EXECUTION {
        let input = BashInput::deserialize(&input).unwrap_or_default();
        CodeExecutionResult::Bash(bash(sandbox, &container, input, guardrail).await?)
    } else if call.name == CODE_EXECUTION {
        let input = PythonInput::deserialize(&input).unwrap_or_default();
        let ran = if execution.client_tools.is_empty() {
            Ran::Done(python(sandbox, &container, input, cell_timeout, guardrail).await?)
        } else {
            calling(
                sandbox,
                &container,
                &call.id,
                input,
                execution,
                cell_timeout,
                guardrail,
            )
            .await?
        };
        match ran {
            Ran::Done(content) => CodeExecutionResult::Python(content),
            Ran::Paused(calls) => {
                complete(output, events, index, Item::CodeExecutionCall(item));
                return Ok(Some(calls));
            }
        }
    } else {
        let input = EditorInput::deserialize(&input).unwrap_or_default();
        CodeExecutionResult::TextEditor(edit(sandbox, &container, input, guardrail).await?)
    };
    item.result = Some(result);
    item.status = Some(ItemStatus::Completed);
    complete(output, events, index, Item::CodeExecutionCall(item));
    Ok(None)
}

/// How a cell calling the client's tools went.
enum Ran {
    Done(PythonToolResultContent),
    Paused(Vec<CodeCall>),
}

/// A Python cell whose code may call the client's tools: its result, or
/// the calls it paused at.
async fn calling(
    sandbox: &dyn Sandbox,
    container: &str,
    cell: &str,
    input: PythonInput,
    execution: &CodeExecution,
    cell_timeout: Option<Duration>,
    guardrail: Option<&OutputGuard<'_>>,
) -> Result<Ran, Status> {
    let Some(code) = input.code.filter(|c| !c.trim().is_empty()) else {
        return Ok(Ran::Done(python_error("invalid_tool_input")));
    };
    let mark = sandbox.mark_files(container).await.map_err(host_failed)?;
    let ran = sandbox
        .interpret_calling(
            container,
            cell,
            &code,
            &execution.client_tools,
            cell_timeout,
        )
        .await
        .map_err(host_failed)?;
    cell_result(sandbox, container, ran, &mark, cell_timeout, guardrail).await
}

/// Resumes the paused cell of `paused` with the client's results: its
/// `code_execution_call` item (the call as the client replayed it) is
/// added to `output` with the cell's result, or without one when the cell
/// pauses again at new calls, which are returned.
pub(super) async fn resume(
    sandbox: &dyn Sandbox,
    paused: &PausedCell,
    execution: &CodeExecution,
    output: &mut Vec<Item>,
    events: Option<&EventSink>,
    guardrail: Option<&OutputGuard<'_>>,
) -> Result<Option<Vec<CodeCall>>, Status> {
    let container = sandbox.container().await.map_err(host_failed)?;
    let mut item = CodeExecutionCall {
        id: Some(item_id("cex_")),
        call_id: Some(paused.cell.clone()),
        container_id: Some(container.clone()),
        name: CODE_EXECUTION.to_owned(),
        input: paused.input.clone(),
        result: None,
        status: Some(ItemStatus::InProgress),
        extra: wire::Extra::new(),
    };
    let index = announce(output, events, Item::CodeExecutionCall(item.clone()));
    let mark = sandbox.mark_files(&container).await.map_err(host_failed)?;
    let ran = sandbox
        .resume_cell(&container, &paused.cell, &paused.answers)
        .await
        .map_err(host_failed)?;
    match cell_result(
        sandbox,
        &container,
        ran,
        &mark,
        execution.cell_timeout,
        guardrail,
    )
    .await?
    {
        Ran::Done(content) => {
            item.result = Some(CodeExecutionResult::Python(content));
            item.status = Some(ItemStatus::Completed);
            complete(output, events, index, Item::CodeExecutionCall(item));
            Ok(None)
        }
        Ran::Paused(calls) => {
            complete(output, events, index, Item::CodeExecutionCall(item));
            Ok(Some(calls))
        }
    }
}

/// A cell's progress as its result: its calls when paused, `unavailable`
/// when it is gone, else what it printed and the files it wrote.
async fn cell_result(
    sandbox: &dyn Sandbox,
    container: &str,
    ran: Cell,
    mark: &super::FileMark,
    cell_timeout: Option<Duration>,
    guardrail: Option<&OutputGuard<'_>>,
) -> Result<Ran, Status> {
    match ran {
        Cell::Paused(calls) => Ok(Ran::Paused(calls)),
        Cell::Gone => Ok(Ran::Done(python_error("unavailable"))),
        Cell::Done(ran) => Ok(Ran::Done(
            python_content(sandbox, container, ran, mark, cell_timeout, guardrail).await?,
        )),
    }
}

fn bash_error(code: &str) -> BashToolResultContent {
    BashToolResultContent::BashCodeExecutionToolResultError(BashToolError {
        error_code: code.to_owned(),
        extra: wire::Extra::new(),
    })
}

fn editor_error(code: &str, message: impl Into<String>) -> TextEditorToolResultContent {
    TextEditorToolResultContent::TextEditorCodeExecutionToolResultError(TextEditorToolError {
        error_code: code.to_owned(),
        error_message: Some(message.into()),
        extra: wire::Extra::new(),
    })
}

/// One command's result (a call the sandbox refused is exit code 2 with
/// the problem in stderr, as the hosted shell answers).
async fn command(
    sandbox: &dyn Sandbox,
    container: &str,
    command: String,
    max_output_length: Option<usize>,
    guardrail: Option<&OutputGuard<'_>>,
) -> Result<shellgate_sandbox_api::backend::CommandResult, Status> {
    let checked = ShellArguments {
        commands: vec![command],
        ..ShellArguments::default()
    }
    .run_request()
    .map(|mut request| {
        if let Some(max) = max_output_length {
            request.max_output_length = max;
        }
        request
    });
    let results = execute(sandbox, container, checked, None, guardrail).await?;
    results.into_iter().next().ok_or_else(|| Status::Failed {
        code: "server_error",
        message: "the sandbox gave no result for the command".into(),
    })
}

async fn bash(
    sandbox: &dyn Sandbox,
    container: &str,
    input: BashInput,
    guardrail: Option<&OutputGuard<'_>>,
) -> Result<BashToolResultContent, Status> {
    let Some(line) = input.command.filter(|c| !c.trim().is_empty()) else {
        return Ok(bash_error("invalid_tool_input"));
    };
    let mark = sandbox.mark_files(container).await.map_err(host_failed)?;
    let result = command(sandbox, container, line, None, guardrail).await?;
    let Outcome::Exit { exit_code } = result.outcome else {
        return Ok(bash_error("execution_time_exceeded"));
    };
    let written = sandbox
        .output_files(container, &mark)
        .await
        .map_err(host_failed)?;
    if written.too_large {
        return Ok(bash_error("output_file_too_large"));
    }
    Ok(BashToolResultContent::BashCodeExecutionResult(BashResult {
        stdout: result.stdout,
        stderr: result.stderr,
        return_code: Some(i64::from(exit_code)),
        content: written
            .file_ids
            .into_iter()
            .map(|file_id| BashOutputFile {
                file_id,
                kind: BashOutputKind::BashCodeExecutionOutput,
            })
            .collect(),
        extra: wire::Extra::new(),
    }))
}

/// What a cell's `stderr` says when it ran on a new kernel.
pub const KERNEL_LOST: &str = "shellgate: this container was suspended while idle, which ended \
     its processes and its Python kernel with them (the files are kept); this cell ran on a new \
     kernel: variables, imports and functions defined by earlier cells are gone\n";

/// One Python cell's result: what it printed (its traceback too, with
/// `return_code` 1 when it raised), or past its time
/// `execution_time_exceeded` (a cell without a limit of its version's) or
/// a result with `return_code` 1 and a `detection_timeout` status (a
/// cell of `_20260521`, past `cell_timeout`).
async fn python(
    sandbox: &dyn Sandbox,
    container: &str,
    input: PythonInput,
    cell_timeout: Option<Duration>,
    guardrail: Option<&OutputGuard<'_>>,
) -> Result<PythonToolResultContent, Status> {
    let Some(code) = input.code.filter(|c| !c.trim().is_empty()) else {
        return Ok(python_error("invalid_tool_input"));
    };
    let mark = sandbox.mark_files(container).await.map_err(host_failed)?;
    let ran = match cell_timeout {
        Some(timeout) => {
            let (mut ran, ended) = sandbox
                .interpret_within(container, &code, timeout)
                .await
                .map_err(host_failed)?;
            ran.timed_out |= ended.timed_out;
            ran.raised |= ended.raised;
            ran
        }
        None => sandbox
            .interpret(container, &code)
            .await
            .map_err(host_failed)?,
    };
    python_content(sandbox, container, ran, &mark, cell_timeout, guardrail).await
}

/// A Python error object of `code`.
fn python_error(code: &str) -> PythonToolResultContent {
    PythonToolResultContent::CodeExecutionToolResultError(PythonToolError {
        error_code: code.to_owned(),
        extra: wire::Extra::new(),
    })
}

/// What a cell that ran gave, as its result: its logs (guarded), the
/// suspended kernel's and the time limit's notes in `stderr`, the files
/// it wrote since `mark`.
async fn python_content(
    sandbox: &dyn Sandbox,
    container: &str,
    ran: Interpretation,
    mark: &super::FileMark,
    cell_timeout: Option<Duration>,
    guardrail: Option<&OutputGuard<'_>>,
) -> Result<PythonToolResultContent, Status> {
    let error = python_error;
    let mut stderr = String::new();
    if ran.kernel_lost {
        stderr.push_str(KERNEL_LOST);
    }
    let timed_out = match (ran.timed_out, cell_timeout) {
        (false, _) => None,
        (true, None) => return Ok(error("execution_time_exceeded")),
        (true, Some(timeout)) => Some(timeout),
    };
    if let Some(timeout) = timed_out {
        stderr.push_str(&format!(
            "detection_timeout: the cell ran longer than its {} s limit and was stopped \
             (the kernel keeps its state)\n",
            timeout.as_secs_f64()
        ));
    }
    // A file too large to store is left out (the cell's error codes have
    // no `output_file_too_large`).
    let written = sandbox
        .output_files(container, mark)
        .await
        .map_err(host_failed)?;
    let logs = match guardrail {
        // The logs are checked as a command's output is; what says they
        // were withheld goes to `stderr`, where the model reads why.
        Some(guardrail) => {
            let guarded = guard_results(guardrail, vec![exited(&ran.logs, String::new(), 0)]);
            let mut logs = String::new();
            for result in guarded {
                logs.push_str(&result.stdout);
                stderr.push_str(&result.stderr);
            }
            logs
        }
        None => ran.logs,
    };
    Ok(PythonToolResultContent::CodeExecutionResult(PythonResult {
        stdout: logs,
        stderr,
        return_code: i64::from(ran.raised || timed_out.is_some()),
        content: written
            .file_ids
            .into_iter()
            .map(|file_id| PythonOutputFile {
                file_id,
                kind: PythonOutputKind::CodeExecutionOutput,
            })
            .collect(),
        extra: wire::Extra::new(),
    }))
}

/// `text` as one bash word.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// How many lines `text` has (a last line without its newline counts).
fn line_count(text: &str) -> u64 {
    text.lines().count() as u64
}

async fn edit(
    sandbox: &dyn Sandbox,
    container: &str,
    input: EditorInput,
    guardrail: Option<&OutputGuard<'_>>,
) -> Result<TextEditorToolResultContent, Status> {
    let Some(path) = input.path.filter(|p| !p.is_empty()) else {
        return Ok(editor_error("invalid_tool_input", "a path is required"));
    };
    let quoted = quote(&path);
    let missing = || editor_error("file_not_found", format!("File not found: {path}"));
    let failed = |result: &shellgate_sandbox_api::backend::CommandResult| match result.outcome {
        Outcome::Timeout => editor_error("execution_time_exceeded", "the command timed out"),
        Outcome::Exit { .. } => editor_error("invalid_tool_input", result.stderr.trim()),
    };
    match input.command.as_deref() {
        Some("view") => {
            let script = format!(
                "[ -e {quoted} ] || exit {NOT_FOUND}; if [ -d {quoted} ]; then ls -1A -- {quoted}; \
                 else cat -- {quoted}; fi"
            );
            let result = command(sandbox, container, script, None, guardrail).await?;
            Ok(match result.outcome {
                // The output guardrail withheld the file: the model reads
                // why, as an error, rather than an empty file.
                Outcome::Exit { exit_code: 0 }
                    if result.stdout.is_empty() && !result.stderr.is_empty() =>
                {
                    editor_error("unavailable", result.stderr.trim())
                }
                Outcome::Exit { exit_code: 0 } => {
                    let lines = line_count(&result.stdout);
                    TextEditorToolResultContent::TextEditorCodeExecutionViewResult(ViewResult {
                        file_type: "text".to_owned(),
                        content: result.stdout,
                        num_lines: Some(lines),
                        start_line: Some(1),
                        total_lines: Some(lines),
                        extra: wire::Extra::new(),
                    })
                }
                Outcome::Exit { exit_code } if exit_code == NOT_FOUND => missing(),
                _ => failed(&result),
            })
        }
        Some("create") => {
            let Some(text) = input.file_text else {
                return Ok(editor_error("invalid_tool_input", "create needs file_text"));
            };
            let script = format!(
                "if [ -e {quoted} ]; then existed=1; else existed=0; fi; \
                 mkdir -p -- \"$(dirname -- {quoted})\" && printf %s {} > {quoted} && echo $existed",
                quote(&text)
            );
            let result = command(sandbox, container, script, None, None).await?;
            Ok(match result.outcome {
                Outcome::Exit { exit_code: 0 } => {
                    TextEditorToolResultContent::TextEditorCodeExecutionCreateResult(CreateResult {
                        is_file_update: result.stdout.trim() == "1",
                        extra: wire::Extra::new(),
                    })
                }
                _ => failed(&result),
            })
        }
        Some("str_replace") => {
            let (Some(old), new) = (input.old_str, input.new_str.unwrap_or_default()) else {
                return Ok(editor_error(
                    "invalid_tool_input",
                    "str_replace needs old_str",
                ));
            };
            let script = format!(
                "[ -f {quoted} ] || exit {NOT_FOUND}; \
                 [ \"$(wc -c < {quoted})\" -le {EDITABLE_BYTES} ] || exit {TOO_LARGE}; cat -- {quoted}"
            );
            let read = command(sandbox, container, script, Some(EDITABLE_BYTES), None).await?;
            let text = match read.outcome {
                Outcome::Exit { exit_code: 0 } => read.stdout,
                Outcome::Exit { exit_code } if exit_code == NOT_FOUND => return Ok(missing()),
                Outcome::Exit { exit_code } if exit_code == TOO_LARGE => {
                    return Ok(editor_error(
                        "invalid_tool_input",
                        format!("{path} is larger than the editor edits ({EDITABLE_BYTES} bytes)"),
                    ))
                }
                _ => return Ok(failed(&read)),
            };
            let found = if old.is_empty() {
                0
            } else {
                text.matches(old.as_str()).count()
            };
            if found != 1 {
                return Ok(editor_error(
                    "invalid_tool_input",
                    format!("old_str must occur exactly once in {path}; it occurs {found} times"),
                ));
            }
            let at = text.find(old.as_str()).unwrap_or_default();
            let start = 1 + text[..at].matches('\n').count() as u64;
            let edited = text.replacen(old.as_str(), &new, 1);
            let script = format!("printf %s {} > {quoted}", quote(&edited));
            let written = command(sandbox, container, script, None, None).await?;
            if !matches!(written.outcome, Outcome::Exit { exit_code: 0 }) {
                return Ok(failed(&written));
            }
            let lines = old
                .lines()
                .map(|line| format!("-{line}"))
                .chain(new.lines().map(|line| format!("+{line}")))
                .collect();
            Ok(
                TextEditorToolResultContent::TextEditorCodeExecutionStrReplaceResult(
                    StrReplaceResult {
                        old_start: Some(start),
                        old_lines: Some(line_count(&old).max(1)),
                        new_start: Some(start),
                        new_lines: Some(line_count(&new)),
                        lines: Some(lines),
                        extra: wire::Extra::new(),
                    },
                ),
            )
        }
        other => Ok(editor_error(
            "invalid_tool_input",
            format!(
                "unknown command {:?}: use view, create or str_replace",
                other.unwrap_or_default()
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quoted_word_keeps_every_character() {
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(line_count("a\nb"), 2);
        assert_eq!(line_count("a\nb\n"), 2);
        assert_eq!(line_count(""), 0);
    }
}
