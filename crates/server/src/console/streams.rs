//! [`Streams`]: how many live streams (SSE) each project has open in the
//! console, bounded: a stream holds a task and a subscription for as long
//! as it is open, so one tenant opening thousands must not hold the
//! server's memory or its other tenants' share of the change broadcast.
//! Counted in the store's leases (one per open stream), so the bound is
//! the project's across every node of a cluster, not each node's; a node's
//! leases are dropped when it starts again or is lost.

use crate::db::Db;
use crate::error::{ApiError, ApiResult};
use crate::lease::Lease;
use shellgate_wire::ErrorCode;

/// The most live streams one project keeps open (every tab of every
/// member's console: two or three streams a tab).
pub(super) const STREAMS_PER_PROJECT: u32 = 64;

/// The leases' kind.
const STREAM_LEASE: &str = "console_stream";

pub(crate) struct Streams {
    store: Db,
    /// This server's node (its leases' holder).
    node: String,
}

/// One open stream, counted until dropped.
pub(super) type StreamSlot = Lease;

impl Streams {
    pub(crate) fn new(store: Db, node: &str) -> Self {
        Self {
            store,
            node: node.to_owned(),
        }
    }

    /// A slot for a new stream of `project`, or a 429 past the bound.
    pub(super) async fn open(&self, project: &str) -> ApiResult<StreamSlot> {
        let lease = Lease::take(
            &self.store,
            STREAM_LEASE,
            project,
            &self.node,
            STREAMS_PER_PROJECT,
        )
        .await?;
        lease.ok_or_else(|| {
            ApiError::quota(
                ErrorCode::TooManyConsoleStreams,
                format!(
                    "Project '{project}' has {STREAMS_PER_PROJECT} console live streams open; close a console tab."
                ),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(dir: &crate::testing::TempDir) -> Db {
        Db::new(shellgate_store::Store::open(&dir.path().join("shellgate.db")).unwrap())
    }

    /// Closes `slot`, then opens another in its place (the lease is given
    /// back on another task: awaited as a condition).
    async fn reopened(slot: StreamSlot, streams: &Streams, project: &str) -> StreamSlot {
        drop(slot);
        for _ in 0..1000 {
            if let Ok(slot) = streams.open(project).await {
                return slot;
            }
            tokio::task::yield_now().await;
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        panic!("the closed stream's slot never came back")
    }

    #[tokio::test]
    async fn a_project_has_a_bounded_number_of_streams_across_nodes_and_closing_frees_one() {
        let dir = crate::testing::TempDir::new();
        let store = store(&dir);
        // Two nodes of one cluster share the bound.
        let (one, two) = (
            Streams::new(store.clone(), "n1"),
            Streams::new(store.clone(), "n2"),
        );
        let mut open = Vec::new();
        for n in 0..STREAMS_PER_PROJECT {
            let streams = if n % 2 == 0 { &one } else { &two };
            open.push(streams.open("alpha").await.unwrap());
        }
        for streams in [&one, &two] {
            let refused = streams.open("alpha").await.err().unwrap();
            assert_eq!(refused.status().as_u16(), 429);
            assert_eq!(refused.code.code(), Some("too_many_console_streams"));
        }
        assert!(
            two.open("beta").await.is_ok(),
            "another project is not affected"
        );
        // One of n2's closes: n1 takes its place.
        let last = open.pop().unwrap();
        let _taken = reopened(last, &one, "alpha").await;
        // A node that starts again drops what it held.
        let dropped = store
            .run(|store| store.release_leases_of("n1"))
            .await
            .unwrap();
        assert_eq!(dropped, u64::from(STREAMS_PER_PROJECT / 2 + 1));
        assert!(one.open("alpha").await.is_ok());
    }
}
