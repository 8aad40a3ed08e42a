//! Processes: commands that stay attached after they start —
//! a stdin pipe or a terminal, output kept in a bounded buffer and read by
//! byte offset, signals, resizes, kills — beside one-shot commands.
//!
//! A process is started as a command is (`Request::Start`: init's marker,
//! status pipe and kill), and from then on one task of the engine (its
//! *pump*: the engine's one output pump, `super::pump`, with the process's
//! buffer as its sink) owns its output pipes or terminal master and its
//! status pipe: it reads everything the process writes, through the
//! container's secret masker, into a buffer of at most `OUTPUT_BUFFER`
//! bytes (older bytes are dropped and counted: nobody reading never grows
//! memory); once the buffer holds that much that no reader was given, it
//! reads only at the unread rate (`super::unread`): the process's writes
//! block instead of the server spinning on output nobody reads, and a
//! reader (or a client waiting at the end) lets it go on at once. It kills
//! the process at its timeout whatever clients do, and records how it
//! ended. The pump holds the container's `InFlight` until then, so a
//! container with a live process is busy (never suspended) — unless the
//! process is a *service* (`keeps_awake: false`, a kernel or a daemon): it
//! holds nothing, so idle suspension and expiry still happen, and stopping
//! the container ends it with init. `timeout_ms: 0` arms no timeout.
//! Readers wait on a `watch` of the buffer's version: no polling.
//!
//! Signals go through init (`Request::SignalCommand`: the engine has no pid
//! in the container's namespace); a resize is `TIOCSWINSZ` on the master,
//! here. A container that stops or is destroyed ends its processes with
//! init: their pipes close, the pump sees the end, readers are told.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use shellgate_egress::secrets::MaskStream;
use shellgate_sandbox_api::process::{
    process_limits, OutputRead, ProcessError, ProcessInfo, ProcessOutput, ProcessSpec,
    ProcessStatus, ProcessStream, PtySpec,
};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use super::container::{Containers, InFlight, Running};
use super::output_buffer::Buffer;
use super::pump::{Pump, Pumped, Sink, Source};
use super::unread::{DrainRate, STEP};
use super::{lock, LocalEngine};
use crate::backend::Outcome;
use crate::error::{IoContext, SandboxError};
use crate::protocol::{PtyReply, Request, StartProcess, Status};
use crate::sys;

/// Output the ended processes of one container keep together, at most (the
/// live ones keep up to `OUTPUT_BUFFER` each).
const ENDED_OUTPUT: usize = 16 << 20;

/// How long the engine waits for init's answer to a start (it answers at
/// once; only a dead init is slower).
const START_PATIENCE: Duration = Duration::from_secs(10);

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// What changes while a process runs.
struct State {
    buffer: Buffer,
    pid: Option<i32>,
    status: ProcessStatus,
    outcome: Option<Outcome>,
    ended_at: Option<u64>,
    ended: Option<Instant>,
    pty: Option<PtySpec>,
    /// A client asked for its end (kill, SIGKILL): it ends `killed`.
    kill_asked: bool,
}

/// Where its stdin goes.
enum Input {
    None,
    Pipe(pipe::Sender),
    Terminal(Arc<AsyncFd<OwnedFd>>),
}

/// One process of a container.
pub(super) struct Process {
    id: String,
    container_id: String,
    command: String,
    stdin: bool,
    created_at: u64,
    started: Instant,
    /// Init's number for it (kills and signals name it).
    command_id: u32,
    /// The container's init while the process runs (dropped at its end).
    running: Mutex<Option<Arc<Running>>>,
    state: Mutex<State>,
    /// Bumped on every new output and at the end: readers wait on it.
    version: watch::Sender<u64>,
    /// Told when a reader moved the read mark: a pump paused on a full
    /// buffer reads again.
    demand: Notify,
    input: tokio::sync::Mutex<Input>,
    master: Option<Arc<AsyncFd<OwnedFd>>>,
}

impl Process {
    fn info(&self) -> ProcessInfo {
        let state = lock(&self.state);
        self.info_of(&state)
    }

