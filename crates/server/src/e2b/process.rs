//! envd's `process.Process` service: processes started, streamed, written
//! to, signalled and resized, over the container's processes
//! (`SandboxBackend::start_process` & co, started through
//! [`crate::sandboxes::processes::start`] so that they are admitted, billed and
//! audited as every client process is). This is a dialect, not a second
//! process manager: all it keeps is what E2B names that shellgate does not —
//! a process's pid and tag, and the config it was started with — in a
//! [`Registry`] per container, bounded by the engine's live processes.
//!
//! Semantics taken from E2B's envd, as its SDKs rely on them:
//! - a client that hangs up does not end its process (background
//!   commands); `Connect` reattaches from then on;
//! - `connect-timeout-ms` bounds the *process*: envd runs it under a
//!   context with that deadline (the SDK's `timeout`, 60 s by default, `0`
//!   none), so it is the process's timeout here (capped at a day);
//! - `stdin` absent means on (envd before 0.3.0 always had it);
//! - the user is E2B's `user`, the sandbox user: `root` is refused, since
//!   shellgate's sandboxes have no privileges to give.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use shellgate_sandbox_api::process::{
    process_limits, OutputRead, ProcessError, ProcessInfo as EngineProcess, ProcessSpec,
    ProcessStatus, ProcessStream, PtySpec,
};
use shellgate_sandbox_api::SandboxError;
use shellgate_wire::envd::process::{
    process_event, process_input, stream_input_request, CloseStdinRequest, CloseStdinResponse,
    ConnectRequest, ConnectResponse, ListRequest, ListResponse, ProcessConfig, ProcessEvent,
    ProcessInput, SendInputRequest, SendInputResponse, SendSignalRequest, SendSignalResponse,
    Signal, StartRequest, StartResponse, StreamInputRequest, StreamInputResponse, UpdateRequest,
    UpdateResponse,
};

pub(crate) mod registry;

use registry::Tracked;

use super::access::SandboxCaller;
use super::connect::{
    client_stream_reply, deadline, server_stream, ClientStream, ConnectCode, ConnectError,
    StreamRequest, Unary, UnaryReply,
};
use super::user::{check_rpc_user, E2B_HOME};
use crate::engine::engine_error;
use crate::output_streams::StreamSlot;
use crate::state::AppState;

/// The variable a terminal's type is read from (the call's `envs` map,
/// not a JSON value).
const TERM_VARIABLE: &str = "TERM";
/// The terminal type of a PTY whose envs name none.
const DEFAULT_TERM: &str = "xterm-256color";
/// Longest tag.
const MAX_TAG_BYTES: usize = 256;
/// The most output one data event carries (one page of the process's
/// buffer: what a stream whose client does not read holds).
const DATA_EVENT_BYTES: usize = crate::sandboxes::processes::STREAM_PAGE_BYTES;
/// Keepalives on a quiet stream: the client's `keepalive-ping-interval`
/// (seconds; E2B's SDKs ask 50), at most this (the engine's longest wait,
/// which also bounds how late a reader sees that its client left).
const MAX_KEEPALIVE: Duration = Duration::from_millis(process_limits::MAX_WAIT_MS);
/// How long a `StreamInput` may go without an envelope (not even a
/// keepalive) before it is ended: the SDK's own stream-input timeout.
pub const STREAM_INPUT_IDLE: Duration = Duration::from_secs(60);

pub(super) fn routes(router: Router<Arc<AppState>>) -> Router<Arc<AppState>> {
    router
        .route("/process.Process/Start", post(start))
        .route("/process.Process/Connect", post(connect))
        .route("/process.Process/List", post(list))
        .route("/process.Process/SendInput", post(send_input))
        .route("/process.Process/StreamInput", post(stream_input))
        .route("/process.Process/CloseStdin", post(close_stdin))
        .route("/process.Process/SendSignal", post(send_signal))
        .route("/process.Process/Update", post(update))
}

/// An engine error as a Connect error: a process that ended is gone for
/// envd (`not_found`), as a container's other errors map by status.
fn engine_connect_error(container: &str, error: SandboxError) -> ConnectError {
    match error {
        SandboxError::Process(ProcessError::Exited(_) | ProcessError::NotFound(_)) => {
            ConnectError::not_found("process not found (it has ended)")
        }
        other => engine_error(container, other).into(),
    }
}

