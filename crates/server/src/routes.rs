//! The router's table: every route the API serves, for whom, and the axum
//! router built from it. One table is the URL grammar: the router serves
//! it, the OpenAPI test checks the document against it, and a cluster's
//! replica reads paths with it (`route_grammar`).

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::routing::{any, delete, get, post, put};
use axum::Router;

use crate::messages::batches;
use crate::route_table::RouteTable;
use crate::state::AppState;
use crate::{
    chat, config, console, container_egress, containers, e2b, files, fs, gemini, images, messages,
    models, openapi, ops, ports, processes, responses, route_grammar, skills, snapshots, volumes,
};

/// The HTTP routes, behind the layer that sends a request for a
/// container's port by host name (`{port}-{id}.{ports_base_domain}`) to
/// that port instead (see `ports`).
pub fn router(state: Arc<AppState>) -> Router {
    router_for(state, Audience::Everyone)
}

/// Whom a router serves: a server's own clients (a single box's), with
/// every route; or the tenants whose requests a cluster's replicas forward
/// to a node, without what only the node's operator may read (`/metrics`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Audience {
    Everyone,
    Tenants,
}

pub(crate) fn router_for(state: Arc<AppState>, audience: Audience) -> Router {
    let api = served_routes_for(Arc::clone(&state), audience).router;
    let sandbox_routers = Arc::new(e2b::SandboxRouters::new(&state));
    // The web console under /console (its own auth: a session cookie),
    // forwarding its API calls to the same router.
    console::router(Arc::clone(&state), api.clone())
        .fallback_service(api)
        .layer(axum::middleware::from_fn_with_state(
            sandbox_routers,
            e2b::by_header,
        ))
        .layer(axum::middleware::from_fn_with_state(state, ports::by_host))
}

/// The router and the path of every route it serves, recorded as the
/// routes are added (the OpenAPI test checks the document against them).
pub(crate) struct ServedRoutes {
    pub(crate) router: Router,
    // Read by the OpenAPI test only.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) paths: Vec<String>,
}

/// Where every `/v1` route is served again (OpenRouter's base URL is
/// `https://openrouter.ai/api/v1`). The OpenAPI document lists the `/v1`
/// paths once and names this prefix as a second server.
pub(crate) const OPENROUTER_PREFIX: &str = "/api/v1";

/// Gemini's models, at the version prefix Gemini CLI uses.
const GEMINI_MODELS: &str = "/v1beta/models";

#[cfg(test)]
pub(crate) fn served_routes(state: Arc<AppState>) -> ServedRoutes {
    served_routes_for(state, Audience::Everyone)
}

pub(crate) fn served_routes_for(state: Arc<AppState>, audience: Audience) -> ServedRoutes {
    let table = route_table(&state.config, audience);
    ServedRoutes {
        router: table
            .router
            .fallback(ops::not_found)
            .method_not_allowed_fallback(ops::method_not_allowed)
            .layer(DefaultBodyLimit::max(state.config.server.max_request_bytes))
            .with_state(state),
        paths: table.paths,
    }
}

