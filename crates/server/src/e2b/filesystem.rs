//! envd's `filesystem.Filesystem` service: stat, list, make, move, remove
//! and watch, over the container's files by path
//! (`SandboxBackend::fs_*`, with the same helpers as `/v1/.../fs`: wake
//! rules, masking, error mapping) — a dialect, not a second file layer.
//!
//! Paths are E2B's: a relative one (and `~`) is relative to `/home/user`,
//! the E2B user's home. Every operation runs as the sandbox user, E2B's
//! `user`; a request naming another (`Authorization: Basic root:`) is
//! refused with `permission_denied`, as envd-proc refuses it, rather than
//! run with rights it did not ask for.
//!
//! Watching (`WatchDir`, and the polling trio `CreateWatcher`,
//! `GetWatcherEvents`, `RemoveWatcher`) is inotify *inside* the container:
//! a small Python script ([`WATCH_SCRIPT`]) run through the backend's
//! process API, one process per watcher, printing one JSON line per event;
//! the host never polls anything. A poll first syncs with the script
//! (a marker on its stdin, echoed after the events already queued), so it
//! sees every event of a write answered before it. A sandbox has at most [`watchers::MAX_WATCHERS`]
//! watchers; each buffers at most [`MAX_BUFFERED_EVENTS`] events (past
//! that the oldest are dropped). A watcher ends with its client (the
//! stream closed, `RemoveWatcher`, or a polling watcher not polled for
//! [`POLLING_IDLE`]) or with its sandbox (the process dies with it).

pub(crate) mod watchers;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use serde::Deserialize;
use shellgate_sandbox_api::fs::{container_path, FsKind, MAX_LIST_DEPTH, MAX_LIST_ENTRIES};
use shellgate_sandbox_api::process::{OutputRead, ProcessSpec, ProcessStatus, ProcessStream};
use shellgate_sandbox_api::SandboxError;
use shellgate_wire::envd::filesystem::{
    watch_dir_response, CreateWatcherRequest, CreateWatcherResponse, EntryInfo, EventType,
    FileType, FilesystemEvent, GetWatcherEventsRequest, GetWatcherEventsResponse, ListDirRequest,
    ListDirResponse, MakeDirRequest, MakeDirResponse, MoveRequest, MoveResponse, RemoveRequest,
    RemoveResponse, RemoveWatcherRequest, RemoveWatcherResponse, StatRequest, StatResponse,
    WatchDirRequest, WatchDirResponse,
};
use tokio::sync::mpsc;

use super::access::SandboxCaller;
use super::connect::{server_stream, ConnectCode, ConnectError, StreamRequest, Unary, UnaryReply};
use super::user::{AsSandboxUser, E2B_HOME, E2B_WORKSPACE};
use crate::http::{to_completion, Project};
use crate::sandboxes::fs::{fs_error, holds_secret, masked_text, prepare, read_wakes};
use crate::state::AppState;
use watchers::PollingWatcher;

/// Most events one watcher holds for its client (a polling watcher between
/// two polls, a stream behind a slow reader); past that the oldest go.
pub const MAX_BUFFERED_EVENTS: usize = 1024;
/// A polling watcher nobody polled for this long is removed.
pub const POLLING_IDLE: Duration = Duration::from_secs(600);
/// How often a `WatchDir` stream says it is alive when nothing happens
/// (E2B's SDK asks with `keepalive-ping-interval`, in seconds).
const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(50);

/// A path as E2B's SDK means it, made an absolute container path: relative
/// ones (and `~`, `~/…`) are relative to [`E2B_HOME`]; an empty one is the
/// home itself.
pub(super) fn e2b_path(path: &str, param: &'static str) -> Result<String, SandboxError> {
    let absolute = if path.is_empty() || path == "~" {
        E2B_HOME.to_owned()
    } else if let Some(rest) = path.strip_prefix("~/") {
        format!("{E2B_HOME}/{rest}")
    } else if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("{E2B_HOME}/{path}")
    };
    container_path(&absolute, param)
}

