//! Image builds and imports (the `image_builds` table): a job of a
//! project that makes image `image`, its status, why it failed (and at
//! which step), the revision it installed and the node that runs it; its
//! log (`image_build_logs`), entries in order, each JSON the server
//! writes and reads.
//!
//! A job is written `queued` before it runs, so a server that stops during
//! it finds it unfinished at its next start and fails it
//! ([`Store::fail_unfinished_image_builds`]).

use crate::connection::Store;
use crate::error::Result;
use crate::sql::Row;

/// A job's status.
pub const IMAGE_BUILD_QUEUED: &str = "queued";
pub const IMAGE_BUILD_BUILDING: &str = "building";
pub const IMAGE_BUILD_READY: &str = "ready";
pub const IMAGE_BUILD_ERROR: &str = "error";

/// One build or import job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageBuildRow {
    pub id: String,
    pub project: String,
    /// The image it makes.
    pub image: String,
    /// `build` (a Dockerfile) or `import` (an OCI archive).
    pub kind: String,
    /// `queued`, `building`, `ready` or `error`.
    pub status: String,
    /// Why it failed.
    pub reason: Option<String>,
    /// The step that failed (its index from 1).
    pub failed_step: Option<i64>,
    /// The image revision it installed.
    pub revision: Option<String>,
    /// The node that runs it (empty on a single box).
    pub node_id: String,
    pub created_at: i64,
    pub updated_at: i64,
}

const COLUMNS: &str = "id, project, image, kind, status, reason, failed_step, revision, node_id, \
     created_at, updated_at";

fn build_row(row: &Row) -> Result<ImageBuildRow> {
    Ok(ImageBuildRow {
        id: row.get(0)?,
        project: row.get(1)?,
        image: row.get(2)?,
        kind: row.get(3)?,
        status: row.get(4)?,
        reason: row.get(5)?,
        failed_step: row.get(6)?,
        revision: row.get(7)?,
        node_id: row.get(8)?,
        created_at: row.get(9)?,
        updated_at: row.get(10)?,
    })
}

impl Store {
    /// Records a new job, as given (`queued`).
    pub fn insert_image_build(&self, row: &ImageBuildRow) -> Result<()> {
        self.write(|sql| {
            sql.execute(
                &format!(
                    "INSERT INTO image_builds ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
                ),
                &[
                    &row.id,
                    &row.project,
                    &row.image,
                    &row.kind,
                    &row.status,
                    &row.reason,
                    &row.failed_step,
                    &row.revision,
                    &row.node_id,
                    &row.created_at,
                    &row.updated_at,
                ],
            )?;
            Ok(())
        })
    }

    /// The project's job `id` (another project's is `None`).
    pub fn image_build(&self, project: &str, id: &str) -> Result<Option<ImageBuildRow>> {
        self.read(|sql| {
            sql.query_opt(
                &format!("SELECT {COLUMNS} FROM image_builds WHERE project = ?1 AND id = ?2"),
                &[&project, &id],
                build_row,
            )
        })
    }

    /// Moves a queued job to `building`: whether it was queued.
    pub fn start_image_build(&self, id: &str, now: i64) -> Result<bool> {
        self.write(|sql| {
            let changed = sql.execute(
                "UPDATE image_builds SET status = 'building', updated_at = ?2 \
                 WHERE id = ?1 AND status = 'queued'",
                &[&id, &now],
            )?;
            Ok(changed > 0)
        })
    }

    /// Ends an unfinished job: `ready` with the revision it installed, or
    /// `error` with the reason and the failed step. Whether it was
    /// unfinished (a job failed by a start-up stays failed).
    pub fn finish_image_build(
        &self,
        id: &str,
        outcome: std::result::Result<Option<String>, (String, Option<i64>)>,
        now: i64,
    ) -> Result<bool> {
        self.write(|sql| {
            let changed = match &outcome {
                Ok(revision) => sql.execute(
                    "UPDATE image_builds SET status = 'ready', revision = ?2, updated_at = ?3 \
                     WHERE id = ?1 AND status IN ('queued', 'building')",
                    &[&id, revision, &now],
                )?,
                Err((reason, step)) => sql.execute(
                    "UPDATE image_builds SET status = 'error', reason = ?2, failed_step = ?3, \
                     updated_at = ?4 WHERE id = ?1 AND status IN ('queued', 'building')",
                    &[&id, reason, step, &now],
                )?,
            };
            Ok(changed > 0)
        })
    }

