//! Signed file URLs: what E2B's SDKs' `upload_url()` and `download_url()`
//! give, used from curl or a browser with no header at all. The SDK signs
//! `{path}:{operation}:{user}:{access token}[:{expiry}]` (SHA-256, standard
//! base64 without padding, `v1_` before it) with the sandbox's envd access
//! token and puts `signature` (and `signature_expiration`, Unix seconds)
//! in the `/files` URL's query; `operation` is `read` for a download
//! (`GET`), `write` for an upload (`POST`); `user` is the `username`
//! parameter, empty when absent. As envd does, a wrong signature (another
//! path, operation, user, sandbox or expiry) is 401 `invalid signature` and
//! a right one past its expiry 401 `signature is already expired`.
//!
//! With `E2B_SANDBOX_URL` set the SDK builds the URL from that one base, so
//! nothing in it names the sandbox: the signature is all there is, and
//! only the sandbox whose token made it matches: `signing_keys` finds it.

use axum::http::{Method, StatusCode, Uri};
use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::access_cache::same_digest;
use super::E2bError;

/// The path signed URLs are for (envd's files route).
pub const FILES_PATH: &str = "/files";

/// What a signature allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Read,
    Write,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
        }
    }
}

/// The signature of `path` for `operation` as `user` (empty: the default
/// user) with `token`, valid until `expiration` (Unix seconds) when given.
pub fn signature(
    path: &str,
    operation: Operation,
    user: &str,
    token: &str,
    expiration: Option<i64>,
) -> String {
    let op = operation.as_str();
    let raw = match expiration {
        None => format!("{path}:{op}:{user}:{token}"),
        Some(expiration) => format!("{path}:{op}:{user}:{token}:{expiration}"),
    };
    let digest = Sha256::digest(raw.as_bytes());
    format!(
        "v1_{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest)
    )
}

/// The parameters of a signed `/files` URL's query.
#[derive(Debug, Default)]
struct SignedQuery {
    path: Option<String>,
    username: Option<String>,
    signature: Option<String>,
    signature_expiration: Option<String>,
}

/// A `/files` request that carries a signature.
#[derive(Debug, Clone)]
pub struct SignedRequest {
    path: String,
    user: String,
    operation: Operation,
    signature: String,
    expiration: Option<i64>,
}

fn bad_request(message: impl Into<String>) -> E2bError {
    E2bError::new(StatusCode::BAD_REQUEST, message)
}

fn unauthorized(message: &str) -> E2bError {
    E2bError::new(StatusCode::UNAUTHORIZED, message)
}

impl SignedRequest {
    /// The signature a `/files` request carries: `None` for any other
    /// request, or one without `signature`.
    pub fn of(method: &Method, uri: &Uri) -> Option<Result<Self, E2bError>> {
        if uri.path() != FILES_PATH {
            return None;
        }
        let mut query = SignedQuery::default();
        for (name, value) in form_urlencoded::parse(uri.query()?.as_bytes()) {
            let slot = match name.as_ref() {
                "path" => &mut query.path,
                "username" => &mut query.username,
                "signature" => &mut query.signature,
                "signature_expiration" => &mut query.signature_expiration,
                _ => continue,
            };
            *slot = Some(value.into_owned());
        }
        let signature = query.signature?;
        Some(Self::parsed(
            method,
            query.path,
            query.username,
            signature,
            query.signature_expiration,
        ))
    }

    fn parsed(
        method: &Method,
        path: Option<String>,
        username: Option<String>,
        signature: String,
        expiration: Option<String>,
    ) -> Result<Self, E2bError> {
        let operation = match *method {
            Method::GET | Method::HEAD => Operation::Read,
            Method::POST => Operation::Write,
            _ => {
                return Err(E2bError::new(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "a signed URL is for GET (download) or POST (upload)",
                ))
            }
        };
        let expiration =
            match expiration {
                None => None,
                Some(text) => Some(text.trim().parse::<i64>().map_err(|_| {
                    bad_request("signature_expiration must be a Unix time in seconds")
                })?),
            };
        Ok(Self {
            path: path.unwrap_or_default(),
            user: username.unwrap_or_default(),
            operation,
            signature,
            expiration,
        })
    }

