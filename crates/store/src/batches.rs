//! Anthropic's Message Batches (the `message_batches` table) and their
//! requests (`message_batch_requests`): each request's params as the client
//! sent them, and once it has run, its outcome and its result (JSON).
//!
//! A batch's request counts are read from its requests' outcomes, never
//! kept beside them, so they cannot disagree.

use crate::connection::Store;
use crate::error::Result;
use crate::paging::{page_of, Page};
use crate::sql::{Row, Sql};
use crate::values::{BatchOutcome, BatchStatus};

/// A Message Batch's row.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchRow {
    pub id: String,
    pub project: String,
    pub status: BatchStatus,
    pub created_at: i64,
    pub expires_at: i64,
    pub cancel_initiated_at: Option<i64>,
    pub ended_at: Option<i64>,
    /// The node that runs its requests (a cluster's node name; empty on a
    /// single box): the one that resumes it after a restart.
    pub node_id: String,
}

/// How many of a batch's requests are in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchCounts {
    pub processing: u64,
    pub succeeded: u64,
    pub errored: u64,
    pub canceled: u64,
    pub expired: u64,
}

/// One request of a batch.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchRequestRow {
    pub position: u64,
    pub custom_id: String,
    /// The Messages request, JSON.
    pub params: String,
    pub outcome: Option<BatchOutcome>,
    /// The result object (`{type, message | error}`), JSON, once it ran.
    pub result: Option<String>,
}

const BATCH_COLUMNS: &str =
    "id, project, status, created_at, expires_at, cancel_initiated_at, ended_at, node_id";

fn batch_row(row: &Row) -> Result<BatchRow> {
    Ok(BatchRow {
        id: row.get(0)?,
        project: row.get(1)?,
        status: row.text(2, "message_batches", "status")?,
        created_at: row.get(3)?,
        expires_at: row.get(4)?,
        cancel_initiated_at: row.get(5)?,
        ended_at: row.get(6)?,
        node_id: row.get(7)?,
    })
}

fn request_row(row: &Row) -> Result<BatchRequestRow> {
    let outcome: Option<String> = row.get(3)?;
    let outcome =
        match outcome {
            None => None,
            Some(text) => Some(BatchOutcome::parse(&text).ok_or_else(|| {
                crate::error::StoreError::Corrupt {
                    table: "message_batch_requests",
                    column: "outcome",
                    value: text.clone(),
                }
            })?),
        };
    Ok(BatchRequestRow {
        position: row.number(0, "message_batch_requests", "position")?,
        custom_id: row.get(1)?,
        params: row.get(2)?,
        outcome,
        result: row.get(4)?,
    })
}

fn counts(sql: &mut dyn Sql, batch_id: &str) -> Result<BatchCounts> {
    let mut counts = BatchCounts::default();
    sql.each_row(
        "SELECT outcome, COUNT(*) FROM message_batch_requests WHERE batch_id = ?1 GROUP BY outcome",
        &[&batch_id],
        &mut |row| {
            let outcome: Option<String> = row.get(0)?;
            let n: u64 = row.number(1, "message_batch_requests", "outcome")?;
            match outcome.as_deref().and_then(BatchOutcome::parse) {
                None => counts.processing += n,
                Some(BatchOutcome::Succeeded) => counts.succeeded += n,
                Some(BatchOutcome::Errored) => counts.errored += n,
                Some(BatchOutcome::Canceled) => counts.canceled += n,
                Some(BatchOutcome::Expired) => counts.expired += n,
            }
            Ok(())
        },
    )?;
    Ok(counts)
}

impl Store {
    /// Stores a new batch and its requests (custom id, params JSON), in
    /// one transaction.
    pub fn insert_batch(&self, row: &BatchRow, requests: &[(String, String)]) -> Result<()> {
        self.transaction(|sql| {
            sql.execute(
                &format!(
                    "INSERT INTO message_batches ({BATCH_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
                ),
                &[
                    &row.id,
                    &row.project,
                    &row.status,
                    &row.created_at,
                    &row.expires_at,
                    &row.cancel_initiated_at,
                    &row.ended_at,
                    &row.node_id,
                ],
            )?;
            for (position, (custom_id, params)) in requests.iter().enumerate() {
                let position = position as i64;
                sql.execute(
                    "INSERT INTO message_batch_requests (batch_id, position, custom_id, params)
                     VALUES (?1, ?2, ?3, ?4)",
                    &[&row.id, &position, custom_id, params],
                )?;
            }
            Ok(())
        })
    }

