//! `/v1/responses`: the Responses API over the model loop
//! (`shellgate_model`), with the hosted `shell` tool run in this server's
//! sandboxes.
//!
//! A request is checked whole before anything runs (tools, `tool_choice`,
//! `max_tool_calls`, the referenced container and previous response); then
//! the loop runs:
//! - in the foreground: the answer is the finished response (or its event
//!   stream); a client that leaves cancels the run and its commands;
//! - in the background (`background: true`): the answer is the response as
//!   queued; the run goes on whatever the client does, can be cancelled, and
//!   its result is read with `GET`.
//!
//! Stored responses (`store`, on by default) keep the whole conversation,
//! so a later request continues it with `previous_response_id`. A response
//! that was running when the server stopped (even `kill -9`) is marked
//! `failed` at the next start, never left `in_progress`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use shellgate_model::run::{self, EventSink, Outcome, Sandbox, Status};
use shellgate_model::tools::Tools;
use shellgate_model::upstream::Usage;
use shellgate_sandbox::backend::StreamKind;
use shellgate_store::ResponseRow;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;

use crate::error::{ApiError, ApiResult};
use crate::http::{ApiJson, ApiQuery, ListParams, Project};
use crate::{new_id, now, AppState};

/// Background responses still running: how to stop each, and their events.
#[derive(Default)]
pub struct Running(Mutex<HashMap<String, (tokio::task::AbortHandle, Arc<EventLog>)>>);

impl Running {
    fn insert(&self, id: &str, handle: tokio::task::AbortHandle, log: Arc<EventLog>) {
        self.lock().insert(id.to_owned(), (handle, log));
    }

    fn remove(&self, id: &str) -> Option<tokio::task::AbortHandle> {
        self.lock().remove(id).map(|(handle, _)| handle)
    }

    fn log(&self, id: &str) -> Option<Arc<EventLog>> {
        self.lock().get(id).map(|(_, log)| Arc::clone(log))
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, (tokio::task::AbortHandle, Arc<EventLog>)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The stream events of a run so far, for any number of readers: the
/// client that started it, and any that resumes it with `GET ?stream=true`.
#[derive(Default)]
pub struct EventLog {
    /// The events, and whether the run is over.
    events: Mutex<(Vec<Value>, bool)>,
    added: tokio::sync::Notify,
}

impl EventLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, (Vec<Value>, bool)> {
        self.events.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, event: Value) {
        self.lock().0.push(event);
        self.added.notify_waiters();
    }

    fn close(&self) {
        self.lock().1 = true;
        self.added.notify_waiters();
    }

    /// The event at `cursor`, waiting for it; `None` once the run is over.
    async fn next(&self, cursor: usize) -> Option<Value> {
        loop {
            let notified = self.added.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let events = self.lock();
                if let Some(event) = events.0.get(cursor) {
                    return Some(event.clone());
                }
                if events.1 {
                    return None;
                }
            }
            notified.await;
        }
    }
}

fn invalid(param: &str, message: impl Into<String>) -> ApiError {
    ApiError::invalid(param, message)
}

/// The usage object of the Responses API.
fn usage_object(usage: Usage) -> Value {
    json!({
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.input_tokens + usage.output_tokens,
    })
}

/// What a response object repeats of its request.
#[derive(Clone)]
struct Echo {
    model: String,
    body: Value,
    background: bool,
    max_tool_calls: u32,
}

/// Where a response is: its status and what it has made so far.
struct Progress<'a> {
    status: &'a str,
    output: &'a [Value],
    usage: Option<Usage>,
    error: Option<Value>,
    incomplete: Option<&'a str>,
}

/// The response object, in any state.
fn response_object(id: &str, created_at: i64, echo: &Echo, progress: Progress<'_>) -> Value {
    let Progress {
        status,
        output,
        usage,
        error,
        incomplete,
    } = progress;
    let field = |key: &str, default: Value| {
        echo.body
            .get(key)
            .filter(|v| !v.is_null())
            .cloned()
            .unwrap_or(default)
    };
    json!({
        "id": id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "background": echo.background,
        "model": echo.model,
        "output": output,
        "error": error,
        "incomplete_details": incomplete.map(|reason| json!({"reason": reason})),
        "instructions": field("instructions", Value::Null),
        "metadata": field("metadata", json!({})),
        "parallel_tool_calls": field("parallel_tool_calls", json!(true)),
        "temperature": field("temperature", Value::Null),
        "top_p": field("top_p", Value::Null),
        "tool_choice": field("tool_choice", json!("auto")),
        "tools": field("tools", json!([])),
        "max_output_tokens": field("max_output_tokens", Value::Null),
        "max_tool_calls": echo.max_tool_calls,
        "previous_response_id": field("previous_response_id", Value::Null),
        "store": field("store", json!(true)),
        "user": field("user", Value::Null),
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        "usage": usage.map(usage_object),
    })
}

