//! `/v1/containers/{id}/snapshots`, `/v1/snapshots`,
//! `/v1/containers/{id}/fork` and `/v1/containers/{id}/image`: snapshots of
//! containers, copies of them and images committed from them, over
//! `sandboxes::snapshots`.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::Json;
use shellgate_wire::{
    CommitImage, Container, CreateSnapshot, Deleted, ForkContainer, Image, List, Snapshot,
};

use crate::error::ApiResult;
use crate::http::{ApiJson, ApiQuery, ListParams, Project};
use crate::public_base::PublicBase;
use crate::sandboxes::containers::shown_container;
use crate::sandboxes::snapshots::{self, snapshot_object};
use crate::state::AppState;

pub async fn create(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(container_id): Path<String>,
    ApiJson(body): ApiJson<CreateSnapshot>,
) -> ApiResult<Json<Snapshot>> {
    let row = snapshots::take(&state, &project, &container_id, body).await?;
    Ok(Json(snapshot_object(&row)))
}

pub async fn list(
    State(state): State<Arc<AppState>>,
    project: Project,
    ApiQuery(params): ApiQuery<ListParams>,
) -> ApiResult<Json<List<Snapshot>>> {
    let page = params.unfiltered_page("snapshots")?;
    let owner = project.0.clone();
    let (rows, has_more) = state.db(move |s| s.list_snapshots(&owner, &page)).await?;
    let data = rows.iter().map(snapshot_object).collect();
    Ok(Json(List::page(data, has_more, |s: &Snapshot| {
        s.id.clone()
    })))
}

pub async fn retrieve(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(snapshot_id): Path<String>,
) -> ApiResult<Json<Snapshot>> {
    let row = snapshots::owned_snapshot(&state, &project.0, &snapshot_id).await?;
    Ok(Json(snapshot_object(&row)))
}

pub async fn delete(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(snapshot_id): Path<String>,
) -> ApiResult<Json<Deleted>> {
    snapshots::remove(&state, &project.0, &snapshot_id).await?;
    Ok(Json(Deleted::new(
        snapshot_id,
        "container.snapshot.deleted",
    )))
}

pub async fn fork(
    State(state): State<Arc<AppState>>,
    project: Project,
    base: PublicBase,
    Path(container_id): Path<String>,
    ApiJson(body): ApiJson<ForkContainer>,
) -> ApiResult<Json<List<Container>>> {
    let rows = snapshots::fork(&state, &project, &container_id, body).await?;
    let data = rows
        .iter()
        .map(|row| shown_container(&state, row, &base))
        .collect::<ApiResult<Vec<_>>>()?;
    Ok(Json(List::page(data, false, |c: &Container| c.id.clone())))
}

pub async fn commit(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(container_id): Path<String>,
    ApiJson(body): ApiJson<CommitImage>,
) -> ApiResult<Json<Image>> {
    let image = snapshots::commit(&state, &project, &container_id, body).await?;
    Ok(Json(crate::containers::image_object(
        image,
        &state.config.sandbox.default_image,
    )))
}
