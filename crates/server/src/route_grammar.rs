//! The URL grammar, once: every route's path as a typed [`Pattern`]
//! (`/containers/{container_id}/exec` is a literal, a parameter, a
//! literal), read from the paths the router's [`RouteTable`] records as it
//! is built. A cluster's replica reads a request's path with the same
//! patterns, so what it decides a path names (a container, a stored
//! response, a create, a model request) is what the node's router will
//! serve, and a route added to the router is routed by the replica with
//! no second list to keep.
//!
//! [`RouteTable`]: crate::route_table::RouteTable

use std::collections::HashMap;

/// The path parameters that name a container: the API's and E2B's.
pub(crate) const CONTAINER_PARAMS: &[&str] = &["container_id", "sandbox_id"];

/// The path parameter that names a stored response.
pub(crate) const RESPONSE_PARAM: &str = "response_id";

/// The path parameter that names a volume (the API's and E2B's).
pub(crate) const VOLUME_PARAM: &str = "volume_id";

/// The model APIs' routes (under the API's mounts).
pub(crate) const RESPONSES: &str = "/responses";
pub(crate) const MESSAGES: &str = "/messages";
pub(crate) const CHAT_COMPLETIONS: &str = "/chat/completions";
/// Where volumes are made (the API's `/v1/volumes`, E2B's `/volumes`).
pub(crate) const VOLUMES: &str = "/volumes";

/// One segment of a route's path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// Matched byte for byte (the router matches the path as received).
    Literal(String),
    /// `{name}`: any one non-empty segment.
    Param(String),
    /// `{*name}`: the rest of the path.
    Rest,
}

/// A route's path, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pattern {
    path: String,
    segments: Vec<Segment>,
    /// How specific it is, segment by segment (a literal before a
    /// parameter before the rest), as the router prefers among routes a
    /// path matches; read once, as every request compares it.
    rank: Vec<u8>,
}

/// The parameters a path gave a pattern, percent-decoded as the router
/// decodes them into path parameters (`cntr%5Fa` is `cntr_a`).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Captures(Vec<(String, String)>);

impl Captures {
    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(param, _)| param == name)
            .map(|(_, value)| value.as_str())
    }

    /// The container the path names, if one of its parameters does.
    pub(crate) fn container(&self) -> Option<&str> {
        CONTAINER_PARAMS.iter().find_map(|name| self.get(name))
    }

    /// The stored response the path names.
    pub(crate) fn response(&self) -> Option<&str> {
        self.get(RESPONSE_PARAM)
    }

    /// The volume the path names.
    pub(crate) fn volume(&self) -> Option<&str> {
        self.get(VOLUME_PARAM)
    }
}

impl Pattern {
    pub(crate) fn parse(path: &str) -> Self {
        let segments: Vec<Segment> = path
            .split('/')
            .skip(1)
            .map(|segment| match segment.strip_prefix('{') {
                Some(inner) if inner.starts_with('*') => Segment::Rest,
                Some(inner) => Segment::Param(inner.trim_end_matches('}').to_owned()),
                None => Segment::Literal(segment.to_owned()),
            })
            .collect();
        let rank = segments
            .iter()
            .map(|segment| match segment {
                Segment::Literal(_) => 2,
                Segment::Param(_) => 1,
                Segment::Rest => 0,
            })
            .collect();
        Self {
            path: path.to_owned(),
            segments,
            rank,
        }
    }

    /// Its first segment when that is a literal: the one a path's first
    /// segment must equal.
    fn first_literal(&self) -> Option<&str> {
        match self.segments.first() {
            Some(Segment::Literal(literal)) => Some(literal),
            _ => None,
        }
    }

    /// The route's path as the router was given it.
    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// Whether `given` (a path's segments after its leading `/`) is this
    /// route's: literals equal byte for byte, a parameter any non-empty
    /// segment, the rest anything (nothing too).
    fn matches(&self, given: &[&str]) -> bool {
        let mut given = given.iter();
        for segment in &self.segments {
            match segment {
                Segment::Rest => return true,
                Segment::Literal(literal) => {
                    if given.next() != Some(&literal.as_str()) {
                        return false;
                    }
                }
                Segment::Param(_) => {
                    if given.next().is_none_or(|raw| raw.is_empty()) {
                        return false;
                    }
                }
            }
        }
        given.next().is_none()
    }

