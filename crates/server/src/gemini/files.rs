//! Google's Files API over the project's files (`/v1/files`' store, its
//! quotas and expiry): `files.upload` by Google's resumable protocol
//! (`POST /upload/v1beta/files` with `X-Goog-Upload-Command: start`
//! answers an `X-Goog-Upload-URL`; the bytes go there in chunks, each
//! `upload` at the offset of the bytes taken so far, the last one `upload,
//! finalize`), `GET /v1beta/files` (paged by `pageSize` and `pageToken`),
//! `GET` and `DELETE /v1beta/files/{id}`.
//!
//! An upload's session and its chunks are objects of the store
//! (`gemini-uploads/...`, named by 128 random bits: the URL is its
//! credential, as Google's is, since the SDKs send no key with the bytes),
//! so any node of a cluster takes the chunk that follows another node's.
//! A file keeps its display name as its file name and the MIME type its
//! upload gave (else the one its name's extension tells; a name given none
//! gets the extension of its type). Google's files live 48 hours, and so
//! do these. An upload nothing was written to for
//! [`ABANDONED_AFTER_SECONDS`] is abandoned: the lifecycle's sweep deletes
//! its session and chunks, and their bytes with them.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRequestParts, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt as _;
use serde::{Deserialize, Serialize};
use shellgate_objects::Key;
use shellgate_store::FileRow;
use shellgate_wire::gemini::{
    CreateFileRequest, DeletedFile, File, ListFilesResponse, UploadedFile, UPLOAD_COMMAND_HEADER,
    UPLOAD_CONTENT_LENGTH_HEADER, UPLOAD_CONTENT_TYPE_HEADER, UPLOAD_OFFSET_HEADER,
    UPLOAD_PROTOCOL_HEADER, UPLOAD_SIZE_RECEIVED_HEADER, UPLOAD_STATUS_HEADER, UPLOAD_URL_HEADER,
};
use shellgate_wire::new_id;

use super::GoogleProject;
use crate::blobs::{file_key, BodyFailure, Unrecorded};
use crate::error::{ApiError, ApiResult};
use crate::public_base::PublicBase;
use crate::state::AppState;
use crate::time::now;

/// How long a file lives (Google's 48 hours).
const LIFETIME_SECONDS: i64 = 48 * 3600;

/// How long an upload may go without a chunk before it is abandoned
/// (Google's sessions last a week; a day bounds what an abandoned one
/// keeps, and no SDK waits that long between two chunks).
pub(crate) const ABANDONED_AFTER_SECONDS: i64 = 24 * 3600;

/// How often the sweep looks for abandoned uploads (a listing of the
/// store's upload folder, not worth every lifecycle pass).
const ABANDONED_SWEEP_EVERY_SECONDS: i64 = 3600;

/// The folder of the sessions and their chunks.
const UPLOADS_FOLDER: &str = "gemini-uploads";

/// The purpose a file uploaded here has among the project's files.
const PURPOSE: &str = "user_data";

/// The types told by a file name's extension, and the extension a type
/// gives a name that has none.
const TYPES: &[(&str, &str)] = &[
    ("txt", "text/plain"),
    ("csv", "text/csv"),
    ("md", "text/markdown"),
    ("html", "text/html"),
    ("json", "application/json"),
    ("xml", "application/xml"),
    ("yaml", "application/x-yaml"),
    ("py", "text/x-python"),
    ("pdf", "application/pdf"),
    ("png", "image/png"),
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("gif", "image/gif"),
    ("webp", "image/webp"),
    ("mp3", "audio/mpeg"),
    ("wav", "audio/wav"),
    ("mp4", "video/mp4"),
];

/// What a name's extension says its type is.
pub(super) fn mime_of(name: &str) -> &'static str {
    let extension = name
        .rsplit_once('.')
        .map(|(_, ext)| ext.to_ascii_lowercase())
        .unwrap_or_default();
    TYPES
        .iter()
        .find(|(ext, _)| *ext == extension)
        .map_or("application/octet-stream", |(_, mime)| mime)
}

