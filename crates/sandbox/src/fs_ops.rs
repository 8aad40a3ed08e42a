//! The file tasks of files by path: read, write, stat, list,
//! mkdir, move, remove, archive export and import, as one typed [`Task`].
//!
//! A task runs in a *worker* (`helper::worker`): a child of the container's
//! init that became the sandbox user, inside the container's namespaces and
//! cgroups, so it may do exactly what a command may, and paths resolve as a
//! command's do ([`Root::Container`]). The reads of a stopped container's
//! `/mnt/data` run in the server instead, beneath the data directory's
//! descriptor ([`Root::Beneath`]: `openat2` with `RESOLVE_BENEATH`, so no
//! link leaves it; one that tries is [`TaskError::Outside`], and the engine
//! asks the container instead).
//!
//! Either way nothing is opened for reading but a regular file: every open
//! is `O_NONBLOCK | O_NOCTTY` (a FIFO cannot block it, a terminal cannot
//! become the worker's) and checked with `fstat` before a byte is read;
//! magic links (`/proc/self/fd/N`, `/proc/1/root`) are not followed.
//!
//! The worker tells the engine what happened in [`Message`]s, one JSON line
//! each, on its result pipe; bytes go on the data pipe (`sendfile` out,
//! `splice` in). An upload takes effect only once the engine says the whole
//! body arrived (one byte on the commit pipe, [`COMMIT`]); without it the
//! temporary file is removed and the old file stays.

use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, FileType, Mode, RenameFlags};
use serde::{Deserialize, Serialize};
use shellgate_sandbox_api::fs::{
    under_workdir, ArchiveImported, FsEntry, FsKind, FsListing, METADATA_XATTR_PREFIX,
};

use crate::error::SandboxError;
use crate::fs_remove::{self, RemoveError};
use crate::sys::{self, RESOLVE_BENEATH, RESOLVE_NO_MAGICLINKS};

/// The byte the engine writes on the commit pipe once an upload's body
/// arrived whole.
pub const COMMIT: u8 = b'C';

/// Most bytes of result messages the engine reads from one worker (a
/// listing of 10,000 entries with long names fits).
pub const MAX_RESULT_BYTES: usize = 16 << 20;

/// A listing stops (`truncated`) once its entries' paths and link targets
/// add up to this much, well within what the engine reads of a result
/// ([`MAX_RESULT_BYTES`]) however long the names.
const MAX_LISTING_TEXT_BYTES: usize = 8 << 20;

/// A zero-size regular file (`/proc` shows its files so) is read until its
/// end, but at most this much.
const UNSIZED_READ_LIMIT: u64 = 16 << 20;

/// One file task, as the engine sends it to init (JSON).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Task {
    /// Send a regular file's bytes on the data pipe; `max_bytes` refuses a
    /// sparse file claiming more than the container could hold.
    Read {
        path: String,
        max_bytes: u64,
    },
    /// Write the data pipe's bytes to `path` (via a temporary file beside
    /// it, renamed once committed).
    Write {
        path: String,
        mode: u32,
        parents: bool,
        /// Set as `user.e2b.*` attributes of the new file.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        metadata: BTreeMap<String, String>,
    },
    Stat {
        path: String,
    },
    List {
        path: String,
        depth: u32,
        limit: u32,
    },
    Mkdir {
        path: String,
        parents: bool,
        mode: u32,
    },
    Move {
        from: String,
        to: String,
        overwrite: bool,
    },
    Remove {
        path: String,
        recursive: bool,
    },
    /// Send a directory as a tar stream on the data pipe.
    ArchiveExport {
        path: String,
        excludes: Vec<String>,
    },
    /// Unpack the data pipe's tar stream into a directory (committed).
    ArchiveImport {
        path: String,
        max_bytes: u64,
        max_entries: u64,
    },
}

impl Task {
    /// Whether the task reads a data pipe the engine writes (an upload).
    pub fn uploads(&self) -> bool {
        matches!(self, Task::Write { .. } | Task::ArchiveImport { .. })
    }

    /// Whether the task writes a data pipe the engine reads (a download).
    pub fn downloads(&self) -> bool {
        matches!(self, Task::Read { .. } | Task::ArchiveExport { .. })
    }
}

/// What a worker says, one JSON line each on its result pipe.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    /// A read's file (an export's directory) is open and checked; its
    /// bytes (the archive) follow on the data pipe.
    Opened { entry: FsEntry },
    /// The task succeeded.
    Done { output: Output },
    /// The task failed (nothing of a failed write or import is left).
    Failed { error: TaskError },
}

/// What a task made.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Output {
    Entry {
        entry: FsEntry,
    },
    Listing {
        listing: FsListing,
    },
    Removed,
    /// Bytes sent on the data pipe (a read, an export).
    Sent {
        bytes: u64,
    },
    Imported {
        imported: ArchiveImported,
    },
}

