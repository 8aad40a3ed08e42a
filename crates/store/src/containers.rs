//! Containers (the `containers` table): their rows, activity and sessions'
//! billing state.

use crate::connection::Store;
use crate::error::Result;
use crate::paging::{cursor_seq, page_of, Page};
use crate::sql::Row;
use crate::usage::{session_cost, utc_day};
use crate::values::ContainerStatus;
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
    /// The TCP ports reachable from outside through the server,
    /// as created.
    pub exposed_ports: Vec<u16>,
    /// The secret that authorizes requests to its ports (shown to the
    /// project's keys, so kept as it is: it opens nothing else). `None` for
    /// containers made before ports existed.
    pub port_token: Option<String>,
    /// The cluster node it lives on; empty on a single box.
    pub node_id: String,
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

/// A project's limits on containers that hold processes (running, or
/// being created): how many, and their memory limits together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quotas {
    pub max_running: u32,
    pub max_memory_bytes: u64,
}

/// What a project's containers that hold processes (running, or being
/// created) claim: admission's count and sum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ActiveLoad {
    pub containers: u64,
    pub memory_bytes: u64,
}

/// Why a container was not let start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The project already has `running` containers holding processes.
    Running { running: u32 },
    /// The project's containers holding processes claim `claimed` bytes;
    /// another would pass the limit.
    Memory { claimed: u64 },
    /// The container is lost (its node was declared lost): it is not
    /// woken until its node, back, restores it.
    Lost,
}

/// `exposed_ports` as stored: port numbers, comma separated.
struct PortList(Vec<u16>);

impl crate::sql::StoredText for PortList {
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

pub(crate) const CONTAINER_COLUMNS: &str = "id, project, name, created_at, last_active_at, status, memory_limit, \
     expires_minutes, network_policy, skills, file_ids, billed_seconds, session_seconds, session_open, image, \
     sleep_after_secs, exposed_ports, port_token, node_id";

pub(crate) fn container_row(row: &Row) -> Result<ContainerRow> {
    Ok(ContainerRow {
        id: row.get(0)?,
        project: row.get(1)?,
        name: row.get(2)?,
        created_at: row.get(3)?,
        last_active_at: row.get(4)?,
        status: row.text(5, "containers", "status")?,
        memory_limit: row.text(6, "containers", "memory_limit")?,
        expires_minutes: row.number(7, "containers", "expires_minutes")?,
        network_policy: row.get(8)?,
        skills: row.get(9)?,
        file_ids: row.get(10)?,
        billed_seconds: row.get(11)?,
        session_seconds: row.get(12)?,
        session_open: row.get(13)?,
        image: row.get(14)?,
        sleep_after_secs: row
            .get::<Option<i64>>(15)?
            .map(|secs| {
                u64::try_from(secs).map_err(|_| {
                    crate::sql::corrupt("containers", "sleep_after_secs", secs.to_string())
                })
            })
            .transpose()?,
        exposed_ports: row.text::<PortList>(16, "containers", "exposed_ports")?.0,
        port_token: row.get(17)?,
        node_id: row.get(18)?,
    })
}

impl Store {
    pub fn insert_container(&self, row: &ContainerRow) -> Result<()> {
        self.write(|sql| insert_row(sql, row))
    }

    /// Inserts a new container's row (status `creating`) if its project
    /// stays within `quotas` with it. Counted and inserted in one
    /// transaction under the project's lock, so two API replicas creating
    /// at once can never both take the last slot.
    pub fn insert_container_within(
        &self,
        row: &ContainerRow,
        quotas: Quotas,
    ) -> Result<std::result::Result<(), Refusal>> {
        self.transaction(|sql| {
            if let Err(refusal) = admit(sql, &row.project, row.memory_limit, quotas)? {
                return Ok(Err(refusal));
            }
            insert_row(sql, row)?;
            Ok(Ok(()))
        })
    }

