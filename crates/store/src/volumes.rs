//! Volumes (the `volumes` table): a project's persistent directories, and
//! which containers mount them (`container_volumes`, a row per mount,
//! deleted in its container's delete transaction).
//!
//! A volume's creation, its deletion and a container's mounts are written
//! under one lock per project, so a volume is never deleted while a
//! container that mounts it is being made, and two creates cannot both
//! take the project's last volume.

use crate::connection::Store;
use crate::error::Result;
use crate::paging::{page_of, Page};
use crate::sql::{Row, Sql};

/// A volume's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeRow {
    pub id: String,
    pub project: String,
    /// Unique within the project (E2B's SDKs mount a volume by name).
    pub name: String,
    /// The bearer token E2B's volume content API is called with.
    pub token: String,
    pub created_at: i64,
    /// The node whose disk holds the volume's directory (empty on a single
    /// box): containers that mount it are placed there.
    pub node_id: String,
}

/// Why a volume was not made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeRefusal {
    /// The project has a volume of this name.
    NameTaken,
    /// The project holds its most volumes.
    TooMany { max: u32 },
}

/// What deleting a volume did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeDelete {
    Deleted,
    NotFound,
    /// Mounted by these containers (which exist): nothing deleted.
    Mounted(Vec<String>),
}

const VOLUME_COLUMNS: &str = "id, project, name, token, created_at, node_id";

fn volume_row(row: &Row) -> Result<VolumeRow> {
    Ok(VolumeRow {
        id: row.get(0)?,
        project: row.get(1)?,
        name: row.get(2)?,
        token: row.get(3)?,
        created_at: row.get(4)?,
        node_id: row.get(5)?,
    })
}

fn lock_volumes(sql: &mut dyn Sql, project: &str) -> Result<()> {
    sql.lock(&format!("volumes:{project}"))
}

fn project_volume(sql: &mut dyn Sql, project: &str, id: &str) -> Result<Option<VolumeRow>> {
    sql.query_opt(
        &format!("SELECT {VOLUME_COLUMNS} FROM volumes WHERE id = ?1 AND project = ?2"),
        &[&id, &project],
        volume_row,
    )
}

/// The containers (that exist) mounting volume `id`.
fn mounting_containers(sql: &mut dyn Sql, id: &str) -> Result<Vec<String>> {
    sql.query(
        "SELECT DISTINCT m.container_id FROM container_volumes m
         JOIN containers c ON c.id = m.container_id
         WHERE m.volume_id = ?1 ORDER BY m.container_id",
        &[&id],
        |row| row.get(0),
    )
}

impl Store {
    /// A new volume, unless its name is taken in the project or the project
    /// holds `max` volumes already.
    pub fn insert_volume(
        &self,
        row: &VolumeRow,
        max: u32,
    ) -> Result<std::result::Result<(), VolumeRefusal>> {
        self.transaction(|sql| {
            lock_volumes(sql, &row.project)?;
            let taken = sql
                .query_opt(
                    "SELECT id FROM volumes WHERE project = ?1 AND name = ?2",
                    &[&row.project, &row.name],
                    |r| r.get::<String>(0),
                )?
                .is_some();
            if taken {
                return Ok(Err(VolumeRefusal::NameTaken));
            }
            let held: i64 = sql.query_one(
                "SELECT COUNT(*) FROM volumes WHERE project = ?1",
                &[&row.project],
                |r| r.get(0),
            )?;
            if held >= i64::from(max) {
                return Ok(Err(VolumeRefusal::TooMany { max }));
            }
            sql.execute(
                &format!("INSERT INTO volumes ({VOLUME_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"),
                &[
                    &row.id,
                    &row.project,
                    &row.name,
                    &row.token,
                    &row.created_at,
                    &row.node_id,
                ],
            )?;
            Ok(Ok(()))
        })
    }

    /// A volume of `project`, by id.
    pub fn volume(&self, project: &str, id: &str) -> Result<Option<VolumeRow>> {
        self.read(|sql| project_volume(sql, project, id))
    }

    /// A volume by id alone, whoever's it is: for what is not a project's
    /// key (the content API's bearer token, a replica routing a request to
    /// the volume's node), which checks what it holds against the row.
    pub fn volume_by_id(&self, id: &str) -> Result<Option<VolumeRow>> {
        self.read(|sql| {
            sql.query_opt(
                &format!("SELECT {VOLUME_COLUMNS} FROM volumes WHERE id = ?1"),
                &[&id],
                volume_row,
            )
        })
    }

    /// A volume of `project`, by name.
    pub fn volume_named(&self, project: &str, name: &str) -> Result<Option<VolumeRow>> {
        self.read(|sql| {
            sql.query_opt(
                &format!("SELECT {VOLUME_COLUMNS} FROM volumes WHERE project = ?1 AND name = ?2"),
                &[&project, &name],
                volume_row,
            )
        })
    }

    /// A page of `project`'s volumes.
    pub fn list_volumes(&self, project: &str, page: &Page) -> Result<(Vec<VolumeRow>, bool)> {
        self.read(|sql| {
            page_of(
                sql,
                "volumes",
                VOLUME_COLUMNS,
                "project",
                project,
                "project",
                None,
                page,
                volume_row,
            )
        })
    }

    /// Every volume of `project`, oldest first.
    pub fn project_volumes(&self, project: &str) -> Result<Vec<VolumeRow>> {
        self.read(|sql| {
            sql.query(
                &format!("SELECT {VOLUME_COLUMNS} FROM volumes WHERE project = ?1 ORDER BY seq"),
                &[&project],
                volume_row,
            )
        })
    }

