//! Skills and their versions (the `skills` and `skill_versions` tables).

use rusqlite::{params, Connection, OptionalExtension, Row};

use crate::connection::Store;
use crate::error::Result;
use crate::paging::{page_of, Page};
use crate::values::number;

/// Why a skill version was not deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkillVersionDelete {
    NotFound,
    /// The default version: make another the default first.
    IsDefault,
}

fn insert_skill_version(conn: &Connection, row: &SkillVersionRow) -> Result<()> {
    conn.execute(
        &format!(
            "INSERT INTO skill_versions ({SKILL_VERSION_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
        ),
        params![
            row.id,
            row.skill_id,
            row.project,
            row.version,
            row.name,
            row.description,
            row.created_at,
            row.bytes as i64
        ],
    )?;
    Ok(())
}

/// A skill's row: what the skill object shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillRow {
    pub id: String,
    pub project: String,
    /// The default version's name and description.
    pub name: String,
    pub description: String,
    pub created_at: i64,
    pub default_version: u32,
    pub latest_version: u32,
}

/// One version of a skill; its bundle is a blob named after its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillVersionRow {
    pub id: String,
    pub skill_id: String,
    pub project: String,
    pub version: u32,
    pub name: String,
    pub description: String,
    pub created_at: i64,
    pub bytes: u64,
}

const SKILL_COLUMNS: &str =
    "id, project, name, description, created_at, default_version, latest_version";

fn skill_row(row: &Row) -> rusqlite::Result<SkillRow> {
    Ok(SkillRow {
        id: row.get(0)?,
        project: row.get(1)?,
        name: row.get(2)?,
        description: row.get(3)?,
        created_at: row.get(4)?,
        default_version: row.get(5)?,
        latest_version: row.get(6)?,
    })
}

const SKILL_VERSION_COLUMNS: &str =
    "id, skill_id, project, version, name, description, created_at, bytes";

fn skill_version_row(row: &Row) -> rusqlite::Result<SkillVersionRow> {
    Ok(SkillVersionRow {
        id: row.get(0)?,
        skill_id: row.get(1)?,
        project: row.get(2)?,
        version: row.get(3)?,
        name: row.get(4)?,
        description: row.get(5)?,
        created_at: row.get(6)?,
        bytes: number(row, 7, "skill_versions", "bytes")?,
    })
}

