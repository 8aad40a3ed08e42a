//! E2B's template API: a project's templates built by the SDKs' template
//! builder (`Template().from_base_image().run_cmd(…).copy(…)` and
//! `Template.build`), and sandboxes started from them.
//!
//! A template is the server's image plus a *layer*: the sandbox user's home
//! (`/home/user`) as the build left it, a tar blob in the object store
//! (`templates/layers/<template>.tar`). The build runs every step in a
//! build sandbox, an ordinary container of the project made from the base
//! image (the same isolation, quotas and network policy as any container),
//! then exports the home as the layer and removes the sandbox. A sandbox
//! created from the template is made from the base image with the layer
//! unpacked into its home, the template's `ENV`s as its environment, and
//! its start command started (and its ready command awaited) before the
//! create answers.
//!
//! Build sandboxes have no root, as every container: a `RUN` step as `root`
//! (E2B's `pip_install`, `apt_install` helpers) runs as the sandbox user,
//! so `pip install` is a user install that lands in the layer, and what
//! needs root (`apt-get install`) fails the build with apt's own words.
//! Only what is under the home is kept: a `COPY` or `WORKDIR` elsewhere is
//! refused at the step.
//!
//! - Calls: `POST /v3/templates` (name → template and build ids), `GET
//!   /templates/{id}/files/{hash}` (whether a `COPY` step's files are there,
//!   else an upload URL carrying the template's upload token), `PUT` of
//!   that URL, `POST /v2/templates/{id}/builds/{build}` (the steps; the
//!   build starts), `GET /templates/{id}/builds/{build}/status?logsOffset=`
//!   (status, log entries after the offset, the failure with its step),
//!   `GET /templates/aliases/{name}` (in `control`), `DELETE
//!   /templates/{id}`.
//! - Bases: E2B's base, Debian, Python and Node images and the default
//!   templates all name the server's default image; `fromTemplate` names
//!   another ready template of the project (its layer first). Any other OCI
//!   image is refused, naming those.
//! - Bounds: [`MAX_TEMPLATES`] per project, a layer of at most
//!   [`MAX_LAYER_BYTES`], uploads of at most [`MAX_UPLOAD_BYTES`], one build
//!   at a time per project, [`BUILD_DEADLINE`] per build. A build the server
//!   stopped during is marked failed at the next start ([`fail_unfinished`]);
//!   its build sandbox expires as any container does, and no layer is
//!   written until the build has succeeded.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::Json;
use serde::{Deserialize, Serialize};
use shellgate_objects::Key;
use shellgate_sandbox_api::backend::RunRequest;
use shellgate_sandbox_api::process::ProcessSpec;
use shellgate_store::{
    E2bTemplateRow, TEMPLATE_BUILDING, TEMPLATE_ERROR, TEMPLATE_READY, TEMPLATE_WAITING,
};
use shellgate_wire::e2b::{
    BuildLogEntry, BuildStatusReason, TemplateBuildRequest, TemplateBuildRequested,
    TemplateBuildStart, TemplateBuildStatus, TemplateFileUpload, TemplateStep,
};
use shellgate_wire::time::rfc3339;
use shellgate_wire::{CreateContainer, ExpiresAfter, ExpiresAnchor, NetworkPolicy, Outcome};

use super::request::{bad_request, E2bProject};
use super::E2bError;
use crate::public_base::PublicBase;
use crate::state::AppState;

/// Templates that stand for the server's default image.
pub(crate) const DEFAULT_TEMPLATES: [&str; 3] = ["base", "code-interpreter-v1", "code-interpreter"];

/// Templates a project may have.
pub const MAX_TEMPLATES: usize = 20;
/// The largest layer (the home a build leaves).
pub const MAX_LAYER_BYTES: u64 = 512 << 20;
/// The largest `COPY` upload (gzipped tar, and its tar unpacked).
pub const MAX_UPLOAD_BYTES: u64 = 256 << 20;
/// How long a build may take, all steps together.
pub const BUILD_DEADLINE: Duration = Duration::from_secs(30 * 60);
/// How long one `RUN` step may take (the longest command a container runs).
const STEP_TIMEOUT_MS: u64 = shellgate_sandbox_api::backend::limits::MAX_TIMEOUT_MS;
/// How long a sandbox's ready command is retried before its create fails.
const READY_DEADLINE: Duration = Duration::from_secs(120);
/// The home: what a build keeps, and where a sandbox gets it.
const HOME: &str = "/home/user";
/// Log entries one status answer carries (E2B's page).
const LOG_PAGE: i64 = 100;
/// Log entries kept per build.
const MAX_LOG_ENTRIES: usize = 10_000;
/// The base images E2B's builder names that the server's default image
/// stands for (a tag after `:` is allowed).
const DEFAULT_IMAGE_NAMES: &[&str] = &[
    "e2bdev/base",
    "e2bdev/code-interpreter",
    "debian",
    "python",
    "node",
];

/// Log entries of the builds this process runs not yet written to the
/// store ([`write_log`] writes them at each step's end): the store's log
/// is what every node's status answers from.
fn unwritten_log() -> &'static Mutex<HashMap<String, Vec<BuildLogEntry>>> {
    static UNWRITTEN: OnceLock<Mutex<HashMap<String, Vec<BuildLogEntry>>>> = OnceLock::new();
    UNWRITTEN.get_or_init(Mutex::default)
}

