//! envd's `filesystem.Filesystem` service: stat, list, make, move, remove and watch, over the container's files by path.

use std::sync::Arc;

use axum::Router;

use crate::state::AppState;

pub(super) fn routes(router: Router<Arc<AppState>>) -> Router<Arc<AppState>> {
    router
}