/// A word quoted for bash: `'…'`, with each `'` as `'\''`.
fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// The command line that runs `cmd` with `args` exactly as given (no word
/// of them is interpreted by the shell the engine starts).
fn command_line(config: &ProcessConfig) -> String {
    let mut line = String::from("exec ");
    line.push_str(&shell_quote(&config.cmd));
    for arg in &config.args {
        line.push(' ');
        line.push_str(&shell_quote(arg));
    }
    line
}

/// A working directory as envd takes it: absolute, or relative to the home.
fn working_directory(cwd: Option<&str>) -> String {
    match cwd.map(str::trim).filter(|c| !c.is_empty()) {
        None => E2B_HOME.to_owned(),
        Some(absolute) if absolute.starts_with('/') => absolute.to_owned(),
        Some(relative) => format!("{E2B_HOME}/{}", relative.trim_start_matches("./")),
    }
}

/// The keepalive interval a call asks (`keepalive-ping-interval`, seconds).
fn keepalive_interval(headers: &HeaderMap) -> Duration {
    headers
        .get("keepalive-ping-interval")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map_or(MAX_KEEPALIVE, |s| Duration::from_secs(s).min(MAX_KEEPALIVE))
}

/// A Start as the engine's spec, checked.
fn process_spec(
    request: &StartRequest,
    config: &ProcessConfig,
    env_vars: &[(String, String)],
    headers: &HeaderMap,
) -> Result<ProcessSpec, ConnectError> {
    if config.cmd.is_empty() {
        return Err(ConnectError::invalid("process.cmd is required"));
    }
    // The sandbox's envs, then the call's (which win).
    let mut env: Vec<(String, String)> = env_vars
        .iter()
        .filter(|(name, _)| !config.envs.contains_key(name))
        .cloned()
        .collect();
    let mut own: Vec<(String, String)> = config
        .envs
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    own.sort();
    env.extend(own);
    let pty = match request.pty.as_ref() {
        None => None,
        Some(pty) => {
            let size = pty.size.unwrap_or_default();
            let side = |n: u32, name: &str| {
                u16::try_from(n)
                    .map_err(|_| ConnectError::invalid(format!("pty.size.{name} is too large")))
            };
            let term = config
                .envs
                .get(TERM_VARIABLE)
                .cloned()
                .unwrap_or_else(|| DEFAULT_TERM.to_owned());
            Some(PtySpec {
                cols: side(size.cols, "cols")?,
                rows: side(size.rows, "rows")?,
                term,
            })
        }
    };
    let timeout_ms = deadline(headers).map_or(0, |d| {
        u64::try_from(d.as_millis())
            .unwrap_or(u64::MAX)
            .min(process_limits::MAX_TIMEOUT_MS)
    });
    let spec = ProcessSpec {
        command: command_line(config),
        stdin: request.stdin.unwrap_or(true),
        pty,
        timeout_ms,
        // A client's command: its container stays awake while it runs.
        keeps_awake: true,
        env,
        cwd: Some(working_directory(config.cwd.as_deref())),
    };
    spec.validate().map_err(|e| match e {
        SandboxError::InvalidRequest { param, message } => {
            ConnectError::invalid(format!("{param}: {message}"))
        }
        other => ConnectError::from(other),
    })?;
    Ok(spec)
}

/// How an ended process is told: `exit status N`, or killed.
fn end_event(info: &EngineProcess) -> process_event::EndEvent {
    match (info.status, info.exit_code()) {
        (ProcessStatus::Exited, Some(code)) => process_event::EndEvent {
            exit_code: code,
            exited: true,
            status: format!("exit status {code}"),
            error: None,
        },
        (ProcessStatus::Timeout, _) => process_event::EndEvent {
            exit_code: -1,
            exited: false,
            status: "signal: killed".to_owned(),
            error: Some("the process reached its timeout (connect-timeout-ms)".to_owned()),
        },
        _ => process_event::EndEvent {
            exit_code: -1,
            exited: false,
            status: "signal: killed".to_owned(),
            error: None,
        },
    }
}

fn event(event: process_event::Event) -> ProcessEvent {
    ProcessEvent { event: Some(event) }
}