/// `ls -l`'s permission string of an entry (`drwxr-xr-x`), as envd gives.
fn permissions(kind: FsKind, mode: u32) -> String {
    let mut out = String::with_capacity(10);
    out.push(match kind {
        FsKind::Directory => 'd',
        FsKind::Symlink => 'L',
        FsKind::File => '-',
        FsKind::Other => '?',
    });
    for shift in [6u32, 3, 0] {
        let bits = (mode >> shift) & 0o7;
        out.push(if bits & 4 != 0 { 'r' } else { '-' });
        out.push(if bits & 2 != 0 { 'w' } else { '-' });
        out.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    out
}

/// An entry as envd describes it. In a listing a symbolic link is reported
/// as itself (`lstat`): `type` SYMLINK and `isSymlink`; Stat reports what
/// it leads to (`followed`). Owner and group are not known
/// to the backend's entries; they are the sandbox user's name when it is
/// the only user that can have made the file under its home or
/// `/mnt/data`, and empty elsewhere (never guessed).
fn entry_info(
    entry: shellgate_sandbox_api::fs::FsEntry,
    masker: Option<&shellgate_egress::secrets::Masker>,
) -> EntryInfo {
    let kind = match entry.kind {
        FsKind::File => FileType::File,
        FsKind::Directory => FileType::Directory,
        FsKind::Symlink => FileType::Symlink,
        FsKind::Other => FileType::Unspecified,
    };
    let owned_by_user = [E2B_HOME, shellgate_sandbox_api::fs::WORKDIR, E2B_WORKSPACE]
        .iter()
        .any(|root| entry.path.starts_with(&format!("{root}/")));
    let owner = if owned_by_user { "user" } else { "" }.to_owned();
    EntryInfo {
        permissions: permissions(entry.kind, entry.mode),
        name: entry.name,
        r#type: kind as i32,
        path: entry.path,
        size: i64::try_from(entry.size).unwrap_or(i64::MAX),
        mode: entry.mode,
        group: owner.clone(),
        owner,
        modified_time: Some(pbjson_types::Timestamp {
            seconds: entry.modified_unix,
            nanos: 0,
        }),
        is_symlink: entry.kind == FsKind::Symlink || entry.link_target.is_some(),
        symlink_target: entry.link_target.map(|target| match masker {
            Some(masker) => masked_text(masker, &target),
            None => target,
        }),
        metadata: entry.metadata.into_iter().collect::<HashMap<_, _>>(),
    }
}

fn project(caller: &SandboxCaller) -> Project {
    Project(caller.project.clone())
}

/// A file operation's error as a Connect error (missing → `not_found`,
/// refused → `permission_denied`, occupied → `already_exists`).
fn connect_error(caller: &SandboxCaller, error: SandboxError) -> ConnectError {
    ConnectError::from(fs_error(&caller.container_id, error))
}

fn path_error(error: SandboxError) -> ConnectError {
    ConnectError::invalid(error.to_string())
}

pub(super) fn routes(router: Router<Arc<AppState>>) -> Router<Arc<AppState>> {
    router
        .route("/filesystem.Filesystem/Stat", post(stat))
        .route("/filesystem.Filesystem/ListDir", post(list_dir))
        .route("/filesystem.Filesystem/MakeDir", post(make_dir))
        .route("/filesystem.Filesystem/Move", post(move_entry))
        .route("/filesystem.Filesystem/Remove", post(remove))
        .route("/filesystem.Filesystem/WatchDir", post(watch_dir))
        .route("/filesystem.Filesystem/CreateWatcher", post(create_watcher))
        .route(
            "/filesystem.Filesystem/GetWatcherEvents",
            post(get_watcher_events),
        )
        .route("/filesystem.Filesystem/RemoveWatcher", post(remove_watcher))
}

async fn stat(
    State(state): State<Arc<AppState>>,
    caller: SandboxCaller,
    _user: AsSandboxUser,
    Unary(request): Unary<StatRequest>,
) -> Result<UnaryReply<StatResponse>, ConnectError> {
    let path = e2b_path(&request.path, "path").map_err(path_error)?;
    prepare(
        &state,
        &project(&caller),
        &caller.container_id,
        read_wakes(&path),
    )
    .await?;
    let entry = state
        .engine
        .fs_stat(&caller.container_id, &path)
        .await
        .map_err(|e| connect_error(&caller, e))?;
    let entry = followed(&state, &caller.container_id, entry).await;
    let masker = state.engine.masker(&caller.container_id);
    Ok(UnaryReply(StatResponse {
        entry: Some(entry_info(entry, masker.as_deref())),
    }))
}

/// Links followed before a chain is taken for a loop (Linux's own bound).
const MAX_LINK_HOPS: usize = 40;

/// `path`'s `..` and `.` resolved by name (an absolute path in, one out).
fn lexically_normal(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    format!("/{}", parts.join("/"))
}

/// A link's target as an absolute path (a relative one is relative to the
/// link's directory).
fn link_destination(link_path: &str, target: &str) -> String {
    if target.starts_with('/') {
        return lexically_normal(target);
    }
    let directory = link_path.rsplit_once('/').map_or("", |(dir, _)| dir);
    lexically_normal(&format!("{directory}/{target}"))
}

/// What envd's Stat says of a symbolic link: the entry it leads to (its
/// type, size, mode and time: `stat`, not `lstat`) under the link's own
/// name and path, with the absolute path it resolves to as its target. A
/// link that leads nowhere (missing, a loop, refused) is told as itself.
async fn followed(
    state: &AppState,
    container: &str,
    link: shellgate_sandbox_api::fs::FsEntry,
) -> shellgate_sandbox_api::fs::FsEntry {
    let mut current = link.clone();
    for _ in 0..MAX_LINK_HOPS {
        let Some(target) = current.link_target.as_deref() else {
            break;
        };
        let destination = link_destination(&current.path, target);
        match state.engine.fs_stat(container, &destination).await {
            Ok(next) if next.kind == FsKind::Symlink => current = next,
            Ok(next) => {
                return shellgate_sandbox_api::fs::FsEntry {
                    path: link.path,
                    name: link.name,
                    link_target: Some(destination),
                    ..next
                }
            }
            Err(_) => break,
        }
    }
    link
}

async fn list_dir(
    State(state): State<Arc<AppState>>,
    caller: SandboxCaller,
    _user: AsSandboxUser,
    Unary(request): Unary<ListDirRequest>,
) -> Result<UnaryReply<ListDirResponse>, ConnectError> {
    let path = e2b_path(&request.path, "path").map_err(path_error)?;
    // envd takes 0 as 1 (the SDK sends `depth or 0`).
    let depth = request.depth.max(1);
    if depth > MAX_LIST_DEPTH {
        return Err(ConnectError::invalid(format!(
            "depth must be from 1 to {MAX_LIST_DEPTH}"
        )));
    }
    prepare(
        &state,
        &project(&caller),
        &caller.container_id,
        read_wakes(&path),
    )
    .await?;
    let listing = state
        .engine
        .fs_list(&caller.container_id, &path, depth, MAX_LIST_ENTRIES)
        .await
        .map_err(|e| connect_error(&caller, e))?;
    if listing.truncated {
        // envd has no way to say "there is more"; a partial list would be
        // taken for the whole directory.
        return Err(ConnectError::new(
            ConnectCode::ResourceExhausted,
            format!(
                "{path} has more than {MAX_LIST_ENTRIES} entries at depth {depth}; list a smaller depth or a subdirectory"
            ),
        ));
    }
    let masker = state.engine.masker(&caller.container_id);
    let entries = listing
        .entries
        .into_iter()
        .filter(|entry| {
            !masker
                .as_deref()
                .is_some_and(|masker| holds_secret(&entry.path, masker))
        })
        .map(|entry| entry_info(entry, masker.as_deref()))
        .collect();
    Ok(UnaryReply(ListDirResponse { entries }))
}

async fn make_dir(
    State(state): State<Arc<AppState>>,
    caller: SandboxCaller,
    _user: AsSandboxUser,
    Unary(request): Unary<MakeDirRequest>,
) -> Result<UnaryReply<MakeDirResponse>, ConnectError> {
    let path = e2b_path(&request.path, "path").map_err(path_error)?;
    prepare(&state, &project(&caller), &caller.container_id, true).await?;
    let made = to_completion(async move {
        let id = caller.container_id.clone();
        // The leaf alone first: an existing one is `already_exists` (what
        // the SDK reads as False); missing parents are then made too.
        let made = match state.engine.fs_mkdir(&id, &path, false, 0o755).await {
            Err(SandboxError::FileNotFound(_)) => {
                state.engine.fs_mkdir(&id, &path, true, 0o755).await
            }
            other => other,
        };
        let entry = match made {
            Ok(entry) => entry,
            Err(SandboxError::Conflict(_)) => {
                return Ok(Err(ConnectError::new(
                    ConnectCode::AlreadyExists,
                    format!("directory {path} already exists"),
                )))
            }
            Err(e) => return Ok(Err(connect_error(&caller, e))),
        };
        let masker = state.engine.masker(&id);
        Ok(Ok(entry_info(entry, masker.as_deref())))
    })
    .await??;
    Ok(UnaryReply(MakeDirResponse { entry: Some(made) }))
}

async fn move_entry(
    State(state): State<Arc<AppState>>,
    caller: SandboxCaller,
    _user: AsSandboxUser,
    Unary(request): Unary<MoveRequest>,
) -> Result<UnaryReply<MoveResponse>, ConnectError> {
    let from = e2b_path(&request.source, "source").map_err(path_error)?;
    let to = e2b_path(&request.destination, "destination").map_err(path_error)?;
    prepare(&state, &project(&caller), &caller.container_id, true).await?;
    let moved = to_completion(async move {
        let id = caller.container_id.clone();
        // envd renames as rename(2) does: over what is there.
        Ok(match state.engine.fs_move(&id, &from, &to, true).await {
            Ok(entry) => Ok(entry_info(entry, state.engine.masker(&id).as_deref())),
            Err(e) => Err(connect_error(&caller, e)),
        })
    })
    .await??;
    Ok(UnaryReply(MoveResponse { entry: Some(moved) }))
}

async fn remove(
    State(state): State<Arc<AppState>>,
    caller: SandboxCaller,
    _user: AsSandboxUser,
    Unary(request): Unary<RemoveRequest>,
) -> Result<UnaryReply<RemoveResponse>, ConnectError> {
    let path = e2b_path(&request.path, "path").map_err(path_error)?;
    prepare(&state, &project(&caller), &caller.container_id, true).await?;
    to_completion(async move {
        // envd removes a directory with its tree (`os.RemoveAll`), and a
        // path that is not there is already removed.
        Ok(
            match state
                .engine
                .fs_remove(&caller.container_id, &path, true)
                .await
            {
                Ok(_) | Err(SandboxError::FileNotFound(_)) => Ok(()),
                Err(e) => Err(connect_error(&caller, e)),
            },
        )
    })
    .await??;
    Ok(UnaryReply(RemoveResponse {}))
}

// ---------------------------------------------------------------------------
// Watchers

/// The watcher inside the container: inotify on a directory (and, when
/// recursive, each directory below it, added as they appear; at most 8192),
/// one JSON line per event on stdout — `{"ready":true}` once the watches
/// are set, `{"e":kind,"n":name}` per event (`name` relative to the
/// watched directory), `{"error":code,"message":…}` when it cannot watch.
/// An upload's temporary file (`.shellgate-upload-…`, renamed over its
/// path when whole) is not shown: its rename reads as the events of E2B's
/// own upload (create, chmod as its owner is set, write), what a client
/// watching for the file expects.
///
/// A line `N` on its stdin is a sync marker: the script first reports every
/// event inotify already queued, then answers `{"synced":N}`. A poll sends
/// one, so that it sees what happened before it (a write just answered).
pub const WATCH_SCRIPT: &str = r#"
import ctypes, json, os, select, struct, sys
root, recursive = sys.argv[1], sys.argv[2] == "1"
def say(**m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
if not os.path.lexists(root):
    say(error="not_found", message="no such directory: " + root); sys.exit(1)
if not os.path.isdir(root):
    say(error="invalid_argument", message=root + " is not a directory"); sys.exit(1)
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0o2000000 | 0o4000)
if fd < 0:
    say(error="unavailable", message="inotify: " + os.strerror(ctypes.get_errno())); sys.exit(1)
MASK = 0x2 | 0x4 | 0x40 | 0x80 | 0x100 | 0x200 | 0x01000000
dirs = {}
def add(path):
    if len(dirs) >= 8192: return -1
    wd = libc.inotify_add_watch(fd, os.fsencode(path), MASK)
    if wd >= 0: dirs[wd] = path
    return wd
def add_tree(path):
    add(path)
    if recursive:
        for base, subdirs, _ in os.walk(path):
            for d in subdirs: add(os.path.join(base, d))
if add(root) < 0:
    say(error="permission_denied", message="cannot watch " + root + ": " + os.strerror(ctypes.get_errno())); sys.exit(1)
if recursive:
    for base, subdirs, _ in os.walk(root):
        for d in subdirs: add(os.path.join(base, d))
say(ready=True)
TEMP, uploads = ".shellgate-upload-", set()
KINDS = ((0x100 | 0x80, "create"), (0x2, "write"), (0x200, "remove"), (0x40, "rename"), (0x4, "chmod"))
def handle(data):
    i = 0
    while i + 16 <= len(data):
        wd, mask, cookie, n = struct.unpack_from("iIII", data, i)
        name = data[i + 16:i + 16 + n].rstrip(b"\0"); i += 16 + n
        if mask & 0x4000: say(overflow=True); continue
        base = dirs.get(wd)
        if base is None: continue
        if mask & 0x8000:
            dirs.pop(wd, None)
            if base == root: sys.exit(0)
            continue
        if not name: continue
        leaf = os.fsdecode(name)
        if leaf.startswith(TEMP):
            if mask & 0x40:
                if len(uploads) > 1024: uploads.clear()
                uploads.add(cookie)
            continue
        full = os.path.join(base, leaf)
        rel = os.path.relpath(full, root).encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        if mask & 0x80 and cookie in uploads:
            uploads.discard(cookie)
            for kind in ("create", "chmod", "write"): say(e=kind, n=rel)
            continue
        for bit, kind in KINDS:
            if mask & bit: say(e=kind, n=rel)
        if recursive and mask & 0x40000000 and mask & (0x100 | 0x80): add_tree(full)
def drain():
    while True:
        try: data = os.read(fd, 65536)
        except BlockingIOError: return
        handle(data)
sources, pending = [fd, 0], b""
while True:
    ready = select.select(sources, [], [])[0]
    if fd in ready: drain()
    if 0 in ready:
        chunk = os.read(0, 4096)
        if not chunk: sources.remove(0); continue
        pending += chunk
        while b"\n" in pending:
            marker, pending = pending.split(b"\n", 1)
            drain()
            say(synced=int(marker or 0))
"#;

/// One line of the watcher script.
#[derive(Debug, Deserialize)]
struct WatchLine {
    #[serde(default)]
    ready: bool,
    synced: Option<u64>,
    e: Option<String>,
    n: Option<String>,
    error: Option<String>,
    message: Option<String>,
}

/// A watcher's process in its container: killed when this is dropped.
struct WatchProcess {
    state: Arc<AppState>,
    container_id: String,
    process_id: String,
}

impl Drop for WatchProcess {
    fn drop(&mut self) {
        let (state, container, process) = (
            Arc::clone(&self.state),
            self.container_id.clone(),
            self.process_id.clone(),
        );
        state.e2b_watchers.release(&container, &process);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = state.engine.kill_process(&container, &process).await;
            });
        }
    }
}

