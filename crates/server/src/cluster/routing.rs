//! Where an API replica sends a request: to the node of the container it
//! names (by path, read with the node's own URL grammar, by E2B's
//! `E2b-Sandbox-Id` header, a Gemini request's `x-shellgate-container`, or
//! by a port's host name) or a model request
//! continues, to the node of the volume it names, to a node placement
//! picks (a create), or to any live node (everything else: the store is
//! shared).

use axum::http::{HeaderMap, Method};

use crate::route_grammar::{self, Grammar, NodeRoutes};

/// What a request asks of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// It concerns this container (or E2B sandbox).
    Container(String),
    /// It concerns this stored response (its live events and its cancel
    /// are held by the node that runs it).
    Response(String),
    /// It concerns this volume (its directory is on one node's disk).
    Volume(String),
    /// It makes a volume: on the node holding the project's others, so a
    /// container can mount any of them together.
    NewVolume,
    /// It makes a new container (or E2B sandbox).
    Create,
    /// A model request of this API: the container it continues
    /// (`sandboxes::reuse`, read from its typed body) says where it runs.
    ModelRequest(ModelApi),
    /// Any node can answer it.
    Any,
}

/// The model APIs whose requests may continue a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ModelApi {
    Responses,
    Messages,
    /// Chat Completions: it runs no hosted tool, so it continues none.
    Chat,
}

/// The model APIs' routes, by how their paths end.
const MODEL_ROUTES: &[(&str, ModelApi)] = &[
    (route_grammar::RESPONSES, ModelApi::Responses),
    (route_grammar::MESSAGES, ModelApi::Messages),
    (route_grammar::CHAT_COMPLETIONS, ModelApi::Chat),
];

/// The URL grammar a replica routes by: the node's router's own table
/// (the tenants' API, the console's views and its forward of the API) and
/// the node's own routes, read once when the replica starts.
pub(crate) struct Routes {
    grammar: Grammar,
    node_only: NodeRoutes,
}

impl Routes {
    pub(crate) fn new(config: &crate::config::Config) -> Self {
        let api = crate::routes::route_table(config, crate::routes::Audience::Tenants).paths;
        let console = crate::console::table().paths;
        // The console's forward serves the API's `/v1` routes below it.
        let forwarded: Vec<String> = api
            .iter()
            .filter_map(|path| path.strip_prefix("/v1/"))
            .map(|rest| format!("{}/{rest}", crate::console::API_FORWARD))
            .collect();
        Self {
            grammar: Grammar::new(api.iter().chain(&console).chain(&forwarded)),
            node_only: NodeRoutes::new(&super::node::OPERATOR_ROUTES),
        }
    }

    /// Whether `path`, in any spelling, reaches one of a node's own routes
    /// (`/internal/...`, `/metrics`): a replica never forwards them (and a
    /// node would not serve them to a forwarded request either).
    pub(crate) fn node_only(&self, path: &str) -> bool {
        self.node_only.reached_by(path)
    }

    /// Where `method path` with `headers` goes; `ports_base_domain` is the
    /// domain under which `{port}-{id}.{domain}` names a container's port.
    pub(crate) fn target(
        &self,
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
        // A Gemini request's code runs in the container it names
        // (shellgate's extension header).
        if let Some(id) = headers
            .get(shellgate_wire::gemini::CONTAINER_HEADER)
            .and_then(|value| value.to_str().ok())
            .map(str::trim)
            .filter(|id| !id.is_empty())
        {
            return Target::Container(id.to_owned());
        }
        if let Some(id) = port_host(headers, ports_base_domain) {
            return Target::Container(id);
        }
        let Some((route, captures)) = self.grammar.route(path) else {
            return Target::Any;
        };
        if let Some(id) = captures.container() {
            return Target::Container(id.to_owned());
        }
        if let Some(id) = captures.response() {
            return Target::Response(id.to_owned());
        }
        if let Some(id) = captures.volume() {
            return Target::Volume(id.to_owned());
        }
        if method != Method::POST {
            return Target::Any;
        }
        if route.path().ends_with(route_grammar::VOLUMES) {
            return Target::NewVolume;
        }
        if self.grammar.holds_containers(route) {
            return Target::Create;
        }
        MODEL_ROUTES
            .iter()
            .find(|(suffix, _)| route.path().ends_with(suffix))
            .map_or(Target::Any, |(_, api)| Target::ModelRequest(*api))
    }

