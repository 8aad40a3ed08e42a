//! The server's state, [`AppState`]: every component a handler needs
//! (config, engine, store, quotas, billing, caches), each owning its state
//! in its own file; here only the state itself and the small caches of
//! container ownership and file-sync locks that belong to no component.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use shellgate_sandbox_api::SandboxBackend;
use shellgate_store::{Store, StoreError};

use crate::admission::Admission;
use crate::auth::{KeyCache, KeyThrottle, RateLimiter};
use crate::billing::Billing;
use crate::config::Config;
use crate::db::Db;
use crate::egress::EgressCounts;
use crate::error::ApiResult;
use crate::metrics::Metrics;

/// Everything a handler needs.
pub struct AppState {
    pub config: Config,
    /// This server's node in a cluster (its containers' `node_id`); empty
    /// on a single box.
    pub node_name: String,
    /// The sandbox backend, only through its trait: another backend
    /// (microVMs, Kubernetes) plugs in here without touching the API layer.
    pub engine: Arc<dyn SandboxBackend>,
    pub(crate) store: Db,
    /// Where Files API blobs and skill bundles live (`blobs` names their
    /// keys): the data directory or an S3 bucket.
    pub objects: Arc<dyn shellgate_objects::ObjectStore>,
    /// Where uploads and blobs the engine needs as files are spooled
    /// (anonymous files, gone when closed).
    pub spool_dir: PathBuf,
    pub(crate) metrics: Metrics,
    pub(crate) limiter: RateLimiter,
    pub(crate) keys: KeyCache,
    /// Wrong keys, throttled per client address and key prefix.
    pub(crate) key_throttle: KeyThrottle,
    pub(crate) admission: Admission,
    /// Open streams of process output, bounded per process and project.
    pub(crate) output_streams: crate::output_streams::StreamBudgets,
    /// The web console's terminals: their own bound, and their end once
    /// nobody looks at them.
    pub(crate) terminals: Arc<crate::terminals::Terminals>,
    pub(crate) billing: Arc<Billing>,
    /// Which project owns a container, for containers already looked up
    /// (ownership never changes).
    pub(crate) owners: Mutex<HashMap<String, String>>,
    /// Upstream models by name.
    pub(crate) upstreams: shellgate_model::upstream::Router,
    /// The upstreams' model lists, kept briefly (`GET /v1/models`).
    pub(crate) models: crate::catalog::Catalog,
    /// Prompt-injection rules, per project.
    pub(crate) guardrails: Arc<crate::guardrails::Guardrails>,
    /// Background responses still running, to cancel them.
    pub(crate) running: crate::running::Running,
    /// One file sync at a time per container (see `sandboxes::files::sync_files`).
    pub(crate) sync_locks: crate::named_locks::NamedLocks,
    /// What the in-sandbox API's access check knows of E2B's sandboxes.
    pub(crate) e2b_access: crate::e2b::access_cache::AccessCache,
    /// E2B sandboxes' access tokens, which sign their file URLs.
    pub(crate) e2b_signing: crate::e2b::signing_keys::SigningKeys,
    /// One E2B create at a time per idempotency key, one resume at a time per
    /// sandbox (see `e2b::control`), one network update at a time per
    /// container, whichever dialect asks (`sandboxes::containers`).
    pub(crate) e2b_locks: crate::named_locks::NamedLocks,
    /// The egress proxy's settings (`None`: egress is off).
    pub(crate) egress: Option<Arc<shellgate_egress::proxy::Settings>>,
    pub(crate) egress_counts: Arc<EgressCounts>,
    /// The default image's background build, if one was started.
    pub default_image_build: shellgate_sandbox_api::image::SharedBuildStatus,
    /// The host as the backend found it (the console's health page).
    pub host: crate::host::HostReport,
    /// Builds the default image on demand (`None`: this backend cannot).
    pub(crate) build_default_image: Option<crate::host::ImageBuilder>,
    /// What changed in the store, told to the console's open pages.
    pub(crate) changes: crate::changes::Changes,
    /// The exec commands running now, their output as it comes (the
    /// console's container page).
    pub(crate) live_output: Arc<crate::live_output::LiveOutput>,
    /// Whether the log already said that the default image is missing.
    pub(crate) default_image_missing_said: std::sync::atomic::AtomicBool,
    /// The time the lifecycle sweep judges idleness and expiry by (the
    /// system's; a manual one in tests).
    pub clock: crate::clock::Clock,
    /// When the lifecycle last swept abandoned Gemini uploads (0: never).
    pub(crate) gemini_uploads_swept_at: std::sync::atomic::AtomicI64,
    /// The snapshots a cluster's node holds for restores (see
    /// `snapshot_archives`).
    pub(crate) snapshot_cache: crate::snapshot_cache::SnapshotCache,
    /// E2B's directory watchers (`e2b::filesystem`).
    pub(crate) e2b_watchers: crate::e2b::filesystem::watchers::Watchers,
    /// The processes started through E2B's envd API, by pid and tag.
    pub(crate) e2b_processes: crate::e2b::process::registry::Registry,
    /// E2B sandboxes' timeout timers.
    pub(crate) e2b_deadlines: crate::e2b::deadlines::Deadlines,
    /// E2B sandboxes' sampled resource use (`e2b::metrics`).
    pub(crate) e2b_metrics: crate::e2b::metrics_history::MetricsHistory,
    /// The code interpreter's kernels and contexts, per container (E2B's
    /// `/execute`, the Responses `code_interpreter` tool).
    pub interpreters: Arc<shellgate_interpreter::Interpreters>,
    /// The containers whose code interpreter kernel ended when they were
    /// suspended, until their next cell tells it.
    pub(crate) kernels_slept: crate::sandboxes::kernels_slept::KernelsSlept,
    /// The Python cells waiting for the client's results of their calls
    /// of its tools.
    pub(crate) paused_cells: crate::sandboxes::paused_cells::PausedCells,
}

impl AppState {
    /// The lock of one name in `e2b_locks`.
    pub(crate) fn named_lock(&self, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.e2b_locks.of(name)
    }

    /// Runs store work on a blocking thread: SQLite never runs on (and so
    /// never stalls) the async workers that serve every other request.
    pub(crate) async fn db<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
    ) -> ApiResult<T> {
        self.store.run(work).await
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

    /// Drops what the server keeps in memory of a container that is gone
    /// (deleted, expired, or its directory lost): its owner, its E2B
    /// access check and signing key, its interpreters' kernels.
    pub(crate) fn forget_container(&self, container: &str) {
        self.forget_owner(container);
        self.e2b_access.forget(container);
        self.e2b_signing.forget(container);
        self.interpreters.forget_container(container);
    }

    /// The lock that serialises file syncs of one container.
    pub(crate) fn sync_lock(&self, container: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.sync_locks.of(container)
    }
}
