//! Snapshots (the `snapshots` table): a container's files saved by the
//! engine of one node, listed, counted against the project's quotas and
//! deleted. A row is written after the engine committed the snapshot's
//! files, under the project's lock, only if the project's count and byte
//! quotas admit it; the server removes files no row names at start-up.

use crate::connection::Store;
use crate::error::Result;
use crate::paging::{page_of, Page};
use crate::sql::{Row, Sql};

/// A snapshot's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotRow {
    pub id: String,
    pub project: String,
    pub name: String,
    /// JSON object of strings.
    pub metadata: String,
    pub size_bytes: i64,
    pub created_at: i64,
    pub container_id: String,
    pub image: String,
    pub image_revision: Option<String>,
    pub memory_unavailable_reason: Option<String>,
    pub frozen_ms: i64,
    /// What a copy inherits of the container (JSON, the server's).
    pub source: String,
    /// The node whose engine took it (and holds its files).
    pub node_id: String,
    /// In a cluster, the digest (`sha256:<hex>`) of its archive in the
    /// object store, from which any node restores it; `None` when only
    /// its node's engine holds it (a single box).
    pub archive_digest: Option<String>,
}

/// Why a snapshot's row was not written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotRefusal {
    /// The project holds its most snapshots.
    TooMany { max: u32 },
    /// The project's snapshots would hold more than `max` bytes.
    TooManyBytes { max: i64 },
}

const SNAPSHOT_COLUMNS: &str = "id, project, name, metadata, size_bytes, created_at, \
     container_id, image, image_revision, memory_unavailable_reason, frozen_ms, source, node_id, \
     archive_digest";

fn snapshot_row(row: &Row) -> Result<SnapshotRow> {
    Ok(SnapshotRow {
        id: row.get(0)?,
        project: row.get(1)?,
        name: row.get(2)?,
        metadata: row.get(3)?,
        size_bytes: row.get(4)?,
        created_at: row.get(5)?,
        container_id: row.get(6)?,
        image: row.get(7)?,
        image_revision: row.get(8)?,
        memory_unavailable_reason: row.get(9)?,
        frozen_ms: row.get(10)?,
        source: row.get(11)?,
        node_id: row.get(12)?,
        archive_digest: row.get(13)?,
    })
}

fn lock_snapshots(sql: &mut dyn Sql, project: &str) -> Result<()> {
    sql.lock(&format!("snapshots:{project}"))
}