fn log(build_id: &str, level: &str, step: Option<usize>, message: impl Into<String>) {
    let mut logs = unwritten_log().lock().unwrap_or_else(|p| p.into_inner());
    let entries = logs.entry(build_id.to_owned()).or_default();
    if entries.len() < MAX_LOG_ENTRIES {
        entries.push(BuildLogEntry {
            timestamp: rfc3339(crate::time::now()),
            message: message.into(),
            level: level.to_owned(),
            step: step.map(|s| s.to_string()),
        });
    }
}

/// Writes a build's unwritten log entries to the store.
async fn write_log(state: &AppState, build_id: &str) {
    let entries = unwritten_log()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(build_id)
        .unwrap_or_default();
    let lines: Vec<String> = entries
        .iter()
        .filter_map(|entry| serde_json::to_string(entry).ok())
        .collect();
    let build = build_id.to_owned();
    if let Err(e) = state
        .db(move |s| s.append_e2b_template_logs(&build, &lines))
        .await
    {
        tracing::warn!(build = %build_id, "cannot write the build's log: {}", e.message);
    }
}

/// What a template's build does and what its sandboxes get, as stored
/// in its row's `spec`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct TemplateSpec {
    /// The project template whose layer comes first.
    #[serde(default)]
    pub parent: Option<String>,
    #[serde(default)]
    pub steps: Vec<TemplateStep>,
    #[serde(default)]
    pub start_cmd: Option<String>,
    #[serde(default)]
    pub ready_cmd: Option<String>,
    /// The `ENV` steps' variables: every sandbox's environment.
    #[serde(default)]
    pub envs: BTreeMap<String, String>,
    /// The last `WORKDIR`: where the start command runs.
    #[serde(default)]
    pub workdir: Option<String>,
}

pub(crate) fn routes(table: crate::route_table::RouteTable) -> crate::route_table::RouteTable {
    table
        .route("/v3/templates", post(request_build))
        .route("/templates/{template_id}", delete(remove))
        .route(
            "/templates/{template_id}/files/{hash}",
            get(file_link).put(upload),
        )
        .route(
            "/v2/templates/{template_id}/builds/{build_id}",
            post(start_build),
        )
        .route(
            "/templates/{template_id}/builds/{build_id}/status",
            get(status),
        )
}

fn internal(error: impl std::fmt::Display) -> E2bError {
    E2bError::new(StatusCode::INTERNAL_SERVER_ERROR, error.to_string())
}

fn not_found(id: &str) -> E2bError {
    E2bError::new(StatusCode::NOT_FOUND, format!("template '{id}' not found"))
}

fn layer_key(template_id: &str) -> Result<Key, E2bError> {
    Key::new(format!("templates/layers/{template_id}.tar")).map_err(internal)
}

fn files_key(template_id: &str, hash: &str) -> Result<Key, E2bError> {
    Key::new(format!("templates/files/{template_id}/{hash}.tar.gz")).map_err(internal)
}

/// A name as E2B allows them: 1 to 128 lowercase letters, digits and
/// `-_./`, not one of the server's own templates.
fn check_name(name: &str) -> Result<(), E2bError> {
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_./".contains(c);
    if name.is_empty() || name.len() > 128 || !name.chars().all(allowed) {
        return Err(bad_request(format!(
            "template name {name:?}: 1 to 128 lowercase letters, digits, '-', '_', '.' or '/'"
        )));
    }
    if DEFAULT_TEMPLATES.contains(&name) {
        return Err(bad_request(format!(
            "template name {name:?} is one of the server's own templates"
        )));
    }
    Ok(())
}

async fn project_template(
    state: &AppState,
    project: &str,
    key: &str,
) -> Result<E2bTemplateRow, E2bError> {
    let (owner, wanted) = (project.to_owned(), key.to_owned());
    state
        .db(move |s| s.e2b_template(&owner, &wanted))
        .await
        .map_err(E2bError::from)?
        .ok_or_else(|| not_found(key))
}

/// The project's ready template a sandbox create names, with its spec.
pub(crate) async fn ready_template(
    state: &AppState,
    project: &str,
    key: &str,
) -> Result<Option<(E2bTemplateRow, TemplateSpec)>, E2bError> {
    // `name:tag` names the template `name` (one build per name here).
    let untagged = key.split_once(':').map_or(key, |(name, _)| name);
    let (owner, wanted) = (project.to_owned(), untagged.to_owned());
    let row = state
        .db(move |s| s.e2b_template(&owner, &wanted))
        .await
        .map_err(E2bError::from)?;
    let Some(row) = row else {
        return Ok(None);
    };
    if row.status != TEMPLATE_READY {
        return Err(bad_request(format!(
            "template '{key}' is not ready (its build is {}{})",
            row.status,
            row.reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        )));
    }
    let spec = serde_json::from_str(&row.spec).map_err(internal)?;
    Ok(Some((row, spec)))
}

