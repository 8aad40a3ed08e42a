//! `/v1/containers`: create, list, retrieve, delete, exec, and the
//! container's files.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{FromRequest, Multipart, Path, Request, State};
use axum::http::{header, HeaderMap};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use shellgate_sandbox::backend::{limits, ContainerSpec, RunRequest, StreamKind};
use shellgate_sandbox::{CommandResult, SandboxBackend};
use shellgate_store::{ContainerFileRow, ContainerRow};
use shellgate_wire::{
    Container, ContainerFile, CreateContainer, CreateContainerFileFromId, Deleted, ExecRequest,
    ExpiresAfter, ExpiresAnchor, List, MemoryLimit, NetworkPolicy, ShellCallOutput,
};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;

use crate::error::{ApiError, ApiResult};
use crate::http::{ApiJson, ApiQuery, ListParams, Project};
use crate::spool::spool;
use crate::{destroy_quietly, engine_error, new_id, now, AppState};

/// Most allowed domains in a network policy.
const MAX_ALLOWED_DOMAINS: usize = 50;
/// Longest container name.
const MAX_NAME: usize = 256;

/// The container object of a row.
pub fn container_object(row: &ContainerRow) -> Container {
    Container {
        id: row.id.clone(),
        object: "container".to_owned(),
        name: row.name.clone(),
        created_at: row.created_at,
        status: row.status.clone(),
        last_active_at: row.last_active_at,
        expires_after: ExpiresAfter {
            anchor: ExpiresAnchor::LastActiveAt,
            minutes: row.expires_minutes,
        },
        memory_limit: MemoryLimit::parse(&row.memory_limit).unwrap_or_default(),
        network_policy: serde_json::from_str(&row.network_policy)
            .unwrap_or(NetworkPolicy::Disabled),
    }
}

/// The project's container `id`, or 404.
fn owned(state: &AppState, project: &Project, id: &str) -> ApiResult<ContainerRow> {
    state
        .store
        .container(&project.0, id)?
        .ok_or_else(|| ApiError::not_found("container", id))
}

pub(crate) fn validate_create(config: &crate::Config, body: &CreateContainer) -> ApiResult<()> {
    if body.name.trim().is_empty() || body.name.chars().count() > MAX_NAME {
        return Err(ApiError::invalid(
            "name",
            format!("name must be 1 to {MAX_NAME} characters"),
        ));
    }
    if let Some(expires) = body.expires_after {
        if expires.minutes == 0 || expires.minutes > config.max_expires_minutes {
            return Err(ApiError::invalid(
                "expires_after.minutes",
                format!(
                    "expires_after.minutes must be between 1 and {}",
                    config.max_expires_minutes
                ),
            ));
        }
    }
    if body.file_ids.len() > 50 {
        return Err(ApiError::invalid(
            "file_ids",
            "at most 50 file_ids are allowed",
        ));
    }
    if let Some(NetworkPolicy::Allowlist {
        allowed_domains,
        domain_secrets,
    }) = &body.network_policy
    {
        if allowed_domains.len() > MAX_ALLOWED_DOMAINS {
            return Err(ApiError::invalid(
                "network_policy.allowed_domains",
                format!("at most {MAX_ALLOWED_DOMAINS} allowed domains"),
            ));
        }
        let valid = |d: &str| {
            !d.is_empty()
                && d.len() <= 253
                && d.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-.*".contains(&b))
        };
        if let Some(bad) = allowed_domains.iter().find(|d| !valid(d)) {
            return Err(ApiError::invalid(
                "network_policy.allowed_domains",
                format!("invalid domain {bad:?}"),
            ));
        }
        if let Some(bad) = domain_secrets
            .iter()
            .find(|s| !allowed_domains.contains(&s.domain))
        {
            return Err(ApiError::invalid(
                "network_policy.domain_secrets",
                format!(
                    "secret {} is for {}, which is not an allowed domain",
                    bad.name, bad.domain
                ),
            ));
        }
    }
    if body.skills.len() > 200 {
        return Err(ApiError::invalid(
            "skills",
            "at most 200 skills are allowed",
        ));
    }
    Ok(())
}

