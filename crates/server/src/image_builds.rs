//! The image-build service: one way to make a project's image, whether a
//! client asks it (`POST /v1/images`, `server::images`) or E2B's template
//! API does (`e2b::templates`).
//!
//! A job builds a Dockerfile subset in a build sandbox
//! (`shellgate_sandbox_api::image_build`: root steps as the root of the
//! sandbox's own user namespace, committed with its `ENV`/`WORKDIR`) or
//! imports an OCI image layout or `docker save`/`podman save` archive
//! (`SandboxBackend::import_image`). Either way the image is the
//! project's: only its containers are made from it and only it lists it,
//! as an image committed from a container; a name another project (or the
//! operator) holds is refused.
//!
//! - A job is a row (`image_builds`) written `queued` before it runs, then
//!   `building`, `ready` or `error`; its log entries (at most
//!   [`MAX_LOG_ENTRIES`], each at most [`MAX_LOG_MESSAGE`] bytes) are
//!   written as they come, and read back by offset.
//! - It runs in a task of its own, so a client that hangs up cancels
//!   nothing; one job of a project runs at a time (the others queue), each
//!   within [`BUILD_DEADLINE`]; the image is installed only when it is
//!   whole (the builder and the import stage it and rename it in).
//! - A job the server stopped during is failed at its next start
//!   ([`fail_unfinished`]; in a cluster, its node's, or when its node is
//!   declared lost); its build sandbox, a container the store does not
//!   know, is removed by the start-up recovery.
//! - In a cluster a job runs on the node that takes it (its row and log
//!   are the store's: any replica reads them); the image it made is put in
//!   the object store before the job is `ready` (`image_archives`), and
//!   any node installs it on first use.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use shellgate_sandbox_api::backend::{check_memory, NetworkSpec};
use shellgate_sandbox_api::dockerfile::Dockerfile;
use shellgate_sandbox_api::image::ImageInfo;
use shellgate_sandbox_api::image_build::{
    self, BuildError, BuildLogLine, BuildRequest, ContextPart, LogLevel,
};
use shellgate_store::{ImageBuildRow, IMAGE_BUILD_QUEUED};
use shellgate_wire::{ImageBuild, ImageBuildError, ImageBuildLogEntry};
use tokio::sync::{mpsc, oneshot};

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// Log entries kept per job.
pub const MAX_LOG_ENTRIES: usize = 10_000;
/// The longest log message kept (a longer one is cut).
pub const MAX_LOG_MESSAGE: usize = 4096;
/// Log entries one status answer carries at most.
pub const MAX_LOG_PAGE: usize = 1000;
/// How long a job may take, queueing not counted.
pub const BUILD_DEADLINE: Duration = image_build::DEFAULT_BUILD_DEADLINE;
/// The build sandbox's memory (at most the engine's ceiling) and disk.
const BUILD_MEMORY: u64 = 2 << 30;
const BUILD_DISK: u64 = 8 << 30;

/// What a job makes its image from.
pub(crate) enum Source {
    /// A Dockerfile run in a build sandbox with `network` as its egress
    /// policy; `context` holds the tars `COPY` reads.
    Dockerfile {
        dockerfile: Dockerfile,
        context: Vec<ContextFile>,
        network: NetworkSpec,
    },
    /// An OCI image layout (as a tar) or a `docker save` archive.
    Archive(File),
}

/// A tar of the build context, an open (unnamed) file, and where in the
/// context it goes.
pub(crate) struct ContextFile {
    pub file: File,
    pub dir: String,
}

/// A job to run.
pub(crate) struct Job {
    /// Its id (`None`: a new one).
    pub id: Option<String>,
    pub project: String,
    pub image: String,
    pub source: Source,
}

/// Why a job made no image: what its status says.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub message: String,
    /// The Dockerfile step that failed (from 1) and its line.
    pub step: Option<(usize, usize)>,
}

/// What a job's waiter is told when it ends.
pub(crate) type Finished = Result<ImageInfo, Failure>;

/// The image builds of this process's projects: one at a time each.
fn project_lock(project: &str) -> Arc<tokio::sync::Mutex<()>> {
    static LOCKS: std::sync::LazyLock<crate::named_locks::NamedLocks> =
        std::sync::LazyLock::new(Default::default);
    LOCKS.of(project)
}