    /// Fails every job node `node_id` left queued or building (it stopped
    /// during them) with `reason`: their ids.
    pub fn fail_unfinished_image_builds(
        &self,
        node_id: &str,
        reason: &str,
        now: i64,
    ) -> Result<Vec<String>> {
        self.transaction(|sql| fail_builds_on_node(sql, node_id, reason, now))
    }

    /// Appends entries to a job's log.
    pub fn append_image_build_logs(&self, id: &str, entries: &[String]) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        self.transaction(|sql| {
            let next: i64 = sql
                .query_opt(
                    "SELECT COALESCE(MAX(seq) + 1, 0) FROM image_build_logs WHERE build_id = ?1",
                    &[&id],
                    |row| row.get(0),
                )?
                .unwrap_or(0);
            for (index, entry) in entries.iter().enumerate() {
                let seq = next + index as i64;
                sql.execute(
                    "INSERT INTO image_build_logs (build_id, seq, entry) VALUES (?1, ?2, ?3)",
                    &[&id, &seq, entry],
                )?;
            }
            Ok(())
        })
    }

    /// At most `limit` entries of a job's log from the `offset`th on.
    pub fn image_build_logs(&self, id: &str, offset: i64, limit: i64) -> Result<Vec<String>> {
        self.read(|sql| {
            sql.query(
                "SELECT entry FROM image_build_logs WHERE build_id = ?1 AND seq >= ?2 \
                 ORDER BY seq LIMIT ?3",
                &[&id, &offset, &limit],
                |row| row.get(0),
            )
        })
    }
}

/// Fails the jobs node `node_id` left queued or building with `reason`,
/// in the caller's transaction (its restart's, or its loss's): their ids.
pub(crate) fn fail_builds_on_node(
    sql: &mut dyn crate::sql::Sql,
    node_id: &str,
    reason: &str,
    now: i64,
) -> Result<Vec<String>> {
    let unfinished = sql.query(
        "SELECT id FROM image_builds WHERE node_id = ?1 AND status IN ('queued', 'building')",
        &[&node_id],
        |row| row.get::<String>(0),
    )?;
    sql.execute(
        "UPDATE image_builds SET status = 'error', reason = ?2, updated_at = ?3 \
         WHERE node_id = ?1 AND status IN ('queued', 'building')",
        &[&node_id, &reason, &now],
    )?;
    Ok(unfinished)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, node: &str) -> ImageBuildRow {
        ImageBuildRow {
            id: id.into(),
            project: "p".into(),
            image: "app".into(),
            kind: "build".into(),
            status: IMAGE_BUILD_QUEUED.into(),
            reason: None,
            failed_step: None,
            revision: None,
            node_id: node.into(),
            created_at: 1,
            updated_at: 1,
        }
    }

    #[test]
    fn a_job_runs_once_logs_in_order_and_an_interrupted_one_fails() {
        for store in crate::testing::stores() {
            one_store(&store);
        }
    }

    fn one_store(store: &Store) {
        store.insert_image_build(&row("b1", "")).expect("insert");
        store.insert_image_build(&row("b2", "")).expect("insert");
        store
            .insert_image_build(&row("b3", "other"))
            .expect("insert");
        assert!(store.start_image_build("b1", 2).expect("start"));
        assert!(!store.start_image_build("b1", 2).expect("start again"));
        store
            .append_image_build_logs("b1", &["one".into(), "two".into()])
            .expect("append");
        store
            .append_image_build_logs("b1", &["three".into()])
            .expect("append more");
        assert_eq!(
            store.image_build_logs("b1", 1, 5).expect("read the log"),
            vec!["two".to_owned(), "three".to_owned()]
        );
        assert!(store
            .finish_image_build("b1", Ok(Some("r1".into())), 3)
            .expect("finish"));
        let done = store.image_build("p", "b1").expect("read").expect("found");
        assert_eq!(
            (done.status.as_str(), done.revision.as_deref()),
            (IMAGE_BUILD_READY, Some("r1"))
        );
        assert!(store.image_build("other", "b1").expect("read").is_none());
        // This node's unfinished jobs fail; another node's are its own.
        let failed = store
            .fail_unfinished_image_builds("", "stopped", 4)
            .expect("fail unfinished");
        assert_eq!(failed, vec!["b2".to_owned()]);
        assert!(!store
            .finish_image_build("b2", Ok(None), 5)
            .expect("late finish"));
        let b2 = store.image_build("p", "b2").expect("read").expect("found");
        assert_eq!(
            (b2.status.as_str(), b2.reason.as_deref()),
            (IMAGE_BUILD_ERROR, Some("stopped"))
        );
        let b3 = store.image_build("p", "b3").expect("read").expect("found");
        assert_eq!(b3.status, IMAGE_BUILD_QUEUED);
    }
}