pub async fn create(
    State(state): State<Arc<AppState>>,
    project: Project,
    ApiJson(body): ApiJson<CreateContainer>,
) -> ApiResult<Json<Container>> {
    validate_create(&state.config, &body)?;
    // Every file must exist (in this project) before anything is made.
    let mut files = Vec::with_capacity(body.file_ids.len());
    for file_id in &body.file_ids {
        let file = state
            .store
            .file(&project.0, file_id)?
            .ok_or_else(|| ApiError::not_found("file", file_id))?;
        files.push(file);
    }
    let memory = body.memory_limit.unwrap_or_default();
    let now = now();
    let row = ContainerRow {
        id: new_id("cntr_"),
        project: project.0.clone(),
        name: body.name.clone(),
        created_at: now,
        last_active_at: now,
        status: "creating".to_owned(),
        memory_limit: memory.as_str().to_owned(),
        expires_minutes: body
            .expires_after
            .map(|e| e.minutes)
            .unwrap_or(state.config.default_expires_minutes),
        network_policy: serde_json::to_string(
            &body
                .network_policy
                .as_ref()
                .map(NetworkPolicy::without_secrets)
                .unwrap_or(NetworkPolicy::Disabled),
        )
        .map_err(|e| ApiError::internal(e.to_string()))?,
        skills: serde_json::to_string(&body.skills)
            .map_err(|e| ApiError::internal(e.to_string()))?,
        file_ids: serde_json::to_string(&body.file_ids)
            .map_err(|e| ApiError::internal(e.to_string()))?,
        billed_seconds: 0.0,
        session_seconds: 0.0,
        session_open: false,
    };
    // The row first (status `creating`): a crash from here on is cleaned up
    // at the next start, never leaving a container the store does not know.
    state.store.insert_container(&row)?;
    let made = async {
        let spec = ContainerSpec {
            memory_bytes: memory.bytes(),
            ..ContainerSpec::default()
        };
        state.engine.create(&row.id, spec).await?;
        for file in &files {
            let path = format!("/mnt/data/{}", safe_file_name(&file.filename));
            let bytes = state
                .engine
                .write_file_from(&row.id, &path, open_blob(&state, &file.id)?)
                .await?;
            state.store.upsert_container_file(&ContainerFileRow {
                id: new_id("cfile_"),
                container_id: row.id.clone(),
                path,
                bytes,
                source: "user".to_owned(),
                created_at: now,
            })?;
        }
        state.store.open_session(&row.id)?;
        Ok::<_, ApiError>(())
    }
    .await;
    if let Err(error) = made {
        destroy_quietly(&state.engine, &row.id).await;
        let _ = state.store.delete_container(&row.id);
        return Err(error);
    }
    let row = owned(&state, &project, &row.id)?;
    Ok(Json(container_object(&row)))
}

pub async fn list(
    State(state): State<Arc<AppState>>,
    project: Project,
    ApiQuery(params): ApiQuery<ListParams>,
) -> ApiResult<Json<List<Container>>> {
    if params.purpose.is_some() {
        return Err(ApiError::invalid(
            "purpose",
            "containers have no purpose filter",
        ));
    }
    let page = params.page()?;
    let (rows, has_more) =
        state
            .store
            .list_containers(&project.0, params.name.as_deref(), &page)?;
    let data = rows
        .iter()
        .filter(|r| r.status != "creating")
        .map(container_object)
        .collect();
    Ok(Json(List::page(data, has_more, |c: &Container| {
        c.id.clone()
    })))
}

pub async fn retrieve(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
) -> ApiResult<Json<Container>> {
    Ok(Json(container_object(&owned(&state, &project, &id)?)))
}

