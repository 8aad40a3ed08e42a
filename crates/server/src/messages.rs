//! `POST /v1/messages`: Anthropic's Messages API over the same model loop
//! as the Responses API, backed by any upstream, with OpenRouter's server
//! tools run in this server's sandboxes.
//!
//! A request (the shapes of the official `anthropic` SDK) becomes the
//! loop's conversation: text, `tool_use` and `tool_result` blocks become
//! messages, function calls and their outputs; the server tools' blocks a
//! client replays become the calls they were. Tools: user tools
//! (`input_schema`) pass through to the model and come back as `tool_use`;
//! Anthropic's own bash tool (`bash_*`) and `openrouter:bash` with `engine`
//! `auto` or `native` come back as a `bash` `tool_use` for the client to run;
//! `openrouter:shell` and `openrouter:bash` with `engine: openrouter` run in
//! the sandbox within the request. Their calls and results come back as
//! content blocks:
//!
//! | tool | call | result |
//! |---|---|---|
//! | `openrouter:shell` | `server_tool_use` (`name: "shell"`, `input: {commands}`) | `openrouter_shell_tool_result` (`tool_use_id`, `container_id`, `content: [{stdout, stderr, outcome}]`) |
//! | `openrouter:bash`, `engine: openrouter` | `server_tool_use` (`name: "bash_code_execution"`, `input: {command}`) | `bash_code_execution_tool_result` (`tool_use_id`, `container_id`, `content: {type: "bash_code_execution_result", stdout, stderr, return_code, content: []}`; a timeout is `return_code` 124) |
//!
//! `bash_code_execution_tool_result` is a block the SDK knows;
//! `openrouter_shell_tool_result` is not, and the SDK keeps it as a raw
//! block (all its fields readable), as it does any block it does not know.
//! The response's `container` names the container; `usage` adds
//! `sandbox_seconds` and `server_tool_cost`. Errors use Anthropic's
//! envelope (`{"type": "error", "error": {"type", "message"}}`).

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};
use shellgate_model::run::{self, Outcome, Sandbox, Status};
use shellgate_model::tools::{Tools, BASH, SHELL};
use shellgate_model::upstream::ToolChoice;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;

use crate::error::ApiError;
use crate::hosted::HostedShell;
use crate::http::{ApiJson, Project};
use crate::{new_id, AppState};

/// The top-level fields a Messages request may have.
const FIELDS: &[&str] = &[
    "model",
    "max_tokens",
    "messages",
    "system",
    "tools",
    "tool_choice",
    "stream",
    "metadata",
    "temperature",
    "top_p",
    "top_k",
    "stop_sequences",
    "service_tier",
    "thinking",
    // OpenRouter's stable session id (seeds/004).
    "session_id",
];

/// An error in Anthropic's envelope, with the status the SDK maps to its
/// exception classes.
fn anthropic_error(error: ApiError) -> Response {
    let kind = match error.status.as_u16() {
        400 | 415 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    let message = match &error.param {
        Some(param) if !error.message.contains(param.as_str()) => {
            format!("{param}: {}", error.message)
        }
        _ => error.message.clone(),
    };
    let mut response = (
        error.status,
        Json(json!({"type": "error", "error": {"type": kind, "message": message}})),
    )
        .into_response();
    if let Some(seconds) = error.retry_after {
        if let Ok(value) = axum::http::HeaderValue::from_str(&seconds.to_string()) {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, value);
        }
    }
    response
}

fn invalid(param: &str, message: impl Into<String>) -> ApiError {
    ApiError::invalid(param, message)
}

/// Everything checked before the loop runs.
struct Prepared {
    id: String,
    model: String,
    project: String,
    request: run::Request,
    upstream: Arc<dyn shellgate_model::upstream::Upstream>,
    sandbox: Option<Arc<HostedShell>>,
}