/// The longest a watcher process may run at once (the backend's bound on
/// a process's timeout); a watcher whose process reached it starts another.
const WATCH_PROCESS_TIMEOUT_MS: u64 = shellgate_sandbox_api::backend::limits::MAX_TIMEOUT_MS;

/// What a watcher hands its client: an event, or the script's answer to
/// a sync marker (every event before it was handed on already).
enum WatchMessage {
    Event(Box<FilesystemEvent>),
    Synced(u64),
}

/// A started watcher: its messages, and the id of its current process in
/// the container (sync markers go to its stdin; a new process replaces one
/// that reached its timeout).
struct Watching {
    messages: mpsc::Receiver<WatchMessage>,
    process: Arc<Mutex<String>>,
}

/// What a watcher reports and how.
#[derive(Clone)]
struct WatchSpec {
    /// The watched directory (absolute).
    path: String,
    recursive: bool,
    /// Each event carries the entry it names (stat'ed when the event is
    /// handed on; none when the entry is gone).
    include_entry: bool,
}

/// Starts the watcher process and waits for it to say it watches; then a
/// task pumps its events into the returned channel until the channel's
/// receiver goes (the client left) or the process ends.
async fn start_watching(
    state: &Arc<AppState>,
    caller: &SandboxCaller,
    spec: WatchSpec,
) -> Result<Watching, ConnectError> {
    prepare(state, &project(caller), &caller.container_id, true).await?;
    let mut process = launch(state, caller, &spec.path, spec.recursive).await?;
    let current = Arc::new(Mutex::new(process.process_id.clone()));
    let (tx, rx) = mpsc::channel(MAX_BUFFERED_EVENTS);
    let state = Arc::clone(state);
    let caller = caller.clone();
    let process_id = Arc::clone(&current);
    tokio::spawn(async move {
        loop {
            let ended = pump(&state, &process, &spec, &tx).await;
            if tx.is_closed() {
                return;
            }
            // Reached its timeout while still wanted: watch on in a new one.
            if ended == Some(ProcessStatus::Timeout) {
                drop(process);
                if let Ok(next) = launch(&state, &caller, &spec.path, spec.recursive).await {
                    process = next;
                    *process_id.lock().unwrap_or_else(|p| p.into_inner()) =
                        process.process_id.clone();
                    continue;
                }
            }
            // Dropping `tx` tells the client the watcher ended.
            return;
        }
    });
    Ok(Watching {
        messages: rx,
        process: current,
    })
}

