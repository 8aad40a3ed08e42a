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
//! `auto` or `native` come back as a `bash` `tool_use` for the client to run,
//! and Anthropic's text editor tool (`text_editor_*`) as a `tool_use` of its
//! name (an Anthropic upstream gets its declaration as written, any other a
//! function of the same name and commands);
//! `openrouter:shell` and `openrouter:bash` with `engine: openrouter` run in
//! the sandbox within the request. Their calls and results come back as
//! content blocks:
//!
//! | tool | call | result |
//! |---|---|---|
//! | `openrouter:shell` | `server_tool_use` (`name: "shell"`, `input: {commands}`) | `openrouter_shell_tool_result` (`tool_use_id`, `container_id`, `content: [{stdout, stderr, outcome}]`) |
//! | `openrouter:bash`, `engine: openrouter` | `server_tool_use` (`name: "bash_code_execution"`, `input: {command}`) | `bash_code_execution_tool_result` (`tool_use_id`, `container_id`, `content: {type: "bash_code_execution_result", stdout, stderr, return_code, content: []}`; a timeout is `return_code` 124) |
//! | `code_execution_20250825`, `_20260120`, `_20260521` | `server_tool_use` (`name: "bash_code_execution"`, `input: {command}`) | `bash_code_execution_tool_result` (`tool_use_id`, `content`: the result, or an error object such as `execution_time_exceeded`) |
//! | `code_execution_20250825`, `_20260120`, `_20260521` | `server_tool_use` (`name: "text_editor_code_execution"`, `input: {command, path, ...}`) | `text_editor_code_execution_tool_result` (a view, create or str_replace result, or an error object such as `file_not_found`) |
//! | `code_execution_20250522`, `_20260120`, `_20260521` | `server_tool_use` (`name: "code_execution"`, `input: {code}`) | `code_execution_tool_result` (`content: {type: "code_execution_result", stdout, stderr, return_code, content: []}`, or an error object such as `execution_time_exceeded`) |
//!
//! A user tool whose `allowed_callers` lists the code execution's version
//! is a function of its Python cells (programmatic tool calling): a cell
//! calling it pauses (`sandboxes::paused_cells`), the response ends with a
//! `tool_use` whose `caller` names the cell's `server_tool_use`, and the
//! next request's `tool_result` blocks resume it ([`paused_cell`] reads
//! them; the loop resumes the cell before its first turn).
//!
//! Code execution's container is the request's `container` (an id, or
//! `{id}`) when it names one, else a new one. Its Python cells run in the
//! container's stateful kernel (the code interpreter's), so a variable
//! outlives the request, for the next one on the same container.
//! `bash_code_execution_tool_result` is a block the SDK knows;
//! `openrouter_shell_tool_result` is not, and the SDK keeps it as a raw
//! block (all its fields readable), as it does any block it does not know.
//! The response's `container` names the container; `usage` adds
//! `sandbox_seconds` and `server_tool_cost`. Errors use Anthropic's
//! envelope (`{"type": "error", "error": {"type", "message"}}`).
//!
//! Everything on the wire is typed (`shellgate_wire::messages`): the body
//! is deserialized into a `CreateMessage` (a field of the wrong type, or a
//! key it does not have, is a 400 naming it), its blocks become the loop's
//! items (`shellgate_wire::responses::Item`) once, in [`conversation`], and
//! the loop's output items become blocks once, in [`blocks`].

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;
use shellgate_model::run::{self, Outcome, Sandbox, Status};
use shellgate_model::tools::{
    CodeExecution, CodeExecutionVersion, Environment, Tools, BASH, CODE_EXECUTION, SHELL,
    TEXT_EDITOR_CODE_EXECUTION,
};
use shellgate_model::upstream::{
    anthropic, Carry, NativeItem, OutputFormat, Protocol, Reasoning, ReasoningRequest, Sealed,
    ToolChoice,
};
use shellgate_wire::messages::{
    self as wire, BashResult, BashToolInput, BashToolResultBlock, BashToolResultContent,
    ContentBlock, CreateMessage, Delta, ErrorKind, ErrorObject, MessageParam, Role, ShellToolInput,
    ShellToolResultBlock, StopReason, StreamEvent, TextOrBlocks, ToolUseBlock,
};
use shellgate_wire::new_id;
use shellgate_wire::responses as wire_items;
use shellgate_wire::responses::ContainerAuto;
use shellgate_wire::responses::{
    ContentPart, FunctionCall, FunctionCallOutput, InputText, Item, ItemStatus,
    Message as ItemMessage, OpenRouterBash, OpenRouterBashAction, OpenRouterShell,
    OpenRouterShellAction, OutputText, Role as ItemRole, ShellOutcome, ShellResult, TextOrJson,
    ToolOutput,
};
use shellgate_wire::{SkillEntry, SkillReference, VersionRef};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;

use crate::error::ApiError;
use crate::http::{ApiJson, Project};
use crate::sandboxes::hosted::HostedShell;
use crate::state::AppState;
use shellgate_wire::ErrorCode;

pub(crate) mod batches;

/// An error in Anthropic's envelope, with the status the SDK maps to its
/// exception classes.
fn anthropic_error(error: ApiError) -> Response {
    error.render(crate::error::Dialect::Anthropic)
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
    /// How long the run may take in all.
    deadline: std::time::Duration,
    /// What the upstream cannot carry, as the client named it.
    uncarried: Vec<String>,
}

pub async fn create(
    State(state): State<Arc<AppState>>,
    project: Result<Project, ApiError>,
    headers: HeaderMap,
    body: Result<ApiJson<Value>, ApiError>,
) -> Response {
    let prepared = async {
        let project = project?;
        let ApiJson(body) = body?;
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "The request body must be a JSON object.",
            ));
        }
        let request = CreateMessage::read(&body).map_err(|e| invalid(&e.param, e.message))?;
        let stream = request.stream.unwrap_or(false);
        Ok((prepare(&state, &project, &headers, request).await?, stream))
    }
    .await;
    let (prepared, stream) = match prepared {
        Ok(prepared) => prepared,
        Err(e) => return anthropic_error(e),
    };
    let prepared = Arc::new(prepared);
    crate::uncarried::log("messages", &prepared.model, &prepared.uncarried);
    let uncarried = crate::uncarried::header_value(&prepared.uncarried);
    let mut response = if stream {
        stream_message(state, Arc::clone(&prepared)).into_response()
    } else {
        // If the client leaves, this future is dropped, and with it the run
        // and its commands (their time until then is billed).
        let outcome = run_loop(&prepared, None).await;
        match finish(&state, &prepared, &outcome).await {
            Ok(message) => Json(message).into_response(),
            Err(e) => anthropic_error(e),
        }
    };
    if let Some(value) = uncarried {
        response
            .headers_mut()
            .insert(crate::uncarried::HEADER, value);
    }
    response
}

/// One Messages request run to its end outside an HTTP exchange (a
/// Message Batch's request): the message, or the error `POST /v1/messages`
/// would answer. It never streams.
pub(crate) async fn run_once(
    state: &Arc<AppState>,
    project: &Project,
    params: &Value,
) -> Result<wire::Message, ApiError> {
    let mut request = CreateMessage::read(params).map_err(|e| invalid(&e.param, e.message))?;
    request.stream = None;
    let prepared = prepare(state, project, &HeaderMap::new(), request).await?;
    let outcome = run_loop(&prepared, None).await;
    finish(state, &prepared, &outcome).await
}

/// `POST /v1/messages/count_tokens`: the input tokens of a request. An
/// Anthropic upstream counts them itself (the request as the loop would
/// send it, with the client's carried fields and beta header); for any
/// other upstream, or when the upstream's count fails, the answer is an
/// estimate (`Turn::estimated_input_tokens`): a client asking (Claude Code does,
/// to budget its context) always gets a number for a valid request.
pub async fn count_tokens(
    State(state): State<Arc<AppState>>,
    project: Result<Project, ApiError>,
    headers: HeaderMap,
    body: Result<ApiJson<Value>, ApiError>,
) -> Response {
    let counted = async {
        let _project = project?;
        let ApiJson(body) = body?;
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "The request body must be a JSON object.",
            ));
        }
        let request = wire::CountTokens::read(&body).map_err(|e| invalid(&e.param, e.message))?;
        let (model, upstream) = crate::turns::upstream_for(&state, Some(&request.model))?;
        let turn = counted_turn(request, &headers, upstream.protocol())?;
        let input_tokens = crate::turns::input_tokens(upstream.as_ref(), &turn, &model).await;
        Ok(wire::TokenCount { input_tokens })
    }
    .await;
    match counted {
        Ok(count) => Json(count).into_response(),
        Err(e) => anthropic_error(e),
    }
}

/// The turn a count_tokens request stands for: the one its message would
/// be (the conversation, the tools as the model sees them).
fn counted_turn(
    request: wire::CountTokens,
    headers: &HeaderMap,
    protocol: Option<Protocol>,
) -> Result<shellgate_model::upstream::Turn, ApiError> {
    // As a message's request (only generating needs `max_tokens`; the
    // upstream's count leaves it out).
    let body = CreateMessage {
        model: request.model,
        max_tokens: 1,
        messages: request.messages,
        system: request.system,
        tools: request.tools,
        tool_choice: request.tool_choice,
        stream: None,
        metadata: None,
        temperature: None,
        top_p: None,
        top_k: None,
        stop_sequences: None,
        service_tier: None,
        thinking: request.thinking,
        output_config: request.output_config,
        session_id: None,
        carried: request.carried,
    };
    let instructions = system_text(body.system.as_ref())?;
    let (kept, positions, native_tools) =
        set_apart(body.tools.as_deref().unwrap_or_default(), protocol);
    let tools = read_tools(&kept, &positions, &body)?;
    let (tool_choice, parallel) = tool_choice(&tools, body.tool_choice.as_ref())?;
    let items = conversation(&body.messages, None)?;
    let (carry, _) = carry(&body, headers, &native_tools, protocol)?;
    Ok(shellgate_model::upstream::Turn {
        model: body.model.clone(),
        messages: shellgate_model::conversation::messages(instructions.as_deref(), &items),
        // The shell's description names its container, unknown here.
        tools: tools.specs(&|_| String::new()),
        tool_choice,
        parallel_tool_calls: parallel,
        carry,
        ..Default::default()
    })
}

/// The client's `anthropic-beta` values (one header of comma-separated
/// names, or several), for an Anthropic upstream.
fn betas(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all("anthropic-beta")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .filter(|beta| !beta.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The tools kept, their indices in the request, and the tools set apart
/// with theirs.
type Split<'a> = (Vec<wire::Tool>, Vec<usize>, Vec<(usize, &'a wire::Tool)>);

