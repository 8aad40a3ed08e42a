//! `/v1/containers`: create, list, retrieve, delete, exec, and the
//! container's files.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRequest, Multipart, Path, Request, State};
use axum::http::{header, HeaderMap};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use shellgate_sandbox_api::backend::{limits, ContainerSpec, RunRequest, SkippedFiles, StreamKind};
use shellgate_sandbox_api::SandboxError;
use shellgate_store::{ContainerFileRow, ContainerRow, ContainerStatus, FileSource, PresentFile};
use shellgate_wire::new_id;
use shellgate_wire::{
    Container, ContainerFile, CreateContainer, CreateContainerFileFromId, Deleted, ExecRequest,
    ExpiresAfter, ExpiresAnchor, List, ListIncomplete, MountedSkill, NetworkPolicy,
    ShellCallOutput, StoredSkill,
};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;

use crate::engine::destroy_quietly;
use crate::engine::engine_error;
use crate::error::{ApiError, ApiResult};
use crate::files::safe_file_name;
use crate::http::to_completion;
use crate::http::{multipart_error, ApiJson, ApiQuery, ListParams, Project};
use crate::ports::PublicBase;
use crate::sandboxes::exec::Exec;
use crate::spool::spool;
use crate::state::AppState;
use crate::time::now;

/// Longest container name.
const MAX_NAME: usize = 256;

/// The network policy a container row keeps (secret values left out).
pub fn network_policy(row: &ContainerRow) -> NetworkPolicy {
    serde_json::from_str(&row.network_policy).unwrap_or(NetworkPolicy::Disabled)
}

/// The skills a container row keeps. Rows from before skills were mounted
/// hold the request's entries (no `path`): those were never in the
/// container, and are left out on purpose; any other entry that does not
/// read as a mounted skill is a corrupt row (an error, not a skill less).
pub fn mounted_skills(row: &ContainerRow) -> ApiResult<Vec<MountedSkill>> {
    let stored: Vec<StoredSkill> = serde_json::from_str(&row.skills)
        .map_err(|e| ApiError::internal(format!("container {}: its stored skills: {e}", row.id)))?;
    Ok(stored
        .into_iter()
        .filter_map(|skill| match skill {
            StoredSkill::Mounted(skill) => Some(skill),
            StoredSkill::NeverMounted => None,
        })
        .collect())
}

/// The container object of a row.
pub fn container_object(row: &ContainerRow) -> ApiResult<Container> {
    Ok(Container {
        id: row.id.clone(),
        object: "container".to_owned(),
        name: row.name.clone(),
        created_at: row.created_at,
        status: row.status.as_str().to_owned(),
        last_active_at: row.last_active_at,
        expires_after: ExpiresAfter {
            anchor: ExpiresAnchor::LastActiveAt,
            minutes: row.expires_minutes,
        },
        memory_limit: row.memory_limit,
        network_policy: network_policy(row),
        image: row.image.clone(),
        skills: mounted_skills(row)?,
        secrets_missing: Vec::new(),
        exposed_ports: Vec::new(),
        port_token: None,
    })
}

/// The container object of a row as the API shows it: with the secrets
/// whose values this server no longer holds (its network is off), and its
/// exposed ports where `base` says clients reach this server.
pub fn shown_container(
    state: &AppState,
    row: &ContainerRow,
    base: &PublicBase,
) -> ApiResult<Container> {
    let mut container = container_object(row)?;
    container.exposed_ports = row
        .exposed_ports
        .iter()
        .map(|port| base.exposed(&state.config.ports_base_domain, &row.id, *port))
        .collect();
    if !row.exposed_ports.is_empty() {
        container.port_token = row.port_token.clone();
    }
    container.secrets_missing = state
        .engine
        .secret_status(&row.id)
        .into_iter()
        .filter(|s| !s.held)
        .map(|s| s.name)
        .collect();
    Ok(container)
}

