//! The response object (`object: "response"`) and its usage.
//!
//! Every key is always written (`null` when unset), as the API does; what
//! the request gave is echoed (`instructions`, `metadata`, `tools`, `text`,
//! `truncation`, ...; the last two as given when they are of a shape this
//! module knows, else their defaults: plain text, no truncation). Sampling
//! settings the request left out are the defaults the API reports
//! (`temperature` and `top_p` 1, penalties 0, `service_tier` `default`).
//! A stored object that lacks a key, or has `null` for a number, reads
//! with that default.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::items::Item;
use super::tools::{Tool, ToolChoice};

/// Where a response is.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResponseStatus {
    Queued,
    InProgress,
    Completed,
    Incomplete,
    Failed,
    Cancelled,
}

impl ResponseStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ResponseStatus::Queued => "queued",
            ResponseStatus::InProgress => "in_progress",
            ResponseStatus::Completed => "completed",
            ResponseStatus::Incomplete => "incomplete",
            ResponseStatus::Failed => "failed",
            ResponseStatus::Cancelled => "cancelled",
        }
    }
}

/// `error` of a failed response.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct ResponseError {
    pub code: String,
    pub message: String,
}

/// `incomplete_details`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct IncompleteDetails {
    pub reason: String,
}

/// `text`: the format of the answer's text (and its other options, such
/// as `verbosity`, as given).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ResponseText {
    pub format: TextFormat,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Map<String, Value>,
}

impl Default for ResponseText {
    fn default() -> Self {
        ResponseText {
            format: TextFormat::Text,
            extra: Map::new(),
        }
    }
}

/// `text.format`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TextFormat {
    Text,
    /// JSON matching `schema`.
    JsonSchema {
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
        #[schema(value_type = Object)]
        schema: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        strict: Option<bool>,
    },
    /// Any JSON object.
    JsonObject,
}

/// `truncation`: shellgate never truncates.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Truncation {
    #[default]
    Disabled,
    Auto,
}

/// `usage.input_tokens_details`.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct InputTokensDetails {
    pub cached_tokens: u64,
    pub cache_write_tokens: u64,
}

/// `usage.output_tokens_details`.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct OutputTokensDetails {
    pub reasoning_tokens: u64,
}

/// `usage`: tokens, and (shellgate's extension, as OpenRouter reports it)
/// the sandbox time and its cost.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ResponseUsage {
    pub input_tokens: u64,
    pub input_tokens_details: InputTokensDetails,
    pub output_tokens: u64,
    pub output_tokens_details: OutputTokensDetails,
    pub total_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_tool_cost: Option<f64>,
}

impl ResponseUsage {
    /// The usage of `input` and `output` tokens.
    pub fn tokens(input_tokens: u64, output_tokens: u64) -> Self {
        ResponseUsage {
            input_tokens,
            output_tokens,
            total_tokens: input_tokens + output_tokens,
            ..ResponseUsage::default()
        }
    }
}

/// The response object.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct Response {
    pub id: String,
    /// Always `"response"`.
    pub object: String,
    /// Whole seconds (the SDK reads a float; one with no fraction is read).
    #[serde(deserialize_with = "whole_seconds")]
    pub created_at: i64,
    /// When it completed (whole seconds); `null` until then, and for a
    /// response that did not complete.
    #[serde(default, deserialize_with = "optional_whole_seconds")]
    pub completed_at: Option<i64>,
    pub status: ResponseStatus,
    pub background: bool,
    pub model: String,
    pub output: Vec<Item>,
    pub error: Option<ResponseError>,
    pub incomplete_details: Option<IncompleteDetails>,
    pub instructions: Option<String>,
    #[schema(value_type = Object)]
    pub metadata: Map<String, Value>,
    pub parallel_tool_calls: bool,
    #[serde(default = "one", deserialize_with = "number_or_one")]
    pub temperature: f64,
    #[serde(default = "one", deserialize_with = "number_or_one")]
    pub top_p: f64,
    #[serde(default, deserialize_with = "number_or_zero")]
    pub presence_penalty: f64,
    #[serde(default, deserialize_with = "number_or_zero")]
    pub frequency_penalty: f64,
    #[serde(default, deserialize_with = "count_or_zero")]
    pub top_logprobs: u64,
    #[serde(default)]
    pub reasoning: Option<ResponseReasoning>,
    #[serde(default = "default_service_tier", deserialize_with = "tier_or_default")]
    pub service_tier: String,
    #[serde(default)]
    pub safety_identifier: Option<String>,
    #[serde(default)]
    pub prompt_cache_key: Option<String>,
    pub tool_choice: ToolChoice,
    pub tools: Vec<Tool>,
    pub max_output_tokens: Option<u64>,
    pub max_tool_calls: u64,
    pub previous_response_id: Option<String>,
    pub store: bool,
    pub user: Option<String>,
    pub text: ResponseText,
    pub truncation: Truncation,
    pub usage: Option<ResponseUsage>,
}

/// `reasoning`: the effort and summary asked for (`null` each when the
/// request named none), and its other keys as given.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ResponseReasoning {
    pub effort: Option<String>,
    pub summary: Option<String>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Map<String, Value>,
}

/// The service tier the API reports when none was asked for.
pub const DEFAULT_SERVICE_TIER: &str = "default";

fn default_service_tier() -> String {
    DEFAULT_SERVICE_TIER.to_owned()
}

fn one() -> f64 {
    1.0
}

fn number_or_one<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(deserializer)?.unwrap_or(1.0))
}

fn number_or_zero<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(deserializer)?.unwrap_or(0.0))
}

fn count_or_zero<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    Ok(Option::<u64>::deserialize(deserializer)?.unwrap_or(0))
}

fn tier_or_default<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(deserializer)?.unwrap_or_else(default_service_tier))
}

/// `DELETE /v1/responses/{id}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct ResponseDeleted {
    pub id: String,
    /// Always `"response"`.
    pub object: String,
    pub deleted: bool,
}

/// A time in whole seconds, written as an integer or a float (the SDK's
/// `created_at: float`) without a fraction.
fn whole_seconds<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    use serde::de::Error;
    let number = serde_json::Number::deserialize(deserializer)?;
    if let Some(whole) = number.as_i64() {
        return Ok(whole);
    }
    match number.as_f64() {
        Some(float) if float.fract() == 0.0 && float.abs() < 9.0e15 => Ok(float as i64),
        _ => Err(D::Error::custom("a time must be whole seconds")),
    }
}

/// [`whole_seconds`], or `null`.
fn optional_whole_seconds<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<i64>, D::Error> {
    #[derive(Deserialize)]
    struct Seconds(#[serde(deserialize_with = "whole_seconds")] i64);
    Ok(Option::<Seconds>::deserialize(deserializer)?.map(|Seconds(seconds)| seconds))
}
