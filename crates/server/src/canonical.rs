//! A request's target in the one spelling every part of the server reads
//! alike. Routers match the raw path byte for byte; a path extractor
//! percent-decodes one segment; a URL parser (the replica's HTTP client,
//! any proxy on the way) resolves `.` and `..`, `%2e` spellings of them,
//! and treats `\` as `/`. A path those readings disagree on reaches one
//! place while another was checked, so it is refused (400, before any
//! router sees it, in every server role) rather than guessed at:
//!
//! - a dot segment (`.` or `..`) under any reading: raw, percent-decoded
//!   (`%2e%2E`), or with an encoded slash decoded (`..%2f`);
//! - a backslash, raw or encoded (`%5c`);
//! - an empty segment inside the path (`//`; a trailing `/` is kept);
//! - a byte a URL parser would percent-encode (`"`, `{`, `}`, controls,
//!   anything beyond ASCII), and a `%` not followed by two hex digits;
//! - a target that is no path (`*`, an authority alone).
//!
//! An absolute-form target (`GET http://host/path`) becomes its path and
//! query, its authority the request's `Host` (refused when another `Host`
//! header names a different one). An encoded slash alone (`a%2Fb`) stays:
//! it is data inside one segment, read so by every part, and a container's
//! own web server may need it.

use axum::extract::Request;
use axum::http::{header, HeaderValue, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use shellgate_wire::ErrorCode;

/// Why a request's path is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The target is not a path (`*`, an authority alone).
    NotAPath,
    /// A `.` or `..` segment, however spelled.
    DotSegment,
    /// A `\`, raw or percent-encoded.
    Backslash,
    /// Two slashes in a row.
    EmptySegment,
    /// A byte a URL parser would percent-encode.
    Unencoded,
    /// A `%` not followed by two hex digits.
    BadEscape,
}

impl Refusal {
    fn explain(self) -> &'static str {
        match self {
            Self::NotAPath => "it is not a path (it must start with '/')",
            Self::DotSegment => "it has a '.' or '..' segment (however encoded)",
            Self::Backslash => "it has a backslash (raw or as %5C)",
            Self::EmptySegment => "it has an empty segment ('//')",
            Self::Unencoded => "it has a character that must be percent-encoded",
            Self::BadEscape => "it has a '%' that is not followed by two hex digits",
        }
    }
}

/// Whether `byte` may stand in a path as it is: what a WHATWG URL parser
/// leaves untouched (it percent-encodes the rest) and is not a backslash.
fn plain(byte: u8) -> bool {
    byte.is_ascii_graphic()
        && !matches!(
            byte,
            b'"' | b'#' | b'<' | b'>' | b'?' | b'`' | b'{' | b'}' | b'\\' | b'%'
        )
}

fn hex_value(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

/// `segment` percent-decoded (a malformed escape is kept as it is).
pub(crate) fn decoded(segment: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(segment.len());
    let mut at = 0;
    while at < segment.len() {
        let escaped = (segment[at] == b'%')
            .then(|| {
                let high = hex_value(*segment.get(at + 1)?)?;
                let low = hex_value(*segment.get(at + 2)?)?;
                Some(high << 4 | low)
            })
            .flatten();
        match escaped {
            Some(byte) => {
                out.push(byte);
                at += 3;
            }
            None => {
                out.push(segment[at]);
                at += 1;
            }
        }
    }
    out
}

/// Checks that `path` (a request target's path, as received) reads the
/// same to every reader: see the module's documentation.
pub(crate) fn check(path: &str) -> Result<(), Refusal> {
    let bytes = path.as_bytes();
    if bytes.first() != Some(&b'/') {
        return Err(Refusal::NotAPath);
    }
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'\\' => return Err(Refusal::Backslash),
            b'%' => {
                let well_formed = bytes.get(at + 1).copied().and_then(hex_value).is_some()
                    && bytes.get(at + 2).copied().and_then(hex_value).is_some();
                if !well_formed {
                    return Err(Refusal::BadEscape);
                }
                at += 3;
                continue;
            }
            b'/' => {}
            byte if !plain(byte) => return Err(Refusal::Unencoded),
            _ => {}
        }
        at += 1;
    }
    let segments: Vec<&[u8]> = bytes[1..].split(|b| *b == b'/').collect();
    let last = segments.len() - 1;
    for (index, segment) in segments.iter().enumerate() {
        if segment.is_empty() && index != last {
            return Err(Refusal::EmptySegment);
        }
        let decoded = decoded(segment);
        if decoded.contains(&b'\\') {
            return Err(Refusal::Backslash);
        }
        // An encoded slash is data here, but a reader that decodes before
        // it splits sees the pieces: none may be a dot segment either.
        if decoded
            .split(|b| *b == b'/')
            .any(|piece| piece == b"." || piece == b"..")
        {
            return Err(Refusal::DotSegment);
        }
    }
    Ok(())
}

/// The 400 a refused path gets, in the OpenAI error envelope.
fn refused(why: Refusal) -> ApiError {
    ApiError::bad_request(format!(
        "The request path is refused: {}. Send the path it stands for, spelled plainly.",
        why.explain()
    ))
    .with_code(ErrorCode::InvalidRequestPath)
}

