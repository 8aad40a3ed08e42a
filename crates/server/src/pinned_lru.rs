//! The bookkeeping of a node's caches of what it fetched from the object
//! store (`image_cache`, `snapshot_cache`): which names are in use now
//! (pinned: never removed meanwhile), the order of their last uses, and
//! the least recently used idle ones to remove for the rest to fit in a
//! bound. No I/O: listing, fetching and removing are the callers'.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// Names with a value each (a snapshot's size; nothing for an image,
/// whose size the engine's listing tells), their pins and last uses.
#[derive(Default)]
pub(crate) struct PinnedLru<V = ()> {
    inner: Mutex<Inner<V>>,
}

#[derive(Default)]
struct Inner<V> {
    entries: HashMap<String, Entry<V>>,
    /// The last use's number (a counter: the order of uses is all that
    /// matters).
    uses: u64,
}

struct Entry<V> {
    value: V,
    last_used: u64,
    pins: u32,
}

impl<V> PinnedLru<V> {
    fn inner(&self) -> MutexGuard<'_, Inner<V>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Pins `name` if it is known, as the most recently used: it is never
    /// a victim until [`unpin`](Self::unpin). Whether it was known.
    pub(crate) fn pin(&self, name: &str) -> bool {
        let mut inner = self.inner();
        inner.uses += 1;
        let used = inner.uses;
        let Some(entry) = inner.entries.get_mut(name) else {
            return false;
        };
        entry.pins += 1;
        entry.last_used = used;
        true
    }

    /// Pins `name` (once more, if it was) as the most recently used, known
    /// from now on with `value`.
    pub(crate) fn pin_with(&self, name: &str, value: V) {
        self.record(name, value, 1);
    }

    /// Knows `name` from now on with `value`, as the most recently used;
    /// its pins stay as they were (none, if it is new).
    pub(crate) fn adopt(&self, name: &str, value: V) {
        self.record(name, value, 0);
    }

    fn record(&self, name: &str, value: V, pin: u32) {
        let mut inner = self.inner();
        inner.uses += 1;
        let last_used = inner.uses;
        let pins = inner.entries.get(name).map_or(0, |entry| entry.pins) + pin;
        inner.entries.insert(
            name.to_owned(),
            Entry {
                value,
                last_used,
                pins,
            },
        );
    }

    pub(crate) fn unpin(&self, name: &str) {
        if let Some(entry) = self.inner().entries.get_mut(name) {
            entry.pins = entry.pins.saturating_sub(1);
        }
    }

    pub(crate) fn pinned(&self, name: &str) -> bool {
        self.inner().entries.get(name).is_some_and(|e| e.pins > 0)
    }

    /// When `name` was last used (0: not since this process started).
    pub(crate) fn last_used(&self, name: &str) -> u64 {
        self.inner().entries.get(name).map_or(0, |e| e.last_used)
    }

    /// Drops what is known of `name` (its copy goes), unless it is in use;
    /// whether it was known and dropped.
    pub(crate) fn forget_unpinned(&self, name: &str) -> bool {
        let mut inner = self.inner();
        let idle = inner.entries.get(name).is_some_and(|e| e.pins == 0);
        idle && inner.entries.remove(name).is_some()
    }

    pub(crate) fn names(&self) -> Vec<String> {
        self.inner().entries.keys().cloned().collect()
    }
}

impl PinnedLru<u64> {
    /// The unpinned names to remove, least recently used first, for the
    /// sizes kept (the values) to fit in `bound` bytes.
    pub(crate) fn beyond(&self, bound: u64) -> Vec<String> {
        let inner = self.inner();
        let held = inner.entries.iter().map(|(name, entry)| Candidate {
            name,
            bytes: entry.value,
            pinned: entry.pins > 0,
            age: entry.last_used,
        });
        victims(held, bound)
    }
}

/// One thing a node holds, as the choice of what to remove sees it.
pub(crate) struct Candidate<'a, K> {
    pub name: &'a str,
    pub bytes: u64,
    /// In use: it counts, and stays.
    pub pinned: bool,
    /// The order of removal: the smallest (the least recently used) first,
    /// equal ones by name.
    pub age: K,
}

/// The idle candidates to remove, in [`Candidate::age`] order, for all of
/// them to fit in `bound` bytes; none pinned (so those pinned may keep the
/// total above it).
pub(crate) fn victims<'a, K: Ord>(
    held: impl IntoIterator<Item = Candidate<'a, K>>,
    bound: u64,
) -> Vec<String> {
    let (pinned, mut idle): (Vec<_>, Vec<_>) = held.into_iter().partition(|one| one.pinned);
    let mut total: u64 = pinned.iter().chain(&idle).map(|one| one.bytes).sum();
    idle.sort_by(|a, b| (&a.age, a.name).cmp(&(&b.age, b.name)));
    let mut chosen = Vec::new();
    for one in idle {
        if total <= bound {
            break;
        }
        total = total.saturating_sub(one.bytes);
        chosen.push(one.name.to_owned());
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pin_makes_a_name_the_newest_and_keeps_it_until_unpinned() {
        let cache = PinnedLru::<()>::default();
        assert_eq!(cache.last_used("a"), 0, "never used");
        assert!(!cache.pin("a"), "only a known one is pinned");
        cache.pin_with("a", ());
        cache.pin_with("b", ());
        cache.unpin("b");
        assert!(cache.pinned("a") && !cache.pinned("b"));
        assert!(cache.last_used("b") > cache.last_used("a"));
        assert!(cache.pin("a"), "known");
        cache.unpin("a");
        assert!(cache.pinned("a"), "pinned twice, given back once");
        assert!(
            cache.last_used("a") > cache.last_used("b"),
            "a use makes it the newest"
        );
        assert!(!cache.forget_unpinned("a"), "one in use is not forgotten");
        assert!(cache.pinned("a"));
        cache.unpin("a");
        assert!(cache.forget_unpinned("a"));
        assert_eq!(cache.last_used("a"), 0, "forgotten");
        assert_eq!(cache.names(), vec!["b".to_owned()]);
    }

    #[test]
    fn the_least_recently_used_idle_sizes_kept_go_first_and_pinned_ones_stay() {
        let cache = PinnedLru::<u64>::default();
        cache.adopt("old", 40);
        cache.pin_with("pinned", 40);
        cache.adopt("new", 40);
        assert_eq!(cache.beyond(200), Vec::<String>::new(), "all fit");
        assert_eq!(cache.beyond(80), vec!["old".to_owned()]);
        assert_eq!(
            cache.beyond(0),
            vec!["old".to_owned(), "new".to_owned()],
            "a pinned one is never a victim"
        );
        assert!(cache.pin("old"), "known");
        cache.unpin("old");
        assert_eq!(
            cache.beyond(80),
            vec!["new".to_owned()],
            "a use makes it the newest"
        );
        assert!(!cache.forget_unpinned("pinned"), "in use");
        cache.unpin("pinned");
        assert!(cache.forget_unpinned("pinned"));
        assert!(!cache.pin("pinned"), "gone");
    }
}
