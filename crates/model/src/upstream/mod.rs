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
use serde_json::Value;

pub use sse::SseLimits;

pub use crate::turn::{
    Carry, CustomFormat, Delta, DeltaSink, Finish, Message, NativeItem, OutputFormat, Protocol,
    Reasoning, ReasoningRequest, Reply, Sealed, ToolCall, ToolChoice, ToolNamespace, ToolSpec,
    Turn, Usage,
};

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
    /// Attempts at a rate-limited (429) or unanswered request before
    /// giving up.
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
