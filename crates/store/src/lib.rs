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

/// The SQLite store.
pub struct Store {
    conn: Mutex<Connection>,
    /// Read-only connections (empty for an in-memory store, which has one
    /// connection for everything).
    readers: Vec<Mutex<Connection>>,
}

#[cfg(test)]
mod tests;