/// `POST /v3/templates`: a new build of the template `name`.
async fn request_build(
    State(state): State<Arc<AppState>>,
    E2bProject(project): E2bProject,
    body: Bytes,
) -> Result<Response, E2bError> {
    let request: TemplateBuildRequest = serde_json::from_slice(&body)
        .map_err(|e| bad_request(format!("invalid request body: {e}")))?;
    let name = request
        .name
        .or(request.alias)
        .ok_or_else(|| bad_request("name is required"))?;
    // `name:tag`: the tag is E2B's version label; one build per name here.
    let (name, tag) = match name.split_once(':') {
        Some((name, tag)) => (name.to_owned(), Some(tag.to_owned())),
        None => (name, None),
    };
    check_name(&name)?;
    let owner = project.clone();
    let existing = state
        .db(move |s| s.e2b_templates(&owner))
        .await
        .map_err(E2bError::from)?;
    if existing.len() >= MAX_TEMPLATES && !existing.iter().any(|t| t.name == name) {
        return Err(E2bError::new(
            StatusCode::FORBIDDEN,
            format!(
                "this project has {} templates, the most it may have ({MAX_TEMPLATES}); \
                 delete one first",
                existing.len()
            ),
        ));
    }
    let now = crate::time::now();
    let row = E2bTemplateRow {
        template_id: shellgate_wire::new_id("tpl"),
        project,
        name: name.clone(),
        build_id: shellgate_wire::new_id("bld"),
        status: TEMPLATE_WAITING.to_owned(),
        spec: "{}".to_owned(),
        reason: None,
        failed_step: None,
        layer_bytes: 0,
        upload_token: shellgate_wire::new_id("tplup"),
        created_at: now,
        updated_at: now,
    };
    let row = state
        .db(move |s| s.begin_e2b_template_build(&row))
        .await
        .map_err(E2bError::from)?;
    let mut tags: Vec<String> = tag
        .into_iter()
        .chain(request.tags.unwrap_or_default())
        .collect();
    if tags.is_empty() {
        tags.push("default".to_owned());
    }
    Ok((
        StatusCode::ACCEPTED,
        Json(TemplateBuildRequested {
            template_id: row.template_id,
            build_id: row.build_id,
            public: false,
            names: vec![name.clone()],
            tags,
            aliases: vec![name],
        }),
    )
        .into_response())
}

fn check_hash(hash: &str) -> Result<(), E2bError> {
    if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad_request(format!(
            "files hash {hash:?} is not a hex sha256"
        )));
    }
    Ok(())
}

