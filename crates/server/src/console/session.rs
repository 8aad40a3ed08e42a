//! Signing in to the console: an API key exchanged for a session cookie
//! (HttpOnly, SameSite=Strict, `Secure` behind TLS, 12 hours), and
//! [`Signed`], the extractor every console call goes through.
//!
//! What a session may do is checked on every request, in this order:
//! a cross-site request is refused (its `Origin` names another host, or the
//! browser says `Sec-Fetch-Site: cross-site`); the cookie must name a live
//! session of a live key (signing out, expiry and revoking the key end it,
//! at once: the store joins the session to the key on every lookup); a
//! state-changing method must carry the session's CSRF token in
//! `X-CSRF-Token`. An admin key's session may act for another project
//! (`X-Shellgate-Project`, or `?project=` where a browser cannot set
//! headers: EventSource); a member's only for its own.

use std::sync::Arc;

use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use shellgate_store::{ConsoleSessionRow, KeyGrant, KeyRole};
use shellgate_wire::console::{ConsoleSession, SignIn};

use super::Console;
use crate::error::{ApiError, ApiResult};
use crate::http::ApiJson;
use crate::time::now;

/// The session cookie's name.
pub(super) const COOKIE: &str = "shellgate_console";
/// How long a session lasts.
const SESSION_SECONDS: i64 = 12 * 3600;
/// The header an admin names the project it acts for in.
pub(super) const PROJECT_HEADER: &str = "x-shellgate-project";
/// The header state-changing requests carry the CSRF token in.
const CSRF_HEADER: &str = "x-csrf-token";

/// A request of a live session, checked as the module says.
pub(crate) struct Signed {
    pub(super) token: String,
    pub(super) session: ConsoleSessionRow,
}

impl Signed {
    pub(super) fn is_admin(&self) -> bool {
        self.session.grant.role == KeyRole::Admin
    }

    /// The project a request acts for: the session's own, or, for an admin,
    /// the one `asked` names.
    pub(super) fn project(&self, asked: Option<&str>) -> ApiResult<String> {
        match asked.map(str::trim).filter(|p| !p.is_empty()) {
            None => Ok(self.session.grant.project.clone()),
            Some(project) if project == self.session.grant.project => Ok(project.to_owned()),
            Some(project) if self.is_admin() && project != "*" => Ok(project.to_owned()),
            Some(_) => Err(forbidden(
                "This key's session acts for its own project only (an admin key's session may name another).",
            )),
        }
    }

    /// The project named by the request's `X-Shellgate-Project` header.
    pub(super) fn project_of(&self, headers: &HeaderMap) -> ApiResult<String> {
        self.project(named_project(headers))
    }

    /// For a listing: one project, or (an admin asking for `*`) every one.
    pub(super) fn scope(&self, asked: Option<&str>) -> ApiResult<Option<String>> {
        match asked.map(str::trim) {
            Some("*") if self.is_admin() => Ok(None),
            Some("*") => Err(forbidden(
                "Only an admin key's session may list every project.",
            )),
            other => self.project(other).map(Some),
        }
    }

    /// Refuses a caller whose key is not an admin's.
    pub(super) fn require_admin(&self) -> ApiResult<()> {
        if self.is_admin() {
            Ok(())
        } else {
            Err(forbidden("This page is for admin keys only."))
        }
    }
}

/// The project a request names in `X-Shellgate-Project`, if any.
pub(super) fn named_project(headers: &HeaderMap) -> Option<&str> {
    headers.get(PROJECT_HEADER).and_then(|v| v.to_str().ok())
}

fn forbidden(message: &str) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, "invalid_request_error", message).with_code("forbidden")
}

fn no_session() -> ApiError {
    ApiError::unauthorized("No console session: sign in with an API key.")
        .with_code("console_session_required")
}

impl FromRequestParts<Arc<Console>> for Signed {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        console: &Arc<Console>,
    ) -> Result<Self, ApiError> {
        same_site(&parts.headers)?;
        let token = cookie(&parts.headers).ok_or_else(no_session)?;
        let lookup = token.clone();
        let session = console
            .app
            .db(move |s| s.console_session(&lookup, now()))
            .await?
            .ok_or_else(no_session)?;
        if !matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS) {
            let sent = parts
                .headers
                .get(CSRF_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            if !crate::ops::constant_time_eq(sent.as_bytes(), session.csrf_token.as_bytes()) {
                return Err(forbidden(
                    "Missing or wrong X-CSRF-Token: state-changing console requests must carry the session's token.",
                )
                .with_code("csrf_failed"));
            }
        }
        console.app.limiter.check(&session.grant.project)?;
        Ok(Signed { token, session })
    }
}

/// Refuses a request a browser sent from another site: its `Origin` names
/// another host than the one it was sent to, or `Sec-Fetch-Site` says
/// `cross-site`. (SameSite=Strict already keeps the cookie off such
/// requests; this also covers sign-in, which has no cookie yet, and
/// WebSocket handshakes.)
fn same_site(headers: &HeaderMap) -> ApiResult<()> {
    let refuse = || forbidden("Cross-site requests to the console are refused.");
    if headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes() == b"cross-site")
    {
        return Err(refuse());
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().map_err(|_| refuse())?;
        let host = headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let origin_host = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .unwrap_or_default();
        if origin_host.is_empty() || !origin_host.eq_ignore_ascii_case(host) {
            return Err(refuse());
        }
    }
    Ok(())
}