    /// Opens a session of suspended container `id` (waking it) if its
    /// project stays within `quotas`, in one transaction under the
    /// project's lock (as [`Self::insert_container_within`]). A session
    /// already open is left as it is; a lost container is not woken (a
    /// request that read its row just before its node was declared lost
    /// must not make it running again behind the replicas' back).
    pub fn open_session_within(
        &self,
        project: &str,
        id: &str,
        memory: MemoryLimit,
        quotas: Quotas,
    ) -> Result<std::result::Result<(), Refusal>> {
        self.transaction(|sql| {
            if let Err(refusal) = admit(sql, project, memory, quotas)? {
                return Ok(Err(refusal));
            }
            let lost = sql
                .query_opt(
                    "SELECT status FROM containers WHERE id = ?1 AND project = ?2",
                    &[&id, &project],
                    |row| row.text::<ContainerStatus>(0, "containers", "status"),
                )?
                .is_some_and(|status| status == ContainerStatus::Lost);
            if lost {
                return Ok(Err(Refusal::Lost));
            }
            sql.execute(
                "UPDATE containers SET session_open = 1, session_seconds = 0, status = 'running'
                 WHERE id = ?1 AND project = ?2 AND session_open = 0",
                &[&id, &project],
            )?;
            Ok(Ok(()))
        })
    }

    /// A container of `project`.
    pub fn container(&self, project: &str, id: &str) -> Result<Option<ContainerRow>> {
        self.read(|sql| {
            sql.query_opt(
                &format!(
                    "SELECT {CONTAINER_COLUMNS} FROM containers WHERE id = ?1 AND project = ?2"
                ),
                &[&id, &project],
                container_row,
            )
        })
    }

    /// A container whatever its project, for the port proxy: a request
    /// there may be authorized by the container's own port token rather
    /// than a project's key (the caller checks which, and answers 404 for a
    /// container its credentials do not open).
    pub fn container_by_id(&self, id: &str) -> Result<Option<ContainerRow>> {
        self.read(|sql| {
            sql.query_opt(
                &format!("SELECT {CONTAINER_COLUMNS} FROM containers WHERE id = ?1"),
                &[&id],
                container_row,
            )
        })
    }

    /// Every container (for the lifecycle sweeper and recovery).
    pub fn all_containers(&self) -> Result<Vec<ContainerRow>> {
        self.read(|sql| {
            sql.query(
                &format!("SELECT {CONTAINER_COLUMNS} FROM containers ORDER BY seq"),
                &[],
                container_row,
            )
        })
    }

    /// Every container on cluster node `node` ('' on a single box): what
    /// its lifecycle sweeper and its recovery look after.
    pub fn containers_on_node(&self, node: &str) -> Result<Vec<ContainerRow>> {
        self.read(|sql| {
            sql.query(
                &format!(
                    "SELECT {CONTAINER_COLUMNS} FROM containers WHERE node_id = ?1 ORDER BY seq"
                ),
                &[&node],
                container_row,
            )
        })
    }

    /// The containers of node `node` a restart settles before it serves:
    /// those being made (`creating`, or declared lost while being made)
    /// and those whose session is open, not lost (their processes ended
    /// with the previous server). A few rows whatever the node holds: the others
    /// need nothing before the node serves again.
    pub fn containers_to_settle(&self, node: &str) -> Result<Vec<ContainerRow>> {
        self.read(|sql| {
            sql.query(
                &format!(
                    "SELECT {CONTAINER_COLUMNS} FROM containers
                     WHERE node_id = ?1 AND (status = 'creating'
                        OR (session_open = 1 AND status != 'lost')
                        OR (status = 'lost' AND lost_from = 'creating'))
                     ORDER BY seq"
                ),
                &[&node],
                container_row,
            )
        })
    }

    /// The images node `node`'s containers (live, suspended, being made or
    /// lost) are made from, each once: what its image cache keeps.
    pub fn images_on_node(&self, node: &str) -> Result<Vec<String>> {
        self.read(|sql| {
            sql.query(
                "SELECT DISTINCT image FROM containers WHERE node_id = ?1",
                &[&node],
                |row| row.get(0),
            )
        })
    }

    /// A page of a project's containers, optionally only those named `name`.
    pub fn list_containers(
        &self,
        project: &str,
        name: Option<&str>,
        page: &Page,
    ) -> Result<(Vec<ContainerRow>, bool)> {
        self.read(|sql| {
            page_of(
                sql,
                "containers",
                CONTAINER_COLUMNS,
                "project",
                project,
                "name",
                name,
                page,
                container_row,
            )
        })
    }

