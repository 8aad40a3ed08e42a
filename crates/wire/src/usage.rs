//! `GET /v1/usage` (shellgate's extension).

use serde::{Deserialize, Serialize};

/// `GET /v1/usage` (shellgate's extension).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct Usage {
    pub object: String,
    pub project: String,
    /// Billed sandbox time: the sum of `containers`.
    pub sandbox_seconds: f64,
    /// What the sandbox seconds cost at the configured price per second.
    pub server_tool_cost: f64,
    /// Upstream tokens of every model call the project made (Responses,
    /// stored or not, Messages and Chat Completions), and the calls.
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub responses: u64,
    /// Every container that used sandbox time or exists, deleted ones
    /// included (`''`: time billed before it was recorded per container).
    pub containers: Vec<ContainerUsage>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ContainerUsage {
    pub container_id: String,
    pub sandbox_seconds: f64,
}