/// Why a task failed, typed so the engine can map each to its API error.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, thiserror::Error)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TaskError {
    /// A system call failed with `errno`.
    #[error("{op} {path}: {}", io::Error::from_raw_os_error(*errno))]
    Os {
        op: String,
        path: String,
        errno: i32,
    },
    /// Not a regular file where one is needed (a read).
    #[error("{path} is {what}; only a regular file can be read")]
    NotRegular { path: String, what: String },
    /// Not a directory where one is needed (an archive export).
    #[error("{path} is {what}; only a directory can be exported as an archive")]
    NotDirectory { path: String, what: String },
    /// Something is in the way (an existing entry of another kind).
    #[error("{message}")]
    Conflict { message: String },
    /// A request the task refuses; `param` names what.
    #[error("{message}")]
    Invalid { param: String, message: String },
    /// The upload ended without the engine's commit: nothing was changed.
    #[error("the upload was cut off before its end; nothing was changed")]
    Cut,
    /// An archive refused (a hostile member, past a limit, not a tar
    /// stream); `reason` says it whole, naming the member.
    #[error("{reason}")]
    Refused { member: String, reason: String },
    /// A recursive remove refused before anything was removed: `path`
    /// (the directory or an entry inside it) cannot be removed; `errno` is
    /// what the kernel would have answered.
    #[error("{path} cannot be removed: {reason}; nothing was removed")]
    Unremovable {
        path: String,
        reason: String,
        errno: i32,
    },
    /// A recursive remove that stopped part way (the tree changed after it
    /// was checked): `removed` entries inside the directory are gone.
    #[error(
        "removing {directory} stopped at {path} ({}) after {removed} entries inside it were removed",
        io::Error::from_raw_os_error(*errno)
    )]
    Partial {
        directory: String,
        path: String,
        errno: i32,
        removed: u64,
    },
    /// Resolving beneath the data directory, a link led out of it (only
    /// [`Root::Beneath`]: the container resolves such a path itself).
    #[error("{path} leads out of /mnt/data through a link")]
    Outside { path: String },
    #[error("{message}")]
    Other { message: String },
}

impl TaskError {
    fn os(op: &str, path: &str, error: impl Into<io::Error>) -> Self {
        let error: io::Error = error.into();
        match error.raw_os_error() {
            Some(errno) => TaskError::Os {
                op: op.to_owned(),
                path: path.to_owned(),
                errno,
            },
            None => TaskError::Other {
                message: format!("{op} {path}: {error}"),
            },
        }
    }

    /// The error the API layer maps: missing 404, refused 403, in the way
    /// 409, disk full 413, a bad path 400 naming `path`.
    pub fn into_sandbox(self) -> SandboxError {
        let message = self.to_string();
        match self {
            TaskError::Os { errno, path, .. } | TaskError::Unremovable { errno, path, .. } => {
                match errno {
                    libc::ENOENT | libc::ENOTDIR => SandboxError::FileNotFound(path),
                    libc::EACCES | libc::EPERM | libc::EROFS => {
                        SandboxError::PermissionDenied(message)
                    }
                    libc::EEXIST | libc::ENOTEMPTY | libc::EISDIR | libc::EBUSY | libc::ETXTBSY => {
                        SandboxError::Conflict(message)
                    }
                    libc::ENOSPC | libc::EDQUOT => SandboxError::QuotaExceeded,
                    libc::ELOOP | libc::ENAMETOOLONG | libc::EINVAL | libc::ENXIO | libc::EXDEV => {
                        SandboxError::InvalidRequest {
                            param: "path",
                            message,
                        }
                    }
                    _ => SandboxError::io(message, io::Error::from_raw_os_error(errno)),
                }
            }
            TaskError::NotRegular { .. } | TaskError::NotDirectory { .. } => {
                SandboxError::InvalidRequest {
                    param: "path",
                    message,
                }
            }
            TaskError::Conflict { .. } | TaskError::Partial { .. } => {
                SandboxError::Conflict(message)
            }
            TaskError::Invalid { param, .. } => SandboxError::InvalidRequest {
                param: static_param(&param),
                message,
            },
            TaskError::Cut => SandboxError::InvalidRequest {
                param: "body",
                message,
            },
            TaskError::Refused { .. } => SandboxError::InvalidRequest {
                param: "archive",
                message,
            },
            TaskError::Outside { path } => SandboxError::FileNotFound(path),
            TaskError::Other { .. } => SandboxError::Setup(message),
        }
    }
}

/// A worker's `param` as one of the names the API uses.
fn static_param(param: &str) -> &'static str {
    match param {
        "to" => "to",
        "from" => "from",
        "archive" => "archive",
        "depth" => "depth",
        "exclude" => "exclude",
        "mode" => "mode",
        _ => "path",
    }
}

type TaskResult<T> = Result<T, TaskError>;

/// Where a task's paths resolve.
#[derive(Clone, Copy)]
pub enum Root<'a> {
    /// Inside the container, as its commands' paths do (magic links aside).
    Container,
    /// Beneath a stopped container's data directory (paths under
    /// `/mnt/data` only; nothing resolves out of it).
    Beneath(BorrowedFd<'a>),
}

impl Root<'_> {
    /// Opens `path` (absolute, in the container) as `flags` say.
    fn open(&self, path: &str, flags: i32, mode: u32) -> TaskResult<OwnedFd> {
        // (openat2 refuses any other flag beside O_PATH.)
        let flags = if flags & libc::O_PATH != 0 {
            flags
        } else {
            flags | libc::O_NOCTTY
        };
        match self {
            Root::Container => {
                sys::openat2(libc::AT_FDCWD, path, flags, mode, RESOLVE_NO_MAGICLINKS)
                    .map_err(|e| TaskError::os("open", path, e))
            }
            Root::Beneath(dir) => {
                let relative = under_workdir(path).ok_or_else(|| TaskError::Outside {
                    path: path.to_owned(),
                })?;
                let relative = if relative.is_empty() { "." } else { relative };
                sys::openat2(
                    dir.as_raw_fd(),
                    relative,
                    flags,
                    mode,
                    RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
                )
                .map_err(|e| match e.raw_os_error() {
                    Some(libc::EXDEV) => TaskError::Outside {
                        path: path.to_owned(),
                    },
                    _ => TaskError::os("open", path, e),
                })
            }
        }
    }
}

