//! E2B's template API: a project's templates built by the SDKs' template
//! builder (`Template().from_base_image().run_cmd(…).copy(…)` and
//! `Template.build`), and sandboxes started from them.
//!
//! A template is an image of its project (`e2b-<template id>`), made by
//! the server's one image builder (`image_builds`, the service behind
//! `POST /v1/images`): the SDK's steps are translated into the builder's
//! Dockerfile steps ([`dockerfile_of`]) and run in a build sandbox as E2B
//! runs them: as `user` in `/home/user` unless a step names another user
//! (`apt_install`, a global `pip_install`, `run_cmd(…, user='root')` run
//! as the root of the build sandbox's own user namespace), `COPY` and
//! `WORKDIR` anywhere. The image keeps the whole tree, its home as the
//! home its sandboxes start with, and the `ENV`s. A sandbox created from
//! the template is made from that image, the template's `ENV`s as its
//! environment, and its start command started (and its ready command
//! awaited) before the create answers.
//!
//! - Calls: `POST /v3/templates` (name → template and build ids), `GET
//!   /templates/{id}/files/{hash}` (whether a `COPY` step's files are there,
//!   else an upload URL carrying the template's upload token), `PUT` of
//!   that URL, `POST /v2/templates/{id}/builds/{build}` (the steps; the
//!   build starts: an image build job whose id is the build's), `GET
//!   /templates/{id}/builds/{build}/status?logsOffset=` (status, the job's
//!   log entries after the offset, the failure with its step), `GET
//!   /templates/aliases/{name}` (in `control`), `DELETE /templates/{id}`.
//! - Bases: E2B's base, Debian, Python and Node images and the default
//!   templates all name the server's default image; `fromTemplate` names
//!   another ready template of the project (its image). Any other OCI
//!   image is refused, naming those.
//! - Bounds: [`MAX_TEMPLATES`] per project, uploads of at most
//!   [`MAX_UPLOAD_BYTES`], and the image builder's: one build at a time
//!   per project, its deadline, its log. A build the server stopped during
//!   is marked failed at the next start ([`fail_unfinished`]; in a cluster,
//!   the start of the node that ran it, or that node's loss), and no image
//!   is installed until the build has succeeded.
//! - In a cluster a template's build runs on the node that takes it; its
//!   image is put in the object store before the build is ready
//!   (`image_archives`), and any node installs it on a sandbox's create.

use std::collections::BTreeMap;
use std::sync::Arc;
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
use shellgate_sandbox_api::dockerfile::{self, Dockerfile, Instruction, Step};
use shellgate_sandbox_api::process::ProcessSpec;
use shellgate_store::{
    E2bTemplateRow, TEMPLATE_BUILDING, TEMPLATE_ERROR, TEMPLATE_READY, TEMPLATE_WAITING,
};
use shellgate_wire::e2b::{
    BuildLogEntry, BuildStatusReason, TemplateBuildRequest, TemplateBuildRequested,
    TemplateBuildStart, TemplateBuildStatus, TemplateFileUpload, TemplateStep,
};
use shellgate_wire::{ImageBuildLogEntry, NetworkPolicy, Outcome};

use super::request::{bad_request, E2bProject};
use super::E2bError;
use crate::image_builds::{self, ContextFile, Job, Source};
use crate::public_base::PublicBase;
use crate::state::AppState;

/// Templates that stand for the server's default image.
pub(crate) const DEFAULT_TEMPLATES: [&str; 3] = ["base", "code-interpreter-v1", "code-interpreter"];

/// Templates a project may have.
pub const MAX_TEMPLATES: usize = 20;
/// The largest `COPY` upload (gzipped tar, and its tar unpacked).
pub const MAX_UPLOAD_BYTES: u64 = 256 << 20;
/// How long a build may take (the image builder's deadline).
pub const BUILD_DEADLINE: Duration = image_builds::BUILD_DEADLINE;
/// How long a sandbox's ready command is retried before its create fails.
const READY_DEADLINE: Duration = Duration::from_secs(120);
/// The home: where steps and the start command run unless told otherwise.
const HOME: &str = "/home/user";
/// The sandbox user as the builder's `USER` names it (the images' `user`,
/// uid and gid 1000), so a step runs as it whatever the image's passwd.
const SANDBOX_USER: &str = "1000:1000";
/// Log entries one status answer carries (E2B's page).
const LOG_PAGE: usize = 100;
/// The base images E2B's builder names that the server's default image
/// stands for (a tag after `:` is allowed).
const DEFAULT_IMAGE_NAMES: &[&str] = &[
    "e2bdev/base",
    "e2bdev/code-interpreter",
    "debian",
    "python",
    "node",
];

