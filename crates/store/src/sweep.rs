//! What a node's lifecycle sweeper acts on, read by index ranges: each
//! query returns only the rows its pass acts on now, so a pass costs what
//! is due rather than every container of the node (thousands, mostly
//! suspended and kept for days).
//!
//! The rules are the sweeper's (`lifecycle::sweep` in the server), for one
//! node, never a container being made (`creating`) or lost:
//! - **expiry**: idle `expires_minutes` (from `last_active_at`), unless it
//!   is an E2B sandbox (those end at their `end_at`, never idle); or
//!   suspended and idle `retention_days`, E2B's paused sandboxes included;
//! - **idle suspension**: a session open and idle its own
//!   `sleep_after_secs`, else the server's limit; not a running E2B
//!   sandbox (not paused, its `end_at` ahead);
//! - **E2B timeouts**: a sandbox not paused whose `end_at` has come.
//!
//! The indexes (the migration that adds `containers.e2b_sandbox`): expiry
//! by `(node_id, e2b_sandbox, last_active_at + expires_minutes * 60)`;
//! retention and lost ones by `(node_id, status, last_active_at)`; idle
//! sessions by `(node_id, last_active_at)` and `(node_id, last_active_at +
//! sleep_after_secs)` over open sessions without and with a limit of their
//! own; E2B timeouts by `end_at` over running sandboxes. Whether a
//! container is an E2B sandbox is still decided by its `e2b_sandboxes` row
//! (the `e2b_sandbox` mark keeps them out of the expiry range: paused ones
//! are kept for days), so a row the mark missed costs a probe, never a
//! wrong expiry.

use crate::connection::Store;
use crate::containers::{container_row, ContainerRow, CONTAINER_COLUMNS};
use crate::e2b::{sandbox_row, E2bSandboxRow, COLUMNS as E2B_COLUMNS};
use crate::error::Result;

impl Store {
    /// Node `node`'s containers to remove at `now`: idle past their
    /// `expires_minutes` (not E2B sandboxes), or suspended and idle
    /// `retention_secs`; oldest first.
    pub fn containers_to_expire(
        &self,
        node: &str,
        now: i64,
        retention_secs: i64,
    ) -> Result<Vec<ContainerRow>> {
        let kept_since = now.saturating_sub(retention_secs);
        self.read(|sql| sql.query(&expire_query(), &[&node, &now, &kept_since], container_row))
    }

    /// Node `node`'s containers to suspend at `now`: a session open and
    /// idle its own `sleep_after_secs`, else `idle_limit_secs`; not a
    /// running E2B sandbox; oldest first. (One also due to expire is
    /// [`Self::containers_to_expire`]'s.)
    pub fn containers_to_suspend(
        &self,
        node: &str,
        now: i64,
        idle_limit_secs: i64,
    ) -> Result<Vec<ContainerRow>> {
        let idle_since = now.saturating_sub(idle_limit_secs);
        self.read(|sql| sql.query(&suspend_query(), &[&node, &now, &idle_since], container_row))
    }

    /// Node `node`'s E2B sandboxes that are not paused and end by
    /// `by` (their timeout has come at `by` = now; every running one at
    /// `i64::MAX`), not lost; soonest first.
    pub fn running_e2b_sandboxes_ending(&self, node: &str, by: i64) -> Result<Vec<E2bSandboxRow>> {
        self.read(|sql| sql.query(&e2b_ending_query(), &[&node, &by], sandbox_row))
    }

    /// The ids of node `node`'s lost containers (none, the usual case, is
    /// an empty index range: what an `EXISTS` costs).
    pub fn lost_containers_on_node(&self, node: &str) -> Result<Vec<String>> {
        self.read(|sql| sql.query(LOST_QUERY, &[&node], |row| row.get(0)))
    }

    /// The ids of node `node`'s containers whose session is open (their
    /// processes run), for a server stopping.
    pub fn open_sessions_on_node(&self, node: &str) -> Result<Vec<String>> {
        self.read(|sql| {
            sql.query(
                "SELECT id FROM containers WHERE node_id = ?1 AND session_open = 1 ORDER BY seq",
                &[&node],
                |row| row.get(0),
            )
        })
    }
}

