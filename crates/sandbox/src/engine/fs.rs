//! Files by path: each operation is one task for a file worker
//! in the container (see `helper::worker` and `fs_ops`), counted in flight
//! like a command (the container is busy, so neither suspended nor expired
//! under it), killed like one when its caller goes.
//!
//! Reads (`read`, `stat`, `list`, `export`) of a stopped container's
//! `/mnt/data` are served from its disk instead, beneath the data
//! directory's descriptor (the file view the Files API uses), without
//! starting it; a path that a link leads out of `/mnt/data` is asked of the
//! container after all. Everything else starts a stopped container.
//!
//! Bytes stream through pipes (1 MiB each): a download is read in chunks
//! into a bounded channel the server turns into a body, an upload is
//! written with back-pressure; no file is ever held whole. A transfer that
//! moves no byte for `EngineConfig::transfer_stall` ([`TRANSFER_STALL`],
//! 60 s, by default: a client that stopped reading, a worker that stopped
//! writing) is ended and its worker killed, so nobody can pin a worker
//! (and keep its container busy) for ever.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use shellgate_sandbox_api::fs::{
    under_workdir, ArchiveImported, FsDownload, FsEntry, FsListing, Upload, WriteOptions,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;

use super::container::{Container, InFlight, Running, Wake};
use super::LocalEngine;
use crate::error::{IoContext, SandboxError};
use crate::fs_ops::{self, Message, Output, Root, Task, TaskError, COMMIT, MAX_RESULT_BYTES};
use crate::protocol::{Request, Status};
use crate::sys;

/// A transfer moving no byte for this long is ended, its worker killed
/// (the default of `EngineConfig::transfer_stall`).
pub const TRANSFER_STALL: Duration = Duration::from_secs(60);

/// The longest a task may take apart from its stream (a stat, a listing, a
/// recursive remove; a write's rename after its last byte).
pub const TASK_TIMEOUT: Duration = Duration::from_secs(300);

/// Size of a data pipe's buffer (the default 64 KiB costs a wake-up per
/// 64 KiB on each side).
const PIPE_BYTES: usize = 1 << 20;

/// Bytes per chunk of a download, and chunks the channel holds.
const CHUNK_BYTES: usize = 256 * 1024;
const CHUNKS_BUFFERED: usize = 4;

/// Archive imports are bounded so (unless the container's disk is smaller).
pub const IMPORT_MAX_BYTES: u64 = 10 << 30;
pub const IMPORT_MAX_ENTRIES: u64 = 100_000;

/// A worker's result pipe, read one JSON line at a time (bounded).
struct Results {
    pipe: pipe::Receiver,
    buf: Vec<u8>,
    read: usize,
}

