//! Google's Gemini API (`generateContent`, `streamGenerateContent`,
//! `countTokens`, the models list) as the `google-genai` and `@google/genai`
//! SDKs send and read it: REST JSON, camelCase keys.
//!
//! A request's known fields are typed; every key not typed (at the top, in
//! a content, a part, a tool or `generationConfig`) is kept in that
//! object's `extra` rather than refused: a client written for Google's API
//! keeps working, and what shellgate cannot send on is reported
//! (`x-shellgate-uncarried`) by the handler. A part's `thoughtSignature` is
//! opaque: kept as given, handed back as given.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

/// Keys of an object not typed here, kept as the client sent them.
pub type Extra = Map<String, Value>;

/// The request header of the Gemini API's key.
pub const API_KEY_HEADER: &str = "x-goog-api-key";

/// shellgate's extension: the container a request's `codeExecution` runs
/// in (an id from an earlier answer's same header), and the header of the
/// answer naming the container it ran in.
pub const CONTAINER_HEADER: &str = "x-shellgate-container";

/// The body of `models/{model}:generateContent` and
/// `:streamGenerateContent`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GenerateContentRequest {
    #[serde(default)]
    pub contents: Vec<Content>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_instruction: Option<Content>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Tool>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_config: Option<ToolConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation_config: Option<GenerationConfig>,
    /// The model, when a request names it in the body too (countTokens'
    /// `generateContentRequest` does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// One turn of a conversation: a role (`user` or `model`; a
/// `systemInstruction` has none) and its parts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Content {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default)]
    pub parts: Vec<Part>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// One part of a content. Exactly one of its data fields is set on the
/// wire; `thought` and `thoughtSignature` go with any of them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Part {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline_data: Option<Blob>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_data: Option<FileData>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_call: Option<FunctionCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_response: Option<FunctionResponse>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executable_code: Option<ExecutableCode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_execution_result: Option<CodeExecutionResult>,
    /// The part is the model's reasoning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thought: Option<bool>,
    /// Opaque (base64) bytes the client echoes back with the part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thought_signature: Option<String>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

impl Part {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            ..Default::default()
        }
    }

    /// What kind of part it is, by its data field, for reports.
    pub fn kind(&self) -> &'static str {
        if self.text.is_some() {
            "text"
        } else if self.inline_data.is_some() {
            "inlineData"
        } else if self.file_data.is_some() {
            "fileData"
        } else if self.function_call.is_some() {
            "functionCall"
        } else if self.function_response.is_some() {
            "functionResponse"
        } else if self.executable_code.is_some() {
            "executableCode"
        } else if self.code_execution_result.is_some() {
            "codeExecutionResult"
        } else {
            "part"
        }
    }
}

/// Bytes given inline: a MIME type and base64 data. Its fields are read by
/// their proto names too, as the Python SDK sends them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Blob {
    #[serde(alias = "mime_type")]
    pub mime_type: String,
    pub data: String,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// A file by URI (an uploaded file's `uri`). Its fields are read by their
/// proto names too, as the Python SDK sends them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileData {
    #[serde(default, alias = "mime_type", skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    #[serde(alias = "file_uri")]
    pub file_uri: String,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// A call of a declared function the model made.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FunctionCall {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub name: String,
    /// The arguments, a JSON object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    pub args: Option<Value>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// The client's answer to a function call (`id` pairs it with the call).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FunctionResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub name: String,
    /// What the function gave, a JSON object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    pub response: Option<Value>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// Code the model wrote for the code execution tool.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecutableCode {
    /// `PYTHON` (the only language).
    #[serde(default = "python")]
    pub language: String,
    pub code: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

fn python() -> String {
    LANGUAGE_PYTHON.to_owned()
}

/// `ExecutableCode.language`'s one value.
pub const LANGUAGE_PYTHON: &str = "PYTHON";

/// What running an `executableCode` gave (`id` pairs it with the code).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CodeExecutionResult {
    pub outcome: Outcome,
    /// stdout, and stderr when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// How running code ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Outcome {
    #[default]
    OutcomeUnspecified,
    /// It completed.
    OutcomeOk,
    /// It raised: the output holds stdout and stderr.
    OutcomeFailed,
    /// It ran past the time allowed and was stopped.
    OutcomeDeadlineExceeded,
}

