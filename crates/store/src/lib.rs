//! shellgate's metadata store: projects and their API keys, containers,
//! uploaded files, container files and sandbox-time usage, in SQLite (WAL).
//!
//! Every query that reads or changes tenant data takes the project, so one
//! project can never see another's rows. API keys are stored as SHA-256
//! hashes only. Migrations are numbered and applied in one transaction each.
//!
//! The store is synchronous: callers on an async runtime run it on blocking
//! threads. Writes go through one connection; reads use a small pool of
//! their own (WAL lets them proceed while a write transaction is open), so a
//! long write never makes another tenant's key lookup wait. The database and
//! its `-wal` and `-shm` files are created private (0600) from their first
//! byte: they hold key hashes and every tenant's ids.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use rusqlite::{params, Connection, OptionalExtension, Row};
use sha2::{Digest, Sha256};

/// Store errors.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// A pagination cursor names no row of this listing.
    #[error("no object with id {0:?} in this listing to continue after")]
    UnknownCursor(String),
    #[error("cannot prepare the database file: {0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// Schema migrations, applied in order; the index + 1 is the schema version.
const MIGRATIONS: &[&str] = &[
    r#"
    CREATE TABLE api_keys (
        hash TEXT PRIMARY KEY,
        project TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE TABLE containers (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        project TEXT NOT NULL,
        name TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        last_active_at INTEGER NOT NULL,
        status TEXT NOT NULL,
        memory_limit TEXT NOT NULL,
        expires_minutes INTEGER NOT NULL,
        network_policy TEXT NOT NULL,
        skills TEXT NOT NULL,
        file_ids TEXT NOT NULL,
        billed_seconds REAL NOT NULL DEFAULT 0,
        session_seconds REAL NOT NULL DEFAULT 0,
        session_open INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX containers_by_project ON containers (project, seq);
    CREATE TABLE files (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        project TEXT NOT NULL,
        filename TEXT NOT NULL,
        purpose TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX files_by_project ON files (project, seq);
    CREATE TABLE container_files (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        container_id TEXT NOT NULL,
        path TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        source TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        UNIQUE (container_id, path)
    );
    CREATE TABLE usage (
        project TEXT PRIMARY KEY,
        billed_seconds REAL NOT NULL
    );
"#,
    r#"
    ALTER TABLE files ADD COLUMN expires_at INTEGER;
    CREATE INDEX files_by_expiry ON files (expires_at) WHERE expires_at IS NOT NULL;
    CREATE INDEX container_files_by_container ON container_files (container_id, seq);
"#,
    r#"
    CREATE TABLE responses (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        project TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        status TEXT NOT NULL,
        previous_response_id TEXT,
        body TEXT NOT NULL,
        input_items TEXT NOT NULL,
        conversation TEXT NOT NULL
    );
    CREATE INDEX responses_by_project ON responses (project, seq);
    CREATE INDEX responses_by_status ON responses (status);
"#,
    r#"
    ALTER TABLE usage ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE usage ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE usage ADD COLUMN responses INTEGER NOT NULL DEFAULT 0;
"#,
    r#"
    CREATE TABLE commands (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        project TEXT NOT NULL,
        container_id TEXT NOT NULL,
        response_id TEXT,
        command TEXT NOT NULL,
        outcome TEXT NOT NULL,
        exit_code INTEGER,
        duration_ms INTEGER NOT NULL,
        bytes_out INTEGER NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX commands_by_container ON commands (container_id, seq);
"#,
    r#"
    CREATE TABLE egress (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        project TEXT NOT NULL,
        container_id TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        kind TEXT NOT NULL,
        requested_name TEXT,
        server_name TEXT,
        address TEXT,
        port INTEGER NOT NULL,
        verdict TEXT NOT NULL,
        reason TEXT NOT NULL,
        bytes_out INTEGER NOT NULL,
        bytes_in INTEGER NOT NULL,
        duration_ms INTEGER NOT NULL
    );
    CREATE INDEX egress_by_container ON egress (container_id, seq);
"#,
    r#"
    ALTER TABLE containers ADD COLUMN image TEXT NOT NULL DEFAULT 'host';
"#,
    r#"
    CREATE TABLE skills (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        project TEXT NOT NULL,
        name TEXT NOT NULL,
        description TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        default_version INTEGER NOT NULL,
        latest_version INTEGER NOT NULL,
        -- The highest version number ever given: numbers are never reused.
        last_number INTEGER NOT NULL
    );
    CREATE INDEX skills_by_project ON skills (project, seq);
    CREATE TABLE skill_versions (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        skill_id TEXT NOT NULL,
        project TEXT NOT NULL,
        version INTEGER NOT NULL,
        name TEXT NOT NULL,
        description TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        bytes INTEGER NOT NULL,
        UNIQUE (skill_id, version)
    );
"#,
    r#"
    ALTER TABLE containers ADD COLUMN sleep_after_secs INTEGER;
    CREATE TABLE sessions (
        project TEXT NOT NULL,
        session TEXT NOT NULL,
        container_id TEXT NOT NULL,
        PRIMARY KEY (project, session)
    );
    CREATE INDEX sessions_by_container ON sessions (container_id);
"#,
    r#"
    ALTER TABLE egress ADD COLUMN aggregated INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE containers ADD COLUMN egress_unlogged INTEGER NOT NULL DEFAULT 0;
"#,
];

/// A container's row.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerRow {
    pub id: String,
    pub project: String,
    pub name: String,
    pub created_at: i64,
    pub last_active_at: i64,
    /// `creating`, `running`, `suspended`.
    pub status: String,
    pub memory_limit: String,
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
}

/// A Files API file's row.
#[derive(Debug, Clone, PartialEq)]
pub struct FileRow {
    pub id: String,
    pub project: String,
    pub filename: String,
    pub purpose: String,
    pub bytes: u64,
    pub created_at: i64,
    /// When the file is deleted (`expires_after`), if ever.
    pub expires_at: Option<i64>,
}

/// A container file's row.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerFileRow {
    pub id: String,
    pub container_id: String,
    pub path: String,
    pub bytes: u64,
    pub source: String,
    pub created_at: i64,
}

/// One command run in a container (the command audit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRow {
    pub id: String,
    pub project: String,
    pub container_id: String,
    /// The response whose model ran it, if one did.
    pub response_id: Option<String>,
    pub command: String,
    /// `exit` or `timeout`.
    pub outcome: String,
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    pub bytes_out: u64,
    pub created_at: i64,
}

/// One attempt to leave a container (the egress log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressRow {
    pub id: String,
    /// Filled in from the container's row when recorded.
    pub project: String,
    pub container_id: String,
    pub created_at: i64,
    /// `dns`, `http`, `https`, `connect` or `secret`.
    pub kind: String,
    pub requested_name: Option<String>,
    pub server_name: Option<String>,
    pub address: Option<String>,
    pub port: u16,
    /// `allowed`, `denied` or `notice`.
    pub verdict: String,
    pub reason: String,
    pub bytes_out: u64,
    pub bytes_in: u64,
    pub duration_ms: u64,
    /// For an aggregate row (verdict `aggregated`): the events it stands
    /// for, which have no row of their own; 0 for every other row.
    pub aggregated: u64,
}

