//! What the in-sandbox API's access check keeps of E2B's sandboxes, by
//! container id (`AppState::e2b_access`): the project, the digests of its
//! access token and of the traffic token derived from it, the create's
//! environment and whether it is paused. Written only by the
//! control plane and the sweeper (create, pause, resume, kill, removal), read
//! by `access::SandboxCaller` on every in-sandbox call. (Its own file: the
//! state holds it, and it needs nothing of the server.)

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use shellgate_store::E2bSandboxRow;

/// What the access check keeps of a sandbox.
#[derive(Debug, Clone)]
pub(crate) struct AccessEntry {
    pub(crate) project: String,
    pub(crate) token_digest: [u8; 32],
    /// The digest of [`traffic_token`] of the access token.
    pub(crate) traffic_digest: [u8; 32],
    pub(crate) env_vars: Arc<Vec<(String, String)>>,
    pub(crate) paused: bool,
    /// Paused, the next in-sandbox call wakes it (`autoResume`).
    pub(crate) auto_resume: bool,
}

impl AccessEntry {
    pub(crate) fn of_row(row: &E2bSandboxRow) -> Self {
        Self {
            project: row.project.clone(),
            token_digest: digest(&row.access_token),
            traffic_digest: digest(&crate::auth::e2b_traffic_token(&row.access_token)),
            env_vars: Arc::new(
                row.env_vars
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            ),
            paused: row.paused,
            auto_resume: row.auto_resume,
        }
    }
}

/// The sandboxes the access check has seen, by container id.
#[derive(Debug, Default)]
pub struct AccessCache {
    entries: Mutex<HashMap<String, AccessEntry>>,
    /// Sandboxes being removed: their processes die before their row goes,
    /// and a check in between (an SDK's health probe on seeing its stream
    /// end) must neither let them in nor cache them again from the row.
    ending: Mutex<HashSet<String>>,
}

/// A sandbox's removal under way ([`AccessCache::end`]): until it is
/// dropped, after the row is gone, the sandbox is let in nowhere.
#[must_use = "the sandbox is let in again once this is dropped"]
pub(crate) struct Ending<'a> {
    cache: &'a AccessCache,
    id: String,
}

impl Drop for Ending<'_> {
    fn drop(&mut self) {
        self.cache.ending().remove(&self.id);
    }
}

/// Beyond this many entries the cache starts again (each entry is small;
/// the bound only keeps a flood of distinct sandboxes from growing it).
const CACHE_LIMIT: usize = 100_000;

impl AccessCache {
    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, AccessEntry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn ending(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.ending.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn get(&self, id: &str) -> Option<AccessEntry> {
        self.entries().get(id).cloned()
    }

    /// Whether the sandbox's removal is under way ([`Self::end`]).
    pub(crate) fn is_ending(&self, id: &str) -> bool {
        self.ending().contains(id)
    }

    /// Keeps (or replaces) what is known of a sandbox; nothing of one being
    /// removed (a check that read its row just before).
    pub(crate) fn remember(&self, id: &str, entry: AccessEntry) {
        // The ending set's lock is held across the insert so that an `end`
        // cannot fall between the look and the insert.
        let ending = self.ending();
        if ending.contains(id) {
            return;
        }
        let mut entries = self.entries();
        if entries.len() >= CACHE_LIMIT {
            entries.clear();
        }
        entries.insert(id.to_owned(), entry);
    }

    /// A sandbox paused or resumed: its cached state follows.
    pub(crate) fn set_paused(&self, id: &str, paused: bool) {
        if let Some(entry) = self.entries().get_mut(id) {
            entry.paused = paused;
        }
    }

    /// A sandbox killed (or expired): it is no longer let in.
    pub(crate) fn forget(&self, id: &str) {
        self.entries().remove(id);
    }

    /// A sandbox's removal begins: it is let in nowhere, and kept out of
    /// the cache, until the returned guard is dropped (its row gone by then).
    pub(crate) fn end(&self, id: &str) -> Ending<'_> {
        let mut ending = self.ending();
        ending.insert(id.to_owned());
        self.entries().remove(id);
        drop(ending);
        Ending {
            cache: self,
            id: id.to_owned(),
        }
    }
}

pub(crate) fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Compares two digests in time independent of where they differ (the
/// digests of the tokens, so their lengths say nothing either).
pub(crate) fn same_digest(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> AccessEntry {
        AccessEntry {
            project: "p".to_owned(),
            token_digest: digest("t"),
            traffic_digest: digest("tt"),
            env_vars: Arc::default(),
            paused: false,
            auto_resume: false,
        }
    }

    #[test]
    fn a_sandbox_being_removed_is_not_cached_again_until_its_removal_ends() {
        let cache = AccessCache::default();
        cache.remember("cntr_a", entry());
        let ending = cache.end("cntr_a");
        assert!(cache.get("cntr_a").is_none());
        assert!(cache.is_ending("cntr_a"));
        // A check that read the row before it went.
        cache.remember("cntr_a", entry());
        assert!(cache.get("cntr_a").is_none());
        drop(ending);
        assert!(!cache.is_ending("cntr_a"));
        cache.remember("cntr_a", entry());
        assert!(cache.get("cntr_a").is_some());
    }

    #[test]
    fn digests_compare_whole() {
        let a = digest("token-a");
        assert!(same_digest(&a, &digest("token-a")));
        assert!(!same_digest(&a, &digest("token-b")));
    }

    #[test]
    fn a_traffic_token_is_the_access_token_s_own_and_not_the_access_token() {
        let traffic = crate::auth::e2b_traffic_token("e2bat_one");
        assert_eq!(traffic, crate::auth::e2b_traffic_token("e2bat_one"));
        assert_ne!(traffic, crate::auth::e2b_traffic_token("e2bat_two"));
        assert!(!traffic.contains("one"));
        assert!(traffic.starts_with("e2btt_") && traffic.len() == 6 + 64);
    }
}