    fn info_of(&self, state: &State) -> ProcessInfo {
        ProcessInfo {
            id: self.id.clone(),
            container_id: self.container_id.clone(),
            command: self.command.clone(),
            pid: state.pid,
            status: state.status,
            pty: state.pty.clone(),
            stdin: self.stdin,
            created_at: self.created_at,
            ended_at: state.ended_at,
            outcome: state.outcome,
            output_bytes: state.buffer.end,
            duration: state
                .ended
                .unwrap_or_else(Instant::now)
                .saturating_duration_since(self.started),
        }
    }

    fn live(&self) -> bool {
        lock(&self.state).status == ProcessStatus::Running
    }

    /// Bytes of output its buffer holds.
    fn kept_bytes(&self) -> usize {
        let state = lock(&self.state);
        (state.buffer.end - state.buffer.start) as usize
    }

    fn bump(&self) {
        self.version.send_modify(|v| *v = v.wrapping_add(1));
    }

    fn running(&self) -> Result<Arc<Running>, SandboxError> {
        lock(&self.running)
            .clone()
            .ok_or_else(|| ProcessError::Exited(self.id.clone()).into())
    }

    fn push(&self, stream: ProcessStream, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        lock(&self.state).buffer.push(stream, bytes);
        self.bump();
    }

    /// Waits until it ended.
    async fn ended(&self) -> ProcessInfo {
        let mut version = self.version.subscribe();
        loop {
            version.mark_unchanged();
            if !self.live() {
                return self.info();
            }
            if version.changed().await.is_err() {
                return self.info();
            }
        }
    }
}

/// A container's processes: the live ones and the ended ones still kept.
#[derive(Default)]
pub(super) struct Table {
    processes: Mutex<TableInner>,
}

#[derive(Default)]
struct TableInner {
    kept: Vec<Arc<Process>>,
    /// Starts under way (counted against the live limit).
    starting: usize,
}

impl TableInner {
    /// Forgets ended processes past their time or past the most kept.
    fn prune(&mut self) {
        let keep_for = Duration::from_secs(process_limits::ENDED_KEPT_SECS);
        self.kept.retain(|p| {
            lock(&p.state)
                .ended
                .is_none_or(|at| at.elapsed() < keep_for)
        });
        let ended: Vec<usize> = (0..self.kept.len())
            .filter(|i| !self.kept[*i].live())
            .collect();
        // At most MAX_ENDED of them, holding at most ENDED_OUTPUT bytes
        // together: the oldest ended ones go first (kept is in start
        // order), so a container's ended processes pin little memory.
        let mut held: usize = ended.iter().map(|i| self.kept[*i].kept_bytes()).sum();
        let mut forget_count = ended.len().saturating_sub(process_limits::MAX_ENDED);
        for i in &ended[..forget_count] {
            held -= self.kept[*i].kept_bytes();
        }
        while held > ENDED_OUTPUT && forget_count < ended.len() {
            held -= self.kept[ended[forget_count]].kept_bytes();
            forget_count += 1;
        }
        if forget_count > 0 {
            let forget: Vec<usize> = ended[..forget_count].to_vec();
            let mut index = 0;
            self.kept.retain(|_| {
                let keep = !forget.contains(&index);
                index += 1;
                keep
            });
        }
    }

    fn live(&self) -> usize {
        self.kept.iter().filter(|p| p.live()).count()
    }
}

/// Gives back a reserved start slot.
struct Reserved<'a>(&'a Table);

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        let mut table = lock(&self.0.processes);
        table.starting = table.starting.saturating_sub(1);
    }
}

impl Table {
    fn find(&self, process_id: &str) -> Result<Arc<Process>, SandboxError> {
        let mut table = lock(&self.processes);
        table.prune();
        table
            .kept
            .iter()
            .find(|p| p.id == process_id)
            .cloned()
            .ok_or_else(|| ProcessError::NotFound(process_id.to_owned()).into())
    }