fn data_event(stream: ProcessStream, data: Vec<u8>) -> ProcessEvent {
    use process_event::data_event::Output;
    let output = match stream {
        ProcessStream::Stdout => Output::Stdout(data),
        ProcessStream::Stderr => Output::Stderr(data),
        ProcessStream::Pty => Output::Pty(data),
    };
    event(process_event::Event::Data(process_event::DataEvent {
        output: Some(output),
    }))
}

/// Follows a process's output from `after`: data as it comes (each read
/// waits on the process's buffer), a keepalive when a wait saw nothing, and
/// the end once it ended and all was told. A page is read only when the
/// client took the events of the one before, so a client that does not read
/// holds one page (and its connection's write buffer), never a queue; and
/// it holds the process back at its buffer's end rather than have it read
/// for nobody (see the engine's pump). A client that leaves drops the
/// stream (its process goes on).
struct Follower {
    state: Arc<AppState>,
    container: String,
    process_id: String,
    after: u64,
    keepalive: Duration,
    /// The events read last, not yet taken (the first: the start event).
    pending: VecDeque<Result<ProcessEvent, ConnectError>>,
    /// The process ended and all was told, or the stream failed.
    done: bool,
    /// Counted among the process's and the project's streams until dropped.
    _slot: StreamSlot,
}

impl Follower {
    async fn next(&mut self) -> Option<Result<ProcessEvent, ConnectError>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(event);
            }
            if self.done {
                return None;
            }
            let read = OutputRead {
                after: self.after,
                max_bytes: DATA_EVENT_BYTES,
                wait: self.keepalive,
            };
            let page = match self
                .state
                .engine
                .read_process_output(&self.container, &self.process_id, read)
                .await
            {
                Ok(page) => page,
                Err(error) => {
                    self.done = true;
                    if super::access::sandbox_ended(&self.state, &self.container).await {
                        return Some(Err(stream_broken(&self.container)));
                    }
                    return Some(Err(engine_connect_error(&self.container, error)));
                }
            };
            self.done = page.process.status != ProcessStatus::Running
                && page.next_offset >= page.process.output_bytes;
            let keepalive = page.chunks.is_empty() && page.next_offset == self.after;
            self.pending.extend(
                page.chunks
                    .into_iter()
                    .map(|chunk| Ok(data_event(chunk.stream, chunk.data))),
            );
            if self.done {
                self.pending.push_back(self.ending(&page.process).await);
            } else if keepalive {
                self.pending
                    .push_back(Ok(event(process_event::Event::Keepalive(
                        process_event::KeepAlive {},
                    ))));
            }
            self.after = page.next_offset;
        }
    }
}

impl Follower {
    /// How the stream of a process that ended ends: its End event; for a
    /// process that reached its deadline (`connect-timeout-ms`), the
    /// `deadline_exceeded` error envd's context gives; for one that ended
    /// with its sandbox (killed, timed out or paused), the stream is cut
    /// (its connection breaks), which the SDKs tell apart by probing the
    /// sandbox (and raise as the sandbox's end).
    async fn ending(&self, process: &EngineProcess) -> Result<ProcessEvent, ConnectError> {
        match process.status {
            ProcessStatus::Exited => Ok(event(process_event::Event::End(end_event(process)))),
            ProcessStatus::Timeout => Err(ConnectError::new(
                ConnectCode::DeadlineExceeded,
                "the process reached its deadline (connect-timeout-ms)",
            )),
            _ if super::access::sandbox_ended(&self.state, &self.container).await => {
                Err(stream_broken(&self.container))
            }
            _ => Ok(event(process_event::Event::End(end_event(process)))),
        }
    }
}

/// The error of a stream cut short by its sandbox's end: its connection
/// is cut, as envd's breaks when its VM goes, so the SDKs probe the sandbox
/// (its `/health` answers 502 once it is gone) and raise its end.
fn stream_broken(container: &str) -> ConnectError {
    ConnectError::cut(
        ConnectCode::Unavailable,
        format!("the connection to sandbox {container} ended before the stream completed"),
    )
}

/// A stream of a process's events, opened by `start{pid}`, then what
/// [`Follower`] tells, each wrapped as the call's response message.
fn process_stream<T, W>(follower: Follower, pid: u32, wrap: W) -> Response
where
    T: serde::Serialize + Send + 'static,
    W: Fn(ProcessEvent) -> T + Send + 'static,
{
    let mut follower = follower;
    follower
        .pending
        .push_front(Ok(event(process_event::Event::Start(
            process_event::StartEvent { pid },
        ))));
    let events = futures_util::stream::unfold(follower, |mut follower| async move {
        let event = follower.next().await?;
        Some((event, follower))
    });
    server_stream(tokio_stream::StreamExt::map(events, move |item| {
        item.map(&wrap)
    }))
}

