//! Files API files (the `files` table).

use crate::connection::Store;
use crate::error::Result;
use crate::paging::{page_of, Page};
use crate::sql::Row;

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
    /// The MIME type its uploader gave, if one did.
    pub mime_type: Option<String>,
}

const FILE_COLUMNS: &str =
    "id, project, filename, purpose, bytes, created_at, expires_at, mime_type";

fn file_row(row: &Row) -> Result<FileRow> {
    Ok(FileRow {
        id: row.get(0)?,
        project: row.get(1)?,
        filename: row.get(2)?,
        purpose: row.get(3)?,
        bytes: row.number(4, "files", "bytes")?,
        created_at: row.get(5)?,
        expires_at: row.get(6)?,
        mime_type: row.get(7)?,
    })
}

impl Store {
    pub fn insert_file(&self, row: &FileRow) -> Result<()> {
        self.write(|sql| {
            sql.execute(
                &format!(
                    "INSERT INTO files ({FILE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
                ),
                &[
                    &row.id,
                    &row.project,
                    &row.filename,
                    &row.purpose,
                    &row.bytes,
                    &row.created_at,
                    &row.expires_at,
                    &row.mime_type,
                ],
            )
        })?;
        Ok(())
    }

    /// Files whose `expires_at` has passed.
    pub fn expired_files(&self, now: i64) -> Result<Vec<FileRow>> {
        self.read(|sql| {
            sql.query(
                &format!(
                    "SELECT {FILE_COLUMNS} FROM files WHERE expires_at IS NOT NULL AND expires_at <= ?1"
                ),
                &[&now],
                file_row,
            )
        })
    }

    pub fn file(&self, project: &str, id: &str) -> Result<Option<FileRow>> {
        self.read(|sql| {
            sql.query_opt(
                &format!("SELECT {FILE_COLUMNS} FROM files WHERE id = ?1 AND project = ?2"),
                &[&id, &project],
                file_row,
            )
        })
    }

    pub fn list_files(
        &self,
        project: &str,
        purpose: Option<&str>,
        page: &Page,
    ) -> Result<(Vec<FileRow>, bool)> {
        self.read(|sql| {
            page_of(
                sql,
                "files",
                FILE_COLUMNS,
                "project",
                project,
                "purpose",
                purpose,
                page,
                file_row,
            )
        })
    }

    pub fn delete_file(&self, project: &str, id: &str) -> Result<bool> {
        let deleted = self.write(|sql| {
            sql.execute(
                "DELETE FROM files WHERE id = ?1 AND project = ?2",
                &[&id, &project],
            )
        })?;
        Ok(deleted > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::FileRow;

    #[test]
    fn a_files_mime_type_is_kept_and_a_file_without_one_reads_none() {
        for store in crate::testing::stores() {
            let typed = FileRow {
                id: "file-typed".into(),
                project: "alpha".into(),
                filename: "notes".into(),
                purpose: "user_data".into(),
                bytes: 3,
                created_at: 10,
                expires_at: Some(20),
                mime_type: Some("text/csv".into()),
            };
            let untyped = FileRow {
                id: "file-untyped".into(),
                mime_type: None,
                ..typed.clone()
            };
            store.insert_file(&typed).expect("insert the typed file");
            store
                .insert_file(&untyped)
                .expect("insert the untyped file");
            let read = store.file("alpha", "file-typed").expect("read");
            assert_eq!(read.as_ref(), Some(&typed), "read back {read:?}");
            let read = store.file("alpha", "file-untyped").expect("read");
            assert_eq!(read.as_ref(), Some(&untyped), "read back {read:?}");
        }
    }
}
