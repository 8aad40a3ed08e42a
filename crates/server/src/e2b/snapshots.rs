//! E2B's snapshots and forks over shellgate's own (`sandboxes::snapshots`).
//!
//! - `POST /sandboxes/{id}/snapshots` takes a snapshot of the sandbox's
//!   container (files only: E2B's `memory` is read and changes nothing, as
//!   for a pause) and answers its id, which `POST /sandboxes` takes as
//!   `templateID`: the new sandbox is a container made from the snapshot.
//! - `GET /snapshots` lists the project's, by source sandbox and by name
//!   or id if asked; `DELETE /templates/{id}` removes one (E2B's SDK
//!   deletes a snapshot as a template).
//! - `POST /sandboxes/{id}/fork` makes `count` copies of the sandbox from
//!   one snapshot taken now (`sandboxes::snapshots::fork`), each an E2B
//!   sandbox of the source's template, metadata and environment, with the
//!   fork's timeout. All the copies are made or none: a failure is the
//!   whole request's error.
//!
//! A cluster serves them as a single box does: the snapshot is restored
//! on whichever node a create is placed (`snapshot_archives`).

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Json;
use serde::Deserialize;
use shellgate_store::{E2bSandboxRow, Page, SnapshotRow};
use shellgate_wire::e2b::{ForkRequest, ForkResult, SnapshotInfo, SnapshotRequest};
use shellgate_wire::{CreateSnapshot, ForkContainer};

use super::control::{owned, register, sandbox_body, timeout_secs};
use super::request::{bad_request, e2b_error, read_body, E2bProject};
use super::E2bError;
use crate::http::Project;
use crate::sandboxes::snapshots as native;
use crate::state::AppState;

/// Longest listing page (E2B's own bound).
const MAX_LIST_LIMIT: u32 = 100;
/// E2B's default fork count.
const DEFAULT_FORKS: u32 = 1;
/// The header carrying the next page's token.
const NEXT_TOKEN_HEADER: &str = "x-next-token";

type E2bResult<T> = Result<T, E2bError>;

/// E2B's snapshot and fork routes, at the root as E2B's API serves them.
pub(crate) fn routes(table: crate::route_table::RouteTable) -> crate::route_table::RouteTable {
    table
        .route("/sandboxes/{sandbox_id}/fork", post(fork))
        .route("/sandboxes/{sandbox_id}/snapshots", post(take))
        .route("/snapshots", get(list))
}

fn snapshot_info(row: &SnapshotRow) -> SnapshotInfo {
    SnapshotInfo {
        snapshot_id: row.id.clone(),
        names: vec![row.name.clone()],
    }
}