/// `(parent, last component)` of an absolute path; `None` for `/`.
fn split(path: &str) -> Option<(&str, &str)> {
    let (parent, name) = path.rsplit_once('/')?;
    if name.is_empty() {
        return None;
    }
    Some((if parent.is_empty() { "/" } else { parent }, name))
}

fn c_name(name: &str, path: &str) -> TaskResult<CString> {
    CString::new(name).map_err(|_| TaskError::Invalid {
        param: "path".into(),
        message: format!("invalid path {path:?}"),
    })
}

fn join(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

/// An entry from its `lstat`, reading a link's target.
fn entry_of(
    path: &str,
    name: &str,
    stat: &rustix::fs::Stat,
    dir: BorrowedFd<'_>,
    c_name: &CStr,
) -> FsEntry {
    let kind = match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => FsKind::File,
        FileType::Directory => FsKind::Directory,
        FileType::Symlink => FsKind::Symlink,
        _ => FsKind::Other,
    };
    let link_target = (kind == FsKind::Symlink)
        .then(|| rustix::fs::readlinkat(dir, c_name, Vec::new()).ok())
        .flatten()
        .map(|target| String::from_utf8_lossy(target.as_bytes()).into_owned());
    // Only a file's or a directory's: opening anything else (a device, a
    // FIFO) to read its attributes could have effects of its own.
    let metadata = match kind {
        FsKind::File | FsKind::Directory => rustix::fs::openat(
            dir,
            c_name,
            rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::NONBLOCK
                | rustix::fs::OFlags::NOFOLLOW
                | rustix::fs::OFlags::NOCTTY
                | rustix::fs::OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map(|fd| read_metadata(fd.as_fd()))
        .unwrap_or_default(),
        FsKind::Symlink | FsKind::Other => BTreeMap::new(),
    };
    FsEntry {
        path: path.to_owned(),
        name: name.to_owned(),
        kind,
        size: stat.st_size as u64,
        mode: stat.st_mode & 0o7777,
        modified_unix: stat.st_mtime,
        link_target,
        metadata,
    }
}

/// The `user.e2b.*` attributes of an open file, by name without the
/// prefix; an attribute that is not UTF-8, or cannot be read, is left out.
fn read_metadata(fd: BorrowedFd<'_>) -> BTreeMap<String, String> {
    let mut metadata = BTreeMap::new();
    let mut names = vec![0u8; 4096];
    let Ok(length) = rustix::fs::flistxattr(fd, &mut names) else {
        return metadata;
    };
    let mut value = vec![0u8; shellgate_sandbox_api::fs::MAX_METADATA_BYTES];
    for name in names[..length.min(names.len())]
        .split(|b| *b == 0)
        .filter(|n| !n.is_empty())
    {
        let Some(key) = std::str::from_utf8(name)
            .ok()
            .and_then(|n| n.strip_prefix(METADATA_XATTR_PREFIX))
        else {
            continue;
        };
        let Ok(c) = CString::new(name) else { continue };
        if let Ok(read) = rustix::fs::fgetxattr(fd, c.as_c_str(), &mut value) {
            if let Ok(text) = std::str::from_utf8(&value[..read.min(value.len())]) {
                metadata.insert(key.to_owned(), text.to_owned());
            }
        }
        if metadata.len() >= shellgate_sandbox_api::fs::MAX_METADATA_ENTRIES {
            break;
        }
    }
    metadata
}

/// Sets `metadata` as `user.e2b.*` attributes of an open (new) file.
fn write_metadata(
    fd: BorrowedFd<'_>,
    path: &str,
    metadata: &BTreeMap<String, String>,
) -> TaskResult<()> {
    for (key, value) in metadata {
        let name = c_name(&format!("{METADATA_XATTR_PREFIX}{key}"), path)?;
        rustix::fs::fsetxattr(
            fd,
            name.as_c_str(),
            value.as_bytes(),
            rustix::fs::XattrFlags::empty(),
        )
        .map_err(|e| match e {
            rustix::io::Errno::NOTSUP | rustix::io::Errno::NOSPC | rustix::io::Errno::TOOBIG => {
                TaskError::Invalid {
                    param: "metadata".into(),
                    message: format!(
                        "{path}: its file system cannot keep this metadata ({})",
                        io::Error::from(e)
                    ),
                }
            }
            e => TaskError::os("set metadata of", path, e),
        })?;
    }
    Ok(())
}

/// What a non-regular file is, said plainly.
fn kind_name(mode: u32) -> &'static str {
    match FileType::from_raw_mode(mode) {
        FileType::Directory => "a directory",
        FileType::Fifo => "a named pipe (FIFO)",
        FileType::Socket => "a socket",
        FileType::Symlink => "a symbolic link",
        FileType::CharacterDevice | FileType::BlockDevice => "a device",
        _ => "not a regular file",
    }
}

