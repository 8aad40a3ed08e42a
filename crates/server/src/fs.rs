//! `/v1/containers/{id}/fs/...` (our extension): a container's
//! files by path — content (read, write), stat, list, mkdir, move, delete,
//! and archives (a directory as a tar stream, out and in).
//!
//! Each operation runs in the container as the sandbox user (the engine's
//! file worker), so it may do exactly what a command may. Bytes stream both
//! ways: a download is the worker's pipe turned into the body, an upload is
//! the request body written into the worker's pipe with back-pressure (the
//! listener's body timeouts still apply); nothing is spooled or held whole.
//! A container with secrets has its downloads masked as its commands'
//! output is.
//!
//! Reads (`content`, `stat`, `list`, `archive` export) of a path under
//! `/mnt/data` neither wake a suspended container nor renew its expiry
//! (the engine reads its disk); every other operation wakes it as exec
//! does (admission, a billed session) and counts as activity.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use shellgate_egress::secrets::Masker;
use shellgate_sandbox_api::fs::{
    container_path, under_workdir, FsDownload, FsKind, Upload, WriteOptions, DEFAULT_LIST_ENTRIES,
    MAX_LIST_DEPTH, MAX_LIST_ENTRIES,
};
use shellgate_sandbox_api::SandboxError;
use shellgate_wire::fs::{
    format_mode, parse_mode, FsArchive, FsDeleted, FsEntry, FsEntryKind, FsEntryList, FsMkdir,
    FsMove,
};
use tokio_stream::StreamExt;

use crate::engine::engine_error;
use crate::error::{ApiError, ApiResult};
use crate::http::{body_error, to_completion, ApiJson, ApiQuery, Project};
use crate::sandboxes::containers::owned;
use crate::sandboxes::exec::begin_activity;
use crate::state::AppState;

/// `?path=` alone.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathQuery {
    pub path: String,
}

/// `PUT .../fs/content?path=&mode=&parents=`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteQuery {
    pub path: String,
    pub mode: Option<String>,
    pub parents: Option<bool>,
}

/// `GET .../fs/list?path=&depth=&limit=`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    pub path: String,
    pub depth: Option<u32>,
    pub limit: Option<u32>,
}

/// `DELETE .../fs?path=&recursive=`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoveQuery {
    pub path: String,
    pub recursive: Option<bool>,
}

/// The engine's errors as this API answers them: a missing path is a 404
/// `file_not_found`, what the sandbox user may not do a 403
/// `permission_denied`.
pub(crate) fn fs_error(id: &str, error: SandboxError) -> ApiError {
    match error {
        SandboxError::FileNotFound(path) => ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("No file or directory at {path}."),
        )
        .with_code("file_not_found"),
        other => engine_error(id, other),
    }
}

/// The project's container, woken first if the operation must run in it.
pub(crate) async fn prepare(
    state: &AppState,
    project: &Project,
    id: &str,
    wakes: bool,
) -> ApiResult<()> {
    let row = owned(state, project, id).await?;
    if wakes {
        begin_activity(state, &row).await?;
    }
    Ok(())
}

/// Whether a read of `path` is served without waking the container.
pub(crate) fn read_wakes(path: &str) -> bool {
    under_workdir(path).is_none()
}

/// An entry as a client of a container with secrets may see it: a path
/// holding a value is not shown at all (`None`), a link's target is masked.
fn visible_entry(
    entry: shellgate_sandbox_api::fs::FsEntry,
    masker: Option<&Masker>,
) -> Option<FsEntry> {
    let Some(masker) = masker else {
        return Some(wire_entry(entry));
    };
    if holds_secret(&entry.path, masker) {
        return None;
    }
    let mut entry = wire_entry(entry);
    entry.link_target = entry.link_target.map(|t| masked_text(masker, &t));
    Some(entry)
}

/// Whether a path holds a secret's value (a command can make one): such an
/// entry is not shown at all.
pub(crate) fn holds_secret(path: &str, masker: &Masker) -> bool {
    masker.mask(path.as_bytes()) != path.as_bytes()
}

pub(crate) fn masked_text(masker: &Masker, text: &str) -> String {
    String::from_utf8_lossy(&masker.mask(text.as_bytes())).into_owned()
}

