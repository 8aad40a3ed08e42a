//! `/v1/images` beyond the list (shellgate's extension): `POST` makes a
//! project's image, a Dockerfile built or an OCI archive imported, as a
//! job of the image-build service (`image_builds`); `GET
//! /v1/images/{name}` shows one image, `DELETE` deletes one of the
//! project's own; `GET /v1/images/builds/{id}` a job's status and a page
//! of its log.

use std::sync::Arc;

use axum::extract::{Multipart, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use shellgate_sandbox_api::dockerfile;
use shellgate_wire::NetworkPolicy;

use crate::error::{ApiError, ApiResult};
use crate::http::{multipart_error, to_completion, ApiQuery, Project};
use crate::image_builds::{self, ContextFile, Job, Source};
use crate::spool::spool;
use crate::state::AppState;

/// Log entries a status answer carries unless `log_limit` says otherwise.
const DEFAULT_LOG_PAGE: usize = 100;

/// The fields of a `POST /v1/images`.
#[derive(Default)]
struct Upload {
    name: Option<String>,
    dockerfile: Option<String>,
    context: Option<std::fs::File>,
    archive: Option<std::fs::File>,
    network_policy: Option<NetworkPolicy>,
}

async fn read_upload(state: &AppState, mut multipart: Multipart) -> ApiResult<Upload> {
    let cap = state.config.server.max_upload_bytes;
    let mut upload = Upload::default();
    while let Some(mut field) = multipart.next_field().await.map_err(multipart_error)? {
        let name = field.name().unwrap_or_default().to_owned();
        match name.as_str() {
            "name" => upload.name = Some(field.text().await.map_err(multipart_error)?),
            "dockerfile" => {
                let mut text = Vec::new();
                while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
                    if text.len() + chunk.len() > dockerfile::MAX_DOCKERFILE_BYTES {
                        return Err(ApiError::invalid(
                            "dockerfile",
                            format!(
                                "a Dockerfile may have at most {} bytes",
                                dockerfile::MAX_DOCKERFILE_BYTES
                            ),
                        ));
                    }
                    text.extend_from_slice(&chunk);
                }
                let text = String::from_utf8(text)
                    .map_err(|_| ApiError::invalid("dockerfile", "the Dockerfile is not UTF-8"))?;
                upload.dockerfile = Some(text);
            }
            "context" => {
                upload.context = Some(spool(&mut field, &state.spool_dir, cap).await?.file)
            }
            "file" => upload.archive = Some(spool(&mut field, &state.spool_dir, cap).await?.file),
            "network_policy" => {
                let text = field.text().await.map_err(multipart_error)?;
                let policy = serde_json::from_str(&text).map_err(|e| {
                    ApiError::invalid("network_policy", format!("invalid network_policy: {e}"))
                })?;
                upload.network_policy = Some(policy);
            }
            other => {
                return Err(ApiError::invalid(
                    other,
                    format!(
                        "unknown field {other:?}: send name and either dockerfile (and context) \
                         or file"
                    ),
                ))
            }
        }
    }
    Ok(upload)
}

