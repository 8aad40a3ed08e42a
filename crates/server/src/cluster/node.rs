//! A cluster's node: it registers itself (address, capacity, images, cgroup
//! layout) and heart-beats; the front of its router lets in only requests
//! that show the cluster's secret (tenants never reach a node directly),
//! and serves a replica's forwarded requests the API alone: its own routes
//! (state, drain, metrics) answer its operator only.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;
use shellgate_store::{NodeRow, NodeStatus};

use tower::ServiceExt as _;

use super::{secret_matches, FORWARD_HEADER, SECRET_HEADER};
use crate::error::{ApiError, ApiResult};
use crate::listener::ClientAddr;
use crate::state::AppState;
use crate::time::now;
use shellgate_wire::ErrorCode;

/// Who a request to a node comes from, by the credential it shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caller {
    /// A replica forwarding a tenant's request (`FORWARD_HEADER`).
    Tenant,
    /// The cluster's operator (`SECRET_HEADER` alone).
    Operator,
    /// Neither: only the health and liveness probes answer it.
    Nobody,
}

/// Reads the request's credential. A forwarding credential decides even
/// beside the operator's (least privilege), and one that does not match
/// lets nothing in.
fn caller(headers: &HeaderMap, secret: &str) -> Caller {
    let shown = |name: &str| {
        headers
            .get(name)
            .map(|value| secret_matches(value.as_bytes(), secret))
    };
    match (shown(FORWARD_HEADER), shown(SECRET_HEADER)) {
        (Some(true), _) => Caller::Tenant,
        (None, Some(true)) => Caller::Operator,
        _ => Caller::Nobody,
    }
}

/// What a node serves, by caller: `tenants` (the API, without a node's own
/// routes) for requests replicas forward and for the probes; `operator`
/// (the same, with `/metrics` and `/internal/...`) for the cluster's
/// operator.
struct Front {
    state: Arc<AppState>,
    tenants: Router,
    operator: Router,
}

/// A node's router: every request meets [`admit`] first.
pub fn front(state: Arc<AppState>, tenants: Router, operator: Router) -> Router {
    Router::new().fallback(admit).with_state(Arc::new(Front {
        state,
        tenants,
        operator,
    }))
}

/// Hands a request to the router its credential opens: a replica's
/// forwarded request to the tenants' (a node's own routes are not in it,
/// so no spelling of a path reaches them), the operator's call to the
/// operator's; anything else but the probes is answered 401, before any
/// handler reads it.
async fn admit(State(front): State<Arc<Front>>, mut request: Request) -> Response {
    let secret = front
        .state
        .config
        .cluster
        .cluster_secret
        .get()
        .unwrap_or_default();
    let router = match caller(request.headers(), secret) {
        Caller::Tenant => front.tenants.clone(),
        Caller::Operator => front.operator.clone(),
        Caller::Nobody if matches!(request.uri().path(), "/healthz" | "/livez") => {
            front.tenants.clone()
        }
        Caller::Nobody => {
            return ApiError::of(
                ErrorCode::ClusterSecretRequired,
                "This is a shellgate cluster node: it serves the cluster's API replicas only.",
            )
            .into_response();
        }
    };
    // Handlers never see them (nor could echo them anywhere).
    request.headers_mut().remove(SECRET_HEADER);
    request.headers_mut().remove(FORWARD_HEADER);
    // The client's address is the one the replica saw (it sets the header,
    // replacing any the client sent), not the replica's: what the node
    // forwards on (a port's `X-Forwarded-For`) names the client.
    let client = request
        .headers()
        .get("x-forwarded-for")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<std::net::IpAddr>().ok());
    if let Some(ip) = client {
        let port = request
            .extensions()
            .get::<ClientAddr>()
            .map_or(0, |peer| peer.0.port());
        request
            .extensions_mut()
            .insert(ClientAddr(std::net::SocketAddr::new(ip, port)));
    }
    match router.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// The node's own routes: its state, its drain, its metrics (a replica
/// never forwards a path that reaches them, `route_grammar::NodeRoutes`).
pub(crate) const OPERATOR_ROUTES: [&str; 3] =
    ["/internal/v1/node", "/internal/v1/drain", "/metrics"];

/// The operator's router: the node's own routes (its state, its drain,
/// `/metrics`), and everything else as the tenants' router (`rest`)
/// serves it.
pub fn operator_routes(state: Arc<AppState>, rest: Router) -> Router {
    let [node, drains, metrics] = OPERATOR_ROUTES;
    Router::new()
        .route(node, get(describe))
        .route(drains, post(drain).delete(undrain))
        .route(metrics, get(crate::ops::metrics))
        .with_state(state)
        .fallback_service(rest)
}

/// What `GET /internal/v1/node` answers (and `shellgate drain` waits on).
#[derive(Debug, Serialize)]
struct NodeState {
    id: String,
    status: String,
    /// Its containers that are not deleted or lost.
    containers: u64,
}

async fn describe(State(state): State<Arc<AppState>>) -> ApiResult<Json<NodeState>> {
    let id = state.node_name.clone();
    let (node, load) = state
        .db(move |s| {
            let load = s.nodes()?.into_iter().find(|load| load.node.id == id);
            Ok(load)
        })
        .await
        .map(|load| (load.as_ref().map(|l| l.node.status), load))?;
    Ok(Json(NodeState {
        id: state.node_name.clone(),
        status: node.map_or("unregistered", NodeStatus::as_str).to_owned(),
        containers: load.map_or(0, |load| load.containers),
    }))
}

