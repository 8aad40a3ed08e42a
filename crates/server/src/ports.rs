//! A container's exposed ports reached through the server:
//! `ANY /v1/containers/{id}/ports/{port}/{*rest}` (the prefix stripped) and
//! host names `{port}-{id}.{ports_base_domain}` (the whole path forwarded),
//! proxied over HTTP/1.1 to `127.0.0.1:{port}` inside the container, with
//! upgrades (WebSockets) relayed both ways.
//!
//! The connection to the container is made by the engine from inside the
//! container's own network namespace (`SandboxBackend::connect_port`): the
//! container keeps no inbound interface, and what is reached is only ever
//! that container's loopback, never the host or another container.
//!
//! Who may: the container's project's API key, or the container's
//! `port_token` (header `x-shellgate-port-token`, query parameter
//! `shellgate_port_token`, or on the host form the cookie that parameter
//! sets). None of them reaches the container, nor does any `X-Forwarded-*`
//! header the client sent (the server writes its own). A port not exposed,
//! a container of another project (or one the token is not for), a deleted
//! one: 404. Nothing listening, or the container suspended: 502 (a request
//! to a port does not wake it).
//!
//! An E2B sandbox's ports follow E2B's rule on the host form (what the
//! SDK's `get_host()` names): every port, to anyone, unless its create said
//! `network.allowPublicTraffic: false`; then only with its traffic access
//! token (header `e2b-traffic-access-token`, never forwarded) or the
//! credentials above.
//!
//! The path form serves the container's pages from the server's own origin:
//! they are sandboxed there (`Content-Security-Policy: sandbox`, an opaque
//! origin), get none of the origin's cookies, and nothing of their answer
//! may act on that origin (`answer`). Browsers use the host form, each port
//! an origin of its own, whose cookies are kept to its own host.
//!
//! On an E2B sandbox's host form, envd's and the code interpreter's ports
//! (49983, 49999) are the in-sandbox API, as on E2B: the request goes to
//! `e2b::by_header` with the sandbox and port named (its credentials are
//! checked there), not to the container. SDKs that ignore
//! `E2B_SANDBOX_URL` call them so (`e2b-code-interpreter` before 2.9).
//!
//! A request with more than one `Host` is refused (400) before anything
//! reads it: which one a proxy in front honoured cannot be known.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use axum::http::{Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use shellgate_sandbox_api::{PortConnection, PortFailure, SandboxError};
use shellgate_store::ContainerRow;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

mod answer;

use crate::engine::engine_error;
use crate::error::{ApiError, ApiResult};
use crate::listener::ClientAddr;
use crate::public_base::{valid_authority, PublicBase};
use crate::state::AppState;
use shellgate_wire::ErrorCode;

/// The header a port token may come in.
pub const TOKEN_HEADER: &str = "x-shellgate-port-token";
/// The query parameter a port token may come in (for links and browsers).
pub const TOKEN_QUERY: &str = "shellgate_port_token";
/// The cookie the query parameter sets on the host form.
pub const TOKEN_COOKIE: &str = "shellgate_port_token";

/// What the path form's pages may do on the server's origin: run, but in an
/// opaque origin of their own (no access to anything of the server's).
const PATH_FORM_POLICY: &str =
    "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads";

/// Headers that belong to one connection, not to the request (RFC 9110
/// 7.6.1), and the proxy's own: never forwarded either way.
pub(crate) const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// What a proxied request is for.
struct Target {
    container_id: String,
    /// As written in the request (a port that does not parse is not exposed).
    port: String,
    /// The path and query the container is asked for (the token parameter
    /// still in; it is taken out when the request is built).
    path_and_query: String,
    /// The path form's prefix (`X-Forwarded-Prefix`); `None` on the host form.
    prefix: Option<String>,
    /// The path form's request path as the client wrote it (what a
    /// `Location` in the answer is resolved against).
    client_path: String,
}

