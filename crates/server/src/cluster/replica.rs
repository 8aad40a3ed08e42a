//! An API replica: no engine and no state of its own. It sends
//! each request to a node: the node of the container it names, a node
//! placement picks for a create, or any live node (the store is shared,
//! so any node answers the rest). Bodies stream both ways, and a PTY's
//! WebSocket is joined end to end. Tenants are authenticated by the node
//! (its keys are the shared store's), so a replica answers for a request
//! only what no node can: the nodes list, a lost container, no node. It
//! never holds a request for as long as a node hangs: a wait for a node's
//! answer ends when the node is declared lost or, once the answer is late,
//! answers no liveness probe (`liveness`).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use shellgate_store::{ContainerStatus, KeyRole, LostDeletion, NodeLoad, NodeRow, NodeStatus};
use shellgate_wire::cluster::ClusterNode;
use shellgate_wire::List;

use super::directory::{Directory, Whereabouts};
use super::liveness::{Liveness, Silence};
use super::placement::{alive, Placements};
use super::routing::{ModelApi, Routes, Target};
use super::{FORWARD_HEADER, SECRET_HEADER};
use crate::config::Config;
use crate::db::Db;
use crate::error::{ApiError, ApiResult};
use crate::sandboxes::reuse::Reuse;
use crate::time::now;
use shellgate_wire::ErrorCode;

/// A replica's parts.
pub struct Replica {
    config: Config,
    store: Db,
    client: reqwest::Client,
    placements: Placements,
    directory: Directory,
    liveness: Liveness,
    /// The node's URL grammar, read from its router's table.
    routes: Routes,
    /// Wrong keys of the checks a replica makes itself (the nodes list, a
    /// lost container), throttled as a node throttles its own.
    key_throttle: crate::auth::KeyThrottle,
    /// E2B sandboxes' tokens, to find the sandbox of a signed file URL
    /// that names none (`e2b::signed`).
    signing: crate::e2b::signing_keys::SigningKeys,
}

/// What a request's body says that routing reads: the image a create
/// asks for, and what a model request continues (its `session_id`, as
/// OpenRouter's API and Anthropic's Messages carry it, and a stored
/// response). The rest is the node's to read.
#[derive(Default, serde::Deserialize)]
struct Routed {
    image: Option<String>,
    session_id: Option<String>,
    previous_response_id: Option<String>,
    /// The volumes a create mounts (`POST /v1/containers`' `volumes`).
    volumes: Option<Vec<RoutedMount>>,
    /// The volumes an E2B create mounts.
    #[serde(rename = "volumeMounts")]
    volume_mounts: Option<Vec<RoutedMount>>,
}

/// A mount of a create, as far as routing reads it: the volume it names.
#[derive(Default, serde::Deserialize)]
struct RoutedMount {
    volume_id: Option<String>,
    name: Option<String>,
}

impl Routed {
    /// A body that does not read so (not JSON, a field of another type)
    /// says nothing here; the node answers it.
    fn of(body: &[u8]) -> Self {
        serde_json::from_slice(body).unwrap_or_default()
    }
}

/// Nodes a request that reached none is tried on, at most.
const ATTEMPTS: usize = 3;

/// Removes the headers that belong to one hop (the port proxy's list),
/// but for an upgrade's `connection` and `upgrade`, which carry it on.
fn drop_hop_headers(headers: &mut HeaderMap, upgrading: bool) {
    for name in crate::ports::HOP_BY_HOP {
        if !(upgrading && (name == "connection" || name == "upgrade")) {
            headers.remove(name);
        }
    }
}

/// How long an idle connection to a node is kept for reuse: half the time
/// a node keeps an idle keep-alive connection open (its
/// `header_read_timeout_secs`, the cluster's one setting), so a request
/// is never sent on a connection the node is closing at that moment (a
/// 502 for a request the node never saw).
fn pool_idle_timeout(config: &Config) -> Duration {
    Duration::from_millis(config.server.header_read_timeout_secs.saturating_mul(500))
        .max(Duration::from_millis(500))
}

impl Replica {
    /// A replica over `store`, forwarding with a pooled client.
    pub fn new(config: Config, store: Db) -> Result<Arc<Self>, crate::error::ServeError> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .pool_idle_timeout(pool_idle_timeout(&config))
            .build()
            .map_err(|e| crate::error::ServeError::Setup(format!("replica client: {e}")))?;
        let liveness = Liveness::new(Duration::from_secs(config.cluster.node_answer_timeout_secs));
        let routes = Routes::new(&config);
        Ok(Arc::new(Self {
            config,
            store,
            client,
            placements: Placements::default(),
            directory: Directory::default(),
            liveness,
            routes,
            key_throttle: crate::auth::KeyThrottle::default(),
            signing: Default::default(),
        }))
    }

    fn lost_after(&self) -> i64 {
        i64::try_from(self.config.cluster.node_lost_after_secs).unwrap_or(i64::MAX)
    }

    /// Nodes to send nothing new to while others answer: those that failed
    /// to answer lately and have answered nothing since.
    fn suspects(&self) -> Vec<String> {
        self.liveness.suspects(Duration::from_secs(
            self.config.cluster.node_lost_after_secs,
        ))
    }

    async fn loads(&self) -> ApiResult<Vec<NodeLoad>> {
        self.store.run(|s| s.nodes()).await
    }

    /// `node` (if the store knows it), if what it holds is to be asked of
    /// it: it beats, or, silent in the store past `node_lost_after_secs`
    /// and not declared lost yet, it answers this replica (its heartbeats
    /// late under load, or its connection to the store slow: its
    /// containers are there all the same, and the sweep spares it for the
    /// same reason). Never one declared lost.
    async fn reachable(&self, node: Option<NodeRow>) -> Option<NodeRow> {
        let node = node?;
        if node.status == NodeStatus::Lost {
            return None;
        }
        if alive(&node, now(), self.lost_after()) {
            return Some(node);
        }
        self.liveness
            .answers(&self.client, &node)
            .await
            .then_some(node)
    }
}