/// Brings `request`'s target to origin form (`/path?query`), checked:
/// an absolute-form target's authority becomes its `Host`.
fn settle(request: &mut Request) -> Result<(), ApiError> {
    if let Some(authority) = request.uri().authority().cloned() {
        let host = request.headers().get(header::HOST);
        match host {
            Some(host)
                if !host
                    .as_bytes()
                    .eq_ignore_ascii_case(authority.as_str().as_bytes()) =>
            {
                return Err(ApiError::bad_request(
                    "The request names two hosts: its target's and a different Host header.",
                )
                .with_code(ErrorCode::InvalidRequestPath));
            }
            Some(_) => {}
            None => {
                let value = HeaderValue::from_str(authority.as_str())
                    .map_err(|_| refused(Refusal::NotAPath))?;
                request.headers_mut().insert(header::HOST, value);
            }
        }
        let origin = request
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .parse::<Uri>()
            .map_err(|_| refused(Refusal::NotAPath))?;
        *request.uri_mut() = origin;
    }
    check(request.uri().path()).map_err(refused)
}

/// In front of every server's router (a single box's, a node's, a
/// replica's): a request whose target is not in its one spelling is
/// answered 400 before anything routes it.
pub(crate) async fn guard(mut request: Request, next: Next) -> Response {
    match settle(&mut request) {
        Ok(()) => next.run(request).await,
        Err(error) => error.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::{check, settle, Refusal};
    use axum::extract::Request;
    use axum::http::StatusCode;

    #[test]
    fn plain_paths_pass() {
        for path in [
            "/",
            "/v1/containers",
            "/v1/containers/cntr_a/ports/8000/",
            "/v1/containers/cntr_a/ports/8000/headers/a%2Fb",
            "/console/assets/app.js",
            "/.well-known/x",
            "/v1/models/openai%2Fgpt-4o",
            "/process.Process/Start",
            "/a;b=c/d:e@f!$&'()*+,=~",
            "/v1/%252e%252e/x",
            "/v1/..x/x..",
            "/v1/x%00",
        ] {
            assert_eq!(check(path), Ok(()), "{path}");
        }
    }

    #[test]
    fn every_spelling_of_a_dot_segment_is_refused() {
        for path in [
            "/v1/../internal/v1/drain",
            "/v1/./internal",
            "/.",
            "/..",
            "/v1/..",
            "/v1/%2e%2e/internal",
            "/v1/%2E%2e/internal",
            "/v1/.%2e/internal",
            "/v1/%2e./internal",
            "/v1/%2e/internal",
            "/v1/..%2finternal",
            "/v1/..%2Finternal",
            "/v1%2f..%2finternal",
            "/v1/x%2F%2E%2E%2Fy",
            "/console/api/../../internal/v1/node",
            "/v1/containers/cntr_a/../../../internal/v1/node",
        ] {
            assert_eq!(check(path), Err(Refusal::DotSegment), "{path}");
        }
    }

    #[test]
    fn backslashes_empty_segments_and_odd_bytes_are_refused() {
        for (path, why) in [
            ("/v1\\..\\internal", Refusal::Backslash),
            ("/v1/%5c../internal", Refusal::Backslash),
            ("/v1/..%5Cinternal", Refusal::Backslash),
            ("//internal/v1/drain", Refusal::EmptySegment),
            ("/v1//containers", Refusal::EmptySegment),
            ("/v1/\"x\"", Refusal::Unencoded),
            ("/v1/{x}", Refusal::Unencoded),
            ("/v1/é", Refusal::Unencoded),
            ("/v1/a b", Refusal::Unencoded),
            ("/v1/%zz", Refusal::BadEscape),
            ("/v1/%2", Refusal::BadEscape),
            ("*", Refusal::NotAPath),
            ("", Refusal::NotAPath),
        ] {
            assert_eq!(check(path), Err(why), "{path}");
        }
    }

    fn request(target: &str, host: Option<&str>) -> Request {
        let mut builder = Request::builder().uri(target);
        if let Some(host) = host {
            builder = builder.header("host", host);
        }
        builder.body(axum::body::Body::empty()).unwrap()
    }

    #[test]
    fn an_absolute_form_target_becomes_its_path_and_its_host() {
        let mut absolute = request("http://api.example:8080/v1/containers?limit=2", None);
        settle(&mut absolute).unwrap();
        assert_eq!(absolute.uri().to_string(), "/v1/containers?limit=2");
        assert_eq!(absolute.headers()["host"], "api.example:8080");

        let mut agreeing = request("http://API.example/v1/files", Some("api.example"));
        settle(&mut agreeing).unwrap();
        assert_eq!(agreeing.uri().to_string(), "/v1/files");

        let mut two_hosts = request(
            "http://10.0.0.1:8080/internal/v1/drain",
            Some("api.example"),
        );
        assert_eq!(
            settle(&mut two_hosts).unwrap_err().status(),
            StatusCode::BAD_REQUEST
        );
        let mut dotted = request("http://api.example/v1/../internal/v1/drain", None);
        let error = settle(&mut dotted).unwrap_err();
        assert_eq!(error.code.code(), Some("invalid_request_path"));
    }
}
