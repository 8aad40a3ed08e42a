//! E2B's REST control plane: sandboxes created, listed, inspected, timed,
//! paused, resumed and killed, each a shellgate container.
//!
//! A sandbox *is* a container: it is made by `sandboxes::containers::create_container`
//! (the one path of `POST /v1/containers`: quotas, admission, billing,
//! audit, network policy, image) and removed by `remove_container`; E2B's
//! own record (`e2b_sandboxes`: token, metadata, envs, `end_at`, pause
//! state) sits beside it and goes with it.
//!
//! - **Timeout**: `timeout` seconds from now is the sandbox's `end_at`; its
//!   timer (`deadlines`) kills it then, or pauses it when `autoPause`, and
//!   the lifecycle sweeper's pass checks it too. Until
//!   then it is exempt from shellgate's idle suspension and idle expiry
//!   (`lifecycle::sweep` leaves E2B's sandboxes to `timeouts::sweep_sandboxes`).
//! - **Pause** = suspension: its processes end, its files stay (memory is not
//!   kept); `connect` (or the older `resume`) wakes it and moves `end_at`,
//!   and so does the next in-sandbox call when its create said `autoResume`.
//! - **Network**: `allowOut` domains become the container's allowlist;
//!   `allow_internet_access: true` alone allows any domain where the
//!   operator lets containers do so, and is shellgate's default elsewhere
//!   (older SDKs send it on every create; the info shows
//!   `allowInternetAccess: false`); no network field leaves shellgate's default
//!   (no network). What shellgate's egress proxy cannot express (IPs and
//!   CIDRs, per-host transforms, an egress proxy, DNS servers) is refused
//!   with a 400 naming it, never dropped.
//! - **Idempotency-Key**: the same key of the same project within 24 hours
//!   answers the first create's sandbox again (201); the key with a
//!   different body is a 409.
//!
//! Errors are E2B's body, `{"code": <status>, "message": …}`, which the
//! SDK's generated client parses for every status.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Json;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use shellgate_store::{ContainerRow, E2bListFilter, E2bSandboxRow};
use shellgate_wire::e2b::{
    ConnectRequest, Lifecycle, ListedSandbox, NetworkConfig, NetworkInfo, NetworkUpdate,
    NewSandbox, OnTimeout, PauseRequest, RefreshRequest, Sandbox, SandboxDetail, SandboxState,
    TemplateAlias, TimeoutRequest,
};
use shellgate_wire::time::{parse_rfc3339, rfc3339};
use shellgate_wire::{CreateContainer, NetworkPolicy, VolumeMount};

use super::access_cache::AccessEntry;
use super::request::{bad_request, e2b_error, e2b_lock, read_body, E2bProject};
use super::templates::DEFAULT_TEMPLATES;
use super::E2bError;
use crate::auth::e2b_traffic_token;
use crate::public_base::PublicBase;
use crate::state::AppState;

/// The envd version shellgate reports: every feature gate of the SDK
/// (`e2b/envd/versions.py` of e2b 2.63.0, the highest 0.6.4) is met.
pub const ENVD_VERSION: &str = "0.6.4";
/// E2B's `clientID` (a legacy field the SDK requires).
const CLIENT_ID: &str = "shellgate";
/// E2B's default timeout, in seconds.
const DEFAULT_TIMEOUT_SECS: i64 = 300;
/// How long an idempotency key replays its create.
const IDEMPOTENCY_WINDOW_SECS: i64 = 24 * 3600;
/// Metadata bounds: entries, key bytes, value bytes.
const MAX_METADATA: (usize, usize, usize) = (64, 64, 1024);
/// Environment bounds: entries, name bytes, value bytes.
const MAX_ENV_VARS: (usize, usize, usize) = (256, 256, 32 * 1024);
/// Longest listing page (E2B's own bound).
const MAX_LIST_LIMIT: u32 = 100;

type E2bResult<T> = Result<T, E2bError>;

/// The routes of E2B's control plane, at the root as E2B's API serves them.
pub(crate) fn routes(table: crate::route_table::RouteTable) -> crate::route_table::RouteTable {
    let table = table
        .route("/v2/sandboxes", post(create).get(list))
        .route("/sandboxes", post(create).get(list))
        .route("/sandboxes/{sandbox_id}", get(info).delete(kill))
        .route("/sandboxes/{sandbox_id}/timeout", post(set_timeout))
        .route("/sandboxes/{sandbox_id}/pause", post(pause))
        .route("/v2/sandboxes/{sandbox_id}/connect", post(connect))
        .route("/sandboxes/{sandbox_id}/connect", post(connect))
        .route("/sandboxes/{sandbox_id}/resume", post(resume))
        .route("/templates/aliases/{alias}", get(template_alias))
        .route("/sandboxes/{sandbox_id}/refreshes", post(refresh))
        .route("/sandboxes/{sandbox_id}/network", put(update_network));
    super::templates::routes(table)
}

/// `PUT /sandboxes/{id}/network`: the sandbox's egress rules replaced
/// whole (a field omitted is cleared: with neither list nor
/// `allow_internet_access`, every domain, as E2B's default), mapped as a
/// create's `network` is. Running or paused; a sandbox created without
/// network is a 409 (see `sandboxes::containers::update_network`).
async fn update_network(
    State(state): State<Arc<AppState>>,
    E2bProject(project): E2bProject,
    Path(id): Path<String>,
    body: Bytes,
) -> E2bResult<StatusCode> {
    let update: NetworkUpdate = read_body(&body)?;
    let network = NetworkConfig {
        allow_out: update.allow_out,
        deny_out: update.deny_out,
        dns_servers: update.dns_servers,
        egress_proxy: update.egress_proxy,
        rules: update.rules,
        ..NetworkConfig::default()
    };
    let allowed_domains = match network_policy(
        Some(update.allow_internet_access.unwrap_or(true)),
        Some(&network),
    )? {
        Some(NetworkPolicy::Allowlist {
            allowed_domains, ..
        }) => allowed_domains,
        Some(NetworkPolicy::Disabled) | None => Vec::new(),
    };
    let (_, container) = owned(&state, &project, &id).await?;
    crate::sandboxes::containers::update_network(&state, &container, allowed_domains)
        .await
        .map_err(|mut e| {
            if e.param
                .as_deref()
                .is_some_and(|p| p.starts_with("network_policy"))
            {
                e.param = Some("network".to_owned());
            }
            e2b_error(e)
        })?;
    Ok(StatusCode::NO_CONTENT)
}

/// What a sandbox create's template names: the image (`None`: the
/// server's default) and, for a template of the project, that template.
type ChosenTemplate = (
    Option<String>,
    Option<(
        shellgate_store::E2bTemplateRow,
        super::templates::TemplateSpec,
    )>,
);

