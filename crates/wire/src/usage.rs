//! `GET /v1/usage` (shellgate's extension).

use serde::{Deserialize, Serialize};

/// `GET /v1/usage` (shellgate's extension).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct Usage {
    pub object: String,
    pub project: String,
    pub sandbox_seconds: f64,
    /// What the sandbox seconds cost at the configured price per second.
    pub server_tool_cost: f64,
    /// Upstream tokens of the project's responses.
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub responses: u64,
    pub containers: Vec<ContainerUsage>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ContainerUsage {
    pub container_id: String,
    pub sandbox_seconds: f64,
}
