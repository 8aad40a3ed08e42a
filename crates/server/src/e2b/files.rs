//! envd's plain HTTP routes: `GET`/`POST /files` (download, upload) and
//! `GET /health`, over the container's files by path
//! (`fs_read`/`fs_write` and the `/v1/.../fs/content` helpers: wake rules,
//! masking, streaming both ways, a cut upload leaving nothing).
//!
//! Uploads come as `multipart/form-data` (one or more `file` parts, each
//! named by its filename, or by `?path=` when there is one) or as
//! `application/octet-stream` to `?path=`, optionally gzipped
//! (`Content-Encoding: gzip`, decoded as it streams and bounded to
//! `max_upload_bytes` after decoding). Files are written as the sandbox
//! user, E2B's `user` (another `username` is refused with 403, see
//! `filesystem`), with mode 0644, their parents made. `X-Metadata-<key>`
//! headers are the files' metadata, as envd keeps it: `user.e2b.<key>`
//! extended attributes (keys lowercased) of each file written, set on it
//! before it takes its name, so a file replaced without them has none.

use shellgate_wire::ErrorCode;
use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Multipart, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use shellgate_sandbox_api::fs::WriteOptions;
use tokio_stream::StreamExt;

use super::access::SandboxCaller;
use super::filesystem::e2b_path;
use super::user::{basic_user, user_refusal};
use super::E2bError;
use crate::http::Project;
use crate::sandboxes::fs::{file_download, fs_error, prepare, stream_chunks_into};
use crate::state::AppState;

/// `?path=&username=` (and whatever else a client adds; a signed URL's
/// `signature` is its credential, checked by `SandboxCaller`).
#[derive(Debug, Deserialize)]
pub struct FilesQuery {
    pub path: Option<String>,
    pub username: Option<String>,
}

/// One written file, as envd answers an upload.
#[derive(Debug, Serialize)]
pub struct WriteInfo {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
}

/// The header prefix of an upload's metadata (`X-Metadata-<key>: value`).
const METADATA_HEADER_PREFIX: &str = "x-metadata-";

/// An upload's metadata from its `X-Metadata-*` headers: keys lowercased
/// (header names are), values printable ASCII, within the bounds the file
/// system can keep; anything else is E2B's 400.
fn upload_metadata(headers: &HeaderMap) -> Result<BTreeMap<String, String>, E2bError> {
    use shellgate_sandbox_api::fs::{MAX_METADATA_BYTES, MAX_METADATA_ENTRIES};
    let mut metadata = BTreeMap::new();
    let mut bytes = 0;
    for (name, value) in headers {
        let Some(key) = name.as_str().strip_prefix(METADATA_HEADER_PREFIX) else {
            continue;
        };
        let value = value
            .to_str()
            .ok()
            .filter(|v| v.bytes().all(|b| (0x20..0x7f).contains(&b)))
            .ok_or_else(|| {
                E2bError::new(
                    StatusCode::BAD_REQUEST,
                    format!("metadata {key:?}: values must be printable US-ASCII"),
                )
            })?;
        if key.is_empty() {
            return Err(E2bError::new(
                StatusCode::BAD_REQUEST,
                "metadata keys cannot be empty",
            ));
        }
        bytes += key.len() + value.len();
        metadata.insert(key.to_owned(), value.to_owned());
    }
    if metadata.len() > MAX_METADATA_ENTRIES || bytes > MAX_METADATA_BYTES {
        return Err(E2bError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "metadata: at most {MAX_METADATA_ENTRIES} entries and {MAX_METADATA_BYTES} bytes \
                 of keys and values together"
            ),
        ));
    }
    Ok(metadata)
}

fn write_options(metadata: &BTreeMap<String, String>) -> WriteOptions {
    WriteOptions {
        metadata: metadata.clone(),
        ..WriteOptions::default()
    }
}

/// Most bytes of compressed input decoded at once (so one hostile chunk
/// cannot inflate into a large buffer: at most ~1032× this comes out).
const GZIP_SLICE: usize = 4 * 1024;

pub(super) fn routes(router: Router<Arc<AppState>>) -> Router<Arc<AppState>> {
    router
        .route("/files", get(download).post(upload))
        .route("/health", get(health))
}

fn bad_path(error: shellgate_sandbox_api::SandboxError) -> E2bError {
    E2bError::new(StatusCode::BAD_REQUEST, error.to_string())
}

/// The user a `/files` call names (`?username=`, else `Authorization:
/// Basic`) must be E2B's `user`: 403 otherwise, as the RPCs refuse it.
fn check_user(query: &FilesQuery, headers: &HeaderMap) -> Result<(), E2bError> {
    let named = match query.username.clone() {
        Some(name) => Some(name),
        None => basic_user(headers).map_err(|why| E2bError::new(StatusCode::BAD_REQUEST, why))?,
    };
    match user_refusal(named.as_deref()) {
        None => Ok(()),
        Some(why) => Err(E2bError::new(StatusCode::FORBIDDEN, why)),
    }
}