pub async fn create(
    State(state): State<Arc<AppState>>,
    project: Result<Project, ApiError>,
    body: Result<ApiJson<Value>, ApiError>,
) -> Response {
    let prepared = async {
        let project = project?;
        let ApiJson(body) = body?;
        let stream = match body.get("stream") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(stream)) => *stream,
            Some(_) => return Err(invalid("stream", "stream must be true or false")),
        };
        Ok((prepare(&state, &project, &body).await?, stream))
    }
    .await;
    let (prepared, stream) = match prepared {
        Ok(prepared) => prepared,
        Err(e) => return anthropic_error(e),
    };
    let prepared = Arc::new(prepared);
    if stream {
        return stream_message(state, prepared).into_response();
    }
    // If the client leaves, this future is dropped, and with it the run and
    // its commands (their time until then is billed).
    let outcome = run_loop(&prepared, None).await;
    match finish(&state, &prepared, &outcome).await {
        Ok(message) => Json(message).into_response(),
        Err(e) => anthropic_error(e),
    }
}

async fn prepare(
    state: &Arc<AppState>,
    project: &Project,
    body: &Value,
) -> Result<Prepared, ApiError> {
    let Some(object) = body.as_object() else {
        return Err(ApiError::bad_request(
            "The request body must be a JSON object.",
        ));
    };
    if let Some(unknown) = object.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(invalid(
            unknown,
            format!("{unknown}: Extra inputs are not permitted"),
        ));
    }
    let (model, upstream) = crate::responses::model_and_upstream(state, body)?;
    let max_tokens = body
        .get("max_tokens")
        .and_then(Value::as_u64)
        .filter(|n| *n >= 1 && *n <= u64::from(u32::MAX))
        .ok_or_else(|| {
            invalid(
                "max_tokens",
                "max_tokens: a positive whole number is required",
            )
        })? as u32;
    use crate::responses::number;
    let temperature = number(body, "temperature")?;
    let top_p = number(body, "top_p")?;
    // Parameters the upstream protocols here cannot pass on are refused,
    // not silently dropped.
    if number(body, "top_k")?.is_some() {
        return Err(invalid("top_k", "top_k is not supported by this server"));
    }
    match body.get("stop_sequences") {
        None | Some(Value::Null) => {}
        Some(Value::Array(list)) if list.is_empty() => {}
        Some(_) => {
            return Err(invalid(
                "stop_sequences",
                "stop_sequences is not supported by this server",
            ))
        }
    }
    match body.get("thinking") {
        None | Some(Value::Null) => {}
        Some(thinking) if thinking.get("type") == Some(&json!("disabled")) => {}
        Some(_) => {
            return Err(invalid(
                "thinking",
                "extended thinking is not supported by this server",
            ))
        }
    }
    if !matches!(
        body.get("metadata"),
        None | Some(Value::Null) | Some(Value::Object(_))
    ) {
        return Err(invalid("metadata", "metadata must be an object"));
    }
    let instructions = system_text(body.get("system"))?;
    let tools = match body.get("tools") {
        None | Some(Value::Null) => Tools::default(),
        Some(Value::Array(tools)) => {
            Tools::parse_messages(tools).map_err(|e| invalid(&e.param, e.message))?
        }
        Some(_) => return Err(invalid("tools", "tools must be an array")),
    };
    let (tool_choice, parallel) = tool_choice(&tools, body.get("tool_choice"))?;
    let items = conversation(body.get("messages"))?;
    // Until the Messages API is typed (typed-messages): its items typed for
    // the guard and the container's reuse, JSON again for the loop.
    let items = crate::responses::typed_items(items, "messages")?;
    let (items, instructions, tools) =
        crate::guardrails::guard_request(state, &project.0, items, instructions, tools).await?;
    let id = new_id("msg_");
    let session = body.get("session_id").and_then(Value::as_str);
    let reuse = crate::hosted::Reuse::pick(&tools, session, &items);
    let hosted = crate::hosted::prepare(state, &project.0, &tools, reuse, &id).await?;
    Ok(Prepared {
        id,
        model: model.clone(),
        project: project.0.clone(),
        request: run::Request {
            model,
            instructions,
            items,
            tools,
            tool_choice,
            max_tool_calls: run::MAX_TOOL_CALLS,
            temperature,
            top_p,
            max_output_tokens: Some(max_tokens),
            parallel_tool_calls: parallel,
            environment_description: hosted.description,
            output_guardrail: state
                .guardrails
                .for_project(&project.0, crate::guardrails::Target::ToolOutput),
            max_answer_bytes: usize::try_from(state.config.upstream_max_answer_bytes)
                .unwrap_or(usize::MAX),
        },
        upstream,
        sandbox: hosted.sandbox,
    })
}

