//! `/v1/skills`: skills and their versions, as OpenAI's Skills API; and the
//! skills a container gets (by reference or inline), unpacked read-only.
//!
//! A version's bundle is checked whole (see `shellgate_skills::bundle`)
//! before anything is stored; it is kept as a normalized zip in the object
//! store (`skills/<version id>.zip`), beside the Files API's blobs. Zip work
//! runs on blocking threads.

use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Multipart, Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use serde_json::Value;
use shellgate_skills::{Bundle, Limits};
use shellgate_store::{SkillRow, SkillVersionDelete, SkillVersionRow};
use shellgate_wire::new_id;
use shellgate_wire::{
    Deleted, InlineSkill, List, MountedSkill, Skill, SkillEntry, SkillReference, SkillVersion,
    SkillVersionDeleted, UpdateSkill, VersionRef,
};

use crate::blobs::skill_key;
use crate::error::{ApiError, ApiResult};
use crate::http::multipart_error;
use crate::http::{ApiJson, ApiQuery, ListParams, Project};
use crate::state::AppState;
use crate::time::now;

/// Largest upload of one version (all parts together, or the zip).
const MAX_UPLOAD_BYTES: usize = 64 << 20;
/// Most skills one container may get.
const MAX_SKILLS_PER_CONTAINER: usize = 200;
/// Most bytes of skills (unpacked) one container may get: they live on the
/// host's disk beside the container's, outside its disk quota.
const MAX_SKILL_BYTES_PER_CONTAINER: u64 = 256 << 20;
/// Where a container's skills are, one folder per skill.
pub const SKILLS_PATH: &str = "/mnt/skills";

fn skill_object(row: &SkillRow) -> Skill {
    Skill {
        id: row.id.clone(),
        object: "skill".to_owned(),
        name: row.name.clone(),
        description: row.description.clone(),
        created_at: row.created_at,
        default_version: row.default_version.to_string(),
        latest_version: row.latest_version.to_string(),
    }
}

fn version_object(row: &SkillVersionRow) -> SkillVersion {
    SkillVersion {
        object: "skill.version".to_owned(),
        id: row.id.clone(),
        skill_id: row.skill_id.clone(),
        version: row.version.to_string(),
        created_at: row.created_at,
        name: row.name.clone(),
        description: row.description.clone(),
    }
}

/// Most bytes a stored bundle's zip is read with: the normalized zip of a
/// bundle within the limits is far smaller (deflated, a header a file).
fn max_stored_zip_bytes() -> u64 {
    2 * Limits::default().max_total_bytes + (1 << 20)
}

fn bundle_error(error: shellgate_skills::BundleError) -> ApiError {
    ApiError::invalid("files", format!("Invalid skill bundle: {error}"))
}

/// A multipart upload: one zip (`files`) or a directory (`files[]` parts
/// named by their path), and the other fields.
struct Upload {
    parts: Vec<(String, Vec<u8>)>,
    fields: Vec<(String, String)>,
}

async fn read_upload(
    multipart: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> ApiResult<Upload> {
    let mut multipart = multipart.map_err(|e| {
        ApiError::unsupported_media_type(format!(
            "Send the skill as multipart/form-data with `files`: {}",
            e.body_text()
        ))
    })?;
    let mut upload = Upload {
        parts: Vec::new(),
        fields: Vec::new(),
    };
    let mut total = 0usize;
    while let Some(mut field) = multipart.next_field().await.map_err(multipart_error)? {
        let name = field.name().unwrap_or_default().to_owned();
        if name == "files" || name == "files[]" {
            let path = field.file_name().unwrap_or_default().to_owned();
            let mut bytes = Vec::new();
            while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
                total += chunk.len();
                if total > MAX_UPLOAD_BYTES {
                    return Err(ApiError::too_large(format!(
                        "A skill upload may be at most {MAX_UPLOAD_BYTES} bytes."
                    )));
                }
                bytes.extend_from_slice(&chunk);
            }
            upload.parts.push((path, bytes));
        } else {
            let value = field.text().await.map_err(multipart_error)?;
            upload.fields.push((name, value));
        }
        if upload.parts.len() > Limits::default().max_files {
            return Err(ApiError::invalid(
                "files",
                format!("at most {} files", Limits::default().max_files),
            ));
        }
    }
    Ok(upload)
}