/// Whether `project` may hold one more snapshot of `bytes`.
fn refusal(
    sql: &mut dyn Sql,
    project: &str,
    bytes: i64,
    max_count: u32,
    max_bytes: i64,
) -> Result<Option<SnapshotRefusal>> {
    let (held, held_bytes): (i64, i64) = sql.query_one(
        "SELECT COUNT(*), CAST(COALESCE(SUM(size_bytes), 0) AS BIGINT) FROM snapshots WHERE project = ?1",
        &[&project],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    if held >= i64::from(max_count) {
        return Ok(Some(SnapshotRefusal::TooMany { max: max_count }));
    }
    if held_bytes.saturating_add(bytes) > max_bytes {
        return Ok(Some(SnapshotRefusal::TooManyBytes { max: max_bytes }));
    }
    Ok(None)
}

impl Store {
    /// Whether the project's quotas admit one more snapshot (of no bytes):
    /// asked before one is taken; `insert_snapshot` decides.
    pub fn snapshot_refusal(
        &self,
        project: &str,
        max_count: u32,
        max_bytes: i64,
    ) -> Result<Option<SnapshotRefusal>> {
        self.read(|sql| refusal(sql, project, 0, max_count, max_bytes))
    }

    /// A new snapshot, unless the project holds `max_count` snapshots or
    /// would hold more than `max_bytes` with it.
    pub fn insert_snapshot(
        &self,
        row: &SnapshotRow,
        max_count: u32,
        max_bytes: i64,
    ) -> Result<std::result::Result<(), SnapshotRefusal>> {
        self.transaction(|sql| {
            lock_snapshots(sql, &row.project)?;
            if let Some(refused) = refusal(sql, &row.project, row.size_bytes, max_count, max_bytes)?
            {
                return Ok(Err(refused));
            }
            sql.execute(
                &format!(
                    "INSERT INTO snapshots ({SNAPSHOT_COLUMNS}) VALUES \
                     (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"
                ),
                &[
                    &row.id,
                    &row.project,
                    &row.name,
                    &row.metadata,
                    &row.size_bytes,
                    &row.created_at,
                    &row.container_id,
                    &row.image,
                    &row.image_revision,
                    &row.memory_unavailable_reason,
                    &row.frozen_ms,
                    &row.source,
                    &row.node_id,
                    &row.archive_digest,
                ],
            )?;
            Ok(Ok(()))
        })
    }

    /// A snapshot of `project`, by id.
    pub fn snapshot(&self, project: &str, id: &str) -> Result<Option<SnapshotRow>> {
        self.read(|sql| {
            sql.query_opt(
                &format!("SELECT {SNAPSHOT_COLUMNS} FROM snapshots WHERE id = ?1 AND project = ?2"),
                &[&id, &project],
                snapshot_row,
            )
        })
    }

    /// A page of `project`'s snapshots.
    pub fn list_snapshots(&self, project: &str, page: &Page) -> Result<(Vec<SnapshotRow>, bool)> {
        self.read(|sql| {
            page_of(
                sql,
                "snapshots",
                SNAPSHOT_COLUMNS,
                "project",
                project,
                "project",
                None,
                page,
                snapshot_row,
            )
        })
    }

    /// Deletes a snapshot of `project`; `false` if there was none.
    pub fn delete_snapshot(&self, project: &str, id: &str) -> Result<bool> {
        self.transaction(|sql| {
            lock_snapshots(sql, project)?;
            let deleted = sql.execute(
                "DELETE FROM snapshots WHERE id = ?1 AND project = ?2",
                &[&id, &project],
            )?;
            Ok(deleted > 0)
        })
    }

    /// Those of `ids` that name a snapshot (of any project), each with
    /// its size: what a cluster's node keeps of the archives it unpacked.
    pub fn existing_snapshots(&self, ids: &[String]) -> Result<Vec<(String, i64)>> {
        self.read(|sql| {
            let mut existing = Vec::new();
            for id in ids {
                existing.extend(sql.query_opt(
                    "SELECT id, size_bytes FROM snapshots WHERE id = ?1",
                    &[id],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )?);
            }
            Ok(existing)
        })
    }

    /// The ids of the snapshots held by node `node_id`'s engine.
    pub fn node_snapshot_ids(&self, node_id: &str) -> Result<Vec<String>> {
        self.read(|sql| {
            sql.query(
                "SELECT id FROM snapshots WHERE node_id = ?1",
                &[&node_id],
                |row| row.get(0),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(id: &str, project: &str, bytes: i64) -> SnapshotRow {
        SnapshotRow {
            id: id.into(),
            project: project.into(),
            name: format!("name-{id}"),
            metadata: "{}".into(),
            size_bytes: bytes,
            created_at: 1,
            container_id: "cntr_1".into(),
            image: "debian-12".into(),
            image_revision: Some("r1".into()),
            memory_unavailable_reason: None,
            frozen_ms: 3,
            source: "{}".into(),
            node_id: "node-a".into(),
            archive_digest: Some("sha256:00".into()),
        }
    }

    #[test]
    fn a_projects_snapshots_are_its_own_and_counted_and_weighed() {
        for store in crate::testing::stores() {
            let first = snapshot("snap_1", "alpha", 100);
            assert_eq!(store.insert_snapshot(&first, 2, 250).unwrap(), Ok(()));
            assert_eq!(
                store.snapshot("alpha", "snap_1").unwrap(),
                Some(first.clone())
            );
            assert_eq!(
                store.snapshot("beta", "snap_1").unwrap(),
                None,
                "another project's"
            );
            assert_eq!(
                store
                    .insert_snapshot(&snapshot("snap_2", "alpha", 200), 2, 250)
                    .unwrap(),
                Err(SnapshotRefusal::TooManyBytes { max: 250 })
            );
            assert_eq!(
                store
                    .insert_snapshot(&snapshot("snap_2", "alpha", 100), 2, 250)
                    .unwrap(),
                Ok(())
            );
            assert_eq!(
                store.snapshot_refusal("alpha", 2, 250).unwrap(),
                Some(SnapshotRefusal::TooMany { max: 2 })
            );
            assert_eq!(
                store
                    .insert_snapshot(&snapshot("snap_3", "beta", 100), 2, 250)
                    .unwrap(),
                Ok(()),
                "another project's quota is its own"
            );
            let page = Page {
                limit: 10,
                after: None,
                ascending: true,
            };
            let (rows, more) = store.list_snapshots("alpha", &page).unwrap();
            let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
            assert_eq!((ids, more), (vec!["snap_1", "snap_2"], false));
            assert!(
                !store.delete_snapshot("beta", "snap_1").unwrap(),
                "another project's"
            );
            assert!(store.delete_snapshot("alpha", "snap_1").unwrap());
            let asked = [
                "snap_1".to_owned(),
                "snap_2".to_owned(),
                "snap_9".to_owned(),
            ];
            assert_eq!(
                store.existing_snapshots(&asked).unwrap(),
                vec![("snap_2".to_owned(), 100)],
                "a deleted one and one never made are not"
            );
            let mut held = store.node_snapshot_ids("node-a").unwrap();
            held.sort();
            assert_eq!(held, vec!["snap_2".to_owned(), "snap_3".to_owned()]);
        }
    }
}
