//! The store as the server uses it: every call on a blocking thread.

use std::sync::Arc;

use shellgate_store::{Store, StoreError};

use crate::error::{ApiError, ApiResult};

/// The store (SQLite, or a cluster's Postgres), shared by every component
/// that reads or writes it.
#[derive(Clone)]
pub struct Db(Arc<Store>);

impl Db {
    pub fn new(store: Store) -> Self {
        Self(Arc::new(store))
    }

    /// Runs store work on a blocking thread: the database never runs on (and so
    /// never stalls) the async workers that serve every other request.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
    ) -> ApiResult<T> {
        let store = Arc::clone(&self.0);
        tokio::task::spawn_blocking(move || work(&store))
            .await
            .map_err(|e| ApiError::internal(format!("store worker failed: {e}")))?
            .map_err(ApiError::from)
    }
}