/// A running watcher process, and the output offset after its ready line.
struct Launched(WatchProcess, u64);

impl std::ops::Deref for Launched {
    type Target = WatchProcess;
    fn deref(&self) -> &WatchProcess {
        &self.0
    }
}

async fn launch(
    state: &Arc<AppState>,
    caller: &SandboxCaller,
    path: &str,
    recursive: bool,
) -> Result<Launched, ConnectError> {
    let process_id = shellgate_wire::new_id("e2b-watch-");
    state
        .e2b_watchers
        .claim(&caller.container_id, &process_id)?;
    let guard = WatchProcess {
        state: Arc::clone(state),
        container_id: caller.container_id.clone(),
        process_id: process_id.clone(),
    };
    let spec = ProcessSpec {
        command: "exec python3 -c \"$SHELLGATE_WATCH_SCRIPT\" \"$SHELLGATE_WATCH_PATH\" \"$SHELLGATE_WATCH_RECURSIVE\"".to_owned(),
        // Sync markers come on its stdin.
        stdin: true,
        pty: None,
        timeout_ms: WATCH_PROCESS_TIMEOUT_MS,
        env: vec![
            ("SHELLGATE_WATCH_SCRIPT".into(), WATCH_SCRIPT.into()),
            ("SHELLGATE_WATCH_PATH".into(), path.to_owned()),
            (
                "SHELLGATE_WATCH_RECURSIVE".into(),
                if recursive { "1" } else { "0" }.into(),
            ),
        ],
        cwd: None,
        // A watch is no work of the container's: it must not keep an idle
        // one awake (merge of `proc`'s engine change; the lead may judge).
        keeps_awake: false,
    };
    state
        .engine
        .start_process(&caller.container_id, &process_id, spec)
        .await
        .map_err(|e| connect_error(caller, e))?;
    // Its first line says whether it watches.
    let mut lines = LineReader::default();
    loop {
        let output = state
            .engine
            .read_process_output(
                &caller.container_id,
                &process_id,
                OutputRead {
                    after: lines.offset,
                    max_bytes: 64 * 1024,
                    wait: Duration::from_secs(30),
                },
            )
            .await
            .map_err(|e| connect_error(caller, e))?;
        let ended = output.process.status != ProcessStatus::Running
            && output.next_offset >= output.process.output_bytes;
        for line in lines.push(&output) {
            if line.ready {
                // Whatever came after the ready line is read again by the pump.
                return Ok(Launched(guard, lines.offset_after_first_line()));
            }
            if let Some(code) = line.error {
                let code = match code.as_str() {
                    "not_found" => ConnectCode::NotFound,
                    "invalid_argument" => ConnectCode::InvalidArgument,
                    "permission_denied" => ConnectCode::PermissionDenied,
                    _ => ConnectCode::Unavailable,
                };
                return Err(ConnectError::new(code, line.message.unwrap_or_default()));
            }
        }
        if ended {
            return Err(ConnectError::new(
                ConnectCode::Unavailable,
                "the directory watcher could not start in the sandbox (watching needs python3 in the image)",
            ));
        }
    }
}

