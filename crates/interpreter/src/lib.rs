//! A stateful code interpreter run inside a container: the kernel, its
//! contexts, its executions.
//!
//! A *context* is one kernel process — the image's `python3` running the
//! embedded `kernel.py` — started through the backend's process API as a
//! *service* (no timeout, not holding the container awake: idle suspension
//! and expiry still happen, and end it). Requests go in as JSON lines on its
//! stdin; events come back as JSON lines on its stdout, read by offset from
//! the engine's bounded output buffer ([`protocol`]). The code's own
//! stdout/stderr never mix with that channel: the kernel reads them from
//! pipes and sends them as events. Python cells are read as IPython reads
//! them (an indented cell dedented; `!cmd`, `%magic`, `%%magic` rewritten
//! to the kernel's stand-in for IPython's shell; top-level `await`), and a
//! matplotlib figure comes back as a PNG with its data as E2B's `chart`. A
//! bash context is the same kernel hosting one long-lived `bash` that
//! sources each cell (variables, functions and `cd` carry over; a failed
//! cell's exit status is its error); a JavaScript or TypeScript context
//! hosts one Node REPL, a Java context one JShell, each fed cells on a pipe
//! of its own and answering on another.
//!
//! Bounds: [`MAX_CONTEXTS`] contexts per container, [`MAX_CODE_BYTES`] of
//! code, one execution at a time per context (a second *waits* for the
//! first, within its own timeout), and what a kernel emits per execution
//! (kernel.py: 1 MiB of stdout+stderr, 64 results of at most 768 KiB each).
//!
//! An execution ends at its `done` event; at its timeout, or when the
//! caller's events receiver is dropped (the client left), the kernel is
//! asked to interrupt that execution and sends itself SIGINT (a
//! `KeyboardInterrupt` in the code; the context and its variables stay),
//! only while that execution runs, so a late interrupt never lands in the
//! next; if the execution has not ended [`INTERRUPT_GRACE`] later, the
//! kernel is killed and started again (its state is lost, and the caller is
//! told so).
//!
//! An execution may name tools of the client's ([`Execute::tools`],
//! Anthropic's programmatic tool calling): each is a function of the cell,
//! whose call the kernel sends as a `tool_calls` event
//! ([`ExecutionEvent::ToolCalls`]) and waits on until
//! [`Interpreters::answer_tool_call`] writes its result to the kernel's
//! stdin; the execution's time does not run while it waits.

#[cfg(test)]
mod kernel_tests;
pub mod protocol;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use shellgate_sandbox_api::process::{OutputRead, ProcessSpec, ProcessStatus, ProcessStream};
use shellgate_sandbox_api::{SandboxBackend, SandboxError};
use tokio::sync::mpsc;
use tokio::time::Instant;

pub use protocol::{CodeTool, CodeToolCall, DisplayData, ToolFailure};
use protocol::{Event, Framed, Lines, Request};

/// Contexts one container may have at once (each is a python process).
pub const MAX_CONTEXTS: usize = 16;
/// Largest code of one execution.
pub const MAX_CODE_BYTES: usize = 1 << 20;
/// Most environment variables an execution or a context may set.
pub const MAX_ENV: usize = 64;
/// How long an interrupted execution has to end before its kernel is
/// killed and started again.
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(3);
/// How long a new kernel has to say it is ready (a first python start in
/// a cold container on a loaded machine).
pub const START_PATIENCE: Duration = Duration::from_secs(60);
/// The working directory of a context made without one (E2B's).
pub const DEFAULT_CWD: &str = "/home/user";
/// Where a default context runs when the image has no `/home/user`.
const FALLBACK_CWD: &str = "/mnt/data";
/// Largest read of the kernel's output at once.
const READ_BYTES: usize = 1 << 20;
/// Longest single wait for the kernel's output (then the loop looks again).
const READ_WAIT: Duration = Duration::from_secs(30);
/// The most of a failed kernel's own stderr quoted in its error.
const STDERR_KEPT: usize = 2048;

/// The variable telling kernel.py its context's language
/// ([`Language::name`]); the kernel removes it before any user code runs.
const KERNEL_LANGUAGE_ENV: &str = "SHELLGATE_KERNEL_LANGUAGE";

