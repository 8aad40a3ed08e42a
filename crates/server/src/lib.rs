//! shellgate's HTTP server: OpenAI-compatible Containers, Container Files
//! and Files APIs, a direct exec endpoint, usage, health, metrics and an
//! OpenAPI document, on the sandbox engine and the SQLite store.
//!
//! Every request is authenticated by a Bearer key that belongs to a project;
//! every row and container belongs to one project, and a foreign id is a 404.

mod admission;
mod allocator;
mod anthropic_pages;
mod auth;
mod billing;
pub mod blobs;
mod canonical;
mod catalog;
mod changes;
mod chat;
pub mod clock;
pub mod cluster;
pub mod config;
mod console;
mod container_egress;
mod containers;
mod db;
mod e2b;
pub mod egress;
mod engine;
pub mod error;
mod exec_credits;
mod files;
mod fs;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
mod gemini;
mod guardrails;
#[cfg(test)]
mod handler_tests;
mod host;
mod http;
mod image_archives;
mod image_builds;
mod image_cache;
mod images;
mod in_sandbox;
mod lease;
mod lifecycle;
mod listener;
mod live_output;
mod messages;
mod metrics;
mod models;
mod named_locks;
mod openapi;
pub(crate) mod ops;
mod output_streams;
mod pinned_lru;
mod ports;
mod processes;
mod public_base;
mod responses;
mod route_grammar;
mod route_table;
mod routes;
mod running;
mod sandboxes;
mod skills;
mod snapshot_archives;
mod snapshot_cache;
mod snapshots;
mod spool;
pub mod startup;
mod state;
mod terminals;
#[cfg(test)]
mod testing;
mod time;
mod turns;
mod uncarried;
mod volumes;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use shellgate_sandbox_api::image::SharedBuildStatus;
use shellgate_sandbox_api::SandboxBackend;

use admission::Admission;
use auth::{KeyCache, RateLimiter};
use billing::Billing;
pub use config::Config;
use db::Db;
pub use error::ServeError;
pub use host::{HostReport, ImageBuilder};
use metrics::Metrics;
use shellgate_store::Store;
pub use state::AppState;
pub use time::now;

pub use routes::router;
use routes::{router_for, Audience};

pub use auth::new_api_key;

/// A new API key of the shape E2B's SDKs check client-side (`e2b_` and 40
/// hex digits, all from the kernel's CSPRNG): `shellgate keys create --e2b`.
pub fn new_e2b_api_key() -> String {
    let more = shellgate_wire::new_id("");
    format!("{}{}", shellgate_wire::new_id("e2b_"), &more[..8])
}

/// What the server asks of whoever opens its sandbox backend (the CLI's
/// `serve` opens the local engine): the server sees only the trait.
pub struct EngineSetup {
    /// The engine's directory, inside the data directory.
    pub dir: PathBuf,
    /// The egress proxy's settings (`None`: egress is off).
    pub egress: Option<Arc<shellgate_egress::proxy::Settings>>,
}

/// The sandbox backend the server runs on.
pub struct Backend {
    pub engine: Arc<dyn SandboxBackend>,
    /// The default image's background build, if one was started.
    pub default_image_build: SharedBuildStatus,
    /// Builds the default image on demand (the console's build button).
    pub build_default_image: Option<ImageBuilder>,
    /// The host as the backend found it (the console's health page).
    pub host: HostReport,
}

/// A server opened by [`open`], not yet serving.
pub struct Opened {
    pub state: Arc<AppState>,
    /// The API key this start made, because the store had none (it is also
    /// in `initial-api-key`; the start-up summary shows it once).
    pub generated_key: Option<String>,
}

