//! Where an API replica sends a request: to the node of the container it
//! names (by path, by E2B's `E2b-Sandbox-Id` header, by a port's host
//! name, or inside a model request's body), to a node placement picks (a
//! create), or to any live node (everything else: the store is shared).

use axum::http::{HeaderMap, Method};

/// What a request asks of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// It concerns this container (or E2B sandbox).
    Container(String),
    /// It concerns this stored response (its live events and its cancel
    /// are held by the node that runs it).
    Response(String),
    /// It makes a new container (or E2B sandbox).
    Create,
    /// A model request: the containers its body names say where it runs.
    ModelRequest,
    /// Any node can answer it.
    Any,
}

/// The API prefixes a container path may come under: the API, OpenRouter's
/// base, the web console's forward of the API and its own views, and
/// E2B's second version (`/v2/sandboxes`: the SDK's create, list, connect).
const PREFIXES: &[&str] = &["/console/api/v1", "/console/api", "/api/v1", "/v1", "/v2"];

/// The model APIs, whose requests may name containers in their bodies.
const MODEL_PATHS: &[&str] = &["/responses", "/messages", "/chat/completions"];

/// Where `method path` with `headers` goes; `ports_base_domain` is the
/// domain under which `{port}-{id}.{domain}` names a container's port.
pub(crate) fn target(
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    ports_base_domain: &str,
) -> Target {
    if let Some(id) = headers
        .get("e2b-sandbox-id")
        .and_then(|value| value.to_str().ok())
        .filter(|id| !id.is_empty())
    {
        return Target::Container(id.to_owned());
    }
    if let Some(id) = port_host(headers, ports_base_domain) {
        return Target::Container(id);
    }
    let rest = PREFIXES
        .iter()
        .find_map(|prefix| path.strip_prefix(prefix).filter(|r| r.starts_with('/')))
        .unwrap_or(path);
    let mut segments = rest.trim_start_matches('/').split('/');
    let first = segments.next().unwrap_or_default();
    let second = segments.next();
    match (first, second) {
        ("containers" | "sandboxes", Some(id)) if !id.is_empty() => Target::Container(segment(id)),
        ("containers" | "sandboxes", None) if method == Method::POST => Target::Create,
        ("responses", Some(id)) if !id.is_empty() => Target::Response(segment(id)),
        _ if method == Method::POST && MODEL_PATHS.contains(&rest) => Target::ModelRequest,
        _ => Target::Any,
    }
}

/// A path segment as the node's router reads it into a path parameter:
/// percent-decoded (`cntr%5Fa` is `cntr_a` there, so it is here too).
fn segment(raw: &str) -> String {
    String::from_utf8_lossy(&crate::canonical::decoded(raw.as_bytes())).into_owned()
}

/// The container a port's host name names (`{port}-{id}.{domain}`).
fn port_host(headers: &HeaderMap, domain: &str) -> Option<String> {
    if domain.is_empty() {
        return None;
    }
    let host = headers.get("host")?.to_str().ok()?;
    let host = host.split(':').next()?;
    let label = host.strip_suffix(domain)?.strip_suffix('.')?;
    let (port, id) = label.split_once('-')?;
    (port.parse::<u16>().is_ok() && !id.is_empty() && !id.contains('.')).then(|| id.to_owned())
}

/// The container ids a model request's body names (its `container`
/// references, a shell call's container), at most `limit`, in order.
pub(crate) fn container_ids(body: &[u8], limit: usize) -> Vec<String> {
    const PREFIX: &[u8] = b"cntr_";
    let mut ids: Vec<String> = Vec::new();
    let mut at = 0;
    while ids.len() < limit {
        let Some(found) = body[at..]
            .windows(PREFIX.len())
            .position(|window| window == PREFIX)
        else {
            break;
        };
        let start = at + found;
        let end = body[start + PREFIX.len()..]
            .iter()
            .position(|b| !(b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-'))
            .map_or(body.len(), |n| start + PREFIX.len() + n);
        if end > start + PREFIX.len() {
            let id = String::from_utf8_lossy(&body[start..end]).into_owned();
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        at = end;
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn requests_go_to_their_containers_node() {
        let none = HeaderMap::new();
        let cases = [
            (
                Method::GET,
                "/v1/containers/cntr_a/files",
                Target::Container("cntr_a".into()),
            ),
            (
                Method::POST,
                "/api/v1/containers/cntr_b/exec",
                Target::Container("cntr_b".into()),
            ),
            (
                Method::GET,
                "/console/api/containers/cntr_c/output",
                Target::Container("cntr_c".into()),
            ),
            (
                Method::DELETE,
                "/sandboxes/cntr_d",
                Target::Container("cntr_d".into()),
            ),
            (Method::POST, "/v1/containers", Target::Create),
            (Method::POST, "/sandboxes", Target::Create),
            (Method::POST, "/v2/sandboxes", Target::Create),
            (
                Method::POST,
                "/v2/sandboxes/cntr_g/connect",
                Target::Container("cntr_g".into()),
            ),
            (Method::GET, "/v2/sandboxes", Target::Any),
            (Method::GET, "/v1/containers", Target::Any),
            (Method::POST, "/v1/responses", Target::ModelRequest),
            (
                Method::POST,
                "/api/v1/chat/completions",
                Target::ModelRequest,
            ),
            (Method::GET, "/v1/responses", Target::Any),
            (
                Method::POST,
                "/v1/responses/resp_1/cancel",
                Target::Response("resp_1".into()),
            ),
            (Method::POST, "/v1/files", Target::Any),
            (Method::GET, "/healthz", Target::Any),
            (
                Method::POST,
                "/v1/containers/cntr%5Fh/exec",
                Target::Container("cntr_h".into()),
            ),
            (
                Method::GET,
                "/v1/responses/resp%5F2",
                Target::Response("resp_2".into()),
            ),
        ];
        for (method, path, expected) in cases {
            assert_eq!(
                target(&method, path, &none, "ports.example"),
                expected,
                "{path}"
            );
        }
        let envd = headers(&[("e2b-sandbox-id", "cntr_e")]);
        assert_eq!(
            target(&Method::POST, "/process.Process/Start", &envd, ""),
            Target::Container("cntr_e".into())
        );
        let port = headers(&[("host", "8000-cntr_f.ports.example:8080")]);
        assert_eq!(
            target(&Method::GET, "/", &port, "ports.example"),
            Target::Container("cntr_f".into())
        );
        let other = headers(&[("host", "api.example")]);
        assert_eq!(
            target(&Method::GET, "/", &other, "ports.example"),
            Target::Any
        );
    }

    #[test]
    fn a_model_requests_containers_are_found_in_its_body() {
        let body = br#"{"tools":[{"type":"shell","environment":{"type":"container_reference","container_id":"cntr_abc123"}}],"input":"cntr_abc123 and cntr_x9"}"#;
        assert_eq!(container_ids(body, 8), vec!["cntr_abc123", "cntr_x9"]);
        assert_eq!(container_ids(body, 1), vec!["cntr_abc123"]);
        assert!(container_ids(b"cntr_ {}", 8).is_empty());
    }
}
