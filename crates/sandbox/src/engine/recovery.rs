//! Start-up after a crash: whatever a previous engine left behind is either
//! taken over (containers, pooled disks) or removed (cgroups, half-made and
//! throwaway containers). A container whose id slot cannot be trusted is
//! quarantined, never mapped to a range another container may use.
//!
//! Before the engine serves, each container's directory is read only for
//! the ids its disk holds (its `uid-slot` file: a kept slot must be claimed
//! before any is leased), and not even that when the previous start found
//! no container keeping a slot and none has been made since (the
//! [`NO_KEPT_SLOTS`] file): the directory's names alone then. A
//! container's spec is read at its first use ([`load_stored`]). What no
//! request touches is checked in the background ([`tidy`]): the directories
//! of throwaway containers or of ones without a spec are removed, and image
//! trees no container uses are pruned.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::container::Container;
use super::pools::FormattedDisk;
use super::slots::DiskIds;
use super::Inner;
use crate::backend::{validate_container_id, ContainerSpec};
use crate::error::{IoContext, SandboxError};

/// Kills and removes leftover cgroups, drops half-made containers and
/// pool images, and loads every container as stopped.
pub(super) async fn recover(inner: &Arc<Inner>) -> Result<(), SandboxError> {
    for id in inner.cgroups.existing() {
        tracing::info!(container = %id, "removing cgroup left by a previous run");
        if let Err(e) = inner.cgroups.remove(&id, Duration::from_secs(5)).await {
            tracing::warn!(container = %id, "could not remove leftover cgroup: {e}");
        }
    }
    // A file walk of every container's directory: off the async workers.
    let loading = Arc::clone(inner);
    super::blocking(move || load(&loading)).await
}

/// Present in the engine's directory while no container directory names a
/// kept slot (every disk holds its container's own ids): a start then
/// reads none of their `uid-slot` files. Removed before a container that
/// keeps a slot is made.
pub(super) const NO_KEPT_SLOTS: &str = "no-kept-slots";

/// Removes the [`NO_KEPT_SLOTS`] mark: the next start reads every
/// container's slot file.
pub(super) fn some_slots_kept(inner: &Inner) -> Result<(), SandboxError> {
    match fs::remove_file(inner.config.data_dir.join(NO_KEPT_SLOTS)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(SandboxError::io(format!("remove {NO_KEPT_SLOTS}"), e))
        }
        _ => Ok(()),
    }
}

/// Adopts the pool's formatted disks and takes every container's
/// directory as stored (stopped), its kept slot claimed.
fn load(inner: &Inner) -> Result<(), SandboxError> {
    let pool_dir = inner.config.data_dir.join("pool");
    let mut pool = Vec::new();
    for entry in fs::read_dir(&pool_dir)
        .context(|| "read pool".into())?
        .flatten()
    {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "img") {
            pool.push(FormattedDisk(path));
        } else {
            let _ = fs::remove_file(&path);
        }
    }
    inner.pools.adopt_disks(pool);
    let containers_dir = inner.config.data_dir.join("containers");
    let mut dirs = Vec::new();
    for entry in fs::read_dir(&containers_dir)
        .context(|| "read containers".into())?
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with(".quarantine-") {
            dirs.push((name, entry.path()));
        }
    }
    let marked = inner.config.data_dir.join(NO_KEPT_SLOTS);
    let unread = inner.disks_hold_own_ids() && marked.exists();
    if !inner.disks_hold_own_ids() {
        some_slots_kept(inner)?;
    }
    let found = match unread {
        true => dirs
            .into_iter()
            .map(|(name, dir)| Found {
                name,
                dir,
                disk_ids: Ok(None),
            })
            .collect(),
        false => read_all(inner, dirs)?,
    };
    let mut any_kept = false;
    let mut stored = HashMap::new();
    for Found {
        name,
        dir,
        disk_ids,
    } in found
    {
        if validate_container_id(&name).is_err() {
            tracing::info!(dir = %dir.display(), "removing a half-created or destroyed container");
            let _ = fs::remove_dir_all(&dir);
            continue;
        }
        // Kept slots are claimed one after another, in the directory's
        // order: of two claiming one slot, the second is refused. A disk
        // holding the container's own ids claims none until it starts.
        let disk_ids = disk_ids.and_then(|ids| match ids {
            Some(DiskIds::Shifted(slot)) if !inner.slots.claim(slot) => {
                Err(format!("its id slot {slot} belongs to another container"))
            }
            ids => Ok(ids),
        });
        any_kept |= !matches!(disk_ids, Ok(None | Some(DiskIds::Own)));
        match disk_ids {
            Ok(disk_ids) => {
                stored.insert(name, disk_ids);
            }
            Err(why) => {
                // Its files are owned by an id range we cannot name:
                // keep them for the operator, out of the engine's way.
                let quarantine = containers_dir.join(format!(".quarantine-{name}"));
                tracing::error!(
                    container = %name,
                    "refusing container: {why}; moved to {}",
                    quarantine.display()
                );
                let _ = fs::rename(&dir, &quarantine);
            }
        }
    }
    inner.containers.replace_all(stored);
    if !unread && !any_kept && inner.disks_hold_own_ids() {
        fs::write(&marked, b"").context(|| format!("write {NO_KEPT_SLOTS}"))?;
    }
    Ok(())
}

