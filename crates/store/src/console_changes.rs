//! What changed, for the web console's live updates (the `console_changes`
//! table). Triggers on `containers`, `commands`, `egress` and `responses`
//! write a row per change in the changing transaction itself, with the
//! project it belongs to (so a deleted container's row still says whose it
//! was); the server wakes on them ([`Store::on_change`]), reads them in
//! order, tells the console's open streams, and prunes them.

use crate::connection::Store;
use crate::error::Result;
use crate::values::ChangeTopic;

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
    /// The newest change's number (0: none yet).
    pub fn last_change(&self) -> Result<i64> {
        self.read(|sql| {
            sql.query_one(
                "SELECT COALESCE(MAX(seq), 0) FROM console_changes",
                &[],
                |row| row.get(0),
            )
        })
    }

    /// Up to `limit` changes after number `after`, oldest first.
    pub fn changes_after(&self, after: i64, limit: u32) -> Result<Vec<Change>> {
        self.read(|sql| {
            sql.query(
                "SELECT seq, project, topic, object_id, container_id FROM console_changes
                 WHERE seq > ?1 ORDER BY seq LIMIT ?2",
                &[&after, &limit],
                |row| {
                    Ok(Change {
                        seq: row.get(0)?,
                        project: row.get(1)?,
                        topic: row.text(2, "console_changes", "topic")?,
                        object_id: row.get(3)?,
                        container_id: row.get(4)?,
                    })
                },
            )
        })
    }

    /// Forgets the changes up to number `through` (they were told).
    pub fn forget_changes(&self, through: i64) -> Result<()> {
        self.write(|sql| sql.execute("DELETE FROM console_changes WHERE seq <= ?1", &[&through]))?;
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
        for store in crate::testing::stores() {
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
            match store.dialect() {
                // SQLite wakes inside each writing transaction.
                crate::Dialect::Sqlite => assert!(woken.load(Ordering::Relaxed) >= changes.len()),
                // Postgres's notifications arrive on the listener's connection
                // after the commits, several told in one wake.
                crate::Dialect::Postgres => {
                    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
                    while woken.load(Ordering::Relaxed) == 0 {
                        assert!(
                            std::time::Instant::now() < deadline,
                            "no wake from Postgres"
                        );
                        std::thread::yield_now();
                    }
                }
            }
            let last = store.last_change().unwrap();
            assert_eq!(last, changes.last().unwrap().seq);
            store.forget_changes(last).unwrap();
            assert!(store.changes_after(0, 100).unwrap().is_empty());
            // Pruning is not a change.
            if store.dialect() == crate::Dialect::Sqlite {
                let before = woken.load(Ordering::Relaxed);
                store.forget_changes(last).unwrap();
                assert_eq!(woken.load(Ordering::Relaxed), before);
            }
        }
    }
}
