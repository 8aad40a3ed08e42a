//! Which E2B `templateID`s are shellgate snapshots' ids: a sandbox created
//! from one, or a template delete naming one, is a snapshot's (apart from
//! `snapshots`, whose handlers use `control`, so that `control` and
//! `templates` can ask).

use std::sync::Arc;

use axum::http::StatusCode;

use super::request::e2b_error;
use super::E2bError;
use crate::sandboxes::snapshots as native;
use crate::state::AppState;

type E2bResult<T> = Result<T, E2bError>;

/// The prefix of shellgate's snapshot ids, which no template id has: a
/// `templateID` or a template delete naming one is a snapshot's.
pub(super) const SNAPSHOT_PREFIX: &str = "snap_";
/// `id` as a snapshot of `project` to start a sandbox from, or `None`
/// when it is not a snapshot's id (then it names a template). Another
/// project's snapshot is E2B's 404, as an unknown template.
pub(super) async fn project_snapshot(
    state: &AppState,
    project: &str,
    id: &str,
) -> E2bResult<Option<String>> {
    if !id.starts_with(SNAPSHOT_PREFIX) {
        return Ok(None);
    }
    match native::owned_snapshot(state, project, id).await {
        Ok(row) => Ok(Some(row.id)),
        Err(error) if error.status() == StatusCode::NOT_FOUND => Err(E2bError::new(
            StatusCode::NOT_FOUND,
            format!("template '{id}' not found"),
        )),
        Err(error) => Err(e2b_error(error)),
    }
}

/// `DELETE /templates/{id}` of a snapshot's id: `Some` when `id` is one
/// (then removed, or 404), `None` when it names a template.
pub(super) async fn remove_if_snapshot(
    state: &Arc<AppState>,
    project: &str,
    id: &str,
) -> Option<E2bResult<StatusCode>> {
    if !id.starts_with(SNAPSHOT_PREFIX) {
        return None;
    }
    Some(
        native::remove(state, project, id)
            .await
            .map(|()| StatusCode::NO_CONTENT)
            .map_err(e2b_error),
    )
}