/// The image template `template_id` is.
pub(crate) fn image_name(template_id: &str) -> String {
    format!("e2b-{template_id}")
}

/// Adds a line to build `build_id`'s log (the image build's).
async fn log(state: &AppState, build_id: &str, level: &str, message: impl Into<String>) {
    let entry = ImageBuildLogEntry {
        timestamp: shellgate_wire::time::rfc3339(crate::time::now()),
        level: level.to_owned(),
        step: 0,
        line: 0,
        message: message.into(),
    };
    let Ok(line) = serde_json::to_string(&entry) else {
        return;
    };
    let build = build_id.to_owned();
    if let Err(e) = state
        .db(move |s| s.append_image_build_logs(&build, &[line]))
        .await
    {
        tracing::warn!(build = %build_id, "cannot write the build's log: {}", e.message);
    }
}

/// What a template's build does and what its sandboxes get, as stored
/// in its row's `spec`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct TemplateSpec {
    /// The project template whose image it is built on.
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

/// Where a build starts: the server's default image (`None`) or, for
/// `fromTemplate` of a project template, that template (its image).
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

/// A user as the SDK names it, as the builder's `USER` takes it.
fn builder_user(user: &str) -> String {
    match user {
        "user" => SANDBOX_USER.to_owned(),
        other => other.to_owned(),
    }
}

/// The SDK's steps (checked by [`fold_steps`]) as the image builder's
/// Dockerfile over `from`: each step's `line` is its E2B step number (from
/// 1; 0 for the start every E2B build has: `USER user`, `WORKDIR
/// /home/user`), so a failed step is reported as E2B numbers it. A step's
/// own user (`run_cmd(…, user=)`, a `COPY`'s owner) holds for that step
/// only; a `COPY` reads its files from the context directory named by
/// their hash.
fn dockerfile_of(from: &str, steps: &[TemplateStep]) -> Result<Dockerfile, E2bError> {
    let mut out = vec![
        Step {
            line: 0,
            instruction: Instruction::User(SANDBOX_USER.to_owned()),
        },
        Step {
            line: 0,
            instruction: Instruction::Workdir(HOME.to_owned()),
        },
    ];
    let mut user = SANDBOX_USER.to_owned();
    let mut workdir = HOME.to_owned();
    for (index, step) in steps.iter().enumerate() {
        let line = index + 1;
        let at = |why: String| bad_request(format!("step {line} ({}): {why}", step.kind));
        let step_user = |arg: Option<&String>| {
            arg.filter(|u| !u.is_empty())
                .map_or_else(|| user.clone(), |u| builder_user(u))
        };
        match step.kind.as_str() {
            "RUN" => {
                let as_user = step_user(step.args.get(1));
                run_as(&mut out, line, &user, &as_user, step.args[0].clone());
            }
            "USER" => {
                user = builder_user(&step.args[0]);
                out.push(Step {
                    line,
                    instruction: Instruction::User(user.clone()),
                });
            }
            "ENV" => out.push(Step {
                line,
                instruction: Instruction::Env(
                    step.args
                        .chunks(2)
                        .map(|pair| (pair[0].clone(), pair[1].clone()))
                        .collect(),
                ),
            }),
            "WORKDIR" => {
                workdir = absolute(&step.args[0], Some(&workdir));
                out.push(Step {
                    line,
                    instruction: Instruction::Workdir(workdir.clone()),
                });
            }
            "COPY" => {
                let hash = step.files_hash.as_deref().unwrap_or_default();
                let source = step.args[0].trim_start_matches("./").trim_end_matches('/');
                if source.starts_with('/') || source.split('/').any(|part| part == "..") {
                    return Err(at(format!(
                        "COPY {source}: a source is a path inside the context"
                    )));
                }
                let source = match source {
                    "" | "." => hash.to_owned(),
                    source => format!("{hash}/{source}"),
                };
                let dest = absolute(&step.args[1], Some(&workdir));
                let dest = if step.args[1].ends_with('/') {
                    format!("{}/", dest.trim_end_matches('/'))
                } else {
                    dest
                };
                let owner = step_user(step.args.get(2));
                out.push(Step {
                    line,
                    instruction: Instruction::Copy {
                        sources: vec![source],
                        dest: dest.clone(),
                        chown: Some(owner),
                    },
                });
                if let Some(mode) = step.args.get(3).filter(|m| !m.is_empty()) {
                    if !mode.bytes().all(|b| (b'0'..=b'7').contains(&b)) || mode.len() > 4 {
                        return Err(at(format!("COPY mode {mode:?} is not octal")));
                    }
                    let command = format!("chmod -R {mode} {}", shell_quote(&dest));
                    run_as(&mut out, line, &user, "root", command);
                }
            }
            other => return Err(at(format!("{other} steps are not supported"))),
        }
    }
    if out.len() > dockerfile::MAX_STEPS {
        return Err(bad_request(format!(
            "the template has too many steps: a build runs at most {} (each run as another \
             user counts three)",
            dockerfile::MAX_STEPS
        )));
    }
    Ok(Dockerfile {
        from: from.to_owned(),
        steps: out,
    })
}

