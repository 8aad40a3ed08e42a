//! A container's files by path, for every dialect that reaches them (the
//! `/v1/containers/{id}/fs` routes, E2B's filesystem and `/files`): the
//! container prepared (owned, woken when the operation must run in it),
//! the engine's errors as 404s and 403s, downloads masked for a container
//! with secrets, uploads streamed into the engine's file worker with
//! back-pressure.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use shellgate_egress::secrets::Masker;
use shellgate_sandbox_api::fs::{under_workdir, FsDownload, Upload};
use shellgate_sandbox_api::SandboxError;
use shellgate_wire::ErrorCode;
use tokio_stream::StreamExt;

use crate::engine::engine_error;
use crate::error::{ApiError, ApiResult};
use crate::http::{body_error, to_completion, Project};
use crate::sandboxes::containers::owned;
use crate::sandboxes::exec::begin_activity;
use crate::state::AppState;

/// The engine's errors as this API answers them: a missing path is a 404
/// `file_not_found`, what the sandbox user may not do a 403
/// `permission_denied`.
pub(crate) fn fs_error(id: &str, error: SandboxError) -> ApiError {
    match error {
        SandboxError::FileNotFound(path) => ApiError::of(
            ErrorCode::FileNotFound,
            format!("No file or directory at {path}."),
        ),
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

/// Whether a path holds a secret's value (a command can make one): such an
/// entry is not shown at all.
pub(crate) fn holds_secret(path: &str, masker: &Masker) -> bool {
    masker.mask(path.as_bytes()) != path.as_bytes()
}

/// `text` with every secret value it holds replaced by its placeholder.
pub(crate) fn masked_text(masker: &Masker, text: &str) -> String {
    String::from_utf8_lossy(&masker.mask(text.as_bytes())).into_owned()
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
