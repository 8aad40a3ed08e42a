//! `/v1/containers`: create, list, retrieve, delete, exec, and the
//! container's files.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRequest, Multipart, Path, Request, State};
use axum::http::{header, HeaderMap};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use shellgate_sandbox_api::backend::StreamKind;
use shellgate_sandbox_api::SandboxError;
use shellgate_store::{ContainerFileRow, ContainerStatus, FileSource};
use shellgate_wire::new_id;
use shellgate_wire::{
    Container, ContainerFile, CreateContainer, CreateContainerFileFromId, Deleted, ExecRequest,
    List, ShellCallOutput,
};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;

use crate::engine::engine_error;
use crate::error::{ApiError, ApiResult};
use crate::http::to_completion;
use crate::http::{multipart_error, ApiJson, ApiQuery, ListParams, Project};
use crate::public_base::PublicBase;
use crate::sandboxes::containers::{
    create_container, image_list, owned, remove_container, shown_container, usable_by,
};
use crate::sandboxes::exec::{run_request, Exec};
use crate::sandboxes::files::{
    file_object, masked_file_stream, safe_file_name, store_container_file, sync_files,
};
use crate::spool::spool;
use crate::state::AppState;
use crate::time::now;

pub async fn create(
    State(state): State<Arc<AppState>>,
    project: Project,
    base: PublicBase,
    ApiJson(body): ApiJson<CreateContainer>,
) -> ApiResult<Json<Container>> {
    let row = create_container(&state, &project.0, body).await?;
    Ok(Json(shown_container(&state, &row, &base)?))
}

pub async fn list(
    State(state): State<Arc<AppState>>,
    project: Project,
    base: PublicBase,
    ApiQuery(params): ApiQuery<ListParams>,
) -> ApiResult<Json<List<Container>>> {
    if params.purpose.is_some() {
        return Err(ApiError::invalid(
            "purpose",
            "containers have no purpose filter",
        ));
    }
    let page = params.page()?;
    let owner = project.0.clone();
    let (rows, has_more) = state
        .db(move |s| s.list_containers(&owner, params.name.as_deref(), &page))
        .await?;
    let data = rows
        .iter()
        .filter(|r| r.status != ContainerStatus::Creating)
        .map(|row| shown_container(&state, row, &base))
        .collect::<ApiResult<Vec<_>>>()?;
    Ok(Json(List::page(data, has_more, |c: &Container| {
        c.id.clone()
    })))
}

pub async fn retrieve(
    State(state): State<Arc<AppState>>,
    project: Project,
    base: PublicBase,
    Path(id): Path<String>,
) -> ApiResult<Json<Container>> {
    Ok(Json(shown_container(
        &state,
        &owned(&state, &project, &id).await?,
        &base,
    )?))
}

pub async fn delete(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
) -> ApiResult<Json<Deleted>> {
    owned(&state, &project, &id).await?;
    // Commands running in it end with a 409 `container_deleted`.
    to_completion(async move {
        remove_container(&state, &id).await?;
        Ok(Json(Deleted::new(id, "container.deleted")))
    })
    .await
}