/// `GET /templates/{id}/files/{hash}`: whether a `COPY` step's files are
/// here, else the URL to `PUT` them to (201, as E2B answers it).
async fn file_link(
    State(state): State<Arc<AppState>>,
    E2bProject(project): E2bProject,
    Path((template_id, hash)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<(StatusCode, Json<TemplateFileUpload>), E2bError> {
    check_hash(&hash)?;
    let row = project_template(&state, &project, &template_id).await?;
    let key = files_key(&row.template_id, &hash)?;
    let present = state.objects.size(&key).await.map_err(internal)?.is_some();
    let url = (!present).then(|| {
        PublicBase::of(&state, &headers).url(&format!(
            "/templates/{}/files/{hash}?token={}",
            row.template_id, row.upload_token
        ))
    });
    Ok((
        StatusCode::CREATED,
        Json(TemplateFileUpload { present, url }),
    ))
}

#[derive(Debug, Deserialize)]
struct UploadQuery {
    token: String,
}

/// `PUT /templates/{id}/files/{hash}?token=`: a `COPY` step's files (the
/// SDK's gzipped tar), authorised by the template's upload token.
async fn upload(
    State(state): State<Arc<AppState>>,
    Path((template_id, hash)): Path<(String, String)>,
    Query(query): Query<UploadQuery>,
    body: Body,
) -> Result<StatusCode, E2bError> {
    check_hash(&hash)?;
    let wanted = template_id.clone();
    let row = state
        .db(move |s| s.e2b_template_by_id(&wanted))
        .await
        .map_err(E2bError::from)?;
    let Some(row) = row else {
        return Err(not_found(&template_id));
    };
    let token_matches: bool = subtle_eq(row.upload_token.as_bytes(), query.token.as_bytes());
    if !token_matches {
        return Err(E2bError::new(
            StatusCode::FORBIDDEN,
            "the upload URL's token is not this template's",
        ));
    }
    let bytes = axum::body::to_bytes(body, MAX_UPLOAD_BYTES as usize)
        .await
        .map_err(|e| {
            E2bError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("upload refused (at most {MAX_UPLOAD_BYTES} bytes): {e}"),
            )
        })?;
    let key = files_key(&row.template_id, &hash)?;
    shellgate_objects::put_bytes(state.objects.as_ref(), &key, bytes)
        .await
        .map_err(internal)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Equality that takes as long whatever the bytes.
fn subtle_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Where a build starts: the server's default image (`None`) and, for
/// `fromTemplate` of a project template, that template.
fn base_of(start: &TemplateBuildStart) -> Result<Option<String>, E2bError> {
    if start.from_image_registry.is_some() {
        return Err(bad_request(
            "fromImageRegistry: shellgate builds templates from its own images, not from a registry",
        ));
    }
    if let Some(template) = &start.from_template {
        return Ok((!DEFAULT_TEMPLATES.contains(&template.as_str())).then(|| template.clone()));
    }
    let image = start.from_image.as_deref().unwrap_or("e2bdev/base");
    let repository = image.split(':').next().unwrap_or(image);
    let repository = repository.strip_prefix("docker.io/").unwrap_or(repository);
    let repository = repository.strip_prefix("library/").unwrap_or(repository);
    if DEFAULT_IMAGE_NAMES.contains(&repository) {
        return Ok(None);
    }
    Err(bad_request(format!(
        "fromImage {image:?}: shellgate builds templates on its own Debian 12 image only; \
         use from_base_image(), from_debian_image(), from_python_image(), from_node_image() \
         or from_template() of a ready template (other OCI images are not supported)"
    )))
}

/// The steps' environment and working directory, checked: only the kinds
/// E2B's builder sends, with their arguments.
fn fold_steps(
    steps: &[TemplateStep],
) -> Result<(BTreeMap<String, String>, Option<String>), E2bError> {
    let mut envs = BTreeMap::new();
    let mut workdir = None;
    for (index, step) in steps.iter().enumerate() {
        let at = |why: &str| bad_request(format!("step {} ({}): {why}", index + 1, step.kind));
        match step.kind.as_str() {
            "RUN" | "USER" if step.args.is_empty() => return Err(at("no arguments")),
            "RUN" | "USER" => {}
            "COPY" => {
                if step.args.len() < 2 || step.files_hash.is_none() {
                    return Err(at("a source, a destination and the files' hash are needed"));
                }
            }
            "ENV" => {
                if step.args.len() % 2 != 0 {
                    return Err(at("name and value pairs are needed"));
                }
                for pair in step.args.chunks(2) {
                    envs.insert(pair[0].clone(), pair[1].clone());
                }
            }
            "WORKDIR" => {
                let dir = step.args.first().ok_or_else(|| at("no directory"))?;
                workdir = Some(absolute(dir, workdir.as_deref()));
            }
            other => return Err(at(&format!("{other} steps are not supported"))),
        }
    }
    Ok((envs, workdir))
}

/// `path` made absolute against `cwd` (the home by default).
fn absolute(path: &str, cwd: Option<&str>) -> String {
    if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("{}/{path}", cwd.unwrap_or(HOME).trim_end_matches('/'))
    }
}

/// `POST /v2/templates/{id}/builds/{build}`: the build's steps; it starts.
async fn start_build(
    State(state): State<Arc<AppState>>,
    E2bProject(project): E2bProject,
    Path((template_id, build_id)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, E2bError> {
    let start: TemplateBuildStart = serde_json::from_slice(&body)
        .map_err(|e| bad_request(format!("invalid request body: {e}")))?;
    let row = project_template(&state, &project, &template_id).await?;
    if row.build_id != build_id {
        return Err(E2bError::new(
            StatusCode::NOT_FOUND,
            format!("build '{build_id}' of template '{template_id}' not found"),
        ));
    }
    if row.status != TEMPLATE_WAITING {
        return Err(E2bError::new(
            StatusCode::CONFLICT,
            format!("build '{build_id}' was started already ({})", row.status),
        ));
    }
    let parent = base_of(&start)?;
    if let Some(parent) = &parent {
        if parent == &row.name || parent == &row.template_id {
            return Err(bad_request(
                "fromTemplate: a template cannot start from itself",
            ));
        }
        ready_template(&state, &project, parent)
            .await?
            .ok_or_else(|| not_found(parent))?;
    }
    let (envs, workdir) = fold_steps(&start.steps)?;
    let spec = TemplateSpec {
        parent,
        steps: start.steps,
        start_cmd: start.start_cmd.filter(|c| !c.trim().is_empty()),
        ready_cmd: start.ready_cmd.filter(|c| !c.trim().is_empty()),
        envs,
        workdir,
    };
    let text = serde_json::to_string(&spec).map_err(internal)?;
    let (id, build) = (row.template_id.clone(), row.build_id.clone());
    let started = state
        .db(move |s| {
            s.set_e2b_template_status(
                &id,
                &build,
                TEMPLATE_BUILDING,
                Some(&text),
                crate::time::now(),
            )
        })
        .await
        .map_err(E2bError::from)?;
    if !started {
        return Err(E2bError::new(
            StatusCode::CONFLICT,
            format!("build '{build_id}' is no longer the template's latest"),
        ));
    }
    log(
        &row.build_id,
        "info",
        None,
        format!("Building template {} ({})", row.name, row.template_id),
    );
    write_log(&state, &row.build_id).await;
    tokio::spawn(run_build(state, row, spec));
    Ok(StatusCode::ACCEPTED)
}

/// A failed step: what E2B's status says (`reason.message`, `reason.step`).
struct StepFailure {
    message: String,
    step: Option<usize>,
}

impl StepFailure {
    fn at(step: usize, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            step: Some(step),
        }
    }

    fn whole(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            step: None,
        }
    }
}

/// Runs a build to its end (one at a time per project) and records it.
async fn run_build(state: Arc<AppState>, row: E2bTemplateRow, spec: TemplateSpec) {
    let lock = super::request::e2b_lock(&state, &format!("template-build\n{}", row.project));
    let _one_at_a_time = lock.lock().await;
    let outcome = match tokio::time::timeout(BUILD_DEADLINE, build(&state, &row, &spec)).await {
        Ok(outcome) => outcome,
        Err(_) => Err(StepFailure::whole(format!(
            "the build took longer than {} minutes",
            BUILD_DEADLINE.as_secs() / 60
        ))),
    };
    let recorded = match outcome {
        Ok(bytes) => {
            log(
                &row.build_id,
                "info",
                None,
                format!("Template ready ({bytes} bytes of layer)"),
            );
            Ok(bytes as i64)
        }
        Err(failure) => {
            log(
                &row.build_id,
                "error",
                failure.step,
                failure.message.clone(),
            );
            Err((failure.message, failure.step.map(|s| s.to_string())))
        }
    };
    write_log(&state, &row.build_id).await;
    let (id, build) = (row.template_id.clone(), row.build_id.clone());
    if let Err(e) = state
        .db(move |s| s.finish_e2b_template_build(&id, &build, recorded, crate::time::now()))
        .await
    {
        tracing::error!(template = %row.template_id, "cannot record the build's end: {}", e.message);
    }
}

/// The build: a build sandbox from the base, the parent's layer, each step,
/// the home saved as the layer. Answers the layer's size.
async fn build(
    state: &Arc<AppState>,
    row: &E2bTemplateRow,
    spec: &TemplateSpec,
) -> Result<u64, StepFailure> {
    let wildcard = NetworkPolicy::Allowlist {
        allowed_domains: vec!["*".to_owned()],
        domain_secrets: Vec::new(),
        tls_passthrough_domains: Vec::new(),
    };
    // Package installs need the network where the operator allows it;
    // elsewhere the build gets shellgate's default (none), and says so.
    let network = match crate::egress::network_spec(&state.config, Some(&wildcard), "network") {
        Ok(_) => Some(wildcard),
        Err(_) => {
            log(
                &row.build_id,
                "warn",
                None,
                "No network: this server lets no container reach any domain",
            );
            None
        }
    };
    let container = CreateContainer {
        name: format!("e2b-template-build:{}", row.name),
        file_ids: Vec::new(),
        expires_after: Some(ExpiresAfter {
            anchor: ExpiresAnchor::LastActiveAt,
            minutes: 20,
        }),
        skills: Vec::new(),
        memory_limit: None,
        network_policy: network,
        image: None,
        exposed_ports: Vec::new(),
        volumes: Vec::new(),
        snapshot_id: None,
    };
    let made = crate::sandboxes::containers::create_container(state, &row.project, container)
        .await
        .map_err(|e| {
            StepFailure::whole(format!("cannot start the build sandbox: {}", e.message))
        })?;
    log(
        &row.build_id,
        "info",
        None,
        format!("Build sandbox {} started", made.id),
    );
    let outcome = build_in(state, row, spec, &made.id).await;
    let _ = crate::sandboxes::containers::remove_container(state, &made.id).await;
    outcome
}

async fn build_in(
    state: &Arc<AppState>,
    row: &E2bTemplateRow,
    spec: &TemplateSpec,
    container: &str,
) -> Result<u64, StepFailure> {
    if let Some(parent) = &spec.parent {
        let (parent_row, _) = ready_template(state, &row.project, parent)
            .await
            .ok()
            .flatten()
            .ok_or_else(|| {
                StepFailure::at(0, format!("template '{parent}' is not ready any more"))
            })?;
        unpack_layer(state, &parent_row.template_id, container)
            .await
            .map_err(|e| {
                StepFailure::at(
                    0,
                    format!("cannot unpack template '{parent}': {}", e.message),
                )
            })?;
    }
    let mut envs: BTreeMap<String, String> = BTreeMap::new();
    let mut workdir = HOME.to_owned();
    for (index, step) in spec.steps.iter().enumerate() {
        let number = index + 1;
        log(
            &row.build_id,
            "info",
            Some(number),
            format!("[{number}] {} {}", step.kind, step.args.join(" ")),
        );
        match step.kind.as_str() {
            "RUN" => {
                if step.args.get(1).is_some_and(|u| u == "root") {
                    log(
                        &row.build_id,
                        "warn",
                        Some(number),
                        "runs as the sandbox user: build sandboxes have no root",
                    );
                }
                run_step(
                    state,
                    row,
                    container,
                    number,
                    &envs,
                    &workdir,
                    &step.args[0],
                )
                .await?;
            }
            "COPY" => copy_step(state, row, container, number, &envs, &workdir, step).await?,
            "ENV" => {
                for pair in step.args.chunks(2) {
                    envs.insert(pair[0].clone(), pair[1].clone());
                }
            }
            "WORKDIR" => {
                workdir = absolute(&step.args[0], Some(&workdir));
                run_step(
                    state,
                    row,
                    container,
                    number,
                    &envs,
                    "/",
                    &format!("mkdir -p {}", quote(&workdir)),
                )
                .await?;
            }
            "USER" => {
                if step.args[0] != "user" {
                    log(
                        &row.build_id,
                        "warn",
                        Some(number),
                        "steps run as the sandbox user ('user') whatever USER says",
                    );
                }
            }
            _ => {
                return Err(StepFailure::at(
                    number,
                    format!("{} steps are not supported", step.kind),
                ))
            }
        }
        // The step's output, for every node's status to answer.
        write_log(state, &row.build_id).await;
    }
    save_layer(state, row, container).await
}

/// `'…'` for a shell.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

async fn run_step(
    state: &Arc<AppState>,
    row: &E2bTemplateRow,
    container: &str,
    step: usize,
    envs: &BTreeMap<String, String>,
    workdir: &str,
    command: &str,
) -> Result<(), StepFailure> {
    let mut script = String::new();
    for (name, value) in envs {
        script.push_str(&format!("export {name}={}\n", quote(value)));
    }
    script.push_str(&format!("cd {} || exit 1\n{command}", quote(workdir)));
    let request = RunRequest {
        commands: vec![script],
        timeout_ms: STEP_TIMEOUT_MS,
        max_output_length: 64 * 1024,
        deadline_ms: None,
    };
    let results = state
        .engine
        .run(container, request)
        .await
        .map_err(|e| StepFailure::at(step, format!("cannot run the step: {e}")))?;
    let result = results
        .into_iter()
        .next()
        .ok_or_else(|| StepFailure::at(step, "the step ran nothing"))?;
    for line in result.stdout.lines() {
        log(&row.build_id, "info", Some(step), line);
    }
    for line in result.stderr.lines() {
        log(&row.build_id, "warn", Some(step), line);
    }
    match result.outcome {
        Outcome::Exit { exit_code: 0 } => Ok(()),
        Outcome::Exit { exit_code } => {
            let last = result
                .stderr
                .lines()
                .last()
                .map(|l| format!(": {l}"))
                .unwrap_or_default();
            Err(StepFailure::at(
                step,
                format!("command '{command}' failed with exit code {exit_code}{last}"),
            ))
        }
        other => Err(StepFailure::at(
            step,
            format!("command '{command}' did not finish: {other:?}"),
        )),
    }
}

/// A `COPY`: the uploaded files unpacked into a scratch directory, then
/// copied to the destination (under the home) as Docker's `COPY` does.
async fn copy_step(
    state: &Arc<AppState>,
    row: &E2bTemplateRow,
    container: &str,
    step: usize,
    envs: &BTreeMap<String, String>,
    workdir: &str,
    copy: &TemplateStep,
) -> Result<(), StepFailure> {
    let source = copy.args[0].trim_start_matches("./").trim_end_matches('/');
    let destination = absolute(&copy.args[1], Some(workdir));
    if !(destination == HOME || destination.starts_with(&format!("{HOME}/"))) {
        return Err(StepFailure::at(
            step,
            format!("COPY to {destination}: a template keeps what is under {HOME} only"),
        ));
    }
    let hash = copy.files_hash.as_deref().unwrap_or_default();
    let key = files_key(&row.template_id, hash).map_err(|e| StepFailure::at(step, e.message))?;
    let gzipped = shellgate_objects::read_to_vec(state.objects.as_ref(), &key, MAX_UPLOAD_BYTES)
        .await
        .map_err(|e| {
            StepFailure::at(
                step,
                format!("the files of COPY {source} were not uploaded: {e}"),
            )
        })?;
    let tar = tokio::task::spawn_blocking(move || gunzip(&gzipped))
        .await
        .map_err(|e| StepFailure::at(step, e.to_string()))?
        .map_err(|e| {
            StepFailure::at(
                step,
                format!("the files of COPY {source} are not a gzipped tar: {e}"),
            )
        })?;
    let scratch = format!("/tmp/.shellgate-copy-{step}");
    run_step(
        state,
        row,
        container,
        step,
        envs,
        "/",
        &format!("rm -rf {0} && mkdir -p {0}", quote(&scratch)),
    )
    .await?;
    import_tar(state, container, &scratch, tar)
        .await
        .map_err(|e| {
            StepFailure::at(
                step,
                format!("cannot unpack the files of COPY {source}: {}", e.message),
            )
        })?;
    let from = format!("{scratch}/{source}");
    let mut command = format!(
        "if [ -d {from} ]; then mkdir -p {to} && cp -a {from}/. {to}/; \
         else case {to} in */) mkdir -p {to};; *) mkdir -p \"$(dirname {to})\";; esac; cp -a {from} {to}; fi",
        from = quote(&from),
        to = quote(&destination),
    );
    if let Some(mode) = copy.args.get(3).filter(|m| !m.is_empty()) {
        command.push_str(&format!(
            " && chmod -R {} {}",
            quote(mode),
            quote(&destination)
        ));
    }
    command.push_str(&format!(
        "; status=$?; rm -rf {}; exit $status",
        quote(&scratch)
    ));
    run_step(state, row, container, step, envs, "/", &command).await
}

fn gunzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .take(MAX_UPLOAD_BYTES + 1)
        .read_to_end(&mut out)?;
    if out.len() as u64 > MAX_UPLOAD_BYTES {
        return Err(std::io::Error::other(format!(
            "more than {MAX_UPLOAD_BYTES} bytes unpacked"
        )));
    }
    Ok(out)
}

