//! E2B's sandbox logs (`GET /sandboxes/{id}/logs`,
//! `GET /v2/sandboxes/{id}/logs`): the sandbox's own events that the server
//! keeps, as E2B's log entries.
//!
//! E2B's logs are its VM's system log; a shellgate sandbox has no system
//! of its own, so its log is what the server recorded of it: its create
//! (template) and its last start when that was a resume (from its E2B
//! record), and each process it ran, from the command audit (every
//! command and envd process: started, then exited with its code, or timed
//! out), the last [`MAX_COMMANDS`] of them. Commands are shown as audited
//! (a secret's value masked). The audit is written in batches shortly
//! after a process ends, so an exit appears within a second or so of it.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::Json;
use serde::Deserialize;
use shellgate_store::{CommandOutcome, CommandRow, E2bSandboxRow, Page};
use shellgate_wire::e2b::{LogLevel, SandboxLog, SandboxLogEntry, SandboxLogs, SandboxLogsV2};
use shellgate_wire::time::rfc3339;

use super::request::{bad_request, e2b_error, E2bProject};
use super::E2bError;
use crate::state::AppState;

/// The log routes, beside the control plane's (`control`, whose
/// ownership check they use).
pub(crate) fn routes(table: crate::route_table::RouteTable) -> crate::route_table::RouteTable {
    table
        .route("/sandboxes/{sandbox_id}/logs", axum::routing::get(logs))
        .route(
            "/v2/sandboxes/{sandbox_id}/logs",
            axum::routing::get(logs_v2),
        )
}

/// Commands of the audit a log shows: the sandbox's latest.
const MAX_COMMANDS: u32 = 500;
/// Entries one answer holds at most (E2B's default and bound).
const MAX_LIMIT: usize = 1000;
/// A command longer than this is cut in its log line.
const MAX_COMMAND_CHARS: usize = 1024;

/// One event, before it is shown: when (Unix milliseconds), and its entry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Event {
    at_ms: i64,
    level: LogLevel,
    message: String,
    fields: BTreeMap<String, String>,
}