pub async fn exec(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<ExecRequest>,
) -> ApiResult<Response> {
    let request = run_request(&body, state.config.sandbox.request_deadline_secs)?;
    let exec = Exec::admit(&state, &project.0, &id).await?;
    let max_output_length = request.max_output_length;
    if !body.stream {
        // Run to completion: if the client hangs up, the commands are still
        // killed at their timeout and their time is billed.
        let results = to_completion(exec.run(request, None)).await?;
        return Ok(Json(ShellCallOutput::completed(results, max_output_length)).into_response());
    }
    // Streaming: deltas as they come, then the whole result.
    let (delta_tx, delta_rx) =
        tokio::sync::mpsc::unbounded_channel::<shellgate_sandbox_api::backend::OutputDelta>();
    let (event_tx, event_rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
    let forward = event_tx.clone();
    tokio::spawn(async move {
        let mut deltas = UnboundedReceiverStream::new(delta_rx);
        while let Some(delta) = deltas.next().await {
            let data = serde_json::json!({
                "type": "exec.output.delta",
                "command_index": delta.command,
                "stream": match delta.stream { StreamKind::Stdout => "stdout", StreamKind::Stderr => "stderr" },
                "delta": delta.text,
            });
            if forward
                .send(
                    Event::default()
                        .event("exec.output.delta")
                        .data(data.to_string()),
                )
                .is_err()
            {
                break;
            }
        }
    });
    // Also run to completion: a stream whose client left only stops sending.
    tokio::spawn(async move {
        let result = exec.run(request, Some(delta_tx)).await;
        let event = match result {
            Ok(results) => {
                let output = ShellCallOutput::completed(results, max_output_length);
                let data =
                    serde_json::json!({"type": "exec.completed", "shell_call_output": output});
                Event::default()
                    .event("exec.completed")
                    .data(data.to_string())
            }
            Err(error) => {
                let data = serde_json::json!({
                    "type": "error", "code": error.code.code(), "message": error.message, "param": error.param,
                });
                Event::default().event("error").data(data.to_string())
            }
        };
        // Give the delta forwarder a moment to flush what it holds first.
        tokio::task::yield_now().await;
        let _ = event_tx.send(event);
    });
    let stream = UnboundedReceiverStream::new(event_rx).map(Ok::<_, Infallible>);
    Ok(Sse::new(stream)
        .keep_alive(crate::http::sse_keep_alive())
        .into_response())
}

/// The image object.
pub(crate) fn image_object(
    image: shellgate_sandbox_api::image::ImageInfo,
    default: &str,
) -> shellgate_wire::Image {
    shellgate_wire::Image {
        id: image.name.clone(),
        object: "image".to_owned(),
        default: image.name == default,
        name: image.name,
        size_bytes: image.details.size_bytes,
        created_at: image.details.created_at,
        runtimes: image.details.runtimes,
        source_format: image.details.source_format,
        config: image
            .details
            .config
            .map(|config| shellgate_wire::ImageRunConfig {
                env: config.env,
                working_dir: config.working_dir,
                user: config.user,
                entrypoint: config.entrypoint,
                cmd: config.cmd,
            }),
    }
}

/// `GET /v1/images` (our extension): the images containers can be made
/// from, with their sizes and runtimes, and which one is the default.
pub async fn images(
    State(state): State<Arc<AppState>>,
    project: Project,
) -> ApiResult<Json<shellgate_wire::ImageList>> {
    let images = image_list(&state).await?;
    let default = &state.config.sandbox.default_image;
    let data: Vec<shellgate_wire::Image> = images
        .into_iter()
        .filter(|image| usable_by(image, &project.0))
        .map(|image| image_object(image, default))
        .collect();
    Ok(Json(shellgate_wire::ImageList {
        object: "list".to_owned(),
        first_id: data.first().map(|i| i.id.clone()),
        last_id: data.last().map(|i| i.id.clone()),
        data,
        has_more: false,
        default_image: default.clone(),
    }))
}

/// `GET /v1/containers/{id}/commands`: the container's command audit, paged
/// like every list.
pub async fn commands(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    ApiQuery(params): ApiQuery<ListParams>,
) -> ApiResult<Json<List<shellgate_wire::ContainerCommand>>> {
    owned(&state, &project, &id).await?;
    let page = params.page()?;
    // Commands that ended wait in a batch: the listing shows them all.
    state.billing.flush().await;
    let key = id.clone();
    let (rows, has_more) = state.db(move |s| s.list_commands(&key, &page)).await?;
    let data = rows
        .into_iter()
        .map(|row| shellgate_wire::ContainerCommand {
            id: row.id,
            object: "container.command".to_owned(),
            container_id: row.container_id,
            response_id: row.response_id,
            command: row.command,
            // A command is recorded with its exit code, or without one
            // when it timed out (see `billing`).
            outcome: match row.exit_code {
                Some(exit_code) => shellgate_wire::Outcome::Exit { exit_code },
                None => shellgate_wire::Outcome::Timeout,
            },
            duration_ms: row.duration_ms,
            bytes_out: row.bytes_out,
            created_at: row.created_at,
        })
        .collect();
    Ok(Json(List::page(
        data,
        has_more,
        |c: &shellgate_wire::ContainerCommand| c.id.clone(),
    )))
}

// --- container files ------------------------------------------------------
//
// The store keeps one row per file (its id, path, size, source). A listing
// walks /mnt/data once (off the async workers, bounded) and syncs the rows in
// one linear pass; retrieving, downloading or deleting one file only reads
// its row. None of these wakes a suspended container, bills it or renews its
// expiry: the engine reads a stopped container's disk without starting it.

fn container_file_object(row: &ContainerFileRow) -> ContainerFile {
    ContainerFile {
        id: row.id.clone(),
        object: "container.file".to_owned(),
        created_at: row.created_at,
        bytes: row.bytes,
        container_id: row.container_id.clone(),
        path: row.path.clone(),
        source: row.source.as_str().to_owned(),
    }
}

pub async fn upload_file(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    headers: HeaderMap,
    request: Request,
) -> ApiResult<Json<ContainerFile>> {
    owned(&state, &project, &id).await?;
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    // Either way the content ends up in an open file: spooled from the
    // upload, or the stored blob of a Files API file.
    let (name, source) = if content_type.starts_with("multipart/form-data") {
        let mut multipart = Multipart::from_request(request, &())
            .await
            .map_err(|e| ApiError::bad_request(format!("Invalid multipart body: {e}")))?;
        let mut upload = None;
        while let Some(mut field) = multipart.next_field().await.map_err(multipart_error)? {
            if field.name() == Some("file") {
                let name = safe_file_name(field.file_name().unwrap_or("upload"));
                let spooled = spool(
                    &mut field,
                    &state.spool_dir,
                    state.config.server.max_upload_bytes,
                )
                .await?;
                upload = Some((name, spooled.file));
            }
        }
        upload.ok_or_else(|| ApiError::invalid("file", "a multipart field 'file' is required"))?
    } else if content_type.starts_with("application/json") {
        let ApiJson(body) =
            ApiJson::<CreateContainerFileFromId>::from_request(request, &()).await?;
        let (owner, key) = (project.0.clone(), body.file_id.clone());
        let file = state
            .db(move |s| s.file(&owner, &key))
            .await?
            .ok_or_else(|| ApiError::not_found("file", &body.file_id))?;
        let blob =
            crate::blobs::open_file(state.objects.as_ref(), &state.spool_dir, &file.id).await?;
        (safe_file_name(&file.filename), blob)
    } else {
        return Err(ApiError::unsupported_media_type(
            "Send the file as multipart/form-data (field 'file') or JSON {\"file_id\": ...}.",
        ));
    };
    let path = format!("/mnt/data/{name}");
    // The upload is received; copying it in and recording it finish even if
    // the client leaves now. It renews the expiry but opens no billed
    // session (no command runs).
    to_completion(async move {
        let bytes = state
            .engine
            .write_file_from(&id, &path, source)
            .await
            .map_err(|e| engine_error(&id, e))?;
        let file_row = ContainerFileRow {
            id: new_id("cfile_"),
            container_id: id.clone(),
            path,
            bytes,
            source: FileSource::User,
            created_at: now(),
        };
        let key = id.clone();
        let row = state
            .db(move |s| {
                s.record_activity(&key, now(), 0.0)?;
                s.upsert_container_file(&file_row)
            })
            .await?;
        Ok(Json(container_file_object(&row)))
    })
    .await
}

pub async fn list_files(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    ApiQuery(params): ApiQuery<ListParams>,
) -> ApiResult<Json<List<ContainerFile>>> {
    owned(&state, &project, &id).await?;
    let page = params.page()?;
    // The first page looks at the container; later pages (`after`) continue
    // the listing the first page synced, so paging through many files walks
    // them once.
    let incomplete = match page.after {
        None => sync_files(&state, &id).await?,
        Some(_) => None,
    };
    let key = id.clone();
    let (rows, has_more) = state
        .db(move |s| s.list_container_files(&key, &page))
        .await?;
    let data = rows.iter().map(container_file_object).collect();
    let mut list = List::page(data, has_more, |f: &ContainerFile| f.id.clone());
    list.incomplete = incomplete;
    Ok(Json(list))
}

/// The project's container file, from its row (no walk of /mnt/data).
async fn owned_file(
    state: &AppState,
    project: &Project,
    id: &str,
    file_id: &str,
) -> ApiResult<ContainerFileRow> {
    owned(state, project, id).await?;
    let (key, file_key) = (id.to_owned(), file_id.to_owned());
    state
        .db(move |s| s.container_file(&key, &file_key))
        .await?
        .ok_or_else(|| ApiError::not_found("container file", file_id))
}

/// Forgets a row whose file is gone from the container (a command removed
/// it since the last listing), and answers 404.
async fn forget_missing(state: &AppState, id: &str, row: &ContainerFileRow) -> ApiError {
    let (key, file_key) = (id.to_owned(), row.id.clone());
    let _ = state
        .db(move |s| s.delete_container_file(&key, &file_key))
        .await;
    ApiError::not_found("container file", &row.id)
}

pub async fn retrieve_file(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path((id, file_id)): Path<(String, String)>,
) -> ApiResult<Json<ContainerFile>> {
    Ok(Json(container_file_object(
        &owned_file(&state, &project, &id, &file_id).await?,
    )))
}

pub async fn file_content(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path((id, file_id)): Path<(String, String)>,
) -> ApiResult<Response> {
    let row = owned_file(&state, &project, &id, &file_id).await?;
    // Streamed from a descriptor the engine resolved inside /mnt/data: a
    // large file never sits in memory, and the path cannot be swapped.
    let file = match state.engine.open_file(&id, &row.path).await {
        Ok(file) => file,
        Err(SandboxError::FileNotFound(_)) => return Err(forget_missing(&state, &id, &row).await),
        Err(e) => return Err(engine_error(&id, e)),
    };
    // A container with secrets: the download goes through its masker, as
    // its commands' output does.
    let body = Body::from_stream(masked_file_stream(
        tokio::fs::File::from_std(file),
        state.engine.masker(&id),
    ));
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], body).into_response())
}

