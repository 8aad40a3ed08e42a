//! Google's Gemini API over any upstream: `POST
//! /{v1,v1beta}/models/{model}:generateContent`, `:streamGenerateContent`
//! (`?alt=sse`: an event stream of `GenerateContentResponse` chunks),
//! `:countTokens`, and `GET /v1beta/models[/{model}]`, for the
//! `google-genai` SDKs and Gemini CLI given shellgate's base URL.
//!
//! A request becomes the neutral turn (`translate`), asked of the upstream
//! the model names; its answer becomes a candidate's parts (text, the
//! model's thoughts when `includeThoughts` asks, `functionCall`s with their
//! ids for the client to answer with `functionResponse`s). Errors are in
//! Google's envelope (`error::Dialect::Google`).
//!
//! `tools: [{"codeExecution": {}}]` offers the model a Python tool that
//! shellgate runs, in one request, turn after turn, as Google does: each
//! call's code runs on a container's kernel (`sandboxes::interpreting`,
//! the code interpreter's: admitted, billed and audited as an exec), for at
//! most Google's documented 30 seconds, and is answered with an
//! `executableCode` part, a `codeExecutionResult` part (`OUTCOME_OK`,
//! `OUTCOME_FAILED` with the traceback, `OUTCOME_DEADLINE_EXCEEDED`) and
//! the figures it showed as `inlineData` `image/png` parts. Google's tool
//! keeps nothing between requests, and neither does a request here by
//! default (a new container); shellgate's extension is the request header
//! `x-shellgate-container: cntr_...`, which runs the code in that container
//! of the project, its kernel's variables kept. Every answer that ran code
//! names its container in the same response header.
//!
//! The key is the project's shellgate key, as Google's SDKs send theirs:
//! `x-goog-api-key`, or `?key=` (a Bearer key works too).

mod translate;

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::Value;
use shellgate_model::run::Sandbox as _;
use shellgate_model::upstream::{Delta, Finish, Message, Turn, Upstream, Usage};
use shellgate_wire::gemini::{
    Blob, Candidate, CodeExecutionResult, Content, CountTokensRequest, CountTokensResponse,
    ExecutableCode, FinishReason, FunctionCall, GenerateContentRequest, GenerateContentResponse,
    ListModelsResponse, Model, Outcome, Part, UsageMetadata,
};
use shellgate_wire::{new_id, ErrorCode};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;

use crate::error::{ApiError, ApiResult};
use crate::http::{ApiJson, Project};
use crate::sandboxes::hosted::HostedShell;
use crate::state::AppState;
use crate::turns::upstream_error;
use translate::{Translated, CODE_TOOL};

/// Google's documented limit on one run of code.
pub(crate) const CODE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Most model turns one request takes while the model runs code (Google's
/// model retries failing code up to 5 times; this bounds a model that never
/// stops).
const MAX_TURNS: usize = 12;

/// What Gemini's clients may call on a model.
const METHODS: &[&str] = &["generateContent", "streamGenerateContent", "countTokens"];

/// The project of a Gemini request's key: `x-goog-api-key`, `?key=`, or
/// what every other route takes.
pub(crate) struct GoogleProject(String);

/// The query of a Gemini call: `alt=sse` asks a stream as events; `key`
/// is the API key.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct GoogleQuery {
    alt: Option<String>,
    key: Option<String>,
}

impl FromRequestParts<Arc<AppState>> for GoogleProject {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, ApiError> {
        let header = parts
            .headers
            .get(shellgate_wire::gemini::API_KEY_HEADER)
            .and_then(|value| value.to_str().ok())
            .map(str::trim)
            .filter(|key| !key.is_empty())
            .map(str::to_owned);
        let query = || {
            Query::<GoogleQuery>::try_from_uri(&parts.uri)
                .ok()
                .and_then(|Query(query)| query.key)
                .filter(|key| !key.is_empty())
        };
        match header.or_else(query) {
            Some(key) => {
                let client = crate::http::client_address(parts);
                let Project(project) = crate::http::project_of_key(state, &key, client).await?;
                Ok(GoogleProject(project))
            }
            None => Project::from_request_parts(parts, state)
                .await
                .map(|Project(project)| GoogleProject(project)),
        }
    }
}