/// A context's language: Python; bash (one long-lived bash sourcing each
/// cell); JavaScript or TypeScript (one long-lived Node REPL, TypeScript's
/// types stripped by Node); Java (one long-lived JShell). Each is served
/// where the image has its runtime (the first cell says when it has not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    Python,
    #[serde(alias = "js")]
    JavaScript,
    #[serde(alias = "ts")]
    TypeScript,
    Java,
    Bash,
}

impl Language {
    /// By E2B's name (`python`, `javascript` or `js`, `typescript` or
    /// `ts`, `java`, `bash`), any case, around spaces.
    pub fn parse(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "python" | "python3" => Some(Self::Python),
            "javascript" | "js" => Some(Self::JavaScript),
            "typescript" | "ts" => Some(Self::TypeScript),
            "java" => Some(Self::Java),
            "bash" => Some(Self::Bash),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Python => "python",
            Self::JavaScript => "javascript",
            Self::TypeScript => "typescript",
            Self::Java => "java",
            Self::Bash => "bash",
        }
    }
}

/// A context as E2B shows it (`{"id", "language", "cwd"}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContextInfo {
    pub id: String,
    pub language: Language,
    pub cwd: String,
}

/// One execution asked for.
#[derive(Debug, Clone)]
pub struct Execute {
    pub code: String,
    /// The context to run in; the language's default context when `None`.
    pub context_id: Option<String>,
    /// The default context's language (Python when `None`); with a
    /// `context_id`, it must be that context's, if given.
    pub language: Option<Language>,
    /// Set for this execution only (restored after).
    pub env_vars: Vec<(String, String)>,
    /// Interrupted when it passes; the time the code waits on the client
    /// for its tools' results does not count.
    pub timeout: Duration,
    /// The client's tools the code may call (a Python context's): each
    /// call pauses the code until [`Interpreters::answer_tool_call`]
    /// gives its result.
    pub tools: Vec<CodeTool>,
}

/// What an execution produces, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum ExecutionEvent {
    Stdout {
        text: String,
        timestamp_us: i64,
    },
    Stderr {
        text: String,
        timestamp_us: i64,
    },
    /// Boxed: it is much the largest event.
    Result(Box<DisplayData>),
    Error {
        name: String,
        value: String,
        traceback: String,
    },
    ExecutionCount(u32),
    /// The code called the client's tools and waits for their results.
    ToolCalls(Vec<CodeToolCall>),
}

/// Why an execution was cut short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interruption {
    TimedOut,
    /// The events receiver was dropped.
    CallerLeft,
}

/// How an execution ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionSummary {
    pub context_id: String,
    pub execution_count: Option<u32>,
    /// The code raised (an `Error` event was sent).
    pub failed: bool,
    pub interrupted: Option<Interruption>,
    /// The kernel had to be killed and started again (state lost): after
    /// an interrupt it ignored, or because it had died (its container was
    /// suspended) before this execution.
    pub restarted: bool,
    pub duration: Duration,
}

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
pub enum InterpreterError {
    #[error("context {0:?} not found")]
    ContextNotFound(String),
    #[error("{param}: {message}")]
    InvalidRequest {
        param: &'static str,
        message: String,
    },
    #[error("the sandbox already has {limit} code contexts (its limit); remove one first")]
    TooManyContexts { limit: usize },
    #[error("the code interpreter's kernel failed: {0}")]
    KernelFailed(String),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
}

pub type Result<T, E = InterpreterError> = std::result::Result<T, E>;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

fn check_env(env: &[(String, String)], param: &'static str) -> Result<()> {
    if env.len() > MAX_ENV {
        return Err(InterpreterError::InvalidRequest {
            param,
            message: format!("at most {MAX_ENV} variables"),
        });
    }
    for (name, value) in env {
        let name_ok = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !name_ok || value.contains('\0') || name.len() + value.len() > 32 * 1024 {
            return Err(InterpreterError::InvalidRequest {
                param,
                message: format!(
                    "{name:?} must be a variable name (letters, digits, '_') with a value under 32 KiB and no NUL"
                ),
            });
        }
    }
    Ok(())
}

/// A running kernel: its process and where its output was read to.
struct Kernel {
    process_id: String,
    offset: u64,
    lines: Lines,
    /// The end of its own stderr (python's failures before it redirects).
    stderr: Vec<u8>,
}

/// What reading the kernel gave.
enum Read {
    Framed(Vec<Framed>),
    /// Nothing within the wait.
    Nothing,
    /// The process ended.
    Ended,
}

