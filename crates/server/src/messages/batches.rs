//! Anthropic's Message Batches (`/v1/messages/batches`): a client's many
//! Messages requests, each run in the background through the same path as
//! `POST /v1/messages` ([`crate::messages::run_once`]), a few of a
//! project's at a time, their results stored (`shellgate_store`'s
//! `message_batches`) and read back as JSONL.
//!
//! A batch ends when every request has an outcome; a cancel gives every
//! request without one `canceled` at once (a request already running
//! finishes, billed, but its answer is dropped: the first outcome stays),
//! so a canceled batch ends without waiting on its upstream calls. A batch a
//! stopped server left in progress is resumed when that server starts
//! again (a cluster's node resumes the batches it took, by its node name):
//! its requests without an outcome run again, as if never started (a
//! request is stored only once it ends, so none is run twice to a stored
//! result).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::Value;
use shellgate_store::{BatchCounts, BatchOutcome, BatchRow, BatchStatus, Page};
use shellgate_wire::messages::{
    BatchPage, BatchResult, BatchResultLine, CreateBatch, DeletedBatchKind, DeletedMessageBatch,
    MessageBatch, MessageBatchKind, ProcessingStatus, RequestCounts,
};
use shellgate_wire::time::rfc3339;
use tokio::sync::Semaphore;

use crate::error::{ApiError, Dialect};
use crate::http::{ApiJson, Project};
use crate::state::AppState;

/// How long a batch has to finish (Anthropic's 24 hours).
const EXPIRES_AFTER_SECONDS: i64 = 24 * 60 * 60;
/// How many of one project's batch requests run at once.
const PER_PROJECT: usize = 4;
/// Anthropic's limit on a batch's requests.
const MAX_REQUESTS: usize = 100_000;

fn error(e: ApiError) -> Response {
    e.render(Dialect::Anthropic)
}

fn batch_object(row: &BatchRow, counts: &BatchCounts) -> MessageBatch {
    let ended = row.status == BatchStatus::Ended;
    MessageBatch {
        id: row.id.clone(),
        kind: MessageBatchKind::MessageBatch,
        processing_status: match row.status {
            BatchStatus::InProgress => ProcessingStatus::InProgress,
            BatchStatus::Canceling => ProcessingStatus::Canceling,
            BatchStatus::Ended => ProcessingStatus::Ended,
        },
        request_counts: RequestCounts {
            processing: counts.processing,
            succeeded: counts.succeeded,
            errored: counts.errored,
            canceled: counts.canceled,
            expired: counts.expired,
        },
        created_at: rfc3339(row.created_at),
        expires_at: rfc3339(row.expires_at),
        ended_at: row.ended_at.map(rfc3339),
        cancel_initiated_at: row.cancel_initiated_at.map(rfc3339),
        archived_at: None,
        results_url: ended.then(|| format!("/v1/messages/batches/{}/results", row.id)),
    }
}

/// The body a request's outcome stores: its result object.
fn result_text(result: &BatchResult) -> String {
    serde_json::to_string(result).unwrap_or_default()
}