/// A model as Gemini's clients list it.
fn model(id: &str) -> Model {
    Model {
        name: format!("models/{id}"),
        base_model_id: Some(id.to_owned()),
        version: None,
        display_name: id.to_owned(),
        description: None,
        input_token_limit: None,
        output_token_limit: None,
        supported_generation_methods: METHODS.iter().map(|m| (*m).to_owned()).collect(),
    }
}

/// `GET /v1beta/models`: the models the upstreams list.
pub(crate) async fn list_models(
    State(state): State<Arc<AppState>>,
    _project: GoogleProject,
) -> ApiResult<Json<ListModelsResponse>> {
    let listing = state.models.listing(&state.upstreams).await;
    Ok(Json(ListModelsResponse {
        models: listing.models.iter().map(|m| model(&m.id)).collect(),
        next_page_token: None,
    }))
}

/// `GET /v1beta/models/{model}`: a listed model, or one an upstream serves.
pub(crate) async fn get_model(
    State(state): State<Arc<AppState>>,
    _project: GoogleProject,
    Path(id): Path<String>,
) -> ApiResult<Json<Model>> {
    let listing = state.models.listing(&state.upstreams).await;
    if listing.models.iter().any(|m| m.id == id) || state.upstreams.pick(&id).is_ok() {
        return Ok(Json(model(&id)));
    }
    Err(ApiError::of(
        ErrorCode::ModelNotFound,
        format!("models/{id} is not found."),
    ))
}

/// `POST .../models/{model}:{method}`: the method after the colon.
pub(crate) async fn call(
    State(state): State<Arc<AppState>>,
    GoogleProject(project): GoogleProject,
    Path(name): Path<String>,
    Query(query): Query<GoogleQuery>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<Response> {
    let Some((model, method)) = name.rsplit_once(':') else {
        return Err(ApiError::of(
            ErrorCode::UnknownUrl,
            format!(
                "POST models/{name}: name a method after the model (models/{name}:generateContent)"
            ),
        ));
    };
    let model = model.strip_prefix("models/").unwrap_or(model);
    match method {
        "generateContent" => generate(state, project, model, &headers, &body, Mode::Whole).await,
        "streamGenerateContent" => {
            let mode = match query.alt.as_deref() {
                Some("sse") => Mode::Events,
                _ => Mode::Array,
            };
            generate(state, project, model, &headers, &body, mode).await
        }
        "countTokens" => count_tokens(state, model, &body).await,
        other => Err(ApiError::of(
            ErrorCode::UnknownUrl,
            format!(
                "The method '{other}' is not served here: {} are.",
                METHODS.join(", ")
            ),
        )),
    }
}

/// How an answer is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// One `GenerateContentResponse`.
    Whole,
    /// `streamGenerateContent` without `alt=sse`: a JSON array of chunks.
    Array,
    /// `alt=sse`: each chunk an event.
    Events,
}

fn read(body: &Value) -> ApiResult<GenerateContentRequest> {
    shellgate_wire::param::parse(body).map_err(|e| ApiError::invalid(e.param, e.message))
}

