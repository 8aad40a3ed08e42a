//! shellgate's HTTP server: OpenAI-compatible Containers, Container Files
//! and Files APIs, a direct exec endpoint, usage, health, metrics and an
//! OpenAPI document, on the sandbox engine and the SQLite store.
//!
//! Every request is authenticated by a Bearer key that belongs to a project;
//! every row and container belongs to one project, and a foreign id is a 404.

mod admission;
mod billing;
pub mod clock;
pub mod config;
mod containers;
pub mod egress;
pub mod error;
mod files;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
mod guardrails;
#[cfg(test)]
mod handler_tests;
mod hosted;
mod http;
mod image_build;
mod lifecycle;
mod listener;
mod messages;
mod metrics;
mod openapi;
pub(crate) mod ops;
mod responses;
mod skills;
mod spool;
#[cfg(test)]
mod testing;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use shellgate_sandbox::{EngineConfig, LocalEngine, SandboxBackend};
use shellgate_store::{Store, StoreError};

use admission::Admission;
pub use config::Config;
use error::{ApiError, ApiResult};
use http::RateLimiter;
use metrics::Metrics;

/// Everything a handler needs.
pub struct AppState {
    pub config: Config,
    /// The sandbox backend, only through its trait: another backend
    /// (microVMs, Kubernetes) plugs in here without touching the API layer.
    pub engine: Arc<dyn SandboxBackend>,
    store: Arc<Store>,
    /// Where Files API blobs live.
    pub files_dir: PathBuf,
    /// Where skill versions' bundles live (normalized zips).
    pub skills_dir: PathBuf,
    metrics: Metrics,
    limiter: RateLimiter,
    keys: http::KeyCache,
    admission: Admission,
    billing: billing::Billing,
    /// Which project owns a container, for containers already looked up
    /// (ownership never changes).
    owners: Mutex<HashMap<String, String>>,
    /// Upstream models by name.
    upstreams: shellgate_model::upstream::Router,
    /// Prompt-injection rules, per project.
    guardrails: guardrails::Guardrails,
    /// Background responses still running, to cancel them.
    running: responses::Running,
    /// One file sync at a time per container (see `containers::sync_files`).
    sync_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// The egress proxy's settings (`None`: egress is off).
    egress: Option<Arc<shellgate_egress::proxy::Settings>>,
    egress_counts: egress::EgressCounts,
    /// The default image's background build, if one was started.
    pub default_image_build: image_build::SharedBuildStatus,
    /// Whether the log already said that the default image is missing.
    default_image_missing_said: std::sync::atomic::AtomicBool,
    /// The time the lifecycle sweep judges idleness and expiry by (the
    /// system's; a manual one in tests).
    pub clock: clock::Clock,
}

/// Seconds since the Unix epoch.
pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// A random id: `prefix` and 32 hex digits from the kernel's CSPRNG.
pub use shellgate_wire::new_id;

/// A new API key (printed once by `shellgate keys create`; stored hashed).
pub fn new_api_key() -> String {
    new_id("sg-")
}

impl AppState {
    /// Runs store work on a blocking thread: SQLite never runs on (and so
    /// never stalls) the async workers that serve every other request.
    pub(crate) async fn db<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
    ) -> ApiResult<T> {
        let store = Arc::clone(&self.store);
        tokio::task::spawn_blocking(move || work(&store))
            .await
            .map_err(|e| ApiError::internal(format!("store worker failed: {e}")))?
            .map_err(ApiError::from)
    }

    fn owners(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.owners.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The project a container was seen to belong to, if it was.
    pub(crate) fn owner_of(&self, container: &str) -> Option<String> {
        self.owners().get(container).cloned()
    }

    pub(crate) fn remember_owner(&self, container: &str, project: &str) {
        let mut owners = self.owners();
        if owners.len() >= 100_000 {
            owners.clear();
        }
        owners.insert(container.to_owned(), project.to_owned());
    }

    pub(crate) fn forget_owner(&self, container: &str) {
        self.owners().remove(container);
    }

    /// The lock that serialises file syncs of one container.
    fn sync_lock(&self, container: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.sync_locks.lock().unwrap_or_else(|p| p.into_inner());
        // Locks of containers nobody syncs are dropped as the map grows.
        if locks.len() > 1024 {
            locks.retain(|_, lock| Arc::strong_count(lock) > 1);
        }
        Arc::clone(locks.entry(container.to_owned()).or_default())
    }
}

