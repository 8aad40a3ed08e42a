//! Usage: billed sandbox seconds (`usage_daily`, by project, UTC day and
//! container, written when a session closes) and upstream tokens
//! (`usage_tokens`, by project, UTC day and model, written when an answer
//! ends). Every total and view is a sum of those rows (plus the open
//! sessions' cost so far): nothing is counted twice in two places that
//! could disagree.

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

/// A project's usage as a sum of ledger rows: sandbox seconds per
/// container (an open session's cost so far included) and upstream tokens
/// per model, over a range of days or all of them. Each total is the sum of
/// its parts, so every view of usage adds up to the same figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageLedger {
    /// (container id, seconds), by container id; `''` holds seconds billed
    /// before seconds were recorded per container.
    pub containers: Vec<(String, f64)>,
    pub models: Vec<ModelTokens>,
}

/// One model's tokens and responses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelTokens {
    /// The model as the request named it (`''`: tokens counted before
    /// tokens were recorded per model).
    pub model: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub responses: u64,
}

impl UsageLedger {
    /// The sandbox seconds of every container together.
    pub fn sandbox_seconds(&self) -> f64 {
        self.containers.iter().map(|(_, seconds)| seconds).sum()
    }

    /// Tokens and responses of every model together.
    pub fn tokens(&self) -> ModelTokens {
        self.models
            .iter()
            .fold(ModelTokens::default(), |sum, m| ModelTokens {
                model: String::new(),
                input_tokens: sum.input_tokens + m.input_tokens,
                output_tokens: sum.output_tokens + m.output_tokens,
                responses: sum.responses + m.responses,
            })
    }
}

impl Store {
    /// A project's usage from day `since_day` (`YYYY-MM-DD`) on, or of all
    /// time (`None`): closed sessions by the day they closed, open ones
    /// today. With `live_containers`, every container that exists is listed
    /// too, those without usage at 0.
    pub fn usage_ledger(
        &self,
        project: &str,
        since_day: Option<&str>,
        live_containers: bool,
    ) -> Result<UsageLedger> {
        let since = since_day.unwrap_or("");
        let today = utc_day();
        let live = if live_containers {
            "UNION ALL SELECT id, 0.0 FROM containers WHERE project = ?1"
        } else {
            ""
        };
        self.read(|sql| {
            let containers = sql.query(
                &format!(
                    "SELECT container_id, SUM(seconds) FROM (
                         SELECT container_id, billed_seconds AS seconds FROM usage_daily
                         WHERE project = ?1 AND day >= ?2
                         UNION ALL
                         SELECT id, {} FROM containers
                         WHERE project = ?1 AND session_open = 1 AND CAST(?4 AS TEXT) >= ?2
                         {live}) AS seconds
                     GROUP BY container_id ORDER BY container_id",
                    open_cost("?3")
                ),
                &[&project, &since, &SESSION_MINIMUM_SECONDS, &today],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )?;
            let models = sql.query(
                "SELECT model, CAST(SUM(input_tokens) AS BIGINT), CAST(SUM(output_tokens) AS BIGINT),
                        CAST(SUM(responses) AS BIGINT)
                 FROM usage_tokens WHERE project = ?1 AND day >= ?2
                 GROUP BY model ORDER BY model",
                &[&project, &since],
                |row| {
                    Ok(ModelTokens {
                        model: row.get(0)?,
                        input_tokens: row.number(1, "usage_tokens", "input_tokens")?,
                        output_tokens: row.number(2, "usage_tokens", "output_tokens")?,
                        responses: row.number(3, "usage_tokens", "responses")?,
                    })
                },
            )?;
            Ok(UsageLedger { containers, models })
        })
    }

    /// Adds one answer's upstream token counts to its project's usage,
    /// under the model the request named, today.
    pub fn record_tokens(&self, project: &str, model: &str, input: u64, output: u64) -> Result<()> {
        let day = utc_day();
        self.write(|sql| {
            sql.execute(
                "INSERT INTO usage_tokens (project, day, model, input_tokens, output_tokens, responses)
                 VALUES (?1, ?2, ?3, ?4, ?5, 1)
                 ON CONFLICT (project, day, model) DO UPDATE SET
                 input_tokens = usage_tokens.input_tokens + excluded.input_tokens,
                 output_tokens = usage_tokens.output_tokens + excluded.output_tokens,
                 responses = usage_tokens.responses + 1",
                &[&project, &day, &model, &input, &output],
            )
        })?;
        Ok(())
    }

    /// Total billed seconds over every project (for metrics).
    pub fn total_usage(&self) -> Result<f64> {
        self.read(|sql| {
            let closed: f64 = sql.query_one(
                "SELECT COALESCE(SUM(billed_seconds), 0) FROM usage_daily",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_migration_carries_earlier_totals_into_the_ledgers() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        // The schema as it was just before the ledgers (later migrations
        // follow it in `Store::setup`).
        let before = crate::migrations::SQLITE_MIGRATIONS
            .iter()
            .position(|m| m.contains("CREATE TABLE usage_tokens"))
            .unwrap();
        for migration in &crate::migrations::SQLITE_MIGRATIONS[..before] {
            conn.execute_batch(migration).unwrap();
        }
        conn.pragma_update(None, "user_version", before as i64)
            .unwrap();
        conn.execute_batch(
            "INSERT INTO usage (project, billed_seconds, input_tokens, output_tokens, responses)
                 VALUES ('p', 100.0, 10, 5, 2), ('q', 0.0, 0, 0, 0);
             INSERT INTO containers (id, project, name, created_at, last_active_at, status, memory_limit,
                 expires_minutes, network_policy, skills, file_ids, billed_seconds)
                 VALUES ('c1', 'p', 'c1', 1, 1, 'suspended', '1g', 20, '{}', '[]', '[]', 40.0),
                        ('c2', 'p', 'c2', 1, 1, 'suspended', '1g', 20, '{}', '[]', '[]', 30.0);
             INSERT INTO usage_daily (project, day, container_id, billed_seconds)
                 VALUES ('p', '2026-01-01', 'c1', 25.0);",
        )
        .unwrap();
        let store = Store::from_sqlite_connection(conn).unwrap();
        let ledger = store.usage_ledger("p", None, true).unwrap();
        assert_eq!(
            ledger.containers,
            vec![
                // The project's total less what its containers hold: time of
                // containers deleted before.
                (String::new(), 30.0),
                ("c1".to_owned(), 40.0),
                ("c2".to_owned(), 30.0)
            ]
        );
        assert_eq!(ledger.sandbox_seconds(), 100.0);
        assert_eq!(
            ledger.models,
            vec![ModelTokens {
                model: String::new(),
                input_tokens: 10,
                output_tokens: 5,
                responses: 2
            }]
        );
        assert_eq!(
            store.usage_ledger("q", None, true).unwrap(),
            UsageLedger::default()
        );
    }
}