/// The `COPY` uploads of `steps` as the build's context: each under its
/// hash, plain tars with their names checked.
async fn copy_context(
    state: &AppState,
    row: &E2bTemplateRow,
    steps: &[TemplateStep],
) -> Result<Vec<ContextFile>, E2bError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut hashes: Vec<&str> = steps
        .iter()
        .filter(|step| step.kind == "COPY")
        .filter_map(|step| step.files_hash.as_deref())
        .collect();
    hashes.sort_unstable();
    hashes.dedup();
    let mut context = Vec::new();
    for hash in hashes {
        check_hash(hash)?;
        let key = files_key(&row.template_id, hash)?;
        let gzipped =
            shellgate_objects::read_to_vec(state.objects.as_ref(), &key, MAX_UPLOAD_BYTES)
                .await
                .map_err(|e| {
                    bad_request(format!(
                        "the files of a COPY step ({hash}) were not uploaded: {e}"
                    ))
                })?;
        let dir = state.spool_dir.clone();
        let file = tokio::task::spawn_blocking(move || {
            let mut file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_TMPFILE)
                .mode(0o600)
                .open(&dir)
                .map_err(|e| format!("cannot spool the files: {e}"))?;
            file.write_all(&gzipped)
                .map_err(|e| format!("cannot spool the files: {e}"))?;
            std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(0))
                .map_err(|e| e.to_string())?;
            image_builds::plain_context(file, &dir, MAX_UPLOAD_BYTES)
        })
        .await
        .map_err(internal)?
        .map_err(|why| bad_request(format!("the files of a COPY step ({hash}): {why}")))?;
        context.push(ContextFile {
            file,
            dir: hash.to_owned(),
        });
    }
    Ok(context)
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
    let from = match &parent {
        Some(parent) => {
            if parent == &row.name || parent == &row.template_id {
                return Err(bad_request(
                    "fromTemplate: a template cannot start from itself",
                ));
            }
            let (parent_row, _) = ready_template(&state, &project, parent)
                .await?
                .ok_or_else(|| not_found(parent))?;
            image_name(&parent_row.template_id)
        }
        None => state.config.sandbox.default_image.clone(),
    };
    let (envs, workdir) = fold_steps(&start.steps)?;
    let dockerfile = dockerfile_of(&from, &start.steps)?;
    let context = copy_context(&state, &row, &start.steps).await?;
    let spec = TemplateSpec {
        parent,
        steps: start.steps,
        start_cmd: start.start_cmd.filter(|c| !c.trim().is_empty()),
        ready_cmd: start.ready_cmd.filter(|c| !c.trim().is_empty()),
        envs,
        workdir,
    };
    let network = build_network(&state);
    let text = serde_json::to_string(&spec).map_err(internal)?;
    let (id, build, node) = (
        row.template_id.clone(),
        row.build_id.clone(),
        state.node_name.clone(),
    );
    // This node's from now on: its restart, or its loss, fails the build.
    let started = state
        .db(move |s| s.start_e2b_template_build(&id, &build, &text, &node, crate::time::now()))
        .await
        .map_err(E2bError::from)?;
    if !started {
        return Err(E2bError::new(
            StatusCode::CONFLICT,
            format!(
                "build '{build_id}' is no longer the template's latest, or was started already"
            ),
        ));
    }
    log(
        &state,
        &row.build_id,
        "info",
        format!("Building template {} ({})", row.name, row.template_id),
    )
    .await;
    if matches!(network.1, NetworkPolicy::Disabled) {
        log(
            &state,
            &row.build_id,
            "warn",
            "No network: this server lets no container reach any domain, so package installs \
             cannot download",
        )
        .await;
    }
    let job = Job {
        id: Some(row.build_id.clone()),
        project: project.clone(),
        image: image_name(&row.template_id),
        source: Source::Dockerfile {
            dockerfile,
            context,
            network: network.0,
        },
    };
    // The job and the wait for its end run whatever the client does.
    let worker = Arc::clone(&state);
    let submitted = crate::http::to_completion(async move {
        let (job_row, finished) = image_builds::submit(&worker, job).await?;
        tokio::spawn(record_end(worker, row, finished));
        Ok(job_row)
    })
    .await;
    if let Err(error) = submitted {
        let (id, build) = (template_id.clone(), build_id.clone());
        let reason = error.message.clone();
        let _ = state
            .db(move |s| {
                s.finish_e2b_template_build(&id, &build, Err((reason, None)), crate::time::now())
            })
            .await;
        return Err(super::request::e2b_error(error));
    }
    Ok(StatusCode::ACCEPTED)
}

