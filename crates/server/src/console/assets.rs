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
    let gzip = asset.gzip.filter(|_| takes_gzip(headers));
    // A variant's own validator: the gzipped bytes are other bytes.
    let etag = match gzip {
        Some(_) => HeaderValue::from_str(&format!("{}-gz\"", asset.etag.trim_end_matches('"')))
            .unwrap_or_else(|_| HeaderValue::from_static(asset.etag)),
        None => HeaderValue::from_static(asset.etag),
    };
    let cache = HeaderValue::from_static("no-cache");
    let vary = HeaderValue::from_static("accept-encoding");
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|tags| {
            tags.split(',')
                .any(|tag| tag.trim().as_bytes() == etag.as_bytes())
        });
    if fresh {
        return (
            StatusCode::NOT_MODIFIED,
            [
                (header::ETAG, etag),
                (header::CACHE_CONTROL, cache),
                (header::VARY, vary),
            ],
        )
            .into_response();
    }
    let mut response = (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            ),
            (header::ETAG, etag),
            (header::CACHE_CONTROL, cache),
            (header::VARY, vary),
        ],
        gzip.unwrap_or(asset.bytes),
    )
        .into_response();
    if gzip.is_some() {
        response
            .headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    response
}

/// Whether the request's `Accept-Encoding` takes gzip (and does not refuse
/// it with `q=0`).
fn takes_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|coding| {
            let mut parts = coding.split(';').map(str::trim);
            let name = parts.next().unwrap_or_default();
            let refused = parts.any(|p| {
                p.replace(' ', "").starts_with("q=0")
                    && !p.contains(|c: char| ('1'..='9').contains(&c))
            });
            (name.eq_ignore_ascii_case("gzip") || name == "*") && !refused
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepting(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_str(value).unwrap(),
        );
        headers
    }

    #[test]
    fn gzip_is_sent_only_to_who_takes_it() {
        assert!(takes_gzip(&accepting("gzip, deflate, br")));
        assert!(takes_gzip(&accepting("br;q=1.0, gzip;q=0.8")));
        assert!(takes_gzip(&accepting("*")));
        assert!(!takes_gzip(&accepting("gzip;q=0")));
        assert!(!takes_gzip(&accepting("br")));
        assert!(!takes_gzip(&HeaderMap::new()));
    }

    #[test]
    fn the_gzipped_variant_has_its_own_etag() {
        let asset = shellgate_console::ASSETS
            .iter()
            .find(|a| a.gzip.is_some())
            .expect("a gzipped asset");
        let plain = serve(asset, &HeaderMap::new());
        let packed = serve(asset, &accepting("gzip"));
        assert_eq!(packed.headers()[header::CONTENT_ENCODING], "gzip");
        assert!(plain.headers().get(header::CONTENT_ENCODING).is_none());
        assert_ne!(
            plain.headers()[header::ETAG],
            packed.headers()[header::ETAG]
        );
        let mut again = accepting("gzip");
        again.insert(
            header::IF_NONE_MATCH,
            packed.headers()[header::ETAG].clone(),
        );
        assert_eq!(serve(asset, &again).status(), StatusCode::NOT_MODIFIED);
    }
}
