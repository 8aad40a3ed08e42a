//! `/v1/containers/{id}/processes` (shellgate's extension):
//! processes with stdin and a terminal, their output as JSON pages, as
//! server-sent events and over a WebSocket, and stdin, signals, resizes
//! and kills.
//!
//! A process is admitted as an exec is (`sandboxes::processes::start`: the
//! project's concurrent-exec quota, a suspended container woken and
//! billed), and it keeps its exec slot until it ends. A terminal started
//! through the web console is a console terminal instead (`terminals`):
//! counted in its own bound, not the exec quota, and ended a grace after
//! its last viewer left. The end is awaited by a task of the server, not
//! by any client: whatever clients do (a reader that hangs up, nobody
//! reading at all), the engine kills the process at its timeout, and this
//! task then bills its time and writes it to the command audit, as an exec
//! command's.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use serde::Deserialize;
use shellgate_sandbox_api::backend::limits;
use shellgate_sandbox_api::process::{
    process_limits, signal_allowed, signal_number, OutputRead, ProcessInfo, ProcessSpec,
    ProcessStatus, ProcessStream, PtySpec,
};
use shellgate_wire::{
    new_id, List, Process, ProcessChunk, ProcessClientMessage, ProcessCreate, ProcessDropped,
    ProcessOutput, ProcessPty, ProcessResize, ProcessServerMessage, ProcessSignal, SignalName,
};

use crate::engine::engine_error;
use crate::error::{ApiError, ApiResult};
use crate::http::{
    bearer_key, project_of_key, to_completion, ActingProject, ApiJson, ApiQuery, Project,
};
use crate::output_streams::StreamSlot;
use crate::sandboxes::containers::owned;
use crate::sandboxes::processes::{start, Kind, STREAM_PAGE_BYTES};
use crate::state::AppState;

/// The most one output page carries.
const PAGE_BYTES: usize = 1 << 20;
/// How long a stream's reader waits for output before it looks again
/// whether its client is still there.
const STREAM_WAIT: Duration = Duration::from_secs(15);

/// The wire object of a process.
pub fn process_object(info: &ProcessInfo) -> Process {
    Process {
        id: info.id.clone(),
        object: "container.process".to_owned(),
        container_id: info.container_id.clone(),
        command: info.command.clone(),
        pid: info.pid,
        status: match info.status {
            ProcessStatus::Running => shellgate_wire::ProcessStatus::Running,
            ProcessStatus::Exited => shellgate_wire::ProcessStatus::Exited,
            ProcessStatus::Killed => shellgate_wire::ProcessStatus::Killed,
            ProcessStatus::Timeout => shellgate_wire::ProcessStatus::Timeout,
        },
        pty: info.pty.as_ref().map(|pty| ProcessPty {
            cols: pty.cols,
            rows: pty.rows,
            term: pty.term.clone(),
        }),
        stdin: info.stdin,
        created_at: info.created_at,
        ended_at: info.ended_at,
        exit_code: info.exit_code(),
        outcome: info.outcome,
        output_bytes: info.output_bytes,
    }
}

fn chunk_object(chunk: &shellgate_sandbox_api::process::OutputChunk) -> ProcessChunk {
    ProcessChunk {
        stream: match chunk.stream {
            ProcessStream::Stdout => shellgate_wire::ProcessStreamName::Stdout,
            ProcessStream::Stderr => shellgate_wire::ProcessStreamName::Stderr,
            ProcessStream::Pty => shellgate_wire::ProcessStreamName::Pty,
        },
        offset: chunk.offset,
        data: base64::engine::general_purpose::STANDARD.encode(&chunk.data),
    }
}

/// A create body as the engine's spec (the limits are the engine's, and
/// exec's timeout rule: the default when omitted, refused out of range).
/// The longest a terminal (a process with a `pty`) may run: one hour.
const MAX_TERMINAL_TIMEOUT_MS: u64 = 3_600_000;