/// Errors starting the server.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("{0}")]
    Setup(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Opens the store and the engine, reconciles them after a crash and seeds
/// the configured keys.
pub async fn open(config: Config, helper_binary: PathBuf) -> Result<Arc<AppState>, ServeError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    config
        .validate()
        .map_err(|e| ServeError::Setup(e.to_string()))?;
    std::fs::create_dir_all(&config.data_dir)?;
    // Sandboxes (unprivileged host uids) must traverse the data directory to
    // reach their engine's mounts; nothing else in it is theirs: the
    // database and uploaded files are private to the server.
    let mode = std::fs::metadata(&config.data_dir)?.permissions().mode() & 0o7777;
    std::fs::set_permissions(
        &config.data_dir,
        std::fs::Permissions::from_mode(mode | 0o001),
    )?;
    let files_dir = config.data_dir.join("files");
    std::fs::create_dir_all(&files_dir)?;
    std::fs::set_permissions(&files_dir, std::fs::Permissions::from_mode(0o700))?;
    let skills_dir = config.data_dir.join("skills");
    std::fs::create_dir_all(&skills_dir)?;
    std::fs::set_permissions(&skills_dir, std::fs::Permissions::from_mode(0o700))?;
    // Containers' skills, unpacked before the engine adopts them (the
    // sandboxes' host users must traverse it); leftovers of a crash go.
    let mounts = config.data_dir.join("skill-mounts");
    let _ = std::fs::remove_dir_all(&mounts);
    std::fs::create_dir_all(&mounts)?;
    std::fs::set_permissions(&mounts, std::fs::Permissions::from_mode(0o711))?;
    let database = config.data_dir.join("shellgate.db");
    let store = Store::open(&database).map_err(|e| ServeError::Setup(e.to_string()))?;
    let mut engine_config = EngineConfig::new(config.data_dir.join("sandbox"));
    engine_config.helper_binary = helper_binary;
    engine_config.warm_containers = config.warm_containers;
    engine_config.expose_host_usr_local = config.expose_host_usr_local;
    engine_config.images_dir = config.images_dir();
    engine_config.memory_ceiling = config.sandbox_memory_ceiling.bytes();
    let (egress, egress_log) = match egress::settings(&config)? {
        Some((settings, log)) => (Some(settings), Some(log)),
        None => (None, None),
    };
    engine_config.egress = egress.clone();
    let (engine, warnings) = LocalEngine::open(engine_config)
        .await
        .map_err(|e| ServeError::Setup(format!("sandbox engine: {e}")))?;
    let mut warnings = warnings;
    if shellgate_sandbox::sys::geteuid() == 0
        && !shellgate_sandbox::sys::has_capability(shellgate_sandbox::sys::CAP_SYS_RESOURCE)
    {
        // Lowering init's OOM score (the helper's -1000) needs it.
        warnings.push(
            "no CAP_SYS_RESOURCE: containers' init processes cannot be shielded from the OOM \
             killer, so a container whose memory fills with files (tmpfs, shared memory) may \
             lose its init, and its processes with it"
                .to_owned(),
        );
    }
    for warning in warnings {
        tracing::warn!("{warning}");
    }
    let engine = Arc::new(engine);
    let default_image_build = if config.build_default_image {
        image_build::start_if_missing(Arc::clone(&engine), &config.default_image)
    } else {
        Default::default()
    };
    let engine: Arc<dyn SandboxBackend> = engine;
    for (key, project) in config.seeded_keys() {
        store
            .add_key(&key, &project, now())
            .map_err(|e| ServeError::Setup(e.to_string()))?;
    }
    if store
        .key_count()
        .map_err(|e| ServeError::Setup(e.to_string()))?
        == 0
    {
        // A first start on the embedded defaults: make one key so the API is
        // usable at once, and say where it is (shown once, stored hashed).
        let key = new_api_key();
        store
            .add_key(&key, "default", now())
            .map_err(|e| ServeError::Setup(e.to_string()))?;
        let file = config.data_dir.join("initial-api-key");
        // Private from its first byte: created 0600, never chmod-ed after.
        let _ = std::fs::remove_file(&file);
        let mut handle = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&file)?;
        std::io::Write::write_all(&mut handle, format!("{key}\n").as_bytes())?;
        eprintln!(
            "shellgate: created API key {key} for project \"default\" (also in {})",
            file.display()
        );
    }
    let state = Arc::new(AppState {
        limiter: RateLimiter::new(config.rate_limit_per_minute),
        keys: http::KeyCache::default(),
        admission: Admission::new(&config),
        billing: Default::default(),
        owners: Mutex::new(HashMap::new()),
        upstreams: upstream_router(&config)?,
        guardrails: guardrails::Guardrails::from_config(&config)
            .map_err(|e| ServeError::Setup(e.to_string()))?,
        running: Default::default(),
        config,
        engine,
        store: Arc::new(store),
        files_dir,
        skills_dir,
        metrics: Metrics::default(),
        sync_locks: Mutex::new(HashMap::new()),
        egress,
        egress_counts: Default::default(),
        default_image_missing_said: Default::default(),
        default_image_build,
        clock: clock::Clock::system(),
    });
    if let Some(log) = egress_log {
        egress::spawn_log_writer(Arc::clone(&state), log);
    }
    lifecycle::recover(&state)
        .await
        .map_err(|e| ServeError::Setup(format!("recovery: {}", e.message)))?;
    responses::settle_interrupted(&state)
        .await
        .map_err(|e| ServeError::Setup(format!("recovery: {}", e.message)))?;
    Ok(state)
}

