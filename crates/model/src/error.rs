//! The loop's typed errors for requests it refuses.

/// A request the loop refuses before it starts: `param` names what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RequestError {
    pub param: String,
    pub message: String,
}
