//! API errors: an entry of the wire crate's catalogue ([`ErrorCode`]: code,
//! status, type) with its message, rendered in the envelope of the dialect
//! the route speaks ([`Dialect`]): OpenAI's with all four keys, Anthropic's,
//! E2B's or Google's.

use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use shellgate_sandbox_api::SandboxError;
use shellgate_store::StoreError;
use shellgate_wire::e2b::E2bErrorBody;
use shellgate_wire::messages::{ErrorKind, ErrorResponse};
use shellgate_wire::{ErrorBody, ErrorCode, ErrorEnvelope};

/// An error a handler returns. Its status is its `code`'s
/// ([`ApiError::status`]), but for [`ApiError::upstream_rejected`]'s.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub param: Option<String>,
    pub retry_after: Option<u64>,
    /// An upstream's own status, relayed in place of `code`'s.
    relayed_status: Option<StatusCode>,
}

impl ApiError {
    /// The catalogue's `code`, with its status.
    pub fn of(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            param: None,
            retry_after: None,
            relayed_status: None,
        }
    }

    /// An upstream's refusal of the request it was given (`upstream_rejected`),
    /// answered with the upstream's own `status` (a 4xx), which says more
    /// to the client than the catalogue's one status for the code: the only
    /// error whose status is not its code's.
    pub fn upstream_rejected(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            relayed_status: Some(status),
            ..Self::of(ErrorCode::UpstreamRejected, message)
        }
    }

    /// The HTTP status: the catalogue's for `code`, or an upstream's
    /// relayed one.
    pub fn status(&self) -> StatusCode {
        self.relayed_status.unwrap_or_else(|| {
            StatusCode::from_u16(self.code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
        })
    }

    /// 400 naming the offending parameter.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::of(ErrorCode::BadRequest, message).with_param(param)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::of(ErrorCode::BadRequest, message)
    }

    /// 404: also what a foreign project's id gets, so ids leak nothing.
    pub fn not_found(what: &str, id: &str) -> Self {
        Self::of(
            ErrorCode::NotFound,
            format!("No {what} found with id '{id}'."),
        )
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::of(ErrorCode::InvalidApiKey, message)
    }

    pub fn too_large(message: impl Into<String>) -> Self {
        Self::of(ErrorCode::PayloadTooLarge, message)
    }

    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::of(ErrorCode::UnsupportedMediaType, message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::of(ErrorCode::Conflict, message)
    }

    /// 409 `container_lost`: the container's node was declared lost (it
    /// stopped answering). Lost is not gone: a node that comes back with
    /// the container's disk gives it back.
    pub fn container_lost(id: &str) -> Self {
        Self::of(
            ErrorCode::ContainerLost,
            format!(
                "Container '{id}' is lost: the node it runs on stopped answering. If that node \
                 comes back with its disk, the container comes back as it was, files and all; \
                 delete it to give it up and create another."
            ),
        )
    }

    /// 429 for a quota: which limit, and its value, are in the message.
    pub fn quota(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::of(code, message)
    }

    pub fn rate_limited(retry_after: u64) -> Self {
        Self::of(
            ErrorCode::RateLimitExceeded,
            "Rate limit reached; retry later.",
        )
        .with_retry_after(retry_after)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::of(ErrorCode::Internal, message)
    }

    /// 503: no upstream model is configured at all, so no model API can
    /// answer (the operator sets `upstream_url` or `[[upstreams]]`).
    pub fn no_upstream() -> Self {
        Self::of(
            ErrorCode::UpstreamNotConfigured,
            "No upstream model is configured on this server: its operator sets \
             upstream_url (SHELLGATE_UPSTREAM_URL) or [[upstreams]] in the config.",
        )
    }

    /// The same error as another entry of the catalogue (a more precise
    /// code), with that entry's status.
    pub fn with_code(self, code: ErrorCode) -> Self {
        Self {
            code,
            ..Self::of(code, self.message)
        }
        .keeping(self.param, self.retry_after)
    }

    fn keeping(mut self, param: Option<String>, retry_after: Option<u64>) -> Self {
        self.param = param;
        self.retry_after = retry_after;
        self
    }

    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// OpenAI's `error.type`.
    pub fn kind(&self) -> &'static str {
        self.code.error_type().as_str()
    }

    /// OpenAI's envelope.
    pub fn envelope(&self) -> ErrorEnvelope {
        ErrorEnvelope {
            error: ErrorBody {
                message: self.message.clone(),
                kind: self.kind().to_owned(),
                param: self.param.clone(),
                code: self.code.code().map(str::to_owned),
            },
        }
    }

    /// The message with the parameter at fault named first, for the
    /// envelopes that have no `param` of their own.
    fn message_naming_param(&self) -> String {
        match &self.param {
            Some(param) if !self.message.contains(param.as_str()) => {
                format!("{param}: {}", self.message)
            }
            _ => self.message.clone(),
        }
    }

    /// Anthropic's envelope, with the type the SDK maps to its exception
    /// classes (by status).
    pub fn anthropic(&self) -> ErrorResponse {
        let kind = match self.status().as_u16() {
            400 | 415 | 422 => ErrorKind::InvalidRequestError,
            401 => ErrorKind::AuthenticationError,
            403 => ErrorKind::PermissionError,
            404 => ErrorKind::NotFoundError,
            413 => ErrorKind::RequestTooLarge,
            429 => ErrorKind::RateLimitError,
            529 => ErrorKind::OverloadedError,
            _ => ErrorKind::ApiError,
        };
        ErrorResponse::new(kind, self.message_naming_param())
    }

    /// Google's envelope (the Gemini API's): the status, the message and
    /// the status's `google.rpc.Code` name.
    pub fn google(&self) -> shellgate_wire::gemini::ErrorResponse {
        shellgate_wire::gemini::ErrorResponse::new(
            self.status().as_u16(),
            self.message_naming_param(),
        )
    }

    /// E2B's envelope.
    pub fn e2b(&self) -> E2bErrorBody {
        E2bErrorBody {
            code: self.status().as_u16(),
            message: self.message_naming_param(),
        }
    }

    /// The response in `dialect`'s envelope, with `Retry-After` when set.
    pub fn render(&self, dialect: Dialect) -> Response {
        let mut response = match dialect {
            Dialect::OpenAi => (self.status(), axum::Json(self.envelope())).into_response(),
            Dialect::Anthropic => (self.status(), axum::Json(self.anthropic())).into_response(),
            Dialect::E2b => (self.status(), axum::Json(self.e2b())).into_response(),
            Dialect::Google => (self.status(), axum::Json(self.google())).into_response(),
        };
        if let Some(seconds) = self.retry_after {
            if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
        }
        response
    }
}