/// The upstream models of the configuration.
fn upstream_router(config: &Config) -> Result<shellgate_model::upstream::Router, ServeError> {
    use shellgate_model::upstream::{connect, Protocol, Router, TurnLimits, UpstreamConfig};
    let limits = TurnLimits {
        max_answer_bytes: usize::try_from(config.upstream_max_answer_bytes).unwrap_or(usize::MAX),
        max_tool_call_bytes: usize::try_from(config.upstream_max_tool_call_bytes)
            .unwrap_or(usize::MAX),
        turn_timeout: std::time::Duration::from_secs(config.upstream_turn_timeout_secs),
    };
    let make = |url: &str, key: &config::Secret, protocol: Protocol| {
        connect(UpstreamConfig {
            url: url.to_owned(),
            api_key: key.get().map(str::to_owned),
            protocol,
            timeout: std::time::Duration::from_secs(config.upstream_timeout_secs),
            attempts: config.upstream_attempts,
            limits,
        })
        .map_err(|e| ServeError::Setup(e.to_string()))
    };
    let default = if config.upstream_url.is_empty() {
        None
    } else {
        Some(make(
            &config.upstream_url,
            &config.upstream_api_key,
            config.upstream_protocol,
        )?)
    };
    let mut router = Router::new(default);
    for route in &config.upstreams {
        router.route(
            &route.prefix,
            make(&route.url, &route.api_key, route.protocol)?,
        );
    }
    Ok(router)
}

/// The HTTP routes.
pub fn router(state: Arc<AppState>) -> Router {
    served_routes(state).router
}

/// The router and the path of every route it serves, recorded as the
/// routes are added (the OpenAPI test checks the document against them).
pub(crate) struct ServedRoutes {
    pub(crate) router: Router,
    // Read by the OpenAPI test only.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) paths: Vec<String>,
}

/// Builds a router while recording each route's full path. Every route is
/// added through it (never by `Router::route` directly), so that
/// [`ServedRoutes::paths`] is the router's whole table.
struct RouteTable {
    router: Router<Arc<AppState>>,
    paths: Vec<String>,
}

impl RouteTable {
    fn new() -> Self {
        Self {
            router: Router::new(),
            paths: Vec::new(),
        }
    }

    fn route(mut self, path: &str, methods: axum::routing::MethodRouter<Arc<AppState>>) -> Self {
        self.paths.push(path.to_owned());
        self.router = self.router.route(path, methods);
        self
    }

    fn nest(mut self, prefix: &str, inner: RouteTable) -> Self {
        self.paths
            .extend(inner.paths.iter().map(|path| format!("{prefix}{path}")));
        self.router = self.router.nest(prefix, inner.router);
        self
    }
}