/// The engine's images, read on a blocking thread (the listing walks the
/// image store).
pub(crate) async fn image_list(
    state: &AppState,
) -> ApiResult<Vec<shellgate_sandbox_api::image::ImageInfo>> {
    let engine = Arc::clone(&state.engine);
    tokio::task::spawn_blocking(move || engine.images())
        .await
        .map_err(|e| ApiError::internal(format!("image listing failed: {e}")))
}

/// The image a new container is made from: the one asked for (a 400
/// naming the available ones if it is not there), else the server's
/// default, else (the default not built yet) `host`.
pub(crate) async fn choose_image(state: &Arc<AppState>, asked: Option<&str>) -> ApiResult<String> {
    let available: Vec<String> = image_list(state)
        .await?
        .into_iter()
        .map(|image| image.name)
        .collect();
    let host = shellgate_sandbox_api::image::HOST_IMAGE;
    match asked {
        Some(name) if available.iter().any(|a| a == name) => Ok(name.to_owned()),
        Some(name) => Err(ApiError::invalid(
            "image",
            format!(
                "no image named {name:?}; available: {}",
                available.join(", ")
            ),
        )),
        None => {
            let default = &state.config.default_image;
            if available.iter().any(|a| a == default) {
                return Ok(default.clone());
            }
            if default != host
                && !state
                    .default_image_missing_said
                    .swap(true, Ordering::Relaxed)
            {
                tracing::warn!(
                    "the default image {default:?} is not there yet: containers use {host:?} until \
                     it is (`shellgate image build {default}`)"
                );
            }
            Ok(host.to_owned())
        }
    }
}

/// The project's container `id`, or 404.
pub(crate) async fn owned(
    state: &AppState,
    project: &Project,
    id: &str,
) -> ApiResult<ContainerRow> {
    let (project, key) = (project.0.clone(), id.to_owned());
    state
        .db(move |s| s.container(&project, &key))
        .await?
        .ok_or_else(|| ApiError::not_found("container", id))
}

/// The rows of `project`'s files `ids`; one missing (or another project's)
/// is a 404 naming `param` (`param[i]`).
pub(crate) async fn project_files(
    state: &AppState,
    project: &str,
    ids: &[String],
    param: &str,
) -> ApiResult<Vec<shellgate_store::FileRow>> {
    let (owner, keys) = (project.to_owned(), ids.to_vec());
    let rows = state
        .db(move |s| {
            keys.iter()
                .map(|key| s.file(&owner, key))
                .collect::<Result<Vec<_>, _>>()
        })
        .await?;
    rows.into_iter()
        .zip(ids)
        .enumerate()
        .map(|(index, (row, id))| {
            row.ok_or_else(|| {
                let mut error = ApiError::not_found("file", id);
                error.param = Some(format!("{param}[{index}]"));
                error
            })
        })
        .collect()
}

pub(crate) fn validate_create(
    config: &crate::config::Config,
    body: &CreateContainer,
) -> ApiResult<()> {
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
    if body.skills.len() > 200 {
        return Err(ApiError::invalid(
            "skills",
            "at most 200 skills are allowed",
        ));
    }
    shellgate_wire::ports::check_exposed_ports(&body.exposed_ports)
        .map_err(|message| ApiError::invalid("exposed_ports", message))?;
    Ok(())
}

pub async fn create(
    State(state): State<Arc<AppState>>,
    project: Project,
    base: PublicBase,
    ApiJson(body): ApiJson<CreateContainer>,
) -> ApiResult<Json<Container>> {
    let row = create_container(&state, &project.0, body).await?;
    Ok(Json(shown_container(&state, &row, &base)?))
}