/// `POST /v1/images` (multipart): `name` and either `dockerfile` (its
/// text; `context`, a tar or gzipped tar, for `COPY`; `network_policy`,
/// what the steps may reach, default none) or `file` (an OCI image
/// layout as a tar, or a `docker save`/`podman save` archive). Answers the
/// job, 202; `GET /v1/images/builds/{id}` follows it.
pub async fn create(
    State(state): State<Arc<AppState>>,
    project: Project,
    multipart: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> ApiResult<Response> {
    let multipart = multipart.map_err(|e| {
        ApiError::unsupported_media_type(format!(
            "Send multipart/form-data with name and dockerfile (and context), or name and file: {}",
            e.body_text()
        ))
    })?;
    let upload = read_upload(&state, multipart).await?;
    let name = upload
        .name
        .ok_or_else(|| ApiError::invalid("name", "name is required"))?;
    image_builds::check_name(&name)?;
    let source = match (upload.dockerfile, upload.archive) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid(
                "file",
                "send either dockerfile (a build) or file (an import), not both",
            ))
        }
        (None, None) => {
            return Err(ApiError::invalid(
                "dockerfile",
                "send dockerfile (a build) or file (an import)",
            ))
        }
        (None, Some(archive)) => {
            if upload.context.is_some() || upload.network_policy.is_some() {
                return Err(ApiError::invalid(
                    "context",
                    "context and network_policy belong to a build (dockerfile), not an import",
                ));
            }
            Source::Archive(archive)
        }
        (Some(text), None) => {
            let parsed = dockerfile::parse(&text)
                .map_err(|e| ApiError::invalid("dockerfile", e.to_string()))?;
            let copies = parsed
                .steps
                .iter()
                .any(|step| matches!(step.instruction, dockerfile::Instruction::Copy { .. }));
            let context = match upload.context {
                Some(file) => {
                    let (dir, cap) = (
                        state.spool_dir.clone(),
                        state.config.server.max_upload_bytes as u64,
                    );
                    let plain = tokio::task::spawn_blocking(move || {
                        image_builds::plain_context(file, &dir, cap)
                    })
                    .await
                    .map_err(|e| ApiError::internal(format!("the context reader failed: {e}")))?
                    .map_err(|message| ApiError::invalid("context", message))?;
                    vec![ContextFile {
                        file: plain,
                        dir: String::new(),
                    }]
                }
                None if copies => {
                    return Err(ApiError::invalid(
                        "context",
                        "the Dockerfile COPYs: send its build context as context (a tar)",
                    ))
                }
                None => Vec::new(),
            };
            let policy = upload.network_policy.unwrap_or(NetworkPolicy::Disabled);
            let network =
                crate::egress::network_spec(&state.config, Some(&policy), "network_policy")?;
            Source::Dockerfile {
                dockerfile: parsed,
                context,
                network,
            }
        }
    };
    let job = Job {
        id: None,
        project: project.0.clone(),
        image: name,
        source,
    };
    // Once the job is recorded it runs whatever the client does.
    let worker = Arc::clone(&state);
    let (row, _finished) =
        to_completion(async move { image_builds::submit(&worker, job).await }).await?;
    let object = image_builds::build_object(row, Vec::new(), 0);
    Ok((StatusCode::ACCEPTED, Json(object)).into_response())
}

/// `GET /v1/images/{name}`: one image this project may use.
pub async fn retrieve(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(name): Path<String>,
) -> ApiResult<Json<shellgate_wire::Image>> {
    let images = crate::sandboxes::containers::image_list(&state).await?;
    let image = images
        .into_iter()
        .find(|image| {
            image.name == name && crate::sandboxes::containers::usable_by(image, &project.0)
        })
        .ok_or_else(|| ApiError::not_found("image", &name))?;
    Ok(Json(crate::containers::image_object(
        image,
        &state.config.sandbox.default_image,
    )))
}

/// `DELETE /v1/images/{name}`: one of the project's own images (built,
/// imported or committed). Containers made from it keep running on it.
pub async fn delete(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(name): Path<String>,
) -> ApiResult<Json<shellgate_wire::Deleted>> {
    image_builds::delete_image(&state, &project.0, &name).await?;
    Ok(Json(shellgate_wire::Deleted::new(name, "image.deleted")))
}

#[derive(Debug, Deserialize)]
pub struct StatusQuery {
    #[serde(default)]
    log_offset: Option<u64>,
    #[serde(default)]
    log_limit: Option<usize>,
}

/// `GET /v1/images/builds/{id}?log_offset=&log_limit=`: a job's status
/// and its log from `log_offset` (at most `log_limit` entries, default
/// 100, at most 1000); `next_log_offset` is where the next page starts.
pub async fn build_status(
    State(state): State<Arc<AppState>>,
    project: Project,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<StatusQuery>,
) -> ApiResult<Json<shellgate_wire::ImageBuild>> {
    let limit = query.log_limit.unwrap_or(DEFAULT_LOG_PAGE);
    if limit == 0 || limit > image_builds::MAX_LOG_PAGE {
        return Err(ApiError::invalid(
            "log_limit",
            format!(
                "log_limit must be between 1 and {}",
                image_builds::MAX_LOG_PAGE
            ),
        ));
    }
    let build = image_builds::status(
        &state,
        &project.0,
        &id,
        query.log_offset.unwrap_or(0),
        limit,
    )
    .await?;
    Ok(Json(build))
}
