//! Upstream models: whatever answers the model's turns. The loop speaks one
//! neutral shape ([`Turn`] in, [`Reply`] out); each adapter translates it to
//! one wire protocol and streams the answer back as it comes.
//!
//! - [`chat`]: OpenAI Chat Completions, what vLLM, Ollama, llama.cpp's
//!   server, LiteLLM and OpenRouter speak (the default).
//!
//! Every failure is an [`UpstreamError`]: HTTP errors, timeouts and
//! malformed output end the response as `failed` with a clear message; a
//! 429 is retried with backoff first. An upstream's key never leaves its
//! adapter: not in errors, logs, responses or the store.

pub mod chat;

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
}

impl std::str::FromStr for Protocol {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "chat" => Ok(Protocol::Chat),
            other => Err(format!(
                "unknown upstream protocol {other:?}; this build speaks: chat"
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