fn process_spec(body: ProcessCreate) -> ApiResult<ProcessSpec> {
    let spec = ProcessSpec {
        command: body.command,
        stdin: body.stdin,
        pty: body.pty.map(|pty| PtySpec {
            cols: pty.cols,
            rows: pty.rows,
            term: pty.term,
        }),
        timeout_ms: body.timeout_ms.unwrap_or(limits::DEFAULT_TIMEOUT_MS),
        // A client's process is a command: it keeps its container awake.
        keeps_awake: true,
        env: body.env.unwrap_or_default().into_iter().collect(),
        cwd: body.cwd,
    };
    // The engine also takes service processes (no timeout, longer ones);
    // this API keeps exec's rule, but for a terminal: someone works in it
    // (the console's), and an hour is a working session.
    let max = if spec.pty.is_some() {
        MAX_TERMINAL_TIMEOUT_MS
    } else {
        limits::MAX_TIMEOUT_MS
    };
    if spec.timeout_ms == 0 || spec.timeout_ms > max {
        return Err(shellgate_sandbox_api::SandboxError::InvalidRequest {
            param: "timeout_ms",
            message: format!("timeout_ms must be between 1 and {max}"),
        }
        .into());
    }
    spec.validate()?;
    Ok(spec)
}

/// `POST /v1/containers/{id}/processes` → 201 the process. A terminal
/// (`pty`) the web console starts (its session acts for the project) is a
/// console terminal.
pub async fn create(
    State(state): State<Arc<AppState>>,
    project: Project,
    acting: Option<axum::Extension<ActingProject>>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<ProcessCreate>,
) -> ApiResult<Response> {
    let spec = process_spec(body)?;
    let kind = if acting.is_some() && spec.pty.is_some() {
        Kind::ConsoleTerminal
    } else {
        Kind::Exec
    };
    let info = start(&state, &project.0, &id, new_id("proc_"), spec, kind).await?;
    Ok((StatusCode::CREATED, Json(process_object(&info))).into_response())
}

/// `GET /v1/containers/{id}/processes`.
pub async fn list(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
) -> ApiResult<Json<List<Process>>> {
    owned(&state, &project, &id).await?;
    let processes = state
        .engine
        .list_processes(&id)
        .await
        .map_err(|e| engine_error(&id, e))?;
    let data = processes.iter().map(process_object).collect();
    Ok(Json(List::page(data, false, |p: &Process| p.id.clone())))
}

/// `GET /v1/containers/{id}/processes/{proc}`.
pub async fn retrieve(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path((id, process_id)): Path<(String, String)>,
) -> ApiResult<Json<Process>> {
    owned(&state, &project, &id).await?;
    let info = state
        .engine
        .process(&id, &process_id)
        .await
        .map_err(|e| engine_error(&id, e))?;
    Ok(Json(process_object(&info)))
}

/// `DELETE /v1/containers/{id}/processes/{proc}`: killed with every
/// descendant; answers once it ended.
pub async fn kill(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path((id, process_id)): Path<(String, String)>,
) -> ApiResult<Json<Process>> {
    owned(&state, &project, &id).await?;
    let info = to_completion(async move {
        state
            .engine
            .kill_process(&id, &process_id)
            .await
            .map_err(|e| engine_error(&id, e))
    })
    .await?;
    Ok(Json(process_object(&info)))
}

/// The output route's query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputQuery {
    after: Option<u64>,
    wait_ms: Option<u64>,
    max_bytes: Option<usize>,
    #[serde(default)]
    stream: bool,
}

/// `GET /v1/containers/{id}/processes/{proc}/output`: a JSON page, or with
/// `stream=true` server-sent events (`output`, `dropped`, then `exit`).
pub async fn output(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path((id, process_id)): Path<(String, String)>,
    ApiQuery(query): ApiQuery<OutputQuery>,
) -> ApiResult<Response> {
    let wait_ms = query.wait_ms.unwrap_or(0);
    if wait_ms > process_limits::MAX_WAIT_MS {
        return Err(ApiError::invalid(
            "wait_ms",
            format!("wait_ms must be at most {}", process_limits::MAX_WAIT_MS),
        ));
    }
    let max_bytes = query.max_bytes.unwrap_or(PAGE_BYTES);
    if !(1..=PAGE_BYTES).contains(&max_bytes) {
        return Err(ApiError::invalid(
            "max_bytes",
            format!("max_bytes must be between 1 and {PAGE_BYTES}"),
        ));
    }
    owned(&state, &project, &id).await?;
    // A missing process is a 404 before any stream starts.
    state
        .engine
        .process(&id, &process_id)
        .await
        .map_err(|e| engine_error(&id, e))?;
    let after = query.after.unwrap_or(0);
    if !query.stream {
        let read = OutputRead {
            after,
            max_bytes,
            wait: Duration::from_millis(wait_ms),
        };
        let page = state
            .engine
            .read_process_output(&id, &process_id, read)
            .await
            .map_err(|e| engine_error(&id, e))?;
        return Ok(Json(ProcessOutput {
            chunks: page.chunks.iter().map(chunk_object).collect(),
            next_offset: page.next_offset,
            dropped_bytes: page.dropped_bytes,
            process: process_object(&page.process),
        })
        .into_response());
    }
    let slot = state.output_streams.open(&project.0, &id, &process_id)?;
    // A console terminal's reader is one of its viewers while it reads.
    let viewer = state.terminals.viewer(&id, &process_id);
    let follower = Follower {
        state,
        id,
        process_id,
        after,
        max_bytes: max_bytes.min(STREAM_PAGE_BYTES),
        pending: VecDeque::new(),
        done: false,
        _slot: slot,
        _viewer: viewer,
    };
    Ok(Sse::new(follower.events())
        .keep_alive(crate::http::sse_keep_alive())
        .into_response())
}

