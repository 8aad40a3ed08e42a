//! Start-up after a crash: whatever a previous engine left behind is either
//! taken over (containers, pooled disks) or removed (cgroups, half-made and
//! throwaway containers). A container whose id slot cannot be trusted is
//! quarantined, never mapped to a range another container may use.

use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;
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

/// Adopts the pool's formatted disks and loads every container's
/// directory (its spec and id slot) as stopped.
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
    let mut loaded = HashMap::new();
    for Found {
        name,
        dir,
        spec,
        disk_ids,
    } in read_all(inner, dirs)?
    {
        let spec = match (validate_container_id(&name), spec) {
            (Ok(()), Some(spec)) if !spec.ephemeral => spec,
            _ => {
                tracing::info!(dir = %dir.display(), "removing a half-created, destroyed or throwaway container");
                let _ = fs::remove_dir_all(&dir);
                continue;
            }
        };
        // Kept slots are claimed one after another, in the directory's
        // order: of two claiming one slot, the second is refused. A disk
        // holding the container's own ids claims none until it starts.
        let disk_ids = disk_ids.and_then(|ids| match ids {
            DiskIds::Shifted(slot) if !inner.slots.claim(slot) => {
                Err(format!("its id slot {slot} belongs to another container"))
            }
            ids => Ok(ids),
        });
        match disk_ids {
            Ok(disk_ids) => {
                loaded.insert(
                    name.clone(),
                    Arc::new(Container::new(name, spec, dir, disk_ids)),
                );
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
    inner.containers.replace_all(loaded);
    Ok(())
}

/// A container directory's spec and the ids its disk holds, as read.
struct Found {
    name: String,
    dir: PathBuf,
    spec: Option<ContainerSpec>,
    disk_ids: Result<DiskIds, String>,
}

/// How many threads read containers' directories at start-up: with
/// thousands on a cold disk the reads wait on the device, one at a time
/// they took seconds.
const READERS: usize = 8;

/// Reads every directory's spec and slot, on [`READERS`] threads; the
/// results in `dirs`' order.
fn read_all(inner: &Inner, dirs: Vec<(String, PathBuf)>) -> Result<Vec<Found>, SandboxError> {
    let read = |(name, dir): (String, PathBuf)| {
        let spec = fs::read(dir.join("spec.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let disk_ids = inner.slots.read(&dir);
        Found {
            name,
            dir,
            spec,
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