fn wire_entry(entry: shellgate_sandbox_api::fs::FsEntry) -> FsEntry {
    FsEntry {
        object: "container.fs_entry".to_owned(),
        path: entry.path,
        name: entry.name,
        kind: match entry.kind {
            FsKind::File => FsEntryKind::File,
            FsKind::Directory => FsEntryKind::Directory,
            FsKind::Symlink => FsEntryKind::Symlink,
            FsKind::Other => FsEntryKind::Other,
        },
        size: entry.size,
        mode: format_mode(entry.mode),
        modified_at: entry.modified_unix,
        link_target: entry.link_target,
    }
}

fn mode(asked: Option<&str>, default: u32) -> ApiResult<u32> {
    match asked {
        None => Ok(default),
        Some(text) => parse_mode(text).ok_or_else(|| {
            ApiError::invalid(
                "mode",
                format!("mode must be octal permission bits such as \"0644\", not {text:?}"),
            )
        }),
    }
}

/// A download as a response body, masked for a container with secrets
/// (then without `Content-Length`: a placeholder need not be as long as
/// its value).
pub(crate) fn download_response(
    state: &AppState,
    id: &str,
    download: FsDownload,
    media: &str,
) -> Response {
    let masker = state.engine.masker(id);
    let length = download.length.filter(|_| masker.is_none());
    let mut rx = download.body;
    let body = match masker {
        None => Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx)),
        Some(masker) => {
            let (tx, masked) = tokio::sync::mpsc::channel::<std::io::Result<Vec<u8>>>(4);
            tokio::spawn(async move {
                let mut mask = masker.stream();
                while let Some(chunk) = rx.recv().await {
                    let out = chunk.map(|bytes| {
                        let mut out = Vec::with_capacity(bytes.len());
                        mask.push(&bytes, &mut out);
                        out
                    });
                    let failed = out.is_err();
                    if tx.send(out).await.is_err() || failed {
                        return;
                    }
                }
                let mut tail = Vec::new();
                mask.finish(&mut tail);
                if !tail.is_empty() {
                    let _ = tx.send(Ok(tail)).await;
                }
            });
            Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(masked))
        }
    };
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    if let Ok(media) = HeaderValue::from_str(media) {
        headers.insert(header::CONTENT_TYPE, media);
    }
    if let Some(length) = length {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    }
    response
}

/// Bytes of an upload gathered before they are written to the worker.
const UPLOAD_BATCH_BYTES: usize = 256 * 1024;

/// Streams the request body into an upload; a body that fails (cut, too
/// slow) abandons it, so nothing changes. The upload's own refusal (the
/// worker stopped reading) ends the copy; `finish` then says why.
pub(crate) async fn stream_into<T: Send + 'static>(
    body: Body,
    upload: Box<dyn Upload<T>>,
    id: String,
) -> ApiResult<T> {
    stream_chunks_into(body.into_data_stream(), upload, id).await
}

/// [`stream_into`] for any stream of a body's bytes (a multipart part, a
/// decompressed body): its first error abandons the upload.
pub(crate) async fn stream_chunks_into<T, E, S>(
    mut stream: S,
    mut upload: Box<dyn Upload<T>>,
    id: String,
) -> ApiResult<T>
where
    T: Send + 'static,
    E: std::fmt::Display,
    S: tokio_stream::Stream<Item = Result<axum::body::Bytes, E>> + Unpin,
{
    // The body's frames are small (a read of the socket each); gathered
    // into larger writes, the worker is woken once per 256 KiB rather than
    // once per frame.
    let mut pending = Vec::with_capacity(UPLOAD_BATCH_BYTES * 2);
    loop {
        match stream.next().await {
            Some(Ok(bytes)) => {
                pending.extend_from_slice(&bytes);
                if pending.len() >= UPLOAD_BATCH_BYTES {
                    if upload.write(&pending).await.is_err() {
                        break;
                    }
                    pending.clear();
                }
            }
            Some(Err(error)) => {
                drop(upload);
                return Err(body_error(format!("The upload could not be read: {error}")));
            }
            None => {
                if !pending.is_empty() {
                    // A refusal shows in `finish`.
                    let _ = upload.write(&pending).await;
                }
                break;
            }
        }
    }
    // Every byte arrived: the commit finishes even if the client leaves now.
    to_completion(async move { upload.finish().await.map_err(|e| fs_error(&id, e)) }).await
}

/// `GET /v1/containers/{id}/fs/content?path=`: a regular file's bytes.
pub async fn read(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<PathQuery>,
) -> ApiResult<Response> {
    let path = container_path(&query.path, "path")?;
    file_download(&state, &project, &id, &path).await
}

