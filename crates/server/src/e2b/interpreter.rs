//! The code interpreter's port (49999 by `E2b-Sandbox-Port`): `POST
//! /execute`, answered as newline-delimited JSON as E2B's code interpreter
//! answers it, and its contexts (`POST`/`GET /contexts`, `DELETE
//! /contexts/{id}`, `POST /contexts/{id}/restart`). A dialect over
//! `shellgate_interpreter::Interpreters` (the kernels live there).
//!
//! Access: `/execute` needs the sandbox's access token or the project's key
//! (`SandboxCaller`). The contexts routes take the sandbox's traffic token
//! too (`ContextsCaller`): E2B's SDKs (Python's sync and async, JavaScript's)
//! send no access token there, only `E2B-Traffic-Access-Token`, which
//! create and connect hand out. None opens on the sandbox id alone.
//!
//! An execution holds one of the project's concurrent exec slots until it
//! ends, and is billed and audited as one exec command. E2B's SDK sends no
//! timeout (it gives up on the request itself, and a client that leaves
//! interrupts the execution); [`EXECUTION_BOUND`] is the server's.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use shellgate_interpreter::{
    ContextInfo, DisplayData, Execute, ExecutionEvent, InterpreterError, Interruption, Language,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::access::{ContextsCaller, SandboxCaller};
use super::E2bError;
use crate::sandboxes::exec::Exec;
use crate::state::AppState;

/// The longest one execution runs on the server's side.
pub const EXECUTION_BOUND: Duration = Duration::from_secs(3600);

/// Events buffered toward a slow client before the kernel's reader waits.
const EVENTS_BUFFERED: usize = 64;

pub(super) fn routes(router: Router<Arc<AppState>>) -> Router<Arc<AppState>> {
    router
        .route("/execute", post(execute))
        .route("/contexts", post(create_context).get(list_contexts))
        .route("/contexts/{id}", delete(remove_context))
        .route("/contexts/{id}/restart", post(restart_context))
}

/// `POST /execute`'s body (both SDK versions send every field, `null` when
/// unset).
#[derive(Debug, Deserialize)]
struct ExecuteBody {
    code: String,
    #[serde(default)]
    context_id: Option<String>,
    #[serde(default)]
    language: Option<String>,
    #[serde(default)]
    env_vars: Option<std::collections::BTreeMap<String, String>>,
}

/// `POST /contexts`'s body.
#[derive(Debug, Default, Deserialize)]
struct ContextBody {
    #[serde(default)]
    language: Option<String>,
    #[serde(default)]
    cwd: Option<String>,
}

/// One line of `/execute`'s answer (E2B's `parse_output` reads `type`).
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Line<'a> {
    Stdout {
        text: &'a str,
        /// Unix nanoseconds.
        timestamp: i64,
    },
    Stderr {
        text: &'a str,
        timestamp: i64,
    },
    Result(&'a DisplayData),
    Error {
        name: &'a str,
        value: &'a str,
        traceback: &'a str,
    },
    NumberOfExecutions {
        execution_count: u32,
    },
}

