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

/// Adds `skills` (a request's entries, read as [`resolve`] reads them, 400s
/// naming `param`) to the existing container `id`, which holds `held`, and
/// answers the skills it holds after. Each is unpacked into the host directory the container
/// sees at [`SKILLS_PATH`] (a bind, so a running container sees it at
/// once, and its processes and Python state stay); one already there from
/// the same skill at the same version is kept as it is, one of the same
/// name otherwise replaced whole, and the container's other skills stay.
///
/// `Ok(None)`: the container was made without skills, so nothing is bound
/// at [`SKILLS_PATH`] to unpack into; nothing is changed.
pub(crate) async fn add_to_container(
    state: &Arc<AppState>,
    project: &str,
    id: &str,
    held: Vec<MountedSkill>,
    skills: &[Value],
    param: &str,
) -> ApiResult<Option<Vec<MountedSkill>>> {
    let asked = resolve(state, project, skills, param).await?;
    let added: Vec<Mounted> = asked
        .into_iter()
        .filter(|skill| !held.iter().any(|h| same_version(h, &skill.summary())))
        .collect();
    if added.is_empty() {
        return Ok(Some(held));
    }
    let Some(dir) = state.engine.inspect(id).await?.spec.skills else {
        return Ok(None);
    };
    let replaced = |name: &str| added.iter().any(|m| m.bundle.manifest.name == name);
    let mut after: Vec<MountedSkill> = held.into_iter().filter(|h| !replaced(&h.name)).collect();
    let kept: Vec<String> = after.iter().map(|h| h.name.clone()).collect();
    after.extend(added.iter().map(Mounted::summary));
    if after.len() > MAX_SKILLS_PER_CONTAINER {
        return Err(ApiError::invalid(
            param,
            format!("a container holds at most {MAX_SKILLS_PER_CONTAINER} skills"),
        ));
    }
    let bundles: Vec<Bundle> = added.iter().map(|m| m.bundle.clone()).collect();
    let at = param.to_owned();
    tokio::task::spawn_blocking(move || unpack_into(&dir, &kept, &bundles, &at))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??;
    let listed = serde_json::to_string(&after).map_err(|e| ApiError::internal(e.to_string()))?;
    let id = id.to_owned();
    state
        .db(move |s| s.set_container_skills(&id, &listed))
        .await?;
    Ok(Some(after))
}

/// Whether two skills are one skill's same version (an inline skill has
/// no version to compare: it is always unpacked again).
fn same_version(held: &MountedSkill, asked: &MountedSkill) -> bool {
    held.name == asked.name
        && held.skill_id.is_some()
        && held.skill_id == asked.skill_id
        && held.version == asked.version
}

/// Unpacks `bundles` into a container's bound skills directory `dir`, each
/// whole beside it first and renamed into place (a process in the
/// container never sees half a skill), one of the same name moved out and
/// removed. The skills `kept` and the new ones together stay within the
/// bytes a container's skills may hold.
fn unpack_into(
    dir: &std::path::Path,
    kept: &[String],
    bundles: &[Bundle],
    param: &str,
) -> ApiResult<()> {
    let failed = |e: std::io::Error| ApiError::internal(format!("cannot add the skills: {e}"));
    let kept_bytes: u64 = kept.iter().map(|name| tree_bytes(&dir.join(name))).sum();
    let added_bytes: u64 = bundles.iter().map(Bundle::bytes).sum();
    if kept_bytes + added_bytes > MAX_SKILL_BYTES_PER_CONTAINER {
        return Err(ApiError::invalid(
            param,
            format!(
                "the container's skills would hold more than {} MiB together; a container \
                 takes at most that",
                MAX_SKILL_BYTES_PER_CONTAINER >> 20
            ),
        ));
    }
    // Staged in the directory that holds `dir` (the container's own, on
    // the same file system, so a rename moves it), out of the container's
    // sight.
    let beside = dir.parent().unwrap_or(dir);
    for bundle in bundles {
        let name = &bundle.manifest.name;
        let staging = beside.join(shellgate_wire::new_id(".skill-adding-"));
        let outgoing = beside.join(shellgate_wire::new_id(".skill-replaced-"));
        let target = dir.join(name);
        let placed = bundle.unpack(&staging).and_then(|()| {
            match std::fs::rename(&target, &outgoing) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            std::fs::rename(&staging, &target)
        });
        let _ = std::fs::remove_dir_all(&outgoing);
        if let Err(error) = placed {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(failed(error));
        }
    }
    Ok(())
}

/// Bytes of the files under `path` (0 if it is not there).
fn tree_bytes(path: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => tree_bytes(&entry.path()),
            Ok(kind) if kind.is_file() => entry.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}