/// `ANY /v1/containers/{id}/ports/{port}` (and `.../{port}/`): the
/// container's `/`.
pub async fn by_path_root(
    State(state): State<Arc<AppState>>,
    Path((container_id, port)): Path<(String, String)>,
    request: Request,
) -> Response {
    let query = request.uri().query().map(|q| format!("?{q}"));
    let path_and_query = format!("/{}", query.unwrap_or_default());
    path_form(state, container_id, port, path_and_query, request).await
}

/// `ANY /v1/containers/{id}/ports/{port}/{*rest}`: the container's `/{rest}`.
pub async fn by_path(
    State(state): State<Arc<AppState>>,
    Path((container_id, port, _rest)): Path<(String, String, String)>,
    request: Request,
) -> Response {
    // The rest as the client wrote it (percent-encoding kept), not as
    // axum decoded it.
    let original = request
        .extensions()
        .get::<axum::extract::OriginalUri>()
        .map(|o| o.0.clone())
        .unwrap_or_else(|| request.uri().clone());
    let marker = format!("/ports/{port}/");
    let path = original.path();
    let rest = path
        .find(&marker)
        .map_or("", |at| &path[at + marker.len()..]);
    let query = original
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    let path_and_query = format!("/{rest}{query}");
    path_form(state, container_id, port, path_and_query, request).await
}

async fn path_form(
    state: Arc<AppState>,
    container_id: String,
    port: String,
    path_and_query: String,
    request: Request,
) -> Response {
    let original = request
        .extensions()
        .get::<axum::extract::OriginalUri>()
        .map(|o| o.0.path().to_owned())
        .unwrap_or_else(|| request.uri().path().to_owned());
    let marker = format!("/ports/{port}");
    let prefix = original
        .find(&marker)
        .map(|at| original[..at + marker.len()].to_owned());
    let target = Target {
        container_id,
        port,
        path_and_query,
        prefix: Some(prefix.unwrap_or_default()),
        client_path: original,
    };
    proxy(state, target, request)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// The layer in front of the router: a request whose `Host` is exactly
/// `{port}-{id}.{ports_base_domain}` (any port of this server) goes to that
/// container's port, whole; every other request to the API.
pub async fn by_host(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    if request
        .headers()
        .get_all(header::HOST)
        .iter()
        .nth(1)
        .is_some()
    {
        return ApiError::bad_request(
            "The request has more than one Host header (RFC 9112, section 3.2).",
        )
        .into_response();
    }
    let Some((port, container_id)) =
        host_target(&state.config.server.ports_base_domain, request.headers())
    else {
        return next.run(request).await;
    };
    if let Some(named) = crate::in_sandbox::in_sandbox_port(&state, &container_id, &port).await {
        let mut request = request;
        request
            .headers_mut()
            .insert(shellgate_wire::e2b::SANDBOX_ID_HEADER, named.id);
        request
            .headers_mut()
            .insert(crate::in_sandbox::SANDBOX_PORT_HEADER, named.port);
        return next.run(request).await;
    }
    let path_and_query = request
        .uri()
        .path_and_query()
        .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned());
    let target = Target {
        container_id,
        port,
        path_and_query,
        prefix: None,
        client_path: String::new(),
    };
    proxy(state, target, request)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// `(port, container id)` of a `Host` of the form
/// `{port}-{id}.{base_domain}[:server port]`, if it is one.
fn host_target(base_domain: &str, headers: &HeaderMap) -> Option<(String, String)> {
    let host = headers.get(header::HOST)?.to_str().ok()?;
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
        _ => host,
    };
    let name = name.to_ascii_lowercase();
    let label = name.strip_suffix(&format!(".{}", base_domain.to_ascii_lowercase()))?;
    let (port, id) = label.split_once('-')?;
    let port_ok = !port.is_empty() && port.len() <= 5 && port.chars().all(|c| c.is_ascii_digit());
    let id_ok = shellgate_sandbox_api::backend::validate_container_id(id).is_ok()
        && id.starts_with("cntr_")
        && !id.contains('.');
    (port_ok && id_ok).then(|| (port.to_owned(), id.to_owned()))
}

