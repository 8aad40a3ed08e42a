//! Chat Completions as shellgate serves it (`POST /v1/chat/completions`):
//! the request a client sends, and the completion and chunks shellgate
//! answers when it translates for an upstream of another protocol.
//!
//! The request is read for what shellgate acts on (the model that picks the
//! upstream, the tools it refuses or translates, the fields it maps to the
//! neutral turn); every other key is kept in an `extra` map, so nothing a
//! client sends is lost: a Chat upstream gets the client's body as it was
//! written, other upstreams what their protocol can carry (the rest is
//! reported). Shapes follow the `openai` SDK's `types/chat/` models.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::Arguments;

/// Keys of an object shellgate does not read.
pub type Extra = Map<String, Value>;

/// A client's chat completion request.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
pub struct ChatCompletionRequest {
    /// Required (checked by the handler, so its 400 names it).
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub messages: Vec<RequestMessage>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<RequestStreamOptions>,
    #[serde(default)]
    pub tools: Option<Vec<RequestTool>>,
    #[serde(default)]
    pub tool_choice: Option<RequestToolChoice>,
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    /// Not OpenAI's, but vLLM's, OpenRouter's and others'.
    #[serde(default)]
    pub top_k: Option<u64>,
    /// The older name of `max_completion_tokens`.
    #[serde(default)]
    pub max_tokens: Option<u64>,
    #[serde(default)]
    pub max_completion_tokens: Option<u64>,
    #[serde(default)]
    pub stop: Option<Stop>,
    /// `minimal`, `low`, `medium`, `high`...
    #[serde(default)]
    pub reasoning_effort: Option<String>,
    #[serde(default)]
    pub response_format: Option<ResponseFormat>,
    /// How many choices: shellgate's translation makes one.
    #[serde(default)]
    pub n: Option<u64>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `stream_options`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
pub struct RequestStreamOptions {
    #[serde(default)]
    pub include_usage: Option<bool>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `stop`: one sequence or several.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Stop {
    pub fn sequences(&self) -> Vec<String> {
        match self {
            Stop::One(one) => vec![one.clone()],
            Stop::Many(many) => many.clone(),
        }
    }
}

/// The role of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RequestRole {
    System,
    Developer,
    User,
    Assistant,
    Tool,
    /// The deprecated result of a `function_call`.
    Function,
}

/// One message of a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RequestMessage {
    pub role: RequestRole,
    /// A string or parts (`null` for an assistant's tool calls only).
    #[serde(default)]
    pub content: Option<RequestContent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// An assistant's calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<RequestToolCall>>,
    /// A tool message's call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// A message's `content`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum RequestContent {
    Text(String),
    Parts(Vec<RequestPart>),
}

/// A content part: `text`, `refusal` (read), `image_url`, `input_audio`,
/// `file` (kept whole, in `extra`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RequestPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// A tool call of an assistant message a client replays.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RequestToolCall {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `function` (the default) or `custom`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<RequestFunctionCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom: Option<CustomCall>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// A function call's name and arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RequestFunctionCall {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Arguments>,
}

/// A custom (freeform) tool's call: its name and raw input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CustomCall {
    pub name: String,
    #[serde(default)]
    pub input: String,
}

/// A tool of a request: `function`, `custom`, or any other `type` (the
/// shell tools, refused; others, dropped or forwarded).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RequestTool {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<RequestFunction>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom: Option<CustomTool>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// A function tool's definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RequestFunction {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<Value>,
    #[serde(default)]
    pub strict: Option<bool>,
}

/// A custom (freeform) tool's definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CustomTool {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub format: Option<CustomToolFormat>,
}

/// A custom tool's input format: `text`, or `grammar` with its grammar.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CustomToolFormat {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub grammar: Option<Grammar>,
}

/// A grammar: its `syntax` (`lark`, `regex`) and `definition`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Grammar {
    pub definition: String,
    pub syntax: String,
}

/// `tool_choice`: `auto`, `required`, `none`, or one tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum RequestToolChoice {
    Mode(String),
    Named(NamedChoice),
}

/// `{"type": "function", "function": {"name"}}` (or `custom`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct NamedChoice {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub function: Option<super::FunctionName>,
    #[serde(default)]
    pub custom: Option<super::FunctionName>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `response_format`: `text`, `json_object`, or `json_schema` with one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ResponseFormat {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_schema: Option<JsonSchemaFormat>,
}

/// A `json_schema` format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JsonSchemaFormat {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub schema: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// Why a choice ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    Stop,
    Length,
    ToolCalls,
    ContentFilter,
}

/// A whole completion (`object: "chat.completion"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Completion {
    pub id: String,
    /// Always `chat.completion`.
    pub object: String,
    pub created: i64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    pub usage: CompletionUsage,
}

/// The one choice of a translated completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CompletionChoice {
    pub index: u32,
    pub message: AssistantMessage,
    pub finish_reason: FinishReason,
    /// Always `null`: no upstream protocol shellgate translates gives them.
    #[schema(value_type = Option<Object>)]
    pub logprobs: Option<Value>,
}

/// The assistant's message of a completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AssistantMessage {
    /// Always `assistant`.
    pub role: String,
    pub content: Option<String>,
    pub refusal: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<OutputToolCall>,
}