/// Splits a process's stdout into the watcher's JSON lines.
#[derive(Default)]
struct LineReader {
    /// Where the next read starts.
    offset: u64,
    partial: Vec<u8>,
    /// The stdout offset just past the first complete line.
    first_line_end: Option<u64>,
}

impl LineReader {
    fn push(&mut self, output: &shellgate_sandbox_api::process::ProcessOutput) -> Vec<WatchLine> {
        let mut lines = Vec::new();
        for chunk in &output.chunks {
            if chunk.stream != ProcessStream::Stdout {
                continue;
            }
            for (i, byte) in chunk.data.iter().enumerate() {
                if *byte == b'\n' {
                    if self.first_line_end.is_none() {
                        self.first_line_end = Some(chunk.offset + i as u64 + 1);
                    }
                    if let Ok(line) = serde_json::from_slice::<WatchLine>(&self.partial) {
                        lines.push(line);
                    }
                    self.partial.clear();
                } else if self.partial.len() < 64 * 1024 {
                    self.partial.push(*byte);
                }
            }
        }
        self.offset = output.next_offset;
        lines
    }

    fn offset_after_first_line(&self) -> u64 {
        self.first_line_end.unwrap_or(self.offset)
    }
}

fn event_type(kind: &str) -> Option<EventType> {
    Some(match kind {
        "create" => EventType::Create,
        "write" => EventType::Write,
        "remove" => EventType::Remove,
        "rename" => EventType::Rename,
        "chmod" => EventType::Chmod,
        _ => return None,
    })
}