#[cfg(test)]
#[test]
fn e2b_keys_have_the_shape_e2bs_sdks_check() {
    let key = new_e2b_api_key();
    let hex = key.strip_prefix("e2b_").unwrap_or_default();
    assert_eq!(hex.len(), 40, "{key}");
    assert!(hex
        .bytes()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    assert_ne!(new_e2b_api_key(), key);
}

/// Opens the store, and the backend with `open_backend` (after the data
/// directory is made and the egress settings are read), reconciles them
/// after a crash and seeds the configured keys.
pub async fn open<OpenBackend>(
    config: Config,
    open_backend: impl FnOnce(EngineSetup) -> OpenBackend,
) -> Result<Opened, ServeError>
where
    OpenBackend: std::future::Future<Output = Result<Backend, ServeError>>,
{
    use std::os::unix::fs::PermissionsExt;
    config
        .validate()
        .map_err(|e| ServeError::Setup(e.to_string()))?;
    std::fs::create_dir_all(&config.server.data_dir)?;
    // Sandboxes (unprivileged host uids) must traverse the data directory to
    // reach their engine's mounts; nothing else in it is theirs: the
    // database and uploaded files are private to the server.
    let mode = std::fs::metadata(&config.server.data_dir)?
        .permissions()
        .mode()
        & 0o7777;
    std::fs::set_permissions(
        &config.server.data_dir,
        std::fs::Permissions::from_mode(mode | 0o001),
    )?;
    // Blobs: the data directory's `files/` and `skills/` (as before there
    // was an object store), or an S3 bucket, checked before anything else
    // starts.
    let objects = blobs::open(&config).map_err(|e| ServeError::Setup(e.to_string()))?;
    blobs::check(objects.as_ref()).await.map_err(|e| {
        ServeError::Setup(format!(
            "the object store ({}) cannot be used: {e}",
            objects.describe()
        ))
    })?;
    let spool_dir = config.server.data_dir.join("spool");
    std::fs::create_dir_all(&spool_dir)?;
    std::fs::set_permissions(&spool_dir, std::fs::Permissions::from_mode(0o700))?;
    // Containers' skills, unpacked before the engine adopts them (the
    // sandboxes' host users must traverse it); leftovers of a crash go.
    let mounts = config.server.data_dir.join("skill-mounts");
    let _ = std::fs::remove_dir_all(&mounts);
    std::fs::create_dir_all(&mounts)?;
    std::fs::set_permissions(&mounts, std::fs::Permissions::from_mode(0o711))?;
    // Volumes are the server's alone (the sandbox helper mounts them for
    // init, see `sandboxes::volumes`); a data directory of an older server
    // let other host users traverse it.
    let volumes = config.server.data_dir.join("volumes");
    if volumes.is_dir() {
        std::fs::set_permissions(&volumes, std::fs::Permissions::from_mode(0o700))?;
    }
    let (store, generated_key) = startup::timed("store", open_seeded_store(&config)).await?;
    let (egress, egress_log) = match egress::settings(&config)? {
        Some((settings, log)) => (Some(settings), Some(log)),
        None => (None, None),
    };
    let Backend {
        engine,
        default_image_build,
        build_default_image,
        host,
    } = startup::timed(
        "engine",
        open_backend(EngineSetup {
            dir: config.server.data_dir.join("sandbox"),
            egress: egress.clone(),
        }),
    )
    .await?;
    let store = Db::new(store);
    let state = Arc::new(AppState {
        limiter: RateLimiter::new(config.server.rate_limit_per_minute),
        keys: KeyCache::default(),
        key_throttle: Default::default(),
        admission: Admission::new(&config, store.clone()),
        output_streams: output_streams::StreamBudgets::new(&config.sandbox),
        terminals: terminals::Terminals::new(&config, Arc::clone(&engine), store.clone()),
        billing: Arc::new(Billing::new(store.clone(), Arc::clone(&engine))),
        owners: Mutex::new(HashMap::new()),
        upstreams: upstream_router(&config)?,
        models: Default::default(),
        guardrails: Arc::new(
            guardrails::Guardrails::from_config(&config)
                .map_err(|e| ServeError::Setup(e.to_string()))?,
        ),
        running: Default::default(),
        interpreters: Arc::new(shellgate_interpreter::Interpreters::new(Arc::clone(
            &engine,
        ))),
        kernels_slept: Default::default(),
        paused_cells: Default::default(),
        node_name: config.cluster.node_name(),
        config,
        engine,
        store: store.clone(),
        objects,
        spool_dir,
        metrics: Metrics::default(),
        sync_locks: Default::default(),
        e2b_access: Default::default(),
        e2b_signing: Default::default(),
        e2b_locks: Default::default(),
        egress,
        egress_counts: Default::default(),
        default_image_missing_said: Default::default(),
        default_image_build,
        host,
        build_default_image,
        changes: Default::default(),
        live_output: Default::default(),
        clock: clock::Clock::system(),
        gemini_uploads_swept_at: Default::default(),
        snapshot_cache: Default::default(),
        e2b_watchers: Default::default(),
        e2b_processes: Default::default(),
        e2b_deadlines: Default::default(),
        e2b_metrics: Default::default(),
    });
    if let Some(log) = egress_log {
        egress::spawn_log_writer(
            store,
            Arc::clone(&state.engine),
            Arc::clone(&state.egress_counts),
            log,
        );
    }
    state
        .changes
        .start(state.store.clone())
        .await
        .map_err(|e| ServeError::Setup(format!("console live updates: {}", e.message)))?;
    let on_disk = startup::timed("recover", lifecycle::recover(&state))
        .await
        .map_err(|e| ServeError::Setup(format!("recovery: {}", e.message)))?;
    startup::timed("e2b timers", e2b::timeouts::arm_stored(&state))
        .await
        .map_err(|e| ServeError::Setup(format!("recovery: {}", e.message)))?;
    startup::timed("unfinished builds", async {
        e2b::templates::fail_unfinished(&state).await;
        image_builds::fail_unfinished(&state).await;
    })
    .await;
    // What this node held open before (its console streams' leases) and
    // the execs it ran (their credits) ended with its last run.
    let node = state.node_name.clone();
    let released = state.db(move |store| {
        store.release_leases_of(&node)?;
        store.release_exec_credits_of(&node)
    });
    startup::timed("leases and credits", released)
        .await
        .map_err(|e| ServeError::Setup(format!("recovery: {}", e.message)))?;
    startup::timed(
        "interrupted responses",
        responses::settle_interrupted(&state),
    )
    .await
    .map_err(|e| ServeError::Setup(format!("recovery: {}", e.message)))?;
    // What needs every row and every directory is done while serving.
    tokio::spawn(lifecycle::reconcile(Arc::clone(&state), on_disk));
    Ok(Opened {
        state,
        generated_key,
    })
}

/// Opens the store the configuration names and seeds its keys, on a
/// blocking thread (the Postgres client blocks on a runtime of its own).
/// A single box whose store has no key yet gets one, made here: returned,
/// and written to `initial-api-key` (0600) for whoever missed the start-up
/// summary. A cluster's keys are its operator's to make (`shellgate keys
/// create` against the shared store); nodes and replicas never mint one.
async fn open_seeded_store(config: &Config) -> Result<(Store, Option<String>), ServeError> {
    let config = config.clone();
    tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::OpenOptionsExt;
        let setup = |e: shellgate_store::StoreError| ServeError::Setup(e.to_string());
        let store = config.open_store().map_err(setup)?;
        for (key, project, role) in config.server.seeded_keys() {
            store
                .add_key_with_role(&key, &project, role, now())
                .map_err(setup)?;
        }
        if config.cluster.role != config::Role::All || store.key_count().map_err(setup)? > 0 {
            return Ok((store, None));
        }
        let key = new_api_key();
        store.add_key(&key, "default", now()).map_err(setup)?;
        let file = config.server.data_dir.join(startup::INITIAL_KEY_FILE);
        // Private from its first byte: created 0600, never chmod-ed after.
        let _ = std::fs::remove_file(&file);
        let mut handle = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&file)?;
        std::io::Write::write_all(&mut handle, format!("{key}\n").as_bytes())?;
        Ok((store, Some(key)))
    })
    .await
    .map_err(|e| ServeError::Setup(format!("opening the store: {e}")))?
}

