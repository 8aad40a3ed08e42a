//! What every model API (Responses, Messages, Chat Completions) shares to
//! run a turn: the upstream a model names, the loop run within the
//! response's deadline, a run aborted when its client leaves, and what an
//! upstream's failure is for the client. The
//! handlers translate their wire around these; none imports another's.

use std::sync::Arc;

use axum::http::StatusCode;
use shellgate_model::run::{self, EventSink, Outcome, Sandbox, Status};
use shellgate_model::upstream::{Turn, Upstream, UpstreamError, Usage};
use shellgate_wire::catalogue::ErrorCode;

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// The upstream that serves `model` (both APIs): a model is required.
pub(crate) fn upstream_for(
    state: &AppState,
    model: Option<&str>,
) -> ApiResult<(String, Arc<dyn shellgate_model::upstream::Upstream>)> {
    let model = model
        .filter(|m| !m.is_empty())
        .ok_or_else(|| ApiError::invalid("model", "a model is required"))?
        .to_owned();
    if state.upstreams.is_empty() {
        // The server's set-up, not the request, is what is wrong: a 503 (as
        // the start-up summary says), not a 400 the client would "fix".
        return Err(ApiError::no_upstream());
    }
    let upstream = state
        .upstreams
        .pick(&model)
        .map_err(|e| ApiError::invalid("model", e.to_string()))?;
    Ok((model, upstream))
}

/// Runs the loop within `deadline` (`response_timeout_secs`): past it the
/// run is dropped, which kills its commands (the engine's command path
/// guarantees it), and it ends `failed`, naming the limit. What it had made
/// is not kept (a streaming client saw it go by).
pub(crate) async fn run_within(
    deadline: std::time::Duration,
    upstream: &dyn shellgate_model::upstream::Upstream,
    sandbox: Option<&dyn Sandbox>,
    request: &run::Request,
    events: Option<&EventSink>,
) -> Outcome {
    match tokio::time::timeout(deadline, run::run(upstream, sandbox, request, events)).await {
        Ok(outcome) => outcome,
        Err(_) => Outcome {
            output: Vec::new(),
            usage: Usage::default(),
            status: Status::Failed {
                code: "server_error",
                message: format!(
                    "the response took longer than its limit of {} seconds \
                     (response_timeout_secs); its commands were stopped",
                    deadline.as_secs()
                ),
            },
            tool_calls: 0,
        },
    }
}

/// Aborts a foreground run when its event stream is dropped (the client left).
pub(crate) struct AbortOnDrop(pub(crate) Option<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(task) = &self.0 {
            task.abort();
        }
    }
}

/// The error an upstream's failure is for the client: its own refusal of
/// the request (a 4xx but for its key or its rate) is the client's 400s;
/// anything else is the gateway's (502, 504, a rate limit's 429). For
/// the APIs that answer a failed turn as an HTTP error (Chat Completions,
/// Gemini); Responses and Messages fail the response instead.
pub fn upstream_error(error: UpstreamError) -> ApiError {
    let message = error.to_string();
    match error {
        UpstreamError::Status { status, .. }
            if (400..500).contains(&status) && ![401, 403, 429].contains(&status) =>
        {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
            ApiError::upstream_rejected(status, message)
        }
        UpstreamError::RateLimited { .. } => ApiError::quota(ErrorCode::RateLimitExceeded, message),
        UpstreamError::Timeout { .. } | UpstreamError::TurnTimeout { .. } => {
            ApiError::of(ErrorCode::UpstreamTimeout, message)
        }
        UpstreamError::NotConfigured(_) => ApiError::invalid("model", message),
        _ => ApiError::of(ErrorCode::UpstreamFailed, message),
    }
}

/// The input tokens of `turn`: the upstream's own count where its protocol
/// has one, else (or when counting fails) the estimate, so a client asking
/// (Claude Code does, to budget its context) always gets a number.
pub async fn input_tokens(upstream: &dyn Upstream, turn: &Turn, model: &str) -> u64 {
    match upstream.count_tokens(turn).await {
        Ok(Some(tokens)) => tokens,
        Ok(None) => turn.estimated_input_tokens(),
        Err(e) => {
            tracing::warn!(
                model,
                "the upstream could not count tokens ({e}); estimated"
            );
            turn.estimated_input_tokens()
        }
    }
}