    /// The container whose object itself (the API's or E2B's, not the
    /// console's view of it) `path` names.
    pub(crate) fn container_object(&self, path: &str) -> Option<String> {
        let (route, captures) = self.grammar.route(path)?;
        (route.ends_with_container() && !route.path().starts_with("/console/"))
            .then(|| captures.container().map(str::to_owned))
            .flatten()
    }
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

    fn routes() -> Routes {
        Routes::new(&crate::config::Config::default())
    }

    fn target(method: &Method, path: &str, headers: &HeaderMap, domain: &str) -> Target {
        routes().target(method, path, headers, domain)
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
            (
                Method::POST,
                "/v1/responses",
                Target::ModelRequest(ModelApi::Responses),
            ),
            (
                Method::POST,
                "/v1/messages",
                Target::ModelRequest(ModelApi::Messages),
            ),
            (
                Method::POST,
                "/api/v1/chat/completions",
                Target::ModelRequest(ModelApi::Chat),
            ),
            (Method::GET, "/v1/responses", Target::Any),
            (
                Method::POST,
                "/v1/responses/resp_1/cancel",
                Target::Response("resp_1".into()),
            ),
            (Method::POST, "/v1/files", Target::Any),
            // A count, not a response: any node answers it.
            (Method::POST, "/v1/responses/input_tokens", Target::Any),
            (Method::GET, "/healthz", Target::Any),
            (
                Method::DELETE,
                "/v1/volumes/vol_a",
                Target::Volume("vol_a".into()),
            ),
            (
                Method::DELETE,
                "/volumes/vol_b",
                Target::Volume("vol_b".into()),
            ),
            (
                Method::PUT,
                "/volumecontent/vol_c/file",
                Target::Volume("vol_c".into()),
            ),
            (Method::POST, "/v1/volumes", Target::NewVolume),
            (Method::POST, "/volumes", Target::NewVolume),
            (Method::GET, "/volumes", Target::Any),
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
    fn every_route_of_a_container_or_a_response_is_routed_to_it() {
        let routes = routes();
        let config = crate::config::Config::default();
        let api = crate::routes::route_table(&config, crate::routes::Audience::Tenants).paths;
        let console = crate::console::table().paths;
        let mut containers = 0;
        for path in api.iter().chain(&console) {
            let concrete = path
                .replace("{container_id}", "cntr_x")
                .replace("{sandbox_id}", "cntr_x")
                .replace("{response_id}", "resp_x")
                .replace("{*path}", "a/b")
                .replace("{*rest}", "a/b");
            let concrete = concrete
                .split('/')
                .map(|segment| {
                    if segment.starts_with('{') {
                        "p"
                    } else {
                        segment
                    }
                })
                .collect::<Vec<_>>()
                .join("/");
            let expected = if path.contains("{container_id}") || path.contains("{sandbox_id}") {
                containers += 1;
                Target::Container("cntr_x".into())
            } else if path.contains("{response_id}") {
                Target::Response("resp_x".into())
            } else {
                continue;
            };
            assert_eq!(
                routes.target(&Method::GET, &concrete, &HeaderMap::new(), ""),
                expected,
                "{path}"
            );
        }
        assert!(containers > 20, "{containers} container routes");
        // The console's forward of the API too.
        assert_eq!(
            routes.target(
                &Method::POST,
                "/console/api/v1/containers/cntr_y/exec",
                &HeaderMap::new(),
                ""
            ),
            Target::Container("cntr_y".into())
        );
        assert_eq!(
            routes.container_object("/v1/containers/cntr_z").as_deref(),
            Some("cntr_z")
        );
        assert_eq!(routes.container_object("/v1/containers/cntr_z/exec"), None);
        assert_eq!(
            routes.container_object("/console/api/containers/cntr_z"),
            None
        );
    }
}
