//! The snapshots a node's engine holds for restores from the object
//! store (`snapshot_archives`): their sizes, when each was last used and
//! who restores from each now (a [`PinnedLru`] of sizes), so the least
//! recently used idle ones can be removed to stay within
//! `snapshot_cache_bytes`. Only the bookkeeping: fetching, unpacking and
//! removing are `snapshot_archives`'.

use std::sync::atomic::AtomicI64;

use crate::pinned_lru::PinnedLru;

/// The snapshots a node's engine holds for restores, their sizes and
/// when each was last used, and who restores from each now.
#[derive(Default)]
pub(crate) struct SnapshotCache {
    /// By id, their sizes kept: pinned while a create restores from one.
    pub(crate) held: PinnedLru<u64>,
    /// One fetch or removal at a time per snapshot.
    pub(crate) locks: crate::named_locks::NamedLocks,
    /// When the sweep last ran (0: never).
    pub(crate) swept_at: AtomicI64,
}
