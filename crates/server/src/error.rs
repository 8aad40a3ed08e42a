//! API errors: OpenAI's envelope with all four keys and the right status.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use shellgate_sandbox_api::SandboxError;
use shellgate_store::StoreError;
use shellgate_wire::{ErrorBody, ErrorEnvelope};

/// An error a handler returns.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub kind: &'static str,
    pub message: String,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            kind,
            message: message.into(),
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// 400 naming the offending parameter.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        let mut error = Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message);
        error.param = Some(param.into());
        error
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 404: also what a foreign project's id gets, so ids leak nothing.
    pub fn not_found(what: &str, id: &str) -> Self {
        let mut error = Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("No {what} found with id '{id}'."),
        );
        error.code = Some("not_found");
        error
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        let mut error = Self::new(StatusCode::UNAUTHORIZED, "invalid_request_error", message);
        error.code = Some("invalid_api_key");
        error
    }

    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            message,
        )
    }

    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_request_error",
            message,
        )
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "invalid_request_error", message)
    }

    /// 409 `container_lost`: the container's node was declared lost (it
    /// stopped answering). Lost is not gone: a node that comes back with
    /// the container's disk gives it back.
    pub fn container_lost(id: &str) -> Self {
        let mut error = Self::conflict(format!(
            "Container '{id}' is lost: the node it runs on stopped answering. If that node \
             comes back with its disk, the container comes back as it was, files and all; \
             delete it to give it up and create another."
        ));
        error.code = Some("container_lost");
        error
    }

    /// 429 for a quota: which limit, and its value, are in the message.
    pub fn quota(code: &'static str, message: impl Into<String>) -> Self {
        let mut error = Self::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", message);
        error.code = Some(code);
        error
    }

    pub fn rate_limited(retry_after: u64) -> Self {
        let mut error = Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            "Rate limit reached; retry later.",
        );
        error.code = Some("rate_limit_exceeded");
        error.retry_after = Some(retry_after);
        error
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// 503: no upstream model is configured at all, so no model API can
    /// answer (the operator sets `upstream_url` or `[[upstreams]]`).
    pub fn no_upstream() -> Self {
        let mut error = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "No upstream model is configured on this server: its operator sets \
             upstream_url (SHELLGATE_UPSTREAM_URL) or [[upstreams]] in the config.",
        );
        error.code = Some("upstream_not_configured");
        error
    }

    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    pub fn envelope(&self) -> ErrorEnvelope {
        ErrorEnvelope {
            error: ErrorBody {
                message: self.message.clone(),
                kind: self.kind.to_owned(),
                param: self.param.clone(),
                code: self.code.map(str::to_owned),
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(status = self.status.as_u16(), "{}", self.message);
        }
        let mut response = (self.status, axum::Json(self.envelope())).into_response();
        if let Some(seconds) = self.retry_after {
            if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
        }
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
            .with_code("invalid_cursor"),
            StoreError::UnknownKey(id) => ApiError::not_found("API key", &id),
            StoreError::Closed => {
                let mut error = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "server_error",
                    "This server is shutting down; send the request again.",
                );
                error.retry_after = Some(1);
                error
            }
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
                let mut error = ApiError::new(
                    StatusCode::NOT_FOUND,
                    "invalid_request_error",
                    format!("No file at {path}."),
                );
                error.code = Some("not_found");
                error
            }
            SandboxError::Conflict(message) => ApiError::conflict(message),
            SandboxError::ImageNotFound(name) => {
                ApiError::invalid("image", format!("no image named {name}"))
            }
            SandboxError::Deleted(id) => ApiError::conflict(format!(
                "Container '{id}' was deleted while the request ran; its commands were stopped."
            ))
            .with_code("container_deleted"),
            error @ SandboxError::FileTooLarge { .. } => {
                ApiError::invalid("file_id", error.to_string()).with_code("file_too_large")
            }
            SandboxError::Process(error) => process_error(error),
            SandboxError::PermissionDenied(message) => {
                ApiError::new(StatusCode::FORBIDDEN, "permission_error", message)
                    .with_code("permission_denied")
            }
            error @ SandboxError::NotSupported(_) => ApiError::new(
                StatusCode::NOT_IMPLEMENTED,
                "invalid_request_error",
                error.to_string(),
            )
            .with_code("not_supported"),
            SandboxError::QuotaExceeded => {
                ApiError::too_large("The container's disk quota is full.")
                    .with_code("quota_exceeded")
            }
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
        ProcessError::Exited(_) => ApiError::conflict(message).with_code("process_exited"),
        ProcessError::TooMany { .. } => ApiError::quota("too_many_processes", message),
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
        code: if error.status == StatusCode::TOO_MANY_REQUESTS {
            "rate_limit_exceeded"
        } else {
            "server_error"
        },
        message: error.message,
    }
}