/// `POST /sandboxes/{id}/snapshots`: 201 and the snapshot's id and name.
pub(super) async fn take(
    State(state): State<Arc<AppState>>,
    E2bProject(project): E2bProject,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> E2bResult<Response> {
    let request: SnapshotRequest = read_body(&body)?;
    let (sandbox, _) = owned(&state, &project, &id).await?;
    let row = native::take(
        &state,
        &Project(project),
        &sandbox.container_id,
        CreateSnapshot {
            name: request.name,
            metadata: Default::default(),
        },
    )
    .await
    .map_err(e2b_error)?;
    Ok((StatusCode::CREATED, Json(snapshot_info(&row))).into_response())
}

/// The list's query: `sandboxID`, `name` (a snapshot's name or id),
/// `limit`, `nextToken` (the last id of the page before).
#[derive(Debug, Default, Deserialize)]
pub(super) struct ListQuery {
    #[serde(rename = "sandboxID")]
    sandbox_id: Option<String>,
    name: Option<String>,
    limit: Option<u32>,
    #[serde(rename = "nextToken")]
    next_token: Option<String>,
}

/// Every snapshot of `project`, newest first (bounded by the project's
/// snapshot quota).
async fn all_snapshots(state: &AppState, project: &str) -> E2bResult<Vec<SnapshotRow>> {
    let mut rows = Vec::new();
    let mut after = None;
    loop {
        let (owner, page) = (
            project.to_owned(),
            Page {
                limit: MAX_LIST_LIMIT,
                ascending: false,
                after: after.clone(),
            },
        );
        let (page_rows, has_more) = state
            .db(move |s| s.list_snapshots(&owner, &page))
            .await
            .map_err(e2b_error)?;
        after = page_rows.last().map(|row| row.id.clone());
        rows.extend(page_rows);
        if !has_more || after.is_none() {
            return Ok(rows);
        }
    }
}

/// `GET /snapshots`: a page of the project's snapshots, the next page's
/// token in `x-next-token`.
pub(super) async fn list(
    State(state): State<Arc<AppState>>,
    E2bProject(project): E2bProject,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> E2bResult<Response> {
    let Query(query) = query.map_err(|e| bad_request(e.body_text()))?;
    let limit = query.limit.unwrap_or(MAX_LIST_LIMIT);
    if limit == 0 || limit > MAX_LIST_LIMIT {
        return Err(bad_request(format!(
            "limit must be between 1 and {MAX_LIST_LIMIT}"
        )));
    }
    let matching: Vec<SnapshotRow> = all_snapshots(&state, &project)
        .await?
        .into_iter()
        .filter(|row| {
            query
                .sandbox_id
                .as_ref()
                .is_none_or(|id| row.container_id == *id)
        })
        .filter(|row| {
            query
                .name
                .as_ref()
                .is_none_or(|name| row.name == *name || row.id == *name)
        })
        .collect();
    let start = match query.next_token.as_deref().filter(|t| !t.is_empty()) {
        Some(token) => match matching.iter().position(|row| row.id == token) {
            Some(at) => at + 1,
            None => return Err(bad_request("nextToken is not a token of this listing")),
        },
        None => 0,
    };
    let rest = &matching[start..];
    let page = &rest[..rest.len().min(limit as usize)];
    let body: Vec<SnapshotInfo> = page.iter().map(snapshot_info).collect();
    let mut response = Json(body).into_response();
    if rest.len() > page.len() {
        if let Some(last) = page.last() {
            let token = HeaderValue::from_str(&last.id)
                .map_err(|e| E2bError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
            response.headers_mut().insert(NEXT_TOKEN_HEADER, token);
        }
    }
    Ok(response)
}

/// `POST /sandboxes/{id}/fork`: 201 and one result per copy.
pub(super) async fn fork(
    State(state): State<Arc<AppState>>,
    E2bProject(project): E2bProject,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> E2bResult<Response> {
    let request: ForkRequest = read_body(&body)?;
    let timeout = timeout_secs(&state, request.timeout)?;
    let (source, _) = owned(&state, &project, &id).await?;
    let count = request.count.unwrap_or(DEFAULT_FORKS);
    // Run to completion: a client gone mid-fork leaves no copy unrecorded.
    let worker = Arc::clone(&state);
    let rows =
        tokio::spawn(async move { make_forks(worker, project, source, count, timeout).await })
            .await
            .map_err(|e| {
                E2bError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("request worker failed: {e}"),
                )
            })??;
    let results: Vec<ForkResult> = rows
        .iter()
        .map(|row| ForkResult {
            sandbox: Some(sandbox_body(&state, &headers, row)),
            error: None,
        })
        .collect();
    Ok((StatusCode::CREATED, Json(results)).into_response())
}

/// `count` copies of `source`'s container, each recorded as an E2B sandbox
/// of `source`'s template, metadata and environment, ending `timeout`
/// seconds from now; all of them or none.
async fn make_forks(
    state: Arc<AppState>,
    project: String,
    source: E2bSandboxRow,
    count: u32,
    timeout: i64,
) -> E2bResult<Vec<E2bSandboxRow>> {
    let copies = native::fork(
        &state,
        &Project(project.clone()),
        &source.container_id,
        ForkContainer {
            count,
            name: None,
            memory_limit: None,
            network_policy: None,
            expires_after: None,
        },
    )
    .await
    .map_err(e2b_error)?;
    let now = crate::time::now();
    let mut rows = Vec::new();
    for (at, copy) in copies.iter().enumerate() {
        let row = E2bSandboxRow {
            container_id: copy.id.clone(),
            project: project.clone(),
            template_id: source.template_id.clone(),
            metadata: source.metadata.clone(),
            env_vars: source.env_vars.clone(),
            access_token: shellgate_wire::new_id("e2bat_"),
            auto_pause: source.auto_pause,
            auto_resume: source.auto_resume,
            created_at: now,
            started_at: now,
            end_at: now + timeout,
            paused: false,
            idempotency_key: None,
            request_hash: None,
            public_traffic: source.public_traffic,
        };
        if let Err(error) = register(&state, &row).await {
            // All or nothing: the other copies go with this one (which
            // `register` removed), those registered before it and those not.
            for other in copies[..at].iter().chain(&copies[at + 1..]) {
                state.e2b_deadlines.disarm(&other.id);
                let _ = crate::sandboxes::containers::remove_container(&state, &other.id).await;
            }
            return Err(error);
        }
        rows.push(row);
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use axum::http::Method;
    use serde_json::json;

    use crate::testing::{Harness, BETA};

    #[tokio::test]
    async fn unknown_and_foreign_snapshots_and_sandboxes_are_e2b_404s() {
        let harness = Harness::new();
        let made = harness
            .post(
                "/v2/sandboxes",
                json!({"templateID": "base", "timeout": 60}),
            )
            .await;
        assert_eq!(made.status, 201, "{}", made.json);
        let id = made.json["sandboxID"].as_str().expect("id").to_owned();

        let from_unknown = harness
            .post("/v2/sandboxes", json!({"templateID": "snap_none"}))
            .await;
        assert_eq!(from_unknown.status, 404, "{}", from_unknown.json);
        assert_eq!(from_unknown.json["code"], 404, "{}", from_unknown.json);
        let deleted = harness.delete("/templates/snap_none").await;
        assert_eq!(deleted.status, 404, "{}", deleted.json);
        assert_eq!(deleted.json["code"], 404, "{}", deleted.json);

        let listed = harness.get("/snapshots").await;
        assert_eq!(listed.status, 200, "{}", listed.json);
        assert_eq!(listed.json, json!([]), "{}", listed.json);
        let bad_limit = harness.get("/snapshots?limit=0").await;
        assert_eq!(bad_limit.status, 400, "{}", bad_limit.json);

        for path in [
            format!("/sandboxes/{id}/snapshots"),
            format!("/sandboxes/{id}/fork"),
        ] {
            let foreign = harness
                .call(Some(BETA), Method::POST, &path, Some(json!({})))
                .await;
            assert_eq!(foreign.status, 404, "{path}: {}", foreign.json);
            assert_eq!(foreign.json["code"], 404, "{path}: {}", foreign.json);
        }
    }

    #[tokio::test]
    async fn an_engine_without_snapshots_answers_in_e2bs_envelope() {
        // The test engine keeps no snapshots: its refusal reaches the SDK
        // as E2B's error body.
        let harness = Harness::new();
        let made = harness
            .post(
                "/v2/sandboxes",
                json!({"templateID": "base", "timeout": 60}),
            )
            .await;
        assert_eq!(made.status, 201, "{}", made.json);
        let id = made.json["sandboxID"].as_str().expect("id").to_owned();
        for path in [
            format!("/sandboxes/{id}/snapshots"),
            format!("/sandboxes/{id}/fork"),
        ] {
            let refused = harness.post(&path, json!({})).await;
            assert_eq!(refused.status, 501, "{path}: {}", refused.json);
            assert_eq!(refused.json["code"], 501, "{path}: {}", refused.json);
            assert!(
                refused.json["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty()),
                "{path}: {}",
                refused.json
            );
        }
        let listed = harness.get(&format!("/snapshots?sandboxID={id}")).await;
        assert_eq!(listed.json, json!([]), "{}", listed.json);
    }
}
