//! `/v1/files`: upload, list, retrieve, content, delete. Blobs live in the
//! data directory under their id (never a user-chosen name).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Multipart, Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use shellgate_store::FileRow;
use shellgate_wire::{Deleted, FileObject, List, FILE_PURPOSES};

use crate::containers::{multipart_error, safe_file_name};
use crate::error::{ApiError, ApiResult};
use crate::http::{ApiQuery, ListParams, Project};
use crate::spool::{spool, Spooled};
use crate::{new_id, now, AppState};

fn file_object(row: &FileRow) -> FileObject {
    FileObject {
        id: row.id.clone(),
        object: "file".to_owned(),
        bytes: row.bytes,
        created_at: row.created_at,
        filename: row.filename.clone(),
        purpose: row.purpose.clone(),
        status: "processed".to_owned(),
        expires_at: None,
        status_details: None,
    }
}

fn owned(state: &AppState, project: &Project, id: &str) -> ApiResult<FileRow> {
    state
        .store
        .file(&project.0, id)?
        .ok_or_else(|| ApiError::not_found("file", id))
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
    let mut stored: Option<(String, Spooled)> = None;
    while let Some(mut field) = multipart.next_field().await.map_err(multipart_error)? {
        match field.name() {
            Some("purpose") => purpose = Some(field.text().await.map_err(multipart_error)?),
            Some("file") => {
                let name = safe_file_name(field.file_name().unwrap_or("upload"));
                let spooled =
                    spool(&mut field, &state.files_dir, state.config.max_upload_bytes).await?;
                stored = Some((name, spooled));
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
    let (filename, spooled) =
        stored.ok_or_else(|| ApiError::invalid("file", "a 'file' field is required"))?;
    // Named only once complete and valid; the row only once it is named.
    let blob = state.files_dir.join(&id);
    spooled.persist(&blob)?;
    let row = FileRow {
        id,
        project: project.0.clone(),
        filename,
        purpose,
        bytes: spooled.bytes,
        created_at: now(),
    };
    if let Err(e) = state.store.insert_file(&row) {
        let _ = tokio::fs::remove_file(&blob).await;
        return Err(e.into());
    }
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
        .store
        .list_files(&project.0, params.purpose.as_deref(), &page)?;
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
    Ok(Json(file_object(&owned(&state, &project, &id)?)))
}

pub async fn content(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let row = owned(&state, &project, &id)?;
    let file = tokio::fs::File::open(state.files_dir.join(&row.id))
        .await
        .map_err(|e| ApiError::internal(format!("open file {}: {e}", row.id)))?;
    let body = Body::from_stream(file_stream(file));
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], body).into_response())
}

/// Streams a file in chunks, without loading it whole.
pub(crate) fn file_stream(
    mut file: tokio::fs::File,
) -> impl tokio_stream::Stream<Item = std::io::Result<Vec<u8>>> {
    use tokio::io::AsyncReadExt;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        loop {
            let mut buf = vec![0u8; 64 * 1024];
            let chunk = match file.read(&mut buf).await {
                Ok(0) => return,
                Ok(n) => {
                    buf.truncate(n);
                    Ok(buf)
                }
                Err(e) => Err(e),
            };
            let failed = chunk.is_err();
            if tx.send(chunk).await.is_err() || failed {
                return;
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

pub async fn delete(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
) -> ApiResult<Json<Deleted>> {
    owned(&state, &project, &id)?;
    state.store.delete_file(&project.0, &id)?;
    let _ = tokio::fs::remove_file(state.files_dir.join(&id)).await;
    Ok(Json(Deleted::new(id, "file")))
}