/// The text of `system`: a string or text blocks.
fn system_text(system: Option<&Value>) -> Result<Option<String>, ApiError> {
    match system {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .enumerate()
            .map(|(index, block)| {
                block
                    .get("text")
                    .and_then(Value::as_str)
                    .filter(|_| block.get("type") == Some(&json!("text")))
                    .map(str::to_owned)
                    .ok_or_else(|| {
                        invalid(
                            &format!("system[{index}]"),
                            "system blocks must be text blocks",
                        )
                    })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|texts| Some(texts.join("\n"))),
        Some(_) => Err(invalid("system", "system must be a string or text blocks")),
    }
}

/// `tool_choice` (`auto`, `any`, `tool` with a `name`, `none`;
/// `disable_parallel_tool_use`) as the loop's choice.
fn tool_choice(
    tools: &Tools,
    choice: Option<&Value>,
) -> Result<(ToolChoice, Option<bool>), ApiError> {
    let Some(choice) = choice.filter(|c| !c.is_null()) else {
        return Ok((ToolChoice::Auto, None));
    };
    let parallel = match choice.get("disable_parallel_tool_use") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(disabled)) => Some(!disabled),
        Some(_) => {
            return Err(invalid(
                "tool_choice.disable_parallel_tool_use",
                "disable_parallel_tool_use must be true or false",
            ))
        }
    };
    let kind = match choice.get("type").and_then(Value::as_str) {
        Some("auto") => ToolChoice::Auto,
        Some("any") => ToolChoice::Required,
        Some("none") => ToolChoice::None,
        Some("tool") => {
            let name = choice
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let present = match name {
                SHELL => tools.shell.is_some(),
                BASH => tools.bash.is_some(),
                _ => tools.functions.iter().any(|f| f.name == name),
            };
            if !present {
                return Err(invalid(
                    "tool_choice.name",
                    format!("tool_choice names '{name}', which is not among the tools"),
                ));
            }
            ToolChoice::Named(name.to_owned())
        }
        _ => {
            return Err(invalid(
                "tool_choice.type",
                "tool_choice.type must be 'auto', 'any', 'tool' or 'none'",
            ))
        }
    };
    Ok((kind, parallel))
}

