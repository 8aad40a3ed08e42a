//! A cluster's snapshots in the object store, and the copies of them each
//! node keeps.
//!
//! A node takes a snapshot with its engine as a single box does, then puts
//! the engine's archive of it (`export_snapshot`: a zstd-compressed tar,
//! holes kept) in the object store under `snapshots/<id>.tar.zst`, hashing
//! it as it streams; the row, with the archive's digest, is written only
//! after the object is whole (a put is committed whole or not at all). A
//! node killed mid-upload leaves no object and no row; one killed between
//! the object and its row leaves an object no row names, which a node's
//! sweep deletes once it is [`ORPHAN_AFTER_SECONDS`] old.
//!
//! A create from a snapshot on any node first makes sure its engine holds
//! it ([`hold`]): a snapshot this node holds already is used as it is;
//! another is fetched (to an anonymous file in the spool directory),
//! checked against the row's digest, and unpacked by the engine (whole or
//! not at all). What a node holds is a cache (`snapshot_cache`): bounded
//! by `snapshot_cache_bytes`, least recently used removed first, never one
//! a create is restoring from, and one whose row is gone removed by the
//! sweep. One fetch at a time per snapshot on a node.

use std::collections::HashMap;
use std::io::{Read, Seek, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use shellgate_objects::{BodyWriter, Key, ObjectError};
use shellgate_sandbox_api::SandboxError;
use shellgate_store::SnapshotRow;

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// The object store's folder of snapshot archives.
const FOLDER: &str = "snapshots";
/// The archives' name ending (what the engine's archive is).
const SUFFIX: &str = ".tar.zst";
/// An archive no row names is deleted once this old: a take writes its
/// row right after its object, so a younger one may be a take's still.
const ORPHAN_AFTER_SECONDS: i64 = 3600;
/// How often a node's sweep looks for archives and copies no row names.
const SWEEP_EVERY_SECONDS: i64 = 60;
/// The size of the pieces an archive is read in.
const CHUNK: usize = 256 * 1024;

/// Whether this server's snapshots go to the object store: a cluster's
/// node (a single box keeps them on its disk only).
pub(crate) fn archived(state: &AppState) -> bool {
    state.config.cluster.role == crate::config::Role::Node
}

fn archive_key(id: &str) -> ApiResult<Key> {
    Key::new(format!("{FOLDER}/{id}{SUFFIX}")).map_err(crate::blobs::internal)
}

/// Puts the archive of snapshot `id` (its engine's, on this node) in the
/// object store; answers its digest (`sha256:<hex>`).
pub(crate) async fn publish(state: &Arc<AppState>, id: &str) -> ApiResult<String> {
    let key = archive_key(id)?;
    let (writer, body) = shellgate_objects::blocking_body();
    let engine = Arc::clone(&state.engine);
    let snapshot_id = id.to_owned();
    let pump = tokio::task::spawn_blocking(move || {
        let archive = engine.export_snapshot(&snapshot_id)?;
        pump(archive, writer).map_err(|e| SandboxError::Setup(e.to_string()))
    });
    let put = state.objects.put(&key, body).await;
    let pumped = pump
        .await
        .map_err(|e| ApiError::internal(format!("the archive's writer failed: {e}")))?;
    match (put, pumped) {
        (Ok(_), Ok(digest)) => Ok(digest),
        // The archive's own failure says more than the store's "cut off".
        (_, Err(error)) => Err(crate::engine::engine_error(id, error)),
        (Err(error), Ok(_)) => Err(crate::blobs::internal(error)),
    }
}

/// Copies `archive` into `writer`, hashing it; the body ends only when the
/// whole archive was read (a failed read fails it: nothing is stored).
pub(crate) fn pump(
    mut archive: Box<dyn Read + Send>,
    mut writer: BodyWriter,
) -> std::io::Result<String> {
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; CHUNK];
    loop {
        let read = match archive.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => read,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                writer.fail(std::io::Error::new(e.kind(), e.to_string()));
                return Err(e);
            }
        };
        hasher.update(&buffer[..read]);
        writer.write_all(&buffer[..read])?;
    }
    writer.finish()?;
    Ok(format!("sha256:{:x}", hasher.finalize()))
}

/// Removes snapshot `id`'s archive (after its row).
pub(crate) async fn unpublish(state: &AppState, id: &str) {
    let removed = match archive_key(id) {
        Ok(key) => state.objects.delete(&key).await.map_err(|e| e.to_string()),
        Err(e) => Err(e.message),
    };
    if let Err(e) = removed {
        // Its row is gone: the sweep deletes it later.
        tracing::warn!(snapshot = %id, "could not delete its archive: {e}");
    }
}

