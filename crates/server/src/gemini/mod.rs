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
//! A request is the loop's request (`translate`: its contents the loop's
//! items, its function declarations and `codeExecution` the loop's tools),
//! run by the one model loop (`shellgate_model::run`) as every model API's
//! is: its bounds, guardrails, billing and audit are the loop's.
//! `tools: [{"codeExecution": {}}]` is the loop's hosted tool
//! `code_execution` (`shellgate_model::run::google_code`): each call's
//! Python runs on a container's kernel (`sandboxes::interpreting`, the code
//! interpreter's) for at most Google's documented 30 seconds
//! (`gemini_code_execution_timeout_secs`), and its
//! `code_interpreter_call` item is answered as an `executableCode` part, a
//! `codeExecutionResult` part (`OUTCOME_OK`, `OUTCOME_FAILED` with the
//! traceback, `OUTCOME_DEADLINE_EXCEEDED`) and the figures it showed as
//! `inlineData` `image/png` parts. Google's tool keeps nothing between
//! requests, and neither does a request here by default (a new container);
//! shellgate's extension is the request header
//! `x-shellgate-container: cntr_...`, which runs the code in that container
//! of the project, its kernel's variables kept. Every answer that ran code
//! names its container in the same response header.
//!
//! The key is the project's shellgate key, as Google's SDKs send theirs:
//! `x-goog-api-key`, or `?key=` (a Bearer key works too).

pub(crate) mod files;
mod signature;
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
use shellgate_model::google_outcome;
use shellgate_model::run::{self, Outcome, Sandbox, Status};
use shellgate_model::tools::Environment;
use shellgate_model::upstream::{Carry, Protocol, Upstream, Usage};
use shellgate_wire::gemini::{
    Blob, Candidate, CodeExecutionResult, Content, CountTokensRequest, CountTokensResponse,
    ExecutableCode, FinishReason, FunctionCall, GenerateContentRequest, GenerateContentResponse,
    ListModelsResponse, Model, Part, UsageMetadata,
};
use shellgate_wire::responses::{CodeInterpreterCall, CodeInterpreterOutput, Item};
use shellgate_wire::{new_id, ErrorCode};

use crate::error::{ApiError, ApiResult};
use crate::http::{ApiJson, Project};
use crate::sandboxes::hosted::HostedShell;
use crate::state::AppState;
use signature::Signer;
use translate::Translated;

/// How long a stream may be quiet before it gets a blank line.
const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(1);

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

/// The request's answer: the loop run over its items and tools.
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
    let (run, uncarried) = prepare(&state, project, model, headers, &request).await?;
    // A stream's headers go first: the container it will use is known
    // before (made now if the request names none).
    if mode == Mode::Events {
        if let Some(sandbox) = &run.sandbox {
            sandbox
                .container()
                .await
                .map_err(|e| ApiError::of(ErrorCode::Internal, e.message))?;
        }
    }
    let container = match &run.sandbox {
        Some(sandbox) if mode == Mode::Events => sandbox.container_id().await,
        _ => None,
    };
    let mut response = match mode {
        Mode::Events => run.stream().into_response(),
        Mode::Whole | Mode::Array => {
            let (answer, container) = run.whole().await?;
            let mut response = match mode {
                Mode::Array => Json(vec![answer]).into_response(),
                _ => Json(answer).into_response(),
            };
            name_container(&mut response, container);
            response
        }
    };
    name_container(&mut response, container);
    if let Some(value) = crate::uncarried::header_value(&uncarried) {
        response
            .headers_mut()
            .insert(crate::uncarried::HEADER, value);
    }
    Ok(response)
}

/// Says the container the answer's code ran in (`x-shellgate-container`).
fn name_container(response: &mut Response, container: Option<String>) {
    if let Some(value) = container.and_then(|id| HeaderValue::from_str(&id).ok()) {
        response
            .headers_mut()
            .insert(shellgate_wire::gemini::CONTAINER_HEADER, value);
    }
}