const EGRESS_COLUMNS: &str = "id, project, container_id, created_at, kind, requested_name, server_name, address, port, verdict, reason, bytes_out, bytes_in, duration_ms, aggregated";

fn egress_row(row: &Row) -> rusqlite::Result<EgressRow> {
    Ok(EgressRow {
        id: row.get(0)?,
        project: row.get(1)?,
        container_id: row.get(2)?,
        created_at: row.get(3)?,
        kind: row.get(4)?,
        requested_name: row.get(5)?,
        server_name: row.get(6)?,
        address: row.get(7)?,
        port: row.get::<_, i64>(8)? as u16,
        verdict: row.get(9)?,
        reason: row.get(10)?,
        bytes_out: row.get::<_, i64>(11)? as u64,
        bytes_in: row.get::<_, i64>(12)? as u64,
        duration_ms: row.get::<_, i64>(13)? as u64,
        aggregated: row.get::<_, i64>(14)? as u64,
    })
}

/// Why a skill version was not deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkillVersionDelete {
    NotFound,
    /// The default version: make another the default first.
    IsDefault,
}

fn insert_skill_version(conn: &Connection, row: &SkillVersionRow) -> Result<()> {
    conn.execute(
        &format!(
            "INSERT INTO skill_versions ({SKILL_VERSION_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
        ),
        params![
            row.id,
            row.skill_id,
            row.project,
            row.version,
            row.name,
            row.description,
            row.created_at,
            row.bytes as i64
        ],
    )?;
    Ok(())
}

/// A skill's row: what the skill object shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillRow {
    pub id: String,
    pub project: String,
    /// The default version's name and description.
    pub name: String,
    pub description: String,
    pub created_at: i64,
    pub default_version: u32,
    pub latest_version: u32,
}

/// One version of a skill; its bundle is a blob named after its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillVersionRow {
    pub id: String,
    pub skill_id: String,
    pub project: String,
    pub version: u32,
    pub name: String,
    pub description: String,
    pub created_at: i64,
    pub bytes: u64,
}

const SKILL_COLUMNS: &str =
    "id, project, name, description, created_at, default_version, latest_version";

fn skill_row(row: &Row) -> rusqlite::Result<SkillRow> {
    Ok(SkillRow {
        id: row.get(0)?,
        project: row.get(1)?,
        name: row.get(2)?,
        description: row.get(3)?,
        created_at: row.get(4)?,
        default_version: row.get(5)?,
        latest_version: row.get(6)?,
    })
}

const SKILL_VERSION_COLUMNS: &str =
    "id, skill_id, project, version, name, description, created_at, bytes";

fn skill_version_row(row: &Row) -> rusqlite::Result<SkillVersionRow> {
    Ok(SkillVersionRow {
        id: row.get(0)?,
        skill_id: row.get(1)?,
        project: row.get(2)?,
        version: row.get(3)?,
        name: row.get(4)?,
        description: row.get(5)?,
        created_at: row.get(6)?,
        bytes: row.get::<_, i64>(7)? as u64,
    })
}

const COMMAND_COLUMNS: &str = "id, project, container_id, response_id, command, outcome, exit_code, duration_ms, bytes_out, created_at";

fn command_row(row: &Row) -> rusqlite::Result<CommandRow> {
    Ok(CommandRow {
        id: row.get(0)?,
        project: row.get(1)?,
        container_id: row.get(2)?,
        response_id: row.get(3)?,
        command: row.get(4)?,
        outcome: row.get(5)?,
        exit_code: row.get(6)?,
        duration_ms: row.get::<_, i64>(7)? as u64,
        bytes_out: row.get::<_, i64>(8)? as u64,
        created_at: row.get(9)?,
    })
}

/// A stored response of the Responses API.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponseRow {
    pub id: String,
    pub project: String,
    pub created_at: i64,
    /// `queued`, `in_progress`, `completed`, `incomplete`, `failed`, `cancelled`.
    pub status: String,
    pub previous_response_id: Option<String>,
    /// The response object, JSON.
    pub body: String,
    /// This request's input items, JSON array.
    pub input_items: String,
    /// Every item of the conversation up to this response's output, JSON
    /// array: what a response continuing from this one starts from.
    pub conversation: String,
}

const RESPONSE_COLUMNS: &str =
    "id, project, created_at, status, previous_response_id, body, input_items, conversation";

fn response_row(row: &Row) -> rusqlite::Result<ResponseRow> {
    Ok(ResponseRow {
        id: row.get(0)?,
        project: row.get(1)?,
        created_at: row.get(2)?,
        status: row.get(3)?,
        previous_response_id: row.get(4)?,
        body: row.get(5)?,
        input_items: row.get(6)?,
        conversation: row.get(7)?,
    })
}

/// Cursor pagination: `limit` rows after the row with id `after`.
#[derive(Debug, Clone, Default)]
pub struct Page {
    pub limit: u32,
    pub ascending: bool,
    pub after: Option<String>,
}

/// The minimum a session is billed (seeds: 30 seconds each time a new or
/// suspended container starts).
pub const SESSION_MINIMUM_SECONDS: f64 = 30.0;

/// SHA-256 of an API key, hex encoded.
pub fn hash_key(key: &str) -> String {
    Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What a session costs: its command time, at least the minimum.
pub fn session_cost(session_seconds: f64) -> f64 {
    session_seconds.max(SESSION_MINIMUM_SECONDS)
}

/// A file found in a container, as the sync takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PresentFile {
    pub path: String,
    pub bytes: u64,
    pub modified_unix: i64,
}

/// Rows one write transaction of a sync changes at most: a sync of a huge
/// container is split so other tenants' writes wait milliseconds, not the
/// whole sync.
const SYNC_BATCH: usize = 2_000;

/// Read connections kept open beside the writer.
const READERS: usize = 4;

/// The SQLite store.
pub struct Store {
    conn: Mutex<Connection>,
    /// Read-only connections (empty for an in-memory store, which has one
    /// connection for everything).
    readers: Vec<Mutex<Connection>>,
}

const CONTAINER_COLUMNS: &str = "id, project, name, created_at, last_active_at, status, memory_limit, \
     expires_minutes, network_policy, skills, file_ids, billed_seconds, session_seconds, session_open, image, \
     sleep_after_secs";

fn container_row(row: &Row) -> rusqlite::Result<ContainerRow> {
    Ok(ContainerRow {
        id: row.get(0)?,
        project: row.get(1)?,
        name: row.get(2)?,
        created_at: row.get(3)?,
        last_active_at: row.get(4)?,
        status: row.get(5)?,
        memory_limit: row.get(6)?,
        expires_minutes: row.get(7)?,
        network_policy: row.get(8)?,
        skills: row.get(9)?,
        file_ids: row.get(10)?,
        billed_seconds: row.get(11)?,
        session_seconds: row.get(12)?,
        session_open: row.get(13)?,
        image: row.get(14)?,
        sleep_after_secs: row.get(15)?,
    })
}