    /// A project's batch and its request counts.
    pub fn batch(&self, project: &str, id: &str) -> Result<Option<(BatchRow, BatchCounts)>> {
        self.read(|sql| {
            let Some(row) = sql.query_opt(
                &format!(
                    "SELECT {BATCH_COLUMNS} FROM message_batches WHERE id = ?1 AND project = ?2"
                ),
                &[&id, &project],
                batch_row,
            )?
            else {
                return Ok(None);
            };
            let counts = counts(sql, id)?;
            Ok(Some((row, counts)))
        })
    }

    /// A page of a project's batches, each with its request counts.
    pub fn list_batches(
        &self,
        project: &str,
        page: &Page,
    ) -> Result<(Vec<(BatchRow, BatchCounts)>, bool)> {
        self.read(|sql| {
            let (rows, has_more) = page_of(
                sql,
                "message_batches",
                BATCH_COLUMNS,
                "project",
                project,
                "project",
                None,
                page,
                batch_row,
            )?;
            let mut with_counts = Vec::with_capacity(rows.len());
            for row in rows {
                let counts = counts(sql, &row.id)?;
                with_counts.push((row, counts));
            }
            Ok((with_counts, has_more))
        })
    }

    /// Every batch node `node_id` runs (empty: a single box's) not yet
    /// ended, of every project: what that server resumes when it starts.
    pub fn unended_batches(&self, node_id: &str) -> Result<Vec<BatchRow>> {
        self.read(|sql| {
            sql.query(
                &format!(
                    "SELECT {BATCH_COLUMNS} FROM message_batches WHERE status <> ?1 AND node_id = ?2
                     ORDER BY seq"
                ),
                &[&BatchStatus::Ended, &node_id],
                batch_row,
            )
        })
    }

    /// A batch's requests, in order.
    pub fn batch_requests(&self, batch_id: &str) -> Result<Vec<BatchRequestRow>> {
        self.read(|sql| {
            sql.query(
                "SELECT position, custom_id, params, outcome, result FROM message_batch_requests
                 WHERE batch_id = ?1 ORDER BY position",
                &[&batch_id],
                request_row,
            )
        })
    }

    /// Records a request's outcome and result, unless it already has one
    /// (a cancel that got there first). Whether it was recorded.
    pub fn set_batch_result(
        &self,
        batch_id: &str,
        position: u64,
        outcome: BatchOutcome,
        result: &str,
    ) -> Result<bool> {
        let position = position as i64;
        let changed = self.write(|sql| {
            sql.execute(
                "UPDATE message_batch_requests SET outcome = ?3, result = ?4
                 WHERE batch_id = ?1 AND position = ?2 AND outcome IS NULL",
                &[&batch_id, &position, &outcome, &result],
            )
        })?;
        Ok(changed > 0)
    }

    /// Gives every request of the batch without an outcome `outcome` and
    /// `result`: a cancel's unstarted requests, or those a stopped server
    /// left. How many it changed.
    pub fn settle_batch_requests(
        &self,
        batch_id: &str,
        outcome: BatchOutcome,
        result: &str,
    ) -> Result<u64> {
        let changed = self.write(|sql| {
            sql.execute(
                "UPDATE message_batch_requests SET outcome = ?2, result = ?3
                 WHERE batch_id = ?1 AND outcome IS NULL",
                &[&batch_id, &outcome, &result],
            )
        })?;
        Ok(changed as u64)
    }

    /// Marks a project's batch canceling (if it is in progress) at `now`.
    /// The batch after it, if it exists.
    pub fn cancel_batch(
        &self,
        project: &str,
        id: &str,
        now: i64,
    ) -> Result<Option<(BatchRow, BatchCounts)>> {
        self.write(|sql| {
            sql.execute(
                "UPDATE message_batches SET status = ?3, cancel_initiated_at = ?4
                 WHERE id = ?1 AND project = ?2 AND status = ?5",
                &[
                    &id,
                    &project,
                    &BatchStatus::Canceling,
                    &now,
                    &BatchStatus::InProgress,
                ],
            )
        })?;
        self.batch(project, id)
    }

    /// Ends a batch at `now` (once every request has an outcome).
    pub fn end_batch(&self, id: &str, now: i64) -> Result<()> {
        self.write(|sql| {
            sql.execute(
                "UPDATE message_batches SET status = ?2, ended_at = ?3 WHERE id = ?1 AND status <> ?2",
                &[&id, &BatchStatus::Ended, &now],
            )
        })?;
        Ok(())
    }

