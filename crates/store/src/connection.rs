//! The store's connections: one writer, a small pool of readers (WAL lets
//! them read while a write transaction is open), the database files made
//! private, and the migrations applied on open.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use rusqlite::Connection;

use crate::error::Result;
use crate::migrations::MIGRATIONS;

/// The SQLite store.
pub struct Store {
    conn: Mutex<Connection>,
    /// Read-only connections (empty for an in-memory store, which has one
    /// connection for everything).
    readers: Vec<Mutex<Connection>>,
}

/// Read connections kept open beside the writer.
const READERS: usize = 4;

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

    pub(crate) fn setup(mut conn: Connection) -> Result<Self> {
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
    pub(crate) fn conn(&self) -> MutexGuard<'_, Connection> {
        lock(&self.conn)
    }

    /// A connection for reading: a free reader, or (all busy, or none) the
    /// first reader or the writer.
    pub(crate) fn reader(&self) -> MutexGuard<'_, Connection> {
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
}