/// `POST /v1/messages/batches`.
pub async fn create(
    State(state): State<Arc<AppState>>,
    project: Result<Project, ApiError>,
    body: Result<ApiJson<Value>, ApiError>,
) -> Response {
    let created = async {
        let Project(project) = project?;
        let ApiJson(body) = body?;
        let batch: CreateBatch = serde_json::from_value(body)
            .map_err(|e| ApiError::bad_request(format!("Invalid batch: {e}")))?;
        if batch.requests.is_empty() {
            return Err(ApiError::invalid(
                "requests",
                "A batch needs at least one request.",
            ));
        }
        if batch.requests.len() > MAX_REQUESTS {
            return Err(ApiError::invalid(
                "requests",
                format!("A batch holds at most {MAX_REQUESTS} requests."),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        let mut requests = Vec::with_capacity(batch.requests.len());
        for (index, request) in batch.requests.iter().enumerate() {
            let id = &request.custom_id;
            if id.is_empty()
                || id.len() > 64
                || !id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err(ApiError::invalid(
                    format!("requests.{index}.custom_id"),
                    "A custom_id is 1 to 64 letters, digits, '_' or '-'.",
                ));
            }
            if !seen.insert(id.as_str()) {
                return Err(ApiError::invalid(
                    format!("requests.{index}.custom_id"),
                    format!("Duplicate custom_id '{id}': each request's must be unique."),
                ));
            }
            let params = serde_json::to_string(&request.params)
                .map_err(|e| ApiError::internal(e.to_string()))?;
            requests.push((id.clone(), params));
        }
        let now = crate::time::now();
        let row = BatchRow {
            id: shellgate_wire::new_id("msgbatch_"),
            project,
            status: BatchStatus::InProgress,
            created_at: now,
            expires_at: now + EXPIRES_AFTER_SECONDS,
            cancel_initiated_at: None,
            ended_at: None,
            node_id: state.node_name.clone(),
        };
        let counts = BatchCounts {
            processing: requests.len() as u64,
            ..BatchCounts::default()
        };
        let stored = row.clone();
        state
            .db(move |s| s.insert_batch(&stored, &requests))
            .await?;
        Ok((row, counts))
    }
    .await;
    match created {
        Ok((row, counts)) => {
            spawn_run(Arc::clone(&state), row.clone());
            Json(batch_object(&row, &counts)).into_response()
        }
        Err(e) => error(e),
    }
}

async fn find(
    state: &AppState,
    project: &str,
    id: &str,
) -> Result<(BatchRow, BatchCounts), ApiError> {
    let (project, key) = (project.to_owned(), id.to_owned());
    state
        .db(move |s| s.batch(&project, &key))
        .await?
        .ok_or_else(|| ApiError::not_found("message batch", id))
}

/// `GET /v1/messages/batches/{id}`.
pub async fn retrieve(
    State(state): State<Arc<AppState>>,
    project: Result<Project, ApiError>,
    Path(id): Path<String>,
) -> Response {
    let found = async { find(&state, &project?.0, &id).await }.await;
    match found {
        Ok((row, counts)) => Json(batch_object(&row, &counts)).into_response(),
        Err(e) => error(e),
    }
}

/// `GET /v1/messages/batches/{id}/results`: one JSON line per request, in
/// the batch's order, once the batch has ended.
pub async fn results(
    State(state): State<Arc<AppState>>,
    project: Result<Project, ApiError>,
    Path(id): Path<String>,
) -> Response {
    let lines = async {
        let (row, _) = find(&state, &project?.0, &id).await?;
        if row.status != BatchStatus::Ended {
            return Err(ApiError::bad_request(format!(
                "Message batch '{id}' has not ended: its results are not ready."
            )));
        }
        let key = row.id.clone();
        let requests = state.db(move |s| s.batch_requests(&key)).await?;
        let mut text = String::new();
        for request in requests {
            let result = match request
                .result
                .as_deref()
                .map(serde_json::from_str::<BatchResult>)
            {
                Some(Ok(result)) => result,
                _ => BatchResult::Expired,
            };
            let line = BatchResultLine {
                custom_id: request.custom_id,
                result,
            };
            text.push_str(
                &serde_json::to_string(&line).map_err(|e| ApiError::internal(e.to_string()))?,
            );
            text.push('\n');
        }
        Ok(text)
    }
    .await;
    match lines {
        Ok(text) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/x-jsonl")],
            text,
        )
            .into_response(),
        Err(e) => error(e),
    }
}

/// The paging parameters of `GET /v1/messages/batches`.
#[derive(Debug, Deserialize)]
pub struct ListQuery {
    limit: Option<u32>,
    after_id: Option<String>,
    before_id: Option<String>,
}

/// `GET /v1/messages/batches`: newest first; `after_id` pages on to older
/// batches, `before_id` back to newer ones.
pub async fn list(
    State(state): State<Arc<AppState>>,
    project: Result<Project, ApiError>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let page = async {
        let Project(project) = project?;
        let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
        let limit = query.limit.unwrap_or(20);
        if !(1..=1000).contains(&limit) {
            return Err(ApiError::invalid("limit", "limit is 1 to 1000."));
        }
        let (ascending, after) = match (query.after_id, query.before_id) {
            (Some(_), Some(_)) => {
                return Err(ApiError::bad_request(
                    "Give after_id or before_id, not both.",
                ))
            }
            (Some(after), None) => (false, Some(after)),
            (None, Some(before)) => (true, Some(before)),
            (None, None) => (false, None),
        };
        let page = Page {
            limit,
            ascending,
            after,
        };
        let (mut rows, has_more) = state.db(move |s| s.list_batches(&project, &page)).await?;
        if ascending {
            rows.reverse();
        }
        let data: Vec<MessageBatch> = rows
            .iter()
            .map(|(row, counts)| batch_object(row, counts))
            .collect();
        Ok(BatchPage {
            first_id: data.first().map(|b| b.id.clone()),
            last_id: data.last().map(|b| b.id.clone()),
            has_more,
            data,
        })
    }
    .await;
    match page {
        Ok(page) => Json(page).into_response(),
        Err(e) => error(e),
    }
}

/// `POST /v1/messages/batches/{id}/cancel`.
pub async fn cancel(
    State(state): State<Arc<AppState>>,
    project: Result<Project, ApiError>,
    Path(id): Path<String>,
) -> Response {
    let canceled = async {
        let Project(project) = project?;
        let (owner, key) = (project.clone(), id.clone());
        let found = state
            .db(move |s| s.cancel_batch(&owner, &key, crate::time::now()))
            .await?
            .ok_or_else(|| ApiError::not_found("message batch", &id))?;
        if found.0.status == BatchStatus::Canceling {
            // Every request without an outcome is canceled now; one still
            // running keeps its canceled outcome when it finishes.
            let key = id.clone();
            let canceled = result_text(&BatchResult::Canceled);
            state
                .db(move |s| s.settle_batch_requests(&key, BatchOutcome::Canceled, &canceled))
                .await?;
            end_if_done(&state, &id).await;
            return find(&state, &project, &id).await;
        }
        Ok(found)
    }
    .await;
    match canceled {
        Ok((row, counts)) => Json(batch_object(&row, &counts)).into_response(),
        Err(e) => error(e),
    }
}

/// `DELETE /v1/messages/batches/{id}`: only an ended batch.
pub async fn delete(
    State(state): State<Arc<AppState>>,
    project: Result<Project, ApiError>,
    Path(id): Path<String>,
) -> Response {
    let deleted = async {
        let Project(project) = project?;
        let key = id.clone();
        match state.db(move |s| s.delete_batch(&project, &key)).await? {
            None => Err(ApiError::not_found("message batch", &id)),
            Some(false) => Err(ApiError::bad_request(format!(
                "Message batch '{id}' has not ended: cancel it, and delete it once it has ended."
            ))),
            Some(true) => Ok(DeletedMessageBatch {
                id: id.clone(),
                kind: DeletedBatchKind::MessageBatchDeleted,
            }),
        }
    }
    .await;
    match deleted {
        Ok(deleted) => Json(deleted).into_response(),
        Err(e) => error(e),
    }
}

/// Each project's bound on its batch requests running at once.
fn project_slots(project: &str) -> Arc<Semaphore> {
    static SLOTS: OnceLock<Mutex<HashMap<String, Arc<Semaphore>>>> = OnceLock::new();
    let mut slots = SLOTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    Arc::clone(
        slots
            .entry(project.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(PER_PROJECT))),
    )
}