    /// A page of containers for the web console, newest first, filtered in
    /// SQL (a project with 10,000 containers is never read whole), with
    /// how many match in all.
    pub fn search_containers(&self, search: &ContainerSearch) -> Result<ContainerPage> {
        let status = search.status.map(ContainerStatus::as_str);
        self.read(|sql| {
            let cursor = cursor_seq(
                sql,
                "containers",
                "project",
                search.project.as_deref(),
                search.after.as_deref(),
            )?;
            // A substring search, not LIKE: the text is matched as given,
            // `%` and `_` included.
            let d = sql.dialect();
            let filter = format!(
                "(CAST(?1 AS TEXT) IS NULL OR project = ?1) AND (CAST(?2 AS TEXT) IS NULL OR status = ?2)
                 AND (CAST(?3 AS TEXT) IS NULL OR {} OR {})
                 AND (CAST(?4 AS TEXT) IS NULL OR image = ?4)",
                d.contains("id", "?3"),
                d.contains("name", "?3"),
            );
            let total: u64 = sql.query_one(
                &format!("SELECT COUNT(*) FROM containers WHERE {filter}"),
                &[&search.project, &status, &search.text, &search.image],
                |row| row.get(0),
            )?;
            let mut rows = sql.query(
                &format!(
                    "SELECT {CONTAINER_COLUMNS} FROM containers WHERE {filter}
                     AND (CAST(?5 AS BIGINT) IS NULL OR seq < ?5) ORDER BY seq DESC LIMIT ?6"
                ),
                &[
                    &search.project,
                    &status,
                    &search.text,
                    &search.image,
                    &cursor,
                    &(i64::from(search.limit) + 1),
                ],
                container_row,
            )?;
            let has_more = rows.len() > search.limit as usize;
            rows.truncate(search.limit as usize);
            Ok(ContainerPage {
                rows,
                has_more,
                total,
            })
        })
    }

    /// The names of `project`'s containers `ids` (those that exist), in
    /// the order asked.
    pub fn container_names(&self, project: &str, ids: &[String]) -> Result<Vec<(String, String)>> {
        self.read(|sql| {
            let mut names = Vec::with_capacity(ids.len());
            for id in ids {
                if let Some(name) = sql.query_opt(
                    "SELECT name FROM containers WHERE id = ?1 AND project = ?2",
                    &[id, &project],
                    |row| row.get::<String>(0),
                )? {
                    names.push((id.clone(), name));
                }
            }
            Ok(names)
        })
    }

    /// Records activity: `last_active_at` and command time in the session.
    pub fn record_activity(&self, id: &str, now: i64, command_seconds: f64) -> Result<()> {
        self.write(|sql| sql.execute(RECORD_ACTIVITY, &[&id, &now, &command_seconds]))?;
        Ok(())
    }

    /// Records the activity of many containers in one transaction:
    /// `(id, now, command_seconds)` each.
    pub fn record_activities(&self, activity: &[(String, i64, f64)]) -> Result<()> {
        self.transaction(|sql| {
            for (id, now, seconds) in activity {
                sql.execute(RECORD_ACTIVITY, &[id, now, seconds])?;
            }
            Ok(())
        })
    }

    /// Ends a container's creation: its first session opens and it is
    /// running. False when its row no longer says `creating` (deleted, or
    /// declared lost with its node meanwhile): the create must be undone,
    /// not finished behind the replicas' back.
    pub fn finish_creating(&self, id: &str) -> Result<bool> {
        let changed = self.write(|sql| {
            sql.execute(
                "UPDATE containers SET session_open = 1, session_seconds = 0, status = 'running'
                 WHERE id = ?1 AND status = 'creating'",
                &[&id],
            )
        })?;
        Ok(changed > 0)
    }

    /// Marks the start of a session (a new or woken container; not a lost
    /// one).
    pub fn open_session(&self, id: &str) -> Result<()> {
        self.write(|sql| {
            sql.execute(
                "UPDATE containers SET session_open = 1, session_seconds = 0, status = 'running'
                 WHERE id = ?1 AND session_open = 0 AND status != 'lost'",
                &[&id],
            )
        })?;
        Ok(())
    }

