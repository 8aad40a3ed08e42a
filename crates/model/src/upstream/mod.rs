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

pub mod anthropic;
pub mod chat;
pub mod responses;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

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
}

/// A call of a tool the model made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments, a JSON object as text (as the model wrote it).
    pub arguments: String,
}

/// A tool the model may call (a function with JSON-schema parameters).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// Which tool the model must call, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    Auto,
    Required,
    None,
    Named(String),
}

/// One model turn asked of an upstream.
#[derive(Debug, Clone)]
pub struct Turn {
    pub model: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub tool_choice: ToolChoice,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub max_output_tokens: Option<u32>,
    pub parallel_tool_calls: Option<bool>,
}

/// Tokens an upstream counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Self) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
    }
}

/// Why a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// The model finished (an answer, or tool calls).
    Stop,
    /// It ran out of `max_output_tokens`.
    Length,
    /// The upstream refused the content.
    ContentFilter,
}

/// An upstream's answer to one turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
    pub finish: Finish,
}

/// Pieces of a reply as they arrive.
#[derive(Debug, Clone, PartialEq, Eq)]
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
}

/// Where deltas go.
pub type DeltaSink = tokio::sync::mpsc::UnboundedSender<Delta>;

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

/// Whether a tool call's arguments are within `limit`.
pub(crate) fn check_arguments(arguments: &str, limit: usize) -> Result<(), UpstreamError> {
    if arguments.len() > limit {
        return Err(UpstreamError::ToolCallTooLarge { limit });
    }
    Ok(())
}

/// Whether every tool call of a reply is within `limit`.
pub(crate) fn check_reply(reply: Reply, limit: usize) -> Result<Reply, UpstreamError> {
    for call in &reply.tool_calls {
        check_arguments(&call.arguments, limit)?;
    }
    Ok(reply)
}

/// What is left of one turn: its deadline, the wait for each piece, and
/// the bytes it may still read.
pub(crate) struct Budget {
    per_read: Duration,
    deadline: Option<(Instant, u64)>,
    max_bytes: usize,
    read: usize,
}

impl Budget {
    /// A turn beginning now.
    pub fn turn(config: &UpstreamConfig) -> Self {
        let limits = config.limits;
        Self {
            per_read: config.timeout,
            deadline: Instant::now()
                .checked_add(limits.turn_timeout)
                .map(|at| (at, limits.turn_timeout.as_secs())),
            max_bytes: limits.max_answer_bytes,
            read: 0,
        }
    }

    /// Waits for `future` at most the wait for one piece, and never past
    /// the turn's deadline.
    pub async fn wait<F: std::future::Future>(
        &self,
        future: F,
    ) -> Result<F::Output, UpstreamError> {
        let mut wait = self.per_read;
        if let Some((at, _)) = self.deadline {
            wait = wait.min(at.saturating_duration_since(Instant::now()));
        }
        tokio::time::timeout(wait, future)
            .await
            .map_err(|_| self.timed_out())
    }

    /// The error for a wait that ran out: the turn's, once it is over.
    pub fn timed_out(&self) -> UpstreamError {
        match self.deadline {
            Some((at, seconds)) if Instant::now() >= at => UpstreamError::TurnTimeout { seconds },
            _ => UpstreamError::Timeout {
                seconds: self.per_read.as_secs(),
            },
        }
    }

    /// Sleeps (a backoff), unless that would pass the turn's deadline.
    pub async fn sleep(&self, wait: Duration) -> Result<(), UpstreamError> {
        if let Some((at, seconds)) = self.deadline {
            if Instant::now() + wait >= at {
                return Err(UpstreamError::TurnTimeout { seconds });
            }
        }
        tokio::time::sleep(wait).await;
        Ok(())
    }