/// Refuses an image name no job may take: 1 to 64 letters, digits, `.`,
/// `_` or `-`, not starting with `.`; not `host`.
pub(crate) fn check_name(name: &str) -> ApiResult<()> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if !valid {
        return Err(ApiError::invalid(
            "name",
            format!(
                "invalid image name {name:?}: 1 to 64 letters, digits, '.', '_' or '-', not \
                 starting with '.'"
            ),
        ));
    }
    if name == shellgate_sandbox_api::image::HOST_IMAGE {
        return Err(ApiError::invalid(
            "name",
            format!("{name:?} is one of shellgate's own images: choose another name"),
        ));
    }
    Ok(())
}

/// Records `job` as queued and starts it: its row, and what it ends with.
/// Checks first what it can (the name, the base image), so a job that
/// cannot run is a 400 rather than a failed job.
pub(crate) async fn submit(
    state: &Arc<AppState>,
    job: Job,
) -> ApiResult<(ImageBuildRow, oneshot::Receiver<Finished>)> {
    check_name(&job.image)?;
    let images = crate::sandboxes::containers::image_list(state).await?;
    if let Some(existing) = images.iter().find(|i| i.name == job.image) {
        if existing.details.project.as_deref() != Some(job.project.as_str()) {
            return Err(ApiError::conflict(format!(
                "an image named {:?} exists and is not this project's: choose another name",
                job.image
            )));
        }
    }
    let mut base_held = None;
    if let Source::Dockerfile { dockerfile, .. } = &job.source {
        let usable = images.iter().any(|image| {
            image.name == dockerfile.from
                && crate::sandboxes::containers::usable_by(image, &job.project)
        });
        if !usable {
            return Err(ApiError::invalid(
                "dockerfile",
                format!(
                    "FROM {}: no such image of this project's (GET /v1/images lists them)",
                    dockerfile.from
                ),
            ));
        }
        // A cluster's base this node does not hold yet is fetched, and
        // kept on this node until the job ends.
        base_held = crate::image_archives::hold(state, &dockerfile.from).await?;
    }
    let now = crate::time::now();
    let row = ImageBuildRow {
        id: job
            .id
            .clone()
            .unwrap_or_else(|| shellgate_wire::new_id("imgb")),
        project: job.project.clone(),
        image: job.image.clone(),
        kind: match job.source {
            Source::Dockerfile { .. } => "build",
            Source::Archive(_) => "import",
        }
        .to_owned(),
        status: IMAGE_BUILD_QUEUED.to_owned(),
        reason: None,
        failed_step: None,
        revision: None,
        node_id: state.node_name.clone(),
        created_at: now,
        updated_at: now,
    };
    let stored = row.clone();
    state.db(move |s| s.insert_image_build(&stored)).await?;
    let (done, finished) = oneshot::channel();
    tokio::spawn(run(
        Arc::clone(state),
        row.clone(),
        job.source,
        done,
        base_held,
    ));
    Ok((row, finished))
}

/// Deletes image `name` of `project` (`DELETE /v1/images/{name}`, and a
/// template's delete): one of the project's own; another project's or a
/// missing one is a 404, the operator's and shellgate's own a 400. The
/// engine keeps its tree while containers made from it still run.
pub(crate) async fn delete_image(
    state: &Arc<AppState>,
    project: &str,
    name: &str,
) -> ApiResult<()> {
    if crate::image_archives::archived(state)
        && crate::image_archives::delete(state, project, name)
            .await?
            .is_some()
    {
        return Ok(());
    }
    let images = crate::sandboxes::containers::image_list(state).await?;
    let image = images
        .iter()
        .find(|i| i.name == name && crate::sandboxes::containers::usable_by(i, project))
        .ok_or_else(|| ApiError::not_found("image", name))?;
    if image.details.project.is_none() {
        return Err(ApiError::invalid(
            "name",
            format!(
                "image {name} is built in (the server's, every project's): only a project's own \
                 images are deleted"
            ),
        ));
    }
    match state.engine.delete_image(name, project).await {
        Ok(()) => Ok(()),
        Err(shellgate_sandbox_api::SandboxError::ImageNotFound(_)) => {
            Err(ApiError::not_found("image", name))
        }
        Err(other) => Err(other.into()),
    }
}