pub async fn delete_file(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path((id, file_id)): Path<(String, String)>,
) -> ApiResult<Json<Deleted>> {
    let row = owned_file(&state, &project, &id, &file_id).await?;
    to_completion(async move {
        match state.engine.delete_file(&id, &row.path).await {
            Ok(()) | Err(SandboxError::FileNotFound(_)) => {}
            Err(e) => return Err(engine_error(&id, e)),
        }
        let (key, file_key) = (id.clone(), row.id.clone());
        state
            .db(move |s| s.delete_container_file(&key, &file_key))
            .await?;
        Ok(Json(Deleted::new(row.id, "container.file.deleted")))
    })
    .await
}

/// `POST /v1/containers/{id}/files/{file_id}/promote`: copies a container
/// file into the Files API (`purpose: user_data`, named after the file),
/// where it outlives the container and its retention (OpenRouter's
/// promote, seeds/004). Finishes even if the client leaves: a file is
/// either promoted whole or not at all.
pub async fn promote_file(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path((id, file_id)): Path<(String, String)>,
) -> ApiResult<Json<shellgate_wire::FileObject>> {
    let row = owned_file(&state, &project, &id, &file_id).await?;
    let file = match state.engine.open_file(&id, &row.path).await {
        Ok(file) => file,
        Err(SandboxError::FileNotFound(_)) => return Err(forget_missing(&state, &id, &row).await),
        Err(e) => return Err(engine_error(&id, e)),
    };
    to_completion(async move {
        let stored = store_container_file(&state, &project.0, &id, &row.path, file).await?;
        Ok(Json(file_object(&stored)))
    })
    .await
}