/// The replica's routes: its health, the nodes list, and everything else
/// forwarded.
pub fn router(replica: Arc<Replica>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/livez", get(crate::ops::livez))
        .route("/v1/cluster/nodes", get(nodes))
        .route("/api/v1/cluster/nodes", get(nodes))
        .fallback(forward)
        .with_state(replica)
}

/// Marks silent nodes lost every heartbeat interval, until aborted (every
/// replica does; the store marks each node once).
pub async fn sweep_lost_nodes(replica: Arc<Replica>) {
    let interval = Duration::from_secs(replica.config.cluster.node_heartbeat_secs.max(1));
    loop {
        tokio::time::sleep(interval).await;
        if let Err(error) = mark_lost_nodes(&replica).await {
            tracing::error!("lost-node sweep failed: {}", error.message);
        }
    }
}

/// Marks the nodes silent past `node_lost_after_secs` that do not answer
/// this replica either (`Liveness::answers`: nothing answered lately, no
/// answer to a probe of `/livez`) lost, with their containers, and fails
/// the responses they were running. A silent node that answers is a
/// node whose heartbeats are late (a loaded machine, a slow store), not a
/// node gone: declaring it lost would cut its tenants off from containers
/// that run on.
async fn mark_lost_nodes(replica: &Replica) -> ApiResult<()> {
    let now = now();
    let cutoff = now - replica.lost_after();
    let silent = replica.store.run(move |s| s.silent_nodes(cutoff)).await?;
    if silent.is_empty() {
        return Ok(());
    }
    let asked = futures_util::future::join_all(
        silent
            .iter()
            .map(|node| replica.liveness.answers(&replica.client, node)),
    )
    .await;
    let mut unanswering = Vec::new();
    for (node, answers) in silent.into_iter().zip(asked) {
        if answers {
            tracing::warn!(
                node = %node.id,
                "node silent past node_lost_after_secs yet answering: not declared lost"
            );
        } else {
            unanswering.push(node.id);
        }
    }
    if unanswering.is_empty() {
        return Ok(());
    }
    let lost = replica
        .store
        .run(move |s| s.mark_nodes_lost(&unanswering, cutoff, now))
        .await?;
    for node in lost {
        tracing::warn!(
            node = %node,
            "node lost (silent too long): its containers are lost until it comes back"
        );
        // Its running responses ended with it.
        let failed = crate::responses::fail_running(
            &replica.store,
            Some(node.clone()),
            "The node running this response stopped answering; it did not finish.",
        )
        .await;
        if let Err(error) = failed {
            tracing::error!(node = %node, "failing its responses: {}", error.message);
        }
    }
    Ok(())
}

async fn healthz(State(replica): State<Arc<Replica>>) -> ApiResult<impl IntoResponse> {
    // Healthy means the store answers (a replica without it serves nothing).
    replica.store.run(|s| s.key_count()).await?;
    Ok(Json(serde_json::json!({"status": "ok", "role": "api"})))
}

/// The grant of the request's key (`Authorization: Bearer KEY`, or
/// `x-api-key: KEY` as Anthropic's and E2B's SDKs send it), if it shows a
/// live one; wrong keys throttled by their prefix.
async fn grant(
    replica: &Replica,
    headers: &HeaderMap,
) -> ApiResult<Option<shellgate_store::KeyGrant>> {
    client_grant(replica, headers, None).await
}

/// [`grant`], throttled by the client's address too.
async fn client_grant(
    replica: &Replica,
    headers: &HeaderMap,
    client: Option<std::net::IpAddr>,
) -> ApiResult<Option<shellgate_store::KeyGrant>> {
    let Some(key) = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .or_else(|| {
            headers
                .get("x-api-key")
                .and_then(|value| value.to_str().ok())
        })
        .map(str::trim)
        .filter(|key| !key.is_empty())
        .map(str::to_owned)
    else {
        return Ok(None);
    };
    let attempt = crate::auth::KeyAttempt::new(client, &key);
    replica.key_throttle.admit(&attempt)?;
    let found = replica.store.run(move |s| s.grant_for_key(&key)).await?;
    match &found {
        Some(_) => replica.key_throttle.succeeded(&attempt),
        None => replica.key_throttle.failed(&attempt),
    }
    Ok(found)
}

async fn nodes(
    State(replica): State<Arc<Replica>>,
    headers: HeaderMap,
    client: Option<axum::Extension<crate::listener::ClientAddr>>,
) -> ApiResult<Json<List<ClusterNode>>> {
    let client = client.map(|c| c.0 .0.ip());
    match client_grant(&replica, &headers, client).await? {
        Some(grant) if grant.role == KeyRole::Admin => {}
        Some(_) => {
            return Err(ApiError::of(
                ErrorCode::AdminOnly,
                "The cluster's nodes are shown to admin keys only.",
            ))
        }
        None => return Err(ApiError::unauthorized("Missing or unknown API key.")),
    }
    let loads = replica.loads().await?;
    // A node past its heartbeat that no sweep marked yet reads lost unless
    // it answers (as the sweep decides).
    let reachable = futures_util::future::join_all(
        loads
            .iter()
            .map(|load| replica.reachable(Some(load.node.clone()))),
    )
    .await;
    let data = loads
        .into_iter()
        .zip(reachable)
        .map(|(load, reachable)| {
            let node = load.node;
            let status = if reachable.is_some() {
                node.status.as_str()
            } else {
                "lost"
            };
            ClusterNode {
                object: "cluster.node".to_owned(),
                status: status.to_owned(),
                address: node.address,
                heartbeat_at: node.heartbeat_at,
                started_at: node.started_at,
                containers: load.containers,
                max_containers: node.max_containers,
                memory_bytes: node.memory_bytes,
                claimed_memory_bytes: load.claimed_memory,
                images: node.images,
                cgroup_layout: node.cgroup_layout,
                version: node.version,
                id: node.id,
            }
        })
        .collect();
    Ok(Json(List::page(data, false, |node: &ClusterNode| {
        node.id.clone()
    })))
}