/// [`Store::containers_to_expire`]'s query: `?1` the node, `?2` now, `?3`
/// the last activity a suspended container is kept since.
///
/// Whether a due container is an E2B sandbox (here and in
/// [`suspend_query`]), and a sandbox's node ([`e2b_ending_query`]), are
/// scalar subqueries, asked of each row the index ranges hold by its
/// key: as `EXISTS`, Postgres may join them by reading every sandbox, or
/// every container of the node, when its estimate of the range is off
/// (`end_at`'s, say, counts the paused sandboxes' too).
fn expire_query() -> String {
    format!(
        "SELECT {CONTAINER_COLUMNS} FROM (
             SELECT seq, {CONTAINER_COLUMNS} FROM containers c
             WHERE node_id = ?1 AND e2b_sandbox = 0
               AND last_active_at + expires_minutes * 60 <= ?2
               AND (SELECT COUNT(*) FROM e2b_sandboxes e WHERE e.container_id = c.id) = 0
             UNION
             SELECT seq, {CONTAINER_COLUMNS} FROM containers
             WHERE node_id = ?1 AND status = 'suspended' AND last_active_at <= ?3
         ) due
         WHERE status NOT IN ('creating', 'lost') ORDER BY seq"
    )
}

/// [`Store::containers_to_suspend`]'s query: `?1` the node, `?2` now, `?3`
/// the last activity of a session idle the server's limit.
fn suspend_query() -> String {
    format!(
        "SELECT {CONTAINER_COLUMNS} FROM (
             SELECT seq, {CONTAINER_COLUMNS} FROM containers
             WHERE node_id = ?1 AND session_open = 1 AND sleep_after_secs IS NULL
               AND last_active_at <= ?3
             UNION ALL
             SELECT seq, {CONTAINER_COLUMNS} FROM containers
             WHERE node_id = ?1 AND session_open = 1 AND sleep_after_secs IS NOT NULL
               AND last_active_at + sleep_after_secs <= ?2
         ) due
         WHERE status NOT IN ('creating', 'lost')
           AND (SELECT COUNT(*) FROM e2b_sandboxes e
                WHERE e.container_id = due.id AND e.paused = 0 AND e.end_at > ?2) = 0
         ORDER BY seq"
    )
}

/// [`Store::running_e2b_sandboxes_ending`]'s query: `?1` the node, `?2`
/// the end.
fn e2b_ending_query() -> String {
    format!(
        "SELECT {E2B_COLUMNS} FROM e2b_sandboxes
         WHERE paused = 0 AND end_at <= ?2
           AND (SELECT c.node_id FROM containers c
                WHERE c.id = e2b_sandboxes.container_id AND c.status != 'lost') = ?1
         ORDER BY end_at, container_id"
    )
}

