//! What the store fails with: the database's errors, a stored value outside
//! its type, a broken response chain, a stale cursor.

use std::error::Error as _;

/// Store errors.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Sqlite(rusqlite::Error),
    #[error("database error: {}", describe_postgres(.0))]
    Postgres(#[from] postgres::Error),
    /// The database settings cannot be used.
    #[error("database settings: {0}")]
    Config(String),
    /// Every pooled connection stayed busy for the pool's whole wait.
    #[error("database busy: all {0} connections stayed in use")]
    PoolExhausted(usize),
    /// A query's column is not what its reader expects (a query and its
    /// mapper disagree: a bug, never input).
    #[error("result column {index} {problem}")]
    Column { index: usize, problem: &'static str },
    /// A query that always returns a row returned none.
    #[error("query returned no row: {0}")]
    NoRow(String),
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
    /// A key id (`key_` and 16 hex digits) that names no key.
    #[error("no API key with id {0:?}")]
    UnknownKey(String),
    /// The database's schema is newer than this binary's migrations: a
    /// newer shellgate migrated it. Migrations only go forward, so this
    /// binary cannot use it (run the newer version, or restore the backup
    /// taken before the upgrade).
    #[error(
        "the database's schema is version {found}, newer than this shellgate's \
         ({known}): a newer shellgate migrated it; run that version, or restore \
         the backup taken before the upgrade (migrations only go forward)"
    )]
    NewerSchema { found: i64, known: usize },
    #[error("cannot prepare the database file: {0}")]
    Io(#[from] std::io::Error),
    /// The store was closed ([`crate::Store::close`]): its server is
    /// shutting down.
    #[error("the store is closed (the server is shutting down)")]
    Closed,
}

impl From<rusqlite::Error> for StoreError {
    fn from(error: rusqlite::Error) -> Self {
        StoreError::Sqlite(error)
    }
}

/// A column's value that is not one of its type's: what
/// [`StoreError::Corrupt`] is made from.
#[derive(Debug, thiserror::Error)]
#[error("column {table}.{column} holds {value:?}")]
pub struct CorruptValue {
    pub table: &'static str,
    pub column: &'static str,
    pub value: String,
}

/// The message of a Postgres error, with its server-side detail when
/// there is one (the client's `Display` says only "db error").
fn describe_postgres(error: &postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => match error.source() {
            Some(source) => format!("{error}: {source}"),
            None => error.to_string(),
        },
    }
}

impl From<CorruptValue> for StoreError {
    fn from(corrupt: CorruptValue) -> Self {
        StoreError::Corrupt {
            table: corrupt.table,
            column: corrupt.column,
            value: corrupt.value,
        }
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;
