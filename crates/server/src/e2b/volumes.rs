//! E2B's volumes (`/volumes`): created, listed, inspected and destroyed,
//! each a shellgate volume (`crate::volumes`: the same rows, directories,
//! quotas and mounts as `/v1/volumes`), with errors in E2B's `{code,
//! message}`. A sandbox mounts them at create by name (`volumeMounts`,
//! read by `control`'s create).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Json;
use shellgate_store::VolumeRow;
use shellgate_wire::e2b::{E2bVolume, NewVolume, VolumeAndToken};

use super::request::{e2b_error, read_body, E2bProject};
use super::E2bError;
use crate::state::AppState;

/// The routes of E2B's volumes, at the root beside the control plane's.
pub(crate) fn routes(table: crate::route_table::RouteTable) -> crate::route_table::RouteTable {
    table
        .route("/volumes", post(create).get(list))
        .route("/volumes/{volume_id}", get(info).delete(destroy))
}

fn volume_and_token(row: &VolumeRow) -> VolumeAndToken {
    VolumeAndToken {
        volume_id: row.id.clone(),
        name: row.name.clone(),
        token: row.token.clone(),
    }
}

/// E2B's 404 for a volume (a missing or another project's one alike).
pub(crate) fn volume_not_found(id: &str) -> E2bError {
    E2bError::new(
        StatusCode::NOT_FOUND,
        format!("volume \"{id}\" was not found"),
    )
}

/// `POST /volumes`: 201 with the volume and its content API's token.
pub(crate) async fn create(
    State(state): State<Arc<AppState>>,
    E2bProject(project): E2bProject,
    body: Bytes,
) -> Result<Response, E2bError> {
    let request: NewVolume = read_body(&body)?;
    let row = crate::sandboxes::volumes::make_volume(&state, &project, &request.name)
        .await
        .map_err(e2b_error)?;
    Ok((StatusCode::CREATED, Json(volume_and_token(&row))).into_response())
}

/// `GET /volumes`: every volume of the project, oldest first.
pub(crate) async fn list(
    State(state): State<Arc<AppState>>,
    E2bProject(project): E2bProject,
) -> Result<Json<Vec<E2bVolume>>, E2bError> {
    let rows = state
        .db(move |s| s.project_volumes(&project))
        .await
        .map_err(e2b_error)?;
    Ok(Json(
        rows.into_iter()
            .map(|row| E2bVolume {
                volume_id: row.id,
                name: row.name,
            })
            .collect(),
    ))
}

/// `GET /volumes/{volumeID}`.
pub(crate) async fn info(
    State(state): State<Arc<AppState>>,
    E2bProject(project): E2bProject,
    Path(id): Path<String>,
) -> Result<Json<VolumeAndToken>, E2bError> {
    let key = id.clone();
    let row = state
        .db(move |s| s.volume(&project, &key))
        .await
        .map_err(e2b_error)?
        .ok_or_else(|| volume_not_found(&id))?;
    Ok(Json(volume_and_token(&row)))
}

/// `DELETE /volumes/{volumeID}`: 204; 409 while a sandbox mounts it.
pub(crate) async fn destroy(
    State(state): State<Arc<AppState>>,
    E2bProject(project): E2bProject,
    Path(id): Path<String>,
) -> Result<StatusCode, E2bError> {
    crate::http::to_completion(async move {
        crate::sandboxes::volumes::remove_volume(&state, &project, &id).await
    })
    .await
    .map_err(e2b_error)?;
    Ok(StatusCode::NO_CONTENT)
}
