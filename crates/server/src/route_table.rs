//! [`RouteTable`]: the router built route by route with each route's full
//! path recorded (the OpenAPI test checks the document against them). Its
//! own file so that the modules adding routes (`e2b::control`) need not
//! import the crate root.

use std::sync::Arc;

use axum::Router;

use crate::state::AppState;

/// Builds a router while recording each route's full path. Every route is
/// added through it (never by `Router::route` directly), so that
/// `ServedRoutes::paths` is the router's whole table.
/// `S`: the routes' state (the API's; the console's for its own table).
#[derive(Clone)]
pub(crate) struct RouteTable<S = Arc<AppState>> {
    pub(crate) router: Router<S>,
    pub(crate) paths: Vec<String>,
}

impl<S: Clone + Send + Sync + 'static> RouteTable<S> {
    pub(crate) fn new() -> Self {
        Self {
            router: Router::new(),
            paths: Vec::new(),
        }
    }

    pub(crate) fn route(mut self, path: &str, methods: axum::routing::MethodRouter<S>) -> Self {
        self.paths.push(path.to_owned());
        self.router = self.router.route(path, methods);
        self
    }

    pub(crate) fn nest(mut self, prefix: &str, inner: RouteTable<S>) -> Self {
        self.paths
            .extend(inner.paths.iter().map(|path| format!("{prefix}{path}")));
        self.router = self.router.nest(prefix, inner.router);
        self
    }
}