/// The error envelope a route's clients parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI's (and OpenRouter's): every route not below.
    OpenAi,
    /// Anthropic's Messages API (`/v1/messages...`).
    Anthropic,
    /// E2B's control plane (`/sandboxes...`, `/v2/sandboxes...`,
    /// `/templates...`) and the in-sandbox API (a request naming its
    /// sandbox in `E2b-Sandbox-Id`).
    E2b,
    /// Google's Gemini API: `/v1beta/...`, and a model's method
    /// (`/v1/models/{model}:generateContent`...).
    Google,
}

/// Whether a request is an Anthropic client's: it sends
/// `anthropic-version` (every Anthropic SDK does) or asks for one of
/// Anthropic's Files or Skills betas. The Files and Skills APIs answer such
/// a client in Anthropic's shapes.
pub fn anthropic_client(headers: &HeaderMap) -> bool {
    headers.contains_key("anthropic-version")
        || headers
            .get_all("anthropic-beta")
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .map(str::trim)
            .any(|beta| beta.starts_with("files-api-") || beta.starts_with("skills-"))
}

impl Dialect {
    /// The dialect of a request to `path` with `headers`.
    pub fn of(path: &str, headers: &HeaderMap) -> Self {
        if headers.contains_key(shellgate_wire::e2b::SANDBOX_ID_HEADER) {
            return Dialect::E2b;
        }
        if anthropic_client(headers) && anthropic_resource(path) {
            return Dialect::Anthropic;
        }
        let mut segments = path.split('/').filter(|s| !s.is_empty());
        let first = (
            segments.next(),
            segments.next(),
            segments.next(),
            segments.next(),
        );
        match first {
            (Some("sandboxes" | "templates" | "snapshots"), ..)
            | (Some("v2" | "v3"), Some("sandboxes" | "templates"), ..) => Dialect::E2b,
            // `/v1` and OpenRouter's `/api/v1`, each also with Anthropic's
            // own `/v1` after it (an SDK given a base URL ending in /v1).
            (Some("v1"), Some("messages"), ..)
            | (Some("v1"), Some("v1"), Some("messages"), _)
            | (Some("api"), Some("v1"), Some("messages"), _)
            | (Some("api"), Some("v1"), Some("v1"), Some("messages")) => Dialect::Anthropic,
            (Some("v1beta"), ..) | (Some("upload"), Some("v1beta"), ..) => Dialect::Google,
            (Some("v1"), Some("models"), Some(name), _)
            | (Some("api"), Some("v1"), Some("models"), Some(name))
                if name.contains(':') =>
            {
                Dialect::Google
            }
            _ => Dialect::OpenAi,
        }
    }
}

