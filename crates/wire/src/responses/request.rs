//! `POST /v1/responses`: the create request.
//!
//! Every top-level field is decided in one place, here:
//! - *consumed*: a typed field of [`CreateResponse`] (a wrong type is a 400
//!   naming it; ranges and cross-field rules are the server's `prepare`);
//! - *carried*: a field the SDK's `ResponseCreateParams` has that shellgate
//!   does not act on, listed in [`CARRIED`], kept as given in
//!   [`CreateResponse::carried`] (for the upstream pass-through to come);
//! - *refused*: any other key (`unknown_parameter`, a 400 naming it).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::items::Item;
use super::tools::{Tool, ToolChoice};

/// Fields of the SDK's `ResponseCreateParams` that are accepted and carried
/// as given, not acted on.
pub const CARRIED: &[&str] = &[
    "access_programs",
    "background_options",
    "context_management",
    "conversation",
    "image",
    "include",
    "moderation",
    "prompt",
    "prompt_cache_key",
    "prompt_cache_options",
    "prompt_cache_retention",
    "reasoning",
    "safety_identifier",
    "service_tier",
    "stream_options",
    "text",
    "top_logprobs",
    "truncation",
];

/// The create request. `None` is "not given" (or `null`): the default.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct CreateResponse {
    /// Which upstream model answers (required, checked by the server).
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Input>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Tool>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_calls: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_response_id: Option<String>,
    /// Default `true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub background: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// Echoed in the response object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// Echoed in the response object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// OpenRouter's extension: a session's container is kept across
    /// responses (only letters, digits, `_` and `-` count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Every other key: [`CARRIED`] ones are kept, others refused (see
    /// [`CreateResponse::refused`]).
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub carried: Map<String, Value>,
}

impl CreateResponse {
    /// The first key that is neither consumed nor carried.
    pub fn refused(&self) -> Option<&str> {
        self.carried
            .keys()
            .map(String::as_str)
            .find(|key| !CARRIED.contains(key))
    }
}

/// `input`: a string (one user message) or items.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(untagged)]
pub enum Input {
    Text(String),
    Items(Vec<Item>),
}

impl<'de> Deserialize<'de> for Input {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::String(text) => Ok(Input::Text(text)),
            Value::Array(items) => Ok(Input::Items(super::nested_list(items)?)),
            _ => Err(super::custom(
                "",
                "input must be a string or an array of items",
            )),
        }
    }
}

impl Input {
    /// The items (a string is one user message).
    pub fn into_items(self) -> Vec<Item> {
        match self {
            Input::Text(text) => vec![Item::user_text(text)],
            Input::Items(items) => items,
        }
    }
}
