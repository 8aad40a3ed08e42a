//! What the store fails with: SQLite's errors, a stored value outside its
//! type, a broken response chain, a stale cursor.

use crate::values;

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
    /// A key id (`key_` and 16 hex digits) that names no key.
    #[error("no API key with id {0:?}")]
    UnknownKey(String),
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