/// The run a request asks (its items and tools checked by the project's
/// guardrails, its code's container set up), and what of it the upstream
/// will not get.
async fn prepare(
    state: &Arc<AppState>,
    project: String,
    model: &str,
    headers: &HeaderMap,
    request: &GenerateContentRequest,
) -> ApiResult<(Run, Vec<String>)> {
    let (model, upstream) = crate::turns::upstream_for(state, Some(model))?;
    let environment = code_environment(headers)?;
    // A file goes into the code's container when code runs: a new one is
    // made with it, one the extension header names gets it at first use.
    let in_container = request
        .tools
        .iter()
        .flatten()
        .any(|tool| tool.code_execution.is_some());
    let (attachments, mut file_rows) =
        files::attachments(state, &project, &request.contents, in_container).await?;
    let Translated {
        instructions,
        items,
        mut tools,
        tool_choice,
        temperature,
        top_p,
        max_output_tokens,
        carry,
        mut uncarried,
        include_thoughts,
    } = translate::turn_of(request, &attachments)?;
    if let Some(code) = &mut tools.google_code_execution {
        code.environment = environment;
        if let Environment::ContainerAuto(auto) = &mut code.environment {
            if !file_rows.is_empty() {
                let rows = std::mem::take(&mut file_rows);
                auto.file_ids = Some(rows.into_iter().map(|row| row.id).collect());
            }
        }
        code.timeout =
            std::time::Duration::from_secs(state.config.model.gemini_code_execution_timeout_secs);
    }
    let carry = sealed_reasoning(carry, upstream.as_ref());
    for name in upstream.uncarried(&tools.carry(carry.clone())) {
        if !uncarried.contains(&name) {
            uncarried.push(name);
        }
    }
    crate::uncarried::log("gemini.generateContent", &model, &uncarried);
    let (items, instructions, tools) =
        crate::guardrails::guard_request(&state.guardrails, &project, items, instructions, tools)
            .await?;
    let id = new_id("gen_");
    // Google's tool keeps nothing between requests: a container is reused
    // only when the extension header names it.
    let reuse = crate::sandboxes::reuse::Reuse::pick(&tools, None, &[]);
    let hosted = crate::sandboxes::hosted::prepare(state, &project, &tools, reuse, &id).await?;
    if let Some(sandbox) = &hosted.sandbox {
        sandbox.upload(file_rows);
    }
    let request = run::Request {
        model: model.clone(),
        instructions,
        items,
        tools,
        tool_choice,
        max_tool_calls: run::MAX_TOOL_CALLS,
        temperature,
        top_p,
        max_output_tokens,
        parallel_tool_calls: None,
        environment_description: hosted.description,
        carry,
        output_guardrail: state
            .guardrails
            .for_project(&project, crate::guardrails::Target::ToolOutput),
        max_answer_bytes: usize::try_from(state.config.model.upstream_max_answer_bytes)
            .unwrap_or(usize::MAX),
    };
    let run = Run {
        state: Arc::clone(state),
        project,
        model,
        id,
        upstream,
        sandbox: hosted.sandbox,
        include_thoughts,
        deadline: std::time::Duration::from_secs(state.config.model.response_timeout_secs),
        request,
    };
    Ok((run, uncarried))
}

/// The turn's carry asking a Responses upstream, when the model is to
/// reason, for its reasoning sealed (`include:
/// ["reasoning.encrypted_content"]`): nothing is stored upstream, so only
/// the sealed reasoning a part's `thoughtSignature` carries can give the
/// model its reasoning back on the client's next request.
fn sealed_reasoning(mut carry: Carry, upstream: &dyn Upstream) -> Carry {
    if carry.reasoning.is_some() && upstream.protocol() == Some(Protocol::Responses) {
        carry.responses.entry("include").or_insert_with(|| {
            Value::Array(vec![Value::String(
                "reasoning.encrypted_content".to_owned(),
            )])
        });
    }
    carry
}

/// The container the request's code runs in: the one
/// `x-shellgate-container` names (the project's, else a 404 when the
/// sandbox is set up), else a new one made at the first call.
fn code_environment(headers: &HeaderMap) -> ApiResult<Environment> {
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
    Ok(match named {
        Some(id) => Environment::ContainerReference(id),
        None => Environment::ContainerAuto(Default::default()),
    })
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
    let turn = translate::turn_of(&request, &translate::Attachments::new())?.turn(&model);
    let total_tokens = crate::turns::input_tokens(upstream.as_ref(), &turn, &model).await;
    Ok(Json(CountTokensResponse { total_tokens }).into_response())
}

/// One request's run of the loop, and how its answer is told.
struct Run {
    state: Arc<AppState>,
    project: String,
    model: String,
    id: String,
    upstream: Arc<dyn Upstream>,
    sandbox: Option<Arc<HostedShell>>,
    include_thoughts: bool,
    deadline: std::time::Duration,
    request: run::Request,
}

