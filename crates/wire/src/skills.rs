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

/// `DELETE /v1/skills/{skill_id}/versions/{version}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct SkillVersionDeleted {
    /// `skill.version.deleted`.
    pub object: String,
    pub deleted: bool,
    pub id: String,
    pub version: String,
}

/// A version number as a request names it: `"2"`, `2` or `"latest"`;
/// anything else is kept as given, for the server to refuse once it knows
/// the skill (a skill that is not there is the first thing it says).
/// (Its schema is a string, as OpenAI's SDKs type it.)
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum VersionRef {
    Text(String),
    Number(serde_json::Number),
    /// Neither a string nor a number.
    Other(serde_json::Value),
}

impl VersionRef {
    /// The version as text (`2` reads as `"2"`), if it is a string or a
    /// number.
    pub fn text(&self) -> Option<String> {
        match self {
            VersionRef::Text(text) => Some(text.clone()),
            VersionRef::Number(number) => Some(number.to_string()),
            VersionRef::Other(_) => None,
        }
    }
}

impl std::fmt::Display for VersionRef {
    /// As JSON (`"2"`, `2`, `true`): how an error message quotes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VersionRef::Text(text) => write!(f, "{}", serde_json::Value::from(text.as_str())),
            VersionRef::Number(number) => write!(f, "{number}"),
            VersionRef::Other(value) => write!(f, "{value}"),
        }
    }
}

/// `POST /v1/skills/{skill_id}`: the only field that may change. As it
/// arrives, `default_version` is checked by the server (required, a number
/// or `latest`), and any other key is kept for the server to refuse.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct UpdateSkill {
    /// A version number (`"2"` or `2`) or `latest`.
    #[serde(default)]
    #[schema(value_type = String, required = true)]
    pub default_version: Option<VersionRef>,
    #[serde(flatten)]
    #[schema(ignore)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

/// One of the skills a container gets (`POST /v1/containers`'s `skills`,
/// a `container_auto` environment's): a skill of the project (or a curated
/// one) by reference, or a zip given inline.
///
/// Read in the order the API checks an entry (its `type`, unknown keys,
/// then each field in turn), each error naming its field inside the entry
/// (read it with [`crate::param::parse`]).
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SkillEntry {
    SkillReference(SkillReference),
    Inline(InlineSkill),
}

/// `{"type": "skill_reference", "skill_id", "version"?}`.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct SkillReference {
    /// `skill_…` of the project, or a curated skill's id (1 to 64
    /// characters).
    pub skill_id: String,
    /// Absent or null: the skill's default version.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub version: Option<VersionRef>,
}

/// `{"type": "inline", "name", "description", "source"}`: the bundle's own
/// manifest names the skill in the container.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct InlineSkill {
    pub name: String,
    pub description: String,
    pub source: InlineSkillSource,
}

/// `{"type": "base64", "media_type": "application/zip", "data"}`.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct InlineSkillSource {
    /// `base64`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `application/zip`.
    pub media_type: String,
    /// The zip, base64 (at most [`MAX_INLINE_DATA`] characters).
    pub data: String,
}

/// Most characters of an inline skill's base64 `data`.
pub const MAX_INLINE_DATA: usize = 70_254_592;

const ENTRY_SHAPES: &str =
    "a skill is {\"type\": \"skill_reference\", \"skill_id\", \"version\"?} or \
                            {\"type\": \"inline\", \"name\", \"description\", \"source\"}";
const SOURCE_SHAPE: &str =
    "source must be {\"type\": \"base64\", \"media_type\": \"application/zip\", \"data\"}";

