//! OpenAI Chat Completions, as shellgate speaks it to an upstream model
//! (`POST /chat/completions`): the request it sends, the completion a
//! server that does not stream answers, and the chunks of one that does.
//!
//! Shapes follow the `openai` SDK's `types/chat/` models (what vLLM,
//! Ollama, llama.cpp's server, LiteLLM and OpenRouter speak too). The
//! request holds only what shellgate sends. The answers are read
//! leniently, as model servers differ: unknown fields are ignored, and a
//! field a server may leave out is optional; what the adapter cannot do
//! without (a completion's choices, a choice's message) it checks itself.
//! What shellgate serves at its own `/v1/chat/completions` is [`served`].

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

pub mod served;

/// A chat completion request.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ChatTool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ChatToolChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// How hard a reasoning model thinks (`low`, `medium`, `high`...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// The shape of the answer: `json_object`, or `json_schema` with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<served::ResponseFormat>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// Fields a client gave that Chat Completions takes under the same
    /// name (`prompt_cache_key`, `metadata`...), as the client wrote them.
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: serde_json::Map<String, Value>,
}

/// `stream_options`: `include_usage` asks for a last chunk with the usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct StreamOptions {
    pub include_usage: bool,
}

/// One message of the conversation, by `role`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum ChatMessage {
    System {
        content: String,
    },
    User {
        content: String,
    },
    Assistant {
        /// `null` when the message is only tool calls.
        content: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ChatToolCall>,
    },
    Tool {
        tool_call_id: String,
        content: String,
    },
}

/// A tool call of an assistant message sent back to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ChatToolCall {
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: FunctionKind,
    pub function: FunctionCall,
}

/// The `type` of every tool and tool call shellgate sends: `function`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FunctionKind {
    #[default]
    Function,
}

/// A function's name and its arguments (a JSON object as text).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FunctionCall {
    pub name: String,
    pub arguments: String,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChatTool {
    #[serde(rename = "type")]
    pub kind: FunctionKind,
    pub function: FunctionDefinition,
}

/// A function tool: its name, what it does, its JSON-schema parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FunctionDefinition {
    pub name: String,
    pub description: String,
    /// A JSON schema, sent as the tool's definition gave it.
    #[schema(value_type = Object)]
    pub parameters: Value,
    /// Whether the arguments must match `parameters` exactly (unset: the
    /// server's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// `tool_choice`: a mode, or one function by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ChatToolChoice {
    Mode(ToolChoiceMode),
    Function(NamedToolChoice),
}

/// `auto`, `required` or `none`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoiceMode {
    Auto,
    Required,
    None,
}

/// `{"type": "function", "function": {"name": ...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NamedToolChoice {
    #[serde(rename = "type")]
    pub kind: FunctionKind,
    pub function: FunctionName,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FunctionName {
    pub name: String,
}

/// A whole completion (a server that does not stream), or an error body
/// some servers send with a success status.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
pub struct ChatCompletion {
    #[serde(default)]
    pub choices: Vec<Choice>,
    #[serde(default)]
    pub usage: Option<ChatUsage>,
    #[serde(default)]
    pub error: Option<ApiError>,
}

/// One choice of a completion.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
pub struct Choice {
    /// Required by the adapter: a choice without a message is an error.
    #[serde(default)]
    pub message: Option<ChoiceMessage>,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// The model's message in a choice, or a piece of it in a chunk: text,
/// and tool calls (whole, or pieces to assemble by `index`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
pub struct ChoiceMessage {
    /// Text; content of another shape (some servers send parts) is no text.
    #[serde(default, deserialize_with = "text_or_none")]
    pub content: Option<String>,
    #[serde(default)]
    pub tool_calls: Vec<ToolCallPiece>,
}

/// A string, or `None` for `null` or a value of any other type.
fn text_or_none<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum TextOrNot {
        Text(String),
        Other(serde::de::IgnoredAny),
    }
    Ok(match TextOrNot::deserialize(deserializer)? {
        TextOrNot::Text(text) => Some(text),
        TextOrNot::Other(_) => None,
    })
}

/// A tool call, or a piece of one: its first piece names it, the others
/// carry more of its arguments.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
pub struct ToolCallPiece {
    /// Its position among the reply's tool calls; when absent (whole
    /// completions), its position in this list.
    #[serde(default)]
    pub index: Option<u64>,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub function: Option<FunctionPiece>,
}

/// A function call's name and (more of) its arguments.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
pub struct FunctionPiece {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub arguments: Option<Arguments>,
}

/// Arguments as text (the API's shape), or as an object (some servers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum Arguments {
    Text(String),
    #[schema(value_type = Object)]
    Json(Value),
}

impl Arguments {
    /// The arguments as JSON text.
    pub fn into_text(self) -> String {
        match self {
            Arguments::Text(text) => text,
            Arguments::Json(value) => value.to_string(),
        }
    }
}