    /// A slot for one more live process, or the limit's error.
    fn reserve(&self, process_id: &str) -> Result<Reserved<'_>, SandboxError> {
        let mut table = lock(&self.processes);
        table.prune();
        if table.kept.iter().any(|p| p.id == process_id) {
            return Err(ProcessError::AlreadyExists(process_id.to_owned()).into());
        }
        if table.live() + table.starting >= process_limits::MAX_LIVE {
            return Err(ProcessError::TooMany {
                limit: process_limits::MAX_LIVE,
            }
            .into());
        }
        table.starting += 1;
        Ok(Reserved(self))
    }
}

/// What the pump reads.
enum Output {
    Pipes {
        stdout: pipe::Receiver,
        stderr: pipe::Receiver,
    },
    Terminal(Arc<AsyncFd<OwnedFd>>),
}

async fn write_terminal(master: &AsyncFd<OwnedFd>, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        let mut guard = master.writable().await?;
        match guard.try_io(|fd| rustix::io::write(fd.get_ref(), bytes).map_err(Into::into)) {
            Ok(Ok(n)) => bytes = &bytes[n..],
            Ok(Err(e)) => return Err(e),
            Err(_would_block) => continue,
        }
    }
    Ok(())
}

fn set_nonblocking(fd: &OwnedFd) -> std::io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(fd)?;
    rustix::fs::fcntl_setfl(fd, flags | rustix::fs::OFlags::NONBLOCK)?;
    Ok(())
}

/// How the pump ends a process.
struct ProcessPump {
    process: Arc<Process>,
    output: Output,
    status: pipe::Receiver,
    /// `None`: no timeout (a service runs until killed or its container
    /// stops).
    timeout: Option<Duration>,
    drain_grace: Duration,
    /// Bytes a second read while the buffer holds a whole OUTPUT_BUFFER
    /// nobody read (`None`: no bound).
    unread_rate: Option<u64>,
    masks: [Option<MaskStream>; 2],
    /// Its container's table, pruned when it ends (ended output is capped).
    table: Arc<Table>,
    /// The container counted busy while it runs (`None` for a service).
    in_flight: Option<InFlight>,
}

impl ProcessPump {
    async fn run(self) {
        let ProcessPump {
            process,
            output,
            status,
            timeout,
            drain_grace,
            unread_rate,
            masks,
            table,
            in_flight,
        } = self;
        let (streams, terminal) = match output {
            Output::Pipes { stdout, stderr } => {
                ([Source::Pipe(stdout), Source::Pipe(stderr)], false)
            }
            Output::Terminal(master) => ([Source::Terminal(master), Source::Absent], true),
        };
        let pump = Pump {
            streams,
            masks,
            status,
            deadline: timeout.map(|timeout| Instant::now() + timeout),
            drain_grace,
            // Output read while the buffer holds a whole OUTPUT_BUFFER
            // nobody has read: at the unread rate (see `unread`).
            unread: DrainRate::new(unread_rate, STEP, Instant::now()),
        };
        let mut sink = ProcessSink {
            process: &process,
            terminal,
            exit_status: None,
        };
        let Pumped { timed_out } = pump.run(&mut sink).await;
        let exit_status = sink.exit_status;
        {
            let mut state = lock(&process.state);
            let (status, outcome) = if timed_out {
                (ProcessStatus::Timeout, Outcome::Timeout)
            } else {
                let exit_code = exit_status.map_or(137, sys::exit_code_of);
                let status = if state.kill_asked || exit_status.is_none() {
                    ProcessStatus::Killed
                } else {
                    ProcessStatus::Exited
                };
                (status, Outcome::Exit { exit_code })
            };
            state.status = status;
            state.outcome = Some(outcome);
            state.ended_at = Some(unix_now());
            state.ended = Some(Instant::now());
        }
        lock(&process.running).take();
        lock(&table.processes).prune();
        // Writers see the end (a pipe's reader may be a leftover process).
        if let Ok(mut input) = process.input.try_lock() {
            *input = Input::None;
        }
        process.bump();
        drop(in_flight);
    }
}

/// A process's output goes to its buffer, whose room paces the pump.
struct ProcessSink<'a> {
    process: &'a Process,
    /// Its one stream is a terminal's.
    terminal: bool,
    exit_status: Option<i32>,
}