/// `tools` split: the ones shellgate runs or hands back (with each one's
/// index in the request, for errors), and Anthropic's server tools
/// (`web_search_20250305` and the like, with their index), which are the
/// upstream's to run. Anthropic's text editor tool is the client's: an
/// Anthropic upstream gets its own declaration (the model knows it by
/// it), any other a function of the same name and commands.
fn set_apart(tools: &[wire::Tool], protocol: Option<Protocol>) -> Split<'_> {
    let (mut kept, mut positions, mut apart) = (Vec::new(), Vec::new(), Vec::new());
    for (index, tool) in tools.iter().enumerate() {
        let native = match tool {
            wire::Tool::Unknown(_) => true,
            wire::Tool::TextEditor(_) => protocol == Some(Protocol::Anthropic),
            // Versions of code execution not run here are the upstream's.
            wire::Tool::CodeExecution(tool) => CodeExecutionVersion::of(&tool.kind).is_none(),
            _ => false,
        };
        if native {
            apart.push((index, tool));
        } else {
            kept.push(tool.clone());
            positions.push(index);
        }
    }
    (kept, positions, apart)
}

/// `param` (`tools[i]...` of the tools kept) as the client's own index.
fn client_param(param: &str, positions: &[usize]) -> String {
    let Some(rest) = param.strip_prefix("tools[") else {
        return param.to_owned();
    };
    let Some((index, tail)) = rest.split_once(']') else {
        return param.to_owned();
    };
    match index.parse::<usize>().ok().and_then(|i| positions.get(i)) {
        Some(original) => format!("tools[{original}]{tail}"),
        None => param.to_owned(),
    }
}

/// The tools of a request (`kept` of `body`'s), read, with code
/// execution's container the request's `container` when it names one.
fn read_tools(
    kept: &[wire::Tool],
    positions: &[usize],
    body: &CreateMessage,
) -> Result<Tools, ApiError> {
    let mut tools = Tools::parse_messages(kept)
        .map_err(|e| invalid(&client_param(&e.param, positions), e.message))?;
    let paused = paused_cell(&body.messages)?;
    if paused.is_some() && tools.code_execution.is_none() {
        return Err(invalid(
            "tools",
            "the conversation's code execution waits for tool results: the request needs its \
             code execution tool among the tools, as the request that paused it had",
        ));
    }
    if let Some(CodeExecution {
        environment,
        resume,
        ..
    }) = tools.code_execution.as_mut()
    {
        let container = body.container().map_err(|e| invalid(&e.param, e.message))?;
        if paused.is_some() && container.as_ref().and_then(|c| c.id()).is_none() {
            return Err(invalid(
                "container",
                "container_id is required when there are pending tool uses generated by code \
                 execution with tools",
            ));
        }
        *resume = paused;
        if let Some(id) = container.as_ref().and_then(|c| c.id()) {
            *environment = Environment::ContainerReference(id.to_owned());
        } else if let Some(wire::ContainerParam::Params(wire::ContainerParams {
            skills: Some(skills),
            ..
        })) = &container
        {
            *environment = Environment::ContainerAuto(ContainerAuto {
                skills: Some(container_skills(skills)?),
                ..ContainerAuto::default()
            });
        }
    }
    Ok(tools)
}

/// The code execution cell the conversation leaves paused on calls of the
/// client's tools, with the client's results: the last assistant message
/// holds the `tool_use` blocks its code made (their `caller` names the
/// cell's `server_tool_use`, which has no result yet), and the last
/// message, the user's, answers them with `tool_result` blocks only (as
/// Anthropic requires: a 400 otherwise).
fn paused_cell(
    messages: &[MessageParam],
) -> Result<Option<shellgate_model::tools::PausedCell>, ApiError> {
    let Some((last, earlier)) = messages.split_last() else {
        return Ok(None);
    };
    let Some(asked) = earlier.last().filter(|m| m.role == Role::Assistant) else {
        return Ok(None);
    };
    let TextOrBlocks::Blocks(asked_blocks) = &asked.content else {
        return Ok(None);
    };
    // The calls code made, and the cell that made them.
    let mut cell: Option<&str> = None;
    let mut calls: Vec<&str> = Vec::new();
    for block in asked_blocks {
        if let ContentBlock::ToolUse(call) = block {
            if let Some(caller) = call.caller.as_ref().filter(|c| c.from_code()) {
                if let Some(tool_id) = caller.tool_id.as_deref() {
                    cell = Some(tool_id);
                    calls.push(call.id.as_str());
                }
            }
        }
    }
    let Some(cell) = cell else {
        return Ok(None);
    };
    // The cell's call, replayed (in this message, or an earlier one when
    // the cell paused more than once), and no result for it yet.
    let blocks_of = |message: &MessageParam| match &message.content {
        TextOrBlocks::Blocks(blocks) => blocks.clone(),
        TextOrBlocks::Text(_) => Vec::new(),
    };
    let all: Vec<ContentBlock> = messages.iter().flat_map(blocks_of).collect();
    let ended = all.iter().any(|block| {
        matches!(block, ContentBlock::CodeExecutionToolResult(result) if result.tool_use_id == cell)
    });
    if ended {
        return Ok(None);
    }
    let input = all
        .iter()
        .find_map(|block| match block {
            ContentBlock::ServerToolUse(call) if call.id == cell => Some(call.input.clone()),
            _ => None,
        })
        .unwrap_or_default();
    let index = messages.len() - 1;
    if last.role != Role::User {
        return Ok(None);
    }
    let mut answers = Vec::new();
    for (position, block) in blocks_of(last).into_iter().enumerate() {
        match block {
            ContentBlock::ToolResult(result) => {
                if calls.contains(&result.tool_use_id.as_str()) {
                    let content = result_text(result.content.as_ref());
                    answers.push(shellgate_model::tools::ToolAnswer {
                        call_id: result.tool_use_id,
                        content,
                        is_error: result.is_error == Some(true),
                    });
                }
            }
            other => {
                return Err(invalid(
                    &format!("messages[{index}].content[{position}].type"),
                    format!(
                        "a message answering tool calls made by code execution may hold only \
                         tool_result blocks, not '{}'",
                        other.kind()
                    ),
                ))
            }
        }
    }
    if answers.is_empty() {
        return Ok(None);
    }
    Ok(Some(shellgate_model::tools::PausedCell {
        cell: cell.to_owned(),
        input,
        answers,
    }))
}

/// `container.skills` as the skills a new container gets: a `custom`
/// skill is the project's skill of that id (`version` a number or
/// `latest`, else its default), an `anthropic` one a skill shellgate ships
/// (by its id, or by the id of Anthropic's skill it stands for: `xlsx`,
/// `docx`, `pdf`). A skill that is not there is the request's 400, naming
/// it, when the container is made ready.
fn container_skills(skills: &[wire::SkillParam]) -> Result<Vec<Value>, ApiError> {
    skills
        .iter()
        .enumerate()
        .map(|(index, skill)| {
            let at = format!("container.skills[{index}]");
            let skill_id = match skill.kind.as_str() {
                "custom" => skill.skill_id.clone(),
                "anthropic" => match shellgate_skills::Curated::find_anthropic(&skill.skill_id) {
                    Some(curated) => curated.id.to_owned(),
                    None => {
                        let shipped: Vec<String> = shellgate_skills::CURATED
                            .iter()
                            .map(|c| match c.anthropic {
                                [] => c.id.to_owned(),
                                names => format!("{} ({})", c.id, names.join(", ")),
                            })
                            .collect();
                        return Err(invalid(
                            &format!("{at}.skill_id"),
                            format!(
                                "no skill {:?}: the skills of type 'anthropic' here are {}",
                                skill.skill_id,
                                shipped.join(", ")
                            ),
                        ));
                    }
                },
                other => {
                    return Err(invalid(
                        &format!("{at}.type"),
                        format!("type must be 'custom' or 'anthropic', not {other:?}"),
                    ))
                }
            };
            let entry = SkillEntry::SkillReference(SkillReference {
                skill_id,
                version: skill.version.clone().map(VersionRef::Text),
            });
            serde_json::to_value(entry).map_err(|e| ApiError::internal(e.to_string()))
        })
        .collect()
}

/// A request's `container: {id, skills}` naming an existing container, for
/// code execution: the skills are added to that container (one already
/// there at the same version kept), so the model is told of them and finds
/// them at `/mnt/skills`. A container made without skills has nowhere they
/// can be mounted: the answer names `container.skills` as not carried.
/// An unknown container is left to the hosted shell's 404.
async fn add_container_skills(
    state: &Arc<AppState>,
    project: &str,
    tools: &Tools,
    body: &CreateMessage,
) -> Result<Option<String>, ApiError> {
    let Some(CodeExecution {
        environment: Environment::ContainerReference(id),
        ..
    }) = &tools.code_execution
    else {
        return Ok(None);
    };
    let Ok(Some(wire::ContainerParam::Params(wire::ContainerParams {
        skills: Some(skills),
        ..
    }))) = body.container()
    else {
        return Ok(None);
    };
    if skills.is_empty() {
        return Ok(None);
    }
    let entries = container_skills(&skills)?;
    let (owner, key) = (project.to_owned(), id.clone());
    let Some(row) = state.db(move |s| s.container(&owner, &key)).await? else {
        return Ok(None);
    };
    let held = crate::sandboxes::containers::mounted_skills(&row)?;
    let added = crate::sandboxes::skills::add_to_container(
        state,
        project,
        &row.id,
        held,
        &entries,
        "container.skills",
    )
    .await?;
    Ok(added
        .is_none()
        .then(|| format!("container.skills (container {id} was made without skills)")))
}

/// Whether the request's tools include the code execution shellgate runs
/// (which consumes its `container`).
fn runs_code_execution(body: &CreateMessage) -> bool {
    body.tools.iter().flatten().any(|tool| {
        matches!(tool, wire::Tool::CodeExecution(t) if CodeExecutionVersion::of(&t.kind).is_some())
    })
}