/// The router's table: every route, its path recorded (the grammar a
/// cluster's replica reads paths with, `route_grammar`).
pub(crate) fn route_table(config: &config::Config, audience: Audience) -> RouteTable {
    let uploads = DefaultBodyLimit::max(config.server.max_upload_bytes.saturating_add(64 * 1024));
    let api = RouteTable::new()
        .route(
            "/containers",
            post(containers::create).get(containers::list),
        )
        .route(
            "/containers/{container_id}",
            get(containers::retrieve).delete(containers::delete),
        )
        .route("/containers/{container_id}/exec", post(containers::exec))
        .route(
            "/containers/{container_id}/processes",
            post(processes::create).get(processes::list),
        )
        .route(
            "/containers/{container_id}/processes/{process_id}",
            get(processes::retrieve).delete(processes::kill),
        )
        .route(
            "/containers/{container_id}/processes/{process_id}/output",
            get(processes::output),
        )
        .route(
            "/containers/{container_id}/processes/{process_id}/stdin",
            post(processes::stdin),
        )
        .route(
            "/containers/{container_id}/processes/{process_id}/signal",
            post(processes::signal),
        )
        .route(
            "/containers/{container_id}/processes/{process_id}/resize",
            post(processes::resize),
        )
        .route(
            "/containers/{container_id}/processes/{process_id}/ws",
            get(processes::socket),
        )
        .route(
            "/containers/{container_id}/commands",
            get(containers::commands),
        )
        .route(
            "/containers/{container_id}/egress",
            get(container_egress::list),
        )
        .route(
            "/containers/{container_id}/secrets",
            post(container_egress::supply),
        )
        .route(
            "/containers/{container_id}/network_policy",
            put(container_egress::update_policy),
        )
        // A container's exposed ports, proxied (any method; the prefix is
        // stripped). The bare path and `.../{port}/` are the port's `/`.
        .route(
            "/containers/{container_id}/ports/{port}",
            any(ports::by_path_root),
        )
        .route(
            "/containers/{container_id}/ports/{port}/",
            any(ports::by_path_root),
        )
        .route(
            "/containers/{container_id}/ports/{port}/{*rest}",
            any(ports::by_path),
        )
        .route(
            "/containers/{container_id}/snapshots",
            post(snapshots::create),
        )
        .route("/containers/{container_id}/fork", post(snapshots::fork))
        .route("/containers/{container_id}/image", post(snapshots::commit))
        .route("/snapshots", get(snapshots::list))
        .route(
            "/snapshots/{snapshot_id}",
            get(snapshots::retrieve).delete(snapshots::delete),
        )
        .route(
            "/images",
            get(containers::images).post(images::create).layer(uploads),
        )
        .route(
            "/images/{name}",
            get(images::retrieve).delete(images::delete),
        )
        .route("/images/builds/{build_id}", get(images::build_status))
        .route("/volumes", post(volumes::create).get(volumes::list))
        .route(
            "/volumes/{volume_id}",
            get(volumes::retrieve).delete(volumes::delete),
        )
        .route(
            "/skills",
            post(skills::create).get(skills::list).layer(uploads),
        )
        .route(
            "/skills/{skill_id}",
            get(skills::retrieve)
                .post(skills::update)
                .delete(skills::delete),
        )
        .route("/skills/{skill_id}/content", get(skills::content))
        .route(
            "/skills/{skill_id}/versions",
            post(skills::create_version)
                .get(skills::list_versions)
                .layer(uploads),
        )
        .route(
            "/skills/{skill_id}/versions/{version}",
            get(skills::retrieve_version).delete(skills::delete_version),
        )
        .route(
            "/skills/{skill_id}/versions/{version}/content",
            get(skills::version_content),
        )
        .route(
            "/containers/{container_id}/files",
            post(containers::upload_file)
                .get(containers::list_files)
                .layer(uploads),
        )
        .route(
            "/containers/{container_id}/files/{file_id}",
            get(containers::retrieve_file).delete(containers::delete_file),
        )
        .route(
            "/containers/{container_id}/files/{file_id}/promote",
            post(containers::promote_file),
        )
        .route(
            "/containers/{container_id}/files/{file_id}/content",
            get(containers::file_content),
        )
        // Files by path: `fs.rs`.
        .route(
            "/containers/{container_id}/fs/content",
            get(fs::read).put(fs::write),
        )
        .route("/containers/{container_id}/fs/stat", get(fs::stat))
        .route("/containers/{container_id}/fs/list", get(fs::list))
        .route("/containers/{container_id}/fs/mkdir", post(fs::mkdir))
        .route("/containers/{container_id}/fs/move", post(fs::rename))
        .route("/containers/{container_id}/fs", delete(fs::remove))
        .route(
            "/containers/{container_id}/fs/archive",
            get(fs::export).post(fs::import),
        )
        .route(
            "/files",
            post(files::upload).get(files::list).layer(uploads),
        )
        .route(
            "/files/{file_id}",
            get(files::retrieve).delete(files::delete),
        )
        .route("/files/{file_id}/content", get(files::content))
        .route("/usage", get(ops::usage))
        .route(
            route_grammar::RESPONSES,
            post(responses::create).get(responses::socket),
        )
        .route(route_grammar::CHAT_COMPLETIONS, post(chat::create))
        .route("/models", get(models::list_models))
        // OpenAI's model, and Gemini's methods on it (`{model}` is then
        // `name:generateContent`...: `gemini::call` reads the verb).
        .route(
            "/models/{model}",
            get(models::retrieve_model).post(gemini::call),
        )
        // Anthropic's Messages API; the second path serves Anthropic SDKs
        // given a base URL that ends in /v1, as OpenAI SDKs are.
        .route(route_grammar::MESSAGES, post(messages::create))
        .route("/v1/messages", post(messages::create))
        .route("/messages/count_tokens", post(messages::count_tokens))
        .route("/v1/messages/count_tokens", post(messages::count_tokens))
        .route(
            "/messages/batches",
            post(batches::create).get(batches::list),
        )
        .route(
            "/messages/batches/{batch_id}",
            get(batches::retrieve).delete(batches::delete),
        )
        .route("/messages/batches/{batch_id}/cancel", post(batches::cancel))
        .route(
            "/messages/batches/{batch_id}/results",
            get(batches::results),
        )
        // Batches under a doubled /v1 too, as messages: the Anthropic SDK
        // given a base URL that ends in /v1 asks for them there.
        .route(
            "/v1/messages/batches",
            post(batches::create).get(batches::list),
        )
        .route(
            "/v1/messages/batches/{batch_id}",
            get(batches::retrieve).delete(batches::delete),
        )
        .route(
            "/v1/messages/batches/{batch_id}/cancel",
            post(batches::cancel),
        )
        .route(
            "/v1/messages/batches/{batch_id}/results",
            get(batches::results),
        )
        .route(
            "/responses/{response_id}",
            get(responses::retrieve).delete(responses::delete),
        )
        // Beside `/responses/{response_id}` (which has no POST): a
        // literal segment wins over a parameter.
        .route("/responses/input_tokens", post(responses::input_tokens))
        .route("/responses/compact", post(responses::compact))
        .route("/responses/{response_id}/cancel", post(responses::cancel))
        .route(
            "/responses/{response_id}/input_items",
            get(responses::input_items),
        );
    // OpenRouter's base URL ends in /api/v1: the same API answers there
    // too, so a client configured for OpenRouter needs only the host.
    let table = RouteTable::new()
        .nest("/v1", api.clone())
        .nest(OPENROUTER_PREFIX, api)
        .route("/healthz", get(ops::healthz))
        .route("/livez", get(ops::livez))
        .route("/openapi.json", get(openapi::serve))
        // Gemini's API at Google's own version prefix (its `/v1` is above).
        .route(GEMINI_MODELS, get(gemini::list_models))
        .route(
            "/v1beta/models/{model}",
            get(gemini::get_model).post(gemini::call),
        )
        // Google's Files API: the resumable upload, and its files.
        .route(
            "/upload/v1beta/files",
            post(gemini::files::upload).layer(uploads),
        )
        .route("/v1beta/files", get(gemini::files::list))
        .route(
            "/v1beta/files/{file}",
            get(gemini::files::retrieve).delete(gemini::files::delete),
        );
    let table = match audience {
        Audience::Everyone => table.route("/metrics", get(ops::metrics)),
        Audience::Tenants => table,
    };
    // E2B's control plane answers at the root, as E2B's API does.
    let table = e2b::logs::routes(e2b::metrics::routes(e2b::control::routes(table)));
    e2b::snapshots::routes(e2b::volume_content::routes(e2b::volumes::routes(table)))
}