/// Sends a job's log entries to the store in order, as they come.
fn log_writer(
    state: &Arc<AppState>,
    id: &str,
) -> (
    mpsc::UnboundedSender<ImageBuildLogEntry>,
    tokio::task::JoinHandle<()>,
) {
    let (sender, mut entries) = mpsc::unbounded_channel::<ImageBuildLogEntry>();
    let (state, id) = (Arc::clone(state), id.to_owned());
    let writer = tokio::spawn(async move {
        let mut batch = Vec::new();
        while entries.recv_many(&mut batch, 256).await > 0 {
            let lines: Vec<String> = batch
                .drain(..)
                .filter_map(|entry| serde_json::to_string(&entry).ok())
                .collect();
            let build = id.clone();
            if let Err(e) = state
                .db(move |s| s.append_image_build_logs(&build, &lines))
                .await
            {
                tracing::warn!(build = %id, "cannot write the build's log: {}", e.message);
            }
        }
    });
    (sender, writer)
}

/// A log line as stored: its time, and its message cut to
/// [`MAX_LOG_MESSAGE`].
fn entry(line: BuildLogLine) -> ImageBuildLogEntry {
    let mut message = line.message;
    if message.len() > MAX_LOG_MESSAGE {
        let mut cut = MAX_LOG_MESSAGE;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push_str(" [cut]");
    }
    ImageBuildLogEntry {
        timestamp: shellgate_wire::time::rfc3339(crate::time::now()),
        level: line.level.name().to_owned(),
        step: line.step as u64,
        line: line.line as u64,
        message,
    }
}

/// An open file by a path the engine can open (this process's descriptor).
fn fd_path(file: &File) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

/// Runs a job to its end, in its project's turn, and records it;
/// `_base` keeps a cluster's base image on this node until then.
async fn run(
    state: Arc<AppState>,
    row: ImageBuildRow,
    source: Source,
    done: oneshot::Sender<Finished>,
    _base: Option<crate::image_archives::Held>,
) {
    let lock = project_lock(&row.project);
    let _one_at_a_time = lock.lock().await;
    // Until its row is written, a cluster's sweep leaves the image alone.
    let _making = crate::image_archives::Making::new(&row.image);
    let (sender, writer) = log_writer(&state, &row.id);
    let mut written = 0usize;
    let mut log = move |line: BuildLogLine| {
        written += 1;
        if written < MAX_LOG_ENTRIES {
            let _ = sender.send(entry(line));
        } else if written == MAX_LOG_ENTRIES {
            let _ = sender.send(entry(BuildLogLine {
                step: line.step,
                line: line.line,
                level: LogLevel::Warn,
                message: format!(
                    "the log holds its most entries ({MAX_LOG_ENTRIES}); the rest is not kept"
                ),
            }));
        }
    };
    let id = row.id.clone();
    let started = state
        .db(move |s| s.start_image_build(&id, crate::time::now()))
        .await;
    let outcome = match started {
        Ok(true) => perform(&state, &row, source, &mut log).await,
        Ok(false) => Err(Failure {
            message: "the build was ended before it started".into(),
            step: None,
        }),
        Err(e) => Err(Failure {
            message: format!("cannot start the build: {}", e.message),
            step: None,
        }),
    };
    // A cluster's image is in the object store before its job is ready.
    let outcome = match outcome {
        Ok(image) if crate::image_archives::archived(&state) => {
            match crate::image_archives::publish(&state, &image.name).await {
                Ok(()) => Ok(image),
                Err(e) => Err(Failure {
                    message: format!(
                        "the image could not be put in the object store: {}",
                        e.message
                    ),
                    step: None,
                }),
            }
        }
        other => other,
    };
    match &outcome {
        Ok(image) => log(BuildLogLine {
            step: 0,
            line: 0,
            level: LogLevel::Info,
            message: format!("image {} ready", image.name),
        }),
        Err(failure) => log(BuildLogLine {
            step: failure.step.map_or(0, |(step, _)| step),
            line: failure.step.map_or(0, |(_, line)| line),
            level: LogLevel::Error,
            message: failure.message.clone(),
        }),
    }
    // Every entry is written before the status says the job ended.
    drop(log);
    let _ = writer.await;
    let recorded = match &outcome {
        Ok(image) => Ok(image.details.revision.clone()),
        Err(failure) => Err((
            failure.message.clone(),
            failure.step.map(|(step, _)| step as i64),
        )),
    };
    let id = row.id.clone();
    if let Err(e) = state
        .db(move |s| s.finish_image_build(&id, recorded, crate::time::now()))
        .await
    {
        tracing::error!(build = %row.id, "cannot record the build's end: {}", e.message);
    }
    let _ = done.send(outcome);
}