/// A regular file's bytes as a download (the container woken first when it
/// sleeps): `GET .../fs/content` here, E2B's `GET /files`.
pub(crate) async fn file_download(
    state: &Arc<AppState>,
    project: &Project,
    id: &str,
    path: &str,
) -> ApiResult<Response> {
    prepare(state, project, id, read_wakes(path)).await?;
    let download = state
        .engine
        .fs_read(id, path)
        .await
        .map_err(|e| fs_error(id, e))?;
    Ok(download_response(
        state,
        id,
        download,
        "application/octet-stream",
    ))
}

/// `PUT /v1/containers/{id}/fs/content?path=&mode=&parents=`: the body
/// becomes the file (whole, or not at all).
pub async fn write(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<WriteQuery>,
    body: Body,
) -> ApiResult<Json<FsEntry>> {
    let path = container_path(&query.path, "path")?;
    let options = WriteOptions {
        mode: mode(query.mode.as_deref(), 0o644)?,
        parents: query.parents.unwrap_or(true),
    };
    prepare(&state, &project, &id, true).await?;
    let upload = state
        .engine
        .fs_write(&id, &path, options)
        .await
        .map_err(|e| fs_error(&id, e))?;
    let entry = stream_into(body, upload, id.clone()).await?;
    Ok(Json(wire_entry(entry)))
}

/// `GET /v1/containers/{id}/fs/stat?path=`.
pub async fn stat(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<PathQuery>,
) -> ApiResult<Json<FsEntry>> {
    let path = container_path(&query.path, "path")?;
    prepare(&state, &project, &id, read_wakes(&path)).await?;
    let entry = state
        .engine
        .fs_stat(&id, &path)
        .await
        .map_err(|e| fs_error(&id, e))?;
    // The path is the client's own; a link's target is masked.
    let mut shown = wire_entry(entry);
    if let Some(masker) = state.engine.masker(&id) {
        shown.link_target = shown.link_target.map(|t| masked_text(&masker, &t));
    }
    Ok(Json(shown))
}

