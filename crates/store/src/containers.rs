//! Containers (the `containers` table): their rows, activity and sessions'
//! billing state.

use rusqlite::{params, OptionalExtension, Row};

use crate::connection::Store;
use crate::error::Result;
use crate::paging::{cursor_seq, page_of, Page};
use crate::usage::session_cost;
use crate::values::{column, ContainerStatus};
use shellgate_wire::MemoryLimit;

/// A container's row.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerRow {
    pub id: String,
    pub project: String,
    pub name: String,
    pub created_at: i64,
    pub last_active_at: i64,
    pub status: ContainerStatus,
    pub memory_limit: MemoryLimit,
    pub expires_minutes: u32,
    /// JSON, without secrets.
    pub network_policy: String,
    /// JSON array, as given.
    pub skills: String,
    /// JSON array of file ids.
    pub file_ids: String,
    /// Sandbox seconds billed for finished sessions.
    pub billed_seconds: f64,
    /// Seconds of commands in the current session.
    pub session_seconds: f64,
    /// Whether a session (the container's processes) is running.
    pub session_open: bool,
    /// The image it was made from (kept for its whole life).
    pub image: String,
    /// Its own idle time before suspension (`sleep_after_seconds` of
    /// OpenRouter's tools); `None`: the server's.
    pub sleep_after_secs: Option<u64>,
    /// The TCP ports reachable from outside through the server (issue 19),
    /// as created.
    pub exposed_ports: Vec<u16>,
    /// The secret that authorizes requests to its ports (shown to the
    /// project's keys, so kept as it is: it opens nothing else). `None` for
    /// containers made before ports existed.
    pub port_token: Option<String>,
}

/// What the web console's container list asks for.
#[derive(Debug, Clone, Default)]
pub struct ContainerSearch {
    /// `None`: every project's (an admin's view).
    pub project: Option<String>,
    pub status: Option<ContainerStatus>,
    /// Part of the id or the name.
    pub text: Option<String>,
    pub image: Option<String>,
    /// The id of the last container of the previous page.
    pub after: Option<String>,
    pub limit: u32,
}

/// A page of [`Store::search_containers`].
#[derive(Debug, Clone)]
pub struct ContainerPage {
    pub rows: Vec<ContainerRow>,
    pub has_more: bool,
    /// How many containers match the search, on every page together.
    pub total: u64,
}

/// `exposed_ports` as stored: port numbers, comma separated.
struct PortList(Vec<u16>);

impl crate::values::StoredText for PortList {
    fn from_text(text: &str) -> Option<Self> {
        if text.is_empty() {
            return Some(Self(Vec::new()));
        }
        text.split(',')
            .map(|port| port.parse::<u16>().ok())
            .collect::<Option<Vec<u16>>>()
            .map(Self)
    }
}

