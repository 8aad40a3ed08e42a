//! Processes (shellgate's extension): `POST
//! /v1/containers/{id}/processes` and the objects, output pages, stream
//! events and WebSocket messages of a process started in a container.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::outcome::Outcome;

/// A terminal: its size in cells and its `TERM`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessPty {
    /// Columns, 1 to 4096 (80 when omitted).
    #[serde(default = "default_cols")]
    pub cols: u16,
    /// Rows, 1 to 4096 (24 when omitted).
    #[serde(default = "default_rows")]
    pub rows: u16,
    /// `TERM` of the process (`xterm-256color` when omitted).
    #[serde(default = "default_term")]
    pub term: String,
}

fn default_cols() -> u16 {
    80
}

fn default_rows() -> u16 {
    24
}

fn default_term() -> String {
    "xterm-256color".to_owned()
}

/// `POST /v1/containers/{id}/processes`.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessCreate {
    /// Run as exec's commands are: `bash -c`, the sandbox user.
    pub command: String,
    /// A stdin pipe to write to (`/dev/null` otherwise; a pty always has one).
    #[serde(default)]
    pub stdin: bool,
    /// A terminal as stdin, stdout and stderr (one output stream, `pty`).
    #[serde(default)]
    pub pty: Option<ProcessPty>,
    /// Killed with every descendant when it passes: 1 to 300000, or to
    /// 3600000 for a terminal (`pty`); 120000 when omitted.
    pub timeout_ms: Option<u64>,
    /// Variables added to its environment (at most 64).
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    /// Working directory (`/mnt/data` when omitted).
    pub cwd: Option<String>,
}

/// Where a process stands.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProcessStatus {
    Running,
    Exited,
    Killed,
    Timeout,
}

/// A process (`container.process`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct Process {
    pub id: String,
    /// `container.process`.
    pub object: String,
    pub container_id: String,
    pub command: String,
    /// Its pid inside the container.
    pub pid: Option<i32>,
    pub status: ProcessStatus,
    pub pty: Option<ProcessPty>,
    /// Whether it takes input (a stdin pipe or a terminal).
    pub stdin: bool,
    pub created_at: u64,
    pub ended_at: Option<u64>,
    pub exit_code: Option<i32>,
    pub outcome: Option<Outcome>,
    /// Bytes of output it produced so far (all streams).
    pub output_bytes: u64,
}

/// Which stream a piece of output came from.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProcessStreamName {
    Stdout,
    Stderr,
    /// The terminal (stdout and stderr together).
    Pty,
}

/// A piece of output at its byte offset (also the SSE `output` event's data).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct ProcessChunk {
    pub stream: ProcessStreamName,
    pub offset: u64,
    /// The bytes, base64.
    pub data: String,
}

/// `GET /v1/containers/{id}/processes/{proc}/output`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct ProcessOutput {
    pub chunks: Vec<ProcessChunk>,
    /// The `after` of the next read.
    pub next_offset: u64,
    /// Bytes past `after` the bounded buffer (1 MiB) no longer holds.
    pub dropped_bytes: u64,
    pub process: Process,
}

/// The SSE `dropped` event's data.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct ProcessDropped {
    pub bytes: u64,
}

/// A signal by name (`SIGINT`) or number.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(untagged)]
pub enum SignalName {
    Number(i32),
    Name(String),
}

/// `POST /v1/containers/{id}/processes/{proc}/signal`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessSignal {
    /// `SIGINT`, `SIGTERM`, `SIGKILL`, `SIGHUP`, `SIGQUIT`, `SIGUSR1`,
    /// `SIGUSR2`, `SIGCONT`, `SIGSTOP`, `SIGWINCH`, or a number 1 to 31.
    pub signal: SignalName,
}

/// `POST /v1/containers/{id}/processes/{proc}/resize`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessResize {
    pub cols: u16,
    pub rows: u16,
}

/// A text frame of the process WebSocket, client to server.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ProcessClientMessage {
    Resize { cols: u16, rows: u16 },
    Signal { signal: SignalName },
    Eof,
}

/// A text frame of the process WebSocket, server to client.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ProcessServerMessage {
    /// Bytes past the reader's offset the bounded buffer no longer held.
    Dropped { bytes: u64 },
    /// The process ended; the socket closes next.
    Exit { process: Process },
    /// Something went wrong with a client message (the socket stays open).
    Error { message: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_create_takes_defaults_and_refuses_unknown_fields() {
        let create: ProcessCreate =
            serde_json::from_str(r#"{"command":"python3 -i","pty":{}}"#).unwrap();
        assert_eq!(
            create.pty,
            Some(ProcessPty {
                cols: 80,
                rows: 24,
                term: "xterm-256color".into()
            })
        );
        assert!(!create.stdin);
        assert!(serde_json::from_str::<ProcessCreate>(r#"{"command":"x","tty":true}"#).is_err());
        let signal: ProcessSignal = serde_json::from_str(r#"{"signal":"SIGINT"}"#).unwrap();
        assert_eq!(signal.signal, SignalName::Name("SIGINT".into()));
        let signal: ProcessSignal = serde_json::from_str(r#"{"signal":9}"#).unwrap();
        assert_eq!(signal.signal, SignalName::Number(9));
        let message: ProcessClientMessage =
            serde_json::from_str(r#"{"type":"resize","cols":100,"rows":40}"#).unwrap();
        assert_eq!(
            message,
            ProcessClientMessage::Resize {
                cols: 100,
                rows: 40
            }
        );
    }
}
