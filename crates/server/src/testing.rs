//! The in-process test harness: the real router over a real store in a
//! temporary directory, behind a [`RecordingBackend`] that keeps containers
//! in memory and records every call the server makes to it, and a manual
//! [`Clock`] the lifecycle tests move. No sandbox, no network, no waiting.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use axum::body::Body;
use axum::http::{Method, Request};
use shellgate_sandbox_api::backend::{
    CommandResult, ContainerInfo, ContainerSpec, ContainerState, DeltaSink, FileEntry, FileListing,
    OutputDelta, RunRequest, SandboxBackend, StreamKind,
};
use shellgate_sandbox_api::SandboxError;
use shellgate_store::Store;
use tower::ServiceExt;

use crate::clock::Clock;
use crate::{AppState, Config};

/// What the server asked of the backend, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    Create {
        id: String,
        memory_bytes: u64,
    },
    Run {
        id: String,
        commands: Vec<String>,
        timeout_ms: u64,
    },
    Stop(String),
    Suspend(String),
    Start(String),
    Destroy(String),
    WriteFile {
        id: String,
        path: String,
    },
    DeleteFile {
        id: String,
        path: String,
    },
}

/// One container as the recording backend holds it.
struct Held {
    info: ContainerInfo,
    files: BTreeMap<String, Vec<u8>>,
}

/// A backend that makes containers in memory (their files a map), runs a
/// command by answering `ran: <command>` with exit code 0, and records
/// every call.
pub struct RecordingBackend {
    containers: Mutex<BTreeMap<String, Held>>,
    calls: Mutex<Vec<Call>>,
    /// Where `open_file` writes a copy to hand out (it answers a real file).
    scratch: PathBuf,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn missing(id: &str) -> SandboxError {
    SandboxError::NotFound(id.to_owned())
}

impl RecordingBackend {
    fn new(scratch: PathBuf) -> Self {
        Self {
            containers: Mutex::default(),
            calls: Mutex::default(),
            scratch,
        }
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        lock(&self.calls).clone()
    }

    /// The state of a container it holds.
    pub fn state_of(&self, id: &str) -> Option<ContainerState> {
        lock(&self.containers).get(id).map(|held| held.info.state)
    }

    /// Puts a file into a container, as a command would make it.
    pub fn make_file(&self, id: &str, path: &str, contents: &[u8]) {
        if let Some(held) = lock(&self.containers).get_mut(id) {
            held.files.insert(path.to_owned(), contents.to_vec());
        }
    }

    fn record(&self, call: Call) {
        lock(&self.calls).push(call);
    }

    fn results(&self, id: &str, request: &RunRequest) -> Result<Vec<CommandResult>, SandboxError> {
        if !lock(&self.containers).contains_key(id) {
            return Err(missing(id));
        }
        self.record(Call::Run {
            id: id.to_owned(),
            commands: request.commands.clone(),
            timeout_ms: request.timeout_ms,
        });
        Ok(request
            .commands
            .iter()
            .map(|command| CommandResult {
                stdout: format!("ran: {command}\n"),
                stderr: String::new(),
                outcome: shellgate_wire::Outcome::Exit { exit_code: 0 },
                duration_ms: 1,
                bytes_out: command.len() as u64 + 6,
            })
            .collect())
    }

    fn set_state(&self, id: &str, state: ContainerState) -> Result<(), SandboxError> {
        let mut containers = lock(&self.containers);
        let held = containers.get_mut(id).ok_or_else(|| missing(id))?;
        held.info.state = state;
        Ok(())
    }

