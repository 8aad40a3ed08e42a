//! Files API files (the `files` table).

use rusqlite::{params, OptionalExtension, Row};

use crate::connection::Store;
use crate::error::Result;
use crate::paging::{page_of, Page};

/// A Files API file's row.
#[derive(Debug, Clone, PartialEq)]
pub struct FileRow {
    pub id: String,
    pub project: String,
    pub filename: String,
    pub purpose: String,
    pub bytes: u64,
    pub created_at: i64,
    /// When the file is deleted (`expires_after`), if ever.
    pub expires_at: Option<i64>,
}

const FILE_COLUMNS: &str = "id, project, filename, purpose, bytes, created_at, expires_at";

fn file_row(row: &Row) -> rusqlite::Result<FileRow> {
    Ok(FileRow {
        id: row.get(0)?,
        project: row.get(1)?,
        filename: row.get(2)?,
        purpose: row.get(3)?,
        bytes: row.get(4)?,
        created_at: row.get(5)?,
        expires_at: row.get(6)?,
    })
}

impl Store {
    pub fn insert_file(&self, row: &FileRow) -> Result<()> {
        self.conn().execute(
            &format!("INSERT INTO files ({FILE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"),
            params![
                row.id,
                row.project,
                row.filename,
                row.purpose,
                row.bytes,
                row.created_at,
                row.expires_at
            ],
        )?;
        Ok(())
    }

    /// Files whose `expires_at` has passed.
    pub fn expired_files(&self, now: i64) -> Result<Vec<FileRow>> {
        let conn = self.reader();
        let mut statement = conn.prepare(&format!(
            "SELECT {FILE_COLUMNS} FROM files WHERE expires_at IS NOT NULL AND expires_at <= ?1"
        ))?;
        let rows = statement
            .query_map(params![now], file_row)?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    pub fn file(&self, project: &str, id: &str) -> Result<Option<FileRow>> {
        Ok(self
            .reader()
            .query_row(
                &format!("SELECT {FILE_COLUMNS} FROM files WHERE id = ?1 AND project = ?2"),
                params![id, project],
                file_row,
            )
            .optional()?)
    }

    pub fn list_files(
        &self,
        project: &str,
        purpose: Option<&str>,
        page: &Page,
    ) -> Result<(Vec<FileRow>, bool)> {
        page_of(
            &self.reader(),
            "files",
            FILE_COLUMNS,
            "project",
            project,
            "purpose",
            purpose,
            page,
            file_row,
        )
    }

    pub fn delete_file(&self, project: &str, id: &str) -> Result<bool> {
        let deleted = self.conn().execute(
            "DELETE FROM files WHERE id = ?1 AND project = ?2",
            params![id, project],
        )?;
        Ok(deleted > 0)
    }
}