/// Whether `path` is under `/v1/files` or `/v1/skills` (or OpenRouter's
/// `/api/v1/...`): the resources with an Anthropic shape beside OpenAI's.
fn anthropic_resource(path: &str) -> bool {
    let rest = path
        .strip_prefix("/api/v1/")
        .or_else(|| path.strip_prefix("/v1/"))
        .unwrap_or_default();
    let resource = rest.split('/').next().unwrap_or_default();
    matches!(resource, "files" | "skills")
}

/// Marks a response as an [`ApiError`]'s, so that [`in_dialect`] can
/// render it again in the route's envelope.
#[derive(Clone)]
struct Rendered(std::sync::Arc<ApiError>);

/// The layer that answers each route's errors in its dialect's envelope
/// ([`Dialect::of`]): handlers, extractors and fallbacks return an
/// [`ApiError`] whatever the route, and this re-renders the ones that
/// reach a non-OpenAI route.
pub async fn in_dialect(request: Request, next: Next) -> Response {
    let dialect = Dialect::of(request.uri().path(), request.headers());
    let response = next.run(request).await;
    if dialect == Dialect::OpenAi {
        return response;
    }
    match response.extensions().get::<Rendered>() {
        Some(Rendered(error)) => error.render(dialect),
        None => response,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status().is_server_error() {
            tracing::error!(status = self.status().as_u16(), "{}", self.message);
        }
        let mut response = self.render(Dialect::OpenAi);
        response
            .extensions_mut()
            .insert(Rendered(std::sync::Arc::new(self)));
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::UnknownCursor(after) => ApiError::invalid(
                "after",
                format!(
                    "No object with id '{after}' in this listing: 'after' must be an id from \
                     an earlier page of the same listing."
                ),
            )
            .with_code(ErrorCode::InvalidCursor),
            StoreError::UnknownKey(id) => ApiError::not_found("API key", &id),
            StoreError::Closed => ApiError::of(
                ErrorCode::ShuttingDown,
                "This server is shutting down; send the request again.",
            )
            .with_retry_after(1),
            other => ApiError::internal(format!("metadata store: {other}")),
        }
    }
}

