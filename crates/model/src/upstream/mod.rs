//! Upstream models: whatever answers the model's turns. The loop speaks one
//! neutral shape ([`Turn`] in, [`Reply`] out); each adapter translates it to
//! one wire protocol and streams the answer back as it comes.
//!
//! - [`chat`]: OpenAI Chat Completions, what vLLM, Ollama, llama.cpp's
//!   server, LiteLLM and OpenRouter speak (the default);
//! - [`responses`]: OpenAI's Responses API;
//! - [`anthropic`]: Anthropic's Messages API.
//!
//! Every failure is an [`UpstreamError`]: HTTP errors, timeouts and
//! malformed output end the response as `failed` with a clear message; a
//! 429 is retried with backoff first. Each turn is bounded ([`TurnLimits`]):
//! the bytes of the whole answer (never buffered past the cap), the bytes
//! of one tool call's arguments, and a deadline for the whole turn beside
//! the wait for each piece (so a model trickling a byte a second is cut
//! off too). An upstream's key never leaves its adapter: not in errors,
//! logs, responses or the store.
//!
//! The adapters share one path (`transport`): post, retry a 429, read a
//! JSON answer or an event stream ([`sse`], with line and event caps)
//! under the turn's bounds; each only says how its answers become a
//! [`Reply`].

pub mod anthropic;
pub mod chat;
pub mod freeform;
pub mod responses;
pub mod sse;
mod transport;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use sse::SseLimits;

/// One message of a conversation, as every protocol can say it.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    System(String),
    User(String),
    Assistant {
        text: String,
        tool_calls: Vec<ToolCall>,
    },
    /// A tool's result, answering the call `call_id`.
    Tool {
        call_id: String,
        output: String,
    },
    /// The model's reasoning in an earlier turn (it belongs with the
    /// assistant message after it: Anthropic's thinking blocks go in it).
    Reasoning(Reasoning),
    /// An item only its own protocol reads (a hosted tool's call and
    /// result, an item reference...): replayed verbatim to an upstream of
    /// that protocol, left out for the others.
    Native(NativeItem),
}

/// A model's reasoning, as an upstream gave it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reasoning {
    /// The upstream's id for it (OpenAI's `rs_...`), kept for replay.
    pub id: Option<String>,
    /// Summary texts (OpenAI's `summary[].text`).
    pub summary: Vec<String>,
    /// The reasoning's own text where the upstream shows it (OpenAI's
    /// `content[].text`, Anthropic's `thinking`).
    pub text: String,
    /// What only the protocol that made it can read back.
    pub sealed: Option<Sealed>,
}

/// The part of a reasoning only its own protocol verifies: replayed to an
/// upstream of that protocol, never shown to another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sealed {
    /// OpenAI's `encrypted_content`.
    OpenAi(String),
    /// The `signature` of Anthropic's `thinking` block.
    AnthropicSignature(String),
    /// The `data` of Anthropic's `redacted_thinking` block.
    AnthropicRedacted(String),
}

impl Sealed {
    /// The protocol that can read it.
    pub fn protocol(&self) -> Protocol {
        match self {
            Sealed::OpenAi(_) => Protocol::Responses,
            Sealed::AnthropicSignature(_) | Sealed::AnthropicRedacted(_) => Protocol::Anthropic,
        }
    }
}

/// Something of one protocol, kept whole: an item of a conversation, a
/// tool shellgate does not run.
#[derive(Debug, Clone, PartialEq)]
pub struct NativeItem {
    pub protocol: Protocol,
    pub item: Value,
}

impl NativeItem {
    /// Its `type`, for reports (`?` if it has none).
    pub fn kind(&self) -> String {
        /// The one key every item and tool of every protocol has.
        #[derive(Deserialize)]
        struct Typed {
            #[serde(rename = "type")]
            kind: String,
        }
        Typed::deserialize(&self.item).map_or_else(|_| "?".to_owned(), |typed| typed.kind)
    }
}

