//! What Anthropic's code execution sub-tools give, in Anthropic's shapes:
//! a `bash_code_execution` command's result, a
//! `text_editor_code_execution` command's (`view`, `create`,
//! `str_replace`) and a `code_execution` Python cell's, or their error
//! objects.
//!
//! Two APIs carry them: the Messages API as the `content` of its
//! `*_tool_result` blocks, and the loop's `code_execution_call` item (the
//! Responses item set the loop runs on) as its `result`. They live here,
//! below both, so neither API's module imports the other for them.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

/// Keys of a result this crate does not type, kept as they came.
pub type Extra = Map<String, Value>;

/// What a `bash_code_execution` command gave, by its `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BashToolResultContent {
    BashCodeExecutionResult(BashResult),
    BashCodeExecutionToolResultError(BashToolError),
}

/// The command's output and exit code (124: it timed out).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BashResult {
    pub stdout: String,
    pub stderr: String,
    /// `null` when it is not known (a replayed result without one).
    pub return_code: Option<i64>,
    /// Files the command created or changed, as Files API files.
    #[serde(default)]
    pub content: Vec<BashOutputFile>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BashOutputFile {
    pub file_id: String,
    #[serde(rename = "type")]
    pub kind: BashOutputKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum BashOutputKind {
    #[serde(rename = "bash_code_execution_output")]
    BashCodeExecutionOutput,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BashToolError {
    /// `invalid_tool_input`, `unavailable`, `too_many_requests`,
    /// `execution_time_exceeded` or `output_file_too_large`.
    pub error_code: String,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// What a `text_editor_code_execution` command gave, by its `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TextEditorToolResultContent {
    /// `view`: the file's text.
    TextEditorCodeExecutionViewResult(ViewResult),
    /// `create`: whether the file was there before.
    TextEditorCodeExecutionCreateResult(CreateResult),
    /// `str_replace`: where the text changed, as a diff's hunk.
    TextEditorCodeExecutionStrReplaceResult(StrReplaceResult),
    TextEditorCodeExecutionToolResultError(TextEditorToolError),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ViewResult {
    /// `text`, `image` or `pdf`.
    pub file_type: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_lines: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_line: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_lines: Option<u64>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CreateResult {
    pub is_file_update: bool,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StrReplaceResult {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_start: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_lines: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_start: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_lines: Option<u64>,
    /// The hunk's lines, `-` removed and `+` added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines: Option<Vec<String>>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TextEditorToolError {
    /// `invalid_tool_input`, `unavailable`, `too_many_requests`,
    /// `execution_time_exceeded` or `file_not_found`.
    pub error_code: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// What a `code_execution` Python cell gave, by its `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PythonToolResultContent {
    CodeExecutionResult(PythonResult),
    CodeExecutionToolResultError(PythonToolError),
}

/// The cell's output and whether it raised (`return_code` 1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PythonResult {
    pub stdout: String,
    pub stderr: String,
    pub return_code: i64,
    /// Files the cell created or changed, as Files API files.
    #[serde(default)]
    pub content: Vec<PythonOutputFile>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PythonOutputFile {
    pub file_id: String,
    #[serde(rename = "type")]
    pub kind: PythonOutputKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum PythonOutputKind {
    #[serde(rename = "code_execution_output")]
    CodeExecutionOutput,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PythonToolError {
    /// `invalid_tool_input`, `unavailable`, `too_many_requests` or
    /// `execution_time_exceeded`.
    pub error_code: String,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// What a code execution sub-tool's call gave: a command's, an editor
/// command's or a Python cell's result (the three sets of `type`s are
/// apart).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum CodeExecutionResult {
    Bash(BashToolResultContent),
    TextEditor(TextEditorToolResultContent),
    Python(PythonToolResultContent),
}