/// A session begun by `start`: whose, what the file will be, and the
/// chunks taken so far (each an object of its own, in order).
#[derive(Debug, Serialize, Deserialize)]
struct Session {
    project: String,
    filename: String,
    size: Option<u64>,
    #[serde(default)]
    mime_type: Option<String>,
    /// The bytes taken so far: the offset the next chunk must start at.
    #[serde(default)]
    received: u64,
    /// How many chunks are stored.
    #[serde(default)]
    chunks: u32,
}

fn session_key(token: &str) -> ApiResult<Key> {
    Key::new(format!("{UPLOADS_FOLDER}/{token}")).map_err(crate::blobs::internal)
}

/// The object holding a session's chunk `index` (beside the session's, not
/// under it: a local store's session object is a file, not a folder).
fn chunk_key(token: &str, index: u32) -> ApiResult<Key> {
    Key::new(format!("{UPLOADS_FOLDER}/{token}.{index}")).map_err(crate::blobs::internal)
}

/// Deletes the uploads abandoned at `now` (no object of theirs, session
/// or chunk, written for [`ABANDONED_AFTER_SECONDS`]), at most once every
/// [`ABANDONED_SWEEP_EVERY_SECONDS`]; answers how many objects went. Every
/// node of a cluster may sweep the shared store: a delete is idempotent.
pub(crate) async fn sweep_abandoned_uploads(state: &AppState, now: i64) -> ApiResult<usize> {
    use std::sync::atomic::Ordering;
    let last = state.gemini_uploads_swept_at.load(Ordering::SeqCst);
    if last != 0 && now - last < ABANDONED_SWEEP_EVERY_SECONDS {
        return Ok(0);
    }
    state.gemini_uploads_swept_at.store(now, Ordering::SeqCst);
    let folder = Key::new(UPLOADS_FOLDER).map_err(crate::blobs::internal)?;
    let listed = state
        .objects
        .list_folder(&folder)
        .await
        .map_err(crate::blobs::internal)?;
    // An upload's last write: the newest of its session's and chunks'.
    let mut last_written: std::collections::HashMap<String, i64> = Default::default();
    for object in &listed {
        let name = object.key.as_str().rsplit('/').next().unwrap_or_default();
        let token = name.split('.').next().unwrap_or_default().to_owned();
        let newest = last_written.entry(token).or_insert(i64::MIN);
        *newest = (*newest).max(object.modified_unix);
    }
    let mut deleted = 0;
    for object in listed {
        let name = object.key.as_str().rsplit('/').next().unwrap_or_default();
        let token = name.split('.').next().unwrap_or_default();
        let newest = last_written.get(token).copied().unwrap_or(i64::MIN);
        if now - newest < ABANDONED_AFTER_SECONDS {
            continue;
        }
        match state.objects.delete(&object.key).await {
            Ok(()) => deleted += 1,
            Err(e) => {
                tracing::warn!(upload = %token, "could not delete abandoned {}: {e}", object.key)
            }
        }
    }
    if deleted > 0 {
        tracing::info!(objects = deleted, "abandoned Gemini uploads deleted");
    }
    Ok(deleted)
}

/// The query of the upload URL.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct UploadQuery {
    upload_id: Option<String>,
}

/// `POST /upload/v1beta/files`: a resumable upload's `start` (with the
/// project's key), or its bytes (`?upload_id=`, the URL `start` gave).
/// Every answer says the session's status, so the SDK neither retries an
/// error nor waits for more: `active` while chunks may follow, `final`
/// once the file is made or the session refused.
pub(crate) async fn upload(
    State(state): State<Arc<AppState>>,
    Query(query): Query<UploadQuery>,
    request: Request,
) -> Response {
    let (status, answer) = match query.upload_id {
        None => ("active", start(&state, request).await),
        Some(token) => match transfer(&state, &token, request).await {
            Ok(Transferred::Taken(answer)) => ("active", Ok(answer)),
            Ok(Transferred::Finished(answer)) => ("final", Ok(answer)),
            Err(error) => ("final", Err(error)),
        },
    };
    let mut response = answer.unwrap_or_else(IntoResponse::into_response);
    response
        .headers_mut()
        .insert(UPLOAD_STATUS_HEADER, HeaderValue::from_static(status));
    response
}