/// The entry at `path`, not following a final link.
pub fn stat(root: Root<'_>, path: &str) -> TaskResult<FsEntry> {
    let Some((parent, name)) = split(path) else {
        let dir = root.open("/", libc::O_PATH | libc::O_DIRECTORY, 0)?;
        let stat = rustix::fs::fstat(&dir).map_err(|e| TaskError::os("stat", path, e))?;
        return Ok(entry_of("/", "/", &stat, dir.as_fd(), c"."));
    };
    if let Root::Beneath(_) = root {
        if under_workdir(path) == Some("") {
            // /mnt/data itself: its parent is not beneath.
            let dir = root.open(path, libc::O_PATH | libc::O_DIRECTORY, 0)?;
            let stat = rustix::fs::fstat(&dir).map_err(|e| TaskError::os("stat", path, e))?;
            return Ok(entry_of(path, name, &stat, dir.as_fd(), c"."));
        }
    }
    let dir = root.open(parent, libc::O_PATH | libc::O_DIRECTORY, 0)?;
    let c = c_name(name, path)?;
    let stat = rustix::fs::statat(&dir, c.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| TaskError::os("stat", path, e))?;
    Ok(entry_of(path, name, &stat, dir.as_fd(), &c))
}

/// Opens a regular file for reading: anything else is refused before a
/// byte is read. A file claiming more than `max_bytes` (only a sparse one
/// can) is refused too.
pub fn open_regular(
    root: Root<'_>,
    path: &str,
    max_bytes: u64,
) -> TaskResult<(std::fs::File, FsEntry)> {
    let fd = root.open(path, libc::O_RDONLY | libc::O_NONBLOCK, 0)?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| TaskError::os("stat", path, e))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(TaskError::NotRegular {
            path: path.to_owned(),
            what: kind_name(stat.st_mode).to_owned(),
        });
    }
    if stat.st_size as u64 > max_bytes {
        return Err(TaskError::Invalid {
            param: "path".into(),
            message: format!(
                "{path} claims {} bytes, more than the container can hold (a sparse file); \
                 it cannot be read",
                stat.st_size
            ),
        });
    }
    let name = split(path).map_or("/", |(_, name)| name);
    let entry = entry_of(path, name, &stat, fd.as_fd(), c".");
    Ok((std::fs::File::from(fd), entry))
}

/// How many bytes a read sends: exactly the file's size, or (a zero-size
/// file, as `/proc` shows them) until its end within a bound.
pub fn read_length(entry: &FsEntry) -> Option<u64> {
    (entry.size > 0).then_some(entry.size)
}

/// Sends an open file's bytes to `out` (a pipe): `sendfile`, falling back
/// to reads and writes where the kernel cannot.
fn send_file(file: &std::fs::File, out: &OwnedFd, entry: &FsEntry) -> TaskResult<u64> {
    let want = read_length(entry);
    let limit = want.unwrap_or(UNSIZED_READ_LIMIT);
    let mut sent = 0u64;
    let mut use_sendfile = true;
    let mut buf = Vec::new();
    while sent < limit {
        let count = (limit - sent).min(1 << 20) as usize;
        let n = if use_sendfile {
            match rustix::fs::sendfile(out, file, None, count) {
                Ok(n) => n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(rustix::io::Errno::INVAL) | Err(rustix::io::Errno::NOSYS) => {
                    use_sendfile = false;
                    continue;
                }
                Err(e) => return Err(TaskError::os("read", &entry.path, e)),
            }
        } else {
            buf.resize(count.min(256 * 1024), 0);
            let n = match (&*file).read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(TaskError::os("read", &entry.path, e)),
            };
            sys::write_all(out.as_raw_fd(), &buf[..n])
                .map_err(|e| TaskError::os("send", &entry.path, e))?;
            n
        };
        if n == 0 {
            break;
        }
        sent += n as u64;
    }
    if want.is_some_and(|want| sent != want) {
        return Err(TaskError::Other {
            message: format!(
                "{} changed size while it was read ({sent} of {} bytes)",
                entry.path, entry.size
            ),
        });
    }
    Ok(sent)
}

/// A data pipe the engine writes, whose end counts only with the commit
/// byte after it: a body cut short reads as an error, never as the end.
pub struct CommittedReader {
    data: std::fs::File,
    commit: std::fs::File,
    cut: bool,
}

impl CommittedReader {
    pub fn new(data: OwnedFd, commit: OwnedFd) -> Self {
        Self {
            data: data.into(),
            commit: commit.into(),
            cut: false,
        }
    }

    /// At the data's end: whether the engine committed.
    fn committed(&mut self) -> io::Result<()> {
        let mut byte = [0u8; 1];
        loop {
            match self.commit.read(&mut byte) {
                Ok(1) if byte[0] == COMMIT => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                _ => {
                    self.cut = true;
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the upload was cut off before its end",
                    ));
                }
            }
        }
    }
}

impl Read for CommittedReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.data.read(buf)? {
            0 if !buf.is_empty() => self.committed().map(|()| 0),
            n => Ok(n),
        }
    }
}

/// Copies an upload into `file` (`splice` from the pipe, falling back to
/// reads and writes), then checks the commit.
fn receive(reader: &mut CommittedReader, file: &std::fs::File, path: &str) -> TaskResult<u64> {
    let mut received = 0u64;
    let mut use_splice = true;
    let mut buf = Vec::new();
    loop {
        let n = if use_splice {
            match rustix::pipe::splice(
                &reader.data,
                None,
                file,
                None,
                1 << 20,
                rustix::pipe::SpliceFlags::MOVE,
            ) {
                Ok(n) => n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(rustix::io::Errno::INVAL) | Err(rustix::io::Errno::NOSYS) => {
                    use_splice = false;
                    continue;
                }
                Err(e) => return Err(TaskError::os("write", path, e)),
            }
        } else {
            buf.resize(256 * 1024, 0);
            let n = match reader.data.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(TaskError::os("receive", path, e)),
            };
            (&*file)
                .write_all(&buf[..n])
                .map_err(|e| TaskError::os("write", path, e))?;
            n
        };
        if n == 0 {
            break;
        }
        received += n as u64;
    }
    reader.committed().map_err(|_| TaskError::Cut)?;
    Ok(received)
}