    fn file(&self, id: &str, path: &str) -> Result<Vec<u8>, SandboxError> {
        let containers = lock(&self.containers);
        let held = containers.get(id).ok_or_else(|| missing(id))?;
        held.files
            .get(path)
            .cloned()
            .ok_or_else(|| SandboxError::FileNotFound(path.to_owned()))
    }
}

#[async_trait]
impl SandboxBackend for RecordingBackend {
    async fn create(&self, id: &str, spec: ContainerSpec) -> Result<ContainerInfo, SandboxError> {
        self.record(Call::Create {
            id: id.to_owned(),
            memory_bytes: spec.memory_bytes,
        });
        let info = ContainerInfo {
            id: id.to_owned(),
            state: ContainerState::Running,
            spec,
        };
        lock(&self.containers).insert(
            id.to_owned(),
            Held {
                info: info.clone(),
                files: BTreeMap::new(),
            },
        );
        Ok(info)
    }
    async fn run(&self, id: &str, request: RunRequest) -> Result<Vec<CommandResult>, SandboxError> {
        self.results(id, &request)
    }
    async fn run_streaming(
        &self,
        id: &str,
        request: RunRequest,
        deltas: DeltaSink,
    ) -> Result<Vec<CommandResult>, SandboxError> {
        let results = self.results(id, &request)?;
        for (command, result) in results.iter().enumerate() {
            let _ = deltas.send(OutputDelta {
                command,
                stream: StreamKind::Stdout,
                text: result.stdout.clone(),
            });
        }
        Ok(results)
    }
    async fn stop(&self, id: &str) -> Result<(), SandboxError> {
        self.record(Call::Stop(id.to_owned()));
        self.set_state(id, ContainerState::Stopped)
    }
    async fn suspend_if_idle(&self, id: &str) -> Result<bool, SandboxError> {
        self.record(Call::Suspend(id.to_owned()));
        self.set_state(id, ContainerState::Stopped)?;
        Ok(true)
    }
    async fn start(&self, id: &str) -> Result<(), SandboxError> {
        self.record(Call::Start(id.to_owned()));
        self.set_state(id, ContainerState::Running)
    }
    async fn destroy(&self, id: &str) -> Result<(), SandboxError> {
        self.record(Call::Destroy(id.to_owned()));
        lock(&self.containers)
            .remove(id)
            .map(drop)
            .ok_or_else(|| missing(id))
    }
    async fn destroy_if_idle(&self, id: &str) -> Result<bool, SandboxError> {
        self.destroy(id).await.map(|()| true)
    }
    async fn inspect(&self, id: &str) -> Result<ContainerInfo, SandboxError> {
        lock(&self.containers)
            .get(id)
            .map(|held| held.info.clone())
            .ok_or_else(|| missing(id))
    }
    async fn usage(
        &self,
        id: &str,
    ) -> Result<Option<shellgate_sandbox_api::backend::ContainerUsage>, SandboxError> {
        let containers = lock(&self.containers);
        let held = containers.get(id).ok_or_else(|| missing(id))?;
        if held.info.state != ContainerState::Running {
            return Ok(None);
        }
        // A quarter of a core's second used in the second it ran.
        Ok(Some(shellgate_sandbox_api::backend::ContainerUsage {
            cpu_usec: 250_000,
            running_usec: 1_000_000,
            memory_bytes: 32 << 20,
            memory_cache_bytes: 4 << 20,
            memory_limit_bytes: held.info.spec.memory_bytes,
            cpu_cores: held.info.spec.cpu_cores,
            disk_used_bytes: 1 << 20,
            disk_total_bytes: held.info.spec.disk_bytes,
        }))
    }
    async fn list(&self) -> Result<Vec<ContainerInfo>, SandboxError> {
        Ok(lock(&self.containers)
            .values()
            .map(|held| held.info.clone())
            .collect())
    }
    fn memory_ceiling(&self) -> u64 {
        // Room for a 16g container, not a 64g one.
        32 << 30
    }
    async fn read_file(&self, id: &str, path: &str) -> Result<Vec<u8>, SandboxError> {
        self.file(id, path)
    }
    async fn open_file(&self, id: &str, path: &str) -> Result<std::fs::File, SandboxError> {
        let contents = self.file(id, path)?;
        let copy = self.scratch.join(shellgate_wire::new_id("open-"));
        std::fs::write(&copy, contents).map_err(|e| SandboxError::Setup(e.to_string()))?;
        std::fs::File::open(&copy).map_err(|e| SandboxError::Setup(e.to_string()))
    }
    async fn write_file(&self, id: &str, path: &str, contents: &[u8]) -> Result<(), SandboxError> {
        self.record(Call::WriteFile {
            id: id.to_owned(),
            path: path.to_owned(),
        });
        let mut containers = lock(&self.containers);
        let held = containers.get_mut(id).ok_or_else(|| missing(id))?;
        held.files.insert(path.to_owned(), contents.to_vec());
        Ok(())
    }
    async fn write_file_from(
        &self,
        id: &str,
        path: &str,
        mut source: std::fs::File,
    ) -> Result<u64, SandboxError> {
        let mut contents = Vec::new();
        std::io::Read::read_to_end(&mut source, &mut contents)
            .map_err(|e| SandboxError::Setup(e.to_string()))?;
        self.write_file(id, path, &contents).await?;
        Ok(contents.len() as u64)
    }
    async fn delete_file(&self, id: &str, path: &str) -> Result<(), SandboxError> {
        self.record(Call::DeleteFile {
            id: id.to_owned(),
            path: path.to_owned(),
        });
        let mut containers = lock(&self.containers);
        let held = containers.get_mut(id).ok_or_else(|| missing(id))?;
        held.files
            .remove(path)
            .map(drop)
            .ok_or_else(|| SandboxError::FileNotFound(path.to_owned()))
    }
    async fn list_files(&self, id: &str) -> Result<FileListing, SandboxError> {
        let containers = lock(&self.containers);
        let held = containers.get(id).ok_or_else(|| missing(id))?;
        Ok(FileListing {
            files: held
                .files
                .iter()
                .map(|(path, contents)| FileEntry {
                    path: path.clone(),
                    bytes: contents.len() as u64,
                    modified_unix: 0,
                })
                .collect(),
            skipped: Default::default(),
        })
    }
    async fn settle(&self) {}
    async fn shutdown(&self) {}
}

/// A directory removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new() -> Self {
        let path = std::env::temp_dir().join(shellgate_wire::new_id("shellgate-server-test-"));
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The API key of project `alpha`.
pub const ALPHA: &str = "sg-test-alpha";
/// The API key of project `beta`.
pub const BETA: &str = "sg-test-beta";

/// An answer: its status and its body (JSON, or `Null` when it is not).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub json: serde_json::Value,
    pub bytes: Vec<u8>,
}

