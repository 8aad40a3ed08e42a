//! Every error the API answers, as one typed catalogue: each entry is a
//! `code` (the machine-readable name a client matches on; `None` for the
//! generic errors that have none), the HTTP status it is answered with and
//! its type. The server renders an entry into each dialect's envelope
//! (OpenAI's `{"error": {message, type, param, code}}`, Anthropic's
//! `{"type": "error", "error": {type, message}}`, E2B's `{code, message}`),
//! so a code is declared once, here, whatever the client.
//!
//! Adding an error: an entry in [`catalogue!`] below (its doc says when it
//! is answered); the catalogue's tests check that no two entries share a
//! code and status.

/// An error's type, OpenAI's `error.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorType {
    /// The request is wrong, or names what does not exist.
    InvalidRequest,
    /// The caller may not do this.
    Permission,
    /// A limit or quota was reached; retry later or ask for less.
    RateLimit,
    /// The server (or something it depends on) failed.
    Server,
}

impl ErrorType {
    /// The wire name: `invalid_request_error`, `permission_error`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorType::InvalidRequest => "invalid_request_error",
            ErrorType::Permission => "permission_error",
            ErrorType::RateLimit => "rate_limit_error",
            ErrorType::Server => "server_error",
        }
    }
}

macro_rules! catalogue {
    ($(
        $(#[doc = $doc:literal])*
        $variant:ident => ($code:expr, $status:literal, $kind:ident);
    )*) => {
        /// One error of the catalogue (see the module's doc).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($(#[doc = $doc])* $variant,)*
        }

        impl ErrorCode {
            /// Every entry, in declaration order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// The machine-readable code clients match on (`None`: a
            /// generic error of its status).
            pub fn code(self) -> Option<&'static str> {
                match self {
                    $(ErrorCode::$variant => $code,)*
                }
            }

            /// The HTTP status it is answered with.
            pub fn status(self) -> u16 {
                match self {
                    $(ErrorCode::$variant => $status,)*
                }
            }

            /// Its type.
            pub fn error_type(self) -> ErrorType {
                match self {
                    $(ErrorCode::$variant => ErrorType::$kind,)*
                }
            }
        }
    };
}