impl From<SandboxError> for ApiError {
    fn from(error: SandboxError) -> Self {
        match error {
            SandboxError::InvalidRequest { param, message } => ApiError::invalid(param, message),
            SandboxError::NotFound(id) => ApiError::not_found("container", &id),
            SandboxError::AlreadyExists(id) => {
                ApiError::conflict(format!("container {id} already exists"))
            }
            SandboxError::FileNotFound(path) => {
                ApiError::of(ErrorCode::NotFound, format!("No file at {path}."))
            }
            SandboxError::Conflict(message) => ApiError::conflict(message),
            SandboxError::ImageNotFound(name) => {
                ApiError::invalid("image", format!("no image named {name}"))
            }
            SandboxError::Deleted(id) => ApiError::conflict(format!(
                "Container '{id}' was deleted while the request ran; its commands were stopped."
            ))
            .with_code(ErrorCode::ContainerDeleted),
            error @ SandboxError::FileTooLarge { .. } => {
                ApiError::invalid("file_id", error.to_string()).with_code(ErrorCode::FileTooLarge)
            }
            SandboxError::Process(error) => process_error(error),
            SandboxError::PermissionDenied(message) => {
                ApiError::of(ErrorCode::PermissionDenied, message)
            }
            error @ SandboxError::NotSupported(_) => {
                ApiError::of(ErrorCode::NotSupported, error.to_string())
            }
            SandboxError::NoRoom(message) => ApiError::of(
                ErrorCode::NoRoom,
                format!("No room for another running container: {message}."),
            )
            .with_retry_after(5),
            SandboxError::QuotaExceeded => ApiError::of(
                ErrorCode::QuotaExceeded,
                "The container's disk quota is full.",
            ),
            other => ApiError::internal(format!("sandbox: {other}")),
        }
    }
}