/// The job's work: the build or the import, within the deadline.
async fn perform(
    state: &Arc<AppState>,
    row: &ImageBuildRow,
    source: Source,
    log: &mut (dyn FnMut(BuildLogLine) + Send),
) -> Finished {
    match source {
        Source::Dockerfile {
            dockerfile,
            context,
            network,
        } => {
            let base_config = crate::sandboxes::containers::image_list(state)
                .await
                .ok()
                .and_then(|images| images.into_iter().find(|i| i.name == dockerfile.from))
                .and_then(|image| image.details.config)
                .unwrap_or_default();
            let memory_bytes = BUILD_MEMORY.min(state.engine.memory_ceiling());
            if let Err(e) = check_memory(memory_bytes, state.engine.memory_ceiling()) {
                return Err(Failure {
                    message: format!("the build sandbox's memory: {e}"),
                    step: None,
                });
            }
            // The files stay open (and named by descriptor) until the
            // build has read them.
            let parts: Vec<ContextPart> = context
                .iter()
                .map(|part| ContextPart {
                    tar: fd_path(&part.file),
                    dir: part.dir.clone(),
                })
                .collect();
            let request = BuildRequest {
                name: row.image.clone(),
                project: row.project.clone(),
                dockerfile,
                context: parts,
                network,
                memory_bytes,
                disk_bytes: BUILD_DISK,
                deadline: std::time::Instant::now() + BUILD_DEADLINE,
                base_config,
            };
            let sandbox = shellgate_wire::new_id("imgbuild");
            let built = image_build::build(
                state.engine.as_ref(),
                &sandbox,
                request,
                log,
                std::future::pending(),
            )
            .await;
            drop(context);
            built.map_err(|e| match e {
                BuildError::Step {
                    step,
                    line,
                    keyword,
                    message,
                } => Failure {
                    message: format!("step {step} ({keyword}) failed: {message}"),
                    step: Some((step, line)),
                },
                BuildError::Deadline => Failure {
                    message: format!(
                        "the build took longer than {} minutes",
                        BUILD_DEADLINE.as_secs() / 60
                    ),
                    step: None,
                },
                other => Failure {
                    message: other.to_string(),
                    step: None,
                },
            })
        }
        Source::Archive(file) => {
            log(BuildLogLine {
                step: 0,
                line: 0,
                level: LogLevel::Info,
                message: format!("importing image {}", row.image),
            });
            let path = fd_path(&file);
            let imported = tokio::time::timeout(
                BUILD_DEADLINE,
                state.engine.import_image(&row.image, &row.project, &path),
            )
            .await;
            drop(file);
            match imported {
                Ok(Ok(image)) => Ok(image),
                Ok(Err(e)) => Err(Failure {
                    message: e.to_string(),
                    step: None,
                }),
                Err(_) => Err(Failure {
                    message: format!(
                        "the import took longer than {} minutes",
                        BUILD_DEADLINE.as_secs() / 60
                    ),
                    step: None,
                }),
            }
        }
    }
}

/// The project's job `id` as the API shows it, with at most `limit` log
/// entries from `offset` on.
pub(crate) async fn status(
    state: &AppState,
    project: &str,
    id: &str,
    offset: u64,
    limit: usize,
) -> ApiResult<ImageBuild> {
    let (owner, wanted) = (project.to_owned(), id.to_owned());
    let row = state
        .db(move |s| s.image_build(&owner, &wanted))
        .await?
        .ok_or_else(|| ApiError::not_found("image build", id))?;
    let logs = logs(state, &row.id, offset, limit).await?;
    Ok(build_object(row, logs, offset))
}