/// Makes a container for `project`: the one path of `POST /v1/containers`
/// and of the Responses API's `container_auto` (same validation, quotas,
/// expiry and metering). Runs to completion once admitted.
pub(crate) async fn create_container(
    state: &Arc<AppState>,
    project: &str,
    body: CreateContainer,
) -> ApiResult<ContainerRow> {
    let project = Project(project.to_owned());
    validate_create(&state.config, &body)?;
    let network = crate::egress::network_spec(
        &state.config,
        body.network_policy.as_ref(),
        "network_policy",
    )?;
    // Every file must exist (in this project) before anything is made.
    let files = project_files(state, &project.0, &body.file_ids, "file_ids").await?;
    let memory = body.memory_limit.unwrap_or_default();
    let image = choose_image(state, body.image.as_deref()).await?;
    let skills = crate::skills::resolve(state, &project.0, &body.skills, "skills").await?;
    let exposed_ports = shellgate_wire::ports::check_exposed_ports(&body.exposed_ports)
        .map_err(|message| ApiError::invalid("exposed_ports", message))?;
    // A token only where there are ports for it to open.
    let port_token = (!exposed_ports.is_empty()).then(|| new_id("sgpt_"));
    let now = now();
    let row = ContainerRow {
        id: new_id("cntr_"),
        project: project.0.clone(),
        name: body.name.clone(),
        created_at: now,
        last_active_at: now,
        status: ContainerStatus::Creating,
        memory_limit: memory,
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
        skills: serde_json::to_string(
            &skills
                .iter()
                .map(crate::skills::Mounted::summary)
                .collect::<Vec<_>>(),
        )
        .map_err(|e| ApiError::internal(e.to_string()))?,
        file_ids: serde_json::to_string(&body.file_ids)
            .map_err(|e| ApiError::internal(e.to_string()))?,
        billed_seconds: 0.0,
        session_seconds: 0.0,
        session_open: false,
        image: image.clone(),
        sleep_after_secs: None,
        exposed_ports,
        port_token,
        node_id: state.node_name.clone(),
    };
    // Impossible on this host (400) before over this project's quota (429).
    shellgate_sandbox_api::backend::check_memory(memory.bytes(), state.engine.memory_ceiling())?;
    // Run to completion whether or not the client stays: a create either
    // finishes (the container is listed) or cleans up after itself.
    let worker = Arc::clone(state);
    let id = row.id.clone();
    to_completion(async move {
        let state = worker;
        // The row first (status `creating`), written only if the project's
        // quotas admit it: a crash from here on is cleaned up at the next
        // start, never leaving a container the store does not know.
        state.admission.insert_container(row.clone()).await?;
        // Unpacked beside the engine's directory; the engine adopts it.
        let skills_dir = state.config.data_dir.join("skill-mounts").join(&row.id);
        let made = async {
            let spec = ContainerSpec {
                memory_bytes: memory.bytes(),
                cpu_cores: state.config.container_cpu_ceiling(),
                network,
                image,
                skills: if skills.is_empty() {
                    None
                } else {
                    crate::skills::unpack(&skills, skills_dir.clone()).await?;
                    Some(skills_dir.clone())
                },
                ..ContainerSpec::default()
            };
            state.engine.create(&row.id, spec).await?;
            for file in &files {
                let path = format!("/mnt/data/{}", safe_file_name(&file.filename));
                let blob =
                    crate::blobs::open_file(state.objects.as_ref(), &state.spool_dir, &file.id)
                        .await?;
                let bytes = state.engine.write_file_from(&row.id, &path, blob).await?;
                let file_row = ContainerFileRow {
                    id: new_id("cfile_"),
                    container_id: row.id.clone(),
                    path,
                    bytes,
                    source: FileSource::User,
                    created_at: now,
                };
                state
                    .db(move |s| s.upsert_container_file(&file_row))
                    .await?;
            }
            let id = row.id.clone();
            if !state.db(move |s| s.finish_creating(&id)).await? {
                // Its node (this one) was declared lost meanwhile: a
                // create the replicas gave up on is undone, not finished.
                let mut error = ApiError::new(
                    axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    "server_error",
                    "The node making this container stopped answering for a while; nothing \
                     was made. Try again.",
                );
                error.code = Some("node_unreachable");
                error.retry_after = Some(5);
                return Err(error);
            }
            Ok::<_, ApiError>(())
        }
        .await;
        if made.is_err() {
            // Not adopted by the engine: still the server's to remove.
            let dir = skills_dir.clone();
            let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir)).await;
        }
        if let Err(error) = made {
            destroy_quietly(state.engine.as_ref(), &row.id).await;
            let id = row.id.clone();
            let _ = state.db(move |s| s.delete_container(&id)).await;
            return Err(error);
        }
        Ok(())
    })
    .await?;
    owned(state, &project, &id).await
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

