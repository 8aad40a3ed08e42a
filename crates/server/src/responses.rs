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

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::ws::{Message as WsMessage, WebSocket};
use axum::extract::{Path, State};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;
use shellgate_model::run::{self, EventSink, Outcome, Sandbox, Status};
use shellgate_model::tools::Tools;
use shellgate_model::upstream::{Carry, OutputFormat, ReasoningRequest, Usage};
use shellgate_sandbox_api::backend::StreamKind;
use shellgate_store::{ResponseRow, ResponseStatus};
use shellgate_wire::new_id;
use shellgate_wire::responses::{self as wire, Event};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;

use crate::error::{ApiError, ApiResult};
use crate::http::{ApiJson, ListParams, Project};
use crate::running::EventLog;
use crate::state::AppState;
use crate::time::now;
use crate::turns::{run_within, upstream_for, AbortOnDrop};
use shellgate_wire::ErrorCode;

fn invalid(param: &str, message: impl Into<String>) -> ApiError {
    ApiError::invalid(param, message)
}

/// What a response object repeats of its request (secret values removed).
#[derive(Clone)]
struct Echo {
    model: String,
    background: bool,
    max_tool_calls: u32,
    instructions: Option<String>,
    metadata: serde_json::Map<String, Value>,
    parallel_tool_calls: bool,
    temperature: Option<f64>,
    top_p: Option<f64>,
    presence_penalty: Option<f64>,
    frequency_penalty: Option<f64>,
    top_logprobs: Option<u64>,
    reasoning: wire::ResponseReasoning,
    service_tier: Option<String>,
    safety_identifier: Option<String>,
    prompt_cache_key: Option<String>,
    tool_choice: wire::ToolChoice,
    tools: Vec<wire::Tool>,
    max_output_tokens: Option<u64>,
    previous_response_id: Option<String>,
    store: bool,
    user: Option<String>,
    text: wire::ResponseText,
    truncation: wire::Truncation,
}

/// Where a response is: its status and what it has made so far.
struct Progress<'a> {
    status: wire::ResponseStatus,
    output: &'a [wire::Item],
    usage: Option<Usage>,
    error: Option<wire::ResponseError>,
    incomplete: Option<&'a str>,
}

/// A stored item, typed: what shellgate stores always reads; anything else
/// (an item an older version stored) is kept whole.
fn typed_item(item: &Value) -> wire::Item {
    wire::from_value(item.clone()).unwrap_or_else(|_| match item {
        Value::Object(map) => wire::Item::Other(map.clone()),
        _ => wire::Item::Other(serde_json::Map::new()),
    })
}

/// The response object, in any state.
fn response_object(
    id: &str,
    created_at: i64,
    echo: &Echo,
    progress: Progress<'_>,
) -> wire::Response {
    let Progress {
        status,
        output,
        usage,
        error,
        incomplete,
    } = progress;
    wire::Response {
        id: id.to_owned(),
        object: "response".to_owned(),
        created_at,
        completed_at: None,
        status,
        background: echo.background,
        model: echo.model.clone(),
        output: output.to_vec(),
        error,
        incomplete_details: incomplete.map(|reason| wire::IncompleteDetails {
            reason: reason.to_owned(),
        }),
        instructions: echo.instructions.clone(),
        metadata: echo.metadata.clone(),
        parallel_tool_calls: echo.parallel_tool_calls,
        temperature: echo.temperature.unwrap_or(1.0),
        top_p: echo.top_p.unwrap_or(1.0),
        presence_penalty: echo.presence_penalty.unwrap_or(0.0),
        frequency_penalty: echo.frequency_penalty.unwrap_or(0.0),
        top_logprobs: echo.top_logprobs.unwrap_or(0),
        reasoning: Some(echo.reasoning.clone()),
        service_tier: echo
            .service_tier
            .clone()
            .unwrap_or_else(|| wire::DEFAULT_SERVICE_TIER.to_owned()),
        safety_identifier: echo.safety_identifier.clone(),
        prompt_cache_key: echo.prompt_cache_key.clone(),
        tool_choice: echo.tool_choice.clone(),
        tools: echo.tools.clone(),
        max_output_tokens: echo.max_output_tokens,
        max_tool_calls: u64::from(echo.max_tool_calls),
        previous_response_id: echo.previous_response_id.clone(),
        store: echo.store,
        user: echo.user.clone(),
        text: echo.text.clone(),
        truncation: echo.truncation,
        usage: usage.map(usage_object),
    }
}

/// The `usage` of a response: its tokens, with the cached and reasoning
/// ones the upstream counted.
fn usage_object(usage: Usage) -> wire::ResponseUsage {
    let mut object = wire::ResponseUsage::tokens(usage.input_tokens, usage.output_tokens);
    object.input_tokens_details.cached_tokens = usage.cached_input_tokens;
    object.output_tokens_details.reasoning_tokens = usage.reasoning_tokens;
    object
}

/// The final response object of an outcome.
fn finished_object(id: &str, created_at: i64, echo: &Echo, outcome: &Outcome) -> wire::Response {
    use wire::ResponseStatus as S;
    let (status, error, incomplete) = match &outcome.status {
        Status::Completed => (S::Completed, None, None),
        Status::Incomplete(reason) => (S::Incomplete, None, Some(*reason)),
        Status::Failed { code, message } => (
            S::Failed,
            Some(wire::ResponseError {
                code: (*code).to_owned(),
                message: message.clone(),
            }),
            None,
        ),
    };
    let mut body = response_object(
        id,
        created_at,
        echo,
        Progress {
            status,
            output: &outcome.output,
            usage: Some(outcome.usage),
            error,
            incomplete,
        },
    );
    if status == S::Completed {
        body.completed_at = Some(now());
    }
    body
}

/// The tools as the response object echoes them: secret values replaced
/// (and, in keys the types do not name, anything under a
/// `domain_secrets`, as [`crate::egress::redact_secret_values`] does).
fn echo_tools(tools: &[wire::Tool]) -> Vec<wire::Tool> {
    fn extra(map: &mut serde_json::Map<String, Value>) {
        map.values_mut()
            .for_each(crate::egress::redact_secret_values);
    }
    fn environment(environment: &mut wire::ShellEnvironment) {
        match environment {
            wire::ShellEnvironment::ContainerAuto(auto) => {
                if let Some(shellgate_wire::NetworkPolicy::Allowlist { domain_secrets, .. }) =
                    &mut auto.network_policy
                {
                    for secret in domain_secrets {
                        secret.value = crate::egress::REDACTED.to_owned();
                    }
                }
                auto.skills
                    .iter_mut()
                    .flatten()
                    .for_each(crate::egress::redact_secret_values);
                extra(&mut auto.extra);
            }
            wire::ShellEnvironment::ContainerReference(reference) => extra(&mut reference.extra),
            wire::ShellEnvironment::Local(local) => {
                local
                    .skills
                    .iter_mut()
                    .flatten()
                    .for_each(crate::egress::redact_secret_values);
                extra(&mut local.extra)
            }
            wire::ShellEnvironment::Other(map) => extra(map),
        }
    }
    let mut tools = tools.to_vec();
    for tool in &mut tools {
        match tool {
            wire::Tool::Shell(shell) => {
                shell.environment.iter_mut().for_each(environment);
                extra(&mut shell.extra);
            }
            wire::Tool::OpenRouterShell(server) | wire::Tool::OpenRouterBash(server) => {
                if let Some(parameters) = &mut server.parameters {
                    parameters.environment.iter_mut().for_each(environment);
                    extra(&mut parameters.extra);
                }
                extra(&mut server.extra);
            }
            wire::Tool::LocalShell(local) => extra(&mut local.extra),
            wire::Tool::Function(function) => {
                // Unset, a function's schema is strict (the API's default,
                // which it reports).
                function.strict.get_or_insert(true);
                function
                    .parameters
                    .iter_mut()
                    .for_each(crate::egress::redact_secret_values);
                extra(&mut function.extra);
            }
            wire::Tool::Custom(custom) => extra(&mut custom.extra),
            wire::Tool::Namespace(group) => {
                group.tools = echo_tools(&group.tools);
                extra(&mut group.extra);
            }
            wire::Tool::CodeInterpreter(interpreter) => {
                if let Some(wire::CodeInterpreterContainer::Auto(auto)) = &mut interpreter.container
                {
                    if let Some(shellgate_wire::NetworkPolicy::Allowlist {
                        domain_secrets, ..
                    }) = &mut auto.network_policy
                    {
                        for secret in domain_secrets {
                            secret.value = crate::egress::REDACTED.to_owned();
                        }
                    }
                    extra(&mut auto.extra);
                }
                extra(&mut interpreter.extra);
            }
            wire::Tool::Other(map) => extra(map),
        }
    }
    tools
}

