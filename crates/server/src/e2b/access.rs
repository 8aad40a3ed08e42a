//! Who may use a sandbox's in-sandbox API: `E2b-Sandbox-Id` names it, and
//! `X-Access-Token` must be the token its create issued (owned by the
//! control-plane engineer; see /work/notes/i20/api.md "Access").
//!
//! STAND-IN (branch `proc`, until `control` is merged): the contract's
//! [`SandboxCaller`], so that the process service can be built and driven
//! before the control plane exists. It takes a project's API key as the
//! access token and the container's id as the sandbox id; control's
//! extractor (the real access tokens, E2B's records, env vars) replaces this
//! file whole at the merge.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::StatusCode;

use super::{E2bError, SANDBOX_ID_HEADER};
use crate::state::AppState;

/// The sandbox an in-sandbox request is for, once its token was checked.
#[derive(Debug, Clone)]
pub struct SandboxCaller {
    pub project: String,
    pub container_id: String,
    /// The create's `envVars`, added to every start (a call's own win).
    pub env_vars: Vec<(String, String)>,
}

impl FromRequestParts<Arc<AppState>> for SandboxCaller {
    type Rejection = E2bError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, E2bError> {
        let id = parts
            .headers
            .get(SANDBOX_ID_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let token = parts
            .headers
            .get("x-access-token")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| E2bError::new(StatusCode::UNAUTHORIZED, "missing X-Access-Token"))?;
        let project = crate::http::project_of_key(state, token)
            .await
            .map_err(|_| E2bError::new(StatusCode::UNAUTHORIZED, "invalid X-Access-Token"))?;
        crate::containers::owned(state, &project, &id)
            .await
            .map_err(|_| E2bError::sandbox_not_found(&id))?;
        Ok(Self {
            project: project.0,
            container_id: id,
            env_vars: Vec::new(),
        })
    }
}