/// Makes every missing directory of `path` (`mkdir -p`), `mode` for new
/// ones; returns the last, open.
fn make_dirs(root: Root<'_>, path: &str, mode: u32) -> TaskResult<OwnedFd> {
    let open_dir = |p: &str| root.open(p, libc::O_PATH | libc::O_DIRECTORY, 0);
    if let Ok(dir) = open_dir(path) {
        return Ok(dir);
    }
    let Some((parent, name)) = split(path) else {
        return open_dir("/");
    };
    let parent_dir = make_dirs(root, parent, mode)?;
    let c = c_name(name, path)?;
    match rustix::fs::mkdirat(&parent_dir, c.as_c_str(), Mode::from_raw_mode(mode)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(TaskError::os("mkdir", path, e)),
    }
    open_dir(path)
}

/// The task's own temporary name beside its target.
fn temp_name() -> String {
    format!(".shellgate-upload-{}", std::process::id())
}

/// Writes an upload to `path`: a temporary file beside it, renamed over it
/// once committed; on any failure the temporary file is removed and the
/// old file (or nothing) stays.
fn write(
    path: &str,
    mode: u32,
    parents: bool,
    metadata: &BTreeMap<String, String>,
    reader: &mut CommittedReader,
) -> TaskResult<FsEntry> {
    let root = Root::Container;
    let (parent, name) = split(path).ok_or_else(|| TaskError::Invalid {
        param: "path".into(),
        message: "the root directory cannot be written as a file".into(),
    })?;
    let dir = if parents {
        make_dirs(root, parent, 0o755)?
    } else {
        root.open(parent, libc::O_PATH | libc::O_DIRECTORY, 0)?
    };
    let c = c_name(name, path)?;
    match rustix::fs::statat(&dir, c.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile => {
            return Err(TaskError::Conflict {
                message: format!(
                    "{path} is {}; only a regular file can be replaced by an upload",
                    kind_name(stat.st_mode)
                ),
            })
        }
        _ => {}
    }
    let temp = c_name(&temp_name(), path)?;
    let fd = rustix::fs::openat(
        &dir,
        temp.as_c_str(),
        rustix::fs::OFlags::WRONLY
            | rustix::fs::OFlags::CREATE
            | rustix::fs::OFlags::EXCL
            | rustix::fs::OFlags::NOFOLLOW
            | rustix::fs::OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| TaskError::os("create", path, e))?;
    let file = std::fs::File::from(fd);
    let written = receive(reader, &file, path).and_then(|_| {
        // The exact mode asked, whatever the umask.
        rustix::fs::fchmod(&file, Mode::from_raw_mode(mode & 0o7777))
            .map_err(|e| TaskError::os("chmod", path, e))?;
        // On the new file, before it takes the name: a replaced file's
        // metadata goes with it.
        write_metadata(file.as_fd(), path, metadata)?;
        rustix::fs::renameat(&dir, temp.as_c_str(), &dir, c.as_c_str())
            .map_err(|e| TaskError::os("rename", path, e))
    });
    if let Err(error) = written {
        let _ = rustix::fs::unlinkat(&dir, temp.as_c_str(), AtFlags::empty());
        return Err(error);
    }
    let stat = rustix::fs::fstat(&file).map_err(|e| TaskError::os("stat", path, e))?;
    Ok(entry_of(path, name, &stat, dir.as_fd(), &c))
}