impl Kernel {
    async fn read(
        &mut self,
        backend: &dyn SandboxBackend,
        container: &str,
        wait: Duration,
    ) -> Result<Read> {
        let output = backend
            .read_process_output(
                container,
                &self.process_id,
                OutputRead {
                    after: self.offset,
                    max_bytes: READ_BYTES,
                    wait,
                },
            )
            .await?;
        let mut framed = Vec::new();
        if output.dropped_bytes > 0 {
            framed.push(self.lines.dropped(output.dropped_bytes));
        }
        for chunk in &output.chunks {
            match chunk.stream {
                ProcessStream::Stdout | ProcessStream::Pty => {
                    framed.extend(self.lines.push(&chunk.data))
                }
                ProcessStream::Stderr => {
                    self.stderr.extend_from_slice(&chunk.data);
                    let excess = self.stderr.len().saturating_sub(STDERR_KEPT);
                    self.stderr.drain(..excess);
                }
            }
        }
        self.offset = output.next_offset;
        if !framed.is_empty() {
            return Ok(Read::Framed(framed));
        }
        let ended = output.process.status != ProcessStatus::Running
            && output.next_offset >= output.process.output_bytes;
        Ok(if ended { Read::Ended } else { Read::Nothing })
    }

    fn failure(&self, what: &str) -> InterpreterError {
        let stderr = String::from_utf8_lossy(&self.stderr);
        let stderr = stderr.trim();
        InterpreterError::KernelFailed(if stderr.is_empty() {
            what.to_owned()
        } else {
            format!("{what}: {stderr}")
        })
    }
}

/// One context.
struct Context {
    info: ContextInfo,
    /// Its variables (the sandbox's and its own), given to every kernel.
    env: Vec<(String, String)>,
    /// The running kernel's process id, for a kill that must not wait for
    /// the execution holding `kernel`.
    process_id: Mutex<Option<String>>,
    /// Held for an execution: one at a time.
    kernel: tokio::sync::Mutex<Option<Kernel>>,
}

/// A container's contexts.
#[derive(Default)]
struct Contexts {
    list: Vec<Arc<Context>>,
    defaults: HashMap<Language, String>,
}

/// The code interpreter of every container.
pub struct Interpreters {
    backend: Arc<dyn SandboxBackend>,
    containers: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Contexts>>>>,
    /// Numbers executions, so an interrupt names the one it is for.
    executions: std::sync::atomic::AtomicU64,
}