/// A streaming call's error: HTTP 200 and the error in the end envelope.
fn stream_error(error: ConnectError) -> Response {
    server_stream(tokio_stream::once(Err::<(), _>(error)))
}

/// `Start`: starts the process and streams its events.
async fn start(
    State(state): State<Arc<AppState>>,
    caller: SandboxCaller,
    headers: HeaderMap,
    StreamRequest(request): StreamRequest<StartRequest>,
) -> Response {
    // The stream's slot first: a start refused for it starts nothing.
    let process_id = shellgate_wire::new_id("proc_");
    let slot = match state
        .output_streams
        .open(&caller.project, &caller.container_id, &process_id)
    {
        Ok(slot) => slot,
        Err(error) => return stream_error(error.into()),
    };
    match start_process(&state, &caller, &headers, request, process_id.clone()).await {
        Ok(pid) => process_stream(
            Follower {
                state,
                container: caller.container_id,
                process_id,
                after: 0,
                keepalive: keepalive_interval(&headers),
                pending: VecDeque::new(),
                done: false,
                _slot: slot,
            },
            pid,
            |event| StartResponse { event: Some(event) },
        ),
        Err(error) => stream_error(error),
    }
}

/// Starts a Start's process as `process_id` and tracks it until it ends:
/// its pid.
async fn start_process(
    state: &Arc<AppState>,
    caller: &SandboxCaller,
    headers: &HeaderMap,
    request: StartRequest,
    process_id: String,
) -> Result<u32, ConnectError> {
    check_rpc_user(headers)?;
    let config = request
        .process
        .clone()
        .ok_or_else(|| ConnectError::invalid("process is required"))?;
    let spec = process_spec(&request, &config, &caller.env_vars, headers)?;
    let container = &caller.container_id;
    let tag = request.tag.clone().filter(|t| !t.is_empty());
    if let Some(tag) = &tag {
        if tag.len() > MAX_TAG_BYTES {
            return Err(ConnectError::invalid(format!(
                "tag: at most {MAX_TAG_BYTES} bytes"
            )));
        }
        if state.e2b_processes.tag_taken(container, tag) {
            return Err(ConnectError::new(
                ConnectCode::AlreadyExists,
                format!("a running process already has the tag {tag:?}"),
            ));
        }
    }
    let info = crate::sandboxes::processes::start(
        state,
        &caller.project,
        container,
        process_id.clone(),
        spec,
        crate::sandboxes::processes::Kind::Exec,
    )
    .await
    .map_err(ConnectError::from)?;
    let pid = info
        .pid
        .and_then(|p| u32::try_from(p).ok())
        .ok_or_else(|| ConnectError::internal("the process started without a pid"))?;
    state.e2b_processes.insert(
        container,
        pid,
        Tracked {
            process_id: process_id.clone(),
            tag,
            config,
        },
    );
    // Forgotten once it ended (awaited here, whoever reads it or not).
    let (waiter, key, id) = (Arc::clone(state), container.clone(), process_id.clone());
    tokio::spawn(async move {
        let _ = waiter.engine.wait_process(&key, &id).await;
        waiter.e2b_processes.remove(&key, pid, &id);
    });
    Ok(pid)
}

/// `Connect`: reattaches to a running process, streaming from now on.
async fn connect(
    State(state): State<Arc<AppState>>,
    caller: SandboxCaller,
    headers: HeaderMap,
    StreamRequest(request): StreamRequest<ConnectRequest>,
) -> Response {
    let container = caller.container_id.clone();
    let found = state
        .e2b_processes
        .find(&container, request.process.as_ref());
    let (pid, tracked) = match found {
        Ok(found) => found,
        Err(error) => return stream_error(error),
    };
    let now = match state.engine.process(&container, &tracked.process_id).await {
        Ok(info) => info.output_bytes,
        Err(error) => return stream_error(engine_connect_error(&container, error)),
    };
    let slot = match state
        .output_streams
        .open(&caller.project, &container, &tracked.process_id)
    {
        Ok(slot) => slot,
        Err(error) => return stream_error(error.into()),
    };
    process_stream(
        Follower {
            state,
            container,
            process_id: tracked.process_id,
            after: now,
            keepalive: keepalive_interval(&headers),
            pending: VecDeque::new(),
            done: false,
            _slot: slot,
        },
        pid,
        |event| ConnectResponse { event: Some(event) },
    )
}