    /// Whether `token` made this signature (whatever its expiry).
    pub fn made_with(&self, token: &str) -> bool {
        let expected = signature(
            &self.path,
            self.operation,
            &self.user,
            token,
            self.expiration,
        );
        // Digests of both, compared whole: the time says nothing of where
        // they differ.
        same_digest(
            &Sha256::digest(expected.as_bytes()).into(),
            &Sha256::digest(self.signature.as_bytes()).into(),
        )
    }

    /// The request allowed by `token` at `now` (Unix seconds), or envd's
    /// refusal.
    pub fn check(&self, token: &str, now: i64) -> Result<(), E2bError> {
        if !self.made_with(token) {
            return Err(unauthorized("invalid signature"));
        }
        if self.expiration.is_some_and(|expiration| expiration < now) {
            return Err(unauthorized("signature is already expired"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: Method, uri: &str) -> SignedRequest {
        let uri: Uri = uri.parse().expect("uri");
        SignedRequest::of(&method, &uri)
            .expect("a signed request")
            .expect("well formed")
    }

    fn quoted(text: &str) -> String {
        url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
    }

    #[test]
    fn the_sdk_s_signature_is_reproduced() {
        // e2b 2.x: get_signature("/home/user/a.txt", "read", None, "tok", None).
        let raw = "/home/user/a.txt:read::tok";
        let expected = format!(
            "v1_{}",
            base64::engine::general_purpose::STANDARD_NO_PAD.encode(Sha256::digest(raw))
        );
        assert_eq!(
            signature("/home/user/a.txt", Operation::Read, "", "tok", None),
            expected
        );
    }

    #[test]
    fn a_signature_opens_only_its_path_operation_user_and_time() {
        let token = "e2bat_one";
        let until = 2_000;
        let good = signature(
            "/home/user/a b.txt",
            Operation::Write,
            "user",
            token,
            Some(until),
        );
        let url = format!(
            "/files?path={}&username=user&signature={}&signature_expiration={until}",
            quoted("/home/user/a b.txt"),
            quoted(&good)
        );
        let signed = request(Method::POST, &url);
        assert!(signed.check(token, until).is_ok());
        let refused = |signed: &SignedRequest, now: i64| {
            signed.check(token, now).expect_err("refused").message
        };
        assert_eq!(refused(&signed, until + 1), "signature is already expired");
        assert_eq!(
            refused(&request(Method::GET, &url), until),
            "invalid signature"
        );
        let other_path = url.replace("a%20b", "c").replace("a+b", "c");
        assert_eq!(
            refused(&request(Method::POST, &other_path), until),
            "invalid signature"
        );
        let later = url.replace(&format!("={until}"), &format!("={}", until + 3600));
        assert_eq!(
            refused(&request(Method::POST, &later), until),
            "invalid signature"
        );
        let no_user = url.replace("&username=user", "");
        assert_eq!(
            refused(&request(Method::POST, &no_user), until),
            "invalid signature"
        );
        assert!(!signed.made_with("e2bat_two"));
    }

    #[test]
    fn only_signed_files_requests_are_signed_requests() {
        let uri: Uri = "/files?path=/a".parse().expect("uri");
        assert!(SignedRequest::of(&Method::GET, &uri).is_none());
        let uri: Uri = "/other?signature=v1_x".parse().expect("uri");
        assert!(SignedRequest::of(&Method::GET, &uri).is_none());
        let uri: Uri = "/files?signature=v1_x&signature_expiration=soon"
            .parse()
            .expect("uri");
        let error = SignedRequest::of(&Method::GET, &uri)
            .expect("signed")
            .expect_err("malformed");
        assert_eq!(error.status, StatusCode::BAD_REQUEST, "{}", error.message);
    }
}