/// The object of an entry (or of its `source`), its keys checked against
/// the ones its shape has: the first other one is refused by name.
fn object_with<E: serde::de::Error>(
    value: serde_json::Value,
    keys: &[&str],
    at: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, E> {
    let serde_json::Value::Object(object) = value else {
        return Err(crate::param::nested(at, "a skill entry must be an object"));
    };
    if let Some(unknown) = object.keys().find(|k| !keys.contains(&k.as_str())) {
        let path = if at.is_empty() {
            unknown.clone()
        } else {
            format!("{at}.{unknown}")
        };
        return Err(crate::param::nested(
            &path,
            format_args!("unknown field {unknown:?}"),
        ));
    }
    Ok(object)
}

/// Field `key` of `object` as a `T`, if it is one.
fn field<T: serde::de::DeserializeOwned>(
    object: &mut serde_json::Map<String, serde_json::Value>,
    key: &str,
) -> Option<T> {
    object
        .remove(key)
        .and_then(|value| serde_json::from_value(value).ok())
}

/// Field `key` of `object` as a non-empty string of at most `max` bytes,
/// else the error `message` naming it.
fn text<E: serde::de::Error>(
    object: &mut serde_json::Map<String, serde_json::Value>,
    key: &str,
    path: &str,
    max: usize,
    message: &str,
) -> Result<String, E> {
    field::<String>(object, key)
        .filter(|text| !text.is_empty() && text.len() <= max)
        .ok_or_else(|| crate::param::nested(path, message))
}

impl<'de> Deserialize<'de> for SkillEntry {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        /// The `type` tag (if the entry is an object with a string one).
        #[derive(Deserialize)]
        struct Tag {
            #[serde(rename = "type")]
            kind: String,
        }
        let kind = Tag::deserialize(&value).ok().map(|tag| tag.kind);
        match kind.as_deref() {
            Some("skill_reference") => {
                let mut object = object_with(value, &["type", "skill_id", "version"], "")?;
                let skill_id = text(
                    &mut object,
                    "skill_id",
                    "skill_id",
                    64,
                    "skill_id is required",
                )?;
                // Null reads as absent.
                let version = field::<Option<VersionRef>>(&mut object, "version").flatten();
                Ok(SkillEntry::SkillReference(SkillReference {
                    skill_id,
                    version,
                }))
            }
            Some("inline") => {
                let mut object =
                    object_with(value, &["type", "name", "description", "source"], "")?;
                let name = text(&mut object, "name", "name", usize::MAX, "name is required")?;
                let description = text(
                    &mut object,
                    "description",
                    "description",
                    usize::MAX,
                    "description is required",
                )?;
                let source = object
                    .remove("source")
                    .ok_or_else(|| crate::param::nested("source", "source is required"))?;
                let mut source = object_with(source, &["type", "media_type", "data"], "source")?;
                let kind = field::<String>(&mut source, "type");
                let media_type = field::<String>(&mut source, "media_type");
                let (Some(kind), Some(media_type)) = (kind, media_type) else {
                    return Err(crate::param::nested("source", SOURCE_SHAPE));
                };
                if kind != "base64" || media_type != "application/zip" {
                    return Err(crate::param::nested("source", SOURCE_SHAPE));
                }
                let data = text(
                    &mut source,
                    "data",
                    "source.data",
                    MAX_INLINE_DATA,
                    "data (base64, at most 70254592 characters) is required",
                )?;
                Ok(SkillEntry::Inline(InlineSkill {
                    name,
                    description,
                    source: InlineSkillSource {
                        kind,
                        media_type,
                        data,
                    },
                }))
            }
            _ => Err(crate::param::nested("type", ENTRY_SHAPES)),
        }
    }
}

/// A skill a container holds, as its row keeps it and the container
/// object shows it (shellgate's extension): where it is and what the model
/// is told. The keys are written in this (alphabetical) order, null
/// `skill_id`/`version` included, as rows have always held them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct MountedSkill {
    pub description: String,
    pub name: String,
    /// `/mnt/skills/<name>`.
    pub path: String,
    /// `skill_…` (or a curated skill's id) for a referenced skill; null
    /// inline.
    pub skill_id: Option<String>,
    /// The referenced version (`"2"`); null inline.
    pub version: Option<String>,
}

/// An entry of a container row's `skills`: a [`MountedSkill`] (it has a
/// `path`), or, in rows from before skills were mounted, the request's
/// entry as given (no `path`): that skill was never in the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredSkill {
    Mounted(MountedSkill),
    NeverMounted,
}

impl<'de> Deserialize<'de> for StoredSkill {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        let mounted = value.as_object().is_some_and(|o| o.contains_key("path"));
        if !mounted {
            return Ok(StoredSkill::NeverMounted);
        }
        serde_json::from_value(value)
            .map(StoredSkill::Mounted)
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::param::{parse, ParamError};
    use serde_json::json;