impl Results {
    /// The next message; `None` once the worker closed the pipe.
    async fn next(&mut self) -> Result<Option<Message>, SandboxError> {
        loop {
            if let Some(end) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=end).collect();
                let message = serde_json::from_slice(&line[..end]).map_err(|e| {
                    SandboxError::Setup(format!("a file worker's result did not read: {e}"))
                })?;
                return Ok(Some(message));
            }
            if self.read >= MAX_RESULT_BYTES {
                return Err(SandboxError::Setup(
                    "a file worker's result is larger than allowed".into(),
                ));
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = self
                .pipe
                .read(&mut chunk)
                .await
                .context(|| "read a file worker's result".into())?;
            if n == 0 {
                return Ok(None);
            }
            self.read += n;
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// A worker started in a container. Dropped before its end, it is killed
/// (and init kills it anyway once its status pipe closes).
struct Worker {
    running: Arc<Running>,
    id: u32,
    results: Results,
    status: pipe::Receiver,
    ended: bool,
    _in_flight: InFlight,
}

impl Drop for Worker {
    fn drop(&mut self) {
        if !self.ended {
            self.running.send_now(&Request::KillCommand { id: self.id });
        }
    }
}

impl Worker {
    /// The task's outcome: its last message (an `Opened` is skipped).
    async fn outcome(&mut self) -> Result<Output, SandboxError> {
        loop {
            match self.results.next().await? {
                Some(Message::Opened { .. }) => continue,
                Some(Message::Done { output }) => {
                    self.ended = true;
                    return Ok(output);
                }
                Some(Message::Failed { error }) => {
                    self.ended = true;
                    return Err(error.into_sandbox());
                }
                None => return Err(self.died().await),
            }
        }
    }

    /// A download's first message: what it opened and checked (then its
    /// bytes follow), or why it opened nothing. Awaited before a response
    /// starts, so a failure is an error answer, never a cut stream.
    async fn opened(&mut self) -> Result<FsEntry, SandboxError> {
        match tokio::time::timeout(TASK_TIMEOUT, self.results.next()).await {
            Ok(Ok(Some(Message::Opened { entry }))) => Ok(entry),
            Ok(Ok(Some(Message::Failed { error }))) => {
                self.ended = true;
                Err(error.into_sandbox())
            }
            Ok(Ok(Some(Message::Done { output }))) => Err(unexpected(&output)),
            Ok(Ok(None)) => Err(self.died().await),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(SandboxError::Setup(
                "the path could not be opened in time".into(),
            )),
        }
    }

    /// Why a worker ended without a result: it could not start, or it was
    /// killed (the container's memory limit, a stop).
    async fn died(&mut self) -> SandboxError {
        let mut record = [0u8; Status::SIZE];
        let read =
            tokio::time::timeout(Duration::from_secs(2), self.status.read_exact(&mut record));
        match read.await {
            Ok(Ok(_)) => match Status::decode(record) {
                Some(Status::SpawnFailed(errno)) => {
                    self.ended = true;
                    SandboxError::io(
                        "start a file worker",
                        std::io::Error::from_raw_os_error(errno),
                    )
                }
                Some(Status::Exited(status)) => {
                    self.ended = true;
                    SandboxError::Setup(format!(
                        "the file worker ended without a result (exit code {}): \
                         the container may be out of memory",
                        sys::exit_code_of(status)
                    ))
                }
                _ => SandboxError::ContainerGone,
            },
            _ => SandboxError::ContainerGone,
        }
    }
}

/// The engine's ends of a worker's data and commit pipes.
struct DataEnds {
    download: Option<pipe::Receiver>,
    upload: Option<pipe::Sender>,
    commit: Option<pipe::Sender>,
}

fn pipe_pair() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    sys::pipe().context(|| "pipe".into())
}

/// The engine's file workers: each operation on files by path is one task
/// of a worker in the container (or, for a read of a stopped container's
/// `/mnt/data`, served from its disk), and a transfer that stalls is ended.
pub(super) struct FileWorkers {
    /// How long a transfer may move no byte (see [`TRANSFER_STALL`]).
    transfer_stall: Duration,
}

impl FileWorkers {
    pub fn new(transfer_stall: Duration) -> Self {
        Self { transfer_stall }
    }

    /// Starts a worker for `task` in the container (starting it if it is
    /// stopped), counted in flight until the worker is dropped.
    async fn start_worker(
        &self,
        engine: &LocalEngine,
        container: &Container,
        task: &Task,
    ) -> Result<(Worker, DataEnds), SandboxError> {
        let (running, in_flight) = engine.enter(container).await?;
        let (status_read, status_write) = pipe_pair()?;
        let (result_read, result_write) = pipe_pair()?;
        let mut passed = vec![status_write, result_write];
        let mut ends = DataEnds {
            download: None,
            upload: None,
            commit: None,
        };
        if task.downloads() || task.uploads() {
            let (read, write) = pipe_pair()?;
            // Best effort: a smaller pipe only costs wake-ups.
            let _ = rustix::pipe::fcntl_setpipe_size(&read, PIPE_BYTES);
            if task.downloads() {
                ends.download =
                    Some(pipe::Receiver::from_owned_fd(read).context(|| "data pipe".into())?);
                passed.push(write);
            } else {
                ends.upload =
                    Some(pipe::Sender::from_owned_fd(write).context(|| "data pipe".into())?);
                passed.push(read);
                let (commit_read, commit_write) = pipe_pair()?;
                ends.commit = Some(
                    pipe::Sender::from_owned_fd(commit_write).context(|| "commit pipe".into())?,
                );
                passed.push(commit_read);
            }
        }
        let task_json = serde_json::to_vec(task)
            .map_err(|e| SandboxError::Setup(format!("encode task: {e}")))?;
        let id = running.next_command();
        let fds: Vec<&OwnedFd> = passed.iter().collect();
        running
            .send(
                &Request::Work {
                    id,
                    task: task_json,
                },
                &fds,
            )
            .await?;
        drop(passed);
        let worker = Worker {
            running,
            id,
            results: Results {
                pipe: pipe::Receiver::from_owned_fd(result_read)
                    .context(|| "result pipe".into())?,
                buf: Vec::new(),
                read: 0,
            },
            status: pipe::Receiver::from_owned_fd(status_read).context(|| "status pipe".into())?,
            ended: false,
            _in_flight: in_flight,
        };
        Ok((worker, ends))
    }

