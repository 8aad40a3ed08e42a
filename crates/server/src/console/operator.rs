//! The operator's page, for admin keys: the server's health (the engine,
//! the cgroup layout, the default image's build, what the host lacks) and
//! the API keys (made — shown once —, listed by id, revoked).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use shellgate_store::KeyRole;
use shellgate_wire::console::{
    ConsoleHealth, ConsoleList, CreatedKey, DefaultImageHealth, EngineHealth, KeyEntry, NewKey,
    StatusCount,
};

use super::session::Signed;
use super::Console;
use crate::error::{ApiError, ApiResult};
use crate::http::ApiJson;

/// `GET /console/api/operator/health`.
pub(super) async fn health(
    State(console): State<Arc<Console>>,
    signed: Signed,
) -> ApiResult<Json<ConsoleHealth>> {
    signed.require_admin()?;
    let app = &console.app;
    let by_status = app.db(|s| s.containers_by_status()).await?;
    let images = crate::sandboxes::containers::image_list(app).await?;
    let name = app.config.sandbox.default_image.clone();
    let build = app
        .default_image_build
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let default_image = match build.filter(|b| b.image == name) {
        Some(build) if build.status != "ready" => DefaultImageHealth {
            name: name.clone(),
            state: build.status.to_owned(),
            progress: format!("{:.0}% {}", build.progress * 100.0, build.message),
        },
        _ if images.iter().any(|i| i.name == name) => DefaultImageHealth {
            name: name.clone(),
            state: "ready".to_owned(),
            progress: String::new(),
        },
        _ => DefaultImageHealth {
            name: name.clone(),
            state: "missing".to_owned(),
            progress: "containers use the host image".to_owned(),
        },
    };
    let mut warnings = app.host.warnings.clone();
    if default_image.state != "ready" {
        warnings.push(format!(
            "the default image {name:?} is {}: new containers use `host`",
            default_image.state
        ));
    }
    if app.host.cgroups == "disabled" {
        warnings.push("no cgroup controller: memory and process limits are not enforced".into());
    }
    Ok(Json(ConsoleHealth {
        version: env!("CARGO_PKG_VERSION"),
        engine: EngineHealth {
            state: "ok".to_owned(),
            cgroup_mode: if app.host.cgroups.is_empty() {
                "unknown".to_owned()
            } else {
                app.host.cgroups.clone()
            },
            containers: by_status
                .into_iter()
                .map(|(status, count)| StatusCount { status, count })
                .collect(),
            egress: app.egress.is_some(),
        },
        default_image,
        warnings,
    }))
}

/// `POST /console/api/operator/images/default/build`: starts building the
/// default image (202); its progress is on the health page. 409 while a
/// build runs, or where this backend cannot build it.
pub(super) async fn build_default_image(
    State(console): State<Arc<Console>>,
    signed: Signed,
) -> ApiResult<StatusCode> {
    signed.require_admin()?;
    let Some(build) = console.app.build_default_image.clone() else {
        return Err(ApiError::conflict(
            "This server's sandbox backend does not build images.",
        ));
    };
    let started = tokio::task::spawn_blocking(move || build())
        .await
        .map_err(|e| ApiError::internal(format!("image build failed to start: {e}")))?;
    if started {
        Ok(StatusCode::ACCEPTED)
    } else {
        Err(ApiError::conflict(format!(
            "The default image {:?} is being built already, or no recipe makes it.",
            console.app.config.sandbox.default_image
        )))
    }
}

/// `GET /console/api/operator/keys`: every key, by id.
pub(super) async fn keys(
    State(console): State<Arc<Console>>,
    signed: Signed,
) -> ApiResult<Json<ConsoleList<KeyEntry>>> {
    signed.require_admin()?;
    let keys = console.app.db(|s| s.list_keys(None)).await?;
    let data = keys
        .into_iter()
        .map(|k| KeyEntry {
            id: k.id,
            project: k.project,
            role: k.role.as_str(),
            created_at: k.created_at,
            revoked_at: k.revoked_at,
        })
        .collect();
    Ok(Json(ConsoleList::new(data, false, None, |k: &KeyEntry| {
        k.id.clone()
    })))
}

/// The longest project name a key may be made for.
const MAX_PROJECT_NAME: usize = 128;

/// `POST /console/api/operator/keys`: a new key, shown in this answer only.
pub(super) async fn create_key(
    State(console): State<Arc<Console>>,
    signed: Signed,
    ApiJson(body): ApiJson<NewKey>,
) -> ApiResult<(StatusCode, Json<CreatedKey>)> {
    signed.require_admin()?;
    let project = body.project.trim().to_owned();
    if project.is_empty()
        || project.len() > MAX_PROJECT_NAME
        || project == "*"
        || project.chars().any(char::is_control)
    {
        return Err(ApiError::invalid(
            "project",
            format!("project must be 1 to {MAX_PROJECT_NAME} characters, no control characters, not '*'"),
        ));
    }
    let role = match body.role.as_deref() {
        None | Some("member") => KeyRole::Member,
        Some("admin") => KeyRole::Admin,
        Some(_) => return Err(ApiError::invalid("role", "role must be member or admin")),
    };
    let key = crate::auth::new_api_key();
    let (stored, owner) = (key.clone(), project.clone());
    console
        .app
        .db(move |s| s.add_key_with_role(&stored, &owner, role, crate::time::now()))
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedKey {
            id: shellgate_store::key_id(&shellgate_store::hash_key(&key)),
            key,
            project,
            role: role.as_str(),
        }),
    ))
}

/// `DELETE /console/api/operator/keys/{id}`: revokes a key; its sessions
/// end and the API stops taking it within the key cache's few seconds.
pub(super) async fn revoke_key(
    State(console): State<Arc<Console>>,
    signed: Signed,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    signed.require_admin()?;
    console
        .app
        .db(move |s| s.revoke_key(&id, crate::time::now()))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