/// Ends the batch if none of its requests is left without an outcome.
async fn end_if_done(state: &AppState, id: &str) {
    let key = id.to_owned();
    let ended = state
        .db(move |s| {
            let open = s.batch_requests(&key)?.iter().any(|r| r.outcome.is_none());
            if !open {
                s.end_batch(&key, crate::time::now())?;
            }
            Ok(())
        })
        .await;
    if let Err(e) = ended {
        tracing::error!(batch = id, "could not end a message batch: {}", e.message);
    }
}

/// Runs a batch's requests that have no outcome yet, a few of its
/// project's at a time, then ends it.
pub(crate) fn spawn_run(state: Arc<AppState>, batch: BatchRow) {
    tokio::spawn(async move {
        let key = batch.id.clone();
        let requests = match state.db(move |s| s.batch_requests(&key)).await {
            Ok(requests) => requests,
            Err(e) => {
                tracing::error!(
                    batch = batch.id,
                    "could not read a batch's requests: {}",
                    e.message
                );
                return;
            }
        };
        let slots = project_slots(&batch.project);
        let mut running = tokio::task::JoinSet::new();
        for request in requests.into_iter().filter(|r| r.outcome.is_none()) {
            let (state, slots, batch) = (Arc::clone(&state), Arc::clone(&slots), batch.clone());
            running.spawn(async move {
                let Ok(_slot) = slots.acquire_owned().await else {
                    return;
                };
                // A request canceled (or settled) while it waited stays so.
                let key = batch.id.clone();
                let position = request.position;
                let still_open = state
                    .db(move |s| {
                        Ok(s.batch_requests(&key)?
                            .iter()
                            .any(|r| r.position == position && r.outcome.is_none()))
                    })
                    .await
                    .unwrap_or(false);
                if !still_open {
                    return;
                }
                let (outcome, result) = if crate::time::now() >= batch.expires_at {
                    (BatchOutcome::Expired, BatchResult::Expired)
                } else {
                    match run_params(&state, &batch.project, &request.params).await {
                        Ok(message) => (
                            BatchOutcome::Succeeded,
                            BatchResult::Succeeded {
                                message: Box::new(message),
                            },
                        ),
                        Err(e) => (
                            BatchOutcome::Errored,
                            BatchResult::Errored {
                                error: e.anthropic(),
                            },
                        ),
                    }
                };
                let text = result_text(&result);
                let key = batch.id.clone();
                if let Err(e) = state
                    .db(move |s| s.set_batch_result(&key, position, outcome, &text))
                    .await
                {
                    tracing::error!(
                        batch = batch.id,
                        "could not store a batch result: {}",
                        e.message
                    );
                }
            });
        }
        while running.join_next().await.is_some() {}
        end_if_done(&state, &batch.id).await;
    });
}