/// Reads the spec in container directory `dir`: `None` for a leftover
/// whose directory is to go (no spec, a corrupt one, or a throwaway
/// container's, which a crash left). An error other than a missing or
/// corrupt file (a full descriptor table, say) is returned: it is no
/// reason to remove anything.
fn read_spec(dir: &Path) -> Result<Option<ContainerSpec>, SandboxError> {
    let path = dir.join("spec.json");
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(SandboxError::io(format!("read {}", path.display()), e)),
    };
    Ok(serde_json::from_slice::<ContainerSpec>(&bytes)
        .ok()
        .filter(|spec| !spec.ephemeral))
}

/// Removes a stored container's directory (it is no longer in the map),
/// then returns the slot its disk kept.
fn remove_leftover(inner: &Inner, id: &str, disk_ids: Option<DiskIds>) {
    let dir = inner.config.data_dir.join("containers").join(id);
    tracing::info!(dir = %dir.display(), "removing a throwaway container or one without a spec");
    if let Err(e) = fs::remove_dir_all(&dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(container = %id, "could not remove its directory: {e}");
        }
    }
    if let Some(DiskIds::Shifted(slot)) = disk_ids {
        inner.slots.release(slot);
    }
}

/// Reads a stored container's record at its first use (its slot file
/// too, if the start did not). Blocking.
pub(super) fn load_stored(
    inner: &Inner,
    id: &str,
    disk_ids: Option<DiskIds>,
) -> Result<Arc<Container>, SandboxError> {
    let dir = inner.config.data_dir.join("containers").join(id);
    let disk_ids = match disk_ids {
        Some(ids) => ids,
        // Only an older engine could have made it (tampering aside): the
        // slot it names can be claimed only by a start that reads them all.
        None => match inner.slots.read(&dir) {
            Ok(DiskIds::Own) => DiskIds::Own,
            Ok(DiskIds::Shifted(_)) | Err(_) => {
                some_slots_kept(inner)?;
                return Err(SandboxError::Setup(format!(
                    "container {id}'s uid-slot file does not say its disk holds its own ids: \
                     restart the server to have its slot checked"
                )));
            }
        },
    };
    match read_spec(&dir)? {
        Some(spec) => inner
            .containers
            .loaded(Container::new(id.to_owned(), spec, dir, disk_ids)),
        None => {
            if inner.containers.forget_stored(id) {
                remove_leftover(inner, id, Some(disk_ids));
            }
            Err(SandboxError::NotFound(id.to_owned()))
        }
    }
}

