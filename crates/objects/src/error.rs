//! What went wrong with an object.

/// What went wrong with an object.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error("invalid object key {key:?}: {reason}")]
    InvalidKey { key: String, reason: &'static str },
    #[error("no object {0}")]
    NotFound(String),
    #[error("object {key} is larger than {limit} bytes")]
    TooLarge { key: String, limit: u64 },
    /// The body handed to `put` failed (the caller's stream: a client that
    /// hung up, a size cap); nothing was stored.
    #[error("the body of {key} failed: {source}")]
    Body {
        key: String,
        #[source]
        source: std::io::Error,
    },
    /// The local directory.
    #[error("object {key}: {source}")]
    Io {
        key: String,
        #[source]
        source: std::io::Error,
    },
    /// The remote service.
    #[error("object store: {0}")]
    Remote(String),
    /// A location or setting that cannot be used.
    #[error("object store settings: {0}")]
    Settings(String),
}
