//! The skills a container gets (references to the project's skills, the
//! curated ones, or inline zips), each checked whole and unpacked
//! read-only at [`SKILLS_PATH`]; and the skill store's lookups the
//! `/v1/skills` routes share with them.

use std::path::PathBuf;
use std::sync::Arc;

use base64::Engine as _;
use serde_json::Value;
use shellgate_skills::{Bundle, Limits};
use shellgate_store::{SkillRow, SkillVersionRow};
use shellgate_wire::{InlineSkill, MountedSkill, SkillEntry, SkillReference, VersionRef};

use crate::blobs::skill_key;
use crate::error::{ApiError, ApiResult};
use crate::http::Project;
use crate::state::AppState;

/// Most skills one container may get.
const MAX_SKILLS_PER_CONTAINER: usize = 200;
/// Most bytes of skills (unpacked) one container may get: they live on the
/// host's disk beside the container's, outside its disk quota.
const MAX_SKILL_BYTES_PER_CONTAINER: u64 = 256 << 20;
/// Where a container's skills are, one folder per skill.
pub const SKILLS_PATH: &str = "/mnt/skills";

/// Most bytes a stored bundle's zip is read with: the normalized zip of a
/// bundle within the limits is far smaller (deflated, a header a file).
pub(crate) fn max_stored_zip_bytes() -> u64 {
    2 * Limits::default().max_total_bytes + (1 << 20)
}

/// A bundle the skills' checks refused, as the upload's 400.
pub(crate) fn bundle_error(error: shellgate_skills::BundleError) -> ApiError {
    ApiError::invalid("files", format!("Invalid skill bundle: {error}"))
}

/// Checks what a model reads of a skill (its description, listed in the
/// shell tool's description, and its `SKILL.md`) against the project's
/// input rules. A bundle is not rewritten: a redaction refuses it (403) as
/// a block does; a flag is logged.
pub(crate) fn guard_bundle(state: &AppState, project: &str, bundle: &Bundle) -> ApiResult<()> {
    let skill_md = bundle
        .files
        .iter()
        .find(|f| f.path == "SKILL.md")
        .map(|f| String::from_utf8_lossy(&f.bytes).into_owned())
        .unwrap_or_default();
    state.guardrails.refuse_unless_clean(
        project,
        "skill",
        &[&bundle.manifest.description, &skill_md],
    )
}

/// The project's skill `id`, or 404.
pub(crate) async fn owned_skill(
    state: &AppState,
    project: &Project,
    id: &str,
) -> ApiResult<SkillRow> {
    let (owner, key) = (project.0.clone(), id.to_owned());
    state
        .db(move |s| s.skill(&owner, &key))
        .await?
        .ok_or_else(|| ApiError::not_found("skill", id))
}

/// A version number from a path or a body: a positive integer (`"2"` or
/// `2`), or `latest` (the skill's latest).
pub(crate) fn version_number(value: &str, skill: &SkillRow, param: &str) -> ApiResult<u32> {
    if value == "latest" {
        return Ok(skill.latest_version);
    }
    value.parse::<u32>().ok().filter(|v| *v > 0).ok_or_else(|| {
        ApiError::invalid(
            param,
            format!("{value:?} is not a version: use a positive integer or 'latest'"),
        )
    })
}

/// The skill's version `version`, or 404.
pub(crate) async fn owned_version(
    state: &AppState,
    project: &Project,
    skill: &SkillRow,
    version: u32,
) -> ApiResult<SkillVersionRow> {
    let (owner, key) = (project.0.clone(), skill.id.clone());
    state
        .db(move |s| s.skill_version(&owner, &key, version))
        .await?
        .ok_or_else(|| ApiError::not_found("skill version", &version.to_string()))
}

/// A skill a container gets: where it goes and what the model is told.
#[derive(Debug, Clone)]
pub(crate) struct Mounted {
    pub bundle: Bundle,
    /// `skill_…` and its version, for a reference; `None` inline.
    pub source: Option<(String, u32)>,
}

impl Mounted {
    pub fn path(&self) -> String {
        format!("{SKILLS_PATH}/{}", self.bundle.manifest.name)
    }

    /// How the container's row keeps it (no bundle bytes).
    pub fn summary(&self) -> MountedSkill {
        MountedSkill {
            name: self.bundle.manifest.name.clone(),
            description: self.bundle.manifest.description.clone(),
            path: self.path(),
            skill_id: self.source.as_ref().map(|(id, _)| id.clone()),
            version: self.source.as_ref().map(|(_, v)| v.to_string()),
        }
    }
}

