//! The stream events of a response (`response.*`), as the server writes
//! them: each numbered by `sequence_number`, its `type` the SSE event name.

use serde::{Deserialize, Serialize};

use super::items::{Annotation, ContentPart, Item, ReasoningText, ShellResult};
use super::response::Response;

/// One stream event.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct StreamEvent {
    #[serde(flatten)]
    pub event: Event,
    pub sequence_number: u64,
}

impl StreamEvent {
    /// The event's `type` (its SSE event name).
    pub fn kind(&self) -> &'static str {
        self.event.kind()
    }
}

/// What the WebSocket mode answers a `response.create` it cannot start
/// (the socket stays open for the next one): OpenAI's `ResponseWsError`,
/// the HTTP API's status and error object.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct SocketErrorEvent {
    /// Always `error`.
    #[serde(rename = "type")]
    pub kind: String,
    pub status: u16,
    pub error: crate::error::ErrorBody,
}

/// The `type` of a client event of the WebSocket mode: `response.create`
/// (the rest of the event is a create request, as `POST /v1/responses`
/// takes it) is the one shellgate answers.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct ClientEventType {
    #[serde(rename = "type")]
    pub kind: String,
}

/// The `type` of the client event that creates a response.
pub const RESPONSE_CREATE: &str = "response.create";

/// What a stream event says, by `type`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
#[serde(tag = "type")]
pub enum Event {
    #[serde(rename = "response.created")]
    Created { response: Box<Response> },
    #[serde(rename = "response.in_progress")]
    InProgress { response: Box<Response> },
    #[serde(rename = "response.completed")]
    Completed { response: Box<Response> },
    #[serde(rename = "response.incomplete")]
    Incomplete { response: Box<Response> },
    #[serde(rename = "response.failed")]
    Failed { response: Box<Response> },
    #[serde(rename = "response.output_item.added")]
    OutputItemAdded { output_index: usize, item: Item },
    #[serde(rename = "response.output_item.done")]
    OutputItemDone { output_index: usize, item: Item },
    #[serde(rename = "response.content_part.added")]
    ContentPartAdded {
        item_id: String,
        output_index: usize,
        content_index: usize,
        part: ContentPart,
    },
    #[serde(rename = "response.content_part.done")]
    ContentPartDone {
        item_id: String,
        output_index: usize,
        content_index: usize,
        part: ContentPart,
    },
    #[serde(rename = "response.output_text.delta")]
    OutputTextDelta {
        item_id: String,
        output_index: usize,
        content_index: usize,
        delta: String,
        /// Always `[]`.
        #[schema(value_type = Vec<Object>)]
        logprobs: Vec<serde_json::Value>,
    },
    #[serde(rename = "response.output_text.done")]
    OutputTextDone {
        item_id: String,
        output_index: usize,
        content_index: usize,
        text: String,
        /// Always `[]`.
        #[schema(value_type = Vec<Object>)]
        logprobs: Vec<serde_json::Value>,
    },
    #[serde(rename = "response.output_text.annotation.added")]
    OutputTextAnnotationAdded {
        item_id: String,
        output_index: usize,
        content_index: usize,
        annotation_index: usize,
        #[schema(value_type = Object)]
        annotation: Annotation,
    },
    #[serde(rename = "response.function_call_arguments.delta")]
    FunctionCallArgumentsDelta {
        item_id: String,
        output_index: usize,
        delta: String,
    },
    #[serde(rename = "response.function_call_arguments.done")]
    FunctionCallArgumentsDone {
        item_id: String,
        output_index: usize,
        arguments: String,
    },
    #[serde(rename = "response.custom_tool_call_input.delta")]
    CustomToolCallInputDelta {
        item_id: String,
        output_index: usize,
        delta: String,
    },
    #[serde(rename = "response.custom_tool_call_input.done")]
    CustomToolCallInputDone {
        item_id: String,
        output_index: usize,
        input: String,
    },
    #[serde(rename = "response.reasoning_summary_part.added")]
    ReasoningSummaryPartAdded {
        item_id: String,
        output_index: usize,
        summary_index: usize,
        part: ReasoningText,
    },
    #[serde(rename = "response.reasoning_summary_text.delta")]
    ReasoningSummaryTextDelta {
        item_id: String,
        output_index: usize,
        summary_index: usize,
        delta: String,
    },
    #[serde(rename = "response.reasoning_summary_text.done")]
    ReasoningSummaryTextDone {
        item_id: String,
        output_index: usize,
        summary_index: usize,
        text: String,
    },
    #[serde(rename = "response.reasoning_summary_part.done")]
    ReasoningSummaryPartDone {
        item_id: String,
        output_index: usize,
        summary_index: usize,
        part: ReasoningText,
    },
    #[serde(rename = "response.shell_call_command.added")]
    ShellCallCommandAdded {
        output_index: usize,
        command_index: usize,
        command: String,
    },
    #[serde(rename = "response.shell_call_command.delta")]
    ShellCallCommandDelta {
        output_index: usize,
        command_index: usize,
        delta: String,
    },
    #[serde(rename = "response.shell_call_command.done")]
    ShellCallCommandDone {
        output_index: usize,
        command_index: usize,
        command: String,
    },
    #[serde(rename = "response.shell_call_output_content.delta")]
    ShellCallOutputContentDelta {
        item_id: String,
        output_index: usize,
        command_index: usize,
        delta: ShellOutputDelta,
    },
    #[serde(rename = "response.code_interpreter_call.in_progress")]
    CodeInterpreterCallInProgress {
        item_id: String,
        output_index: usize,
    },
    #[serde(rename = "response.code_interpreter_call_code.delta")]
    CodeInterpreterCallCodeDelta {
        item_id: String,
        output_index: usize,
        delta: String,
    },
    #[serde(rename = "response.code_interpreter_call_code.done")]
    CodeInterpreterCallCodeDone {
        item_id: String,
        output_index: usize,
        code: String,
    },
    #[serde(rename = "response.code_interpreter_call.interpreting")]
    CodeInterpreterCallInterpreting {
        item_id: String,
        output_index: usize,
    },
    #[serde(rename = "response.code_interpreter_call.completed")]
    CodeInterpreterCallCompleted {
        item_id: String,
        output_index: usize,
    },
    #[serde(rename = "response.shell_call_output_content.done")]
    ShellCallOutputContentDone {
        item_id: String,
        output_index: usize,
        command_index: usize,
        output: Vec<ShellResult>,
    },
}

