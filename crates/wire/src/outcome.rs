//! How a command ended, as `shell_call_output` and the command audit say it.

use serde::{Deserialize, Serialize};

/// How a command ended: a signal death reports `128 + signal`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Outcome {
    Exit { exit_code: i32 },
    Timeout,
}