/// The request's answer: its model turns and the code it ran.
async fn generate(
    state: Arc<AppState>,
    project: String,
    model: &str,
    headers: &HeaderMap,
    body: &Value,
    mode: Mode,
) -> ApiResult<Response> {
    let request = read(body)?;
    if request.contents.is_empty() {
        return Err(ApiError::invalid(
            "contents",
            "contents is not specified: give at least one content",
        ));
    }
    let (model, upstream) = crate::turns::upstream_for(&state, Some(model))?;
    let Translated {
        mut turn,
        mut uncarried,
        code_execution,
        include_thoughts,
    } = translate::turn_of(&request, &model)?;
    guard(&state, &project, &mut turn).await?;
    for name in upstream.uncarried(&turn.carry) {
        if !uncarried.contains(&name) {
            uncarried.push(name);
        }
    }
    crate::uncarried::log("gemini.generateContent", &model, &uncarried);
    let id = new_id("gen_");
    let sandbox = if code_execution {
        Some(sandbox(&state, &project, headers, &id).await?)
    } else {
        None
    };
    // A stream's headers go first: the container it will use is known
    // before (made now if the request names none).
    if mode == Mode::Events {
        if let Some(sandbox) = &sandbox {
            sandbox
                .container()
                .await
                .map_err(|e| ApiError::of(ErrorCode::Internal, e.message))?;
        }
    }
    let run = Run {
        state: Arc::clone(&state),
        project,
        model,
        id,
        upstream,
        sandbox,
        include_thoughts,
        deadline: std::time::Duration::from_secs(state.config.model.response_timeout_secs),
    };
    let container = match &run.sandbox {
        Some(sandbox) if mode == Mode::Events => sandbox.container_id().await,
        _ => None,
    };
    let mut response = match mode {
        Mode::Events => run.stream(turn).into_response(),
        Mode::Whole | Mode::Array => {
            let (answer, container) = run.whole(turn).await?;
            let mut response = match mode {
                Mode::Array => Json(vec![answer]).into_response(),
                _ => Json(answer).into_response(),
            };
            if let Some(value) = container.and_then(|id| HeaderValue::from_str(&id).ok()) {
                response
                    .headers_mut()
                    .insert(shellgate_wire::gemini::CONTAINER_HEADER, value);
            }
            response
        }
    };
    if let Some(value) = container.and_then(|id| HeaderValue::from_str(&id).ok()) {
        response
            .headers_mut()
            .insert(shellgate_wire::gemini::CONTAINER_HEADER, value);
    }
    if let Some(value) = crate::uncarried::header_value(&uncarried) {
        response
            .headers_mut()
            .insert(crate::uncarried::HEADER, value);
    }
    Ok(response)
}

/// The container the request's code runs in: the one `x-shellgate-container`
/// names (the project's, else a 404), else a new one made at the first
/// call; through the sandbox service's hosted container, as the code
/// interpreter's.
async fn sandbox(
    state: &Arc<AppState>,
    project: &str,
    headers: &HeaderMap,
    request: &str,
) -> ApiResult<Arc<HostedShell>> {
    use shellgate_wire::responses::{CodeInterpreterContainer, CodeInterpreterTool, Tool};
    let named = headers
        .get(shellgate_wire::gemini::CONTAINER_HEADER)
        .map(|value| {
            value.to_str().map(|id| id.trim().to_owned()).map_err(|_| {
                ApiError::invalid(
                    shellgate_wire::gemini::CONTAINER_HEADER,
                    "the header must be a container id",
                )
            })
        })
        .transpose()?
        .filter(|id| !id.is_empty());
    let container = CodeInterpreterContainer::Id(named.unwrap_or_else(|| "auto".to_owned()));
    let tool = Tool::CodeInterpreter(CodeInterpreterTool {
        container: Some(container),
        extra: Default::default(),
    });
    let tools = shellgate_model::tools::Tools::parse(&[tool])
        .map_err(|e| ApiError::invalid(shellgate_wire::gemini::CONTAINER_HEADER, e.message))?;
    let reuse = crate::sandboxes::reuse::Reuse::pick(&tools, None, &[]);
    let hosted = crate::sandboxes::hosted::prepare(state, project, &tools, reuse, request).await?;
    hosted
        .sandbox
        .ok_or_else(|| ApiError::internal("code execution has no sandbox"))
}

/// Checks the texts the model will read (system, user and tool messages)
/// against the project's input guardrails, on a blocking thread: a block
/// is refused, a redaction rewrites the text.
async fn guard(state: &AppState, project: &str, turn: &mut Turn) -> ApiResult<()> {
    let target = crate::guardrails::Target::Input;
    if state.guardrails.for_project(project, target).is_none() {
        return Ok(());
    }
    let (guardrails, owner) = (Arc::clone(&state.guardrails), project.to_owned());
    let mut messages = std::mem::take(&mut turn.messages);
    let messages = tokio::task::spawn_blocking(move || {
        for message in &mut messages {
            let text = match message {
                Message::System(text) | Message::User(text) => text,
                Message::Tool { output, .. } => output,
                _ => continue,
            };
            *text = guardrails.guard_text(&owner, "input", text)?;
        }
        Ok::<_, ApiError>(messages)
    })
    .await
    .map_err(|e| ApiError::internal(format!("guardrail: {e}")))??;
    turn.messages = messages;
    Ok(())
}

