//! `/console/api/v1/...`: the OpenAI-compatible API, called by the app as
//! its session's project. The request goes to the API's own router with
//! its path's `/console/api` taken off and its project set as a request
//! extension (`http::ActingProject`), so every handler, check and limit is
//! the API's own; the cookie, the CSRF token and any key the request
//! carries are taken off first (and `?project=`, the console's own). A WebSocket upgrade (the terminal) passes
//! through: the upgrade travels with the request.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, Uri};
use axum::response::{IntoResponse, Response};
use tower::ServiceExt as _;

use super::session::{named_project, Signed, PROJECT_HEADER};
use super::Console;
use crate::error::ApiError;
use crate::http::ActingProject;

pub(super) async fn forward(
    State(console): State<Arc<Console>>,
    signed: Signed,
    request: Request,
) -> Response {
    match forwarded(&signed, request) {
        Ok(request) => match console.api.clone().oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        },
        Err(error) => error.into_response(),
    }
}

/// The API request a console request stands for: its method, version,
/// headers (less the console's own and any credential) and body, at the
/// path without `/console/api`, acting for the session's project. A new
/// request, not the old one changed: the console router's own extensions
/// (its path parameters) must not reach the API's router; only the
/// connection's upgrade (a WebSocket) and the client's address go along.
fn forwarded(signed: &Signed, request: Request) -> Result<Request, ApiError> {
    let (mut parts, body) = request.into_parts();
    let path = parts
        .uri
        .path()
        .strip_prefix("/console/api")
        .ok_or_else(|| ApiError::bad_request("not a console API path"))?;
    // `?project=` names the project where a browser cannot send the header
    // (a WebSocket); it is the console's, and does not reach the API.
    let mut asked = None;
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (name, value) in form_urlencoded::parse(parts.uri.query().unwrap_or_default().as_bytes()) {
        if name == "project" {
            asked = Some(value.into_owned());
        } else {
            query.append_pair(&name, &value);
        }
    }
    let project = signed.project(named_project(&parts.headers).or(asked.as_deref()))?;
    let query = query.finish();
    let target = if query.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{query}")
    };
    let uri = target
        .parse::<Uri>()
        .map_err(|_| ApiError::bad_request("not a console API path"))?;
    let mut forwarded = Request::new(body);
    *forwarded.method_mut() = parts.method;
    *forwarded.uri_mut() = uri;
    *forwarded.version_mut() = parts.version;
    for name in [
        header::COOKIE,
        header::AUTHORIZATION,
        header::HeaderName::from_static("x-api-key"),
        header::HeaderName::from_static("x-csrf-token"),
        header::HeaderName::from_static(PROJECT_HEADER),
    ] {
        parts.headers.remove(name);
    }
    *forwarded.headers_mut() = parts.headers;
    let extensions = forwarded.extensions_mut();
    if let Some(upgrade) = parts.extensions.remove::<hyper::upgrade::OnUpgrade>() {
        extensions.insert(upgrade);
    }
    if let Some(address) = parts.extensions.remove::<crate::listener::ClientAddr>() {
        extensions.insert(address);
    }
    extensions.insert(ActingProject(project));
    Ok(forwarded)
}