/// The final response object of an outcome.
fn finished_object(id: &str, created_at: i64, echo: &Echo, outcome: &Outcome) -> Value {
    let (status, error, incomplete) = match &outcome.status {
        Status::Completed => ("completed", None, None),
        Status::Incomplete(reason) => ("incomplete", None, Some(*reason)),
        Status::Failed { code, message } => (
            "failed",
            Some(json!({"code": code, "message": message})),
            None,
        ),
    };
    response_object(
        id,
        created_at,
        echo,
        Progress {
            status,
            output: &untyped_items(&outcome.output),
            usage: Some(outcome.usage),
            error,
            incomplete,
        },
    )
}

// until the server is typed (typed-loop, step 3): the loop speaks typed
// items, this file still JSON.
fn untyped_item(item: &shellgate_wire::responses::Item) -> Value {
    serde_json::to_value(item).unwrap_or_default()
}

fn untyped_items(items: &[shellgate_wire::responses::Item]) -> Vec<Value> {
    items.iter().map(untyped_item).collect()
}

fn typed_items(items: Vec<Value>) -> Vec<shellgate_wire::responses::Item> {
    items
        .into_iter()
        .map(|item| match serde_json::from_value(item.clone()) {
            Ok(typed) => typed,
            Err(_) => match item {
                Value::Object(map) => shellgate_wire::responses::Item::Other(map),
                _ => shellgate_wire::responses::Item::Other(Default::default()),
            },
        })
        .collect()
}

/// Input items of a request: a string is one user message; items get ids.
fn normalize_input(input: Option<&Value>) -> ApiResult<Vec<Value>> {
    let items = match input {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(text)) => vec![json!({
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": text}],
        })],
        Some(Value::Array(items)) => items.clone(),
        Some(_) => {
            return Err(invalid(
                "input",
                "input must be a string or an array of items",
            ))
        }
    };
    items
        .into_iter()
        .enumerate()
        .map(|(index, mut item)| {
            let Some(object) = item.as_object_mut() else {
                return Err(invalid(
                    &format!("input[{index}]"),
                    "each input item must be an object",
                ));
            };
            if !object.contains_key("type") {
                if !object.contains_key("role") {
                    return Err(invalid(
                        &format!("input[{index}].type"),
                        "each input item needs a 'type' (or a 'role', for a message)",
                    ));
                }
                object.insert("type".into(), json!("message"));
            }
            if object.get("type").and_then(Value::as_str) == Some("message") {
                if let Some(Value::String(text)) = object.get("content").cloned() {
                    let kind = if object.get("role").and_then(Value::as_str) == Some("assistant") {
                        "output_text"
                    } else {
                        "input_text"
                    };
                    object.insert("content".into(), json!([{"type": kind, "text": text}]));
                }
            }
            if !object.contains_key("id") {
                object.insert("id".into(), json!(new_id("msg_")));
            }
            Ok(item)
        })
        .collect()
}

/// A file attached to an input message (`input_file`).
struct Attachment {
    filename: String,
    bytes: Vec<u8>,
}

/// Reads a `data:` URL (`data:<type>;base64,<data>`).
fn data_url(text: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    let (head, data) = text.strip_prefix("data:")?.split_once(',')?;
    if head.ends_with(";base64") {
        base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .ok()
    } else {
        Some(data.as_bytes().to_vec())
    }
}

fn is_input_file(part: &Value) -> bool {
    part.get("type").and_then(Value::as_str) == Some("input_file")
}

/// Refuses more `input_file` parts than `max_input_files`, before any other
/// work: each costs a store query and a read.
fn count_input_files(state: &AppState, input: &[Value]) -> ApiResult<()> {
    let count = input
        .iter()
        .filter_map(|item| item.get("content").and_then(Value::as_array))
        .flatten()
        .filter(|part| is_input_file(part))
        .count();
    let most = state.config.max_input_files;
    if count > most {
        return Err(invalid(
            "input",
            format!(
                "at most {most} input_file parts are allowed in one request (there are {count})"
            ),
        ));
    }
    Ok(())
}