/// A directory's entries, depth first, each directory's sorted by name.
pub fn list(root: Root<'_>, path: &str, depth: u32, limit: u32) -> TaskResult<FsListing> {
    let dir = root.open(path, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
    let mut listing = FsListing::default();
    let mut text = 0;
    walk(
        &dir,
        path,
        depth.max(1),
        limit as usize,
        &mut listing,
        &mut text,
    )?;
    Ok(listing)
}

fn walk(
    dir: &OwnedFd,
    path: &str,
    depth: u32,
    limit: usize,
    out: &mut FsListing,
    text: &mut usize,
) -> TaskResult<()> {
    let reader = rustix::fs::Dir::read_from(dir).map_err(|e| TaskError::os("list", path, e))?;
    let mut names: Vec<CString> = reader
        .filter_map(Result::ok)
        .map(|entry| entry.file_name().to_owned())
        .filter(|name| name.as_bytes() != b"." && name.as_bytes() != b"..")
        .collect();
    names.sort();
    for c in names {
        let Ok(name) = c.to_str() else {
            out.non_utf8_names += 1;
            continue;
        };
        if out.entries.len() >= limit || *text >= MAX_LISTING_TEXT_BYTES {
            out.truncated = true;
            return Ok(());
        }
        // Gone since the directory was read: not an entry any more.
        let Ok(stat) = rustix::fs::statat(dir, c.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        let child_path = join(path, name);
        let entry = entry_of(&child_path, name, &stat, dir.as_fd(), &c);
        *text +=
            entry.path.len() + entry.name.len() + entry.link_target.as_ref().map_or(0, String::len);
        let is_dir = entry.kind == FsKind::Directory;
        out.entries.push(entry);
        if is_dir && depth > 1 {
            let child = rustix::fs::openat(
                dir,
                c.as_c_str(),
                rustix::fs::OFlags::RDONLY
                    | rustix::fs::OFlags::DIRECTORY
                    | rustix::fs::OFlags::NOFOLLOW
                    | rustix::fs::OFlags::CLOEXEC,
                Mode::empty(),
            );
            // One the user may not read is listed, not descended.
            if let Ok(child) = child {
                walk(&child, &child_path, depth - 1, limit, out, text)?;
                if out.truncated {
                    return Ok(());
                }
            }
        }
    }
    Ok(())
}

fn mkdir(path: &str, parents: bool, mode: u32) -> TaskResult<FsEntry> {
    let root = Root::Container;
    let (parent, name) = split(path).ok_or_else(|| TaskError::Conflict {
        message: "/ exists".into(),
    })?;
    let c = c_name(name, path)?;
    let dir = if parents {
        make_dirs(root, parent, 0o755)?
    } else {
        root.open(parent, libc::O_PATH | libc::O_DIRECTORY, 0)?
    };
    match rustix::fs::mkdirat(&dir, c.as_c_str(), Mode::from_raw_mode(mode & 0o7777)) {
        Ok(()) => {
            // The exact mode asked, whatever the umask.
            let made = rustix::fs::openat(
                &dir,
                c.as_c_str(),
                rustix::fs::OFlags::RDONLY
                    | rustix::fs::OFlags::DIRECTORY
                    | rustix::fs::OFlags::NOFOLLOW
                    | rustix::fs::OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| TaskError::os("open", path, e))?;
            rustix::fs::fchmod(&made, Mode::from_raw_mode(mode & 0o7777))
                .map_err(|e| TaskError::os("chmod", path, e))?;
        }
        // `mkdir -p`: a directory already there is fine.
        Err(rustix::io::Errno::EXIST)
            if parents
                && rustix::fs::statat(&dir, c.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory) => {}
        Err(e) => return Err(TaskError::os("mkdir", path, e)),
    }
    stat(root, path)
}

fn rename(from: &str, to: &str, overwrite: bool) -> TaskResult<FsEntry> {
    let root = Root::Container;
    let in_root = |param: &str| TaskError::Invalid {
        param: param.into(),
        message: "the root directory cannot be moved or replaced".into(),
    };
    let (from_parent, from_name) = split(from).ok_or_else(|| in_root("from"))?;
    let (to_parent, to_name) = split(to).ok_or_else(|| in_root("to"))?;
    let from_dir = root.open(from_parent, libc::O_PATH | libc::O_DIRECTORY, 0)?;
    let to_dir = root.open(to_parent, libc::O_PATH | libc::O_DIRECTORY, 0)?;
    let (from_c, to_c) = (c_name(from_name, from)?, c_name(to_name, to)?);
    let flags = if overwrite {
        RenameFlags::empty()
    } else {
        RenameFlags::NOREPLACE
    };
    rustix::fs::renameat_with(
        &from_dir,
        from_c.as_c_str(),
        &to_dir,
        to_c.as_c_str(),
        flags,
    )
    .map_err(|e| match e {
        rustix::io::Errno::EXIST => TaskError::Conflict {
            message: format!("{to} exists; set overwrite to replace it"),
        },
        rustix::io::Errno::XDEV => TaskError::Invalid {
            param: "to".into(),
            message: format!(
                "{from} and {to} are on different file systems; copy the file instead"
            ),
        },
        other => TaskError::os("rename", from, other),
    })?;
    stat(root, to)
}

fn remove(path: &str, recursive: bool) -> TaskResult<()> {
    let root = Root::Container;
    let (parent, name) = split(path).ok_or_else(|| TaskError::Invalid {
        param: "path".into(),
        message: "the root directory cannot be removed".into(),
    })?;
    let dir = root.open(parent, libc::O_PATH | libc::O_DIRECTORY, 0)?;
    let c = c_name(name, path)?;
    let stat = rustix::fs::statat(&dir, c.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| TaskError::os("stat", path, e))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::Directory {
        return rustix::fs::unlinkat(&dir, c.as_c_str(), AtFlags::empty())
            .map_err(|e| TaskError::os("remove", path, e));
    }
    if recursive {
        // Whole or refused before anything goes (`fs_remove`).
        return fs_remove::remove_tree(dir.as_fd(), parent, &c, path).map_err(
            |error| match error {
                RemoveError::Refused {
                    path,
                    reason,
                    errno,
                } => TaskError::Unremovable {
                    path,
                    reason,
                    errno: errno.raw_os_error(),
                },
                RemoveError::Stopped {
                    path: at,
                    errno,
                    removed: 0,
                } => TaskError::os("remove", &at, errno),
                RemoveError::Stopped {
                    path: at,
                    errno,
                    removed,
                } => TaskError::Partial {
                    directory: path.to_owned(),
                    path: at,
                    errno: errno.raw_os_error(),
                    removed,
                },
            },
        );
    }
    rustix::fs::unlinkat(&dir, c.as_c_str(), AtFlags::REMOVEDIR).map_err(|e| match e {
        rustix::io::Errno::NOTEMPTY => TaskError::Conflict {
            message: format!("{path} is a directory that is not empty; set recursive to remove it"),
        },
        other => TaskError::os("remove", path, other),
    })
}

/// Opens the directory an export walks, through the root's rules, and
/// checks it before a byte of the archive is written: a missing path, one
/// the sandbox user may not read, a magic link, and anything but a
/// directory (a regular file, a FIFO, a device) are refused here, so the
/// answer is an error rather than a stream cut after its status line. The
/// path is first opened `O_PATH` (which opens no FIFO or device) and its
/// type read from that descriptor; only a directory is then opened for
/// reading, through it.
pub fn open_export_directory(root: Root<'_>, path: &str) -> TaskResult<(OwnedFd, FsEntry)> {
    let at = root.open(path, libc::O_PATH, 0)?;
    let stat = rustix::fs::fstat(&at).map_err(|e| TaskError::os("stat", path, e))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::Directory {
        return Err(TaskError::NotDirectory {
            path: path.to_owned(),
            what: kind_name(stat.st_mode).to_owned(),
        });
    }
    let dir = rustix::fs::openat(
        &at,
        c".",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| TaskError::os("open", path, e))?;
    let name = split(path).map_or("/", |(_, name)| name);
    Ok((dir, entry_of(path, name, &stat, at.as_fd(), c".")))
}

/// Writes a tar stream of `path`, opened and checked as `dir` by
/// [`open_export_directory`], to `out`.
pub fn export(
    root: Root<'_>,
    path: &str,
    dir: &OwnedFd,
    excludes: &[String],
    out: &mut dyn Write,
) -> TaskResult<u64> {
    let at = match root {
        // The worker's own rights: the path as the sandbox user sees it
        // (its /proc/self is not its own to read: it is not dumpable).
        Root::Container => std::path::PathBuf::from(path),
        // The server's: only the descriptor resolved beneath the data
        // directory, never the path again.
        Root::Beneath(_) => std::path::PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())),
    };
    archive_export(path, &at, excludes, out)
}

