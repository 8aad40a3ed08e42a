//! `POST /v1/containers/{id}/exec` and the `shell_call_output`-shaped result.

use crate::ids::new_id;
use crate::outcome::Outcome;
use serde::{Deserialize, Serialize};

/// `POST /v1/containers/{id}/exec` (shellgate's extension, like E2B's).
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    /// Run one after another, each in a shell (at most 100).
    pub commands: Vec<String>,
    /// Each command's timeout: 1 to 300000 (120000 when omitted).
    pub timeout_ms: Option<u64>,
    /// Characters kept of each stream: at most 65536 (16384 when omitted).
    pub max_output_length: Option<usize>,
    /// Server-sent events `exec.output.delta`, then `exec.completed`.
    #[serde(default)]
    pub stream: bool,
}

/// One entry of `shell_call_output.output`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct ShellOutputEntry {
    pub stdout: String,
    pub stderr: String,
    pub outcome: Outcome,
    /// How long the command took (for the command audit; not on the wire).
    #[serde(skip)]
    pub duration_ms: u64,
    /// Bytes it wrote to stdout and stderr before any capping (for the
    /// command audit; not on the wire).
    #[serde(skip)]
    pub bytes_out: u64,
}

/// A `shell_call_output`-shaped result.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ShellCallOutput {
    #[serde(rename = "type")]
    pub kind: String,
    pub id: String,
    pub status: String,
    pub output: Vec<ShellOutputEntry>,
    pub max_output_length: usize,
}

impl ShellCallOutput {
    /// The finished result of a run of commands, with a new `sho_` id.
    pub fn completed(output: Vec<ShellOutputEntry>, max_output_length: usize) -> Self {
        Self {
            kind: "shell_call_output".to_owned(),
            id: new_id("sho_"),
            status: "completed".to_owned(),
            output,
            max_output_length,
        }
    }
}