/// Checks an upload into a bundle (off the async workers).
async fn bundle_of(upload: Vec<(String, Vec<u8>)>) -> ApiResult<Bundle> {
    tokio::task::spawn_blocking(move || {
        let limits = Limits::default();
        match upload.as_slice() {
            [] => Err(ApiError::invalid("files", "a `files` field is required")),
            [(_, bytes)] if bytes.starts_with(b"PK") => {
                shellgate_skills::from_zip(bytes, &limits).map_err(bundle_error)
            }
            _ => shellgate_skills::from_files(upload, &limits).map_err(bundle_error),
        }
    })
    .await
    .map_err(|e| ApiError::internal(format!("the bundle reader failed: {e}")))?
}

/// Checks what a model reads of a skill (its description, listed in the
/// shell tool's description, and its `SKILL.md`) against the project's
/// input rules. A bundle is not rewritten: a redaction refuses it (403) as
/// a block does; a flag is logged.
fn guard_bundle(state: &AppState, project: &str, bundle: &Bundle) -> ApiResult<()> {
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

/// Writes a version's normalized zip (an object only once complete); the
/// bundle comes back with its size (zipped off the async workers).
async fn store_blob(
    state: &AppState,
    version_id: &str,
    bundle: Bundle,
) -> ApiResult<(u64, Bundle)> {
    let (zip, bundle) = tokio::task::spawn_blocking(move || (bundle.to_zip(), bundle))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    shellgate_objects::put_bytes(state.objects.as_ref(), &skill_key(version_id)?, zip)
        .await
        .map_err(|e| ApiError::internal(format!("cannot store the skill: {e}")))?;
    Ok((bundle.bytes(), bundle))
}

/// Removes versions' blobs (after their rows are gone: one that cannot be
/// removed is an orphan, never a version the API shows).
async fn remove_blobs(state: &AppState, ids: Vec<String>) {
    for id in ids {
        let removed = match skill_key(&id) {
            Ok(key) => state.objects.delete(&key).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.message),
        };
        if let Err(e) = removed {
            tracing::warn!(version = %id, "could not remove the skill's bundle: {e}");
        }
    }
}

fn version_row(
    bundle: &Bundle,
    id: String,
    skill_id: &str,
    project: &str,
    bytes: u64,
) -> SkillVersionRow {
    SkillVersionRow {
        id,
        skill_id: skill_id.to_owned(),
        project: project.to_owned(),
        version: 1,
        name: bundle.manifest.name.clone(),
        description: bundle.manifest.description.clone(),
        created_at: now(),
        bytes,
    }
}