impl Event {
    fn new(at: i64, level: LogLevel, message: String, fields: &[(&str, &str)]) -> Self {
        Self {
            at_ms: at.saturating_mul(1000),
            level,
            message,
            fields: fields
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    fn entry(&self) -> SandboxLogEntry {
        SandboxLogEntry {
            timestamp: rfc3339(self.at_ms.div_euclid(1000)),
            level: self.level,
            message: self.message.clone(),
            fields: self.fields.clone(),
        }
    }
}

fn cut(command: &str) -> String {
    match command.char_indices().nth(MAX_COMMAND_CHARS) {
        Some((end, _)) => format!("{}…", &command[..end]),
        None => command.to_owned(),
    }
}

/// The sandbox's events, oldest first: its record's, then each audited
/// command's start and end (the audit holds its end time and duration).
fn events(sandbox: &E2bSandboxRow, commands: &[CommandRow]) -> Vec<Event> {
    let mut events = vec![Event::new(
        sandbox.created_at,
        LogLevel::Info,
        format!("sandbox created from template {}", sandbox.template_id),
        &[
            ("event", "sandbox.created"),
            ("templateID", &sandbox.template_id),
        ],
    )];
    if sandbox.started_at > sandbox.created_at {
        events.push(Event::new(
            sandbox.started_at,
            LogLevel::Info,
            "sandbox resumed".to_owned(),
            &[("event", "sandbox.resumed")],
        ));
    }
    // The audit keeps whole seconds of a process's end: a start worked
    // out from it may fall before the sandbox's own create, where no
    // process of it ran.
    let created_ms = sandbox.created_at.saturating_mul(1000);
    for command in commands {
        let ended_ms = command.created_at.saturating_mul(1000).max(created_ms);
        let duration = i64::try_from(command.duration_ms).unwrap_or(i64::MAX);
        let shown = cut(&command.command);
        let mut start = Event::new(
            0,
            LogLevel::Info,
            format!("process started: {shown}"),
            &[("event", "process.start"), ("commandID", &command.id)],
        );
        start.at_ms = ended_ms.saturating_sub(duration).max(created_ms);
        let duration_text = command.duration_ms.to_string();
        let mut end = match (command.outcome, command.exit_code) {
            (CommandOutcome::Timeout, _) => Event::new(
                0,
                LogLevel::Warn,
                format!(
                    "process timed out after {} ms: {shown}",
                    command.duration_ms
                ),
                &[
                    ("event", "process.timeout"),
                    ("commandID", &command.id),
                    ("durationMs", &duration_text),
                ],
            ),
            (CommandOutcome::Exit, code) => {
                let code = code.unwrap_or(-1);
                let code_text = code.to_string();
                Event::new(
                    0,
                    if code == 0 {
                        LogLevel::Info
                    } else {
                        LogLevel::Warn
                    },
                    format!(
                        "process exited with code {code} after {} ms: {shown}",
                        command.duration_ms
                    ),
                    &[
                        ("event", "process.end"),
                        ("commandID", &command.id),
                        ("exitCode", &code_text),
                        ("durationMs", &duration_text),
                    ],
                )
            }
        };
        end.at_ms = ended_ms;
        events.push(start);
        events.push(end);
    }
    // Stable: a command's start stays before its end at the same time.
    events.sort_by_key(|e| e.at_ms);
    events
}

/// The sandbox's events (checked to be the project's).
async fn sandbox_events(state: &AppState, project: &str, id: &str) -> Result<Vec<Event>, E2bError> {
    let (sandbox, _) = super::control::owned(state, project, id).await?;
    let key = id.to_owned();
    let (mut commands, _) = state
        .db(move |s| {
            s.list_commands(
                &key,
                &Page {
                    limit: MAX_COMMANDS,
                    ascending: false,
                    after: None,
                },
            )
        })
        .await
        .map_err(e2b_error)?;
    commands.reverse();
    Ok(events(&sandbox, &commands))
}

fn limit(limit: Option<i64>) -> Result<usize, E2bError> {
    match limit {
        None => Ok(MAX_LIMIT),
        Some(n) if (0..=MAX_LIMIT as i64).contains(&n) => Ok(n as usize),
        Some(_) => Err(bad_request(format!(
            "limit must be between 0 and {MAX_LIMIT}"
        ))),
    }
}

/// `GET /sandboxes/{id}/logs`'s query: from `start` (Unix milliseconds).
#[derive(Debug, Default, Deserialize)]
pub(super) struct LogsQuery {
    start: Option<i64>,
    limit: Option<i64>,
}

/// `GET /sandboxes/{id}/logs`: the entries from `start`, oldest first, as
/// lines and as structured entries.
pub(super) async fn logs(
    State(state): State<Arc<AppState>>,
    E2bProject(project): E2bProject,
    Path(id): Path<String>,
    query: Result<Query<LogsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<SandboxLogs>, E2bError> {
    let Query(query) = query.map_err(|e| bad_request(e.body_text()))?;
    let limit = limit(query.limit)?;
    let start = query.start.unwrap_or(0);
    let chosen: Vec<Event> = sandbox_events(&state, &project, &id)
        .await?
        .into_iter()
        .filter(|e| e.at_ms >= start)
        .take(limit)
        .collect();
    Ok(Json(SandboxLogs {
        logs: chosen
            .iter()
            .map(|e| SandboxLog {
                timestamp: rfc3339(e.at_ms.div_euclid(1000)),
                line: e.message.clone(),
            })
            .collect(),
        log_entries: chosen.iter().map(Event::entry).collect(),
    }))
}

/// `GET /v2/sandboxes/{id}/logs`'s query.
#[derive(Debug, Default, Deserialize)]
pub(super) struct LogsV2Query {
    /// Unix milliseconds: where the page starts.
    cursor: Option<i64>,
    limit: Option<i64>,
    direction: Option<String>,
    level: Option<LogLevel>,
    search: Option<String>,
}

/// `GET /v2/sandboxes/{id}/logs`: `forward` (the default) the entries
/// from `cursor` (the sandbox's start) on, oldest first; `backward` those
/// up to `cursor` (now), newest first; at `level` or above, holding
/// `search` (case-sensitive) when given.
pub(super) async fn logs_v2(
    State(state): State<Arc<AppState>>,
    E2bProject(project): E2bProject,
    Path(id): Path<String>,
    query: Result<Query<LogsV2Query>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<SandboxLogsV2>, E2bError> {
    let Query(query) = query.map_err(|e| bad_request(e.body_text()))?;
    let limit = limit(query.limit)?;
    let forward = match query.direction.as_deref() {
        None | Some("forward") => true,
        Some("backward") => false,
        Some(other) => {
            return Err(bad_request(format!(
                "direction: {other:?} is not forward or backward"
            )))
        }
    };
    let minimum = query.level.unwrap_or(LogLevel::Debug);
    let search = query.search.unwrap_or_default();
    let wanted = |e: &Event| e.level >= minimum && e.message.contains(search.as_str());
    let events = sandbox_events(&state, &project, &id).await?;
    let chosen: Vec<SandboxLogEntry> = if forward {
        let cursor = query.cursor.unwrap_or(i64::MIN);
        events
            .iter()
            .filter(|e| e.at_ms >= cursor && wanted(e))
            .take(limit)
            .map(Event::entry)
            .collect()
    } else {
        let cursor = query.cursor.unwrap_or(i64::MAX);
        events
            .iter()
            .rev()
            .filter(|e| e.at_ms <= cursor && wanted(e))
            .take(limit)
            .map(Event::entry)
            .collect()
    };
    Ok(Json(SandboxLogsV2 { logs: chosen }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(
        id: &str,
        ended: i64,
        duration_ms: u64,
        outcome: CommandOutcome,
        code: Option<i32>,
    ) -> CommandRow {
        CommandRow {
            id: id.to_owned(),
            project: "p".into(),
            container_id: "c".into(),
            response_id: None,
            command: "echo hi".into(),
            outcome,
            exit_code: code,
            duration_ms,
            bytes_out: 3,
            created_at: ended,
        }
    }

    #[test]
    fn a_sandbox_log_is_its_record_and_its_processes_in_time_order() {
        let sandbox = E2bSandboxRow {
            container_id: "c".into(),
            project: "p".into(),
            template_id: "base".into(),
            metadata: BTreeMap::new(),
            env_vars: BTreeMap::new(),
            access_token: "t".into(),
            auto_pause: false,
            auto_resume: false,
            created_at: 100,
            started_at: 150,
            end_at: 400,
            paused: false,
            idempotency_key: None,
            request_hash: None,
            public_traffic: true,
        };
        let events = events(
            &sandbox,
            &[
                command("cmd_0", 100, 1500, CommandOutcome::Exit, Some(0)),
                command("cmd_1", 120, 2000, CommandOutcome::Exit, Some(0)),
                command("cmd_2", 160, 500, CommandOutcome::Exit, Some(3)),
                command("cmd_3", 170, 1000, CommandOutcome::Timeout, None),
            ],
        );
        let shown: Vec<(i64, LogLevel, &str)> = events
            .iter()
            .map(|e| (e.at_ms, e.level, e.fields["event"].as_str()))
            .collect();
        assert_eq!(
            shown,
            vec![
                (100_000, LogLevel::Info, "sandbox.created"),
                (100_000, LogLevel::Info, "process.start"),
                (100_000, LogLevel::Info, "process.end"),
                (118_000, LogLevel::Info, "process.start"),
                (120_000, LogLevel::Info, "process.end"),
                (150_000, LogLevel::Info, "sandbox.resumed"),
                (159_500, LogLevel::Info, "process.start"),
                (160_000, LogLevel::Warn, "process.end"),
                (169_000, LogLevel::Info, "process.start"),
                (170_000, LogLevel::Warn, "process.timeout"),
            ]
        );
        assert_eq!(
            events[7].message,
            "process exited with code 3 after 500 ms: echo hi"
        );
        assert_eq!(events[7].fields["exitCode"], "3");
        assert_eq!(events[0].entry().timestamp, "1970-01-01T00:01:40Z");
    }

    #[test]
    fn long_commands_are_cut_and_limits_are_bounded() {
        let long = "x".repeat(MAX_COMMAND_CHARS + 10);
        assert_eq!(cut(&long).chars().count(), MAX_COMMAND_CHARS + 1);
        assert_eq!(cut("short"), "short");
        assert_eq!(limit(None).ok(), Some(MAX_LIMIT));
        assert!(limit(Some(-1)).is_err());
        assert!(limit(Some(MAX_LIMIT as i64 + 1)).is_err());
    }
}
