//! `/v1/files`: upload, list, retrieve, content, delete. Blobs live in the
//! object store under their id (`files/<id>`, never a user-chosen name),
//! streamed in and out: an upload is never held in memory.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Multipart, Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use shellgate_store::FileRow;
use shellgate_wire::new_id;
use shellgate_wire::{Deleted, FileObject, List, FILE_PURPOSES};

use crate::blobs::{field_body, file_key, BodyFailure, Unrecorded};
use crate::error::{ApiError, ApiResult};
use crate::http::multipart_error;
use crate::http::{ApiQuery, ListParams, Project};
use crate::sandboxes::files::{file_object, safe_file_name};
use crate::state::AppState;
use crate::time::now;

async fn owned(state: &AppState, project: &Project, id: &str) -> ApiResult<FileRow> {
    let (owner, key) = (project.0.clone(), id.to_owned());
    state
        .db(move |s| s.file(&owner, &key))
        .await?
        .ok_or_else(|| ApiError::not_found("file", id))
}

/// Shortest and longest `expires_after.seconds` (OpenAI's bounds: an hour
/// to 30 days).
const EXPIRY_SECONDS: std::ops::RangeInclusive<i64> = 3_600..=2_592_000;

/// `expires_after[anchor]` and `expires_after[seconds]` as multipart fields.
fn expiry(anchor: Option<String>, seconds: Option<String>) -> ApiResult<Option<i64>> {
    let (anchor, seconds) = match (anchor, seconds) {
        (None, None) => return Ok(None),
        (anchor, Some(seconds)) => (anchor.unwrap_or_else(|| "created_at".into()), seconds),
        (Some(_), None) => {
            return Err(ApiError::invalid(
                "expires_after.seconds",
                "expires_after needs 'seconds'",
            ))
        }
    };
    if anchor != "created_at" {
        return Err(ApiError::invalid(
            "expires_after.anchor",
            format!("expires_after.anchor must be 'created_at', not '{anchor}'"),
        ));
    }
    match seconds.trim().parse::<i64>() {
        Ok(seconds) if EXPIRY_SECONDS.contains(&seconds) => Ok(Some(seconds)),
        _ => Err(ApiError::invalid(
            "expires_after.seconds",
            format!(
                "expires_after.seconds must be a whole number from {} to {}",
                EXPIRY_SECONDS.start(),
                EXPIRY_SECONDS.end()
            ),
        )),
    }
}

/// Deletes a file's row, then its blob (an expired file, or a delete).
pub(crate) async fn remove(state: &AppState, project: &str, id: &str) -> ApiResult<bool> {
    let (owner, key) = (project.to_owned(), id.to_owned());
    let deleted = state.db(move |s| s.delete_file(&owner, &key)).await?;
    // The row is gone: a blob that cannot be removed is an orphan, never
    // a file the API shows.
    if let Err(e) = state.objects.delete(&file_key(id)?).await {
        tracing::warn!(file = %id, "could not remove the file's blob: {e}");
    }
    Ok(deleted)
}

pub async fn upload(
    State(state): State<Arc<AppState>>,
    project: Project,
    multipart: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> ApiResult<Json<FileObject>> {
    let mut multipart = multipart.map_err(|e| {
        ApiError::unsupported_media_type(format!(
            "Send the file as multipart/form-data: {}",
            e.body_text()
        ))
    })?;
    let id = new_id("file-");
    let mut purpose = None;
    let (mut anchor, mut seconds) = (None, None);
    // The blob is streamed into the object store as it arrives, and
    // removed again unless its row is written.
    let mut stored: Option<(String, u64, Unrecorded)> = None;
    while let Some(mut field) = multipart.next_field().await.map_err(multipart_error)? {
        match field.name() {
            Some("purpose") => purpose = Some(field.text().await.map_err(multipart_error)?),
            Some("expires_after[anchor]") => {
                anchor = Some(field.text().await.map_err(multipart_error)?)
            }
            Some("expires_after[seconds]") => {
                seconds = Some(field.text().await.map_err(multipart_error)?)
            }
            Some("file") if stored.is_none() => {
                let name = safe_file_name(field.file_name().unwrap_or("upload"));
                let key = file_key(&id)?;
                let failure = BodyFailure::default();
                let cap = state.config.server.max_upload_bytes as u64;
                let bytes = state
                    .objects
                    .put(&key, field_body(&mut field, cap, &failure))
                    .await
                    .map_err(|e| failure.explain(e))?;
                stored = Some((name, bytes, Unrecorded::new(&state.objects, key)));
            }
            Some("file") => {
                return Err(ApiError::invalid(
                    "file",
                    "only one 'file' field may be sent",
                ))
            }
            _ => {}
        }
    }
    let purpose =
        purpose.ok_or_else(|| ApiError::invalid("purpose", "a 'purpose' field is required"))?;
    if !FILE_PURPOSES.contains(&purpose.as_str()) {
        return Err(ApiError::invalid(
            "purpose",
            format!("purpose must be one of {}", FILE_PURPOSES.join(", ")),
        ));
    }
    let expires_in = expiry(anchor, seconds)?;
    let (filename, bytes, blob) =
        stored.ok_or_else(|| ApiError::invalid("file", "a 'file' field is required"))?;
    let row = FileRow {
        id,
        project: project.0.clone(),
        filename,
        purpose,
        bytes,
        created_at: now(),
        expires_at: None,
    };
    let row = FileRow {
        expires_at: expires_in.map(|seconds| row.created_at + seconds),
        ..row
    };
    let inserted = row.clone();
    // A failed insert drops `blob`, which removes it.
    state.db(move |s| s.insert_file(&inserted)).await?;
    blob.recorded();
    Ok(Json(file_object(&row)))
}

pub async fn list(
    State(state): State<Arc<AppState>>,
    project: Project,
    ApiQuery(params): ApiQuery<ListParams>,
) -> ApiResult<Json<List<FileObject>>> {
    if params.name.is_some() {
        return Err(ApiError::invalid("name", "files have no name filter"));
    }
    let mut params = params;
    if params.limit.is_none() {
        params.limit = Some(100);
    }
    let page = params.page()?;
    let (rows, has_more) = state
        .db(move |s| s.list_files(&project.0, params.purpose.as_deref(), &page))
        .await?;
    Ok(Json(List::page(
        rows.iter().map(file_object).collect(),
        has_more,
        |f: &FileObject| f.id.clone(),
    )))
}

pub async fn retrieve(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
) -> ApiResult<Json<FileObject>> {
    Ok(Json(file_object(&owned(&state, &project, &id).await?)))
}

pub async fn content(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let row = owned(&state, &project, &id).await?;
    let object = match state.objects.get(&file_key(&row.id)?).await {
        Ok(object) => object,
        // Deleted (or expired) since its row was read.
        Err(shellgate_objects::ObjectError::NotFound(_)) => {
            return Err(ApiError::not_found("file", &id))
        }
        Err(e) => return Err(crate::blobs::internal(e)),
    };
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (header::CONTENT_LENGTH, object.size.to_string()),
        ],
        Body::from_stream(object.body),
    )
        .into_response())
}

pub async fn delete(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
) -> ApiResult<Json<Deleted>> {
    owned(&state, &project, &id).await?;
    remove(&state, &project.0, &id).await?;
    Ok(Json(Deleted::new(id, "file")))
}
