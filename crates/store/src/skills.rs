//! Skills and their versions (the `skills` and `skill_versions` tables).

use crate::connection::Store;
use crate::error::Result;
use crate::paging::{page_of, Page};
use crate::sql::{Row, Sql};

/// Why a skill version was not deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkillVersionDelete {
    NotFound,
    /// The default version: make another the default first.
    IsDefault,
}

fn insert_skill_version(sql: &mut dyn Sql, row: &SkillVersionRow) -> Result<()> {
    sql.execute(
        &format!(
            "INSERT INTO skill_versions ({SKILL_VERSION_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
        ),
        &[
            &row.id,
            &row.skill_id,
            &row.project,
            &row.version,
            &row.name,
            &row.description,
            &row.created_at,
            &row.bytes,
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

fn skill_row(row: &Row) -> Result<SkillRow> {
    Ok(SkillRow {
        id: row.get(0)?,
        project: row.get(1)?,
        name: row.get(2)?,
        description: row.get(3)?,
        created_at: row.get(4)?,
        default_version: row.number(5, "skills", "default_version")?,
        latest_version: row.number(6, "skills", "latest_version")?,
    })
}

const SKILL_VERSION_COLUMNS: &str =
    "id, skill_id, project, version, name, description, created_at, bytes";

fn skill_version_row(row: &Row) -> Result<SkillVersionRow> {
    Ok(SkillVersionRow {
        id: row.get(0)?,
        skill_id: row.get(1)?,
        project: row.get(2)?,
        version: row.number(3, "skill_versions", "version")?,
        name: row.get(4)?,
        description: row.get(5)?,
        created_at: row.get(6)?,
        bytes: row.number(7, "skill_versions", "bytes")?,
    })
}

/// One skill of a project, read inside a transaction.
fn project_skill(sql: &mut dyn Sql, project: &str, id: &str) -> Result<Option<SkillRow>> {
    sql.query_opt(
        &format!("SELECT {SKILL_COLUMNS} FROM skills WHERE id = ?1 AND project = ?2"),
        &[&id, &project],
        skill_row,
    )
}

impl Store {
    /// A new skill and its first version, in one transaction.
    pub fn insert_skill(&self, skill: &SkillRow, version: &SkillVersionRow) -> Result<()> {
        self.transaction(|sql| {
            sql.execute(
                &format!(
                    "INSERT INTO skills ({SKILL_COLUMNS}, last_number) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)"
                ),
                &[
                    &skill.id,
                    &skill.project,
                    &skill.name,
                    &skill.description,
                    &skill.created_at,
                    &skill.default_version,
                    &skill.latest_version,
                ],
            )?;
            insert_skill_version(sql, version)
        })
    }

    /// A skill of `project`.
    pub fn skill(&self, project: &str, id: &str) -> Result<Option<SkillRow>> {
        self.read(|sql| project_skill(sql, project, id))
    }

    pub fn list_skills(&self, project: &str, page: &Page) -> Result<(Vec<SkillRow>, bool)> {
        self.read(|sql| {
            page_of(
                sql,
                "skills",
                SKILL_COLUMNS,
                "project",
                project,
                "project",
                None,
                page,
                skill_row,
            )
        })
    }

    /// A new version of a skill: numbered after its latest (never reused,
    /// and never given twice when two replicas add versions at once),
    /// made the default if `default`. `version.version` is set here.
    pub fn add_skill_version(
        &self,
        project: &str,
        version: &mut SkillVersionRow,
        default: bool,
    ) -> Result<Option<SkillRow>> {
        self.transaction(|sql| {
            sql.lock(&format!("skill:{}", version.skill_id))?;
            let Some(mut skill) = project_skill(sql, project, &version.skill_id)? else {
                return Ok(None);
            };
            let last: u32 = sql.query_one(
                "SELECT last_number FROM skills WHERE id = ?1",
                &[&skill.id],
                |row| row.number(0, "skills", "last_number"),
            )?;
            skill.latest_version = last + 1;
            version.version = skill.latest_version;
            if default {
                skill.default_version = version.version;
                skill.name = version.name.clone();
                skill.description = version.description.clone();
            }
            insert_skill_version(sql, version)?;
            sql.execute(
                "UPDATE skills SET latest_version = ?2, last_number = ?2, default_version = ?3, name = ?4,
                 description = ?5 WHERE id = ?1",
                &[
                    &skill.id,
                    &skill.latest_version,
                    &skill.default_version,
                    &skill.name,
                    &skill.description,
                ],
            )?;
            Ok(Some(skill))
        })
    }

    /// One version of a skill of `project`.
    pub fn skill_version(
        &self,
        project: &str,
        skill_id: &str,
        version: u32,
    ) -> Result<Option<SkillVersionRow>> {
        self.read(|sql| {
            sql.query_opt(
                &format!(
                    "SELECT {SKILL_VERSION_COLUMNS} FROM skill_versions
                     WHERE skill_id = ?1 AND project = ?2 AND version = ?3"
                ),
                &[&skill_id, &project, &version],
                skill_version_row,
            )
        })
    }

    /// The version of a skill of `project` that has id `version_id`.
    pub fn skill_version_by_id(
        &self,
        project: &str,
        skill_id: &str,
        version_id: &str,
    ) -> Result<Option<SkillVersionRow>> {
        self.read(|sql| {
            sql.query_opt(
                &format!(
                    "SELECT {SKILL_VERSION_COLUMNS} FROM skill_versions
                     WHERE skill_id = ?1 AND project = ?2 AND id = ?3"
                ),
                &[&skill_id, &project, &version_id],
                skill_version_row,
            )
        })
    }

    /// A page of a skill's versions (by version number: their order of
    /// creation).
    pub fn list_skill_versions(
        &self,
        skill_id: &str,
        page: &Page,
    ) -> Result<(Vec<SkillVersionRow>, bool)> {
        self.read(|sql| {
            page_of(
                sql,
                "skill_versions",
                SKILL_VERSION_COLUMNS,
                "skill_id",
                skill_id,
                "project",
                None,
                page,
                skill_version_row,
            )
        })
    }

    /// Makes `version` the default (its name and description become the
    /// skill's); `None` if there is no such skill or version.
    pub fn set_default_skill_version(
        &self,
        project: &str,
        skill_id: &str,
        version: u32,
    ) -> Result<Option<SkillRow>> {
        self.transaction(|sql| {
            sql.lock(&format!("skill:{skill_id}"))?;
            let Some(row) = sql.query_opt(
                &format!(
                    "SELECT {SKILL_VERSION_COLUMNS} FROM skill_versions
                     WHERE skill_id = ?1 AND project = ?2 AND version = ?3"
                ),
                &[&skill_id, &project, &version],
                skill_version_row,
            )?
            else {
                return Ok(None);
            };
            sql.execute(
                "UPDATE skills SET default_version = ?3, name = ?4, description = ?5
                 WHERE id = ?1 AND project = ?2",
                &[&skill_id, &project, &version, &row.name, &row.description],
            )?;
            project_skill(sql, project, skill_id)
        })
    }

    /// Deletes a skill and its versions; returns the versions' ids (their
    /// blobs are the caller's to remove), or `None` if there is no skill.
    pub fn delete_skill(&self, project: &str, id: &str) -> Result<Option<Vec<String>>> {
        self.transaction(|sql| {
            sql.lock(&format!("skill:{id}"))?;
            let deleted = sql.execute(
                "DELETE FROM skills WHERE id = ?1 AND project = ?2",
                &[&id, &project],
            )?;
            if deleted == 0 {
                return Ok(None);
            }
            let versions: Vec<String> = sql.query(
                "SELECT id FROM skill_versions WHERE skill_id = ?1",
                &[&id],
                |row| row.get(0),
            )?;
            sql.execute("DELETE FROM skill_versions WHERE skill_id = ?1", &[&id])?;
            Ok(Some(versions))
        })
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
        self.transaction(|sql| {
            sql.lock(&format!("skill:{skill_id}"))?;
            let Some(skill) = project_skill(sql, project, skill_id)? else {
                return Ok(Err(SkillVersionDelete::NotFound));
            };
            if skill.default_version == version {
                return Ok(Err(SkillVersionDelete::IsDefault));
            }
            let Some(row) = sql.query_opt(
                &format!(
                    "SELECT {SKILL_VERSION_COLUMNS} FROM skill_versions WHERE skill_id = ?1 AND version = ?2"
                ),
                &[&skill_id, &version],
                skill_version_row,
            )?
            else {
                return Ok(Err(SkillVersionDelete::NotFound));
            };
            sql.execute(
                "DELETE FROM skill_versions WHERE skill_id = ?1 AND version = ?2",
                &[&skill_id, &version],
            )?;
            sql.execute(
                "UPDATE skills SET latest_version =
                 (SELECT MAX(version) FROM skill_versions WHERE skill_id = ?1) WHERE id = ?1",
                &[&skill_id],
            )?;
            Ok(Ok(row))
        })
    }
}