/// Hands the process's events on until it ends (its status returned) or
/// the receiver goes (`None`).
async fn pump(
    state: &Arc<AppState>,
    process: &Launched,
    spec: &WatchSpec,
    tx: &mpsc::Sender<WatchMessage>,
) -> Option<ProcessStatus> {
    let mut lines = LineReader {
        offset: process.1,
        ..LineReader::default()
    };
    loop {
        let read = state.engine.read_process_output(
            &process.container_id,
            &process.process_id,
            OutputRead {
                after: lines.offset,
                max_bytes: 64 * 1024,
                wait: Duration::from_secs(30),
            },
        );
        let output = tokio::select! {
            output = read => output,
            () = tx.closed() => return None,
        };
        let Ok(output) = output else {
            return Some(ProcessStatus::Exited);
        };
        for line in lines.push(&output) {
            let message = if let Some(marker) = line.synced {
                WatchMessage::Synced(marker)
            } else {
                let (Some(kind), Some(name)) = (line.e.as_deref(), line.n) else {
                    continue;
                };
                let Some(kind) = event_type(kind) else {
                    continue;
                };
                let entry = if spec.include_entry && kind != EventType::Remove {
                    watched_entry(state, &process.container_id, &spec.path, &name).await
                } else {
                    None
                };
                WatchMessage::Event(Box::new(FilesystemEvent {
                    name,
                    r#type: kind as i32,
                    entry,
                }))
            };
            // A full buffer (a slow client) loses this event, not the stream.
            if tx.try_send(message).is_err() && tx.is_closed() {
                return None;
            }
        }
        if output.process.status != ProcessStatus::Running
            && output.next_offset >= output.process.output_bytes
        {
            return Some(output.process.status);
        }
    }
}

/// The entry an event names (`name` relative to the watched `root`), as
/// `Stat` answers it; none when it is gone already or holds a secret.
async fn watched_entry(
    state: &AppState,
    container_id: &str,
    root: &str,
    name: &str,
) -> Option<EntryInfo> {
    let entry = state
        .engine
        .fs_stat(container_id, &format!("{root}/{name}"))
        .await
        .ok()?;
    let masker = state.engine.masker(container_id);
    if masker
        .as_deref()
        .is_some_and(|masker| holds_secret(&entry.path, masker))
    {
        return None;
    }
    Some(entry_info(entry, masker.as_deref()))
}

fn keepalive(headers: &HeaderMap) -> Duration {
    headers
        .get("keepalive-ping-interval")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|s| (1..=3600).contains(s))
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_KEEPALIVE)
}

