//! The Messages API's answers: the [`Message`], its [`Usage`] and
//! [`Container`], and Anthropic's error body ([`ErrorResponse`]).
//!
//! Read from an upstream as well as written by the server: an optional
//! field is omitted when absent (the SDK reads a missing key and `null`
//! alike), and keys not typed are kept in `extra`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::blocks::{ContentBlock, Extra};

/// A response of `POST /v1/messages` (and the `message` of
/// `message_start`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Message {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: MessageKind,
    pub role: AssistantRole,
    pub model: String,
    pub content: Vec<ContentBlock>,
    /// Why the model stopped (`null` in `message_start`).
    pub stop_reason: Option<StopReason>,
    pub stop_sequence: Option<String>,
    pub usage: Usage,
    /// The container the server tools ran in: `Some(None)` is written as
    /// `null` (the final message of a run without one); `None` is not written
    /// at all (`message_start`, which Anthropic sends without the key).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    #[schema(value_type = Option<Container>)]
    pub container: Option<Option<Container>>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `"message"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MessageKind {
    #[default]
    Message,
}

/// `"assistant"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AssistantRole {
    #[default]
    Assistant,
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    MaxTokens,
    StopSequence,
    ToolUse,
    /// A server tool's loop paused: send the conversation again to go on.
    PauseTurn,
    Refusal,
    ModelContextWindowExceeded,
    /// A reason this crate does not know (an upstream's newer one).
    #[serde(untagged)]
    Other(String),
}

/// Tokens, and (shellgate's) the sandbox's seconds and their cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation_input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_tier: Option<String>,
    /// Seconds of sandbox time the request used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_seconds: Option<f64>,
    /// What that time costs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_tool_cost: Option<f64>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// The container a response's server tools ran in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Container {
    pub id: String,
    /// When it expires (RFC 3339).
    pub expires_at: Option<String>,
    /// The skills loaded in it (left out when it holds none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skills: Option<Vec<ContainerSkill>>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// A skill loaded in a response's container (`container.skills[i]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ContainerSkill {
    pub skill_id: String,
    /// `anthropic` (a skill the server ships) or `custom`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The version loaded.
    pub version: String,
}

/// Anthropic's error body: `{"type": "error", "error": {"type", "message"}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ErrorResponse {
    #[serde(rename = "type")]
    pub kind: ErrorResponseKind,
    pub error: ErrorObject,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

impl ErrorResponse {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ErrorResponse {
            kind: ErrorResponseKind::Error,
            error: ErrorObject::new(kind, message),
            extra: Extra::new(),
        }
    }
}

/// `"error"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorResponseKind {
    #[default]
    Error,
}

/// What went wrong, and its kind (which the SDK maps to an exception).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ErrorObject {
    #[serde(rename = "type")]
    pub kind: ErrorKind,
    pub message: String,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

impl ErrorObject {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ErrorObject {
            kind,
            message: message.into(),
            extra: Extra::new(),
        }
    }
}

/// The kinds of Anthropic's errors.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    InvalidRequestError,
    AuthenticationError,
    BillingError,
    PermissionError,
    NotFoundError,
    RequestTooLarge,
    RateLimitError,
    TimeoutError,
    ApiError,
    OverloadedError,
    /// A kind this crate does not know (an upstream's newer one).
    #[serde(untagged)]
    Other(String),
}

/// A key that is there, even as `null`, is `Some`: serde's `default` leaves an
/// absent one `None`.
fn present<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}