/// What the steps may reach: everything the operator lets containers
/// reach (package installs need it), else nothing.
fn build_network(state: &AppState) -> (shellgate_sandbox_api::backend::NetworkSpec, NetworkPolicy) {
    let wildcard = NetworkPolicy::Allowlist {
        allowed_domains: vec!["*".to_owned()],
        domain_secrets: Vec::new(),
        tls_passthrough_domains: Vec::new(),
    };
    match crate::egress::network_spec(&state.config, Some(&wildcard), "network") {
        Ok(spec) => (spec, wildcard),
        Err(_) => (
            shellgate_sandbox_api::backend::NetworkSpec::default(),
            NetworkPolicy::Disabled,
        ),
    }
}

/// Records the end of a template's build when its image build ends.
async fn record_end(
    state: Arc<AppState>,
    row: E2bTemplateRow,
    finished: tokio::sync::oneshot::Receiver<image_builds::Finished>,
) {
    let outcome = finished.await.unwrap_or_else(|_| {
        Err(image_builds::Failure {
            message: "the build ended without an outcome".into(),
            step: None,
        })
    });
    let recorded = match outcome {
        Ok(image) => {
            let bytes = image.details.size_bytes.unwrap_or(0);
            log(
                &state,
                &row.build_id,
                "info",
                format!("Template ready (image {}, {bytes} bytes)", image.name),
            )
            .await;
            Ok(i64::try_from(bytes).unwrap_or(i64::MAX))
        }
        // The E2B step is the builder's step's line.
        Err(failure) => Err((
            failure.message,
            failure
                .step
                .map(|(_, line)| line)
                .filter(|line| *line > 0)
                .map(|line| line.to_string()),
        )),
    };
    let (id, build) = (row.template_id.clone(), row.build_id.clone());
    if let Err(e) = state
        .db(move |s| s.finish_e2b_template_build(&id, &build, recorded, crate::time::now()))
        .await
    {
        tracing::error!(template = %row.template_id, "cannot record the build's end: {}", e.message);
    }
}