/// A lost container's row, if the request shows its project's key (else
/// `None`: anyone else gets the 404 any unknown id gets).
async fn owned_row(
    replica: &Replica,
    headers: &HeaderMap,
    id: &str,
) -> ApiResult<Option<shellgate_store::ContainerRow>> {
    let key = id.to_owned();
    let Some(row) = replica.store.run(move |s| s.container_by_id(&key)).await? else {
        return Ok(None);
    };
    Ok(match grant(replica, headers).await? {
        Some(grant) if grant.project == row.project => Some(row),
        _ => None,
    })
}

/// The error for a container whose node was lost: to its project's keys
/// a 409 saying so; to anyone else the 404 any unknown id gets.
async fn lost(replica: &Replica, headers: &HeaderMap, id: &str) -> ApiError {
    match owned_row(replica, headers, id).await {
        Ok(Some(_)) => ApiError::container_lost(id),
        _ => ApiError::not_found("container", id),
    }
}

/// What a replica's delete of a lost container came to.
enum LostDelete {
    /// Deleted (the object to answer with).
    Done(Response),
    /// Not its owner's request (404).
    NotOwner,
    /// Its node is live again, on this node: the node deletes it.
    NodeIsLive(String),
}

/// Deletes a lost container's row for its project's key while its node is
/// lost (no node can: a node that comes back removes its disk). A node
/// silent past the limit that no sweep marked yet is marked lost first, so
/// that, back, it learns it was and looks for what was deleted. Decided in
/// the store under the node's row lock against the node's return: once
/// the node is live again, the node deletes it.
async fn delete_lost(replica: &Replica, headers: &HeaderMap, id: &str) -> ApiResult<LostDelete> {
    let Some(row) = owned_row(replica, headers, id).await? else {
        return Ok(LostDelete::NotOwner);
    };
    mark_lost_nodes(replica).await?;
    let key = id.to_owned();
    match replica
        .store
        .run(move |s| s.delete_lost_container(&key))
        .await?
    {
        LostDeletion::Deleted => {
            tracing::info!(container = %id, "lost container deleted");
            Ok(LostDelete::Done(
                Json(shellgate_wire::Deleted::new(id, "container")).into_response(),
            ))
        }
        LostDeletion::NodeIsLive => Ok(LostDelete::NodeIsLive(row.node_id)),
        LostDeletion::Unknown => Ok(LostDelete::NotOwner),
    }
}

/// A lost container's object (`"status": "lost"`) for its project's key,
/// read from the store (its node is gone); `None` when the request is not
/// its owner's.
async fn show_lost(
    replica: &Replica,
    headers: &HeaderMap,
    id: &str,
) -> ApiResult<Option<Response>> {
    let Some(row) = owned_row(replica, headers, id).await? else {
        return Ok(None);
    };
    let mut container = crate::sandboxes::containers::container_object(&row)?;
    container.status = ContainerStatus::Lost.as_str().to_owned();
    Ok(Some(Json(container).into_response()))
}

/// Whether a request with `method` names the container `id` itself (its
/// object: the API's or E2B's), not something inside it.
fn names_container(
    routes: &Routes,
    request: &Request,
    method: &axum::http::Method,
    id: &str,
) -> bool {
    request.method() == method
        && routes.container_object(request.uri().path()).as_deref() == Some(id)
}

/// A signed file URL built from `E2B_SANDBOX_URL` names no sandbox; its
/// signature does (`e2b::signed`): the sandbox it finds is named in
/// `E2b-Sandbox-Id`, so the request goes to that sandbox's node, which
/// checks the signature again. One that matches no sandbox goes on as it
/// came (any node refuses it).
async fn name_signed_sandbox(replica: &Replica, request: &mut Request) {
    if request
        .headers()
        .contains_key(shellgate_wire::e2b::SANDBOX_ID_HEADER)
    {
        return;
    }
    let Some(Ok(signed)) = crate::e2b::signed::SignedRequest::of(request.method(), request.uri())
    else {
        return;
    };
    let found = replica
        .signing
        .find(&replica.store, |token| signed.made_with(token))
        .await;
    if let Ok(Some(id)) = found {
        if let Ok(id) = HeaderValue::from_str(&id) {
            request
                .headers_mut()
                .insert(shellgate_wire::e2b::SANDBOX_ID_HEADER, id);
        }
    }
}

