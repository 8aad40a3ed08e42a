//! Shared set-up for the integration tests: a real engine whose helper is the
//! real `shellgate` binary, on a data directory of its own.

#![allow(dead_code)]

pub mod server;

use std::path::{Path, PathBuf};
use std::time::Duration;

use shellgate_sandbox::backend::{
    CommandResult, ContainerSpec, Outcome, RunRequest, SandboxBackend,
};
use shellgate_sandbox::{EngineConfig, LocalEngine};

pub const BINARY: &str = env!("CARGO_BIN_EXE_shellgate");

/// A fresh directory under the target directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "shellgate-test-{name}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
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

/// No warm containers, spare helpers or disk pool (so parallel tests do
/// not compete with background work).
fn quiet(config: &mut EngineConfig) {
    config.pool_size = 0;
    config.spare_helpers = 0;
    config.warm_containers = 0;
}

/// An engine on its own data directory.
pub struct TestEngine {
    pub engine: LocalEngine,
    pub dir: TempDir,
}

impl TestEngine {
    /// An engine without warm containers, spare helpers or disk pool (so
    /// parallel tests do not compete with background work).
    pub async fn new(name: &str) -> Self {
        Self::with(name, quiet).await
    }

    /// Ends this engine as a server's stop does, keeping its directory.
    pub async fn stop(self) -> TempDir {
        self.engine.shutdown().await;
        self.dir
    }

    /// A new engine (as [`Self::new`] makes) on `dir`'s data directory:
    /// what a restarted server finds.
    pub async fn reopen(dir: TempDir) -> Self {
        let mut config = EngineConfig::new(dir.path().join("data"));
        config.helper_binary = PathBuf::from(BINARY);
        quiet(&mut config);
        let (engine, _warnings) = LocalEngine::open(config).await.expect("open engine");
        TestEngine { engine, dir }
    }

    pub async fn with(name: &str, adjust: impl FnOnce(&mut EngineConfig)) -> Self {
        let dir = TempDir::new(name);
        let mut config = EngineConfig::new(dir.path().join("data"));
        config.helper_binary = PathBuf::from(BINARY);
        adjust(&mut config);
        let (engine, _warnings) = LocalEngine::open(config).await.expect("open engine");
        TestEngine { engine, dir }
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub async fn create(&self, id: &str) {
        self.create_with(id, ContainerSpec::default()).await;
    }

    pub async fn create_with(&self, id: &str, spec: ContainerSpec) {
        self.engine
            .create(id, spec)
            .await
            .expect("create container");
    }

    /// Runs one command with a timeout and the default output cap.
    pub async fn run_with(&self, id: &str, command: &str, timeout_ms: u64) -> CommandResult {
        let mut request = RunRequest::new(vec![command.to_owned()]);
        request.timeout_ms = timeout_ms;
        let mut results =
            tokio::time::timeout(Duration::from_secs(120), self.engine.run(id, request))
                .await
                .expect("run finished in time")
                .expect("run");
        results.remove(0)
    }

    pub async fn run(&self, id: &str, command: &str) -> CommandResult {
        self.run_with(id, command, 30_000).await
    }

    /// Runs a command that must exit 0 and returns its stdout.
    pub async fn ok(&self, id: &str, command: &str) -> String {
        let result = self.run(id, command).await;
        assert_eq!(
            result.outcome,
            Outcome::Exit { exit_code: 0 },
            "{command}: {result:?}"
        );
        result.stdout
    }

    pub async fn finish(self) {
        self.engine.shutdown().await;
    }
}

pub fn exit_code(result: &CommandResult) -> i32 {
    match result.outcome {
        Outcome::Exit { exit_code } => exit_code,
        Outcome::Timeout => panic!("unexpected timeout: {result:?}"),
    }
}

/// Whether a host process exists and is not a zombie.
pub fn process_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .map(|rest| !rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// How often [`wait_until`] and [`eventually`] look again.
const POLL: Duration = Duration::from_millis(20);

/// Waits until `condition` holds, looking every 20 ms, for at most
/// `timeout`; answers whether it held. What a test waits for (a process
/// gone, a row written, a server up) is a condition, never a fixed sleep:
/// the wait is as short as the machine allows, and the timeout only bounds
/// a failure.
pub fn wait_until(mut condition: impl FnMut() -> bool, timeout: Duration) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(POLL);
    }
    condition()
}

/// Host processes (not zombies) whose command line contains `needle`:
/// a sandbox's processes are the host's too, so a test sees a command
/// start or end without running another one in the container.
pub fn processes_matching(needle: &str) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid != std::process::id() as i32)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                String::from_utf8_lossy(&cmdline)
                    .replace('\0', " ")
                    .contains(needle)
            })
        })
        .filter(|pid| process_alive(*pid))
        .count()
}

/// [`wait_until`] for async tests: polls `check` until it holds or `limit`
/// passes, without blocking the runtime.
pub async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(POLL).await;
    }
    check()
}

/// [`eventually`] for a condition that is itself async (a command run in
/// a container, say).
pub async fn eventually_async<F, Check>(limit: Duration, mut check: Check) -> bool
where
    Check: FnMut() -> F,
    F: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(POLL).await;
    }
    check().await
}

/// Peak resident memory (`VmHWM`) of a process, in KiB; `"self"` for ours.
pub fn peak_rss_kib(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}