pub async fn delete(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
) -> ApiResult<Json<Deleted>> {
    owned(&state, &project, &id)?;
    destroy_quietly(&state.engine, &id).await;
    state.store.delete_container(&id)?;
    Ok(Json(Deleted::new(id, "container.deleted")))
}

/// Checks an exec body against the limits, naming the offending `param`.
pub(crate) fn run_request(body: &ExecRequest) -> ApiResult<RunRequest> {
    let request = RunRequest {
        commands: body.commands.clone(),
        timeout_ms: body.timeout_ms.unwrap_or(limits::DEFAULT_TIMEOUT_MS),
        max_output_length: body
            .max_output_length
            .unwrap_or(limits::DEFAULT_MAX_OUTPUT_LENGTH),
    };
    request.validate()?;
    Ok(request)
}

fn shell_call_output(results: Vec<CommandResult>, max_output_length: usize) -> ShellCallOutput {
    ShellCallOutput {
        kind: "shell_call_output".to_owned(),
        id: new_id("sho_"),
        status: "completed".to_owned(),
        output: results,
        max_output_length,
    }
}

/// Opens a session if the container was suspended, and records activity
/// (at most once a second: `last_active_at` has second resolution).
fn begin_activity(state: &AppState, row: &ContainerRow) -> ApiResult<()> {
    if !row.session_open {
        state.store.open_session(&row.id)?;
    }
    let now = now();
    if now > row.last_active_at {
        state.store.record_activity(&row.id, now, 0.0)?;
    }
    Ok(())
}

pub async fn exec(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<ExecRequest>,
) -> ApiResult<Response> {
    let row = owned(&state, &project, &id)?;
    let request = run_request(&body)?;
    let busy = state.busy(&id);
    begin_activity(&state, &row)?;
    let commands = request.commands.len();
    let max_output_length = request.max_output_length;
    if !body.stream {
        let started = Instant::now();
        let result = state.engine.run(&id, request).await;
        let seconds = started.elapsed().as_secs_f64();
        state.metrics.exec(commands, seconds, result.is_ok());
        state.store.record_activity(&id, now(), seconds)?;
        drop(busy);
        let results = result.map_err(|e| engine_error(&id, e))?;
        return Ok(Json(shell_call_output(results, max_output_length)).into_response());
    }
    // Streaming: deltas as they come, then the whole result.
    let (delta_tx, delta_rx) =
        tokio::sync::mpsc::unbounded_channel::<shellgate_sandbox::backend::OutputDelta>();
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
    tokio::spawn(async move {
        let started = Instant::now();
        let result = state.engine.run_streaming(&id, request, delta_tx).await;
        let seconds = started.elapsed().as_secs_f64();
        state.metrics.exec(commands, seconds, result.is_ok());
        let _ = state.store.record_activity(&id, now(), seconds);
        drop(busy);
        let event = match result {
            Ok(results) => {
                let output = shell_call_output(results, max_output_length);
                let data =
                    serde_json::json!({"type": "exec.completed", "shell_call_output": output});
                Event::default()
                    .event("exec.completed")
                    .data(data.to_string())
            }
            Err(error) => {
                let error = engine_error(&id, error);
                let data = serde_json::json!({
                    "type": "error", "code": error.code, "message": error.message, "param": error.param,
                });
                Event::default().event("error").data(data.to_string())
            }
        };
        // Give the delta forwarder a moment to flush what it holds first.
        tokio::task::yield_now().await;
        let _ = event_tx.send(event);
    });
    let stream = UnboundedReceiverStream::new(event_rx).map(Ok::<_, Infallible>);
    Ok(Sse::new(stream).into_response())
}

// --- container files ------------------------------------------------------

fn container_file_object(row: &ContainerFileRow) -> ContainerFile {
    ContainerFile {
        id: row.id.clone(),
        object: "container.file".to_owned(),
        created_at: row.created_at,
        bytes: row.bytes,
        container_id: row.container_id.clone(),
        path: row.path.clone(),
        source: row.source.clone(),
    }
}