    /// Runs a task without a data stream to its end.
    async fn run_task(
        &self,
        engine: &LocalEngine,
        id: &str,
        task: Task,
    ) -> Result<Output, SandboxError> {
        let container = engine.container(id).await?;
        let (mut worker, _) = self.start_worker(engine, &container, &task).await?;
        match tokio::time::timeout(TASK_TIMEOUT, worker.outcome()).await {
            Ok(outcome) => outcome,
            Err(_) => Err(SandboxError::Setup(format!(
                "the file operation took longer than {} s and was stopped",
                TASK_TIMEOUT.as_secs()
            ))),
        }
    }

    /// A stopped container's `/mnt/data`, for a read of `path` below it;
    /// `None`: the container runs (or the path is elsewhere), ask it.
    async fn stopped_data(
        &self,
        engine: &LocalEngine,
        container: &Container,
        path: &str,
    ) -> Result<Option<(crate::files::DataDir, InFlight)>, SandboxError> {
        if under_workdir(path).is_none() {
            return Ok(None);
        }
        let running = container
            .state
            .lock()
            .await
            .as_ref()
            .is_some_and(|running| running.alive());
        if running {
            return Ok(None);
        }
        engine.files(&container.id, Wake::No).await.map(Some)
    }

    pub async fn stat(
        &self,
        engine: &LocalEngine,
        id: &str,
        path: &str,
    ) -> Result<FsEntry, SandboxError> {
        let container = engine.container(id).await?;
        if let Some((data, in_flight)) = self.stopped_data(engine, &container, path).await? {
            let owned = path.to_owned();
            let served = super::blocking(move || {
                let _in_flight = in_flight;
                Ok(fs_ops::stat(Root::Beneath(data.descriptor()), &owned))
            })
            .await?;
            match served {
                Err(TaskError::Outside { .. }) => {}
                other => return other.map_err(TaskError::into_sandbox),
            }
        }
        match self
            .run_task(
                engine,
                id,
                Task::Stat {
                    path: path.to_owned(),
                },
            )
            .await?
        {
            Output::Entry { entry } => Ok(entry),
            other => Err(unexpected(&other)),
        }
    }

    pub async fn list(
        &self,
        engine: &LocalEngine,
        id: &str,
        path: &str,
        depth: u32,
        limit: u32,
    ) -> Result<FsListing, SandboxError> {
        let container = engine.container(id).await?;
        if let Some((data, in_flight)) = self.stopped_data(engine, &container, path).await? {
            let owned = path.to_owned();
            let served = super::blocking(move || {
                let _in_flight = in_flight;
                Ok(fs_ops::list(
                    Root::Beneath(data.descriptor()),
                    &owned,
                    depth,
                    limit,
                ))
            })
            .await?;
            match served {
                Err(TaskError::Outside { .. }) => {}
                other => return other.map_err(TaskError::into_sandbox),
            }
        }
        let task = Task::List {
            path: path.to_owned(),
            depth,
            limit,
        };
        match self.run_task(engine, id, task).await? {
            Output::Listing { listing } => Ok(listing),
            other => Err(unexpected(&other)),
        }
    }

    async fn entry_task(
        &self,
        engine: &LocalEngine,
        id: &str,
        task: Task,
    ) -> Result<FsEntry, SandboxError> {
        match self.run_task(engine, id, task).await? {
            Output::Entry { entry } => Ok(entry),
            other => Err(unexpected(&other)),
        }
    }