/// Input items of a request: a string is one user message; a message's
/// string content is one text part; items get ids.
fn normalize_input(input: Option<wire::Input>) -> Vec<wire::Item> {
    let mut items = input.map(wire::Input::into_items).unwrap_or_default();
    for item in &mut items {
        if let wire::Item::Message(message) = item {
            if let wire::MessageContent::Text(_) = &message.content {
                let content = std::mem::replace(
                    &mut message.content,
                    wire::MessageContent::Parts(Vec::new()),
                );
                message.content = wire::MessageContent::Parts(content.into_parts(message.role));
            }
        }
        item.ensure_id(|| new_id("msg_"));
    }
    items
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

/// The content parts of a message item (none for other items).
fn message_parts(item: &wire::Item) -> &[wire::ContentPart] {
    match item {
        wire::Item::Message(wire::Message {
            content: wire::MessageContent::Parts(parts),
            ..
        }) => parts,
        _ => &[],
    }
}

/// Refuses more `input_file` parts than `max_input_files`, before any other
/// work: each costs a store query and a read.
fn count_input_files(state: &AppState, input: &[wire::Item]) -> ApiResult<()> {
    let count = input
        .iter()
        .flat_map(message_parts)
        .filter(|part| matches!(part, wire::ContentPart::InputFile(_)))
        .count();
    let most = state.config.model.max_input_files;
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
    items: &mut [wire::Item],
    in_container: bool,
) -> ApiResult<Vec<Attachment>> {
    let most_bytes = state.config.model.max_input_file_bytes;
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
        let wire::Item::Message(wire::Message {
            content: wire::MessageContent::Parts(parts),
            ..
        }) = item
        else {
            continue;
        };
        for (part_index, part) in parts.iter_mut().enumerate() {
            let wire::ContentPart::InputFile(file_part) = part else {
                continue;
            };
            let param = format!("input[{index}].content[{part_index}]");
            let (filename, bytes) = if let Some(id) = file_part.file_id.as_deref() {
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
                // Read whole, bounded by the size its row gave the budget.
                let key = crate::blobs::file_key(&file.id)?;
                let bytes =
                    match shellgate_objects::read_to_vec(state.objects.as_ref(), &key, file.bytes)
                        .await
                    {
                        Ok(bytes) => bytes,
                        Err(shellgate_objects::ObjectError::NotFound(_)) => {
                            return Err(ApiError::not_found("file", id))
                        }
                        Err(e) => return Err(crate::blobs::internal(e)),
                    };
                (file.filename, bytes)
            } else if let Some(data) = file_part.file_data.as_deref() {
                let bytes = data_url(data).ok_or_else(|| {
                    invalid(
                        &format!("{param}.file_data"),
                        "file_data must be a data URL (data:<type>;base64,<data>)",
                    )
                })?;
                add(&param, bytes.len() as u64)?;
                let filename = file_part.filename.as_deref().unwrap_or("upload").to_owned();
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
                &crate::sandboxes::files::safe_file_name(&filename),
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
            *part = wire::ContentPart::InputText(wire::InputText {
                text: note,
                extra: serde_json::Map::new(),
            });
            found.push(Attachment { filename, bytes });
        }
    }
    Ok(found)
}

/// Carried fields about this server's side of the exchange: its stream
/// to the client (`stream_options`), its background runs
/// (`background_options`) and conversations (`conversation`: shellgate
/// keeps a response's conversation itself, by `previous_response_id`).
/// Sending them upstream would ask the upstream to act on them instead;
/// shellgate does not act on them either, so each one given is reported
/// uncarried.
const NOT_FORWARDED: &[&str] = &["background_options", "conversation", "stream_options"];

/// What a request asks beyond the neutral turn, for the upstream to carry
/// as its protocol allows: every carried field (verbatim, for a Responses
/// upstream) but those of [`NOT_FORWARDED`], which are returned, and the
/// meaning of `reasoning` and `text.format` for upstreams of other
/// protocols.
fn carry_of(body: &wire::CreateResponse) -> (Carry, Vec<String>) {
    let (kept, dropped): (Vec<_>, Vec<_>) = body
        .carried
        .iter()
        .partition(|(key, _)| !NOT_FORWARDED.contains(&key.as_str()));
    let reasoning = body
        .reasoning()
        .map(|reasoning| ReasoningRequest {
            effort: reasoning.effort,
            summary: reasoning.summary.or(reasoning.generate_summary),
            budget_tokens: None,
        })
        .filter(|reasoning| reasoning.effort.is_some() || reasoning.summary.is_some());
    let output_format = body.text_format().and_then(|format| match format {
        wire::TextFormatParam::Text => None,
        wire::TextFormatParam::JsonSchema {
            name,
            description,
            schema,
            strict,
        } => Some(OutputFormat::JsonSchema {
            name,
            description,
            schema,
            strict,
        }),
        wire::TextFormatParam::JsonObject => Some(OutputFormat::JsonObject),
    });
    // A function's `strict`, on the same function upstream (tools of a
    // namespace are offered by flattened names, and keep the upstream's
    // default).
    let tool_strict = body
        .tools
        .iter()
        .flatten()
        .filter_map(|tool| match tool {
            wire::Tool::Function(wire::FunctionTool {
                name: Some(name),
                strict: Some(strict),
                ..
            }) => Some((name.clone(), *strict)),
            _ => None,
        })
        .collect();
    let carry = Carry {
        reasoning,
        output_format,
        tool_strict,
        responses: kept
            .into_iter()
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect(),
        ..Carry::default()
    };
    (
        carry,
        dropped.into_iter().map(|(key, _)| key.clone()).collect(),
    )
}

/// Everything checked before a run starts.
struct Prepared {
    id: String,
    created_at: i64,
    project: String,
    echo: Echo,
    request: run::Request,
    input: Vec<wire::Item>,
    previous: Option<String>,
    store: bool,
    upstream: Arc<dyn shellgate_model::upstream::Upstream>,
    sandbox: Option<Arc<crate::sandboxes::hosted::HostedShell>>,
    /// What of the request the upstream is not sent, as the client named
    /// it (reported: header, metadata, log).
    uncarried: Vec<String>,
}

/// The metadata key naming what the upstream could not carry.
const UNCARRIED_METADATA: &str = "shellgate_uncarried";
/// Longest metadata value (OpenAI's limit).
const MAX_METADATA_VALUE: usize = 512;
/// Most metadata keys (OpenAI's limit): a request that has them all gets
/// the header only.
const MAX_METADATA_KEYS: usize = 16;

/// Refuses a request whose tools its upstream cannot carry, when the
/// server is configured so (`unsupported_tools = "reject"`): a hosted
/// tool shellgate does not run reaches a Responses upstream only.
fn check_unsupported_tools(
    state: &AppState,
    model: &str,
    tools: &Tools,
    upstream: &dyn shellgate_model::upstream::Upstream,
) -> ApiResult<()> {
    use shellgate_model::upstream::Protocol;
    if state.config.model.unsupported_tools != crate::config::UnsupportedTools::Reject {
        return Ok(());
    }
    let protocol = upstream.protocol();
    if protocol == Some(Protocol::Responses) {
        return Ok(());
    }
    if let Some(tool) = tools.native.first() {
        let upstream = protocol.map_or("is a scripted model".to_owned(), |p| {
            format!("speaks the {} protocol", protocol_name(p))
        });
        return Err(invalid(
            &tool.param,
            format!(
                "tool type '{}' is not supported for model '{model}': its upstream \
                 {upstream}, which cannot run it (only a Responses upstream can), and this \
                 server refuses tools it cannot carry (unsupported_tools = \"reject\")",
                tool.kind
            ),
        ));
    }
    Ok(())
}

/// Offers the tools of the conversation's last `additional_tools` item
/// like the request's `tools`, for an upstream that does not read the item
/// (one not of the Responses protocol, which would otherwise see no tools
/// at all; a Responses upstream is sent the item itself, so its tools are
/// not offered twice): namespaces flattened, freeform tools as one-string
/// functions, hosted tools kept as native ones (so reported uncarried).
/// (Codex CLI declares its tools in that item with its default model: code
/// mode's freeform `exec` in a `functions` namespace, and more groups.)
/// The last item wins: a client sends its whole tool set anew in each
/// request (Codex, at the start of its input), and an earlier item of a
/// replayed or continued conversation may name tools withdrawn since. The
/// item is the client's, not the request's: nothing in it is a 400. A tool
/// that does not read, is one of shellgate's own sandbox tools (those come
/// from `tools`, which choose the container), or clashes with a tool
/// already offered is left out, named in what this returns (reported
/// uncarried).
fn offer_additional_tools(
    tools: &mut Tools,
    stored: &[wire::Item],
    input: &[wire::Item],
) -> Vec<String> {
    use shellgate_model::tools::{BASH, LOCAL_SHELL, SHELL};
    let declares = |item: &&wire::Item| item.kind() == wire::AdditionalTools::TYPE;
    let declared = input
        .iter()
        .enumerate()
        .rev()
        .find(|(_, item)| declares(item))
        .map(|(index, item)| (format!("input[{index}]"), item))
        .or_else(|| {
            let item = stored.iter().rev().find(declares)?;
            Some(("previous_response_id".to_owned(), item))
        });
    let Some((place, wire::Item::Other(item))) = declared else {
        return Vec::new();
    };
    let entries = match serde_json::from_value::<wire::AdditionalTools>(Value::Object(item.clone()))
    {
        Ok(wire::AdditionalTools { tools: None }) => return Vec::new(),
        Ok(wire::AdditionalTools {
            tools: Some(entries),
        }) => entries,
        Err(_) => return vec![format!("{place}.tools")],
    };
    let mut uncarried = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let param = format!("{place}.tools[{index}]");
        let kind = wire::entry_type(entry).unwrap_or_else(|| "no type".to_owned());
        let read = serde_json::from_value::<wire::Tool>(entry.clone())
            .ok()
            .filter(|tool| {
                matches!(
                    tool,
                    wire::Tool::Function(_)
                        | wire::Tool::Custom(_)
                        | wire::Tool::Namespace(_)
                        | wire::Tool::Other(_)
                )
            })
            .and_then(|tool| Tools::parse(std::slice::from_ref(&tool)).ok());
        let taken = |name: &str| {
            [SHELL, LOCAL_SHELL, BASH].contains(&name) || tools.function(name).is_some()
        };
        match read {
            Some(mut read) if !read.functions.iter().any(|f| taken(&f.name)) => {
                for native in &mut read.native {
                    native.param = param.clone();
                }
                tools.functions.append(&mut read.functions);
                tools.native.append(&mut read.native);
            }
            _ => {
                tracing::warn!(tool = %param, kind, "an additional_tools entry is not offered to the model (unreadable, a sandbox tool, or a name already offered)");
                uncarried.push(format!("{param} ({kind})"));
            }
        }
    }
    uncarried
}

