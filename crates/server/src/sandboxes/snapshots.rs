//! Snapshots: a container's files saved by the engine under an id
//! (`/v1/containers/{id}/snapshots`, `/v1/snapshots`), containers made
//! from one (`snapshot_id` at create) and forks (a snapshot taken and
//! copied `count` times at once).
//!
//! The engine commits a snapshot's files first, then its row is written,
//! under the project's lock and only if the project's quotas
//! (`max_snapshots_per_project`, `max_snapshot_bytes_per_project`) admit
//! it; a refused or crashed take leaves files no row names, which are
//! removed (at once, or at the next start by [`remove_unknown`]). A delete
//! removes the row first, then the files. A fork's snapshot never has a
//! row: it is removed once the copies are made.
//!
//! A commit (`/v1/containers/{id}/image`) is the engine's: its image is the
//! project's (the engine records the owner with it), seen and used by that
//! project alone.
//!
//! In a cluster, a node's snapshot is put in the object store before its
//! row is written, and any node restores it from there
//! (`snapshot_archives`); a fork's copies are made on the source's node,
//! from a snapshot that never leaves it. A commit's image is put in the
//! object store before the commit answers (`image_archives`).

use std::collections::BTreeMap;
use std::sync::Arc;

use shellgate_store::{ContainerRow, SnapshotRefusal, SnapshotRow};
use shellgate_wire::{
    new_id, CommitImage, CreateContainer, CreateSnapshot, ErrorCode, ForkContainer, Snapshot,
};

use crate::error::{ApiError, ApiResult};
use crate::http::{to_completion, Project};
pub(crate) use crate::sandboxes::snapshot_source::owned_snapshot;
use crate::sandboxes::snapshot_source::{inherit, SnapshotSource};
use crate::state::AppState;

/// Why a snapshot holds no memory: processes are not checkpointed here.
pub(crate) const FILES_ONLY: &str = "files only: this server does not checkpoint processes' memory";

/// The most copies one fork makes.
pub(crate) const MAX_FORKS: u32 = 16;

const MAX_NAME: usize = 256;
const MAX_METADATA_PAIRS: usize = 16;
const MAX_METADATA_KEY: usize = 64;
const MAX_METADATA_VALUE: usize = 512;

/// What a copy of `row` inherits, kept with its snapshot.
fn source_of(row: &ContainerRow) -> ApiResult<SnapshotSource> {
    Ok(SnapshotSource {
        name: row.name.clone(),
        memory_limit: row.memory_limit,
        network_policy: crate::sandboxes::containers::network_policy(row),
        expires_minutes: row.expires_minutes,
    })
}

/// The snapshot object.
pub(crate) fn snapshot_object(row: &SnapshotRow) -> Snapshot {
    Snapshot {
        id: row.id.clone(),
        object: "container.snapshot".to_owned(),
        name: row.name.clone(),
        metadata: serde_json::from_str(&row.metadata).unwrap_or_default(),
        size_bytes: u64::try_from(row.size_bytes).unwrap_or(0),
        created_at: row.created_at,
        container_id: row.container_id.clone(),
        image: row.image.clone(),
        image_revision: row.image_revision.clone(),
        memory: false,
        memory_unavailable_reason: row.memory_unavailable_reason.clone(),
        frozen_ms: u64::try_from(row.frozen_ms).unwrap_or(0),
    }
}

fn check(body: &CreateSnapshot) -> ApiResult<()> {
    if let Some(name) = &body.name {
        if name.trim().is_empty() || name.chars().count() > MAX_NAME {
            return Err(ApiError::invalid(
                "name",
                format!("name must be 1 to {MAX_NAME} characters"),
            ));
        }
    }
    if body.metadata.len() > MAX_METADATA_PAIRS {
        return Err(ApiError::invalid(
            "metadata",
            format!("metadata holds at most {MAX_METADATA_PAIRS} pairs"),
        ));
    }
    for (key, value) in &body.metadata {
        if key.is_empty()
            || key.chars().count() > MAX_METADATA_KEY
            || value.chars().count() > MAX_METADATA_VALUE
        {
            return Err(ApiError::invalid(
                "metadata",
                format!(
                    "metadata keys are 1 to {MAX_METADATA_KEY} characters and values at most \
                     {MAX_METADATA_VALUE}"
                ),
            ));
        }
    }
    Ok(())
}