/// What a client asked beyond the neutral fields of a [`Turn`]: each
/// adapter sends what its protocol can say and names the rest in
/// [`Upstream::uncarried`], so nothing is lost silently.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Carry {
    /// How the model should reason (OpenAI's `reasoning`, Anthropic's
    /// `thinking`, Chat Completions' `reasoning_effort`).
    pub reasoning: Option<ReasoningRequest>,
    /// The shape of the answer's text (OpenAI's `text.format`, Chat
    /// Completions' `response_format`, Anthropic's `output_config`).
    pub output_format: Option<OutputFormat>,
    /// Sequences that end the model's text.
    pub stop: Vec<String>,
    /// Sample from the `top_k` likeliest tokens.
    pub top_k: Option<u64>,
    /// The Responses request's fields shellgate does not act on (its
    /// `CARRIED` keys), as the client sent them: to a Responses upstream.
    pub responses: Map<String, Value>,
    /// The Messages request's fields shellgate does not act on, as the
    /// client sent them: to an Anthropic upstream.
    pub anthropic: Map<String, Value>,
    /// The client's `anthropic-beta` header values: to an Anthropic upstream.
    pub anthropic_beta: Vec<String>,
    /// Tools shellgate does not run (hosted tools of one protocol), as the
    /// client wrote them: to an upstream of that protocol.
    pub native_tools: Vec<NativeItem>,
    /// A Messages client's keys on its own tools beyond name, description
    /// and schema (`strict`, `defer_loading`, `input_examples`...), by tool
    /// name: to an Anthropic upstream, on the same tools.
    pub anthropic_tool_extras: std::collections::BTreeMap<String, Map<String, Value>>,
    /// How the client named each of `native_tools` (same order:
    /// `tools[7] (web_search)`), for [`Upstream::uncarried`].
    pub native_tool_names: Vec<String>,
    /// A `tool_choice` naming a tool of one protocol that the neutral
    /// [`ToolChoice`] cannot say (a hosted tool), as the client wrote it:
    /// an upstream of that protocol sends it instead of the turn's
    /// `tool_choice`; the others keep the turn's (`auto`) and report it.
    pub native_tool_choice: Option<NativeItem>,
}

impl Carry {
    /// What of the native tools and tool choice an upstream speaking
    /// `protocol` cannot send, named as the client wrote them.
    pub fn native_uncarried(&self, protocol: Protocol) -> Vec<String> {
        let mut names: Vec<String> = self
            .native_tools
            .iter()
            .enumerate()
            .filter(|(_, tool)| tool.protocol != protocol)
            .map(|(index, tool)| {
                self.native_tool_names
                    .get(index)
                    .cloned()
                    .unwrap_or_else(|| format!("tools ({})", tool.kind()))
            })
            .collect();
        if let Some(choice) = self
            .native_tool_choice
            .as_ref()
            .filter(|choice| choice.protocol != protocol)
        {
            names.push(format!("tool_choice ({})", choice.kind()));
        }
        names
    }

    /// The native tools for an upstream speaking `protocol`.
    pub fn native_tools_for(&self, protocol: Protocol) -> impl Iterator<Item = &Value> {
        self.native_tools
            .iter()
            .filter(move |tool| tool.protocol == protocol)
            .map(|tool| &tool.item)
    }
}

/// How a model should reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReasoningRequest {
    /// `minimal`, `low`, `medium`, `high`... as the client wrote it.
    pub effort: Option<String>,
    /// OpenAI's `reasoning.summary` (`auto`, `concise`, `detailed`).
    pub summary: Option<String>,
    /// Anthropic's `thinking.budget_tokens`.
    pub budget_tokens: Option<u64>,
}

/// The shape a model's text must have.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputFormat {
    /// JSON matching `schema`.
    JsonSchema {
        name: String,
        description: Option<String>,
        schema: Value,
        strict: Option<bool>,
    },
    /// Any JSON object.
    JsonObject,
}

/// A call of a tool the model made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments, a JSON object as text (as the model wrote it).
    pub arguments: String,
}