/// A tool of the request: functions, or Google's hosted tools (code
/// execution; others are kept in `extra`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Tool {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_declarations: Option<Vec<FunctionDeclaration>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    pub code_execution: Option<Map<String, Value>>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// A function the model may call: its parameters as an OpenAPI-subset
/// `parameters` schema or a JSON Schema `parametersJsonSchema`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FunctionDeclaration {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    pub parameters: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    pub parameters_json_schema: Option<Value>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `toolConfig`: how the model may call functions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_calling_config: Option<FunctionCallingConfig>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `AUTO`, `ANY` (with `allowedFunctionNames`), `NONE` or `VALIDATED`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FunctionCallingConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_function_names: Option<Vec<String>>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `generationConfig`: sampling and the answer's shape.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GenerationConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_sequences: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate_count: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_mime_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    pub response_schema: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    pub response_json_schema: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_config: Option<ThinkingConfig>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `generationConfig.thinkingConfig`. Its fields are read by their
/// proto names too (`thinking_budget`), as Google's API reads every field
/// (proto3 JSON), and as the `google-genai` Python SDK sends them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ThinkingConfig {
    #[serde(
        default,
        alias = "include_thoughts",
        skip_serializing_if = "Option::is_none"
    )]
    pub include_thoughts: Option<bool>,
    #[serde(
        default,
        alias = "thinking_budget",
        skip_serializing_if = "Option::is_none"
    )]
    pub thinking_budget: Option<i64>,
    /// `LOW`, `MEDIUM`, `HIGH`...
    #[serde(
        default,
        alias = "thinking_level",
        skip_serializing_if = "Option::is_none"
    )]
    pub thinking_level: Option<String>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// The answer of `generateContent`, and each chunk of
/// `streamGenerateContent`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GenerateContentResponse {
    pub candidates: Vec<Candidate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_metadata: Option<UsageMetadata>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
}

/// One answer of the model (shellgate gives one, `index` 0).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Candidate {
    pub content: Content,
    /// Set on the last chunk of a stream, and on a whole answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
    pub index: u32,
}

/// Why a candidate ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FinishReason {
    FinishReasonUnspecified,
    Stop,
    MaxTokens,
    Safety,
    Other,
    MalformedFunctionCall,
    UnexpectedToolCall,
    TooManyToolCalls,
}

/// Tokens counted for an answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageMetadata {
    pub prompt_token_count: u64,
    pub candidates_token_count: u64,
    pub total_token_count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_content_token_count: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thoughts_token_count: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_use_prompt_token_count: Option<u64>,
}

/// The body of `models/{model}:countTokens`: the contents, or a whole
/// `generateContentRequest`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CountTokensRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contents: Option<Vec<Content>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generate_content_request: Option<GenerateContentRequest>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// The answer of `:countTokens`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CountTokensResponse {
    pub total_tokens: u64,
}

/// A model of `GET /v1beta/models`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Model {
    /// `models/{id}`.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_model_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    pub display_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_token_limit: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_token_limit: Option<u64>,
    pub supported_generation_methods: Vec<String>,
}

/// The answer of `GET /v1beta/models`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListModelsResponse {
    pub models: Vec<Model>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_page_token: Option<String>,
}

/// The headers of Google's resumable upload protocol (`files.upload`):
/// the protocol, the command (`start`; `upload, finalize`), the offset of
/// the bytes sent, the URL the bytes go to, and the session's status.
pub const UPLOAD_PROTOCOL_HEADER: &str = "x-goog-upload-protocol";
pub const UPLOAD_COMMAND_HEADER: &str = "x-goog-upload-command";
pub const UPLOAD_OFFSET_HEADER: &str = "x-goog-upload-offset";
pub const UPLOAD_URL_HEADER: &str = "x-goog-upload-url";
pub const UPLOAD_STATUS_HEADER: &str = "x-goog-upload-status";
/// How many bytes a resumable upload has taken (the answer to `query`).
pub const UPLOAD_SIZE_RECEIVED_HEADER: &str = "x-goog-upload-size-received";
/// The size and type of the file to come, as a start may give them.
pub const UPLOAD_CONTENT_LENGTH_HEADER: &str = "x-goog-upload-header-content-length";
pub const UPLOAD_CONTENT_TYPE_HEADER: &str = "x-goog-upload-header-content-type";

/// The body of a resumable upload's `start`: what the file will be. Its
/// fields are read by their proto names too, as the Python SDK sends them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateFileRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FileMetadata>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// What a client says of a file it starts uploading.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileMetadata {
    /// `files/{id}` the client asks for (shellgate names its files itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(
        default,
        alias = "display_name",
        skip_serializing_if = "Option::is_none"
    )]
    pub display_name: Option<String>,
    #[serde(default, alias = "mime_type", skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// An int64: a JSON string, or a number.
    #[serde(default, alias = "size_bytes", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub size_bytes: Option<Value>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// A file of the Files API, as Google's API shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct File {
    /// `files/{id}`.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    pub mime_type: String,
    /// An int64, written as a JSON string (proto3 JSON).
    pub size_bytes: String,
    /// RFC 3339.
    pub create_time: String,
    pub update_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_time: Option<String>,
    /// Where it is read (what a `fileData.fileUri` names).
    pub uri: String,
    /// `ACTIVE`: a file here is ready once uploaded.
    pub state: String,
    /// `UPLOADED`.
    pub source: String,
}

/// The answer of an upload's `finalize`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UploadedFile {
    pub file: File,
}

/// The answer of `DELETE /v1beta/files/{id}`: an empty object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DeletedFile {}

/// The answer of `GET /v1beta/files`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListFilesResponse {
    pub files: Vec<File>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_page_token: Option<String>,
}

