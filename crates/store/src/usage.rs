//! Usage (the `usage` table): billed sandbox seconds and upstream tokens
//! per project.

use crate::connection::Store;
use crate::error::Result;

/// The minimum a session is billed (seeds: 30 seconds each time a new or
/// suspended container starts).
pub const SESSION_MINIMUM_SECONDS: f64 = 30.0;

/// What a session costs: its command time, at least the minimum.
pub fn session_cost(session_seconds: f64) -> f64 {
    session_seconds.max(SESSION_MINIMUM_SECONDS)
}

/// Today's date in UTC, `YYYY-MM-DD`: the day a session closing now is
/// billed to (computed here, not by the database, so both databases and
/// every replica's clock agree on its form).
pub(crate) fn utc_day() -> String {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    shellgate_wire::time::utc_date(i64::try_from(seconds).unwrap_or(0))
}

/// An open session's cost so far, in SQL: its seconds, at least the
/// minimum (placeholder `minimum`).
fn open_cost(minimum: &str) -> String {
    format!("CASE WHEN session_seconds > {minimum} THEN session_seconds ELSE {minimum} END")
}

impl Store {
    /// Billed seconds of a project: closed sessions plus open ones so far.
    pub fn project_usage(&self, project: &str) -> Result<(f64, Vec<(String, f64)>)> {
        let (closed, containers) = self.read(|sql| {
            let closed: Option<f64> = sql.query_opt(
                "SELECT billed_seconds FROM usage WHERE project = ?1",
                &[&project],
                |row| row.get(0),
            )?;
            let containers = sql.query(
                "SELECT id, billed_seconds, session_seconds, session_open FROM containers WHERE project = ?1 ORDER BY seq",
                &[&project],
                |row| {
                    let (id, billed, session, open): (String, f64, f64, bool) =
                        (row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?);
                    Ok((id, billed, if open { session_cost(session) } else { 0.0 }))
                },
            )?;
            Ok((closed.unwrap_or(0.0), containers))
        })?;
        let mut open_total = 0.0;
        let per_container = containers
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
        self.write(|sql| {
            sql.execute(
                "INSERT INTO usage (project, billed_seconds, input_tokens, output_tokens, responses)
                 VALUES (?1, 0, ?2, ?3, 1)
                 ON CONFLICT (project) DO UPDATE SET input_tokens = usage.input_tokens + excluded.input_tokens,
                 output_tokens = usage.output_tokens + excluded.output_tokens, responses = usage.responses + 1",
                &[&project, &input, &output],
            )
        })?;
        Ok(())
    }

    /// A project's upstream token counts and responses: (input, output, responses).
    pub fn project_tokens(&self, project: &str) -> Result<(u64, u64, u64)> {
        Ok(self
            .read(|sql| {
                sql.query_opt(
                    "SELECT input_tokens, output_tokens, responses FROM usage WHERE project = ?1",
                    &[&project],
                    |row| {
                        Ok((
                            row.number(0, "usage", "input_tokens")?,
                            row.number(1, "usage", "output_tokens")?,
                            row.number(2, "usage", "responses")?,
                        ))
                    },
                )
            })?
            .unwrap_or((0, 0, 0)))
    }

    /// Total billed seconds over every project (for metrics).
    pub fn total_usage(&self) -> Result<f64> {
        self.read(|sql| {
            let closed: f64 = sql.query_one(
                "SELECT COALESCE(SUM(billed_seconds), 0) FROM usage",
                &[],
                |row| row.get(0),
            )?;
            let open: f64 = sql.query_one(
                &format!(
                    "SELECT COALESCE(SUM({}), 0) FROM containers WHERE session_open = 1",
                    open_cost("?1")
                ),
                &[&SESSION_MINIMUM_SECONDS],
                |row| row.get(0),
            )?;
            Ok(closed + open)
        })
    }

    /// Billed seconds per UTC day (`YYYY-MM-DD`) from `since_day` on, oldest
    /// first: closed sessions by the day they closed, open ones today.
    pub fn daily_usage(&self, project: &str, since_day: &str) -> Result<Vec<(String, f64)>> {
        let today = utc_day();
        self.read(|sql| {
            sql.query(
                &format!(
                    "SELECT day, SUM(seconds) FROM (
                         SELECT day, billed_seconds AS seconds FROM usage_daily
                         WHERE project = ?1 AND day >= ?2
                         UNION ALL
                         SELECT CAST(?4 AS TEXT), {} FROM containers
                         WHERE project = ?1 AND session_open = 1) AS days
                     GROUP BY day ORDER BY day",
                    open_cost("?3")
                ),
                &[&project, &since_day, &SESSION_MINIMUM_SECONDS, &today],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
        })
    }

    /// Each model's tokens and responses over the project's stored
    /// responses: (model, input, output, responses), most tokens first.
    pub fn tokens_by_model(&self, project: &str) -> Result<Vec<(String, u64, u64, u64)>> {
        self.read(|sql| {
            let d = sql.dialect();
            let query = format!(
                "SELECT model, input, output, responses FROM (
                     SELECT COALESCE({model}, '') AS model,
                            CAST(COALESCE(SUM({input}), 0) AS BIGINT) AS input,
                            CAST(COALESCE(SUM({output}), 0) AS BIGINT) AS output,
                            COUNT(*) AS responses
                     FROM responses WHERE project = ?1 AND deleted = 0
                     GROUP BY 1) AS models
                 ORDER BY input + output DESC, model",
                model = d.json_text("body", "model"),
                input = d.json_number("body", &["usage", "input_tokens"], true),
                output = d.json_number("body", &["usage", "output_tokens"], true),
            );
            sql.query(&query, &[&project], |row| {
                Ok((
                    row.get(0)?,
                    row.number(1, "responses", "usage.input_tokens")?,
                    row.number(2, "responses", "usage.output_tokens")?,
                    row.number(3, "responses", "count")?,
                ))
            })
        })
    }

    /// Every project the store knows (of a key or a container), with its
    /// containers, running containers and live keys.
    pub fn projects(&self) -> Result<Vec<ProjectSummary>> {
        self.read(|sql| {
            sql.query(
                "SELECT p.project,
                        (SELECT COUNT(*) FROM containers c WHERE c.project = p.project),
                        (SELECT COUNT(*) FROM containers c WHERE c.project = p.project AND c.status = 'running'),
                        (SELECT COUNT(*) FROM api_keys k WHERE k.project = p.project AND k.revoked_at IS NULL)
                 FROM (SELECT project FROM api_keys UNION SELECT project FROM containers) p
                 ORDER BY p.project",
                &[],
                |row| {
                    Ok(ProjectSummary {
                        project: row.get(0)?,
                        containers: row.number(1, "containers", "count")?,
                        running: row.number(2, "containers", "count")?,
                        keys: row.number(3, "api_keys", "count")?,
                    })
                },
            )
        })
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