    /// The parameters `given` (segments this route [`matches`]) gives it.
    ///
    /// [`matches`]: Pattern::matches
    fn captures(&self, given: &[&str]) -> Captures {
        Captures(
            self.segments
                .iter()
                .zip(given)
                .filter_map(|(segment, raw)| match segment {
                    Segment::Param(name) => {
                        let value = crate::canonical::decoded(raw.as_bytes());
                        Some((name.clone(), String::from_utf8_lossy(&value).into_owned()))
                    }
                    Segment::Literal(_) | Segment::Rest => None,
                })
                .collect(),
        )
    }

    /// Whether its last segment is a container parameter: the route of a
    /// container's object itself, not of something inside it.
    pub(crate) fn ends_with_container(&self) -> bool {
        matches!(self.segments.last(), Some(Segment::Param(name)) if CONTAINER_PARAMS.contains(&name.as_str()))
    }
}

/// A router's routes, as patterns.
#[derive(Debug, Clone, Default)]
pub(crate) struct Grammar {
    patterns: Vec<Pattern>,
    /// By a path's first segment, the patterns it can match, in table
    /// order: those starting with that literal and those starting with a
    /// parameter or the rest. A replica reads every request's path, so it
    /// tries those only (a few of the hundreds), not the whole table.
    by_first: HashMap<String, Vec<usize>>,
    /// The patterns not starting with a literal: all a path whose first
    /// segment no route's literal is can match.
    open_first: Vec<usize>,
}

impl Grammar {
    pub(crate) fn new<I: IntoIterator<Item = S>, S: AsRef<str>>(paths: I) -> Self {
        let patterns: Vec<Pattern> = paths
            .into_iter()
            .map(|path| Pattern::parse(path.as_ref()))
            .collect();
        let open_first: Vec<usize> = (0..patterns.len())
            .filter(|&index| patterns[index].first_literal().is_none())
            .collect();
        let mut by_first: HashMap<String, Vec<usize>> = HashMap::new();
        for pattern in &patterns {
            if let Some(first) = pattern.first_literal() {
                by_first.entry(first.to_owned()).or_default();
            }
        }
        for (first, candidates) in &mut by_first {
            *candidates = (0..patterns.len())
                .filter(|&index| {
                    patterns[index]
                        .first_literal()
                        .is_none_or(|literal| literal == first)
                })
                .collect();
        }
        Self {
            patterns,
            by_first,
            open_first,
        }
    }

    /// The route `path` is served by, and what it gave the route's
    /// parameters; among routes it matches, the most specific (the
    /// router's choice; of equals, the last in the table).
    pub(crate) fn route(&self, path: &str) -> Option<(&Pattern, Captures)> {
        let given: Vec<&str> = path.strip_prefix('/')?.split('/').collect();
        let first = given.first().copied().unwrap_or_default();
        let candidates = self.by_first.get(first).unwrap_or(&self.open_first);
        let chosen = candidates
            .iter()
            .map(|&index| &self.patterns[index])
            .filter(|pattern| pattern.matches(&given))
            .max_by(|a, b| a.rank.cmp(&b.rank))?;
        Some((chosen, chosen.captures(&given)))
    }

    /// Whether `pattern` is a collection of containers (a `POST` to it
    /// makes one): a route of one of its containers lies below it.
    pub(crate) fn holds_containers(&self, pattern: &Pattern) -> bool {
        if pattern
            .segments
            .iter()
            .any(|s| !matches!(s, Segment::Literal(_)))
        {
            return false;
        }
        self.patterns.iter().any(|other| {
            other.segments.len() > pattern.segments.len()
                && other.segments.starts_with(&pattern.segments)
                && matches!(&other.segments[pattern.segments.len()],
                    Segment::Param(name) if CONTAINER_PARAMS.contains(&name.as_str()))
        })
    }
}

/// A node's own routes, as the operator reaches them (its state, its
/// drain, `/metrics`).
pub(crate) struct NodeRoutes {
    /// First segments everything below which is the node's (`internal`).
    namespaces: Vec<String>,
    /// One-segment routes (`metrics`).
    exact: Vec<String>,
}

impl NodeRoutes {
    pub(crate) fn new(paths: &[&str]) -> Self {
        let (mut namespaces, mut exact) = (Vec::new(), Vec::new());
        for path in paths {
            let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
            match segments.as_slice() {
                [only] => exact.push((*only).to_owned()),
                [first, ..] => namespaces.push((*first).to_owned()),
                [] => {}
            }
        }
        Self { namespaces, exact }
    }