const FILE_COLUMNS: &str = "id, project, filename, purpose, bytes, created_at, expires_at";

fn file_row(row: &Row) -> rusqlite::Result<FileRow> {
    Ok(FileRow {
        id: row.get(0)?,
        project: row.get(1)?,
        filename: row.get(2)?,
        purpose: row.get(3)?,
        bytes: row.get(4)?,
        created_at: row.get(5)?,
        expires_at: row.get(6)?,
    })
}

const CONTAINER_FILE_COLUMNS: &str = "id, container_id, path, bytes, source, created_at";

fn container_file_row(row: &Row) -> rusqlite::Result<ContainerFileRow> {
    Ok(ContainerFileRow {
        id: row.get(0)?,
        container_id: row.get(1)?,
        path: row.get(2)?,
        bytes: row.get(3)?,
        source: row.get(4)?,
        created_at: row.get(5)?,
    })
}

/// One page of the rows of `table` whose `scope_column` is `scope` (a
/// project, or a container for its files), only those whose
/// `filter_column` equals `filter` if given, in `seq` order, after the row
/// whose id is `page.after`. Table and column names are this file's
/// constants, never input.
#[allow(clippy::too_many_arguments)]
fn page_of<T>(
    conn: &Connection,
    table: &str,
    columns: &str,
    scope_column: &str,
    scope: &str,
    filter_column: &str,
    filter: Option<&str>,
    page: &Page,
    map: fn(&Row) -> rusqlite::Result<T>,
) -> Result<(Vec<T>, bool)> {
    let cursor = match &page.after {
        Some(after) => Some(
            conn.query_row(
                &format!("SELECT seq FROM {table} WHERE id = ?1 AND {scope_column} = ?2"),
                params![after, scope],
                |row| row.get::<_, i64>(0),
            )
            .optional()?
            // A cursor from another listing, or of a deleted row, cannot
            // say where to go on: silently ending the listing would look
            // like the end of the data.
            .ok_or_else(|| StoreError::UnknownCursor(after.clone()))?,
        ),
        None => None,
    };
    let (comparison, order) = if page.ascending {
        (">", "ASC")
    } else {
        ("<", "DESC")
    };
    let sql = format!(
        "SELECT {columns} FROM {table} WHERE {scope_column} = ?1 AND (?2 IS NULL OR {filter_column} = ?2)
         AND (?3 IS NULL OR seq {comparison} ?3) ORDER BY seq {order} LIMIT ?4"
    );
    let mut statement = conn.prepare(&sql)?;
    let mut rows = statement
        .query_map(params![scope, filter, cursor, page.limit as i64 + 1], map)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let has_more = rows.len() > page.limit as usize;
    rows.truncate(page.limit as usize);
    Ok((rows, has_more))
}

/// Creates the database and its WAL companions private, or makes existing
/// ones private: SQLite gives `-wal` and `-shm` the database file's mode, so
/// a database made 0600 before SQLite first opens it keeps all three private
/// from their first byte.
fn make_private(path: &Path) -> Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let file = Path::new(&name);
        if file.exists() {
            std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600))?;
        }
    }
    Ok(())
}