/// `:countTokens`: the upstream's count where its protocol has one, else
/// an estimate (a quarter of the bytes the model would read).
async fn count_tokens(state: Arc<AppState>, model: &str, body: &Value) -> ApiResult<Response> {
    let request: CountTokensRequest =
        shellgate_wire::param::parse(body).map_err(|e| ApiError::invalid(e.param, e.message))?;
    let (model, upstream) = crate::turns::upstream_for(&state, Some(model))?;
    let request = match request.generate_content_request {
        Some(whole) => whole,
        None => GenerateContentRequest {
            contents: request.contents.unwrap_or_default(),
            ..Default::default()
        },
    };
    let turn = translate::turn_of(&request, &model)?.turn;
    let total_tokens = crate::turns::input_tokens(upstream.as_ref(), &turn, &model).await;
    Ok(Json(CountTokensResponse { total_tokens }).into_response())
}

/// The arguments of a call of the code tool.
#[derive(Debug, Deserialize)]
struct CodeArguments {
    #[serde(default)]
    code: String,
}

/// One request's run: the upstream's turns, and the code the model asks
/// run between them.
struct Run {
    state: Arc<AppState>,
    project: String,
    model: String,
    id: String,
    upstream: Arc<dyn Upstream>,
    sandbox: Option<Arc<HostedShell>>,
    include_thoughts: bool,
    deadline: std::time::Duration,
}

/// What a run gave: its parts in order, why it ended, its tokens.
#[derive(Debug, Default)]
struct Ran {
    parts: Vec<Part>,
    finish: Option<FinishReason>,
    usage: Usage,
}

/// Where a streamed run's parts go as they are made (`None`: gathered).
type PartSink = tokio::sync::mpsc::UnboundedSender<Part>;

impl Run {
    /// The whole answer, and the container its code ran in.
    async fn whole(self, turn: Turn) -> ApiResult<(GenerateContentResponse, Option<String>)> {
        let ran = self.within(turn, None).await?;
        let container = match &self.sandbox {
            Some(sandbox) => sandbox.container_id().await,
            None => None,
        };
        self.bill(ran.usage).await;
        Ok((
            self.answer(ran.parts, ran.finish, Some(ran.usage)),
            container,
        ))
    }

