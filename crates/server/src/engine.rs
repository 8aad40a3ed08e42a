//! The server's side of the sandbox backend: its errors in the API's
//! terms, its image listing off the async workers, and removing a
//! container that may already be gone.

use std::sync::Arc;

use shellgate_sandbox_api::image::ImageInfo;
use shellgate_sandbox_api::{SandboxBackend, SandboxError};

use crate::error::{ApiError, ApiResult};

/// Maps a missing container in the engine to a 404 for the API's id.
pub fn engine_error(id: &str, error: SandboxError) -> ApiError {
    match error {
        SandboxError::NotFound(_) => ApiError::not_found("container", id),
        other => other.into(),
    }
}

/// The images `engine` holds, read on a blocking thread (the listing
/// walks the image store).
pub async fn images(engine: &Arc<dyn SandboxBackend>) -> ApiResult<Vec<ImageInfo>> {
    let engine = Arc::clone(engine);
    tokio::task::spawn_blocking(move || engine.images())
        .await
        .map_err(|e| ApiError::internal(format!("image listing failed: {e}")))
}

/// Ensures the engine has no container the store does not know.
pub async fn destroy_quietly(engine: &dyn SandboxBackend, id: &str) {
    match engine.destroy(id).await {
        Ok(()) | Err(SandboxError::NotFound(_)) => {}
        Err(e) => tracing::warn!(container = %id, "could not destroy: {e}"),
    }
}