catalogue! {
    // 400
    /// A malformed request (a parameter is named when one is at fault).
    BadRequest => (None, 400, InvalidRequest);
    /// An upstream model API refused the request it was sent (its 4xx
    /// status is relayed).
    UpstreamRejected => (None, 400, InvalidRequest);
    /// A listing's `after` is no id of that listing.
    InvalidCursor => (Some("invalid_cursor"), 400, InvalidRequest);
    /// A Responses request names a parameter that does not exist.
    UnknownParameter => (Some("unknown_parameter"), 400, InvalidRequest);
    /// A file too large to copy into a container.
    FileTooLarge => (Some("file_too_large"), 400, InvalidRequest);
    /// A request path spelled ambiguously (encoded separators, dot
    /// segments, two hosts): refused rather than read one way.
    InvalidRequestPath => (Some("invalid_request_path"), 400, InvalidRequest);
    /// A request carrying more than one console session cookie.
    ConsoleCookieConflict => (Some("console_cookie_conflict"), 400, InvalidRequest);
    /// A console sign-in over plain HTTP from a non-loopback address.
    ConsoleNeedsHttps => (Some("console_needs_https"), 400, InvalidRequest);
    // 401
    /// A missing or unknown API key.
    InvalidApiKey => (Some("invalid_api_key"), 401, InvalidRequest);
    /// A cluster node asked without the cluster's secret.
    ClusterSecretRequired => (Some("cluster_secret_required"), 401, InvalidRequest);
    /// A console request without a session.
    ConsoleSessionRequired => (Some("console_session_required"), 401, InvalidRequest);
    // 403
    /// What only an admin key may see.
    AdminOnly => (None, 403, InvalidRequest);
    /// The caller's key may not do this.
    Forbidden => (Some("forbidden"), 403, InvalidRequest);
    /// A state-changing console request without the session's CSRF token.
    CsrfFailed => (Some("csrf_failed"), 403, InvalidRequest);
    /// Input the prompt-injection guardrail blocks.
    PromptInjectionDetected => (Some("prompt_injection_detected"), 403, InvalidRequest);
    /// What the sandbox user may not do in the container.
    PermissionDenied => (Some("permission_denied"), 403, Permission);
    // 404
    /// An unknown id (also what another project's id gets, so ids leak
    /// nothing).
    NotFound => (Some("not_found"), 404, InvalidRequest);
    /// No file or directory at a container path.
    FileNotFound => (Some("file_not_found"), 404, InvalidRequest);
    /// A model no upstream serves.
    ModelNotFound => (Some("model_not_found"), 404, InvalidRequest);
    /// A URL no route serves.
    UnknownUrl => (Some("unknown_url"), 404, InvalidRequest);
    // 405
    /// A method the URL's route does not serve.
    MethodNotAllowed => (None, 405, InvalidRequest);
    // 408
    /// A request body slower than the server waits for.
    RequestTimeout => (Some("request_timeout"), 408, InvalidRequest);
    // 409
    /// The request conflicts with the object's state.
    Conflict => (None, 409, InvalidRequest);
    /// The container's node stopped answering (it comes back if the node
    /// does, with its disk).
    ContainerLost => (Some("container_lost"), 409, InvalidRequest);
    /// The container was deleted while the request ran.
    ContainerDeleted => (Some("container_deleted"), 409, InvalidRequest);
    /// What needs a live process, asked of one that exited.
    ProcessExited => (Some("process_exited"), 409, InvalidRequest);
    /// An archive export of a container whose files are masked.
    ArchiveUnmaskable => (Some("archive_unmaskable"), 409, InvalidRequest);
    /// A volume of that name exists in the project.
    VolumeNameTaken => (Some("volume_name_taken"), 409, InvalidRequest);
    /// Deleting a volume that containers mount (they are named).
    VolumeInUse => (Some("volume_in_use"), 409, InvalidRequest);
    /// In a cluster: a container mounting volumes of two nodes, or a
    /// volume asked of a node that does not hold it.
    VolumeOnAnotherNode => (Some("volume_on_another_node"), 409, InvalidRequest);
    // 413
    /// A request or upload larger than the server takes.
    PayloadTooLarge => (None, 413, InvalidRequest);
    /// The container's disk quota is full.
    QuotaExceeded => (Some("quota_exceeded"), 413, InvalidRequest);
    // 415
    /// A body of a media type the route does not read.
    UnsupportedMediaType => (None, 415, InvalidRequest);
    // 429
    /// The project's request rate (or an upstream's) is past its limit;
    /// `Retry-After` says when to retry.
    RateLimitExceeded => (Some("rate_limit_exceeded"), 429, RateLimit);
    /// Too many wrong API keys from one address or for keys alike.
    TooManyFailedKeys => (Some("too_many_failed_keys"), 429, RateLimit);
    /// The project's exec requests running at once.
    TooManyConcurrentExecs => (Some("too_many_concurrent_execs"), 429, RateLimit);
    /// The project's running containers.
    TooManyRunningContainers => (Some("too_many_running_containers"), 429, RateLimit);
    /// The memory limits of the project's running containers.
    ProjectMemoryExceeded => (Some("project_memory_exceeded"), 429, RateLimit);
    /// A container's live processes.
    TooManyProcesses => (Some("too_many_processes"), 429, RateLimit);
    /// A process's open output streams.
    TooManyProcessStreams => (Some("too_many_process_streams"), 429, RateLimit);
    /// The project's open process output streams.
    TooManyOutputStreams => (Some("too_many_output_streams"), 429, RateLimit);
    /// The project's open console terminals.
    TooManyConsoleTerminals => (Some("too_many_console_terminals"), 429, RateLimit);
    /// The project's open console live streams.
    TooManyConsoleStreams => (Some("too_many_console_streams"), 429, RateLimit);
    /// A container port's proxied connections.
    TooManyPortConnections => (Some("too_many_port_connections"), 429, RateLimit);
    /// The project's volumes.
    TooManyVolumes => (Some("too_many_volumes"), 429, RateLimit);
    /// The bytes the project's volumes hold.
    VolumeBytesExceeded => (Some("volume_bytes_exceeded"), 429, RateLimit);
    /// The project's snapshots.
    TooManySnapshots => (Some("too_many_snapshots"), 429, RateLimit);
    /// The bytes the project's snapshots hold.
    SnapshotBytesExceeded => (Some("snapshot_bytes_exceeded"), 429, RateLimit);
    // 500
    /// The server failed (its log says why).
    Internal => (None, 500, Server);
    // 501
    /// What this engine or dialect does not do.
    NotSupported => (Some("not_supported"), 501, InvalidRequest);
    // 502
    /// An upstream model API failed.
    UpstreamFailed => (None, 502, Server);
    /// A container port's service answered wrongly.
    BadGateway => (Some("bad_gateway"), 502, Server);
    /// Nothing listens on the container port asked for.
    PortNotListening => (Some("port_not_listening"), 502, Server);
    /// The node serving the request did not answer (a replica's).
    NodeUnreachable => (Some("node_unreachable"), 502, Server);
    // 503
    /// The node making a container was declared lost meanwhile: nothing
    /// was made.
    NodeStoppedAnswering => (Some("node_unreachable"), 503, Server);
    /// No node of the cluster has room, or answers.
    NoNodeAvailable => (Some("no_node_available"), 503, Server);
    /// This server cannot run another container now (its descriptors).
    NoRoom => (Some("no_room"), 503, Server);
    /// No upstream model is configured: no model API can answer.
    UpstreamNotConfigured => (Some("upstream_not_configured"), 503, Server);
    /// The server is shutting down; send the request again.
    ShuttingDown => (None, 503, Server);
    // 504
    /// An upstream model API did not answer in time.
    UpstreamTimeout => (None, 504, Server);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_two_entries_share_a_code_and_status() {
        let mut seen = std::collections::HashSet::new();
        for entry in ErrorCode::ALL {
            if let Some(code) = entry.code() {
                assert!(
                    seen.insert((code, entry.status())),
                    "{entry:?} repeats {code}"
                );
            }
        }
    }

    #[test]
    fn statuses_are_errors_and_types_fit_them() {
        for entry in ErrorCode::ALL {
            let status = entry.status();
            assert!((400..600).contains(&status), "{entry:?}");
            if entry.error_type() == ErrorType::RateLimit {
                assert_eq!(status, 429, "{entry:?}");
            }
            if status >= 500 && *entry != ErrorCode::NotSupported {
                assert_eq!(entry.error_type(), ErrorType::Server, "{entry:?}");
            }
        }
    }

    #[test]
    fn codes_are_snake_case() {
        for code in ErrorCode::ALL.iter().filter_map(|e| e.code()) {
            assert!(
                code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{code}"
            );
        }
    }
}