/// A header's text, if it has one.
fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .map(str::trim)
}

async fn start(state: &Arc<AppState>, request: Request) -> ApiResult<Response> {
    let (mut parts, body) = request.into_parts();
    let GoogleProject(project) = GoogleProject::from_request_parts(&mut parts, state).await?;
    let base = PublicBase::of(state, &parts.headers);
    let headers = &parts.headers;
    let protocol = header(headers, UPLOAD_PROTOCOL_HEADER).unwrap_or_default();
    let command = header(headers, UPLOAD_COMMAND_HEADER).unwrap_or_default();
    if !protocol.eq_ignore_ascii_case("resumable") || !command.eq_ignore_ascii_case("start") {
        return Err(ApiError::invalid(
            UPLOAD_PROTOCOL_HEADER,
            "upload a file by the resumable protocol: X-Goog-Upload-Protocol: resumable and \
             X-Goog-Upload-Command: start, then the bytes to the X-Goog-Upload-URL answered",
        ));
    }
    let bytes = axum::body::to_bytes(body, 64 << 10)
        .await
        .map_err(|_| ApiError::invalid("file", "the start's body is a small JSON object"))?;
    let asked: CreateFileRequest = if bytes.iter().all(u8::is_ascii_whitespace) {
        CreateFileRequest::default()
    } else {
        let value: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::invalid("file", format!("the body is not JSON: {e}")))?;
        shellgate_wire::param::parse(&value).map_err(|e| ApiError::invalid(e.param, e.message))?
    };
    let file = asked.file.unwrap_or_default();
    let mime = file
        .mime_type
        .clone()
        .or_else(|| header(headers, UPLOAD_CONTENT_TYPE_HEADER).map(str::to_owned));
    let size = match &file.size_bytes {
        Some(serde_json::Value::String(text)) => text.parse::<u64>().ok(),
        Some(serde_json::Value::Number(number)) => number.as_u64(),
        _ => header(headers, UPLOAD_CONTENT_LENGTH_HEADER).and_then(|text| text.parse().ok()),
    };
    let cap = state.config.server.max_upload_bytes as u64;
    if size.is_some_and(|size| size > cap) {
        return Err(ApiError::too_large(format!(
            "Files are limited to {cap} bytes."
        )));
    }
    let session = Session {
        project,
        filename: file_name(file.display_name.as_deref(), mime.as_deref()),
        size,
        mime_type: mime.filter(|mime| !mime.is_empty()),
        received: 0,
        chunks: 0,
    };
    let token = new_id("up");
    save(state, &token, &session).await?;
    let url = base.url(&format!(
        "/upload/v1beta/files?upload_id={token}&upload_protocol=resumable"
    ));
    let mut response = Json(serde_json::Map::new()).into_response();
    if let Ok(value) = HeaderValue::from_str(&url) {
        response.headers_mut().insert(UPLOAD_URL_HEADER, value);
    }
    Ok(response)
}

/// The file's name: its display name (its last path component), else
/// `upload` with the extension of its type.
fn file_name(display: Option<&str>, mime: Option<&str>) -> String {
    match display.map(str::trim).filter(|name| !name.is_empty()) {
        Some(name) => crate::sandboxes::files::safe_file_name(name),
        None => {
            let extension = mime
                .and_then(|mime| TYPES.iter().find(|(_, known)| *known == mime))
                .map(|(ext, _)| format!(".{ext}"))
                .unwrap_or_default();
            format!("upload{extension}")
        }
    }
}