/// `List`: the running processes started through envd.
async fn list(
    State(state): State<Arc<AppState>>,
    caller: SandboxCaller,
    Unary(_request): Unary<ListRequest>,
) -> UnaryReply<ListResponse> {
    UnaryReply(ListResponse {
        processes: state.e2b_processes.list(&caller.container_id),
    })
}

/// Writes input to a process's stdin or terminal, in the engine's pieces.
async fn write_input(
    state: &AppState,
    container: &str,
    process_id: &str,
    input: Option<ProcessInput>,
) -> Result<(), ConnectError> {
    let bytes = match input.and_then(|i| i.input) {
        Some(process_input::Input::Stdin(bytes) | process_input::Input::Pty(bytes)) => bytes,
        None => {
            return Err(ConnectError::invalid(
                "input: stdin or pty bytes are required",
            ))
        }
    };
    for piece in bytes.chunks(process_limits::MAX_STDIN_WRITE) {
        state
            .engine
            .write_process_stdin(container, process_id, piece.to_vec(), false)
            .await
            .map_err(|e| engine_connect_error(container, e))?;
    }
    Ok(())
}

/// `SendInput`: bytes to a process's stdin or terminal.
async fn send_input(
    State(state): State<Arc<AppState>>,
    caller: SandboxCaller,
    Unary(request): Unary<SendInputRequest>,
) -> Result<UnaryReply<SendInputResponse>, ConnectError> {
    let container = &caller.container_id;
    let (_, tracked) = state
        .e2b_processes
        .find(container, request.process.as_ref())?;
    write_input(&state, container, &tracked.process_id, request.input).await?;
    Ok(UnaryReply(SendInputResponse {}))
}

/// `StreamInput`: a client stream of input — `start{process}` first, then
/// data and keepalives — answered once it ends. Nothing of it accumulates
/// (each envelope, at most [`super::connect::MAX_CLIENT_ENVELOPE_BYTES`],
/// is written through before the next is read), and one that goes quiet is
/// ended: after [`STREAM_INPUT_IDLE`] without an envelope, or at its
/// deadline (`connect-timeout-ms`), whichever comes first.
async fn stream_input(
    State(state): State<Arc<AppState>>,
    caller: SandboxCaller,
    headers: HeaderMap,
    requests: ClientStream<StreamInputRequest>,
) -> Response {
    let limit = deadline(&headers).map(|d| tokio::time::Instant::now() + d);
    let result = read_input_stream(
        &state,
        &caller.container_id,
        requests,
        STREAM_INPUT_IDLE,
        limit,
    )
    .await
    .map(|()| StreamInputResponse {});
    client_stream_reply(result)
}

/// The next message of a client stream, or why it ended: quiet for `idle`
/// (`deadline_exceeded`), or past the call's deadline.
async fn next_within<T: serde::de::DeserializeOwned>(
    requests: &mut ClientStream<T>,
    idle: Duration,
    limit: Option<tokio::time::Instant>,
) -> Result<Option<T>, ConnectError> {
    let until = tokio::time::Instant::now() + idle;
    let until = limit.map_or(until, |l| l.min(until));
    match tokio::time::timeout_at(until, requests.next()).await {
        Err(_) => Err(ConnectError::new(
            ConnectCode::DeadlineExceeded,
            format!(
                "the input stream was ended: no message for {} s, or its deadline passed",
                idle.as_secs()
            ),
        )),
        Ok(None) => Ok(None),
        Ok(Some(message)) => message.map(Some),
    }
}

