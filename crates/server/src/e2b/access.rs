//! Who may use a sandbox's in-sandbox API: `E2b-Sandbox-Id` names it, and
//! the caller proves it may by one of
//! - `X-Access-Token`: the token its create issued (what envd wants, and
//!   what E2B's SDKs send to envd and to the code interpreter's `/execute`);
//! - the project's API key (`X-API-Key`, or `Authorization: Bearer`);
//! - on the code interpreter's contexts only, `E2B-Traffic-Access-Token`:
//!   the traffic token create and connect give beside the access token
//!   (`auth::e2b_traffic_token`), which is all E2B's SDKs send there.
//!
//! A sandbox id is no secret (it is in host names, URLs and logs): no route
//! opens on it alone.
//!
//! Order: the id is looked up first (unknown, a plain `/v1` container
//! without an E2B record, or a killed one: the same 404 bytes), then the
//! credentials (none: 401; every one given must be right: a wrong token or
//! an unknown key is 401, a token or key of another project's sandbox the
//! unknown id's 404, so that project learns nothing of this one), and only
//! then the state (paused: 502, as E2B answers; `connect` resumes it, and
//! so does this check when the sandbox's create said `autoResume`): a
//! caller without credentials never wakes a paused sandbox.
//!
//! What the check needs of a sandbox is cached (`access_cache`), so that a
//! tenant's every call (10,000 `List`s in a loop) costs a map lookup and a
//! hash, not a trip to SQLite that another tenant's commands would queue
//! behind. The control plane keeps the cache true: it is the only writer of
//! what the cache holds (pause, resume, kill; the sweeper's too).

use std::sync::Arc;

use super::access_cache::{digest, same_digest, AccessEntry};
use super::connect::{ConnectCode, ConnectError};
use super::{E2bError, SANDBOX_ID_HEADER};
use crate::http::{bearer_key, project_of_key};
use crate::state::AppState;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// The header carrying the sandbox's access token.
pub const ACCESS_TOKEN_HEADER: &str = "x-access-token";
/// The header carrying the sandbox's traffic token (the contexts routes').
pub const TRAFFIC_TOKEN_HEADER: &str = "e2b-traffic-access-token";
/// The header carrying a project's API key (E2B's spelling; `Authorization:
/// Bearer` is read too).
const API_KEY_HEADER: &str = "x-api-key";

/// The caller of an in-sandbox route, checked: the sandbox's container, its
/// project, and the environment its create asked for (added to every
/// command and interpreter context; a call's own variables win).
#[derive(Debug, Clone)]
pub struct SandboxCaller {
    pub project: String,
    pub container_id: String,
    pub env_vars: Vec<(String, String)>,
}

/// Why a caller was refused, rendered as the route expects it: a Connect
/// error on the Connect-RPC services, E2B's plain error body elsewhere
/// (`/files`, `/health`, `/execute`, `/contexts`).
#[derive(Debug, Clone)]
pub struct AccessRejection {
    pub error: E2bError,
    connect: bool,
}

impl AccessRejection {
    fn new(parts: &Parts, status: StatusCode, message: String) -> Self {
        let path = parts.uri.path();
        Self {
            error: E2bError::new(status, message),
            connect: path.starts_with("/process.Process/")
                || path.starts_with("/filesystem.Filesystem/"),
        }
    }
}

impl From<AccessRejection> for E2bError {
    fn from(rejection: AccessRejection) -> Self {
        rejection.error
    }
}

impl From<AccessRejection> for ConnectError {
    fn from(rejection: AccessRejection) -> Self {
        let code = match rejection.error.status {
            StatusCode::UNAUTHORIZED => ConnectCode::Unauthenticated,
            status => ConnectCode::of_status(status),
        };
        ConnectError::new(code, rejection.error.message)
    }
}

impl IntoResponse for AccessRejection {
    fn into_response(self) -> Response {
        if self.connect {
            ConnectError::from(self).into_response()
        } else {
            self.error.into_response()
        }
    }
}

/// The message of a paused sandbox's refusal.
pub const PAUSED_MESSAGE: &str = "sandbox is paused";

