//! `POST /v1/responses`: the create request.
//!
//! Every top-level field is decided in one place, here:
//! - *consumed*: a typed field of [`CreateResponse`] (a wrong type is a 400
//!   naming it; ranges and cross-field rules are the server's `prepare`);
//! - *carried*: a field the SDK's `ResponseCreateParams` has that shellgate
//!   does not act on, listed in [`CARRIED`], kept as given in
//!   [`CreateResponse::carried`], for the upstream (a Responses upstream
//!   gets them verbatim; [`ReasoningParam`] and [`TextParam`] read the two
//!   whose meaning other protocols can say too);
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
    // Not in the SDK: Codex CLI sends it (its session and turn ids).
    "client_metadata",
    "context_management",
    "conversation",
    // Not in the SDK, as `presence_penalty` is not: the Open Responses
    // specification has both (as Chat Completions does).
    "frequency_penalty",
    "image",
    "include",
    "moderation",
    "presence_penalty",
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

/// The first of a request's other keys (`carried`) that is not among the
/// `kept` ones: a request body's one rule for the keys it does not read.
pub(crate) fn first_refused<'a>(carried: &'a Map<String, Value>, kept: &[&str]) -> Option<&'a str> {
    carried
        .keys()
        .map(String::as_str)
        .find(|key| !kept.contains(key))
}

impl CreateResponse {
    /// The first key that is neither consumed nor carried.
    pub fn refused(&self) -> Option<&str> {
        first_refused(&self.carried, CARRIED)
    }
}

/// Fields of the SDK's `InputTokenCountParams` that are accepted and
/// carried as given (to a Responses upstream's own count), not acted on.
pub const INPUT_TOKENS_CARRIED: &[&str] = &[
    "conversation",
    "personality",
    "reasoning",
    "text",
    "truncation",
];

/// `POST /v1/responses/input_tokens`: the parts of a create request that
/// make the model's input. Fields are consumed, carried
/// ([`INPUT_TOKENS_CARRIED`]) or refused, as for [`CreateResponse`].
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct InputTokensRequest {
    /// Which upstream model counts (required, checked by the server).
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
    pub parallel_tool_calls: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_response_id: Option<String>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub carried: Map<String, Value>,
}

impl InputTokensRequest {
    /// The first key that is neither consumed nor carried.
    pub fn refused(&self) -> Option<&str> {
        first_refused(&self.carried, INPUT_TOKENS_CARRIED)
    }

    /// The create request whose input this counts.
    pub fn into_create(self) -> CreateResponse {
        CreateResponse {
            model: self.model,
            input: self.input,
            instructions: self.instructions,
            tools: self.tools,
            tool_choice: self.tool_choice,
            parallel_tool_calls: self.parallel_tool_calls,
            previous_response_id: self.previous_response_id,
            carried: self.carried,
            ..CreateResponse::default()
        }
    }
}

/// The answer of `POST /v1/responses/input_tokens` (a Responses upstream's
/// too).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct InputTokenCount {
    /// Always `response.input_tokens`.
    #[serde(default = "input_tokens_object")]
    pub object: String,
    pub input_tokens: u64,
}

impl InputTokenCount {
    pub fn new(input_tokens: u64) -> Self {
        InputTokenCount {
            object: input_tokens_object(),
            input_tokens,
        }
    }
}

fn input_tokens_object() -> String {
    "response.input_tokens".to_owned()
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

/// `reasoning`, read for what other protocols can say too (the field
/// itself is carried verbatim). Read leniently: what it does not name, or
/// names with another type, is left to the upstream.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct ReasoningParam {
    #[serde(default, deserialize_with = "lenient")]
    pub effort: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub summary: Option<String>,
    /// The older name of `summary`.
    #[serde(default, deserialize_with = "lenient")]
    pub generate_summary: Option<String>,
}

/// `text`, read for its `format` (the field itself is carried verbatim).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct TextParam {
    #[serde(default, deserialize_with = "lenient")]
    pub format: Option<TextFormatParam>,
}

/// `text.format`: plain text, JSON matching a schema, or any JSON object.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TextFormatParam {
    Text,
    JsonSchema {
        name: String,
        #[serde(default)]
        description: Option<String>,
        schema: Value,
        #[serde(default)]
        strict: Option<bool>,
    },
    JsonObject,
}