impl Sink for ProcessSink<'_> {
    fn room(&self) -> Option<usize> {
        Some(lock(&self.process.state).buffer.room())
    }

    async fn demand(&self) {
        self.process.demand.notified().await;
    }

    fn output(&mut self, stream: usize, bytes: &[u8]) {
        let stream = match (stream, self.terminal) {
            (0, true) => ProcessStream::Pty,
            (0, false) => ProcessStream::Stdout,
            _ => ProcessStream::Stderr,
        };
        self.process.push(stream, bytes);
    }

    fn status(&mut self, status: Status) {
        // Only the end: the pid came before the pump started.
        if let Status::Exited(status) = status {
            self.exit_status = Some(status);
        }
    }

    async fn kill(&mut self) {
        if let Ok(running) = self.process.running() {
            let _ = running
                .send(
                    &Request::KillCommand {
                        id: self.process.command_id,
                    },
                    &[],
                )
                .await;
        }
    }
}

/// The engine's processes: each container's table of them (made at its
/// first process, gone with the container), and how their output is read.
pub(super) struct Processes {
    tables: Mutex<HashMap<String, Arc<Table>>>,
    drain_grace: Duration,
    /// Bytes a second read while a buffer holds a whole OUTPUT_BUFFER
    /// nobody read (`None`: no bound).
    unread_rate: Option<u64>,
}

impl Processes {
    pub fn new(drain_grace: Duration, unread_rate: Option<u64>) -> Self {
        Self {
            tables: Mutex::new(HashMap::new()),
            drain_grace,
            unread_rate,
        }
    }

    /// Starts a process in container `id` (starting the container if it is
    /// stopped) and hands its output to a pump task.
    pub async fn start(
        &self,
        engine: &LocalEngine,
        id: &str,
        process_id: &str,
        spec: ProcessSpec,
    ) -> Result<ProcessInfo, SandboxError> {
        spec.validate()?;
        let container = engine.container(id).await?;
        let table = self.table(id);
        let reserved = table.reserve(process_id)?;
        let (running, in_flight) = engine.enter(&container).await?;
        let command_id = running.next_command();
        let request = Request::Start {
            id: command_id,
            start: start_request(&spec, running.reclaim_due()),
        };
        let (output, input, mut status) = send_start(&running, &request, &spec).await?;
        // Init tells at once whether it started: its pid, or why not.
        let pid = match tokio::time::timeout(START_PATIENCE, spawned(&mut status)).await {
            Ok(Ok(pid)) => pid,
            Ok(Err(errno)) => return Err(start_error(errno, spec.cwd.as_deref())),
            Err(_) => {
                running.send_now(&Request::KillCommand { id: command_id });
                return Err(SandboxError::ContainerGone);
            }
        };
        let masks = match container.masker() {
            Some(masker) => [Some(masker.stream()), Some(masker.stream())],
            None => [None, None],
        };
        let master = match &output {
            Output::Terminal(master) => Some(Arc::clone(master)),
            Output::Pipes { .. } => None,
        };
        let process = Arc::new(Process {
            id: process_id.to_owned(),
            container_id: id.to_owned(),
            command: spec.command.clone(),
            stdin: spec.stdin || spec.pty.is_some(),
            created_at: unix_now(),
            started: Instant::now(),
            command_id,
            running: Mutex::new(Some(Arc::clone(&running))),
            state: Mutex::new(State {
                buffer: Buffer::default(),
                pid: Some(pid),
                status: ProcessStatus::Running,
                outcome: None,
                ended_at: None,
                ended: None,
                pty: spec.pty.clone(),
                kill_asked: false,
            }),
            version: watch::channel(0).0,
            demand: Notify::new(),
            input: tokio::sync::Mutex::new(input),
            master,
        });
        lock(&table.processes).kept.push(Arc::clone(&process));
        drop(reserved);
        let pump = ProcessPump {
            process: Arc::clone(&process),
            output,
            status,
            timeout: (spec.timeout_ms > 0).then(|| Duration::from_millis(spec.timeout_ms)),
            drain_grace: self.drain_grace,
            unread_rate: self.unread_rate,
            masks,
            table,
            // Held for the start either way (the container must not stop
            // under it); a service lets go once it runs.
            in_flight: spec.keeps_awake.then_some(in_flight),
        };
        tokio::spawn(pump.run());
        Ok(process.info())
    }

