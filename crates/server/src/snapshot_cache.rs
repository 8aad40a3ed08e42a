//! The snapshots a node's engine holds for restores from the object
//! store (`snapshot_archives`): their sizes, when each was last used and
//! who restores from each now, so the least recently used idle ones can be
//! removed to stay within `snapshot_cache_bytes`. Only the bookkeeping:
//! fetching, unpacking and removing are `snapshot_archives`'.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The snapshots a node's engine holds for restores, their sizes and
/// when each was last used, and who restores from each now.
#[derive(Default)]
pub(crate) struct SnapshotCache {
    held: Mutex<HashMap<String, Entry>>,
    /// One fetch or removal at a time per snapshot.
    locks: crate::named_locks::NamedLocks,
    /// The last use's number (a counter: the order of uses is all that
    /// matters).
    uses: AtomicU64,
    /// When the sweep last ran (0: never).
    pub(crate) swept_at: AtomicI64,
}

struct Entry {
    bytes: u64,
    last_used: u64,
    pins: u32,
}

impl SnapshotCache {
    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn lock_of(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.locks.of(id)
    }

    /// Drops `id`'s lock once nobody holds or waits for it.
    pub(crate) fn forget_lock(&self, id: &str) {
        self.locks.forget(id);
    }

    fn next_use(&self) -> u64 {
        self.uses.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Pins `id` if it is held.
    pub(crate) fn pin(&self, id: &str) -> bool {
        let used = self.next_use();
        match self.entries().get_mut(id) {
            Some(entry) => {
                entry.pins += 1;
                entry.last_used = used;
                true
            }
            None => false,
        }
    }

    pub(crate) fn insert_pinned(&self, id: &str, bytes: u64) {
        let used = self.next_use();
        self.entries().insert(
            id.to_owned(),
            Entry {
                bytes,
                last_used: used,
                pins: 1,
            },
        );
    }

    pub(crate) fn unpin(&self, id: &str) {
        if let Some(entry) = self.entries().get_mut(id) {
            entry.pins = entry.pins.saturating_sub(1);
        }
    }

    /// A snapshot held and not in use (at a node's start; one it took).
    pub(crate) fn adopt(&self, id: &str, bytes: u64) {
        let used = self.next_use();
        self.entries().insert(
            id.to_owned(),
            Entry {
                bytes,
                last_used: used,
                pins: 0,
            },
        );
    }

    /// Removes `id` unless it is in use; whether it was held and removed.
    pub(crate) fn forget_unpinned(&self, id: &str) -> bool {
        let mut entries = self.entries();
        match entries.get(id) {
            Some(entry) if entry.pins == 0 => {
                entries.remove(id);
                true
            }
            _ => false,
        }
    }

    pub(crate) fn ids(&self) -> Vec<String> {
        self.entries().keys().cloned().collect()
    }

    /// The unpinned snapshots to remove, least recently used first, for
    /// what is held to fit in `bound` bytes.
    pub(crate) fn beyond(&self, bound: u64) -> Vec<String> {
        let entries = self.entries();
        let mut total: u64 = entries.values().map(|e| e.bytes).sum();
        let mut idle: Vec<(&String, &Entry)> =
            entries.iter().filter(|(_, e)| e.pins == 0).collect();
        idle.sort_by_key(|(_, e)| e.last_used);
        let mut victims = Vec::new();
        for (id, entry) in idle {
            if total <= bound {
                break;
            }
            total = total.saturating_sub(entry.bytes);
            victims.push(id.clone());
        }
        victims
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_idle_snapshots_go_first_and_pinned_ones_stay() {
        let cache = SnapshotCache::default();
        cache.adopt("snap_old", 40);
        cache.insert_pinned("snap_pinned", 40);
        cache.adopt("snap_new", 40);
        assert_eq!(cache.beyond(200), Vec::<String>::new(), "all fit");
        assert_eq!(cache.beyond(80), vec!["snap_old".to_owned()]);
        assert_eq!(
            cache.beyond(0),
            vec!["snap_old".to_owned(), "snap_new".to_owned()],
            "a pinned one is never a victim"
        );
        assert!(cache.pin("snap_old"), "held");
        cache.unpin("snap_old");
        assert_eq!(
            cache.beyond(80),
            vec!["snap_new".to_owned()],
            "a use makes it the newest"
        );
        assert!(!cache.forget_unpinned("snap_pinned"), "in use");
        cache.unpin("snap_pinned");
        assert!(cache.forget_unpinned("snap_pinned"));
        assert!(!cache.pin("snap_pinned"), "gone");
    }
}
