//! A container's network as an API resource (our extensions):
//! `GET /v1/containers/{id}/egress`, its egress log, and
//! `POST /v1/containers/{id}/secrets`, its secrets' values given again, and
//! `PUT /v1/containers/{id}/network_policy`, what it may reach replaced.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::Json;
use shellgate_egress::secrets::{self, SecretValue};
use shellgate_wire::List;

use crate::engine::engine_error;
use crate::error::{ApiError, ApiResult};
use crate::http::{to_completion, ApiJson, ApiQuery, ListParams, Project};
use crate::state::AppState;

/// `POST /v1/containers/{id}/secrets` (our extension): the body.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SupplySecrets {
    pub domain_secrets: Vec<shellgate_wire::DomainSecret>,
}

/// `POST /v1/containers/{id}/secrets` (our extension): gives a container
/// whose server restarted the values of its secrets again (every one of
/// them, each the value it was made with, checked against its salted
/// digest). Until then its network is off; after it, its next command
/// starts it with its network (a running container is stopped first: its
/// processes end, its files stay). Answers the container object.
pub async fn supply(
    State(state): State<Arc<AppState>>,
    project: Project,
    base: crate::public_base::PublicBase,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<SupplySecrets>,
) -> ApiResult<Json<shellgate_wire::Container>> {
    let row = crate::sandboxes::containers::owned(&state, &project, &id).await?;
    let mut supplied = Vec::with_capacity(body.domain_secrets.len());
    for secret in &body.domain_secrets {
        secrets::check_secret(&secret.name, &secret.value)
            .map_err(|e| ApiError::invalid("domain_secrets", e.to_string()))?;
        supplied.push(secrets::DomainSecret {
            domain: shellgate_egress::policy::normalize(&secret.domain),
            name: secret.name.clone(),
            placeholder: String::new(),
            value: Some(SecretValue::new(secret.value.as_str())),
            ..Default::default()
        });
    }
    to_completion(async move {
        state
            .engine
            .supply_secrets(&id, supplied)
            .await
            .map_err(|e| engine_error(&id, e))?;
        if row.session_open {
            let key = id.clone();
            state
                .db(move |s| s.close_session(&key, shellgate_store::ContainerStatus::Suspended))
                .await?;
        }
        shown(&state, &project, &id, &base).await
    })
    .await
}

/// `PUT /v1/containers/{id}/network_policy` (our extension): replaces
/// the domains a container made with network may reach (`disabled`:
/// none), whether it runs or is suspended, for every connection it opens
/// from now on (one open keeps going; nothing restarts), kept with it. Its
/// secrets and TLS passthrough names are the create's: an update names
/// domains only. A container made without network is a 409 (it has no way
/// out to open). Answers the container object.
pub async fn update_policy(
    State(state): State<Arc<AppState>>,
    project: Project,
    base: crate::public_base::PublicBase,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<shellgate_wire::NetworkPolicy>,
) -> ApiResult<Json<shellgate_wire::Container>> {
    let row = crate::sandboxes::containers::owned(&state, &project, &id).await?;
    let allowed_domains = match body {
        shellgate_wire::NetworkPolicy::Disabled => Vec::new(),
        shellgate_wire::NetworkPolicy::Allowlist {
            allowed_domains,
            domain_secrets,
            tls_passthrough_domains,
        } => {
            let fixed = |param: &str| {
                ApiError::invalid(
                    param,
                    "is the create's (secrets are given again with POST \
                     /v1/containers/{id}/secrets); an update names allowed_domains only",
                )
            };
            if !domain_secrets.is_empty() {
                return Err(fixed("domain_secrets"));
            }
            if !tls_passthrough_domains.is_empty() {
                return Err(fixed("tls_passthrough_domains"));
            }
            if allowed_domains.is_empty() {
                return Err(ApiError::invalid(
                    "allowed_domains",
                    "an allowlist needs at least one domain ({\"type\": \"disabled\"} allows none)",
                ));
            }
            allowed_domains
        }
    };
    to_completion(async move {
        crate::sandboxes::containers::update_network(&state, &row, allowed_domains).await?;
        shown(&state, &project, &id, &base).await
    })
    .await
}

/// One row of a container's egress log, as `GET /v1/containers/{id}/egress`
/// shows it.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct EgressEntry {
    pub id: String,
    /// `container.egress`.
    pub object: &'static str,
    pub container_id: String,
    pub created_at: i64,
    /// `dns`, `http`, `https`, `connect` or `secret`.
    pub kind: String,
    pub requested_name: Option<String>,
    pub server_name: Option<String>,
    pub address: Option<String>,
    pub port: u16,
    /// `allowed`, `denied`, `notice`, or `aggregated` (a row standing for
    /// `aggregated` events that have none of their own).
    pub verdict: String,
    pub reason: String,
    pub bytes_out: u64,
    pub bytes_in: u64,
    pub duration_ms: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub aggregated: u64,
}

fn is_zero(count: &u64) -> bool {
    *count == 0
}

/// A page of the egress log, with the container's count of events that
/// have no row of their own.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct EgressPage {
    #[serde(flatten)]
    pub list: List<EgressEntry>,
    /// Events of this container (DNS lookups past its log budget or over
    /// its rate limit, connections reset unread over its limit of
    /// connections) counted in aggregate rows instead of a row each, since
    /// it was created (our extension).
    pub dropped: u64,
}

/// `GET /v1/containers/{id}/egress`: the container's egress log, paged like
/// every list (our extension).
pub async fn list(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    ApiQuery(params): ApiQuery<ListParams>,
) -> ApiResult<Json<EgressPage>> {
    crate::sandboxes::containers::owned(&state, &project, &id).await?;
    let page = params.page()?;
    let key = id.clone();
    let ((rows, has_more), dropped) = state
        .db(move |s| Ok((s.list_egress(&key, &page)?, s.egress_unlogged(&key)?)))
        .await?;
    let data = rows
        .into_iter()
        .map(|row| EgressEntry {
            id: row.id,
            object: "container.egress",
            container_id: row.container_id,
            created_at: row.created_at,
            kind: row.kind,
            requested_name: row.requested_name,
            server_name: row.server_name,
            address: row.address,
            port: row.port,
            verdict: row.verdict.as_str().to_owned(),
            reason: row.reason,
            bytes_out: row.bytes_out,
            bytes_in: row.bytes_in,
            duration_ms: row.duration_ms,
            aggregated: row.aggregated,
        })
        .collect();
    Ok(Json(EgressPage {
        list: List::page(data, has_more, |entry: &EgressEntry| entry.id.clone()),
        dropped,
    }))
}

/// Container `id` of `project` as it is now, for an answer.
async fn shown(
    state: &AppState,
    project: &Project,
    id: &str,
    base: &crate::public_base::PublicBase,
) -> ApiResult<Json<shellgate_wire::Container>> {
    let (owner, key) = (project.0.clone(), id.to_owned());
    let row = state
        .db(move |s| s.container(&owner, &key))
        .await?
        .ok_or_else(|| ApiError::not_found("container", id))?;
    Ok(Json(crate::sandboxes::containers::shown_container(
        state, &row, base,
    )?))
}