async fn read_input_stream(
    state: &AppState,
    container: &str,
    mut requests: ClientStream<StreamInputRequest>,
    idle: Duration,
    limit: Option<tokio::time::Instant>,
) -> Result<(), ConnectError> {
    use stream_input_request::Event;
    let process_id = loop {
        match next_within(&mut requests, idle, limit).await? {
            None => return Ok(()),
            Some(StreamInputRequest {
                event: Some(Event::Start(start)),
            }) => {
                break state
                    .e2b_processes
                    .find(container, start.process.as_ref())?
                    .1
                    .process_id;
            }
            Some(StreamInputRequest {
                event: Some(Event::Keepalive(_)),
            }) => {}
            Some(_) => {
                return Err(ConnectError::invalid(
                    "the input stream must begin with start{process}",
                ))
            }
        }
    };
    while let Some(message) = next_within(&mut requests, idle, limit).await? {
        match message.event {
            Some(Event::Data(data)) => {
                write_input(state, container, &process_id, data.input).await?
            }
            Some(Event::Keepalive(_)) | None => {}
            Some(Event::Start(_)) => {
                return Err(ConnectError::invalid(
                    "the input stream has already started",
                ))
            }
        }
    }
    Ok(())
}

/// `CloseStdin`: EOF on a process's stdin.
async fn close_stdin(
    State(state): State<Arc<AppState>>,
    caller: SandboxCaller,
    Unary(request): Unary<CloseStdinRequest>,
) -> Result<UnaryReply<CloseStdinResponse>, ConnectError> {
    let container = &caller.container_id;
    let (_, tracked) = state
        .e2b_processes
        .find(container, request.process.as_ref())?;
    state
        .engine
        .write_process_stdin(container, &tracked.process_id, Vec::new(), true)
        .await
        .map_err(|e| engine_connect_error(container, e))?;
    Ok(UnaryReply(CloseStdinResponse {}))
}

/// `SendSignal`: SIGTERM, or SIGKILL (the process and every descendant).
async fn send_signal(
    State(state): State<Arc<AppState>>,
    caller: SandboxCaller,
    Unary(request): Unary<SendSignalRequest>,
) -> Result<UnaryReply<SendSignalResponse>, ConnectError> {
    let container = &caller.container_id;
    let signal = Signal::try_from(request.signal).unwrap_or(Signal::Unspecified);
    let (_, tracked) = state
        .e2b_processes
        .find(container, request.process.as_ref())?;
    let sent = match signal {
        Signal::Sigkill => state
            .engine
            .kill_process(container, &tracked.process_id)
            .await
            .map(drop),
        Signal::Sigterm => {
            state
                .engine
                .signal_process(container, &tracked.process_id, Signal::Sigterm as i32)
                .await
        }
        Signal::Unspecified => {
            return Err(ConnectError::invalid(
                "signal must be SIGNAL_SIGTERM or SIGNAL_SIGKILL",
            ))
        }
    };
    sent.map_err(|e| engine_connect_error(container, e))?;
    Ok(UnaryReply(SendSignalResponse {}))
}

/// `Update`: a new terminal size.
async fn update(
    State(state): State<Arc<AppState>>,
    caller: SandboxCaller,
    Unary(request): Unary<UpdateRequest>,
) -> Result<UnaryReply<UpdateResponse>, ConnectError> {
    let container = &caller.container_id;
    let size = request
        .pty
        .and_then(|pty| pty.size)
        .ok_or_else(|| ConnectError::invalid("pty.size is required"))?;
    let side = |n: u32, name: &str| {
        u16::try_from(n).map_err(|_| ConnectError::invalid(format!("pty.size.{name} is too large")))
    };
    let (cols, rows) = (side(size.cols, "cols")?, side(size.rows, "rows")?);
    let (_, tracked) = state
        .e2b_processes
        .find(container, request.process.as_ref())?;
    state
        .engine
        .resize_process(container, &tracked.process_id, cols, rows)
        .await
        .map_err(|e| engine_connect_error(container, e))?;
    Ok(UnaryReply(UpdateResponse {}))
}

#[cfg(test)]
mod tests {
    use super::registry::Registry;
    use super::*;
    use axum::body::Body;
    use axum::extract::FromRequest;
    use axum::http::HeaderValue;
    use shellgate_wire::envd::process::{process_selector, ProcessSelector};