/// The attachments of the input, read (a `file_id` from this project's
/// Files API, or inline `file_data`), each part replaced in `items` by a
/// note of where the file is (`at`) or, without a container, its text.
async fn attachments(
    state: &AppState,
    project: &str,
    items: &mut [Value],
    in_container: bool,
) -> ApiResult<Vec<Attachment>> {
    let most_bytes = state.config.max_input_file_bytes;
    let mut total: u64 = 0;
    let mut add = |param: &str, bytes: u64| -> ApiResult<()> {
        total = total.saturating_add(bytes);
        if total > most_bytes {
            return Err(invalid(
                param,
                format!("the input_file parts of one request may hold at most {most_bytes} bytes together"),
            ));
        }
        Ok(())
    };
    let mut found = Vec::new();
    for (index, item) in items.iter_mut().enumerate() {
        let Some(parts) = item.get_mut("content").and_then(Value::as_array_mut) else {
            continue;
        };
        for (part_index, part) in parts.iter_mut().enumerate() {
            if !is_input_file(part) {
                continue;
            }
            let param = format!("input[{index}].content[{part_index}]");
            let (filename, bytes) = if let Some(id) = part.get("file_id").and_then(Value::as_str) {
                let (owner, key) = (project.to_owned(), id.to_owned());
                let file = state
                    .db(move |s| s.file(&owner, &key))
                    .await?
                    .ok_or_else(|| {
                        let mut error = ApiError::not_found("file", id);
                        error.param = Some(format!("{param}.file_id"));
                        error
                    })?;
                // The size is known before the file is read.
                add(&param, file.bytes)?;
                // A file deleted (or expired) since its row was read is
                // gone, as if it had never been.
                let bytes = tokio::fs::read(state.files_dir.join(&file.id))
                    .await
                    .map_err(|e| match e.kind() {
                        std::io::ErrorKind::NotFound => ApiError::not_found("file", id),
                        _ => ApiError::internal(format!("read file {}: {e}", file.id)),
                    })?;
                (file.filename, bytes)
            } else if let Some(data) = part.get("file_data").and_then(Value::as_str) {
                let bytes = data_url(data).ok_or_else(|| {
                    invalid(
                        &format!("{param}.file_data"),
                        "file_data must be a data URL (data:<type>;base64,<data>)",
                    )
                })?;
                add(&param, bytes.len() as u64)?;
                let filename = part
                    .get("filename")
                    .and_then(Value::as_str)
                    .unwrap_or("upload")
                    .to_owned();
                (filename, bytes)
            } else {
                return Err(invalid(
                    &param,
                    "an input_file needs a file_id or file_data",
                ));
            };
            // The model reads the name too (in the note below, and as the
            // path); a stored file's name was never checked.
            let filename = state.guardrails.guard_text(
                project,
                "input_file name",
                &crate::containers::safe_file_name(&filename),
            )?;
            // A text file is read by the model (inline, or from /mnt/data):
            // the input rules check it, and a redaction is what it reads.
            let bytes = match std::str::from_utf8(&bytes) {
                Ok(text) => {
                    let checked = state.guardrails.guard_text(project, "input_file", text)?;
                    if checked == text {
                        bytes
                    } else {
                        checked.into_bytes()
                    }
                }
                Err(_) => bytes,
            };
            let note = if in_container {
                format!("[The user attached the file {filename}; it is at /mnt/data/{filename}]")
            } else {
                match std::str::from_utf8(&bytes) {
                    Ok(text) if text.len() <= 100_000 => {
                        format!("[The user attached the file {filename}:]\n{text}")
                    }
                    _ => {
                        format!("[The user attached the file {filename}; it cannot be shown here]")
                    }
                }
            };
            *part = json!({"type": "input_text", "text": note});
            found.push(Attachment { filename, bytes });
        }
    }
    Ok(found)
}

/// Everything checked before a run starts.
struct Prepared {
    id: String,
    created_at: i64,
    project: String,
    echo: Echo,
    request: run::Request,
    input: Vec<Value>,
    previous: Option<String>,
    store: bool,
    upstream: Arc<dyn shellgate_model::upstream::Upstream>,
    sandbox: Option<Arc<crate::hosted::HostedShell>>,
}