fn event(name: &str, data: &impl serde::Serialize) -> Event {
    Event::default()
        .event(name)
        .data(serde_json::to_string(data).unwrap_or_default())
}

/// A process's output followed as SSE events (`output`, `dropped`, then
/// `exit`), read from its buffer one page at a time, and only when the
/// client took the events of the page before: what a client that does not
/// read holds is one page, and the process itself is held back at its
/// buffer's end rather than read for nobody (see the engine's pump).
struct Follower {
    state: Arc<AppState>,
    id: String,
    process_id: String,
    after: u64,
    max_bytes: usize,
    /// The events of the page read last, not yet taken.
    pending: VecDeque<Event>,
    /// The process ended and all its output was read.
    done: bool,
    /// Counted among the process's and the project's streams until dropped.
    _slot: StreamSlot,
    /// Counted among a console terminal's viewers until dropped.
    _viewer: Option<crate::terminals::Viewer>,
}

impl Follower {
    fn events(self) -> impl futures_util::Stream<Item = Result<Event, Infallible>> + Send {
        futures_util::stream::unfold(self, |mut follower| async move {
            let event = follower.next().await?;
            Some((Ok(event), follower))
        })
    }

    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(event);
            }
            if self.done {
                return None;
            }
            let read = OutputRead {
                after: self.after,
                max_bytes: self.max_bytes,
                wait: STREAM_WAIT,
            };
            let page = self
                .state
                .engine
                .read_process_output(&self.id, &self.process_id, read)
                .await
                .ok()?;
            if page.dropped_bytes > 0 {
                self.pending.push_back(event(
                    "dropped",
                    &ProcessDropped {
                        bytes: page.dropped_bytes,
                    },
                ));
            }
            self.pending.extend(
                page.chunks
                    .iter()
                    .map(|chunk| event("output", &chunk_object(chunk))),
            );
            self.after = page.next_offset;
            self.done = page.process.status != ProcessStatus::Running
                && page.next_offset >= page.process.output_bytes;
            if self.done {
                self.pending
                    .push_back(event("exit", &process_object(&page.process)));
            }
        }
    }
}

/// The stdin route's query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StdinQuery {
    #[serde(default)]
    eof: bool,
}

/// `POST /v1/containers/{id}/processes/{proc}/stdin`: raw bytes; `eof=true`
/// closes stdin after them.
pub async fn stdin(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path((id, process_id)): Path<(String, String)>,
    ApiQuery(query): ApiQuery<StdinQuery>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    if body.len() > process_limits::MAX_STDIN_WRITE {
        return Err(ApiError::too_large(format!(
            "At most {} bytes of stdin per call.",
            process_limits::MAX_STDIN_WRITE
        )));
    }
    owned(&state, &project, &id).await?;
    state
        .engine
        .write_process_stdin(&id, &process_id, body.to_vec(), query.eof)
        .await
        .map_err(|e| engine_error(&id, e))?;
    Ok(StatusCode::NO_CONTENT)
}

