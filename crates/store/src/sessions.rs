//! Stable session ids (the `sessions` table): a project's session id maps
//! to one container.

use rusqlite::{params, OptionalExtension};

use crate::connection::Store;
use crate::error::Result;

impl Store {
    /// The container a project's session id maps to, if any.
    pub fn session_container(&self, project: &str, session: &str) -> Result<Option<String>> {
        Ok(self
            .reader()
            .query_row(
                "SELECT container_id FROM sessions WHERE project = ?1 AND session = ?2",
                params![project, session],
                |row| row.get(0),
            )
            .optional()?)
    }

    /// Maps a session id to `container`, unless it maps to another container
    /// than `stale` already (a concurrent request won): returns the
    /// container it maps to now.
    pub fn claim_session(
        &self,
        project: &str,
        session: &str,
        container: &str,
        stale: Option<&str>,
    ) -> Result<String> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let current: Option<String> = tx
            .query_row(
                "SELECT container_id FROM sessions WHERE project = ?1 AND session = ?2",
                params![project, session],
                |row| row.get(0),
            )
            .optional()?;
        let winner = match current {
            Some(current) if Some(current.as_str()) != stale => current,
            _ => {
                tx.execute(
                    "INSERT INTO sessions (project, session, container_id) VALUES (?1, ?2, ?3) \
                     ON CONFLICT (project, session) DO UPDATE SET container_id = excluded.container_id",
                    params![project, session, container],
                )?;
                container.to_owned()
            }
        };
        tx.commit()?;
        Ok(winner)
    }
}
