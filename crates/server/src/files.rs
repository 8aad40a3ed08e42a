//! `/v1/files`: upload, list, retrieve, content, delete. Blobs live in the
//! object store under their id (`files/<id>`, never a user-chosen name),
//! streamed in and out: an upload is never held in memory.
//!
//! Two shapes over the same files: OpenAI's, and Anthropic's for a client
//! that sends `anthropic-version` or a `files-api-*` beta
//! ([`crate::error::anthropic_client`]): an upload without `purpose` (and
//! with `expires_in_seconds`), `FileMetadata` objects, lists paged newest
//! first by `after_id` / `before_id` / `limit` (or the `page` cursor of
//! `next_page`), `file_deleted`, and errors in Anthropic's envelope
//! (`error::Dialect::of`).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Multipart, Path, Query, State};
use axum::http::{header, HeaderMap, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use shellgate_store::FileRow;
use shellgate_wire::new_id;
use shellgate_wire::{
    mime_type_of, AnthropicFile, AnthropicFileDeleted, AnthropicFileList, AnthropicFilesQuery,
    Deleted, FileObject, List, FILE_PURPOSES,
};

use crate::anthropic_pages::AnthropicPage;
use crate::blobs::{field_body, file_key, BodyFailure, Unrecorded};
use crate::error::{anthropic_client, ApiError, ApiResult};
use crate::http::multipart_error;
use crate::http::{ListParams, Project};
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

/// Shortest and longest `expires_in_seconds` (Anthropic's bounds: an
/// hour to 90 days).
const ANTHROPIC_EXPIRY_SECONDS: std::ops::RangeInclusive<i64> = 3_600..=7_776_000;

/// A file's row in Anthropic's shape (`FileMetadata`). Every file here can
/// be downloaded.
fn anthropic_file(row: &FileRow) -> AnthropicFile {
    AnthropicFile {
        id: row.id.clone(),
        kind: "file".to_owned(),
        filename: row.filename.clone(),
        mime_type: row
            .mime_type
            .clone()
            .unwrap_or_else(|| mime_type_of(&row.filename).to_owned()),
        size_bytes: row.bytes,
        created_at: shellgate_wire::time::rfc3339(row.created_at),
        downloadable: true,
        expires_at: row.expires_at.map(shellgate_wire::time::rfc3339),
    }
}

/// A file's row in the client's shape.
fn shown(row: &FileRow, anthropic: bool) -> Response {
    if anthropic {
        Json(anthropic_file(row)).into_response()
    } else {
        Json(file_object(row)).into_response()
    }
}

/// Anthropic's `expires_in_seconds` multipart field.
fn anthropic_expiry(seconds: Option<String>) -> ApiResult<Option<i64>> {
    let Some(seconds) = seconds else {
        return Ok(None);
    };
    match seconds.trim().parse::<i64>() {
        Ok(seconds) if ANTHROPIC_EXPIRY_SECONDS.contains(&seconds) => Ok(Some(seconds)),
        _ => Err(ApiError::invalid(
            "expires_in_seconds",
            format!(
                "expires_in_seconds must be a whole number from {} to {}",
                ANTHROPIC_EXPIRY_SECONDS.start(),
                ANTHROPIC_EXPIRY_SECONDS.end()
            ),
        )),
    }
}

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

pub async fn upload(
    State(state): State<Arc<AppState>>,
    project: Project,
    headers: HeaderMap,
    multipart: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> ApiResult<Response> {
    let anthropic = anthropic_client(&headers);
    let mut multipart = multipart.map_err(|e| {
        ApiError::unsupported_media_type(format!(
            "Send the file as multipart/form-data: {}",
            e.body_text()
        ))
    })?;
    let id = new_id("file-");
    let mut purpose = None;
    let (mut anchor, mut seconds, mut expires_in) = (None, None, None);
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
            Some("expires_in_seconds") if anthropic => {
                expires_in = Some(field.text().await.map_err(multipart_error)?)
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
    // Anthropic's Files API has no purpose: its files are the user's data.
    let purpose = match purpose {
        None if anthropic => "user_data".to_owned(),
        purpose => {
            purpose.ok_or_else(|| ApiError::invalid("purpose", "a 'purpose' field is required"))?
        }
    };
    if !FILE_PURPOSES.contains(&purpose.as_str()) {
        return Err(ApiError::invalid(
            "purpose",
            format!("purpose must be one of {}", FILE_PURPOSES.join(", ")),
        ));
    }
    let expires_in = match expires_in {
        Some(_) => anthropic_expiry(expires_in)?,
        None => expiry(anchor, seconds)?,
    };
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
        mime_type: None,
    };
    let row = FileRow {
        expires_at: expires_in.map(|seconds| row.created_at + seconds),
        ..row
    };
    let inserted = row.clone();
    // A failed insert drops `blob`, which removes it.
    state.db(move |s| s.insert_file(&inserted)).await?;
    blob.recorded();
    Ok(shown(&row, anthropic))
}

pub async fn list(
    State(state): State<Arc<AppState>>,
    project: Project,
    headers: HeaderMap,
    uri: Uri,
) -> ApiResult<Response> {
    if anthropic_client(&headers) {
        let Query(query) = Query::<AnthropicFilesQuery>::try_from_uri(&uri)
            .map_err(|e| ApiError::bad_request(format!("Invalid query: {}", e.body_text())))?;
        return Ok(Json(anthropic_list(&state, project, query).await?).into_response());
    }
    let Query(params) = Query::<ListParams>::try_from_uri(&uri)
        .map_err(|e| ApiError::bad_request(format!("Invalid query: {}", e.body_text())))?;
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
    ))
    .into_response())
}

/// One of Anthropic's pages of the project's files, newest first
/// ([`AnthropicPage`]).
async fn anthropic_list(
    state: &AppState,
    project: Project,
    query: AnthropicFilesQuery,
) -> ApiResult<AnthropicFileList> {
    let paging = AnthropicPage::read(
        query.limit.as_deref(),
        query.page.as_deref(),
        query.after_id,
        query.before_id,
    )?;
    let page = paging.page.clone();
    let (mut rows, has_more) = state
        .db(move |s| s.list_files(&project.0, None, &page))
        .await?;
    paging.order(&mut rows);
    let data: Vec<AnthropicFile> = rows.iter().map(anthropic_file).collect();
    let (first_id, last_id, next_page) = paging.ends(&data, |f| f.id.clone(), has_more);
    Ok(AnthropicFileList {
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
    let row = owned(&state, &project, &id).await?;
    Ok(shown(&row, anthropic_client(&headers)))
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
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    owned(&state, &project, &id).await?;
    crate::sandboxes::files::remove_file(&state, &project.0, &id).await?;
    if anthropic_client(&headers) {
        return Ok(Json(AnthropicFileDeleted {
            id,
            kind: "file_deleted".to_owned(),
        })
        .into_response());
    }
    Ok(Json(Deleted::new(id, "file")).into_response())
}