/// Removes a container: its processes, its files, its row (its time billed
/// first).
pub(crate) async fn remove_container(state: &Arc<AppState>, id: &str) -> ApiResult<()> {
    state.forget_owner(id);
    // An E2B sandbox's record goes with the row: its access check too.
    state.e2b_access.forget(id);
    destroy_quietly(state.engine.as_ref(), id).await;
    state.interpreters.forget_container(id);
    state.billing.flush().await;
    let key = id.to_owned();
    state.db(move |s| s.delete_container(&key)).await
}

/// Checks an exec body against the limits, naming the offending `param`.
/// (`RunRequest::from_parts`: the same rule as a model's shell call.)
pub(crate) fn run_request(body: &ExecRequest, deadline_secs: u64) -> ApiResult<RunRequest> {
    Ok(RunRequest::from_parts(
        body.commands.clone(),
        body.timeout_ms,
        body.max_output_length.map(|n| n as u64),
        Some(deadline_secs.saturating_mul(1000)),
    )?)
}

pub async fn exec(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<ExecRequest>,
) -> ApiResult<Response> {
    let request = run_request(&body, state.config.request_deadline_secs)?;
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
    Ok(Sse::new(stream)
        .keep_alive(crate::http::sse_keep_alive())
        .into_response())
}

/// `GET /v1/images` (our extension): the images containers can be made
/// from, with their sizes and runtimes, and which one is the default.
pub async fn images(
    State(state): State<Arc<AppState>>,
    _project: Project,
) -> ApiResult<Json<shellgate_wire::ImageList>> {
    let images = image_list(&state).await?;
    let default = &state.config.default_image;
    let data: Vec<shellgate_wire::Image> = images
        .into_iter()
        .map(|image| shellgate_wire::Image {
            id: image.name.clone(),
            object: "image".to_owned(),
            default: &image.name == default,
            name: image.name,
            size_bytes: image.details.size_bytes,
            created_at: image.details.created_at,
            runtimes: image.details.runtimes,
        })
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

/// What a listing had to leave out, said in the list (never silently).
fn incomplete(skipped: SkippedFiles, secret_names: usize) -> Option<ListIncomplete> {
    if !skipped.any() && secret_names == 0 {
        return None;
    }
    let mut reasons = Vec::new();
    if secret_names > 0 {
        reasons.push(format!("{secret_names} names hold a secret's value"));
    }
    if skipped.entry_limit_reached {
        reasons.push(format!(
            "it holds more than the {} files a listing walks",
            limits::MAX_LISTED_FILES
        ));
    }
    if skipped.too_deep_directories > 0 {
        reasons.push(format!(
            "{} directories are nested deeper than {} levels",
            skipped.too_deep_directories,
            limits::MAX_LISTED_DEPTH
        ));
    }
    if skipped.non_utf8_names > 0 {
        reasons.push(format!(
            "{} names are not valid UTF-8",
            skipped.non_utf8_names
        ));
    }
    Some(ListIncomplete {
        message: format!(
            "This listing is incomplete: {}. Reach the rest with commands.",
            reasons.join("; ")
        ),
        non_utf8_names: skipped.non_utf8_names,
        too_deep_directories: skipped.too_deep_directories,
        entry_limit_reached: skipped.entry_limit_reached,
    })
}

/// Brings the store's rows of a container's files up to date: files commands
/// made appear (source `assistant`), files that are gone disappear. One sync
/// per container at a time (a second waits, then finds nothing to change).
pub(crate) async fn sync_files(state: &AppState, id: &str) -> ApiResult<Option<ListIncomplete>> {
    let lock = state.sync_lock(id);
    let _one_at_a_time = lock.lock().await;
    let listing = state
        .engine
        .list_files(id)
        .await
        .map_err(|e| engine_error(id, e))?;
    let skipped = listing.skipped;
    // A name that holds a secret's value (a command can make one) is
    // neither stored nor shown: only commands reach such a file.
    let masker = state.engine.masker(id);
    let mut secret_names = 0;
    let present: Vec<PresentFile> = listing
        .files
        .into_iter()
        .filter(|f| {
            let clean = masker
                .as_ref()
                .is_none_or(|m| m.mask(f.path.as_bytes()) == f.path.as_bytes());
            secret_names += usize::from(!clean);
            clean
        })
        .map(|f| PresentFile {
            path: f.path,
            bytes: f.bytes,
            modified_unix: f.modified_unix,
        })
        .collect();
    let key = id.to_owned();
    state
        .db(move |s| s.sync_container_files(&key, &present, || new_id("cfile_")))
        .await?;
    Ok(incomplete(skipped, secret_names))
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
                let spooled =
                    spool(&mut field, &state.spool_dir, state.config.max_upload_bytes).await?;
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
    let body = Body::from_stream(crate::files::masked_file_stream(
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
        let promoted = new_id("file-");
        let key = crate::blobs::file_key(&promoted)?;
        let limit = state.config.max_upload_bytes as u64;
        // Masked as downloads are: promote is no way around the masker.
        let chunks = crate::files::masked_file_stream(
            tokio::fs::File::from_std(file),
            state.engine.masker(&id),
        );
        let failure = crate::blobs::BodyFailure::default();
        let bytes = state
            .objects
            .put(&key, crate::blobs::capped_body(chunks, limit, &failure))
            .await
            .map_err(|e| failure.explain(e))?;
        let blob = crate::blobs::Unrecorded::new(&state.objects, key);
        let filename = safe_file_name(row.path.rsplit('/').next().unwrap_or("file"));
        let file_row = shellgate_store::FileRow {
            id: promoted,
            project: project.0.clone(),
            filename,
            purpose: "user_data".to_owned(),
            bytes,
            created_at: now(),
            expires_at: None,
        };
        let inserted = file_row.clone();
        // A failed insert drops `blob`, which removes it.
        state.db(move |s| s.insert_file(&inserted)).await?;
        blob.recorded();
        Ok(Json(crate::files::file_object(&file_row)))
    })
    .await
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
        let run_request = |body: &ExecRequest| run_request(body, 600);
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

    fn row_with_skills(skills: &str) -> ContainerRow {
        ContainerRow {
            id: "cntr_1".to_owned(),
            project: "p".to_owned(),
            name: "x".to_owned(),
            created_at: 0,
            last_active_at: 0,
            status: ContainerStatus::Running,
            memory_limit: shellgate_wire::MemoryLimit::OneGb,
            expires_minutes: 20,
            network_policy: r#"{"type":"disabled"}"#.to_owned(),
            skills: skills.to_owned(),
            file_ids: "[]".to_owned(),
            billed_seconds: 0.0,
            session_seconds: 0.0,
            session_open: false,
            image: "host".to_owned(),
            sleep_after_secs: None,
            exposed_ports: Vec::new(),
            port_token: None,
            node_id: String::new(),
        }
    }

    #[test]
    fn a_rows_skills_are_its_mounted_ones_and_a_corrupt_row_is_an_error() {
        let row = row_with_skills(
            r#"[{"type":"inline","name":"old"},
                {"description":"d","name":"n","path":"/mnt/skills/n","skill_id":"skill_1","version":"2"}]"#,
        );
        let skills = container_object(&row).expect("the row reads").skills;
        assert_eq!(
            skills,
            vec![MountedSkill {
                description: "d".to_owned(),
                name: "n".to_owned(),
                path: "/mnt/skills/n".to_owned(),
                skill_id: Some("skill_1".to_owned()),
                version: Some("2".to_owned()),
            }]
        );
        // Mounted (it has a path) but not a mounted skill: not skipped.
        assert!(mounted_skills(&row_with_skills(r#"[{"path":"/mnt/skills/n"}]"#)).is_err());
        assert!(mounted_skills(&row_with_skills("not json")).is_err());
        assert!(mounted_skills(&row_with_skills("[]")).is_ok_and(|s| s.is_empty()));
    }
}