impl FromRequestParts<Arc<AppState>> for SandboxCaller {
    type Rejection = AccessRejection;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, AccessRejection> {
        check(parts, state, Traffic::Refused).await
    }
}

/// The caller of the code interpreter's contexts routes, which E2B's SDKs
/// call with the traffic token and without the access token: the same
/// check, with `E2B-Traffic-Access-Token` taken as a credential too.
#[derive(Debug, Clone)]
pub struct ContextsCaller(pub SandboxCaller);

impl FromRequestParts<Arc<AppState>> for ContextsCaller {
    type Rejection = AccessRejection;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, AccessRejection> {
        check(parts, state, Traffic::Accepted).await.map(Self)
    }
}

/// Whether a route takes the traffic token as a credential (where it does
/// not, the header is ignored: E2B's SDKs send it beside the access token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Traffic {
    Accepted,
    Refused,
}

/// A header's value, trimmed; `None` when absent or empty.
fn header<'a>(parts: &'a Parts, name: &str) -> Option<&'a str> {
    parts
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// The credentials a request carries for a sandbox.
struct Presented<'a> {
    access_token: Option<&'a str>,
    traffic_token: Option<&'a str>,
    key: Option<&'a str>,
}

impl<'a> Presented<'a> {
    fn of(parts: &'a Parts, traffic: Traffic) -> Self {
        Self {
            access_token: header(parts, ACCESS_TOKEN_HEADER),
            traffic_token: header(parts, TRAFFIC_TOKEN_HEADER)
                .filter(|_| traffic == Traffic::Accepted),
            // `Authorization: Basic` names envd's user (`/files`), not a key.
            key: header(parts, API_KEY_HEADER).or_else(|| bearer_key(&parts.headers)),
        }
    }

    fn none(&self) -> bool {
        self.access_token.is_none() && self.traffic_token.is_none() && self.key.is_none()
    }
}