/// Resolves a create request's `skills` (references to this project's
/// skills, or inline zips): each checked whole, names unique. A malformed
/// entry is a 400 naming it.
pub(crate) async fn resolve(
    state: &Arc<AppState>,
    project: &str,
    skills: &[Value],
    param: &str,
) -> ApiResult<Vec<Mounted>> {
    if skills.len() > MAX_SKILLS_PER_CONTAINER {
        return Err(ApiError::invalid(
            param,
            format!("at most {MAX_SKILLS_PER_CONTAINER} skills"),
        ));
    }
    let mut mounted: Vec<Mounted> = Vec::with_capacity(skills.len());
    for (index, entry) in skills.iter().enumerate() {
        let at = format!("{param}[{index}]");
        let entry: SkillEntry = shellgate_wire::param::parse(entry)
            .map_err(|error| ApiError::invalid(format!("{at}.{}", error.param), error.message))?;
        let one = match entry {
            SkillEntry::SkillReference(entry) => reference(state, project, entry, &at).await?,
            SkillEntry::Inline(entry) => {
                let inline = inline(entry, &at).await?;
                guard_bundle(state, project, &inline.bundle)?;
                inline
            }
        };
        if mounted
            .iter()
            .any(|m| m.bundle.manifest.name == one.bundle.manifest.name)
        {
            return Err(ApiError::invalid(
                at,
                format!(
                    "two skills are named {:?}: a container's skills need distinct names",
                    one.bundle.manifest.name
                ),
            ));
        }
        mounted.push(one);
        let total: u64 = mounted.iter().map(|m| m.bundle.bytes()).sum();
        if total > MAX_SKILL_BYTES_PER_CONTAINER {
            return Err(ApiError::invalid(
                param,
                format!(
                    "the skills hold more than {} MiB together; a container takes at most that",
                    MAX_SKILL_BYTES_PER_CONTAINER >> 20
                ),
            ));
        }
    }
    Ok(mounted)
}

async fn reference(
    state: &Arc<AppState>,
    project: &str,
    entry: SkillReference,
    at: &str,
) -> ApiResult<Mounted> {
    let SkillReference { skill_id, version } = entry;
    if let Some(curated) = shellgate_skills::Curated::find(&skill_id) {
        return curated_reference(curated, version.as_ref(), at).await;
    }
    let project_key = Project(project.to_owned());
    let skill = owned_skill(state, &project_key, &skill_id)
        .await
        .map_err(|_| {
            ApiError::invalid(format!("{at}.skill_id"), format!("no skill {skill_id:?}"))
        })?;
    let version = match version.as_ref().map(|v| v.text().ok_or(v)) {
        None => skill.default_version,
        Some(Ok(text)) => version_number(&text, &skill, &format!("{at}.version"))?,
        Some(Err(_)) => {
            return Err(ApiError::invalid(
                format!("{at}.version"),
                "version is a positive integer or 'latest'",
            ))
        }
    };
    let row = owned_version(state, &project_key, &skill, version)
        .await
        .map_err(|_| ApiError::invalid(format!("{at}.version"), format!("no version {version}")))?;
    let bytes = shellgate_objects::read_to_vec(
        state.objects.as_ref(),
        &skill_key(&row.id)?,
        max_stored_zip_bytes(),
    )
    .await
    .map_err(|e| ApiError::internal(format!("the skill's bundle: {e}")))?;
    let bundle = tokio::task::spawn_blocking(move || {
        shellgate_skills::from_zip(&bytes, &Limits::default()).map_err(bundle_error)
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))??;
    Ok(Mounted {
        bundle,
        source: Some((skill.id, version)),
    })
}

/// A skill that ships with shellgate: one version (`1`), the same in
/// every install.
async fn curated_reference(
    curated: &'static shellgate_skills::Curated,
    version: Option<&VersionRef>,
    at: &str,
) -> ApiResult<Mounted> {
    match version {
        None => {}
        Some(VersionRef::Text(v)) if v == "latest" || v == "1" => {}
        Some(VersionRef::Number(n)) if n.as_u64() == Some(1) => {}
        Some(other) => {
            return Err(ApiError::invalid(
                format!("{at}.version"),
                format!(
                    "{} has one version, 1 (or 'latest'), not {other}",
                    curated.id
                ),
            ))
        }
    }
    let bundle = tokio::task::spawn_blocking(|| curated.bundle())
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::internal(format!("the curated skill {}: {e}", curated.id)))?;
    Ok(Mounted {
        bundle,
        source: Some((curated.id.to_owned(), 1)),
    })
}

/// An inline skill (its fields checked as it was read): its zip decoded
/// and checked whole.
async fn inline(entry: InlineSkill, at: &str) -> ApiResult<Mounted> {
    let data = entry.source.data;
    let at = at.to_owned();
    let bundle = tokio::task::spawn_blocking(move || {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|e| {
                ApiError::invalid(format!("{at}.source.data"), format!("not base64: {e}"))
            })?;
        shellgate_skills::from_zip(&bytes, &Limits::default()).map_err(|e| {
            ApiError::invalid(
                format!("{at}.source.data"),
                format!("Invalid skill bundle: {e}"),
            )
        })
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))??;
    // The bundle's own manifest names the skill (what the model is told
    // matches what is in the container).
    Ok(Mounted {
        bundle,
        source: None,
    })
}

/// Unpacks a container's skills into `dir` (a folder per skill), for the
/// engine to bind read-only at [`SKILLS_PATH`].
pub(crate) async fn unpack(mounted: &[Mounted], dir: PathBuf) -> ApiResult<()> {
    let bundles: Vec<Bundle> = mounted.iter().map(|m| m.bundle.clone()).collect();
    tokio::task::spawn_blocking(move || {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        for bundle in &bundles {
            bundle.unpack(&dir.join(&bundle.manifest.name))?;
        }
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(|e| ApiError::internal(format!("cannot unpack the container's skills: {e}")))
}