fn port_list(ports: &[u16]) -> String {
    ports
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

const CONTAINER_COLUMNS: &str = "id, project, name, created_at, last_active_at, status, memory_limit, \
     expires_minutes, network_policy, skills, file_ids, billed_seconds, session_seconds, session_open, image, \
     sleep_after_secs, exposed_ports, port_token";

fn container_row(row: &Row) -> rusqlite::Result<ContainerRow> {
    Ok(ContainerRow {
        id: row.get(0)?,
        project: row.get(1)?,
        name: row.get(2)?,
        created_at: row.get(3)?,
        last_active_at: row.get(4)?,
        status: column(row, 5, "containers", "status")?,
        memory_limit: column(row, 6, "containers", "memory_limit")?,
        expires_minutes: row.get(7)?,
        network_policy: row.get(8)?,
        skills: row.get(9)?,
        file_ids: row.get(10)?,
        billed_seconds: row.get(11)?,
        session_seconds: row.get(12)?,
        session_open: row.get(13)?,
        image: row.get(14)?,
        sleep_after_secs: row.get(15)?,
        exposed_ports: column::<PortList>(row, 16, "containers", "exposed_ports")?.0,
        port_token: row.get(17)?,
    })
}

impl Store {
    pub fn insert_container(&self, row: &ContainerRow) -> Result<()> {
        self.conn().execute(
            &format!(
                "INSERT INTO containers ({CONTAINER_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)"
            ),
            params![
                row.id,
                row.project,
                row.name,
                row.created_at,
                row.last_active_at,
                row.status,
                row.memory_limit.as_str(),
                row.expires_minutes,
                row.network_policy,
                row.skills,
                row.file_ids,
                row.billed_seconds,
                row.session_seconds,
                row.session_open,
                row.image,
                row.sleep_after_secs,
                port_list(&row.exposed_ports),
                row.port_token
            ],
        )?;
        Ok(())
    }

    /// A container of `project`.
    pub fn container(&self, project: &str, id: &str) -> Result<Option<ContainerRow>> {
        Ok(self
            .reader()
            .query_row(
                &format!(
                    "SELECT {CONTAINER_COLUMNS} FROM containers WHERE id = ?1 AND project = ?2"
                ),
                params![id, project],
                container_row,
            )
            .optional()?)
    }

    /// A container whatever its project, for the port proxy: a request
    /// there may be authorized by the container's own port token rather
    /// than a project's key (the caller checks which, and answers 404 for a
    /// container its credentials do not open).
    pub fn container_by_id(&self, id: &str) -> Result<Option<ContainerRow>> {
        Ok(self
            .reader()
            .query_row(
                &format!("SELECT {CONTAINER_COLUMNS} FROM containers WHERE id = ?1"),
                params![id],
                container_row,
            )
            .optional()?)
    }

    /// Every container (for the lifecycle sweeper and recovery).
    pub fn all_containers(&self) -> Result<Vec<ContainerRow>> {
        let conn = self.reader();
        let mut statement = conn.prepare(&format!(
            "SELECT {CONTAINER_COLUMNS} FROM containers ORDER BY seq"
        ))?;
        let rows = statement
            .query_map([], container_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// A page of a project's containers, optionally only those named `name`.
    pub fn list_containers(
        &self,
        project: &str,
        name: Option<&str>,
        page: &Page,
    ) -> Result<(Vec<ContainerRow>, bool)> {
        page_of(
            &self.reader(),
            "containers",
            CONTAINER_COLUMNS,
            "project",
            project,
            "name",
            name,
            page,
            container_row,
        )
    }

    /// A page of containers for the web console, newest first, filtered in
    /// SQL (a project with 10,000 containers is never read whole), with
    /// how many match in all.
    pub fn search_containers(&self, search: &ContainerSearch) -> Result<ContainerPage> {
        let conn = self.reader();
        let cursor = cursor_seq(
            &conn,
            "containers",
            "project",
            search.project.as_deref(),
            search.after.as_deref(),
        )?;
        // `instr`, not LIKE: the text is matched as given, `%` and `_`
        // included.
        const FILTER: &str = "(?1 IS NULL OR project = ?1) AND (?2 IS NULL OR status = ?2)
             AND (?3 IS NULL OR instr(id, ?3) > 0 OR instr(name, ?3) > 0)
             AND (?4 IS NULL OR image = ?4)";
        let status = search.status.map(ContainerStatus::as_str);
        let total: u64 = conn.query_row(
            &format!("SELECT COUNT(*) FROM containers WHERE {FILTER}"),
            params![search.project, status, search.text, search.image],
            |row| row.get(0),
        )?;
        let mut statement = conn.prepare(&format!(
            "SELECT {CONTAINER_COLUMNS} FROM containers WHERE {FILTER}
             AND (?5 IS NULL OR seq < ?5) ORDER BY seq DESC LIMIT ?6"
        ))?;
        let mut rows = statement
            .query_map(
                params![
                    search.project,
                    status,
                    search.text,
                    search.image,
                    cursor,
                    i64::from(search.limit) + 1
                ],
                container_row,
            )?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let has_more = rows.len() > search.limit as usize;
        rows.truncate(search.limit as usize);
        Ok(ContainerPage {
            rows,
            has_more,
            total,
        })
    }

    /// The names of `project`'s containers `ids` (those that exist), in
    /// the order asked.
    pub fn container_names(&self, project: &str, ids: &[String]) -> Result<Vec<(String, String)>> {
        let conn = self.reader();
        let mut statement =
            conn.prepare_cached("SELECT name FROM containers WHERE id = ?1 AND project = ?2")?;
        let mut names = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(name) = statement
                .query_row(params![id, project], |row| row.get::<_, String>(0))
                .optional()?
            {
                names.push((id.clone(), name));
            }
        }
        Ok(names)
    }

    /// Records activity: `last_active_at` and command time in the session.
    pub fn record_activity(&self, id: &str, now: i64, command_seconds: f64) -> Result<()> {
        self.conn().execute(
            "UPDATE containers SET last_active_at = MAX(last_active_at, ?2), session_seconds = session_seconds + ?3
             WHERE id = ?1",
            params![id, now, command_seconds],
        )?;
        Ok(())
    }

    /// Records the activity of many containers in one transaction:
    /// `(id, now, command_seconds)` each.
    pub fn record_activities(&self, activity: &[(String, i64, f64)]) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        {
            let mut update = tx.prepare_cached(
                "UPDATE containers SET last_active_at = MAX(last_active_at, ?2), session_seconds = session_seconds + ?3
                 WHERE id = ?1",
            )?;
            for (id, now, seconds) in activity {
                update.execute(params![id, now, seconds])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Marks the start of a session (a new or woken container).
    pub fn open_session(&self, id: &str) -> Result<()> {
        self.conn().execute(
            "UPDATE containers SET session_open = 1, session_seconds = 0, status = 'running' WHERE id = ?1 AND session_open = 0",
            params![id],
        )?;
        Ok(())
    }

    /// Ends the current session: its cost moves to `billed_seconds` (and to
    /// the project's total), and the container takes `status`.
    pub fn close_session(&self, id: &str, status: ContainerStatus) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let session: Option<(String, f64, bool)> = tx
            .query_row(
                "SELECT project, session_seconds, session_open FROM containers WHERE id = ?1",
                params![id],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )
            .optional()?;
        if let Some((project, seconds, true)) = session {
            let cost = session_cost(seconds);
            tx.execute(
                "UPDATE containers SET billed_seconds = billed_seconds + ?2, session_seconds = 0, session_open = 0 WHERE id = ?1",
                params![id, cost],
            )?;
            tx.execute(
                "INSERT INTO usage (project, billed_seconds) VALUES (?1, ?2)
                 ON CONFLICT (project) DO UPDATE SET billed_seconds = billed_seconds + excluded.billed_seconds",
                params![project, cost],
            )?;
            tx.execute(
                "INSERT INTO usage_daily (project, day, container_id, billed_seconds)
                 VALUES (?1, date('now'), ?2, ?3)
                 ON CONFLICT (project, day, container_id)
                 DO UPDATE SET billed_seconds = billed_seconds + excluded.billed_seconds",
                params![project, id, cost],
            )?;
        }
        tx.execute(
            "UPDATE containers SET status = ?2 WHERE id = ?1",
            params![id, status],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Deletes a container's row and its files' rows (closing its session
    /// into the project's usage first).
    pub fn delete_container(&self, id: &str) -> Result<()> {
        self.close_session(id, ContainerStatus::Deleted)?;
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute(
            "DELETE FROM container_files WHERE container_id = ?1",
            params![id],
        )?;
        tx.execute("DELETE FROM sessions WHERE container_id = ?1", params![id])?;
        tx.execute(
            "DELETE FROM e2b_sandboxes WHERE container_id = ?1",
            params![id],
        )?;
        tx.execute("DELETE FROM containers WHERE id = ?1", params![id])?;
        tx.commit()?;
        Ok(())
    }

    /// Sets a container's own idle time before suspension.
    pub fn set_sleep_after(&self, id: &str, seconds: Option<u64>) -> Result<()> {
        self.conn().execute(
            "UPDATE containers SET sleep_after_secs = ?2 WHERE id = ?1",
            params![id, seconds],
        )?;
        Ok(())
    }
    /// Containers counted by status (for metrics).
    pub fn containers_by_status(&self) -> Result<Vec<(String, u64)>> {
        let conn = self.reader();
        let mut statement = conn
            .prepare("SELECT status, COUNT(*) FROM containers GROUP BY status ORDER BY status")?;
        let rows = statement
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// Memory limits of a project's containers that hold processes (running
    /// or being created), for admission control.
    pub fn active_memory_limits(&self, project: &str) -> Result<Vec<MemoryLimit>> {
        let conn = self.reader();
        let mut statement = conn.prepare(
            "SELECT memory_limit FROM containers WHERE project = ?1 AND (session_open = 1 OR status = 'creating')",
        )?;
        let rows = statement
            .query_map(params![project], |row| {
                column(row, 0, "containers", "memory_limit")
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }
}
