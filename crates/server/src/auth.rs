//! Who may call, and how often: the cache of known API keys and the
//! per-project rate limit the request extractor ([`crate::http::Project`])
//! consults.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use shellgate_store::KeyGrant;

use crate::error::ApiError;

/// A new API key (printed once by `shellgate keys create`, shown once by the
/// console's operator page; stored hashed).
pub fn new_api_key() -> String {
    shellgate_wire::new_id("sg-")
}

/// Keys already seen, by hash, with their grants, each for at most
/// [`KEY_CACHE_TTL`]: a hit needs no trip to the store, and a key revoked
/// anywhere (`shellgate keys revoke`, another process on the same database)
/// stops opening anything within that time. Only keys that exist are
/// remembered (a wrong key always asks the store), and the cache is bounded.
#[derive(Debug, Default)]
pub struct KeyCache(Mutex<HashMap<String, (KeyGrant, Instant)>>);

/// Most keys remembered.
const KEY_CACHE_ENTRIES: usize = 10_000;
/// How long a key's grant is trusted without asking the store again.
pub const KEY_CACHE_TTL: Duration = Duration::from_secs(5);

impl KeyCache {
    pub fn get(&self, key: &str) -> Option<KeyGrant> {
        let hash = shellgate_store::hash_key(key);
        let keys = self.0.lock().unwrap_or_else(|p| p.into_inner());
        keys.get(&hash)
            .filter(|(_, at)| at.elapsed() < KEY_CACHE_TTL)
            .map(|(grant, _)| grant.clone())
    }

    pub fn insert(&self, key: &str, grant: &KeyGrant) {
        let mut keys = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if keys.len() >= KEY_CACHE_ENTRIES {
            keys.retain(|_, (_, at)| at.elapsed() < KEY_CACHE_TTL);
            if keys.len() >= KEY_CACHE_ENTRIES {
                keys.clear();
            }
        }
        keys.insert(
            shellgate_store::hash_key(key),
            (grant.clone(), Instant::now()),
        );
    }
}

/// A fixed-window limit of requests per project and minute.
#[derive(Debug)]
pub struct RateLimiter {
    per_minute: u32,
    windows: Mutex<HashMap<String, (Instant, u32)>>,
}

impl RateLimiter {
    pub fn new(per_minute: u32) -> Self {
        Self {
            per_minute,
            windows: Mutex::new(HashMap::new()),
        }
    }

    pub fn check(&self, project: &str) -> Result<(), ApiError> {
        if self.per_minute == 0 {
            return Ok(());
        }
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let entry = windows.entry(project.to_owned()).or_insert((now, 0));
        let elapsed = now.duration_since(entry.0).as_secs();
        if elapsed >= 60 {
            *entry = (now, 0);
        }
        if entry.1 >= self.per_minute {
            return Err(ApiError::rate_limited(60u64.saturating_sub(elapsed).max(1)));
        }
        entry.1 += 1;
        Ok(())
    }
}
