//! envd's `process.Process` service: processes started, streamed, written to, signalled and resized, over the container's processes.

use std::sync::Arc;

use axum::Router;

use crate::state::AppState;

pub(super) fn routes(router: Router<Arc<AppState>>) -> Router<Arc<AppState>> {
    router
}
