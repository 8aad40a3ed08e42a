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

    /// Closes the store's connections (`Store::close`) on a thread of its
    /// own, waiting for it at most [`CLOSE_WAIT`]: not on a blocking
    /// thread of the runtime, which the runtime would wait for without
    /// bound as it ends, should a database that stopped answering hold a
    /// goodbye up.
    pub async fn close(&self) {
        let store = Arc::clone(&self.0);
        let (done, closed) = tokio::sync::oneshot::channel();
        let spawned = std::thread::Builder::new()
            .name("store-close".into())
            .spawn(move || {
                store.close();
                let _ = done.send(());
            });
        if let Err(error) = spawned {
            tracing::warn!("the store's connections were not closed: {error}");
            return;
        }
        if tokio::time::timeout(CLOSE_WAIT, closed).await.is_err() {
            tracing::warn!(
                "the store's connections did not close within {} s; left to the process's end",
                CLOSE_WAIT.as_secs()
            );
        }
    }
}

/// How long a server that stops waits for its store's connections to close.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
