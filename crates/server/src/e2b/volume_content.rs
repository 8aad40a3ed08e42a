//! E2B's volume content API (`/volumecontent/{volumeID}/path|dir|file`),
//! what the SDK's `Volume` calls to read and write a volume with no
//! sandbox running: stat, list, make a directory, read and write a file,
//! remove, set a mode. The credential is the volume's own token
//! (`Authorization: Bearer`, given at the volume's create and info), never
//! a project's key; the files are reached beneath the volume's directory
//! by `sandboxes::volume_files`, on the node that holds it (a replica
//! sends these calls there).

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Json;
use shellgate_store::VolumeRow;
use shellgate_wire::e2b::{VolumeContentQuery, VolumeEntryPatch, VolumeEntryStat};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::access_cache::{digest, same_digest};
use super::request::{e2b_error, read_body};
use super::E2bError;
use crate::sandboxes::volume_files::{VolumeFileError, VolumeFiles, MAX_DEPTH};
use crate::sandboxes::volumes::{check_bytes, check_here, volume_dir};
use crate::state::AppState;

/// The routes of the volume content API, at the root.
pub(crate) fn routes(table: crate::route_table::RouteTable) -> crate::route_table::RouteTable {
    table
        .route(
            "/volumecontent/{volume_id}/path",
            get(stat).delete(remove).patch(set_metadata),
        )
        .route("/volumecontent/{volume_id}/dir", get(list).post(make_dir))
        .route(
            "/volumecontent/{volume_id}/file",
            get(read_file).put(write_file),
        )
}

/// The volume a call names, its bearer token checked (compared by digest
/// in constant time): unknown, 404; no token or another, 401. The volume's
/// directory must be on this node.
struct VolumeCaller(VolumeRow);

impl FromRequestParts<Arc<AppState>> for VolumeCaller {
    type Rejection = E2bError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let Path(id) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| E2bError::new(StatusCode::NOT_FOUND, "volume not found"))?;
        let token = crate::http::bearer_key(&parts.headers).ok_or_else(|| {
            E2bError::new(
                StatusCode::UNAUTHORIZED,
                "the volume's token is required (Authorization: Bearer)",
            )
        })?;
        let key = id.clone();
        let row = state
            .db(move |s| s.volume_by_id(&key))
            .await
            .map_err(e2b_error)?
            .ok_or_else(|| super::volumes::volume_not_found(&id))?;
        if !same_digest(&digest(token), &digest(&row.token)) {
            return Err(E2bError::new(
                StatusCode::UNAUTHORIZED,
                "the token is not this volume's",
            ));
        }
        check_here(state, &row).map_err(e2b_error)?;
        Ok(Self(row))
    }
}