async fn run_params(
    state: &Arc<AppState>,
    project: &str,
    params: &str,
) -> Result<shellgate_wire::messages::Message, ApiError> {
    let params: Value = serde_json::from_str(params)
        .map_err(|e| ApiError::internal(format!("a stored batch request is unreadable: {e}")))?;
    super::run_once(state, &Project(project.to_owned()), &params).await
}

/// At start-up: every batch this server (a single box, or a cluster's
/// node: the batches it took) left unended runs its remaining requests (a
/// canceling one just ends, its unstarted requests canceled).
pub(crate) async fn resume(state: &Arc<AppState>) {
    let node = state.node_name.clone();
    let unended = match state.db(move |s| s.unended_batches(&node)).await {
        Ok(unended) => unended,
        Err(e) => {
            tracing::error!("could not read the unended message batches: {}", e.message);
            return;
        }
    };
    for batch in unended {
        if batch.status == BatchStatus::Canceling {
            let key = batch.id.clone();
            let canceled = result_text(&BatchResult::Canceled);
            if let Err(e) = state
                .db(move |s| s.settle_batch_requests(&key, BatchOutcome::Canceled, &canceled))
                .await
            {
                tracing::error!(
                    batch = batch.id,
                    "could not cancel a batch's requests: {}",
                    e.message
                );
            }
            end_if_done(state, &batch.id).await;
        } else {
            spawn_run(Arc::clone(state), batch);
        }
    }
}
