//! [`Lease`]: one of a bounded number of things a project holds open
//! anywhere in a cluster (the console's live streams, its terminals),
//! counted in the store's `leases` so the bound is the project's across
//! every node, not each node's. It is given back when dropped, and a node's
//! leases are dropped when it starts again or is lost.

use crate::db::Db;
use crate::error::ApiResult;

/// One lease, held until dropped.
pub(crate) struct Lease {
    store: Db,
    id: String,
}

impl Lease {
    /// Takes a lease of `kind` for `project` on `node`, or `None` if the
    /// project holds `limit` of that kind already.
    pub(crate) async fn take(
        store: &Db,
        kind: &'static str,
        project: &str,
        node: &str,
        limit: u32,
    ) -> ApiResult<Option<Self>> {
        let id = shellgate_wire::new_id("lease_");
        let taken = {
            let (id, project, node) = (id.clone(), project.to_owned(), node.to_owned());
            store
                .run(move |store| {
                    store.take_lease(&id, kind, &project, &node, limit, crate::time::now())
                })
                .await?
        };
        Ok(taken.then(|| Self {
            store: store.clone(),
            id,
        }))
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Given back on a blocking thread; without a runtime (the server
        // is ending), the node's next start drops it.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, id) = (self.store.clone(), std::mem::take(&mut self.id));
        runtime.spawn(async move {
            if let Err(error) = store.run(move |store| store.release_lease(&id)).await {
                tracing::warn!("a lease was not given back: {}", error.message);
            }
        });
    }
}
