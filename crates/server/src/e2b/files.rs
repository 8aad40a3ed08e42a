//! envd's plain HTTP routes: `GET`/`POST /files` (download, upload) and `GET /health`.

use std::sync::Arc;

use axum::Router;

use crate::state::AppState;

pub(super) fn routes(router: Router<Arc<AppState>>) -> Router<Arc<AppState>> {
    router
}