async fn choose_template(
    state: &Arc<AppState>,
    project: &str,
    template: &str,
) -> E2bResult<ChosenTemplate> {
    // The default templates are no project's (their names are refused to
    // builds): no store read for them.
    if DEFAULT_TEMPLATES.contains(&template) {
        return Ok((None, None));
    }
    if let Some(found) = super::templates::ready_template(state, project, template).await? {
        let image = super::templates::image_name(&found.0.template_id);
        // A template is its image; one built before templates were images
        // has none.
        if template_image(state, project, &image).await.is_err() {
            return Err(E2bError::new(
                StatusCode::BAD_REQUEST,
                format!(
                    "template '{template}' has no image (it was built by an earlier shellgate, \
                     as a layer): build it again"
                ),
            ));
        }
        return Ok((Some(image), Some(found)));
    }
    Ok((template_image(state, project, template).await?, None))
}

/// The image a template names: E2B's default templates are the server's
/// default image; a shellgate image is itself; anything else is 404.
async fn template_image(
    state: &Arc<AppState>,
    project: &str,
    template: &str,
) -> E2bResult<Option<String>> {
    if DEFAULT_TEMPLATES.contains(&template) {
        return Ok(None);
    }
    // A cluster's node lists the object store's images too (a template
    // built on another node is fetched at the create).
    let images = crate::sandboxes::containers::image_list(state)
        .await
        .map_err(E2bError::from)?;
    // Another project's image (a template's, a committed one) is as
    // missing as one that does not exist.
    let usable = |image: &&shellgate_sandbox_api::image::ImageInfo| {
        crate::sandboxes::containers::usable_by(image, project)
    };
    if images
        .iter()
        .filter(usable)
        .any(|image| image.name == template)
    {
        return Ok(Some(template.to_owned()));
    }
    Err(E2bError::new(
        StatusCode::NOT_FOUND,
        format!("template '{template}' not found"),
    ))
}

/// `GET /templates/aliases/{alias}`: the template an alias names, as
/// `template_image` finds it (the server's templates are every project's).
async fn template_alias(
    State(state): State<Arc<AppState>>,
    E2bProject(project): E2bProject,
    Path(alias): Path<String>,
) -> E2bResult<Json<TemplateAlias>> {
    let (owner, name) = (project.clone(), alias.clone());
    let own = state
        .db(move |s| s.e2b_template(&owner, &name))
        .await
        .map_err(e2b_error)?;
    if let Some(own) = own {
        return Ok(Json(TemplateAlias {
            template_id: own.template_id,
            public: false,
        }));
    }
    template_image(&state, &project, &alias).await?;
    Ok(Json(TemplateAlias {
        template_id: alias,
        public: true,
    }))
}

/// A timeout in seconds, checked against the server's longest container
/// life.
pub(super) fn timeout_secs(state: &AppState, timeout: Option<i64>) -> E2bResult<i64> {
    let max = i64::from(state.config.sandbox.max_expires_minutes) * 60;
    let timeout = timeout.unwrap_or(DEFAULT_TIMEOUT_SECS.min(max));
    if timeout < 1 || timeout > max {
        return Err(bad_request(format!(
            "timeout must be between 1 and {max} seconds"
        )));
    }
    Ok(timeout)
}

fn check_map(
    name: &str,
    map: &BTreeMap<String, String>,
    (entries, key_bytes, value_bytes): (usize, usize, usize),
) -> E2bResult<()> {
    if map.len() > entries {
        return Err(bad_request(format!("{name}: at most {entries} entries")));
    }
    for (key, value) in map {
        if key.is_empty() || key.len() > key_bytes {
            return Err(bad_request(format!(
                "{name}: keys must be 1 to {key_bytes} bytes"
            )));
        }
        if value.len() > value_bytes {
            return Err(bad_request(format!(
                "{name}.{key}: values must be at most {value_bytes} bytes"
            )));
        }
    }
    Ok(())
}

fn check_env_vars(env: &BTreeMap<String, String>) -> E2bResult<()> {
    check_map("envVars", env, MAX_ENV_VARS)?;
    for (name, value) in env {
        if name.contains(['=', '\0']) || value.contains('\0') {
            return Err(bad_request(format!(
                "envVars.{name}: names cannot hold '=' or NUL, values cannot hold NUL"
            )));
        }
    }
    Ok(())
}

/// E2B's network fields as a shellgate network policy (`None`: the
/// server's default, no network).
fn network_policy(
    allow_internet_access: Option<bool>,
    network: Option<&NetworkConfig>,
) -> E2bResult<Option<NetworkPolicy>> {
    let refuse = |field: &str, why: &str| {
        Err(bad_request(format!(
            "network.{field}: {why} (shellgate's egress proxy allows domains only)"
        )))
    };
    let mut allowed = Vec::new();
    if let Some(network) = network {
        if network.egress_proxy.is_some() {
            return refuse("egressProxy", "an egress proxy is not supported");
        }
        if network.rules.is_some() {
            return refuse("rules", "per-host transforms are not supported");
        }
        if network.dns_servers.is_some() {
            return refuse("dnsServers", "DNS servers cannot be chosen");
        }
        for (index, entry) in network.allow_out.iter().flatten().enumerate() {
            let entry = entry.trim();
            if entry.parse::<std::net::IpAddr>().is_ok() || entry.contains('/') {
                return refuse(
                    &format!("allowOut[{index}]"),
                    &format!("{entry:?} is an IP address or CIDR range"),
                );
            }
            allowed.push(entry.to_owned());
        }
        // `denyOut` under E2B's precedence (`allowOut` wins): denying all
        // traffic leaves what `allowOut` allows, an allowlist; denying some
        // destinations of a network that is otherwise closed
        // (`allow_internet_access: false`) changes nothing. Denying some
        // destinations of an open network ("everything except those") is
        // not an allowlist: refused, never made stricter or looser.
        let denies_all = network
            .deny_out
            .iter()
            .flatten()
            .any(|entry| ALL_TRAFFIC.contains(&entry.trim()));
        let open = !denies_all && allow_internet_access != Some(false);
        if let (true, Some(entry)) = (open, network.deny_out.iter().flatten().next()) {
            return refuse(
                "denyOut[0]",
                &format!(
                    "{:?} would deny one destination of an open network (everything \
                     except it), which an allowlist cannot say; deny all traffic \
                     (\"0.0.0.0/0\") and list what may be reached in allowOut",
                    entry.trim()
                ),
            );
        }
        if denies_all && allowed.is_empty() {
            return Ok(Some(NetworkPolicy::Disabled));
        }
    }
    if allowed.is_empty() {
        return Ok(match allow_internet_access {
            Some(true) => Some(allowlist(vec!["*".to_owned()])),
            Some(false) => Some(NetworkPolicy::Disabled),
            None => None,
        });
    }
    Ok(Some(allowlist(allowed)))
}

/// The `denyOut` entries that mean all traffic.
const ALL_TRAFFIC: [&str; 2] = ["0.0.0.0/0", "::/0"];

/// Whether a policy allows every domain (`*`).
fn allows_any_domain(policy: &NetworkPolicy) -> bool {
    matches!(policy, NetworkPolicy::Allowlist { allowed_domains, .. } if allowed_domains.iter().any(|d| d == "*"))
}

fn allowlist(allowed_domains: Vec<String>) -> NetworkPolicy {
    NetworkPolicy::Allowlist {
        allowed_domains,
        domain_secrets: Vec::new(),
        tls_passthrough_domains: Vec::new(),
    }
}