fn required_path(query: &FilesQuery) -> Result<String, E2bError> {
    let path = query
        .path
        .as_deref()
        .ok_or_else(|| E2bError::new(StatusCode::BAD_REQUEST, "the path parameter is required"))?;
    e2b_path(path, "path").map_err(bad_path)
}

/// `GET /files?path=`: a regular file's bytes.
async fn download(
    State(state): State<Arc<AppState>>,
    caller: SandboxCaller,
    Query(query): Query<FilesQuery>,
    headers: HeaderMap,
) -> Result<Response, E2bError> {
    check_user(&query, &headers)?;
    let path = required_path(&query)?;
    let project = Project(caller.project.clone());
    Ok(file_download(&state, &project, &caller.container_id, &path).await?)
}

/// `POST /files`: multipart parts or one octet-stream body, each file
/// whole or not at all.
async fn upload(
    State(state): State<Arc<AppState>>,
    caller: SandboxCaller,
    Query(query): Query<FilesQuery>,
    request: Request,
) -> Result<Json<Vec<WriteInfo>>, E2bError> {
    check_user(&query, request.headers())?;
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let id = caller.container_id.clone();
    let metadata = upload_metadata(request.headers())?;
    prepare(&state, &Project(caller.project.clone()), &id, true).await?;
    if content_type.starts_with("multipart/form-data") {
        return upload_multipart(&state, &id, query, &metadata, request)
            .await
            .map(Json);
    }
    let path = required_path(&query)?;
    let encoding = request
        .headers()
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("identity")
        .trim()
        .to_ascii_lowercase();
    let upload = state
        .engine
        .fs_write(&id, &path, write_options(&metadata))
        .await
        .map_err(|e| upload_error(fs_error(&id, e)))?;
    let body = request.into_body();
    let entry = match encoding.as_str() {
        "identity" | "" => stream_chunks_into(body.into_data_stream(), upload, id)
            .await
            .map_err(upload_error)?,
        "gzip" => {
            let limit = state.config.server.max_upload_bytes as u64;
            stream_chunks_into(gunzip(body, limit), upload, id)
                .await
                .map_err(upload_error)?
        }
        other => {
            return Err(E2bError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("Content-Encoding {other:?} is not accepted (gzip or none)"),
            ))
        }
    };
    Ok(Json(vec![written(entry)]))
}

/// An upload's error as envd gives it: a full disk is 507 (the SDK's
/// `NotEnoughSpaceException`), everything else keeps its status.
fn upload_error(error: crate::error::ApiError) -> E2bError {
    if error.code == ErrorCode::QuotaExceeded {
        return E2bError::new(StatusCode::INSUFFICIENT_STORAGE, error.message);
    }
    error.into()
}

fn written(entry: shellgate_sandbox_api::fs::FsEntry) -> WriteInfo {
    WriteInfo {
        name: entry.name,
        kind: "file",
        path: entry.path,
        metadata: (!entry.metadata.is_empty()).then_some(entry.metadata),
    }
}