/// A protocol as the configuration names it.
fn protocol_name(protocol: shellgate_model::upstream::Protocol) -> &'static str {
    use shellgate_model::upstream::Protocol;
    match protocol {
        Protocol::Chat => "chat",
        Protocol::Responses => "responses",
        Protocol::Anthropic => "anthropic",
    }
}

/// Names what the upstream cannot carry of a prepared request: logged, and
/// noted in the echoed metadata (when it has room).
fn report_uncarried(prepared: &mut Prepared, not_forwarded: Vec<String>) {
    let carry = prepared.request.tools.carry(prepared.request.carry.clone());
    let mut names = not_forwarded;
    names.extend(prepared.upstream.uncarried(&carry));
    crate::uncarried::log("responses", &prepared.request.model, &names);
    let metadata = &mut prepared.echo.metadata;
    if !names.is_empty() && metadata.len() < MAX_METADATA_KEYS {
        let mut note = names.join(", ");
        if note.len() > MAX_METADATA_VALUE {
            let mut end = MAX_METADATA_VALUE - 3;
            while !note.is_char_boundary(end) {
                end -= 1;
            }
            note.truncate(end);
            note.push_str("...");
        }
        metadata.insert(UNCARRIED_METADATA.to_owned(), Value::String(note));
    }
    prepared.uncarried = names;
}

/// `response` with the `x-shellgate-uncarried` header, if anything was
/// left out.
fn with_uncarried(mut response: Response, names: &[String]) -> Response {
    if let Some(value) = crate::uncarried::header_value(names) {
        response
            .headers_mut()
            .insert(crate::uncarried::HEADER, value);
    }
    response
}

/// The request body, read: every top-level field consumed (typed), carried
/// (`wire::CARRIED`) or refused (`unknown_parameter`); a field of the wrong
/// type is a 400 naming it.
pub(crate) fn read_request(body: Value) -> ApiResult<wire::CreateResponse> {
    read_checked(body, wire::CreateResponse::refused)
}

/// A request body read as `T`: a JSON object, each field of the right type
/// (else a 400 naming it), and no field `refused` names.
fn read_checked<T: serde::de::DeserializeOwned>(
    body: Value,
    refused: impl Fn(&T) -> Option<&str>,
) -> ApiResult<T> {
    if !body.is_object() {
        return Err(ApiError::bad_request(
            "The request body must be a JSON object.",
        ));
    }
    let request: T = wire::from_value(body).map_err(|e| invalid(&e.param, e.message))?;
    if let Some(key) = refused(&request) {
        return Err(invalid(key, format!("Unknown parameter: '{key}'."))
            .with_code(ErrorCode::UnknownParameter));
    }
    Ok(request)
}

/// A positive whole number of the request (`max_output_tokens`, ...).
fn positive(value: Option<u64>, key: &str) -> ApiResult<Option<u32>> {
    value
        .map(|n| {
            u32::try_from(n)
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| invalid(key, format!("{key} must be a positive whole number")))
        })
        .transpose()
}

/// Items of the stored conversation: what shellgate stored reads; an item
/// an older version stored that does not is kept whole.
pub(crate) fn stored_items(text: &str) -> ApiResult<Vec<wire::Item>> {
    let values: Vec<Value> = serde_json::from_str(text)
        .map_err(|e| ApiError::internal(format!("stored conversation: {e}")))?;
    Ok(values.iter().map(typed_item).collect())
}

/// The container a request continues: [`prepare`] runs its hosted tools
/// there, and a cluster's replica routes the request by it, so both read
/// the request the same way. `tools` are the request's own (as parsed,
/// before any a conversation adds or a guardrail rewrites), `stored` the
/// conversation of its `previous_response_id`, if any; its `input` follows.
pub(crate) fn continued(
    body: &wire::CreateResponse,
    tools: &Tools,
    stored: &[wire::Item],
) -> crate::sandboxes::reuse::Reuse {
    let mut items = stored.to_vec();
    items.extend(normalize_input(body.input.clone()));
    crate::sandboxes::reuse::Reuse::pick(tools, body.session_id.as_deref(), &items)
}

/// The conversation a request continues: that of its
/// `previous_response_id` (none without one; a 404 naming the parameter
/// for a response this project does not have; a 400 for one still
/// running).
async fn previous_conversation(
    state: &AppState,
    project: &Project,
    previous: Option<&str>,
) -> ApiResult<Vec<wire::Item>> {
    let Some(previous) = previous else {
        return Ok(Vec::new());
    };
    let (owner, key) = (project.0.clone(), previous.to_owned());
    let row = state
        .db(move |s| s.response(&owner, &key))
        .await?
        .ok_or_else(|| {
            let mut error = ApiError::not_found("response", previous);
            error.message = format!("Previous response with id '{previous}' not found.");
            error.param = Some("previous_response_id".into());
            error
        })?;
    if row.status.is_running() {
        return Err(invalid(
            "previous_response_id",
            format!("Previous response '{previous}' is still running."),
        ));
    }
    stored_items(&row.conversation)
}