async fn import_tar(
    state: &AppState,
    container: &str,
    path: &str,
    tar: Vec<u8>,
) -> Result<(), E2bError> {
    let mut upload = state
        .engine
        .fs_import(container, path)
        .await
        .map_err(internal)?;
    for chunk in tar.chunks(256 * 1024) {
        if upload.write(chunk).await.is_err() {
            break;
        }
    }
    upload.finish().await.map_err(internal)?;
    Ok(())
}

/// The home as the build left it, stored as the template's layer.
async fn save_layer(
    state: &Arc<AppState>,
    row: &E2bTemplateRow,
    container: &str,
) -> Result<u64, StepFailure> {
    let finalize = |message: String| StepFailure {
        message,
        step: None,
    };
    let mut download = state
        .engine
        .fs_export(container, HOME, Vec::new())
        .await
        .map_err(|e| finalize(format!("cannot read the build's home: {e}")))?;
    let mut layer = Vec::new();
    while let Some(chunk) = download.body.recv().await {
        let chunk = chunk.map_err(|e| finalize(format!("cannot read the build's home: {e}")))?;
        if (layer.len() + chunk.len()) as u64 > MAX_LAYER_BYTES {
            return Err(finalize(format!(
                "the template's home is larger than {} MiB, the most a template may keep",
                MAX_LAYER_BYTES >> 20
            )));
        }
        layer.extend_from_slice(&chunk);
    }
    let size = layer.len() as u64;
    let key = layer_key(&row.template_id).map_err(|e| finalize(e.message))?;
    shellgate_objects::put_bytes(state.objects.as_ref(), &key, layer)
        .await
        .map_err(|e| finalize(format!("cannot store the template's layer: {e}")))?;
    Ok(size)
}

