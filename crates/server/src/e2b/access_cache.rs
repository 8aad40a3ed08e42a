//! What the in-sandbox API's access check keeps of E2B's sandboxes, by
//! container id (`AppState::e2b_access`): the project, the digests of its
//! access token and of the traffic token derived from it, the create's
//! environment and whether it is paused. Written only by the
//! control plane and the sweeper (create, pause, resume, kill, removal), read
//! by `access::SandboxCaller` on every in-sandbox call. (Its own file: the
//! state holds it, and it needs nothing of the server.)

use std::collections::HashMap;
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
}

/// Beyond this many entries the cache starts again (each entry is small;
/// the bound only keeps a flood of distinct sandboxes from growing it).
const CACHE_LIMIT: usize = 100_000;

impl AccessCache {
    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, AccessEntry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn get(&self, id: &str) -> Option<AccessEntry> {
        self.entries().get(id).cloned()
    }

    /// Keeps (or replaces) what is known of a sandbox.
    pub(crate) fn remember(&self, id: &str, entry: AccessEntry) {
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