    /// Counts `bytes` more of the answer.
    pub fn count(&mut self, bytes: usize) -> Result<(), UpstreamError> {
        self.read = self.read.saturating_add(bytes);
        if self.read > self.max_bytes {
            return Err(UpstreamError::AnswerTooLarge {
                limit: self.max_bytes,
            });
        }
        Ok(())
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
}

/// Shortens an upstream's error text for a response (bodies can be long).
pub(crate) fn excerpt(text: &str) -> String {
    const MOST: usize = 1000;
    let text = text.trim();
    if text.len() <= MOST {
        return text.to_owned();
    }
    let mut end = MOST;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// What every adapter holds: where its upstream is, and an HTTP client.
pub(crate) struct Endpoint {
    pub config: UpstreamConfig,
    pub client: reqwest::Client,
}

impl Endpoint {
    pub fn new(config: UpstreamConfig) -> Result<Self, UpstreamError> {
        let client = client(&config)?;
        Ok(Self { config, client })
    }

    /// `{url}/{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.config.url.trim_end_matches('/'))
    }
}

/// Sets the sampling parameters every protocol names alike.
pub(crate) fn sampling(body: &mut Value, turn: &Turn) {
    if let Some(t) = turn.temperature {
        body["temperature"] = serde_json::json!(t);
    }
    if let Some(p) = turn.top_p {
        body["top_p"] = serde_json::json!(p);
    }
}

/// An HTTP client for an upstream.
pub(crate) fn client(config: &UpstreamConfig) -> Result<reqwest::Client, UpstreamError> {
    reqwest::Client::builder()
        .connect_timeout(config.timeout)
        .build()
        .map_err(|e| UpstreamError::Unreachable(e.to_string()))
}

/// Sends a request (made afresh for each attempt by `request`), retrying a
/// 429 with backoff (its `Retry-After` when given, at most 10 s, never past
/// the turn's deadline); any other status but 2xx is an error with the
/// upstream's message.
pub(crate) async fn send(
    config: &UpstreamConfig,
    budget: &Budget,
    request: impl Fn() -> reqwest::RequestBuilder,
) -> Result<reqwest::Response, UpstreamError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let response = match budget.wait(request().send()).await? {
            Err(e) if e.is_timeout() => return Err(budget.timed_out()),
            // reqwest's errors name the URL, never the key.
            Err(e) => return Err(UpstreamError::Unreachable(e.to_string())),
            Ok(response) => response,
        };
        let status = response.status().as_u16();
        if status == 429 {
            if attempt >= config.attempts.max(1) {
                return Err(UpstreamError::RateLimited { attempts: attempt });
            }
            let wait = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<f64>().ok())
                .filter(|seconds| seconds.is_finite() && *seconds >= 0.0)
                .map(|seconds| Duration::from_secs_f64(seconds.min(10.0)))
                .unwrap_or(Duration::from_millis(500 << attempt.min(6)))
                .min(Duration::from_secs(10));
            budget.sleep(wait).await?;
            continue;
        }
        if !(200..300).contains(&status) {
            // Only the start of an error body is read: it is only shown.
            const ERROR_BODY_BYTES: usize = 64 * 1024;
            let text = read_body(response, budget, ERROR_BODY_BYTES, false)
                .await
                .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
                .unwrap_or_default();
            let message = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| error_message(&v))
                .unwrap_or(text);
            return Err(UpstreamError::Status {
                status,
                message: excerpt(&message),
            });
        }
        return Ok(response);
    }
}

/// Reads a body, a piece at a time within `budget`, at most `most` bytes:
/// past them it is an error (`strict`) or cut off there.
async fn read_body(
    mut response: reqwest::Response,
    budget: &Budget,
    most: usize,
    strict: bool,
) -> Result<Vec<u8>, UpstreamError> {
    let mut body = Vec::new();
    loop {
        let chunk = match budget.wait(response.chunk()).await? {
            Err(e) => return Err(UpstreamError::Unreachable(e.to_string())),
            Ok(None) => return Ok(body),
            Ok(Some(chunk)) => chunk,
        };
        if body.len() + chunk.len() > most {
            if strict {
                return Err(UpstreamError::AnswerTooLarge { limit: most });
            }
            body.extend_from_slice(&chunk[..most - body.len()]);
            return Ok(body);
        }
        body.extend_from_slice(&chunk);
    }
}

/// The message of an `{"error": ...}` (OpenAI's and Anthropic's shape).
pub(crate) fn error_message(value: &Value) -> Option<String> {
    let error = value.get("error")?;
    if error.is_null() {
        return None;
    }
    Some(
        error
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| error.to_string()),
    )
}