async fn watch_dir(
    State(state): State<Arc<AppState>>,
    caller: SandboxCaller,
    _user: AsSandboxUser,
    headers: HeaderMap,
    StreamRequest(request): StreamRequest<WatchDirRequest>,
) -> Response {
    let path = match e2b_path(&request.path, "path") {
        Ok(path) => path,
        Err(e) => {
            return server_stream(tokio_stream::once(Err::<WatchDirResponse, _>(path_error(
                e,
            ))))
        }
    };
    let spec = WatchSpec {
        path,
        recursive: request.recursive,
        include_entry: request.include_entry,
    };
    let mut events = match start_watching(&state, &caller, spec).await {
        Ok(watching) => watching.messages,
        Err(e) => return server_stream(tokio_stream::once(Err::<WatchDirResponse, _>(e))),
    };
    let interval = keepalive(&headers);
    let (tx, rx) = mpsc::channel::<Result<WatchDirResponse, ConnectError>>(16);
    tokio::spawn(async move {
        let start = WatchDirResponse {
            event: Some(watch_dir_response::Event::Start(
                watch_dir_response::StartEvent {},
            )),
        };
        if tx.send(Ok(start)).await.is_err() {
            return;
        }
        loop {
            let next = tokio::select! {
                next = events.recv() => next,
                () = tokio::time::sleep(interval) => {
                    let ping = WatchDirResponse {
                        event: Some(watch_dir_response::Event::Keepalive(watch_dir_response::KeepAlive {})),
                    };
                    if tx.send(Ok(ping)).await.is_err() { return; }
                    continue;
                }
                () = tx.closed() => return,
            };
            let message = match next {
                // A stream has nobody to sync with.
                Some(WatchMessage::Synced(_)) => continue,
                Some(WatchMessage::Event(event)) => Ok(WatchDirResponse {
                    event: Some(watch_dir_response::Event::Filesystem(*event)),
                }),
                None => Err(ConnectError::not_found(
                    "the watched directory is gone (or the sandbox stopped)",
                )),
            };
            let last = message.is_err();
            if tx.send(message).await.is_err() || last {
                return;
            }
        }
    });
    server_stream(tokio_stream::wrappers::ReceiverStream::new(rx))
}

async fn create_watcher(
    State(state): State<Arc<AppState>>,
    caller: SandboxCaller,
    _user: AsSandboxUser,
    Unary(request): Unary<CreateWatcherRequest>,
) -> Result<UnaryReply<CreateWatcherResponse>, ConnectError> {
    let path = e2b_path(&request.path, "path").map_err(path_error)?;
    let spec = WatchSpec {
        path,
        recursive: request.recursive,
        include_entry: request.include_entry,
    };
    let Watching {
        messages: mut events,
        process,
    } = start_watching(&state, &caller, spec).await?;
    let watcher_id = shellgate_wire::new_id("watch_");
    let watcher = Arc::new(PollingWatcher {
        container_id: caller.container_id.clone(),
        process,
        syncs_sent: std::sync::atomic::AtomicU64::new(0),
        synced: tokio::sync::watch::Sender::new(0),
        events: Mutex::new(VecDeque::new()),
        ended: std::sync::atomic::AtomicBool::new(false),
        last_poll: Mutex::new(Instant::now()),
        stop: tokio::sync::Notify::new(),
    });
    state
        .e2b_watchers
        .polling
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(watcher_id.clone(), Arc::clone(&watcher));
    let (registry, id) = (Arc::clone(&state), watcher_id.clone());
    tokio::spawn(async move {
        loop {
            let idle_left = {
                let last = *watcher.last_poll.lock().unwrap_or_else(|p| p.into_inner());
                POLLING_IDLE.saturating_sub(last.elapsed())
            };
            if idle_left.is_zero() {
                break;
            }
            let next = tokio::select! {
                next = events.recv() => next,
                () = watcher.stop.notified() => break,
                () = tokio::time::sleep(idle_left) => continue,
            };
            match next {
                Some(WatchMessage::Synced(marker)) => {
                    watcher.synced.send_if_modified(|seen| {
                        let newer = marker > *seen;
                        if newer {
                            *seen = marker;
                        }
                        newer
                    });
                }
                Some(WatchMessage::Event(event)) => {
                    let mut buffer = watcher.events.lock().unwrap_or_else(|p| p.into_inner());
                    if buffer.len() >= MAX_BUFFERED_EVENTS {
                        buffer.pop_front();
                    }
                    buffer.push_back(*event);
                }
                None => {
                    watcher
                        .ended
                        .store(true, std::sync::atomic::Ordering::SeqCst);
                    // Kept until polled (the client learns it ended) or idle.
                    let idle_left = {
                        let last = *watcher.last_poll.lock().unwrap_or_else(|p| p.into_inner());
                        POLLING_IDLE.saturating_sub(last.elapsed())
                    };
                    tokio::select! {
                        () = watcher.stop.notified() => {}
                        () = tokio::time::sleep(idle_left) => {}
                    }
                    break;
                }
            }
        }
        // Dropping `events` ends the pump, which kills the process.
        drop(events);
        registry
            .e2b_watchers
            .polling
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    });
    Ok(UnaryReply(CreateWatcherResponse { watcher_id }))
}

