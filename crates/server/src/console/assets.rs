//! The app's embedded files: `/console` is its page, `/console/assets/...`
//! the rest, each with its content hash as ETag (a browser revalidates and
//! gets a 304 for what it has).

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use shellgate_console::Asset;

use crate::error::ApiError;

pub(super) async fn index(headers: HeaderMap) -> Response {
    match shellgate_console::index() {
        Some(asset) => serve(asset, &headers),
        None => ApiError::not_found("console page", "index.html").into_response(),
    }
}

pub(super) async fn file(Path(path): Path<String>, headers: HeaderMap) -> Response {
    match shellgate_console::asset(&path) {
        Some(asset) => serve(asset, &headers),
        None => ApiError::not_found("console file", &path).into_response(),
    }
}

fn serve(asset: &'static Asset, headers: &HeaderMap) -> Response {
    let etag = HeaderValue::from_static(asset.etag);
    let cache = HeaderValue::from_static("no-cache");
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|tags| tags.split(',').any(|tag| tag.trim() == asset.etag));
    if fresh {
        return (
            StatusCode::NOT_MODIFIED,
            [(header::ETAG, etag), (header::CACHE_CONTROL, cache)],
        )
            .into_response();
    }
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            ),
            (header::ETAG, etag),
            (header::CACHE_CONTROL, cache),
        ],
        asset.bytes,
    )
        .into_response()
}
