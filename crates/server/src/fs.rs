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
use axum::http::{header, HeaderMap};
use axum::response::Response;
use axum::Json;
use serde::Deserialize;
use shellgate_egress::secrets::Masker;
use shellgate_sandbox_api::fs::{
    container_path, FsKind, WriteOptions, DEFAULT_LIST_ENTRIES, MAX_LIST_DEPTH, MAX_LIST_ENTRIES,
};
use shellgate_wire::fs::{
    format_mode, parse_mode, FsArchive, FsDeleted, FsEntry, FsEntryKind, FsEntryList, FsMkdir,
    FsMove,
};

use crate::error::{ApiError, ApiResult};
use crate::http::{to_completion, ApiJson, ApiQuery, Project};
use crate::sandboxes::fs::{
    download_response, file_download, fs_error, holds_secret, masked_text, prepare, read_wakes,
    stream_into,
};
use crate::state::AppState;
use shellgate_wire::ErrorCode;

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
        metadata: Default::default(),
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
        .with_code(ErrorCode::ArchiveUnmaskable));
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