    /// The answer as events: a chunk for each piece as it comes (text as it
    /// streams, each code part whole), the last with the finish and the
    /// usage; a failure ends it with an event of Google's error envelope.
    /// The client leaving cancels the run.
    fn stream(
        self,
        turn: Turn,
    ) -> Sse<impl tokio_stream::Stream<Item = Result<SseEvent, Infallible>>> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<SseEvent>();
        let task = tokio::spawn(async move {
            let (parts, mut incoming) = tokio::sync::mpsc::unbounded_channel::<Part>();
            let event = |answer: &GenerateContentResponse| {
                SseEvent::default().data(serde_json::to_string(answer).unwrap_or_default())
            };
            let forward = async {
                while let Some(part) = incoming.recv().await {
                    let _ = tx.send(event(&self.answer(vec![part], None, None)));
                }
            };
            let work = async {
                let ran = self.within(turn, Some(&parts)).await;
                drop(parts);
                ran
            };
            let (ran, ()) = tokio::join!(work, forward);
            match ran {
                Ok(ran) => {
                    self.bill(ran.usage).await;
                    let _ = tx.send(event(&self.answer(Vec::new(), ran.finish, Some(ran.usage))));
                }
                Err(error) => {
                    let body = shellgate_wire::gemini::ErrorResponse::new(
                        error.status().as_u16(),
                        error.message,
                    );
                    let _ = tx.send(
                        SseEvent::default().data(serde_json::to_string(&body).unwrap_or_default()),
                    );
                }
            }
        });
        let guard = crate::turns::AbortOnDrop(Some(task));
        let body = UnboundedReceiverStream::new(rx).map(move |event| {
            let _keep = &guard;
            Ok::<_, Infallible>(event)
        });
        Sse::new(body).keep_alive(crate::http::sse_keep_alive())
    }

    /// A `GenerateContentResponse` of `parts`.
    fn answer(
        &self,
        parts: Vec<Part>,
        finish: Option<FinishReason>,
        usage: Option<Usage>,
    ) -> GenerateContentResponse {
        GenerateContentResponse {
            candidates: vec![Candidate {
                content: Content {
                    role: Some("model".to_owned()),
                    parts,
                    extra: Default::default(),
                },
                finish_reason: finish,
                index: 0,
            }],
            usage_metadata: usage.map(usage_metadata),
            model_version: Some(self.model.clone()),
            response_id: Some(self.id.clone()),
        }
    }

    /// Records the tokens the upstream reported (a failure is logged: the
    /// answer is the client's whatever the store says).
    async fn bill(&self, usage: Usage) {
        if usage == Usage::default() {
            return;
        }
        let (project, model) = (self.project.clone(), self.model.clone());
        if let Err(e) = self
            .state
            .db(move |s| s.record_tokens(&project, &model, usage.input_tokens, usage.output_tokens))
            .await
        {
            tracing::error!("could not record token usage: {}", e.message);
        }
    }

    /// [`Run::turns`] within the response's deadline
    /// (`response_timeout_secs`): past it the run is dropped (its code
    /// interrupted) and the answer is an error naming the limit.
    async fn within(&self, turn: Turn, sink: Option<&PartSink>) -> ApiResult<Ran> {
        tokio::time::timeout(self.deadline, self.turns(turn, sink))
            .await
            .unwrap_or_else(|_| {
                Err(ApiError::of(
                    ErrorCode::UpstreamTimeout,
                    format!(
                        "the answer took longer than its limit of {} seconds \
                         (response_timeout_secs); its code was stopped",
                        self.deadline.as_secs()
                    ),
                ))
            })
    }

    /// Asks the upstream, runs the code it calls and asks again, until it
    /// answers without code (or calls a client's function).
    async fn turns(&self, mut turn: Turn, sink: Option<&PartSink>) -> ApiResult<Ran> {
        let mut ran = Ran::default();
        for _ in 0..MAX_TURNS {
            let (reply, streamed_text) = self.ask(&turn, sink).await?;
            ran.usage += reply.usage;
            let mut emit = |part: Part, streamed: bool| {
                if let (Some(sink), false) = (sink, streamed) {
                    let _ = sink.send(part.clone());
                }
                ran.parts.push(part);
            };
            if self.include_thoughts {
                for reasoning in &reply.reasoning {
                    let text = if reasoning.text.is_empty() {
                        reasoning.summary.join("\n")
                    } else {
                        reasoning.text.clone()
                    };
                    if !text.is_empty() {
                        emit(
                            Part {
                                thought: Some(true),
                                ..Part::text(text)
                            },
                            false,
                        );
                    }
                }
            }
            if !reply.text.is_empty() {
                emit(Part::text(reply.text.clone()), streamed_text);
            }
            let code_calls: Vec<_> = reply
                .tool_calls
                .iter()
                .filter(|call| self.sandbox.is_some() && call.name == CODE_TOOL)
                .collect();
            let client_calls = reply.tool_calls.len() - code_calls.len();
            let mut outputs = Vec::new();
            for call in &code_calls {
                let code = serde_json::from_str::<CodeArguments>(&call.arguments)
                    .map(|arguments| arguments.code)
                    .unwrap_or_default();
                emit(
                    Part {
                        executable_code: Some(ExecutableCode {
                            language: shellgate_wire::gemini::LANGUAGE_PYTHON.to_owned(),
                            code: code.clone(),
                            id: Some(call.id.clone()),
                            extra: Default::default(),
                        }),
                        ..Default::default()
                    },
                    false,
                );
                let (result, images, told) = self.execute(&code).await?;
                emit(
                    Part {
                        code_execution_result: Some(CodeExecutionResult {
                            id: Some(call.id.clone()),
                            ..result
                        }),
                        ..Default::default()
                    },
                    false,
                );
                for png in images {
                    emit(
                        Part {
                            inline_data: Some(Blob {
                                mime_type: "image/png".to_owned(),
                                data: png,
                                extra: Default::default(),
                            }),
                            ..Default::default()
                        },
                        false,
                    );
                }
                outputs.push((call.id.clone(), told));
            }
            for call in reply
                .tool_calls
                .iter()
                .filter(|call| !code_calls.iter().any(|code| std::ptr::eq(*code, *call)))
            {
                let args = serde_json::from_str::<Value>(&call.arguments)
                    .ok()
                    .filter(Value::is_object)
                    .unwrap_or_else(|| Value::Object(Default::default()));
                emit(
                    Part {
                        function_call: Some(FunctionCall {
                            id: Some(call.id.clone()),
                            name: call.name.clone(),
                            args: Some(args),
                            extra: Default::default(),
                        }),
                        ..Default::default()
                    },
                    false,
                );
            }
            if code_calls.is_empty() || client_calls > 0 {
                ran.finish = Some(finish_reason(reply.finish));
                return Ok(ran);
            }
            // The model reads its code's results and goes on.
            turn.messages
                .extend(reply.reasoning.iter().cloned().map(Message::Reasoning));
            turn.messages
                .extend(reply.native.iter().cloned().map(Message::Native));
            turn.messages.push(Message::Assistant {
                text: reply.text.clone(),
                tool_calls: reply.tool_calls.clone(),
            });
            for (call_id, output) in outputs {
                turn.messages.push(Message::Tool { call_id, output });
            }
        }
        ran.finish = Some(FinishReason::TooManyToolCalls);
        Ok(ran)
    }

    /// One upstream turn; with a sink, its text goes there as it comes
    /// (and `true` says it went).
    async fn ask(
        &self,
        turn: &Turn,
        sink: Option<&PartSink>,
    ) -> ApiResult<(shellgate_model::upstream::Reply, bool)> {
        let Some(sink) = sink else {
            let reply = self
                .upstream
                .complete(turn, None)
                .await
                .map_err(upstream_error)?;
            return Ok((reply, false));
        };
        let (deltas, mut incoming) = tokio::sync::mpsc::unbounded_channel();
        let forward = async {
            let mut streamed = false;
            while let Some(delta) = incoming.recv().await {
                if let Delta::Text(text) = delta {
                    streamed = true;
                    let _ = sink.send(Part::text(text));
                }
            }
            streamed
        };
        let ask = async {
            let reply = self.upstream.complete(turn, Some(&deltas)).await;
            drop(deltas);
            reply
        };
        let (reply, streamed) = tokio::join!(ask, forward);
        Ok((reply.map_err(upstream_error)?, streamed))
    }

    /// Runs `code` on the container's kernel within [`CODE_TIMEOUT`]: the
    /// result part, the figures (base64 PNG), and what the model is told.
    async fn execute(&self, code: &str) -> ApiResult<(CodeExecutionResult, Vec<String>, String)> {
        let Some(sandbox) = &self.sandbox else {
            return Err(ApiError::internal("code execution has no sandbox"));
        };
        let failed = |e: shellgate_model::run::HostError| {
            let code = if e.code == "rate_limit_exceeded" {
                ErrorCode::RateLimitExceeded
            } else {
                ErrorCode::Internal
            };
            ApiError::of(code, e.message)
        };
        let container = sandbox.container().await.map_err(failed)?;
        let (interpretation, ended) = sandbox
            .interpret_within(&container, code, CODE_TIMEOUT)
            .await
            .map_err(failed)?;
        let outcome = if ended.timed_out {
            Outcome::OutcomeDeadlineExceeded
        } else if ended.raised {
            Outcome::OutcomeFailed
        } else {
            Outcome::OutcomeOk
        };
        let mut told = format!(
            "{}\n{}",
            translate::outcome_name(outcome),
            interpretation.logs
        );
        if !interpretation.images.is_empty() {
            told.push_str(&format!(
                "\n[{} figure(s) shown to the user]",
                interpretation.images.len()
            ));
        }
        let result = CodeExecutionResult {
            outcome,
            output: Some(interpretation.logs),
            id: None,
            extra: Default::default(),
        };
        Ok((result, interpretation.images, told))
    }
}

/// Why the candidate ended, in Google's words.
fn finish_reason(finish: Finish) -> FinishReason {
    match finish {
        Finish::Stop => FinishReason::Stop,
        Finish::Length => FinishReason::MaxTokens,
        Finish::ContentFilter => FinishReason::Safety,
    }
}

fn usage_metadata(usage: Usage) -> UsageMetadata {
    UsageMetadata {
        prompt_token_count: usage.input_tokens,
        candidates_token_count: usage.output_tokens,
        total_token_count: usage.input_tokens + usage.output_tokens,
        cached_content_token_count: (usage.cached_input_tokens > 0)
            .then_some(usage.cached_input_tokens),
        thoughts_token_count: (usage.reasoning_tokens > 0).then_some(usage.reasoning_tokens),
        tool_use_prompt_token_count: None,
    }
}
