//! `/v1/volumes`: the project's volumes in shellgate's own shapes, over
//! `sandboxes::volumes` (which E2B's `/volumes` shares).

use std::sync::Arc;

use axum::extract::{Path as UrlPath, State};
use axum::Json;
use shellgate_store::VolumeRow;
use shellgate_wire::{CreateVolume, Deleted, List, Volume};

use crate::error::ApiResult;
use crate::http::{ApiJson, ApiQuery, ListParams, Project};
use crate::sandboxes::volumes::{make_volume, owned_volume, remove_volume};
use crate::state::AppState;

/// The volume object.
pub fn volume_object(row: &VolumeRow) -> Volume {
    Volume {
        id: row.id.clone(),
        object: "volume".to_owned(),
        name: row.name.clone(),
        created_at: row.created_at,
    }
}

pub async fn create(
    State(state): State<Arc<AppState>>,
    project: Project,
    ApiJson(body): ApiJson<CreateVolume>,
) -> ApiResult<Json<Volume>> {
    let row = make_volume(&state, &project.0, &body.name).await?;
    Ok(Json(volume_object(&row)))
}

pub async fn list(
    State(state): State<Arc<AppState>>,
    project: Project,
    ApiQuery(params): ApiQuery<ListParams>,
) -> ApiResult<Json<List<Volume>>> {
    let page = params.unfiltered_page("volumes")?;
    let owner = project.0.clone();
    let (rows, has_more) = state.db(move |s| s.list_volumes(&owner, &page)).await?;
    let data = rows.iter().map(volume_object).collect();
    Ok(Json(List::page(data, has_more, |v: &Volume| v.id.clone())))
}

pub async fn retrieve(
    State(state): State<Arc<AppState>>,
    project: Project,
    UrlPath(volume_id): UrlPath<String>,
) -> ApiResult<Json<Volume>> {
    let row = owned_volume(&state, &project.0, &volume_id).await?;
    Ok(Json(volume_object(&row)))
}

pub async fn delete(
    State(state): State<Arc<AppState>>,
    project: Project,
    UrlPath(volume_id): UrlPath<String>,
) -> ApiResult<Json<Deleted>> {
    remove_volume(&state, &project.0, &volume_id).await?;
    Ok(Json(Deleted::new(volume_id, "volume.deleted")))
}