impl Run {
    /// Runs the loop within the response's deadline
    /// (`response_timeout_secs`), telling `events` what happens; records
    /// its tokens.
    async fn run(&self, events: Option<&run::EventSink>) -> Outcome {
        let sandbox = self.sandbox.as_deref().map(|s| s as &dyn Sandbox);
        let outcome = crate::turns::run_within(
            self.deadline,
            self.upstream.as_ref(),
            sandbox,
            &self.request,
            events,
        )
        .await;
        self.bill(outcome.usage).await;
        outcome
    }

    /// The whole answer, and the container its code ran in.
    async fn whole(self) -> ApiResult<(GenerateContentResponse, Option<String>)> {
        let outcome = self.run(None).await;
        if let Status::Failed { code, message } = &outcome.status {
            return Err(failure(code, message));
        }
        let container = match &self.sandbox {
            Some(sandbox) => sandbox.container_id().await,
            None => None,
        };
        let mut signer = Signer::default();
        let mut parts = Vec::new();
        for item in &outcome.output {
            parts.extend(self.signed_parts(item, &mut signer));
        }
        parts.extend(signer.rest());
        let answer = self.answer(parts, Some(finish_reason(&outcome)), Some(outcome.usage));
        Ok((answer, container))
    }

    /// The answer as events: a chunk for each piece as it comes (text as it
    /// streams, each other part whole), the last with the finish and the
    /// usage; a failure ends it with an event of Google's error envelope.
    /// The client leaving cancels the run.
    fn stream(self) -> Sse<impl tokio_stream::Stream<Item = Result<SseEvent, Infallible>>> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<SseEvent>();
        let task = tokio::spawn(async move {
            let chunk = |answer: &GenerateContentResponse| {
                SseEvent::default().data(serde_json::to_string(answer).unwrap_or_default())
            };
            let (events, mut incoming) = tokio::sync::mpsc::unbounded_channel::<run::Event>();
            let forward = async {
                // The messages whose text went out as it streamed.
                let mut streamed = std::collections::HashSet::new();
                let mut signer = Signer::default();
                while let Some(event) = incoming.recv().await {
                    for part in self.streamed_parts(event, &mut streamed, &mut signer) {
                        let _ = tx.send(chunk(&self.answer(vec![part], None, None)));
                    }
                }
                signer.rest()
            };
            let work = async {
                let outcome = self.run(Some(&events)).await;
                drop(events);
                outcome
            };
            let (outcome, unsigned) = tokio::join!(work, forward);
            let last = match &outcome.status {
                Status::Failed { code, message } => {
                    let error = failure(code, message);
                    let body = shellgate_wire::gemini::ErrorResponse::new(
                        error.status().as_u16(),
                        error.message,
                    );
                    SseEvent::default().data(serde_json::to_string(&body).unwrap_or_default())
                }
                _ => chunk(&self.answer(
                    unsigned.into_iter().collect(),
                    Some(finish_reason(&outcome)),
                    Some(outcome.usage),
                )),
            };
            let _ = tx.send(last);
        });
        let guard = crate::turns::AbortOnDrop(Some(task));
        // A quiet stream (a model slow to begin, code running) gets a blank
        // line each second, not the comment line other streams get: the
        // `google-genai` SDK reads every line that is not `data:` as JSON,
        // and a comment would end its stream with a parse error. A blank
        // line ends no event; the write still tells a client that left.
        let body = futures_util::stream::unfold((rx, guard), |(mut rx, guard)| async move {
            let event = match tokio::time::timeout(KEEP_ALIVE, rx.recv()).await {
                Ok(Some(event)) => event,
                Ok(None) => return None,
                Err(_) => SseEvent::default(),
            };
            Some((Ok::<_, Infallible>(event), (rx, guard)))
        });
        Sse::new(body)
    }

    /// The parts an event of the loop gives a stream: a message's text as
    /// it comes (the message's index kept in `streamed`), every other item
    /// whole when it is done; the first part after a reasoning signed with
    /// it.
    fn streamed_parts(
        &self,
        event: run::Event,
        streamed: &mut std::collections::HashSet<usize>,
        signer: &mut Signer,
    ) -> Vec<Part> {
        match event {
            run::Event::TextDelta { index, delta, .. } => {
                streamed.insert(index);
                let mut parts = vec![Part::text(delta)];
                signer.sign(&mut parts);
                parts
            }
            run::Event::ItemDone { index, item } => match item {
                Item::Message(_) if streamed.contains(&index) => Vec::new(),
                item => self.signed_parts(&item, signer),
            },
            _ => Vec::new(),
        }
    }

    /// The parts of an output item, the first not a thought signed with
    /// the reasoning before it; a reasoning is kept to sign what follows
    /// (and is a thought part when the client asked them).
    fn signed_parts(&self, item: &Item, signer: &mut Signer) -> Vec<Part> {
        let mut parts = self.parts(item);
        match item {
            Item::Reasoning(reasoning) => signer.keep(reasoning),
            _ => signer.sign(&mut parts),
        }
        parts
    }

    /// The parts an output item of the loop is: a message its text, a
    /// reasoning a thought (when the client asked them), a function call a
    /// `functionCall`, a code call its `executableCode`, its
    /// `codeExecutionResult` and its figures as `inlineData`.
    fn parts(&self, item: &Item) -> Vec<Part> {
        match item {
            Item::Message(message) => {
                let text = shellgate_model::conversation::content_text(&message.content);
                if text.is_empty() {
                    Vec::new()
                } else {
                    vec![Part::text(text)]
                }
            }
            Item::Reasoning(reasoning) if self.include_thoughts => {
                let reasoning = shellgate_model::reasoning::from_item(reasoning);
                let text = if reasoning.text.is_empty() {
                    reasoning.summary.join("\n")
                } else {
                    reasoning.text
                };
                if text.is_empty() {
                    Vec::new()
                } else {
                    vec![Part {
                        thought: Some(true),
                        ..Part::text(text)
                    }]
                }
            }
            Item::FunctionCall(call) => {
                let args = serde_json::from_str::<Value>(&call.arguments)
                    .ok()
                    .filter(Value::is_object)
                    .unwrap_or_else(|| Value::Object(Default::default()));
                vec![Part {
                    function_call: Some(FunctionCall {
                        id: call.call_id.clone(),
                        name: call.name.clone(),
                        args: Some(args),
                        extra: Default::default(),
                    }),
                    ..Default::default()
                }]
            }
            Item::CodeInterpreterCall(call) => code_parts(call),
            _ => Vec::new(),
        }
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
}