    /// Forgets a destroyed container's processes.
    pub fn forget(&self, id: &str) {
        lock(&self.tables).remove(id);
    }

    /// A container's table of processes (made at its first process).
    fn table(&self, id: &str) -> Arc<Table> {
        Arc::clone(lock(&self.tables).entry(id.to_owned()).or_default())
    }

    fn process_of(
        &self,
        containers: &Containers,
        id: &str,
        process_id: &str,
    ) -> Result<Arc<Process>, SandboxError> {
        containers.contains(id)?;
        self.table(id).find(process_id)
    }

    pub fn list(
        &self,
        containers: &Containers,
        id: &str,
    ) -> Result<Vec<ProcessInfo>, SandboxError> {
        containers.contains(id)?;
        let table = self.table(id);
        let mut table = lock(&table.processes);
        table.prune();
        Ok(table.kept.iter().map(|p| p.info()).collect())
    }

    pub fn info(
        &self,
        containers: &Containers,
        id: &str,
        process_id: &str,
    ) -> Result<ProcessInfo, SandboxError> {
        Ok(self.process_of(containers, id, process_id)?.info())
    }

    pub async fn read_output(
        &self,
        containers: &Containers,
        id: &str,
        process_id: &str,
        read: OutputRead,
    ) -> Result<ProcessOutput, SandboxError> {
        let process = self.process_of(containers, id, process_id)?;
        let mut version = process.version.subscribe();
        let give_up = Instant::now() + read.wait;
        loop {
            version.mark_unchanged();
            {
                let mut state = lock(&process.state);
                let ended = state.status != ProcessStatus::Running;
                let (chunks, next_offset, dropped_bytes) =
                    state.buffer.read(read.after, read.max_bytes.max(1));
                // This reader has everything before `next_offset` (a
                // reader waiting at the end, all of it): a pump paused for
                // want of readers goes on.
                if state.buffer.mark_read(next_offset) {
                    process.demand.notify_one();
                }
                let something = !chunks.is_empty() || dropped_bytes > 0;
                if something || ended || Instant::now() >= give_up {
                    return Ok(ProcessOutput {
                        chunks,
                        next_offset,
                        dropped_bytes,
                        process: process.info_of(&state),
                    });
                }
            }
            if tokio::time::timeout_at(give_up, version.changed())
                .await
                .is_err()
            {
                continue; // timed out: the next round answers with nothing
            }
        }
    }

    pub async fn write_stdin(
        &self,
        containers: &Containers,
        id: &str,
        process_id: &str,
        bytes: Vec<u8>,
        eof: bool,
    ) -> Result<(), SandboxError> {
        let process = self.process_of(containers, id, process_id)?;
        if !process.stdin {
            return Err(SandboxError::InvalidRequest {
                param: "stdin",
                message: format!(
                    "process {process_id} was started without stdin (\"stdin\": true or a pty)"
                ),
            });
        }
        let exited = || SandboxError::from(ProcessError::Exited(process_id.to_owned()));
        if !process.live() {
            return Err(exited());
        }
        let mut ended = process.version.subscribe();
        let write = async {
            let mut input = process.input.lock().await;
            let result = match &mut *input {
                Input::None => return Err(exited()),
                Input::Pipe(pipe) => {
                    let written = pipe.write_all(&bytes).await;
                    if eof {
                        *input = Input::None;
                    }
                    written
                }
                Input::Terminal(master) => {
                    // A terminal's end of input is its EOF character (^D),
                    // as a user types it.
                    let mut bytes = bytes.clone();
                    if eof {
                        bytes.push(0x04);
                    }
                    write_terminal(master, &bytes).await
                }
            };
            result.map_err(|e| match e.raw_os_error() {
                Some(libc::EPIPE) | Some(libc::EIO) => exited(),
                _ => SandboxError::io("write to the process's stdin", e),
            })
        };
        // A process that stops reading and then ends must not hold the
        // write for ever.
        let end = async {
            loop {
                if !process.live() {
                    return;
                }
                if ended.changed().await.is_err() {
                    return;
                }
            }
        };
        tokio::select! {
            written = write => written,
            () = end => Err(exited()),
        }
    }