/// The request's `model` and the upstream that serves it (both APIs).
pub(crate) fn model_and_upstream(
    state: &AppState,
    body: &Value,
) -> ApiResult<(String, Arc<dyn shellgate_model::upstream::Upstream>)> {
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .ok_or_else(|| invalid("model", "a model is required"))?
        .to_owned();
    let upstream = state
        .upstreams
        .pick(&model)
        .map_err(|e| invalid("model", e.to_string()))?;
    Ok((model, upstream))
}

/// An optional number of the request (`temperature`, `top_p`, ...).
pub(crate) fn number(body: &Value, key: &str) -> ApiResult<Option<f64>> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_f64()
            .map(Some)
            .ok_or_else(|| invalid(key, format!("{key} must be a number"))),
    }
}

async fn prepare(state: &Arc<AppState>, project: &Project, body: Value) -> ApiResult<Prepared> {
    if !body.is_object() {
        return Err(ApiError::bad_request(
            "The request body must be a JSON object.",
        ));
    }
    let (model, upstream) = model_and_upstream(state, &body)?;
    let flag = |key: &str, default: bool| -> ApiResult<bool> {
        match body.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(invalid(key, format!("{key} must be true or false"))),
        }
    };
    let background = flag("background", false)?;
    let store = flag("store", true)?;
    if background && !store {
        return Err(invalid(
            "store",
            "a background response must be stored (store: true)",
        ));
    }
    let temperature = number(&body, "temperature")?;
    let top_p = number(&body, "top_p")?;
    let whole = |key: &str| -> ApiResult<Option<u32>> {
        match body.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => value
                .as_u64()
                .filter(|n| *n >= 1 && *n <= u64::from(u32::MAX))
                .map(|n| Some(n as u32))
                .ok_or_else(|| invalid(key, format!("{key} must be a positive whole number"))),
        }
    };
    let max_output_tokens = whole("max_output_tokens")?;
    let max_tool_calls = whole("max_tool_calls")?.unwrap_or(run::MAX_TOOL_CALLS);
    if max_tool_calls > run::MAX_TOOL_CALLS {
        return Err(invalid(
            "max_tool_calls",
            format!("max_tool_calls is at most {}", run::MAX_TOOL_CALLS),
        ));
    }
    let tools = match body.get("tools") {
        None | Some(Value::Null) => Tools::default(),
        Some(Value::Array(tools)) => {
            Tools::parse(tools).map_err(|e| invalid(&e.param, e.message))?
        }
        Some(_) => return Err(invalid("tools", "tools must be an array")),
    };
    let tool_choice = tools
        .choice(body.get("tool_choice"))
        .map_err(|e| invalid(&e.param, e.message))?;
    let instructions = match body.get("instructions") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text.clone()),
        Some(_) => return Err(invalid("instructions", "instructions must be a string")),
    };
    let input = normalize_input(body.get("input"))?;
    count_input_files(state, &input)?;
    let (input, instructions, tools) =
        crate::guardrails::guard_request(state, &project.0, input, instructions, tools).await?;
    let previous = match body.get("previous_response_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) => Some(id.clone()),
        Some(_) => return Err(invalid("previous_response_id", "must be a string")),
    };
    let mut items = Vec::new();
    if let Some(previous) = &previous {
        let (owner, key) = (project.0.clone(), previous.clone());
        let row = state
            .db(move |s| s.response(&owner, &key))
            .await?
            .ok_or_else(|| {
                let mut error = ApiError::not_found("response", previous);
                error.message = format!("Previous response with id '{previous}' not found.");
                error.param = Some("previous_response_id".into());
                error
            })?;
        if matches!(row.status.as_str(), "queued" | "in_progress") {
            return Err(invalid(
                "previous_response_id",
                format!("Previous response '{previous}' is still running."),
            ));
        }
        items = serde_json::from_str(&row.conversation)
            .map_err(|e| ApiError::internal(format!("stored conversation: {e}")))?;
    }
    items.extend(input.iter().cloned());
    let response_id = new_id("resp_");
    let reuse = crate::hosted::Reuse::pick(&tools, body.get("session_id"), &items);
    let hosted = crate::hosted::prepare(state, &project.0, &tools, reuse, &response_id).await?;
    let (sandbox, environment_description) = (hosted.sandbox, hosted.description);
    // Attached files go into the container's /mnt/data (which is then made
    // now, not at the first command); the model reads where they are.
    let first_new = items.len() - input.len();
    let files = attachments(
        state,
        &project.0,
        &mut items[first_new..],
        sandbox.is_some(),
    )
    .await?;
    if let (Some(sandbox), false) = (&sandbox, files.is_empty()) {
        let container = sandbox.container().await.map_err(|e| {
            let mut error = ApiError::internal(e.message);
            if e.code == "rate_limit_exceeded" {
                error = ApiError::quota("rate_limit_exceeded", error.message);
            }
            error
        })?;
        for file in files {
            let path = format!("/mnt/data/{}", file.filename);
            state
                .engine
                .write_file(&container, &path, &file.bytes)
                .await
                .map_err(|e| crate::engine_error(&container, e))?;
            let row = shellgate_store::ContainerFileRow {
                id: new_id("cfile_"),
                container_id: container.clone(),
                path,
                bytes: file.bytes.len() as u64,
                source: "user".to_owned(),
                created_at: now(),
            };
            state.db(move |s| s.upsert_container_file(&row)).await?;
        }
    }
    Ok(Prepared {
        id: response_id,
        created_at: now(),
        project: project.0.clone(),
        echo: Echo {
            model: model.clone(),
            body: crate::egress::without_secret_values(&body),
            background,
            max_tool_calls,
        },
        request: run::Request {
            model,
            instructions,
            items: typed_items(items),
            tools,
            tool_choice,
            max_tool_calls,
            temperature,
            top_p,
            max_output_tokens,
            parallel_tool_calls: body.get("parallel_tool_calls").and_then(Value::as_bool),
            environment_description,
            output_guardrail: state
                .guardrails
                .for_project(&project.0, crate::guardrails::Target::ToolOutput),
            max_answer_bytes: usize::try_from(state.config.upstream_max_answer_bytes)
                .unwrap_or(usize::MAX),
        },
        input,
        previous,
        store,
        upstream,
        sandbox,
    })
}

