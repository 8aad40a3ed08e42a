//! `/console/api/v1/...`: the OpenAI-compatible API, called by the app as
//! its session's project. The request goes to the API's own router with
//! its path's `/console/api` taken off and its project set as a request
//! extension (`http::ActingProject`), so every handler, check and limit is
//! the API's own; the cookie, the CSRF token and any key the request
//! carries are taken off first. A WebSocket upgrade (the terminal) passes
//! through: the upgrade travels with the request.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, Uri};
use axum::response::{IntoResponse, Response};
use tower::ServiceExt as _;

use super::session::{Signed, PROJECT_HEADER};
use super::Console;
use crate::error::ApiError;
use crate::http::ActingProject;

pub(super) async fn forward(
    State(console): State<Arc<Console>>,
    signed: Signed,
    mut request: Request,
) -> Response {
    let project = match signed.project_of(request.headers()) {
        Ok(project) => project,
        Err(error) => return error.into_response(),
    };
    let Some(path_and_query) = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str())
        .and_then(|p| p.strip_prefix("/console/api"))
    else {
        return ApiError::bad_request("not a console API path").into_response();
    };
    let uri = match path_and_query.parse::<Uri>() {
        Ok(uri) => uri,
        Err(_) => return ApiError::bad_request("malformed path").into_response(),
    };
    *request.uri_mut() = uri;
    let headers = request.headers_mut();
    for name in [
        header::COOKIE,
        header::AUTHORIZATION,
        header::HeaderName::from_static("x-api-key"),
        header::HeaderName::from_static("x-csrf-token"),
        header::HeaderName::from_static(PROJECT_HEADER),
    ] {
        headers.remove(name);
    }
    request.extensions_mut().insert(ActingProject(project));
    match console.api.clone().oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}