/// [`Store::lost_containers_on_node`]'s query: `?1` the node.
const LOST_QUERY: &str =
    "SELECT id FROM containers WHERE node_id = ?1 AND status = 'lost' ORDER BY seq";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::values::ContainerStatus;

    const NOW: i64 = 1_000_000;

    /// A container of node `node`, idle `idle` seconds at [`NOW`].
    fn container(id: &str, node: &str, status: ContainerStatus, idle: i64) -> ContainerRow {
        let mut row = crate::tests::container_row(id, "alpha");
        row.node_id = node.into();
        row.status = status;
        row.session_open = status == ContainerStatus::Running;
        row.last_active_at = NOW - idle;
        row
    }

    fn e2b(id: &str, end_at: i64, paused: bool) -> E2bSandboxRow {
        E2bSandboxRow {
            end_at,
            paused,
            ..crate::e2b::tests::sandbox(id, "alpha", &[])
        }
    }

    fn ids(rows: &[ContainerRow]) -> Vec<&str> {
        rows.iter().map(|row| row.id.as_str()).collect()
    }

    #[test]
    fn expiry_takes_idle_containers_and_suspended_ones_past_retention() -> Result<()> {
        use ContainerStatus::{Creating, Lost, Running, Suspended};
        let retention = 7 * 86_400;
        let expiry = 20 * 60;
        for store in crate::testing::stores() {
            let month = |mut row: ContainerRow| {
                row.expires_minutes = 30 * 24 * 60;
                row
            };
            for row in [
                container("at_expiry", "n1", Running, expiry),
                container("before_expiry", "n1", Running, expiry - 1),
                container("suspended_at_expiry", "n1", Suspended, expiry),
                container("creating", "n1", Creating, expiry),
                container("lost", "n1", Lost, retention),
                container("other_node", "n2", Suspended, retention),
                month(container("kept_at_retention", "n1", Suspended, retention)),
                month(container(
                    "kept_before_retention",
                    "n1",
                    Suspended,
                    retention - 1,
                )),
                month(container("running_long", "n1", Running, retention)),
                container("e2b_running", "n1", Running, retention - 1),
                container("e2b_paused_at_retention", "n1", Suspended, retention),
                container("e2b_paused_kept", "n1", Suspended, retention - 1),
                container("e2b_unmarked", "n1", Running, expiry),
            ] {
                store.insert_container(&row)?;
            }
            store.insert_e2b_sandbox(&e2b("e2b_running", NOW + 60, false))?;
            store.insert_e2b_sandbox(&e2b("e2b_paused_at_retention", NOW - 60, true))?;
            store.insert_e2b_sandbox(&e2b("e2b_paused_kept", NOW - 60, true))?;
            store.insert_e2b_sandbox(&e2b("e2b_unmarked", NOW + 60, false))?;
            // A sandbox whose container the mark missed (one written by a
            // binary older than the mark) is still no idle expiry's.
            store.write(|sql| {
                sql.execute(
                    "UPDATE containers SET e2b_sandbox = 0 WHERE id = 'e2b_unmarked'",
                    &[],
                )
            })?;
            let due = store.containers_to_expire("n1", NOW, retention)?;
            assert_eq!(
                ids(&due),
                [
                    "at_expiry",
                    "suspended_at_expiry",
                    "kept_at_retention",
                    "e2b_paused_at_retention"
                ]
            );
            assert_eq!(
                ids(&store.containers_to_expire("n2", NOW, retention)?),
                ["other_node"]
            );
            assert!(store
                .containers_to_expire("n1", NOW - expiry, retention)?
                .is_empty());
        }
        Ok(())
    }

    #[test]
    fn suspension_takes_open_sessions_idle_their_own_limit_or_the_servers() -> Result<()> {
        use ContainerStatus::{Creating, Lost, Running, Suspended};
        let limit = 600;
        for store in crate::testing::stores() {
            let own = |mut row: ContainerRow, secs: u64| {
                row.sleep_after_secs = Some(secs);
                row
            };
            let open = |mut row: ContainerRow| {
                row.session_open = true;
                row
            };
            for row in [
                container("at_limit", "n1", Running, limit),
                container("before_limit", "n1", Running, limit - 1),
                own(container("own_at_limit", "n1", Running, 60), 60),
                own(container("own_before_limit", "n1", Running, 59), 60),
                own(container("own_longer", "n1", Running, limit), 3_600),
                container("closed", "n1", Suspended, 10 * limit),
                open(container("creating", "n1", Creating, 10 * limit)),
                open(container("lost", "n1", Lost, 10 * limit)),
                container("other_node", "n2", Running, 10 * limit),
                container("e2b_running", "n1", Running, 10 * limit),
                container("e2b_at_end", "n1", Running, 10 * limit),
                // A paused sandbox the `/v1` API woke.
                container("e2b_paused_woken", "n1", Running, limit),
            ] {
                store.insert_container(&row)?;
            }
            store.insert_e2b_sandbox(&e2b("e2b_running", NOW + 1, false))?;
            store.insert_e2b_sandbox(&e2b("e2b_at_end", NOW, false))?;
            store.insert_e2b_sandbox(&e2b("e2b_paused_woken", NOW + 60, true))?;
            let due = store.containers_to_suspend("n1", NOW, limit)?;
            assert_eq!(
                ids(&due),
                ["at_limit", "own_at_limit", "e2b_at_end", "e2b_paused_woken"]
            );
            assert_eq!(
                ids(&store.containers_to_suspend("n2", NOW, limit)?),
                ["other_node"]
            );
        }
        Ok(())
    }

    #[test]
    fn e2b_timeouts_take_this_nodes_running_sandboxes_at_their_end() -> Result<()> {
        use ContainerStatus::{Lost, Running, Suspended};
        for store in crate::testing::stores() {
            for (id, node, status, end_at, paused) in [
                ("ends_now", "n1", Running, NOW, false),
                ("ended", "n1", Running, NOW - 100, false),
                ("ends_later", "n1", Running, NOW + 1, false),
                ("paused", "n1", Suspended, NOW - 100, true),
                ("lost", "n1", Lost, NOW - 100, false),
                ("other_node", "n2", Running, NOW - 100, false),
            ] {
                store.insert_container(&container(id, node, status, 0))?;
                store.insert_e2b_sandbox(&e2b(id, end_at, paused))?;
            }
            store.insert_container(&container("not_e2b", "n1", Running, 0))?;
            let due: Vec<String> = store
                .running_e2b_sandboxes_ending("n1", NOW)?
                .into_iter()
                .map(|row| row.container_id)
                .collect();
            assert_eq!(due, ["ended", "ends_now"]);
            let running: Vec<String> = store
                .running_e2b_sandboxes_ending("n1", i64::MAX)?
                .into_iter()
                .map(|row| row.container_id)
                .collect();
            assert_eq!(running, ["ended", "ends_now", "ends_later"]);
        }
        Ok(())
    }

    #[test]
    fn lost_containers_and_open_sessions_are_the_nodes_own() -> Result<()> {
        use ContainerStatus::{Lost, Running, Suspended};
        for store in crate::testing::stores() {
            for row in [
                container("running", "n1", Running, 0),
                container("suspended", "n1", Suspended, 0),
                container("lost", "n1", Lost, 0),
                container("lost_elsewhere", "n2", Lost, 0),
                container("running_elsewhere", "n2", Running, 0),
            ] {
                store.insert_container(&row)?;
            }
            assert_eq!(store.lost_containers_on_node("n1")?, ["lost"]);
            assert!(store.lost_containers_on_node("n3")?.is_empty());
            assert_eq!(store.open_sessions_on_node("n1")?, ["running"]);
        }
        Ok(())
    }

    #[test]
    fn the_migration_marks_the_sandboxes_already_there() -> Result<()> {
        let marking = crate::migrations::SQLITE_MIGRATIONS
            .iter()
            .position(|migration| migration.contains("ADD COLUMN e2b_sandbox"))
            .expect("the migration that marks E2B sandboxes");
        let conn = rusqlite::Connection::open_in_memory()?;
        for migration in &crate::migrations::SQLITE_MIGRATIONS[..marking] {
            conn.execute_batch(migration)?;
        }
        conn.execute_batch(
            "INSERT INTO containers (id, project, name, created_at, last_active_at, status,
                 memory_limit, expires_minutes, network_policy, skills, file_ids)
             VALUES ('sandbox', 'alpha', 'e2b:base', 1, 1, 'suspended', '1g', 20, '{}', '[]', '[]'),
                    ('plain', 'alpha', 'plain', 1, 1, 'suspended', '1g', 20, '{}', '[]', '[]');
             INSERT INTO e2b_sandboxes (container_id, project, template_id, metadata, env_vars,
                 access_token, auto_pause, created_at, started_at, end_at, paused)
             VALUES ('sandbox', 'alpha', 'base', '{}', '{}', 'tok', 1, 1, 1, 300, 1);",
        )?;
        conn.pragma_update(None, "user_version", marking as i64)?;
        let store = Store::from_sqlite_connection(conn)?;
        let marks: Vec<(String, i64)> = store.read(|sql| {
            sql.query(
                "SELECT id, e2b_sandbox FROM containers ORDER BY id",
                &[],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
        })?;
        assert_eq!(marks, [("plain".into(), 0), ("sandbox".into(), 1)]);
        // Idle past its expiry, the sandbox is no expiry's; the container is.
        assert_eq!(
            ids(&store.containers_to_expire("", 10_000, 86_400)?),
            ["plain"]
        );
        Ok(())
    }

    /// A sweep pass's reads at 10,000 containers on one node (and 2,000 on
    /// another), nearly none due: the old pass's (every container of the
    /// node, every E2B sandbox of the store) against these queries, with
    /// their plans. A measurement, not a test (BENCHMARKS.md's "The
    /// lifecycle sweeper at 10,000 containers"):
    /// `cargo test --release -p shellgate-store --lib sweep_pass_reads -- --ignored --nocapture`
    /// (with `SHELLGATE_TEST_POSTGRES_URL`, Postgres too).
    #[test]
    #[ignore]
    fn sweep_pass_reads_at_10000_containers() -> Result<()> {
        let directory =
            std::env::temp_dir().join(format!("shellgate-sweep-bench-{}", std::process::id()));
        std::fs::create_dir_all(&directory).expect("a temporary directory");
        let sqlite = Store::open(&directory.join("shellgate.db"))?;
        let mut report = measure_sweep_reads("SQLite (file, WAL)", &sqlite)?;
        drop(sqlite);
        let _ = std::fs::remove_dir_all(&directory);
        if let Some(url) = crate::testing::postgres_url() {
            let postgres = crate::testing::postgres_store(&url, 2);
            report.push_str(&measure_sweep_reads("Postgres", &postgres)?);
        }
        println!("{report}");
        Ok(())
    }

    /// [`sweep_pass_reads_at_10000_containers`] on `store`: its report.
    fn measure_sweep_reads(name: &str, store: &Store) -> Result<String> {
        use ContainerStatus::{Running, Suspended};
        let (retention, limit) = (7 * 86_400, 600);
        let mut report = String::new();
        {
            let mut sandboxes = Vec::new();
            store.transaction(|sql| {
                for (node, count) in [("n1", 10_000), ("n2", 2_000)] {
                    for i in 0..count {
                        let id = format!("{node}_{i}");
                        let row = match i % 20 {
                            // E2B's sandboxes: half paused two days ago,
                            // half running with their end ahead.
                            0 if i % 40 == 0 => {
                                sandboxes.push(e2b(&id, NOW - 2 * 86_400, true));
                                container(&id, node, Suspended, 2 * 86_400)
                            }
                            0 => {
                                sandboxes.push(e2b(&id, NOW + 3_600, false));
                                container(&id, node, Running, 1_800)
                            }
                            // Running, in use.
                            1..=3 => container(&id, node, Running, i64::from(i % 300)),
                            // Suspended, kept for days.
                            _ => {
                                let mut row =
                                    container(&id, node, Suspended, 3_600 + i64::from(i) * 50);
                                row.expires_minutes = 30 * 24 * 60;
                                row
                            }
                        };
                        crate::containers::insert_row(sql, &row)?;
                    }
                }
                // What is due: ten to expire, ten to suspend.
                for i in 0..10 {
                    crate::containers::insert_row(
                        sql,
                        &container(&format!("expired_{i}"), "n1", Running, 1_300),
                    )?;
                    crate::containers::insert_row(
                        sql,
                        &container(&format!("idle_{i}"), "n1", Running, limit),
                    )?;
                }
                Ok(())
            })?;
            for sandbox in &sandboxes {
                store.insert_e2b_sandbox(sandbox)?;
            }
            store.write(|sql| sql.execute("ANALYZE", &[]))?;
            let median =
                |pass: &dyn Fn() -> Result<usize>| -> Result<(std::time::Duration, usize)> {
                    let mut times = Vec::new();
                    let mut rows = 0;
                    for _ in 0..21 {
                        let start = std::time::Instant::now();
                        rows = pass()?;
                        times.push(start.elapsed());
                    }
                    times.sort();
                    Ok((times[times.len() / 2], rows))
                };
            let (before, before_rows) = median(&|| {
                Ok(store.containers_on_node("n1")?.len() + store.all_e2b_sandboxes()?.len())
            })?;
            let (after, after_rows) = median(&|| {
                Ok(store.lost_containers_on_node("n1")?.len()
                    + store.running_e2b_sandboxes_ending("n1", NOW)?.len()
                    + store.containers_to_expire("n1", NOW, retention)?.len()
                    + store.containers_to_suspend("n1", NOW, limit)?.len())
            })?;
            report.push_str(&format!(
                "{name}: every row (before) {before:?} for {before_rows} rows; due rows (after) {after:?} for {after_rows} rows\n"
            ));
            let explain =
                |query: &str, params: &[&dyn crate::sql::ToParam]| -> Result<Vec<String>> {
                    store.read(|sql| match sql.dialect() {
                        crate::sql::Dialect::Sqlite => {
                            sql.query(&format!("EXPLAIN QUERY PLAN {query}"), params, |row| {
                                row.get::<String>(3)
                            })
                        }
                        crate::sql::Dialect::Postgres => {
                            sql.query(&format!("EXPLAIN {query}"), params, |row| {
                                row.get::<String>(0)
                            })
                        }
                    })
                };
            let (kept_since, idle_since) = (NOW - retention, NOW - limit);
            for (what, plan) in [
                (
                    "expire",
                    explain(&expire_query(), &[&"n1", &NOW, &kept_since])?,
                ),
                (
                    "suspend",
                    explain(&suspend_query(), &[&"n1", &NOW, &idle_since])?,
                ),
                ("e2b", explain(&e2b_ending_query(), &[&"n1", &NOW])?),
                ("lost", explain(LOST_QUERY, &[&"n1"])?),
            ] {
                report.push_str(&format!("  {what}:\n    {}\n", plan.join("\n    ")));
            }
        }
        Ok(report)
    }
}