/// Tokens counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct ChatUsage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
}

/// One chunk of a streamed completion.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
pub struct ChatChunk {
    #[serde(default)]
    pub choices: Vec<ChunkChoice>,
    /// Only in the last chunk, with `include_usage`.
    #[serde(default)]
    pub usage: Option<ChatUsage>,
    /// An error a server reports in the stream.
    #[serde(default)]
    pub error: Option<ApiError>,
}

/// A choice of a chunk: a piece of the message, and why it ended.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
pub struct ChunkChoice {
    #[serde(default)]
    pub delta: Option<ChoiceMessage>,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// The `error` of an error body (OpenAI's shape, Anthropic's alike): an
/// object with a `message`, or anything else a server puts there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ApiError {
    Described {
        message: String,
    },
    #[schema(value_type = Object)]
    Other(Value),
}

impl ApiError {
    /// Its message, or its JSON when it has none; `None` for a `null`.
    pub fn message(&self) -> Option<String> {
        match self {
            ApiError::Described { message } => Some(message.clone()),
            ApiError::Other(Value::Null) => None,
            ApiError::Other(other) => Some(other.to_string()),
        }
    }
}

/// A body that may hold an `error` (what an upstream's error status
/// carries); anything else in it is ignored.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
pub struct ErrorReply {
    #[serde(default)]
    pub error: Option<ApiError>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_request_is_the_api_s_shape() {
        let request = ChatRequest {
            model: "m".into(),
            messages: vec![
                ChatMessage::System {
                    content: "be brief".into(),
                },
                ChatMessage::Assistant {
                    content: None,
                    tool_calls: vec![ChatToolCall {
                        id: "c1".into(),
                        kind: FunctionKind::Function,
                        function: FunctionCall {
                            name: "shell".into(),
                            arguments: "{}".into(),
                        },
                    }],
                },
                ChatMessage::Tool {
                    tool_call_id: "c1".into(),
                    content: "ok".into(),
                },
            ],
            tools: vec![],
            tool_choice: Some(ChatToolChoice::Function(NamedToolChoice {
                kind: FunctionKind::Function,
                function: FunctionName {
                    name: "shell".into(),
                },
            })),
            parallel_tool_calls: None,
            temperature: None,
            top_p: None,
            max_tokens: Some(5),
            stream: Some(true),
            stream_options: Some(StreamOptions {
                include_usage: true,
            }),
            ..Default::default()
        };
        let value = serde_json::to_value(&request).unwrap();
        assert_eq!(
            value,
            json!({
                "model": "m",
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "c1", "content": "ok"},
                ],
                "tool_choice": {"type": "function", "function": {"name": "shell"}},
                "max_tokens": 5,
                "stream": true,
                "stream_options": {"include_usage": true},
            })
        );
        let back: ChatRequest = serde_json::from_value(value).unwrap();
        assert_eq!(back, request);
        assert_eq!(
            serde_json::to_value(ChatToolChoice::Mode(ToolChoiceMode::Required)).unwrap(),
            json!("required")
        );
    }

    #[test]
    fn answers_are_read_leniently() {
        // As the `openai` SDK's fixtures have them, with fields shellgate
        // does not read.
        let completion: ChatCompletion = serde_json::from_value(json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "logprobs": null, "message": {
                "role": "assistant", "content": null, "refusal": null,
                "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}],
            }}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
        }))
        .unwrap();
        let call = &completion.choices[0].message.as_ref().unwrap().tool_calls[0];
        let arguments = call.function.clone().unwrap().arguments.unwrap();
        assert_eq!(arguments.into_text(), "{\"a\":1}");
        assert_eq!(completion.usage.unwrap().completion_tokens, 4);
        let chunk: ChatChunk = serde_json::from_value(json!({
            "id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": null}],
        }))
        .unwrap();
        assert_eq!(
            chunk.choices[0].delta.as_ref().unwrap().content.as_deref(),
            Some("hi")
        );
        let parts: ChoiceMessage =
            serde_json::from_value(json!({"content": [{"type": "text", "text": "x"}]})).unwrap();
        assert_eq!(parts.content, None);
        let error: ErrorReply =
            serde_json::from_value(json!({"error": {"message": "overloaded", "type": "x"}}))
                .unwrap();
        assert_eq!(
            error.error.unwrap().message().as_deref(),
            Some("overloaded")
        );
        let error: ErrorReply = serde_json::from_value(json!({"error": "plain"})).unwrap();
        assert_eq!(error.error.unwrap().message().as_deref(), Some("\"plain\""));
        let error: ErrorReply = serde_json::from_value(json!({"error": null})).unwrap();
        assert_eq!(error.error.and_then(|e| e.message()), None);
    }
}