/// Checks every container no request has loaded yet, in the background
/// once the engine serves: leftovers go, and what the others were made
/// from is returned (image, revision) for pruning. Blocking; stops early
/// (returning `None`) when `closing` says so.
pub(super) fn tidy(inner: &Inner, closing: impl Fn() -> bool) -> Option<Vec<(String, String)>> {
    let mut revisions = Vec::new();
    let stored = inner.containers.stored();
    for (id, disk_ids) in &stored {
        if closing() {
            return None;
        }
        // A stored container's spec is as it was when it was read: what it
        // was made from is known after the first pass.
        if let Some(known) = inner.stored_made_from.get(id) {
            revisions.extend(known);
            continue;
        }
        let dir = inner.config.data_dir.join("containers").join(id);
        match read_spec(&dir) {
            Ok(Some(spec)) => {
                let made_from = spec.image_revision.map(|revision| (spec.image, revision));
                inner.stored_made_from.set(id, made_from.clone());
                revisions.extend(made_from);
            }
            Ok(None) => {
                if inner.containers.forget_stored(id) {
                    remove_leftover(inner, id, *disk_ids);
                }
            }
            // Unknown, so kept, and its image with it.
            Err(e) => {
                tracing::warn!(container = %id, "could not read its spec: {e}");
                return None;
            }
        }
    }
    // Those loaded or removed since are not stored any more.
    inner
        .stored_made_from
        .keep_only(stored.iter().map(|(id, _)| id.as_str()));
    Some(revisions)
}

/// What each stored container was made from (its image and revision, or
/// `None` for an image without revisions), by id, as [`tidy`] read it.
#[derive(Debug, Default)]
pub(super) struct MadeFrom(std::sync::Mutex<HashMap<String, Option<(String, String)>>>);

impl MadeFrom {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Option<(String, String)>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, id: &str) -> Option<Option<(String, String)>> {
        self.lock().get(id).cloned()
    }

    fn set(&self, id: &str, made_from: Option<(String, String)>) {
        self.lock().insert(id.to_owned(), made_from);
    }

    /// Forgets every container but those named.
    fn keep_only<'a>(&self, ids: impl Iterator<Item = &'a str>) {
        let keep: std::collections::HashSet<&str> = ids.collect();
        self.lock().retain(|id, _| keep.contains(id.as_str()));
    }
}

/// A container directory's name and the ids its disk holds, as read.
struct Found {
    name: String,
    dir: PathBuf,
    disk_ids: Result<Option<DiskIds>, String>,
}

/// How many threads read containers' directories at start-up: with
/// thousands on a cold disk the reads wait on the device, one at a time
/// they took seconds.
const READERS: usize = 8;

/// Reads every directory's slot file, on [`READERS`] threads; the results
/// in `dirs`' order.
fn read_all(inner: &Inner, dirs: Vec<(String, PathBuf)>) -> Result<Vec<Found>, SandboxError> {
    let read = |(name, dir): (String, PathBuf)| {
        let disk_ids = inner.slots.read(&dir).map(Some);
        Found {
            name,
            dir,
            disk_ids,
        }
    };
    if dirs.len() < 2 * READERS {
        return Ok(dirs.into_iter().map(read).collect());
    }
    let per_thread = dirs.len().div_ceil(READERS);
    let mut chunks = Vec::new();
    let mut rest = dirs;
    while rest.len() > per_thread {
        let tail = rest.split_off(per_thread);
        chunks.push(rest);
        rest = tail;
    }
    chunks.push(rest);
    std::thread::scope(|scope| {
        let readers: Vec<_> = chunks
            .into_iter()
            .map(|chunk| scope.spawn(move || chunk.into_iter().map(read).collect::<Vec<_>>()))
            .collect();
        let mut found = Vec::new();
        for reader in readers {
            // A container left out would be taken for one whose
            // directory is gone: no partial load.
            found.extend(reader.join().map_err(|_| {
                SandboxError::Setup("reading the containers' directories failed".into())
            })?);
        }
        Ok(found)
    })
}