/// Checks the create's fields shellgate cannot honour.
fn check_unsupported(body: &NewSandbox) -> E2bResult<()> {
    let refuse = |field: &str| {
        Err(bad_request(format!(
            "{field} is not supported by shellgate's E2B API"
        )))
    };
    if body.mcp.is_some() {
        return refuse("mcp");
    }
    if body.iam.is_some() {
        return refuse("iam");
    }
    Ok(())
}

/// The `Idempotency-Key` header, checked as the SDK makes it (1 to 255
/// lowercase letters, digits and hyphens).
fn idempotency_key(headers: &HeaderMap) -> E2bResult<Option<String>> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let key = value.to_str().unwrap_or_default();
    if key.is_empty()
        || key.len() > 255
        || !key
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(bad_request(
            "Idempotency-Key must be 1 to 255 lowercase letters, digits or hyphens",
        ));
    }
    Ok(Some(key.to_owned()))
}

/// The `domain` E2B's SDKs build a port's host from
/// (`{port}-{id}.{domain}`): the ports' base domain with the port clients
/// reach this server on, so that the host `get_host()` gives reaches it.
fn domain(state: &AppState, headers: &HeaderMap) -> Option<String> {
    let domain = state.config.server.ports_base_domain.trim();
    (!domain.is_empty()).then(|| PublicBase::of(state, headers).sandbox_domain(domain))
}

pub(super) fn sandbox_body(state: &AppState, headers: &HeaderMap, row: &E2bSandboxRow) -> Sandbox {
    Sandbox {
        template_id: row.template_id.clone(),
        sandbox_id: row.container_id.clone(),
        client_id: CLIENT_ID.to_owned(),
        envd_version: ENVD_VERSION.to_owned(),
        envd_access_token: row.access_token.clone(),
        traffic_access_token: e2b_traffic_token(&row.access_token),
        domain: domain(state, headers),
    }
}

fn with_status(status: StatusCode, sandbox: Sandbox) -> Response {
    (status, Json(sandbox)).into_response()
}

/// The sandbox an earlier create with this `Idempotency-Key` made (within
/// the replay window), to answer again; a conflict when that create's body
/// was a different one.
async fn earlier_create(
    state: &AppState,
    project: &str,
    key: &str,
    request_hash: &str,
) -> E2bResult<Option<E2bSandboxRow>> {
    let (owner, wanted, since) = (
        project.to_owned(),
        key.to_owned(),
        crate::time::now() - IDEMPOTENCY_WINDOW_SECS,
    );
    let earlier = state
        .db(move |s| s.e2b_sandbox_by_idempotency_key(&owner, &wanted, since))
        .await
        .map_err(e2b_error)?;
    match earlier {
        Some(earlier) if earlier.request_hash.as_deref() != Some(request_hash) => {
            Err(E2bError::new(
                StatusCode::CONFLICT,
                format!("Idempotency-Key {key:?} was used by a different create request"),
            ))
        }
        earlier => Ok(earlier),
    }
}

/// The network a create's fields ask for, as the container's policy.
fn sandbox_network(state: &AppState, request: &NewSandbox) -> E2bResult<Option<NetworkPolicy>> {
    let network = network_policy(request.allow_internet_access, request.network.as_ref())?;
    if network.as_ref().is_some_and(allows_any_domain)
        && crate::egress::network_spec(&state.config, network.as_ref(), "network").is_err()
    {
        // Older SDKs send `allow_internet_access: true` on every create
        // (their default): where the operator does not let containers reach
        // any domain, the sandbox gets shellgate's default (no network),
        // which its info shows (`allowInternetAccess: false`), rather than
        // every create failing.
        tracing::debug!(
            "allow_internet_access: true, but any domain is not allowed here: no network"
        );
        return Ok(None);
    }
    Ok(network)
}

/// `POST /v2/sandboxes`, `POST /sandboxes`.
async fn create(
    State(state): State<Arc<AppState>>,
    E2bProject(project): E2bProject,
    headers: HeaderMap,
    body: Bytes,
) -> E2bResult<Response> {
    let request: NewSandbox = read_body(&body)?;
    if request.template_id.trim().is_empty() {
        return Err(bad_request("templateID is required"));
    }
    check_unsupported(&request)?;
    let key = idempotency_key(&headers)?;
    let request_hash = hex(&Sha256::digest(&body));
    // One create per key at a time: a retry racing the first waits for it
    // and replays it, rather than making a second sandbox.
    let lock = key
        .as_ref()
        .map(|key| e2b_lock(&state, &format!("create\n{project}\n{key}")));
    let _guard = match &lock {
        Some(lock) => Some(lock.lock().await),
        None => None,
    };
    if let Some(key) = &key {
        if let Some(earlier) = earlier_create(&state, &project, key, &request_hash).await? {
            return Ok(with_status(
                StatusCode::CREATED,
                sandbox_body(&state, &headers, &earlier),
            ));
        }
    }
    let metadata = request.metadata.clone().unwrap_or_default();
    check_map("metadata", &metadata, MAX_METADATA)?;
    let env_vars = request.env_vars.clone().unwrap_or_default();
    check_env_vars(&env_vars)?;
    let timeout = timeout_secs(&state, request.timeout)?;
    let network = sandbox_network(&state, &request)?;
    let snapshot_id =
        super::snapshot_ids::project_snapshot(&state, &project, &request.template_id).await?;
    let (image, template) = match snapshot_id {
        Some(_) => (None, None),
        None => choose_template(&state, &project, &request.template_id).await?,
    };
    // A template's `ENV`s are the sandbox's, under the create's own.
    let env_vars = match &template {
        Some((_, spec)) => {
            let mut merged = spec.envs.clone();
            merged.extend(env_vars);
            merged
        }
        None => env_vars,
    };
    let container = CreateContainer {
        name: format!("e2b:{}", request.template_id),
        file_ids: Vec::new(),
        expires_after: None,
        skills: Vec::new(),
        memory_limit: None,
        network_policy: network,
        image,
        exposed_ports: Vec::new(),
        volumes: request
            .volume_mounts
            .iter()
            .flatten()
            .map(|mount| VolumeMount {
                volume_id: None,
                name: Some(mount.name.clone()),
                path: mount.path.clone(),
            })
            .collect(),
        snapshot_id,
    };
    let made = crate::sandboxes::containers::create_container(&state, &project, container)
        .await
        .map_err(|e| {
            // The policy was E2B's network fields, the volumes its mounts.
            let mut e = e;
            if let Some(param) = e.param.as_deref() {
                if param.starts_with("network_policy") {
                    e.param = Some("network".to_owned());
                } else if let Some(rest) = param.strip_prefix("volumes") {
                    e.param = Some(format!("volumeMounts{rest}"));
                }
            }
            e2b_error(e)
        })?;
    if let Some((_, spec)) = &template {
        if let Err(error) =
            super::templates::prepare_sandbox(&state, spec, &made.id, &env_vars).await
        {
            let _ = crate::sandboxes::containers::remove_container(&state, &made.id).await;
            return Err(error);
        }
    }
    let now = crate::time::now();
    let row = E2bSandboxRow {
        container_id: made.id.clone(),
        project: project.clone(),
        template_id: request.template_id.clone(),
        metadata,
        env_vars,
        access_token: shellgate_wire::new_id("e2bat_"),
        auto_pause: request.auto_pause.unwrap_or(false),
        auto_resume: request.auto_resume.is_some_and(|a| a.enabled),
        created_at: now,
        started_at: now,
        end_at: now + timeout,
        paused: false,
        idempotency_key: key,
        request_hash: Some(request_hash),
        public_traffic: request
            .network
            .as_ref()
            .and_then(|n| n.allow_public_traffic)
            .unwrap_or(true),
    };
    register(&state, &row).await?;
    Ok(with_status(
        StatusCode::CREATED,
        sandbox_body(&state, &headers, &row),
    ))
}