/// A snapshot a create is restoring from: the cache keeps it until this
/// is dropped.
pub(crate) struct Held {
    state: Arc<AppState>,
    id: String,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.state.snapshot_cache.held.unpin(&self.id);
    }
}

/// Makes sure this node's engine holds snapshot `row` (fetched from the
/// object store if it does not), and keeps it until the answer is
/// dropped; `None` for a snapshot only its own node holds (a single
/// box's, a fork's).
pub(crate) async fn hold(state: &Arc<AppState>, row: &SnapshotRow) -> ApiResult<Option<Held>> {
    let Some(digest) = &row.archive_digest else {
        return Ok(None);
    };
    let cache = &state.snapshot_cache;
    let lock = cache.locks.of(&row.id);
    let fetched = {
        let _one_fetch = lock.lock().await;
        if cache.held.pin(&row.id) {
            Ok(false)
        } else {
            fetch(state, &row.id, digest).await.map(|()| {
                cache
                    .held
                    .pin_with(&row.id, u64::try_from(row.size_bytes).unwrap_or(0));
                true
            })
        }
    };
    drop(lock);
    cache.locks.forget(&row.id);
    // Only a pin taken is given back (a failed fetch took none).
    let fetched = fetched?;
    let held = Held {
        state: Arc::clone(state),
        id: row.id.clone(),
    };
    if fetched {
        evict(state).await;
    }
    Ok(Some(held))
}

/// Fetches snapshot `id`'s archive, checks it against `digest` and has
/// the engine unpack it.
async fn fetch(state: &Arc<AppState>, id: &str, digest: &str) -> ApiResult<()> {
    let key = archive_key(id)?;
    let file = match state.objects.open_file(&key, &state.spool_dir).await {
        Ok(file) => file,
        // Deleted since its row was read.
        Err(ObjectError::NotFound(_)) => return Err(ApiError::not_found("snapshot", id)),
        Err(e) => return Err(crate::blobs::internal(e)),
    };
    let expected = digest.to_owned();
    let shown = id.to_owned();
    let file =
        tokio::task::spawn_blocking(move || verify(file, &expected, &format!("snapshot {shown}")))
            .await
            .map_err(|e| ApiError::internal(format!("the archive's check failed: {e}")))??;
    match state.engine.import_snapshot(id, file).await {
        Ok(()) | Err(SandboxError::AlreadyExists(_)) => {
            tracing::info!(snapshot = %id, "restored a snapshot from the object store");
            Ok(())
        }
        Err(error) => Err(crate::engine::engine_error(id, error)),
    }
}

/// `file` rewound, if its bytes hash to `expected`; `what` names what it
/// is the archive of (`snapshot snap_…`, `image app`).
pub(crate) fn verify(
    mut file: std::fs::File,
    expected: &str,
    what: &str,
) -> ApiResult<std::fs::File> {
    let io = |e: std::io::Error| ApiError::internal(format!("reading {what}'s archive: {e}"));
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; CHUNK];
    loop {
        let read = file.read(&mut buffer).map_err(io)?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
    }
    let found = format!("sha256:{:x}", hasher.finalize());
    if found != expected {
        return Err(ApiError::internal(format!(
            "{what}'s archive in the object store does not match its digest \
             (found {found}, its row says {expected}); it is not used"
        )));
    }
    file.rewind().map_err(io)?;
    Ok(file)
}

/// Removes the least recently used snapshots this node holds beyond
/// `snapshot_cache_bytes` (never one a create restores from).
async fn evict(state: &Arc<AppState>) {
    let bound = state.config.cluster.snapshot_cache_bytes.bytes();
    for id in state.snapshot_cache.held.beyond(bound) {
        remove_held(state, &id).await;
    }
}

/// Removes this node's copy of snapshot `id`, unless a create is
/// restoring from it.
pub(crate) async fn remove_held(state: &AppState, id: &str) {
    let cache = &state.snapshot_cache;
    let lock = cache.locks.of(id);
    {
        let _one_at_a_time = lock.lock().await;
        if cache.held.forget_unpinned(id) {
            if let Err(e) = state.engine.delete_snapshot(id).await {
                tracing::warn!(snapshot = %id, "could not remove this node's copy: {e}");
            }
        }
    }
    drop(lock);
    cache.locks.forget(id);
}