/// The text of a `tool_result`'s `content`: a string or blocks.
fn result_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .map(|block| match block.get("type").and_then(Value::as_str) {
                Some("text") => block["text"].as_str().unwrap_or_default().to_owned(),
                Some("image") => "[an image was attached; it cannot be shown]".to_owned(),
                _ => String::new(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The conversation of `messages`, as the loop's items (Responses API
/// items, the loop's own language).
fn conversation(messages: Option<&Value>) -> Result<Vec<Value>, ApiError> {
    let Some(messages) = messages.and_then(Value::as_array).filter(|m| !m.is_empty()) else {
        return Err(invalid(
            "messages",
            "messages: a non-empty array is required",
        ));
    };
    let mut items = Vec::new();
    // Server tool calls, by id, until their result block comes.
    let mut calls: Map<String, Value> = Map::new();
    for (index, message) in messages.iter().enumerate() {
        let param = format!("messages[{index}]");
        let role = match message.get("role").and_then(Value::as_str) {
            Some(role @ ("user" | "assistant")) => role,
            _ => {
                return Err(invalid(
                    &format!("{param}.role"),
                    "role must be 'user' or 'assistant'",
                ))
            }
        };
        let text_kind = if role == "assistant" {
            "output_text"
        } else {
            "input_text"
        };
        let blocks = match message.get("content") {
            Some(Value::String(text)) => vec![json!({"type": "text", "text": text})],
            Some(Value::Array(blocks)) => blocks.clone(),
            _ => {
                return Err(invalid(
                    &format!("{param}.content"),
                    "content must be a string or an array of content blocks",
                ))
            }
        };
        let mut texts: Vec<Value> = Vec::new();
        let flush = |texts: &mut Vec<Value>, items: &mut Vec<Value>| {
            if !texts.is_empty() {
                items.push(json!({
                    "type": "message",
                    "role": role,
                    "content": std::mem::take(texts),
                }));
            }
        };
        for (position, block) in blocks.iter().enumerate() {
            let param = format!("{param}.content[{position}]");
            let kind = block
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let id = |key: &str| -> Result<String, ApiError> {
                block
                    .get(key)
                    .and_then(Value::as_str)
                    .filter(|id| !id.is_empty())
                    .map(str::to_owned)
                    .ok_or_else(|| {
                        invalid(&format!("{param}.{key}"), format!("{key}: Field required"))
                    })
            };
            match kind {
                "text" => texts.push(json!({
                    "type": text_kind,
                    "text": block.get("text").and_then(Value::as_str).unwrap_or_default(),
                })),
                "image" | "document" => texts.push(json!({
                    "type": text_kind,
                    "text": format!("[{kind} attached; it cannot be shown]"),
                })),
                "thinking" | "redacted_thinking" => {}
                "tool_use" if role == "assistant" => {
                    flush(&mut texts, &mut items);
                    let name = block
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    items.push(json!({
                        "type": "function_call",
                        "call_id": id("id")?,
                        "name": name,
                        "arguments": block.get("input").cloned().unwrap_or(json!({})).to_string(),
                        "status": "completed",
                    }));
                }
                "server_tool_use" if role == "assistant" => {
                    flush(&mut texts, &mut items);
                    calls.insert(id("id")?, block.clone());
                }
                "openrouter_shell_tool_result" | "bash_code_execution_tool_result" => {
                    flush(&mut texts, &mut items);
                    let call_id = id("tool_use_id")?;
                    let call = calls.remove(&call_id).unwrap_or(Value::Null);
                    let container = block.get("container_id").cloned().unwrap_or(Value::Null);
                    items.push(if kind == "openrouter_shell_tool_result" {
                        json!({
                            "type": "openrouter:shell",
                            "call_id": call_id,
                            "container_id": container,
                            "action": {"commands": call.pointer("/input/commands").cloned().unwrap_or(json!([]))},
                            "output": block.get("content").cloned().unwrap_or(json!([])),
                            "status": "completed",
                        })
                    } else {
                        let content = block.get("content").cloned().unwrap_or(json!({}));
                        json!({
                            "type": "openrouter:bash",
                            "call_id": call_id,
                            "container_id": container,
                            "action": {
                                "command": call.pointer("/input/command").cloned().unwrap_or(json!("")),
                                "restart": call.pointer("/input/restart").cloned().unwrap_or(json!(false)),
                            },
                            "output": {
                                "stdout": content.get("stdout").cloned().unwrap_or(json!("")),
                                "stderr": content.get("stderr").cloned().unwrap_or(json!("")),
                                "outcome": {"type": "exit", "exit_code": content.get("return_code").cloned().unwrap_or(Value::Null)},
                            },
                            "status": "completed",
                        })
                    });
                }
                "tool_result" if role == "user" => {
                    flush(&mut texts, &mut items);
                    let mut output = result_text(block.get("content"));
                    if block.get("is_error") == Some(&json!(true)) {
                        output = format!("Error: {output}");
                    }
                    items.push(json!({
                        "type": "function_call_output",
                        "call_id": id("tool_use_id")?,
                        "output": output,
                    }));
                }
                other => {
                    return Err(invalid(
                        &format!("{param}.type"),
                        format!("a {role} message cannot hold a '{other}' block here"),
                    ))
                }
            }
        }
        flush(&mut texts, &mut items);
    }
    Ok(items)
}

/// The exit code a command's outcome stands for (a timeout: 124, as
/// `timeout(1)` reports it).
fn return_code(outcome: &Value) -> Value {
    match outcome.get("type").and_then(Value::as_str) {
        Some("timeout") => json!(124),
        _ => outcome.get("exit_code").cloned().unwrap_or(Value::Null),
    }
}

/// The content blocks an output item of the loop becomes.
fn blocks(item: &Value) -> Vec<Value> {
    let call_id = item["call_id"].clone();
    match item["type"].as_str().unwrap_or_default() {
        "message" => {
            // until the server is typed (typed-loop, step 3)
            let text = item
                .get("content")
                .cloned()
                .and_then(|content| serde_json::from_value(content).ok())
                .map(|content| shellgate_model::conversation::content_text(&content))
                .unwrap_or_default();
            if text.is_empty() {
                Vec::new()
            } else {
                vec![json!({"type": "text", "text": text})]
            }
        }
        "function_call" => {
            let input: Value = item["arguments"]
                .as_str()
                .and_then(|a| serde_json::from_str(a).ok())
                .filter(Value::is_object)
                .unwrap_or(json!({}));
            vec![json!({"type": "tool_use", "id": call_id, "name": item["name"], "input": input})]
        }
        "openrouter:shell" => vec![
            json!({
                "type": "server_tool_use",
                "id": call_id,
                "name": "shell",
                "input": {"commands": item["action"]["commands"]},
            }),
            json!({
                "type": "openrouter_shell_tool_result",
                "tool_use_id": call_id,
                "container_id": item["container_id"],
                "content": item["output"],
            }),
        ],
        "openrouter:bash" => {
            let input = if item["action"]["restart"] == json!(true) {
                json!({"restart": true})
            } else {
                json!({"command": item["action"]["command"]})
            };
            let output = &item["output"];
            vec![
                json!({
                    "type": "server_tool_use",
                    "id": call_id,
                    "name": "bash_code_execution",
                    "input": input,
                }),
                json!({
                    "type": "bash_code_execution_tool_result",
                    "tool_use_id": call_id,
                    "container_id": item["container_id"],
                    "content": {
                        "type": "bash_code_execution_result",
                        "stdout": output["stdout"],
                        "stderr": output["stderr"],
                        "return_code": return_code(&output["outcome"]),
                        "content": [],
                    },
                }),
            ]
        }
        _ => Vec::new(),
    }
}

/// Why the model stopped, in Anthropic's words.
fn stop_reason(outcome: &Outcome) -> &'static str {
    match &outcome.status {
        Status::Incomplete("max_output_tokens") => "max_tokens",
        Status::Incomplete("content_filter") => "refusal",
        // The server tools' calls reached their limit: the client may
        // send the conversation again to go on.
        Status::Incomplete(_) => "pause_turn",
        // A call for the client ends the loop: whatever else ran in the same
        // turn, the client has a tool_use to answer.
        _ if outcome
            .output
            .iter()
            .any(|item| matches!(item, shellgate_wire::responses::Item::FunctionCall(_))) =>
        {
            "tool_use"
        }
        _ => "end_turn",
    }
}

async fn run_loop(prepared: &Prepared, events: Option<&run::EventSink>) -> Outcome {
    let sandbox = prepared.sandbox.as_deref().map(|s| s as &dyn Sandbox);
    run::run(
        prepared.upstream.as_ref(),
        sandbox,
        &prepared.request,
        events,
    )
    .await
}

/// The usage object: tokens, and the sandbox's seconds and cost.
fn usage(state: &AppState, prepared: &Prepared, outcome: &Outcome) -> Value {
    let seconds = prepared
        .sandbox
        .as_ref()
        .map(|s| s.billed_seconds())
        .unwrap_or(0.0);
    json!({
        "input_tokens": outcome.usage.input_tokens,
        "output_tokens": outcome.usage.output_tokens,
        "sandbox_seconds": seconds,
        "server_tool_cost": seconds * state.config.sandbox_price_per_second,
    })
}

/// The response's `container`: its id and when it expires.
async fn container(state: &AppState, prepared: &Prepared) -> Value {
    let Some(sandbox) = &prepared.sandbox else {
        return Value::Null;
    };
    let Some(id) = sandbox.container_id().await else {
        return Value::Null;
    };
    let (owner, key) = (prepared.project.clone(), id.clone());
    let row = state
        .db(move |s| s.container(&owner, &key))
        .await
        .ok()
        .flatten();
    let expires_at = row
        .map(|r| r.last_active_at + i64::from(r.expires_minutes) * 60)
        .map(rfc3339_utc);
    json!({"id": id, "expires_at": expires_at})
}

/// `t` (Unix seconds) as an RFC 3339 time in UTC.
fn rfc3339_utc(t: i64) -> String {
    let days = t.div_euclid(86_400);
    let secs = t.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// Records the tokens and turns an outcome into the Message object (or the
/// error a failed run is).
async fn finish(
    state: &AppState,
    prepared: &Prepared,
    outcome: &Outcome,
) -> Result<Value, ApiError> {
    let (project, tokens) = (prepared.project.clone(), outcome.usage);
    if let Err(e) = state
        .db(move |s| s.record_tokens(&project, tokens.input_tokens, tokens.output_tokens))
        .await
    {
        tracing::error!("could not record token usage: {}", e.message);
    }
    if let Status::Failed { code, message } = &outcome.status {
        return Err(failure(code, message));
    }
    // until the server is typed (typed-loop, step 3)
    let content: Vec<Value> = outcome
        .output
        .iter()
        .map(|item| serde_json::to_value(item).unwrap_or_default())
        .flat_map(|item| blocks(&item))
        .collect();
    Ok(json!({
        "id": prepared.id,
        "type": "message",
        "role": "assistant",
        "model": prepared.model,
        "content": content,
        "stop_reason": stop_reason(outcome),
        "stop_sequence": Value::Null,
        "usage": usage(state, prepared, outcome),
        "container": container(state, prepared).await,
    }))
}

/// The error a failed run is: a rate limit (upstream or quota) is a 429,
/// anything else a 500.
fn failure(code: &str, message: &str) -> ApiError {
    if code == "rate_limit_exceeded" {
        ApiError::quota("rate_limit_exceeded", message.to_owned())
    } else {
        ApiError::internal(message.to_owned())
    }
}

/// One SSE event in Anthropic's form: `event:` is the data's `type`.
fn sse(data: Value) -> Event {
    let kind = data["type"].as_str().unwrap_or("message").to_owned();
    Event::default().event(kind).data(data.to_string())
}

/// The last events of a stream: `message_delta` and `message_stop`, or an
/// `error`.
fn closing_events(end: Result<Value, ApiError>) -> Vec<Event> {
    match end {
        Ok(message) => vec![
            sse(json!({
                "type": "message_delta",
                "delta": {
                    "stop_reason": message["stop_reason"],
                    "stop_sequence": Value::Null,
                    "container": message["container"],
                },
                "usage": message["usage"],
            })),
            sse(json!({"type": "message_stop"})),
        ],
        Err(error) => {
            let kind = if error.status == StatusCode::TOO_MANY_REQUESTS {
                "rate_limit_error"
            } else {
                "api_error"
            };
            vec![sse(json!({
                "type": "error",
                "error": {"type": kind, "message": error.message},
            }))]
        }
    }
}

/// Streams the run as Anthropic's events: `message_start`, `ping`, each
/// content block's `content_block_start` / `_delta` / `_stop`, then
/// `message_delta` (stop reason, usage, container) and `message_stop`; a
/// run that fails sends an `error` event instead. The client leaving
/// cancels the run.
fn stream_message(
    state: Arc<AppState>,
    prepared: Arc<Prepared>,
) -> Sse<impl tokio_stream::Stream<Item = Result<Event, Infallible>>> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
    let _ = tx.send(sse(json!({
        "type": "message_start",
        "message": {
            "id": prepared.id,
            "type": "message",
            "role": "assistant",
            "model": prepared.model,
            "content": [],
            "stop_reason": Value::Null,
            "stop_sequence": Value::Null,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        },
    })));
    let _ = tx.send(sse(json!({"type": "ping"})));
    let task = tokio::spawn(async move {
        let (events, mut loop_events) = tokio::sync::mpsc::unbounded_channel();
        let forward = {
            let tx = tx.clone();
            async move {
                let mut blocks = BlockIndex::default();
                while let Some(event) = loop_events.recv().await {
                    for event in blocks.translate(event) {
                        let _ = tx.send(event);
                    }
                }
            }
        };
        let ran = async {
            let outcome = run_loop(&prepared, Some(&events)).await;
            drop(events);
            outcome
        };
        let (outcome, ()) = tokio::join!(ran, forward);
        for event in closing_events(finish(&state, &prepared, &outcome).await) {
            let _ = tx.send(event);
        }
    });
    let guard = crate::responses::AbortOnDrop(Some(task));
    let body = UnboundedReceiverStream::new(rx).map(move |event| {
        let _keep = &guard;
        Ok::<_, Infallible>(event)
    });
    Sse::new(body).keep_alive(crate::sse_keep_alive())
}

/// Numbers content blocks as they open: an output item of the loop is one
/// block (text, `tool_use`) or two (a server tool's call and result).
#[derive(Default)]
struct BlockIndex {
    next: usize,
    /// The block each open item (by output index) streams into.
    open: std::collections::HashMap<usize, usize>,
}

impl BlockIndex {
    fn take(&mut self) -> usize {
        self.next += 1;
        self.next - 1
    }

    fn translate(&mut self, event: run::Event) -> Vec<Event> {
        use run::Event as E;
        match event {
            // until the server is typed (typed-loop, step 3)
            E::ItemAdded { index, item } => {
                let item = serde_json::to_value(&item).unwrap_or_default();
                match item["type"].as_str().unwrap_or_default() {
                    "message" => {
                        let block = self.take();
                        self.open.insert(index, block);
                        vec![sse(json!({
                            "type": "content_block_start",
                            "index": block,
                            "content_block": {"type": "text", "text": ""},
                        }))]
                    }
                    "function_call" => {
                        let block = self.take();
                        self.open.insert(index, block);
                        vec![sse(json!({
                            "type": "content_block_start",
                            "index": block,
                            "content_block": {
                                "type": "tool_use",
                                "id": item["call_id"],
                                "name": item["name"],
                                "input": {},
                            },
                        }))]
                    }
                    // A server tool's call opens when its commands start; its
                    // result follows when they are done.
                    "openrouter:shell" | "openrouter:bash" => blocks(&item)
                        .into_iter()
                        .take(1)
                        .flat_map(|call| self.whole(call))
                        .collect(),
                    _ => Vec::new(),
                }
            }
            E::TextDelta { index, delta, .. } => match self.open.get(&index) {
                Some(block) => vec![sse(json!({
                    "type": "content_block_delta",
                    "index": block,
                    "delta": {"type": "text_delta", "text": delta},
                }))],
                None => Vec::new(),
            },
            E::Arguments {
                index, arguments, ..
            } => match self.open.get(&index) {
                Some(block) => vec![sse(json!({
                    "type": "content_block_delta",
                    "index": block,
                    "delta": {"type": "input_json_delta", "partial_json": arguments},
                }))],
                None => Vec::new(),
            },
            E::ItemDone { index, item } => {
                // until the server is typed (typed-loop, step 3)
                let item = serde_json::to_value(&item).unwrap_or_default();
                if let Some(block) = self.open.remove(&index) {
                    return vec![sse(json!({"type": "content_block_stop", "index": block}))];
                }
                blocks(&item)
                    .into_iter()
                    .skip(1)
                    .flat_map(|result| self.whole(result))
                    .collect()
            }
            _ => Vec::new(),
        }
    }

    /// A block given whole at its start (a server tool's call or result).
    fn whole(&mut self, content: Value) -> [Event; 2] {
        let block = self.take();
        [
            sse(json!({
                "type": "content_block_start",
                "index": block,
                "content_block": content,
            })),
            sse(json!({"type": "content_block_stop", "index": block})),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conversation_with_every_block_becomes_items() {
        let items = conversation(Some(&json!([
            {"role": "user", "content": "list files"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Looking."},
                {"type": "server_tool_use", "id": "srv1", "name": "shell", "input": {"commands": ["ls"]}},
                {"type": "openrouter_shell_tool_result", "tool_use_id": "srv1", "container_id": "cntr_1",
                 "content": [{"stdout": "a\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]},
                {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "pwd"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "/home"}]}
            ]}
        ])))
        .unwrap();
        let kinds: Vec<&str> = items.iter().map(|i| i["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "message",
                "message",
                "openrouter:shell",
                "function_call",
                "function_call_output"
            ]
        );
        assert_eq!(items[2]["action"]["commands"], json!(["ls"]));
        assert_eq!(items[2]["container_id"], "cntr_1");
        assert_eq!(items[3]["arguments"], r#"{"command":"pwd"}"#);
        assert_eq!(items[4]["output"], "/home");
        assert_eq!(
            crate::hosted::replayed_container(
                &crate::responses::typed_items(items.clone(), "messages").unwrap()
            )
            .as_deref(),
            Some("cntr_1")
        );
        assert!(conversation(Some(&json!([]))).is_err());
        assert!(conversation(Some(&json!([{"role": "system", "content": "x"}]))).is_err());
        assert!(conversation(Some(
            &json!([{"role": "user", "content": [{"type": "tool_use", "id": "x"}]}])
        ))
        .is_err());
    }

    #[test]
    fn server_tool_items_become_call_and_result_blocks() {
        let shell = blocks(&json!({
            "type": "openrouter:shell", "call_id": "c1", "container_id": "cntr_1",
            "action": {"commands": ["true"]},
            "output": [{"stdout": "", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
        }));
        assert_eq!(shell[0]["type"], "server_tool_use");
        assert_eq!(shell[1]["type"], "openrouter_shell_tool_result");
        assert_eq!(shell[1]["tool_use_id"], "c1");
        let bash = blocks(&json!({
            "type": "openrouter:bash", "call_id": "c2", "container_id": "cntr_1",
            "action": {"command": "sleep 9", "restart": false},
            "output": {"stdout": "x", "stderr": "", "outcome": {"type": "timeout"}},
        }));
        assert_eq!(bash[0]["name"], "bash_code_execution");
        assert_eq!(bash[1]["content"]["return_code"], 124);
        // A client call beside a server tool's in the last turn: the client
        // still has a tool_use to answer.
        let outcome = Outcome {
            output: serde_json::from_value(json!([
                {"type": "function_call", "call_id": "c3", "name": "lookup", "arguments": "{}"},
                {"type": "openrouter:shell", "call_id": "c4", "action": {"commands": []}},
            ]))
            .unwrap(),
            usage: Default::default(),
            status: Status::Completed,
            tool_calls: 1,
        };
        assert_eq!(stop_reason(&outcome), "tool_use");
        assert_eq!(rfc3339_utc(1_796_083_200), "2026-12-01T00:00:00Z");
        assert_eq!(rfc3339_utc(951_782_400), "2000-02-29T00:00:00Z");
    }
}
