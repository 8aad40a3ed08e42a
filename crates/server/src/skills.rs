//! `/v1/skills`: skills and their versions, as OpenAI's Skills API (the
//! skills a container gets are the sandbox service's: `sandboxes::skills`);
//! to an Anthropic client ([`crate::error::anthropic_client`]) the skills
//! themselves in Anthropic's shapes (`display_name`, `latest_version_id`,
//! `source`, RFC 3339 times, pages with `next_page`, `skill_deleted`),
//! the project's as `custom` and the curated ones as `anthropic`.
//!
//! A version's bundle is checked whole (see `shellgate_skills::bundle`)
//! before anything is stored; it is kept as a normalized zip in the object
//! store (`skills/<version id>.zip`), beside the Files API's blobs. Zip work
//! runs on blocking threads.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Multipart, Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;
use shellgate_skills::{Bundle, Limits};
use shellgate_store::{SkillRow, SkillVersionDelete, SkillVersionRow};
use shellgate_wire::new_id;
use shellgate_wire::{
    AnthropicSkill, AnthropicSkillDeleted, AnthropicSkillList, AnthropicSkillSource,
    AnthropicSkillVersion, AnthropicSkillVersionDeleted, AnthropicSkillVersionList,
    AnthropicSkillVersionsQuery, AnthropicSkillsQuery, Deleted, List, Skill, SkillVersion,
    SkillVersionDeleted, UpdateSkill, VersionRef,
};

use crate::anthropic_pages::AnthropicPage;
use crate::blobs::skill_key;
use crate::error::{anthropic_client, ApiError, ApiResult};
use crate::http::multipart_error;
use crate::http::{ApiJson, ListParams, Project};
use crate::sandboxes::skills::{
    bundle_error, guard_bundle, owned_skill, owned_version, version_number,
};
use crate::state::AppState;
use crate::time::now;

/// Largest upload of one version (all parts together, or the zip).
const MAX_UPLOAD_BYTES: usize = 64 << 20;

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

/// A project's skill in Anthropic's shape: its latest version's id and
/// time come from that version's row.
async fn anthropic_skill(
    state: &AppState,
    project: &Project,
    row: &SkillRow,
) -> ApiResult<AnthropicSkill> {
    let latest = owned_version(state, project, row, row.latest_version).await?;
    Ok(AnthropicSkill {
        id: row.id.clone(),
        kind: "skill".to_owned(),
        display_name: row.name.clone(),
        latest_version_id: latest.id,
        latest_version: row.latest_version.to_string(),
        source: AnthropicSkillSource {
            kind: "custom".to_owned(),
        },
        created_at: shellgate_wire::time::rfc3339(row.created_at),
        updated_at: shellgate_wire::time::rfc3339(latest.created_at.max(row.created_at)),
    })
}

/// A curated skill in Anthropic's shape (source `anthropic`): one
/// version, `1`, its id the skill's own; it has no time of its own (the
/// epoch).
fn anthropic_curated(curated: &shellgate_skills::Curated) -> AnthropicSkill {
    let epoch = shellgate_wire::time::rfc3339(0);
    AnthropicSkill {
        id: curated.id.to_owned(),
        kind: "skill".to_owned(),
        display_name: curated.folder.to_owned(),
        latest_version_id: curated.id.to_owned(),
        latest_version: "1".to_owned(),
        source: AnthropicSkillSource {
            kind: "anthropic".to_owned(),
        },
        created_at: epoch.clone(),
        updated_at: epoch,
    }
}

/// A project's skill version in Anthropic's shape.
fn anthropic_version(row: &SkillVersionRow) -> AnthropicSkillVersion {
    AnthropicSkillVersion {
        id: row.id.clone(),
        kind: "skill_version".to_owned(),
        skill_id: row.skill_id.clone(),
        version: row.version.to_string(),
        name: row.name.clone(),
        description: row.description.clone(),
        created_at: shellgate_wire::time::rfc3339(row.created_at),
    }
}

