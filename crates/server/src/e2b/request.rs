//! What every handler of E2B's control plane reads a request with: the
//! caller's project ([`E2bProject`]), a JSON body ([`read_body`]), the
//! errors in E2B's body, and the per-name locks that serialise a create's
//! idempotency key, a sandbox's resume or a project's template builds.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::E2bError;
use crate::error::ApiError;
use crate::http::Project;
use crate::state::AppState;

/// An `ApiError` as E2B's body, naming its parameter when the message does
/// not already.
pub(crate) fn e2b_error(error: ApiError) -> E2bError {
    match &error.param {
        Some(param) if !error.message.contains(param.as_str()) => {
            E2bError::new(error.status(), format!("{param}: {}", error.message))
        }
        _ => E2bError::new(error.status(), error.message),
    }
}

pub(crate) fn bad_request(message: impl Into<String>) -> E2bError {
    E2bError::new(StatusCode::BAD_REQUEST, message)
}

/// The caller's project, as the `Project` extractor finds it (`X-API-KEY`
/// is one of its headers), refused in E2B's body.
pub(crate) struct E2bProject(pub String);

impl FromRequestParts<Arc<AppState>> for E2bProject {
    type Rejection = E2bError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, E2bError> {
        Project::from_request_parts(parts, state)
            .await
            .map(|p| E2bProject(p.0))
            .map_err(e2b_error)
    }
}

/// A JSON body (an empty one reads as `{}`: the SDK's connect and pause
/// bodies may be all optional fields).
pub(crate) fn read_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, E2bError> {
    let body: &[u8] = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        body
    };
    serde_json::from_slice(body).map_err(|e| bad_request(format!("invalid request body: {e}")))
}

/// The lock of one name: a create's idempotency key, a sandbox's resume,
/// a project's template builds.
pub(crate) fn e2b_lock(state: &AppState, name: &str) -> Arc<tokio::sync::Mutex<()>> {
    state.named_lock(name)
}
