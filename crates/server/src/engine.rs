//! The server's side of the sandbox backend: its errors in the API's
//! terms, and removing a container that may already be gone.

use shellgate_sandbox_api::{SandboxBackend, SandboxError};

use crate::error::ApiError;

/// Maps a missing container in the engine to a 404 for the API's id.
pub fn engine_error(id: &str, error: SandboxError) -> ApiError {
    match error {
        SandboxError::NotFound(_) => ApiError::not_found("container", id),
        other => other.into(),
    }
}

/// Ensures the engine has no container the store does not know.
pub async fn destroy_quietly(engine: &dyn SandboxBackend, id: &str) {
    match engine.destroy(id).await {
        Ok(()) | Err(SandboxError::NotFound(_)) => {}
        Err(e) => tracing::warn!(container = %id, "could not destroy: {e}"),
    }
}