    pub async fn remove(
        &self,
        engine: &LocalEngine,
        id: &str,
        path: &str,
        recursive: bool,
    ) -> Result<(), SandboxError> {
        let task = Task::Remove {
            path: path.to_owned(),
            recursive,
        };
        match self.run_task(engine, id, task).await? {
            Output::Removed => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// Creates a directory.
    pub async fn mkdir(
        &self,
        engine: &LocalEngine,
        id: &str,
        path: &str,
        parents: bool,
        mode: u32,
    ) -> Result<FsEntry, SandboxError> {
        let task = Task::Mkdir {
            path: path.to_owned(),
            parents,
            mode,
        };
        self.entry_task(engine, id, task).await
    }

    /// Moves (renames) an entry.
    pub async fn rename(
        &self,
        engine: &LocalEngine,
        id: &str,
        from: &str,
        to: &str,
        overwrite: bool,
    ) -> Result<FsEntry, SandboxError> {
        let task = Task::Move {
            from: from.to_owned(),
            to: to.to_owned(),
            overwrite,
        };
        self.entry_task(engine, id, task).await
    }

    /// Starts an upload of a regular file.
    pub async fn write(
        &self,
        engine: &LocalEngine,
        id: &str,
        path: &str,
        options: WriteOptions,
    ) -> Result<Box<dyn Upload<FsEntry>>, SandboxError> {
        let task = Task::Write {
            path: path.to_owned(),
            mode: options.mode,
            parents: options.parents,
            metadata: options.metadata,
        };
        self.upload(engine, id, task, expect_entry).await
    }

    /// Starts an upload of a tar archive unpacked into a directory.
    pub async fn import(
        &self,
        engine: &LocalEngine,
        id: &str,
        path: &str,
    ) -> Result<Box<dyn Upload<ArchiveImported>>, SandboxError> {
        let disk = engine.container(id).await?.spec.disk_bytes;
        let task = Task::ArchiveImport {
            path: path.to_owned(),
            max_bytes: IMPORT_MAX_BYTES.min(disk),
            max_entries: IMPORT_MAX_ENTRIES,
        };
        self.upload(engine, id, task, expect_imported).await
    }

    /// Streams a regular file.
    pub async fn read(
        &self,
        engine: &LocalEngine,
        id: &str,
        path: &str,
    ) -> Result<FsDownload, SandboxError> {
        let container = engine.container(id).await?;
        // Only a sparse file claims more than the container could hold.
        let max_bytes = container
            .spec
            .disk_bytes
            .saturating_add(container.spec.memory_bytes);
        if let Some((data, in_flight)) = self.stopped_data(engine, &container, path).await? {
            let owned = path.to_owned();
            let opened = super::blocking(move || {
                Ok(fs_ops::open_regular(
                    Root::Beneath(data.descriptor()),
                    &owned,
                    max_bytes,
                ))
            })
            .await?;
            match opened {
                Err(TaskError::Outside { .. }) => {}
                Err(error) => return Err(error.into_sandbox()),
                Ok((file, entry)) => {
                    let length = fs_ops::read_length(&entry);
                    let (tx, rx) = tokio::sync::mpsc::channel(CHUNKS_BUFFERED);
                    let file = tokio::fs::File::from_std(file);
                    let stall = self.transfer_stall;
                    tokio::spawn(async move {
                        let _in_flight = in_flight;
                        let _ = pump(file, length, &tx, stall).await;
                    });
                    return Ok(FsDownload {
                        entry: Some(entry),
                        length,
                        body: rx,
                    });
                }
            }
        }
        let task = Task::Read {
            path: path.to_owned(),
            max_bytes,
        };
        let (mut worker, mut ends) = self.start_worker(engine, &container, &task).await?;
        let entry = worker.opened().await?;
        let length = fs_ops::read_length(&entry);
        let data = ends
            .download
            .take()
            .ok_or_else(|| SandboxError::Setup("no data pipe".into()))?;
        Ok(FsDownload {
            entry: Some(entry),
            length,
            body: stream_from_worker(worker, data, length, self.transfer_stall),
        })
    }

    /// Streams a directory as a tar archive.
    pub async fn export(
        &self,
        engine: &LocalEngine,
        id: &str,
        path: &str,
        excludes: Vec<String>,
    ) -> Result<FsDownload, SandboxError> {
        // A bad pattern is a 400 before the stream starts, not a cut one.
        crate::archive::check_excludes(&excludes).map_err(|e| SandboxError::InvalidRequest {
            param: "exclude",
            message: e.to_string(),
        })?;
        let container = engine.container(id).await?;
        if let Some((data, in_flight)) = self.stopped_data(engine, &container, path).await? {
            // Opened and checked first, so a path that leaves /mnt/data is
            // asked of the container instead, and anything but a readable
            // directory is an error answer, not a cut stream.
            let owned = path.to_owned();
            let (checked, data) = super::blocking(move || {
                let opened =
                    fs_ops::open_export_directory(Root::Beneath(data.descriptor()), &owned);
                Ok((opened, data))
            })
            .await?;
            match checked {
                Err(TaskError::Outside { .. }) => {}
                Err(error) => return Err(error.into_sandbox()),
                Ok((dir, entry)) => {
                    let (tx, rx) = tokio::sync::mpsc::channel(CHUNKS_BUFFERED);
                    let runtime = tokio::runtime::Handle::current();
                    let stall = self.transfer_stall;
                    let owned = path.to_owned();
                    tokio::task::spawn_blocking(move || {
                        let _in_flight = in_flight;
                        let mut out = ChannelWriter {
                            tx: tx.clone(),
                            runtime,
                            buf: Vec::with_capacity(CHUNK_BYTES),
                            stall,
                        };
                        let exported = fs_ops::export(
                            Root::Beneath(data.descriptor()),
                            &owned,
                            &dir,
                            &excludes,
                            &mut out,
                        );
                        let flushed = std::io::Write::flush(&mut out);
                        if let Err(error) = exported {
                            let error = std::io::Error::other(error.to_string());
                            let _ = out.runtime.block_on(tx.send(Err(error)));
                        } else if let Err(error) = flushed {
                            let _ = out.runtime.block_on(tx.send(Err(error)));
                        }
                    });
                    return Ok(FsDownload {
                        entry: Some(entry),
                        length: None,
                        body: rx,
                    });
                }
            }
        }
        let task = Task::ArchiveExport {
            path: path.to_owned(),
            excludes,
        };
        let (mut worker, mut ends) = self.start_worker(engine, &container, &task).await?;
        let entry = worker.opened().await?;
        let data = ends
            .download
            .take()
            .ok_or_else(|| SandboxError::Setup("no data pipe".into()))?;
        Ok(FsDownload {
            entry: Some(entry),
            length: None,
            body: stream_from_worker(worker, data, None, self.transfer_stall),
        })
    }

    /// Starts an upload into a worker (a file written, an archive imported).
    async fn upload<T: Send + 'static>(
        &self,
        engine: &LocalEngine,
        id: &str,
        task: Task,
        expect: fn(Output) -> Result<T, SandboxError>,
    ) -> Result<Box<dyn Upload<T>>, SandboxError> {
        let container = engine.container(id).await?;
        let (worker, ends) = self.start_worker(engine, &container, &task).await?;
        Ok(Box::new(WorkerUpload {
            worker: Some(worker),
            data: ends.upload,
            commit: ends.commit,
            expect,
            stall: self.transfer_stall,
        }))
    }
}

fn expect_entry(output: Output) -> Result<FsEntry, SandboxError> {
    match output {
        Output::Entry { entry } => Ok(entry),
        other => Err(unexpected(&other)),
    }
}

fn expect_imported(output: Output) -> Result<ArchiveImported, SandboxError> {
    match output {
        Output::Imported { imported } => Ok(imported),
        other => Err(unexpected(&other)),
    }
}

fn unexpected(output: &Output) -> SandboxError {
    SandboxError::Setup(format!("a file worker answered out of turn: {output:?}"))
}

fn stalled(stall: Duration) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!(
            "the transfer moved no byte for {} s and was ended",
            stall.as_secs()
        ),
    )
}

