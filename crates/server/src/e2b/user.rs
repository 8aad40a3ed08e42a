//! Who an in-sandbox call runs as. E2B names a user per call
//! (`Authorization: Basic base64("name:")`, or `?username=` on `/files`);
//! shellgate's sandboxes have one unprivileged user, E2B's `user`, so every
//! other name is refused — the same way by the process and filesystem
//! services and by `/files`.

use axum::http::HeaderMap;

use super::connect::{ConnectCode, ConnectError};

/// E2B's user's home: the default working directory, and where relative
/// paths (and `~`) start.
pub const E2B_HOME: &str = "/home/user";

/// The writable directory at the root the OpenAI Agents SDK's E2B
/// sandboxes use as their workspace by default (the engine's
/// `SANDBOX_WORKSPACE`).
pub const E2B_WORKSPACE: &str = "/workspace";

/// E2B's user: the sandbox user, the only one there is.
pub const E2B_USER: &str = "user";

/// Why a call naming `name` as its user is refused (`None`: it is E2B's
/// `user`, or no user is named).
pub(super) fn user_refusal(name: Option<&str>) -> Option<String> {
    match name.map(str::trim).filter(|n| !n.is_empty()) {
        None => None,
        Some(E2B_USER) => None,
        Some(other) => Some(format!(
            "user {other:?} is not available: shellgate's sandboxes do everything as {E2B_USER:?}, which has no privileges (there is no root or sudo)"
        )),
    }
}

/// The user an `Authorization: Basic base64("name:")` header names; an
/// unreadable header names nobody we could serve (`Err`).
pub(super) fn basic_user(headers: &HeaderMap) -> Result<Option<String>, String> {
    use base64::Engine as _;
    let Some(value) = headers.get(axum::http::header::AUTHORIZATION) else {
        return Ok(None);
    };
    let bad = || "Authorization must be Basic base64(\"user:\")".to_owned();
    let encoded = value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Basic "))
        .ok_or_else(bad)?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|_| bad())?;
    let decoded = String::from_utf8(decoded).map_err(|_| bad())?;
    Ok(decoded
        .split(':')
        .next()
        .filter(|n| !n.is_empty())
        .map(str::to_owned))
}

/// An RPC's user check: E2B's `user` or none (`permission_denied` for any
/// other, `invalid_argument` for an unreadable header).
pub(super) fn check_rpc_user(headers: &HeaderMap) -> Result<(), ConnectError> {
    let name = basic_user(headers).map_err(ConnectError::invalid)?;
    match user_refusal(name.as_deref()) {
        None => Ok(()),
        Some(why) => Err(ConnectError::new(ConnectCode::PermissionDenied, why)),
    }
}

/// [`check_rpc_user`] as an extractor, for the filesystem RPCs.
pub(super) struct AsSandboxUser;

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for AsSandboxUser {
    type Rejection = ConnectError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, ConnectError> {
        check_rpc_user(&parts.headers).map(|()| Self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use base64::Engine as _;

    #[test]
    fn only_the_sandbox_user_is_served() {
        assert_eq!(user_refusal(None), None);
        assert_eq!(user_refusal(Some("user")), None);
        assert!(user_refusal(Some("root"))
            .unwrap()
            .contains("no privileges"));
        let mut headers = HeaderMap::new();
        assert_eq!(basic_user(&headers), Ok(None));
        // base64("root:")
        headers.insert("authorization", "Basic cm9vdDo=".parse().unwrap());
        assert_eq!(basic_user(&headers), Ok(Some("root".to_owned())));
        headers.insert("authorization", "Bearer x".parse().unwrap());
        assert!(basic_user(&headers).is_err());
    }

    #[test]
    fn the_user_is_read_from_basic_auth_and_only_user_is_served() {
        let mut headers = HeaderMap::new();
        assert!(check_rpc_user(&headers).is_ok());
        let basic = |name: &str| {
            let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{name}:"));
            HeaderValue::from_str(&format!("Basic {encoded}")).unwrap()
        };
        headers.insert("authorization", basic("user"));
        assert!(check_rpc_user(&headers).is_ok());
        headers.insert("authorization", basic("root"));
        let refused = check_rpc_user(&headers).unwrap_err();
        assert_eq!(refused.code, ConnectCode::PermissionDenied);
        assert!(refused.message.contains("no privileges"));
        headers.insert("authorization", HeaderValue::from_static("Basic !!"));
        assert_eq!(
            check_rpc_user(&headers).unwrap_err().code,
            ConnectCode::InvalidArgument
        );
    }
}
