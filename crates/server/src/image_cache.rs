//! The project images a cluster's node fetched from the object store
//! (`image_archives`): which ones a create or a build is about to use
//! (pinned), when each was last used, and which to remove for the fetched
//! ones to fit in `image_cache_bytes`. Only the bookkeeping and the
//! choice: listing, fetching and removing are `image_archives`'.
//!
//! Only fetched copies count and go: an image this node built, imported
//! or committed itself is its archive's original (the image's row names
//! this node and the copy's revision), and the operator's images are on
//! every node's disk; neither is fetched again, so neither is removed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Who uses which fetched image now, and when each was last used.
#[derive(Default)]
pub(crate) struct ImageCache {
    uses: Mutex<HashMap<String, Use>>,
    /// The last use's number (a counter: the order of uses is all that
    /// matters).
    counter: AtomicU64,
}

struct Use {
    last_used: u64,
    pins: u32,
}

impl ImageCache {
    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Use>> {
        self.uses.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Image `name` is used from now until [`unpin`](Self::unpin): it is
    /// never a victim meanwhile, and it is the most recently used.
    pub(crate) fn pin(&self, name: &str) {
        let used = self.counter.fetch_add(1, Ordering::SeqCst) + 1;
        let mut entries = self.entries();
        let entry = entries.entry(name.to_owned()).or_insert(Use {
            last_used: used,
            pins: 0,
        });
        entry.last_used = used;
        entry.pins += 1;
    }

    pub(crate) fn unpin(&self, name: &str) {
        if let Some(entry) = self.entries().get_mut(name) {
            entry.pins = entry.pins.saturating_sub(1);
        }
    }

    pub(crate) fn pinned(&self, name: &str) -> bool {
        self.entries().get(name).is_some_and(|entry| entry.pins > 0)
    }

    /// When `name` was last used (0: not since this process started).
    pub(crate) fn last_used(&self, name: &str) -> u64 {
        self.entries().get(name).map_or(0, |entry| entry.last_used)
    }

    /// Drops what is known of `name` (its copy was removed), unless it is
    /// in use.
    pub(crate) fn forget(&self, name: &str) {
        let mut entries = self.entries();
        if entries.get(name).is_some_and(|entry| entry.pins == 0) {
            entries.remove(name);
        }
    }
}

/// Where a node's copy of a project image came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// Fetched from the object store: it counts, and may go.
    Fetched,
    /// Made here (the archive's original), or being made: kept.
    MadeHere,
}

/// A node's copy of a project image, as the choice sees it.
#[derive(Debug, Clone)]
pub(crate) struct NodeCopy {
    pub name: String,
    pub bytes: u64,
    pub origin: Origin,
    /// A container on this node is made from it, or a create or a build
    /// is about to use it.
    pub in_use: bool,
    /// [`ImageCache::last_used`].
    pub last_used: u64,
    /// When it was installed (the order of copies not used since this
    /// process started).
    pub installed_at: i64,
}

/// The bytes of the fetched copies.
pub(crate) fn fetched_bytes(copies: &[NodeCopy]) -> u64 {
    copies
        .iter()
        .filter(|copy| copy.origin == Origin::Fetched)
        .map(|copy| copy.bytes)
        .sum()
}

/// The fetched copies to remove, least recently used first, for the
/// fetched ones to fit in `bound` bytes; none in use (so those in use may
/// keep the total above it).
pub(crate) fn victims(copies: &[NodeCopy], bound: u64) -> Vec<String> {
    let mut total = fetched_bytes(copies);
    let mut idle: Vec<&NodeCopy> = copies
        .iter()
        .filter(|copy| copy.origin == Origin::Fetched && !copy.in_use)
        .collect();
    idle.sort_by(|a, b| {
        (a.last_used, a.installed_at, &a.name).cmp(&(b.last_used, b.installed_at, &b.name))
    });
    let mut chosen = Vec::new();
    for copy in idle {
        if total <= bound {
            break;
        }
        total = total.saturating_sub(copy.bytes);
        chosen.push(copy.name.clone());
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(name: &str, bytes: u64, origin: Origin, last_used: u64, installed_at: i64) -> NodeCopy {
        NodeCopy {
            name: name.to_owned(),
            bytes,
            origin,
            in_use: false,
            last_used,
            installed_at,
        }
    }

    #[test]
    fn the_least_recently_used_idle_fetched_copies_go_first() {
        let copies = vec![
            copy("new", 40, Origin::Fetched, 9, 1),
            copy("old", 40, Origin::Fetched, 3, 1),
            copy("middle", 40, Origin::Fetched, 5, 1),
        ];
        assert_eq!(victims(&copies, 120), Vec::<String>::new(), "all fit");
        assert_eq!(victims(&copies, 119), vec!["old".to_owned()]);
        assert_eq!(victims(&copies, 80), vec!["old".to_owned()]);
        assert_eq!(
            victims(&copies, 0),
            vec!["old".to_owned(), "middle".to_owned(), "new".to_owned()]
        );
    }

    #[test]
    fn copies_in_use_made_here_or_of_the_operator_stay_and_do_not_count() {
        let mut in_use = copy("in-use", 100, Origin::Fetched, 1, 1);
        in_use.in_use = true;
        let copies = vec![
            in_use,
            copy("built-here", 1000, Origin::MadeHere, 0, 0),
            copy("idle", 10, Origin::Fetched, 2, 1),
        ];
        assert_eq!(
            fetched_bytes(&copies),
            110,
            "a copy made here is not counted"
        );
        assert_eq!(victims(&copies, 110), Vec::<String>::new());
        assert_eq!(
            victims(&copies, 0),
            vec!["idle".to_owned()],
            "one in use stays though the total stays above the bound"
        );
    }

    #[test]
    fn copies_unused_since_the_start_go_before_used_ones_oldest_installed_first() {
        let copies = vec![
            copy("used", 10, Origin::Fetched, 1, 1),
            copy("installed-late", 10, Origin::Fetched, 0, 50),
            copy("installed-early", 10, Origin::Fetched, 0, 20),
        ];
        assert_eq!(
            victims(&copies, 10),
            vec!["installed-early".to_owned(), "installed-late".to_owned()]
        );
    }

    #[test]
    fn a_pin_makes_an_image_the_newest_and_keeps_it_until_unpinned() {
        let cache = ImageCache::default();
        assert_eq!(cache.last_used("a"), 0, "never used");
        cache.pin("a");
        cache.pin("b");
        cache.unpin("b");
        assert!(cache.pinned("a") && !cache.pinned("b"));
        assert!(cache.last_used("b") > cache.last_used("a"));
        cache.pin("a");
        cache.unpin("a");
        assert!(cache.pinned("a"), "pinned twice, given back once");
        assert!(
            cache.last_used("a") > cache.last_used("b"),
            "a use makes it the newest"
        );
        cache.forget("a");
        assert!(cache.pinned("a"), "one in use is not forgotten");
        cache.unpin("a");
        cache.forget("a");
        assert_eq!(cache.last_used("a"), 0, "forgotten");
    }
}