async fn check(
    parts: &Parts,
    state: &Arc<AppState>,
    traffic: Traffic,
) -> Result<SandboxCaller, AccessRejection> {
    // The dispatch layer sent the request here for this header.
    let id = header(parts, SANDBOX_ID_HEADER)
        .unwrap_or_default()
        .to_owned();
    let not_found = |parts: &Parts| {
        let E2bError { status, message } = E2bError::sandbox_not_found(&id);
        AccessRejection::new(parts, status, message)
    };
    let unauthorized = |parts: &Parts, message: &str| {
        AccessRejection::new(parts, StatusCode::UNAUTHORIZED, message.to_owned())
    };
    // Ids are shellgate's (`cntr_` and base62): anything else is no
    // sandbox, without a trip to the store.
    if id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return Err(not_found(parts));
    }
    // Being removed: gone already, whatever its row still says.
    if state.e2b_access.is_ending(&id) {
        return Err(not_found(parts));
    }
    let entry = match state.e2b_access.get(&id) {
        Some(entry) => entry,
        None => {
            let key = id.clone();
            let row = state
                .db(move |s| s.e2b_sandbox_by_id(&key))
                .await
                .map_err(|e| AccessRejection::new(parts, e.status(), e.message))?;
            let Some(row) = row else {
                return Err(not_found(parts));
            };
            let entry = AccessEntry::of_row(&row);
            state.e2b_access.remember(&id, entry.clone());
            entry
        }
    };
    // A signed URL's signature is its credential (`signed`), checked
    // against this sandbox's token like any other one given.
    let signed = match super::signed::SignedRequest::of(&parts.method, &parts.uri) {
        None => None,
        Some(Ok(signed)) => Some(signed),
        Some(Err(error)) => return Err(AccessRejection::new(parts, error.status, error.message)),
    };
    if let Some(signed) = &signed {
        let token = state
            .e2b_signing
            .token_of(&state.store, &id)
            .await
            .map_err(|e| AccessRejection::new(parts, e.status(), e.message))?
            .ok_or_else(|| not_found(parts))?;
        signed
            .check(&token, crate::time::now())
            .map_err(|e| AccessRejection::new(parts, e.status, e.message))?;
    }
    let presented = Presented::of(parts, traffic);
    if presented.none() && signed.is_none() {
        return Err(unauthorized(
            parts,
            match traffic {
                Traffic::Refused => {
                    "the sandbox's access token (X-Access-Token) or the project's API key \
                     (X-API-Key) is required"
                }
                Traffic::Accepted => {
                    "the sandbox's access token (X-Access-Token), its traffic access token \
                     (E2B-Traffic-Access-Token) or the project's API key (X-API-Key) is required"
                }
            },
        ));
    }
    // Every credential given must be right, whichever else is.
    if let Some(given) = presented.access_token {
        if !same_digest(&digest(given), &entry.token_digest) {
            // A token of another project's sandbox names a caller who may
            // not know this id exists: answered as an unknown id, byte for
            // byte.
            let token = given.to_owned();
            let owner = state
                .db(move |s| s.e2b_project_of_access_token(&token))
                .await
                .map_err(|e| AccessRejection::new(parts, e.status(), e.message))?;
            if owner.is_some_and(|owner| owner != entry.project) {
                return Err(not_found(parts));
            }
            return Err(unauthorized(
                parts,
                "the X-Access-Token header is not this sandbox's access token",
            ));
        }
    }
    if let Some(given) = presented.traffic_token {
        if !same_digest(&digest(given), &entry.traffic_digest) {
            return Err(unauthorized(
                parts,
                "the E2B-Traffic-Access-Token header is not this sandbox's traffic access token",
            ));
        }
    }
    if let Some(key) = presented.key {
        let project = project_of_key(state, key, crate::http::client_address(parts))
            .await
            .map_err(|e| AccessRejection::new(parts, e.status(), e.message))?;
        if project.0 != entry.project {
            return Err(not_found(parts));
        }
    }
    if entry.paused && entry.auto_resume {
        super::control::resume_on_traffic(state, &entry.project, &id)
            .await
            .map_err(|e| AccessRejection::new(parts, e.status, e.message))?;
    } else if entry.paused {
        return Err(AccessRejection::new(
            parts,
            StatusCode::BAD_GATEWAY,
            PAUSED_MESSAGE.to_owned(),
        ));
    }
    state.remember_owner(&id, &entry.project);
    Ok(SandboxCaller {
        project: entry.project,
        container_id: id,
        env_vars: entry.env_vars.as_ref().clone(),
    })
}

/// Whether sandbox `container`, let in by the check above, has ended since:
/// killed, timed out or paused. Its end takes it out of the cache (or marks
/// it paused there) before its processes go, so a stream that sees its
/// process or kernel die asks here and finds the end already said; the
/// store is asked only while the cache still holds it running.
pub(crate) async fn sandbox_ended(state: &AppState, container: &str) -> bool {
    match state.e2b_access.get(container) {
        None => true,
        Some(entry) if entry.paused => true,
        Some(_) => {
            let key = container.to_owned();
            match state.db(move |s| s.e2b_sandbox_by_id(&key)).await {
                Ok(Some(row)) => row.paused,
                Ok(None) => true,
                Err(_) => false,
            }
        }
    }
}