/// A tool the model may call: a function with JSON-schema parameters, or
/// a freeform (`custom`) tool whose call's `arguments` are its raw input.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
    /// `Some`: a freeform tool (OpenAI's `custom`), with its input's format.
    pub custom: Option<CustomFormat>,
    /// `Some`: the tool belongs to a group (Codex's `namespace` tools);
    /// `name` is then the flattened name every protocol can say, which
    /// calls use (an upstream that has namespaces sends the group).
    pub namespace: Option<ToolNamespace>,
}

/// The group a tool belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolNamespace {
    /// The namespace's name.
    pub namespace: String,
    /// The namespace's description.
    pub description: String,
    /// The tool's own name within it.
    pub name: String,
}

/// The input format of a freeform tool.
#[derive(Debug, Clone, PartialEq)]
pub enum CustomFormat {
    /// Any text.
    Text,
    /// Text in a grammar: `syntax` (`lark`, `regex`) and its `definition`.
    Grammar { syntax: String, definition: String },
}

/// Which tool the model must call, if any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ToolChoice {
    #[default]
    Auto,
    Required,
    None,
    Named(String),
}

/// One model turn asked of an upstream.
#[derive(Debug, Clone, Default)]
pub struct Turn {
    pub model: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub tool_choice: ToolChoice,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub max_output_tokens: Option<u32>,
    pub parallel_tool_calls: Option<bool>,
    /// What the client asked beyond the fields above.
    pub carry: Carry,
}

/// Tokens an upstream counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Of the input tokens, those read from the upstream's prompt cache
    /// (where it says so).
    #[serde(default)]
    pub cached_input_tokens: u64,
    /// Of the output tokens, those the model reasoned with (where the
    /// upstream says so).
    #[serde(default)]
    pub reasoning_tokens: u64,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Self) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cached_input_tokens += other.cached_input_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
    }
}

/// Why a turn ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Finish {
    /// The model finished (an answer, or tool calls).
    #[default]
    Stop,
    /// It ran out of `max_output_tokens`.
    Length,
    /// The upstream refused the content.
    ContentFilter,
}

/// An upstream's answer to one turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reply {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
    pub finish: Finish,
    /// The model's reasoning in this turn (before its text and calls).
    pub reasoning: Vec<Reasoning>,
    /// Items of the upstream's own protocol beside text and calls (a
    /// hosted tool's call and result): output as they are, replayed to it.
    pub native: Vec<NativeItem>,
}

/// Pieces of a reply as they arrive.
#[derive(Debug, Clone, PartialEq)]
pub enum Delta {
    Text(String),
    /// A tool call begins: its position in the reply, id and name.
    ToolCall {
        index: usize,
        id: String,
        name: String,
    },
    /// More of a tool call's arguments.
    ToolArguments {
        index: usize,
        delta: String,
    },
    /// More of the summary of the reasoning the upstream is telling (its
    /// `id` where the upstream gives one; part `summary_index` of its
    /// summary), before that reasoning's [`Delta::Reasoning`].
    ReasoningSummary {
        id: Option<String>,
        summary_index: usize,
        delta: String,
    },
    /// A reasoning of the reply, whole, as soon as the upstream has told
    /// it (before the text that follows it). An adapter that sends these
    /// sends the reply's [`Reply::reasoning`] in order, each once; the
    /// loop puts any it did not send after them.
    Reasoning(Reasoning),
    /// An item of [`Reply::native`], whole, as soon as it is told (the
    /// same rule).
    Native(NativeItem),
}

/// Where deltas go.
pub type DeltaSink = tokio::sync::mpsc::UnboundedSender<Delta>;

pub use shellgate_wire::models::UpstreamModel;

/// An upstream's answer to a forwarded request, as it comes: the pieces
/// of its body, each read within the turn's bounds (the wait for a piece,
/// the deadline, the answer's bytes); a bound that runs out ends it with
/// the error. Dropping it closes the upstream's connection.
#[derive(Debug)]
pub struct Forwarded {
    /// Whether it is an event stream (else one JSON body).
    pub event_stream: bool,
    pub body: tokio::sync::mpsc::Receiver<Result<Vec<u8>, UpstreamError>>,
}