/// A curated skill's one version in Anthropic's shape (as
/// [`anthropic_curated`] names it: the skill's id, `1`, the epoch).
fn anthropic_curated_version(
    curated: &shellgate_skills::Curated,
) -> ApiResult<AnthropicSkillVersion> {
    let bundle = curated
        .bundle()
        .map_err(|e| ApiError::internal(format!("a shipped skill is unreadable: {e}")))?;
    Ok(AnthropicSkillVersion {
        id: curated.id.to_owned(),
        kind: "skill_version".to_owned(),
        skill_id: curated.id.to_owned(),
        version: "1".to_owned(),
        name: bundle.manifest.name,
        description: bundle.manifest.description,
        created_at: shellgate_wire::time::rfc3339(0),
    })
}

/// The version a path names to an Anthropic client: its id (as
/// Anthropic's paths name versions), or a number or `latest` as to
/// OpenAI's; else a 404.
async fn anthropic_version_row(
    state: &AppState,
    project: &Project,
    skill: &SkillRow,
    value: &str,
) -> ApiResult<SkillVersionRow> {
    if value == "latest" || value.parse::<u32>().is_ok() {
        let number = version_number(value, skill, "version")?;
        return owned_version(state, project, skill, number).await;
    }
    let (owner, key, id) = (project.0.clone(), skill.id.clone(), value.to_owned());
    state
        .db(move |s| s.skill_version_by_id(&owner, &key, &id))
        .await?
        .ok_or_else(|| ApiError::not_found("skill version", value))
}

/// A curated skill's one version, if `id` names a curated skill and
/// `version` that version (its id, `1` or `latest`); a curated skill's
/// other version is a 404.
fn curated_version(id: &str, version: &str) -> Option<ApiResult<AnthropicSkillVersion>> {
    let curated = shellgate_skills::Curated::find(id)?;
    Some(if [curated.id, "1", "latest"].contains(&version) {
        anthropic_curated_version(curated)
    } else {
        Err(ApiError::not_found("skill version", version))
    })
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
    headers: HeaderMap,
    multipart: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> ApiResult<Response> {
    let anthropic = anthropic_client(&headers);
    let upload = read_upload(multipart).await?;
    let display_name = upload
        .fields
        .iter()
        .find(|(name, _)| name == "display_name")
        .map(|(_, value)| value.clone());
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
        if !anthropic {
            return Ok(Json(skill_object(&skill)).into_response());
        }
        let mut response = Json(anthropic_skill(&state, &project, &skill).await?).into_response();
        // A skill's display name is its `SKILL.md`'s name: another one
        // asked is not kept, and said so.
        if display_name.is_some_and(|asked| asked != skill.name) {
            response.headers_mut().insert(
                crate::uncarried::HEADER,
                HeaderValue::from_static("display_name"),
            );
        }
        Ok(response)
    })
    .await
}

pub async fn list(
    State(state): State<Arc<AppState>>,
    project: Project,
    headers: HeaderMap,
    uri: Uri,
) -> ApiResult<Response> {
    let invalid_query = |e: axum::extract::rejection::QueryRejection| {
        ApiError::bad_request(format!("Invalid query: {}", e.body_text()))
    };
    if anthropic_client(&headers) {
        let Query(query) =
            Query::<AnthropicSkillsQuery>::try_from_uri(&uri).map_err(invalid_query)?;
        return Ok(Json(anthropic_list(&state, &project, query).await?).into_response());
    }
    let Query(params) = Query::<ListParams>::try_from_uri(&uri).map_err(invalid_query)?;
    let page = params.page()?;
    let owner = project.0.clone();
    let (rows, has_more) = state.db(move |s| s.list_skills(&owner, &page)).await?;
    let data = rows.iter().map(skill_object).collect();
    Ok(Json(List::page(data, has_more, |skill: &Skill| skill.id.clone())).into_response())
}