/// A code call's parts: its `executableCode`, its `codeExecutionResult`
/// (the outcome its status says) and the figures it showed.
fn code_parts(call: &CodeInterpreterCall) -> Vec<Part> {
    let id = call.id.clone();
    let mut logs = String::new();
    let mut figures = Vec::new();
    for output in call.outputs.iter().flatten() {
        match output {
            CodeInterpreterOutput::Logs { logs: text, .. } => logs.push_str(text),
            CodeInterpreterOutput::Image { url, .. } => {
                if let Some(png) = url.strip_prefix("data:image/png;base64,") {
                    figures.push(png.to_owned());
                }
            }
        }
    }
    let mut parts = vec![
        Part {
            executable_code: Some(ExecutableCode {
                language: shellgate_wire::gemini::LANGUAGE_PYTHON.to_owned(),
                code: call.code.clone().unwrap_or_default(),
                id: id.clone(),
                extra: Default::default(),
            }),
            ..Default::default()
        },
        Part {
            code_execution_result: Some(CodeExecutionResult {
                outcome: google_outcome::outcome(call.status),
                output: Some(logs),
                id,
                extra: Default::default(),
            }),
            ..Default::default()
        },
    ];
    parts.extend(figures.into_iter().map(|png| Part {
        inline_data: Some(Blob {
            mime_type: "image/png".to_owned(),
            data: png,
            extra: Default::default(),
        }),
        ..Default::default()
    }));
    parts
}

/// The error a failed run is for the client (Google's envelope is made
/// of it).
fn failure(code: &str, message: &str) -> ApiError {
    match code {
        "rate_limit_exceeded" => ApiError::quota(ErrorCode::RateLimitExceeded, message.to_owned()),
        "invalid_prompt" => ApiError::invalid("model", message.to_owned()),
        _ => ApiError::internal(message.to_owned()),
    }
}

/// Why the candidate ended, in Google's words.
fn finish_reason(outcome: &Outcome) -> FinishReason {
    match outcome.status {
        Status::Incomplete("max_output_tokens") => FinishReason::MaxTokens,
        Status::Incomplete("content_filter") => FinishReason::Safety,
        Status::Incomplete("max_messages") => FinishReason::TooManyToolCalls,
        Status::Incomplete(_) => FinishReason::Other,
        Status::Completed | Status::Failed { .. } => FinishReason::Stop,
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
