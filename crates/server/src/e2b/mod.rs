//! E2B's API, served by shellgate: E2B's SDKs work unchanged with
//! `E2B_API_URL` and `E2B_SANDBOX_URL` pointing here. A sandbox *is* a
//! shellgate container; this module only translates.
//!
//! - `control`: the REST control plane (`/v2/sandboxes`, `/sandboxes/…`),
//!   normal routes authorised by the project's API key (`X-API-KEY`).
//! - the in-sandbox API, what E2B calls envd (port 49983): `process`
//!   (`process.Process`) and `filesystem` (`filesystem.Filesystem`) over
//!   Connect-RPC (`connect`), `files` (`/files`, `/health`);
//! - the code interpreter (port 49999): `interpreter` (`/execute`, `/contexts`).
//!
//! In-sandbox requests all come to one base URL and name their sandbox and
//! port in headers (`E2b-Sandbox-Id`, `E2b-Sandbox-Port`): [`by_header`]
//! sends them to the sandbox routes, where `access::SandboxCaller` checks
//! the caller's credentials (the sandbox's access token or the project's
//! key; never the id alone).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use tower_service::Service;

use crate::error::ApiError;
use crate::state::AppState;

pub(crate) mod access;
pub(crate) mod access_cache;
pub(crate) mod connect;
pub(crate) mod control;
pub(crate) mod deadlines;
pub(crate) mod files;
pub(crate) mod filesystem;
pub(crate) mod interpreter;
pub(crate) mod logs;
pub(crate) mod metrics;
pub(crate) mod metrics_history;
pub(crate) mod process;
pub(crate) mod request;
pub(crate) mod signed;
pub(crate) mod signing_keys;
pub(crate) mod snapshot_ids;
pub(crate) mod snapshots;
pub(crate) mod templates;
pub(crate) mod timeouts;
pub(crate) mod user;
pub(crate) mod volume_content;
pub(crate) mod volumes;

pub use crate::in_sandbox::{ENVD_PORT, INTERPRETER_PORT, SANDBOX_PORT_HEADER};
pub use shellgate_wire::e2b::SANDBOX_ID_HEADER;

/// E2B's error body, `{"code": <HTTP status>, "message": …}`, with that
/// status: the REST control plane's errors, and the in-sandbox API's plain
/// (non-Connect) ones, which Connect clients read by their status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct E2bError {
    pub status: StatusCode,
    pub message: String,
}

impl E2bError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    /// What every unknown, foreign or ended sandbox id gets: the same
    /// bytes whatever the reason, so nothing is revealed. Its words are
    /// those of E2B's edge ("was not found"), by which the SDK tells a
    /// sandbox that ended from one it cannot reach.
    pub fn sandbox_not_found(id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            format!("sandbox \"{id}\" was not found"),
        )
    }
}

impl From<ApiError> for E2bError {
    fn from(error: ApiError) -> Self {
        Self::new(error.status(), error.message)
    }
}

impl From<shellgate_sandbox_api::SandboxError> for E2bError {
    fn from(error: shellgate_sandbox_api::SandboxError) -> Self {
        ApiError::from(error).into()
    }
}

impl IntoResponse for E2bError {
    fn into_response(self) -> Response {
        let body = shellgate_wire::e2b::E2bErrorBody {
            code: self.status.as_u16(),
            message: self.message,
        };
        (self.status, axum::Json(body)).into_response()
    }
}

/// The in-sandbox port a request is for: its `E2b-Sandbox-Port` (envd's
/// when absent), or `None` when it names no sandbox at all.
fn sandbox_port(headers: &HeaderMap) -> Option<Result<u16, E2bError>> {
    headers.get(SANDBOX_ID_HEADER)?;
    let Some(port) = headers.get(SANDBOX_PORT_HEADER) else {
        return Some(Ok(ENVD_PORT));
    };
    Some(
        port.to_str()
            .ok()
            .and_then(|p| p.trim().parse::<u16>().ok())
            .ok_or_else(|| {
                E2bError::new(
                    StatusCode::BAD_REQUEST,
                    "E2b-Sandbox-Port must be a port number",
                )
            }),
    )
}

/// The routes of envd's port.
fn envd_routes() -> Router<Arc<AppState>> {
    let router = Router::new();
    let router = process::routes(router);
    let router = filesystem::routes(router);
    files::routes(router)
}

/// The routes of the code interpreter's port.
fn interpreter_routes() -> Router<Arc<AppState>> {
    interpreter::routes(Router::new())
}

/// The in-sandbox routes, by port, with their own body limit (uploads
/// through `/files` are as large as the Files API's).
pub(crate) struct SandboxRouters {
    envd: Router,
    interpreter: Router,
    state: Arc<AppState>,
}

impl SandboxRouters {
    pub(crate) fn new(state: &Arc<AppState>) -> Self {
        let limit = axum::extract::DefaultBodyLimit::max(
            state
                .config
                .server
                .max_upload_bytes
                .saturating_add(64 * 1024),
        );
        let finish = |router: Router<Arc<AppState>>| {
            router
                .fallback(not_served)
                .layer(limit)
                .with_state(Arc::clone(state))
        };
        Self {
            envd: finish(envd_routes()),
            interpreter: finish(interpreter_routes()),
            state: Arc::clone(state),
        }
    }
}

async fn not_served(request: Request) -> E2bError {
    E2bError::new(
        StatusCode::NOT_FOUND,
        format!(
            "{} {} is not part of the sandbox API",
            request.method(),
            request.uri().path()
        ),
    )
}

/// The layer in front of the router: a request naming a sandbox in
/// `E2b-Sandbox-Id` goes to that port's sandbox routes, and so does a
/// signed `/files` URL naming none (`signed`: the sandbox whose token made
/// the signature); every other request goes on to the API.
pub async fn by_header(
    State(routers): State<Arc<SandboxRouters>>,
    mut request: Request,
    next: Next,
) -> Response {
    if !request.headers().contains_key(SANDBOX_ID_HEADER) {
        if let Some(signed) = signed::SignedRequest::of(request.method(), request.uri()) {
            let found = match signed {
                Ok(signed) => routers
                    .state
                    .e2b_signing
                    .find(&routers.state.store, |token| signed.made_with(token))
                    .await
                    .map_err(E2bError::from),
                Err(error) => Err(error),
            };
            let id = match found {
                Ok(Some(id)) => id,
                Ok(None) => {
                    return E2bError::new(StatusCode::UNAUTHORIZED, "invalid signature")
                        .into_response()
                }
                Err(error) => return error.into_response(),
            };
            let Ok(id) = HeaderValue::from_str(&id) else {
                return E2bError::sandbox_not_found(&id).into_response();
            };
            request.headers_mut().insert(SANDBOX_ID_HEADER, id);
            request.headers_mut().remove(SANDBOX_PORT_HEADER);
        }
    }
    let port = match sandbox_port(request.headers()) {
        None => return next.run(request).await,
        Some(Err(error)) => return error.into_response(),
        Some(Ok(port)) => port,
    };
    let mut router = match port {
        ENVD_PORT => routers.envd.clone(),
        INTERPRETER_PORT => routers.interpreter.clone(),
        other => {
            // shellgate serves a container's other ports by host name
            // (`{port}-{id}.{ports_base_domain}`, what `get_host()` gives),
            // not through these headers.
            return E2bError::new(
                StatusCode::BAD_GATEWAY,
                format!("port {other} is not served through E2b-Sandbox-Port; use the sandbox's host name"),
            )
            .into_response();
        }
    };
    match router.call(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}
