//! OpenAI's error envelope, what every route but Anthropic's and E2B's
//! answers failures in (theirs: `messages::ErrorResponse`,
//! `e2b::E2bErrorBody`).

use serde::{Deserialize, Serialize};

/// `{"error": {"message", "type", "param", "code"}}`, all four keys present.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ErrorEnvelope {
    pub error: ErrorBody,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ErrorBody {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub param: Option<String>,
    pub code: Option<String>,
}