/// Checks that each `function_call_output` of `input` answers a
/// `function_call` of the conversation (`previous`, then `input` before
/// it), as OpenAI's API does (its 400, `input`): an answer to no call
/// would reach the model as a tool result out of nowhere, which a Chat
/// upstream refuses. A conversation holding items shellgate does not read
/// (a compaction, an item reference) may hold the call: not checked.
fn answered_calls(previous: &[wire::Item], input: &[wire::Item]) -> ApiResult<()> {
    let unread = |item: &wire::Item| matches!(item, wire::Item::Other(_));
    if previous.iter().chain(input).any(unread) {
        return Ok(());
    }
    let mut calls: Vec<&str> = previous
        .iter()
        .filter_map(|item| match item {
            wire::Item::FunctionCall(call) => call.call_id.as_deref(),
            _ => None,
        })
        .collect();
    for (index, item) in input.iter().enumerate() {
        match item {
            wire::Item::FunctionCall(call) => calls.extend(call.call_id.as_deref()),
            wire::Item::FunctionCallOutput(output) => {
                if let Some(call_id) = output.call_id.as_deref() {
                    if !calls.contains(&call_id) {
                        return Err(invalid(
                            &format!("input[{index}].call_id"),
                            format!("No tool call found for function call output with call_id {call_id}."),
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// `POST /v1/responses/input_tokens`: the input tokens a create request of
/// these fields would send its model, first turn. A Responses upstream
/// counts them itself (its `responses/input_tokens`), as an Anthropic one
/// does (`messages/count_tokens`); for any other upstream, or when the
/// upstream's count fails, the answer is the estimate
/// (`Turn::estimated_input_tokens`), as for Messages' and Gemini's counts.
pub async fn input_tokens(
    State(state): State<Arc<AppState>>,
    project: Project,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<Json<wire::InputTokenCount>> {
    let request = read_checked(body, wire::InputTokensRequest::refused)?;
    let body = request.into_create();
    let (model, upstream) = upstream_for(&state, body.model.as_deref())?;
    let mut tools = Tools::parse(body.tools.as_deref().unwrap_or_default())
        .map_err(|e| invalid(&e.param, e.message))?;
    let tool_choice = tools
        .choose(body.tool_choice.as_ref())
        .map_err(|e| invalid(&e.param, e.message))?;
    let mut items =
        previous_conversation(&state, &project, body.previous_response_id.as_deref()).await?;
    let input = normalize_input(body.input.clone());
    if upstream.protocol() != Some(shellgate_model::upstream::Protocol::Responses) {
        offer_additional_tools(&mut tools, &items, &input);
    }
    items.extend(input);
    let (carry, _) = carry_of(&body);
    let turn = shellgate_model::upstream::Turn {
        model: model.clone(),
        messages: shellgate_model::conversation::messages_offering(
            body.instructions.as_deref(),
            items.iter(),
            &|name| tools.function(name).is_some(),
        ),
        // The shell's description names its container, unknown here.
        tools: tools.specs(&|_| String::new()),
        tool_choice,
        parallel_tool_calls: body.parallel_tool_calls,
        carry: tools.carry(carry),
        ..Default::default()
    };
    let input_tokens = crate::turns::input_tokens(upstream.as_ref(), &turn, &model).await;
    Ok(Json(wire::InputTokenCount::new(input_tokens)))
}

/// What the model that compacts a conversation is asked, before the
/// conversation's transcript.
const COMPACTION_INSTRUCTIONS: &str = "You compact a conversation between a user and an AI \
assistant so the assistant can continue it from your summary alone: the earlier turns will be \
replaced by it. Write the summary as plain text: the user's goals and requests, what was done \
and decided, facts learned and results of tool calls that still matter (names, paths, values, \
errors), and what is left to do. Be complete about what matters and brief about the rest; \
do not address the user.";

/// What the conversation's transcript follows, in the one user message
/// of the compaction turn.
const COMPACTION_REQUEST: &str = "The conversation to summarize:";

/// `POST /v1/responses/compact`: the conversation (`input`, after that of
/// `previous_response_id`) compacted, as OpenAI's API does it: its user
/// messages, then one `compaction` item standing for the rest. The
/// request's model writes a summary of the whole conversation (one turn,
/// of any upstream protocol, over its transcript:
/// [`shellgate_model::conversation::transcript`]); the item holds it,
/// opaque to the client ([`wire::Compaction::seal`]), and a later request
/// that carries it as input gives the summary to its model. Nothing is
/// stored; the tokens are billed as a turn's.
pub async fn compact(
    State(state): State<Arc<AppState>>,
    project: Project,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<Response> {
    let request = read_checked(body, wire::CompactRequest::refused)?;
    let (model, upstream) = upstream_for(&state, request.model.as_deref())?;
    let mut items =
        previous_conversation(&state, &project, request.previous_response_id.as_deref()).await?;
    let (input, instructions, _) = crate::guardrails::guard_request(
        &state.guardrails,
        &project.0,
        normalize_input(request.input.clone()),
        request.instructions.clone(),
        Tools::default(),
    )
    .await?;
    items.extend(input);
    let create = wire::CreateResponse {
        model: Some(model.clone()),
        carried: request.carried.clone(),
        ..wire::CreateResponse::default()
    };
    let (carry, mut uncarried) = carry_of(&create);
    uncarried.extend(upstream.uncarried(&carry));
    let transcript = shellgate_model::conversation::transcript(
        &shellgate_model::conversation::messages(instructions.as_deref(), items.iter()),
    );
    let turn = shellgate_model::upstream::Turn {
        model: model.clone(),
        messages: vec![
            shellgate_model::upstream::Message::System(COMPACTION_INSTRUCTIONS.to_owned()),
            shellgate_model::upstream::Message::User(format!(
                "{COMPACTION_REQUEST}\n\n{transcript}"
            )),
        ],
        carry,
        ..Default::default()
    };
    let deadline = std::time::Duration::from_secs(state.config.model.response_timeout_secs);
    let reply = tokio::time::timeout(deadline, upstream.complete(&turn, None))
        .await
        .map_err(|_| {
            ApiError::of(
                ErrorCode::UpstreamTimeout,
                format!(
                    "the compaction took longer than its limit of {} seconds \
                     (response_timeout_secs)",
                    deadline.as_secs()
                ),
            )
        })?
        .map_err(crate::turns::upstream_error)?;
    let usage = reply.usage;
    if usage != Usage::default() {
        let (owner, billed) = (project.0.clone(), model.clone());
        if let Err(e) = state
            .db(move |s| s.record_tokens(&owner, &billed, usage.input_tokens, usage.output_tokens))
            .await
        {
            tracing::error!("could not record token usage: {}", e.message);
        }
    }
    let summary = reply.text.trim();
    if summary.is_empty() {
        return Err(ApiError::of(
            ErrorCode::UpstreamFailed,
            format!("the model {model} wrote no summary of the conversation"),
        ));
    }
    // The user's messages kept are output items: each has its status, as
    // the API reference's message does.
    let mut output: Vec<wire::Item> = items
        .into_iter()
        .filter_map(|item| match item {
            wire::Item::Message(mut message) if message.role == wire::Role::User => {
                message.status.get_or_insert(wire::ItemStatus::Completed);
                Some(wire::Item::Message(message))
            }
            _ => None,
        })
        .collect();
    output.push(wire::Compaction::seal(new_id("cmp_"), summary).into_item());
    let compacted = wire::CompactedResponse {
        id: new_id("resp_"),
        object: wire::COMPACTED_OBJECT.to_owned(),
        created_at: now(),
        output,
        usage: usage_object(usage),
        safety_identifier: create.carried_string("safety_identifier"),
        service_tier: create.carried_string("service_tier"),
    };
    Ok(with_uncarried(Json(compacted).into_response(), &uncarried))
}

async fn prepare(
    state: &Arc<AppState>,
    project: &Project,
    body: wire::CreateResponse,
    kept: Option<&KeptResponse>,
) -> ApiResult<Prepared> {
    let (model, upstream) = upstream_for(state, body.model.as_deref())?;
    let background = body.background.unwrap_or(false);
    let store = body.store.unwrap_or(true);
    if background && !store {
        return Err(invalid(
            "store",
            "a background response must be stored (store: true)",
        ));
    }
    let max_output_tokens = positive(body.max_output_tokens, "max_output_tokens")?;
    let max_tool_calls =
        positive(body.max_tool_calls, "max_tool_calls")?.unwrap_or(run::MAX_TOOL_CALLS);
    if max_tool_calls > run::MAX_TOOL_CALLS {
        return Err(invalid(
            "max_tool_calls",
            format!("max_tool_calls is at most {}", run::MAX_TOOL_CALLS),
        ));
    }
    let request_tools = body.tools.clone().unwrap_or_default();
    let mut tools = Tools::parse(&request_tools).map_err(|e| invalid(&e.param, e.message))?;
    let tool_choice = tools
        .choose(body.tool_choice.as_ref())
        .map_err(|e| invalid(&e.param, e.message))?;
    check_unsupported_tools(state, &model, &tools, upstream.as_ref())?;
    let input = normalize_input(body.input.clone());
    count_input_files(state, &input)?;
    let previous = body.previous_response_id.clone();
    let mut items = match (kept, previous.as_deref()) {
        (Some(kept), Some(previous)) if kept.id == previous => kept.conversation.clone(),
        _ => previous_conversation(state, project, previous.as_deref()).await?,
    };
    answered_calls(&items, &input)?;
    let reuse = continued(&body, &tools, &items);
    let mut not_offered = Vec::new();
    if upstream.protocol() != Some(shellgate_model::upstream::Protocol::Responses) {
        not_offered = offer_additional_tools(&mut tools, &items, &input);
    }
    // The tools the model is offered are guarded whole, those of an
    // `additional_tools` item too.
    let (input, instructions, tools) = crate::guardrails::guard_request(
        &state.guardrails,
        &project.0,
        input,
        body.instructions.clone(),
        tools,
    )
    .await?;
    items.extend(input.iter().cloned());
    let response_id = new_id("resp_");
    if !state.node_name.is_empty() {
        // A cluster's replicas send this response's later requests (its
        // live events, its cancel) to this node, which holds them.
        let (id, node) = (response_id.clone(), state.node_name.clone());
        state.db(move |s| s.set_response_node(&id, &node)).await?;
    }
    let hosted =
        crate::sandboxes::hosted::prepare(state, &project.0, &tools, reuse, &response_id).await?;
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
                error = ApiError::quota(ErrorCode::RateLimitExceeded, error.message);
            }
            error
        })?;
        for file in files {
            let path = format!("/mnt/data/{}", file.filename);
            state
                .engine
                .write_file(&container, &path, &file.bytes)
                .await
                .map_err(|e| crate::engine::engine_error(&container, e))?;
            let row = shellgate_store::ContainerFileRow {
                id: new_id("cfile_"),
                container_id: container.clone(),
                path,
                bytes: file.bytes.len() as u64,
                source: shellgate_store::FileSource::User,
                created_at: now(),
            };
            state.db(move |s| s.upsert_container_file(&row)).await?;
        }
    }
    let mut metadata = body.metadata.clone().unwrap_or_default();
    metadata
        .values_mut()
        .for_each(crate::egress::redact_secret_values);
    let (carry, mut not_forwarded) = carry_of(&body);
    not_forwarded.extend(not_offered);
    let (text, truncation) = (
        body.text_echo().unwrap_or_default(),
        body.truncation().unwrap_or_default(),
    );
    let mut prepared = Prepared {
        id: response_id,
        created_at: now(),
        project: project.0.clone(),
        echo: Echo {
            model: model.clone(),
            background,
            max_tool_calls,
            instructions: body.instructions.clone(),
            metadata,
            parallel_tool_calls: body.parallel_tool_calls.unwrap_or(true),
            temperature: body.temperature,
            top_p: body.top_p,
            presence_penalty: body.carried_number("presence_penalty"),
            frequency_penalty: body.carried_number("frequency_penalty"),
            top_logprobs: body.carried_count("top_logprobs"),
            reasoning: body.reasoning_echo().unwrap_or_default(),
            service_tier: body.carried_string("service_tier"),
            safety_identifier: body.carried_string("safety_identifier"),
            prompt_cache_key: body.carried_string("prompt_cache_key"),
            tool_choice: body.tool_choice.unwrap_or(wire::ToolChoice::Auto),
            tools: echo_tools(&request_tools),
            max_output_tokens: body.max_output_tokens,
            previous_response_id: previous.clone(),
            store,
            user: body.user,
            text,
            truncation,
        },
        request: run::Request {
            model,
            instructions,
            items,
            tools,
            tool_choice,
            max_tool_calls,
            temperature: body.temperature,
            top_p: body.top_p,
            max_output_tokens,
            parallel_tool_calls: body.parallel_tool_calls,
            environment_description,
            carry,
            output_guardrail: state
                .guardrails
                .for_project(&project.0, crate::guardrails::Target::ToolOutput),
            max_answer_bytes: usize::try_from(state.config.model.upstream_max_answer_bytes)
                .unwrap_or(usize::MAX),
        },
        input,
        previous,
        store,
        upstream,
        sandbox,
        uncarried: Vec::new(),
    };
    report_uncarried(&mut prepared, not_forwarded);
    Ok(prepared)
}

impl Prepared {
    /// The stored row for this response in `status`, its object `body`.
    fn row(&self, body: &wire::Response, output: &[wire::Item]) -> ResponseRow {
        let conversation: Vec<&wire::Item> = self.request.items.iter().chain(output).collect();
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
            // The status is one this file wrote into the object (a
            // response that somehow had another is stored as failed).
            status: ResponseStatus::parse(body.status.as_str()).unwrap_or(ResponseStatus::Failed),
            previous_response_id: self.previous.clone(),
            body: stored(serde_json::to_value(body).unwrap_or(Value::Null)),
            input_items: stored(serde_json::to_value(&self.input).unwrap_or(Value::Null)),
            conversation: stored(serde_json::to_value(&conversation).unwrap_or(Value::Null)),
        }
    }

    async fn save(&self, state: &AppState, body: &wire::Response, output: &[wire::Item]) {
        if !self.store {
            return;
        }
        let row = self.row(body, output);
        if let Err(e) = state.db(move |s| s.save_response(&row)).await {
            tracing::error!(response = %self.id, "could not store the response: {}", e.message);
        }
    }

    /// Runs the loop, stores the result and returns the final object.
    async fn run(&self, state: &AppState, events: Option<&EventSink>) -> wire::Response {
        let sandbox = self.sandbox.as_deref().map(|s| s as &dyn Sandbox);
        let deadline = std::time::Duration::from_secs(state.config.model.response_timeout_secs);
        let outcome = run_within(
            deadline,
            self.upstream.as_ref(),
            sandbox,
            &self.request,
            events,
        )
        .await;
        let mut body = finished_object(&self.id, self.created_at, &self.echo, &outcome);
        // Sandbox time and its cost, beside the tokens (shellgate's extension,
        // as OpenRouter reports it).
        let seconds = self
            .sandbox
            .as_ref()
            .map(|s| s.billed_seconds())
            .unwrap_or(0.0);
        if let Some(usage) = &mut body.usage {
            usage.sandbox_seconds = Some(seconds);
            usage.server_tool_cost = Some(seconds * state.config.sandbox.sandbox_price_per_second);
        }
        let (project, model, usage) = (self.project.clone(), body.model.clone(), outcome.usage);
        if let Err(e) = state
            .db(move |s| s.record_tokens(&project, &model, usage.input_tokens, usage.output_tokens))
            .await
        {
            tracing::error!("could not record token usage: {}", e.message);
        }
        self.save(state, &body, &outcome.output).await;
        body
    }

    fn in_progress(&self, status: wire::ResponseStatus) -> wire::Response {
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
    let body = read_request(body)?;
    let stream = body.stream.unwrap_or(false);
    let prepared = Arc::new(prepare(&state, &project, body, None).await?);
    let uncarried = prepared.uncarried.clone();
    let response = start(state, prepared, stream).await;
    Ok(with_uncarried(response, &uncarried))
}

/// Runs a prepared response: in the background, streamed, or to its end.
async fn start(state: Arc<AppState>, prepared: Arc<Prepared>, stream: bool) -> Response {
    if prepared.echo.background {
        let (queued, log) = launch_background(&state, &prepared).await;
        return if stream {
            // Streaming a background response: a client that leaves the
            // stream does not stop it.
            read(log, 0, None).into_response()
        } else {
            Json(queued).into_response()
        };
    }
    if !stream {
        // Foreground: if the client leaves, this future is dropped, and with
        // it the run and its commands.
        return Json(prepared.run(&state, None).await).into_response();
    }
    let (log, task) = launch_streamed(&state, &prepared);
    read(log, 0, Some(task)).into_response()
}

/// Starts a background response (stored queued, then run by a task of its
/// own that `cancel` can stop): its queued object and its events' log.
async fn launch_background(
    state: &Arc<AppState>,
    prepared: &Arc<Prepared>,
) -> (wire::Response, Arc<EventLog>) {
    use wire::ResponseStatus as S;
    let queued = prepared.in_progress(S::Queued);
    prepared.save(state, &queued, &[]).await;
    let (events, receiver) = tokio::sync::mpsc::unbounded_channel();
    let (done_tx, done) = tokio::sync::oneshot::channel();
    let log = record(Arc::clone(prepared), receiver, done);
    let task = {
        let (state, prepared) = (Arc::clone(state), Arc::clone(prepared));
        tokio::spawn(async move {
            let running = prepared.in_progress(S::InProgress);
            prepared.save(&state, &running, &[]).await;
            let body = prepared.run(&state, Some(&events)).await;
            drop(events);
            state.running.remove(&prepared.id);
            let _ = done_tx.send(body);
        })
    };
    state
        .running
        .insert(&prepared.id, task.abort_handle(), Arc::clone(&log));
    (queued, log)
}

/// Starts a streamed foreground response: its events' log, and its task
/// (the caller stops it when its client leaves).
fn launch_streamed(
    state: &Arc<AppState>,
    prepared: &Arc<Prepared>,
) -> (Arc<EventLog>, tokio::task::JoinHandle<()>) {
    let (events, receiver) = tokio::sync::mpsc::unbounded_channel();
    let (done_tx, done) = tokio::sync::oneshot::channel();
    let log = record(Arc::clone(prepared), receiver, done);
    let task = {
        let (state, prepared) = (Arc::clone(state), Arc::clone(prepared));
        tokio::spawn(async move {
            let body = prepared.run(&state, Some(&events)).await;
            drop(events);
            let _ = done_tx.send(body);
        })
    };
    (log, task)
}

/// `GET /v1/responses` upgraded to a WebSocket: the Responses API's
/// WebSocket mode. Each `response.create` client event is a create request
/// (as `POST /v1/responses` takes it, always streamed), answered by the
/// same events a stream sends, as text messages, one response at a time
/// (the next event is read once one ends). A request that cannot start is
/// an `error` event, and the socket stays open. A client that leaves stops
/// a foreground response, as leaving a stream does.
pub async fn socket(
    State(state): State<Arc<AppState>>,
    project: Project,
    upgrade: axum::extract::ws::WebSocketUpgrade,
) -> Response {
    upgrade
        .on_upgrade(move |socket| serve_socket(state, project, socket))
        .into_response()
}

/// The response a WebSocket connection keeps in memory, as OpenAI's
/// WebSocket mode does: the last one that ended on it, so the next
/// `response.create` may continue it by `previous_response_id` whether or
/// not it was stored. A failed response is not kept, and a continuation
/// that fails drops the one kept.
#[derive(Debug, Clone)]
struct KeptResponse {
    id: String,
    /// Its whole conversation: what it was sent, then its output.
    conversation: Vec<wire::Item>,
}

async fn serve_socket(state: Arc<AppState>, project: Project, mut socket: WebSocket) {
    let mut kept: Option<KeptResponse> = None;
    while let Some(Ok(message)) = socket.recv().await {
        let text = match message {
            WsMessage::Text(text) => text.to_string(),
            WsMessage::Binary(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            WsMessage::Close(_) => return,
            WsMessage::Ping(_) | WsMessage::Pong(_) => continue,
        };
        let (prepared, log, task) =
            match socket_response(&state, &project, &text, kept.as_ref()).await {
                Ok(started) => started,
                Err(error) => {
                    kept = None;
                    let text = serde_json::to_string(&socket_error(error)).unwrap_or_default();
                    if socket.send(WsMessage::Text(text.into())).await.is_err() {
                        return;
                    }
                    continue;
                }
            };
        let _guard = AbortOnDrop(task);
        let mut cursor = 0;
        while let Some(event) = log.next(cursor).await {
            cursor += 1;
            match &event.event {
                wire::Event::Completed { response } | wire::Event::Incomplete { response } => {
                    kept = Some(KeptResponse {
                        id: prepared.id.clone(),
                        conversation: prepared
                            .request
                            .items
                            .iter()
                            .chain(&response.output)
                            .cloned()
                            .collect(),
                    });
                }
                wire::Event::Failed { .. } => kept = None,
                _ => {}
            }
            let text = serde_json::to_string(&event).unwrap_or_default();
            if socket.send(WsMessage::Text(text.into())).await.is_err() {
                return;
            }
        }
    }
}

/// A request the WebSocket mode cannot start, as its `error` event: the
/// HTTP API's status and error object. A `previous_response_id` neither
/// kept by the connection nor stored is `previous_response_not_found`, as
/// OpenAI's WebSocket mode says it.
fn socket_error(error: ApiError) -> wire::SocketErrorEvent {
    let status = error.status().as_u16();
    let missing_previous =
        error.code == ErrorCode::NotFound && error.param.as_deref() == Some("previous_response_id");
    let mut body = error.envelope().error;
    if missing_previous {
        body.code = Some("previous_response_not_found".to_owned());
        body.kind = "invalid_request_error".to_owned();
    }
    wire::SocketErrorEvent {
        kind: "error".to_owned(),
        status: if missing_previous { 400 } else { status },
        error: body,
    }
}

/// Starts the response a client event of the WebSocket mode asks for: its
/// request, its events' log, and its task when it runs in the foreground.
async fn socket_response(
    state: &Arc<AppState>,
    project: &Project,
    text: &str,
    kept: Option<&KeptResponse>,
) -> ApiResult<(
    Arc<Prepared>,
    Arc<EventLog>,
    Option<tokio::task::JoinHandle<()>>,
)> {
    let mut body: Value = serde_json::from_str(text)
        .map_err(|e| ApiError::bad_request(format!("The event is not JSON: {e}.")))?;
    let kind: wire::ClientEventType = serde_json::from_value(body.clone())
        .map_err(|_| invalid("type", "An event needs a type."))?;
    if kind.kind != wire::RESPONSE_CREATE {
        return Err(invalid(
            "type",
            format!(
                "Unsupported event type '{}': this socket takes '{}'.",
                kind.kind,
                wire::RESPONSE_CREATE
            ),
        ));
    }
    if let Some(fields) = body.as_object_mut() {
        fields.remove("type");
    }
    let request = read_request(body)?;
    let prepared = Arc::new(prepare(state, project, request, kept).await?);
    if prepared.echo.background {
        let (_, log) = launch_background(state, &prepared).await;
        return Ok((prepared, log, None));
    }
    let (log, task) = launch_streamed(state, &prepared);
    Ok((prepared, log, Some(task)))
}

/// Writes a run's stream events into a log: `response.created`,
/// `response.in_progress`, what the loop does, then `response.completed` /
/// `.incomplete` / `.failed` (nothing more if the run was cancelled).
fn record(
    prepared: Arc<Prepared>,
    receiver: tokio::sync::mpsc::UnboundedReceiver<run::Event>,
    done: tokio::sync::oneshot::Receiver<wire::Response>,
) -> Arc<EventLog> {
    let log = Arc::new(EventLog::default());
    let writer_log = Arc::clone(&log);
    tokio::spawn(async move {
        let mut stream = SseWriter {
            log: writer_log,
            sequence: 0,
        };
        let start = prepared.in_progress(wire::ResponseStatus::InProgress);
        stream.send(Event::Created {
            response: Box::new(start.clone()),
        });
        stream.send(Event::InProgress {
            response: Box::new(start),
        });
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
) -> Sse<impl tokio_stream::Stream<Item = Result<SseEvent, Infallible>>> {
    let guard = AbortOnDrop(task);
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<wire::StreamEvent>();
    tokio::spawn(async move {
        let mut cursor = cursor;
        while let Some(event) = log.next(cursor).await {
            cursor += 1;
            if tx.send(event).is_err() {
                return;
            }
        }
    });
    let body = UnboundedReceiverStream::new(rx).map(move |event| {
        let _keep = &guard;
        let data = serde_json::to_string(&event).unwrap_or_default();
        Ok::<_, Infallible>(SseEvent::default().event(event.kind()).data(data))
    });
    Sse::new(body).keep_alive(crate::http::sse_keep_alive())
}

/// Numbers stream events and writes them to a log.
struct SseWriter {
    log: Arc<EventLog>,
    sequence: u64,
}

/// The id of an item (`""` if it has none, which the loop's never lack).
fn id_of(item: &wire::Item) -> String {
    item.id().unwrap_or_default().to_owned()
}

/// The first content part of a message item.
fn first_part(item: &wire::Item) -> Option<&wire::ContentPart> {
    message_parts(item).first()
}

impl SseWriter {
    fn send(&mut self, event: Event) {
        self.log.push(wire::StreamEvent {
            event,
            sequence_number: self.sequence,
        });
        self.sequence += 1;
    }

    /// The terminal event of a finished response object.
    fn finish(&mut self, body: wire::Response) {
        let response = Box::new(body);
        self.send(match response.status {
            wire::ResponseStatus::Completed => Event::Completed { response },
            wire::ResponseStatus::Incomplete => Event::Incomplete { response },
            _ => Event::Failed { response },
        });
    }

    /// The events of a response that is over, told again from its object:
    /// created, each output item added and done, the terminal event.
    fn replay(&mut self, body: &wire::Response) {
        let mut start = body.clone();
        start.status = wire::ResponseStatus::InProgress;
        start.output = Vec::new();
        self.send(Event::Created {
            response: Box::new(start),
        });
        for (index, item) in body.output.iter().enumerate() {
            let mut added = item.clone();
            if let wire::Item::Message(message) = &mut added {
                message.content = wire::MessageContent::Parts(Vec::new());
            }
            added.set_status(wire::ItemStatus::InProgress);
            self.send(Event::OutputItemAdded {
                output_index: index,
                item: added,
            });
            self.send(Event::OutputItemDone {
                output_index: index,
                item: item.clone(),
            });
        }
        self.finish(body.clone());
        self.log.close();
    }

    fn event(&mut self, event: run::Event) {
        match event {
            run::Event::ItemAdded { index, item } => {
                let message = matches!(item, wire::Item::Message(_));
                let item_id = id_of(&item);
                self.send(Event::OutputItemAdded {
                    output_index: index,
                    item,
                });
                if message {
                    self.send(Event::ContentPartAdded {
                        item_id,
                        output_index: index,
                        content_index: 0,
                        part: wire::ContentPart::OutputText(wire::OutputText::answer(
                            String::new(),
                            Vec::new(),
                        )),
                    });
                }
            }
            run::Event::TextDelta {
                index,
                item_id,
                delta,
            } => self.send(Event::OutputTextDelta {
                item_id,
                output_index: index,
                content_index: 0,
                delta,
                logprobs: Vec::new(),
            }),
            run::Event::Arguments {
                index,
                item_id,
                arguments,
            } => {
                self.send(Event::FunctionCallArgumentsDelta {
                    item_id: item_id.clone(),
                    output_index: index,
                    delta: arguments.clone(),
                });
                self.send(Event::FunctionCallArgumentsDone {
                    item_id,
                    output_index: index,
                    arguments,
                });
            }
            run::Event::CustomInput {
                index,
                item_id,
                input,
            } => {
                self.send(Event::CustomToolCallInputDelta {
                    item_id: item_id.clone(),
                    output_index: index,
                    delta: input.clone(),
                });
                self.send(Event::CustomToolCallInputDone {
                    item_id,
                    output_index: index,
                    input,
                });
            }
            run::Event::ReasoningSummaryPart {
                index,
                item_id,
                summary_index,
            } => self.send(Event::ReasoningSummaryPartAdded {
                item_id,
                output_index: index,
                summary_index,
                part: wire::ReasoningText::new(wire::ReasoningText::SUMMARY, ""),
            }),
            run::Event::ReasoningSummaryDelta {
                index,
                item_id,
                summary_index,
                delta,
            } => self.send(Event::ReasoningSummaryTextDelta {
                item_id,
                output_index: index,
                summary_index,
                delta,
            }),
            run::Event::ReasoningSummaryDone {
                index,
                item_id,
                summary_index,
                text,
            } => {
                self.send(Event::ReasoningSummaryTextDone {
                    item_id: item_id.clone(),
                    output_index: index,
                    summary_index,
                    text: text.clone(),
                });
                self.send(Event::ReasoningSummaryPartDone {
                    item_id,
                    output_index: index,
                    summary_index,
                    part: wire::ReasoningText::new(wire::ReasoningText::SUMMARY, text),
                });
            }
            run::Event::ShellCommand {
                index,
                command_index,
                command,
            } => {
                self.send(Event::ShellCallCommandAdded {
                    output_index: index,
                    command_index,
                    command: String::new(),
                });
                self.send(Event::ShellCallCommandDelta {
                    output_index: index,
                    command_index,
                    delta: command.clone(),
                });
                self.send(Event::ShellCallCommandDone {
                    output_index: index,
                    command_index,
                    command,
                });
            }
            run::Event::ShellOutput {
                index,
                item_id,
                command_index,
                stream,
                text,
            } => {
                let delta = match stream {
                    StreamKind::Stdout => wire::ShellOutputDelta {
                        stdout: Some(text),
                        stderr: None,
                    },
                    StreamKind::Stderr => wire::ShellOutputDelta {
                        stdout: None,
                        stderr: Some(text),
                    },
                };
                self.send(Event::ShellCallOutputContentDelta {
                    item_id,
                    output_index: index,
                    command_index,
                    delta,
                });
            }
            run::Event::ShellCommandDone {
                index,
                item_id,
                command_index,
                result,
            } => {
                let output = vec![result];
                self.send(Event::ShellCallOutputContentDone {
                    item_id,
                    output_index: index,
                    command_index,
                    output,
                });
            }
            run::Event::Interpreter {
                index,
                item_id,
                step,
            } => match step {
                run::InterpreterStep::InProgress => {
                    self.send(Event::CodeInterpreterCallInProgress {
                        item_id,
                        output_index: index,
                    })
                }
                run::InterpreterStep::Code(code) => {
                    self.send(Event::CodeInterpreterCallCodeDelta {
                        item_id: item_id.clone(),
                        output_index: index,
                        delta: code.clone(),
                    });
                    self.send(Event::CodeInterpreterCallCodeDone {
                        item_id,
                        output_index: index,
                        code,
                    });
                }
                run::InterpreterStep::Interpreting => {
                    self.send(Event::CodeInterpreterCallInterpreting {
                        item_id,
                        output_index: index,
                    })
                }
                run::InterpreterStep::Completed => self.send(Event::CodeInterpreterCallCompleted {
                    item_id,
                    output_index: index,
                }),
            },
            run::Event::ItemDone { index, item } => {
                if let Some(part) = first_part(&item).cloned() {
                    let item_id = id_of(&item);
                    let text = match &part {
                        wire::ContentPart::OutputText(text) => text.text.clone(),
                        _ => String::new(),
                    };
                    if let wire::ContentPart::OutputText(wire::OutputText {
                        annotations: Some(annotations),
                        ..
                    }) = &part
                    {
                        for (annotation_index, annotation) in annotations.iter().enumerate() {
                            self.send(Event::OutputTextAnnotationAdded {
                                item_id: item_id.clone(),
                                output_index: index,
                                content_index: 0,
                                annotation_index,
                                annotation: annotation.clone(),
                            });
                        }
                    }
                    self.send(Event::OutputTextDone {
                        item_id: item_id.clone(),
                        output_index: index,
                        content_index: 0,
                        text,
                        logprobs: Vec::new(),
                    });
                    self.send(Event::ContentPartDone {
                        item_id,
                        output_index: index,
                        content_index: 0,
                        part,
                    });
                }
                self.send(Event::OutputItemDone {
                    output_index: index,
                    item,
                });
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

fn body_of(row: &ResponseRow) -> ApiResult<wire::Response> {
    serde_json::from_str(&row.body).map_err(|e| ApiError::internal(format!("stored response: {e}")))
}

/// The query of `GET /v1/responses/{id}` (other keys, such as the SDK's
/// `include[]`, are accepted and mean nothing here).
#[derive(serde::Deserialize)]
pub struct RetrieveQuery {
    /// `true`: the response's events (live while it runs).
    stream: Option<String>,
    /// Resume after this sequence number.
    starting_after: Option<String>,
}

pub async fn retrieve(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    axum::extract::Query(query): axum::extract::Query<RetrieveQuery>,
) -> ApiResult<Response> {
    let row = owned(&state, &project, &id).await?;
    let body = body_of(&row)?;
    if query.stream.as_deref() != Some("true") {
        return Ok(Json(body).into_response());
    }
    // Resuming a stream: the events after `starting_after` (a sequence
    // number), live while the run goes on.
    let cursor = match query.starting_after {
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
) -> ApiResult<Json<wire::ResponseDeleted>> {
    owned(&state, &project, &id).await?;
    if let Some(task) = state.running.remove(&id) {
        task.abort();
    }
    let (owner, key) = (project.0.clone(), id.clone());
    state.db(move |s| s.delete_response(&owner, &key)).await?;
    Ok(Json(wire::ResponseDeleted {
        id,
        object: "response".to_owned(),
        deleted: true,
    }))
}

pub async fn cancel(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
) -> ApiResult<Json<wire::Response>> {
    let row = owned(&state, &project, &id).await?;
    let mut body = body_of(&row)?;
    if !body.background {
        return Err(invalid(
            "response_id",
            "Only background responses can be cancelled.",
        ));
    }
    if let Some(task) = state.running.remove(&id) {
        // Its commands are killed with the run.
        task.abort();
    }
    if row.status.is_running() {
        body.status = wire::ResponseStatus::Cancelled;
        let row = ResponseRow {
            status: ResponseStatus::Cancelled,
            body: serde_json::to_string(&body)
                .map_err(|e| ApiError::internal(format!("response: {e}")))?,
            ..row
        };
        state.db(move |s| s.save_response(&row)).await?;
    }
    Ok(Json(body))
}

/// What `include` may name (the SDK's `ResponseIncludable`).
const INCLUDABLE: &[&str] = &[
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
];

/// The query of `GET /v1/responses/{id}/input_items`: the list's page, and
/// `include` (`include=a&include=b`, or the SDK's `include[]=a`). Input
/// items are listed whole, as the client sent them, so every value it may
/// name is already there; a value it may not is a 400 naming it.
fn input_items_query(query: Option<&str>) -> ApiResult<ListParams> {
    let pairs: Vec<(String, String)> = form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .map(|(key, value)| (key.into_owned(), value.into_owned()))
        .collect();
    let (included, rest): (Vec<_>, Vec<_>) = pairs
        .into_iter()
        .partition(|(key, _)| key == "include" || key == "include[]");
    for (index, (_, value)) in included.iter().enumerate() {
        if !INCLUDABLE.contains(&value.as_str()) {
            return Err(invalid(
                &format!("include[{index}]"),
                format!(
                    "Invalid value: '{value}'. Supported values are: {}.",
                    INCLUDABLE
                        .iter()
                        .map(|v| format!("'{v}'"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
    }
    let rest = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(rest)
        .finish();
    let uri: axum::http::Uri = format!("/?{rest}")
        .parse()
        .map_err(|_| ApiError::bad_request("Invalid query."))?;
    axum::extract::Query::<ListParams>::try_from_uri(&uri)
        .map(|axum::extract::Query(params)| params)
        .map_err(|e| ApiError::bad_request(format!("Invalid query: {}", e.body_text())))
}

pub async fn input_items(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> ApiResult<Json<shellgate_wire::List<wire::Item>>> {
    let params = input_items_query(query.as_deref())?;
    let row = owned(&state, &project, &id).await?;
    let page = params.page()?;
    let mut items = stored_items(&row.input_items)?;
    if !page.ascending {
        items.reverse();
    }
    if let Some(after) = &page.after {
        let position = items
            .iter()
            .position(|i| i.id() == Some(after.as_str()))
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
    Ok(Json(shellgate_wire::List::page(items, has_more, id_of)))
}

/// At start-up: responses a crash interrupted are failed, never left
/// `in_progress`: all of them on a single box, a cluster node's own.
pub async fn settle_interrupted(state: &AppState) -> ApiResult<()> {
    let node = match state.config.cluster.role {
        crate::config::Role::All => None,
        _ => Some(state.node_name.clone()),
    };
    fail_running(
        &state.store,
        node,
        "The server stopped while this response was running; it did not finish.",
    )
    .await
}

/// Fails the responses still queued or in progress on cluster node `node`
/// (`None`: every one), saying `why`: a restarted server's, or a lost
/// node's (an API replica's sweep).
pub(crate) async fn fail_running(
    db: &crate::db::Db,
    node: Option<String>,
    why: &str,
) -> ApiResult<()> {
    let rows = db
        .run(move |s| {
            s.responses_with_status_on(
                &[ResponseStatus::Queued, ResponseStatus::InProgress],
                node.as_deref(),
            )
        })
        .await?;
    for row in rows {
        // A body that does not read is kept as it is; the row is failed.
        let body = match body_of(&row) {
            Ok(mut body) => {
                body.status = wire::ResponseStatus::Failed;
                body.error = Some(wire::ResponseError {
                    code: "server_error".to_owned(),
                    message: why.to_owned(),
                });
                serde_json::to_string(&body).unwrap_or_else(|_| row.body.clone())
            }
            Err(_) => row.body.clone(),
        };
        let row = ResponseRow {
            status: ResponseStatus::Failed,
            body,
            ..row
        };
        db.run(move |s| s.save_response(&row)).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_consumed_carried_or_refused() {
        let read = |body: Value| read_request(body).map_err(|e| (e.param, e.code.code()));
        assert!(read(serde_json::json!({"model": "m", "reasoning": {}, "include": []})).is_ok());
        assert_eq!(
            read(serde_json::json!({"model": "m", "bogus": 1})).unwrap_err(),
            (Some("bogus".into()), Some("unknown_parameter"))
        );
        assert_eq!(
            read(serde_json::json!({"model": "m", "stream": "true"}))
                .unwrap_err()
                .0,
            Some("stream".into())
        );
        assert!(read(serde_json::json!(["not", "an", "object"])).is_err());
    }

    #[test]
    fn input_items_take_include_in_either_spelling_and_refuse_unknown_values() {
        let params = input_items_query(Some(
            "limit=5&include%5B%5D=reasoning.encrypted_content&include=code_interpreter_call.outputs&order=asc",
        ))
        .unwrap();
        assert_eq!(
            (params.limit, params.order.as_deref()),
            (Some(5), Some("asc"))
        );
        let refused = input_items_query(Some(
            "include[]=message.input_image.image_url&include[]=all",
        ))
        .unwrap_err();
        assert_eq!(refused.param.as_deref(), Some("include[1]"));
        assert!(input_items_query(Some("frobnicate=1")).is_err());
        assert!(input_items_query(None).is_ok());
    }

    #[test]
    fn echoed_tools_never_hold_a_secret_value() {
        let tools: Vec<wire::Tool> = wire::from_value(serde_json::json!([
            {"type": "shell", "environment": {"type": "container_auto", "network_policy": {
                "type": "allowlist", "allowed_domains": ["a.test"],
                "domain_secrets": [{"domain": "a.test", "name": "TOKEN", "value": "s3cret-1"}]},
                "misspelt": {"domain_secrets": [{"domain": "a.test", "name": "X", "value": "s3cret-2"}]}}},
            {"type": "openrouter:shell", "parameters": {"environment": {"type": "container_auto",
                "network_policy": {"type": "allowlist", "allowed_domains": ["a.test"],
                "domain_secrets": [{"domain": "a.test", "name": "T", "value": "s3cret-3"}]}}}},
            {"type": "function", "name": "f", "parameters": {"domain_secrets": ["s3cret-4"]}},
        ]))
        .unwrap();
        let echoed = serde_json::to_string(&echo_tools(&tools)).unwrap();
        assert!(!echoed.contains("s3cret"), "{echoed}");
        assert!(echoed.contains("TOKEN") && echoed.contains(crate::egress::REDACTED));
    }

    #[test]
    fn carried_fields_go_upstream_but_this_servers_own_are_reported() {
        let body = read_request(serde_json::json!({
            "model": "m",
            "reasoning": {"effort": "low", "summary": "auto"},
            "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": "k",
            "client_metadata": {"session_id": "s"},
            "text": {"format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"}}},
            "conversation": "conv_1",
            "stream_options": {"include_obfuscation": false},
        }))
        .unwrap();
        let (carry, uncarried) = carry_of(&body);
        let mut keys: Vec<&str> = carry.responses.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "client_metadata",
                "include",
                "prompt_cache_key",
                "reasoning",
                "text"
            ]
        );
        assert_eq!(
            carry.responses["include"],
            serde_json::json!(["reasoning.encrypted_content"])
        );
        assert_eq!(uncarried, ["conversation", "stream_options"]);
        assert_eq!(
            carry.reasoning,
            Some(ReasoningRequest {
                effort: Some("low".into()),
                summary: Some("auto".into()),
                budget_tokens: None,
            })
        );
        assert_eq!(
            carry.output_format,
            Some(OutputFormat::JsonSchema {
                name: "answer".into(),
                description: None,
                schema: serde_json::json!({"type": "object"}),
                strict: None,
            })
        );
        // Plain text, and nothing asked, carry nothing neutral.
        let plain = read_request(serde_json::json!({"model": "m", "text": {"format": {"type": "text"}}, "reasoning": {}}))
            .unwrap();
        let (carry, uncarried) = carry_of(&plain);
        assert_eq!((carry.reasoning, carry.output_format), (None, None));
        assert!(uncarried.is_empty());
    }

    #[test]
    fn an_additional_tools_item_offers_its_tools_and_names_what_it_cannot() {
        let item = |tools: Value| {
            let item = serde_json::json!({"type": "additional_tools", "id": "at_1",
                                          "role": "developer", "tools": tools});
            typed_item(&item)
        };
        let user = typed_item(&serde_json::json!({"role": "user", "content": "hi"}));
        // Codex CLI's code mode, and what a client may get wrong.
        let codex = item(serde_json::json!([
            {"type": "namespace", "name": "functions", "description": "Codex's tools", "tools": [
                {"type": "custom", "name": "exec", "description": "Run JavaScript",
                 "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}},
                {"type": "function", "name": "wait", "parameters": {"type": "object"}},
            ]},
            {"type": "web_search"},
            {"type": "function", "name": 5},
            {"type": "shell", "environment": {"type": "container_auto"}},
            {"type": "function", "name": "lookup"},
            "not a tool",
        ]));
        let request: Vec<wire::Tool> =
            wire::from_value(serde_json::json!([{"type": "function", "name": "lookup"}])).unwrap();
        let mut tools = Tools::parse(&request).unwrap();
        let uncarried = offer_additional_tools(&mut tools, &[], &[codex.clone(), user.clone()]);
        let names: Vec<&str> = tools.functions.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["lookup", "functions__exec", "functions__wait"]);
        let exec = tools.function("functions__exec").unwrap();
        assert!(
            exec.custom.is_some(),
            "freeform: its call goes back as a custom_tool_call"
        );
        assert_eq!(exec.client_name(), ("exec", Some("functions")));
        assert_eq!(
            uncarried,
            [
                "input[0].tools[2] (function)",
                "input[0].tools[3] (shell)",
                "input[0].tools[4] (function)",
                "input[0].tools[5] (no type)",
            ]
        );
        // The hosted tool is a native one, reported by the upstream that
        // cannot carry it, named where the client wrote it.
        let carry = tools.carry(Carry::default());
        assert_eq!(
            carry.native_uncarried(shellgate_model::upstream::Protocol::Chat),
            ["input[0].tools[1] (web_search)"]
        );

        // The last item wins; one of the stored conversation counts when
        // the input has none; `tools` not a list is named whole.
        let later = item(serde_json::json!([{"type": "function", "name": "later"}]));
        let mut tools = Tools::default();
        assert!(
            offer_additional_tools(&mut tools, &[], &[codex.clone(), later.clone()]).is_empty()
        );
        let names: Vec<&str> = tools.functions.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["later"]);
        let mut tools = Tools::default();
        offer_additional_tools(&mut tools, &[later], std::slice::from_ref(&user));
        assert!(tools.function("later").is_some());
        let mut tools = Tools::default();
        assert_eq!(
            offer_additional_tools(&mut tools, &[], &[item(serde_json::json!({"a": 1}))]),
            ["input[0].tools"]
        );
        assert!(offer_additional_tools(&mut tools, &[], &[user]).is_empty());
        assert_eq!(tools, Tools::default());
    }
}