impl Prepared {
    /// The stored row for this response in `status`, its object `body`.
    fn row(&self, status: &str, body: &Value, output: &[Value]) -> ResponseRow {
        let mut conversation = untyped_items(&self.request.items);
        conversation.extend(output.iter().cloned());
        // Whatever is stored goes through the secrets' redaction (the
        // echo already has; the items too, in case one carries a policy).
        let stored = |mut value: Value| {
            crate::egress::redact_secret_values(&mut value);
            value.to_string()
        };
        ResponseRow {
            id: self.id.clone(),
            project: self.project.clone(),
            created_at: self.created_at,
            status: status.to_owned(),
            previous_response_id: self.previous.clone(),
            body: stored(body.clone()),
            input_items: stored(Value::Array(self.input.clone())),
            conversation: stored(Value::Array(conversation)),
        }
    }

    async fn save(&self, state: &AppState, status: &str, body: &Value, output: &[Value]) {
        if !self.store {
            return;
        }
        let row = self.row(status, body, output);
        if let Err(e) = state.db(move |s| s.save_response(&row)).await {
            tracing::error!(response = %self.id, "could not store the response: {}", e.message);
        }
    }

    /// Runs the loop, stores the result and returns the final object.
    async fn run(&self, state: &AppState, events: Option<&EventSink>) -> Value {
        let sandbox = self.sandbox.as_deref().map(|s| s as &dyn Sandbox);
        let outcome = run::run(self.upstream.as_ref(), sandbox, &self.request, events).await;
        let mut body = finished_object(&self.id, self.created_at, &self.echo, &outcome);
        // Sandbox time and its cost, beside the tokens (shellgate's extension,
        // as OpenRouter reports it).
        let seconds = self
            .sandbox
            .as_ref()
            .map(|s| s.billed_seconds())
            .unwrap_or(0.0);
        body["usage"]["sandbox_seconds"] = json!(seconds);
        body["usage"]["server_tool_cost"] = json!(seconds * state.config.sandbox_price_per_second);
        let (project, usage) = (self.project.clone(), outcome.usage);
        if let Err(e) = state
            .db(move |s| s.record_tokens(&project, usage.input_tokens, usage.output_tokens))
            .await
        {
            tracing::error!("could not record token usage: {}", e.message);
        }
        let status = body["status"].as_str().unwrap_or("failed").to_owned();
        self.save(state, &status, &body, &untyped_items(&outcome.output))
            .await;
        body
    }

