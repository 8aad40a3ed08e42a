//! Projects' API keys (the `api_keys` table), stored as SHA-256 hashes only.

use rusqlite::{params, OptionalExtension};
use sha2::{Digest, Sha256};

use crate::connection::Store;
use crate::error::Result;

/// SHA-256 of an API key, hex encoded.
pub fn hash_key(key: &str) -> String {
    Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Store {
    /// Adds a key for `project` (idempotent).
    pub fn add_key(&self, key: &str, project: &str, now: i64) -> Result<()> {
        self.conn().execute(
            "INSERT INTO api_keys (hash, project, created_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (hash) DO UPDATE SET project = excluded.project",
            params![hash_key(key), project, now],
        )?;
        Ok(())
    }

    /// How many keys exist.
    pub fn key_count(&self) -> Result<u64> {
        Ok(self
            .reader()
            .query_row("SELECT COUNT(*) FROM api_keys", [], |row| row.get(0))?)
    }

    /// The project a key belongs to.
    pub fn project_for_key(&self, key: &str) -> Result<Option<String>> {
        Ok(self
            .reader()
            .query_row(
                "SELECT project FROM api_keys WHERE hash = ?1",
                params![hash_key(key)],
                |row| row.get(0),
            )
            .optional()?)
    }
}