    fn refused(entry: serde_json::Value) -> (String, String) {
        let ParamError { param, message } =
            parse::<SkillEntry>(&entry).expect_err("the entry is refused");
        (param, message)
    }

    #[test]
    fn a_reference_reads_with_its_version_as_given() {
        let entry: SkillEntry =
            parse(&json!({"type": "skill_reference", "skill_id": "skill_1", "version": 2}))
                .expect("a reference");
        let SkillEntry::SkillReference(reference) = entry else {
            panic!("not a reference: {entry:?}");
        };
        assert_eq!(reference.skill_id, "skill_1");
        assert_eq!(
            reference.version.as_ref().and_then(VersionRef::text),
            Some("2".to_owned())
        );
        // Null is absent; another type is kept for the server to refuse.
        let null: SkillEntry =
            parse(&json!({"type": "skill_reference", "skill_id": "s", "version": null})).unwrap();
        assert!(matches!(
            null,
            SkillEntry::SkillReference(SkillReference { version: None, .. })
        ));
        let other: SkillEntry =
            parse(&json!({"type": "skill_reference", "skill_id": "s", "version": true})).unwrap();
        let SkillEntry::SkillReference(SkillReference {
            version: Some(other),
            ..
        }) = other
        else {
            panic!("version kept");
        };
        assert_eq!(other.text(), None);
        assert_eq!(other.to_string(), "true");
        assert_eq!(VersionRef::Text("2".into()).to_string(), "\"2\"");
    }

    #[test]
    fn entries_are_refused_in_the_order_the_api_checks_them() {
        assert_eq!(refused(json!("skill")).0, "type");
        assert_eq!(refused(json!({"type": "other"})).0, "type");
        assert!(refused(json!({"skill_id": "s"}))
            .1
            .starts_with("a skill is "));
        // Unknown keys before any field.
        assert_eq!(
            refused(json!({"type": "skill_reference", "skill_id": 5, "zzz": 1})),
            ("zzz".to_owned(), "unknown field \"zzz\"".to_owned())
        );
        assert_eq!(
            refused(json!({"type": "skill_reference", "skill_id": "x".repeat(65)})),
            ("skill_id".to_owned(), "skill_id is required".to_owned())
        );
        // name, then description, then source.
        assert_eq!(
            refused(json!({"type": "inline", "name": "", "description": 5})).0,
            "name"
        );
        assert_eq!(
            refused(json!({"type": "inline", "name": "n", "description": 5, "source": 1})),
            (
                "description".to_owned(),
                "description is required".to_owned()
            )
        );
        assert_eq!(
            refused(json!({"type": "inline", "name": "n", "description": "d"})),
            ("source".to_owned(), "source is required".to_owned())
        );
        assert_eq!(
            refused(json!({"type": "inline", "name": "n", "description": "d", "source": null})),
            (
                "source".to_owned(),
                "a skill entry must be an object".to_owned()
            )
        );
        assert_eq!(
            refused(json!({"type": "inline", "name": "n", "description": "d",
                           "source": {"type": "base64", "extra": 1}})),
            (
                "source.extra".to_owned(),
                "unknown field \"extra\"".to_owned()
            )
        );
        assert_eq!(
            refused(json!({"type": "inline", "name": "n", "description": "d",
                           "source": {"type": "base64", "media_type": "application/gzip", "data": "x"}}))
            .0,
            "source"
        );
        assert_eq!(
            refused(json!({"type": "inline", "name": "n", "description": "d",
                           "source": {"type": "base64", "media_type": "application/zip"}})),
            (
                "source.data".to_owned(),
                "data (base64, at most 70254592 characters) is required".to_owned()
            )
        );
    }

    #[test]
    fn a_mounted_skill_is_stored_as_rows_have_always_held_it() {
        let stored = r#"[{"description":"d","name":"n","path":"/mnt/skills/n","skill_id":null,"version":null},{"description":"e","name":"m","path":"/mnt/skills/m","skill_id":"skill_1","version":"2"}]"#;
        let skills: Vec<MountedSkill> = serde_json::from_str(stored).expect("old rows read");
        assert_eq!(serde_json::to_string(&skills).unwrap(), stored);
        assert_eq!(skills[1].version.as_deref(), Some("2"));
    }