    /// Deletes a project's ended batch and its requests. `None` if there is
    /// no such batch, `Some(false)` if it has not ended.
    pub fn delete_batch(&self, project: &str, id: &str) -> Result<Option<bool>> {
        self.transaction(|sql| {
            let status = sql.query_opt(
                "SELECT status FROM message_batches WHERE id = ?1 AND project = ?2",
                &[&id, &project],
                |row| row.text::<BatchStatus>(0, "message_batches", "status"),
            )?;
            match status {
                None => Ok(None),
                Some(status) if status != BatchStatus::Ended => Ok(Some(false)),
                Some(_) => {
                    sql.execute(
                        "DELETE FROM message_batch_requests WHERE batch_id = ?1",
                        &[&id],
                    )?;
                    sql.execute("DELETE FROM message_batches WHERE id = ?1", &[&id])?;
                    Ok(Some(true))
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(id: &str, project: &str) -> BatchRow {
        BatchRow {
            id: id.into(),
            project: project.into(),
            status: BatchStatus::InProgress,
            created_at: 10,
            expires_at: 10 + 86_400,
            cancel_initiated_at: None,
            ended_at: None,
            node_id: String::new(),
        }
    }

    fn requests(n: usize) -> Vec<(String, String)> {
        (0..n)
            .map(|i| (format!("r{i}"), format!(r#"{{"n":{i}}}"#)))
            .collect()
    }

    #[test]
    fn a_batch_counts_its_requests_by_outcome_and_is_scoped_to_its_project() {
        for store in crate::testing::stores() {
            store
                .insert_batch(&batch("b1", "alpha"), &requests(3))
                .unwrap();
            let (row, counts) = store.batch("alpha", "b1").unwrap().expect("b1 is stored");
            assert_eq!(row, batch("b1", "alpha"));
            assert_eq!(counts.processing, 3, "{counts:?}");
            assert_eq!(store.batch("beta", "b1").unwrap(), None);
            assert!(store
                .set_batch_result("b1", 0, BatchOutcome::Succeeded, "{}")
                .unwrap());
            assert!(
                !store
                    .set_batch_result("b1", 0, BatchOutcome::Errored, "{}")
                    .unwrap(),
                "a request's first outcome stays"
            );
            assert_eq!(
                store
                    .settle_batch_requests("b1", BatchOutcome::Canceled, "{}")
                    .unwrap(),
                2
            );
            let (_, counts) = store.batch("alpha", "b1").unwrap().unwrap();
            assert_eq!(
                counts,
                BatchCounts {
                    succeeded: 1,
                    canceled: 2,
                    ..BatchCounts::default()
                }
            );
            let stored = store.batch_requests("b1").unwrap();
            let seen: Vec<_> = stored
                .iter()
                .map(|r| (r.custom_id.as_str(), r.outcome))
                .collect();
            assert_eq!(
                seen,
                [
                    ("r0", Some(BatchOutcome::Succeeded)),
                    ("r1", Some(BatchOutcome::Canceled)),
                    ("r2", Some(BatchOutcome::Canceled))
                ]
            );
        }
    }

    #[test]
    fn only_an_ended_batch_is_deleted_and_unended_ones_are_found_for_resuming() {
        for store in crate::testing::stores() {
            store
                .insert_batch(&batch("b1", "alpha"), &requests(1))
                .unwrap();
            store
                .insert_batch(&batch("b2", "alpha"), &requests(1))
                .unwrap();
            assert_eq!(store.delete_batch("alpha", "b1").unwrap(), Some(false));
            let (row, _) = store.cancel_batch("alpha", "b1", 20).unwrap().unwrap();
            assert_eq!(
                (row.status, row.cancel_initiated_at),
                (BatchStatus::Canceling, Some(20))
            );
            store.end_batch("b2", 30).unwrap();
            let unended: Vec<_> = store
                .unended_batches("")
                .unwrap()
                .into_iter()
                .map(|b| b.id)
                .collect();
            assert_eq!(unended, ["b1"]);
            // A cluster node's batches are its own to resume.
            let on_node = BatchRow {
                node_id: "node-a".into(),
                ..batch("b3", "gamma")
            };
            store.insert_batch(&on_node, &requests(1)).unwrap();
            for (node, expected) in [("node-a", vec!["b3"]), ("node-b", vec![]), ("", vec!["b1"])] {
                let unended: Vec<_> = store
                    .unended_batches(node)
                    .unwrap()
                    .into_iter()
                    .map(|b| b.id)
                    .collect();
                assert_eq!(unended, expected, "node {node:?}");
            }
            assert_eq!(store.delete_batch("beta", "b2").unwrap(), None);
            assert_eq!(store.delete_batch("alpha", "b2").unwrap(), Some(true));
            assert_eq!(store.batch("alpha", "b2").unwrap(), None);
            assert!(store.batch_requests("b2").unwrap().is_empty());
            let page = Page {
                limit: 10,
                ascending: false,
                after: None,
            };
            let (listed, more) = store.list_batches("alpha", &page).unwrap();
            assert_eq!((listed.len(), more), (1, false), "{listed:?}");
        }
    }
}