    /// Ends the current session: its cost moves to `billed_seconds` (and to
    /// the project's total), and the container takes `status`.
    pub fn close_session(&self, id: &str, status: ContainerStatus) -> Result<()> {
        let day = utc_day();
        self.transaction(|sql| close_session(sql, id, status, &day))
    }

    /// `close_session` for many containers in one transaction: a server
    /// stopping with thousands of containers suspends them all at once
    /// rather than one transaction (and one wait for the writer) each.
    pub fn close_sessions(&self, ids: &[String], status: ContainerStatus) -> Result<()> {
        let day = utc_day();
        self.transaction(|sql| {
            ids.iter()
                .try_for_each(|id| close_session(sql, id, status, &day))
        })
    }

    /// Deletes a container's row and its files' rows (closing its session
    /// into the project's usage first).
    pub fn delete_container(&self, id: &str) -> Result<()> {
        let day = utc_day();
        self.transaction(|sql| delete_rows(sql, id, &day))
    }

    /// Sets a container's own idle time before suspension.
    pub fn set_sleep_after(&self, id: &str, seconds: Option<u64>) -> Result<()> {
        self.write(|sql| {
            sql.execute(
                "UPDATE containers SET sleep_after_secs = ?2 WHERE id = ?1",
                &[&id, &seconds],
            )
        })?;
        Ok(())
    }

    /// Replaces the skills a container's row lists (their summaries, as
    /// JSON), after skills were added to the container.
    pub fn set_container_skills(&self, id: &str, skills: &str) -> Result<()> {
        self.write(|sql| {
            sql.execute(
                "UPDATE containers SET skills = ?2 WHERE id = ?1",
                &[&id, &skills],
            )
        })?;
        Ok(())
    }

    /// Replaces a container's network policy (its JSON), after a network
    /// update of the running container.
    pub fn set_network_policy(&self, id: &str, policy: &str) -> Result<()> {
        self.write(|sql| {
            sql.execute(
                "UPDATE containers SET network_policy = ?2 WHERE id = ?1",
                &[&id, &policy],
            )
        })?;
        Ok(())
    }