    /// Deletes a volume of `project`, unless a container mounts it.
    pub fn delete_volume(&self, project: &str, id: &str) -> Result<VolumeDelete> {
        self.transaction(|sql| {
            lock_volumes(sql, project)?;
            if project_volume(sql, project, id)?.is_none() {
                return Ok(VolumeDelete::NotFound);
            }
            let mounting = mounting_containers(sql, id)?;
            if !mounting.is_empty() {
                return Ok(VolumeDelete::Mounted(mounting));
            }
            // Rows of containers that are gone are no mount.
            sql.execute("DELETE FROM container_volumes WHERE volume_id = ?1", &[&id])?;
            sql.execute("DELETE FROM volumes WHERE id = ?1", &[&id])?;
            Ok(VolumeDelete::Deleted)
        })
    }

    /// Records that container `container_id` mounts each `(volume id, path)`,
    /// if every volume is still `project`'s; else the first missing id, and
    /// nothing is written.
    pub fn attach_volumes(
        &self,
        project: &str,
        container_id: &str,
        mounts: &[(String, String)],
    ) -> Result<std::result::Result<(), String>> {
        self.transaction(|sql| {
            lock_volumes(sql, project)?;
            for (volume_id, _) in mounts {
                if project_volume(sql, project, volume_id)?.is_none() {
                    return Ok(Err(volume_id.clone()));
                }
            }
            for (volume_id, path) in mounts {
                sql.execute(
                    "INSERT INTO container_volumes (container_id, volume_id, path) VALUES (?1, ?2, ?3)",
                    &[&container_id, volume_id, path],
                )?;
            }
            Ok(Ok(()))
        })
    }

    /// The `(volume id, path)` mounts of a container.
    pub fn container_volumes(&self, container_id: &str) -> Result<Vec<(String, String)>> {
        self.read(|sql| {
            sql.query(
                "SELECT volume_id, path FROM container_volumes WHERE container_id = ?1 ORDER BY path",
                &[&container_id],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn volume(id: &str, project: &str, name: &str) -> VolumeRow {
        VolumeRow {
            id: id.into(),
            project: project.into(),
            name: name.into(),
            token: format!("token-{id}"),
            created_at: 1,
            node_id: "node-1".into(),
        }
    }

    #[test]
    fn a_projects_volumes_are_its_own_counted_and_named_once() {
        for store in crate::testing::stores() {
            let first = volume("vol_1", "alpha", "data");
            assert_eq!(store.insert_volume(&first, 2).unwrap(), Ok(()));
            assert_eq!(
                store
                    .insert_volume(&volume("vol_2", "alpha", "data"), 2)
                    .unwrap(),
                Err(VolumeRefusal::NameTaken)
            );
            // Another project may use the name.
            assert_eq!(
                store
                    .insert_volume(&volume("vol_3", "beta", "data"), 2)
                    .unwrap(),
                Ok(())
            );
            assert_eq!(
                store
                    .insert_volume(&volume("vol_4", "alpha", "more"), 2)
                    .unwrap(),
                Ok(())
            );
            assert_eq!(
                store
                    .insert_volume(&volume("vol_5", "alpha", "most"), 2)
                    .unwrap(),
                Err(VolumeRefusal::TooMany { max: 2 })
            );
            assert_eq!(store.volume("alpha", "vol_1").unwrap(), Some(first.clone()));
            assert_eq!(store.volume("beta", "vol_1").unwrap(), None);
            assert_eq!(store.volume_by_id("vol_1").unwrap(), Some(first.clone()));
            assert_eq!(store.volume_by_id("vol_9").unwrap(), None);
            assert_eq!(store.volume_named("alpha", "data").unwrap(), Some(first));
            let ids: Vec<String> = store
                .project_volumes("alpha")
                .unwrap()
                .into_iter()
                .map(|v| v.id)
                .collect();
            assert_eq!(ids, ["vol_1", "vol_4"]);
        }
    }

    #[test]
    fn a_mounted_volume_is_not_deleted_until_its_containers_are_gone() {
        for store in crate::testing::stores() {
            assert_eq!(
                store
                    .insert_volume(&volume("vol_1", "alpha", "data"), 5)
                    .unwrap(),
                Ok(())
            );
            store
                .insert_container(&crate::tests::container_row("c1", "alpha"))
                .unwrap();
            let mounts = [("vol_1".to_owned(), "/mnt/data-vol".to_owned())];
            assert_eq!(
                store.attach_volumes("alpha", "c1", &mounts).unwrap(),
                Ok(())
            );
            // Another project's container cannot attach it: it is no volume there.
            assert_eq!(
                store.attach_volumes("beta", "c2", &mounts).unwrap(),
                Err("vol_1".to_owned())
            );
            assert_eq!(store.container_volumes("c1").unwrap(), mounts.to_vec());
            assert_eq!(
                store.delete_volume("alpha", "vol_1").unwrap(),
                VolumeDelete::Mounted(vec!["c1".into()])
            );
            assert_eq!(
                store.delete_volume("beta", "vol_1").unwrap(),
                VolumeDelete::NotFound
            );
            store.delete_container("c1").unwrap();
            assert!(store.container_volumes("c1").unwrap().is_empty());
            assert_eq!(
                store.delete_volume("alpha", "vol_1").unwrap(),
                VolumeDelete::Deleted
            );
            assert_eq!(store.volume("alpha", "vol_1").unwrap(), None);
        }
    }
}
