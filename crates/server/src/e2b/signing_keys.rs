//! The E2B sandboxes' access tokens by container id, kept in memory to
//! find the sandbox of a signed file URL that names none (`signed`): put
//! there by the create, dropped with the sandbox, and the whole map read
//! again from the store when a signature matches none of them (a sandbox
//! another node made, or one made before the server started), at most once
//! a second. Finding tries each token: one SHA-256 of a short string per
//! sandbox, no store call for a URL that matches. (Its own file: the state
//! holds it, and it needs nothing of the server but the store.)

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::db::Db;
use crate::error::ApiResult;

/// The shortest time between two readings of the store's tokens after a
/// signature matched none in memory (a stream of forged signatures costs
/// the store at most one query a second).
const RELOAD_SPACING: Duration = Duration::from_secs(1);

/// The E2B sandboxes' access tokens, by container id, for
/// signed file URLs that name no sandbox (`signed`).
#[derive(Debug, Default)]
pub struct SigningKeys {
    tokens: Mutex<HashMap<String, Arc<str>>>,
    /// When the store was last read (one reading at a time).
    reloaded: tokio::sync::Mutex<Option<Instant>>,
}

impl SigningKeys {
    fn tokens(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<str>>> {
        self.tokens.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A sandbox made (or found in the store) with `token`.
    pub(crate) fn remember(&self, id: &str, token: &str) {
        self.tokens().insert(id.to_owned(), Arc::from(token));
    }

    /// A sandbox removed.
    pub(crate) fn forget(&self, id: &str) {
        self.tokens().remove(id);
    }

    fn token(&self, id: &str) -> Option<Arc<str>> {
        self.tokens().get(id).cloned()
    }

    fn matching(&self, made: &impl Fn(&str) -> bool) -> Option<String> {
        // The tokens are copied out first, so no other request waits on
        // the hashing.
        let tokens: Vec<(String, Arc<str>)> = self
            .tokens()
            .iter()
            .map(|(id, token)| (id.clone(), Arc::clone(token)))
            .collect();
        tokens
            .into_iter()
            .find(|(_, token)| made(token))
            .map(|(id, _)| id)
    }

    /// The sandbox whose token `made` a signature: from memory, or else
    /// from the store read again (a sandbox another node made, or one made
    /// before this server started).
    pub(crate) async fn find(
        &self,
        store: &Db,
        made: impl Fn(&str) -> bool,
    ) -> ApiResult<Option<String>> {
        if let Some(id) = self.matching(&made) {
            return Ok(Some(id));
        }
        let mut reloaded = self.reloaded.lock().await;
        if let Some(id) = self.matching(&made) {
            return Ok(Some(id));
        }
        if let Some(last) = *reloaded {
            let next = last + RELOAD_SPACING;
            tokio::time::sleep_until(next.into()).await;
        }
        let rows = store.run(|s| s.all_e2b_sandboxes()).await?;
        *reloaded = Some(Instant::now());
        let fresh: HashMap<String, Arc<str>> = rows
            .into_iter()
            .map(|row| (row.container_id, Arc::from(row.access_token.as_str())))
            .collect();
        *self.tokens() = fresh;
        Ok(self.matching(&made))
    }

    /// Sandbox `id`'s token: from memory, or else from its record.
    pub(crate) async fn token_of(&self, store: &Db, id: &str) -> ApiResult<Option<Arc<str>>> {
        if let Some(token) = self.token(id) {
            return Ok(Some(token));
        }
        let key = id.to_owned();
        let row = store.run(move |s| s.e2b_sandbox_by_id(&key)).await?;
        Ok(row.map(|row| {
            self.remember(id, &row.access_token);
            Arc::from(row.access_token.as_str())
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keys_find_the_sandbox_whose_token_made_a_signature() {
        let keys = SigningKeys::default();
        keys.remember("cntr_a", "e2bat_a");
        keys.remember("cntr_b", "e2bat_b");
        let made_by_b = |token: &str| token == "e2bat_b";
        assert_eq!(keys.matching(&made_by_b).as_deref(), Some("cntr_b"));
        keys.forget("cntr_b");
        assert_eq!(keys.matching(&made_by_b), None);
    }
}