async fn save(state: &AppState, token: &str, session: &Session) -> ApiResult<()> {
    let stored = serde_json::to_vec(session).map_err(|e| ApiError::internal(e.to_string()))?;
    shellgate_objects::put_bytes(state.objects.as_ref(), &session_key(token)?, stored)
        .await
        .map(drop)
        .map_err(crate::blobs::internal)
}

/// What a request to the upload URL did.
enum Transferred {
    /// A chunk was taken (or the session's progress told): more may come.
    Taken(Response),
    /// The file was made.
    Finished(Response),
}

/// A request to a session's URL, as Google's resumable protocol has them:
/// `upload` takes a chunk at `X-Goog-Upload-Offset` (the bytes taken so
/// far), `upload, finalize` takes the last one and makes the file, and
/// `query` tells how many bytes were taken (`X-Goog-Upload-Size-Received`).
/// The session and its chunks are objects of the store, so any node of a
/// cluster takes the next chunk.
async fn transfer(state: &Arc<AppState>, token: &str, request: Request) -> ApiResult<Transferred> {
    let valid = !token.is_empty() && token.chars().all(|c| c.is_ascii_alphanumeric());
    let key = valid.then(|| session_key(token)).transpose()?;
    let gone = || ApiError::not_found("upload", token);
    let key = key.ok_or_else(gone)?;
    let stored = match shellgate_objects::read_to_vec(state.objects.as_ref(), &key, 64 << 10).await
    {
        Ok(bytes) => bytes,
        Err(shellgate_objects::ObjectError::NotFound(_)) => return Err(gone()),
        Err(e) => return Err(crate::blobs::internal(e)),
    };
    let mut session: Session =
        serde_json::from_slice(&stored).map_err(|e| ApiError::internal(e.to_string()))?;
    let (parts, body) = request.into_parts();
    let command = header(&parts.headers, UPLOAD_COMMAND_HEADER)
        .unwrap_or_default()
        .to_ascii_lowercase();
    let commands: Vec<&str> = command.split(',').map(str::trim).collect();
    if commands == ["query"] {
        return Ok(Transferred::Taken(received(session.received)));
    }
    if !commands.contains(&"upload") {
        return Err(ApiError::invalid(
            UPLOAD_COMMAND_HEADER,
            "send the file's bytes with X-Goog-Upload-Command: upload (and finalize with the \
             last chunk)",
        ));
    }
    let offset = header(&parts.headers, UPLOAD_OFFSET_HEADER).unwrap_or("0");
    if offset.parse::<u64>().ok() != Some(session.received) {
        return Err(ApiError::invalid(
            UPLOAD_OFFSET_HEADER,
            format!(
                "the next chunk starts at X-Goog-Upload-Offset: {}, not {offset}",
                session.received
            ),
        ));
    }
    let finalize = commands.contains(&"finalize");
    let cap = state.config.server.max_upload_bytes as u64;
    let room = cap.saturating_sub(session.received);
    let failure = BodyFailure::default();
    if !finalize {
        let chunk = chunk_key(token, session.chunks)?;
        let bytes = state
            .objects
            .put(&chunk, capped(body, room, &failure))
            .await
            .map_err(|e| failure.explain(e))?;
        session.received += bytes;
        session.chunks += 1;
        save(state, token, &session).await?;
        return Ok(Transferred::Taken(received(session.received)));
    }
    let id = new_id("file-");
    let file = file_key(&id)?;
    let bytes = if session.chunks == 0 {
        state
            .objects
            .put(&file, capped(body, room, &failure))
            .await
            .map_err(|e| failure.explain(e))?
    } else {
        let last = chunk_key(token, session.chunks)?;
        state
            .objects
            .put(&last, capped(body, room, &failure))
            .await
            .map_err(|e| failure.explain(e))?;
        let keys = (0..=session.chunks)
            .map(|index| chunk_key(token, index))
            .collect::<ApiResult<Vec<Key>>>()?;
        let put = state.objects.put(&file, joined(&state.objects, keys)).await;
        for index in 0..=session.chunks {
            forget(state, token, &chunk_key(token, index)?).await;
        }
        put.map_err(crate::blobs::internal)?
    };
    let blob = Unrecorded::new(&state.objects, file);
    if session.size.is_some_and(|size| size != bytes) {
        return Err(ApiError::invalid(
            UPLOAD_CONTENT_LENGTH_HEADER,
            format!(
                "the upload was started for {} bytes, and {bytes} came",
                session.size.unwrap_or_default()
            ),
        ));
    }
    let created_at = now();
    let row = FileRow {
        id,
        project: session.project,
        filename: session.filename,
        purpose: PURPOSE.to_owned(),
        bytes,
        created_at,
        expires_at: Some(created_at + LIFETIME_SECONDS),
        mime_type: session.mime_type,
    };
    let inserted = row.clone();
    state.db(move |s| s.insert_file(&inserted)).await?;
    blob.recorded();
    forget(state, token, &key).await;
    let base = PublicBase::of(state, &parts.headers);
    Ok(Transferred::Finished(
        Json(UploadedFile {
            file: google_file(&row, &base),
        })
        .into_response(),
    ))
}