/// What a Messages request asks beyond the loop's fields, for the
/// upstream that answers it, and what of it that upstream cannot carry.
///
/// An Anthropic upstream gets every field but the loop's own
/// (`anthropic::OWN`) as the client wrote it, its `anthropic-beta` header
/// and its server tools. Another gets the nearest equivalents: `thinking`
/// (a budget: `anthropic::effort_for_budget`) or `output_config.effort` as
/// a reasoning effort, `output_config.format` as a JSON schema,
/// `stop_sequences` and `top_k` (a Chat Completions upstream has both, a
/// Responses one neither); a Responses upstream gets them as its own
/// fields (`reasoning`, `text.format`). The rest is named for the
/// `x-shellgate-uncarried` header.
fn carry(
    body: &CreateMessage,
    headers: &HeaderMap,
    native_tools: &[(usize, &wire::Tool)],
    protocol: Option<Protocol>,
) -> Result<(Carry, Vec<String>), ApiError> {
    let mut carry = Carry::default();
    let mut uncarried = Vec::new();
    if protocol == Some(Protocol::Anthropic) {
        let Ok(Value::Object(mut fields)) = serde_json::to_value(body) else {
            return Err(ApiError::internal("the request could not be written back"));
        };
        fields.retain(|key, _| !anthropic::OWN.contains(&key.as_str()));
        // The container code execution runs in is shellgate's.
        if runs_code_execution(body) {
            fields.remove("container");
        }
        // The blocks' own cache breakpoints cannot be carried (the loop's
        // conversation is text): the API's automatic caching, marked as the
        // request's last breakpoint was, keeps the prompt cached.
        if let Some(marker) = body.last_cache_control() {
            fields
                .entry(wire::CACHE_CONTROL)
                .or_insert_with(|| marker.clone());
        }
        carry.anthropic = fields;
        carry.anthropic_beta = betas(headers);
        // A user tool's own keys (`strict`, `defer_loading`...); its cache
        // breakpoint is the request's automatic one above.
        for tool in body.tools.iter().flatten() {
            if let wire::Tool::Custom(tool) = tool {
                let mut extra = tool.extra.clone();
                extra.remove(wire::CACHE_CONTROL);
                if !extra.is_empty() {
                    carry.anthropic_tool_extras.insert(tool.name.clone(), extra);
                }
            }
        }
        carry.native_tools = native_tools
            .iter()
            .filter_map(|(_, tool)| serde_json::to_value(tool).ok())
            .map(|item| NativeItem {
                protocol: Protocol::Anthropic,
                item,
            })
            .collect();
        return Ok((carry, uncarried));
    }
    for (index, tool) in native_tools {
        uncarried.push(format!(
            "tools[{index}] ({})",
            tool.kind().unwrap_or_default()
        ));
    }
    let effort = match &body.thinking {
        Some(wire::ThinkingConfig::Enabled { budget_tokens, .. }) => {
            Some(anthropic::effort_for_budget(u64::from(*budget_tokens)).to_owned())
        }
        _ => None,
    };
    let output = body.output_config.as_ref();
    // `max` is above every OpenAI level: their highest.
    let effort = output
        .and_then(|o| o.effort.clone())
        .map(|effort| {
            if effort == "max" {
                "xhigh".to_owned()
            } else {
                effort
            }
        })
        .or(effort);
    if let Some(effort) = &effort {
        carry.reasoning = Some(ReasoningRequest {
            effort: Some(effort.clone()),
            summary: None,
            budget_tokens: match &body.thinking {
                Some(wire::ThinkingConfig::Enabled { budget_tokens, .. }) => {
                    Some(u64::from(*budget_tokens))
                }
                _ => None,
            },
        });
    }
    if let Some(wire::OutputFormat::JsonSchema { schema, .. }) =
        output.and_then(|o| o.format.as_ref())
    {
        carry.output_format = Some(OutputFormat::JsonSchema {
            name: "output".into(),
            description: None,
            schema: Value::Object(schema.clone()),
            strict: None,
        });
    }
    if let Some(output) = output {
        uncarried.extend(
            output
                .extra
                .keys()
                .map(|key| format!("output_config.{key}")),
        );
    }
    carry.stop = body.stop_sequences.clone().unwrap_or_default();
    carry.top_k = body.top_k;
    if protocol == Some(Protocol::Responses) {
        let mut fields = serde_json::Map::new();
        if let Some(effort) = &effort {
            fields.insert("reasoning".into(), serde_json::json!({ "effort": effort }));
        }
        if let Some(OutputFormat::JsonSchema { name, schema, .. }) = &carry.output_format {
            fields.insert(
                "text".into(),
                serde_json::json!({"format": {"type": "json_schema", "name": name, "schema": schema}}),
            );
        }
        carry.responses = fields;
        if !carry.stop.is_empty() {
            uncarried.push("stop_sequences".into());
        }
        if carry.top_k.is_some() {
            uncarried.push("top_k".into());
        }
    }
    // Thinking switched off, or left to the model, asks nothing of another
    // protocol; a budget is carried as the effort above.
    if let Some(wire::ThinkingConfig::Adaptive { .. } | wire::ThinkingConfig::BetweenTools { .. }) =
        &body.thinking
    {
        if effort.is_none() {
            uncarried.push("thinking".into());
        }
    }
    for (key, present) in [
        ("metadata", body.metadata.is_some()),
        ("service_tier", body.service_tier.is_some()),
    ] {
        if present {
            uncarried.push(key.into());
        }
    }
    let consumed = runs_code_execution(body);
    uncarried.extend(
        body.carried
            .keys()
            .filter(|key| !(consumed && key.as_str() == "container"))
            .cloned(),
    );
    Ok((carry, uncarried))
}

/// The container a request continues, read as [`prepare`] reads it (a
/// cluster's replica routes the request by it). `None` for a request
/// `prepare` refuses (its node answers the 400).
pub(crate) fn continued(body: &CreateMessage) -> Option<crate::sandboxes::reuse::Reuse> {
    let (kept, positions, _) = set_apart(body.tools.as_deref().unwrap_or_default(), None);
    let tools = read_tools(&kept, &positions, body).ok()?;
    let items = conversation(&body.messages, None).ok()?;
    Some(crate::sandboxes::reuse::Reuse::pick(
        &tools,
        body.session_id.as_deref(),
        &items,
    ))
}

/// The cross-field and range checks a deserialized request still needs,
/// and the loop's request it becomes.
async fn prepare(
    state: &Arc<AppState>,
    project: &Project,
    headers: &HeaderMap,
    body: CreateMessage,
) -> Result<Prepared, ApiError> {
    let (model, upstream) = crate::turns::upstream_for(state, Some(&body.model))?;
    if body.max_tokens == 0 {
        return Err(invalid(
            "max_tokens",
            "max_tokens: a positive whole number is required",
        ));
    }
    let instructions = system_text(body.system.as_ref())?;
    let (kept, positions, native_tools) = set_apart(
        body.tools.as_deref().unwrap_or_default(),
        upstream.protocol(),
    );
    let mut tools = read_tools(&kept, &positions, &body)?;
    if let Some(CodeExecution {
        cell_timeout: Some(timeout),
        ..
    }) = tools.code_execution.as_mut()
    {
        *timeout =
            std::time::Duration::from_secs(state.config.model.code_execution_cell_timeout_secs);
    }
    let (carry, mut uncarried) = carry(&body, headers, &native_tools, upstream.protocol())?;
    for name in upstream.uncarried(&carry) {
        if !uncarried.contains(&name) {
            uncarried.push(name);
        }
    }
    let (tool_choice, parallel) = tool_choice(&tools, body.tool_choice.as_ref())?;
    let uploaded = container_uploads(&body.messages);
    let mut uploads = None;
    let mut upload_rows = Vec::new();
    if runs_code_execution(&body) {
        for (param, id) in &uploaded {
            let (owner, key) = (project.0.clone(), id.clone());
            let row = state.db(move |s| s.file(&owner, &key)).await?;
            upload_rows.push(row.ok_or_else(|| {
                let mut error = ApiError::not_found("file", id);
                error.param = Some(format!("{param}.file_id"));
                error
            })?);
        }
        uploads = Some(
            upload_rows
                .iter()
                .map(|row| (row.id.clone(), upload_path(&row.filename)))
                .collect::<HashMap<_, _>>(),
        );
    } else {
        uncarried.extend(
            uploaded
                .iter()
                .map(|(param, _)| format!("{param} (container_upload)")),
        );
    }
    let items = conversation(&body.messages, uploads.as_ref())?;
    let (items, instructions, tools) =
        crate::guardrails::guard_request(&state.guardrails, &project.0, items, instructions, tools)
            .await?;
    let id = new_id("msg_");
    if let Some(dropped) = add_container_skills(state, &project.0, &tools, &body).await? {
        uncarried.push(dropped);
    }
    let reuse = crate::sandboxes::reuse::Reuse::pick(&tools, body.session_id.as_deref(), &items);
    let hosted = crate::sandboxes::hosted::prepare(state, &project.0, &tools, reuse, &id)
        .await
        .map_err(|mut e| {
            // Code execution's skills are the request's `container.skills`.
            if let Some(param) = &e.param {
                if let Some(rest) = param.strip_prefix("tools.environment.skills") {
                    e.param = Some(format!("container.skills{rest}"));
                }
            }
            e
        })?;
    if let Some(sandbox) = &hosted.sandbox {
        sandbox.upload(upload_rows);
    }
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
            temperature: body.temperature,
            top_p: body.top_p,
            max_output_tokens: Some(body.max_tokens),
            parallel_tool_calls: parallel,
            environment_description: hosted.description,
            carry,
            output_guardrail: state
                .guardrails
                .for_project(&project.0, crate::guardrails::Target::ToolOutput),
            max_answer_bytes: usize::try_from(state.config.model.upstream_max_answer_bytes)
                .unwrap_or(usize::MAX),
        },
        upstream,
        sandbox: hosted.sandbox,
        deadline: std::time::Duration::from_secs(state.config.model.response_timeout_secs),
        uncarried,
    })
}

/// The `container_upload` blocks of users' messages: each one's param
/// (`messages[i].content[j]`) and file id.
fn container_uploads(messages: &[MessageParam]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        if message.role != Role::User {
            continue;
        }
        if let TextOrBlocks::Blocks(blocks) = &message.content {
            for (position, block) in blocks.iter().enumerate() {
                if let ContentBlock::ContainerUpload(upload) = block {
                    found.push((
                        format!("messages[{index}].content[{position}]"),
                        upload.file_id.clone(),
                    ));
                }
            }
        }
    }
    found
}

/// Where a `container_upload`'s file is put: the container's input
/// directory, `/mnt/data` (the working directory of its commands and
/// cells), under the file's name.
fn upload_path(filename: &str) -> String {
    format!(
        "{}/{}",
        crate::sandboxes::interpreting::WORKDIR,
        crate::sandboxes::files::safe_file_name(filename)
    )
}

