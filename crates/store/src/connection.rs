//! The store over its database: SQLite by default, Postgres for a cluster
//! (`sql`), and the three ways its methods use one: a read, a write, a
//! transaction.

use std::path::Path;

use crate::error::{Result, StoreError};
use crate::sql::{Database, Dialect, PostgresDatabase, PostgresOptions, Sql, SqliteDatabase};

/// The metadata store.
pub struct Store {
    db: Box<dyn Database>,
}

/// Runs `work` through one of a database's entry points, handing back what
/// it returned (the entry points are object-safe, so they take `FnMut`
/// work returning `()`).
fn through<T>(
    entry: impl FnOnce(&mut dyn FnMut(&mut dyn Sql) -> Result<()>) -> Result<()>,
    mut work: impl FnMut(&mut dyn Sql) -> Result<T>,
) -> Result<T> {
    let mut output = None;
    entry(&mut |sql| {
        output = Some(work(sql)?);
        Ok(())
    })?;
    output.ok_or_else(|| StoreError::NoRow("work that did not run".into()))
}

impl Store {
    /// Opens (creating and migrating) the SQLite database at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        Ok(Self {
            db: Box::new(SqliteDatabase::open(path)?),
        })
    }

    /// An in-memory SQLite store, for tests.
    pub fn in_memory() -> Result<Self> {
        Ok(Self {
            db: Box::new(SqliteDatabase::in_memory()?),
        })
    }

    /// A store over an open SQLite connection, migrated (tests of the
    /// migrations themselves).
    #[cfg(test)]
    pub(crate) fn from_sqlite_connection(conn: rusqlite::Connection) -> Result<Self> {
        Ok(Self {
            db: Box::new(SqliteDatabase::setup(conn)?),
        })
    }

    /// Connects to (and migrates) a Postgres database.
    pub fn open_postgres(options: &PostgresOptions) -> Result<Self> {
        Ok(Self {
            db: Box::new(PostgresDatabase::open(options)?),
        })
    }

    /// Which database this store runs on.
    pub fn dialect(&self) -> Dialect {
        self.db.dialect()
    }

    /// Runs `work` with a connection for reading, on one snapshot.
    pub(crate) fn read<T>(&self, work: impl FnMut(&mut dyn Sql) -> Result<T>) -> Result<T> {
        through(|w| self.db.read(w), work)
    }

    /// Runs `work` with the connection for writing (each statement commits
    /// on its own).
    pub(crate) fn write<T>(&self, work: impl FnMut(&mut dyn Sql) -> Result<T>) -> Result<T> {
        through(|w| self.db.write(w), work)
    }

    /// Runs `work` in one transaction (it may run again: see
    /// [`Database::transaction`]).
    pub(crate) fn transaction<T>(&self, work: impl FnMut(&mut dyn Sql) -> Result<T>) -> Result<T> {
        through(|w| self.db.transaction(w), work)
    }

    /// Calls `wake` whenever a change is written (SQLite calls it from
    /// inside the writing transaction, on the writer's thread; Postgres
    /// from a listener thread when the change's `NOTIFY` arrives): `wake`
    /// must only signal, never block or touch the store. One callback at a
    /// time: a second call replaces the first.
    pub fn on_change(&self, wake: impl Fn() + Send + Sync + 'static) {
        self.db.on_change(Box::new(wake));
    }

    /// Closes the store's connections in order: each Postgres connection
    /// says goodbye to the server and the change listener stops; what is
    /// asked of a Postgres store afterwards fails with
    /// [`StoreError::Closed`] (SQLite's connections are files, closed when
    /// the store is dropped, on any thread). A server calls it last, when
    /// it stops. It blocks, like every store call: off an async runtime's
    /// workers.
    pub fn close(&self) {
        self.db.close();
    }
}
