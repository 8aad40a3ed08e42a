//! The engine's typed errors.

use std::io;

/// Everything the engine can fail with. The API layer maps these to HTTP statuses.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The caller asked for something the engine refuses; `param` names what.
    #[error("{message}")]
    InvalidRequest {
        param: &'static str,
        message: String,
    },
    /// No container with that id.
    #[error("no container with id {0:?}")]
    NotFound(String),
    /// A container with that id exists already.
    #[error("a container with id {0:?} already exists")]
    AlreadyExists(String),
    /// No file at that path in the container.
    #[error("no file at {0:?}")]
    FileNotFound(String),
    /// The image named does not exist in the image store.
    #[error("no image named {0:?}; see `shellgate image list`")]
    ImageNotFound(String),
    /// Something else already occupies that path (a directory where a file
    /// should go, say).
    #[error("{0}")]
    Conflict(String),
    /// The sandbox user may not do that there (`EACCES`, `EPERM`, `EROFS`).
    #[error("{0}")]
    PermissionDenied(String),
    /// This backend does not offer the operation.
    #[error("{0} is not supported by this sandbox backend")]
    NotSupported(&'static str),
    /// The server cannot take another live container now (its open-file
    /// descriptors); the message says what is in use.
    #[error("{0}")]
    NoRoom(String),
    /// The container's disk quota is used up.
    #[error("the container's disk quota is full")]
    QuotaExceeded,
    /// Setting a container up failed; the message says which step.
    #[error("sandbox setup failed: {0}")]
    Setup(String),
    /// A step of the helper or init failed (its step, what it acted on,
    /// the errno).
    #[error("sandbox setup failed: {0}")]
    Helper(#[from] crate::setup_error::SetupError),
    /// The container's init process is gone (it was stopped or crashed).
    #[error("the container's processes ended while the command ran")]
    ContainerGone,
    /// The container was destroyed while a command or file operation ran.
    #[error("container {0:?} was deleted while the command ran")]
    Deleted(String),
    /// A file is larger than the container's disk could ever hold (a sparse
    /// file): it is refused rather than streamed for ever.
    #[error("{path} claims {bytes} bytes, more than the container's {limit}-byte disk can hold (a sparse file); it cannot be downloaded")]
    FileTooLarge {
        path: String,
        bytes: u64,
        limit: u64,
    },
    /// A process of a container: missing, ended, over the limit.
    #[error(transparent)]
    Process(#[from] crate::process::ProcessError),
    /// A container's exposed port could not be reached.
    #[error("port {port} of the container cannot be reached: {failure}")]
    Port {
        port: u16,
        failure: crate::ports::PortFailure,
    },
    /// An operating-system call failed; `context` says which.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
}

impl SandboxError {
    /// Wraps an I/O error with what the engine was doing.
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}