    fn in_progress(&self, status: &str) -> Value {
        response_object(
            &self.id,
            self.created_at,
            &self.echo,
            Progress {
                status,
                output: &[],
                usage: None,
                error: None,
                incomplete: None,
            },
        )
    }
}

pub async fn create(
    State(state): State<Arc<AppState>>,
    project: Project,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<Response> {
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let prepared = Arc::new(prepare(&state, &project, body).await?);
    if prepared.echo.background {
        let queued = prepared.in_progress("queued");
        prepared.save(&state, "queued", &queued, &[]).await;
        let (events, receiver) = tokio::sync::mpsc::unbounded_channel();
        let (done_tx, done) = tokio::sync::oneshot::channel();
        let log = record(Arc::clone(&prepared), receiver, done);
        let task = {
            let (state, prepared) = (Arc::clone(&state), Arc::clone(&prepared));
            tokio::spawn(async move {
                let running = prepared.in_progress("in_progress");
                prepared.save(&state, "in_progress", &running, &[]).await;
                let body = prepared.run(&state, Some(&events)).await;
                drop(events);
                state.running.remove(&prepared.id);
                let _ = done_tx.send(body);
            })
        };
        state
            .running
            .insert(&prepared.id, task.abort_handle(), Arc::clone(&log));
        return Ok(if stream {
            // Streaming a background response: a client that leaves the
            // stream does not stop it.
            read(log, 0, None).into_response()
        } else {
            Json(queued).into_response()
        });
    }
    if !stream {
        // Foreground: if the client leaves, this future is dropped, and with
        // it the run and its commands.
        return Ok(Json(prepared.run(&state, None).await).into_response());
    }
    let (events, receiver) = tokio::sync::mpsc::unbounded_channel();
    let (done_tx, done) = tokio::sync::oneshot::channel();
    let log = record(Arc::clone(&prepared), receiver, done);
    let task = {
        let (state, prepared) = (Arc::clone(&state), Arc::clone(&prepared));
        tokio::spawn(async move {
            let body = prepared.run(&state, Some(&events)).await;
            drop(events);
            let _ = done_tx.send(body);
        })
    };
    Ok(read(log, 0, Some(task)).into_response())
}

/// Aborts a foreground run when its event stream is dropped (the client left).
pub(crate) struct AbortOnDrop(pub(crate) Option<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(task) = &self.0 {
            task.abort();
        }
    }
}

/// Writes a run's stream events into a log: `response.created`,
/// `response.in_progress`, what the loop does, then `response.completed` /
/// `.incomplete` / `.failed` (nothing more if the run was cancelled).
fn record(
    prepared: Arc<Prepared>,
    receiver: tokio::sync::mpsc::UnboundedReceiver<run::Event>,
    done: tokio::sync::oneshot::Receiver<Value>,
) -> Arc<EventLog> {
    let log = Arc::new(EventLog::default());
    let writer_log = Arc::clone(&log);
    tokio::spawn(async move {
        let mut stream = SseWriter {
            log: writer_log,
            sequence: 0,
        };
        let start = prepared.in_progress("in_progress");
        stream.send("response.created", json!({"response": start}));
        stream.send(
            "response.in_progress",
            json!({"response": prepared.in_progress("in_progress")}),
        );
        let mut events = UnboundedReceiverStream::new(receiver);
        while let Some(event) = events.next().await {
            stream.event(event);
        }
        // The loop is done (its event sender dropped): the final object.
        if let Ok(body) = done.await {
            stream.finish(body);
        }
        stream.log.close();
    });
    log
}

/// Streams a log's events from `cursor` as server-sent events.
fn read(
    log: Arc<EventLog>,
    cursor: usize,
    task: Option<tokio::task::JoinHandle<()>>,
) -> Sse<impl tokio_stream::Stream<Item = Result<Event, Infallible>>> {
    let guard = AbortOnDrop(task);
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
    tokio::spawn(async move {
        let mut cursor = cursor;
        while let Some(event) = log.next(cursor).await {
            cursor += 1;
            if tx.send(event).is_err() {
                return;
            }
        }
    });
    let body = UnboundedReceiverStream::new(rx).map(move |data| {
        let _keep = &guard;
        let kind = data["type"].as_str().unwrap_or("message").to_owned();
        Ok::<_, Infallible>(Event::default().event(kind).data(data.to_string()))
    });
    Sse::new(body).keep_alive(crate::sse_keep_alive())
}