/// Output of a running command: one of its streams, as it comes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct ShellOutputDelta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
}

impl Event {
    /// The event's `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Created { .. } => "response.created",
            Event::InProgress { .. } => "response.in_progress",
            Event::Completed { .. } => "response.completed",
            Event::Incomplete { .. } => "response.incomplete",
            Event::Failed { .. } => "response.failed",
            Event::OutputItemAdded { .. } => "response.output_item.added",
            Event::OutputItemDone { .. } => "response.output_item.done",
            Event::ContentPartAdded { .. } => "response.content_part.added",
            Event::ContentPartDone { .. } => "response.content_part.done",
            Event::OutputTextDelta { .. } => "response.output_text.delta",
            Event::OutputTextDone { .. } => "response.output_text.done",
            Event::OutputTextAnnotationAdded { .. } => "response.output_text.annotation.added",
            Event::FunctionCallArgumentsDelta { .. } => "response.function_call_arguments.delta",
            Event::FunctionCallArgumentsDone { .. } => "response.function_call_arguments.done",
            Event::CustomToolCallInputDelta { .. } => "response.custom_tool_call_input.delta",
            Event::CustomToolCallInputDone { .. } => "response.custom_tool_call_input.done",
            Event::ReasoningSummaryPartAdded { .. } => "response.reasoning_summary_part.added",
            Event::ReasoningSummaryTextDelta { .. } => "response.reasoning_summary_text.delta",
            Event::ReasoningSummaryTextDone { .. } => "response.reasoning_summary_text.done",
            Event::ReasoningSummaryPartDone { .. } => "response.reasoning_summary_part.done",
            Event::ShellCallCommandAdded { .. } => "response.shell_call_command.added",
            Event::ShellCallCommandDelta { .. } => "response.shell_call_command.delta",
            Event::ShellCallCommandDone { .. } => "response.shell_call_command.done",
            Event::ShellCallOutputContentDelta { .. } => "response.shell_call_output_content.delta",
            Event::ShellCallOutputContentDone { .. } => "response.shell_call_output_content.done",
            Event::CodeInterpreterCallInProgress { .. } => {
                "response.code_interpreter_call.in_progress"
            }
            Event::CodeInterpreterCallCodeDelta { .. } => {
                "response.code_interpreter_call_code.delta"
            }
            Event::CodeInterpreterCallCodeDone { .. } => "response.code_interpreter_call_code.done",
            Event::CodeInterpreterCallInterpreting { .. } => {
                "response.code_interpreter_call.interpreting"
            }
            Event::CodeInterpreterCallCompleted { .. } => {
                "response.code_interpreter_call.completed"
            }
        }
    }
}