/// The caller's polling watcher `watcher_id`, or not_found.
fn polling_watcher(
    state: &AppState,
    caller: &SandboxCaller,
    watcher_id: &str,
) -> Result<Arc<PollingWatcher>, ConnectError> {
    state
        .e2b_watchers
        .polling(&caller.container_id, watcher_id)
        .ok_or_else(|| ConnectError::not_found(format!("no watcher with id {watcher_id:?}")))
}

async fn get_watcher_events(
    State(state): State<Arc<AppState>>,
    caller: SandboxCaller,
    _user: AsSandboxUser,
    Unary(request): Unary<GetWatcherEventsRequest>,
) -> Result<UnaryReply<GetWatcherEventsResponse>, ConnectError> {
    let watcher = polling_watcher(&state, &caller, &request.watcher_id)?;
    *watcher.last_poll.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    if !watcher.ended.load(std::sync::atomic::Ordering::SeqCst) {
        sync_with_watcher(&state, &watcher).await;
    }
    let events: Vec<FilesystemEvent> = watcher
        .events
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .drain(..)
        .collect();
    if events.is_empty() && watcher.ended.load(std::sync::atomic::Ordering::SeqCst) {
        watcher.stop.notify_one();
        return Err(ConnectError::not_found(
            "the watcher ended: its directory is gone (or the sandbox stopped)",
        ));
    }
    Ok(UnaryReply(GetWatcherEventsResponse { events }))
}

/// The longest a poll waits for its watcher's answer to a sync marker
/// (a watcher whose process is slow or frozen gives what it has so far).
const SYNC_BOUND: Duration = Duration::from_secs(5);

/// Waits (bounded) until the watcher handed on every event inotify had
/// queued in the container when this was called: the events of a write
/// the client saw answered are then in its buffer.
async fn sync_with_watcher(state: &AppState, watcher: &PollingWatcher) {
    let marker = watcher
        .syncs_sent
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        + 1;
    let process = watcher
        .process
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let mut synced = watcher.synced.subscribe();
    let sent = state
        .engine
        .write_process_stdin(
            &watcher.container_id,
            &process,
            format!("{marker}\n").into_bytes(),
            false,
        )
        .await;
    if sent.is_ok() {
        let answered = synced.wait_for(|seen| *seen >= marker);
        let _ = tokio::time::timeout(SYNC_BOUND, answered).await;
    }
}

async fn remove_watcher(
    State(state): State<Arc<AppState>>,
    caller: SandboxCaller,
    _user: AsSandboxUser,
    Unary(request): Unary<RemoveWatcherRequest>,
) -> Result<UnaryReply<RemoveWatcherResponse>, ConnectError> {
    let watcher = polling_watcher(&state, &caller, &request.watcher_id)?;
    watcher.stop.notify_one();
    Ok(UnaryReply(RemoveWatcherResponse {}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_relative_to_the_e2b_home() {
        assert_eq!(e2b_path("a/b", "path").unwrap(), "/home/user/a/b");
        assert_eq!(e2b_path("~", "path").unwrap(), "/home/user");
        assert_eq!(e2b_path("~/x", "path").unwrap(), "/home/user/x");
        assert_eq!(e2b_path("", "path").unwrap(), "/home/user");
        assert_eq!(e2b_path("/tmp//y/", "path").unwrap(), "/tmp/y");
        assert!(e2b_path("a\0b", "path").is_err());
    }

    #[test]
    fn permissions_read_as_ls_shows_them() {
        assert_eq!(permissions(FsKind::Directory, 0o755), "drwxr-xr-x");
        assert_eq!(permissions(FsKind::File, 0o640), "-rw-r-----");
    }

    #[test]
    fn watcher_lines_become_events() {
        let line: WatchLine = serde_json::from_str(r#"{"e":"create","n":"a/b.txt"}"#).unwrap();
        assert_eq!(line.n.as_deref(), Some("a/b.txt"));
        assert_eq!(event_type("create"), Some(EventType::Create));
        assert_eq!(event_type("chmod"), Some(EventType::Chmod));
        assert_eq!(event_type("other"), None);
        let ready: WatchLine = serde_json::from_str(r#"{"ready":true}"#).unwrap();
        assert!(ready.ready);
        let synced: WatchLine = serde_json::from_str(r#"{"synced":7}"#).unwrap();
        assert_eq!(synced.synced, Some(7));
    }

    #[test]
    fn watchers_are_bounded_per_sandbox() {
        let watchers = watchers::Watchers::default();
        for i in 0..watchers::MAX_WATCHERS {
            watchers.claim("c", &i.to_string()).unwrap();
        }
        assert_eq!(
            watchers.claim("c", "x").unwrap_err().code,
            ConnectCode::ResourceExhausted
        );
        watchers.claim("other", "x").unwrap();
        watchers.release("c", "0");
        watchers.claim("c", "x").unwrap();
    }
}
