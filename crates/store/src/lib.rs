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

use std::sync::Mutex;

use rusqlite::Connection;

mod commands;
mod connection;
mod container_files;
mod containers;
mod egress;
mod files;
mod keys;
mod migrations;
mod paging;
mod responses;
mod sessions;
mod skills;
mod usage;
mod values;

pub use commands::CommandRow;
pub use container_files::{ContainerFileRow, PresentFile};
pub use containers::ContainerRow;
pub use egress::EgressRow;
pub use files::FileRow;
pub use keys::hash_key;
pub use paging::Page;
pub use responses::ResponseRow;
pub use skills::{SkillRow, SkillVersionDelete, SkillVersionRow};
pub use usage::{session_cost, SESSION_MINIMUM_SECONDS};
pub use values::{
    CommandOutcome, ContainerStatus, CorruptValue, EgressVerdict, FileSource, ResponseStatus,
};

/// Store errors.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Sqlite(rusqlite::Error),
    /// A row's column holds a value its type does not have (an unknown
    /// status, a memory limit that is none of the offered ones...).
    #[error("stored data is corrupt: column {table}.{column} holds {value:?}")]
    Corrupt {
        table: &'static str,
        column: &'static str,
        value: String,
    },
    /// A response's conversation does not continue the one it is stored
    /// after (it is shorter than its previous response's).
    #[error("response {id:?} does not continue the conversation it is stored after")]
    BrokenChain { id: String },
    /// The consumer of [`Store::each_command`] stopped with this error.
    #[error("{0}")]
    Consumer(String),
    /// A pagination cursor names no row of this listing.
    #[error("no object with id {0:?} in this listing to continue after")]
    UnknownCursor(String),
    #[error("cannot prepare the database file: {0}")]
    Io(#[from] std::io::Error),
}

impl From<rusqlite::Error> for StoreError {
    fn from(error: rusqlite::Error) -> Self {
        // A row mapper's typed column that failed comes back out as what it
        // is (the mapper can only return rusqlite's error).
        match error {
            rusqlite::Error::FromSqlConversionFailure(index, kind, inner) => {
                match inner.downcast::<values::CorruptValue>() {
                    Ok(corrupt) => StoreError::Corrupt {
                        table: corrupt.table,
                        column: corrupt.column,
                        value: corrupt.value,
                    },
                    Err(inner) => StoreError::Sqlite(rusqlite::Error::FromSqlConversionFailure(
                        index, kind, inner,
                    )),
                }
            }
            other => StoreError::Sqlite(other),
        }
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// The SQLite store.
pub struct Store {
    conn: Mutex<Connection>,
    /// Read-only connections (empty for an in-memory store, which has one
    /// connection for everything).
    readers: Vec<Mutex<Connection>>,
}

#[cfg(test)]
mod tests;