impl From<VolumeFileError> for E2bError {
    fn from(error: VolumeFileError) -> Self {
        let status = match &error {
            VolumeFileError::InvalidPath { .. } | VolumeFileError::Root => StatusCode::BAD_REQUEST,
            VolumeFileError::NotFound(_) => StatusCode::NOT_FOUND,
            VolumeFileError::Exists(_)
            | VolumeFileError::IsDirectory(_)
            | VolumeFileError::NotDirectory(_)
            | VolumeFileError::Link(_) => StatusCode::CONFLICT,
            VolumeFileError::Io { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        };
        E2bError::new(status, error.to_string())
    }
}

/// Runs `work` on the volume's opened directory, off the async workers.
async fn on_files<T, F>(state: &AppState, row: &VolumeRow, work: F) -> Result<T, E2bError>
where
    T: Send + 'static,
    F: FnOnce(&VolumeFiles) -> Result<T, VolumeFileError> + Send + 'static,
{
    let dir = volume_dir(state, &row.id);
    tokio::task::spawn_blocking(move || work(&VolumeFiles::open(&dir)?))
        .await
        .map_err(|e| E2bError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(E2bError::from)
}

/// 400 for ids: a sandbox's ids on the host are its own (see
/// `volume_files`), so none is set here rather than one silently ignored.
fn refuse_ids(uid: Option<u32>, gid: Option<u32>) -> Result<(), E2bError> {
    if uid.is_some() || gid.is_some() {
        return Err(E2bError::new(
            StatusCode::BAD_REQUEST,
            "uid and gid are not set by this server: every sandbox maps its user to host ids \
             of its own, so an entry is the sandbox user's (1000) when a sandbox wrote it",
        ));
    }
    Ok(())
}

/// `GET /volumecontent/{id}/path`: an entry (a link shown as one).
async fn stat(
    State(state): State<Arc<AppState>>,
    VolumeCaller(row): VolumeCaller,
    Query(query): Query<VolumeContentQuery>,
) -> Result<Json<VolumeEntryStat>, E2bError> {
    Ok(Json(
        on_files(&state, &row, move |files| files.stat(&query.path)).await?,
    ))
}

/// `GET /volumecontent/{id}/dir`: a directory's entries, `depth` levels.
async fn list(
    State(state): State<Arc<AppState>>,
    VolumeCaller(row): VolumeCaller,
    Query(query): Query<VolumeContentQuery>,
) -> Result<Json<Vec<VolumeEntryStat>>, E2bError> {
    let depth = query.depth.unwrap_or(1);
    if depth == 0 || depth > MAX_DEPTH {
        return Err(E2bError::new(
            StatusCode::BAD_REQUEST,
            format!("depth is 1 to {MAX_DEPTH}"),
        ));
    }
    Ok(Json(
        on_files(&state, &row, move |files| files.list(&query.path, depth)).await?,
    ))
}

/// `POST /volumecontent/{id}/dir`: 201 with the directory made.
async fn make_dir(
    State(state): State<Arc<AppState>>,
    VolumeCaller(row): VolumeCaller,
    Query(query): Query<VolumeContentQuery>,
) -> Result<Response, E2bError> {
    refuse_ids(query.uid, query.gid)?;
    let made = on_files(&state, &row, move |files| {
        files.make_dir(&query.path, query.force.unwrap_or(false), query.mode)
    })
    .await?;
    Ok((StatusCode::CREATED, Json(made)).into_response())
}

/// `DELETE /volumecontent/{id}/path`: 204; a directory goes with all it
/// holds.
async fn remove(
    State(state): State<Arc<AppState>>,
    VolumeCaller(row): VolumeCaller,
    Query(query): Query<VolumeContentQuery>,
) -> Result<StatusCode, E2bError> {
    on_files(&state, &row, move |files| files.remove(&query.path)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `PATCH /volumecontent/{id}/path`: sets the mode.
async fn set_metadata(
    State(state): State<Arc<AppState>>,
    VolumeCaller(row): VolumeCaller,
    Query(query): Query<VolumeContentQuery>,
    body: Bytes,
) -> Result<Json<VolumeEntryStat>, E2bError> {
    let patch: VolumeEntryPatch = read_body(&body)?;
    refuse_ids(patch.uid, patch.gid)?;
    let changed = on_files(&state, &row, move |files| match patch.mode {
        Some(mode) => files.set_mode(&query.path, mode),
        None => files.stat(&query.path),
    })
    .await?;
    Ok(Json(changed))
}

/// Bytes read from a file per chunk of a download.
const CHUNK: usize = 64 * 1024;

/// `GET /volumecontent/{id}/file`: a regular file's bytes, streamed.
async fn read_file(
    State(state): State<Arc<AppState>>,
    VolumeCaller(row): VolumeCaller,
    Query(query): Query<VolumeContentQuery>,
) -> Result<Response, E2bError> {
    let (file, size) = on_files(&state, &row, move |files| files.open_file(&query.path)).await?;
    let file = tokio::fs::File::from_std(file);
    let chunks = futures_util::stream::unfold(Some(file), |file| async move {
        let mut file = file?;
        let mut buffer = vec![0u8; CHUNK];
        match file.read(&mut buffer).await {
            Ok(0) => None,
            Ok(read) => {
                buffer.truncate(read);
                Some((Ok(Bytes::from(buffer)), Some(file)))
            }
            // The stream breaks (the client sees a cut body, not a short file).
            Err(error) => Some((Err(error), None)),
        }
    });
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (header::CONTENT_LENGTH, size.to_string()),
        ],
        Body::from_stream(chunks),
    )
        .into_response())
}

/// `PUT /volumecontent/{id}/file`: 201 with the file written, whole or
/// not at all (a cut or oversized upload leaves nothing), within the
/// upload bound and the project's volume bytes.
async fn write_file(
    State(state): State<Arc<AppState>>,
    VolumeCaller(row): VolumeCaller,
    Query(query): Query<VolumeContentQuery>,
    request: Request,
) -> Result<Response, E2bError> {
    refuse_ids(query.uid, query.gid)?;
    check_bytes(&state, &row.project).await.map_err(e2b_error)?;
    let path = query.path.clone();
    let mut new = on_files(&state, &row, move |files| {
        files.new_file(&query.path, query.force.unwrap_or(false), query.mode)
    })
    .await?;
    let Some(file) = new.take_file() else {
        return Err(E2bError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the new file was not opened",
        ));
    };
    let mut file = tokio::fs::File::from_std(file);
    let max = state.config.server.max_upload_bytes as u64;
    let mut written: u64 = 0;
    let mut body = request.into_body().into_data_stream();
    while let Some(chunk) = futures_util::StreamExt::next(&mut body).await {
        let chunk = chunk.map_err(|e| {
            E2bError::new(
                StatusCode::BAD_REQUEST,
                format!("the upload broke off: {e}"),
            )
        })?;
        written = written.saturating_add(chunk.len() as u64);
        if written > max {
            return Err(E2bError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the file is larger than {max} bytes (max_upload_bytes)"),
            ));
        }
        file.write_all(&chunk).await.map_err(|e| {
            E2bError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot write: {e}"),
            )
        })?;
    }
    file.flush().await.map_err(|e| {
        E2bError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot write: {e}"),
        )
    })?;
    drop(file);
    let written = on_files(&state, &row, move |files| {
        new.commit()?;
        files.stat(&path)
    })
    .await?;
    Ok((StatusCode::CREATED, Json(written)).into_response())
}