/// `command` run as `as_user` for step `line` only (the steps' user is
/// `user`).
fn run_as(out: &mut Vec<Step>, line: usize, user: &str, as_user: &str, command: String) {
    let step = |instruction| Step { line, instruction };
    if as_user == user {
        out.push(step(Instruction::Run(command)));
    } else {
        out.push(step(Instruction::User(as_user.to_owned())));
        out.push(step(Instruction::Run(command)));
        out.push(step(Instruction::User(user.to_owned())));
    }
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// A sandbox made from a template's image: its start command (a service
/// process), then its ready command, retried until it succeeds.
pub(crate) async fn prepare_sandbox(
    state: &AppState,
    spec: &TemplateSpec,
    container: &str,
    env: &BTreeMap<String, String>,
) -> Result<(), E2bError> {
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
        script.push_str(&format!("export {name}={}\n", shell_quote(value)));
    }
    script.push_str(&format!(
        "cd {} 2>/dev/null; {ready}",
        shell_quote(cwd.as_deref().unwrap_or(HOME))
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
    let offset = query.logs_offset.unwrap_or(0) as u64;
    let log_entries = image_builds::logs(&state, &build_id, offset, LOG_PAGE)
        .await
        .map_err(E2bError::from)?
        .into_iter()
        .map(|entry| BuildLogEntry {
            timestamp: entry.timestamp,
            message: entry.message,
            level: entry.level,
            // The builder's step's line is the E2B step.
            step: (entry.line > 0).then(|| entry.line.to_string()),
        })
        .collect();
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

/// `DELETE /templates/{id}`: the template and its image (sandboxes made
/// from it keep its tree until they go); of a snapshot's id (E2B's SDK
/// deletes snapshots so), that snapshot.
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
    // A failed first build made no image.
    match image_builds::delete_image(&state, &project, &image_name(&row.template_id)).await {
        Ok(()) => {}
        Err(e) if e.status() == StatusCode::NOT_FOUND => {}
        Err(e) => {
            tracing::warn!(template = %row.template_id, "could not delete its image: {}", e.message)
        }
    }
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
/// failed (their build sandboxes are removed as any container the store
/// does not know). A cluster's node fails the builds it was running only:
/// the others' run on, and a waiting build is any node's to start (a node
/// that never comes back has its builds failed when it is declared lost).
pub(crate) async fn fail_unfinished(state: &AppState) {
    let node = state.node_name.clone();
    let reason = if node.is_empty() {
        "the server stopped during the build; build the template again"
    } else {
        "the node running the build stopped during it; build the template again"
    };
    let outcome = state
        .db(move |s| s.fail_unfinished_e2b_template_builds(&node, reason, crate::time::now()))
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
    fn sdk_steps_become_builder_steps_numbered_as_e2b_numbers_them() {
        let step = |kind: &str, args: &[&str], hash: Option<&str>| TemplateStep {
            kind: kind.to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            files_hash: hash.map(str::to_owned),
            force: None,
        };
        let hash = "a".repeat(64);
        let built = dockerfile_of(
            "debian-12",
            &[
                step("RUN", &["echo x > /etc/marker", "root"], None),
                step("RUN", &["echo y > here"], None),
                step("WORKDIR", &["app"], None),
                step("COPY", &["./src/", "lib/", "", "0755"], Some(&hash)),
            ],
        )
        .expect("translated");
        assert_eq!(built.from, "debian-12");
        let steps: Vec<(usize, Instruction)> = built
            .steps
            .into_iter()
            .map(|s| (s.line, s.instruction))
            .collect();
        let user = |u: &str| Instruction::User(u.to_owned());
        assert_eq!(
            steps,
            vec![
                (0, user(SANDBOX_USER)),
                (0, Instruction::Workdir(HOME.into())),
                (1, user("root")),
                (1, Instruction::Run("echo x > /etc/marker".into())),
                (1, user(SANDBOX_USER)),
                (2, Instruction::Run("echo y > here".into())),
                (3, Instruction::Workdir("/home/user/app".into())),
                (
                    4,
                    Instruction::Copy {
                        sources: vec![format!("{hash}/src")],
                        dest: "/home/user/app/lib/".into(),
                        chown: Some(SANDBOX_USER.into()),
                    }
                ),
                (4, user("root")),
                (
                    4,
                    Instruction::Run("chmod -R 0755 '/home/user/app/lib/'".into())
                ),
                (4, user(SANDBOX_USER)),
            ]
        );
        for bad in ["../up", "/etc/passwd"] {
            let refused = dockerfile_of("d", &[step("COPY", &[bad, "x"], Some(&hash))])
                .expect_err("leaves the context");
            assert!(refused.message.contains("step 1"), "{}", refused.message);
        }
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