/// One of Anthropic's pages of skills: the project's (`source` `custom`,
/// the default), paged as files are; or the curated ones (`anthropic`),
/// one page.
async fn anthropic_list(
    state: &AppState,
    project: &Project,
    query: AnthropicSkillsQuery,
) -> ApiResult<AnthropicSkillList> {
    let paging = AnthropicPage::read(
        query.limit.as_deref(),
        query.page.as_deref(),
        query.after_id,
        query.before_id,
    )?;
    match query.source.as_deref() {
        None | Some("custom") => {}
        Some("anthropic") => {
            let data: Vec<AnthropicSkill> = shellgate_skills::CURATED
                .iter()
                .map(anthropic_curated)
                .collect();
            let (first_id, last_id, next_page) = paging.ends(&data, |s| s.id.clone(), false);
            return Ok(AnthropicSkillList {
                data,
                has_more: false,
                first_id,
                last_id,
                next_page,
            });
        }
        Some(other) => {
            return Err(ApiError::invalid(
                "source",
                format!("source must be 'custom' or 'anthropic', not {other:?}"),
            ))
        }
    }
    let owner = project.0.clone();
    let page = paging.page.clone();
    let (mut rows, has_more) = state.db(move |s| s.list_skills(&owner, &page)).await?;
    paging.order(&mut rows);
    let mut data = Vec::with_capacity(rows.len());
    for row in &rows {
        data.push(anthropic_skill(state, project, row).await?);
    }
    let (first_id, last_id, next_page) = paging.ends(&data, |s| s.id.clone(), has_more);
    Ok(AnthropicSkillList {
        data,
        has_more,
        first_id,
        last_id,
        next_page,
    })
}