/// The text of `system`: a string or text blocks.
fn system_text(system: Option<&TextOrBlocks>) -> Result<Option<String>, ApiError> {
    match system {
        None => Ok(None),
        Some(TextOrBlocks::Text(text)) => Ok(Some(text.clone())),
        Some(TextOrBlocks::Blocks(blocks)) => blocks
            .iter()
            .enumerate()
            .map(|(index, block)| match block {
                ContentBlock::Text(text) => Ok(text.text.clone()),
                _ => Err(invalid(
                    &format!("system[{index}]"),
                    "system blocks must be text blocks",
                )),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|texts| Some(texts.join("\n"))),
    }
}

/// `tool_choice` (`auto`, `any`, `tool` with a `name`, `none`;
/// `disable_parallel_tool_use`) as the loop's choice.
fn tool_choice(
    tools: &Tools,
    choice: Option<&wire::ToolChoice>,
) -> Result<(ToolChoice, Option<bool>), ApiError> {
    let Some(choice) = choice else {
        return Ok((ToolChoice::Auto, None));
    };
    let parallel = choice.disable_parallel_tool_use().map(|disabled| !disabled);
    let kind = match choice {
        wire::ToolChoice::Auto(_) => ToolChoice::Auto,
        wire::ToolChoice::Any(_) => ToolChoice::Required,
        wire::ToolChoice::None {} => ToolChoice::None,
        wire::ToolChoice::Tool { name, .. } => {
            let present = match name.as_str() {
                SHELL => tools.shell.is_some(),
                BASH => tools.bash.is_some(),
                _ => tools.functions.iter().any(|f| &f.name == name),
            };
            if !present {
                return Err(invalid(
                    "tool_choice.name",
                    format!("tool_choice names '{name}', which is not among the tools"),
                ));
            }
            ToolChoice::Named(name.clone())
        }
    };
    Ok((kind, parallel))
}

/// The text of a `tool_result`'s `content`: a string or blocks.
fn result_text(content: Option<&TextOrBlocks>) -> String {
    match content {
        Some(TextOrBlocks::Text(text)) => text.clone(),
        Some(TextOrBlocks::Blocks(blocks)) => blocks
            .iter()
            .map(|block| match block {
                ContentBlock::Text(text) => text.text.clone(),
                ContentBlock::Image(_) => "[an image was attached; it cannot be shown]".to_owned(),
                _ => String::new(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        None => String::new(),
    }
}

/// `value`, which must not be empty (an id), or a 400 naming it.
fn required(value: &str, param: &str, key: &str) -> Result<String, ApiError> {
    if value.is_empty() {
        return Err(invalid(
            &format!("{param}.{key}"),
            format!("{key}: Field required"),
        ));
    }
    Ok(value.to_owned())
}

/// A text part of a message of `role`, as the loop's items write it.
fn text_part(role: Role, text: String) -> ContentPart {
    match role {
        Role::Assistant => ContentPart::OutputText(OutputText {
            text,
            annotations: None,
            extra: Default::default(),
        }),
        Role::User => ContentPart::InputText(InputText {
            text,
            extra: Default::default(),
        }),
    }
}

/// The conversation of `messages`, as the loop's items: text (and what
/// stands for an image or a document) becomes messages, `tool_use` and
/// `tool_result` function calls and their outputs, a server tool's call
/// and result block the one item they were. A `container_upload` tells
/// the model where its file is in the container (`uploads`: file id →
/// path, when code execution runs here; otherwise it is left out, and
/// named as not carried by [`container_uploads`]' caller).
fn conversation(
    messages: &[MessageParam],
    uploads: Option<&HashMap<String, String>>,
) -> Result<Vec<Item>, ApiError> {
    if messages.is_empty() {
        return Err(invalid(
            "messages",
            "messages: a non-empty array is required",
        ));
    }
    let mut items = Vec::new();
    // Server tool calls, by id, until their result block comes.
    let mut calls: HashMap<String, ToolUseBlock> = HashMap::new();
    // The ids of the calls code made of the client's tools.
    let mut from_code: std::collections::HashSet<String> = std::collections::HashSet::new();
    for (index, message) in messages.iter().enumerate() {
        let param = format!("messages[{index}]");
        let role = message.role;
        let role_name = match role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        let mut parts: Vec<ContentPart> = Vec::new();
        let flush = |parts: &mut Vec<ContentPart>, items: &mut Vec<Item>| {
            if !parts.is_empty() {
                items.push(Item::Message(ItemMessage {
                    id: None,
                    role: match role {
                        Role::User => ItemRole::User,
                        Role::Assistant => ItemRole::Assistant,
                    },
                    status: None,
                    content: shellgate_wire::responses::MessageContent::Parts(std::mem::take(
                        parts,
                    )),
                    extra: Default::default(),
                }));
            }
        };
        for (position, block) in message
            .content
            .clone()
            .into_blocks()
            .into_iter()
            .enumerate()
        {
            let param = format!("{param}.content[{position}]");
            match block {
                ContentBlock::Text(text) => parts.push(text_part(role, text.text)),
                ContentBlock::Image(_) => parts.push(text_part(
                    role,
                    "[image attached; it cannot be shown]".to_owned(),
                )),
                ContentBlock::Document(_) => parts.push(text_part(
                    role,
                    "[document attached; it cannot be shown]".to_owned(),
                )),
                ContentBlock::ContainerUpload(upload) if role == Role::User => {
                    if let Some(uploads) = uploads {
                        let path = uploads.get(&upload.file_id).map_or_else(
                            || format!("{}/", crate::sandboxes::interpreting::WORKDIR),
                            String::clone,
                        );
                        parts.push(text_part(
                            role,
                            format!(
                                "[file {} uploaded to the code execution container: {path}]",
                                upload.file_id
                            ),
                        ));
                    }
                }
                // Kept in place, for the upstream that made it (an
                // Anthropic one checks its signature).
                ContentBlock::Thinking(thinking) if role == Role::Assistant => {
                    flush(&mut parts, &mut items);
                    items.push(reasoning_item(Reasoning {
                        id: None,
                        summary: Vec::new(),
                        text: thinking.thinking,
                        sealed: thinking.signature.map(Sealed::AnthropicSignature),
                    }));
                }
                ContentBlock::RedactedThinking(redacted) if role == Role::Assistant => {
                    flush(&mut parts, &mut items);
                    items.push(reasoning_item(Reasoning {
                        id: None,
                        summary: Vec::new(),
                        text: String::new(),
                        sealed: Some(Sealed::AnthropicRedacted(redacted.data)),
                    }));
                }
                // A call code made (programmatic tool calling) and its
                // result are the paused cell's, not the model's: the model
                // reads the cell's output (`paused_cell`).
                ContentBlock::ToolUse(call)
                    if role == Role::Assistant
                        && call
                            .caller
                            .as_ref()
                            .is_some_and(wire::ToolCaller::from_code) =>
                {
                    from_code.insert(call.id);
                }
                ContentBlock::ToolResult(result)
                    if role == Role::User && from_code.contains(&result.tool_use_id) => {}
                ContentBlock::ToolUse(call) if role == Role::Assistant => {
                    flush(&mut parts, &mut items);
                    items.push(Item::FunctionCall(FunctionCall {
                        id: None,
                        call_id: Some(required(&call.id, &param, "id")?),
                        name: call.name,
                        namespace: None,
                        arguments: Value::Object(call.input).to_string(),
                        status: Some(ItemStatus::Completed),
                        extra: Default::default(),
                    }));
                }
                // OpenRouter's server tools' calls wait for their result
                // block: the two are one item.
                ContentBlock::ServerToolUse(call)
                    if role == Role::Assistant
                        && matches!(
                            call.name.as_str(),
                            "shell"
                                | "bash_code_execution"
                                | "text_editor_code_execution"
                                | "code_execution"
                        ) =>
                {
                    flush(&mut parts, &mut items);
                    calls.insert(required(&call.id, &param, "id")?, call);
                }
                // Anthropic's server tools' blocks (`web_search`...): kept
                // whole, in place, for an Anthropic upstream.
                block @ (ContentBlock::ServerToolUse(_)
                | ContentBlock::ContainerUpload(_)
                | ContentBlock::Unknown(_))
                    if role == Role::Assistant && wire::is_server_tool_block(block.kind()) =>
                {
                    flush(&mut parts, &mut items);
                    if let Ok(Value::Object(raw)) = serde_json::to_value(&block) {
                        items.push(Item::Other(raw));
                    }
                }
                ContentBlock::OpenrouterShellToolResult(result) => {
                    flush(&mut parts, &mut items);
                    let call_id = required(&result.tool_use_id, &param, "tool_use_id")?;
                    let input: ShellToolInput = calls
                        .remove(&call_id)
                        .and_then(|call| call.input_as())
                        .unwrap_or_default();
                    items.push(Item::OpenRouterShell(OpenRouterShell {
                        id: None,
                        call_id: Some(call_id),
                        container_id: result.container_id,
                        action: OpenRouterShellAction {
                            commands: input.commands,
                            extra: Default::default(),
                        },
                        output: result.content,
                        status: Some(ItemStatus::Completed),
                        extra: Default::default(),
                    }));
                }
                ContentBlock::BashCodeExecutionToolResult(result) => {
                    flush(&mut parts, &mut items);
                    let call_id = required(&result.tool_use_id, &param, "tool_use_id")?;
                    let input: BashToolInput = calls
                        .remove(&call_id)
                        .and_then(|call| call.input_as())
                        .unwrap_or_default();
                    let (stdout, stderr, exit_code) = match result.content {
                        BashToolResultContent::BashCodeExecutionResult(done) => {
                            (done.stdout, done.stderr, done.return_code)
                        }
                        BashToolResultContent::BashCodeExecutionToolResultError(_) => {
                            (String::new(), String::new(), None)
                        }
                    };
                    items.push(Item::OpenRouterBash(OpenRouterBash {
                        id: None,
                        call_id: Some(call_id),
                        container_id: result.container_id,
                        action: OpenRouterBashAction {
                            command: input.command.unwrap_or_default(),
                            restart: input.restart.unwrap_or(false),
                            extra: Default::default(),
                        },
                        output: Some(ShellResult {
                            stdout: TextOrJson::Text(stdout),
                            stderr: TextOrJson::Text(stderr),
                            outcome: Some(ShellOutcome::Exit {
                                exit_code,
                                extra: Default::default(),
                            }),
                            extra: Default::default(),
                        }),
                        status: Some(ItemStatus::Completed),
                        extra: Default::default(),
                    }));
                }
                ContentBlock::TextEditorCodeExecutionToolResult(result) => {
                    flush(&mut parts, &mut items);
                    let call_id = required(&result.tool_use_id, &param, "tool_use_id")?;
                    let input = calls.remove(&call_id).map(|call| call.input);
                    items.push(Item::CodeExecutionCall(wire_items::CodeExecutionCall {
                        id: None,
                        call_id: Some(call_id),
                        container_id: None,
                        name: TEXT_EDITOR_CODE_EXECUTION.to_owned(),
                        input: input.unwrap_or_default(),
                        result: Some(wire::CodeExecutionResult::TextEditor(result.content)),
                        status: Some(ItemStatus::Completed),
                        extra: Default::default(),
                    }));
                }
                ContentBlock::CodeExecutionToolResult(result) => {
                    flush(&mut parts, &mut items);
                    let call_id = required(&result.tool_use_id, &param, "tool_use_id")?;
                    let input = calls.remove(&call_id).map(|call| call.input);
                    items.push(Item::CodeExecutionCall(wire_items::CodeExecutionCall {
                        id: None,
                        call_id: Some(call_id),
                        container_id: None,
                        name: CODE_EXECUTION.to_owned(),
                        input: input.unwrap_or_default(),
                        result: Some(wire::CodeExecutionResult::Python(result.content)),
                        status: Some(ItemStatus::Completed),
                        extra: Default::default(),
                    }));
                }
                ContentBlock::ToolResult(result) if role == Role::User => {
                    flush(&mut parts, &mut items);
                    let mut output = result_text(result.content.as_ref());
                    if result.is_error == Some(true) {
                        output = format!("Error: {output}");
                    }
                    items.push(Item::FunctionCallOutput(FunctionCallOutput {
                        id: None,
                        call_id: Some(required(&result.tool_use_id, &param, "tool_use_id")?),
                        output: ToolOutput::Text(output),
                        status: None,
                        extra: Default::default(),
                    }));
                }
                other => {
                    return Err(invalid(
                        &format!("{param}.type"),
                        format!(
                            "a {role_name} message cannot hold a '{}' block here",
                            other.kind()
                        ),
                    ))
                }
            }
        }
        flush(&mut parts, &mut items);
    }
    Ok(items)
}

/// The exit code a command's outcome stands for (a timeout: 124, as
/// `timeout(1)` reports it).
fn return_code(outcome: Option<&ShellOutcome>) -> Option<i64> {
    match outcome {
        Some(ShellOutcome::Timeout { .. }) => Some(124),
        Some(ShellOutcome::Exit { exit_code, .. }) => *exit_code,
        None => None,
    }
}

/// A command's stdout or stderr as text (JSON, as written, if a client
/// replayed something else there).
fn text_of(output: &TextOrJson) -> String {
    match output {
        TextOrJson::Text(text) => text.clone(),
        TextOrJson::Json(value) => value.to_string(),
    }
}

/// The text of an output message: its text and refusal parts.
fn message_text(message: &ItemMessage) -> String {
    match &message.content {
        shellgate_wire::responses::MessageContent::Text(text) => text.clone(),
        shellgate_wire::responses::MessageContent::Parts(parts) => parts
            .iter()
            .filter_map(|part| match part {
                ContentPart::OutputText(p) => Some(p.text.clone()),
                ContentPart::InputText(p) => Some(p.text.clone()),
                ContentPart::Refusal(p) => Some(p.refusal.clone()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

/// A server tool's call block.
fn server_call(call_id: &str, name: &str, input: serde_json::Map<String, Value>) -> ContentBlock {
    ContentBlock::ServerToolUse(ToolUseBlock {
        id: call_id.to_owned(),
        name: name.to_owned(),
        input,
        caller: None,
        extra: Default::default(),
    })
}

/// A reasoning as the loop's item.
fn reasoning_item(reasoning: Reasoning) -> Item {
    Item::Reasoning(shellgate_model::reasoning::to_item(&reasoning))
}

/// The block a reasoning item is: Anthropic's `thinking` (its signature)
/// or `redacted_thinking`; reasoning of another protocol has no signature
/// a client could replay, and becomes no block.
fn thinking_block(item: &wire_items::Reasoning) -> Option<ContentBlock> {
    let reasoning = shellgate_model::reasoning::from_item(item);
    match reasoning.sealed {
        Some(Sealed::AnthropicSignature(signature)) => {
            Some(ContentBlock::Thinking(wire::ThinkingBlock {
                thinking: reasoning.text,
                signature: Some(signature),
                extra: Default::default(),
            }))
        }
        Some(Sealed::AnthropicRedacted(data)) => Some(ContentBlock::RedactedThinking(
            wire::RedactedThinkingBlock {
                data,
                extra: Default::default(),
            },
        )),
        Some(Sealed::OpenAi(_)) | None => None,
    }
}

/// The content blocks an output item of the loop becomes.
fn blocks(item: &Item) -> Vec<ContentBlock> {
    match item {
        Item::Reasoning(reasoning) => thinking_block(reasoning).into_iter().collect(),
        // An Anthropic upstream's server tool block, as it gave it.
        Item::Other(raw) if wire::holds_server_tool_block(raw) => {
            serde_json::from_value(Value::Object(raw.clone()))
                .map(|block| vec![block])
                .unwrap_or_default()
        }
        Item::Message(message) => {
            let text = message_text(message);
            if text.is_empty() {
                Vec::new()
            } else {
                vec![ContentBlock::text(text)]
            }
        }
        Item::FunctionCall(call) => {
            // Arguments that are not a JSON object (a model's slip) are no input.
            let input = serde_json::from_str(&call.arguments).unwrap_or_default();
            vec![ContentBlock::ToolUse(ToolUseBlock {
                id: call.call_id.clone().unwrap_or_default(),
                name: call.name.clone(),
                input,
                caller: caller_of(call),
                extra: Default::default(),
            })]
        }
        Item::OpenRouterShell(shell) => {
            let call_id = shell.call_id.clone().unwrap_or_default();
            let input = ShellToolInput {
                commands: shell.action.commands.clone(),
            };
            vec![
                server_call(&call_id, "shell", wire::input_of(&input)),
                ContentBlock::OpenrouterShellToolResult(ShellToolResultBlock {
                    tool_use_id: call_id,
                    container_id: shell.container_id.clone(),
                    content: shell.output.clone(),
                    extra: Default::default(),
                }),
            ]
        }
        Item::OpenRouterBash(bash) => {
            let call_id = bash.call_id.clone().unwrap_or_default();
            let input = if bash.action.restart {
                BashToolInput {
                    command: None,
                    restart: Some(true),
                }
            } else {
                BashToolInput {
                    command: Some(bash.action.command.clone()),
                    restart: None,
                }
            };
            let (stdout, stderr, outcome) = match &bash.output {
                Some(output) => (
                    text_of(&output.stdout),
                    text_of(&output.stderr),
                    output.outcome.as_ref(),
                ),
                // Still running (a call's block, given before its result).
                None => (String::new(), String::new(), None),
            };
            vec![
                server_call(&call_id, "bash_code_execution", wire::input_of(&input)),
                ContentBlock::BashCodeExecutionToolResult(BashToolResultBlock {
                    tool_use_id: call_id,
                    container_id: bash.container_id.clone(),
                    content: BashToolResultContent::BashCodeExecutionResult(BashResult {
                        return_code: return_code(outcome),
                        stdout,
                        stderr,
                        content: Vec::new(),
                        extra: Default::default(),
                    }),
                    extra: Default::default(),
                }),
            ]
        }
        Item::CodeExecutionCall(call) => {
            let call_id = call.call_id.clone().unwrap_or_default();
            let mut blocks = vec![server_call(&call_id, &call.name, call.input.clone())];
            match &call.result {
                Some(wire::CodeExecutionResult::Bash(content)) => blocks.push(
                    ContentBlock::BashCodeExecutionToolResult(BashToolResultBlock {
                        tool_use_id: call_id,
                        container_id: None,
                        content: content.clone(),
                        extra: Default::default(),
                    }),
                ),
                Some(wire::CodeExecutionResult::TextEditor(content)) => {
                    blocks.push(ContentBlock::TextEditorCodeExecutionToolResult(
                        wire::TextEditorToolResultBlock {
                            tool_use_id: call_id,
                            content: content.clone(),
                            extra: Default::default(),
                        },
                    ))
                }
                Some(wire::CodeExecutionResult::Python(content)) => blocks.push(
                    ContentBlock::CodeExecutionToolResult(wire::PythonToolResultBlock {
                        tool_use_id: call_id,
                        content: content.clone(),
                        extra: Default::default(),
                    }),
                ),
                // Still running: its call alone.
                None => {}
            }
            blocks
        }
        _ => Vec::new(),
    }
}

/// A function call's `caller`: the code execution and cell whose code
/// made it (programmatic tool calling), kept on the loop's item.
fn caller_of(call: &FunctionCall) -> Option<wire::ToolCaller> {
    /// The item's keys beside its own, as far as they name a caller.
    #[derive(serde::Deserialize)]
    struct Called {
        caller: Option<wire::ToolCaller>,
    }
    serde_json::from_value::<Called>(Value::Object(call.extra.clone()))
        .ok()
        .and_then(|called| called.caller)
}

/// The blocks an output item becomes in this response: the call of the
/// paused cell it resumes (`resumed`) was in the earlier response, so its
/// result comes alone, as Anthropic's does.
fn message_blocks(item: &Item, resumed: Option<&str>) -> Vec<ContentBlock> {
    let blocks = blocks(item);
    match item {
        Item::CodeExecutionCall(call)
            if resumed.is_some() && call.call_id.as_deref() == resumed =>
        {
            blocks.into_iter().skip(1).collect()
        }
        _ => blocks,
    }
}

/// The paused cell a request resumes, if any.
fn resumed_cell(prepared: &Prepared) -> Option<&str> {
    prepared
        .request
        .tools
        .code_execution
        .as_ref()
        .and_then(|execution| execution.resume.as_ref())
        .map(|paused| paused.cell.as_str())
}

/// Why the model stopped, in Anthropic's words.
fn stop_reason(outcome: &Outcome, output: &[Item]) -> StopReason {
    match &outcome.status {
        Status::Incomplete("max_output_tokens") => StopReason::MaxTokens,
        Status::Incomplete("content_filter") => StopReason::Refusal,
        // The server tools' calls reached their limit: the client may
        // send the conversation again to go on.
        Status::Incomplete(_) => StopReason::PauseTurn,
        // A call for the client ends the loop: whatever else ran in the same
        // turn, the client has a tool_use to answer.
        _ if output
            .iter()
            .any(|item| matches!(item, Item::FunctionCall(_))) =>
        {
            StopReason::ToolUse
        }
        _ => StopReason::EndTurn,
    }
}

/// Runs the loop, within the same overall deadline as a Responses API
/// response (`response_timeout_secs`).
async fn run_loop(prepared: &Prepared, events: Option<&run::EventSink>) -> Outcome {
    let sandbox = prepared.sandbox.as_deref().map(|s| s as &dyn Sandbox);
    crate::turns::run_within(
        prepared.deadline,
        prepared.upstream.as_ref(),
        sandbox,
        &prepared.request,
        events,
    )
    .await
}

/// The usage object: tokens, and the sandbox's seconds and cost.
fn usage(state: &AppState, prepared: &Prepared, outcome: &Outcome) -> wire::Usage {
    let seconds = prepared
        .sandbox
        .as_ref()
        .map(|s| s.billed_seconds())
        .unwrap_or(0.0);
    wire::Usage {
        input_tokens: outcome.usage.input_tokens,
        output_tokens: outcome.usage.output_tokens,
        sandbox_seconds: Some(seconds),
        server_tool_cost: Some(seconds * state.config.sandbox.sandbox_price_per_second),
        ..Default::default()
    }
}

/// The response's `container`: its id, when it expires and the skills
/// loaded in it.
async fn container(state: &AppState, prepared: &Prepared) -> Option<wire::Container> {
    let id = prepared.sandbox.as_ref()?.container_id().await?;
    let (owner, key) = (prepared.project.clone(), id.clone());
    let row = state
        .db(move |s| s.container(&owner, &key))
        .await
        .ok()
        .flatten();
    let expires_at = row
        .as_ref()
        .map(|r| r.last_active_at + i64::from(r.expires_minutes) * 60)
        .map(shellgate_wire::time::rfc3339);
    let skills = row
        .as_ref()
        .and_then(|r| crate::sandboxes::containers::mounted_skills(r).ok())
        .map(|held| loaded_skills(&held))
        .filter(|loaded| !loaded.is_empty());
    Some(wire::Container {
        id,
        expires_at,
        skills,
        extra: Default::default(),
    })
}

/// A container's skills as a response lists them: a skill shellgate ships
/// is of type `anthropic`, the project's `custom`; an inline one (no id,
/// which Anthropic's `container.skills` cannot name) is left out.
fn loaded_skills(held: &[shellgate_wire::MountedSkill]) -> Vec<wire::ContainerSkill> {
    held.iter()
        .filter_map(|skill| {
            let skill_id = skill.skill_id.clone()?;
            let kind = match shellgate_skills::Curated::find(&skill_id) {
                Some(_) => "anthropic",
                None => "custom",
            };
            Some(wire::ContainerSkill {
                skill_id,
                kind: kind.to_owned(),
                version: skill.version.clone().unwrap_or_else(|| "latest".to_owned()),
            })
        })
        .collect()
}

/// Records the tokens and turns an outcome into the Message object (or the
/// error a failed run is).
async fn finish(
    state: &AppState,
    prepared: &Prepared,
    outcome: &Outcome,
) -> Result<wire::Message, ApiError> {
    let (project, model, tokens) = (
        prepared.project.clone(),
        prepared.model.clone(),
        outcome.usage,
    );
    if let Err(e) = state
        .db(move |s| s.record_tokens(&project, &model, tokens.input_tokens, tokens.output_tokens))
        .await
    {
        tracing::error!("could not record token usage: {}", e.message);
    }
    if let Status::Failed { code, message } = &outcome.status {
        return Err(failure(code, message));
    }
    let output = &outcome.output;
    Ok(wire::Message {
        id: prepared.id.clone(),
        kind: wire::MessageKind::Message,
        role: wire::AssistantRole::Assistant,
        model: prepared.model.clone(),
        content: output
            .iter()
            .flat_map(|item| message_blocks(item, resumed_cell(prepared)))
            .collect(),
        stop_reason: Some(stop_reason(outcome, output)),
        stop_sequence: None,
        usage: usage(state, prepared, outcome),
        container: Some(container(state, prepared).await),
        extra: Default::default(),
    })
}

/// The error a failed run is: a rate limit (upstream or quota) is a 429,
/// anything else a 500.
fn failure(code: &str, message: &str) -> ApiError {
    if code == "rate_limit_exceeded" {
        ApiError::quota(ErrorCode::RateLimitExceeded, message.to_owned())
    } else {
        ApiError::internal(message.to_owned())
    }
}

/// One SSE event in Anthropic's form: `event:` is the data's `type`.
fn sse(event: &StreamEvent) -> Event {
    let data = serde_json::to_string(event).unwrap_or_default();
    Event::default().event(event.kind()).data(data)
}

/// The last events of a stream: `message_delta` and `message_stop`, or an
/// `error`.
fn closing_events(end: Result<wire::Message, ApiError>) -> Vec<Event> {
    match end {
        Ok(message) => vec![
            sse(&StreamEvent::MessageDelta {
                delta: wire::MessageDelta {
                    stop_reason: message.stop_reason,
                    stop_sequence: None,
                    container: message.container.flatten(),
                    extra: Default::default(),
                },
                usage: wire::DeltaUsage {
                    input_tokens: Some(message.usage.input_tokens),
                    output_tokens: message.usage.output_tokens,
                    sandbox_seconds: message.usage.sandbox_seconds,
                    server_tool_cost: message.usage.server_tool_cost,
                    ..Default::default()
                },
            }),
            sse(&StreamEvent::MessageStop),
        ],
        Err(error) => {
            let kind = if error.status() == StatusCode::TOO_MANY_REQUESTS {
                ErrorKind::RateLimitError
            } else {
                ErrorKind::ApiError
            };
            vec![sse(&StreamEvent::Error {
                error: ErrorObject::new(kind, error.message),
            })]
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
    let _ = tx.send(sse(&StreamEvent::MessageStart {
        message: wire::Message {
            id: prepared.id.clone(),
            kind: wire::MessageKind::Message,
            role: wire::AssistantRole::Assistant,
            model: prepared.model.clone(),
            content: Vec::new(),
            stop_reason: None,
            stop_sequence: None,
            usage: wire::Usage::default(),
            container: None,
            extra: Default::default(),
        },
    }));
    let _ = tx.send(sse(&StreamEvent::Ping));
    let task = tokio::spawn(async move {
        let (events, mut loop_events) = tokio::sync::mpsc::unbounded_channel();
        let forward = {
            let tx = tx.clone();
            let resumed = resumed_cell(&prepared).map(str::to_owned);
            async move {
                let mut blocks = BlockIndex {
                    resumed,
                    ..BlockIndex::default()
                };
                while let Some(event) = loop_events.recv().await {
                    for event in blocks.translate(event) {
                        let _ = tx.send(sse(&event));
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
    let guard = crate::turns::AbortOnDrop(Some(task));
    let body = UnboundedReceiverStream::new(rx).map(move |event| {
        let _keep = &guard;
        Ok::<_, Infallible>(event)
    });
    Sse::new(body).keep_alive(crate::http::sse_keep_alive())
}

/// Numbers content blocks as they open: an output item of the loop is one
/// block (text, `tool_use`) or two (a server tool's call and result).
#[derive(Default)]
struct BlockIndex {
    next: usize,
    /// The paused cell the request resumes: its call is not told again.
    resumed: Option<String>,
    /// The block each open item (by output index) streams into.
    open: HashMap<usize, usize>,
}

impl BlockIndex {
    fn take(&mut self) -> usize {
        self.next += 1;
        self.next - 1
    }

    /// The block that opens at `index` of the output, streamed into.
    fn open(&mut self, index: usize, content_block: ContentBlock) -> Vec<StreamEvent> {
        let block = self.take();
        self.open.insert(index, block);
        vec![StreamEvent::ContentBlockStart {
            index: block,
            content_block,
        }]
    }

    /// A delta of the block open at `index` of the output.
    fn delta(&self, index: usize, delta: Delta) -> Vec<StreamEvent> {
        match self.open.get(&index) {
            Some(&block) => vec![StreamEvent::ContentBlockDelta {
                index: block,
                delta,
            }],
            None => Vec::new(),
        }
    }

    fn translate(&mut self, event: run::Event) -> Vec<StreamEvent> {
        use run::Event as E;
        match event {
            E::ItemAdded { index, item } => match item {
                Item::Message(_) => self.open(index, ContentBlock::text("")),
                Item::FunctionCall(call) => self.open(
                    index,
                    ContentBlock::ToolUse(ToolUseBlock {
                        caller: caller_of(&call),
                        id: call.call_id.unwrap_or_default(),
                        name: call.name,
                        input: Default::default(),
                        extra: Default::default(),
                    }),
                ),
                // A server tool's call opens when its commands start; its
                // result follows when they are done.
                // A thinking block is given whole when it is done.
                Item::Reasoning(_) => Vec::new(),
                // Code execution's call streams as Anthropic's does: its
                // input as one JSON delta.
                Item::CodeExecutionCall(call)
                    if call.call_id.is_some() && call.call_id == self.resumed =>
                {
                    Vec::new()
                }
                Item::CodeExecutionCall(call) => {
                    let block = self.take();
                    let input = Value::Object(call.input.clone()).to_string();
                    vec![
                        StreamEvent::ContentBlockStart {
                            index: block,
                            content_block: server_call(
                                &call.call_id.unwrap_or_default(),
                                &call.name,
                                Default::default(),
                            ),
                        },
                        StreamEvent::ContentBlockDelta {
                            index: block,
                            delta: Delta::InputJsonDelta {
                                partial_json: input,
                            },
                        },
                        StreamEvent::ContentBlockStop { index: block },
                    ]
                }
                item @ (Item::OpenRouterShell(_) | Item::OpenRouterBash(_)) => blocks(&item)
                    .into_iter()
                    .take(1)
                    .flat_map(|call| self.whole(call))
                    .collect(),
                _ => Vec::new(),
            },
            E::TextDelta { index, delta, .. } => {
                self.delta(index, Delta::TextDelta { text: delta })
            }
            E::Arguments {
                index, arguments, ..
            } => self.delta(
                index,
                Delta::InputJsonDelta {
                    partial_json: arguments,
                },
            ),
            E::ItemDone { index, item } => {
                if let Some(block) = self.open.remove(&index) {
                    return vec![StreamEvent::ContentBlockStop { index: block }];
                }
                if let Item::Reasoning(reasoning) = &item {
                    return thinking_block(reasoning)
                        .map(|block| self.thinking(block))
                        .unwrap_or_default();
                }
                if let Item::Other(_) = &item {
                    return blocks(&item)
                        .into_iter()
                        .flat_map(|block| self.whole(block))
                        .collect();
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

    /// A thinking block as Anthropic streams one: it starts empty, its
    /// text and signature come as deltas (the SDK's accumulator builds the
    /// block from them).
    fn thinking(&mut self, content_block: ContentBlock) -> Vec<StreamEvent> {
        let block = self.take();
        let (start, deltas) = match content_block {
            ContentBlock::Thinking(thinking) => {
                let mut deltas = Vec::new();
                if !thinking.thinking.is_empty() {
                    deltas.push(Delta::ThinkingDelta {
                        thinking: thinking.thinking,
                    });
                }
                if let Some(signature) = thinking.signature {
                    deltas.push(Delta::SignatureDelta { signature });
                }
                let start = ContentBlock::Thinking(wire::ThinkingBlock {
                    thinking: String::new(),
                    signature: Some(String::new()),
                    extra: thinking.extra,
                });
                (start, deltas)
            }
            other => (other, Vec::new()),
        };
        let mut events = vec![StreamEvent::ContentBlockStart {
            index: block,
            content_block: start,
        }];
        events.extend(
            deltas
                .into_iter()
                .map(|delta| StreamEvent::ContentBlockDelta {
                    index: block,
                    delta,
                }),
        );
        events.push(StreamEvent::ContentBlockStop { index: block });
        events
    }

    /// A block given whole at its start (a server tool's call or result).
    fn whole(&mut self, content_block: ContentBlock) -> [StreamEvent; 2] {
        let block = self.take();
        [
            StreamEvent::ContentBlockStart {
                index: block,
                content_block,
            },
            StreamEvent::ContentBlockStop { index: block },
        ]
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// `messages` read as a request's (so a block of the wrong shape fails
    /// as it would there).
    fn typed_conversation(messages: Value) -> Result<Vec<Item>, ApiError> {
        let messages: Vec<MessageParam> = shellgate_wire::param::parse(&messages)
            .map_err(|e| invalid(&format!("messages{}", e.param), e.message))?;
        conversation(&messages, None)
    }

    /// The items as JSON, to look at.
    fn conversation_of(messages: Value) -> Result<Vec<Value>, ApiError> {
        typed_conversation(messages).map(|items| values(&items))
    }
    fn values(items: &[Item]) -> Vec<Value> {
        items
            .iter()
            .map(|item| serde_json::to_value(item).unwrap())
            .collect()
    }

    fn item(value: Value) -> Item {
        serde_json::from_value(value).unwrap()
    }

    fn json_of(blocks: &[ContentBlock]) -> Vec<Value> {
        blocks
            .iter()
            .map(|b| serde_json::to_value(b).unwrap())
            .collect()
    }

    #[test]
    fn a_conversation_with_every_block_becomes_items() {
        let typed = typed_conversation(json!([
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
        ]))
        .unwrap();
        let items = values(&typed);
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
        assert_eq!(items[0]["content"][0]["type"], "input_text");
        assert_eq!(items[1]["content"][0]["type"], "output_text");
        assert_eq!(items[2]["action"]["commands"], json!(["ls"]));
        assert_eq!(items[2]["container_id"], "cntr_1");
        assert_eq!(items[2]["output"][0]["stdout"], "a\n");
        assert_eq!(items[3]["arguments"], r#"{"command":"pwd"}"#);
        assert_eq!(items[4]["output"], "/home");
        assert_eq!(
            crate::sandboxes::reuse::replayed_container(&typed).as_deref(),
            Some("cntr_1")
        );
        // A bash server tool's call and result are the one item they were.
        let bash = conversation_of(json!([{"role": "assistant", "content": [
            {"type": "server_tool_use", "id": "srv2", "name": "bash_code_execution", "input": {"command": "id"}},
            {"type": "bash_code_execution_tool_result", "tool_use_id": "srv2", "container_id": "cntr_2",
             "content": {"type": "bash_code_execution_result", "stdout": "x", "stderr": "", "return_code": 3, "content": []}}
        ]}]))
        .unwrap();
        assert_eq!(bash[0]["type"], "openrouter:bash");
        assert_eq!(
            bash[0]["action"],
            json!({"command": "id", "restart": false})
        );
        assert_eq!(
            bash[0]["output"]["outcome"],
            json!({"type": "exit", "exit_code": 3})
        );
        let param = |messages: Value| conversation_of(messages).unwrap_err().param;
        assert_eq!(param(json!([])).as_deref(), Some("messages"));
        assert_eq!(
            param(json!([{"role": "system", "content": "x"}])).as_deref(),
            Some("messages[0].role")
        );
        assert_eq!(
            param(
                json!([{"role": "user", "content": [{"type": "tool_use", "id": "x", "name": "f"}]}])
            )
            .as_deref(),
            Some("messages[0].content[0].type")
        );
        assert_eq!(
            param(json!([{"role": "assistant", "content": [{"type": "tool_use", "id": "", "name": "f"}]}]))
                .as_deref(),
            Some("messages[0].content[0].id")
        );
        assert_eq!(
            param(json!([{"role": "user", "content": [{"type": "web_search_tool_result"}]}]))
                .as_deref(),
            Some("messages[0].content[0].type")
        );
    }

    #[test]
    fn server_tool_items_become_call_and_result_blocks() {
        let shell = json_of(&blocks(&item(json!({
            "type": "openrouter:shell", "call_id": "c1", "container_id": "cntr_1",
            "action": {"commands": ["true"]},
            "output": [{"stdout": "", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
        }))));
        assert_eq!(shell[0]["type"], "server_tool_use");
        assert_eq!(shell[0]["input"], json!({"commands": ["true"]}));
        assert_eq!(shell[1]["type"], "openrouter_shell_tool_result");
        assert_eq!(shell[1]["tool_use_id"], "c1");
        assert_eq!(shell[1]["content"][0]["outcome"]["exit_code"], 0);
        let bash = json_of(&blocks(&item(json!({
            "type": "openrouter:bash", "call_id": "c2", "container_id": "cntr_1",
            "action": {"command": "sleep 9", "restart": false},
            "output": {"stdout": "x", "stderr": "", "outcome": {"type": "timeout"}},
        }))));
        assert_eq!(bash[0]["name"], "bash_code_execution");
        assert_eq!(bash[0]["input"], json!({"command": "sleep 9"}));
        assert_eq!(bash[1]["content"]["return_code"], 124);
        assert_eq!(bash[1]["content"]["content"], json!([]));
        // A client call beside a server tool's in the last turn: the client
        // still has a tool_use to answer.
        let output = vec![
            item(
                json!({"type": "function_call", "call_id": "c3", "name": "lookup", "arguments": "{}"}),
            ),
            item(json!({"type": "openrouter:shell", "call_id": "c4", "action": {"commands": []}})),
        ];
        let typed = output.clone();
        let outcome = Outcome {
            output,
            usage: Default::default(),
            status: Status::Completed,
            tool_calls: 1,
        };
        assert_eq!(stop_reason(&outcome, &typed), StopReason::ToolUse);
        assert_eq!(
            shellgate_wire::time::rfc3339(1_796_083_200),
            "2026-12-01T00:00:00Z"
        );
        assert_eq!(
            shellgate_wire::time::rfc3339(951_782_400),
            "2000-02-29T00:00:00Z"
        );
    }

    #[test]
    fn streamed_items_open_and_close_their_blocks() {
        let mut index = BlockIndex::default();
        let kinds = |events: Vec<StreamEvent>| -> Vec<String> {
            events.iter().map(|e| e.kind().to_owned()).collect()
        };
        let message = item(json!({"type": "message", "role": "assistant", "content": []}));
        assert_eq!(
            kinds(index.translate(run::Event::ItemAdded {
                index: 0,
                item: message.clone()
            })),
            ["content_block_start"]
        );
        let delta = index.translate(run::Event::TextDelta {
            index: 0,
            item_id: "m".into(),
            delta: "hi".into(),
        });
        assert_eq!(
            serde_json::to_value(&delta[0]).unwrap(),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}})
        );
        assert_eq!(
            kinds(index.translate(run::Event::ItemDone {
                index: 0,
                item: message
            })),
            ["content_block_stop"]
        );
        let shell = item(
            json!({"type": "openrouter:shell", "call_id": "c1", "action": {"commands": ["ls"]}, "output": []}),
        );
        let opened = index.translate(run::Event::ItemAdded {
            index: 1,
            item: shell.clone(),
        });
        assert_eq!(
            kinds(opened.clone()),
            ["content_block_start", "content_block_stop"]
        );
        assert!(matches!(
            opened[0],
            StreamEvent::ContentBlockStart { index: 1, .. }
        ));
        let done = index.translate(run::Event::ItemDone {
            index: 1,
            item: shell,
        });
        assert!(matches!(
            &done[0],
            StreamEvent::ContentBlockStart {
                index: 2,
                content_block: ContentBlock::OpenrouterShellToolResult(_)
            }
        ));
    }

    fn request(body: Value) -> CreateMessage {
        CreateMessage::read(&body).unwrap()
    }

    #[test]
    fn code_execution_calls_are_anthropic_blocks_and_replay_as_they_were() {
        let edit = item(json!({
            "type": "code_execution_call", "call_id": "srvtoolu_1", "container_id": "cntr_1",
            "name": "text_editor_code_execution", "input": {"command": "view", "path": "a.txt"},
            "result": {"type": "text_editor_code_execution_tool_result_error",
                       "error_code": "file_not_found", "error_message": "File not found: a.txt"},
        }));
        let written = json_of(&blocks(&edit));
        assert_eq!(
            written[0],
            json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "text_editor_code_execution",
                   "input": {"command": "view", "path": "a.txt"}})
        );
        assert_eq!(
            written[1],
            json!({"type": "text_editor_code_execution_tool_result", "tool_use_id": "srvtoolu_1",
                   "content": {"type": "text_editor_code_execution_tool_result_error",
                               "error_code": "file_not_found", "error_message": "File not found: a.txt"}})
        );
        // Replayed, the two blocks are the call and its result again.
        let replayed =
            typed_conversation(json!([{"role": "assistant", "content": written}])).unwrap();
        let Item::CodeExecutionCall(call) = &replayed[0] else {
            panic!("{replayed:?}")
        };
        assert_eq!(call.input["path"], "a.txt");
        assert!(call.result.is_some());
        let bash = item(json!({
            "type": "code_execution_call", "call_id": "srvtoolu_2", "name": "bash_code_execution",
            "input": {"command": "sleep 9"},
            "result": {"type": "bash_code_execution_tool_result_error", "error_code": "execution_time_exceeded"},
        }));
        let written = json_of(&blocks(&bash));
        assert_eq!(
            written[1],
            json!({"type": "bash_code_execution_tool_result", "tool_use_id": "srvtoolu_2",
                   "content": {"type": "bash_code_execution_tool_result_error",
                               "error_code": "execution_time_exceeded"}})
        );
        // Streamed: the call starts empty, its input one JSON delta.
        let mut index = BlockIndex::default();
        let started = index.translate(run::Event::ItemAdded {
            index: 0,
            item: bash,
        });
        let started: Vec<Value> = started
            .iter()
            .map(|e| serde_json::to_value(e).unwrap())
            .collect();
        assert_eq!(started[0]["content_block"]["input"], json!({}));
        assert_eq!(
            started[1]["delta"],
            json!({"type": "input_json_delta", "partial_json": r#"{"command":"sleep 9"}"#})
        );
        assert_eq!(started[2]["type"], "content_block_stop");
    }

    #[test]
    fn a_python_cell_is_a_code_execution_tool_result_and_replays_as_it_was() {
        let cell = item(json!({
            "type": "code_execution_call", "call_id": "srvtoolu_3", "name": "code_execution",
            "input": {"code": "print(6 * 7)"},
            "result": {"type": "code_execution_result", "stdout": "42\n", "stderr": "",
                       "return_code": 0, "content": []},
        }));
        let written = json_of(&blocks(&cell));
        assert_eq!(
            written[0],
            json!({"type": "server_tool_use", "id": "srvtoolu_3", "name": "code_execution",
                   "input": {"code": "print(6 * 7)"}})
        );
        assert_eq!(
            written[1],
            json!({"type": "code_execution_tool_result", "tool_use_id": "srvtoolu_3",
                   "content": {"type": "code_execution_result", "stdout": "42\n", "stderr": "",
                               "return_code": 0, "content": []}})
        );
        let replayed =
            typed_conversation(json!([{"role": "assistant", "content": written}])).unwrap();
        let (Item::CodeExecutionCall(again), Item::CodeExecutionCall(cell)) = (&replayed[0], &cell)
        else {
            panic!("{replayed:?}")
        };
        assert_eq!(
            (&again.name, &again.input, &again.result),
            (&cell.name, &cell.input, &cell.result)
        );
        let body = request(json!({"model": "m", "max_tokens": 5, "messages": [],
            "tools": [{"type": "code_execution_20250522", "name": "code_execution"}]}));
        let (kept, positions, native) = set_apart(body.tools.as_deref().unwrap(), None);
        assert!(native.is_empty());
        let tools = read_tools(&kept, &positions, &body).unwrap();
        assert!(tools.hosted("code_execution") && !tools.hosted("bash_code_execution"));
    }

    #[test]
    fn code_execution_consumes_the_container_and_other_requests_carry_it() {
        let headers = HeaderMap::new();
        let running = request(json!({"model": "m", "max_tokens": 5, "messages": [],
            "container": "cntr_7", "tools": [{"type": "code_execution_20250825", "name": "code_execution"}]}));
        let (kept, positions, native) = set_apart(running.tools.as_deref().unwrap(), None);
        assert!(native.is_empty());
        let tools = read_tools(&kept, &positions, &running).unwrap();
        assert_eq!(
            tools.code_execution.map(|c| c.environment),
            Some(Environment::ContainerReference("cntr_7".into()))
        );
        let (to_anthropic, _) = carry(&running, &headers, &[], Some(Protocol::Anthropic)).unwrap();
        assert!(!to_anthropic.anthropic.contains_key("container"));
        let (_, uncarried) = carry(&running, &headers, &[], Some(Protocol::Chat)).unwrap();
        assert!(uncarried.is_empty(), "{uncarried:?}");
        // Without code execution run here, `container` is Anthropic's.
        let other = request(json!({"model": "m", "max_tokens": 5, "messages": [],
            "container": {"id": "container_x"},
            "tools": [{"type": "code_execution_20240101", "name": "code_execution"}]}));
        let (_, _, native) = set_apart(other.tools.as_deref().unwrap(), None);
        assert_eq!(native.len(), 1);
        let (to_anthropic, _) =
            carry(&other, &headers, &native, Some(Protocol::Anthropic)).unwrap();
        assert_eq!(
            to_anthropic.anthropic["container"],
            json!({"id": "container_x"})
        );
        let (_, uncarried) = carry(&other, &headers, &native, Some(Protocol::Chat)).unwrap();
        assert_eq!(
            uncarried,
            ["tools[0] (code_execution_20240101)", "container"]
        );
    }

    #[test]
    fn each_upstream_protocol_gets_what_it_can_carry_and_the_rest_is_named() {
        let body = request(json!({
            "model": "m", "max_tokens": 8000, "session_id": "s1",
            "messages": [{"role": "user", "content": "hi"}],
            "thinking": {"type": "enabled", "budget_tokens": 2048, "display": "omitted"},
            "context_management": {"edits": []},
            "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
            "metadata": {"user_id": "u"},
            "top_k": 3, "stop_sequences": ["END"],
            "tools": [{"name": "f", "input_schema": {}}, {"type": "web_search_20250305", "name": "web_search"}]
        }));
        let mut headers = HeaderMap::new();
        headers.append("anthropic-beta", "a-1, b-2".parse().unwrap());
        headers.append("anthropic-beta", "c-3".parse().unwrap());
        let tools = body.tools.clone().unwrap();
        let (_, positions, native) = set_apart(&tools, Some(Protocol::Chat));
        assert_eq!(positions, [0]);
        assert_eq!(
            client_param("tools[0].input_schema", &[2]),
            "tools[2].input_schema"
        );

        let (carry_a, uncarried) =
            carry(&body, &headers, &native, Some(Protocol::Anthropic)).unwrap();
        assert!(uncarried.is_empty());
        let keys: Vec<&str> = carry_a.anthropic.keys().map(String::as_str).collect();
        for key in [
            "thinking",
            "context_management",
            "output_config",
            "metadata",
            "top_k",
            "stop_sequences",
        ] {
            assert!(keys.contains(&key), "{key} in {keys:?}");
        }
        for key in ["model", "messages", "max_tokens", "tools", "session_id"] {
            assert!(!keys.contains(&key), "{key} in {keys:?}");
        }
        assert_eq!(carry_a.anthropic["thinking"]["display"], "omitted");
        assert!(!carry_a.anthropic.contains_key("cache_control"));
        let tooled = request(json!({"model": "m", "max_tokens": 5, "messages": [],
            "tools": [{"name": "Deferred", "input_schema": {}, "defer_loading": true,
                       "cache_control": {"type": "ephemeral"}}]}));
        let (carry_t, _) = carry(&tooled, &headers, &[], Some(Protocol::Anthropic)).unwrap();
        assert_eq!(
            carry_t.anthropic_tool_extras["Deferred"],
            json!({"defer_loading": true}).as_object().unwrap().clone()
        );
        // A block's cache breakpoint becomes the request's automatic one.
        let cached = request(json!({"model": "m", "max_tokens": 5,
            "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}}, {"type": "text", "text": "b"}]}]}));
        let (carry_c, _) = carry(&cached, &headers, &[], Some(Protocol::Anthropic)).unwrap();
        assert_eq!(
            carry_c.anthropic["cache_control"],
            json!({"type": "ephemeral"})
        );
        assert_eq!(carry_a.anthropic_beta, ["a-1", "b-2", "c-3"]);
        assert_eq!(carry_a.native_tools[0].item["type"], "web_search_20250305");

        let (chat, uncarried) = carry(&body, &headers, &native, Some(Protocol::Chat)).unwrap();
        assert_eq!(
            chat.reasoning.as_ref().and_then(|r| r.effort.as_deref()),
            Some("low")
        );
        assert_eq!(
            chat.reasoning.as_ref().and_then(|r| r.budget_tokens),
            Some(2048)
        );
        assert!(matches!(
            chat.output_format,
            Some(OutputFormat::JsonSchema { .. })
        ));
        assert_eq!(
            (chat.stop.as_slice(), chat.top_k),
            (&["END".to_owned()][..], Some(3))
        );
        assert!(chat.anthropic.is_empty() && chat.anthropic_beta.is_empty());
        assert_eq!(
            uncarried,
            [
                "tools[1] (web_search_20250305)",
                "metadata",
                "context_management"
            ]
        );

        let (responses, uncarried) =
            carry(&body, &headers, &native, Some(Protocol::Responses)).unwrap();
        assert_eq!(responses.responses["reasoning"], json!({"effort": "low"}));
        assert_eq!(responses.responses["text"]["format"]["type"], "json_schema");
        assert!(uncarried.contains(&"top_k".to_owned()));
        assert!(uncarried.contains(&"stop_sequences".to_owned()));
        // An effort of its own wins over the budget's; `max` is OpenAI's highest.
        let adaptive = request(json!({"model": "m", "max_tokens": 5, "messages": [],
            "thinking": {"type": "adaptive"}, "output_config": {"effort": "max"}}));
        let (chat, uncarried) = carry(&adaptive, &headers, &[], Some(Protocol::Chat)).unwrap();
        assert_eq!(
            chat.reasoning.and_then(|r| r.effort).as_deref(),
            Some("xhigh")
        );
        assert!(uncarried.is_empty());
    }

    #[test]
    fn thinking_blocks_become_reasoning_items_and_back() {
        let typed = typed_conversation(json!([
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Hm.", "signature": "sig"},
                {"type": "redacted_thinking", "data": "red"},
                {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
            ]}
        ]))
        .unwrap();
        let items = values(&typed);
        assert_eq!(items[1]["type"], "reasoning");
        assert_eq!(items[1]["encrypted_content"], "anthropic-signature:sig");
        assert_eq!(items[1]["content"][0]["text"], "Hm.");
        assert_eq!(items[2]["encrypted_content"], "anthropic-redacted:red");
        assert_eq!(items[3]["type"], "function_call");
        let back: Vec<Value> = typed.iter().flat_map(|i| json_of(&blocks(i))).collect();
        assert_eq!(
            back[1],
            json!({"type": "thinking", "thinking": "Hm.", "signature": "sig"})
        );
        assert_eq!(back[2], json!({"type": "redacted_thinking", "data": "red"}));
        // OpenAI's reasoning has nothing a Messages client could replay.
        let openai = item(json!({"type": "reasoning", "summary": [], "encrypted_content": "gAAA"}));
        assert!(blocks(&openai).is_empty());
        // Streamed: empty at its start, its text and signature as deltas.
        let mut index = BlockIndex::default();
        let events = index.translate(run::Event::ItemDone {
            index: 0,
            item: typed[1].clone(),
        });
        let written: Vec<Value> = events
            .iter()
            .map(|e| serde_json::to_value(e).unwrap())
            .collect();
        assert_eq!(
            written[0]["content_block"],
            json!({"type": "thinking", "thinking": "", "signature": ""})
        );
        assert_eq!(
            written[1]["delta"],
            json!({"type": "thinking_delta", "thinking": "Hm."})
        );
        assert_eq!(
            written[2]["delta"],
            json!({"type": "signature_delta", "signature": "sig"})
        );
        assert_eq!(written[3]["type"], "content_block_stop");
        // Anthropic's server tools' blocks are kept whole, in place, and
        // given back as they were.
        let typed = typed_conversation(json!([{"role": "assistant", "content": [
            {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {"query": "q"}},
            {"type": "web_search_tool_result", "tool_use_id": "srv_1", "content": []},
            {"type": "text", "text": "Found."}
        ]}]))
        .unwrap();
        let items = values(&typed);
        assert_eq!(
            (items[0]["type"].as_str(), items[1]["type"].as_str()),
            (Some("server_tool_use"), Some("web_search_tool_result"))
        );
        assert_eq!(
            json_of(&blocks(&typed[1])),
            [json!({"type": "web_search_tool_result", "tool_use_id": "srv_1", "content": []})]
        );
        let messages = shellgate_model::conversation::messages(None, &typed);
        assert!(
            matches!(&messages[0], shellgate_model::upstream::Message::Native(n) if n.protocol == Protocol::Anthropic)
        );
        // A user's message holds no thinking.
        let error = conversation_of(json!([{"role": "user", "content": [
            {"type": "thinking", "thinking": "x", "signature": "s"}]}]))
        .unwrap_err();
        assert_eq!(error.param.as_deref(), Some("messages[0].content[0].type"));
    }
}