/// At most `limit` of job `id`'s log entries from `offset` on.
pub(crate) async fn logs(
    state: &AppState,
    id: &str,
    offset: u64,
    limit: usize,
) -> ApiResult<Vec<ImageBuildLogEntry>> {
    let build = id.to_owned();
    let offset = i64::try_from(offset).unwrap_or(i64::MAX);
    let limit = limit.min(MAX_LOG_PAGE) as i64;
    let lines = state
        .db(move |s| s.image_build_logs(&build, offset, limit))
        .await?;
    lines
        .iter()
        .map(|line| serde_json::from_str::<ImageBuildLogEntry>(line))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ApiError::internal(format!("a stored build log entry: {e}")))
}

/// A row with a page of its log as the API's object.
pub(crate) fn build_object(
    row: ImageBuildRow,
    logs: Vec<ImageBuildLogEntry>,
    offset: u64,
) -> ImageBuild {
    let error = (row.status == shellgate_store::IMAGE_BUILD_ERROR).then(|| ImageBuildError {
        message: row
            .reason
            .clone()
            .unwrap_or_else(|| "the build failed".into()),
        step: row.failed_step,
    });
    ImageBuild {
        next_log_offset: offset + logs.len() as u64,
        id: row.id,
        object: "image.build".to_owned(),
        image: row.image,
        kind: row.kind,
        status: row.status,
        error,
        revision: row.revision,
        created_at: row.created_at,
        updated_at: row.updated_at,
        logs,
    }
}

/// At start-up: the jobs this node left queued or building are failed.
pub(crate) async fn fail_unfinished(state: &AppState) {
    let node = state.node_name.clone();
    let outcome = state
        .db(move |s| {
            s.fail_unfinished_image_builds(
                &node,
                "the server stopped during the build; build the image again",
                crate::time::now(),
            )
        })
        .await;
    match outcome {
        Ok(failed) if !failed.is_empty() => {
            tracing::warn!(
                "{} image builds were interrupted by a server stop",
                failed.len()
            );
        }
        Ok(_) => {}
        Err(e) => tracing::error!("cannot fail interrupted image builds: {}", e.message),
    }
}

/// A context tar as the builder reads it: plain, whatever it came as (a
/// gzipped one is unpacked into a new unnamed file in `dir`, at most `cap`
/// bytes), each member's name checked. Blocking: call it off the async
/// workers.
pub(crate) fn plain_context(file: File, dir: &std::path::Path, cap: u64) -> Result<File, String> {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = file;
    let mut magic = [0u8; 2];
    let read = file.read(&mut magic).map_err(|e| e.to_string())?;
    file.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
    let mut plain = if read == 2 && magic == [0x1f, 0x8b] {
        let mut out = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_TMPFILE)
            .mode(0o600)
            .open(dir)
            .map_err(|e| format!("cannot spool the context: {e}"))?;
        let copied = std::io::copy(
            &mut flate2::read::GzDecoder::new(std::io::BufReader::new(file)).take(cap + 1),
            &mut out,
        )
        .map_err(|e| format!("not a gzipped tar: {e}"))?;
        if copied > cap {
            return Err(format!("more than {cap} bytes unpacked"));
        }
        out.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
        out
    } else {
        file
    };
    check_tar_names(&mut plain)?;
    plain.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
    Ok(plain)
}

