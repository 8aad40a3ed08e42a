//! What a container made from a snapshot starts from: the project's
//! snapshot by id, and what the create inherits of the snapshot's
//! container (kept apart from `snapshots`, which makes containers through
//! `containers`, so that `containers` can read a snapshot at create).

use serde::{Deserialize, Serialize};
use shellgate_store::SnapshotRow;
use shellgate_wire::{CreateContainer, ExpiresAfter, ExpiresAnchor, MemoryLimit, NetworkPolicy};

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// What a container made from a snapshot inherits of the snapshot's
/// container unless its request says otherwise (the `source` column).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SnapshotSource {
    pub name: String,
    pub memory_limit: MemoryLimit,
    /// Without secret values: a copy's `domain_secrets` are given again.
    pub network_policy: NetworkPolicy,
    pub expires_minutes: u32,
}

/// The project's snapshot `id`, or 404.
pub(crate) async fn owned_snapshot(
    state: &AppState,
    project: &str,
    id: &str,
) -> ApiResult<SnapshotRow> {
    let (owner, key) = (project.to_owned(), id.to_owned());
    state
        .db(move |s| s.snapshot(&owner, &key))
        .await?
        .ok_or_else(|| ApiError::not_found("snapshot", id))
}

/// Fills what a create from `snapshot` leaves out with the snapshot's
/// container's; refuses another image.
pub(crate) fn inherit(body: &mut CreateContainer, snapshot: &SnapshotRow) -> ApiResult<()> {
    let source: SnapshotSource = serde_json::from_str(&snapshot.source)
        .map_err(|e| ApiError::internal(format!("snapshot {} is corrupt: {e}", snapshot.id)))?;
    match &body.image {
        Some(image) if *image != snapshot.image => {
            return Err(ApiError::invalid(
                "image",
                format!(
                    "snapshot {} holds the files of a container of image '{}'; a container made \
                     from it runs that image",
                    snapshot.id, snapshot.image
                ),
            ));
        }
        _ => body.image = Some(snapshot.image.clone()),
    }
    if body.memory_limit.is_none() {
        body.memory_limit = Some(source.memory_limit);
    }
    if body.network_policy.is_none() {
        body.network_policy = Some(source.network_policy);
    }
    if body.expires_after.is_none() {
        body.expires_after = Some(ExpiresAfter {
            anchor: ExpiresAnchor::LastActiveAt,
            minutes: source.expires_minutes,
        });
    }
    Ok(())
}