/// A signal's number, or a 400 naming `signal`.
fn signal_of(signal: &SignalName) -> ApiResult<i32> {
    let number = match signal {
        SignalName::Number(number) => Some(*number).filter(|n| signal_allowed(*n)),
        SignalName::Name(name) => signal_number(name),
    };
    number.ok_or_else(|| {
        ApiError::invalid(
            "signal",
            "signal must be SIGINT, SIGTERM, SIGKILL, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, \
             SIGCONT, SIGSTOP, SIGWINCH or a number from 1 to 31",
        )
    })
}

/// `POST /v1/containers/{id}/processes/{proc}/signal`.
pub async fn signal(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path((id, process_id)): Path<(String, String)>,
    ApiJson(body): ApiJson<ProcessSignal>,
) -> ApiResult<StatusCode> {
    let number = signal_of(&body.signal)?;
    owned(&state, &project, &id).await?;
    state
        .engine
        .signal_process(&id, &process_id, number)
        .await
        .map_err(|e| engine_error(&id, e))?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/containers/{id}/processes/{proc}/resize`.
pub async fn resize(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path((id, process_id)): Path<(String, String)>,
    ApiJson(body): ApiJson<ProcessResize>,
) -> ApiResult<StatusCode> {
    owned(&state, &project, &id).await?;
    state
        .engine
        .resize_process(&id, &process_id, body.cols, body.rows)
        .await
        .map_err(|e| engine_error(&id, e))?;
    Ok(StatusCode::NO_CONTENT)
}

/// The WebSocket route's query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SocketQuery {
    after: Option<u64>,
    /// The API key, for browsers (which cannot set headers on a WebSocket).
    access_token: Option<String>,
}

/// `GET /v1/containers/{id}/processes/{proc}/ws`: output as binary frames
/// (from `after`), then `{"type":"exit"}` and a close; binary frames from
/// the client are stdin, its text frames resizes, signals and `eof`.
pub async fn socket(
    State(state): State<Arc<AppState>>,
    Path((id, process_id)): Path<(String, String)>,
    ApiQuery(query): ApiQuery<SocketQuery>,
    headers: HeaderMap,
    acting: Option<axum::Extension<ActingProject>>,
    client: Option<axum::Extension<crate::listener::ClientAddr>>,
    upgrade: WebSocketUpgrade,
) -> ApiResult<Response> {
    // The web console's session (checked where it forwarded the request),
    // else every route's header, or the query's token; never both silently.
    let project = match acting {
        Some(axum::Extension(acting)) => acting.project(&state)?,
        None => {
            let key = match (bearer_key(&headers), query.access_token.as_deref()) {
                (Some(key), _) => key.to_owned(),
                (None, Some(token)) if !token.is_empty() => token.to_owned(),
                _ => return Err(ApiError::unauthorized(
                    "You didn't provide an API key: an 'Authorization: Bearer YOUR_KEY' header, \
                         or '?access_token=YOUR_KEY' on this WebSocket route.",
                )),
            };
            project_of_key(&state, &key, client.map(|c| c.0 .0.ip())).await?
        }
    };
    owned(&state, &project, &id).await?;
    state
        .engine
        .process(&id, &process_id)
        .await
        .map_err(|e| engine_error(&id, e))?;
    let slot = state.output_streams.open(&project.0, &id, &process_id)?;
    let after = query.after.unwrap_or(0);
    // A client's frame is stdin (or a small control message): at most what
    // one stdin call takes. Output goes out one frame at a time, each
    // written through before the next page is read: the socket's buffers
    // hold a frame, not a queue (and its reads are made in small pieces).
    Ok(upgrade
        .max_message_size(process_limits::MAX_STDIN_WRITE)
        .max_frame_size(process_limits::MAX_STDIN_WRITE)
        .read_buffer_size(SOCKET_READ_BYTES)
        .write_buffer_size(0)
        .on_upgrade(move |socket| async move {
            let _slot = slot;
            serve_socket(state, id, process_id, after, socket).await
        })
        .into_response())
}

/// How much a process WebSocket reads from its connection at once.
const SOCKET_READ_BYTES: usize = 8 * 1024;

fn text(message: &ProcessServerMessage) -> Message {
    Message::Text(serde_json::to_string(message).unwrap_or_default().into())
}

/// One WebSocket session: output out, stdin and controls in, until the
/// process ended and all its output was sent, or the client left (which
/// changes nothing for the process).
async fn serve_socket(
    state: Arc<AppState>,
    id: String,
    process_id: String,
    mut after: u64,
    mut socket: WebSocket,
) {
    let engine = Arc::clone(&state.engine);
    // A console terminal's socket is one of its viewers while it is open.
    let _viewer = state.terminals.viewer(&id, &process_id);
    loop {
        let read = OutputRead {
            after,
            max_bytes: STREAM_PAGE_BYTES,
            wait: STREAM_WAIT,
        };
        tokio::select! {
            page = engine.read_process_output(&id, &process_id, read) => {
                let Ok(page) = page else { break };
                if page.dropped_bytes > 0
                    && socket
                        .send(text(&ProcessServerMessage::Dropped { bytes: page.dropped_bytes }))
                        .await
                        .is_err()
                {
                    return;
                }
                for chunk in page.chunks {
                    if socket.send(Message::Binary(chunk.data.into())).await.is_err() {
                        return;
                    }
                }
                after = page.next_offset;
                if page.process.status != ProcessStatus::Running
                    && page.next_offset >= page.process.output_bytes
                {
                    let exit = ProcessServerMessage::Exit {
                        process: process_object(&page.process),
                    };
                    let _ = socket.send(text(&exit)).await;
                    let _ = socket.send(Message::Close(None)).await;
                    return;
                }
            }
            message = socket.recv() => {
                let Some(Ok(message)) = message else { return };
                let answer = match message {
                    Message::Binary(bytes) => engine
                        .write_process_stdin(&id, &process_id, bytes.to_vec(), false)
                        .await
                        .map_err(|e| ApiError::from(e).message),
                    Message::Text(body) => control(&state, &id, &process_id, &body).await,
                    Message::Close(_) => return,
                    Message::Ping(_) | Message::Pong(_) => Ok(()),
                };
                if let Err(message) = answer {
                    if socket.send(text(&ProcessServerMessage::Error { message })).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}

/// A client's text frame: a resize, a signal or the end of its input.
async fn control(state: &AppState, id: &str, process_id: &str, body: &str) -> Result<(), String> {
    let message: ProcessClientMessage = serde_json::from_str(body)
        .map_err(|e| format!("a text frame must be a resize, signal or eof message: {e}"))?;
    let done = match message {
        ProcessClientMessage::Resize { cols, rows } => {
            state
                .engine
                .resize_process(id, process_id, cols, rows)
                .await
        }
        ProcessClientMessage::Signal { signal } => {
            let number = signal_of(&signal).map_err(|e| e.message)?;
            state.engine.signal_process(id, process_id, number).await
        }
        ProcessClientMessage::Eof => {
            state
                .engine
                .write_process_stdin(id, process_id, Vec::new(), true)
                .await
        }
    };
    done.map_err(|e| ApiError::from(e).message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(timeout_ms: Option<u64>) -> ProcessCreate {
        ProcessCreate {
            command: "true".into(),
            stdin: false,
            pty: None,
            timeout_ms,
            env: None,
            cwd: None,
        }
    }

    #[test]
    fn this_api_keeps_exec_s_timeout_rule_and_starts_processes_that_keep_awake() {
        // The engine takes 0 (no timeout) and up to a day; `/v1` does not.
        for refused in [0, limits::MAX_TIMEOUT_MS + 1] {
            let error = process_spec(create(Some(refused))).err();
            assert!(
                error.is_some_and(|e| e.param.as_deref() == Some("timeout_ms")),
                "{refused}"
            );
        }
        let spec = process_spec(create(None)).ok();
        assert!(spec.as_ref().is_some_and(|s| s.keeps_awake));
        assert_eq!(spec.map(|s| s.timeout_ms), Some(limits::DEFAULT_TIMEOUT_MS));
    }

    #[test]
    fn a_terminal_may_run_for_an_hour() {
        let terminal = |timeout_ms| ProcessCreate {
            pty: Some(shellgate_wire::ProcessPty {
                cols: 80,
                rows: 24,
                term: "xterm".into(),
            }),
            ..create(Some(timeout_ms))
        };
        assert!(process_spec(terminal(MAX_TERMINAL_TIMEOUT_MS)).is_ok());
        assert!(process_spec(terminal(MAX_TERMINAL_TIMEOUT_MS + 1)).is_err());
        assert!(process_spec(create(Some(MAX_TERMINAL_TIMEOUT_MS))).is_err());
    }
}
