//! The engine's typed errors: [`SandboxError`] is the sandbox API's (the
//! `shellgate-sandbox-api` crate); here, the engine's way to give I/O errors
//! their context.

use std::io;

pub use shellgate_sandbox_api::SandboxError;

/// Adds context to `io::Result`s.
pub(crate) trait IoContext<T> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T, SandboxError>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T, SandboxError> {
        self.map_err(|source| SandboxError::io(context(), source))
    }
}