/// An answer telling how many bytes a session has taken.
fn received(bytes: u64) -> Response {
    let mut response = Json(serde_json::Map::new()).into_response();
    response
        .headers_mut()
        .insert(UPLOAD_SIZE_RECEIVED_HEADER, HeaderValue::from(bytes));
    response
}

/// Removes a finished session's object (a failure leaves an orphan, logged).
async fn forget(state: &AppState, token: &str, key: &Key) {
    if let Err(e) = state.objects.delete(key).await {
        tracing::warn!(upload = %token, "could not remove the finished upload's {key}: {e}");
    }
}

/// The chunks' objects, in order, as one body.
fn joined(
    objects: &Arc<dyn shellgate_objects::ObjectStore>,
    keys: Vec<Key>,
) -> shellgate_objects::ByteStream<'static> {
    let objects = Arc::clone(objects);
    Box::pin(
        futures_util::stream::iter(keys)
            .then(move |key| {
                let objects = Arc::clone(&objects);
                async move {
                    match objects.get(&key).await {
                        Ok(object) => object.body,
                        Err(e) => Box::pin(futures_util::stream::once(async move {
                            Err(std::io::Error::other(e))
                        })),
                    }
                }
            })
            .flatten(),
    )
}

/// A request body as a stream for the store, at most `cap` bytes.
fn capped(body: Body, cap: u64, failure: &BodyFailure) -> shellgate_objects::ByteStream<'_> {
    let chunks = body.into_data_stream().map(|chunk| {
        chunk
            .map(|bytes| bytes.to_vec())
            .map_err(std::io::Error::other)
    });
    crate::blobs::capped_body(chunks, cap, failure)
}

/// A file as Google's API shows it.
pub(super) fn google_file(row: &FileRow, base: &PublicBase) -> File {
    let created = shellgate_wire::time::rfc3339(row.created_at);
    File {
        name: format!("files/{}", row.id),
        display_name: Some(row.filename.clone()),
        mime_type: row
            .mime_type
            .clone()
            .unwrap_or_else(|| mime_of(&row.filename).to_owned()),
        size_bytes: row.bytes.to_string(),
        create_time: created.clone(),
        update_time: created,
        expiration_time: row.expires_at.map(shellgate_wire::time::rfc3339),
        uri: base.url(&format!("/v1beta/files/{}", row.id)),
        state: "ACTIVE".to_owned(),
        source: "UPLOADED".to_owned(),
    }
}

