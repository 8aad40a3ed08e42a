//! The real router for the fuzzer (`fuzz/`), the stable runner and the
//! parsing tests: the same routes, extractors, authentication, validation
//! and store as `serve`, over an in-memory store with one project, behind a
//! backend that holds no containers and makes none. Every answer is a
//! success or an OpenAI error envelope; nothing panics ([`check_request`]).
//! Built only for tests and with the `fuzzing` feature.
// A broken invariant is meant to panic here: that is what a fuzzer finds.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;

use async_trait::async_trait;
use axum::Router;
use shellgate_sandbox_api::backend::{
    CommandResult, ContainerInfo, ContainerSpec, DeltaSink, FileListing, RunRequest, SandboxBackend,
};
use shellgate_sandbox_api::SandboxError;
use shellgate_store::Store;

use crate::config::Config;
use crate::state::AppState;

/// The API key the fuzzing state accepts (project `fuzz`).
pub const KEY: &str = "sg-fuzz";

/// A backend with no containers that refuses to make any: fuzzing exercises
/// request handling, not the sandbox (which has its own tests).
struct NoContainers;

fn missing(id: &str) -> SandboxError {
    SandboxError::NotFound(id.to_owned())
}

#[async_trait]
impl SandboxBackend for NoContainers {
    async fn create(&self, _: &str, _: ContainerSpec) -> Result<ContainerInfo, SandboxError> {
        Err(SandboxError::Setup(
            "the fuzzing harness makes no containers".into(),
        ))
    }
    async fn run(&self, id: &str, _: RunRequest) -> Result<Vec<CommandResult>, SandboxError> {
        Err(missing(id))
    }
    async fn run_streaming(
        &self,
        id: &str,
        _: RunRequest,
        _: DeltaSink,
    ) -> Result<Vec<CommandResult>, SandboxError> {
        Err(missing(id))
    }
    async fn stop(&self, id: &str) -> Result<(), SandboxError> {
        Err(missing(id))
    }
    async fn suspend_if_idle(&self, id: &str) -> Result<bool, SandboxError> {
        Err(missing(id))
    }
    async fn start(&self, id: &str) -> Result<(), SandboxError> {
        Err(missing(id))
    }
    async fn destroy(&self, id: &str) -> Result<(), SandboxError> {
        Err(missing(id))
    }
    async fn destroy_if_idle(&self, id: &str) -> Result<bool, SandboxError> {
        Err(missing(id))
    }
    async fn inspect(&self, id: &str) -> Result<ContainerInfo, SandboxError> {
        Err(missing(id))
    }
    async fn list(&self) -> Result<Vec<ContainerInfo>, SandboxError> {
        Ok(Vec::new())
    }
    fn memory_ceiling(&self) -> u64 {
        u64::MAX
    }
    async fn read_file(&self, id: &str, _: &str) -> Result<Vec<u8>, SandboxError> {
        Err(missing(id))
    }
    async fn open_file(&self, id: &str, _: &str) -> Result<std::fs::File, SandboxError> {
        Err(missing(id))
    }
    async fn write_file(&self, id: &str, _: &str, _: &[u8]) -> Result<(), SandboxError> {
        Err(missing(id))
    }
    async fn write_file_from(
        &self,
        id: &str,
        _: &str,
        _: std::fs::File,
    ) -> Result<u64, SandboxError> {
        Err(missing(id))
    }
    async fn delete_file(&self, id: &str, _: &str) -> Result<(), SandboxError> {
        Err(missing(id))
    }
    async fn list_files(&self, id: &str) -> Result<FileListing, SandboxError> {
        Err(missing(id))
    }
    async fn settle(&self) {}
    async fn shutdown(&self) {}
}

/// A server state on an in-memory store, with [`KEY`] for project `fuzz`.
pub fn state() -> Result<Arc<AppState>, crate::error::ServeError> {
    let mut config = Config::default();
    config.server.data_dir = std::env::temp_dir().join("shellgate-fuzzing");
    // A create that passes validation is refused by the quota (429)
    // before it could reach the backend.
    config.sandbox.max_running_containers_per_project = 0;
    let store = Store::in_memory().map_err(|e| crate::error::ServeError::Setup(e.to_string()))?;
    store
        .add_key(KEY, "fuzz", 0)
        .map_err(|e| crate::error::ServeError::Setup(e.to_string()))?;
    let objects = shellgate_objects::LocalStore::open(&config.server.data_dir)
        .map_err(|e| crate::error::ServeError::Setup(e.to_string()))?;
    Ok(state_with(
        config,
        store,
        Arc::new(NoContainers),
        Arc::new(objects),
        crate::clock::Clock::system(),
    ))
}

