//! Usage (the `usage` table): billed sandbox seconds and upstream tokens
//! per project.

use rusqlite::{params, OptionalExtension};

use crate::connection::Store;
use crate::error::Result;
use crate::values::number;

/// The minimum a session is billed (seeds: 30 seconds each time a new or
/// suspended container starts).
pub const SESSION_MINIMUM_SECONDS: f64 = 30.0;

/// What a session costs: its command time, at least the minimum.
pub fn session_cost(session_seconds: f64) -> f64 {
    session_seconds.max(SESSION_MINIMUM_SECONDS)
}

impl Store {
    /// Billed seconds of a project: closed sessions plus open ones so far.
    pub fn project_usage(&self, project: &str) -> Result<(f64, Vec<(String, f64)>)> {
        let conn = self.reader();
        let closed: f64 = conn
            .query_row(
                "SELECT billed_seconds FROM usage WHERE project = ?1",
                params![project],
                |row| row.get(0),
            )
            .optional()?
            .unwrap_or(0.0);
        let mut statement = conn.prepare(
            "SELECT id, billed_seconds, session_seconds, session_open FROM containers WHERE project = ?1 ORDER BY seq",
        )?;
        let mut open_total = 0.0;
        let per_container = statement
            .query_map(params![project], |row| {
                let (id, billed, session, open): (String, f64, f64, bool) =
                    (row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?);
                Ok((id, billed, if open { session_cost(session) } else { 0.0 }))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?
            .into_iter()
            .map(|(id, billed, open)| {
                open_total += open;
                (id, billed + open)
            })
            .collect();
        Ok((closed + open_total, per_container))
    }

    /// Adds one response's upstream token counts to its project's usage.
    pub fn record_tokens(&self, project: &str, input: u64, output: u64) -> Result<()> {
        self.conn().execute(
            "INSERT INTO usage (project, billed_seconds, input_tokens, output_tokens, responses)
             VALUES (?1, 0, ?2, ?3, 1)
             ON CONFLICT (project) DO UPDATE SET input_tokens = input_tokens + excluded.input_tokens,
             output_tokens = output_tokens + excluded.output_tokens, responses = responses + 1",
            params![project, input as i64, output as i64],
        )?;
        Ok(())
    }

    /// A project's upstream token counts and responses: (input, output, responses).
    pub fn project_tokens(&self, project: &str) -> Result<(u64, u64, u64)> {
        Ok(self
            .reader()
            .query_row(
                "SELECT input_tokens, output_tokens, responses FROM usage WHERE project = ?1",
                params![project],
                |row| {
                    Ok((
                        number(row, 0, "usage", "input_tokens")?,
                        number(row, 1, "usage", "output_tokens")?,
                        number(row, 2, "usage", "responses")?,
                    ))
                },
            )
            .optional()?
            .unwrap_or((0, 0, 0)))
    }

    /// Total billed seconds over every project (for metrics).
    pub fn total_usage(&self) -> Result<f64> {
        let conn = self.reader();
        let closed: f64 = conn.query_row(
            "SELECT COALESCE(SUM(billed_seconds), 0) FROM usage",
            [],
            |row| row.get(0),
        )?;
        let open: f64 = conn.query_row(
            "SELECT COALESCE(SUM(MAX(session_seconds, ?1)), 0) FROM containers WHERE session_open = 1",
            params![SESSION_MINIMUM_SECONDS],
            |row| row.get(0),
        )?;
        Ok(closed + open)
    }

    /// Billed seconds per UTC day (`YYYY-MM-DD`) from `since_day` on, oldest
    /// first: closed sessions by the day they closed, open ones today.
    pub fn daily_usage(&self, project: &str, since_day: &str) -> Result<Vec<(String, f64)>> {
        let conn = self.reader();
        let mut statement = conn.prepare(
            "SELECT day, SUM(seconds) FROM (
                 SELECT day, billed_seconds AS seconds FROM usage_daily
                 WHERE project = ?1 AND day >= ?2
                 UNION ALL
                 SELECT date('now'), MAX(session_seconds, ?3) FROM containers
                 WHERE project = ?1 AND session_open = 1)
             GROUP BY day ORDER BY day",
        )?;
        let rows = statement
            .query_map(
                params![project, since_day, SESSION_MINIMUM_SECONDS],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// Each model's tokens and responses over the project's stored
    /// responses: (model, input, output, responses), most tokens first.
    pub fn tokens_by_model(&self, project: &str) -> Result<Vec<(String, u64, u64, u64)>> {
        let conn = self.reader();
        let mut statement = conn.prepare(
            "SELECT COALESCE(json_extract(body, '$.model'), ''),
                    COALESCE(SUM(json_extract(body, '$.usage.input_tokens')), 0),
                    COALESCE(SUM(json_extract(body, '$.usage.output_tokens')), 0),
                    COUNT(*)
             FROM responses WHERE project = ?1 AND deleted = 0 AND json_valid(body)
             GROUP BY 1 ORDER BY 2 + 3 DESC, 1",
        )?;
        let rows = statement
            .query_map(params![project], |row| {
                Ok((
                    row.get(0)?,
                    number(row, 1, "responses", "usage.input_tokens")?,
                    number(row, 2, "responses", "usage.output_tokens")?,
                    number(row, 3, "responses", "count")?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// Every project the store knows (of a key or a container), with its
    /// containers, running containers and live keys.
    pub fn projects(&self) -> Result<Vec<ProjectSummary>> {
        let conn = self.reader();
        let mut statement = conn.prepare(
            "SELECT p.project,
                    (SELECT COUNT(*) FROM containers c WHERE c.project = p.project),
                    (SELECT COUNT(*) FROM containers c WHERE c.project = p.project AND c.status = 'running'),
                    (SELECT COUNT(*) FROM api_keys k WHERE k.project = p.project AND k.revoked_at IS NULL)
             FROM (SELECT project FROM api_keys UNION SELECT project FROM containers) p
             ORDER BY p.project",
        )?;
        let rows = statement
            .query_map([], |row| {
                Ok(ProjectSummary {
                    project: row.get(0)?,
                    containers: number(row, 1, "containers", "count")?,
                    running: number(row, 2, "containers", "count")?,
                    keys: number(row, 3, "api_keys", "count")?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }
}

/// A project as the console's project list shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectSummary {
    pub project: String,
    pub containers: u64,
    pub running: u64,
    pub keys: u64,
}