/// The file id a `files/{id}` name or a file's URI names.
pub(super) fn file_id(name: &str) -> Option<&str> {
    let id = name.rsplit_once("files/").map_or(name, |(_, id)| id);
    let id = id.split(['?', '#']).next().unwrap_or_default();
    (!id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')).then_some(id)
}

async fn owned(state: &AppState, project: &str, name: &str) -> ApiResult<FileRow> {
    let missing = || ApiError::not_found("file", name);
    let id = file_id(name).ok_or_else(missing)?.to_owned();
    let owner = project.to_owned();
    state
        .db(move |s| s.file(&owner, &id))
        .await?
        .ok_or_else(missing)
}

/// `GET /v1beta/files/{id}`.
pub(crate) async fn retrieve(
    State(state): State<Arc<AppState>>,
    GoogleProject(project): GoogleProject,
    base: PublicBase,
    Path(name): Path<String>,
) -> ApiResult<Json<File>> {
    let row = owned(&state, &project, &name).await?;
    Ok(Json(google_file(&row, &base)))
}

/// `DELETE /v1beta/files/{id}`: Google answers an empty object.
pub(crate) async fn delete(
    State(state): State<Arc<AppState>>,
    GoogleProject(project): GoogleProject,
    Path(name): Path<String>,
) -> ApiResult<Json<DeletedFile>> {
    let row = owned(&state, &project, &name).await?;
    crate::sandboxes::files::remove_file(&state, &project, &row.id).await?;
    Ok(Json(DeletedFile {}))
}

/// The query of the files list.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListQuery {
    page_size: Option<u32>,
    page_token: Option<String>,
}

/// `GET /v1beta/files`: the project's files, newest first, `pageSize` a
/// page (10 by default, at most 100), `nextPageToken` the next page's.
pub(crate) async fn list(
    State(state): State<Arc<AppState>>,
    GoogleProject(project): GoogleProject,
    base: PublicBase,
    Query(query): Query<ListQuery>,
) -> ApiResult<Json<ListFilesResponse>> {
    let params = crate::http::ListParams {
        limit: Some(query.page_size.unwrap_or(10).clamp(1, 100)),
        order: None,
        after: query.page_token.filter(|token| !token.is_empty()),
        name: None,
        purpose: None,
    };
    let page = params.page()?;
    let (rows, has_more) = state
        .db(move |s| s.list_files(&project, None, &page))
        .await?;
    let next_page_token = has_more
        .then(|| rows.last().map(|row| row.id.clone()))
        .flatten();
    Ok(Json(ListFilesResponse {
        files: rows.iter().map(|row| google_file(row, &base)).collect(),
        next_page_token,
    }))
}

/// Files larger than this go to the model as their name only.
const INLINE_LIMIT: u64 = 1 << 20;