/// Why an upstream gave no reply.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum UpstreamError {
    #[error("the upstream model answered HTTP {status}: {message}")]
    Status { status: u16, message: String },
    #[error(
        "the upstream model is rate limited (HTTP 429) and stayed so after {attempts} attempts"
    )]
    RateLimited { attempts: u32 },
    #[error("the upstream model did not answer within {seconds} s")]
    Timeout { seconds: u64 },
    #[error("the upstream model did not finish its turn within {seconds} s")]
    TurnTimeout { seconds: u64 },
    #[error("the upstream model's answer is larger than the limit of {limit} bytes")]
    AnswerTooLarge { limit: usize },
    #[error(
        "a tool call of the upstream model has more than the limit of {limit} bytes of arguments"
    )]
    ToolCallTooLarge { limit: usize },
    #[error("the upstream model's answer could not be read: {0}")]
    Malformed(String),
    #[error("the upstream model could not be reached: {0}")]
    Unreachable(String),
    #[error("no upstream model is configured for {0:?}: set SHELLGATE_UPSTREAM_URL or `upstreams` in the config")]
    NotConfigured(String),
}

impl UpstreamError {
    /// The `error.code` of a failed response.
    pub fn code(&self) -> &'static str {
        match self {
            UpstreamError::RateLimited { .. } => "rate_limit_exceeded",
            UpstreamError::NotConfigured(_) => "invalid_prompt",
            _ => "server_error",
        }
    }
}

/// A model provider.
#[async_trait]
pub trait Upstream: Send + Sync {
    /// Asks for one turn, sending pieces to `deltas` as they arrive.
    async fn complete(
        &self,
        turn: &Turn,
        deltas: Option<&DeltaSink>,
    ) -> Result<Reply, UpstreamError>;

    /// The protocol it speaks (`None`: a test's scripted model).
    fn protocol(&self) -> Option<Protocol> {
        None
    }

    /// Its base URL (never with a key in it), for the start-up summary and
    /// the model list (`None`: a test's scripted model).
    fn url(&self) -> Option<&str> {
        None
    }

    /// The models it serves (`GET {url}/models`); `None` when it cannot
    /// say (a test's scripted model).
    async fn models(&self) -> Option<Result<Vec<UpstreamModel>, UpstreamError>> {
        None
    }

    /// Posts a Chat Completions request body as the client wrote it, with
    /// this upstream's key, and hands back its answer as it comes, bounded
    /// like a turn (`None`: it does not speak Chat Completions).
    async fn forward_chat(&self, _body: Vec<u8>) -> Option<Result<Forwarded, UpstreamError>> {
        None
    }

    /// What of `carry` (and of a turn's tools and items) this upstream
    /// cannot send, each named as the client wrote it (`reasoning`,
    /// `tools[7] (web_search)`...): the server reports them, never drops
    /// them silently.
    fn uncarried(&self, _carry: &Carry) -> Vec<String> {
        Vec::new()
    }

    /// The input tokens `turn` is, counted by the upstream itself where its
    /// protocol can (Anthropic's `messages/count_tokens`); `None`: it
    /// cannot, and the caller estimates.
    async fn count_tokens(&self, _turn: &Turn) -> Result<Option<u64>, UpstreamError> {
        Ok(None)
    }
}

/// The wire protocol of an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// OpenAI Chat Completions.
    Chat,
    /// OpenAI Responses.
    Responses,
    /// Anthropic Messages.
    Anthropic,
}

impl std::str::FromStr for Protocol {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "chat" => Ok(Protocol::Chat),
            "responses" => Ok(Protocol::Responses),
            "anthropic" => Ok(Protocol::Anthropic),
            other => Err(format!(
                "unknown upstream protocol {other:?}; use chat, responses or anthropic"
            )),
        }
    }
}