/// The upstream models of the configuration.
fn upstream_router(config: &Config) -> Result<shellgate_model::upstream::Router, ServeError> {
    use shellgate_model::upstream::{connect, Protocol, Router, TurnLimits, UpstreamConfig};
    let limits = TurnLimits {
        max_answer_bytes: usize::try_from(config.model.upstream_max_answer_bytes)
            .unwrap_or(usize::MAX),
        max_tool_call_bytes: usize::try_from(config.model.upstream_max_tool_call_bytes)
            .unwrap_or(usize::MAX),
        turn_timeout: std::time::Duration::from_secs(config.model.upstream_turn_timeout_secs),
    };
    let make = |url: &str, key: &config::Secret, protocol: Protocol| {
        connect(UpstreamConfig {
            url: url.to_owned(),
            api_key: key.get().map(str::to_owned),
            protocol,
            timeout: std::time::Duration::from_secs(config.model.upstream_timeout_secs),
            attempts: config.model.upstream_attempts,
            limits,
        })
        .map_err(|e| ServeError::Setup(e.to_string()))
    };
    let default = if config.model.upstream_url.is_empty() {
        None
    } else {
        Some(make(
            &config.model.upstream_url,
            &config.model.upstream_api_key,
            config.model.upstream_protocol,
        )?)
    };
    let mut router = Router::new(default);
    for route in &config.model.upstreams {
        router.route(
            &route.prefix,
            make(&route.url, &route.api_key, route.protocol)?,
        );
    }
    Ok(router)
}