/// Every in-sandbox route through the real router (the dispatch by
/// `E2b-Sandbox-Id`), on the recording backend.
#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::{Method, Request};
    use serde_json::json;

    use crate::testing::{Answer, Call, Harness, ALPHA, BETA};

    /// Every route of the in-sandbox API: (port, method, path).
    const ROUTES: &[(u16, &str, &str)] = &[
        (49983, "POST", "/process.Process/Start"),
        (49983, "POST", "/process.Process/Connect"),
        (49983, "POST", "/process.Process/List"),
        (49983, "POST", "/process.Process/SendInput"),
        (49983, "POST", "/process.Process/StreamInput"),
        (49983, "POST", "/process.Process/CloseStdin"),
        (49983, "POST", "/process.Process/SendSignal"),
        (49983, "POST", "/process.Process/Update"),
        (49983, "POST", "/filesystem.Filesystem/Stat"),
        (49983, "POST", "/filesystem.Filesystem/ListDir"),
        (49983, "POST", "/filesystem.Filesystem/MakeDir"),
        (49983, "POST", "/filesystem.Filesystem/Move"),
        (49983, "POST", "/filesystem.Filesystem/Remove"),
        (49983, "POST", "/filesystem.Filesystem/WatchDir"),
        (49983, "POST", "/filesystem.Filesystem/CreateWatcher"),
        (49983, "POST", "/filesystem.Filesystem/GetWatcherEvents"),
        (49983, "POST", "/filesystem.Filesystem/RemoveWatcher"),
        (49983, "GET", "/files?path=/home/user/a.txt"),
        (49983, "POST", "/files?path=/home/user/a.txt"),
        (49983, "GET", "/health"),
        (49999, "POST", "/execute"),
        (49999, "GET", "/contexts"),
        (49999, "POST", "/contexts"),
        (49999, "DELETE", "/contexts/ctx_1"),
        (49999, "POST", "/contexts/ctx_1/restart"),
    ];

    fn is_contexts(path: &str) -> bool {
        path.starts_with("/contexts")
    }

    fn is_connect(path: &str) -> bool {
        path.starts_with("/process.") || path.starts_with("/filesystem.")
    }

    async fn call(
        harness: &Harness,
        id: &str,
        (port, method, path): (u16, &str, &str),
        credentials: &[(&str, &str)],
    ) -> Answer {
        let mut request = Request::builder()
            .method(Method::from_bytes(method.as_bytes()).expect("method"))
            .uri(path)
            .header("e2b-sandbox-id", id)
            .header("e2b-sandbox-port", port.to_string())
            .header("content-type", "application/json");
        for (name, value) in credentials {
            request = request.header(*name, *value);
        }
        let body = if method == "POST" { "{}" } else { "" };
        harness
            .send(request.body(Body::from(body)).expect("request"))
            .await
    }

    /// A refusal in the route's envelope: a Connect error on the RPCs,
    /// E2B's `{"code", "message"}` elsewhere.
    fn assert_refused(answer: &Answer, status: u16, path: &str) {
        assert_eq!(answer.status, status, "{path}: {:?}", answer.json);
        let code = &answer.json["code"];
        if is_connect(path) {
            let expected = if status == 401 {
                "unauthenticated"
            } else {
                "not_found"
            };
            assert_eq!(code, expected, "{path}: {:?}", answer.json);
        } else {
            assert_eq!(code, status, "{path}: {:?}", answer.json);
        }
        assert!(
            answer.json["message"].is_string(),
            "{path}: {:?}",
            answer.json
        );
    }

    async fn create(harness: &Harness, body: serde_json::Value) -> (String, String, String) {
        let made = harness.post("/v2/sandboxes", body).await;
        assert_eq!(made.status, 201, "{:?}", made.json);
        let field = |name: &str| made.json[name].as_str().expect(name).to_owned();
        (
            field("sandboxID"),
            field("envdAccessToken"),
            field("trafficAccessToken"),
        )
    }

    #[tokio::test]
    async fn no_route_opens_on_the_sandbox_id_alone_and_each_credential_opens_its_own() {
        let harness = Harness::new();
        let (id, token, traffic) = create(&harness, json!({"templateID": "base"})).await;
        assert_ne!(token, traffic);
        for (n, &route) in ROUTES.iter().enumerate() {
            let (_, _, path) = route;
            // A wrong key of its own per route: wrong keys of one prefix are
            // throttled after a few (`auth::KeyThrottle`).
            let nobody = format!("sk-{n:03}-nobody");
            // The id alone, or with a header that is no credential.
            assert_refused(&call(&harness, &id, route, &[]).await, 401, path);
            let basic = [("authorization", "Basic dXNlcjo=")];
            assert_refused(&call(&harness, &id, route, &basic).await, 401, path);
            // The traffic token opens the contexts only.
            let with_traffic = call(
                &harness,
                &id,
                route,
                &[("e2b-traffic-access-token", &traffic)],
            )
            .await;
            if is_contexts(path) {
                // Let in: served, or the context `ctx_1` is not found.
                let message = with_traffic.json["message"].as_str().unwrap_or_default();
                assert!(
                    with_traffic.status != 401
                        && (with_traffic.status != 404 || message.contains("context")),
                    "{path}: {:?}",
                    with_traffic.json
                );
            } else {
                assert_refused(&with_traffic, 401, path);
            }
            // Wrong credentials: 401; another project's key: the unknown
            // id's 404.
            let wrong = [("x-access-token", "e2bat_wrong")];
            assert_refused(&call(&harness, &id, route, &wrong).await, 401, path);
            let wrong = [("e2b-traffic-access-token", "e2btt_wrong")];
            assert_refused(&call(&harness, &id, route, &wrong).await, 401, path);
            let unknown_key = [("x-api-key", nobody.as_str())];
            assert_refused(&call(&harness, &id, route, &unknown_key).await, 401, path);
            // (`/health` tells a sandbox it does not find as E2B's "not
            // running", 502.)
            let foreign = [("x-api-key", BETA)];
            let not_found = if path == "/health" { 502 } else { 404 };
            assert_refused(&call(&harness, &id, route, &foreign).await, not_found, path);
            // A right credential beside a wrong one is still refused.
            let mixed = [
                ("x-access-token", token.as_str()),
                ("x-api-key", nobody.as_str()),
            ];
            assert_refused(&call(&harness, &id, route, &mixed).await, 401, path);
        }
        // The access token, the project's key (either spelling) and, on the
        // contexts, the traffic token are let in.
        let list = (49999, "GET", "/contexts");
        for credentials in [
            vec![("x-access-token", token.as_str())],
            vec![("x-api-key", ALPHA)],
            vec![("authorization", "Bearer sg-test-alpha")],
            vec![("e2b-traffic-access-token", traffic.as_str())],
            vec![
                ("x-access-token", token.as_str()),
                ("e2b-traffic-access-token", traffic.as_str()),
            ],
        ] {
            let answer = call(&harness, &id, list, &credentials).await;
            assert_eq!(answer.status, 200, "{credentials:?}: {:?}", answer.json);
            assert_eq!(answer.json, json!([]));
        }
        let stat = (49983, "POST", "/filesystem.Filesystem/ListDir");
        for credentials in [
            vec![("x-access-token", token.as_str())],
            vec![("x-api-key", ALPHA)],
        ] {
            let answer = call(&harness, &id, stat, &credentials).await;
            assert!(
                answer.status != 401 && answer.status != 404,
                "{credentials:?}: {:?}",
                answer.json
            );
        }
    }

    #[tokio::test]
    async fn a_caller_without_credentials_never_wakes_a_paused_sandbox() {
        let harness = Harness::new();
        let (id, token, _) = create(
            &harness,
            json!({"templateID": "base", "autoPause": true, "autoResume": {"enabled": true}}),
        )
        .await;
        let info = harness.get(&format!("/sandboxes/{id}")).await;
        assert_eq!(
            info.ok()["lifecycle"]["autoResume"],
            true,
            "{:?}",
            info.json
        );
        let pause = harness
            .post(&format!("/sandboxes/{id}/pause"), json!({}))
            .await;
        assert_eq!(pause.status, 204);
        for &route in ROUTES {
            let (_, _, path) = route;
            assert_refused(&call(&harness, &id, route, &[]).await, 401, path);
        }
        assert!(!harness.backend.calls().contains(&Call::Start(id.clone())));
        let info = harness.get(&format!("/sandboxes/{id}")).await;
        assert_eq!(info.ok()["state"], "paused");
        // The owner's next call wakes it, as autoResume says.
        let list = (49999, "GET", "/contexts");
        let answer = call(&harness, &id, list, &[("x-access-token", &token)]).await;
        assert_eq!(answer.status, 200, "{:?}", answer.json);
        assert!(harness.backend.calls().contains(&Call::Start(id.clone())));
        assert_eq!(
            harness.get(&format!("/sandboxes/{id}")).await.ok()["state"],
            "running"
        );
    }
}
