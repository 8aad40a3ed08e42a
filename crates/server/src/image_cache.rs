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

use crate::pinned_lru::{Candidate, PinnedLru};

/// Who uses which fetched image now, and when each was last used (their
/// sizes are the engine's listing's).
pub(crate) type ImageCache = PinnedLru;

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
    /// [`PinnedLru::last_used`].
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
    let fetched = copies.iter().filter(|copy| copy.origin == Origin::Fetched);
    let held = fetched.map(|copy| Candidate {
        name: &copy.name,
        bytes: copy.bytes,
        pinned: copy.in_use,
        age: (copy.last_used, copy.installed_at),
    });
    crate::pinned_lru::victims(held, bound)
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
}