fn lock(mutex: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    // Each operation is one statement or transaction: a panic in another
    // holder cannot leave the connection half-way through one.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Store {
    /// Opens (creating and migrating) the database at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        make_private(path)?;
        let mut store = Self::setup(Connection::open(path)?)?;
        for _ in 0..READERS {
            let reader = Connection::open_with_flags(
                path,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                    | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            reader.busy_timeout(std::time::Duration::from_secs(5))?;
            store.readers.push(Mutex::new(reader));
        }
        Ok(store)
    }

    /// An in-memory store, for tests.
    pub fn in_memory() -> Result<Self> {
        Self::setup(Connection::open_in_memory()?)
    }

    fn setup(mut conn: Connection) -> Result<Self> {
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let version: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0))?;
        for (index, migration) in MIGRATIONS.iter().enumerate().skip(version.max(0) as usize) {
            let tx = conn.transaction()?;
            tx.execute_batch(migration)?;
            tx.pragma_update(None, "user_version", (index + 1) as i64)?;
            tx.commit()?;
        }
        Ok(Self {
            conn: Mutex::new(conn),
            readers: Vec::new(),
        })
    }

    /// The write connection.
    fn conn(&self) -> MutexGuard<'_, Connection> {
        lock(&self.conn)
    }

    /// A connection for reading: a free reader, or (all busy, or none) the
    /// first reader or the writer.
    fn reader(&self) -> MutexGuard<'_, Connection> {
        for reader in &self.readers {
            if let Ok(guard) = reader.try_lock() {
                return guard;
            }
        }
        match self.readers.first() {
            Some(reader) => lock(reader),
            None => self.conn(),
        }
    }

    // --- API keys ---------------------------------------------------------

    /// Adds a key for `project` (idempotent).
    pub fn add_key(&self, key: &str, project: &str, now: i64) -> Result<()> {
        self.conn().execute(
            "INSERT INTO api_keys (hash, project, created_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (hash) DO UPDATE SET project = excluded.project",
            params![hash_key(key), project, now],
        )?;
        Ok(())
    }

    /// How many keys exist.
    pub fn key_count(&self) -> Result<u64> {
        Ok(self
            .reader()
            .query_row("SELECT COUNT(*) FROM api_keys", [], |row| row.get(0))?)
    }

    /// The project a key belongs to.
    pub fn project_for_key(&self, key: &str) -> Result<Option<String>> {
        Ok(self
            .reader()
            .query_row(
                "SELECT project FROM api_keys WHERE hash = ?1",
                params![hash_key(key)],
                |row| row.get(0),
            )
            .optional()?)
    }

    // --- containers -------------------------------------------------------

    pub fn insert_container(&self, row: &ContainerRow) -> Result<()> {
        self.conn().execute(
            &format!(
                "INSERT INTO containers ({CONTAINER_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)"
            ),
            params![
                row.id,
                row.project,
                row.name,
                row.created_at,
                row.last_active_at,
                row.status,
                row.memory_limit,
                row.expires_minutes,
                row.network_policy,
                row.skills,
                row.file_ids,
                row.billed_seconds,
                row.session_seconds,
                row.session_open,
                row.image,
                row.sleep_after_secs
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
    pub fn close_session(&self, id: &str, status: &str) -> Result<()> {
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
        self.close_session(id, "deleted")?;
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute(
            "DELETE FROM container_files WHERE container_id = ?1",
            params![id],
        )?;
        tx.execute("DELETE FROM sessions WHERE container_id = ?1", params![id])?;
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

    // --- sessions (stable session ids) -------------------------------------

    /// The container a project's session id maps to, if any.
    pub fn session_container(&self, project: &str, session: &str) -> Result<Option<String>> {
        Ok(self
            .reader()
            .query_row(
                "SELECT container_id FROM sessions WHERE project = ?1 AND session = ?2",
                params![project, session],
                |row| row.get(0),
            )
            .optional()?)
    }

    /// Maps a session id to `container`, unless it maps to another container
    /// than `stale` already (a concurrent request won): returns the
    /// container it maps to now.
    pub fn claim_session(
        &self,
        project: &str,
        session: &str,
        container: &str,
        stale: Option<&str>,
    ) -> Result<String> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let current: Option<String> = tx
            .query_row(
                "SELECT container_id FROM sessions WHERE project = ?1 AND session = ?2",
                params![project, session],
                |row| row.get(0),
            )
            .optional()?;
        let winner = match current {
            Some(current) if Some(current.as_str()) != stale => current,
            _ => {
                tx.execute(
                    "INSERT INTO sessions (project, session, container_id) VALUES (?1, ?2, ?3) \
                     ON CONFLICT (project, session) DO UPDATE SET container_id = excluded.container_id",
                    params![project, session, container],
                )?;
                container.to_owned()
            }
        };
        tx.commit()?;
        Ok(winner)
    }

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
                        row.get::<_, i64>(0)? as u64,
                        row.get::<_, i64>(1)? as u64,
                        row.get::<_, i64>(2)? as u64,
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

    // --- files ------------------------------------------------------------

    pub fn insert_file(&self, row: &FileRow) -> Result<()> {
        self.conn().execute(
            &format!("INSERT INTO files ({FILE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"),
            params![
                row.id,
                row.project,
                row.filename,
                row.purpose,
                row.bytes,
                row.created_at,
                row.expires_at
            ],
        )?;
        Ok(())
    }

    /// Files whose `expires_at` has passed.
    pub fn expired_files(&self, now: i64) -> Result<Vec<FileRow>> {
        let conn = self.reader();
        let mut statement = conn.prepare(&format!(
            "SELECT {FILE_COLUMNS} FROM files WHERE expires_at IS NOT NULL AND expires_at <= ?1"
        ))?;
        let rows = statement
            .query_map(params![now], file_row)?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    pub fn file(&self, project: &str, id: &str) -> Result<Option<FileRow>> {
        Ok(self
            .reader()
            .query_row(
                &format!("SELECT {FILE_COLUMNS} FROM files WHERE id = ?1 AND project = ?2"),
                params![id, project],
                file_row,
            )
            .optional()?)
    }

    pub fn list_files(
        &self,
        project: &str,
        purpose: Option<&str>,
        page: &Page,
    ) -> Result<(Vec<FileRow>, bool)> {
        page_of(
            &self.reader(),
            "files",
            FILE_COLUMNS,
            "project",
            project,
            "purpose",
            purpose,
            page,
            file_row,
        )
    }

    pub fn delete_file(&self, project: &str, id: &str) -> Result<bool> {
        let deleted = self.conn().execute(
            "DELETE FROM files WHERE id = ?1 AND project = ?2",
            params![id, project],
        )?;
        Ok(deleted > 0)
    }

    // --- container files -------------------------------------------------

    /// Inserts or updates the file at (`container_id`, `path`); returns its row.
    pub fn upsert_container_file(&self, row: &ContainerFileRow) -> Result<ContainerFileRow> {
        let conn = self.conn();
        conn.execute(
            &format!(
                "INSERT INTO container_files ({CONTAINER_FILE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (container_id, path) DO UPDATE SET bytes = excluded.bytes"
            ),
            params![row.id, row.container_id, row.path, row.bytes, row.source, row.created_at],
        )?;
        Ok(conn.query_row(
            &format!("SELECT {CONTAINER_FILE_COLUMNS} FROM container_files WHERE container_id = ?1 AND path = ?2"),
            params![row.container_id, row.path],
            container_file_row,
        )?)
    }

    pub fn container_file(&self, container_id: &str, id: &str) -> Result<Option<ContainerFileRow>> {
        Ok(self
            .reader()
            .query_row(
                &format!("SELECT {CONTAINER_FILE_COLUMNS} FROM container_files WHERE id = ?1 AND container_id = ?2"),
                params![id, container_id],
                container_file_row,
            )
            .optional()?)
    }

    /// Every file row of a container, oldest first.
    pub fn container_files(&self, container_id: &str) -> Result<Vec<ContainerFileRow>> {
        let conn = self.reader();
        let mut statement = conn.prepare(&format!(
            "SELECT {CONTAINER_FILE_COLUMNS} FROM container_files WHERE container_id = ?1 ORDER BY seq"
        ))?;
        let rows = statement
            .query_map(params![container_id], container_file_row)?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// A page of a container's files in creation order (`seq`).
    pub fn list_container_files(
        &self,
        container_id: &str,
        page: &Page,
    ) -> Result<(Vec<ContainerFileRow>, bool)> {
        page_of(
            &self.reader(),
            "container_files",
            CONTAINER_FILE_COLUMNS,
            "container_id",
            container_id,
            "path",
            None,
            page,
            container_file_row,
        )
    }

    /// Brings a container's file rows in line with what is in it: one pass
    /// over a map of the rows (linear, not one lookup per pair), then the
    /// changes written in a few transactions of [`SYNC_BATCH`] rows: files
    /// gone are removed, new ones added (source `assistant`), changed sizes
    /// updated. Returns how many rows changed.
    pub fn sync_container_files(
        &self,
        container_id: &str,
        present: &[PresentFile],
        mut new_id: impl FnMut() -> String,
    ) -> Result<usize> {
        let known: HashMap<String, (String, u64)> = {
            let conn = self.reader();
            let mut statement = conn
                .prepare("SELECT path, id, bytes FROM container_files WHERE container_id = ?1")?;
            let rows = statement
                .query_map(params![container_id], |row| {
                    Ok((row.get::<_, String>(0)?, (row.get(1)?, row.get(2)?)))
                })?
                .collect::<rusqlite::Result<_>>()?;
            rows
        };
        enum Change<'a> {
            Upsert(&'a PresentFile),
            Delete(&'a str),
        }
        let mut seen = std::collections::HashSet::with_capacity(present.len());
        let mut changes = Vec::new();
        for file in present {
            seen.insert(file.path.as_str());
            match known.get(&file.path) {
                Some((_, bytes)) if *bytes == file.bytes => {}
                _ => changes.push(Change::Upsert(file)),
            }
        }
        for (path, (id, _)) in &known {
            if !seen.contains(path.as_str()) {
                changes.push(Change::Delete(id));
            }
        }
        for batch in changes.chunks(SYNC_BATCH) {
            let mut conn = self.conn();
            let tx = conn.transaction()?;
            {
                let mut upsert = tx.prepare_cached(&format!(
                    "INSERT INTO container_files ({CONTAINER_FILE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, 'assistant', ?5)
                     ON CONFLICT (container_id, path) DO UPDATE SET bytes = excluded.bytes"
                ))?;
                let mut delete = tx.prepare_cached(
                    "DELETE FROM container_files WHERE id = ?1 AND container_id = ?2",
                )?;
                for change in batch {
                    match change {
                        Change::Upsert(file) => {
                            upsert.execute(params![
                                new_id(),
                                container_id,
                                file.path,
                                file.bytes,
                                file.modified_unix
                            ])?;
                        }
                        Change::Delete(id) => {
                            delete.execute(params![id, container_id])?;
                        }
                    }
                }
            }
            tx.commit()?;
        }
        Ok(changes.len())
    }

    /// The file row at `path` of a container, if any.
    pub fn container_file_at(
        &self,
        container_id: &str,
        path: &str,
    ) -> Result<Option<ContainerFileRow>> {
        Ok(self
            .reader()
            .query_row(
                &format!("SELECT {CONTAINER_FILE_COLUMNS} FROM container_files WHERE container_id = ?1 AND path = ?2"),
                params![container_id, path],
                container_file_row,
            )
            .optional()?)
    }

    /// Memory limits of a project's containers that hold processes (running
    /// or being created), for admission control.
    pub fn active_memory_limits(&self, project: &str) -> Result<Vec<String>> {
        let conn = self.reader();
        let mut statement = conn.prepare(
            "SELECT memory_limit FROM containers WHERE project = ?1 AND (session_open = 1 OR status = 'creating')",
        )?;
        let rows = statement
            .query_map(params![project], |row| row.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    // --- the command audit ------------------------------------------------

    /// Records commands, in one transaction.
    pub fn record_commands(&self, rows: &[CommandRow]) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        {
            let mut insert = tx.prepare_cached(&format!(
                "INSERT INTO commands ({COMMAND_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
            ))?;
            for row in rows {
                insert.execute(params![
                    row.id,
                    row.project,
                    row.container_id,
                    row.response_id,
                    row.command,
                    row.outcome,
                    row.exit_code,
                    row.duration_ms as i64,
                    row.bytes_out as i64,
                    row.created_at
                ])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// A page of a container's commands.
    pub fn list_commands(
        &self,
        container_id: &str,
        page: &Page,
    ) -> Result<(Vec<CommandRow>, bool)> {
        page_of(
            &self.reader(),
            "commands",
            COMMAND_COLUMNS,
            "container_id",
            container_id,
            "project",
            None,
            page,
            command_row,
        )
    }

    /// Every command (of `project`, if given), oldest first, to `each`.
    pub fn each_command(
        &self,
        project: Option<&str>,
        mut each: impl FnMut(CommandRow) -> std::result::Result<(), String>,
    ) -> Result<()> {
        let conn = self.reader();
        let mut statement = conn.prepare(&format!(
            "SELECT {COMMAND_COLUMNS} FROM commands WHERE (?1 IS NULL OR project = ?1) ORDER BY seq"
        ))?;
        for row in statement.query_map(params![project], command_row)? {
            each(row?).map_err(StoreError::Corrupt)?;
        }
        Ok(())
    }

    // --- skills -----------------------------------------------------------

    /// A new skill and its first version, in one transaction.
    pub fn insert_skill(&self, skill: &SkillRow, version: &SkillVersionRow) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute(
            &format!(
                "INSERT INTO skills ({SKILL_COLUMNS}, last_number) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)"
            ),
            params![
                skill.id,
                skill.project,
                skill.name,
                skill.description,
                skill.created_at,
                skill.default_version,
                skill.latest_version
            ],
        )?;
        insert_skill_version(&tx, version)?;
        tx.commit()?;
        Ok(())
    }

    /// A skill of `project`.
    pub fn skill(&self, project: &str, id: &str) -> Result<Option<SkillRow>> {
        Ok(self
            .reader()
            .query_row(
                &format!("SELECT {SKILL_COLUMNS} FROM skills WHERE id = ?1 AND project = ?2"),
                params![id, project],
                skill_row,
            )
            .optional()?)
    }

    pub fn list_skills(&self, project: &str, page: &Page) -> Result<(Vec<SkillRow>, bool)> {
        page_of(
            &self.reader(),
            "skills",
            SKILL_COLUMNS,
            "project",
            project,
            "project",
            None,
            page,
            skill_row,
        )
    }

    /// A new version of a skill: numbered after its latest (never reused),
    /// made the default if `default`. `version.version` is set here.
    pub fn add_skill_version(
        &self,
        project: &str,
        version: &mut SkillVersionRow,
        default: bool,
    ) -> Result<Option<SkillRow>> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let Some(mut skill) = tx
            .query_row(
                &format!("SELECT {SKILL_COLUMNS} FROM skills WHERE id = ?1 AND project = ?2"),
                params![version.skill_id, project],
                skill_row,
            )
            .optional()?
        else {
            return Ok(None);
        };
        let last: u32 = tx.query_row(
            "SELECT last_number FROM skills WHERE id = ?1",
            params![skill.id],
            |row| row.get(0),
        )?;
        skill.latest_version = last + 1;
        version.version = skill.latest_version;
        if default {
            skill.default_version = version.version;
            skill.name = version.name.clone();
            skill.description = version.description.clone();
        }
        insert_skill_version(&tx, version)?;
        tx.execute(
            "UPDATE skills SET latest_version = ?2, last_number = ?2, default_version = ?3, name = ?4,
             description = ?5 WHERE id = ?1",
            params![
                skill.id,
                skill.latest_version,
                skill.default_version,
                skill.name,
                skill.description
            ],
        )?;
        tx.commit()?;
        Ok(Some(skill))
    }

    /// One version of a skill of `project`.
    pub fn skill_version(
        &self,
        project: &str,
        skill_id: &str,
        version: u32,
    ) -> Result<Option<SkillVersionRow>> {
        Ok(self
            .reader()
            .query_row(
                &format!(
                    "SELECT {SKILL_VERSION_COLUMNS} FROM skill_versions
                     WHERE skill_id = ?1 AND project = ?2 AND version = ?3"
                ),
                params![skill_id, project, version],
                skill_version_row,
            )
            .optional()?)
    }

    /// A page of a skill's versions (by version number: their order of
    /// creation).
    pub fn list_skill_versions(
        &self,
        skill_id: &str,
        page: &Page,
    ) -> Result<(Vec<SkillVersionRow>, bool)> {
        page_of(
            &self.reader(),
            "skill_versions",
            SKILL_VERSION_COLUMNS,
            "skill_id",
            skill_id,
            "project",
            None,
            page,
            skill_version_row,
        )
    }

    /// Makes `version` the default (its name and description become the
    /// skill's); `None` if there is no such skill or version.
    pub fn set_default_skill_version(
        &self,
        project: &str,
        skill_id: &str,
        version: u32,
    ) -> Result<Option<SkillRow>> {
        let Some(row) = self.skill_version(project, skill_id, version)? else {
            return Ok(None);
        };
        self.conn().execute(
            "UPDATE skills SET default_version = ?3, name = ?4, description = ?5
             WHERE id = ?1 AND project = ?2",
            params![skill_id, project, version, row.name, row.description],
        )?;
        self.skill(project, skill_id)
    }

    /// Deletes a skill and its versions; returns the versions' ids (their
    /// blobs are the caller's to remove), or `None` if there is no skill.
    pub fn delete_skill(&self, project: &str, id: &str) -> Result<Option<Vec<String>>> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let deleted = tx.execute(
            "DELETE FROM skills WHERE id = ?1 AND project = ?2",
            params![id, project],
        )?;
        if deleted == 0 {
            return Ok(None);
        }
        let versions: Vec<String> = tx
            .prepare("SELECT id FROM skill_versions WHERE skill_id = ?1")?
            .query_map(params![id], |row| row.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        tx.execute(
            "DELETE FROM skill_versions WHERE skill_id = ?1",
            params![id],
        )?;
        tx.commit()?;
        Ok(Some(versions))
    }

    /// Deletes one version (not the default: another must be made the
    /// default first); the latest version number is recomputed. Returns the
    /// deleted row.
    pub fn delete_skill_version(
        &self,
        project: &str,
        skill_id: &str,
        version: u32,
    ) -> Result<std::result::Result<SkillVersionRow, SkillVersionDelete>> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let Some(skill) = tx
            .query_row(
                &format!("SELECT {SKILL_COLUMNS} FROM skills WHERE id = ?1 AND project = ?2"),
                params![skill_id, project],
                skill_row,
            )
            .optional()?
        else {
            return Ok(Err(SkillVersionDelete::NotFound));
        };
        if skill.default_version == version {
            return Ok(Err(SkillVersionDelete::IsDefault));
        }
        let Some(row) = tx
            .query_row(
                &format!(
                    "SELECT {SKILL_VERSION_COLUMNS} FROM skill_versions WHERE skill_id = ?1 AND version = ?2"
                ),
                params![skill_id, version],
                skill_version_row,
            )
            .optional()?
        else {
            return Ok(Err(SkillVersionDelete::NotFound));
        };
        tx.execute(
            "DELETE FROM skill_versions WHERE skill_id = ?1 AND version = ?2",
            params![skill_id, version],
        )?;
        tx.execute(
            "UPDATE skills SET latest_version =
             (SELECT MAX(version) FROM skill_versions WHERE skill_id = ?1) WHERE id = ?1",
            params![skill_id],
        )?;
        tx.commit()?;
        Ok(Ok(row))
    }

    // --- the egress log ---------------------------------------------------

    /// Records attempts, in one transaction; each row's project is its
    /// container's (rows of containers the store does not know are
    /// dropped). An aggregate row's count is added to its container's
    /// total of events not logged one by one ([`Self::egress_unlogged`]).
    pub fn record_egress(&self, rows: &[EgressRow]) -> Result<usize> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let mut written = 0;
        {
            let mut insert = tx.prepare_cached(&format!(
                "INSERT INTO egress ({EGRESS_COLUMNS})
                 SELECT ?1, project, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14
                 FROM containers WHERE id = ?2"
            ))?;
            let mut count_unlogged = tx.prepare_cached(
                "UPDATE containers SET egress_unlogged = egress_unlogged + ?2 WHERE id = ?1",
            )?;
            for row in rows {
                if row.aggregated > 0 {
                    count_unlogged.execute(params![row.container_id, row.aggregated as i64])?;
                }
                written += insert.execute(params![
                    row.id,
                    row.container_id,
                    row.created_at,
                    row.kind,
                    row.requested_name,
                    row.server_name,
                    row.address,
                    row.port as i64,
                    row.verdict,
                    row.reason,
                    row.bytes_out as i64,
                    row.bytes_in as i64,
                    row.duration_ms as i64,
                    row.aggregated as i64
                ])?;
            }
        }
        tx.commit()?;
        Ok(written)
    }

    /// How many of a container's egress events were not logged one row
    /// each (counted in its aggregate rows), since it was created.
    pub fn egress_unlogged(&self, container_id: &str) -> Result<u64> {
        let count: Option<i64> = self
            .reader()
            .query_row(
                "SELECT egress_unlogged FROM containers WHERE id = ?1",
                params![container_id],
                |row| row.get(0),
            )
            .optional()?;
        Ok(count.unwrap_or(0).max(0) as u64)
    }

    /// Deletes at most `batch` of the oldest egress rows made before
    /// `cutoff` (seconds since the Unix epoch), whatever their container;
    /// returns how many went. Only the `batch` oldest rows are looked at
    /// (rows are written in time order), so a call costs the same on a
    /// table of any size and holds the writer briefly.
    pub fn delete_egress_before(&self, cutoff: i64, batch: usize) -> Result<usize> {
        Ok(self.conn().execute(
            "DELETE FROM egress WHERE seq IN (
                 SELECT seq FROM (SELECT seq, created_at FROM egress ORDER BY seq LIMIT ?2)
                 WHERE created_at < ?1)",
            params![cutoff, batch as i64],
        )?)
    }

    /// A page of a container's egress log.
    pub fn list_egress(&self, container_id: &str, page: &Page) -> Result<(Vec<EgressRow>, bool)> {
        page_of(
            &self.reader(),
            "egress",
            EGRESS_COLUMNS,
            "container_id",
            container_id,
            "project",
            None,
            page,
            egress_row,
        )
    }

    // --- responses --------------------------------------------------------

    /// Inserts or replaces a response (its status, body and conversation
    /// change as it runs).
    pub fn save_response(&self, row: &ResponseRow) -> Result<()> {
        self.conn().execute(
            &format!(
                "INSERT INTO responses ({RESPONSE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (id) DO UPDATE SET status = excluded.status, body = excluded.body,
                 conversation = excluded.conversation"
            ),
            params![
                row.id,
                row.project,
                row.created_at,
                row.status,
                row.previous_response_id,
                row.body,
                row.input_items,
                row.conversation
            ],
        )?;
        Ok(())
    }

    /// A response of `project`.
    pub fn response(&self, project: &str, id: &str) -> Result<Option<ResponseRow>> {
        Ok(self
            .reader()
            .query_row(
                &format!("SELECT {RESPONSE_COLUMNS} FROM responses WHERE id = ?1 AND project = ?2"),
                params![id, project],
                response_row,
            )
            .optional()?)
    }

    /// Responses with one of `statuses` (to settle runs a crash interrupted).
    pub fn responses_with_status(&self, statuses: &[&str]) -> Result<Vec<ResponseRow>> {
        let conn = self.reader();
        let mut statement = conn.prepare(&format!(
            "SELECT {RESPONSE_COLUMNS} FROM responses WHERE status = ?1"
        ))?;
        let mut rows = Vec::new();
        for status in statuses {
            rows.extend(
                statement
                    .query_map(params![status], response_row)?
                    .collect::<rusqlite::Result<Vec<_>>>()?,
            );
        }
        Ok(rows)
    }

    pub fn delete_response(&self, project: &str, id: &str) -> Result<bool> {
        let deleted = self.conn().execute(
            "DELETE FROM responses WHERE id = ?1 AND project = ?2",
            params![id, project],
        )?;
        Ok(deleted > 0)
    }

    pub fn delete_container_file(&self, container_id: &str, id: &str) -> Result<bool> {
        let deleted = self.conn().execute(
            "DELETE FROM container_files WHERE id = ?1 AND container_id = ?2",
            params![id, container_id],
        )?;
        Ok(deleted > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(id: &str, project: &str, name: &str) -> ContainerRow {
        ContainerRow {
            id: id.into(),
            project: project.into(),
            name: name.into(),
            created_at: 1,
            last_active_at: 1,
            status: "running".into(),
            memory_limit: "1g".into(),
            expires_minutes: 20,
            network_policy: r#"{"type":"disabled"}"#.into(),
            skills: "[]".into(),
            file_ids: "[]".into(),
            billed_seconds: 0.0,
            session_seconds: 0.0,
            session_open: false,
            image: "host".into(),
            sleep_after_secs: None,
        }
    }

    #[test]
    fn session_ids_map_to_one_container_and_follow_a_replacement() {
        let store = Store::in_memory().unwrap();
        store
            .insert_container(&container("c1", "alpha", "x"))
            .unwrap();
        assert_eq!(store.session_container("alpha", "s").unwrap(), None);
        assert_eq!(store.claim_session("alpha", "s", "c1", None).unwrap(), "c1");
        // A racing request that made its own container loses.
        assert_eq!(store.claim_session("alpha", "s", "c2", None).unwrap(), "c1");
        // Another project's same session id is another session.
        assert_eq!(store.claim_session("beta", "s", "c9", None).unwrap(), "c9");
        // The container went away: the next one replaces it, once.
        assert_eq!(
            store.claim_session("alpha", "s", "c3", Some("c1")).unwrap(),
            "c3"
        );
        assert_eq!(
            store.claim_session("alpha", "s", "c4", Some("c1")).unwrap(),
            "c3"
        );
        // Deleting a container forgets the sessions that pointed at it.
        store
            .insert_container(&container("c3", "alpha", "y"))
            .unwrap();
        store.set_sleep_after("c3", Some(60)).unwrap();
        assert_eq!(
            store
                .container("alpha", "c3")
                .unwrap()
                .unwrap()
                .sleep_after_secs,
            Some(60)
        );
        store.delete_container("c3").unwrap();
        assert_eq!(store.session_container("alpha", "s").unwrap(), None);
    }

    #[test]
    fn egress_rows_take_their_containers_project_and_page() {
        let store = Store::in_memory().unwrap();
        store
            .insert_container(&container("c1", "alpha", "x"))
            .unwrap();
        let row = |i: u32, container: &str| EgressRow {
            id: format!("eg{i}"),
            project: String::new(),
            container_id: container.into(),
            created_at: i as i64,
            kind: "dns".into(),
            requested_name: Some("a.test".into()),
            server_name: None,
            address: Some("203.0.113.7".into()),
            port: 53,
            verdict: "allowed".into(),
            reason: "allowed".into(),
            bytes_out: 0,
            bytes_in: 0,
            duration_ms: 1,
            aggregated: 0,
        };
        let rows: Vec<EgressRow> = (0..5)
            .map(|i| row(i, "c1"))
            .chain([row(9, "gone")])
            .collect();
        assert_eq!(
            store.record_egress(&rows).unwrap(),
            5,
            "unknown containers are dropped"
        );
        let page = Page {
            limit: 3,
            ascending: true,
            after: None,
        };
        let (first, more) = store.list_egress("c1", &page).unwrap();
        assert!(more);
        assert_eq!(first.len(), 3);
        assert!(first.iter().all(|r| r.project == "alpha"));
        let (rest, more) = store
            .list_egress(
                "c1",
                &Page {
                    after: Some(first[2].id.clone()),
                    ..page
                },
            )
            .unwrap();
        assert!(!more);
        assert_eq!(
            rest.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
            ["eg3", "eg4"]
        );
    }

    #[test]
    fn aggregate_egress_rows_count_per_container_and_old_rows_go_in_batches() {
        let store = Store::in_memory().unwrap();
        store
            .insert_container(&container("c1", "alpha", "x"))
            .unwrap();
        let row = |i: u32, created_at: i64, aggregated: u64| EgressRow {
            id: format!("eg{i}"),
            project: String::new(),
            container_id: "c1".into(),
            created_at,
            kind: "dns".into(),
            requested_name: None,
            server_name: None,
            address: None,
            port: 53,
            verdict: if aggregated > 0 {
                "aggregated"
            } else {
                "allowed"
            }
            .into(),
            reason: "r".into(),
            bytes_out: 0,
            bytes_in: 0,
            duration_ms: 0,
            aggregated,
        };
        // Five old rows (two aggregate ones), three recent ones.
        let rows: Vec<EgressRow> = (0..8)
            .map(|i| {
                row(
                    i,
                    if i < 5 { 100 } else { 1_000 },
                    [0, 7, 0, 3, 0, 0, 0, 0][i as usize],
                )
            })
            .collect();
        store.record_egress(&rows).unwrap();
        assert_eq!(store.egress_unlogged("c1").unwrap(), 10);
        assert_eq!(store.egress_unlogged("gone").unwrap(), 0);
        let all = Page {
            limit: 100,
            ascending: true,
            after: None,
        };
        assert_eq!(store.list_egress("c1", &all).unwrap().0[1].aggregated, 7);
        assert_eq!(store.delete_egress_before(500, 2).unwrap(), 2);
        assert_eq!(store.delete_egress_before(500, 2).unwrap(), 2);
        assert_eq!(store.delete_egress_before(500, 2).unwrap(), 1);
        assert_eq!(store.delete_egress_before(500, 2).unwrap(), 0);
        let left = store.list_egress("c1", &all).unwrap().0;
        assert_eq!(
            left.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
            ["eg5", "eg6", "eg7"]
        );
        // The container's total outlives the rows.
        assert_eq!(store.egress_unlogged("c1").unwrap(), 10);
    }

    #[test]
    fn skill_versions_number_up_and_never_reuse_a_number() {
        let store = Store::in_memory().unwrap();
        let version = |id: &str, name: &str| SkillVersionRow {
            id: id.into(),
            skill_id: "skill_1".into(),
            project: "alpha".into(),
            version: 1,
            name: name.into(),
            description: format!("{name} does things"),
            created_at: 1,
            bytes: 10,
        };
        let skill = SkillRow {
            id: "skill_1".into(),
            project: "alpha".into(),
            name: "one".into(),
            description: "one does things".into(),
            created_at: 1,
            default_version: 1,
            latest_version: 1,
        };
        store.insert_skill(&skill, &version("v1", "one")).unwrap();
        let mut second = version("v2", "two");
        let updated = store
            .add_skill_version("alpha", &mut second, false)
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                second.version,
                updated.latest_version,
                updated.default_version
            ),
            (2, 2, 1)
        );
        assert_eq!(updated.name, "one");
        let mut third = version("v3", "three");
        let updated = store
            .add_skill_version("alpha", &mut third, true)
            .unwrap()
            .unwrap();
        assert_eq!((updated.latest_version, updated.default_version), (3, 3));
        assert_eq!(updated.name, "three");
        // Not another project's; not the default.
        assert!(store
            .add_skill_version("beta", &mut version("v9", "x"), false)
            .unwrap()
            .is_none());
        assert_eq!(
            store.delete_skill_version("alpha", "skill_1", 3).unwrap(),
            Err(SkillVersionDelete::IsDefault)
        );
        store
            .set_default_skill_version("alpha", "skill_1", 1)
            .unwrap()
            .unwrap();
        assert_eq!(
            store
                .delete_skill_version("alpha", "skill_1", 3)
                .unwrap()
                .unwrap()
                .id,
            "v3"
        );
        assert_eq!(
            store
                .skill("alpha", "skill_1")
                .unwrap()
                .unwrap()
                .latest_version,
            2
        );
        let mut fourth = version("v4", "four");
        store
            .add_skill_version("alpha", &mut fourth, false)
            .unwrap();
        assert_eq!(fourth.version, 4, "3 is never given again");
        let page = Page {
            limit: 10,
            ascending: true,
            after: None,
        };
        let (versions, _) = store.list_skill_versions("skill_1", &page).unwrap();
        assert_eq!(
            versions.iter().map(|v| v.version).collect::<Vec<_>>(),
            [1, 2, 4]
        );
        assert_eq!(
            store
                .delete_skill("alpha", "skill_1")
                .unwrap()
                .unwrap()
                .len(),
            3
        );
        assert!(store.skill("alpha", "skill_1").unwrap().is_none());
        assert!(store.delete_skill("alpha", "skill_1").unwrap().is_none());
    }

    #[test]
    fn keys_are_hashed_and_map_to_projects() {
        let store = Store::in_memory().unwrap();
        store.add_key("sk-one", "alpha", 0).unwrap();
        assert_eq!(
            store.project_for_key("sk-one").unwrap().as_deref(),
            Some("alpha")
        );
        assert_eq!(store.project_for_key("sk-two").unwrap(), None);
        let stored: String = store
            .conn()
            .query_row("SELECT hash FROM api_keys", [], |row| row.get(0))
            .unwrap();
        assert!(!stored.contains("sk-one"));
    }

    #[test]
    fn pagination_walks_every_row_once_in_both_orders() {
        let store = Store::in_memory().unwrap();
        for i in 0..25 {
            store
                .insert_container(&container(
                    &format!("c{i}"),
                    "p",
                    if i % 2 == 0 { "even" } else { "odd" },
                ))
                .unwrap();
        }
        store
            .insert_container(&container("other", "q", "even"))
            .unwrap();
        for ascending in [true, false] {
            let mut seen = Vec::new();
            let mut after = None;
            loop {
                let (rows, more) = store
                    .list_containers(
                        "p",
                        None,
                        &Page {
                            limit: 7,
                            ascending,
                            after,
                        },
                    )
                    .unwrap();
                seen.extend(rows.iter().map(|r| r.id.clone()));
                if !more {
                    break;
                }
                after = rows.last().map(|r| r.id.clone());
            }
            assert_eq!(seen.len(), 25);
            assert!(!seen.contains(&"other".to_string()));
            if !ascending {
                assert_eq!(seen[0], "c24");
            }
        }
        let (named, _) = store
            .list_containers(
                "p",
                Some("even"),
                &Page {
                    limit: 100,
                    ..Page::default()
                },
            )
            .unwrap();
        assert_eq!(named.len(), 13);
        assert!(
            store.container("q", "c1").unwrap().is_none(),
            "another project's container is invisible"
        );
    }

    #[test]
    fn sessions_bill_at_least_the_minimum() {
        let store = Store::in_memory().unwrap();
        store.insert_container(&container("c1", "p", "n")).unwrap();
        store.open_session("c1").unwrap();
        store.record_activity("c1", 5, 2.5).unwrap();
        assert_eq!(store.project_usage("p").unwrap().0, 30.0);
        store.close_session("c1", "suspended").unwrap();
        store.open_session("c1").unwrap();
        store.record_activity("c1", 6, 45.0).unwrap();
        store.close_session("c1", "suspended").unwrap();
        assert_eq!(store.project_usage("p").unwrap().0, 75.0);
        store.delete_container("c1").unwrap();
        assert_eq!(
            store.project_usage("p").unwrap().0,
            75.0,
            "usage outlives the container"
        );
    }
}

#[cfg(test)]
mod file_tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_database_and_its_wal_files_are_private_from_the_first_byte() {
        let dir = temp_dir("modes");
        let path = dir.join("shellgate.db");
        // A permissive umask must not matter.
        // SAFETY: umask only changes this process's file-creation mask.
        let old = unsafe { libc_umask(0) };
        let store = Store::open(&path).unwrap();
        // SAFETY: as above, restoring it.
        unsafe { libc_umask(old) };
        store.add_key("k", "p", 0).unwrap();
        for suffix in ["", "-wal", "-shm"] {
            let file = dir.join(format!("shellgate.db{suffix}"));
            let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{} is {mode:o}", file.display());
        }
        // Reads through the reader connections see the writer's commits.
        assert_eq!(store.project_for_key("k").unwrap().as_deref(), Some("p"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    extern "C" {
        #[link_name = "umask"]
        fn libc_umask(mask: u32) -> u32;
    }

    #[test]
    fn a_sync_is_linear_and_keeps_ids_of_unchanged_files() {
        let dir = temp_dir("sync");
        let store = Store::open(&dir.join("db")).unwrap();
        let files: Vec<PresentFile> = (0..10_000)
            .map(|i| PresentFile {
                path: format!("/mnt/data/f{i}"),
                bytes: i,
                modified_unix: 1,
            })
            .collect();
        let mut n = 0;
        let mut next = || {
            n += 1;
            format!("cfile_{n}")
        };
        assert_eq!(
            store.sync_container_files("c", &files, &mut next).unwrap(),
            10_000
        );
        let before = store
            .container_file_at("c", "/mnt/data/f7")
            .unwrap()
            .unwrap();
        // Unchanged: nothing written. One gone, one resized, one new.
        assert_eq!(
            store.sync_container_files("c", &files, &mut next).unwrap(),
            0
        );
        let mut changed = files.clone();
        changed.remove(0);
        changed[0].bytes = 999;
        changed.push(PresentFile {
            path: "/mnt/data/new".into(),
            bytes: 1,
            modified_unix: 2,
        });
        assert_eq!(
            store
                .sync_container_files("c", &changed, &mut next)
                .unwrap(),
            3
        );
        assert!(store
            .container_file_at("c", "/mnt/data/f0")
            .unwrap()
            .is_none());
        assert_eq!(
            store
                .container_file_at("c", "/mnt/data/f7")
                .unwrap()
                .unwrap()
                .id,
            before.id,
            "an unchanged file keeps its id"
        );
        let page = Page {
            limit: 100,
            ascending: true,
            after: Some("cfile_nope".into()),
        };
        assert!(matches!(
            store.list_container_files("c", &page),
            Err(StoreError::UnknownCursor(_))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