/// Bounds on one turn of an upstream (operator settings:
/// `upstream_max_answer_bytes`, `upstream_max_tool_call_bytes`,
/// `upstream_turn_timeout_secs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnLimits {
    /// Most bytes of one answer as they come over the wire (the body, or
    /// every event of the stream together).
    pub max_answer_bytes: usize,
    /// Most bytes of one tool call's arguments.
    pub max_tool_call_bytes: usize,
    /// Longest time for a whole turn: request, retries and every piece.
    pub turn_timeout: Duration,
}

impl TurnLimits {
    /// 32 MiB: far above any real model's turn (a 128k-token answer is
    /// about 0.5 MiB, its events a few MiB), far below what hurts a server.
    pub const DEFAULT_MAX_ANSWER_BYTES: usize = 32 * 1024 * 1024;
    /// 4 MiB: a file written through a function call fits; a shell call's
    /// commands are limited much lower by the sandbox anyway.
    pub const DEFAULT_MAX_TOOL_CALL_BYTES: usize = 4 * 1024 * 1024;
    /// 10 minutes: the server's request deadline.
    pub const DEFAULT_TURN_TIMEOUT: Duration = Duration::from_secs(600);
}

impl Default for TurnLimits {
    fn default() -> Self {
        Self {
            max_answer_bytes: Self::DEFAULT_MAX_ANSWER_BYTES,
            max_tool_call_bytes: Self::DEFAULT_MAX_TOOL_CALL_BYTES,
            turn_timeout: Self::DEFAULT_TURN_TIMEOUT,
        }
    }
}

/// Where an upstream is and how to talk to it.
#[derive(Clone)]
pub struct UpstreamConfig {
    /// Base URL, e.g. `https://api.openai.com/v1` or `http://localhost:11434/v1`.
    pub url: String,
    /// Sent as `Authorization: Bearer`; never logged or echoed.
    pub api_key: Option<String>,
    pub protocol: Protocol,
    /// Longest wait for an answer to begin and between its pieces.
    pub timeout: Duration,
    /// Attempts at a rate-limited (429) request before giving up.
    pub attempts: u32,
    /// Bounds on each turn.
    pub limits: TurnLimits,
}

impl std::fmt::Debug for UpstreamConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamConfig")
            .field("url", &self.url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<hidden>"))
            .field("protocol", &self.protocol)
            .field("timeout", &self.timeout)
            .field("limits", &self.limits)
            .finish()
    }
}

/// Makes the adapter for a configuration.
pub fn connect(config: UpstreamConfig) -> Result<Arc<dyn Upstream>, UpstreamError> {
    match config.protocol {
        Protocol::Chat => Ok(Arc::new(chat::ChatCompletions::new(config)?)),
        Protocol::Responses => Ok(Arc::new(responses::Responses::new(config)?)),
        Protocol::Anthropic => Ok(Arc::new(anthropic::Anthropic::new(config)?)),
    }
}

/// Upstreams by model-name prefix, and a default.
#[derive(Clone, Default)]
pub struct Router {
    routes: Vec<(String, Arc<dyn Upstream>)>,
    default: Option<Arc<dyn Upstream>>,
}

impl Router {
    pub fn new(default: Option<Arc<dyn Upstream>>) -> Self {
        Self {
            routes: Vec::new(),
            default,
        }
    }

    /// Models whose name starts with `prefix` go to `upstream` (the longest
    /// matching prefix wins).
    pub fn route(&mut self, prefix: &str, upstream: Arc<dyn Upstream>) {
        self.routes.push((prefix.to_owned(), upstream));
        self.routes
            .sort_by_key(|route| std::cmp::Reverse(route.0.len()));
    }

    /// The upstream for `model`.
    pub fn pick(&self, model: &str) -> Result<Arc<dyn Upstream>, UpstreamError> {
        self.routes
            .iter()
            .find(|(prefix, _)| model.starts_with(prefix.as_str()))
            .map(|(_, upstream)| Arc::clone(upstream))
            .or_else(|| self.default.clone())
            .ok_or_else(|| UpstreamError::NotConfigured(model.to_owned()))
    }