fn ndjson(event: &ExecutionEvent) -> Bytes {
    let line = match event {
        ExecutionEvent::Stdout { text, timestamp_us } => Line::Stdout {
            text,
            timestamp: timestamp_us.saturating_mul(1000),
        },
        ExecutionEvent::Stderr { text, timestamp_us } => Line::Stderr {
            text,
            timestamp: timestamp_us.saturating_mul(1000),
        },
        ExecutionEvent::Result(data) => {
            return result_line(data);
        }
        ExecutionEvent::Error {
            name,
            value,
            traceback,
        } => Line::Error {
            name,
            value,
            traceback,
        },
        ExecutionEvent::ExecutionCount(n) => Line::NumberOfExecutions {
            execution_count: *n,
        },
        // E2B's executions offer the code no client tools.
        ExecutionEvent::ToolCalls(_) => return Bytes::new(),
    };
    // Strings, numbers and DisplayData always serialise.
    let mut bytes = serde_json::to_vec(&line).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

/// A result's line as E2B's server writes it: its plain text without the
/// quotes around it (E2B's `Result` takes them off any text that starts
/// and ends with the same quote, so a `str` shows as itself: `bar`, not
/// `'bar'`).
fn result_line(data: &DisplayData) -> Bytes {
    let unquoted = data.text.as_deref().and_then(unquoted);
    let line = match unquoted {
        Some(text) => {
            let mut data = data.clone();
            data.text = Some(text.to_owned());
            serde_json::to_vec(&Line::Result(&data))
        }
        None => serde_json::to_vec(&Line::Result(data)),
    };
    let mut bytes = line.unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

/// `text` without the quote that starts and ends it, if it has one.
fn unquoted(text: &str) -> Option<&str> {
    ['\'', '"'].into_iter().find_map(|quote| {
        text.strip_prefix(quote)
            .and_then(|rest| rest.strip_suffix(quote))
    })
}

fn interpreter_error(error: InterpreterError) -> E2bError {
    match error {
        InterpreterError::ContextNotFound(id) => {
            E2bError::new(StatusCode::NOT_FOUND, format!("context {id:?} not found"))
        }
        InterpreterError::InvalidRequest { .. } => {
            E2bError::new(StatusCode::BAD_REQUEST, error.to_string())
        }
        InterpreterError::TooManyContexts { .. } => {
            E2bError::new(StatusCode::TOO_MANY_REQUESTS, error.to_string())
        }
        InterpreterError::KernelFailed(_) => {
            E2bError::new(StatusCode::INTERNAL_SERVER_ERROR, error.to_string())
        }
        InterpreterError::Sandbox(error) => error.into(),
    }
}

/// A language by E2B's name. One shellgate has no kernel for (`r`,
/// `deno`...) is refused in E2B's words (its server quotes Jupyter's answer
/// for a kernel it does not have), as a 400: nothing was run.
fn language(name: Option<&str>) -> Result<Option<Language>, E2bError> {
    match name {
        None => Ok(None),
        Some(name) => Language::parse(name)
            .map(Some)
            .ok_or_else(|| unknown_language(name)),
    }
}

fn unknown_language(name: &str) -> E2bError {
    let kernel = name.trim().to_ascii_lowercase();
    E2bError::new(
        StatusCode::BAD_REQUEST,
        format!(
            "Failed to create context: {{\"message\": \"The '{kernel}' kernel is not available. \
             Please pick another suitable kernel instead, or install that kernel.\", \
             \"short_message\": \"{kernel} not found\"}}"
        ),
    )
}

/// The sandbox's variables, then the call's (which win).
fn merged_env(
    sandbox: &[(String, String)],
    call: Option<std::collections::BTreeMap<String, String>>,
) -> Vec<(String, String)> {
    let mut env: std::collections::BTreeMap<String, String> = sandbox.iter().cloned().collect();
    env.extend(call.unwrap_or_default());
    env.into_iter().collect()
}

/// `POST /execute` → 200 `application/x-ndjson`, one event a line.
async fn execute(
    State(state): State<Arc<AppState>>,
    caller: SandboxCaller,
    body: Result<Json<ExecuteBody>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, E2bError> {
    let Json(body) = body.map_err(|e| E2bError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    let asked = Execute {
        code: body.code,
        language: language(body.language.as_deref())?,
        env_vars: merged_env(&caller.env_vars, body.env_vars),
        timeout: EXECUTION_BOUND,
        context_id: body.context_id,
        tools: Vec::new(),
    };
    if asked.code.len() > shellgate_interpreter::MAX_CODE_BYTES {
        return Err(interpreter_error(InterpreterError::InvalidRequest {
            param: "code",
            message: format!(
                "code must be at most {} bytes",
                shellgate_interpreter::MAX_CODE_BYTES
            ),
        }));
    }
    let container = caller.container_id.clone();
    // A context asked for by id must exist: a 404 now, not a stream.
    if let Some(id) = &asked.context_id {
        let known = state.interpreters.contexts(&container).await;
        if !known.iter().any(|c| &c.id == id) {
            return Err(interpreter_error(InterpreterError::ContextNotFound(
                id.clone(),
            )));
        }
    }
    let exec = Exec::admit(&state, &caller.project, &container).await?;
    let (sender, receiver) = mpsc::channel::<ExecutionEvent>(EVENTS_BUFFERED);
    let (lines, body) = mpsc::channel::<BodyPiece>(EVENTS_BUFFERED);
    let code = asked.code.clone();
    tokio::spawn(async move {
        let mut running = exec.begin(vec![code]);
        let started = std::time::Instant::now();
        // Events become lines; the client leaving closes `lines`, which
        // drops `receiver`, which interrupts the execution.
        let forward = forward_lines(receiver, lines.clone());
        let run = state.interpreters.execute(&container, asked, sender);
        let (summary, ()) = tokio::join!(run, forward);
        let outcome = match &summary {
            Ok(summary) if summary.interrupted == Some(Interruption::TimedOut) => {
                shellgate_wire::Outcome::Timeout
            }
            Ok(summary) => shellgate_wire::Outcome::Exit {
                exit_code: i32::from(summary.failed || summary.interrupted.is_some()),
            },
            Err(_) => shellgate_wire::Outcome::Exit { exit_code: 1 },
        };
        let cut_short = !matches!(&summary, Ok(s) if !s.failed && s.interrupted.is_none())
            && super::access::sandbox_ended(&state, &container).await;
        if cut_short {
            // The sandbox ended under the execution (killed, timed out,
            // paused): the stream breaks, as a connection to a sandbox
            // that is gone does, so the SDK raises instead of returning a
            // normal result.
            let _ = lines
                .send(Err(std::io::Error::other(format!(
                    "sandbox {container} ended before the execution completed"
                ))))
                .await;
        } else if let Err(error) = &summary {
            // Past the status line: the failure is the stream's last line.
            let failed = ExecutionEvent::Error {
                name: "ExecutionFailed".into(),
                value: error.to_string(),
                traceback: String::new(),
            };
            let _ = lines.send(Ok(ndjson(&failed))).await;
        }
        running.succeeded(summary.is_ok());
        let result = shellgate_sandbox_api::CommandResult {
            stdout: String::new(),
            stderr: String::new(),
            outcome,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            bytes_out: 0,
        };
        running.end(Some(&[result])).await;
    });
    let stream = ReceiverStream::new(body);
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(stream),
    )
        .into_response())
}

/// One piece of `/execute`'s body: a line, or the error that breaks the
/// stream.
type BodyPiece = Result<Bytes, std::io::Error>;

/// Sends each event as a line until the events end or the client leaves.
async fn forward_lines(mut events: mpsc::Receiver<ExecutionEvent>, lines: mpsc::Sender<BodyPiece>) {
    loop {
        // The client may leave while the code is silent (a sleep): the
        // closed stream is watched, not only found at the next event.
        let event = tokio::select! {
            event = events.recv() => event,
            () = lines.closed() => return,
        };
        let Some(event) = event else { return };
        if lines.send(Ok(ndjson(&event))).await.is_err() {
            // The client left: dropping `events` tells the execution.
            return;
        }
    }
}

/// `POST /contexts` → 200 the context (`{"id", "language", "cwd"}`).
async fn create_context(
    State(state): State<Arc<AppState>>,
    ContextsCaller(caller): ContextsCaller,
    body: Option<Json<ContextBody>>,
) -> Result<Json<ContextInfo>, E2bError> {
    let body = body.map(|Json(b)| b).unwrap_or_default();
    let language = language(body.language.as_deref())?.unwrap_or(Language::Python);
    let info = state
        .interpreters
        .create_context(
            &caller.container_id,
            language,
            body.cwd.as_deref(),
            &caller.env_vars,
        )
        .await
        .map_err(interpreter_error)?;
    Ok(Json(info))
}

/// The languages whose default contexts an E2B sandbox has from its start
/// (its code-interpreter server makes them before it answers).
const DEFAULT_CONTEXTS: [Language; 2] = [Language::Python, Language::JavaScript];

/// `GET /contexts` → the sandbox's contexts, its default ones first.
async fn list_contexts(
    State(state): State<Arc<AppState>>,
    ContextsCaller(caller): ContextsCaller,
) -> Json<Vec<ContextInfo>> {
    Json(
        state
            .interpreters
            .contexts_with_defaults(&caller.container_id, &DEFAULT_CONTEXTS)
            .await,
    )
}

/// `DELETE /contexts/{id}` → 204.
async fn remove_context(
    State(state): State<Arc<AppState>>,
    ContextsCaller(caller): ContextsCaller,
    Path(id): Path<String>,
) -> Result<StatusCode, E2bError> {
    state
        .interpreters
        .remove_context(&caller.container_id, &id)
        .await
        .map_err(interpreter_error)?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /contexts/{id}/restart` → 204.
async fn restart_context(
    State(state): State<Arc<AppState>>,
    ContextsCaller(caller): ContextsCaller,
    Path(id): Path<String>,
) -> Result<StatusCode, E2bError> {
    state
        .interpreters
        .restart_context(&caller.container_id, &id)
        .await
        .map_err(interpreter_error)?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_e2b_s() {
        let line = ndjson(&ExecutionEvent::Stdout {
            text: "hi\n".into(),
            timestamp_us: 2,
        });
        assert_eq!(
            &line[..],
            b"{\"type\":\"stdout\",\"text\":\"hi\\n\",\"timestamp\":2000}\n"
        );
        let result = ExecutionEvent::Result(Box::new(DisplayData {
            text: Some("2".into()),
            is_main_result: true,
            ..Default::default()
        }));
        assert_eq!(
            &ndjson(&result)[..],
            b"{\"type\":\"result\",\"text\":\"2\",\"is_main_result\":true}\n"
        );
        assert_eq!(
            &ndjson(&ExecutionEvent::ExecutionCount(3))[..],
            b"{\"type\":\"number_of_executions\",\"execution_count\":3}\n"
        );
        let error = ExecutionEvent::Error {
            name: "E".into(),
            value: "v".into(),
            traceback: "t".into(),
        };
        assert_eq!(
            &ndjson(&error)[..],
            b"{\"type\":\"error\",\"name\":\"E\",\"value\":\"v\",\"traceback\":\"t\"}\n"
        );
    }

    #[test]
    fn a_quoted_result_text_loses_its_quotes_as_e2b_s_does() {
        let line = |text: &str| {
            let result = ExecutionEvent::Result(Box::new(DisplayData {
                text: Some(text.into()),
                is_main_result: true,
                ..Default::default()
            }));
            let line = ndjson(&result);
            let value: serde_json::Value = serde_json::from_slice(&line).unwrap();
            value["text"].as_str().unwrap_or_default().to_owned()
        };
        assert_eq!(line("'bar'"), "bar");
        assert_eq!(line("\"it's\""), "it's");
        assert_eq!(line("('a', 'b')"), "('a', 'b')");
        assert_eq!(line("42"), "42");
    }

    #[test]
    fn a_language_without_a_kernel_is_refused_in_e2b_s_words() {
        for name in ["js", "TypeScript", " java ", "bash", "python"] {
            assert!(
                matches!(language(Some(name)), Ok(Some(_))),
                "{name:?} has a kernel"
            );
        }
        let refused = language(Some("R")).err().map(|e| (e.status, e.message));
        let (status, message) = refused.unwrap_or_default();
        assert_eq!(status, StatusCode::BAD_REQUEST, "{message}");
        assert!(
            message.starts_with("Failed to create context: ")
                && message.contains("The 'r' kernel is not available"),
            "{message}"
        );
    }

    #[test]
    fn the_call_s_variables_win_over_the_sandbox_s() {
        let sandbox = vec![("A".to_owned(), "1".to_owned()), ("B".into(), "2".into())];
        let call = [("B".to_owned(), "3".to_owned())].into_iter().collect();
        assert_eq!(
            merged_env(&sandbox, Some(call)),
            vec![("A".into(), "1".into()), ("B".into(), "3".into())]
        );
    }
}