/// The stored blob of a Files API file, opened.
fn open_blob(state: &AppState, file_id: &str) -> ApiResult<std::fs::File> {
    std::fs::File::open(state.files_dir.join(file_id))
        .map_err(|e| ApiError::internal(format!("read file {file_id}: {e}")))
}

/// A file name safe to place in `/mnt/data`: its last path component.
pub fn safe_file_name(name: &str) -> String {
    let base = name.rsplit(['/', '\\']).next().unwrap_or("").trim();
    match base {
        "" | "." | ".." => "upload".to_owned(),
        other => other.chars().filter(|c| *c != '\0').take(255).collect(),
    }
}

/// Brings the store's view of `/mnt/data` up to date: files commands made
/// appear (source `assistant`), files that are gone disappear.
async fn sync_files(state: &AppState, row: &ContainerRow) -> ApiResult<Vec<ContainerFileRow>> {
    // Reading /mnt/data starts a suspended container: that is a session.
    begin_activity(state, row)?;
    let id = row.id.as_str();
    let present = state
        .engine
        .list_files(id)
        .await
        .map_err(|e| engine_error(id, e))?;
    let known = state.store.container_files(id)?;
    for row in &known {
        if !present.iter().any(|f| f.path == row.path) {
            state.store.delete_container_file(id, &row.id)?;
        }
    }
    for file in &present {
        let existing = known.iter().find(|r| r.path == file.path);
        if existing.is_none_or(|r| r.bytes != file.bytes) {
            state.store.upsert_container_file(&ContainerFileRow {
                id: new_id("cfile_"),
                container_id: id.to_owned(),
                path: file.path.clone(),
                bytes: file.bytes,
                source: "assistant".to_owned(),
                created_at: file.modified_unix,
            })?;
        }
    }
    Ok(state.store.container_files(id)?)
}

pub async fn upload_file(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    headers: HeaderMap,
    request: Request,
) -> ApiResult<Json<ContainerFile>> {
    let container = owned(&state, &project, &id)?;
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
                let spooled =
                    spool(&mut field, &state.files_dir, state.config.max_upload_bytes).await?;
                upload = Some((name, spooled.file));
            }
        }
        upload.ok_or_else(|| ApiError::invalid("file", "a multipart field 'file' is required"))?
    } else if content_type.starts_with("application/json") {
        let ApiJson(body) =
            ApiJson::<CreateContainerFileFromId>::from_request(request, &()).await?;
        let file = state
            .store
            .file(&project.0, &body.file_id)?
            .ok_or_else(|| ApiError::not_found("file", &body.file_id))?;
        (safe_file_name(&file.filename), open_blob(&state, &file.id)?)
    } else {
        return Err(ApiError::unsupported_media_type(
            "Send the file as multipart/form-data (field 'file') or JSON {\"file_id\": ...}.",
        ));
    };
    let path = format!("/mnt/data/{name}");
    let _busy = state.busy(&id);
    begin_activity(&state, &container)?;
    let bytes = state
        .engine
        .write_file_from(&id, &path, source)
        .await
        .map_err(|e| engine_error(&id, e))?;
    let row = state.store.upsert_container_file(&ContainerFileRow {
        id: new_id("cfile_"),
        container_id: id.clone(),
        path,
        bytes,
        source: "user".to_owned(),
        created_at: now(),
    })?;
    Ok(Json(container_file_object(&row)))
}

pub fn multipart_error(error: axum::extract::multipart::MultipartError) -> ApiError {
    if error.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::too_large("The upload is larger than allowed.")
    } else {
        ApiError::bad_request(format!("Invalid multipart body: {}", error.body_text()))
    }
}