    pub async fn signal(
        &self,
        containers: &Containers,
        id: &str,
        process_id: &str,
        signal: i32,
    ) -> Result<(), SandboxError> {
        if !shellgate_sandbox_api::process::signal_allowed(signal) {
            return Err(SandboxError::InvalidRequest {
                param: "signal",
                message: format!("signal {signal} is not one that may be sent (1 to 31)"),
            });
        }
        let process = self.process_of(containers, id, process_id)?;
        let running = process.running()?;
        if signal == libc::SIGKILL {
            lock(&process.state).kill_asked = true;
        }
        running
            .send(
                &Request::SignalCommand {
                    id: process.command_id,
                    signal,
                },
                &[],
            )
            .await
    }

    pub fn resize(
        &self,
        containers: &Containers,
        id: &str,
        process_id: &str,
        cols: u16,
        rows: u16,
    ) -> Result<(), SandboxError> {
        crate::backend::check_terminal_size(cols, rows)?;
        let process = self.process_of(containers, id, process_id)?;
        let Some(master) = &process.master else {
            return Err(SandboxError::InvalidRequest {
                param: "pty",
                message: format!("process {process_id} has no terminal to resize"),
            });
        };
        if !process.live() {
            return Err(ProcessError::Exited(process_id.to_owned()).into());
        }
        let size = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ reads a winsize through a valid pointer; the
        // kernel then signals SIGWINCH to the terminal's foreground group.
        if unsafe { libc::ioctl(master.get_ref().as_raw_fd(), libc::TIOCSWINSZ, &size) } < 0 {
            return Err(SandboxError::io(
                "resize the terminal",
                std::io::Error::last_os_error(),
            ));
        }
        if let Some(pty) = lock(&process.state).pty.as_mut() {
            pty.cols = cols;
            pty.rows = rows;
        }
        Ok(())
    }

    pub async fn kill(
        &self,
        containers: &Containers,
        id: &str,
        process_id: &str,
    ) -> Result<ProcessInfo, SandboxError> {
        let process = self.process_of(containers, id, process_id)?;
        if let Ok(running) = process.running() {
            lock(&process.state).kill_asked = true;
            running
                .send(
                    &Request::KillCommand {
                        id: process.command_id,
                    },
                    &[],
                )
                .await?;
        }
        Ok(process.ended().await)
    }

    pub async fn wait(
        &self,
        containers: &Containers,
        id: &str,
        process_id: &str,
    ) -> Result<ProcessInfo, SandboxError> {
        Ok(self.process_of(containers, id, process_id)?.ended().await)
    }
}

/// What init is told to start.
fn start_request(spec: &ProcessSpec, reclaim: bool) -> StartProcess {
    StartProcess {
        command: spec.command.as_bytes().to_vec(),
        stdin: spec.stdin,
        pty: spec
            .pty
            .as_ref()
            .map(|p| (p.cols, p.rows, p.term.as_bytes().to_vec())),
        cwd: spec.cwd.clone().unwrap_or_default().into_bytes(),
        env: spec
            .env
            .iter()
            .map(|(name, value)| format!("{name}={value}").into_bytes())
            .collect(),
        reclaim,
    }
}