/// Google's error envelope: `{"error": {"code", "message", "status"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorResponse {
    pub error: ErrorStatus,
}

/// The error: the HTTP status as a number, the message, and the
/// `google.rpc.Code` name (`INVALID_ARGUMENT`, `NOT_FOUND`...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorStatus {
    pub code: u16,
    pub message: String,
    pub status: String,
}

impl ErrorResponse {
    /// The envelope of an error answered with HTTP `status`: its
    /// `google.rpc.Code` name is the one Google's API gives that status.
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        let name = match status {
            400 | 411 | 413 | 415 | 422 => "INVALID_ARGUMENT",
            401 => "UNAUTHENTICATED",
            403 => "PERMISSION_DENIED",
            404 => "NOT_FOUND",
            405 | 501 => "UNIMPLEMENTED",
            409 => "ABORTED",
            429 => "RESOURCE_EXHAUSTED",
            499 => "CANCELLED",
            503 => "UNAVAILABLE",
            504 => "DEADLINE_EXCEEDED",
            _ => "INTERNAL",
        };
        Self {
            error: ErrorStatus {
                code: status,
                message: message.into(),
                status: name.to_owned(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_request_reads_every_part_and_keeps_what_it_does_not_type() {
        let body = json!({
            "contents": [
                {"role": "user", "parts": [
                    {"text": "hi"},
                    {"inlineData": {"mimeType": "text/csv", "data": "YSxi"}},
                    {"fileData": {"fileUri": "files/abc", "mimeType": "text/plain"}}]},
                {"role": "model", "parts": [
                    {"functionCall": {"id": "c1", "name": "f", "args": {"x": 1}},
                     "thoughtSignature": "c2ln"},
                    {"executableCode": {"language": "PYTHON", "code": "1+1", "id": "e1"}},
                    {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "2", "id": "e1"}}]},
                {"role": "user", "parts": [
                    {"functionResponse": {"id": "c1", "name": "f", "response": {"y": 2}}}]}],
            "systemInstruction": {"parts": [{"text": "be brief"}]},
            "tools": [{"functionDeclarations": [{"name": "f", "parameters": {"type": "OBJECT"}}]},
                      {"codeExecution": {}}, {"googleSearch": {}}],
            "generationConfig": {"temperature": 0.5, "maxOutputTokens": 9, "seed": 3,
                                 "thinkingConfig": {"thinkingBudget": 0}},
            "safetySettings": []
        });
        let request: GenerateContentRequest = crate::param::parse(&body).expect("a request");
        assert_eq!(request.contents.len(), 3);
        let model = &request.contents[1].parts;
        assert_eq!(model[0].thought_signature.as_deref(), Some("c2ln"));
        assert_eq!(
            model[2].code_execution_result.as_ref().map(|r| r.outcome),
            Some(Outcome::OutcomeOk)
        );
        assert!(request.extra.contains_key("safetySettings"));
        let tools = request.tools.as_deref().unwrap_or_default();
        assert!(tools[1].code_execution.is_some());
        assert!(tools[2].extra.contains_key("googleSearch"));
        let config = request.generation_config.as_ref().expect("a config");
        assert!(config.extra.contains_key("seed"));
        let thinking: ThinkingConfig = crate::param::parse(
            &json!({"thinking_budget": 2048, "include_thoughts": true, "thinking_level": "LOW"}),
        )
        .expect("proto names");
        assert_eq!(
            (thinking.thinking_budget, thinking.include_thoughts),
            (Some(2048), Some(true))
        );
        assert!(thinking.extra.is_empty(), "{:?}", thinking.extra);
        let file: FileData =
            crate::param::parse(&json!({"file_uri": "files/f", "mime_type": "text/csv"}))
                .expect("proto names");
        assert_eq!(
            (file.file_uri.as_str(), file.mime_type.as_deref()),
            ("files/f", Some("text/csv"))
        );
        // Read and written again, nothing is lost.
        assert_eq!(serde_json::to_value(&request).expect("json"), body);
    }

    #[test]
    fn an_answer_and_an_error_are_googles_shapes() {
        let answer = GenerateContentResponse {
            candidates: vec![Candidate {
                content: Content {
                    role: Some("model".into()),
                    parts: vec![Part::text("ok")],
                    extra: Extra::new(),
                },
                finish_reason: Some(FinishReason::Stop),
                index: 0,
            }],
            usage_metadata: Some(UsageMetadata {
                prompt_token_count: 1,
                candidates_token_count: 2,
                total_token_count: 3,
                ..Default::default()
            }),
            model_version: Some("m".into()),
            response_id: None,
        };
        assert_eq!(
            serde_json::to_value(&answer).expect("json"),
            json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]},
                   "finishReason": "STOP", "index": 0}],
                   "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 2,
                                     "totalTokenCount": 3},
                   "modelVersion": "m"})
        );
        assert_eq!(
            serde_json::to_value(ErrorResponse::new(404, "no")).expect("json"),
            json!({"error": {"code": 404, "message": "no", "status": "NOT_FOUND"}})
        );
    }
}