/// Numbers stream events and writes them to a log.
struct SseWriter {
    log: Arc<EventLog>,
    sequence: u64,
}

impl SseWriter {
    fn send(&mut self, kind: &str, mut data: Value) {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        self.log.push(data);
    }

    /// The terminal event of a finished response object.
    fn finish(&mut self, body: Value) {
        let kind = match body["status"].as_str() {
            Some("completed") => "response.completed",
            Some("incomplete") => "response.incomplete",
            _ => "response.failed",
        };
        self.send(kind, json!({"response": body}));
    }

    /// The events of a response that is over, told again from its object:
    /// created, each output item added and done, the terminal event.
    fn replay(&mut self, body: &Value) {
        let mut start = body.clone();
        start["status"] = json!("in_progress");
        start["output"] = json!([]);
        self.send("response.created", json!({"response": start}));
        for (index, item) in body["output"].as_array().into_iter().flatten().enumerate() {
            let mut added = item.clone();
            if added["type"] == "message" {
                added["content"] = json!([]);
            }
            added["status"] = json!("in_progress");
            self.send(
                "response.output_item.added",
                json!({"output_index": index, "item": added}),
            );
            self.send(
                "response.output_item.done",
                json!({"output_index": index, "item": item}),
            );
        }
        self.finish(body.clone());
        self.log.close();
    }

    fn event(&mut self, event: run::Event) {
        match event {
            run::Event::ItemAdded { index, item } => {
                let item = untyped_item(&item);
                let message = item["type"] == "message";
                let item_id = item["id"].clone();
                self.send(
                    "response.output_item.added",
                    json!({"output_index": index, "item": item}),
                );
                if message {
                    self.send(
                        "response.content_part.added",
                        json!({"item_id": item_id, "output_index": index, "content_index": 0,
                               "part": {"type": "output_text", "text": "", "annotations": []}}),
                    );
                }
            }
            run::Event::TextDelta {
                index,
                item_id,
                delta,
            } => {
                self.send(
                    "response.output_text.delta",
                    json!({"item_id": item_id, "output_index": index, "content_index": 0,
                           "delta": delta, "logprobs": []}),
                );
            }
            run::Event::Arguments {
                index,
                item_id,
                arguments,
            } => {
                self.send(
                    "response.function_call_arguments.delta",
                    json!({"item_id": item_id, "output_index": index, "delta": arguments}),
                );
                self.send(
                    "response.function_call_arguments.done",
                    json!({"item_id": item_id, "output_index": index, "arguments": arguments}),
                );
            }
            run::Event::ShellCommand {
                index,
                command_index,
                command,
            } => {
                self.send(
                    "response.shell_call_command.added",
                    json!({"output_index": index, "command_index": command_index, "command": ""}),
                );
                self.send(
                    "response.shell_call_command.delta",
                    json!({"output_index": index, "command_index": command_index, "delta": command}),
                );
                self.send(
                    "response.shell_call_command.done",
                    json!({"output_index": index, "command_index": command_index, "command": command}),
                );
            }
            run::Event::ShellOutput {
                index,
                item_id,
                command_index,
                stream,
                text,
            } => {
                let key = match stream {
                    StreamKind::Stdout => "stdout",
                    StreamKind::Stderr => "stderr",
                };
                self.send(
                    "response.shell_call_output_content.delta",
                    json!({"item_id": item_id, "output_index": index,
                           "command_index": command_index, "delta": {key: text}}),
                );
            }
            run::Event::ShellCommandDone {
                index,
                item_id,
                command_index,
                result,
            } => {
                self.send(
                    "response.shell_call_output_content.done",
                    json!({"item_id": item_id, "output_index": index,
                           "command_index": command_index, "output": [result]}),
                );
            }
            run::Event::ItemDone { index, item } => {
                let item = untyped_item(&item);
                if item["type"] == "message" {
                    let text = item["content"][0]["text"].clone();
                    let item_id = item["id"].clone();
                    self.send(
                        "response.output_text.done",
                        json!({"item_id": item_id, "output_index": index, "content_index": 0,
                               "text": text, "logprobs": []}),
                    );
                    self.send(
                        "response.content_part.done",
                        json!({"item_id": item_id, "output_index": index, "content_index": 0,
                               "part": item["content"][0]}),
                    );
                }
                self.send(
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                );
            }
        }
    }
}