    #[test]
    fn a_stored_entry_without_a_path_was_never_mounted_and_others_must_read() {
        let stored: Vec<StoredSkill> =
            serde_json::from_str(r#"[{"type":"skill_reference","skill_id":"skill_1"}, 3]"#)
                .expect("pre-mount entries read");
        assert_eq!(
            stored,
            vec![StoredSkill::NeverMounted, StoredSkill::NeverMounted]
        );
        assert!(serde_json::from_str::<Vec<StoredSkill>>(r#"[{"path":"/mnt/skills/n"}]"#).is_err());
    }

    #[test]
    fn an_update_keeps_what_else_it_names() {
        let body: UpdateSkill = parse(&json!({"default_version": "latest", "name": "x"})).unwrap();
        assert_eq!(
            body.default_version,
            Some(VersionRef::Text("latest".into()))
        );
        assert!(body.other.contains_key("name"));
        let bare: UpdateSkill = parse(&json!({})).unwrap();
        assert_eq!(bare.default_version, None);
    }
}

/// A skill in Anthropic's shape (the `anthropic` SDK's
/// `types/beta/beta_skill.py`): what `/v1/skills` answers a client that
/// sends `anthropic-version`. `display_name` is the skill's name (its
/// `SKILL.md`'s); `latest_version` is its latest version's number beside
/// that version's id.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct AnthropicSkill {
    pub id: String,
    /// Always `skill`.
    #[serde(rename = "type")]
    pub kind: String,
    pub display_name: String,
    pub latest_version_id: String,
    pub latest_version: String,
    pub source: AnthropicSkillSource,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339: when its latest version was made.
    pub updated_at: String,
}

/// Where a skill comes from: `custom` (the project's) or `anthropic` (one
/// shellgate ships, as Anthropic's curated skills are Anthropic's).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct AnthropicSkillSource {
    #[serde(rename = "type")]
    pub kind: String,
}

/// A page of Anthropic's skill list, as [`crate::AnthropicFileList`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct AnthropicSkillList {
    pub data: Vec<AnthropicSkill>,
    pub has_more: bool,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
    pub next_page: Option<String>,
}

/// `DELETE /v1/skills/{id}` in Anthropic's shape.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct AnthropicSkillDeleted {
    pub id: String,
    /// Always `skill_deleted`.
    #[serde(rename = "type")]
    pub kind: String,
}

/// The query of Anthropic's skill list: `limit` (1 to 1,000, default 20),
/// `page` (a `next_page` cursor) or `after_id` / `before_id`, and
/// `source` (`custom`, the default, or `anthropic`).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct AnthropicSkillsQuery {
    pub limit: Option<String>,
    pub page: Option<String>,
    pub after_id: Option<String>,
    pub before_id: Option<String>,
    pub source: Option<String>,
}

/// A skill's version in Anthropic's shape (the `anthropic` SDK's
/// `types/skills/skill_version.py`): its id (which names it in paths),
/// the skill's, the `SKILL.md`'s name and description, and `version`, its
/// number beside the id.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct AnthropicSkillVersion {
    pub id: String,
    /// Always `skill_version`.
    #[serde(rename = "type")]
    pub kind: String,
    pub skill_id: String,
    pub version: String,
    pub name: String,
    pub description: String,
    /// RFC 3339.
    pub created_at: String,
}

/// A page of a skill's versions in Anthropic's shape, as
/// [`AnthropicSkillList`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct AnthropicSkillVersionList {
    pub data: Vec<AnthropicSkillVersion>,
    pub has_more: bool,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
    pub next_page: Option<String>,
}

/// `DELETE /v1/skills/{id}/versions/{version}` in Anthropic's shape.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct AnthropicSkillVersionDeleted {
    pub id: String,
    /// Always `skill_version_deleted`.
    #[serde(rename = "type")]
    pub kind: String,
}

/// The query of Anthropic's list of a skill's versions: `limit` (1 to
/// 1,000, default 20) and `page` (a `next_page` cursor) or `after_id` /
/// `before_id`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct AnthropicSkillVersionsQuery {
    pub limit: Option<String>,
    pub page: Option<String>,
    pub after_id: Option<String>,
    pub before_id: Option<String>,
}