/// A server state over the given store, backend and clock, without the
/// start-up work of [`crate::open`] (no engine, upstreams, egress proxy or
/// recovery): for the fuzzer and the in-process handler tests.
pub(crate) fn state_with(
    config: Config,
    store: Store,
    engine: Arc<dyn SandboxBackend>,
    objects: Arc<dyn shellgate_objects::ObjectStore>,
    clock: crate::clock::Clock,
) -> Arc<AppState> {
    let store = crate::db::Db::new(store);
    Arc::new(AppState {
        node_name: config.cluster.node_name(),
        limiter: crate::auth::RateLimiter::new(config.server.rate_limit_per_minute),
        keys: Default::default(),
        key_throttle: Default::default(),
        admission: crate::admission::Admission::new(&config, store.clone()),
        output_streams: crate::output_streams::StreamBudgets::new(&config.sandbox),
        terminals: crate::terminals::Terminals::new(&config, Arc::clone(&engine), store.clone()),
        billing: Arc::new(crate::billing::Billing::new(
            store.clone(),
            Arc::clone(&engine),
        )),
        owners: Default::default(),
        upstreams: Default::default(),
        models: Default::default(),
        guardrails: Default::default(),
        running: Default::default(),
        spool_dir: config.server.data_dir.join("spool"),
        objects,
        interpreters: Arc::new(shellgate_interpreter::Interpreters::new(Arc::clone(
            &engine,
        ))),
        kernels_slept: Default::default(),
        paused_cells: Default::default(),
        config,
        engine,
        store,
        metrics: Default::default(),
        sync_locks: Default::default(),
        e2b_access: Default::default(),
        e2b_signing: Default::default(),
        e2b_locks: Default::default(),
        egress: None,
        egress_counts: Default::default(),
        default_image_missing_said: Default::default(),
        default_image_build: Default::default(),
        host: Default::default(),
        build_default_image: None,
        changes: Default::default(),
        live_output: Default::default(),
        clock,
        gemini_uploads_swept_at: Default::default(),
        snapshot_cache: Default::default(),
        e2b_watchers: Default::default(),
        e2b_processes: Default::default(),
        e2b_deadlines: Default::default(),
        e2b_metrics: Default::default(),
    })
}

/// The real router over [`state`].
pub fn router() -> Result<Router, crate::error::ServeError> {
    Ok(crate::routes::router(state()?))
}

