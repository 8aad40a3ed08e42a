//! Stable session ids (the `sessions` table): a project's session id maps
//! to one container.

use crate::connection::Store;
use crate::error::Result;

impl Store {
    /// The container a project's session id maps to, if any.
    pub fn session_container(&self, project: &str, session: &str) -> Result<Option<String>> {
        self.read(|sql| {
            sql.query_opt(
                "SELECT container_id FROM sessions WHERE project = ?1 AND session = ?2",
                &[&project, &session],
                |row| row.get(0),
            )
        })
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
        self.transaction(|sql| {
            // Two replicas claiming the same session at once: the second
            // waits here and then sees the first's container.
            sql.lock(&format!("session:{project}:{session}"))?;
            let current: Option<String> = sql.query_opt(
                "SELECT container_id FROM sessions WHERE project = ?1 AND session = ?2",
                &[&project, &session],
                |row| row.get(0),
            )?;
            Ok(match current {
                Some(current) if Some(current.as_str()) != stale => current,
                _ => {
                    sql.execute(
                        "INSERT INTO sessions (project, session, container_id) VALUES (?1, ?2, ?3) \
                         ON CONFLICT (project, session) DO UPDATE SET container_id = excluded.container_id",
                        &[&project, &session, &container],
                    )?;
                    container.to_owned()
                }
            })
        })
    }
}
