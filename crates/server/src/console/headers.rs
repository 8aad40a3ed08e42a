//! The headers every console answer carries. The app's page may run only
//! its own files and may not be framed (clickjacking); everything under
//! `/console/api` and `/console/session` is data — a file downloaded there
//! is never run as a page of this origin (`sandbox`, `nosniff`) and never
//! cached.

use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;

/// The app's page and files: its own scripts, styles and images only
/// (object URLs for previews, data URLs for charts' PNG fallbacks), its
/// own origin for fetches, SSE and WebSockets, never in a frame.
const APP_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data: blob:; connect-src 'self'; font-src 'self'; object-src 'none'; \
     frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// Data: nothing in it runs, whatever its type says.
const DATA_POLICY: &str = "default-src 'none'; frame-ancestors 'none'; sandbox";

pub(super) async fn secure(request: Request, next: Next) -> Response {
    let is_app = {
        let path = request.uri().path();
        path == "/console" || path == "/console/" || path.starts_with("/console/assets/")
    };
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    let policy = if is_app { APP_POLICY } else { DATA_POLICY };
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(policy),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    if !is_app && !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}