fn served_routes(state: Arc<AppState>) -> ServedRoutes {
    let uploads = DefaultBodyLimit::max(state.config.max_upload_bytes.saturating_add(64 * 1024));
    let api = RouteTable::new()
        .route(
            "/containers",
            post(containers::create).get(containers::list),
        )
        .route(
            "/containers/{container_id}",
            get(containers::retrieve).delete(containers::delete),
        )
        .route("/containers/{container_id}/exec", post(containers::exec))
        .route(
            "/containers/{container_id}/commands",
            get(containers::commands),
        )
        .route("/containers/{container_id}/egress", get(egress::list))
        .route("/containers/{container_id}/secrets", post(egress::supply))
        .route("/images", get(containers::images))
        .route(
            "/skills",
            post(skills::create).get(skills::list).layer(uploads),
        )
        .route(
            "/skills/{skill_id}",
            get(skills::retrieve)
                .post(skills::update)
                .delete(skills::delete),
        )
        .route("/skills/{skill_id}/content", get(skills::content))
        .route(
            "/skills/{skill_id}/versions",
            post(skills::create_version)
                .get(skills::list_versions)
                .layer(uploads),
        )
        .route(
            "/skills/{skill_id}/versions/{version}",
            get(skills::retrieve_version).delete(skills::delete_version),
        )
        .route(
            "/skills/{skill_id}/versions/{version}/content",
            get(skills::version_content),
        )
        .route(
            "/containers/{container_id}/files",
            post(containers::upload_file)
                .get(containers::list_files)
                .layer(uploads),
        )
        .route(
            "/containers/{container_id}/files/{file_id}",
            get(containers::retrieve_file).delete(containers::delete_file),
        )
        .route(
            "/containers/{container_id}/files/{file_id}/promote",
            post(containers::promote_file),
        )
        .route(
            "/containers/{container_id}/files/{file_id}/content",
            get(containers::file_content),
        )
        .route(
            "/files",
            post(files::upload).get(files::list).layer(uploads),
        )
        .route(
            "/files/{file_id}",
            get(files::retrieve).delete(files::delete),
        )
        .route("/files/{file_id}/content", get(files::content))
        .route("/usage", get(ops::usage))
        .route("/responses", post(responses::create))
        // Anthropic's Messages API; the second path serves Anthropic SDKs
        // given a base URL that ends in /v1, as OpenAI SDKs are.
        .route("/messages", post(messages::create))
        .route("/v1/messages", post(messages::create))
        .route(
            "/responses/{response_id}",
            get(responses::retrieve).delete(responses::delete),
        )
        .route("/responses/{response_id}/cancel", post(responses::cancel))
        .route(
            "/responses/{response_id}/input_items",
            get(responses::input_items),
        );
    let table = RouteTable::new()
        .nest("/v1", api)
        .route("/healthz", get(ops::healthz))
        .route("/metrics", get(ops::metrics))
        .route("/openapi.json", get(openapi::serve));
    ServedRoutes {
        router: table
            .router
            .fallback(ops::not_found)
            .method_not_allowed_fallback(ops::method_not_allowed)
            .layer(DefaultBodyLimit::max(state.config.max_request_bytes))
            .with_state(state),
        paths: table.paths,
    }
}

/// Serves until SIGINT or SIGTERM, then stops every container (their files
/// stay) and returns.
pub async fn serve(state: Arc<AppState>) -> Result<(), ServeError> {
    let listener = tokio::net::TcpListener::bind(state.config.listen).await?;
    tracing::info!(listen = %listener.local_addr()?, "shellgate is serving");
    let sweeper = tokio::spawn(lifecycle::sweep_forever(Arc::clone(&state)));
    listener::serve(
        listener,
        router(Arc::clone(&state)),
        listener::Limits::from_config(&state.config),
        shutdown_signal(),
    )
    .await?;
    sweeper.abort();
    state.flush_billing().await;
    tracing::info!("shutting down: stopping containers");
    lifecycle::suspend_all(&state).await;
    state.engine.shutdown().await;
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut terminate) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = terminate.recv() => {},
    }
}

/// Maps a missing container in the engine to a 404 for the API's id.
fn engine_error(id: &str, error: shellgate_sandbox::SandboxError) -> ApiError {
    match error {
        shellgate_sandbox::SandboxError::NotFound(_) => ApiError::not_found("container", id),
        other => other.into(),
    }
}

/// Comment lines sent on quiet event streams: they keep proxies from timing
/// the stream out, and a write is how a client that left is noticed (a
/// foreground response is then cancelled, its commands killed).
pub(crate) fn sse_keep_alive() -> axum::response::sse::KeepAlive {
    axum::response::sse::KeepAlive::new().interval(std::time::Duration::from_secs(1))
}

/// Runs a request's work to completion even if its client hangs up: the
/// handler's future is dropped on a disconnect, a spawned task is not. So a
/// command is still killed at its timeout and billed, and a create either
/// finishes or cleans up after itself; nothing is left half-made.
pub(crate) async fn to_completion<T: Send + 'static>(
    work: impl std::future::Future<Output = ApiResult<T>> + Send + 'static,
) -> ApiResult<T> {
    tokio::spawn(work)
        .await
        .map_err(|e| ApiError::internal(format!("request worker failed: {e}")))?
}

/// Ensures the engine has no container the store does not know.
async fn destroy_quietly(engine: &dyn SandboxBackend, id: &str) {
    match engine.destroy(id).await {
        Ok(()) | Err(shellgate_sandbox::SandboxError::NotFound(_)) => {}
        Err(e) => tracing::warn!(container = %id, "could not destroy: {e}"),
    }
}