async fn set_status(state: &Arc<AppState>, status: NodeStatus) -> ApiResult<Json<NodeState>> {
    let id = state.node_name.clone();
    let changed = state.db(move |s| s.set_node_status(&id, status)).await?;
    if !changed {
        return Err(ApiError::conflict(
            "This node is not registered as live (it was declared lost); it registers again at \
             its next heartbeat.",
        ));
    }
    tracing::info!(node = %state.node_name, status = status.as_str(), "node status changed");
    describe(State(Arc::clone(state))).await
}

async fn drain(State(state): State<Arc<AppState>>) -> ApiResult<Json<NodeState>> {
    set_status(&state, NodeStatus::Draining).await
}

async fn undrain(State(state): State<Arc<AppState>>) -> ApiResult<Json<NodeState>> {
    set_status(&state, NodeStatus::Ready).await
}

/// The images this node can make containers of now.
async fn images(state: &Arc<AppState>) -> ApiResult<Vec<String>> {
    Ok(crate::sandboxes::containers::image_list(state)
        .await?
        .into_iter()
        .map(|image| image.name)
        .collect())
}

/// This node's registration: what it is and holds now.
async fn registration(state: &Arc<AppState>) -> ApiResult<NodeRow> {
    let images = images(state).await?;
    let now = now();
    Ok(NodeRow {
        id: state.node_name.clone(),
        address: state.config.node_url(),
        status: NodeStatus::Ready,
        memory_bytes: state.engine.memory_ceiling(),
        max_containers: state.config.cluster.max_containers_per_node,
        images,
        cgroup_layout: state.host.cgroups.clone(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        started_at: now,
        heartbeat_at: now,
    })
}

/// Registers this node (ready for containers), then takes back what it
/// had when it was declared lost (`lifecycle::reclaim_lost`): the lost
/// containers whose disks it has, and the removal of those deleted
/// meanwhile. A failed reclaim is logged and tried again by the sweep.
pub async fn register(state: &Arc<AppState>) -> ApiResult<()> {
    let row = registration(state).await?;
    tracing::info!(node = %row.id, address = %row.address, "node registered");
    state.db(move |s| s.register_node(&row)).await?;
    if let Err(error) = crate::lifecycle::reclaim_lost(state).await {
        tracing::error!("taking back lost containers failed: {}", error.message);
    }
    Ok(())
}

/// Heart-beats every `node_heartbeat_secs` until aborted. A node told it
/// was declared lost (it was silent too long: a stall, a partition)
/// registers again, and with that gets back its lost containers whose
/// disks it has (running ones running still), and removes those their
/// tenants deleted meanwhile.
///
/// The beats go through a connection of their own
/// ([`Config::open_liveness_store`](crate::config::Config::open_liveness_store)):
/// through the store's pool, a node whose requests held every connection
/// (a tenant's flood) beat late, and the replicas, seeing it silent, answered
/// every tenant on it that their containers were lost. For the same reason
/// a beat never waits on the node's image listing (its disk, and in a
/// cluster the object store, both slow under load): a task of its own lists
/// them, and a beat carries the latest list when it changed.
pub async fn heartbeat_forever(state: Arc<AppState>) {
    let interval = Duration::from_secs(state.config.cluster.node_heartbeat_secs.max(1));
    let opening = Arc::clone(&state);
    let opened = tokio::task::spawn_blocking(move || {
        opening
            .config
            .open_liveness_store()
            .map_err(|e| e.to_string())
    })
    .await
    .unwrap_or_else(|e| Err(e.to_string()));
    let liveness = match opened {
        Ok(store) => store.map(crate::db::Db::new),
        Err(error) => {
            tracing::warn!("no connection of its own for the heartbeat ({error}); using the pool");
            None
        }
    };
    let beats = liveness.as_ref().unwrap_or(&state.store);
    let (publish, mut listed) = tokio::sync::watch::channel(None);
    let _lister = crate::turns::AbortOnDrop(Some(tokio::spawn(list_images_forever(
        Arc::clone(&state),
        interval,
        publish,
    ))));
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    // A beat late (a stalled runtime) is sent at once, the next one an
    // interval after it: never two at once to catch up.
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let id = state.node_name.clone();
        // Its images too, when they changed: a default image built since it
        // registered can be placed on from now on.
        let images = listed
            .has_changed()
            .unwrap_or(false)
            .then(|| listed.borrow_and_update().clone())
            .flatten();
        match beats
            .run(move |s| s.heartbeat(&id, now(), images.as_deref()))
            .await
        {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(
                    node = %state.node_name,
                    "this node was declared lost (silent too long); registering again"
                );
                if let Err(error) = register(&state).await {
                    tracing::error!("node registration failed: {}", error.message);
                }
                // Its exec credits were dropped with it; what still runs
                // here counts again.
                state.admission.rewrite_credits();
            }
            Err(error) => tracing::error!("heartbeat failed: {}", error.message),
        }
    }
}

/// Lists the node's images every `interval`, publishing each list that
/// differs from the one before (for the heartbeat to carry).
async fn list_images_forever(
    state: Arc<AppState>,
    interval: Duration,
    publish: tokio::sync::watch::Sender<Option<Vec<String>>>,
) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        match images(&state).await {
            Ok(images) => {
                publish.send_if_modified(|latest| {
                    let changed = latest.as_ref() != Some(&images);
                    if changed {
                        *latest = Some(images);
                    }
                    changed
                });
            }
            Err(error) => tracing::warn!("image listing failed: {}", error.message),
        }
    }
}