    /// Containers counted by status (for metrics).
    pub fn containers_by_status(&self) -> Result<Vec<(String, u64)>> {
        self.read(|sql| {
            sql.query(
                "SELECT status, COUNT(*) FROM containers GROUP BY status ORDER BY status",
                &[],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
        })
    }

    /// What a project's containers that hold processes (running or being
    /// created) claim, for admission control and the console's quota page.
    pub fn active_load(&self, project: &str) -> Result<ActiveLoad> {
        self.read(|sql| active_load(sql, project))
    }
}

/// Writes a container's row.
pub(crate) fn insert_row(sql: &mut dyn crate::sql::Sql, row: &ContainerRow) -> Result<()> {
    sql.execute(
        &format!(
            "INSERT INTO containers ({CONTAINER_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)"
        ),
        &[
            &row.id,
            &row.project,
            &row.name,
            &row.created_at,
            &row.last_active_at,
            &row.status,
            &row.memory_limit,
            &row.expires_minutes,
            &row.network_policy,
            &row.skills,
            &row.file_ids,
            &row.billed_seconds,
            &row.session_seconds,
            &row.session_open,
            &row.image,
            &row.sleep_after_secs,
            &port_list(&row.exposed_ports),
            &row.port_token,
            &row.node_id,
        ],
    )?;
    Ok(())
}

/// Deletes a container's row and its files' rows inside a transaction,
/// closing its session into the project's usage first.
pub(crate) fn delete_rows(sql: &mut dyn crate::sql::Sql, id: &str, day: &str) -> Result<()> {
    close_session(sql, id, ContainerStatus::Deleted, day)?;
    for table in [
        "container_files",
        "sessions",
        "e2b_sandboxes",
        "container_volumes",
    ] {
        sql.execute(
            &format!("DELETE FROM {table} WHERE container_id = ?1"),
            &[&id],
        )?;
    }
    sql.execute("DELETE FROM containers WHERE id = ?1", &[&id])?;
    Ok(())
}

/// Whether `project` may start one more container of `memory` within
/// `quotas`, decided under the project's lock (held until the calling
/// transaction ends, which writes the container's new state).
pub(crate) fn admit(
    sql: &mut dyn crate::sql::Sql,
    project: &str,
    memory: MemoryLimit,
    quotas: Quotas,
) -> Result<std::result::Result<(), Refusal>> {
    sql.lock(&format!("admission:{project}"))?;
    let load = active_load(sql, project)?;
    let running = u32::try_from(load.containers).unwrap_or(u32::MAX);
    if running >= quotas.max_running {
        return Ok(Err(Refusal::Running { running }));
    }
    if load.memory_bytes.saturating_add(memory.bytes()) > quotas.max_memory_bytes {
        return Ok(Err(Refusal::Memory {
            claimed: load.memory_bytes,
        }));
    }
    Ok(Ok(()))
}

/// What `project`'s containers that hold processes claim. One row per
/// memory limit, counted in SQL over `containers_active_by_project` (a
/// partial index of those containers only): the cost is the project's
/// live containers, never its suspended ones, and no row is carried out.
fn active_load(sql: &mut dyn crate::sql::Sql, project: &str) -> Result<ActiveLoad> {
    let counts: Vec<(MemoryLimit, u64)> = sql.query(ACTIVE_LOAD, &[&project], |row| {
        Ok((row.text(0, "containers", "memory_limit")?, row.get(1)?))
    })?;
    Ok(counts
        .into_iter()
        .fold(ActiveLoad::default(), |load, (limit, count)| ActiveLoad {
            containers: load.containers + count,
            memory_bytes: load
                .memory_bytes
                .saturating_add(limit.bytes().saturating_mul(count)),
        }))
}

/// A project's containers holding processes, by memory limit.
pub(crate) const ACTIVE_LOAD: &str = "SELECT memory_limit, COUNT(*) FROM containers
     WHERE project = ?1 AND (session_open = 1 OR status = 'creating')
     GROUP BY memory_limit";

/// A command's activity: the latest use, and its time in the session.
const RECORD_ACTIVITY: &str = "UPDATE containers SET
     last_active_at = CASE WHEN last_active_at > ?2 THEN last_active_at ELSE ?2 END,
     session_seconds = session_seconds + ?3
     WHERE id = ?1";

/// Ends a container's session inside a transaction: its cost moves to
/// `billed_seconds` (and to the usage ledger, by `day`), and the
/// container takes `status`. The session is closed by one conditional
/// update, so when two servers close it at once (a node's idle sweep and a
/// replica's delete) the second finds it closed and bills nothing: billed
/// exactly once.
pub(crate) fn close_session(
    sql: &mut dyn crate::sql::Sql,
    id: &str,
    status: ContainerStatus,
    day: &str,
) -> Result<()> {
    let session: Option<(String, f64)> = sql.query_opt(
        "UPDATE containers SET session_open = 0 WHERE id = ?1 AND session_open = 1
         RETURNING project, session_seconds",
        &[&id],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    if let Some((project, seconds)) = session {
        bill(sql, &project, id, session_cost(seconds), day)?;
    }
    // A lost container stays lost (a suspension its stalled node finishes
    // late must not make it look served): only its node's restore, or its
    // deletion, ends that.
    sql.execute(
        "UPDATE containers SET status = ?2 WHERE id = ?1 AND (status != 'lost' OR ?2 = 'deleted')",
        &[&id, &status],
    )?;
    Ok(())
}

/// Moves `cost` seconds of container `id` (of `project`) out of its
/// session into what it was billed and into the usage ledger (by `day`).
pub(crate) fn bill(
    sql: &mut dyn crate::sql::Sql,
    project: &str,
    id: &str,
    cost: f64,
    day: &str,
) -> Result<()> {
    sql.execute(
        "UPDATE containers SET billed_seconds = billed_seconds + ?2, session_seconds = 0 WHERE id = ?1",
        &[&id, &cost],
    )?;
    sql.execute(
        "INSERT INTO usage_daily (project, day, container_id, billed_seconds)
         VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (project, day, container_id)
         DO UPDATE SET billed_seconds = usage_daily.billed_seconds + excluded.billed_seconds",
        &[&project, &day, &id, &cost],
    )?;
    Ok(())
}