fn refused(refusal: SnapshotRefusal) -> ApiError {
    match refusal {
        SnapshotRefusal::TooMany { max } => ApiError::quota(
            ErrorCode::TooManySnapshots,
            format!("The project holds its most snapshots ({max}, max_snapshots_per_project)."),
        ),
        SnapshotRefusal::TooManyBytes { max } => ApiError::quota(
            ErrorCode::SnapshotBytesExceeded,
            format!(
                "The project's snapshots would hold more than {max} bytes \
                 (max_snapshot_bytes_per_project); delete snapshots first."
            ),
        ),
    }
}

/// The engine's snapshot of `container`, under a new id; its files are
/// committed, its row not written.
async fn take_files(
    state: &Arc<AppState>,
    container: &ContainerRow,
    name: String,
    metadata: &BTreeMap<String, String>,
) -> ApiResult<SnapshotRow> {
    let id = new_id("snap_");
    let worker = Arc::clone(state);
    let (container_id, snapshot_id) = (container.id.clone(), id.clone());
    let taken = to_completion(async move {
        worker
            .engine
            .snapshot(&container_id, &snapshot_id)
            .await
            .map_err(|e| crate::engine::engine_error(&container_id, e))
    })
    .await?;
    Ok(SnapshotRow {
        id,
        project: container.project.clone(),
        name,
        metadata: serde_json::to_string(metadata).map_err(|e| ApiError::internal(e.to_string()))?,
        size_bytes: i64::try_from(taken.size_bytes).unwrap_or(i64::MAX),
        created_at: crate::time::now(),
        container_id: container.id.clone(),
        image: taken.image,
        image_revision: taken.image_revision,
        memory_unavailable_reason: Some(
            taken
                .memory_unavailable_reason
                .unwrap_or_else(|| FILES_ONLY.to_owned()),
        ),
        frozen_ms: i64::try_from(taken.frozen_ms).unwrap_or(i64::MAX),
        source: serde_json::to_string(&source_of(container)?)
            .map_err(|e| ApiError::internal(e.to_string()))?,
        node_id: state.node_name.clone(),
        archive_digest: None,
    })
}

/// `POST /v1/containers/{id}/snapshots`.
pub(crate) async fn take(
    state: &Arc<AppState>,
    project: &Project,
    container_id: &str,
    body: CreateSnapshot,
) -> ApiResult<SnapshotRow> {
    check(&body)?;
    let container = crate::sandboxes::containers::owned(state, project, container_id).await?;
    let (max_count, max_bytes) = quotas(state);
    let owner = project.0.clone();
    if let Some(refusal) = state
        .db(move |s| s.snapshot_refusal(&owner, max_count, max_bytes))
        .await?
    {
        return Err(refused(refusal));
    }
    let name = body
        .name
        .clone()
        .unwrap_or_else(|| format!("{}-snapshot", container.name));
    let mut row = take_files(state, &container, name, &body.metadata).await?;
    let archived = crate::snapshot_archives::archived(state);
    if archived {
        // The object whole before the row: a crash in between leaves an
        // object no row names (swept), never a row without its object.
        match crate::snapshot_archives::publish(state, &row.id).await {
            Ok(digest) => row.archive_digest = Some(digest),
            Err(error) => {
                remove_files(state, &row.id).await;
                return Err(error);
            }
        }
    }
    let inserted = row.clone();
    let written = state
        .db(move |s| s.insert_snapshot(&inserted, max_count, max_bytes))
        .await;
    let failed = match written {
        Ok(Ok(())) => {
            if archived {
                // Its files here are the first copy of this node's cache.
                state
                    .snapshot_cache
                    .held
                    .adopt(&row.id, u64::try_from(row.size_bytes).unwrap_or(0));
            }
            return Ok(row);
        }
        Ok(Err(refusal)) => refused(refusal),
        Err(error) => error,
    };
    if archived {
        crate::snapshot_archives::unpublish(state, &row.id).await;
    }
    remove_files(state, &row.id).await;
    Err(failed)
}

fn quotas(state: &AppState) -> (u32, i64) {
    let sandbox = &state.config.sandbox;
    (
        sandbox.max_snapshots_per_project,
        i64::try_from(sandbox.max_snapshot_bytes_per_project.bytes()).unwrap_or(i64::MAX),
    )
}

async fn remove_files(state: &AppState, id: &str) {
    if let Err(e) = state.engine.delete_snapshot(id).await {
        tracing::warn!(snapshot = %id, "could not remove its files: {e}");
    }
}