/// Unpacks template `template_id`'s layer into a container's home.
pub(crate) async fn unpack_layer(
    state: &AppState,
    template_id: &str,
    container: &str,
) -> Result<(), E2bError> {
    let key = layer_key(template_id)?;
    let layer = shellgate_objects::read_to_vec(state.objects.as_ref(), &key, MAX_LAYER_BYTES)
        .await
        .map_err(internal)?;
    import_tar(state, container, HOME, layer).await
}

/// A sandbox made from a template: its layer, then its start command
/// (a service process) and its ready command, retried until it succeeds.
pub(crate) async fn prepare_sandbox(
    state: &AppState,
    row: &E2bTemplateRow,
    spec: &TemplateSpec,
    container: &str,
    env: &BTreeMap<String, String>,
) -> Result<(), E2bError> {
    unpack_layer(state, &row.template_id, container).await?;
    let Some(start) = &spec.start_cmd else {
        return Ok(());
    };
    let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let cwd = Some(spec.workdir.clone().unwrap_or_else(|| HOME.to_owned()));
    let process = ProcessSpec {
        command: start.clone(),
        stdin: false,
        pty: None,
        timeout_ms: 0,
        keeps_awake: false,
        env: env.clone(),
        cwd: cwd.clone(),
    };
    state
        .engine
        .start_process(container, &shellgate_wire::new_id("start"), process)
        .await
        .map_err(|e| internal(format!("the template's start command: {e}")))?;
    let Some(ready) = &spec.ready_cmd else {
        return Ok(());
    };
    let mut script = String::new();
    for (name, value) in &env {
        script.push_str(&format!("export {name}={}\n", quote(value)));
    }
    script.push_str(&format!(
        "cd {} 2>/dev/null; {ready}",
        quote(cwd.as_deref().unwrap_or(HOME))
    ));
    let until = tokio::time::Instant::now() + READY_DEADLINE;
    loop {
        let request = RunRequest {
            commands: vec![script.clone()],
            timeout_ms: READY_DEADLINE.as_millis() as u64,
            max_output_length: 4096,
            deadline_ms: None,
        };
        let result = state
            .engine
            .run(container, request)
            .await
            .map_err(internal)?;
        if result
            .first()
            .is_some_and(|r| matches!(r.outcome, Outcome::Exit { exit_code: 0 }))
        {
            return Ok(());
        }
        if tokio::time::Instant::now() >= until {
            return Err(E2bError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!(
                    "the template's ready command ({ready}) did not succeed within {} s",
                    READY_DEADLINE.as_secs()
                ),
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StatusQuery {
    #[serde(default)]
    logs_offset: Option<usize>,
}

/// `GET /templates/{id}/builds/{build}/status?logsOffset=`.
async fn status(
    State(state): State<Arc<AppState>>,
    E2bProject(project): E2bProject,
    Path((template_id, build_id)): Path<(String, String)>,
    Query(query): Query<StatusQuery>,
) -> Result<Json<TemplateBuildStatus>, E2bError> {
    let row = project_template(&state, &project, &template_id).await?;
    if row.build_id != build_id {
        return Err(E2bError::new(
            StatusCode::NOT_FOUND,
            format!("build '{build_id}' of template '{template_id}' not found"),
        ));
    }
    let offset = i64::try_from(query.logs_offset.unwrap_or(0)).unwrap_or(i64::MAX);
    let build = build_id.clone();
    let lines = state
        .db(move |s| s.e2b_template_logs(&build, offset, LOG_PAGE))
        .await
        .map_err(E2bError::from)?;
    let log_entries = lines
        .iter()
        .map(|line| serde_json::from_str::<BuildLogEntry>(line))
        .collect::<Result<Vec<_>, _>>()
        .map_err(internal)?;
    let reason = (row.status == TEMPLATE_ERROR).then(|| BuildStatusReason {
        message: row
            .reason
            .clone()
            .unwrap_or_else(|| "the build failed".to_owned()),
        step: row.failed_step.clone(),
        log_entries: Vec::new(),
    });
    Ok(Json(TemplateBuildStatus {
        logs: Vec::new(),
        log_entries,
        template_id: row.template_id,
        build_id: row.build_id,
        status: row.status,
        reason,
    }))
}

/// `DELETE /templates/{id}`: the template and its layer (sandboxes made
/// from it keep their files); of a snapshot's id (E2B's SDK deletes
/// snapshots so), that snapshot.
async fn remove(
    State(state): State<Arc<AppState>>,
    E2bProject(project): E2bProject,
    Path(template_id): Path<String>,
) -> Result<StatusCode, E2bError> {
    if let Some(removed) =
        super::snapshot_ids::remove_if_snapshot(&state, &project, &template_id).await
    {
        return removed;
    }
    let row = project_template(&state, &project, &template_id).await?;
    // A build older than the deadline is over whatever its row says (its
    // node stopped before recording the end): the template can go.
    let build_may_run = crate::time::now() - row.updated_at < BUILD_DEADLINE.as_secs() as i64;
    if row.status == TEMPLATE_BUILDING && build_may_run {
        return Err(E2bError::new(
            StatusCode::CONFLICT,
            format!("template '{template_id}' is being built; delete it when the build ends"),
        ));
    }
    let (owner, id) = (project.clone(), row.template_id.clone());
    state
        .db(move |s| s.delete_e2b_template(&owner, &id))
        .await
        .map_err(E2bError::from)?;
    let _ = state.objects.delete(&layer_key(&row.template_id)?).await;
    // The last build's COPY uploads go with it; an earlier build's upload
    // of files the last build no longer copies is left in the store.
    let spec: TemplateSpec = serde_json::from_str(&row.spec).unwrap_or_default();
    for hash in spec.steps.iter().filter_map(|s| s.files_hash.as_deref()) {
        if let Ok(key) = files_key(&row.template_id, hash) {
            let _ = state.objects.delete(&key).await;
        }
    }
    Ok(StatusCode::NO_CONTENT)
}

/// At start-up: builds a stopped server left waiting or running are
/// failed (their build sandboxes expire as any container). Builds run on
/// the node that started them, so a cluster's node leaves the others'
/// alone.
pub(crate) async fn fail_unfinished(state: &AppState) {
    if !state.node_name.is_empty() {
        return;
    }
    let outcome = state
        .db(|s| {
            s.fail_unfinished_e2b_template_builds(
                "the server stopped during the build; build the template again",
                crate::time::now(),
            )
        })
        .await;
    match outcome {
        Ok(failed) if !failed.is_empty() => {
            tracing::warn!(
                "{} template builds were interrupted by a server stop",
                failed.len()
            );
        }
        Ok(_) => {}
        Err(e) => tracing::error!("cannot fail interrupted template builds: {}", e.message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bases_map_onto_the_default_image_or_are_refused_by_name() {
        let start = |image: &str| TemplateBuildStart {
            from_image: Some(image.to_owned()),
            ..TemplateBuildStart::default()
        };
        for image in [
            "e2bdev/base",
            "e2bdev/base:latest",
            "python:3.11",
            "node:lts",
            "debian:stable",
        ] {
            assert_eq!(
                base_of(&start(image)).map_err(|e| e.message),
                Ok(None),
                "{image}"
            );
        }
        let refused =
            base_of(&start("alpine:3.20")).expect_err("alpine is no image of the server's");
        assert!(
            refused.message.contains("from_base_image()"),
            "{}",
            refused.message
        );
    }

    #[test]
    fn steps_give_the_environment_and_refuse_unknown_kinds() {
        let step = |kind: &str, args: &[&str]| TemplateStep {
            kind: kind.to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            files_hash: None,
            force: None,
        };
        let (envs, workdir) = fold_steps(&[
            step("ENV", &["A", "1", "B", "2"]),
            step("WORKDIR", &["app"]),
            step("RUN", &["true"]),
        ])
        .expect("valid steps");
        assert_eq!(envs.get("B").map(String::as_str), Some("2"), "{envs:?}");
        assert_eq!(workdir.as_deref(), Some("/home/user/app"));
        let refused = fold_steps(&[step("HEALTHCHECK", &["x"])]).expect_err("unknown kind");
        assert!(refused.message.contains("step 1"), "{}", refused.message);
    }
}