/// The credentials a request brings for a port.
#[derive(Debug, Default)]
struct Credentials {
    /// A Bearer key (or `x-api-key`), whatever it is worth.
    key: Option<String>,
    token: Option<String>,
    /// Whether the token came as the query parameter (the host form then
    /// sets the cookie).
    token_in_query: bool,
}

impl Credentials {
    fn of(headers: &HeaderMap, uri_query: Option<&str>) -> Self {
        let key = headers
            .get(header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.strip_prefix("Bearer "))
            .or_else(|| headers.get("x-api-key").and_then(|h| h.to_str().ok()))
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .map(str::to_owned);
        let from_header = headers
            .get(TOKEN_HEADER)
            .and_then(|h| h.to_str().ok())
            .map(str::to_owned);
        let from_query = uri_query.and_then(|q| {
            form_pairs(q)
                .find(|(name, _)| name == TOKEN_QUERY)
                .map(|(_, value)| value)
        });
        let from_cookie = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|h| h.to_str().ok())
            .flat_map(|h| h.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(name, _)| *name == TOKEN_COOKIE)
            .map(|(_, value)| value.to_owned());
        let token_in_query = from_header.is_none() && from_query.is_some();
        Self {
            key,
            token: from_header.or(from_query).or(from_cookie),
            token_in_query,
        }
    }

    fn any(&self) -> bool {
        self.key.is_some() || self.token.is_some()
    }
}

/// The `name=value` pairs of a query, decoded (`+` as a space).
fn form_pairs(query: &str) -> impl Iterator<Item = (String, String)> + '_ {
    query.split('&').filter(|p| !p.is_empty()).map(|pair| {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        (percent_decode(name), percent_decode(value))
    })
}

fn percent_decode(text: &str) -> String {
    let hex = |byte: u8| (byte as char).to_digit(16);
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = match bytes.get(i..i + 3) {
            Some([b'%', high, low]) => hex(*high).zip(hex(*low)).map(|(h, l)| (h * 16 + l) as u8),
            _ => None,
        };
        match (escaped, bytes[i]) {
            (Some(byte), _) => {
                out.push(byte);
                i += 3;
            }
            (None, b'+') => {
                out.push(b' ');
                i += 1;
            }
            (None, other) => {
                out.push(other);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Equal, in time that does not depend on where they differ.
fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |diff, (x, y)| diff | (x ^ y))
            == 0
}

/// The container a request's credentials open, or why not.
async fn authorize(
    state: &Arc<AppState>,
    container_id: &str,
    credentials: &Credentials,
    client: Option<std::net::IpAddr>,
) -> ApiResult<ContainerRow> {
    if !credentials.any() {
        return Err(ApiError::unauthorized(format!(
            "A container's port needs the project's API key ('Authorization: Bearer YOUR_KEY') \
             or the container's port token ('{TOKEN_HEADER}' header or '{TOKEN_QUERY}' query \
             parameter)."
        )));
    }
    let project = match &credentials.key {
        // An unknown key is no project here (a port token may still open it).
        Some(key) => match crate::http::key_grant(state, key, client).await {
            Ok(grant) => Some(grant.project),
            Err(error) if error.status() == StatusCode::UNAUTHORIZED => None,
            Err(error) => return Err(error),
        },
        None => None,
    };
    if credentials.key.is_some() && project.is_none() && credentials.token.is_none() {
        return Err(ApiError::unauthorized("Incorrect API key provided."));
    }
    let id = container_id.to_owned();
    let row = state.db(move |s| s.container_by_id(&id)).await?;
    let not_found = || ApiError::not_found("container", container_id);
    let row = row.ok_or_else(not_found)?;
    let by_key = project.as_deref() == Some(row.project.as_str());
    let by_token = match (&credentials.token, &row.port_token) {
        (Some(given), Some(token)) => same_secret(given, token),
        _ => false,
    };
    if by_key {
        state.limiter.check(&row.project)?;
    }
    if !(by_key || by_token) || row.status == shellgate_store::ContainerStatus::Creating {
        return Err(not_found());
    }
    Ok(row)
}

/// A port's errors in the API's terms.
fn port_error(container_id: &str, error: SandboxError) -> ApiError {
    match error {
        SandboxError::Port {
            failure: PortFailure::TooManyConnections { .. },
            ..
        } => ApiError::quota(ErrorCode::TooManyPortConnections, error.to_string()),
        SandboxError::Port { .. } => ApiError::of(ErrorCode::PortNotListening, error.to_string()),
        SandboxError::Deleted(_) => ApiError::not_found("container", container_id),
        other => engine_error(container_id, other),
    }
}

fn bad_gateway(message: String) -> ApiError {
    ApiError::of(ErrorCode::BadGateway, message)
}

fn wants_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|h| h.to_str().ok())
            .flat_map(|h| h.split(','))
            .any(|token| token.trim().eq_ignore_ascii_case("upgrade"))
}