    fn config(cmd: &str, args: &[&str]) -> ProcessConfig {
        ProcessConfig {
            cmd: cmd.into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn cmd_and_args_run_exactly_as_given() {
        let line = command_line(&config(
            "/bin/bash",
            &["-l", "-c", "echo 'a' $HOME; rm -rf x"],
        ));
        assert_eq!(
            line,
            r#"exec '/bin/bash' '-l' '-c' 'echo '\''a'\'' $HOME; rm -rf x'"#
        );
        assert_eq!(command_line(&config("ls", &[""])), "exec 'ls' ''");
    }

    #[test]
    fn working_directories_default_to_the_home_and_relative_ones_are_in_it() {
        assert_eq!(working_directory(None), "/home/user");
        assert_eq!(working_directory(Some("")), "/home/user");
        assert_eq!(working_directory(Some("/tmp")), "/tmp");
        assert_eq!(working_directory(Some("./src")), "/home/user/src");
    }

    #[test]
    fn a_start_becomes_a_checked_spec() {
        let mut headers = HeaderMap::new();
        headers.insert("connect-timeout-ms", HeaderValue::from_static("60000"));
        let mut own = config("/bin/bash", &["-i"]);
        own.envs.insert("A".into(), "mine".into());
        let request = StartRequest {
            process: Some(own.clone()),
            pty: Some(shellgate_wire::envd::process::Pty {
                size: Some(shellgate_wire::envd::process::pty::Size {
                    cols: 100,
                    rows: 30,
                }),
            }),
            tag: None,
            stdin: None,
        };
        let sandbox = [
            ("A".to_owned(), "sandbox".to_owned()),
            ("B".to_owned(), "2".to_owned()),
        ];
        let spec = process_spec(&request, &own, &sandbox, &headers).unwrap();
        // The call's envs win over the sandbox's; stdin is on when not said.
        assert_eq!(
            spec.env,
            [("B".into(), "2".into()), ("A".into(), "mine".into())]
        );
        assert!(spec.stdin);
        assert_eq!(spec.timeout_ms, 60_000);
        assert_eq!(spec.cwd.as_deref(), Some("/home/user"));
        let pty = spec.pty.unwrap();
        assert_eq!(
            (pty.cols, pty.rows, pty.term.as_str()),
            (100, 30, "xterm-256color")
        );
        // No deadline: no timeout; a huge one is capped at the engine's day.
        assert_eq!(
            process_spec(&request, &own, &[], &HeaderMap::new())
                .unwrap()
                .timeout_ms,
            0
        );
        headers.insert(
            "connect-timeout-ms",
            HeaderValue::from_static("999999999999"),
        );
        assert_eq!(
            process_spec(&request, &own, &[], &headers)
                .unwrap()
                .timeout_ms,
            process_limits::MAX_TIMEOUT_MS
        );
        // Refused, naming what: no cmd, a terminal side past u16.
        assert!(process_spec(&request, &config("", &[]), &[], &headers).is_err());
        let mut wide = request.clone();
        wide.pty = Some(shellgate_wire::envd::process::Pty {
            size: Some(shellgate_wire::envd::process::pty::Size {
                cols: 70_000,
                rows: 1,
            }),
        });
        assert!(process_spec(&wide, &own, &[], &headers)
            .unwrap_err()
            .message
            .contains("cols"));
    }

    #[test]
    fn keepalives_follow_the_client_s_interval_capped() {
        let mut headers = HeaderMap::new();
        assert_eq!(keepalive_interval(&headers), MAX_KEEPALIVE);
        headers.insert("keepalive-ping-interval", HeaderValue::from_static("5"));
        assert_eq!(keepalive_interval(&headers), Duration::from_secs(5));
        headers.insert("keepalive-ping-interval", HeaderValue::from_static("50"));
        assert_eq!(keepalive_interval(&headers), MAX_KEEPALIVE);
    }

    fn engine_process(
        status: ProcessStatus,
        outcome: Option<shellgate_wire::Outcome>,
    ) -> EngineProcess {
        EngineProcess {
            id: "proc_1".into(),
            container_id: "cntr_1".into(),
            command: "true".into(),
            pid: Some(2),
            status,
            pty: None,
            stdin: false,
            created_at: 0,
            ended_at: Some(1),
            outcome,
            output_bytes: 0,
            duration: Duration::ZERO,
        }
    }

    #[test]
    fn ends_are_told_as_envd_tells_them() {
        let exited = end_event(&engine_process(
            ProcessStatus::Exited,
            Some(shellgate_wire::Outcome::Exit { exit_code: 3 }),
        ));
        assert_eq!(
            (exited.exit_code, exited.exited, exited.status.as_str()),
            (3, true, "exit status 3")
        );
        let killed = end_event(&engine_process(
            ProcessStatus::Killed,
            Some(shellgate_wire::Outcome::Exit { exit_code: 137 }),
        ));
        assert_eq!(
            (killed.exit_code, killed.exited, killed.status.as_str()),
            (-1, false, "signal: killed")
        );
        let timed_out = end_event(&engine_process(
            ProcessStatus::Timeout,
            Some(shellgate_wire::Outcome::Timeout),
        ));
        assert_eq!(timed_out.status, "signal: killed");
        assert!(timed_out.error.is_some());
    }

    #[test]
    fn the_registry_finds_by_pid_and_tag_and_forgets_only_what_ended() {
        let registry = Registry::default();
        let tracked = |id: &str, tag: Option<&str>| Tracked {
            process_id: id.into(),
            tag: tag.map(Into::into),
            config: config("/bin/sh", &[]),
        };
        registry.insert("c", 7, tracked("proc_a", Some("web")));
        let by_pid = ProcessSelector {
            selector: Some(process_selector::Selector::Pid(7)),
        };
        let by_tag = ProcessSelector {
            selector: Some(process_selector::Selector::Tag("web".into())),
        };
        assert_eq!(
            registry.find("c", Some(&by_pid)).unwrap().1.process_id,
            "proc_a"
        );
        assert_eq!(registry.find("c", Some(&by_tag)).unwrap().0, 7);
        assert!(registry.tag_taken("c", "web"));
        // Another container sees none of it.
        assert_eq!(
            registry.find("d", Some(&by_pid)).unwrap_err().code,
            ConnectCode::NotFound
        );
        assert_eq!(
            registry.find("c", None).unwrap_err().code,
            ConnectCode::InvalidArgument
        );
        // pid 7 reused by a new process: the old one's end leaves it.
        registry.insert("c", 7, tracked("proc_b", None));
        registry.remove("c", 7, "proc_a");
        assert_eq!(registry.list("c").len(), 1);
        registry.remove("c", 7, "proc_b");
        assert!(registry.list("c").is_empty());
        assert!(registry.lock().is_empty());
    }

    /// A client stream over a body that sends `sent` and then never ends.
    async fn never_ending(
        sent: Vec<u8>,
    ) -> (
        ClientStream<StreamInputRequest>,
        tokio::sync::mpsc::Sender<()>,
    ) {
        let (keep, mut open) = tokio::sync::mpsc::channel::<()>(1);
        let body = async_stream_body(sent, async move {
            let _ = open.recv().await;
        });
        let request = axum::http::Request::builder()
            .header("content-type", super::super::connect::STREAM_JSON)
            .body(body)
            .unwrap();
        let stream = ClientStream::from_request(request, &()).await.ok().unwrap();
        (stream, keep)
    }

    /// A body of `first`, then pending until `hold` completes.
    fn async_stream_body(
        first: Vec<u8>,
        hold: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Body {
        let head = futures_util::stream::once(async move {
            Ok::<_, std::io::Error>(axum::body::Bytes::from(first))
        });
        let tail = futures_util::stream::once(async move {
            hold.await;
            Ok::<_, std::io::Error>(axum::body::Bytes::new())
        });
        Body::from_stream(futures_util::StreamExt::chain(head, tail))
    }

    #[tokio::test]
    async fn a_quiet_input_stream_is_ended_at_its_idle_limit() {
        let keepalive = br#"{"keepalive":{}}"#;
        let mut sent = vec![0u8];
        sent.extend_from_slice(&(keepalive.len() as u32).to_be_bytes());
        sent.extend_from_slice(keepalive);
        let (mut stream, _keep_open) = never_ending(sent).await;
        let idle = Duration::from_millis(50);
        let first = next_within(&mut stream, idle, None).await.unwrap();
        assert!(matches!(
            first,
            Some(StreamInputRequest {
                event: Some(stream_input_request::Event::Keepalive(_))
            })
        ));
        // Then nothing comes, and the body never ends: the stream is ended.
        let ended = next_within(&mut stream, idle, None).await.unwrap_err();
        assert_eq!(ended.code, ConnectCode::DeadlineExceeded);
        // A deadline sooner than the idle limit ends it too.
        let (mut stream, _keep_open) = never_ending(Vec::new()).await;
        let soon = tokio::time::Instant::now() + Duration::from_millis(20);
        let ended = next_within(&mut stream, STREAM_INPUT_IDLE, Some(soon))
            .await
            .unwrap_err();
        assert_eq!(ended.code, ConnectCode::DeadlineExceeded);
    }
}