/// Whether a response is an event stream.
pub(crate) fn is_event_stream(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// Reads a whole JSON body, within the turn's budget.
pub(crate) async fn json_body(
    response: reqwest::Response,
    budget: &mut Budget,
) -> Result<Value, UpstreamError> {
    let most = budget.max_bytes.saturating_sub(budget.read);
    let bytes = read_body(response, budget, most, true)
        .await
        .map_err(|e| match e {
            UpstreamError::AnswerTooLarge { .. } => UpstreamError::AnswerTooLarge {
                limit: budget.max_bytes,
            },
            other => other,
        })?;
    budget.count(bytes.len())?;
    serde_json::from_slice(&bytes).map_err(|_| {
        UpstreamError::Malformed(format!(
            "not JSON: {}",
            excerpt(&String::from_utf8_lossy(&bytes))
        ))
    })
}

/// Reads a server-sent event stream, calling `on_data` with each event's
/// `data` as JSON (`[DONE]` ends it); `on_data` returns `false` to stop.
/// Every read waits at most `timeout`; nothing else is bounded (this is
/// `shellgate local`'s reader of its own server's stream; upstream turns
/// use [`read_events_within`]).
pub async fn read_events(
    response: reqwest::Response,
    timeout: Duration,
    on_data: impl FnMut(Value) -> Result<bool, UpstreamError>,
) -> Result<(), UpstreamError> {
    let mut budget = Budget {
        per_read: timeout,
        deadline: None,
        max_bytes: usize::MAX,
        read: 0,
    };
    read_events_within(response, &mut budget, on_data).await
}

/// Reads a server-sent event stream within a turn's `budget` (its deadline,
/// the wait for each piece, the answer's bytes), calling `on_data` with
/// each event's `data` as JSON (`[DONE]` ends it); `on_data` returns
/// `false` to stop. Linear in the stream's length: each byte is looked at
/// once for the end of its line, and only whole lines are moved.
pub(crate) async fn read_events_within(
    response: reqwest::Response,
    budget: &mut Budget,
    mut on_data: impl FnMut(Value) -> Result<bool, UpstreamError>,
) -> Result<(), UpstreamError> {
    use tokio_stream::StreamExt;
    let mut stream = response.bytes_stream();
    let mut lines = Lines::default();
    loop {
        let chunk = match budget.wait(stream.next()).await? {
            None => return Ok(()),
            Some(Err(e)) => return Err(UpstreamError::Unreachable(e.to_string())),
            Some(Ok(chunk)) => chunk,
        };
        budget.count(chunk.len())?;
        let go_on = lines.push(&chunk, |line| {
            let line = String::from_utf8_lossy(line);
            let Some(data) = line.trim().strip_prefix("data:") else {
                return Ok(true);
            };
            let data = data.trim();
            if data == "[DONE]" {
                return Ok(false);
            }
            let event: Value = serde_json::from_str(data).map_err(|_| {
                UpstreamError::Malformed(format!("an unreadable event: {}", excerpt(data)))
            })?;
            on_data(event)
        })?;
        if !go_on {
            return Ok(());
        }
    }
}

/// A byte stream cut into lines in linear time: each byte is examined once
/// for a line's end, and the bytes left after a chunk's last whole line (a
/// partial line) are moved once, to the front. (Searching the whole buffer
/// again per chunk, or removing each line from the front of a large chunk,
/// is quadratic: a 16 MiB tool call took seconds.)
#[derive(Default)]
pub(crate) struct Lines {
    /// A partial line, waiting for its end.
    pending: Vec<u8>,
    /// Bytes examined for a line's end, and bytes moved: for tests.
    examined: usize,
    moved: usize,
}

impl Lines {
    /// Adds `chunk`, calling `each` with every line it completes (without
    /// its `\n`); `each` returns `false` to stop (then so does this).
    pub fn push(
        &mut self,
        chunk: &[u8],
        mut each: impl FnMut(&[u8]) -> Result<bool, UpstreamError>,
    ) -> Result<bool, UpstreamError> {
        // Only the new bytes are searched: the partial line has no end.
        let mut search = self.pending.len();
        self.pending.extend_from_slice(chunk);
        let mut line_start = 0;
        while let Some(offset) = self.pending[search..].iter().position(|b| *b == b'\n') {
            let line_end = search + offset;
            self.examined += offset + 1;
            let go_on = each(&self.pending[line_start..line_end])?;
            line_start = line_end + 1;
            search = line_start;
            if !go_on {
                return Ok(false);
            }
        }
        self.examined += self.pending.len() - search;
        if line_start > 0 {
            self.moved += self.pending.len() - line_start;
            self.pending.drain(..line_start);
        }
        Ok(true)
    }
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
        }
    }

    #[test]
    fn lines_are_cut_in_linear_time_however_the_bytes_come() {
        // 16 MiB of events: in one chunk, and a byte at a time within one
        // 16 MiB line (the two quadratic cases of the old reader).
        let line = format!("data: {{\"x\":\"{}\"}}\n", "a".repeat(100));
        let many = line.repeat(16 * 1024 * 1024 / line.len());
        let mut lines = Lines::default();
        let mut count = 0;
        lines
            .push(many.as_bytes(), |l| {
                assert_eq!(l.len(), line.len() - 1);
                count += 1;
                Ok(true)
            })
            .unwrap();
        assert_eq!(count, many.len() / line.len());
        assert_eq!(lines.examined, many.len());
        assert_eq!(lines.moved, 0);

        let huge = format!("data: {}\n", "b".repeat(16 * 1024 * 1024));
        let mut lines = Lines::default();
        let mut seen = Vec::new();
        for piece in huge.as_bytes().chunks(8 * 1024) {
            lines
                .push(piece, |l| {
                    seen.push(l.len());
                    Ok(true)
                })
                .unwrap();
        }
        assert_eq!(seen, vec![huge.len() - 1]);
        assert_eq!(lines.examined, huge.len());
        assert_eq!(lines.moved, 0);
        // A partial line after whole ones is moved once, not per line.
        let mut lines = Lines::default();
        lines.push(b"a\nb\nc\npartial", |_| Ok(true)).unwrap();
        assert_eq!(lines.moved, "partial".len());
        let mut rest = Vec::new();
        lines
            .push(b" line\n", |l| {
                rest.push(l.to_vec());
                Ok(true)
            })
            .unwrap();
        assert_eq!(rest, vec![b"partial line".to_vec()]);
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
