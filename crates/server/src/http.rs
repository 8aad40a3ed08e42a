//! Request extractors that turn every rejection into OpenAI's error
//! envelope: the caller's project (Bearer key or `x-api-key`), JSON bodies
//! and queries.

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use serde::de::DeserializeOwned;
use shellgate_store::KeyGrant;

use crate::error::ApiError;
use crate::state::AppState;
use shellgate_wire::ErrorCode;

/// The project of the API key that signed the request.
#[derive(Debug, Clone)]
pub struct Project(pub String);

/// The project a request acts for when the web console forwards it to the
/// API (`console::forward`), its session already checked there. It is a
/// request *extension*: only the server's own code can set it, nothing a
/// client sends can.
#[derive(Debug, Clone)]
pub(crate) struct ActingProject(pub String);

impl ActingProject {
    /// The project of a forwarded request, rate limited like a key's.
    pub(crate) fn of(parts: &Parts, state: &AppState) -> Result<Option<Project>, ApiError> {
        parts
            .extensions
            .get::<Self>()
            .map(|acting| acting.project(state))
            .transpose()
    }

    /// This project, rate limited like a key's.
    pub(crate) fn project(&self, state: &AppState) -> Result<Project, ApiError> {
        state.limiter.check(&self.0)?;
        Ok(Project(self.0.clone()))
    }
}

impl FromRequestParts<Arc<AppState>> for Project {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, ApiError> {
        if let Some(project) = ActingProject::of(parts, state)? {
            return Ok(project);
        }
        // `Authorization: Bearer KEY` (OpenAI's SDKs, and Anthropic's
        // current one), or `x-api-key: KEY` (Anthropic's API and older SDKs).
        let key = match (
            parts.headers.get(header::AUTHORIZATION),
            parts.headers.get("x-api-key"),
        ) {
            (Some(_), _) => bearer_key(&parts.headers).ok_or_else(|| {
                ApiError::unauthorized("The Authorization header must be 'Bearer YOUR_KEY'.")
            })?,
            (None, Some(header)) => header
                .to_str()
                .ok()
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .ok_or_else(|| ApiError::unauthorized("The x-api-key header is empty."))?,
            (None, None) => {
                return Err(ApiError::unauthorized(
                    "You didn't provide an API key. Provide it in an Authorization header: 'Authorization: Bearer YOUR_KEY'.",
                ))
            }
        };
        project_of_key(state, key, client_address(parts)).await
    }
}

/// The address of the client a request came from (on a cluster's node, the
/// one its replica names), if the listener recorded one.
pub(crate) fn client_address(parts: &Parts) -> Option<std::net::IpAddr> {
    parts
        .extensions
        .get::<crate::listener::ClientAddr>()
        .map(|address| address.0.ip())
}

/// The key of an `Authorization: Bearer KEY` header, trimmed; `None`
/// without one, or when it is empty or not a Bearer header.
pub(crate) fn bearer_key(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
        .filter(|k| !k.is_empty())
}

/// The project of an API key (cached), rate limited; 401 for an unknown key.
pub(crate) async fn project_of_key(
    state: &AppState,
    key: &str,
    client: Option<std::net::IpAddr>,
) -> Result<Project, ApiError> {
    let grant = key_grant(state, key, client).await?;
    state.limiter.check(&grant.project)?;
    Ok(Project(grant.project))
}

/// A live key's project and role (cached for a few seconds); 401 for an
/// unknown or revoked key, 429 while the client (or the key's prefix) is
/// throttled for wrong keys (`auth::KeyThrottle`).
pub(crate) async fn key_grant(
    state: &AppState,
    key: &str,
    client: Option<std::net::IpAddr>,
) -> Result<KeyGrant, ApiError> {
    let attempt = crate::auth::KeyAttempt::new(client, key);
    state.key_throttle.admit(&attempt)?;
    let cached = state.keys.get(attempt.hash());
    let grant = match cached {
        Some(grant) => grant,
        None => {
            let owned = key.to_owned();
            let found = state.db(move |s| s.grant_for_key(&owned)).await?;
            let Some(grant) = found else {
                state.key_throttle.failed(&attempt);
                return Err(ApiError::unauthorized("Incorrect API key provided."));
            };
            state.keys.insert(attempt.hash(), &grant);
            grant
        }
    };
    state.key_throttle.succeeded(&attempt);
    Ok(grant)
}

/// A JSON body; malformed JSON, wrong types and unknown fields or enum
/// values are 400s naming what is wrong, a missing content type is a 415
/// and an oversized body a 413.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(request, state).await {
            Ok(axum::Json(value)) => Ok(ApiJson(value)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

fn json_rejection(rejection: JsonRejection) -> ApiError {
    match rejection {
        JsonRejection::MissingJsonContentType(_) => ApiError::unsupported_media_type(
            "Expected a request body with 'Content-Type: application/json'.",
        ),
        JsonRejection::JsonDataError(error) => {
            // "Failed to deserialize ...: memory_limit: unknown variant ..."
            let detail = error.body_text();
            let detail = detail
                .split_once("target type: ")
                .map(|(_, d)| d.to_owned())
                .unwrap_or(detail);
            match detail.split_once(": ") {
                Some((param, message)) if !param.contains(' ') => {
                    ApiError::invalid(param, format!("Invalid value for '{param}': {message}"))
                }
                _ => ApiError::bad_request(format!("Invalid request body: {detail}")),
            }
        }
        JsonRejection::JsonSyntaxError(error) => ApiError::bad_request(format!(
            "We could not parse the JSON body of your request: {}",
            error.body_text()
        )),
        other if other.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::too_large("The request body is too large.")
        }
        other => body_error(other.body_text()),
    }
}

