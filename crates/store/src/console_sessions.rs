//! The web console's sign-in sessions (the `console_sessions` table): a
//! session belongs to the API key that opened it and lives only while that
//! key does, so revoking a key ends its sessions at once; the cookie's token
//! is stored as its SHA-256 only.

use crate::connection::Store;
use crate::error::Result;
use crate::keys::{hash_key, KeyGrant, KeyRole};

/// Most sessions one key keeps open: signing in again past it ends the
/// oldest (a script signing in in a loop cannot grow the table).
pub const SESSIONS_PER_KEY: i64 = 32;

/// A live session, as the console's requests are checked against it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleSessionRow {
    /// The project and role of the key that opened it, as they are now.
    pub grant: KeyGrant,
    /// The token every state-changing request must carry in a header.
    pub csrf_token: String,
    pub created_at: i64,
    pub expires_at: i64,
    /// The hash of the key that opened it.
    pub key_hash: String,
}

impl Store {
    /// Opens a session for the live key whose hash is `key_hash`, under the
    /// cookie `token`; the key's oldest sessions beyond
    /// [`SESSIONS_PER_KEY`] and every expired session end here too.
    pub fn open_console_session(
        &self,
        token: &str,
        key_hash: &str,
        csrf_token: &str,
        now: i64,
        expires_at: i64,
    ) -> Result<()> {
        let token_hash = hash_key(token);
        self.transaction(|sql| {
            // Two replicas signing the same key in at once count its
            // sessions one after the other.
            sql.lock(&format!("console-sessions:{key_hash}"))?;
            sql.execute(
                "DELETE FROM console_sessions WHERE expires_at <= ?1",
                &[&now],
            )?;
            sql.execute(
                "INSERT INTO console_sessions (token_hash, key_hash, csrf_token, created_at, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                &[&token_hash, &key_hash, &csrf_token, &now, &expires_at],
            )?;
            sql.execute(
                "DELETE FROM console_sessions WHERE key_hash = ?1 AND token_hash NOT IN (
                     SELECT token_hash FROM console_sessions WHERE key_hash = ?1
                     ORDER BY created_at DESC, rowid DESC LIMIT ?2)",
                &[&key_hash, &SESSIONS_PER_KEY],
            )?;
            Ok(())
        })
    }

    /// The session of cookie `token`, if it is unexpired and its key is
    /// live.
    pub fn console_session(&self, token: &str, now: i64) -> Result<Option<ConsoleSessionRow>> {
        let token_hash = hash_key(token);
        self.read(|sql| {
            sql.query_opt(
                "SELECT k.project, k.role, s.csrf_token, s.created_at, s.expires_at, s.key_hash
                 FROM console_sessions s JOIN api_keys k ON k.hash = s.key_hash
                 WHERE s.token_hash = ?1 AND s.expires_at > ?2 AND k.revoked_at IS NULL",
                &[&token_hash, &now],
                |row| {
                    Ok(ConsoleSessionRow {
                        grant: KeyGrant {
                            project: row.get(0)?,
                            role: KeyRole::parse(&row.get::<String>(1)?).unwrap_or(KeyRole::Member),
                        },
                        csrf_token: row.get(2)?,
                        created_at: row.get(3)?,
                        expires_at: row.get(4)?,
                        key_hash: row.get(5)?,
                    })
                },
            )
        })
    }

    /// Ends the session of cookie `token` (signing out); true if there was one.
    pub fn close_console_session(&self, token: &str) -> Result<bool> {
        let token_hash = hash_key(token);
        Ok(self.write(|sql| {
            sql.execute(
                "DELETE FROM console_sessions WHERE token_hash = ?1",
                &[&token_hash],
            )
        })? > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_lives_while_its_key_does_and_until_it_expires_or_signs_out() {
        for store in crate::testing::stores() {
            store.add_key("sk-one", "alpha", 1).unwrap();
            let key = hash_key("sk-one");
            store
                .open_console_session("cookie-1", &key, "csrf-1", 10, 100)
                .unwrap();
            let session = store.console_session("cookie-1", 50).unwrap().unwrap();
            assert_eq!(session.grant.project, "alpha");
            assert_eq!(session.csrf_token, "csrf-1");
            // Expired, unknown, and signed out.
            assert_eq!(store.console_session("cookie-1", 100).unwrap(), None);
            assert_eq!(store.console_session("cookie-2", 50).unwrap(), None);
            assert!(store.close_console_session("cookie-1").unwrap());
            assert_eq!(store.console_session("cookie-1", 50).unwrap(), None);
            assert!(!store.close_console_session("cookie-1").unwrap());

            // Revoking the key ends its sessions.
            store
                .open_console_session("cookie-3", &key, "csrf-3", 20, 1000)
                .unwrap();
            assert!(store.console_session("cookie-3", 30).unwrap().is_some());
            let id = store.list_keys(None).unwrap()[0].id.clone();
            store.revoke_key(&id, 40).unwrap();
            assert_eq!(store.console_session("cookie-3", 50).unwrap(), None);
        }
    }

    #[test]
    fn a_key_keeps_a_bounded_number_of_sessions() {
        for store in crate::testing::stores() {
            store.add_key("sk-one", "alpha", 1).unwrap();
            let key = hash_key("sk-one");
            for n in 0..(SESSIONS_PER_KEY + 5) {
                store
                    .open_console_session(&format!("cookie-{n}"), &key, "csrf", n, 10_000)
                    .unwrap();
            }
            assert!(store.console_session("cookie-0", 100).unwrap().is_none());
            let newest = format!("cookie-{}", SESSIONS_PER_KEY + 4);
            assert!(store.console_session(&newest, 100).unwrap().is_some());
            let count: i64 = store
                .read(|sql| {
                    sql.query_one("SELECT COUNT(*) FROM console_sessions", &[], |row| {
                        row.get(0)
                    })
                })
                .unwrap();
            assert_eq!(count, SESSIONS_PER_KEY);
        }
    }
}