/// Sends a request on to the node that serves it.
async fn forward(State(replica): State<Arc<Replica>>, request: Request) -> Response {
    match route(&replica, request).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

async fn route(replica: &Arc<Replica>, mut request: Request) -> ApiResult<Response> {
    // Only a replica may show the secret; a tenant's copies go.
    request.headers_mut().remove(SECRET_HEADER);
    request.headers_mut().remove(FORWARD_HEADER);
    // A node's own routes (its state, drain, metrics) are the operator's,
    // on the node: never forwarded on a tenant's behalf.
    if replica.routes.node_only(request.uri().path()) {
        return Err(crate::ops::not_found().await);
    }
    name_signed_sandbox(replica, &mut request).await;
    let goes = replica.routes.target(
        request.method(),
        request.uri().path(),
        request.headers(),
        &replica.config.server.ports_base_domain,
    );
    match goes {
        Target::Container(id) => {
            // Lost: marked so, or its node is gone, or silent past the
            // limit and not answering (the sweep marks it at its next pass).
            let live = match replica.directory.locate(&replica.store, &id).await? {
                // Unknown here: any node answers it (a 404 in the API's words).
                Whereabouts::Unknown => return send_anywhere(replica, request).await,
                Whereabouts::On(node) if alive(&node, now(), replica.lost_after()) => Some(node),
                // Silent in a copy up to a second old: its heartbeat since
                // is read (a node back from a stall answers again at once),
                // and a node still silent is asked whether it answers.
                Whereabouts::On(node) => {
                    let now = replica.directory.node_now(&replica.store, &node.id).await?;
                    replica.reachable(now).await
                }
                Whereabouts::Lost => None,
            };
            let asks = Asks::of(&replica.routes, &request, &id);
            match live {
                Some(node) => {
                    let headers = request.headers().clone();
                    match send(replica, &node, request).await {
                        // Declared lost while it was sent there: answered
                        // as any request for a lost container is. (A
                        // delete the node, back that very moment, is to
                        // do: it has the request; 502, and a retry goes
                        // to it.)
                        Err((_, Unanswered::GaveUp(Silence::Lost))) => {
                            match answer_lost(replica, &headers, &id, asks).await? {
                                Answered::Here(response) => Ok(response),
                                Answered::NodeIsLive(_) => Err(node_unreachable(&node.id)),
                            }
                        }
                        sent => sent.map_err(|(e, _)| e),
                    }
                }
                None => match answer_lost(replica, request.headers(), &id, asks).await? {
                    Answered::Here(response) => Ok(response),
                    // Its node came back before the delete: its to do.
                    Answered::NodeIsLive(node_id) => {
                        let key = node_id.clone();
                        match replica.store.run(move |s| s.node(&key)).await? {
                            Some(node) => send(replica, &node, request).await.map_err(|(e, _)| e),
                            None => Err(node_unreachable(&node_id)),
                        }
                    }
                },
            }
        }
        Target::Response(id) => {
            let home = replica
                .store
                .run(move |s| s.response_node(&id))
                .await?
                .filter(|node| alive(node, now(), replica.lost_after()));
            match home {
                Some(node) => {
                    // A read is any node's to answer when its own does not.
                    let again = safe(request.method()).then(|| request_again(&request));
                    match (send(replica, &node, request).await, again) {
                        (Err((_, Unanswered::GaveUp(_) | Unanswered::Broke)), Some(again)) => {
                            send_anywhere(replica, again).await
                        }
                        (sent, _) => sent.map_err(|(e, _)| e),
                    }
                }
                // Not recorded, or its node is gone: the stored object is
                // any node's to show.
                None => send_anywhere(replica, request).await,
            }
        }
        // A volume's object is a row: any node shows it, even while the
        // volume's own node is down.
        Target::Volume(_)
            if safe(request.method()) && !request.uri().path().contains("/volumecontent/") =>
        {
            send_anywhere(replica, request).await
        }
        Target::Volume(id) => {
            let key = id.clone();
            let home = replica
                .store
                .run(move |s| s.volume_by_id(&key))
                .await?
                .map(|row| row.node_id);
            let Some(node_id) = home else {
                // Unknown here: any node answers it (a 404 in its API's words).
                return send_anywhere(replica, request).await;
            };
            let key = node_id.clone();
            let known = replica.store.run(move |s| s.node(&key)).await?;
            let node = replica.reachable(known).await;
            match node {
                Some(node) => send(replica, &node, request).await.map_err(|(e, _)| e),
                None => Err(volume_node_unreachable(&id, &node_id)),
            }
        }
        Target::NewVolume => {
            let home = project_volumes_node(replica, request.headers()).await?;
            match home {
                Some(node) => send(replica, &node, request).await.map_err(|(e, _)| e),
                None => send_anywhere(replica, request).await,
            }
        }
        Target::Create => place(replica, request, None).await,
        Target::ModelRequest(api) => {
            // The body is read (bounded like every request) to find the
            // container it continues; it is sent on whole.
            let (parts, body) = request.into_parts();
            let bytes = read_body(replica, body).await?;
            let image = Routed::of(&bytes).image;
            let continued = continued_node(replica, api, &parts.headers, &bytes).await?;
            let home = replica.reachable(continued).await;
            let request = Request::from_parts(parts, Body::from(bytes.clone()));
            match home {
                Some(node) => send(replica, &node, request).await.map_err(|(e, _)| e),
                // A new container, if the model asks for one: placed.
                None => place(replica, request, Some((bytes, image))).await,
            }
        }
        Target::Any => send_anywhere(replica, request).await,
    }
}

/// The node of the container a model request continues: the container
/// the node itself picks ([`Reuse::pick`] over the typed request, its
/// stored conversation first), while it runs or sleeps. `None`: a new
/// container (placed), or a body the node refuses (any node answers it).
async fn continued_node(
    replica: &Replica,
    api: ModelApi,
    headers: &HeaderMap,
    body: &[u8],
) -> ApiResult<Option<NodeRow>> {
    let routed = Routed::of(body);
    let value = || serde_json::from_slice::<serde_json::Value>(body).ok();
    // A session's container and a stored response's are the key's
    // project's.
    let project = if routed.session_id.is_some() || routed.previous_response_id.is_some() {
        grant(replica, headers).await?.map(|grant| grant.project)
    } else {
        None
    };
    let reuse = match api {
        ModelApi::Chat => None,
        ModelApi::Messages => value()
            .and_then(|value| shellgate_wire::messages::CreateMessage::read(&value).ok())
            .and_then(|request| crate::messages::continued(&request)),
        ModelApi::Responses => {
            let Some(request) = value().and_then(|v| crate::responses::read_request(v).ok()) else {
                return Ok(None);
            };
            let stored = match (&project, &request.previous_response_id) {
                (Some(project), Some(previous)) => {
                    let (project, previous) = (project.clone(), previous.clone());
                    replica
                        .store
                        .run(move |s| s.response(&project, &previous))
                        .await?
                        .and_then(|row| crate::responses::stored_items(&row.conversation).ok())
                        .unwrap_or_default()
                }
                _ => Vec::new(),
            };
            // A request whose tools the node refuses is any node's to
            // answer (its 400).
            shellgate_model::tools::Tools::parse(request.tools.as_deref().unwrap_or_default())
                .ok()
                .map(|tools| crate::responses::continued(&request, &tools, &stored))
        }
    };
    let container = match (reuse, project) {
        (Some(Reuse::Session(key)), Some(project)) => {
            match replica
                .store
                .run(move |s| s.session_container(&project, &key))
                .await?
            {
                Some(id) => id,
                None => return Ok(None),
            }
        }
        (Some(reuse), _) => match reuse.container() {
            Some(id) => id.to_owned(),
            None => return Ok(None),
        },
        (None, _) => return Ok(None),
    };
    replica
        .store
        .run(move |s| match s.container_node(&container)? {
            Some((node, ContainerStatus::Running | ContainerStatus::Suspended)) => s.node(&node),
            _ => Ok(None),
        })
        .await
}

/// What a request for a container asks of the container itself.
#[derive(Clone, Copy)]
struct Asks {
    /// `GET` of its object.
    object: bool,
    /// `DELETE` of it.
    deletion: bool,
}

impl Asks {
    fn of(routes: &Routes, request: &Request, id: &str) -> Self {
        Self {
            object: names_container(routes, request, &axum::http::Method::GET, id),
            deletion: names_container(routes, request, &axum::http::Method::DELETE, id),
        }
    }
}

/// How a request for a lost container was answered.
enum Answered {
    Here(Response),
    /// A delete of one whose node is live again (on this node): the node
    /// is the one to delete it.
    NodeIsLive(String),
}

/// The answer for a container whose node is lost or silent: its object
/// (`"status": "lost"`) and its deletion for its project's key, 409
/// `container_lost` for anything else, 404 to anyone else.
async fn answer_lost(
    replica: &Replica,
    headers: &HeaderMap,
    id: &str,
    asks: Asks,
) -> ApiResult<Answered> {
    if asks.deletion {
        return match delete_lost(replica, headers, id).await? {
            LostDelete::Done(deleted) => Ok(Answered::Here(deleted)),
            LostDelete::NodeIsLive(node) => Ok(Answered::NodeIsLive(node)),
            LostDelete::NotOwner => Err(ApiError::not_found("container", id)),
        };
    }
    if asks.object {
        return match show_lost(replica, headers, id).await? {
            Some(shown) => Ok(Answered::Here(shown)),
            None => Err(ApiError::not_found("container", id)),
        };
    }
    Err(lost(replica, headers, id).await)
}

/// Whether a request only reads (sent twice, it does nothing twice).
fn safe(method: &axum::http::Method) -> bool {
    method == axum::http::Method::GET || method == axum::http::Method::HEAD
}

/// A bodiless copy of `request`, to send to another node.
fn request_again(request: &Request) -> Request {
    let mut again = Request::new(Body::empty());
    *again.method_mut() = request.method().clone();
    *again.uri_mut() = request.uri().clone();
    *again.headers_mut() = request.headers().clone();
    if let Some(addr) = request.extensions().get::<crate::listener::ClientAddr>() {
        again.extensions_mut().insert(*addr);
    }
    again
}

/// The 502 for a volume whose node is lost, silent or gone: its directory
/// is on that node's disk alone.
fn volume_node_unreachable(volume: &str, node: &str) -> ApiError {
    ApiError::of(
        ErrorCode::NodeUnreachable,
        format!(
            "Volume '{volume}' lives on node \"{node}\", which is not answering: its files \
             are on that node's disk alone, and come back with it."
        ),
    )
    .with_retry_after(5)
}

/// The live node holding the volumes of the request's project (its oldest
/// volume's), if it has any: a new volume goes beside them, so one
/// container can mount any of a project's volumes together.
async fn project_volumes_node(
    replica: &Replica,
    headers: &HeaderMap,
) -> ApiResult<Option<NodeRow>> {
    let Some(grant) = grant(replica, headers).await? else {
        return Ok(None);
    };
    let node = replica
        .store
        .run(move |s| {
            let volumes = s.project_volumes(&grant.project)?;
            match volumes.into_iter().next() {
                Some(oldest) => s.node(&oldest.node_id),
                None => Ok(None),
            }
        })
        .await?;
    Ok(node.filter(|node| alive(node, now(), replica.lost_after())))
}

/// The node whose disk holds the volumes a create mounts (the first
/// mount's: a node refuses mounts of another node's volume), if it mounts
/// any that exist; a volume named by name is looked up in the key's
/// project.
async fn volumes_node(
    replica: &Replica,
    headers: &HeaderMap,
    routed: &Routed,
) -> ApiResult<Option<String>> {
    let Some(mount) = routed
        .volumes
        .iter()
        .flatten()
        .chain(routed.volume_mounts.iter().flatten())
        .next()
    else {
        return Ok(None);
    };
    let row = match (&mount.volume_id, &mount.name) {
        (Some(id), _) => {
            let id = id.clone();
            replica.store.run(move |s| s.volume_by_id(&id)).await?
        }
        (None, Some(name)) => {
            let Some(grant) = grant(replica, headers).await? else {
                return Ok(None);
            };
            let name = name.clone();
            replica
                .store
                .run(move |s| s.volume_named(&grant.project, &name))
                .await?
        }
        (None, None) => None,
    };
    Ok(row.map(|row| row.node_id))
}

/// The 502 for a node that did not answer.
fn node_unreachable(node: &str) -> ApiError {
    ApiError::of(
        ErrorCode::NodeUnreachable,
        format!("The node serving this request (\"{node}\") did not answer."),
    )
    .with_retry_after(5)
}

/// A request's whole body, bounded like every request's.
async fn read_body(replica: &Replica, body: Body) -> ApiResult<axum::body::Bytes> {
    axum::body::to_bytes(body, replica.config.server.max_request_bytes)
        .await
        .map_err(|_| {
            ApiError::too_large(format!(
                "Request body is larger than {} bytes.",
                replica.config.server.max_request_bytes
            ))
        })
}

/// Sends a create to the node placement picks, trying another when one
/// cannot be reached (the request never arrived, so it is not made twice).
/// `read`: the body and the image it names, when the caller read them.
async fn place(
    replica: &Arc<Replica>,
    request: Request,
    read: Option<(axum::body::Bytes, Option<String>)>,
) -> ApiResult<Response> {
    let (parts, body) = request.into_parts();
    let (bytes, image) = match read {
        Some(read) => read,
        None => {
            let bytes = read_body(replica, body).await?;
            let image = Routed::of(&bytes).image;
            (bytes, image)
        }
    };
    // A container that mounts a volume runs where the volume is.
    let pinned = volumes_node(replica, &parts.headers, &Routed::of(&bytes)).await?;
    let mut tried = Vec::new();
    loop {
        let mut loads = replica.loads().await?;
        if let Some(node) = &pinned {
            loads.retain(|load| &load.node.id == node);
        }
        // A node that failed to answer lately only when no other has room.
        let avoid = [tried.clone(), replica.suspects()].concat();
        let choose = |skip: &[String]| {
            replica
                .placements
                .choose(&loads, image.as_deref(), skip, now(), replica.lost_after())
        };
        let Some((node, placed)) = choose(&avoid).or_else(|| choose(&tried)) else {
            return Err(match &pinned {
                Some(node) => ApiError::of(
                    ErrorCode::NoNodeAvailable,
                    format!(
                        "The node holding the volumes this container mounts (\"{node}\") has \
                         no room for it now (full, draining, lost, or without the image)."
                    ),
                )
                .with_retry_after(5),
                None => no_room(image.as_deref()),
            });
        };
        let request = Request::from_parts(parts.clone(), Body::from(bytes.clone()));
        let sent = send(replica, &node, request).await;
        drop(placed);
        match sent {
            Err((_, Unanswered::NeverReached)) if tried.len() + 1 < ATTEMPTS => tried.push(node.id),
            other => return other.map_err(|(e, _)| e),
        }
    }
}

fn no_room(image: Option<&str>) -> ApiError {
    ApiError::of(
        ErrorCode::NoNodeAvailable,
        match image {
            Some(image) => format!(
                "No node of this cluster has room for another container of image '{image}' \
                 now (every node is full, draining, lost, or lacks the image)."
            ),
            None => "No node of this cluster has room for another container now (every node \
                     is full, draining or lost)."
                .to_owned(),
        },
    )
    .with_retry_after(5)
}

/// Sends a request any node can answer to a live node (one that answered
/// lately first), and to another when the first cannot be reached and the
/// request has no body to lose, or gave no answer (or broke off) and the
/// request only reads (one that writes, a `DELETE` included, may have been
/// done: never twice).
async fn send_anywhere(replica: &Arc<Replica>, request: Request) -> ApiResult<Response> {
    let (parts, body) = request.into_parts();
    let mut body = Some(body);
    let mut tried = Vec::new();
    loop {
        let loads = replica.loads().await?;
        let avoid = [tried.clone(), replica.suspects()].concat();
        let any = |skip: &[String]| Placements::any(&loads, skip, now(), replica.lost_after());
        let Some(node) = any(&avoid).or_else(|| any(&tried)) else {
            return Err(ApiError::of(
                ErrorCode::NoNodeAvailable,
                "No node of this cluster is reachable now.",
            )
            .with_retry_after(5));
        };
        // Only a request without a body is tried again: a streamed body
        // sent once cannot be sent twice.
        let bodiless = parts.method == axum::http::Method::GET
            || parts.method == axum::http::Method::HEAD
            || parts.method == axum::http::Method::DELETE;
        let this_body = if bodiless {
            Body::empty()
        } else {
            body.take().unwrap_or_else(Body::empty)
        };
        let request = Request::from_parts(parts.clone(), this_body);
        let again = tried.len() + 1 < ATTEMPTS;
        match send(replica, &node, request).await {
            Err((_, Unanswered::NeverReached)) if bodiless && again => tried.push(node.id),
            Err((_, Unanswered::GaveUp(_) | Unanswered::Broke)) if safe(&parts.method) && again => {
                tried.push(node.id)
            }
            other => return other.map_err(|(e, _)| e),
        }
    }
}

/// The URL a request with `target` (its path and query) is sent to on the
/// node at `address`. The path was checked as received (`canonical`), and
/// the node must see exactly that path: a URL parser that would read it
/// otherwise (resolve a dot segment, take `\` for `/`) is never given the
/// last word, the request is refused instead.
fn forwarded_url(address: &str, target: &Uri) -> Result<reqwest::Url, ApiError> {
    let path_and_query = target.path_and_query().map_or("/", |p| p.as_str());
    let refused = || {
        ApiError::bad_request("The request path cannot be forwarded as it is spelled.")
            .with_code(ErrorCode::InvalidRequestPath)
    };
    let url = reqwest::Url::parse(&format!("{address}{path_and_query}")).map_err(|_| refused())?;
    if url.path() != target.path() {
        return Err(refused());
    }
    Ok(url)
}

/// Why a forwarded request has no answer from its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unanswered {
    /// The node was never reached (the request never arrived).
    NeverReached,
    /// The replica stopped waiting for the node (it may have the request).
    GaveUp(Silence),
    /// The exchange broke off after the request was sent.
    Broke,
    /// Not sent: it cannot be forwarded as it is (its path).
    Refused,
}