fn import(
    path: &str,
    max_bytes: u64,
    max_entries: u64,
    reader: &mut CommittedReader,
) -> TaskResult<ArchiveImported> {
    let dir = make_dirs(Root::Container, path, 0o755)?;
    drop(dir);
    let imported = archive_import(reader, std::path::Path::new(path), max_bytes, max_entries);
    match imported {
        Err(_) if reader.cut => Err(TaskError::Cut),
        other => other,
    }
}

/// An archive's failure as a task's: the archive's fault (a hostile
/// member, a bomb, not a tar stream) is a refusal naming it; a full disk
/// and a missing directory are the system's errors.
fn archive_error(path: &str, error: crate::archive::ArchiveError) -> TaskError {
    use crate::archive::ArchiveError;
    match error {
        ArchiveError::InvalidExclude { .. } => TaskError::Invalid {
            param: "exclude".into(),
            message: error.to_string(),
        },
        error if error.is_invalid_request() => TaskError::Refused {
            member: error.member().unwrap_or_default().to_owned(),
            reason: error.to_string(),
        },
        ArchiveError::QuotaExceeded { .. } => TaskError::Os {
            op: "write".into(),
            path: path.to_owned(),
            errno: libc::ENOSPC,
        },
        ArchiveError::Directory { source, .. } => TaskError::os("open", path, source),
        other => TaskError::Other {
            message: other.to_string(),
        },
    }
}

/// `crate::archive::export` (the `archive` module), its errors as a task's.
fn archive_export(
    path: &str,
    dir: &std::path::Path,
    excludes: &[String],
    out: &mut dyn Write,
) -> TaskResult<u64> {
    crate::archive::export(dir, excludes, out)
        .map(|summary| summary.bytes)
        .map_err(|e| archive_error(path, e))
}

/// `crate::archive::import`, its errors as a task's.
fn archive_import(
    input: &mut dyn Read,
    dir: &std::path::Path,
    max_bytes: u64,
    max_entries: u64,
) -> TaskResult<ArchiveImported> {
    let limits = crate::archive::ImportLimits {
        max_bytes,
        max_entries,
    };
    crate::archive::import(input, dir, &limits)
        .map(|summary| ArchiveImported {
            entries: summary.entries,
            bytes: summary.bytes,
        })
        .map_err(|e| archive_error(&dir.display().to_string(), e))
}

/// The descriptors a worker was given beside its status pipe.
pub struct WorkerPipes {
    pub result: OwnedFd,
    pub data: Option<OwnedFd>,
    pub commit: Option<OwnedFd>,
}

/// Writes one message as a JSON line (a failure means the engine left).
fn send(result: &OwnedFd, message: &Message) {
    if let Ok(mut line) = serde_json::to_vec(message) {
        line.push(b'\n');
        let _ = sys::write_all(result.as_raw_fd(), &line);
    }
}