impl Answer {
    /// Asserts the status, and that the body is OpenAI's error envelope
    /// (all four keys); answers the `error` object.
    pub fn error(&self, status: u16) -> &serde_json::Value {
        assert_eq!(self.status, status, "{}", self.json);
        let error = &self.json["error"];
        for key in ["message", "type", "param", "code"] {
            assert!(error.get(key).is_some(), "{key} missing: {}", self.json);
        }
        assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()));
        error
    }

    /// Asserts a 200 and answers the body.
    pub fn ok(&self) -> &serde_json::Value {
        assert_eq!(self.status, 200, "{}", self.json);
        &self.json
    }
}

/// The real router and state over a store in a temporary directory, the
/// recording backend, a manual clock, and two projects' keys.
pub struct Harness {
    pub state: Arc<AppState>,
    pub backend: Arc<RecordingBackend>,
    pub clock: Clock,
    _dir: TempDir,
}

impl Harness {
    pub fn new() -> Self {
        Self::with_config(|_| {})
    }

    /// A harness whose configuration `adjust` changes first.
    pub fn with_config(adjust: impl FnOnce(&mut Config)) -> Self {
        let dir = TempDir::new();
        let mut config = Config::default();
        config.server.data_dir = dir.path().to_owned();
        adjust(&mut config);
        for sub in ["spool", "skill-mounts", "scratch"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        let store = Store::open(&dir.path().join("shellgate.db")).unwrap();
        store.add_key(ALPHA, "alpha", 0).unwrap();
        store.add_key(BETA, "beta", 0).unwrap();
        let backend = Arc::new(RecordingBackend::new(dir.path().join("scratch")));
        let clock = Clock::manual(crate::now());
        let state = crate::fuzzing::state_with(
            config,
            store,
            Arc::clone(&backend) as Arc<dyn SandboxBackend>,
            Arc::new(shellgate_objects::LocalStore::open(dir.path()).unwrap()),
            clock.clone(),
        );
        Self {
            state,
            backend,
            clock,
            _dir: dir,
        }
    }

    /// This harness with `upstreams` as its model routes.
    pub fn with_upstreams(mut self, upstreams: shellgate_model::upstream::Router) -> Self {
        if let Some(state) = Arc::get_mut(&mut self.state) {
            state.upstreams = upstreams;
        }
        self
    }

    /// This harness with the guardrails of its configuration (the
    /// harness's state is built without them).
    pub fn with_guardrails(mut self) -> Self {
        if let Some(state) = Arc::get_mut(&mut self.state) {
            let guardrails = crate::guardrails::Guardrails::from_config(&state.config).unwrap();
            state.guardrails = Arc::new(guardrails);
        }
        self
    }

    /// Sends one request through the real router.
    pub async fn send(&self, request: Request<Body>) -> Answer {
        let response = crate::routes::router(Arc::clone(&self.state))
            .oneshot(request)
            .await
            .unwrap();
        let status = response.status().as_u16();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap()
            .to_vec();
        let json = serde_json::from_slice(&bytes).unwrap_or_default();
        Answer {
            status,
            json,
            bytes,
        }
    }

    /// A request signed with `key` (none when `None`), with a JSON body
    /// when one is given.
    pub async fn call(
        &self,
        key: Option<&str>,
        method: Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Answer {
        let mut request = Request::builder().method(method).uri(path);
        if let Some(key) = key {
            request = request.header("authorization", format!("Bearer {key}"));
        }
        let body = match body {
            Some(json) => {
                request = request.header("content-type", "application/json");
                Body::from(json.to_string())
            }
            None => Body::empty(),
        };
        self.send(request.body(body).unwrap()).await
    }

    /// `GET path` as project `alpha`.
    pub async fn get(&self, path: &str) -> Answer {
        self.call(Some(ALPHA), Method::GET, path, None).await
    }

    /// `POST path` with a JSON body as project `alpha`.
    pub async fn post(&self, path: &str, body: serde_json::Value) -> Answer {
        self.call(Some(ALPHA), Method::POST, path, Some(body)).await
    }

    /// `DELETE path` as project `alpha`.
    pub async fn delete(&self, path: &str) -> Answer {
        self.call(Some(ALPHA), Method::DELETE, path, None).await
    }

    /// A multipart upload of one `file` part (and other text fields) as
    /// project `alpha`.
    pub async fn upload(
        &self,
        path: &str,
        file_name: &str,
        contents: &[u8],
        fields: &[(&str, &str)],
    ) -> Answer {
        self.upload_part(path, "file", file_name, contents, fields)
            .await
    }

    /// A multipart upload of one file part named `part` (and other text
    /// fields) as project `alpha`.
    pub async fn upload_part(
        &self,
        path: &str,
        part: &str,
        file_name: &str,
        contents: &[u8],
        fields: &[(&str, &str)],
    ) -> Answer {
        const BOUNDARY: &str = "shellgate-test-boundary";
        let mut body = Vec::new();
        for (name, value) in fields {
            body.extend_from_slice(
                format!(
                    "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n\
                     {value}\r\n"
                )
                .as_bytes(),
            );
        }
        body.extend_from_slice(
            format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{part}\"; \
                 filename=\"{file_name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(contents);
        body.extend_from_slice(format!("\r\n--{BOUNDARY}--\r\n").as_bytes());
        let request = Request::post(path)
            .header("authorization", format!("Bearer {ALPHA}"))
            .header(
                "content-type",
                format!("multipart/form-data; boundary={BOUNDARY}"),
            )
            .body(Body::from(body))
            .unwrap();
        self.send(request).await
    }

    /// Creates a container named `name` as project `alpha`; answers its id.
    pub async fn container(&self, name: &str) -> String {
        let answer = self
            .post("/v1/containers", serde_json::json!({ "name": name }))
            .await;
        answer.ok()["id"].as_str().unwrap().to_owned()
    }
}

/// An upstream that lists `models` (or cannot, when `None`), of a protocol:
/// what the model list is made of, for its tests.
pub struct Listed(
    pub Option<Vec<&'static str>>,
    pub shellgate_model::upstream::Protocol,
);

#[async_trait]
impl shellgate_model::upstream::Upstream for Listed {
    async fn complete(
        &self,
        _: &shellgate_model::upstream::Turn,
        _: Option<&shellgate_model::upstream::DeltaSink>,
    ) -> Result<shellgate_model::upstream::Reply, shellgate_model::upstream::UpstreamError> {
        Ok(shellgate_model::upstream::Reply::default())
    }
    fn protocol(&self) -> Option<shellgate_model::upstream::Protocol> {
        Some(self.1)
    }
    async fn models(
        &self,
    ) -> Option<
        Result<
            Vec<shellgate_model::upstream::UpstreamModel>,
            shellgate_model::upstream::UpstreamError,
        >,
    > {
        Some(match &self.0 {
            Some(ids) => Ok(ids
                .iter()
                .map(|id| shellgate_model::upstream::UpstreamModel {
                    id: (*id).to_owned(),
                    ..Default::default()
                })
                .collect()),
            None => Err(shellgate_model::upstream::UpstreamError::Status {
                status: 404,
                message: "no such endpoint".into(),
            }),
        })
    }
}