pub async fn list_files(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    ApiQuery(params): ApiQuery<ListParams>,
) -> ApiResult<Json<List<ContainerFile>>> {
    let container = owned(&state, &project, &id)?;
    let page = params.page()?;
    let _busy = state.busy(&id);
    let mut rows = sync_files(&state, &container).await?;
    if !page.ascending {
        rows.reverse();
    }
    if let Some(after) = &page.after {
        if let Some(position) = rows.iter().position(|r| &r.id == after) {
            rows.drain(..=position);
        }
    }
    let has_more = rows.len() > page.limit as usize;
    rows.truncate(page.limit as usize);
    let data = rows.iter().map(container_file_object).collect();
    Ok(Json(List::page(data, has_more, |f: &ContainerFile| {
        f.id.clone()
    })))
}

/// The project's container file, refreshed from the container.
async fn owned_file(
    state: &AppState,
    project: &Project,
    id: &str,
    file_id: &str,
) -> ApiResult<ContainerFileRow> {
    let container = owned(state, project, id)?;
    let rows = sync_files(state, &container).await?;
    rows.into_iter()
        .find(|r| r.id == file_id)
        .ok_or_else(|| ApiError::not_found("container file", file_id))
}

pub async fn retrieve_file(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path((id, file_id)): Path<(String, String)>,
) -> ApiResult<Json<ContainerFile>> {
    let _busy = state.busy(&id);
    Ok(Json(container_file_object(
        &owned_file(&state, &project, &id, &file_id).await?,
    )))
}

pub async fn file_content(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path((id, file_id)): Path<(String, String)>,
) -> ApiResult<Response> {
    let _busy = state.busy(&id);
    // (owned_file has recorded the activity.)
    let row = owned_file(&state, &project, &id, &file_id).await?;
    // Streamed from a descriptor the engine resolved inside /mnt/data: a
    // large file never sits in memory, and the path cannot be swapped.
    let file = state
        .engine
        .open_file(&id, &row.path)
        .await
        .map_err(|e| engine_error(&id, e))?;
    let body = Body::from_stream(crate::files::file_stream(tokio::fs::File::from_std(file)));
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], body).into_response())
}

pub async fn delete_file(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path((id, file_id)): Path<(String, String)>,
) -> ApiResult<Json<Deleted>> {
    let _busy = state.busy(&id);
    let row = owned_file(&state, &project, &id, &file_id).await?;
    state
        .engine
        .delete_file(&id, &row.path)
        .await
        .map_err(|e| engine_error(&id, e))?;
    state.store.delete_container_file(&id, &row.id)?;
    Ok(Json(Deleted::new(row.id, "container.file.deleted")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uploaded_names_stay_in_mnt_data() {
        assert_eq!(safe_file_name("../../etc/passwd"), "passwd");
        assert_eq!(safe_file_name("a\\b.txt"), "b.txt");
        assert_eq!(safe_file_name(".."), "upload");
        assert_eq!(safe_file_name(""), "upload");
        assert_eq!(safe_file_name("report.csv"), "report.csv");
    }

    #[test]
    fn exec_limits_name_their_param() {
        let body = |json: &str| serde_json::from_str::<ExecRequest>(json).unwrap();
        let param = |r: ApiResult<RunRequest>| r.err().and_then(|e| e.param);
        assert_eq!(
            param(run_request(&body(
                r#"{"commands":["true"],"timeout_ms":300001}"#
            )))
            .as_deref(),
            Some("timeout_ms")
        );
        assert_eq!(
            param(run_request(&body(
                r#"{"commands":["true"],"max_output_length":65537}"#
            )))
            .as_deref(),
            Some("max_output_length")
        );
        let many = format!(r#"{{"commands":[{}]}}"#, vec!["\"x\""; 101].join(","));
        assert_eq!(
            param(run_request(&body(&many))).as_deref(),
            Some("commands")
        );
        assert!(run_request(&body(r#"{"commands":["true"]}"#)).is_ok());
    }
}
