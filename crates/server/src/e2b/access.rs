//! Who may use a sandbox's in-sandbox API: `E2b-Sandbox-Id` names it, and
//! `X-Access-Token` must be the token its create issued (owned by the
//! control-plane engineer; see /work/notes/i20/api.md "Access").
//!
//! STAND-IN (branch `fs`, until `control` lands): the contract's type, with
//! a provisional check — the token must be an API key of the project that
//! owns the container. Control's file replaces this one whole on merge.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::StatusCode;

use super::{E2bError, SANDBOX_ID_HEADER};
use crate::http::project_of_key;
use crate::state::AppState;

/// The sandbox an in-sandbox request is for, and its project.
#[derive(Debug, Clone)]
pub struct SandboxCaller {
    pub project: String,
    pub container_id: String,
    #[allow(dead_code)]
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
            .trim()
            .to_owned();
        let token = parts
            .headers
            .get("x-access-token")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .trim()
            .to_owned();
        let project = project_of_key(state, &token)
            .await
            .map_err(|_| E2bError::new(StatusCode::UNAUTHORIZED, "invalid access token"))?;
        let (owner, key) = (project.0.clone(), id.clone());
        let found = state
            .db(move |s| s.container(&owner, &key))
            .await
            .map_err(E2bError::from)?;
        if found.is_none() {
            return Err(E2bError::sandbox_not_found(&id));
        }
        Ok(Self {
            project: project.0,
            container_id: id,
            env_vars: Vec::new(),
        })
    }
}
