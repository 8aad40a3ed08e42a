//! Who may use a sandbox's in-sandbox API: `E2b-Sandbox-Id` names it, and
//! `X-Access-Token` must be the token its create issued .
//!
//! Order: the id is looked up first (unknown, a plain `/v1` container
//! without an E2B record, or a killed one: the same 404 bytes), then the
//! token (missing or wrong: 401; the token of another project's sandbox:
//! the unknown id's 404, so that project learns nothing of this one), then
//! the state (paused: 502, as E2B answers; `connect` resumes it, and so
//! does this check when the sandbox's create said `autoResume`).
//!
//! What the check needs of a sandbox is cached (`access_cache`), so that a
//! tenant's every call (10,000 `List`s in a loop) costs a map lookup and a
//! hash, not a trip to SQLite that another tenant's commands would queue
//! behind. The control plane keeps the cache true: it is the only writer of
//! what the cache holds (pause, resume, kill; the sweeper's too).

use std::sync::Arc;

use super::access_cache::{digest, same_digest, AccessEntry};
use super::connect::{ConnectCode, ConnectError};
use super::{E2bError, SANDBOX_ID_HEADER};
use crate::state::AppState;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// The header carrying the sandbox's access token.
pub const ACCESS_TOKEN_HEADER: &str = "x-access-token";

/// The caller of an in-sandbox route, checked: the sandbox's container, its
/// project, and the environment its create asked for (added to every
/// command and interpreter context; a call's own variables win).
#[derive(Debug, Clone)]
pub struct SandboxCaller {
    pub project: String,
    pub container_id: String,
    pub env_vars: Vec<(String, String)>,
}

/// Why a caller was refused, rendered as the route expects it: a Connect
/// error on the Connect-RPC services, E2B's plain error body elsewhere
/// (`/files`, `/health`, `/execute`, `/contexts`).
#[derive(Debug, Clone)]
pub struct AccessRejection {
    pub error: E2bError,
    connect: bool,
}

impl AccessRejection {
    fn new(parts: &Parts, status: StatusCode, message: String) -> Self {
        let path = parts.uri.path();
        Self {
            error: E2bError::new(status, message),
            connect: path.starts_with("/process.Process/")
                || path.starts_with("/filesystem.Filesystem/"),
        }
    }
}

impl From<AccessRejection> for E2bError {
    fn from(rejection: AccessRejection) -> Self {
        rejection.error
    }
}

impl From<AccessRejection> for ConnectError {
    fn from(rejection: AccessRejection) -> Self {
        let code = match rejection.error.status {
            StatusCode::UNAUTHORIZED => ConnectCode::Unauthenticated,
            status => ConnectCode::of_status(status),
        };
        ConnectError::new(code, rejection.error.message)
    }
}

impl IntoResponse for AccessRejection {
    fn into_response(self) -> Response {
        if self.connect {
            ConnectError::from(self).into_response()
        } else {
            self.error.into_response()
        }
    }
}

/// The message of a paused sandbox's refusal.
pub const PAUSED_MESSAGE: &str = "sandbox is paused";

impl FromRequestParts<Arc<AppState>> for SandboxCaller {
    type Rejection = AccessRejection;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, AccessRejection> {
        check(parts, state, Token::Required).await
    }
}

/// The caller of a route E2B's SDK calls without the access token (the
/// code interpreter's `/contexts`: the latest Python SDK sends none there,
/// and E2B's own Jupyter port checks none): the same lookup and the same
/// 404s; a token, if given, must be right (401 otherwise).
#[derive(Debug, Clone)]
pub struct SandboxCallerTokenOptional(pub SandboxCaller);

impl FromRequestParts<Arc<AppState>> for SandboxCallerTokenOptional {
    type Rejection = AccessRejection;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, AccessRejection> {
        check(parts, state, Token::IfGiven).await.map(Self)
    }
}

/// Whether a route needs the access token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Required,
    IfGiven,
}

async fn check(
    parts: &Parts,
    state: &Arc<AppState>,
    token: Token,
) -> Result<SandboxCaller, AccessRejection> {
    // The dispatch layer sent the request here for this header.
    let id = parts
        .headers
        .get(SANDBOX_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .unwrap_or_default()
        .to_owned();
    let not_found = |parts: &Parts| {
        let E2bError { status, message } = E2bError::sandbox_not_found(&id);
        AccessRejection::new(parts, status, message)
    };
    // Ids are shellgate's (`cntr_` and base62): anything else is no
    // sandbox, without a trip to the store.
    if id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return Err(not_found(parts));
    }
    let entry = match state.e2b_access.get(&id) {
        Some(entry) => entry,
        None => {
            let key = id.clone();
            let row = state
                .db(move |s| s.e2b_sandbox_by_id(&key))
                .await
                .map_err(|e| AccessRejection::new(parts, e.status, e.message))?;
            let Some(row) = row else {
                return Err(not_found(parts));
            };
            let entry = AccessEntry::of_row(&row);
            state.e2b_access.remember(&id, entry.clone());
            entry
        }
    };
    let given = parts
        .headers
        .get(ACCESS_TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .unwrap_or_default();
    let absent_allowed = given.is_empty() && token == Token::IfGiven;
    if !absent_allowed && (given.is_empty() || !same_digest(&digest(given), &entry.token_digest)) {
        // A token of another project's sandbox names a caller who may not
        // know this id exists: answered as an unknown id, byte for byte.
        if !given.is_empty() {
            let token = given.to_owned();
            let owner = state
                .db(move |s| s.e2b_project_of_access_token(&token))
                .await
                .map_err(|e| AccessRejection::new(parts, e.status, e.message))?;
            if owner.is_some_and(|owner| owner != entry.project) {
                return Err(not_found(parts));
            }
        }
        return Err(AccessRejection::new(
            parts,
            StatusCode::UNAUTHORIZED,
            if given.is_empty() {
                "the X-Access-Token header is missing".to_owned()
            } else {
                "the X-Access-Token header is not this sandbox's access token".to_owned()
            },
        ));
    }
    if entry.paused && entry.auto_resume {
        super::control::resume_on_traffic(state, &entry.project, &id)
            .await
            .map_err(|e| AccessRejection::new(parts, e.status, e.message))?;
    } else if entry.paused {
        return Err(AccessRejection::new(
            parts,
            StatusCode::BAD_GATEWAY,
            PAUSED_MESSAGE.to_owned(),
        ));
    }
    state.remember_owner(&id, &entry.project);
    Ok(SandboxCaller {
        project: entry.project,
        container_id: id,
        env_vars: entry.env_vars.as_ref().clone(),
    })
}