/// `POST /v1/skills`.
pub async fn create(
    State(state): State<Arc<AppState>>,
    project: Project,
    multipart: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> ApiResult<Json<Skill>> {
    let upload = read_upload(multipart).await?;
    let bundle = bundle_of(upload.parts).await?;
    guard_bundle(&state, &project.0, &bundle)?;
    // From here on the skill is stored whole or not at all, even if the
    // client hangs up.
    crate::http::to_completion(async move {
        let skill_id = new_id("skill_");
        let version_id = new_id("skillver_");
        let (bytes, bundle) = store_blob(&state, &version_id, bundle).await?;
        let version = version_row(&bundle, version_id.clone(), &skill_id, &project.0, bytes);
        let skill = SkillRow {
            id: skill_id,
            project: project.0.clone(),
            name: version.name.clone(),
            description: version.description.clone(),
            created_at: version.created_at,
            default_version: 1,
            latest_version: 1,
        };
        let (row, inserted) = (skill.clone(), version);
        if let Err(e) = state.db(move |s| s.insert_skill(&row, &inserted)).await {
            remove_blobs(&state, vec![version_id]).await;
            return Err(e);
        }
        Ok(Json(skill_object(&skill)))
    })
    .await
}

async fn owned_skill(state: &AppState, project: &Project, id: &str) -> ApiResult<SkillRow> {
    let (owner, key) = (project.0.clone(), id.to_owned());
    state
        .db(move |s| s.skill(&owner, &key))
        .await?
        .ok_or_else(|| ApiError::not_found("skill", id))
}

pub async fn list(
    State(state): State<Arc<AppState>>,
    project: Project,
    ApiQuery(params): ApiQuery<ListParams>,
) -> ApiResult<Json<List<Skill>>> {
    let page = params.page()?;
    let owner = project.0.clone();
    let (rows, has_more) = state.db(move |s| s.list_skills(&owner, &page)).await?;
    let data = rows.iter().map(skill_object).collect();
    Ok(Json(List::page(data, has_more, |skill: &Skill| {
        skill.id.clone()
    })))
}

pub async fn retrieve(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
) -> ApiResult<Json<Skill>> {
    Ok(Json(skill_object(
        &owned_skill(&state, &project, &id).await?,
    )))
}

/// A version number from a path or a body: a positive integer (`"2"` or
/// `2`), or `latest` (the skill's latest).
fn version_number(value: &str, skill: &SkillRow, param: &str) -> ApiResult<u32> {
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

/// `POST /v1/skills/{id}`: `{"default_version": "2"}`.
pub async fn update(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<Json<Skill>> {
    let skill = owned_skill(&state, &project, &id).await?;
    let required = || {
        ApiError::invalid(
            "default_version",
            "default_version (a version number) is required",
        )
    };
    // A body that is not an object has no default_version either.
    let body: UpdateSkill = shellgate_wire::param::parse(&body).map_err(|_| required())?;
    let requested = body
        .default_version
        .as_ref()
        .and_then(VersionRef::text)
        .ok_or_else(required)?;
    if !body.other.is_empty() {
        return Err(ApiError::invalid(
            "default_version",
            "only default_version may be changed",
        ));
    }
    let version = version_number(&requested, &skill, "default_version")?;
    let owner = project.0.clone();
    let updated = state
        .db(move |s| s.set_default_skill_version(&owner, &id, version))
        .await?
        .ok_or_else(|| ApiError::invalid("default_version", format!("no version {version}")))?;
    Ok(Json(skill_object(&updated)))
}

pub async fn delete(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
) -> ApiResult<Json<Deleted>> {
    crate::http::to_completion(async move {
        let (owner, key) = (project.0.clone(), id.clone());
        let versions = state
            .db(move |s| s.delete_skill(&owner, &key))
            .await?
            .ok_or_else(|| ApiError::not_found("skill", &id))?;
        remove_blobs(&state, versions).await;
        Ok(Json(Deleted::new(id, "skill.deleted")))
    })
    .await
}

async fn zip_response(state: &AppState, version: &SkillVersionRow) -> ApiResult<Response> {
    let object = state
        .objects
        .get(&skill_key(&version.id)?)
        .await
        .map_err(|e| ApiError::internal(format!("the skill's bundle is missing: {e}")))?;
    Ok((
        [
            (header::CONTENT_TYPE, "application/zip".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{}.zip\"", version.name),
            ),
            (header::CONTENT_LENGTH, object.size.to_string()),
        ],
        Body::from_stream(object.body),
    )
        .into_response())
}

async fn owned_version(
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

/// `GET /v1/skills/{id}/content`: the default version's zip.
pub async fn content(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let skill = owned_skill(&state, &project, &id).await?;
    let version = owned_version(&state, &project, &skill, skill.default_version).await?;
    zip_response(&state, &version).await
}

/// `POST /v1/skills/{id}/versions`: `files` and an optional `default`.
pub async fn create_version(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    multipart: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> ApiResult<Json<SkillVersion>> {
    owned_skill(&state, &project, &id).await?;
    let upload = read_upload(multipart).await?;
    let default = match upload.fields.iter().find(|(n, _)| n == "default") {
        None => false,
        Some((_, value)) => match value.trim() {
            "true" | "1" => true,
            "false" | "0" => false,
            other => {
                return Err(ApiError::invalid(
                    "default",
                    format!("default must be true or false, not {other:?}"),
                ))
            }
        },
    };
    let bundle = bundle_of(upload.parts).await?;
    guard_bundle(&state, &project.0, &bundle)?;
    crate::http::to_completion(async move {
        let version_id = new_id("skillver_");
        let (bytes, bundle) = store_blob(&state, &version_id, bundle).await?;
        let mut row = version_row(&bundle, version_id.clone(), &id, &project.0, bytes);
        let owner = project.0.clone();
        let added = state
            .db(move |s| {
                let skill = s.add_skill_version(&owner, &mut row, default)?;
                Ok(skill.map(|_| row))
            })
            .await;
        match added {
            Ok(Some(row)) => Ok(Json(version_object(&row))),
            Ok(None) => {
                remove_blobs(&state, vec![version_id]).await;
                Err(ApiError::not_found("skill", &id))
            }
            Err(e) => {
                remove_blobs(&state, vec![version_id]).await;
                Err(e)
            }
        }
    })
    .await
}

pub async fn list_versions(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    ApiQuery(params): ApiQuery<ListParams>,
) -> ApiResult<Json<List<SkillVersion>>> {
    owned_skill(&state, &project, &id).await?;
    let page = params.page()?;
    let (rows, has_more) = state.db(move |s| s.list_skill_versions(&id, &page)).await?;
    let data = rows.iter().map(version_object).collect();
    Ok(Json(List::page(
        data,
        has_more,
        |version: &SkillVersion| version.id.clone(),
    )))
}

pub async fn retrieve_version(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path((id, version)): Path<(String, String)>,
) -> ApiResult<Json<SkillVersion>> {
    let skill = owned_skill(&state, &project, &id).await?;
    let number = version_number(&version, &skill, "version")?;
    Ok(Json(version_object(
        &owned_version(&state, &project, &skill, number).await?,
    )))
}

pub async fn version_content(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path((id, version)): Path<(String, String)>,
) -> ApiResult<Response> {
    let skill = owned_skill(&state, &project, &id).await?;
    let number = version_number(&version, &skill, "version")?;
    let row = owned_version(&state, &project, &skill, number).await?;
    zip_response(&state, &row).await
}

pub async fn delete_version(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path((id, version)): Path<(String, String)>,
) -> ApiResult<Json<SkillVersionDeleted>> {
    let skill = owned_skill(&state, &project, &id).await?;
    let number = version_number(&version, &skill, "version")?;
    let owner = project.0.clone();
    let deleted = state
        .db(move |s| s.delete_skill_version(&owner, &id, number))
        .await?;
    match deleted {
        Ok(row) => {
            // The row is gone: a hang-up now must not keep the blob.
            let (state, blob) = (Arc::clone(&state), row.id.clone());
            tokio::spawn(async move { remove_blobs(&state, vec![blob]).await });
            Ok(Json(SkillVersionDeleted {
                object: "skill.version.deleted".to_owned(),
                deleted: true,
                id: row.id,
                version: row.version.to_string(),
            }))
        }
        Err(SkillVersionDelete::NotFound) => {
            Err(ApiError::not_found("skill version", &number.to_string()))
        }
        Err(SkillVersionDelete::IsDefault) => Err(ApiError::invalid(
            "version",
            format!(
                "version {number} is the skill's default: make another version the default \
                 first, or delete the skill"
            ),
        )),
    }
}

// --- a container's skills ---------------------------------------------------

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