/// The headers named by `Connection` (themselves hop-by-hop).
fn connection_named(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|h| h.to_str().ok())
        .flat_map(|h| h.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect()
}

/// The request's headers as the container gets them: hop-by-hop ones,
/// credentials and forwarded claims the client made removed; the token
/// cookie taken out of `Cookie`, and on the path form `Cookie` itself (the
/// cookies a browser sends there are the server's origin's, the console's
/// session among them: the container can set none there).
fn forwarded_headers(headers: &HeaderMap, path_form: bool) -> HeaderMap {
    let named = connection_named(headers);
    let mut out = HeaderMap::with_capacity(headers.len() + 4);
    for (name, value) in headers {
        let lower = name.as_str();
        let dropped = HOP_BY_HOP.contains(&lower)
            || named.iter().any(|n| n == lower)
            || lower == "authorization"
            || lower == "x-api-key"
            || lower == TOKEN_HEADER
            || lower == E2B_TRAFFIC_TOKEN_HEADER
            // Answered by this server already (hyper sends the `100
            // Continue` when the body is first read).
            || lower == "expect"
            || lower == "forwarded"
            || lower.starts_with("x-forwarded-");
        if dropped {
            continue;
        }
        if name == header::COOKIE && path_form {
            continue;
        }
        if name == header::COOKIE {
            let kept: Vec<&str> = value
                .to_str()
                .unwrap_or("")
                .split(';')
                .map(str::trim)
                .filter(|pair| {
                    !pair.is_empty()
                        && pair.split_once('=').map_or(*pair, |(n, _)| n) != TOKEN_COOKIE
                })
                .collect();
            if let Ok(value) = HeaderValue::from_str(&kept.join("; ")) {
                if !kept.is_empty() {
                    out.append(header::COOKIE, value);
                }
            }
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}

/// The path and query without the token parameter.
fn without_token(path_and_query: &str) -> String {
    let Some((path, query)) = path_and_query.split_once('?') else {
        return path_and_query.to_owned();
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| {
            let name = pair.split_once('=').map_or(*pair, |(n, _)| n);
            !pair.is_empty() && percent_decode(name) != TOKEN_QUERY
        })
        .collect();
    if kept.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{}", kept.join("&"))
    }
}

/// The header E2B's clients send a private sandbox's traffic access token in.
pub const E2B_TRAFFIC_TOKEN_HEADER: &str = "e2b-traffic-access-token";

/// Whether an E2B sandbox's ports let a request in, by E2B's rule: every
/// port, to anyone, unless its create said `allowPublicTraffic: false`;
/// then to a request with its traffic access token (or shellgate's own
/// credentials of the container). `None`: not an E2B sandbox.
async fn e2b_ports(
    state: &Arc<AppState>,
    container_id: &str,
    headers: &HeaderMap,
) -> ApiResult<Option<E2bPorts>> {
    let id = container_id.to_owned();
    let Some(sandbox) = state.db(move |s| s.e2b_sandbox_by_id(&id)).await? else {
        return Ok(None);
    };
    let token = headers
        .get(E2B_TRAFFIC_TOKEN_HEADER)
        .and_then(|h| h.to_str().ok())
        .map(str::trim);
    let expected = crate::auth::e2b_traffic_token(&sandbox.access_token);
    if !sandbox.public_traffic && !token.is_some_and(|token| same_secret(token, &expected)) {
        return Ok(Some(E2bPorts::Private));
    }
    let id = container_id.to_owned();
    let row = state.db(move |s| s.container_by_id(&id)).await?;
    match row {
        Some(row) if row.status != shellgate_store::ContainerStatus::Creating => {
            Ok(Some(E2bPorts::Open(Box::new(row))))
        }
        _ => Err(ApiError::not_found("container", container_id)),
    }
}

/// What [`e2b_ports`] found of an E2B sandbox.
enum E2bPorts {
    /// Open: every port of this container.
    Open(Box<ContainerRow>),
    /// Its traffic is private and the request has not its token.
    Private,
}

async fn proxy(state: Arc<AppState>, target: Target, mut request: Request) -> ApiResult<Response> {
    let credentials = Credentials::of(request.headers(), request.uri().query());
    let client = request.extensions().get::<ClientAddr>().map(|a| a.0.ip());
    // E2B's sandboxes are reached by host name, as `get_host()` gives it.
    let e2b = match target.prefix {
        None => e2b_ports(&state, &target.container_id, request.headers()).await?,
        Some(_) => None,
    };
    let (row, every_port) = match e2b {
        Some(E2bPorts::Open(row)) => (*row, true),
        Some(E2bPorts::Private) if !credentials.any() => {
            return Err(ApiError::unauthorized(format!(
                "This sandbox's traffic is private: its ports need its traffic access token \
                 (header '{E2B_TRAFFIC_TOKEN_HEADER}', the create's trafficAccessToken)."
            )))
        }
        Some(E2bPorts::Private) => (
            authorize(&state, &target.container_id, &credentials, client).await?,
            true,
        ),
        None => (
            authorize(&state, &target.container_id, &credentials, client).await?,
            false,
        ),
    };
    let not_exposed = || {
        let mut error = ApiError::not_found("exposed port", &target.port);
        error.message = format!(
            "Container '{}' has no exposed port {}: ports are exposed at create (exposed_ports).",
            target.container_id, target.port
        );
        error
    };
    let port: u16 = target.port.parse().map_err(|_| not_exposed())?;
    if !every_port && !row.exposed_ports.contains(&port) {
        return Err(not_exposed());
    }
    let connection = state
        .engine
        .connect_port(&row.id, port)
        .await
        .map_err(|e| port_error(&row.id, e))?;
    // Traffic to a port is activity: its expiry is renewed (no command
    // time is billed).
    state.billing.bill(&row.id, 0.0);
    let idle = Duration::from_secs(state.config.server.ports_idle_timeout_secs);
    let io = TokioIo::new(IdleTimeout::new(connection, idle));
    let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
        .handshake::<_, Body>(io)
        .await
        .map_err(|e| bad_gateway(format!("could not talk HTTP to port {port}: {e}")))?;
    tokio::spawn(async move {
        // Ends when the exchange (or the upgraded relay's handover) is done.
        let _ = connection.with_upgrades().await;
    });

    let upgrade = wants_upgrade(request.headers());
    let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut request));
    let client_addr = request.extensions().get::<ClientAddr>().map(|a| a.0);
    let (parts, body) = request.into_parts();
    let mut headers = forwarded_headers(&parts.headers, target.prefix.is_some());
    if upgrade {
        if let Some(protocol) = parts.headers.get(header::UPGRADE) {
            headers.insert(header::UPGRADE, protocol.clone());
            headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        }
    }
    let scheme = PublicBase::of(&state, &parts.headers).scheme;
    if let Some(addr) = client_addr {
        if let Ok(value) = HeaderValue::from_str(&addr.ip().to_string()) {
            headers.insert(HeaderName::from_static("x-forwarded-for"), value);
        }
    }
    if let Ok(value) = HeaderValue::from_str(&scheme) {
        headers.insert(HeaderName::from_static("x-forwarded-proto"), value);
    }
    if let Some(host) = parts.headers.get(header::HOST) {
        headers.insert(HeaderName::from_static("x-forwarded-host"), host.clone());
    }
    if let Some(prefix) = &target.prefix {
        if let Ok(value) = HeaderValue::from_str(prefix) {
            headers.insert(HeaderName::from_static("x-forwarded-prefix"), value);
        }
    }
    if !headers.contains_key(header::HOST) {
        if let Ok(value) = HeaderValue::from_str(&format!("127.0.0.1:{port}")) {
            headers.insert(header::HOST, value);
        }
    }
    let uri: Uri = without_token(&target.path_and_query)
        .parse()
        .map_err(|_| ApiError::bad_request("The request's path cannot be forwarded."))?;
    let mut outgoing = hyper::Request::new(body);
    *outgoing.method_mut() = parts.method.clone();
    *outgoing.uri_mut() = uri;
    *outgoing.headers_mut() = headers;

    let mut answer = sender.send_request(outgoing).await.map_err(|e| {
        bad_gateway(format!(
            "port {port} of the container did not answer with HTTP: {e}"
        ))
    })?;
    let switching = answer.status() == StatusCode::SWITCHING_PROTOCOLS;
    if switching {
        let Some(client_upgrade) = client_upgrade else {
            return Err(bad_gateway(format!(
                "port {port} switched protocols on a request that did not ask to"
            )));
        };
        let container_upgrade = hyper::upgrade::on(&mut answer);
        tokio::spawn(async move {
            let (Ok(client), Ok(container)) = tokio::join!(client_upgrade, container_upgrade)
            else {
                return;
            };
            let mut client = TokioIo::new(client);
            let mut container = TokioIo::new(container);
            // The container's connection (with its idle timeout and its
            // place in the container's count) lives until either side ends.
            let _ = tokio::io::copy_bidirectional(&mut client, &mut container).await;
        });
    }
    let (mut answer_parts, answer_body) = answer.into_parts();
    let named = connection_named(&answer_parts.headers);
    let protocol = answer_parts.headers.get(header::UPGRADE).cloned();
    let kept: Vec<HeaderName> = answer_parts
        .headers
        .keys()
        .filter(|name| {
            let lower = name.as_str();
            !HOP_BY_HOP.contains(&lower) && !named.iter().any(|n| n == lower)
        })
        .cloned()
        .collect();
    let mut headers = HeaderMap::with_capacity(kept.len() + 3);
    for name in kept {
        for value in answer_parts.headers.get_all(&name) {
            headers.append(name.clone(), value.clone());
        }
    }
    if switching {
        if let Some(protocol) = protocol {
            headers.insert(header::UPGRADE, protocol);
            headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        }
    }
    match &target.prefix {
        Some(prefix) => {
            // The server's origin is not the container's to act on.
            let authority = parts
                .headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .filter(|h| valid_authority(h))
                .unwrap_or("localhost");
            let request_url =
                url::Url::parse(&format!("{scheme}://{authority}{}", target.client_path)).ok();
            answer::path_form(
                &mut headers,
                &answer::PathForm {
                    request_url: request_url.as_ref(),
                    prefix,
                },
            );
            headers.insert(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(PATH_FORM_POLICY),
            );
        }
        None => {
            answer::host_form(&mut headers, TOKEN_COOKIE);
            if credentials.token_in_query {
                if let Some(token) = &credentials.token {
                    let cookie = format!("{TOKEN_COOKIE}={token}; Path=/; HttpOnly; SameSite=Lax");
                    if let Ok(value) = HeaderValue::from_str(&cookie) {
                        headers.append(header::SET_COOKIE, value);
                    }
                }
            }
        }
    }
    answer_parts.headers = headers;
    let body = if parts.method == Method::HEAD {
        Body::empty()
    } else {
        Body::new(answer_body)
    };
    Ok(Response::from_parts(answer_parts, body))
}