/// `DELETE /v1/snapshots/{id}`: the row, then the files (in a cluster,
/// its archive and this node's copy; other nodes' copies go at their
/// next sweep).
pub(crate) async fn remove(state: &Arc<AppState>, project: &str, id: &str) -> ApiResult<()> {
    let (owner, key) = (project.to_owned(), id.to_owned());
    if !state.db(move |s| s.delete_snapshot(&owner, &key)).await? {
        return Err(ApiError::not_found("snapshot", id));
    }
    if crate::snapshot_archives::archived(state) {
        crate::snapshot_archives::unpublish(state, id).await;
        crate::snapshot_archives::remove_held(state, id).await;
    } else {
        remove_files(state, id).await;
    }
    Ok(())
}

/// Removes the snapshots of `held` (what the engine held at the start:
/// none is being taken then) that no row names (a take cut short by a
/// crash, or a fork's); a cluster's node keeps those of any node's rows
/// as its cache. (With archived snapshots, `snapshot_archives::adopt`
/// does this.)
pub(crate) async fn remove_unknown(
    state: &Arc<AppState>,
    held: Vec<String>,
) -> Result<(), ApiError> {
    if held.is_empty() {
        return Ok(());
    }
    let node = state.node_name.clone();
    let known: std::collections::HashSet<String> = state
        .db(move |s| s.node_snapshot_ids(&node))
        .await?
        .into_iter()
        .collect();
    for id in held.iter().filter(|id| !known.contains(*id)) {
        tracing::info!(snapshot = %id, "removing a snapshot the store does not know");
        remove_files(state, id).await;
    }
    Ok(())
}

/// `POST /v1/containers/{id}/fork`: `count` copies of the container, made
/// from one snapshot taken now (removed once they are made).
pub(crate) async fn fork(
    state: &Arc<AppState>,
    project: &Project,
    container_id: &str,
    body: ForkContainer,
) -> ApiResult<Vec<ContainerRow>> {
    if !(1..=MAX_FORKS).contains(&body.count) {
        return Err(ApiError::invalid(
            "count",
            format!("count must be between 1 and {MAX_FORKS}"),
        ));
    }
    let container = crate::sandboxes::containers::owned(state, project, container_id).await?;
    let worker = Arc::clone(state);
    let project = project.0.clone();
    to_completion(async move {
        let state = worker;
        let snapshot = take_files(
            &state,
            &container,
            format!("{}-fork", container.name),
            &BTreeMap::new(),
        )
        .await?;
        let mut copies = Vec::new();
        let mut failed = None;
        for n in 1..=body.count {
            let mut create = CreateContainer {
                name: body
                    .name
                    .clone()
                    .unwrap_or_else(|| format!("{}-fork-{n}", container.name)),
                file_ids: Vec::new(),
                expires_after: body.expires_after,
                skills: Vec::new(),
                memory_limit: body.memory_limit,
                network_policy: body.network_policy.clone(),
                image: None,
                exposed_ports: Vec::new(),
                volumes: Vec::new(),
                snapshot_id: None,
            };
            let made = match inherit(&mut create, &snapshot) {
                Ok(()) => {
                    crate::sandboxes::containers::create_container_from(
                        &state,
                        &project,
                        create,
                        Some(&snapshot),
                    )
                    .await
                }
                Err(error) => Err(error),
            };
            match made {
                Ok(row) => copies.push(row),
                Err(error) => {
                    failed = Some(error);
                    break;
                }
            }
        }
        remove_files(&state, &snapshot.id).await;
        if let Some(error) = failed {
            // All or nothing: the copies made so far go.
            for copy in &copies {
                let _ = crate::sandboxes::containers::remove_container(&state, &copy.id).await;
            }
            return Err(error);
        }
        Ok(copies)
    })
    .await
}

/// `POST /v1/containers/{id}/image`: the container committed to image
/// `body.name` of the project's.
pub(crate) async fn commit(
    state: &Arc<AppState>,
    project: &Project,
    container_id: &str,
    body: CommitImage,
) -> ApiResult<shellgate_sandbox_api::image::ImageInfo> {
    let container = crate::sandboxes::containers::owned(state, project, container_id).await?;
    let worker = Arc::clone(state);
    let owner = project.0.clone();
    to_completion(async move {
        let _making = crate::image_archives::Making::new(&body.name);
        let image = worker
            .engine
            .commit_image(&container.id, &body.name, &owner, None)
            .await
            .map_err(|e| crate::engine::engine_error(&container.id, e))?;
        if crate::image_archives::archived(&worker) {
            crate::image_archives::publish(&worker, &image.name).await?;
        }
        Ok(image)
    })
    .await
}