/// A process's errors: 404 for one this container does not
/// have, 409 `process_exited` for what needs it alive, 429
/// `too_many_processes` past the container's live limit.
fn process_error(error: shellgate_sandbox_api::process::ProcessError) -> ApiError {
    use shellgate_sandbox_api::process::ProcessError;
    let message = error.to_string();
    match error {
        ProcessError::NotFound(id) => ApiError::not_found("process", &id),
        ProcessError::Exited(_) => ApiError::conflict(message).with_code(ErrorCode::ProcessExited),
        ProcessError::TooMany { .. } => ApiError::quota(ErrorCode::TooManyProcesses, message),
        ProcessError::AlreadyExists(_) => ApiError::conflict(message),
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// Errors starting the server.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("{0}")]
    Setup(String),
    /// The listening address could not be taken (checked before anything
    /// else starts).
    #[error("cannot listen on {addr}: {reason}")]
    Listen {
        addr: std::net::SocketAddr,
        reason: String,
    },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Why an address cannot be listened on, said so that the fix is plain.
pub(crate) fn listen_reason(error: &std::io::Error) -> String {
    match error.kind() {
        std::io::ErrorKind::AddrInUse => "address already in use (another server is listening \
             there: stop it, or choose another address with --listen or `listen`)"
            .to_owned(),
        std::io::ErrorKind::AddrNotAvailable => {
            "address not available (it is not an address of this host)".to_owned()
        }
        std::io::ErrorKind::PermissionDenied => "permission denied (ports below 1024 need root \
             or CAP_NET_BIND_SERVICE)"
            .to_owned(),
        _ => error.to_string(),
    }
}

/// An API error met while the model loop's hosted tools ran (a shell
/// call, a code interpreter call): what the response fails with.
pub fn host_error(error: ApiError) -> shellgate_model::run::HostError {
    shellgate_model::run::HostError {
        code: if error.status() == StatusCode::TOO_MANY_REQUESTS {
            "rate_limit_exceeded"
        } else {
            "server_error"
        },
        message: error.message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body(response: Response) -> serde_json::Value {
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("the body");
        serde_json::from_slice(&bytes).expect("a JSON body")
    }

    #[test]
    fn the_route_chooses_the_dialect() {
        let none = HeaderMap::new();
        for (path, dialect) in [
            ("/v1/containers/cntr_a", Dialect::OpenAi),
            ("/api/v1/responses", Dialect::OpenAi),
            ("/v1/messages", Dialect::Anthropic),
            ("/v1/messages/count_tokens", Dialect::Anthropic),
            ("/v1/v1/messages", Dialect::Anthropic),
            ("/api/v1/messages", Dialect::Anthropic),
            ("/api/v1/v1/messages/count_tokens", Dialect::Anthropic),
            ("/sandboxes", Dialect::E2b),
            ("/sandboxes/cntr_a/connect", Dialect::E2b),
            ("/v2/sandboxes", Dialect::E2b),
            ("/templates/aliases/base", Dialect::E2b),
            ("/v2/templates", Dialect::E2b),
            ("/v3/templates", Dialect::E2b),
            ("/v1/sandboxes", Dialect::OpenAi),
            ("/v1beta/models", Dialect::Google),
            ("/v1beta/models/m:generateContent", Dialect::Google),
            ("/upload/v1beta/files", Dialect::Google),
            ("/v1beta/files/file-1", Dialect::Google),
            ("/v1/models/m:streamGenerateContent", Dialect::Google),
            ("/api/v1/models/m:countTokens", Dialect::Google),
            ("/v1/models/gpt-4o", Dialect::OpenAi),
            ("/healthz", Dialect::OpenAi),
            ("/", Dialect::OpenAi),
        ] {
            assert_eq!(Dialect::of(path, &none), dialect, "{path}");
        }
        let mut in_sandbox = HeaderMap::new();
        in_sandbox.insert(
            shellgate_wire::e2b::SANDBOX_ID_HEADER,
            HeaderValue::from_static("cntr_a"),
        );
        assert_eq!(
            Dialect::of("/process.Process/Start", &in_sandbox),
            Dialect::E2b
        );
    }

    #[tokio::test]
    async fn one_error_in_each_envelope() {
        let error = ApiError::invalid("image", "unknown name x").with_retry_after(3);
        let openai = error.render(Dialect::OpenAi);
        assert_eq!(openai.status(), StatusCode::BAD_REQUEST);
        assert_eq!(openai.headers()[header::RETRY_AFTER], "3");
        assert_eq!(
            body(openai).await,
            serde_json::json!({"error": {"message": "unknown name x",
                "type": "invalid_request_error", "param": "image", "code": null}})
        );
        assert_eq!(
            body(error.render(Dialect::Anthropic)).await,
            serde_json::json!({"type": "error", "error": {"type": "invalid_request_error",
                "message": "image: unknown name x"}})
        );
        let e2b = error.render(Dialect::E2b);
        assert_eq!(e2b.headers()[header::RETRY_AFTER], "3");
        assert_eq!(
            body(e2b).await,
            serde_json::json!({"code": 400, "message": "image: unknown name x"})
        );
        assert_eq!(
            body(error.render(Dialect::Google)).await,
            serde_json::json!({"error": {"code": 400, "message": "image: unknown name x",
                "status": "INVALID_ARGUMENT"}})
        );
        let missing = ApiError::not_found("container", "cntr_a");
        assert_eq!(
            body(missing.render(Dialect::OpenAi)).await["error"]["code"],
            "not_found"
        );
        assert_eq!(
            body(missing.render(Dialect::E2b)).await,
            serde_json::json!({"code": 404, "message": "No container found with id 'cntr_a'."})
        );
    }

    #[test]
    fn a_more_precise_code_keeps_the_parameter_and_takes_its_status() {
        let error = ApiError::invalid("after", "unknown").with_code(ErrorCode::InvalidCursor);
        assert_eq!(error.param.as_deref(), Some("after"));
        assert_eq!(error.status(), StatusCode::BAD_REQUEST);
        let error = ApiError::conflict("gone").with_code(ErrorCode::ContainerDeleted);
        assert_eq!(
            (error.status(), error.kind()),
            (StatusCode::CONFLICT, "invalid_request_error")
        );
    }

    #[test]
    fn only_an_upstreams_refusal_relays_a_status_of_its_own() {
        let relayed =
            ApiError::upstream_rejected(StatusCode::UNPROCESSABLE_ENTITY, "model says no");
        assert_eq!(relayed.code, ErrorCode::UpstreamRejected);
        assert_eq!(relayed.status(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(
            ApiError::of(ErrorCode::UpstreamRejected, "no")
                .status()
                .as_u16(),
            ErrorCode::UpstreamRejected.status()
        );
        // Another code is that code's status, whatever was relayed.
        let recoded = relayed.with_code(ErrorCode::Internal);
        assert_eq!(recoded.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
