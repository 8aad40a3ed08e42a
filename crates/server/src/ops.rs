//! Health, metrics, usage, and the fallbacks.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use shellgate_wire::{ContainerUsage, Usage};

use crate::error::{ApiError, ApiResult};
use crate::http::Project;
use crate::state::AppState;
use shellgate_wire::ErrorCode;

pub async fn healthz(State(state): State<Arc<AppState>>) -> ApiResult<impl IntoResponse> {
    // Healthy means the store answers.
    state.db(|s| s.key_count()).await?;
    let mut body = serde_json::json!({"status": "ok"});
    // A first start's background build of the default image, while it
    // runs and after (how it ended).
    let build = state
        .default_image_build
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    if let Some(build) = build {
        body["default_image"] = serde_json::to_value(build).unwrap_or_default();
    }
    // How a snapshot's blocks are shared with the containers made from it
    // on this host: `reflink` (XFS, btrfs) or `copy` (holes kept).
    if let Some(sharing) = state.engine.snapshot_sharing() {
        body["snapshot_sharing"] = sharing.into();
    }
    Ok(Json(body))
}

/// Liveness: the process serves requests. Nothing else is asked (not the
/// store): an orchestrator restarting a node because its database is
/// unreachable would end every process in its containers for nothing.
pub async fn livez() -> impl IntoResponse {
    Json(serde_json::json!({"status": "alive"}))
}

/// Server-wide counters only (nothing per project). With `metrics_token`
/// set, only a scraper that presents it may read them.
pub async fn metrics(
    State(state): State<Arc<AppState>>,
    headers: axum::http::HeaderMap,
) -> ApiResult<impl IntoResponse> {
    let token = &state.config.server.metrics_token;
    if !token.is_empty() {
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !presented.is_some_and(|p| constant_time_eq(p.as_bytes(), token.as_bytes())) {
            return Err(ApiError::unauthorized(
                "/metrics needs 'Authorization: Bearer <metrics_token>'.",
            ));
        }
    }
    let (containers, seconds) = state
        .db(|s| Ok((s.containers_by_status()?, s.total_usage()?)))
        .await?;
    Ok((
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(&containers, seconds)
            + &state.egress_counts.render(
                state
                    .egress
                    .as_ref()
                    .map_or(0, |e| e.dropped.load(std::sync::atomic::Ordering::Relaxed)),
            ),
    ))
}

/// Compares secrets without an early exit that would time their prefix.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `GET /v1/usage`: the project's billed totals, each the sum of its parts
/// (the containers listed, deleted ones included).
pub async fn usage(State(state): State<Arc<AppState>>, project: Project) -> ApiResult<Json<Usage>> {
    let owner = project.0.clone();
    let ledger = state
        .db(move |s| s.usage_ledger(&owner, None, true))
        .await?;
    let total = ledger.sandbox_seconds();
    let tokens = ledger.tokens();
    Ok(Json(Usage {
        object: "usage".to_owned(),
        project: project.0,
        sandbox_seconds: total,
        server_tool_cost: total * state.config.sandbox.sandbox_price_per_second,
        input_tokens: tokens.input_tokens,
        output_tokens: tokens.output_tokens,
        responses: tokens.responses,
        containers: ledger
            .containers
            .into_iter()
            .map(|(container_id, sandbox_seconds)| ContainerUsage {
                container_id,
                sandbox_seconds,
            })
            .collect(),
    }))
}

pub async fn not_found() -> ApiError {
    ApiError::of(ErrorCode::UnknownUrl, "Unknown request URL.")
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::of(
        ErrorCode::MethodNotAllowed,
        "Method not allowed for this URL.",
    )
}