/// A port connection closed after `idle` without a byte either way
/// (waiting for the container's answer counts as silence).
struct IdleTimeout {
    inner: PortConnection,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl IdleTimeout {
    fn new(inner: PortConnection, idle: Duration) -> Self {
        Self {
            inner,
            idle,
            deadline: Box::pin(tokio::time::sleep(idle)),
        }
    }

    fn active(&mut self) {
        let next = Instant::now() + self.idle;
        self.deadline.as_mut().reset(next);
    }

    /// On a pending operation: whether the silence has lasted too long.
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        self.deadline.as_mut().poll(cx).is_ready()
    }

    fn timed_out() -> std::io::Error {
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the port connection was idle too long",
        )
    }
}

impl AsyncRead for IdleTimeout {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                this.active();
                Poll::Ready(result)
            }
            Poll::Pending if this.expired(cx) => Poll::Ready(Err(Self::timed_out())),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncWrite for IdleTimeout {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Ready(result) => {
                this.active();
                Poll::Ready(result)
            }
            Poll::Pending if this.expired(cx) => Poll::Ready(Err(Self::timed_out())),
            Poll::Pending => Poll::Pending,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn only_a_host_of_the_exact_shape_is_a_port() {
        let id = "cntr_0123456789abcdef0123456789abcdef";
        let of = |host: &str| host_target("localhost", &headers(&[("host", host)]));
        assert_eq!(
            of(&format!("8000-{id}.localhost:8080")),
            Some(("8000".into(), id.into()))
        );
        assert_eq!(
            of(&format!("8000-{id}.LOCALHOST")),
            Some(("8000".into(), id.into()))
        );
        for host in [
            "localhost:8080".to_owned(),
            "127.0.0.1:8080".to_owned(),
            format!("{id}.localhost"),
            format!("8000-{id}.example.com"),
            format!("x8000-{id}.localhost"),
            format!("8000-{id}.evil.localhost"),
            "8000-cntr_x/y.localhost".to_owned(),
            format!("123456-{id}.localhost"),
            "8000-file_abc.localhost".to_owned(),
        ] {
            assert_eq!(of(&host), None, "{host}");
        }
        assert_eq!(host_target("localhost", &HeaderMap::new()), None);
    }

    #[test]
    fn credentials_and_forwarded_claims_never_reach_the_container() {
        let given = headers(&[
            ("authorization", "Bearer sg-key"),
            ("x-api-key", "sg-key"),
            (TOKEN_HEADER, "sgpt_1"),
            ("cookie", "a=1; shellgate_port_token=sgpt_1; b=2"),
            ("x-forwarded-for", "6.6.6.6"),
            ("forwarded", "for=6.6.6.6"),
            ("connection", "keep-alive, x-secret"),
            ("x-secret", "hop"),
            ("transfer-encoding", "chunked"),
            ("accept", "text/html"),
            ("host", "localhost:8080"),
        ]);
        let out = forwarded_headers(&given, false);
        let names: Vec<&str> = out.keys().map(|n| n.as_str()).collect();
        assert_eq!(names, ["cookie", "accept", "host"], "{out:?}");
        assert_eq!(out[header::COOKIE], "a=1; b=2");
        let only_token = headers(&[("cookie", "shellgate_port_token=sgpt_1")]);
        assert!(forwarded_headers(&only_token, false).is_empty());
        // On the path form no cookie is the container's.
        let names: Vec<String> = forwarded_headers(&given, true)
            .keys()
            .map(|n| n.to_string())
            .collect();
        assert_eq!(names, ["accept", "host"]);
    }

    #[test]
    fn the_token_parameter_is_taken_out_of_the_query() {
        assert_eq!(without_token("/a?shellgate_port_token=t"), "/a");
        assert_eq!(
            without_token("/a?x=1&shellgate_port_token=t&y=2"),
            "/a?x=1&y=2"
        );
        assert_eq!(without_token("/a?shellgate%5Fport%5Ftoken=t&y"), "/a?y");
        assert_eq!(without_token("/a?x=%20"), "/a?x=%20");
        assert_eq!(without_token("/a"), "/a");
        let credentials =
            Credentials::of(&HeaderMap::new(), Some("x=1&shellgate_port_token=t%2B1"));
        assert_eq!(credentials.token.as_deref(), Some("t+1"));
        assert!(credentials.token_in_query);
    }
}
