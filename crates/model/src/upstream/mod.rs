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
//! 429 is retried with backoff first. An upstream's key never leaves its
//! adapter: not in errors, logs, responses or the store.

pub mod anthropic;
pub mod chat;
pub mod responses;

use std::sync::Arc;
use std::time::Duration;

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
}

impl std::fmt::Debug for UpstreamConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamConfig")
            .field("url", &self.url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<hidden>"))
            .field("protocol", &self.protocol)
            .field("timeout", &self.timeout)
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
/// 429 with backoff (its `Retry-After` when given, at most 10 s); any other
/// status but 2xx is an error with the upstream's message.
pub(crate) async fn send(
    config: &UpstreamConfig,
    request: impl Fn() -> reqwest::RequestBuilder,
) -> Result<reqwest::Response, UpstreamError> {
    let timeout = config.timeout;
    let seconds = timeout.as_secs();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let response = match tokio::time::timeout(timeout, request().send()).await {
            Err(_) => return Err(UpstreamError::Timeout { seconds }),
            Ok(Err(e)) if e.is_timeout() => return Err(UpstreamError::Timeout { seconds }),
            // reqwest's errors name the URL, never the key.
            Ok(Err(e)) => return Err(UpstreamError::Unreachable(e.to_string())),
            Ok(Ok(response)) => response,
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
                .map(Duration::from_secs_f64)
                .unwrap_or(Duration::from_millis(500 << attempt.min(6)))
                .min(Duration::from_secs(10));
            tokio::time::sleep(wait).await;
            continue;
        }
        if !(200..300).contains(&status) {
            let text = tokio::time::timeout(timeout, response.text())
                .await
                .ok()
                .and_then(Result::ok)
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

/// Reads a whole JSON body.
pub(crate) async fn json_body(
    response: reqwest::Response,
    timeout: Duration,
) -> Result<Value, UpstreamError> {
    let text = tokio::time::timeout(timeout, response.text())
        .await
        .map_err(|_| UpstreamError::Timeout {
            seconds: timeout.as_secs(),
        })?
        .map_err(|e| UpstreamError::Unreachable(e.to_string()))?;
    serde_json::from_str(&text)
        .map_err(|_| UpstreamError::Malformed(format!("not JSON: {}", excerpt(&text))))
}

/// Reads a server-sent event stream, calling `on_data` with each event's
/// `data` as JSON (`[DONE]` ends it); `on_data` returns `false` to stop.
/// Every read waits at most `timeout`. (Also `shellgate local`'s reader of
/// a Responses API stream.)
pub async fn read_events(
    response: reqwest::Response,
    timeout: Duration,
    mut on_data: impl FnMut(Value) -> Result<bool, UpstreamError>,
) -> Result<(), UpstreamError> {
    use tokio_stream::StreamExt;
    let seconds = timeout.as_secs();
    let mut stream = response.bytes_stream();
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let chunk = match tokio::time::timeout(timeout, stream.next()).await {
            Err(_) => return Err(UpstreamError::Timeout { seconds }),
            Ok(None) => return Ok(()),
            Ok(Some(Err(e))) => return Err(UpstreamError::Unreachable(e.to_string())),
            Ok(Some(Ok(chunk))) => chunk,
        };
        pending.extend_from_slice(&chunk);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let Some(data) = line.trim().strip_prefix("data:") else {
                continue;
            };
            let data = data.trim();
            if data == "[DONE]" {
                return Ok(());
            }
            let event: Value = serde_json::from_str(data).map_err(|_| {
                UpstreamError::Malformed(format!("an unreadable event: {}", excerpt(data)))
            })?;
            if !on_data(event)? {
                return Ok(());
            }
        }
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