/// Forwards `request` to `node`: its method, path (as it was checked),
/// headers (with the cluster's forwarding credential; without the hop's
/// own) and body, streamed; the answer comes back the same way, and an
/// upgrade (a PTY's WebSocket) is joined end to end. Until the answer
/// begins, the wait is raced against the node's liveness
/// (`Liveness::watch`); once it began, a stream runs as long as it runs.
/// An error says why there is no answer.
async fn send(
    replica: &Arc<Replica>,
    node: &NodeRow,
    mut request: Request,
) -> Result<Response, (ApiError, Unanswered)> {
    let upgrade = request
        .headers()
        .get(header::UPGRADE)
        .is_some()
        .then(|| hyper::upgrade::on(&mut request));
    let url = forwarded_url(&node.address, request.uri())
        .map_err(|error| (error, Unanswered::Refused))?;
    let (parts, body) = request.into_parts();
    let mut headers = parts.headers.clone();
    drop_hop_headers(&mut headers, upgrade.is_some());
    // The forwarding credential, never the operator's: the node serves
    // this request the API alone.
    headers.remove(SECRET_HEADER);
    let secret = replica
        .config
        .cluster
        .cluster_secret
        .get()
        .unwrap_or_default();
    if let Ok(value) = HeaderValue::from_str(secret) {
        headers.insert(HeaderName::from_static(FORWARD_HEADER), value);
    }
    if let Some(addr) = parts.extensions.get::<crate::listener::ClientAddr>() {
        if let Ok(value) = HeaderValue::from_str(&addr.0.ip().to_string()) {
            headers.insert(HeaderName::from_static("x-forwarded-for"), value);
        }
    }
    let sending = replica
        .client
        .request(parts.method.clone(), url)
        .headers(headers)
        .body(reqwest::Body::wrap_stream(body.into_data_stream()))
        .send();
    let silence = replica
        .liveness
        .watch(&replica.client, &replica.directory, &replica.store, node);
    let sent = tokio::select! {
        sent = sending => sent,
        silence = silence => {
            tracing::warn!(node = %node.id, ?silence, "gave up waiting for the node's answer");
            return Err((node_unreachable(&node.id), Unanswered::GaveUp(silence)));
        }
    };
    let answer = match sent {
        Ok(answer) => {
            replica.liveness.answered(&node.id);
            answer
        }
        Err(error) => {
            tracing::warn!(node = %node.id, "forwarding failed: {error}");
            let why = if error.is_connect() {
                replica.liveness.failed(&node.id);
                Unanswered::NeverReached
            } else {
                Unanswered::Broke
            };
            return Err((node_unreachable(&node.id), why));
        }
    };
    let status = answer.status();
    let mut response_headers = answer.headers().clone();
    drop_hop_headers(
        &mut response_headers,
        status == StatusCode::SWITCHING_PROTOCOLS,
    );
    if status == StatusCode::SWITCHING_PROTOCOLS {
        let Some(client_side) = upgrade else {
            return Err((
                ApiError::internal("a node upgraded a plain request"),
                Unanswered::Broke,
            ));
        };
        let node_id = node.id.clone();
        tokio::spawn(async move {
            let (node_side, client_side) = match (answer.upgrade().await, client_side.await) {
                (Ok(node_side), Ok(client_side)) => (node_side, client_side),
                _ => return,
            };
            let mut node_side = node_side;
            let mut client_side = hyper_util::rt::TokioIo::new(client_side);
            if let Err(error) =
                tokio::io::copy_bidirectional(&mut client_side, &mut node_side).await
            {
                tracing::debug!(node = %node_id, "upgraded connection ended: {error}");
            }
        });
        let mut response = Response::new(Body::empty());
        *response.status_mut() = status;
        *response.headers_mut() = response_headers;
        return Ok(response);
    }
    let mut response = Response::new(Body::from_stream(answer.bytes_stream()));
    *response.status_mut() = status;
    *response.headers_mut() = response_headers;
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::{forwarded_url, pool_idle_timeout, send, Replica};
    use crate::config::{ClusterSettings, Config, Secret, ServerSettings};
    use crate::db::Db;
    use axum::body::Body;
    use axum::extract::Request;
    use axum::http::Uri;
    use shellgate_store::{NodeRow, NodeStatus, Store};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn an_idle_connection_to_a_node_is_dropped_well_before_the_node_drops_it() {
        for secs in [1, 10, 300] {
            let config = Config {
                server: ServerSettings {
                    header_read_timeout_secs: secs,
                    ..ServerSettings::default()
                },
                ..Config::default()
            };
            let kept = pool_idle_timeout(&config);
            assert!(
                kept < std::time::Duration::from_secs(secs),
                "{secs} s: {kept:?}"
            );
        }
    }

    fn node_only(path: &str) -> bool {
        super::Routes::new(&Config::default()).node_only(path)
    }

    #[test]
    fn a_nodes_own_routes_are_never_forwarded() {
        for path in [
            "/internal/v1/drain",
            "//internal/v1/drain",
            "/./internal/v1/node",
            "/INTERNAL/v1/drain",
            "/internal",
            "/metrics",
            "/Metrics/",
        ] {
            assert!(node_only(path), "{path}");
        }
        for path in [
            "/v1/containers",
            "/v1/internal",
            "/internals/x",
            "/",
            "/v1/metrics",
            "/metrics/x",
        ] {
            assert!(!node_only(path), "{path}");
        }
    }

    #[test]
    fn a_path_a_url_parser_would_read_otherwise_is_never_forwarded() {
        let address = "http://10.0.0.7:8080";
        for target in [
            "/v1/../internal/v1/drain",
            "/v1/%2e%2e/internal/v1/drain",
            "/v1/.%2E/metrics",
            "/v1/./metrics",
            "/v1\\..\\internal/v1/node",
        ] {
            let uri: Uri = target.parse().unwrap();
            let error = forwarded_url(address, &uri).unwrap_err();
            assert_eq!(error.code.code(), Some("invalid_request_path"), "{target}");
        }
        for target in [
            "/v1/containers/cntr_a/ports/8000/a%2Fb;c/%252e%252e/?x=1&y=%20",
            "/v1/files",
            "/",
        ] {
            let uri: Uri = target.parse().unwrap();
            let url = forwarded_url(address, &uri).unwrap();
            assert_eq!(&url.as_str()[address.len()..], target);
        }
    }

    /// A registered node at `address`, its last heartbeat long ago.
    fn node_at(id: &str, address: String) -> NodeRow {
        NodeRow {
            id: id.into(),
            address,
            status: NodeStatus::Ready,
            memory_bytes: 1 << 30,
            max_containers: 10,
            images: Vec::new(),
            cgroup_layout: "v2".into(),
            version: "test".into(),
            started_at: 0,
            heartbeat_at: 0,
        }
    }

    /// The sweep declares lost a silent node that does not answer (no
    /// listener: refused), never one whose heartbeats are late but whose
    /// `/livez` answers; requests for its containers go to it meanwhile.
    #[tokio::test]
    async fn a_silent_node_is_declared_lost_only_when_it_does_not_answer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let answering = node_at(
            "answering",
            format!("http://{}", listener.local_addr().unwrap()),
        );
        let app = axum::Router::new().route("/livez", axum::routing::get(|| async { "ok" }));
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let gone = node_at("gone", format!("http://{}", closed.local_addr().unwrap()));
        drop(closed);
        let store = Db::new(Store::in_memory().unwrap());
        for row in [&answering, &gone] {
            let row = row.clone();
            store.run(move |s| s.register_node(&row)).await.unwrap();
        }
        let replica = Replica::new(Config::default(), store.clone()).unwrap();

        super::mark_lost_nodes(&replica).await.unwrap();
        let statuses = store.run(|s| s.node_rows()).await.unwrap();
        let statuses: Vec<_> = statuses.iter().map(|n| (n.id.as_str(), n.status)).collect();
        assert_eq!(
            statuses,
            [("answering", NodeStatus::Ready), ("gone", NodeStatus::Lost)]
        );
        assert!(replica.reachable(Some(answering.clone())).await.is_some());
        assert!(replica.reachable(Some(gone.clone())).await.is_none());
        server.abort();
    }

    /// What a node received: the request line and the head, as bytes on
    /// the wire.
    async fn received_by_a_node(target: &str) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let node = node_at("n1", format!("http://{}", listener.local_addr().unwrap()));
        let config = Config {
            cluster: ClusterSettings {
                cluster_secret: Secret("s".repeat(32)),
                ..ClusterSettings::default()
            },
            ..Config::default()
        };
        let replica = Replica::new(config, Db::new(Store::in_memory().unwrap())).unwrap();
        let node_side = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                let mut byte = [0u8; 1];
                if socket.read(&mut byte).await.unwrap() == 0 {
                    break;
                }
                head.push(byte[0]);
            }
            socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                .await
                .unwrap();
            String::from_utf8(head).unwrap()
        });
        let request = Request::builder()
            .uri(target)
            .header(super::SECRET_HEADER, "s".repeat(32))
            .body(Body::empty())
            .unwrap();
        let answer = send(&replica, &node, request).await.map_err(|(e, _)| e);
        assert_eq!(answer.unwrap().status(), 200);
        node_side.await.unwrap()
    }

    #[tokio::test]
    async fn a_node_receives_the_path_as_it_was_checked_with_the_forwarding_credential() {
        for target in [
            "/v1/containers/cntr_a/ports/8000/a%2Fb;c/%252e%252e/x?y=%20&z=1",
            "/v1/containers/cntr_a/files",
        ] {
            let head = received_by_a_node(target).await.to_ascii_lowercase();
            let line = head.lines().next().unwrap_or_default().to_owned();
            assert_eq!(
                line,
                format!("get {} http/1.1", target.to_ascii_lowercase())
            );
            assert!(
                head.contains(&format!("{}: {}", super::FORWARD_HEADER, "s".repeat(32))),
                "{head}"
            );
            assert!(!head.contains(super::SECRET_HEADER), "{head}");
        }
    }
}
