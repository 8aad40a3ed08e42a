//! Signing in to the console: an API key exchanged for a session cookie
//! (`__Host-shellgate_console`: HttpOnly, SameSite=Strict, Secure, Path=/,
//! 12 hours), and [`Signed`], the extractor every console call goes
//! through.
//!
//! The cookie's `__Host-` prefix is what keeps another host from choosing
//! the session a browser uses here: a browser takes a cookie of that name
//! only from this very host, over a secure connection, with no `Domain`
//! (so no page of a sibling host, such as a container's port under a
//! shared parent domain, can toss one in with `Domain=` or
//! `document.cookie`), and a request carrying more than one is refused. A
//! browser keeps a `Secure` cookie only from a secure context: HTTPS (the
//! server behind a TLS proxy that says so with `X-Forwarded-Proto: https`)
//! or a loopback host (`localhost`, `*.localhost`, `127.0.0.0/8`, `[::1]`,
//! over plain HTTP too). Anywhere else sign-in is refused, saying so.
//!
//! What a session may do is checked on every request, in this order:
//! a cross-site request is refused (its `Origin` is not this scheme and
//! host, or the browser says `Sec-Fetch-Site: cross-site`); the cookie must
//! name a live session of a live key (signing out, expiry and revoking the
//! key end it, at once: the store joins the session to the key on every
//! lookup); a state-changing method must carry the session's CSRF token in
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
use shellgate_wire::ErrorCode;

/// The session cookie's name (see the module doc for its prefix).
pub(super) const COOKIE: &str = "__Host-shellgate_console";
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
    ApiError::of(ErrorCode::Forbidden, message)
}

fn no_session() -> ApiError {
    ApiError::unauthorized("No console session: sign in with an API key.")
        .with_code(ErrorCode::ConsoleSessionRequired)
}

impl FromRequestParts<Arc<Console>> for Signed {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        console: &Arc<Console>,
    ) -> Result<Self, ApiError> {
        same_site(&parts.headers)?;
        let token = cookie(&parts.headers)?.ok_or_else(no_session)?;
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
                .with_code(ErrorCode::CsrfFailed));
            }
        }
        console.app.limiter.check(&session.grant.project)?;
        Ok(Signed { token, session })
    }
}

/// Refuses a request a browser sent from another site: its `Origin` is not
/// the scheme and host it was sent to (an `http://` page is another origin
/// than the `https://` console), or `Sec-Fetch-Site` says `cross-site`.
/// (SameSite=Strict already keeps the cookie off such requests; this also
/// covers sign-in, which has no cookie yet, and WebSocket handshakes.)
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
        let scheme = browser_scheme(headers);
        let origin_host = origin
            .split_once("://")
            .filter(|(origin_scheme, _)| origin_scheme.eq_ignore_ascii_case(scheme))
            .map_or("", |(_, rest)| rest);
        if origin_host.is_empty() || !origin_host.eq_ignore_ascii_case(host) {
            return Err(refuse());
        }
    }
    Ok(())
}

/// The session cookie's value, if the request carries one; more than one
/// is refused (400): which of them the browser meant cannot be known, and
/// a second one is what a page of another host would have planted.
pub(super) fn cookie(headers: &HeaderMap) -> ApiResult<Option<String>> {
    let mut found = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim());
    let first = found.next();
    if found.next().is_some() {
        return Err(ApiError::bad_request(format!(
            "The request carries more than one {COOKIE} cookie: clear this site's cookies and \
             sign in again."
        ))
        .with_code(ErrorCode::ConsoleCookieConflict));
    }
    Ok(first.filter(|value| !value.is_empty()).map(str::to_owned))
}

/// The scheme the browser used, as this server can tell: `https` when a
/// proxy in front says so (`X-Forwarded-Proto`, its first entry), else
/// `http`. The one answer the cookie's and the `Origin` check's reading
/// of the connection share.
fn browser_scheme(headers: &HeaderMap) -> &'static str {
    let forwarded = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').next())
        .map(str::trim);
    match forwarded {
        Some(proto) if proto.eq_ignore_ascii_case("https") => "https",
        _ => "http",
    }
}

/// Whether `host` (a `Host` value, `name[:port]`) names this machine's
/// loopback, which browsers count as a secure context over plain HTTP.
fn loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map_or("", |(address, _)| address),
        None => host.rsplit_once(':').map_or(host, |(name, port)| {
            if port.chars().all(|c| c.is_ascii_digit()) {
                name
            } else {
                host
            }
        }),
    };
    let name = name.to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|address| address.is_loopback())
}

