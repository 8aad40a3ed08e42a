//! Files inside containers (the `container_files` table), and the sync that
//! brings them in line with what a container holds.

use std::collections::HashMap;

use crate::connection::Store;
use crate::error::Result;
use crate::paging::{page_of, Page};
use crate::sql::Row;
use crate::values::FileSource;

/// A container file's row.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerFileRow {
    pub id: String,
    pub container_id: String,
    pub path: String,
    pub bytes: u64,
    pub source: FileSource,
    pub created_at: i64,
}

/// A file found in a container, as the sync takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PresentFile {
    pub path: String,
    pub bytes: u64,
    pub modified_unix: i64,
}

/// Rows one write transaction of a sync changes at most: a sync of a huge
/// container is split so other tenants' writes wait milliseconds, not the
/// whole sync.
const SYNC_BATCH: usize = 2_000;

const CONTAINER_FILE_COLUMNS: &str = "id, container_id, path, bytes, source, created_at";

fn container_file_row(row: &Row) -> Result<ContainerFileRow> {
    Ok(ContainerFileRow {
        id: row.get(0)?,
        container_id: row.get(1)?,
        path: row.get(2)?,
        bytes: row.number(3, "container_files", "bytes")?,
        source: row.text(4, "container_files", "source")?,
        created_at: row.get(5)?,
    })
}

impl Store {
    /// Inserts or updates the file at (`container_id`, `path`); returns its row.
    pub fn upsert_container_file(&self, row: &ContainerFileRow) -> Result<ContainerFileRow> {
        self.write(|sql| {
            sql.query_one(
                &format!(
                    "INSERT INTO container_files ({CONTAINER_FILE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                     ON CONFLICT (container_id, path) DO UPDATE SET bytes = excluded.bytes
                     RETURNING {CONTAINER_FILE_COLUMNS}"
                ),
                &[&row.id, &row.container_id, &row.path, &row.bytes, &row.source, &row.created_at],
                container_file_row,
            )
        })
    }

    pub fn container_file(&self, container_id: &str, id: &str) -> Result<Option<ContainerFileRow>> {
        self.read(|sql| {
            sql.query_opt(
                &format!("SELECT {CONTAINER_FILE_COLUMNS} FROM container_files WHERE id = ?1 AND container_id = ?2"),
                &[&id, &container_id],
                container_file_row,
            )
        })
    }

    /// Every file row of a container, oldest first.
    pub fn container_files(&self, container_id: &str) -> Result<Vec<ContainerFileRow>> {
        self.read(|sql| {
            sql.query(
                &format!(
                    "SELECT {CONTAINER_FILE_COLUMNS} FROM container_files WHERE container_id = ?1 ORDER BY seq"
                ),
                &[&container_id],
                container_file_row,
            )
        })
    }

    /// A page of a container's files in creation order (`seq`).
    pub fn list_container_files(
        &self,
        container_id: &str,
        page: &Page,
    ) -> Result<(Vec<ContainerFileRow>, bool)> {
        self.read(|sql| {
            page_of(
                sql,
                "container_files",
                CONTAINER_FILE_COLUMNS,
                "container_id",
                container_id,
                "path",
                None,
                page,
                container_file_row,
            )
        })
    }

    /// Brings a container's file rows in line with what is in it: one pass
    /// over a map of the rows (linear, not one lookup per pair), then the
    /// changes written in a few transactions of [`SYNC_BATCH`] rows: files
    /// gone are removed, new ones added (source `assistant`), changed sizes
    /// updated. Returns how many rows changed.
    pub fn sync_container_files(
        &self,
        container_id: &str,
        present: &[PresentFile],
        mut new_id: impl FnMut() -> String,
    ) -> Result<usize> {
        let known: HashMap<String, (String, u64)> = self
            .read(|sql| {
                sql.query(
                    "SELECT path, id, bytes FROM container_files WHERE container_id = ?1",
                    &[&container_id],
                    |row| {
                        Ok((
                            row.get::<String>(0)?,
                            (row.get(1)?, row.number(2, "container_files", "bytes")?),
                        ))
                    },
                )
            })?
            .into_iter()
            .collect();
        enum Change<'a> {
            Upsert(&'a PresentFile),
            Delete(&'a str),
        }
        let mut seen = std::collections::HashSet::with_capacity(present.len());
        let mut changes = Vec::new();
        for file in present {
            seen.insert(file.path.as_str());
            match known.get(&file.path) {
                Some((_, bytes)) if *bytes == file.bytes => {}
                _ => changes.push(Change::Upsert(file)),
            }
        }
        for (path, (id, _)) in &known {
            if !seen.contains(path.as_str()) {
                changes.push(Change::Delete(id));
            }
        }
        let upsert = format!(
            "INSERT INTO container_files ({CONTAINER_FILE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, 'assistant', ?5)
             ON CONFLICT (container_id, path) DO UPDATE SET bytes = excluded.bytes"
        );
        for batch in changes.chunks(SYNC_BATCH) {
            self.transaction(|sql| {
                for change in batch {
                    match change {
                        Change::Upsert(file) => {
                            sql.execute(
                                &upsert,
                                &[
                                    &new_id(),
                                    &container_id,
                                    &file.path,
                                    &file.bytes,
                                    &file.modified_unix,
                                ],
                            )?;
                        }
                        Change::Delete(id) => {
                            sql.execute(
                                "DELETE FROM container_files WHERE id = ?1 AND container_id = ?2",
                                &[id, &container_id],
                            )?;
                        }
                    }
                }
                Ok(())
            })?;
        }
        Ok(changes.len())
    }

    /// The file row at `path` of a container, if any.
    pub fn container_file_at(
        &self,
        container_id: &str,
        path: &str,
    ) -> Result<Option<ContainerFileRow>> {
        self.read(|sql| {
            sql.query_opt(
                &format!("SELECT {CONTAINER_FILE_COLUMNS} FROM container_files WHERE container_id = ?1 AND path = ?2"),
                &[&container_id, &path],
                container_file_row,
            )
        })
    }

    pub fn delete_container_file(&self, container_id: &str, id: &str) -> Result<bool> {
        let deleted = self.write(|sql| {
            sql.execute(
                "DELETE FROM container_files WHERE id = ?1 AND container_id = ?2",
                &[&id, &container_id],
            )
        })?;
        Ok(deleted > 0)
    }
}