/// Reads `source` into the channel in chunks, `length` bytes exactly if
/// known; a stall of either side ends it with an error.
async fn pump(
    mut source: impl tokio::io::AsyncRead + Unpin,
    length: Option<u64>,
    tx: &tokio::sync::mpsc::Sender<std::io::Result<Vec<u8>>>,
    stall: Duration,
) -> Result<u64, ()> {
    let mut sent = 0u64;
    loop {
        let mut chunk = Vec::with_capacity(CHUNK_BYTES);
        let read = tokio::time::timeout(stall, source.read_buf(&mut chunk)).await;
        let n = match read {
            Ok(Ok(n)) => n,
            Ok(Err(e)) => {
                let _ = tx.send(Err(e)).await;
                return Err(());
            }
            Err(_) => {
                let _ = tx.send(Err(stalled(stall))).await;
                return Err(());
            }
        };
        if n == 0 {
            if length.is_some_and(|length| sent != length) {
                let _ = tx
                    .send(Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the file ended before its size",
                    )))
                    .await;
                return Err(());
            }
            return Ok(sent);
        }
        sent += n as u64;
        match tokio::time::timeout(stall, tx.send(Ok(chunk))).await {
            Ok(Ok(())) => {}
            // The reader left, or stopped reading: end (and kill the worker).
            _ => return Err(()),
        }
    }
}