/// `GET /v1/containers/{id}/fs/list?path=&depth=&limit=`.
pub async fn list(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> ApiResult<Json<FsEntryList>> {
    let path = container_path(&query.path, "path")?;
    let depth = query.depth.unwrap_or(1);
    if !(1..=MAX_LIST_DEPTH).contains(&depth) {
        return Err(ApiError::invalid(
            "depth",
            format!("depth must be from 1 to {MAX_LIST_DEPTH}"),
        ));
    }
    let limit = query.limit.unwrap_or(DEFAULT_LIST_ENTRIES);
    if !(1..=MAX_LIST_ENTRIES).contains(&limit) {
        return Err(ApiError::invalid(
            "limit",
            format!("limit must be from 1 to {MAX_LIST_ENTRIES}"),
        ));
    }
    prepare(&state, &project, &id, read_wakes(&path)).await?;
    let listing = state
        .engine
        .fs_list(&id, &path, depth, limit)
        .await
        .map_err(|e| fs_error(&id, e))?;
    // A name holding a secret's value (a command can make one) is not
    // shown: only commands reach such a file. Counted, not hidden silently.
    let masker = state.engine.masker(&id);
    let total = listing.entries.len();
    let data: Vec<FsEntry> = listing
        .entries
        .into_iter()
        .filter_map(|entry| visible_entry(entry, masker.as_deref()))
        .collect();
    Ok(Json(FsEntryList {
        object: "list".to_owned(),
        secret_names: (total - data.len()) as u64,
        data,
        truncated: listing.truncated,
        non_utf8_names: listing.non_utf8_names,
    }))
}

/// `POST /v1/containers/{id}/fs/mkdir`.
pub async fn mkdir(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<FsMkdir>,
) -> ApiResult<Json<FsEntry>> {
    let path = container_path(&body.path, "path")?;
    let mode = mode(body.mode.as_deref(), 0o755)?;
    prepare(&state, &project, &id, true).await?;
    to_completion(async move {
        let entry = state
            .engine
            .fs_mkdir(&id, &path, body.parents, mode)
            .await
            .map_err(|e| fs_error(&id, e))?;
        Ok(Json(wire_entry(entry)))
    })
    .await
}

/// `POST /v1/containers/{id}/fs/move`.
pub async fn rename(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<FsMove>,
) -> ApiResult<Json<FsEntry>> {
    let from = container_path(&body.from, "from")?;
    let to = container_path(&body.to, "to")?;
    prepare(&state, &project, &id, true).await?;
    to_completion(async move {
        let entry = state
            .engine
            .fs_move(&id, &from, &to, body.overwrite)
            .await
            .map_err(|e| fs_error(&id, e))?;
        Ok(Json(wire_entry(entry)))
    })
    .await
}

/// `DELETE /v1/containers/{id}/fs?path=&recursive=`.
pub async fn remove(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<RemoveQuery>,
) -> ApiResult<Json<FsDeleted>> {
    let path = container_path(&query.path, "path")?;
    prepare(&state, &project, &id, true).await?;
    to_completion(async move {
        state
            .engine
            .fs_remove(&id, &path, query.recursive.unwrap_or(false))
            .await
            .map_err(|e| fs_error(&id, e))?;
        Ok(Json(FsDeleted {
            object: "container.fs_entry.deleted".to_owned(),
            path,
            deleted: true,
        }))
    })
    .await
}

/// `?path=&exclude=…&exclude=…` of the archive routes (`path` defaults to
/// `/mnt/data`; `exclude` only for an export).
fn archive_query(
    pairs: Vec<(String, String)>,
    excludes_allowed: bool,
) -> ApiResult<(String, Vec<String>)> {
    let mut path = None;
    let mut excludes = Vec::new();
    for (key, value) in pairs {
        match key.as_str() {
            "path" if path.is_none() => path = Some(value),
            "path" => return Err(ApiError::invalid("path", "give path once")),
            "exclude" if excludes_allowed => excludes.push(value),
            other => {
                return Err(ApiError::invalid(
                    other,
                    format!("Unknown query parameter '{other}'."),
                ))
            }
        }
    }
    let path = container_path(
        path.as_deref()
            .unwrap_or(shellgate_sandbox_api::backend::WORKDIR),
        "path",
    )?;
    Ok((path, excludes))
}

/// Most exclude patterns an export takes.
const MAX_EXCLUDES: usize = 256;

/// `GET /v1/containers/{id}/fs/archive?path=&exclude=`: a directory as a
/// tar stream.
pub async fn export(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    query: Result<Query<Vec<(String, String)>>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Response> {
    let Query(pairs) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let (path, excludes) = archive_query(pairs, true)?;
    if excludes.len() > MAX_EXCLUDES {
        return Err(ApiError::invalid(
            "exclude",
            format!("at most {MAX_EXCLUDES} exclude patterns"),
        ));
    }
    prepare(&state, &project, &id, read_wakes(&path)).await?;
    if state.engine.masker(&id).is_some() {
        // What leaves a container with secrets is masked, and a masked
        // value is not as long as the value: the members' sizes would lie.
        return Err(ApiError::conflict(
            "This container holds secrets (domain_secrets): its files are masked on the way \
             out, which would break a tar stream's sizes, so it cannot be exported as an \
             archive. Read its files one by one (fs/content) instead.",
        )
        .with_code("archive_unmaskable"));
    }
    let download = state
        .engine
        .fs_export(&id, &path, excludes)
        .await
        .map_err(|e| fs_error(&id, e))?;
    Ok(download_response(
        &state,
        &id,
        download,
        "application/x-tar",
    ))
}

/// `POST /v1/containers/{id}/fs/archive?path=`: a tar stream unpacked into
/// a directory (whole, or not at all).
pub async fn import(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    query: Result<Query<Vec<(String, String)>>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Json<FsArchive>> {
    let Query(pairs) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let (path, _) = archive_query(pairs, false)?;
    if let Some(encoding) = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.eq_ignore_ascii_case("identity"))
    {
        return Err(ApiError::unsupported_media_type(format!(
            "Send the archive as an uncompressed tar stream (Content-Encoding {encoding:?} is not read)."
        )));
    }
    prepare(&state, &project, &id, true).await?;
    let upload = state
        .engine
        .fs_import(&id, &path)
        .await
        .map_err(|e| fs_error(&id, e))?;
    let imported = stream_into(body, upload, id.clone()).await?;
    Ok(Json(FsArchive {
        object: "container.fs_archive".to_owned(),
        path,
        entries: imported.entries,
        bytes: imported.bytes,
    }))
}