/// The files the user contents' `fileData` parts name (the project's, else
/// a 404 naming the part): put in the code's container when
/// `in_container` (their rows returned for it), else their text when they
/// are text (at most a MiB); another is left out of `Attachments`, for the
/// handler to report.
pub(super) async fn attachments(
    state: &AppState,
    project: &str,
    contents: &[shellgate_wire::gemini::Content],
    in_container: bool,
) -> ApiResult<(super::translate::Attachments, Vec<FileRow>)> {
    use super::translate::Attached;
    let mut attachments = super::translate::Attachments::new();
    let mut rows = Vec::new();
    for (at, content) in contents.iter().enumerate() {
        if content.role.as_deref() == Some("model") {
            continue;
        }
        for (index, part) in content.parts.iter().enumerate() {
            let Some(data) = &part.file_data else {
                continue;
            };
            if attachments.contains_key(&data.file_uri) {
                continue;
            }
            let row = owned(state, project, &data.file_uri)
                .await
                .map_err(|mut error| {
                    error.param = Some(format!("contents[{at}].parts[{index}].fileData.fileUri"));
                    error
                })?;
            let mime = data
                .mime_type
                .clone()
                .or_else(|| row.mime_type.clone())
                .unwrap_or_else(|| mime_of(&row.filename).to_owned());
            let attached = if in_container {
                let path = format!(
                    "/mnt/data/{}",
                    crate::sandboxes::files::safe_file_name(&row.filename)
                );
                rows.push(row);
                Some(Attached::InContainer { path, mime })
            } else if super::translate::textual(&mime) && row.bytes <= INLINE_LIMIT {
                let bytes = shellgate_objects::read_to_vec(
                    state.objects.as_ref(),
                    &file_key(&row.id)?,
                    INLINE_LIMIT,
                )
                .await
                .map_err(crate::blobs::internal)?;
                String::from_utf8(bytes).ok().map(|text| {
                    Attached::Text(format!("[attached file {}, {mime}]\n{text}", row.filename))
                })
            } else {
                None
            };
            if let Some(attached) = attached {
                attachments.insert(data.file_uri.clone(), attached);
            }
        }
    }
    Ok((attachments, rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn uploads_in_store(harness: &crate::testing::Harness) -> Vec<String> {
        let folder = Key::new(UPLOADS_FOLDER).unwrap();
        let listed = harness.state.objects.list_folder(&folder).await.unwrap();
        let mut keys: Vec<String> = listed.into_iter().map(|l| l.key.to_string()).collect();
        keys.sort();
        keys
    }

    async fn upload_request(
        harness: &crate::testing::Harness,
        uri: &str,
        command: &str,
        body: &'static [u8],
    ) -> crate::testing::Answer {
        let request = axum::http::Request::builder()
            .method("POST")
            .uri(uri)
            .header("authorization", format!("Bearer {}", crate::testing::ALPHA))
            .header(UPLOAD_PROTOCOL_HEADER, "resumable")
            .header(UPLOAD_COMMAND_HEADER, command)
            .header(UPLOAD_OFFSET_HEADER, "0")
            .body(Body::from(body))
            .unwrap();
        harness.send(request).await
    }

    #[tokio::test]
    async fn an_abandoned_upload_is_swept_with_its_chunks() {
        let harness = crate::testing::Harness::new();
        let started = upload_request(&harness, "/upload/v1beta/files", "start", b"{}").await;
        assert_eq!(started.status, 200, "{}", started.json);
        let keys = uploads_in_store(&harness).await;
        let [session] = keys.as_slice() else {
            panic!("one session object: {keys:?}");
        };
        let token = session.rsplit('/').next().unwrap().to_owned();
        let url = format!("/upload/v1beta/files?upload_id={token}");
        let taken = upload_request(&harness, &url, "upload", b"first chunk").await;
        assert_eq!(taken.status, 200, "{}", taken.json);
        assert_eq!(
            uploads_in_store(&harness).await.len(),
            2,
            "the session and its chunk"
        );
        // Fresh: the sweep keeps it.
        crate::lifecycle::sweep(&harness.state).await.unwrap();
        assert_eq!(
            uploads_in_store(&harness).await.len(),
            2,
            "kept while fresh"
        );
        // A day and an hour later, nothing written since: abandoned.
        harness
            .clock
            .advance(ABANDONED_AFTER_SECONDS + ABANDONED_SWEEP_EVERY_SECONDS);
        crate::lifecycle::sweep(&harness.state).await.unwrap();
        let left = uploads_in_store(&harness).await;
        assert!(left.is_empty(), "swept: {left:?}");
        let gone = upload_request(&harness, &url, "upload", b"late chunk").await;
        assert_eq!(gone.status, 404, "{}", gone.json);
    }

    #[test]
    fn a_files_name_or_uri_names_its_id_and_nothing_else() {
        assert_eq!(file_id("files/file-ab12"), Some("file-ab12"));
        assert_eq!(
            file_id("http://h:1/v1beta/files/file-ab12?x=1"),
            Some("file-ab12")
        );
        assert_eq!(file_id("file-ab12"), Some("file-ab12"));
        assert_eq!(file_id("files/../etc"), None);
        assert_eq!(file_id("files/"), None);
    }

    #[test]
    fn a_name_tells_the_type_and_a_type_names_a_nameless_file() {
        assert_eq!(mime_of("data.CSV"), "text/csv");
        assert_eq!(mime_of("blob"), "application/octet-stream");
        assert_eq!(file_name(None, Some("text/csv")), "upload.csv");
        assert_eq!(file_name(Some("../a.txt"), None), "a.txt");
        assert_eq!(file_name(Some(" "), None), "upload");
    }
}