    /// Whether `path` reaches one of them however it is spelled: in any
    /// letter case, with empty and `.` segments dropped (as a URL parser
    /// or a lenient router may read them).
    pub(crate) fn reached_by(&self, path: &str) -> bool {
        let mut segments = path
            .split('/')
            .filter(|segment| !segment.is_empty() && *segment != ".");
        let is = |names: &[String], segment: &str| {
            names.iter().any(|name| name.eq_ignore_ascii_case(segment))
        };
        match (segments.next(), segments.next()) {
            (Some(first), _) if is(&self.namespaces, first) => true,
            (Some(first), None) => is(&self.exact, first),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_read_as_the_most_specific_route_it_matches() {
        let grammar = Grammar::new([
            "/v1/containers",
            "/v1/containers/{container_id}",
            "/v1/containers/{container_id}/exec",
            "/v1/containers/{container_id}/ports/{port}/{*path}",
            "/sandboxes/{sandbox_id}/metrics",
            "/sandboxes/metrics",
            "/v1/responses/{response_id}/cancel",
        ]);
        let container = |path: &str| {
            grammar
                .route(path)
                .and_then(|(_, c)| c.container().map(str::to_owned))
        };
        assert_eq!(
            container("/v1/containers/cntr%5Fa/exec").as_deref(),
            Some("cntr_a")
        );
        assert_eq!(
            container("/v1/containers/cntr_b/ports/80/a/b/c").as_deref(),
            Some("cntr_b")
        );
        assert_eq!(container("/sandboxes/metrics"), None);
        assert_eq!(
            container("/sandboxes/cntr_c/metrics").as_deref(),
            Some("cntr_c")
        );
        assert_eq!(container("/v1/containers//exec"), None);
        assert_eq!(container("/v1/containers/cntr_a/nothing"), None);
        let (cancel, captures) = grammar.route("/v1/responses/resp_1/cancel").unwrap();
        assert_eq!(cancel.path(), "/v1/responses/{response_id}/cancel");
        assert_eq!(captures.response(), Some("resp_1"));
        let (collection, _) = grammar.route("/v1/containers").unwrap();
        assert!(grammar.holds_containers(collection));
        let (object, _) = grammar.route("/v1/containers/cntr_a").unwrap();
        assert!(object.ends_with_container() && !grammar.holds_containers(object));
    }

    #[test]
    fn the_index_by_first_segment_chooses_what_the_whole_table_would() {
        let config = crate::config::Config::default();
        let api = crate::routes::route_table(&config, crate::routes::Audience::Tenants).paths;
        let console = crate::console::table().paths;
        let grammar = Grammar::new(api.iter().chain(&console));
        let whole_table = |path: &str| {
            let given: Vec<&str> = path.strip_prefix('/')?.split('/').collect();
            grammar
                .patterns
                .iter()
                .filter(|pattern| pattern.matches(&given))
                .max_by(|a, b| a.rank.cmp(&b.rank))
                .map(|pattern| (pattern.path().to_owned(), pattern.captures(&given)))
        };
        let mut paths: Vec<String> = ["/", "", "nothing", "/nothing/here", "//v1", "/v1/"]
            .map(str::to_owned)
            .to_vec();
        for path in api.iter().chain(&console) {
            let concrete = path
                .split('/')
                .map(|segment| match segment.strip_prefix('{') {
                    Some(rest) if rest.starts_with('*') => "a/b",
                    Some(_) => "cntr%5Fx",
                    None => segment,
                })
                .collect::<Vec<_>>()
                .join("/");
            paths.push(format!("{concrete}/extra"));
            paths.push(concrete);
        }
        for path in &paths {
            let indexed = grammar
                .route(path)
                .map(|(pattern, captures)| (pattern.path().to_owned(), captures));
            assert_eq!(indexed, whole_table(path), "{path}");
        }
    }

    #[test]
    fn a_nodes_routes_are_reached_in_any_spelling() {
        let routes = NodeRoutes::new(&["/internal/v1/node", "/metrics"]);
        for path in ["/internal/x", "//INTERNAL", "/./metrics", "/Metrics/"] {
            assert!(routes.reached_by(path), "{path}");
        }
        for path in ["/metrics/x", "/v1/internal", "/"] {
            assert!(!routes.reached_by(path), "{path}");
        }
    }
}