/// Takes the address to listen on. `serve` binds first, before it opens
/// anything (the store, the engine, an image build), so that an address in
/// use fails at once, naming it, with nothing started or made.
pub async fn bind(addr: std::net::SocketAddr) -> Result<tokio::net::TcpListener, ServeError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| ServeError::Listen {
            addr,
            reason: error::listen_reason(&e),
        })
}

/// Serves on `listener` (from [`bind`]) until SIGINT or SIGTERM, then stops
/// every container (their files stay) and returns.
pub async fn serve(
    state: Arc<AppState>,
    listener: tokio::net::TcpListener,
) -> Result<(), ServeError> {
    let sweeper = tokio::spawn(lifecycle::sweep_forever(Arc::clone(&state)));
    let sampler = tokio::spawn(e2b::metrics::sample_forever(Arc::clone(&state)));
    let mut heartbeat = None;
    let mut credit_keeper = None;
    let app = if state.config.cluster.role == config::Role::Node {
        // A cluster's node: registered before it serves, heart-beating,
        // and behind the front that lets in only the cluster's replicas
        // (to the tenants' router) and its operator (to its own routes
        // too).
        cluster::node::register(&state)
            .await
            .map_err(|e| ServeError::Setup(format!("node registration: {}", e.message)))?;
        // The batches this node took and left unended go on (each node
        // resumes its own: none runs twice).
        messages::batches::resume(&state).await;
        heartbeat = Some(tokio::spawn(cluster::node::heartbeat_forever(Arc::clone(
            &state,
        ))));
        credit_keeper = state.admission.credit_keeper().map(tokio::spawn);
        let tenants = router_for(Arc::clone(&state), Audience::Tenants);
        let operator = cluster::node::operator_routes(Arc::clone(&state), tenants.clone());
        cluster::node::front(Arc::clone(&state), tenants, operator)
    } else {
        // A batch a stopped server left unended goes on.
        messages::batches::resume(&state).await;
        router(Arc::clone(&state))
    };
    listener::serve(
        listener,
        app,
        listener::Limits::from_config(&state.config),
        shutdown_signal(),
    )
    .await?;
    sweeper.abort();
    sampler.abort();
    if let Some(heartbeat) = heartbeat {
        heartbeat.abort();
    }
    state.billing.flush().await;
    tracing::info!("shutting down: stopping containers");
    lifecycle::suspend_all(&state).await;
    state.engine.shutdown().await;
    if let Some(keeper) = credit_keeper {
        keeper.abort();
    }
    // Last, once nothing writes any more: the store's connections closed
    // off the runtime (a Postgres client blocks to say goodbye).
    state.changes.stop();
    state.store.close().await;
    Ok(())
}

/// Serves an API replica of a cluster on `listener` until a
/// shutdown signal: no engine, the shared store, the configured keys
/// seeded, silent nodes marked lost.
pub async fn serve_replica(
    config: Config,
    listener: tokio::net::TcpListener,
) -> Result<(), ServeError> {
    config
        .validate()
        .map_err(|e| ServeError::Setup(e.to_string()))?;
    let (store, _) = open_seeded_store(&config).await?;
    let store = Db::new(store);
    let limits = listener::Limits::from_config(&config);
    let replica = cluster::replica::Replica::new(config, store.clone())?;
    let sweeper = tokio::spawn(cluster::replica::sweep_lost_nodes(Arc::clone(&replica)));
    listener::serve(
        listener,
        cluster::replica::router(replica),
        limits,
        shutdown_signal(),
    )
    .await?;
    sweeper.abort();
    store.close().await;
    Ok(())
}

/// Resolves on SIGINT or SIGTERM. The handlers are installed here, when
/// the server starts, not when the future is first polled: a server
/// started with SIGINT ignored (`nohup`, a background job) answers its
/// first request already stopping on SIGINT, not a moment later.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let interrupt = signal(SignalKind::interrupt());
    let terminate = signal(SignalKind::terminate());
    async move {
        match (interrupt, terminate) {
            (Ok(mut interrupt), Ok(mut terminate)) => {
                tokio::select! {
                    _ = interrupt.recv() => {},
                    _ = terminate.recv() => {},
                }
            }
            (Ok(mut only), Err(_)) | (Err(_), Ok(mut only)) => {
                only.recv().await;
            }
            // No handler could be installed: the default dispositions
            // still end the process on either signal.
            (Err(_), Err(_)) => std::future::pending().await,
        }
    }
}