/// A body that could not be read: too slow (408, see `listener`) or broken.
pub fn body_error(text: String) -> ApiError {
    if text.contains(crate::listener::BODY_TIMEOUT) {
        ApiError::of(ErrorCode::RequestTimeout, text)
    } else {
        ApiError::bad_request(text)
    }
}

/// Query parameters, with rejections as 400s.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(value)) => Ok(ApiQuery(value)),
            Err(QueryRejection::FailedToDeserializeQueryString(error)) => Err(
                ApiError::bad_request(format!("Invalid query: {}", error.body_text())),
            ),
            Err(other) => Err(ApiError::bad_request(other.body_text())),
        }
    }
}

/// List parameters shared by every list endpoint.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    pub limit: Option<u32>,
    pub order: Option<String>,
    pub after: Option<String>,
    /// Containers only: filter by name.
    pub name: Option<String>,
    /// Files only: filter by purpose.
    pub purpose: Option<String>,
}

impl ListParams {
    /// The page of a list that takes no filter (`name`, `purpose`: a 400
    /// naming the one given): `what` is listed without filters.
    pub fn unfiltered_page(&self, what: &str) -> Result<shellgate_store::Page, ApiError> {
        let filter = match (&self.name, &self.purpose) {
            (Some(_), _) => "name",
            (None, Some(_)) => "purpose",
            (None, None) => return self.page(),
        };
        Err(ApiError::invalid(
            filter,
            format!("{what} are listed without filters"),
        ))
    }

    /// The page these parameters ask for (limit 1..=100, default 20; order
    /// `asc` or `desc`, default `desc`).
    pub fn page(&self) -> Result<shellgate_store::Page, ApiError> {
        let limit = self.limit.unwrap_or(20);
        if !(1..=100).contains(&limit) {
            return Err(ApiError::invalid(
                "limit",
                "limit must be between 1 and 100",
            ));
        }
        let ascending = match self.order.as_deref() {
            None | Some("desc") => false,
            Some("asc") => true,
            Some(other) => {
                return Err(ApiError::invalid(
                    "order",
                    format!("order must be 'asc' or 'desc', not '{other}'"),
                ))
            }
        };
        Ok(shellgate_store::Page {
            limit,
            ascending,
            after: self.after.clone(),
        })
    }
}

/// Comment lines sent on quiet event streams: they keep proxies from timing
/// the stream out, and a write is how a client that left is noticed (a
/// foreground response is then cancelled, its commands killed).
pub(crate) fn sse_keep_alive() -> axum::response::sse::KeepAlive {
    axum::response::sse::KeepAlive::new().interval(std::time::Duration::from_secs(1))
}

/// Runs a request's work to completion even if its client hangs up: the
/// handler's future is dropped on a disconnect, and what the work has left
/// to do then goes on as a task of its own. So a command is still killed at
/// its timeout and billed, and a create either finishes or cleans up after
/// itself; nothing is left half-made.
///
/// While the client waits, the work runs inside the handler's future, on
/// the connection's worker: spawning it from the start cost every request a
/// task and a hand-off to whichever worker took it and back (profiles in
/// `bench/profiles/`).
pub(crate) async fn to_completion<T: Send + 'static>(
    work: impl std::future::Future<Output = crate::error::ApiResult<T>> + Send + 'static,
) -> crate::error::ApiResult<T> {
    let mut unfinished = Unfinished(Some(Box::pin(work)));
    let result = std::future::poll_fn(|cx| match unfinished.0.as_mut() {
        Some(work) => work.as_mut().poll(cx),
        None => std::task::Poll::Ready(Err(ApiError::internal(
            "request worker polled after its end",
        ))),
    })
    .await;
    unfinished.0 = None;
    result
}

/// A request's work not finished yet: dropped (its client left), it is
/// finished by a task of its own.
struct Unfinished<F: std::future::Future + Send + 'static>(Option<std::pin::Pin<Box<F>>>)
where
    F::Output: Send + 'static;

impl<F: std::future::Future + Send + 'static> Drop for Unfinished<F>
where
    F::Output: Send + 'static,
{
    fn drop(&mut self) {
        let Some(rest) = self.0.take() else {
            return;
        };
        // Unwinding from a panic inside the work: what is left of it cannot
        // be resumed.
        if std::thread::panicking() {
            return;
        }
        // Outside a runtime (it is shutting down) nothing can run it, as a
        // task spawned before would have been dropped too.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(rest);
        }
    }
}

/// A multipart body that could not be read: too large (413), too slow
/// (408, as [`body_error`]) or malformed (400).
pub fn multipart_error(error: axum::extract::multipart::MultipartError) -> ApiError {
    if error.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::too_large("The upload is larger than allowed.")
    } else {
        let text = error.body_text();
        match body_error(text.clone()) {
            timeout if timeout.status() == axum::http::StatusCode::REQUEST_TIMEOUT => timeout,
            _ => ApiError::bad_request(format!("Invalid multipart body: {text}")),
        }
    }
}