/// Refuses a tar whose members (or hard links' targets) are absolute or
/// climb out with `..`, or that is not a tar: a context the builder would
/// refuse anyway, refused before the job is made. (The unpacking checks
/// every member again, links included.)
fn check_tar_names(reader: &mut impl std::io::Read) -> Result<(), String> {
    let mut header = [0u8; 512];
    let mut long_name: Option<String> = None;
    let mut members = 0usize;
    loop {
        if let Err(e) = reader.read_exact(&mut header) {
            return if members > 0 || e.kind() != std::io::ErrorKind::UnexpectedEof {
                Err(format!("the tar ends inside a member: {e}"))
            } else {
                Err("the context is empty: a tar is expected".into())
            };
        }
        if header.iter().all(|b| *b == 0) {
            return if members == 0 {
                Err("the context holds no file: a tar is expected".into())
            } else {
                Ok(())
            };
        }
        let computed: u64 = header
            .iter()
            .enumerate()
            .map(|(i, b)| {
                if (148..156).contains(&i) {
                    32
                } else {
                    u64::from(*b)
                }
            })
            .sum();
        let checksum = octal(&header[148..156]);
        if checksum != Some(computed) {
            return Err("not a tar (a header's checksum is wrong)".into());
        }
        let size = octal(&header[124..136]).ok_or("not a tar (a size is not octal)")?;
        let kind = header[156];
        let padded = size.div_ceil(512) * 512;
        if kind == b'L' || kind == b'x' || kind == b'K' {
            if size > 1 << 20 {
                return Err("a long name or pax record is over 1 MiB".into());
            }
            let mut data = vec![0u8; padded as usize];
            reader.read_exact(&mut data).map_err(|e| e.to_string())?;
            data.truncate(size as usize);
            match kind {
                b'L' => long_name = Some(text(&data)),
                b'x' => {
                    for record in String::from_utf8_lossy(&data).lines() {
                        if let Some((_, value)) = record.split_once(" path=") {
                            long_name = Some(value.to_owned());
                        }
                        if let Some((_, value)) = record.split_once(" linkpath=") {
                            check_member(value)?;
                        }
                    }
                }
                _ => check_member(&text(&data))?,
            }
            continue;
        }
        let name = long_name.take().unwrap_or_else(|| {
            let prefix = text(&header[345..500]);
            let name = text(&header[0..100]);
            if prefix.is_empty() || &header[257..262] != b"ustar" {
                name
            } else {
                format!("{prefix}/{name}")
            }
        });
        check_member(&name)?;
        if kind == b'1' {
            check_member(&text(&header[157..257]))?;
        }
        members += 1;
        std::io::copy(
            &mut std::io::Read::take(&mut *reader, padded),
            &mut std::io::sink(),
        )
        .map_err(|e| e.to_string())?;
    }
}

fn text(field: &[u8]) -> String {
    let end = field.iter().position(|b| *b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

fn octal(field: &[u8]) -> Option<u64> {
    let digits: String = text(field).trim().to_owned();
    if digits.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(&digits, 8).ok()
}

fn check_member(name: &str) -> Result<(), String> {
    if name.starts_with('/') || name.split('/').any(|part| part == "..") {
        return Err(format!(
            "the context's member {name:?} leaves the context (absolute, or through '..')"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-member tar made by hand (ustar, as `tar` writes it).
    fn tar_of(name: &str) -> Vec<u8> {
        let mut header = [0u8; 512];
        header[..name.len()].copy_from_slice(name.as_bytes());
        header[100..108].copy_from_slice(b"0000644\0");
        header[124..136].copy_from_slice(b"00000000003\0");
        header[156] = b'0';
        header[257..263].copy_from_slice(b"ustar\0");
        header[148..156].copy_from_slice(b"        ");
        let sum: u32 = header.iter().map(|b| u32::from(*b)).sum();
        header[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        let mut tar = header.to_vec();
        tar.extend_from_slice(b"hi\n");
        tar.resize(1024, 0);
        tar.extend_from_slice(&[0u8; 1024]);
        tar
    }

    #[test]
    fn a_context_that_climbs_out_or_is_no_tar_is_refused() {
        assert_eq!(
            check_tar_names(&mut tar_of("app/hello.txt").as_slice()),
            Ok(())
        );
        for bad in ["../etc/passwd", "/etc/passwd", "a/../../b"] {
            let refused = check_tar_names(&mut tar_of(bad).as_slice()).expect_err(bad);
            assert!(refused.contains("leaves the context"), "{refused}");
        }
        assert!(check_tar_names(&mut &b"FROM scratch\n"[..]).is_err());
        assert!(check_tar_names(&mut &[0u8; 1024][..]).is_err());
    }

    #[test]
    fn names_are_checked_and_host_is_refused() {
        for good in ["app", "my-image_1.2"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", ".hidden", "a/b", "host", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_long_log_message_is_cut_on_a_character() {
        let long = "é".repeat(MAX_LOG_MESSAGE);
        let cut = entry(BuildLogLine {
            step: 2,
            line: 3,
            level: LogLevel::Warn,
            message: long,
        });
        assert!(
            cut.message.len() <= MAX_LOG_MESSAGE + 6,
            "{}",
            cut.message.len()
        );
        assert!(cut.message.ends_with(" [cut]"));
        assert_eq!((cut.step, cut.line, cut.level.as_str()), (2, 3, "warn"));
    }
}
