//! The web console, served by `serve` itself under `/console`:
//! the app's embedded files (`assets`, from `shellgate-console`), sign-in
//! sessions (`session`: an API key exchanged for an HttpOnly cookie, every
//! state-changing call checked against the session's CSRF token), the
//! OpenAI-compatible API forwarded as the session's project (`forward`),
//! the views only the console needs (`views`: container search, responses,
//! usage, projects; `operator`: health and keys, for admin keys), and live
//! updates over SSE (`live`: what changed; `output`: running commands'
//! output). `headers` keeps the console out of frames and
//! its page's scripts to its own files.
//!
//! The API's bearer auth is untouched: the console's cookie opens only
//! `/console/...`, and a forwarded request reaches the API's handlers with
//! its project already decided (`http::ActingProject`).

mod assets;
mod forward;
mod headers;
mod live;
mod operator;
mod output;
mod session;
mod streams;
mod views;

use std::sync::Arc;

use axum::routing::{any, delete, get, post};
use axum::Router;

use crate::route_table::RouteTable;
use crate::state::AppState;

/// What the console's handlers share: the server's state, and the API's
/// router that forwarded calls are served by.
pub(crate) struct Console {
    pub(crate) app: Arc<AppState>,
    pub(crate) api: Router,
    /// The live streams each project has open (bounded).
    streams: streams::Streams,
}

/// The console's routes (every path under `/console`), for merging beside
/// the API's; `api` is the router forwarded calls go to.
pub(crate) fn router(app: Arc<AppState>, api: Router) -> Router {
    let console = Arc::new(Console {
        streams: streams::Streams::new(app.store.clone(), &app.node_name),
        app,
        api,
    });
    table()
        .router
        .layer(axum::middleware::from_fn(headers::secure))
        .with_state(console)
}

/// Where the console forwards the API (`/console/api/v1/...` is the
/// API's `/v1/...`).
pub(crate) const API_FORWARD: &str = "/console/api/v1";

/// The console's routes, each path recorded (the URL grammar,
/// `route_grammar`, reads them).
pub(crate) fn table() -> RouteTable<Arc<Console>> {
    RouteTable::new()
        .route("/console", get(assets::index))
        .route("/console/", get(assets::index))
        .route("/console/assets/{*path}", get(assets::file))
        .route(
            "/console/session",
            post(session::sign_in)
                .get(session::current)
                .delete(session::sign_out),
        )
        .route("/console/api/projects", get(views::projects))
        .route("/console/api/containers", get(views::containers))
        .route(
            "/console/api/containers/{container_id}",
            get(views::container),
        )
        .route(
            "/console/api/containers/{container_id}/output",
            get(output::output),
        )
        .route("/console/api/responses", get(views::responses))
        .route("/console/api/usage", get(views::usage))
        .route("/console/api/events", get(live::events))
        .route("/console/api/operator/health", get(operator::health))
        .route(
            "/console/api/operator/images/default/build",
            post(operator::build_default_image),
        )
        .route(
            "/console/api/operator/keys",
            get(operator::keys).post(operator::create_key),
        )
        .route(
            "/console/api/operator/keys/{key_id}",
            delete(operator::revoke_key),
        )
        .route(&format!("{API_FORWARD}/{{*rest}}"), any(forward::forward))
        .route("/console/api/{*rest}", any(views::unknown))
}
