//! The embedded database: one SQLite file (WAL), one writer connection and
//! a small pool of readers (WAL lets them read while a write transaction
//! is open, so a long write never makes another tenant's key lookup wait).
//! The database files are made private, and the migrations applied, on
//! open.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use rusqlite::hooks::Action;
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::Connection;

use super::row::{Cell, Row};
use super::{Database, Dialect, Param, Sql, ToParam, Work};
use crate::error::Result;
use crate::migrations::{check_schema_version, SQLITE_MIGRATIONS};

/// Read connections kept open beside the writer.
const READERS: usize = 4;

/// Prepared statements each connection keeps (the store has about a
/// hundred distinct ones; the hot ones stay prepared).
const STATEMENT_CACHE: usize = 128;

/// The SQLite database.
pub(crate) struct SqliteDatabase {
    writer: Mutex<Connection>,
    /// Read-only connections (empty for an in-memory database, which has
    /// one connection for everything).
    readers: Vec<Mutex<Connection>>,
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
    // holder cannot leave the connection half-way through one (a
    // transaction left open is rolled back by `transaction` itself).
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl SqliteDatabase {
    /// Opens (creating and migrating) the database at `path`.
    pub(crate) fn open(path: &Path) -> Result<Self> {
        make_private(path)?;
        let mut database = Self::setup(Connection::open(path)?)?;
        for _ in 0..READERS {
            let reader = Connection::open_with_flags(
                path,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                    | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            reader.busy_timeout(std::time::Duration::from_secs(5))?;
            reader.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
            database.readers.push(Mutex::new(reader));
        }
        Ok(database)
    }

    /// An in-memory database, for tests.
    pub(crate) fn in_memory() -> Result<Self> {
        Self::setup(Connection::open_in_memory()?)
    }

    pub(crate) fn setup(mut conn: Connection) -> Result<Self> {
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        let version: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0))?;
        check_schema_version(version, SQLITE_MIGRATIONS.len())?;
        for (index, migration) in SQLITE_MIGRATIONS
            .iter()
            .enumerate()
            .skip(version.max(0) as usize)
        {
            let tx = conn.transaction()?;
            tx.execute_batch(migration)?;
            tx.pragma_update(None, "user_version", (index + 1) as i64)?;
            tx.commit()?;
        }
        Ok(Self {
            writer: Mutex::new(conn),
            readers: Vec::new(),
        })
    }

    /// The write connection.
    pub(crate) fn writer(&self) -> MutexGuard<'_, Connection> {
        lock(&self.writer)
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
            None => self.writer(),
        }
    }
}

impl Database for SqliteDatabase {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn read(&self, work: Work<'_>) -> Result<()> {
        // One snapshot for all of the work's statements (WAL: a read
        // transaction sees the database as of its first read).
        let mut conn = self.reader();
        conn.execute_batch("BEGIN")?;
        let result = work(&mut *conn);
        let _ = conn.execute_batch("COMMIT");
        result
    }

    fn write(&self, work: Work<'_>) -> Result<()> {
        work(&mut *self.writer())
    }

    fn transaction(&self, work: Work<'_>) -> Result<()> {
        let mut conn = self.writer();
        // IMMEDIATE: the write lock is taken at the start, so a transaction
        // that reads before it writes never fails half-way on a lock
        // another process took between the two.
        conn.execute_batch("BEGIN IMMEDIATE")?;
        match work(&mut *conn) {
            Ok(()) => {
                if let Err(error) = conn.execute_batch("COMMIT") {
                    let _ = conn.execute_batch("ROLLBACK");
                    return Err(error.into());
                }
                Ok(())
            }
            Err(error) => {
                let _ = conn.execute_batch("ROLLBACK");
                Err(error)
            }
        }
    }

    fn on_change(&self, wake: Box<dyn Fn() + Send + Sync>) {
        self.writer()
            .update_hook(Some(move |action: Action, _: &str, table: &str, _| {
                if action == Action::SQLITE_INSERT && table == "console_changes" {
                    wake();
                }
            }));
    }

    /// Nothing to say goodbye to: the connections are closed with the
    /// store, wherever it is dropped.
    fn close(&self) {}
}

/// A parameter as SQLite takes it.
struct SqliteParam<'a>(Param<'a>);

impl rusqlite::ToSql for SqliteParam<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self.0 {
            Param::Null => ToSqlOutput::Borrowed(ValueRef::Null),
            Param::Integer(value) => ToSqlOutput::Borrowed(ValueRef::Integer(value)),
            Param::Real(value) => ToSqlOutput::Borrowed(ValueRef::Real(value)),
            Param::Text(text) => ToSqlOutput::Borrowed(ValueRef::Text(text.as_bytes())),
        })
    }
}

fn bind<'a>(params: &'a [&'a dyn ToParam]) -> impl Iterator<Item = SqliteParam<'a>> + 'a {
    params.iter().map(|param| SqliteParam(param.to_param()))
}

fn cell(value: ValueRef<'_>) -> Cell {
    match value {
        ValueRef::Null => Cell::Null,
        ValueRef::Integer(value) => Cell::Integer(value),
        ValueRef::Real(value) => Cell::Real(value),
        ValueRef::Text(text) => Cell::Text(String::from_utf8_lossy(text).into_owned()),
        // The schema has no BLOB column; a blob is read as its bytes' text.
        ValueRef::Blob(bytes) => Cell::Text(String::from_utf8_lossy(bytes).into_owned()),
    }
}

impl Sql for Connection {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn execute(&mut self, sql: &str, params: &[&dyn ToParam]) -> Result<usize> {
        let mut statement = self.prepare_cached(sql)?;
        Ok(statement.execute(rusqlite::params_from_iter(bind(params)))?)
    }

    fn each_row(
        &mut self,
        sql: &str,
        params: &[&dyn ToParam],
        each: &mut dyn FnMut(Row) -> Result<()>,
    ) -> Result<()> {
        let mut statement = self.prepare_cached(sql)?;
        let columns = statement.column_count();
        let mut rows = statement.query(rusqlite::params_from_iter(bind(params)))?;
        while let Some(row) = rows.next()? {
            let cells = (0..columns)
                .map(|index| row.get_ref(index).map(cell))
                .collect::<rusqlite::Result<Vec<_>>>()?;
            each(Row::new(cells))?;
        }
        Ok(())
    }

    fn lock(&mut self, _key: &str) -> Result<()> {
        Ok(())
    }
}