/// Inputs to start from: a body for each route [`check_request`] picks.
pub fn seeds() -> Vec<Vec<u8>> {
    [
        (
            0u8,
            r#"{"name":"x","memory_limit":"4g","expires_after":{"anchor":"last_active_at","minutes":5}}"#,
        ),
        (
            1,
            r#"{"commands":["ls -la"],"timeout_ms":1000,"max_output_length":100}"#,
        ),
        (2, r#"{"file_id":"file_x"}"#),
        (3, "limit=5&order=desc&after=cntr_x"),
        (4, "name=x"),
    ]
    .iter()
    .map(|(route, body)| [&[*route][..], body.as_bytes()].concat())
    .collect()
}

/// Any bytes as a request: the first byte picks a route, the rest is the
/// body or query. The request goes through the real router (one state for
/// the process); the answer is a status the API gives, and anything but a
/// success is an OpenAI error envelope with all four keys.
pub fn check_request(data: &[u8]) {
    use std::sync::OnceLock;

    use axum::body::Body;
    use axum::http::Request;
    use tower_service::Service;

    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    static ROUTER: OnceLock<Router> = OnceLock::new();
    let runtime = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime")
    });
    let router = ROUTER.get_or_init(|| {
        let _entered = runtime.enter();
        router().expect("the fuzzing state")
    });
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let authorized = |builder: axum::http::request::Builder| {
        builder.header("authorization", format!("Bearer {KEY}"))
    };
    let json_post = |path: &str| {
        authorized(Request::post(path))
            .header("content-type", "application/json")
            .body(Body::from(rest.to_vec()))
    };
    let request = match selector % 5 {
        0 => json_post("/v1/containers"),
        1 => json_post("/v1/containers/cntr_x/exec"),
        2 => json_post("/v1/containers/cntr_x/files"),
        3 => {
            let query: String = String::from_utf8_lossy(rest)
                .chars()
                .filter(|c| !c.is_whitespace() && *c != '#')
                .collect();
            authorized(Request::get(format!("/v1/containers?{query}"))).body(Body::empty())
        }
        _ => authorized(Request::post("/v1/containers"))
            .header("content-type", "text/plain")
            .body(Body::from(rest.to_vec())),
    };
    let Ok(request) = request else { return };
    let mut router = router.clone();
    let (status, body) = runtime.block_on(async move {
        std::future::poll_fn(|cx| Service::<Request<Body>>::poll_ready(&mut router, cx))
            .await
            .expect("a router is always ready");
        let response = router.call(request).await.expect("infallible");
        let status = response.status().as_u16();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("a body");
        (status, body)
    });
    assert!(
        [200, 400, 404, 405, 409, 413, 415, 429].contains(&status),
        "unexpected status {status}"
    );
    if status != 200 {
        let value: serde_json::Value =
            serde_json::from_slice(&body).expect("an error envelope is JSON");
        for key in ["message", "type", "param", "code"] {
            assert!(
                value["error"].get(key).is_some(),
                "envelope without {key}: {value}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    async fn status_and_body(request: Request<Body>) -> (u16, serde_json::Value) {
        let router = super::router().unwrap();
        let response = router.oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, serde_json::from_slice(&bytes).unwrap_or_default())
    }

    fn post(path: &str, body: &str) -> Request<Body> {
        Request::post(path)
            .header("content-type", "application/json")
            .header("authorization", format!("Bearer {}", super::KEY))
            .body(Body::from(body.to_owned()))
            .unwrap()
    }

    #[tokio::test]
    async fn hostile_bodies_get_envelopes_not_panics() {
        let deep = format!("{{\"name\":\"x\",\"skills\":[{}]}}", "[".repeat(50_000));
        let authorized = |builder: axum::http::request::Builder| {
            builder.header("authorization", format!("Bearer {}", super::KEY))
        };
        let cases = [
            post("/v1/containers", ""),
            post("/v1/containers", "\u{0}\u{ff}"),
            post("/v1/containers", &deep),
            post(
                "/v1/containers",
                r#"{"name":"x","expires_after":{"anchor":"last_active_at","minutes":-1}}"#,
            ),
            post(
                "/v1/containers",
                r#"{"name":"x","network_policy":{"type":"allowlist"}}"#,
            ),
            post("/v1/containers/c/exec", r#"{"commands":["\u0000"]}"#),
            post(
                "/v1/containers/c/exec",
                r#"{"commands":["true"],"max_output_length":18446744073709551616}"#,
            ),
            authorized(Request::get("/v1/containers?limit=-5&order=%ff"))
                .body(Body::empty())
                .unwrap(),
            authorized(Request::get("/v1/containers?after=cntr_nobody"))
                .body(Body::empty())
                .unwrap(),
            authorized(Request::delete("/v1/containers"))
                .body(Body::empty())
                .unwrap(),
            Request::get("/v1/containers").body(Body::empty()).unwrap(),
        ];
        for request in cases {
            let (status, body) = status_and_body(request).await;
            assert!((400..500).contains(&status), "{status}: {body}");
            for key in ["message", "type", "param", "code"] {
                assert!(body["error"].get(key).is_some(), "{body}");
            }
        }
    }

    #[tokio::test]
    async fn a_stale_cursor_is_a_400_naming_it() {
        let request = Request::get("/v1/containers?after=cntr_gone")
            .header("authorization", format!("Bearer {}", super::KEY))
            .body(Body::empty())
            .unwrap();
        let (status, body) = status_and_body(request).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["param"], "after");
        assert!(body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("cntr_gone"));
    }
}
