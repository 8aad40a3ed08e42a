//! The Skills API's objects (`/v1/skills`), as OpenAI's `openai/types/skill*`
//! models spell them: version numbers are strings on the wire.

use serde::{Deserialize, Serialize};

/// The skill object.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct Skill {
    pub id: String,
    /// `skill`.
    pub object: String,
    pub name: String,
    pub description: String,
    pub created_at: i64,
    /// The version containers get when they name no version.
    pub default_version: String,
    pub latest_version: String,
}

/// The skill.version object.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct SkillVersion {
    /// `skill.version`.
    pub object: String,
    pub id: String,
    pub skill_id: String,
    pub version: String,
    pub created_at: i64,
    pub name: String,
    pub description: String,
}

/// `POST /v1/skills/{skill_id}`: the only field that may change.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct UpdateSkill {
    /// A version number (`"2"` or `2`) or `latest`.
    #[schema(value_type = String)]
    pub default_version: serde_json::Value,
}

/// `DELETE /v1/skills/{skill_id}/versions/{version}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct SkillVersionDeleted {
    /// `skill.version.deleted`.
    pub object: String,
    pub deleted: bool,
    pub id: String,
    pub version: String,
}
