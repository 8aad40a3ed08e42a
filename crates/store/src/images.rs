//! A cluster's project images (the `images` table): an image a node built,
//! imported or committed, put in the object store as one archive
//! (`images/<name>/<revision>.tar.zst`), whose row is written once the
//! archive is whole. The row names the image's owner, its revision, the
//! archive's digest (which a node installing it checks) and its details
//! (the engine's `info.json`, JSON). Image names are the engine's: one
//! image per name, whatever the project.

use crate::connection::Store;
use crate::error::Result;
use crate::sql::Row;

/// One image in the object store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRow {
    pub name: String,
    pub project: String,
    pub revision: String,
    /// `sha256:<hex>` of its archive.
    pub archive_digest: String,
    /// The engine's details of it (JSON).
    pub details: String,
    /// The node that made it.
    pub node_id: String,
    pub created_at: i64,
}

const COLUMNS: &str = "name, project, revision, archive_digest, details, node_id, created_at";

fn image_row(row: &Row) -> Result<ImageRow> {
    Ok(ImageRow {
        name: row.get(0)?,
        project: row.get(1)?,
        revision: row.get(2)?,
        archive_digest: row.get(3)?,
        details: row.get(4)?,
        node_id: row.get(5)?,
        created_at: row.get(6)?,
    })
}

impl Store {
    /// Records image `row.name` at its revision: a new one, or a new
    /// revision of `row.project`'s own. Whether it was written (`false`:
    /// the name is another project's).
    pub fn put_image(&self, row: &ImageRow) -> Result<bool> {
        self.transaction(|sql| {
            let owner: Option<String> = sql.query_opt(
                "SELECT project FROM images WHERE name = ?1",
                &[&row.name],
                |r| r.get(0),
            )?;
            if owner.as_ref().is_some_and(|owner| owner != &row.project) {
                return Ok(false);
            }
            sql.execute(
                &format!(
                    "INSERT INTO images ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
                     ON CONFLICT (name) DO UPDATE SET revision = excluded.revision, \
                     archive_digest = excluded.archive_digest, details = excluded.details, \
                     node_id = excluded.node_id, created_at = excluded.created_at"
                ),
                &[
                    &row.name,
                    &row.project,
                    &row.revision,
                    &row.archive_digest,
                    &row.details,
                    &row.node_id,
                    &row.created_at,
                ],
            )?;
            Ok(true)
        })
    }

    /// Image `name`, whoever's it is.
    pub fn image_row(&self, name: &str) -> Result<Option<ImageRow>> {
        self.read(|sql| {
            sql.query_opt(
                &format!("SELECT {COLUMNS} FROM images WHERE name = ?1"),
                &[&name],
                image_row,
            )
        })
    }

    /// Every image in the object store, by name.
    pub fn image_rows(&self) -> Result<Vec<ImageRow>> {
        self.read(|sql| {
            sql.query(
                &format!("SELECT {COLUMNS} FROM images ORDER BY name"),
                &[],
                image_row,
            )
        })
    }

    /// Deletes `project`'s image `name`: the row deleted, if there was one.
    pub fn delete_image_row(&self, project: &str, name: &str) -> Result<Option<ImageRow>> {
        self.transaction(|sql| {
            let row = sql.query_opt(
                &format!("SELECT {COLUMNS} FROM images WHERE name = ?1 AND project = ?2"),
                &[&name, &project],
                image_row,
            )?;
            if row.is_some() {
                sql.execute(
                    "DELETE FROM images WHERE name = ?1 AND project = ?2",
                    &[&name, &project],
                )?;
            }
            Ok(row)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(name: &str, project: &str, revision: &str) -> ImageRow {
        ImageRow {
            name: name.into(),
            project: project.into(),
            revision: revision.into(),
            archive_digest: format!("sha256:{revision}"),
            details: "{}".into(),
            node_id: "node-a".into(),
            created_at: 1,
        }
    }

    #[test]
    fn an_image_is_its_projects_and_a_new_revision_replaces_the_old() {
        for store in crate::testing::stores() {
            assert!(store.put_image(&image("app", "alpha", "r1")).unwrap());
            assert!(store.put_image(&image("app", "alpha", "r2")).unwrap());
            assert!(
                !store.put_image(&image("app", "beta", "r3")).unwrap(),
                "another project's name"
            );
            assert_eq!(
                store.image_row("app").unwrap(),
                Some(image("app", "alpha", "r2"))
            );
            assert!(store.put_image(&image("tool", "beta", "r1")).unwrap());
            let names: Vec<String> = store
                .image_rows()
                .unwrap()
                .into_iter()
                .map(|row| row.name)
                .collect();
            assert_eq!(names, ["app", "tool"]);
            assert_eq!(store.delete_image_row("beta", "app").unwrap(), None);
            assert_eq!(
                store.delete_image_row("alpha", "app").unwrap(),
                Some(image("app", "alpha", "r2"))
            );
            assert_eq!(store.image_row("app").unwrap(), None);
            assert!(
                store.put_image(&image("app", "beta", "r4")).unwrap(),
                "the name is free again"
            );
        }
    }
}
