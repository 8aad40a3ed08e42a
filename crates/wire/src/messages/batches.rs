//! Anthropic's Message Batches: the batch object, a creation request, a
//! results line and a deletion (the `anthropic` SDK's `MessageBatch`,
//! `BatchCreateParams`, `MessageBatchIndividualResponse`,
//! `DeletedMessageBatch`).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::{ErrorResponse, Message};

/// `POST /v1/messages/batches`'s body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateBatch {
    pub requests: Vec<BatchRequest>,
}

/// One request of a batch: its id within the batch, and a Messages request
/// (read as `POST /v1/messages` reads one when it runs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    pub custom_id: String,
    #[schema(value_type = Object)]
    pub params: Map<String, Value>,
}

/// Where a batch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProcessingStatus {
    InProgress,
    Canceling,
    Ended,
}

/// How many of a batch's requests are in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RequestCounts {
    pub processing: u64,
    pub succeeded: u64,
    pub errored: u64,
    pub canceled: u64,
    pub expired: u64,
}

/// `"message_batch"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum MessageBatchKind {
    #[serde(rename = "message_batch")]
    MessageBatch,
}

/// A Message Batch. Times are RFC 3339.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct MessageBatch {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: MessageBatchKind,
    pub processing_status: ProcessingStatus,
    pub request_counts: RequestCounts,
    pub created_at: String,
    pub expires_at: String,
    pub ended_at: Option<String>,
    pub cancel_initiated_at: Option<String>,
    pub archived_at: Option<String>,
    /// Where the results are, once the batch has ended.
    pub results_url: Option<String>,
}

/// One line of a batch's results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BatchResultLine {
    pub custom_id: String,
    pub result: BatchResult,
}

/// How one request ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BatchResult {
    Succeeded { message: Box<Message> },
    Errored { error: ErrorResponse },
    Canceled,
    Expired,
}

/// `"message_batch_deleted"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum DeletedBatchKind {
    #[serde(rename = "message_batch_deleted")]
    MessageBatchDeleted,
}

/// `DELETE /v1/messages/batches/{id}`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DeletedMessageBatch {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: DeletedBatchKind,
}

/// A page of batches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BatchPage {
    pub data: Vec<MessageBatch>,
    pub has_more: bool,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
}
