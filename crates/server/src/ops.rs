//! Health, metrics, the OpenAPI document, usage, and the fallbacks.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use shellgate_wire::{ContainerUsage, Usage};

use crate::error::{ApiError, ApiResult};
use crate::http::Project;
use crate::AppState;

/// The OpenAPI 3.1 description of every route.
const OPENAPI: &str = include_str!("openapi.json");

pub async fn healthz(State(state): State<Arc<AppState>>) -> ApiResult<impl IntoResponse> {
    // Healthy means the store answers.
    state.store.containers_by_status()?;
    Ok(Json(serde_json::json!({"status": "ok"})))
}

pub async fn metrics(State(state): State<Arc<AppState>>) -> ApiResult<impl IntoResponse> {
    let containers = state.store.containers_by_status()?;
    let seconds = state.store.total_usage()?;
    Ok((
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(&containers, seconds),
    ))
}

pub async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI)
}

pub async fn usage(State(state): State<Arc<AppState>>, project: Project) -> ApiResult<Json<Usage>> {
    let (total, per_container) = state.store.project_usage(&project.0)?;
    Ok(Json(Usage {
        object: "usage".to_owned(),
        project: project.0,
        sandbox_seconds: total,
        containers: per_container
            .into_iter()
            .map(|(container_id, sandbox_seconds)| ContainerUsage {
                container_id,
                sandbox_seconds,
            })
            .collect(),
    }))
}

pub async fn not_found() -> ApiError {
    let mut error = ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        "Unknown request URL.",
    );
    error.code = Some("unknown_url");
    error
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "invalid_request_error",
        "Method not allowed for this URL.",
    )
}
