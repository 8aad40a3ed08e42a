//! A cluster's node: it registers itself (address, capacity, images, cgroup
//! layout) and heart-beats; the gate in front of its router lets in only
//! requests that show the cluster's secret (tenants never reach a node
//! directly), and its drain endpoints stop new placements.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;
use shellgate_store::{NodeRow, NodeStatus};

use super::{secret_matches, SECRET_HEADER};
use crate::error::{ApiError, ApiResult};
use crate::listener::ClientAddr;
use crate::state::AppState;
use crate::time::now;

/// Lets through requests showing the cluster's secret (and the health and
/// liveness probes); answers anything else 401, before any handler reads it.
pub async fn gate(
    State(state): State<Arc<AppState>>,
    mut request: Request,
    next: Next,
) -> Response {
    if matches!(request.uri().path(), "/healthz" | "/livez") {
        return next.run(request).await;
    }
    let secret = state.config.cluster_secret.get().unwrap_or_default();
    let shown = request
        .headers()
        .get(SECRET_HEADER)
        .is_some_and(|value| secret_matches(value.as_bytes(), secret));
    if !shown {
        let mut error = ApiError::unauthorized(
            "This is a shellgate cluster node: it serves the cluster's API replicas only.",
        );
        error.code = Some("cluster_secret_required");
        return error.into_response();
    }
    // Handlers never see it (nor could echo it anywhere).
    request.headers_mut().remove(SECRET_HEADER);
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
    next.run(request).await
}

/// The node's own routes, behind the gate: its state, and its drain.
pub fn routes(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/internal/v1/node", get(describe))
        .route("/internal/v1/drain", post(drain).delete(undrain))
        .with_state(state)
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
    Ok(crate::containers::image_list(state)
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
        max_containers: state.config.max_containers_per_node,
        images,
        cgroup_layout: state.host.cgroups.clone(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        started_at: now,
        heartbeat_at: now,
    })
}

/// Registers this node (ready for containers).
pub async fn register(state: &Arc<AppState>) -> ApiResult<()> {
    let row = registration(state).await?;
    tracing::info!(node = %row.id, address = %row.address, "node registered");
    state.db(move |s| s.register_node(&row)).await
}

/// Heart-beats every `node_heartbeat_secs` until aborted. A node told it
/// was declared lost (it was silent too long: a pause, a partition)
/// registers again; its containers stay lost, and its sweeper removes
/// their processes and disks.
pub async fn heartbeat_forever(state: Arc<AppState>) {
    let interval = Duration::from_secs(state.config.node_heartbeat_secs.max(1));
    loop {
        tokio::time::sleep(interval).await;
        let id = state.node_name.clone();
        let now = now();
        // Its images too: a default image built since it registered can
        // be placed on from now on.
        let images = match images(&state).await {
            Ok(images) => Some(images),
            Err(error) => {
                tracing::warn!("image listing failed: {}", error.message);
                None
            }
        };
        match state
            .db(move |s| s.heartbeat(&id, now, images.as_deref()))
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
            }
            Err(error) => tracing::error!("heartbeat failed: {}", error.message),
        }
    }
}