/// A worker's download as a channel of chunks; the stream ends with an
/// error if the worker reports one after its bytes.
fn stream_from_worker(
    mut worker: Worker,
    data: pipe::Receiver,
    length: Option<u64>,
    stall: Duration,
) -> tokio::sync::mpsc::Receiver<std::io::Result<Vec<u8>>> {
    let (tx, rx) = tokio::sync::mpsc::channel(CHUNKS_BUFFERED);
    tokio::spawn(async move {
        if pump(data, length, &tx, stall).await.is_err() {
            // Dropping the worker kills it.
            return;
        }
        match tokio::time::timeout(TASK_TIMEOUT, worker.outcome()).await {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => {
                let _ = tx.send(Err(std::io::Error::other(error.to_string()))).await;
            }
            Err(_) => {
                let _ = tx.send(Err(stalled(stall))).await;
            }
        }
    });
    rx
}

/// A blocking writer into a download's channel (a stopped container's
/// export, written on a blocking thread): chunks of [`CHUNK_BYTES`], each
/// sent within [`TRANSFER_STALL`] or the export ends.
struct ChannelWriter {
    tx: tokio::sync::mpsc::Sender<std::io::Result<Vec<u8>>>,
    runtime: tokio::runtime::Handle,
    buf: Vec<u8>,
    stall: Duration,
}

impl ChannelWriter {
    fn send_chunk(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK_BYTES));
        let sent = self
            .runtime
            .block_on(tokio::time::timeout(self.stall, self.tx.send(Ok(chunk))));
        match sent {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe)),
            Err(_) => Err(stalled(self.stall)),
        }
    }
}

impl std::io::Write for ChannelWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= CHUNK_BYTES {
            self.send_chunk()?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send_chunk()
    }
}

/// An upload into a worker. Dropped unfinished, the worker is told (its
/// data ends without the commit byte): it removes what it wrote and ends;
/// it is killed if it has not within a few seconds.
struct WorkerUpload<T> {
    worker: Option<Worker>,
    data: Option<pipe::Sender>,
    commit: Option<pipe::Sender>,
    expect: fn(Output) -> Result<T, SandboxError>,
    stall: Duration,
}

#[async_trait]
impl<T: Send + 'static> Upload<T> for WorkerUpload<T> {
    async fn write(&mut self, chunk: &[u8]) -> Result<(), SandboxError> {
        let data = self
            .data
            .as_mut()
            .ok_or_else(|| SandboxError::Setup("the upload is closed".into()))?;
        match tokio::time::timeout(self.stall, data.write_all(chunk)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(SandboxError::io("send the upload", e)),
            Err(_) => Err(SandboxError::io("send the upload", stalled(self.stall))),
        }
    }

    async fn finish(mut self: Box<Self>) -> Result<T, SandboxError> {
        // The data's end, then the commit: the worker may make it count.
        self.data.take();
        if let Some(mut commit) = self.commit.take() {
            let _ = commit.write_all(&[COMMIT]).await;
        }
        let mut worker = self
            .worker
            .take()
            .ok_or_else(|| SandboxError::Setup("the upload is finished".into()))?;
        match tokio::time::timeout(TASK_TIMEOUT, worker.outcome()).await {
            Ok(outcome) => outcome.and_then(self.expect),
            Err(_) => Err(SandboxError::Setup(format!(
                "the upload was not committed within {} s",
                TASK_TIMEOUT.as_secs()
            ))),
        }
    }
}

/// How long an abandoned upload's worker may take to clean up.
const ABANDON_GRACE: Duration = Duration::from_secs(10);

impl<T> Drop for WorkerUpload<T> {
    fn drop(&mut self) {
        let Some(mut worker) = self.worker.take() else {
            return;
        };
        // Without the commit byte: the worker sees a cut upload.
        self.data.take();
        self.commit.take();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = tokio::time::timeout(ABANDON_GRACE, worker.outcome()).await;
            });
        }
    }
}