    /// The prefix of the route `model` goes to (`None`: the default's, or
    /// none configured).
    pub fn prefix_for(&self, model: &str) -> Option<&str> {
        self.routes
            .iter()
            .find(|(prefix, _)| model.starts_with(prefix.as_str()))
            .map(|(prefix, _)| prefix.as_str())
    }

    /// Whether no upstream answers any model (a first start: the model APIs
    /// answer 503).
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty() && self.default.is_none()
    }

    /// Every route, longest prefix first, then the default (read-only:
    /// the start-up summary and `GET /v1/models` read them).
    pub fn routes(&self) -> Vec<RouteInfo> {
        let info = |prefix: Option<&str>, upstream: &Arc<dyn Upstream>| RouteInfo {
            prefix: prefix.map(str::to_owned),
            protocol: upstream.protocol(),
            url: upstream.url().map(str::to_owned),
            upstream: Arc::clone(upstream),
        };
        self.routes
            .iter()
            .map(|(prefix, upstream)| info(Some(prefix), upstream))
            .chain(self.default.iter().map(|upstream| info(None, upstream)))
            .collect()
    }
}

/// One route of a [`Router`].
#[derive(Clone)]
pub struct RouteInfo {
    /// The model-name prefix it serves (`None`: the default route).
    pub prefix: Option<String>,
    pub protocol: Option<Protocol>,
    /// Its upstream's base URL.
    pub url: Option<String>,
    pub upstream: Arc<dyn Upstream>,
}

impl std::fmt::Debug for RouteInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteInfo")
            .field("prefix", &self.prefix)
            .field("protocol", &self.protocol)
            .field("url", &self.url)
            .finish()
    }
}

/// Reads a server-sent event stream, calling `on_data` with each event's
/// `data` as JSON (`[DONE]` ends it); `on_data` returns `false` to stop.
/// Every read waits at most `timeout`; lines and events are bounded by
/// [`SseLimits::DEFAULT`], nothing else (this is `shellgate local`'s
/// reader of its own server's stream; upstream turns are bounded by their
/// [`TurnLimits`] too).
pub async fn read_events(
    response: reqwest::Response,
    timeout: Duration,
    on_data: impl FnMut(Value) -> Result<bool, UpstreamError>,
) -> Result<(), UpstreamError> {
    let mut budget = transport::Budget::per_read(timeout);
    transport::read_events_within(response, &mut budget, SseLimits::DEFAULT, on_data).await
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Named(&'static str);

    #[async_trait]
    impl Upstream for Named {
        async fn complete(&self, _: &Turn, _: Option<&DeltaSink>) -> Result<Reply, UpstreamError> {
            Ok(Reply {
                text: self.0.to_owned(),
                tool_calls: Vec::new(),
                usage: Usage::default(),
                finish: Finish::Stop,
                ..Default::default()
            })
        }
    }

    fn turn() -> Turn {
        Turn {
            model: String::new(),
            messages: Vec::new(),
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
            temperature: None,
            top_p: None,
            max_output_tokens: None,
            parallel_tool_calls: None,
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn models_go_to_the_longest_matching_prefix_then_the_default() {
        let mut router = Router::new(Some(Arc::new(Named("default"))));
        router.route("claude", Arc::new(Named("anthropic")));
        router.route("claude-local", Arc::new(Named("local")));
        for (model, expected) in [
            ("claude-3", "anthropic"),
            ("claude-local-7b", "local"),
            ("gpt-4.1", "default"),
        ] {
            let reply = router
                .pick(model)
                .unwrap()
                .complete(&turn(), None)
                .await
                .unwrap();
            assert_eq!(reply.text, expected, "{model}");
        }
        assert!(matches!(
            Router::new(None).pick("x"),
            Err(UpstreamError::NotConfigured(_))
        ));
    }
}
