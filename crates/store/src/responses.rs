//! Stored responses of the Responses API (the `responses` table).

use rusqlite::{params, OptionalExtension, Row};

use crate::values::{column, ResponseStatus};
use crate::{Result, Store};

/// A stored response of the Responses API.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponseRow {
    pub id: String,
    pub project: String,
    pub created_at: i64,
    pub status: ResponseStatus,
    pub previous_response_id: Option<String>,
    /// The response object, JSON.
    pub body: String,
    /// This request's input items, JSON array.
    pub input_items: String,
    /// Every item of the conversation up to this response's output, JSON
    /// array: what a response continuing from this one starts from.
    pub conversation: String,
}

const RESPONSE_COLUMNS: &str =
    "id, project, created_at, status, previous_response_id, body, input_items, conversation";

fn response_row(row: &Row) -> rusqlite::Result<ResponseRow> {
    Ok(ResponseRow {
        id: row.get(0)?,
        project: row.get(1)?,
        created_at: row.get(2)?,
        status: column(row, 3, "responses", "status")?,
        previous_response_id: row.get(4)?,
        body: row.get(5)?,
        input_items: row.get(6)?,
        conversation: row.get(7)?,
    })
}

impl Store {
    pub fn save_response(&self, row: &ResponseRow) -> Result<()> {
        self.conn().execute(
            &format!(
                "INSERT INTO responses ({RESPONSE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (id) DO UPDATE SET status = excluded.status, body = excluded.body,
                 conversation = excluded.conversation"
            ),
            params![
                row.id,
                row.project,
                row.created_at,
                row.status,
                row.previous_response_id,
                row.body,
                row.input_items,
                row.conversation
            ],
        )?;
        Ok(())
    }

    /// A response of `project`.
    pub fn response(&self, project: &str, id: &str) -> Result<Option<ResponseRow>> {
        Ok(self
            .reader()
            .query_row(
                &format!("SELECT {RESPONSE_COLUMNS} FROM responses WHERE id = ?1 AND project = ?2"),
                params![id, project],
                response_row,
            )
            .optional()?)
    }

    /// Responses with one of `statuses` (to settle runs a crash interrupted).
    pub fn responses_with_status(&self, statuses: &[ResponseStatus]) -> Result<Vec<ResponseRow>> {
        let conn = self.reader();
        let mut statement = conn.prepare(&format!(
            "SELECT {RESPONSE_COLUMNS} FROM responses WHERE status = ?1"
        ))?;
        let mut rows = Vec::new();
        for status in statuses {
            rows.extend(
                statement
                    .query_map(params![status], response_row)?
                    .collect::<rusqlite::Result<Vec<_>>>()?,
            );
        }
        Ok(rows)
    }

    pub fn delete_response(&self, project: &str, id: &str) -> Result<bool> {
        let deleted = self.conn().execute(
            "DELETE FROM responses WHERE id = ?1 AND project = ?2",
            params![id, project],
        )?;
        Ok(deleted > 0)
    }
}