/// Runs one task in the worker (inside the container, as the sandbox
/// user) and reports its end on the result pipe.
pub fn run_in_worker(task: Task, pipes: WorkerPipes) {
    let WorkerPipes {
        result,
        data,
        commit,
    } = pipes;
    let missing = || TaskError::Other {
        message: "the task's data pipe is missing".into(),
    };
    let root = Root::Container;
    let outcome: TaskResult<Output> = (|| match task {
        Task::Read { path, max_bytes } => {
            let data = data.ok_or_else(missing)?;
            let (file, entry) = open_regular(root, &path, max_bytes)?;
            send(
                &result,
                &Message::Opened {
                    entry: entry.clone(),
                },
            );
            let bytes = send_file(&file, &data, &entry)?;
            Ok(Output::Sent { bytes })
        }
        Task::Write {
            path,
            mode,
            parents,
            metadata,
        } => {
            let mut reader =
                CommittedReader::new(data.ok_or_else(missing)?, commit.ok_or_else(missing)?);
            Ok(Output::Entry {
                entry: write(&path, mode, parents, &metadata, &mut reader)?,
            })
        }
        Task::Stat { path } => Ok(Output::Entry {
            entry: stat(root, &path)?,
        }),
        Task::List { path, depth, limit } => Ok(Output::Listing {
            listing: list(root, &path, depth, limit)?,
        }),
        Task::Mkdir {
            path,
            parents,
            mode,
        } => Ok(Output::Entry {
            entry: mkdir(&path, parents, mode)?,
        }),
        Task::Move {
            from,
            to,
            overwrite,
        } => Ok(Output::Entry {
            entry: rename(&from, &to, overwrite)?,
        }),
        Task::Remove { path, recursive } => remove(&path, recursive).map(|()| Output::Removed),
        Task::ArchiveExport { path, excludes } => {
            let mut out = std::fs::File::from(data.ok_or_else(missing)?);
            let (dir, entry) = open_export_directory(root, &path)?;
            send(&result, &Message::Opened { entry });
            let bytes = export(root, &path, &dir, &excludes, &mut out)?;
            Ok(Output::Sent { bytes })
        }
        Task::ArchiveImport {
            path,
            max_bytes,
            max_entries,
        } => {
            let mut reader =
                CommittedReader::new(data.ok_or_else(missing)?, commit.ok_or_else(missing)?);
            Ok(Output::Imported {
                imported: import(&path, max_bytes, max_entries, &mut reader)?,
            })
        }
    })();
    send(
        &result,
        &match outcome {
            Ok(output) => Message::Done { output },
            Err(error) => Message::Failed { error },
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_and_messages_round_trip_as_json() {
        let task = Task::Write {
            path: "/tmp/x".into(),
            mode: 0o600,
            parents: true,
            metadata: BTreeMap::new(),
        };
        let json = serde_json::to_string(&task).unwrap();
        assert_eq!(
            json,
            r#"{"op":"write","path":"/tmp/x","mode":384,"parents":true}"#
        );
        assert_eq!(serde_json::from_str::<Task>(&json).unwrap(), task);
        assert!(serde_json::from_str::<Task>(r#"{"op":"stat","path":"/","x":1}"#).is_err());
        let failed = Message::Failed {
            error: TaskError::Os {
                op: "open".into(),
                path: "/etc/shadow".into(),
                errno: libc::EACCES,
            },
        };
        let back: Message = serde_json::from_slice(&serde_json::to_vec(&failed).unwrap()).unwrap();
        assert_eq!(back, failed);
    }

    #[test]
    fn errors_map_to_what_the_api_answers() {
        let os = |errno| {
            TaskError::Os {
                op: "open".into(),
                path: "/x".into(),
                errno,
            }
            .into_sandbox()
        };
        assert!(matches!(os(libc::ENOENT), SandboxError::FileNotFound(_)));
        assert!(matches!(
            os(libc::EACCES),
            SandboxError::PermissionDenied(_)
        ));
        assert!(matches!(os(libc::EROFS), SandboxError::PermissionDenied(_)));
        assert!(matches!(os(libc::EEXIST), SandboxError::Conflict(_)));
        assert!(matches!(os(libc::EDQUOT), SandboxError::QuotaExceeded));
        assert!(matches!(
            os(libc::ELOOP),
            SandboxError::InvalidRequest { param: "path", .. }
        ));
        assert!(matches!(
            TaskError::Refused {
                member: "../x".into(),
                reason: "leaves the directory".into()
            }
            .into_sandbox(),
            SandboxError::InvalidRequest {
                param: "archive",
                ..
            }
        ));
    }

    /// Beneath a directory: regular files are read, nothing else is opened
    /// for reading, and no link leads out.
    #[test]
    fn beneath_a_data_directory_nothing_leaves_it_and_only_files_are_read() {
        let dir = std::env::temp_dir().join(format!("fs-ops-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/a.txt"), b"hello").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.join("out")).unwrap();
        std::os::unix::fs::symlink("sub/a.txt", dir.join("in")).unwrap();
        let fifo = CString::new(dir.join("fifo").to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a valid C string.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        let fd = std::fs::File::open(&dir).unwrap();
        let root = Root::Beneath(fd.as_fd());

        let (_, entry) = open_regular(root, "/mnt/data/in", 1 << 20).unwrap();
        assert_eq!(entry.size, 5);
        assert!(matches!(
            open_regular(root, "/mnt/data/out", 1 << 20),
            Err(TaskError::Outside { .. })
        ));
        assert!(matches!(
            open_regular(root, "/mnt/data/fifo", 1 << 20),
            Err(TaskError::NotRegular { .. })
        ));
        assert!(matches!(
            open_regular(root, "/mnt/data/sub", 1 << 20),
            Err(TaskError::NotRegular { .. })
        ));
        assert!(matches!(
            open_regular(root, "/mnt/data/sub/a.txt", 2),
            Err(TaskError::Invalid { .. })
        ));
        assert!(matches!(
            open_regular(root, "/etc/passwd", 1 << 20),
            Err(TaskError::Outside { .. })
        ));
        let link = stat(root, "/mnt/data/out").unwrap();
        assert_eq!(link.kind, FsKind::Symlink);
        assert_eq!(link.link_target.as_deref(), Some("/etc/passwd"));
        let top = stat(root, "/mnt/data").unwrap();
        assert_eq!(top.kind, FsKind::Directory);

        let listing = list(root, "/mnt/data", 2, 100).unwrap();
        let names: Vec<&str> = listing.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            names,
            [
                "/mnt/data/fifo",
                "/mnt/data/in",
                "/mnt/data/out",
                "/mnt/data/sub",
                "/mnt/data/sub/a.txt"
            ]
        );
        let short = list(root, "/mnt/data", 2, 2).unwrap();
        assert!(short.truncated);
        assert_eq!(short.entries.len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