async fn upload_multipart(
    state: &Arc<AppState>,
    id: &str,
    query: FilesQuery,
    metadata: &BTreeMap<String, String>,
    request: Request,
) -> Result<Vec<WriteInfo>, E2bError> {
    let mut multipart = Multipart::from_request(request, state)
        .await
        .map_err(|e| E2bError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    let mut written_files = Vec::new();
    let mut query_path = query.path;
    loop {
        let field = multipart
            .next_field()
            .await
            .map_err(|e| E2bError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
        let Some(field) = field else { break };
        if field.name() != Some("file") {
            continue;
        }
        // `?path=` names the one file of an upload; otherwise each part's
        // filename is its path.
        let named = match (query_path.take(), field.file_name()) {
            (Some(path), _) if written_files.is_empty() => path,
            (Some(_), _) => return Err(E2bError::new(
                StatusCode::BAD_REQUEST,
                "the path parameter names a single file; name several by their parts' filenames",
            )),
            (None, Some(name)) => name.to_owned(),
            (None, None) => {
                return Err(E2bError::new(
                    StatusCode::BAD_REQUEST,
                    "a file part needs a filename (its path) or the path parameter",
                ))
            }
        };
        let path = e2b_path(&named, "path").map_err(bad_path)?;
        let upload = state
            .engine
            .fs_write(id, &path, write_options(metadata))
            .await
            .map_err(|e| upload_error(fs_error(id, e)))?;
        let field = std::pin::pin!(field);
        let entry = stream_chunks_into(field, upload, id.to_owned())
            .await
            .map_err(upload_error)?;
        written_files.push(written(entry));
    }
    if written_files.is_empty() {
        return Err(E2bError::new(
            StatusCode::BAD_REQUEST,
            "the upload has no 'file' part",
        ));
    }
    Ok(written_files)
}

/// A gzipped body, decoded as it streams: at most `limit` bytes out; a
/// corrupt, cut or oversized one ends in an error (the upload is then
/// abandoned).
fn gunzip(
    body: Body,
    limit: u64,
) -> impl tokio_stream::Stream<Item = Result<Bytes, String>> + Unpin + Send {
    struct Decoding {
        input: axum::body::BodyDataStream,
        decoder: flate2::write::GzDecoder<Vec<u8>>,
        pending: Bytes,
        total: u64,
    }
    let start = Decoding {
        input: body.into_data_stream(),
        decoder: flate2::write::GzDecoder::new(Vec::new()),
        pending: Bytes::new(),
        total: 0,
    };
    Box::pin(futures_util::stream::unfold(
        Some(start),
        move |state| async move {
            let mut state = state?;
            loop {
                if state.pending.is_empty() {
                    match state.input.next().await {
                        Some(Ok(bytes)) => state.pending = bytes,
                        Some(Err(e)) => return Some((Err(e.to_string()), None)),
                        None => {
                            if let Err(e) = state.decoder.try_finish() {
                                return Some((
                                    Err(format!("the gzip body is cut or corrupt: {e}")),
                                    None,
                                ));
                            }
                            let out = std::mem::take(state.decoder.get_mut());
                            if out.is_empty() {
                                return None;
                            }
                            return Some((Ok(Bytes::from(out)), None));
                        }
                    }
                    continue;
                }
                let take = state.pending.len().min(GZIP_SLICE);
                let slice = state.pending.split_to(take);
                if let Err(e) = state.decoder.write_all(&slice) {
                    return Some((Err(format!("the gzip body is corrupt: {e}")), None));
                }
                let out = std::mem::take(state.decoder.get_mut());
                if out.is_empty() {
                    continue;
                }
                state.total += out.len() as u64;
                if state.total > limit {
                    return Some((
                        Err(format!(
                            "the decompressed upload is over the limit of {limit} bytes"
                        )),
                        None,
                    ));
                }
                return Some((Ok(Bytes::from(out)), Some(state)));
            }
        },
    ))
}

/// `GET /health`: 204 while the sandbox can be used; a sandbox that is not
/// (unknown, killed, paused) answers 502, as E2B's edge does, which the
/// SDK's `is_running()` reads as "not running".
async fn health(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let (mut parts, _) = request.into_parts();
    match <SandboxCaller as axum::extract::FromRequestParts<Arc<AppState>>>::from_request_parts(
        &mut parts, &state,
    )
    .await
    {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(rejection) if rejection.error.status == StatusCode::NOT_FOUND => {
            E2bError::new(StatusCode::BAD_GATEWAY, rejection.error.message).into_response()
        }
        Err(rejection) => rejection.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn decode(compressed: Vec<u8>, limit: u64) -> Result<Vec<u8>, String> {
        let mut stream = gunzip(Body::from(compressed), limit);
        let mut out = Vec::new();
        while let Some(chunk) = stream.next().await {
            out.extend_from_slice(&chunk?);
        }
        Ok(out)
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(data).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn metadata_headers_are_bounded_printable_and_lowercased() {
        let mut headers = HeaderMap::new();
        headers.insert("X-Metadata-Author", "mish".parse().unwrap());
        headers.insert("x-other", "ignored".parse().unwrap());
        assert_eq!(
            upload_metadata(&headers).unwrap(),
            BTreeMap::from([("author".to_owned(), "mish".to_owned())])
        );
        headers.insert("x-metadata-big", "v".repeat(3000).parse().unwrap());
        assert_eq!(
            upload_metadata(&headers).unwrap_err().status,
            StatusCode::BAD_REQUEST
        );
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-metadata-bin",
            header::HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap(),
        );
        assert!(upload_metadata(&headers).is_err());
        let mut many = HeaderMap::new();
        for i in 0..40 {
            many.insert(
                header::HeaderName::from_bytes(format!("x-metadata-k{i}").as_bytes()).unwrap(),
                "v".parse().unwrap(),
            );
        }
        assert!(upload_metadata(&many).is_err());
    }

    #[tokio::test]
    async fn gzip_bodies_decode_whole_and_bounded() {
        let data = vec![7u8; 100_000];
        assert_eq!(decode(gzip(&data), 1 << 20).await.unwrap(), data);
        // A bomb stops at the limit.
        assert!(decode(gzip(&data), 10_000)
            .await
            .unwrap_err()
            .contains("limit"));
        // A cut body is an error, never a short file.
        let mut cut = gzip(&data);
        cut.truncate(cut.len() - 4);
        assert!(decode(cut, 1 << 20).await.is_err());
        assert!(decode(b"not gzip".to_vec(), 1 << 20).await.is_err());
    }
}
