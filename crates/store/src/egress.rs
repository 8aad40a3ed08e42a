//! The egress log (the `egress` table).

use crate::connection::Store;
use crate::error::Result;
use crate::paging::{page_of, Page};
use crate::sql::Row;
use crate::values::EgressVerdict;

/// One attempt to leave a container (the egress log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressRow {
    pub id: String,
    /// Filled in from the container's row when recorded.
    pub project: String,
    pub container_id: String,
    pub created_at: i64,
    /// `dns`, `http`, `https`, `connect` or `secret`.
    pub kind: String,
    pub requested_name: Option<String>,
    pub server_name: Option<String>,
    pub address: Option<String>,
    pub port: u16,
    pub verdict: EgressVerdict,
    pub reason: String,
    pub bytes_out: u64,
    pub bytes_in: u64,
    pub duration_ms: u64,
    /// For an aggregate row (verdict `aggregated`): the events it stands
    /// for, which have no row of their own; 0 for every other row.
    pub aggregated: u64,
}

const EGRESS_COLUMNS: &str = "id, project, container_id, created_at, kind, requested_name, server_name, address, port, verdict, reason, bytes_out, bytes_in, duration_ms, aggregated";

fn egress_row(row: &Row) -> Result<EgressRow> {
    Ok(EgressRow {
        id: row.get(0)?,
        project: row.get(1)?,
        container_id: row.get(2)?,
        created_at: row.get(3)?,
        kind: row.get(4)?,
        requested_name: row.get(5)?,
        server_name: row.get(6)?,
        address: row.get(7)?,
        port: row.number(8, "egress", "port")?,
        verdict: row.text(9, "egress", "verdict")?,
        reason: row.get(10)?,
        bytes_out: row.number(11, "egress", "bytes_out")?,
        bytes_in: row.number(12, "egress", "bytes_in")?,
        duration_ms: row.number(13, "egress", "duration_ms")?,
        aggregated: row.number(14, "egress", "aggregated")?,
    })
}

impl Store {
    /// Records attempts, in one transaction; each row's project is its
    /// container's (rows of containers the store does not know are
    /// dropped). An aggregate row's count is added to its container's
    /// total of events not logged one by one ([`Self::egress_unlogged`]).
    pub fn record_egress(&self, rows: &[EgressRow]) -> Result<usize> {
        let insert = format!(
            "INSERT INTO egress ({EGRESS_COLUMNS})
             SELECT ?1, project, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14
             FROM containers WHERE id = ?2"
        );
        self.transaction(|sql| {
            let mut written = 0;
            for row in rows {
                if row.aggregated > 0 {
                    sql.execute(
                        "UPDATE containers SET egress_unlogged = egress_unlogged + ?2 WHERE id = ?1",
                        &[&row.container_id, &row.aggregated],
                    )?;
                }
                written += sql.execute(
                    &insert,
                    &[
                        &row.id,
                        &row.container_id,
                        &row.created_at,
                        &row.kind,
                        &row.requested_name,
                        &row.server_name,
                        &row.address,
                        &row.port,
                        &row.verdict,
                        &row.reason,
                        &row.bytes_out,
                        &row.bytes_in,
                        &row.duration_ms,
                        &row.aggregated,
                    ],
                )?;
            }
            Ok(written)
        })
    }

    /// How many of a container's egress events were not logged one row
    /// each (counted in its aggregate rows), since it was created.
    pub fn egress_unlogged(&self, container_id: &str) -> Result<u64> {
        let count: Option<i64> = self.read(|sql| {
            sql.query_opt(
                "SELECT egress_unlogged FROM containers WHERE id = ?1",
                &[&container_id],
                |row| row.get(0),
            )
        })?;
        Ok(count.unwrap_or(0).max(0) as u64)
    }

    /// Deletes at most `batch` of the oldest egress rows made before
    /// `cutoff` (seconds since the Unix epoch), whatever their container;
    /// returns how many went. Only the `batch` oldest rows are looked at
    /// (rows are written in time order), so a call costs the same on a
    /// table of any size and holds the writer briefly.
    pub fn delete_egress_before(&self, cutoff: i64, batch: usize) -> Result<usize> {
        self.write(|sql| {
            sql.execute(
                "DELETE FROM egress WHERE seq IN (
                     SELECT seq FROM (SELECT seq, created_at FROM egress ORDER BY seq LIMIT ?2) oldest
                     WHERE created_at < ?1)",
                &[&cutoff, &batch],
            )
        })
    }

    /// A page of a container's egress log.
    pub fn list_egress(&self, container_id: &str, page: &Page) -> Result<(Vec<EgressRow>, bool)> {
        self.read(|sql| {
            page_of(
                sql,
                "egress",
                EGRESS_COLUMNS,
                "container_id",
                container_id,
                "project",
                None,
                page,
                egress_row,
            )
        })
    }
}