pub async fn retrieve(
    State(state): State<Arc<AppState>>,
    project: Project,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    if anthropic_client(&headers) {
        if let Some(curated) = shellgate_skills::Curated::find(&id) {
            return Ok(Json(anthropic_curated(curated)).into_response());
        }
        let row = owned_skill(&state, &project, &id).await?;
        return Ok(Json(anthropic_skill(&state, &project, &row).await?).into_response());
    }
    Ok(Json(skill_object(&owned_skill(&state, &project, &id).await?)).into_response())
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
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let anthropic = anthropic_client(&headers);
    crate::http::to_completion(async move {
        let (owner, key) = (project.0.clone(), id.clone());
        let versions = state
            .db(move |s| s.delete_skill(&owner, &key))
            .await?
            .ok_or_else(|| ApiError::not_found("skill", &id))?;
        remove_blobs(&state, versions).await;
        if anthropic {
            return Ok(Json(AnthropicSkillDeleted {
                id,
                kind: "skill_deleted".to_owned(),
            })
            .into_response());
        }
        Ok(Json(Deleted::new(id, "skill.deleted")).into_response())
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
/// An Anthropic client's new version is the default unless it says
/// otherwise (Anthropic's skills have no default: the latest is the one).
pub async fn create_version(
    State(state): State<Arc<AppState>>,
    project: Project,
    headers: HeaderMap,
    Path(id): Path<String>,
    multipart: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> ApiResult<Response> {
    let anthropic = anthropic_client(&headers);
    owned_skill(&state, &project, &id).await?;
    let upload = read_upload(multipart).await?;
    let default = match upload.fields.iter().find(|(n, _)| n == "default") {
        None => anthropic,
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
            Ok(Some(row)) if anthropic => Ok(Json(anthropic_version(&row)).into_response()),
            Ok(Some(row)) => Ok(Json(version_object(&row)).into_response()),
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
    headers: HeaderMap,
    Path(id): Path<String>,
    uri: Uri,
) -> ApiResult<Response> {
    let invalid_query = |e: axum::extract::rejection::QueryRejection| {
        ApiError::bad_request(format!("Invalid query: {}", e.body_text()))
    };
    if anthropic_client(&headers) {
        let Query(query) =
            Query::<AnthropicSkillVersionsQuery>::try_from_uri(&uri).map_err(invalid_query)?;
        return Ok(Json(anthropic_versions(&state, &project, &id, query).await?).into_response());
    }
    let Query(params) = Query::<ListParams>::try_from_uri(&uri).map_err(invalid_query)?;
    owned_skill(&state, &project, &id).await?;
    let page = params.page()?;
    let (rows, has_more) = state.db(move |s| s.list_skill_versions(&id, &page)).await?;
    let data = rows.iter().map(version_object).collect();
    Ok(Json(List::page(data, has_more, |version: &SkillVersion| {
        version.id.clone()
    }))
    .into_response())
}

/// One of Anthropic's pages of a skill's versions, newest first (a
/// curated skill's one version, one page).
async fn anthropic_versions(
    state: &AppState,
    project: &Project,
    id: &str,
    query: AnthropicSkillVersionsQuery,
) -> ApiResult<AnthropicSkillVersionList> {
    let paging = AnthropicPage::read(
        query.limit.as_deref(),
        query.page.as_deref(),
        query.after_id,
        query.before_id,
    )?;
    if let Some(curated) = shellgate_skills::Curated::find(id) {
        let data = vec![anthropic_curated_version(curated)?];
        let (first_id, last_id, next_page) = paging.ends(&data, |v| v.id.clone(), false);
        return Ok(AnthropicSkillVersionList {
            data,
            has_more: false,
            first_id,
            last_id,
            next_page,
        });
    }
    owned_skill(state, project, id).await?;
    let (key, page) = (id.to_owned(), paging.page.clone());
    let (mut rows, has_more) = state
        .db(move |s| s.list_skill_versions(&key, &page))
        .await?;
    paging.order(&mut rows);
    let data: Vec<AnthropicSkillVersion> = rows.iter().map(anthropic_version).collect();
    let (first_id, last_id, next_page) = paging.ends(&data, |v| v.id.clone(), has_more);
    Ok(AnthropicSkillVersionList {
        data,
        has_more,
        first_id,
        last_id,
        next_page,
    })
}

pub async fn retrieve_version(
    State(state): State<Arc<AppState>>,
    project: Project,
    headers: HeaderMap,
    Path((id, version)): Path<(String, String)>,
) -> ApiResult<Response> {
    if anthropic_client(&headers) {
        if let Some(curated) = curated_version(&id, &version) {
            return Ok(Json(curated?).into_response());
        }
        let skill = owned_skill(&state, &project, &id).await?;
        let row = anthropic_version_row(&state, &project, &skill, &version).await?;
        return Ok(Json(anthropic_version(&row)).into_response());
    }
    let skill = owned_skill(&state, &project, &id).await?;
    let number = version_number(&version, &skill, "version")?;
    Ok(Json(version_object(
        &owned_version(&state, &project, &skill, number).await?,
    ))
    .into_response())
}

pub async fn version_content(
    State(state): State<Arc<AppState>>,
    project: Project,
    headers: HeaderMap,
    Path((id, version)): Path<(String, String)>,
) -> ApiResult<Response> {
    let skill = owned_skill(&state, &project, &id).await?;
    let row = if anthropic_client(&headers) {
        anthropic_version_row(&state, &project, &skill, &version).await?
    } else {
        let number = version_number(&version, &skill, "version")?;
        owned_version(&state, &project, &skill, number).await?
    };
    zip_response(&state, &row).await
}

/// `DELETE /v1/skills/{id}/versions/{version}`: not the default version
/// (to an Anthropic client, the latest unless another was made the
/// default), which goes with the skill.
pub async fn delete_version(
    State(state): State<Arc<AppState>>,
    project: Project,
    headers: HeaderMap,
    Path((id, version)): Path<(String, String)>,
) -> ApiResult<Response> {
    let anthropic = anthropic_client(&headers);
    let skill = owned_skill(&state, &project, &id).await?;
    let number = if anthropic {
        anthropic_version_row(&state, &project, &skill, &version)
            .await?
            .version
    } else {
        version_number(&version, &skill, "version")?
    };
    let owner = project.0.clone();
    let deleted = state
        .db(move |s| s.delete_skill_version(&owner, &id, number))
        .await?;
    match deleted {
        Ok(row) => {
            // The row is gone: a hang-up now must not keep the blob.
            let (state, blob) = (Arc::clone(&state), row.id.clone());
            tokio::spawn(async move { remove_blobs(&state, vec![blob]).await });
            if anthropic {
                return Ok(Json(AnthropicSkillVersionDeleted {
                    id: row.id,
                    kind: "skill_version_deleted".to_owned(),
                })
                .into_response());
            }
            Ok(Json(SkillVersionDeleted {
                object: "skill.version.deleted".to_owned(),
                deleted: true,
                id: row.id,
                version: row.version.to_string(),
            })
            .into_response())
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
