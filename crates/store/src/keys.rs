//! Projects' API keys (the `api_keys` table), stored as SHA-256 hashes only:
//! each with a role (a project's `member`, or an `admin`, who also sees
//! every project in the console) and, once revoked, when.

use sha2::{Digest, Sha256};

use crate::connection::Store;
use crate::error::{Result, StoreError};

/// SHA-256 of an API key, hex encoded.
pub fn hash_key(key: &str) -> String {
    Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Hex digits of the hash a key's id shows: 64 bits, enough to name one key
/// among any number a deployment has, and nothing to guess the key by.
const KEY_ID_HEX: usize = 16;

/// A key's public name: `key_` and the start of its hash (never the key).
pub fn key_id(hash: &str) -> String {
    format!("key_{}", &hash[..KEY_ID_HEX.min(hash.len())])
}

/// What a key may see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyRole {
    /// Its own project.
    Member,
    /// Its own project through the API; every project in the console.
    Admin,
}

impl KeyRole {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Member => "member",
            Self::Admin => "admin",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "member" => Some(Self::Member),
            "admin" => Some(Self::Admin),
            _ => None,
        }
    }
}

/// A live key's project and role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyGrant {
    pub project: String,
    pub role: KeyRole,
}

/// A key as `shellgate keys list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRecord {
    pub id: String,
    pub project: String,
    pub role: KeyRole,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
}

fn role_of(name: String) -> Result<KeyRole> {
    // The column only ever holds what `KeyRole::as_str` wrote; anything else
    // grants the lesser role.
    Ok(KeyRole::parse(&name).unwrap_or(KeyRole::Member))
}

impl Store {
    /// Adds a member key for `project` (idempotent).
    pub fn add_key(&self, key: &str, project: &str, now: i64) -> Result<()> {
        self.add_key_with_role(key, project, KeyRole::Member, now)
    }

    /// Adds a key for `project` with `role` (idempotent: the same key again
    /// takes the new project and role, and is live again).
    pub fn add_key_with_role(
        &self,
        key: &str,
        project: &str,
        role: KeyRole,
        now: i64,
    ) -> Result<()> {
        let hash = hash_key(key);
        self.write(|sql| {
            sql.execute(
                "INSERT INTO api_keys (hash, project, created_at, role) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (hash) DO UPDATE SET project = excluded.project, role = excluded.role,
                     revoked_at = NULL",
                &[&hash, &project, &now, &role.as_str()],
            )
        })?;
        Ok(())
    }

    /// How many keys exist (revoked ones too: a deployment whose keys were
    /// all revoked does not fall back to a fresh default key).
    pub fn key_count(&self) -> Result<u64> {
        self.read(|sql| sql.query_one("SELECT COUNT(*) FROM api_keys", &[], |row| row.get(0)))
    }

    /// The project a live key belongs to.
    pub fn project_for_key(&self, key: &str) -> Result<Option<String>> {
        Ok(self.grant_for_key(key)?.map(|grant| grant.project))
    }

    /// A live key's project and role (`None`: unknown or revoked).
    pub fn grant_for_key(&self, key: &str) -> Result<Option<KeyGrant>> {
        let hash = hash_key(key);
        self.read(|sql| {
            sql.query_opt(
                "SELECT project, role FROM api_keys WHERE hash = ?1 AND revoked_at IS NULL",
                &[&hash],
                |row| {
                    Ok(KeyGrant {
                        project: row.get(0)?,
                        role: role_of(row.get(1)?)?,
                    })
                },
            )
        })
    }

    /// Every key (of `project`, when given), oldest first.
    pub fn list_keys(&self, project: Option<&str>) -> Result<Vec<KeyRecord>> {
        self.read(|sql| {
            sql.query(
                "SELECT hash, project, role, created_at, revoked_at FROM api_keys
                 WHERE CAST(?1 AS TEXT) IS NULL OR project = ?1 ORDER BY created_at, hash",
                &[&project],
                |row| {
                    Ok(KeyRecord {
                        id: key_id(&row.get::<String>(0)?),
                        project: row.get(1)?,
                        role: role_of(row.get(2)?)?,
                        created_at: row.get(3)?,
                        revoked_at: row.get(4)?,
                    })
                },
            )
        })
    }

    /// Revokes the key named `id` (as `list_keys` shows it): true if it was
    /// live, false if already revoked; an id naming no key is `UnknownKey`.
    pub fn revoke_key(&self, id: &str, now: i64) -> Result<bool> {
        let prefix = id
            .strip_prefix("key_")
            .filter(|p| p.len() == KEY_ID_HEX && p.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| StoreError::UnknownKey(id.to_owned()))?;
        let pattern = format!("{}%", prefix.to_ascii_lowercase());
        let changed = self.transaction(|sql| {
            let known: u64 = sql.query_one(
                "SELECT COUNT(*) FROM api_keys WHERE hash LIKE ?1",
                &[&pattern],
                |row| row.get(0),
            )?;
            if known == 0 {
                return Err(StoreError::UnknownKey(id.to_owned()));
            }
            let changed = sql.execute(
                "UPDATE api_keys SET revoked_at = ?2 WHERE hash LIKE ?1 AND revoked_at IS NULL",
                &[&pattern, &now],
            )?;
            // Its console sessions end with it (they are also refused by
            // the join on the key's liveness; this frees their rows).
            sql.execute(
                "DELETE FROM console_sessions WHERE key_hash LIKE ?1",
                &[&pattern],
            )?;
            Ok(changed)
        })?;
        Ok(changed > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_kept_listed_by_id_and_revocation_ends_a_key() {
        for store in crate::testing::stores() {
            store.add_key("sk-member", "alpha", 1).unwrap();
            store
                .add_key_with_role("sk-admin", "ops", KeyRole::Admin, 2)
                .unwrap();
            assert_eq!(
                store.grant_for_key("sk-admin").unwrap(),
                Some(KeyGrant {
                    project: "ops".into(),
                    role: KeyRole::Admin
                })
            );
            let keys = store.list_keys(None).unwrap();
            assert_eq!(keys.len(), 2);
            assert_eq!(keys[0].id, key_id(&hash_key("sk-member")));
            assert!(keys.iter().all(|k| !k.id.contains("sk-")));
            assert_eq!(store.list_keys(Some("ops")).unwrap().len(), 1);

            assert!(store.revoke_key(&keys[0].id, 9).unwrap());
            assert!(!store.revoke_key(&keys[0].id, 10).unwrap());
            assert_eq!(store.project_for_key("sk-member").unwrap(), None);
            assert_eq!(
                store.list_keys(Some("alpha")).unwrap()[0].revoked_at,
                Some(9)
            );
            assert_eq!(store.key_count().unwrap(), 2);
            for bad in ["key_0000000000000000", "key_zz", "sk-member", ""] {
                assert!(
                    matches!(store.revoke_key(bad, 11), Err(StoreError::UnknownKey(_))),
                    "{bad}"
                );
            }
            // The same key given again is live again.
            store.add_key("sk-member", "alpha", 12).unwrap();
            assert_eq!(
                store.project_for_key("sk-member").unwrap().as_deref(),
                Some("alpha")
            );
        }
    }
}
