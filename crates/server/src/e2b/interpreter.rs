//! The code interpreter's port: `POST /execute` (newline-delimited JSON) and its contexts.

use std::sync::Arc;

use axum::Router;

use crate::state::AppState;

pub(super) fn routes(router: Router<Arc<AppState>>) -> Router<Arc<AppState>> {
    router
}