/// Whether the browser will keep the `Secure` session cookie: it reached
/// this server over HTTPS or on a loopback host.
fn secure_context(headers: &HeaderMap) -> bool {
    browser_scheme(headers) == "https"
        || headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .is_some_and(loopback_host)
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
    client: Option<axum::Extension<crate::listener::ClientAddr>>,
    ApiJson(body): ApiJson<SignIn>,
) -> ApiResult<Response> {
    same_site(&headers)?;
    if !secure_context(&headers) {
        return Err(ApiError::bad_request(
            "The console signs in over HTTPS only (behind a TLS proxy that sends \
             'X-Forwarded-Proto: https'), or on a loopback address such as \
             http://127.0.0.1 or http://localhost: its session cookie is Secure, and a \
             browser keeps none from this address over plain HTTP.",
        )
        .with_code(ErrorCode::ConsoleNeedsHttps));
    }
    let key = body.key.trim().to_owned();
    // Wrong keys are throttled here as on the API (`auth::KeyThrottle`).
    let attempt = crate::auth::KeyAttempt::new(client.map(|c| c.0 .0.ip()), &key);
    let throttle = &console.app.key_throttle;
    throttle.admit(&attempt)?;
    // From the store, not the key cache: a key revoked a moment ago opens
    // no new session.
    let lookup = key.clone();
    let found = console.app.db(move |s| s.grant_for_key(&lookup)).await?;
    let Some(grant) = found else {
        throttle.failed(&attempt);
        return Err(ApiError::unauthorized("Incorrect API key provided."));
    };
    throttle.succeeded(&attempt);
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
    let cookie = format!(
        "{COOKIE}={token}; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age={SESSION_SECONDS}"
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
    let expired = format!("{COOKIE}=; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age=0");
    if let Ok(value) = HeaderValue::from_str(&expired) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
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
        let found = headers(&[("cookie", "a=1; __Host-shellgate_console=sgc_x ; b=2")]);
        assert_eq!(cookie(&found).unwrap().as_deref(), Some("sgc_x"));
        let split = headers(&[
            ("cookie", "a=1"),
            ("cookie", "__Host-shellgate_console=sgc_y"),
        ]);
        assert_eq!(cookie(&split).unwrap().as_deref(), Some("sgc_y"));
        for none in [
            "__Host-shellgate_console_x=1",
            "x__Host-shellgate_console=1",
            "__host-shellgate_console=1",
            "shellgate_console=1",
            "__Host-shellgate_console=",
            "",
        ] {
            assert_eq!(
                cookie(&headers(&[("cookie", none)])).unwrap(),
                None,
                "{none}"
            );
        }
    }

    #[test]
    fn two_session_cookies_are_refused() {
        for pairs in [
            vec![(
                "cookie",
                "__Host-shellgate_console=sgc_a; __Host-shellgate_console=sgc_b",
            )],
            vec![
                ("cookie", "__Host-shellgate_console=sgc_a"),
                ("cookie", "x=1; __Host-shellgate_console=sgc_a"),
            ],
            vec![(
                "cookie",
                "__Host-shellgate_console=sgc_a;__Host-shellgate_console=",
            )],
        ] {
            let refused = cookie(&headers(&pairs)).unwrap_err();
            assert_eq!(refused.status(), StatusCode::BAD_REQUEST, "{pairs:?}");
        }
    }

    #[test]
    fn requests_from_another_site_are_refused() {
        let host = ("host", "127.0.0.1:8080");
        assert!(same_site(&headers(&[host])).is_ok());
        assert!(same_site(&headers(&[host, ("origin", "http://127.0.0.1:8080")])).is_ok());
        assert!(same_site(&headers(&[host, ("sec-fetch-site", "same-origin")])).is_ok());
        for origin in [
            "http://evil.example",
            "http://127.0.0.1:8081",
            "http://127.0.0.1:8080.evil.example",
            "https://127.0.0.1:8080",
            "ws://127.0.0.1:8080",
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
        // Behind a TLS proxy the console's origin is https://, and an
        // http:// page of the same host is another origin.
        let tls = ("x-forwarded-proto", "https");
        let public = ("host", "console.example.com");
        assert!(same_site(&headers(&[
            public,
            tls,
            ("origin", "https://console.example.com")
        ]))
        .is_ok());
        assert!(same_site(&headers(&[
            public,
            tls,
            ("origin", "http://console.example.com")
        ]))
        .is_err());
        assert!(same_site(&headers(&[
            public,
            ("origin", "https://console.example.com")
        ]))
        .is_err());
    }

    #[test]
    fn the_cookie_is_offered_only_where_a_browser_keeps_it() {
        for host in [
            "127.0.0.1:8080",
            "127.1.2.3",
            "localhost:8080",
            "LOCALHOST",
            "console.example.localhost:8080",
            "[::1]:8080",
            "[::1]",
        ] {
            assert!(secure_context(&headers(&[("host", host)])), "{host}");
        }
        for host in [
            "10.0.0.5:8080",
            "console.example.com",
            "localhost.example.com",
            "[::2]:8080",
            "",
        ] {
            assert!(!secure_context(&headers(&[("host", host)])), "{host}");
        }
        for proto in ["https", "HTTPS", "https, http"] {
            assert!(secure_context(&headers(&[
                ("host", "console.example.com"),
                ("x-forwarded-proto", proto)
            ])));
        }
        assert!(!secure_context(&headers(&[
            ("host", "console.example.com"),
            ("x-forwarded-proto", "http")
        ])));
    }
}