/// The session cookie's value, if the request carries one.
pub(super) fn cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim().to_owned())
        .filter(|value| !value.is_empty())
}

/// Whether the browser reached the server over TLS (through a proxy that
/// says so): the cookie is then `Secure`.
fn over_tls(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"))
}

fn session_object(grant: &KeyGrant, csrf_token: &str, expires_at: i64) -> ConsoleSession {
    ConsoleSession {
        object: "console.session",
        project: grant.project.clone(),
        role: grant.role.as_str(),
        csrf_token: csrf_token.to_owned(),
        expires_at,
    }
}

/// How often a live stream re-checks that its session still lives.
const SESSION_CHECK: std::time::Duration = std::time::Duration::from_secs(5);

/// Resolves once the session of cookie `token` has ended (signed out,
/// expired, its key revoked) or the store cannot say: a live stream ends
/// with it. Pinned once per stream (each poll continues the same wait).
pub(super) async fn ended(console: &Console, token: &str) {
    loop {
        tokio::time::sleep(SESSION_CHECK).await;
        let lookup = token.to_owned();
        match console
            .app
            .db(move |s| s.console_session(&lookup, now()))
            .await
        {
            Ok(Some(_)) => continue,
            _ => return,
        }
    }
}

/// `POST /console/session`: `{"key": ...}` in, a session out.
pub(super) async fn sign_in(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<SignIn>,
) -> ApiResult<Response> {
    same_site(&headers)?;
    let key = body.key.trim().to_owned();
    // From the store, not the key cache: a key revoked a moment ago opens
    // no new session.
    let lookup = key.clone();
    let grant = console
        .app
        .db(move |s| s.grant_for_key(&lookup))
        .await?
        .ok_or_else(|| ApiError::unauthorized("Incorrect API key provided."))?;
    console.app.limiter.check(&grant.project)?;
    let token = shellgate_wire::new_id("sgc_");
    let csrf = shellgate_wire::new_id("");
    let (created, expires) = (now(), now() + SESSION_SECONDS);
    let (cookie_token, key_hash, csrf_token) =
        (token.clone(), shellgate_store::hash_key(&key), csrf.clone());
    console
        .app
        .db(move |s| {
            s.open_console_session(&cookie_token, &key_hash, &csrf_token, created, expires)
        })
        .await?;
    let secure = if over_tls(&headers) { "; Secure" } else { "" };
    let cookie = format!(
        "{COOKIE}={token}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={SESSION_SECONDS}{secure}"
    );
    let mut response = Json(session_object(&grant, &csrf, expires)).into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    Ok(response)
}

/// `GET /console/session`: the session the cookie opens.
pub(super) async fn current(signed: Signed) -> Json<ConsoleSession> {
    let session = &signed.session;
    Json(session_object(
        &session.grant,
        &session.csrf_token,
        session.expires_at,
    ))
}

/// `DELETE /console/session`: signs out (the cookie opens nothing after,
/// wherever a copy of it is).
pub(super) async fn sign_out(
    State(console): State<Arc<Console>>,
    signed: Signed,
) -> ApiResult<Response> {
    let token = signed.token.clone();
    console
        .app
        .db(move |s| s.close_console_session(&token))
        .await?;
    let mut response = StatusCode::NO_CONTENT.into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static(
            "shellgate_console=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0",
        ),
    );
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn the_session_cookie_is_found_among_others_and_never_by_prefix() {
        let found = headers(&[("cookie", "a=1; shellgate_console=sgc_x ; b=2")]);
        assert_eq!(cookie(&found).as_deref(), Some("sgc_x"));
        let split = headers(&[("cookie", "a=1"), ("cookie", "shellgate_console=sgc_y")]);
        assert_eq!(cookie(&split).as_deref(), Some("sgc_y"));
        for none in [
            "shellgate_console_x=1",
            "xshellgate_console=1",
            "shellgate_console=",
            "",
        ] {
            assert_eq!(cookie(&headers(&[("cookie", none)])), None, "{none}");
        }
    }

    #[test]
    fn requests_from_another_site_are_refused() {
        let host = ("host", "127.0.0.1:8080");
        assert!(same_site(&headers(&[host])).is_ok());
        assert!(same_site(&headers(&[host, ("origin", "http://127.0.0.1:8080")])).is_ok());
        assert!(same_site(&headers(&[host, ("origin", "https://127.0.0.1:8080")])).is_ok());
        assert!(same_site(&headers(&[host, ("sec-fetch-site", "same-origin")])).is_ok());
        for origin in [
            "http://evil.example",
            "http://127.0.0.1:8081",
            "http://127.0.0.1:8080.evil.example",
            "null",
            "file://",
        ] {
            assert!(
                same_site(&headers(&[host, ("origin", origin)])).is_err(),
                "{origin}"
            );
        }
        assert!(same_site(&headers(&[host, ("sec-fetch-site", "cross-site")])).is_err());
        // No Host to compare with: any Origin is refused.
        assert!(same_site(&headers(&[("origin", "http://127.0.0.1:8080")])).is_err());
    }

    #[test]
    fn secure_cookies_behind_tls_only() {
        assert!(over_tls(&headers(&[("x-forwarded-proto", "https")])));
        assert!(!over_tls(&headers(&[("x-forwarded-proto", "http")])));
        assert!(!over_tls(&headers(&[])));
    }
}