async fn owned(state: &AppState, project: &Project, id: &str) -> ApiResult<ResponseRow> {
    let (owner, key) = (project.0.clone(), id.to_owned());
    state
        .db(move |s| s.response(&owner, &key))
        .await?
        .ok_or_else(|| ApiError::not_found("response", id))
}

fn body_of(row: &ResponseRow) -> ApiResult<Value> {
    serde_json::from_str(&row.body).map_err(|e| ApiError::internal(format!("stored response: {e}")))
}

pub async fn retrieve(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    axum::extract::Query(query): axum::extract::Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    let row = owned(&state, &project, &id).await?;
    let body = body_of(&row)?;
    if query.get("stream").map(String::as_str) != Some("true") {
        return Ok(Json(body).into_response());
    }
    // Resuming a stream: the events after `starting_after` (a sequence
    // number), live while the run goes on.
    let cursor = match query.get("starting_after") {
        None => 0,
        Some(n) => n
            .parse::<usize>()
            .map(|n| n + 1)
            .map_err(|_| invalid("starting_after", "starting_after must be a sequence number"))?,
    };
    let log = match state.running.log(&id) {
        Some(log) => log,
        None => {
            let log = Arc::new(EventLog::default());
            SseWriter {
                log: Arc::clone(&log),
                sequence: 0,
            }
            .replay(&body);
            log
        }
    };
    Ok(read(log, cursor, None).into_response())
}

pub async fn delete(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    owned(&state, &project, &id).await?;
    if let Some(task) = state.running.remove(&id) {
        task.abort();
    }
    let (owner, key) = (project.0.clone(), id.clone());
    state.db(move |s| s.delete_response(&owner, &key)).await?;
    Ok(Json(
        json!({"id": id, "object": "response", "deleted": true}),
    ))
}

pub async fn cancel(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let row = owned(&state, &project, &id).await?;
    let mut body = body_of(&row)?;
    if !body["background"].as_bool().unwrap_or(false) {
        return Err(invalid(
            "response_id",
            "Only background responses can be cancelled.",
        ));
    }
    if let Some(task) = state.running.remove(&id) {
        // Its commands are killed with the run.
        task.abort();
    }
    if matches!(row.status.as_str(), "queued" | "in_progress") {
        body["status"] = json!("cancelled");
        let row = ResponseRow {
            status: "cancelled".into(),
            body: body.to_string(),
            ..row
        };
        state.db(move |s| s.save_response(&row)).await?;
    }
    Ok(Json(body))
}

pub async fn input_items(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    ApiQuery(params): ApiQuery<ListParams>,
) -> ApiResult<Json<Value>> {
    let row = owned(&state, &project, &id).await?;
    let page = params.page()?;
    let mut items: Vec<Value> = serde_json::from_str(&row.input_items)
        .map_err(|e| ApiError::internal(format!("stored input items: {e}")))?;
    if !page.ascending {
        items.reverse();
    }
    if let Some(after) = &page.after {
        let position = items
            .iter()
            .position(|i| i["id"].as_str() == Some(after.as_str()))
            .ok_or_else(|| {
                invalid(
                    "after",
                    format!("No item with id '{after}' in this listing."),
                )
            })?;
        items.drain(..=position);
    }
    let has_more = items.len() > page.limit as usize;
    items.truncate(page.limit as usize);
    Ok(Json(json!({
        "object": "list",
        "data": items,
        "first_id": items.first().map(|i| i["id"].clone()),
        "last_id": items.last().map(|i| i["id"].clone()),
        "has_more": has_more,
    })))
}

/// At start-up: responses a crash interrupted are failed, never left
/// `in_progress`.
pub async fn settle_interrupted(state: &AppState) -> ApiResult<()> {
    let rows = state
        .db(|s| s.responses_with_status(&["queued", "in_progress"]))
        .await?;
    for row in rows {
        let mut body = body_of(&row).unwrap_or_else(|_| json!({}));
        body["status"] = json!("failed");
        body["error"] = json!({
            "code": "server_error",
            "message": "The server stopped while this response was running; it did not finish.",
        });
        let row = ResponseRow {
            status: "failed".into(),
            body: body.to_string(),
            ..row
        };
        state.db(move |s| s.save_response(&row)).await?;
    }
    Ok(())
}