/// A value of the wrong shape reads as absent (`None`): these fields are
/// the upstream's to judge.
fn lenient<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    let value = Value::deserialize(deserializer)?;
    Ok(serde_json::from_value(value).ok())
}

impl CreateResponse {
    /// The carried `reasoning`, read (`None`: not given, or not an object).
    pub fn reasoning(&self) -> Option<ReasoningParam> {
        let value = self.carried.get("reasoning")?;
        serde_json::from_value(value.clone()).ok()
    }

    /// The carried `text` as the response object echoes it (`None`: not
    /// given, or of a shape shellgate does not know).
    pub fn text_echo(&self) -> Option<super::ResponseText> {
        let value = self.carried.get("text")?;
        serde_json::from_value(value.clone()).ok()
    }

    /// The carried `reasoning` as the response object echoes it (`None`:
    /// not given, or not an object).
    pub fn reasoning_echo(&self) -> Option<super::ResponseReasoning> {
        let mut echo: super::ResponseReasoning =
            serde_json::from_value(self.carried.get("reasoning")?.clone()).ok()?;
        // The older name of `summary` is reported by the newer one.
        if let Some(Value::String(summary)) = echo.extra.remove("generate_summary") {
            echo.summary.get_or_insert(summary);
        }
        Some(echo)
    }

    /// A carried number (`presence_penalty`, ...) as the response object
    /// echoes it (`None`: not given, or not a number).
    pub fn carried_number(&self, key: &str) -> Option<f64> {
        self.carried.get(key)?.as_f64()
    }

    /// A carried whole number (`top_logprobs`) as the response object
    /// echoes it (`None`: not given, or not a whole number).
    pub fn carried_count(&self, key: &str) -> Option<u64> {
        self.carried.get(key)?.as_u64()
    }

    /// A carried string (`service_tier`, `safety_identifier`, ...) as the
    /// response object echoes it (`None`: not given, or not a string).
    pub fn carried_string(&self, key: &str) -> Option<String> {
        self.carried.get(key)?.as_str().map(str::to_owned)
    }

    /// The carried `truncation`, read (`None`: not given, or unknown).
    pub fn truncation(&self) -> Option<super::Truncation> {
        let value = self.carried.get("truncation")?;
        serde_json::from_value(value.clone()).ok()
    }

    /// The carried `text.format`, read (`None`: not given, or of a shape
    /// shellgate does not know).
    pub fn text_format(&self) -> Option<TextFormatParam> {
        let value = self.carried.get("text")?;
        serde_json::from_value::<TextParam>(value.clone())
            .ok()?
            .format
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn request(value: Value) -> CreateResponse {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn reasoning_and_text_format_are_read_leniently_and_stay_carried() {
        let body = request(json!({
            "model": "m",
            "reasoning": {"effort": "high", "summary": "auto", "other": 1},
            "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}, "strict": true}, "verbosity": "low"},
            "client_metadata": {"session_id": "s"},
        }));
        assert_eq!(body.refused(), None);
        assert_eq!(
            body.reasoning(),
            Some(ReasoningParam {
                effort: Some("high".into()),
                summary: Some("auto".into()),
                generate_summary: None,
            })
        );
        assert!(matches!(
            body.text_format(),
            Some(TextFormatParam::JsonSchema { name, strict: Some(true), .. }) if name == "n"
        ));
        assert!(body.carried.contains_key("text"));
        // Shapes shellgate does not know are left to the upstream.
        let odd = request(json!({
            "reasoning": {"effort": 3},
            "text": {"format": {"type": "grammar"}},
        }));
        assert_eq!(odd.reasoning(), Some(ReasoningParam::default()));
        assert_eq!(odd.text_format(), None);
        assert_eq!(
            request(json!({"text": {"format": {"type": "json_object"}}})).text_format(),
            Some(TextFormatParam::JsonObject)
        );
        assert_eq!(request(json!({})).reasoning(), None);
        // As the response object echoes them.
        let echo = body.text_echo().unwrap();
        assert!(matches!(
            echo.format,
            super::super::TextFormat::JsonSchema { .. }
        ));
        assert_eq!(echo.extra["verbosity"], "low");
        assert_eq!(odd.text_echo(), None);
        assert_eq!(
            request(json!({"truncation": "auto"})).truncation(),
            Some(super::super::Truncation::Auto)
        );
        assert_eq!(
            request(json!({"truncation": "sometimes"})).truncation(),
            None
        );
    }
}