impl Store {
    /// A new skill and its first version, in one transaction.
    pub fn insert_skill(&self, skill: &SkillRow, version: &SkillVersionRow) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute(
            &format!(
                "INSERT INTO skills ({SKILL_COLUMNS}, last_number) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)"
            ),
            params![
                skill.id,
                skill.project,
                skill.name,
                skill.description,
                skill.created_at,
                skill.default_version,
                skill.latest_version
            ],
        )?;
        insert_skill_version(&tx, version)?;
        tx.commit()?;
        Ok(())
    }

    /// A skill of `project`.
    pub fn skill(&self, project: &str, id: &str) -> Result<Option<SkillRow>> {
        Ok(self
            .reader()
            .query_row(
                &format!("SELECT {SKILL_COLUMNS} FROM skills WHERE id = ?1 AND project = ?2"),
                params![id, project],
                skill_row,
            )
            .optional()?)
    }

    pub fn list_skills(&self, project: &str, page: &Page) -> Result<(Vec<SkillRow>, bool)> {
        page_of(
            &self.reader(),
            "skills",
            SKILL_COLUMNS,
            "project",
            project,
            "project",
            None,
            page,
            skill_row,
        )
    }

    /// A new version of a skill: numbered after its latest (never reused),
    /// made the default if `default`. `version.version` is set here.
    pub fn add_skill_version(
        &self,
        project: &str,
        version: &mut SkillVersionRow,
        default: bool,
    ) -> Result<Option<SkillRow>> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let Some(mut skill) = tx
            .query_row(
                &format!("SELECT {SKILL_COLUMNS} FROM skills WHERE id = ?1 AND project = ?2"),
                params![version.skill_id, project],
                skill_row,
            )
            .optional()?
        else {
            return Ok(None);
        };
        let last: u32 = tx.query_row(
            "SELECT last_number FROM skills WHERE id = ?1",
            params![skill.id],
            |row| row.get(0),
        )?;
        skill.latest_version = last + 1;
        version.version = skill.latest_version;
        if default {
            skill.default_version = version.version;
            skill.name = version.name.clone();
            skill.description = version.description.clone();
        }
        insert_skill_version(&tx, version)?;
        tx.execute(
            "UPDATE skills SET latest_version = ?2, last_number = ?2, default_version = ?3, name = ?4,
             description = ?5 WHERE id = ?1",
            params![
                skill.id,
                skill.latest_version,
                skill.default_version,
                skill.name,
                skill.description
            ],
        )?;
        tx.commit()?;
        Ok(Some(skill))
    }

    /// One version of a skill of `project`.
    pub fn skill_version(
        &self,
        project: &str,
        skill_id: &str,
        version: u32,
    ) -> Result<Option<SkillVersionRow>> {
        Ok(self
            .reader()
            .query_row(
                &format!(
                    "SELECT {SKILL_VERSION_COLUMNS} FROM skill_versions
                     WHERE skill_id = ?1 AND project = ?2 AND version = ?3"
                ),
                params![skill_id, project, version],
                skill_version_row,
            )
            .optional()?)
    }

    /// A page of a skill's versions (by version number: their order of
    /// creation).
    pub fn list_skill_versions(
        &self,
        skill_id: &str,
        page: &Page,
    ) -> Result<(Vec<SkillVersionRow>, bool)> {
        page_of(
            &self.reader(),
            "skill_versions",
            SKILL_VERSION_COLUMNS,
            "skill_id",
            skill_id,
            "project",
            None,
            page,
            skill_version_row,
        )
    }

    /// Makes `version` the default (its name and description become the
    /// skill's); `None` if there is no such skill or version.
    pub fn set_default_skill_version(
        &self,
        project: &str,
        skill_id: &str,
        version: u32,
    ) -> Result<Option<SkillRow>> {
        let Some(row) = self.skill_version(project, skill_id, version)? else {
            return Ok(None);
        };
        self.conn().execute(
            "UPDATE skills SET default_version = ?3, name = ?4, description = ?5
             WHERE id = ?1 AND project = ?2",
            params![skill_id, project, version, row.name, row.description],
        )?;
        self.skill(project, skill_id)
    }

    /// Deletes a skill and its versions; returns the versions' ids (their
    /// blobs are the caller's to remove), or `None` if there is no skill.
    pub fn delete_skill(&self, project: &str, id: &str) -> Result<Option<Vec<String>>> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let deleted = tx.execute(
            "DELETE FROM skills WHERE id = ?1 AND project = ?2",
            params![id, project],
        )?;
        if deleted == 0 {
            return Ok(None);
        }
        let versions: Vec<String> = tx
            .prepare("SELECT id FROM skill_versions WHERE skill_id = ?1")?
            .query_map(params![id], |row| row.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        tx.execute(
            "DELETE FROM skill_versions WHERE skill_id = ?1",
            params![id],
        )?;
        tx.commit()?;
        Ok(Some(versions))
    }

    /// Deletes one version (not the default: another must be made the
    /// default first); the latest version number is recomputed. Returns the
    /// deleted row.
    pub fn delete_skill_version(
        &self,
        project: &str,
        skill_id: &str,
        version: u32,
    ) -> Result<std::result::Result<SkillVersionRow, SkillVersionDelete>> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let Some(skill) = tx
            .query_row(
                &format!("SELECT {SKILL_COLUMNS} FROM skills WHERE id = ?1 AND project = ?2"),
                params![skill_id, project],
                skill_row,
            )
            .optional()?
        else {
            return Ok(Err(SkillVersionDelete::NotFound));
        };
        if skill.default_version == version {
            return Ok(Err(SkillVersionDelete::IsDefault));
        }
        let Some(row) = tx
            .query_row(
                &format!(
                    "SELECT {SKILL_VERSION_COLUMNS} FROM skill_versions WHERE skill_id = ?1 AND version = ?2"
                ),
                params![skill_id, version],
                skill_version_row,
            )
            .optional()?
        else {
            return Ok(Err(SkillVersionDelete::NotFound));
        };
        tx.execute(
            "DELETE FROM skill_versions WHERE skill_id = ?1 AND version = ?2",
            params![skill_id, version],
        )?;
        tx.execute(
            "UPDATE skills SET latest_version =
             (SELECT MAX(version) FROM skill_versions WHERE skill_id = ?1) WHERE id = ?1",
            params![skill_id],
        )?;
        tx.commit()?;
        Ok(Ok(row))
    }
}