/// At a node's start: the snapshots its engine holds whose rows exist
/// are its cache; the others (deleted meanwhile, or a take a crash cut
/// short before its row) are removed.
pub(crate) async fn adopt(state: &Arc<AppState>) -> ApiResult<()> {
    let held = state.engine.snapshot_ids().await?;
    if held.is_empty() {
        return Ok(());
    }
    let asked = held.clone();
    let existing: HashMap<String, i64> = state
        .db(move |s| s.existing_snapshots(&asked))
        .await?
        .into_iter()
        .collect();
    for id in &held {
        match existing.get(id) {
            Some(bytes) => state
                .snapshot_cache
                .held
                .adopt(id, u64::try_from(*bytes).unwrap_or(0)),
            None => {
                tracing::info!(snapshot = %id, "removing a snapshot the store does not know");
                if let Err(e) = state.engine.delete_snapshot(id).await {
                    tracing::warn!(snapshot = %id, "could not remove it: {e}");
                }
            }
        }
    }
    evict(state).await;
    Ok(())
}

/// At most once every [`SWEEP_EVERY_SECONDS`]: removes this node's copies
/// of snapshots deleted since, and the archives no row names (older than
/// [`ORPHAN_AFTER_SECONDS`]). Every node may sweep the shared store: a
/// delete is idempotent.
pub(crate) async fn sweep(state: &Arc<AppState>, now: i64) -> ApiResult<()> {
    let cache = &state.snapshot_cache;
    let last = cache.swept_at.load(Ordering::SeqCst);
    if last != 0 && now - last < SWEEP_EVERY_SECONDS {
        return Ok(());
    }
    cache.swept_at.store(now, Ordering::SeqCst);
    let copies = cache.held.names();
    if !copies.is_empty() {
        let asked = copies.clone();
        let existing: std::collections::HashSet<String> = state
            .db(move |s| s.existing_snapshots(&asked))
            .await?
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        for id in copies.iter().filter(|id| !existing.contains(*id)) {
            remove_held(state, id).await;
        }
    }
    let folder = Key::new(FOLDER).map_err(crate::blobs::internal)?;
    let listed = state
        .objects
        .list_folder(&folder)
        .await
        .map_err(crate::blobs::internal)?;
    let old: Vec<(String, Key)> = listed
        .into_iter()
        .filter(|object| now - object.modified_unix >= ORPHAN_AFTER_SECONDS)
        .filter_map(|object| {
            let name = object.key.as_str().rsplit('/').next()?;
            Some((name.strip_suffix(SUFFIX)?.to_owned(), object.key.clone()))
        })
        .collect();
    if old.is_empty() {
        return Ok(());
    }
    let asked: Vec<String> = old.iter().map(|(id, _)| id.clone()).collect();
    let existing: std::collections::HashSet<String> = state
        .db(move |s| s.existing_snapshots(&asked))
        .await?
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    for (id, key) in old.iter().filter(|(id, _)| !existing.contains(id)) {
        tracing::info!(snapshot = %id, "deleting an archive no snapshot names");
        if let Err(e) = state.objects.delete(key).await {
            tracing::warn!(snapshot = %id, "could not delete its archive: {e}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_archive_is_stored_only_when_read_whole_and_its_digest_is_checked() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let (writer, mut body) = shellgate_objects::blocking_body();
        let reading = std::thread::spawn(move || {
            pump(Box::new(std::io::Cursor::new(b"archive".to_vec())), writer)
        });
        let mut received = Vec::new();
        runtime.block_on(async {
            use futures_util::StreamExt;
            while let Some(chunk) = body.next().await {
                received.extend_from_slice(&chunk.expect("whole"));
            }
        });
        let digest = reading.join().expect("pump").expect("digest");
        assert_eq!(received, b"archive");
        assert_eq!(digest, format!("sha256:{:x}", Sha256::digest(b"archive")));

        let dir = std::env::temp_dir().join(format!("snapshot-archive-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let path = dir.join("archive");
        std::fs::write(&path, b"archive").expect("write");
        let file = std::fs::File::open(&path).expect("open");
        let mut checked = verify(file, &digest, "snapshot snap_1").expect("matches");
        let mut again = Vec::new();
        checked.read_to_end(&mut again).expect("read");
        assert_eq!(again, b"archive", "rewound");
        let file = std::fs::File::open(&path).expect("open");
        let refused = verify(file, "sha256:00", "snapshot snap_1").expect_err("does not match");
        assert!(
            refused.message.contains("does not match"),
            "{}",
            refused.message
        );
        let _ = std::fs::remove_dir_all(&dir);

        let (writer, mut body) = shellgate_objects::blocking_body();
        let failing = std::thread::spawn(move || pump(Box::new(Failing), writer));
        let ended = runtime.block_on(async {
            use futures_util::StreamExt;
            let mut last = None;
            while let Some(chunk) = body.next().await {
                last = Some(chunk);
            }
            last
        });
        assert!(failing.join().expect("pump").is_err());
        assert!(
            matches!(ended, Some(Err(_))),
            "a failed archive ends the body in an error: nothing is stored"
        );
    }

    struct Failing;

    impl Read for Failing {
        fn read(&mut self, _buffer: &mut [u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("tar failed"))
        }
    }
}