/// Sends the start with the process's ends (a terminal's, got back from
/// init, or pipes) and its status pipe: the output the pump reads, where
/// stdin goes, and the status pipe.
async fn send_start(
    running: &Running,
    request: &Request,
    spec: &ProcessSpec,
) -> Result<(Output, Input, pipe::Receiver), SandboxError> {
    let (status_read, status_write) = sys::pipe().context(|| "pipe".into())?;
    let (output, input) = if spec.pty.is_some() {
        let (ours, theirs) = sys::seqpacket_pair().context(|| "socketpair".into())?;
        running.send(request, &[&status_write, &theirs]).await?;
        drop((status_write, theirs));
        let master = receive_master(ours).await?;
        set_nonblocking(&master).context(|| "terminal master".into())?;
        let master =
            Arc::new(crate::children::register(master).context(|| "terminal master".into())?);
        (
            Output::Terminal(Arc::clone(&master)),
            Input::Terminal(master),
        )
    } else {
        let (stdout_read, stdout_write) = sys::pipe().context(|| "pipe".into())?;
        let (stderr_read, stderr_write) = sys::pipe().context(|| "pipe".into())?;
        let stdin = if spec.stdin {
            Some(sys::pipe().context(|| "pipe".into())?)
        } else {
            None
        };
        let mut fds = vec![&status_write, &stdout_write, &stderr_write];
        if let Some((read, _)) = &stdin {
            fds.push(read);
        }
        running.send(request, &fds).await?;
        drop((status_write, stdout_write, stderr_write));
        let input = match stdin {
            Some((read, write)) => {
                drop(read);
                Input::Pipe(pipe::Sender::from_owned_fd(write).context(|| "stdin pipe".into())?)
            }
            None => Input::None,
        };
        let output = Output::Pipes {
            stdout: pipe::Receiver::from_owned_fd(stdout_read).context(|| "stdout pipe".into())?,
            stderr: pipe::Receiver::from_owned_fd(stderr_read).context(|| "stderr pipe".into())?,
        };
        (output, input)
    };
    let status = pipe::Receiver::from_owned_fd(status_read).context(|| "status pipe".into())?;
    Ok((output, input, status))
}

/// Why a process did not start: its working directory, or another errno.
fn start_error(errno: i32, cwd: Option<&str>) -> SandboxError {
    let reason = std::io::Error::from_raw_os_error(errno);
    match cwd {
        Some(cwd) if matches!(errno, libc::ENOENT | libc::ENOTDIR | libc::EACCES) => {
            SandboxError::InvalidRequest {
                param: "cwd",
                message: format!("cannot start the process in {cwd}: {reason}"),
            }
        }
        _ => SandboxError::io("start the process", reason),
    }
}

/// The first status records of a start: its pid (`Spawned`), or the errno
/// it failed with (a failure in the child comes before `Spawned`).
async fn spawned(status: &mut pipe::Receiver) -> Result<i32, i32> {
    let mut failed = None;
    let mut record = [0u8; Status::SIZE];
    loop {
        if status.read_exact(&mut record).await.is_err() {
            return Err(failed.unwrap_or(libc::EIO));
        }
        match Status::decode(record) {
            Some(Status::Spawned(pid)) => {
                return match failed {
                    Some(errno) => Err(errno),
                    None => Ok(pid),
                }
            }
            Some(Status::SpawnFailed(errno)) => failed = Some(errno),
            _ => {}
        }
    }
}

/// The terminal master init sends on the reply socket (or its errno).
async fn receive_master(socket: OwnedFd) -> Result<OwnedFd, SandboxError> {
    set_nonblocking(&socket).context(|| "reply socket".into())?;
    let socket = crate::children::register(socket).context(|| "reply socket".into())?;
    let receive = async {
        loop {
            let mut guard = socket.readable().await.context(|| "reply socket".into())?;
            let mut payload = [0u8; 16];
            match guard.try_io(|fd| sys::recv_with_fds(fd.as_raw_fd(), &mut payload, 0)) {
                Ok(Ok((0, _))) => return Err(SandboxError::ContainerGone),
                Ok(Ok((len, fds))) => {
                    let errno = PtyReply::errno(&payload[..len]);
                    return match fds.into_iter().next() {
                        Some(master) if errno == 0 => Ok(master),
                        _ => Err(SandboxError::io(
                            "open a terminal in the container",
                            std::io::Error::from_raw_os_error(errno.max(1)),
                        )),
                    };
                }
                Ok(Err(e)) => return Err(SandboxError::io("reply socket", e)),
                Err(_would_block) => continue,
            }
        }
    };
    tokio::time::timeout(START_PATIENCE, receive)
        .await
        .map_err(|_| SandboxError::ContainerGone)?
}