/// A tool call the model made, for the client to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputToolCall {
    Function {
        id: String,
        function: super::FunctionCall,
    },
    Custom {
        id: String,
        custom: CustomCall,
    },
}

/// Tokens counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct CompletionUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

impl CompletionUsage {
    pub fn new(prompt_tokens: u64, completion_tokens: u64) -> Self {
        Self {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens.saturating_add(completion_tokens),
        }
    }
}

/// One chunk of a streamed completion (`object: "chat.completion.chunk"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CompletionChunk {
    pub id: String,
    /// Always `chat.completion.chunk`.
    pub object: String,
    pub created: i64,
    pub model: String,
    pub choices: Vec<ChunkChoiceDelta>,
    /// Only in the last chunk, when `stream_options.include_usage` asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<CompletionUsage>,
}

/// A piece of the one choice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChunkChoiceDelta {
    pub index: u32,
    pub delta: MessageDelta,
    pub finish_reason: Option<FinishReason>,
    #[schema(value_type = Option<Object>)]
    pub logprobs: Option<Value>,
}

/// What a chunk adds to the message.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
pub struct MessageDelta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallDelta>,
}

/// A tool call begun, or more of its arguments.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct ToolCallDelta {
    pub index: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `function` or `custom`, in a call's first piece.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<FunctionDelta>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom: Option<CustomCall>,
}

/// A function call's name (first piece) and more of its arguments.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct FunctionDelta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_request_keeps_what_shellgate_does_not_read() {
        let body = json!({
            "model": "m", "seed": 7, "logprobs": true,
            "messages": [
                {"role": "developer", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hi"},
                    {"type": "image_url", "image_url": {"url": "data:,x"}}]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            ],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
                      {"type": "openrouter:shell"}],
            "tool_choice": {"type": "function", "function": {"name": "f"}},
            "stop": "END", "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}},
        });
        let request: ChatCompletionRequest = serde_json::from_value(body).unwrap();
        let mut extra: Vec<&String> = request.extra.keys().collect();
        extra.sort();
        assert_eq!(extra, ["logprobs", "seed"]);
        assert_eq!(request.messages[1].role, RequestRole::User);
        let Some(RequestContent::Parts(parts)) = &request.messages[1].content else {
            panic!("parts")
        };
        assert_eq!(parts[1].kind, "image_url");
        assert!(parts[1].extra.contains_key("image_url"));
        assert_eq!(request.tools.as_ref().unwrap()[1].kind, "openrouter:shell");
        assert_eq!(request.stop.unwrap().sequences(), ["END"]);
        assert!(matches!(
            request.tool_choice,
            Some(RequestToolChoice::Named(NamedChoice { ref kind, .. })) if kind == "function"
        ));
        assert!(serde_json::from_value::<ChatCompletionRequest>(
            json!({"messages": [{"role": "robot"}]})
        )
        .is_err());
        // Messages read back as they were written (what a guardrail's
        // redaction sends on).
        let messages = json!([
            {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}], "name": "ann"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}], "refusal": null},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ]);
        let typed: Vec<RequestMessage> = serde_json::from_value(messages.clone()).unwrap();
        assert_eq!(serde_json::to_value(&typed).unwrap(), messages);
    }

    #[test]
    fn answers_are_the_sdk_s_shapes() {
        let completion = Completion {
            id: "chatcmpl-1".into(),
            object: "chat.completion".into(),
            created: 1,
            model: "m".into(),
            choices: vec![CompletionChoice {
                index: 0,
                message: AssistantMessage {
                    role: "assistant".into(),
                    content: None,
                    refusal: None,
                    tool_calls: vec![OutputToolCall::Function {
                        id: "c".into(),
                        function: super::super::FunctionCall {
                            name: "f".into(),
                            arguments: "{}".into(),
                        },
                    }],
                },
                finish_reason: FinishReason::ToolCalls,
                logprobs: None,
            }],
            usage: CompletionUsage::new(2, 3),
        };
        assert_eq!(
            serde_json::to_value(&completion).unwrap(),
            json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "finish_reason": "tool_calls", "logprobs": null, "message": {
                    "role": "assistant", "content": null, "refusal": null,
                    "tool_calls": [{"type": "function", "id": "c", "function": {"name": "f", "arguments": "{}"}}]}}],
                "usage": {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}})
        );
        let chunk = CompletionChunk {
            id: "c".into(),
            object: "chat.completion.chunk".into(),
            created: 1,
            model: "m".into(),
            choices: vec![ChunkChoiceDelta {
                index: 0,
                delta: MessageDelta {
                    tool_calls: vec![ToolCallDelta {
                        index: 0,
                        function: Some(FunctionDelta {
                            name: None,
                            arguments: Some("{\"a\"".into()),
                        }),
                        ..Default::default()
                    }],
                    ..Default::default()
                },
                finish_reason: None,
                logprobs: None,
            }],
            usage: None,
        };
        assert_eq!(
            serde_json::to_value(&chunk).unwrap()["choices"][0],
            json!({"index": 0, "finish_reason": null, "logprobs": null,
                   "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\""}}]}})
        );
    }
}
