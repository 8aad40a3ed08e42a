//! What changed, for the web console's live updates (the `console_changes`
//! table). Triggers on `containers`, `commands`, `egress` and `responses`
//! write a row per change in the changing transaction itself, with the
//! project it belongs to (so a deleted container's row still says whose it
//! was); the server wakes on them ([`Store::on_change`]), reads them in
//! order, tells the console's open streams, and prunes them.

use rusqlite::hooks::Action;
use rusqlite::params;

use crate::connection::Store;
use crate::error::Result;
use crate::values::{column, ChangeTopic};

/// One change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub seq: i64,
    pub project: String,
    pub topic: ChangeTopic,
    /// The changed object's id (a container, command, egress record or
    /// response).
    pub object_id: String,
    /// The container it concerns, where it concerns one.
    pub container_id: Option<String>,
}

impl Store {
    /// Calls `wake` whenever a change is written (from inside the writing
    /// transaction, on the writer's thread: `wake` must only signal, never
    /// block or touch the store). One callback at a time: a second call
    /// replaces the first.
    pub fn on_change(&self, wake: impl Fn() + Send + 'static) {
        self.conn()
            .update_hook(Some(move |action: Action, _: &str, table: &str, _| {
                if action == Action::SQLITE_INSERT && table == "console_changes" {
                    wake();
                }
            }));
    }

    /// The newest change's number (0: none yet).
    pub fn last_change(&self) -> Result<i64> {
        Ok(self.reader().query_row(
            "SELECT COALESCE(MAX(seq), 0) FROM console_changes",
            [],
            |row| row.get(0),
        )?)
    }

    /// Up to `limit` changes after number `after`, oldest first.
    pub fn changes_after(&self, after: i64, limit: u32) -> Result<Vec<Change>> {
        let conn = self.reader();
        let mut statement = conn.prepare(
            "SELECT seq, project, topic, object_id, container_id FROM console_changes
             WHERE seq > ?1 ORDER BY seq LIMIT ?2",
        )?;
        let rows = statement
            .query_map(params![after, limit], |row| {
                Ok(Change {
                    seq: row.get(0)?,
                    project: row.get(1)?,
                    topic: column(row, 2, "console_changes", "topic")?,
                    object_id: row.get(3)?,
                    container_id: row.get(4)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// Forgets the changes up to number `through` (they were told).
    pub fn forget_changes(&self, through: i64) -> Result<()> {
        self.conn().execute(
            "DELETE FROM console_changes WHERE seq <= ?1",
            params![through],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;
    use crate::ContainerStatus;

    #[test]
    fn every_change_is_written_with_its_project_and_wakes_the_reader() {
        let store = Store::in_memory().unwrap();
        let woken = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&woken);
        store.on_change(move || {
            counter.fetch_add(1, Ordering::Relaxed);
        });
        let row = crate::tests::container_row("cntr_1", "alpha");
        store.insert_container(&row).unwrap();
        store.open_session("cntr_1").unwrap();
        store
            .close_session("cntr_1", ContainerStatus::Suspended)
            .unwrap();
        store.delete_container("cntr_1").unwrap();
        let changes = store.changes_after(0, 100).unwrap();
        assert!(changes.len() >= 3, "{changes:?}");
        assert!(changes.iter().all(|c| c.project == "alpha"
            && c.topic == ChangeTopic::Container
            && c.object_id == "cntr_1"));
        assert!(woken.load(Ordering::Relaxed) >= changes.len());
        let last = store.last_change().unwrap();
        assert_eq!(last, changes.last().unwrap().seq);
        store.forget_changes(last).unwrap();
        assert!(store.changes_after(0, 100).unwrap().is_empty());
        // Pruning is not a change.
        let before = woken.load(Ordering::Relaxed);
        store.forget_changes(last).unwrap();
        assert_eq!(woken.load(Ordering::Relaxed), before);
    }
}