/// Records `row` beside its container (made already), which makes the
/// container an E2B sandbox, and arms its timeout; without its record the
/// container is removed.
pub(super) async fn register(state: &Arc<AppState>, row: &E2bSandboxRow) -> E2bResult<()> {
    let inserted = row.clone();
    if let Err(error) = state.db(move |s| s.insert_e2b_sandbox(&inserted)).await {
        let _ = crate::sandboxes::containers::remove_container(state, &row.container_id).await;
        return Err(e2b_error(error));
    }
    state
        .e2b_access
        .remember(&row.container_id, AccessEntry::of_row(row));
    state
        .e2b_signing
        .remember(&row.container_id, &row.access_token);
    super::timeouts::arm(state, &row.container_id, row.end_at);
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The project's sandbox `id` and its container, or E2B's 404 (the same
/// for an id that is not there, another project's, or a plain container).
pub(super) async fn owned(
    state: &AppState,
    project: &str,
    id: &str,
) -> E2bResult<(E2bSandboxRow, ContainerRow)> {
    let (owner, key) = (project.to_owned(), id.to_owned());
    let found = state
        .db(move |s| {
            let Some(sandbox) = s.e2b_sandbox(&owner, &key)? else {
                return Ok(None);
            };
            Ok(s.container(&owner, &key)?.map(|c| (sandbox, c)))
        })
        .await
        .map_err(e2b_error)?;
    found.ok_or_else(|| E2bError::sandbox_not_found(id))
}

fn state_of(row: &E2bSandboxRow) -> SandboxState {
    if row.paused {
        SandboxState::Paused
    } else {
        SandboxState::Running
    }
}

/// CPU, memory and disk (MiB) of a container, as its backend holds it.
async fn resources(state: &AppState, container: &ContainerRow) -> (u32, u64, u64) {
    const MIB: u64 = 1 << 20;
    let info = state.engine.inspect(&container.id).await.ok();
    let host_cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let cores = info
        .as_ref()
        .and_then(|i| i.spec.cpu_cores)
        .or(state.config.sandbox.container_cpu_ceiling())
        .unwrap_or(host_cpus);
    let disk = info.as_ref().map_or(
        shellgate_sandbox_api::backend::ContainerSpec::default().disk_bytes,
        |i| i.spec.disk_bytes,
    );
    (
        cores.ceil().max(1.0) as u32,
        container.memory_limit.bytes() / MIB,
        disk / MIB,
    )
}

/// A sandbox as its listing shows it, with its `(cpu, memory MiB, disk
/// MiB)` from `resources`.
fn listed(
    row: &E2bSandboxRow,
    (cpu_count, memory_mb, disk_size_mb): (u32, u64, u64),
) -> ListedSandbox {
    ListedSandbox {
        template_id: row.template_id.clone(),
        sandbox_id: row.container_id.clone(),
        client_id: CLIENT_ID.to_owned(),
        started_at: rfc3339(row.started_at),
        end_at: rfc3339(row.end_at),
        cpu_count,
        memory_mb,
        disk_size_mb,
        state: state_of(row),
        envd_version: ENVD_VERSION.to_owned(),
        metadata: row.metadata.clone(),
    }
}

/// `GET /sandboxes/{id}`.
async fn info(
    State(state): State<Arc<AppState>>,
    E2bProject(project): E2bProject,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> E2bResult<Json<SandboxDetail>> {
    let (sandbox, container) = owned(&state, &project, &id).await?;
    let policy = crate::sandboxes::containers::network_policy(&container);
    let (allow_internet_access, allow_out) = match policy {
        NetworkPolicy::Disabled => (false, Vec::new()),
        NetworkPolicy::Allowlist {
            allowed_domains, ..
        } => (allowed_domains.iter().any(|d| d == "*"), allowed_domains),
    };
    Ok(Json(SandboxDetail {
        listed: listed(&sandbox, resources(&state, &container).await),
        envd_access_token: sandbox.access_token.clone(),
        allow_internet_access,
        domain: domain(&state, &headers),
        network: NetworkInfo {
            allow_out,
            deny_out: Vec::new(),
        },
        lifecycle: Lifecycle {
            auto_resume: sandbox.auto_resume,
            on_timeout: if sandbox.auto_pause {
                OnTimeout::Pause
            } else {
                OnTimeout::Kill
            },
        },
    }))
}

/// The list's query: `metadata` (url-encoded `k=v` pairs joined by `&`),
/// `state` (comma separated), `limit`, `nextToken`, `order`,
/// `startedAfter`, `template`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListQuery {
    metadata: Option<String>,
    state: Option<String>,
    limit: Option<u32>,
    next_token: Option<String>,
    order: Option<String>,
    started_after: Option<String>,
    template: Option<String>,
}

/// The header carrying the next page's token.
const NEXT_TOKEN_HEADER: &str = "x-next-token";

/// `GET /v2/sandboxes`, `GET /sandboxes`.
async fn list(
    State(state): State<Arc<AppState>>,
    E2bProject(project): E2bProject,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> E2bResult<Response> {
    let Query(query) = query.map_err(|e| bad_request(e.body_text()))?;
    let mut filter = E2bListFilter {
        limit: query.limit.unwrap_or(MAX_LIST_LIMIT),
        after: query.next_token.clone().filter(|t| !t.is_empty()),
        template_id: query.template.clone(),
        ..E2bListFilter::default()
    };
    if filter.limit == 0 || filter.limit > MAX_LIST_LIMIT {
        return Err(bad_request(format!(
            "limit must be between 1 and {MAX_LIST_LIMIT}"
        )));
    }
    if let Some(metadata) = &query.metadata {
        filter.metadata = form_urlencoded::parse(metadata.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        if filter.metadata.len() > MAX_METADATA.0 {
            return Err(bad_request("metadata: too many filters"));
        }
    }
    if let Some(states) = &query.state {
        let (mut running, mut paused) = (false, false);
        for name in states.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match name {
                "running" => running = true,
                "paused" => paused = true,
                other => {
                    return Err(bad_request(format!(
                        "state: {other:?} is not running or paused"
                    )))
                }
            }
        }
        filter.paused = match (running, paused) {
            (true, false) => Some(false),
            (false, true) => Some(true),
            _ => None,
        };
    }
    filter.ascending = match query.order.as_deref() {
        None | Some("desc") => false,
        Some("asc") => true,
        Some(other) => return Err(bad_request(format!("order: {other:?} is not asc or desc"))),
    };
    if let Some(after) = &query.started_after {
        filter.started_after = Some(
            parse_rfc3339(after)
                .ok_or_else(|| bad_request("startedAfter must be an RFC 3339 time"))?,
        );
    }
    let owner = project.clone();
    let listing = state
        .db(move |s| {
            let (rows, more) = s.list_e2b_sandboxes(&owner, &filter)?;
            let containers = rows
                .iter()
                .map(|row| s.container(&owner, &row.container_id))
                .collect::<Result<Vec<_>, _>>()?;
            Ok((rows, containers, more))
        })
        .await
        .map_err(|e| {
            if e.status() == StatusCode::BAD_REQUEST || e.message.contains("continue after") {
                bad_request("nextToken is not a token of this listing")
            } else {
                e2b_error(e)
            }
        })?;
    let (rows, containers, more) = listing;
    let mut data = Vec::with_capacity(rows.len());
    for (row, container) in rows.iter().zip(containers) {
        let Some(container) = container else { continue };
        data.push(listed(row, resources(&state, &container).await));
    }
    let mut response = Json(data).into_response();
    if more {
        if let Some(last) = rows.last() {
            if let Ok(token) = HeaderValue::from_str(&last.container_id) {
                response.headers_mut().insert(NEXT_TOKEN_HEADER, token);
            }
        }
    }
    Ok(response)
}

/// `DELETE /sandboxes/{id}`: the container's delete.
async fn kill(
    State(state): State<Arc<AppState>>,
    E2bProject(project): E2bProject,
    Path(id): Path<String>,
) -> E2bResult<StatusCode> {
    owned(&state, &project, &id).await?;
    state.e2b_deadlines.disarm(&id);
    state.e2b_metrics.forget(&id);
    crate::http::to_completion(async move {
        crate::sandboxes::containers::remove_container(&state, &id).await
    })
    .await
    .map_err(e2b_error)?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /sandboxes/{id}/timeout`: `end_at` is `timeout` seconds from now,
/// its timer re-armed. `0` is E2B's "now": the sandbox is killed (or paused,
/// with `autoPause`) at once.
async fn set_timeout(
    State(state): State<Arc<AppState>>,
    E2bProject(project): E2bProject,
    Path(id): Path<String>,
    body: Bytes,
) -> E2bResult<StatusCode> {
    let request: TimeoutRequest = read_body(&body)?;
    let timeout = if request.timeout == 0 {
        0
    } else {
        timeout_secs(&state, Some(request.timeout))?
    };
    owned(&state, &project, &id).await?;
    set_end_at(&state, &id, crate::time::now() + timeout).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Sandbox `id` ends at `end_at` (unix seconds): stored, then its timer
/// armed for it.
async fn set_end_at(state: &Arc<AppState>, id: &str, end_at: i64) -> E2bResult<()> {
    let key = id.to_owned();
    state
        .db(move |s| s.set_e2b_end_at(&key, end_at))
        .await
        .map_err(e2b_error)?;
    super::timeouts::arm(state, id, end_at);
    Ok(())
}

/// A refresh's longest and shortest `duration` (E2B's bounds: its API
/// refuses more than an hour, and keeps a sandbox alive 15 s at least).
const REFRESH_MAX_SECS: i64 = 3600;
const REFRESH_MIN_SECS: i64 = 15;

/// `POST /sandboxes/{id}/refreshes`: keeps a running sandbox alive for
/// `duration` seconds from now (15 when omitted or shorter, within the
/// server's longest life), never shortening the timeout it has, as E2B's
/// keep-alive does. 204; 400 out of bounds; 409 when it is paused.
async fn refresh(
    State(state): State<Arc<AppState>>,
    E2bProject(project): E2bProject,
    Path(id): Path<String>,
    body: Bytes,
) -> E2bResult<StatusCode> {
    let request: RefreshRequest = read_body(&body)?;
    let duration = request.duration.unwrap_or(REFRESH_MIN_SECS);
    if !(0..=REFRESH_MAX_SECS).contains(&duration) {
        return Err(bad_request(format!(
            "duration must be between 0 and {REFRESH_MAX_SECS} seconds"
        )));
    }
    let max = i64::from(state.config.sandbox.max_expires_minutes) * 60;
    let duration = duration.max(REFRESH_MIN_SECS).min(max);
    let lock = e2b_lock(&state, &format!("resume\n{id}"));
    let _guard = lock.lock().await;
    let (sandbox, _) = owned(&state, &project, &id).await?;
    if sandbox.paused {
        return Err(E2bError::new(
            StatusCode::CONFLICT,
            format!("sandbox \"{id}\" is paused: connect resumes it"),
        ));
    }
    let end_at = crate::time::now() + duration;
    if end_at > sandbox.end_at {
        set_end_at(&state, &id, end_at).await?;
    }
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /sandboxes/{id}/pause`: 204, or 409 when it is paused already.
async fn pause(
    State(state): State<Arc<AppState>>,
    E2bProject(project): E2bProject,
    Path(id): Path<String>,
    body: Bytes,
) -> E2bResult<StatusCode> {
    let _: PauseRequest = read_body(&body)?;
    let (sandbox, _) = owned(&state, &project, &id).await?;
    if sandbox.paused {
        return Err(E2bError::new(
            StatusCode::CONFLICT,
            format!("sandbox \"{id}\" is already paused"),
        ));
    }
    crate::http::to_completion(async move { super::timeouts::pause_sandbox(&state, &id).await })
        .await
        .map_err(e2b_error)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Wakes a paused sandbox (admitted against the project's quotas, a billed
/// session opened, its processes started) and gives it until `end_at`;
/// `false` when it was running already. One resume of a sandbox at a time:
/// a `connect` racing another, or the in-sandbox calls an `autoResume` wakes
/// it for, find it running and resume nothing twice.
async fn resume_sandbox(
    state: &Arc<AppState>,
    project: &str,
    id: &str,
    end_at: i64,
) -> E2bResult<bool> {
    let lock = e2b_lock(state, &format!("resume\n{id}"));
    let _guard = lock.lock().await;
    let (sandbox, container) = owned(state, project, id).await?;
    if !sandbox.paused {
        return Ok(false);
    }
    crate::sandboxes::exec::begin_activity(state, &container)
        .await
        .map_err(e2b_error)?;
    state
        .engine
        .start(&container.id)
        .await
        .map_err(E2bError::from)?;
    let (key, now) = (container.id.clone(), crate::time::now());
    state
        .db(move |s| s.resume_e2b_sandbox(&key, now, end_at))
        .await
        .map_err(e2b_error)?;
    state.e2b_access.set_paused(&container.id, false);
    super::timeouts::arm(state, &container.id, end_at);
    Ok(true)
}

/// [`resume_sandbox`] run to its end whether or not the client stays (a
/// resume half-done would leave a session open with nothing to show for it).
async fn resume_to_completion(
    state: &Arc<AppState>,
    project: &str,
    id: &str,
    end_at: i64,
) -> E2bResult<bool> {
    let (state, project, id) = (Arc::clone(state), project.to_owned(), id.to_owned());
    tokio::spawn(async move { resume_sandbox(&state, &project, &id, end_at).await })
        .await
        .map_err(|e| {
            E2bError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the request's work failed: {e}"),
            )
        })?
}

/// `autoResume`: a paused sandbox whose create asked for it is woken by a
/// call of its in-sandbox API (the access check's), for as long as its
/// last timeout gave it (at least the default).
pub(crate) async fn resume_on_traffic(
    state: &Arc<AppState>,
    project: &str,
    id: &str,
) -> E2bResult<()> {
    let (owner, key) = (project.to_owned(), id.to_owned());
    let sandbox = state
        .db(move |s| s.e2b_sandbox(&owner, &key))
        .await
        .map_err(e2b_error)?
        .ok_or_else(|| E2bError::sandbox_not_found(id))?;
    let timeout = (sandbox.end_at - sandbox.started_at).max(DEFAULT_TIMEOUT_SECS);
    let end_at = crate::time::now() + timeout;
    resume_to_completion(state, project, id, end_at).await?;
    Ok(())
}

/// Connect's and resume's common part: the caller's sandbox `id`, resumed
/// with the body's timeout when paused: the sandbox as it was, the end it
/// was given, and whether this call resumed it.
async fn resume_if_paused(
    state: &Arc<AppState>,
    project: &str,
    id: &str,
    body: &Bytes,
) -> E2bResult<(E2bSandboxRow, i64, bool)> {
    let request: ConnectRequest = read_body(body)?;
    let timeout = timeout_secs(state, request.timeout)?;
    let (sandbox, _) = owned(state, project, id).await?;
    let end_at = crate::time::now() + timeout;
    let resumed = sandbox.paused && resume_to_completion(state, project, id, end_at).await?;
    Ok((sandbox, end_at, resumed))
}

/// `POST /v2/sandboxes/{id}/connect`, `POST /sandboxes/{id}/connect`: 200
/// with the sandbox when it runs (its timeout moved only later, never
/// sooner), 201 when it was paused and is resumed.
async fn connect(
    State(state): State<Arc<AppState>>,
    E2bProject(project): E2bProject,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> E2bResult<Response> {
    let (sandbox, end_at, resumed) = resume_if_paused(&state, &project, &id, &body).await?;
    if !resumed {
        if end_at > sandbox.end_at {
            set_end_at(&state, &id, end_at).await?;
        }
        return Ok(with_status(
            StatusCode::OK,
            sandbox_body(&state, &headers, &sandbox),
        ));
    }
    Ok(with_status(
        StatusCode::CREATED,
        sandbox_body(&state, &headers, &sandbox),
    ))
}

/// `POST /sandboxes/{id}/resume` (older SDKs): 201, or 409 when it runs.
async fn resume(
    State(state): State<Arc<AppState>>,
    E2bProject(project): E2bProject,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> E2bResult<Response> {
    let (sandbox, _, resumed) = resume_if_paused(&state, &project, &id, &body).await?;
    if !resumed {
        return Err(E2bError::new(
            StatusCode::CONFLICT,
            format!("sandbox \"{id}\" is already running"),
        ));
    }
    Ok(with_status(
        StatusCode::CREATED,
        sandbox_body(&state, &headers, &sandbox),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_fields_map_onto_an_allowlist_or_are_refused_by_name() {
        assert_eq!(network_policy(None, None).ok(), Some(None));
        assert_eq!(
            network_policy(Some(false), None).ok(),
            Some(Some(NetworkPolicy::Disabled))
        );
        assert_eq!(
            network_policy(Some(true), None).ok(),
            Some(Some(allowlist(vec!["*".into()])))
        );
        let allow = NetworkConfig {
            allow_out: Some(vec!["example.com".into(), "*.pypi.org".into()]),
            deny_out: Some(vec!["0.0.0.0/0".into()]),
            ..NetworkConfig::default()
        };
        assert_eq!(
            network_policy(Some(false), Some(&allow)).ok(),
            Some(Some(allowlist(vec![
                "example.com".into(),
                "*.pypi.org".into()
            ])))
        );
        let cidr = NetworkConfig {
            allow_out: Some(vec!["example.com".into(), "10.0.0.0/8".into()]),
            ..NetworkConfig::default()
        };
        let error = network_policy(None, Some(&cidr)).expect_err("refused");
        assert_eq!(error.status, StatusCode::BAD_REQUEST);
        assert!(
            error.message.contains("network.allowOut[1]"),
            "{}",
            error.message
        );
        let ip = NetworkConfig {
            allow_out: Some(vec!["1.1.1.1".into()]),
            ..NetworkConfig::default()
        };
        assert!(network_policy(None, Some(&ip)).is_err());
        // denyOut: all traffic closes what allowOut does not open; one
        // destination of an open network is refused by name; of a closed
        // one, it changes nothing; allowOut wins over it.
        let deny_all = NetworkConfig {
            deny_out: Some(vec!["0.0.0.0/0".into()]),
            ..NetworkConfig::default()
        };
        assert_eq!(
            network_policy(None, Some(&deny_all)).ok(),
            Some(Some(NetworkPolicy::Disabled))
        );
        assert_eq!(
            network_policy(Some(true), Some(&deny_all)).ok(),
            Some(Some(NetworkPolicy::Disabled))
        );
        let deny_some = NetworkConfig {
            deny_out: Some(vec!["evil.example".into()]),
            ..NetworkConfig::default()
        };
        for open in [None, Some(true)] {
            let error = network_policy(open, Some(&deny_some)).expect_err("refused");
            assert_eq!(error.status, StatusCode::BAD_REQUEST);
            assert!(
                error.message.contains("network.denyOut[0]")
                    && error.message.contains("everything except it"),
                "{}",
                error.message
            );
        }
        assert_eq!(
            network_policy(Some(false), Some(&deny_some)).ok(),
            Some(Some(NetworkPolicy::Disabled))
        );
        let both = NetworkConfig {
            allow_out: Some(vec!["example.com".into()]),
            deny_out: Some(vec!["example.com".into(), "0.0.0.0/0".into()]),
            ..NetworkConfig::default()
        };
        assert_eq!(
            network_policy(None, Some(&both)).ok(),
            Some(Some(allowlist(vec!["example.com".into()])))
        );
    }

    #[test]
    fn idempotency_keys_are_the_sdks_shape() {
        let mut headers = HeaderMap::new();
        assert_eq!(idempotency_key(&headers).ok(), Some(None));
        headers.insert("idempotency-key", HeaderValue::from_static("abc-123"));
        assert_eq!(idempotency_key(&headers).ok(), Some(Some("abc-123".into())));
        headers.insert("idempotency-key", HeaderValue::from_static("ABC"));
        assert!(idempotency_key(&headers).is_err());
    }

    #[test]
    fn metadata_is_bounded() {
        let big = BTreeMap::from([("k".to_owned(), "v".repeat(2000))]);
        assert!(check_map("metadata", &big, MAX_METADATA).is_err());
        let many: BTreeMap<String, String> =
            (0..65).map(|i| (format!("k{i}"), "v".into())).collect();
        assert!(check_map("metadata", &many, MAX_METADATA).is_err());
        let env = BTreeMap::from([("A=B".to_owned(), "v".into())]);
        assert!(check_env_vars(&env).is_err());
    }
}

/// The control plane and the access check through the real router, on the
/// recording backend.
#[cfg(test)]
mod handler_tests {
    use axum::body::Body;
    use axum::http::{Method, Request};
    use serde_json::json;
    use tower::ServiceExt;

    use crate::e2b::access::SandboxCaller;
    use crate::testing::{Call, Harness, ALPHA, BETA};

    async fn create(harness: &Harness, body: serde_json::Value) -> serde_json::Value {
        let answer = harness.post("/v2/sandboxes", body).await;
        assert_eq!(answer.status, 201, "{}", answer.json);
        answer.json
    }

    /// An in-sandbox call through a route that only checks its caller.
    async fn probe(harness: &Harness, id: &str, token: Option<&str>, path: &str) -> (u16, String) {
        async fn who(caller: SandboxCaller) -> String {
            format!(
                "{} {} {:?}",
                caller.project, caller.container_id, caller.env_vars
            )
        }
        let router = axum::Router::new()
            .route("/health", axum::routing::get(who))
            .route("/process.Process/List", axum::routing::post(who))
            .with_state(std::sync::Arc::clone(&harness.state));
        let mut request = Request::builder()
            .method(if path == "/health" {
                Method::GET
            } else {
                Method::POST
            })
            .uri(path)
            .header("e2b-sandbox-id", id);
        if let Some(token) = token {
            request = request.header("x-access-token", token);
        }
        let response = router
            .oneshot(request.body(Body::empty()).expect("request"))
            .await
            .expect("answer");
        let status = response.status().as_u16();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    #[tokio::test]
    async fn a_sandbox_is_a_container_its_token_opens() {
        let harness = Harness::new();
        let sandbox = create(
            &harness,
            json!({"templateID": "base", "timeout": 60, "metadata": {"team": "x"}, "envVars": {"A": "1"}}),
        )
        .await;
        let id = sandbox["sandboxID"].as_str().expect("id").to_owned();
        let token = sandbox["envdAccessToken"]
            .as_str()
            .expect("token")
            .to_owned();
        assert_eq!(sandbox["envdVersion"], "0.6.4");
        // Visible as a container of its project.
        harness.get(&format!("/v1/containers/{id}")).await.ok();
        let (status, body) = probe(&harness, &id, Some(&token), "/health").await;
        assert_eq!(status, 200, "{body}");
        assert!(body.starts_with(&format!("alpha {id}")), "{body}");
        assert!(body.contains("(\"A\", \"1\")"), "{body}");
        // Wrong or missing token: 401 (a Connect error on RPC paths).
        assert_eq!(probe(&harness, &id, Some("nope"), "/health").await.0, 401);
        let (status, body) = probe(&harness, &id, None, "/process.Process/List").await;
        assert_eq!(status, 401);
        assert!(body.contains("\"unauthenticated\""), "{body}");
        // Unknown, plain and killed sandboxes: the same 404 bytes.
        let plain = harness.container("plain").await;
        let (unknown_status, unknown) = probe(&harness, "cntr_nope", Some(&token), "/health").await;
        let (plain_status, plain_body) = probe(&harness, &plain, Some(&token), "/health").await;
        assert_eq!((unknown_status, plain_status), (404, 404));
        assert_eq!(
            unknown.replace("cntr_nope", "ID"),
            plain_body.replace(&plain, "ID")
        );
        // Another project's key sees nothing of it.
        let foreign = harness
            .call(Some(BETA), Method::GET, &format!("/sandboxes/{id}"), None)
            .await;
        assert_eq!(foreign.status, 404);
        assert_eq!(foreign.json["code"], 404);
        let kill = harness
            .call(
                Some(BETA),
                Method::DELETE,
                &format!("/sandboxes/{id}"),
                None,
            )
            .await;
        assert_eq!(kill.status, 404);
        // Killed: gone everywhere.
        assert_eq!(
            harness.delete(&format!("/sandboxes/{id}")).await.status,
            204
        );
        assert_eq!(
            harness.delete(&format!("/sandboxes/{id}")).await.status,
            404
        );
        let (status, killed) = probe(&harness, &id, Some(&token), "/health").await;
        assert_eq!(status, 404);
        assert_eq!(
            killed.replace(&id, "ID"),
            unknown.replace("cntr_nope", "ID")
        );
        assert_eq!(
            harness.get(&format!("/v1/containers/{id}")).await.status,
            404
        );
        // Deleted through /v1: its access ends as well.
        let other = create(&harness, json!({"templateID": "base"})).await;
        let (other_id, other_token) = (
            other["sandboxID"].as_str().expect("id").to_owned(),
            other["envdAccessToken"].as_str().expect("token").to_owned(),
        );
        assert_eq!(
            probe(&harness, &other_id, Some(&other_token), "/health")
                .await
                .0,
            200
        );
        assert_eq!(
            harness
                .delete(&format!("/v1/containers/{other_id}"))
                .await
                .status,
            200
        );
        assert_eq!(
            probe(&harness, &other_id, Some(&other_token), "/health")
                .await
                .0,
            404
        );
        assert_eq!(
            harness.get(&format!("/sandboxes/{other_id}")).await.status,
            404
        );
    }

    #[tokio::test]
    async fn pause_refuses_the_in_sandbox_api_until_connect_resumes() {
        let harness = Harness::new();
        let sandbox = create(&harness, json!({"templateID": "base"})).await;
        let id = sandbox["sandboxID"].as_str().expect("id").to_owned();
        let token = sandbox["envdAccessToken"]
            .as_str()
            .expect("token")
            .to_owned();
        let pause = format!("/sandboxes/{id}/pause");
        assert_eq!(harness.post(&pause, json!({})).await.status, 204);
        assert!(harness.backend.calls().contains(&Call::Stop(id.clone())));
        assert_eq!(harness.post(&pause, json!({})).await.status, 409);
        let (status, body) = probe(&harness, &id, Some(&token), "/health").await;
        assert_eq!(status, 502, "{body}");
        assert!(body.contains("sandbox is paused"));
        let info = harness.get(&format!("/sandboxes/{id}")).await;
        assert_eq!(info.ok()["state"], "paused");
        let connect = harness
            .post(
                &format!("/v2/sandboxes/{id}/connect"),
                json!({"timeout": 120}),
            )
            .await;
        assert_eq!(connect.status, 201, "{}", connect.json);
        assert_eq!(connect.json["envdAccessToken"], token.as_str());
        assert_eq!(probe(&harness, &id, Some(&token), "/health").await.0, 200);
        let again = harness
            .post(&format!("/sandboxes/{id}/connect"), json!({"timeout": 120}))
            .await;
        assert_eq!(again.status, 200);
    }

    #[tokio::test]
    async fn the_sweeper_kills_or_pauses_at_the_timeout_and_not_before() {
        let harness = Harness::with_config(|c| c.sandbox.idle_suspend_after_secs = 5);
        let killed = create(&harness, json!({"templateID": "base", "timeout": 30})).await;
        let paused = create(
            &harness,
            json!({"templateID": "base", "timeout": 30, "autoPause": true}),
        )
        .await;
        let (killed, paused) = (
            killed["sandboxID"].as_str().expect("id").to_owned(),
            paused["sandboxID"].as_str().expect("id").to_owned(),
        );
        // Idle far past the server's idle suspension, not past the timeout:
        // untouched.
        harness.clock.advance(20);
        crate::lifecycle::sweep(&harness.state)
            .await
            .expect("sweeps");
        assert_eq!(
            harness.get(&format!("/sandboxes/{killed}")).await.ok()["state"],
            "running"
        );
        assert!(!harness
            .backend
            .calls()
            .contains(&Call::Stop(killed.clone())));
        harness.clock.advance(11);
        crate::lifecycle::sweep(&harness.state)
            .await
            .expect("sweeps");
        assert_eq!(
            harness.get(&format!("/sandboxes/{killed}")).await.status,
            404
        );
        assert_eq!(
            harness.get(&format!("/sandboxes/{paused}")).await.ok()["state"],
            "paused"
        );
    }

    #[tokio::test]
    async fn creates_replay_by_idempotency_key_and_refuse_what_cannot_be_carried() {
        let harness = Harness::new();
        let send = |body: serde_json::Value, key: &'static str| {
            let request = Request::builder()
                .method(Method::POST)
                .uri("/v2/sandboxes")
                .header("x-api-key", ALPHA)
                .header("content-type", "application/json")
                .header("idempotency-key", key)
                .body(Body::from(body.to_string()))
                .expect("request");
            harness.send(request)
        };
        let first = send(json!({"templateID": "base"}), "key-1").await;
        let again = send(json!({"templateID": "base"}), "key-1").await;
        assert_eq!((first.status, again.status), (201, 201));
        assert_eq!(first.json, again.json);
        let other = send(json!({"templateID": "base", "timeout": 9}), "key-1").await;
        assert_eq!(other.status, 409, "{}", other.json);
        let template = harness
            .post("/v2/sandboxes", json!({"templateID": "nope"}))
            .await;
        assert_eq!(template.status, 404);
        assert_eq!(template.json["code"], 404);
        let cidr = harness
            .post(
                "/v2/sandboxes",
                json!({"templateID": "base", "network": {"allowOut": ["10.0.0.0/8"]}}),
            )
            .await;
        assert_eq!(cidr.status, 400);
        assert!(cidr.json["message"]
            .as_str()
            .is_some_and(|m| m.contains("allowOut[0]")));
        // Older SDKs' default `allow_internet_access: true`, on a server
        // that allows no domain: shellgate's default, shown in the info.
        let open = harness
            .post(
                "/sandboxes",
                json!({"templateID": "base", "allow_internet_access": true}),
            )
            .await;
        assert_eq!(open.status, 201, "{}", open.json);
        let info = harness
            .get(&format!(
                "/sandboxes/{}",
                open.json["sandboxID"].as_str().expect("id")
            ))
            .await;
        assert_eq!(info.ok()["allowInternetAccess"], false);
        let metrics = harness.get("/sandboxes/x/metrics").await;
        assert_eq!(metrics.status, 404);
        assert_eq!(metrics.json["code"], 404);
        let unauthorized = harness.call(None, Method::GET, "/v2/sandboxes", None).await;
        assert_eq!(unauthorized.status, 401);
        assert_eq!(unauthorized.json["code"], 401);
    }

    #[tokio::test]
    async fn refreshes_only_extend_and_metrics_and_logs_read_the_sandbox() {
        let harness = Harness::new();
        let sandbox = create(&harness, json!({"templateID": "base", "timeout": 60})).await;
        let id = sandbox["sandboxID"].as_str().expect("id").to_owned();
        let end_at = |info: &serde_json::Value| {
            shellgate_wire::time::parse_rfc3339(info["endAt"].as_str().expect("endAt"))
                .expect("time")
        };
        let before = end_at(harness.get(&format!("/sandboxes/{id}")).await.ok());
        let refreshes = format!("/sandboxes/{id}/refreshes");
        // Shorter than the timeout it has: unchanged.
        assert_eq!(
            harness
                .post(&refreshes, json!({"duration": 20}))
                .await
                .status,
            204
        );
        assert_eq!(
            end_at(harness.get(&format!("/sandboxes/{id}")).await.ok()),
            before
        );
        assert_eq!(
            harness
                .post(&refreshes, json!({"duration": 600}))
                .await
                .status,
            204
        );
        let after = end_at(harness.get(&format!("/sandboxes/{id}")).await.ok());
        assert!(after >= before + 500, "{before} {after}");
        let too_long = harness.post(&refreshes, json!({"duration": 3601})).await;
        assert_eq!(too_long.status, 400);
        assert_eq!(too_long.json["code"], 400);
        assert_eq!(
            harness
                .post("/sandboxes/nope/refreshes", json!({}))
                .await
                .status,
            404
        );
        // Metrics: a sample taken for the request, in E2B's shape.
        let metrics = harness.get(&format!("/sandboxes/{id}/metrics")).await;
        let samples = metrics.ok().as_array().expect("list").clone();
        assert_eq!(samples.len(), 1, "{samples:?}");
        assert!(samples[0]["memTotal"].as_u64().is_some_and(|m| m > 0));
        assert!(samples[0]["cpuCount"].as_u64().is_some_and(|c| c >= 1));
        assert!(samples[0]["timestampUnix"].is_i64());
        let listed = harness
            .get(&format!("/sandboxes/metrics?sandbox_ids={id},nope"))
            .await;
        let listed = listed.ok();
        assert_eq!(listed["sandboxes"].as_object().map(|m| m.len()), Some(1));
        assert!(listed["sandboxes"][id.as_str()]["memUsed"].is_u64());
        let backwards = harness
            .get(&format!("/sandboxes/{id}/metrics?start=20&end=10"))
            .await;
        assert_eq!(backwards.status, 400);
        assert_eq!(harness.get("/sandboxes/metrics").await.status, 400);
        let foreign = harness
            .call(
                Some(BETA),
                Method::GET,
                &format!("/sandboxes/{id}/logs"),
                None,
            )
            .await;
        assert_eq!(foreign.status, 404);
        let logs = harness.get(&format!("/v2/sandboxes/{id}/logs")).await;
        let logs = logs.ok();
        assert_eq!(logs["logs"][0]["fields"]["event"], "sandbox.created");
        assert_eq!(logs["logs"][0]["level"], "info");
        let v1 = harness.get(&format!("/sandboxes/{id}/logs?limit=1")).await;
        let v1 = v1.ok();
        assert_eq!(v1["logs"][0]["line"], "sandbox created from template base");
        assert_eq!(v1["logEntries"].as_array().map(Vec::len), Some(1));
        let bad = harness
            .get(&format!("/v2/sandboxes/{id}/logs?direction=sideways"))
            .await;
        assert_eq!(bad.status, 400);
    }
}