impl Interpreters {
    pub fn new(backend: Arc<dyn SandboxBackend>) -> Self {
        Self {
            backend,
            containers: Mutex::new(HashMap::new()),
            executions: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn contexts_of(&self, container: &str) -> Arc<tokio::sync::Mutex<Contexts>> {
        Arc::clone(
            lock(&self.containers)
                .entry(container.to_owned())
                .or_default(),
        )
    }

    fn existing(&self, container: &str) -> Option<Arc<tokio::sync::Mutex<Contexts>>> {
        lock(&self.containers).get(container).cloned()
    }

    /// A new context with its own kernel (started now).
    pub async fn create_context(
        &self,
        container: &str,
        language: Language,
        cwd: Option<&str>,
        env: &[(String, String)],
    ) -> Result<ContextInfo> {
        let contexts = self.contexts_of(container);
        let mut contexts = contexts.lock().await;
        self.create_locked(container, &mut contexts, language, cwd, env)
            .await
            .map(|c| c.info.clone())
    }

    async fn create_locked(
        &self,
        container: &str,
        contexts: &mut Contexts,
        language: Language,
        cwd: Option<&str>,
        env: &[(String, String)],
    ) -> Result<Arc<Context>> {
        if let Some(cwd) = cwd {
            if !cwd.starts_with('/') || cwd.contains('\0') || cwd.len() > 4096 {
                return Err(InterpreterError::InvalidRequest {
                    param: "cwd",
                    message: "cwd must be an absolute path inside the sandbox".into(),
                });
            }
        }
        check_env(env, "env_vars")?;
        if contexts.list.len() >= MAX_CONTEXTS {
            return Err(InterpreterError::TooManyContexts {
                limit: MAX_CONTEXTS,
            });
        }
        let mut info = ContextInfo {
            id: shellgate_wire::new_id("ctx_"),
            language,
            cwd: cwd.unwrap_or(DEFAULT_CWD).to_owned(),
        };
        let kernel = match self.start_kernel(container, language, &info.cwd, env).await {
            // An image without E2B's home: the default context runs where
            // commands do.
            Err(InterpreterError::Sandbox(SandboxError::InvalidRequest {
                param: "cwd", ..
            })) if cwd.is_none() => {
                info.cwd = FALLBACK_CWD.to_owned();
                self.start_kernel(container, language, &info.cwd, env)
                    .await?
            }
            other => other?,
        };
        let context = Arc::new(Context {
            info,
            env: env.to_vec(),
            process_id: Mutex::new(Some(kernel.process_id.clone())),
            kernel: tokio::sync::Mutex::new(Some(kernel)),
        });
        contexts.list.push(Arc::clone(&context));
        Ok(context)
    }

    /// Starts a kernel and waits until it is ready.
    async fn start_kernel(
        &self,
        container: &str,
        language: Language,
        cwd: &str,
        env: &[(String, String)],
    ) -> Result<Kernel> {
        let process_id = shellgate_wire::new_id("kernel_");
        // kernel.py reads (and forgets) its language from its environment.
        let mut kernel_env = vec![(KERNEL_LANGUAGE_ENV.to_owned(), language.name().to_owned())];
        kernel_env.extend_from_slice(env);
        let spec = ProcessSpec {
            command: protocol::BOOTSTRAP.to_owned(),
            stdin: true,
            pty: None,
            timeout_ms: 0,
            keeps_awake: false,
            env: kernel_env,
            cwd: Some(cwd.to_owned()),
        };
        self.backend
            .start_process(container, &process_id, spec)
            .await?;
        let mut kernel = Kernel {
            process_id,
            offset: 0,
            lines: Lines::default(),
            stderr: Vec::new(),
        };
        let started = self.boot(container, &mut kernel).await;
        if started.is_err() {
            let _ = self
                .backend
                .kill_process(container, &kernel.process_id)
                .await;
        }
        started.map(|()| kernel)
    }

    async fn boot(&self, container: &str, kernel: &mut Kernel) -> Result<()> {
        self.backend
            .write_process_stdin(container, &kernel.process_id, protocol::boot_line(), false)
            .await?;
        let give_up = Instant::now() + START_PATIENCE;
        loop {
            let wait = give_up
                .saturating_duration_since(Instant::now())
                .min(READ_WAIT);
            if wait.is_zero() {
                return Err(kernel.failure("it did not start in time"));
            }
            match kernel.read(self.backend.as_ref(), container, wait).await? {
                Read::Framed(framed) => {
                    if framed
                        .iter()
                        .any(|f| matches!(f, Framed::Event(Event::Ready {})))
                    {
                        return Ok(());
                    }
                }
                Read::Nothing => {}
                Read::Ended => {
                    return Err(kernel.failure("it exited at start (is python3 in the image?)"))
                }
            }
        }
    }

    /// The container's contexts, oldest first.
    pub async fn contexts(&self, container: &str) -> Vec<ContextInfo> {
        match self.existing(container) {
            Some(contexts) => contexts
                .lock()
                .await
                .list
                .iter()
                .map(|c| c.info.clone())
                .collect(),
            None => Vec::new(),
        }
    }

    /// The container's contexts with the default context of each of
    /// `languages` (made now if it has none) listed first, in that order:
    /// E2B's sandboxes start with Python's and JavaScript's, made before any
    /// by hand. A default whose kernel does not start is left out.
    pub async fn contexts_with_defaults(
        &self,
        container: &str,
        languages: &[Language],
    ) -> Vec<ContextInfo> {
        let contexts = self.contexts_of(container);
        let mut contexts = contexts.lock().await;
        let mut defaults = Vec::new();
        for &language in languages {
            let existing = contexts.defaults.get(&language).cloned();
            let id = match existing {
                Some(id) if contexts.list.iter().any(|c| c.info.id == id) => id,
                _ => match self
                    .create_locked(container, &mut contexts, language, None, &[])
                    .await
                {
                    Ok(context) => {
                        let id = context.info.id.clone();
                        contexts.defaults.insert(language, id.clone());
                        id
                    }
                    Err(_) => continue,
                },
            };
            defaults.push(id);
        }
        let rank = |context: &Arc<Context>| {
            defaults
                .iter()
                .position(|id| *id == context.info.id)
                .unwrap_or(defaults.len())
        };
        // Stable: the contexts made by hand keep their order.
        contexts.list.sort_by_key(rank);
        contexts.list.iter().map(|c| c.info.clone()).collect()
    }

    async fn find(&self, container: &str, id: &str) -> Result<Arc<Context>> {
        let contexts = self
            .existing(container)
            .ok_or_else(|| InterpreterError::ContextNotFound(id.to_owned()))?;
        let contexts = contexts.lock().await;
        contexts
            .list
            .iter()
            .find(|c| c.info.id == id)
            .cloned()
            .ok_or_else(|| InterpreterError::ContextNotFound(id.to_owned()))
    }

    /// Removes a context and kills its kernel (an execution in it ends).
    pub async fn remove_context(&self, container: &str, id: &str) -> Result<()> {
        let contexts = self
            .existing(container)
            .ok_or_else(|| InterpreterError::ContextNotFound(id.to_owned()))?;
        let context = {
            let mut contexts = contexts.lock().await;
            let at = contexts
                .list
                .iter()
                .position(|c| c.info.id == id)
                .ok_or_else(|| InterpreterError::ContextNotFound(id.to_owned()))?;
            contexts.defaults.retain(|_, default| default != id);
            contexts.list.remove(at)
        };
        self.kill_kernel(container, &context).await;
        Ok(())
    }

    /// Kills a context's kernel and starts a fresh one (its state is gone).
    pub async fn restart_context(&self, container: &str, id: &str) -> Result<()> {
        let context = self.find(container, id).await?;
        self.kill_kernel(container, &context).await;
        let mut kernel = context.kernel.lock().await;
        *kernel = None;
        let fresh = self
            .start_kernel(
                container,
                context.info.language,
                &context.info.cwd,
                &context.env,
            )
            .await?;
        *lock(&context.process_id) = Some(fresh.process_id.clone());
        *kernel = Some(fresh);
        Ok(())
    }

    async fn kill_kernel(&self, container: &str, context: &Context) {
        let process_id = lock(&context.process_id).take();
        if let Some(process_id) = process_id {
            // Already gone (its container stopped) is as good as killed.
            let _ = self.backend.kill_process(container, &process_id).await;
        }
    }

    /// Forgets a container's contexts (it was suspended or deleted: its
    /// kernels ended with it).
    pub fn forget_container(&self, container: &str) {
        lock(&self.containers).remove(container);
    }

    /// The context an execution runs in.
    async fn context_for(&self, container: &str, asked: &Execute) -> Result<Arc<Context>> {
        if let Some(id) = &asked.context_id {
            let context = self.find(container, id).await?;
            if asked.language.is_some_and(|l| l != context.info.language) {
                return Err(InterpreterError::InvalidRequest {
                    param: "language",
                    message: "give a context_id or a language, not both".into(),
                });
            }
            return Ok(context);
        }
        let language = asked.language.unwrap_or(Language::Python);
        let contexts = self.contexts_of(container);
        let mut contexts = contexts.lock().await;
        let default = contexts.defaults.get(&language).cloned();
        if let Some(context) =
            default.and_then(|id| contexts.list.iter().find(|c| c.info.id == id).cloned())
        {
            return Ok(context);
        }
        let context = self
            .create_locked(container, &mut contexts, language, None, &[])
            .await?;
        contexts.defaults.insert(language, context.info.id.clone());
        Ok(context)
    }

    /// Runs code in a context, sending its events as they come. Interrupts
    /// it at its timeout or when `events` is closed; the context stays.
    pub async fn execute(
        &self,
        container: &str,
        asked: Execute,
        events: mpsc::Sender<ExecutionEvent>,
    ) -> Result<ExecutionSummary> {
        if asked.code.len() > MAX_CODE_BYTES {
            return Err(InterpreterError::InvalidRequest {
                param: "code",
                message: format!("code must be at most {MAX_CODE_BYTES} bytes"),
            });
        }
        check_env(&asked.env_vars, "env_vars")?;
        let started = Instant::now();
        let deadline = started + asked.timeout;
        let context = self.context_for(container, &asked).await?;
        // One execution at a time: a second waits (within its timeout).
        let mut kernel = tokio::select! {
            kernel = context.kernel.lock() => kernel,
            () = events.closed() => return Ok(self.summary(&context, started, Some(Interruption::CallerLeft))),
            () = tokio::time::sleep_until(deadline) => {
                return Ok(self.summary(&context, started, Some(Interruption::TimedOut)))
            }
        };
        let mut summary = self.summary(&context, started, None);
        let env: BTreeMap<&str, &str> = asked
            .env_vars
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let execution = self
            .executions
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let request = Request::Execute {
            id: execution,
            code: &asked.code,
            env,
            tools: &asked.tools,
        }
        .line();
        // A kernel that died (its container was suspended) is started again.
        if !self.send(container, kernel.as_mut(), &request).await {
            *lock(&context.process_id) = None;
            let fresh = self
                .start_kernel(
                    container,
                    context.info.language,
                    &context.info.cwd,
                    &context.env,
                )
                .await?;
            *lock(&context.process_id) = Some(fresh.process_id.clone());
            let fresh = kernel.insert(fresh);
            summary.restarted = true;
            let _ = events
                .send(ExecutionEvent::Stderr {
                    text: "[shellgate: this context's kernel had stopped (its sandbox was paused or suspended); a new one was started, and its variables are gone]\n".into(),
                    timestamp_us: now_us(),
                })
                .await;
            if !self.send(container, Some(fresh), &request).await {
                return Err(fresh.failure("it does not take input"));
            }
        }
        let Some(running) = kernel.as_mut() else {
            return Err(InterpreterError::KernelFailed("no kernel".into()));
        };
        let ended = self
            .follow(
                container,
                running,
                execution,
                &events,
                deadline,
                &mut summary,
            )
            .await;
        match ended {
            Ok(true) => {}
            Ok(false) => {
                // It ignored the interrupt (or died): a fresh kernel.
                let _ = self
                    .backend
                    .kill_process(container, &running.process_id)
                    .await;
                *lock(&context.process_id) = None;
                let fresh = self
                    .start_kernel(
                        container,
                        context.info.language,
                        &context.info.cwd,
                        &context.env,
                    )
                    .await?;
                *lock(&context.process_id) = Some(fresh.process_id.clone());
                *kernel = Some(fresh);
                summary.restarted = true;
                summary.failed = true;
                let _ = events
                    .send(ExecutionEvent::Error {
                        name: "KernelRestarted".into(),
                        value: "the execution did not stop when interrupted (or the kernel died); the context's kernel was started again and its variables are gone".into(),
                        traceback: String::new(),
                    })
                    .await;
            }
            Err(error) => return Err(error),
        }
        summary.duration = started.elapsed();
        Ok(summary)
    }

    /// Gives the code running in context `context_id` the client's result
    /// for its tool call `call_id`: `content` is the call's return value,
    /// or with `failure` the message of the error it raises. A call the
    /// kernel no longer waits on ignores it.
    pub async fn answer_tool_call(
        &self,
        container: &str,
        context_id: &str,
        call_id: &str,
        content: &str,
        failure: Option<ToolFailure>,
    ) -> Result<()> {
        let context = self.find(container, context_id).await?;
        let process_id = lock(&context.process_id)
            .clone()
            .ok_or_else(|| InterpreterError::KernelFailed("no kernel".into()))?;
        let request = Request::ToolResult {
            id: call_id,
            content,
            error: failure,
        }
        .line();
        for piece in request.chunks(shellgate_sandbox_api::process::process_limits::MAX_STDIN_WRITE)
        {
            self.backend
                .write_process_stdin(container, &process_id, piece.to_vec(), false)
                .await?;
        }
        Ok(())
    }

    fn summary(
        &self,
        context: &Context,
        started: Instant,
        interrupted: Option<Interruption>,
    ) -> ExecutionSummary {
        ExecutionSummary {
            context_id: context.info.id.clone(),
            execution_count: None,
            failed: false,
            interrupted,
            restarted: false,
            duration: started.elapsed(),
        }
    }

    /// Writes a request; false if the kernel is gone.
    async fn send(&self, container: &str, kernel: Option<&mut Kernel>, request: &[u8]) -> bool {
        let Some(kernel) = kernel else { return false };
        for piece in request.chunks(shellgate_sandbox_api::process::process_limits::MAX_STDIN_WRITE)
        {
            if self
                .backend
                .write_process_stdin(container, &kernel.process_id, piece.to_vec(), false)
                .await
                .is_err()
            {
                return false;
            }
        }
        true
    }

    /// Forwards the execution's events until its `done`; true if it ended,
    /// false if the kernel must be replaced.
    async fn follow(
        &self,
        container: &str,
        kernel: &mut Kernel,
        execution: u64,
        events: &mpsc::Sender<ExecutionEvent>,
        mut deadline: Instant,
        summary: &mut ExecutionSummary,
    ) -> Result<bool> {
        let mut give_up: Option<Instant> = None;
        // The tool calls the code waits on, and since when: the deadline
        // stands still meanwhile (the client's time is not the code's).
        let mut waiting: std::collections::HashSet<String> = std::collections::HashSet::new();
        let mut paused_at: Option<Instant> = None;
        loop {
            let paused = paused_at.is_some() && give_up.is_none();
            let limit = give_up.unwrap_or(deadline);
            let wait = if paused {
                READ_WAIT
            } else {
                limit
                    .saturating_duration_since(Instant::now())
                    .min(READ_WAIT)
            };
            let read = tokio::select! {
                read = kernel.read(self.backend.as_ref(), container, wait) => Some(read),
                () = events.closed(), if give_up.is_none() => None,
            };
            let read = match read {
                None => {
                    summary.interrupted = Some(Interruption::CallerLeft);
                    give_up = Some(self.interrupt(container, kernel, execution).await);
                    continue;
                }
                Some(Ok(read)) => read,
                Some(Err(InterpreterError::Sandbox(SandboxError::Process(_)))) => return Ok(false),
                Some(Err(error)) => return Err(error),
            };
            match read {
                Read::Framed(framed) => {
                    for item in framed {
                        let event = match item {
                            Framed::Event(Event::Done {}) => return Ok(true),
                            Framed::Event(Event::Ready {}) => continue,
                            Framed::Event(Event::Stdout { text }) => {
                                ExecutionEvent::Stdout { text, timestamp_us: now_us() }
                            }
                            Framed::Event(Event::Stderr { text }) => {
                                ExecutionEvent::Stderr { text, timestamp_us: now_us() }
                            }
                            Framed::Event(Event::Result(data)) => ExecutionEvent::Result(data),
                            Framed::Event(Event::Error { name, value, traceback }) => {
                                summary.failed = true;
                                ExecutionEvent::Error { name, value, traceback }
                            }
                            Framed::Event(Event::Count { n }) => {
                                summary.execution_count = Some(n);
                                ExecutionEvent::ExecutionCount(n)
                            }
                            Framed::Event(Event::ToolCalls { calls }) => {
                                waiting.extend(calls.iter().map(|call| call.id.clone()));
                                paused_at.get_or_insert_with(Instant::now);
                                ExecutionEvent::ToolCalls(calls)
                            }
                            Framed::Event(Event::ToolAnswered { id }) => {
                                waiting.remove(&id);
                                if waiting.is_empty() {
                                    if let Some(since) = paused_at.take() {
                                        deadline += since.elapsed();
                                    }
                                }
                                continue;
                            }
                            Framed::Lost(bytes) => ExecutionEvent::Stderr {
                                text: format!("[shellgate: {bytes} bytes of the kernel's output were lost (it wrote faster than it was read)]\n"),
                                timestamp_us: now_us(),
                            },
                        };
                        // A receiver gone is seen by `closed()` next round.
                        let _ = events.send(event).await;
                    }
                }
                Read::Ended => return Ok(false),
                Read::Nothing => {}
            }
            let paused = paused_at.is_some() && give_up.is_none();
            if !paused && Instant::now() >= limit {
                if give_up.is_some() {
                    return Ok(false);
                }
                summary.interrupted = Some(Interruption::TimedOut);
                give_up = Some(self.interrupt(container, kernel, execution).await);
            }
        }
    }

    /// Asks the kernel to interrupt `execution` (a SIGINT to it and the
    /// code's children, sent by the kernel itself only while that execution
    /// runs: one that ended meanwhile is not hit, nor the next); returns
    /// when to give up on it.
    async fn interrupt(&self, container: &str, kernel: &mut Kernel, execution: u64) -> Instant {
        let request = Request::Interrupt { id: execution }.line();
        // A kernel gone is seen by the next read.
        let _ = self.send(container, Some(kernel), &request).await;
        Instant::now() + INTERRUPT_GRACE
    }
}
