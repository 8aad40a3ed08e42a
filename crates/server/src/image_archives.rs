//! A cluster's project images in the object store, and the copies of them
//! each node installs.
//!
//! A node builds, imports or commits an image with its engine as a single
//! box does, then puts the engine's archive of it (`export_image`: the
//! snapshot archive's form) in the object store under
//! `images/<revision>-<name>.tar.zst`, hashing it as it streams; the row
//! (`images`: owner, revision, digest, the engine's details) is written
//! only after the object is whole. A build's job is `ready`, a commit
//! answers, only then: from that moment every node lists the image.
//!
//! A create naming the image on a node whose engine does not hold that
//! revision first fetches the archive (to an anonymous file in the spool
//! directory), checks it against the row's digest and has the engine
//! install it with the row's details, revision included ([`hold`]); one
//! fetch per image at a time on a node. A node lists the rows' images
//! whether or not it holds them, and hides a project image of its own that
//! no row names (deleted through another node).
//!
//! A delete removes the row, then the archive, then this node's copy; the
//! other nodes' copies are removed by their sweep ([`sweep`]), as are
//! archives no row names (a previous revision's, or one whose node died
//! before its row) once they are an hour old. The engine keeps a deleted
//! image's tree while containers made from it run.
//!
//! The copies a node fetched are a cache (`image_cache`): bounded by
//! `image_cache_bytes`, least recently used removed first (after a fetch,
//! and by the sweep), fetched again when next used. Never removed: one a
//! container on this node (live, suspended, being made) is made from, one
//! a create or a build holds ([`hold`]'s answer, taken under the image's
//! lock, which a removal takes too), the copy this node made (the row names
//! the node that published the archive) and the operator's images.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use shellgate_objects::{Key, ObjectError};
use shellgate_sandbox_api::image::{ImageDetails, ImageInfo};
use shellgate_sandbox_api::SandboxError;
use shellgate_store::ImageRow;

use crate::error::{ApiError, ApiResult};
use crate::image_cache::{NodeCopy, Origin};
use crate::state::AppState;

/// The object store's folder of image archives.
const FOLDER: &str = "images";
/// The archives' name ending (what the engine's archive is).
const SUFFIX: &str = ".tar.zst";
/// An archive or a node's copy no row names is deleted once this old: a
/// node writes an image's row right after its archive, so a younger one
/// may be a build's still.
const ORPHAN_AFTER_SECONDS: i64 = 3600;

/// Whether this server's project images go to the object store: a
/// cluster's node (a single box keeps them on its disk only).
pub(crate) fn archived(state: &AppState) -> bool {
    state.config.cluster.role == crate::config::Role::Node
}

/// The key of image `name`'s archive at `revision` (a revision is letters
/// and digits: the first `-` ends it).
fn archive_key(name: &str, revision: &str) -> ApiResult<Key> {
    Key::new(format!("{FOLDER}/{revision}-{name}{SUFFIX}")).map_err(crate::blobs::internal)
}

/// The image and revision an archive's key names.
fn named_by(key: &Key) -> Option<(String, String)> {
    let file = key.as_str().rsplit('/').next()?.strip_suffix(SUFFIX)?;
    let (revision, name) = file.split_once('-')?;
    Some((name.to_owned(), revision.to_owned()))
}

/// How often the sweep lists the object store's archives.
const LIST_EVERY_SECONDS: i64 = 60;

/// The images this node is making now (a build, an import, a commit, up
/// to its row): the sweep leaves their copies alone, though no row names
/// them yet.
fn making() -> std::sync::MutexGuard<'static, HashMap<String, usize>> {
    static MAKING: OnceLock<Mutex<HashMap<String, usize>>> = OnceLock::new();
    MAKING
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Image `name` is being made here until this is dropped.
pub(crate) struct Making(String);

impl Making {
    pub(crate) fn new(name: &str) -> Self {
        *making().entry(name.to_owned()).or_default() += 1;
        Self(name.to_owned())
    }
}

impl Drop for Making {
    fn drop(&mut self) {
        let mut names = making();
        if let Some(count) = names.get_mut(&self.0) {
            *count -= 1;
            if *count == 0 {
                names.remove(&self.0);
            }
        }
    }
}

/// One fetch, publish or removal at a time per image on this node.
fn image_lock(name: &str) -> Arc<tokio::sync::Mutex<()>> {
    static LOCKS: std::sync::LazyLock<crate::named_locks::NamedLocks> =
        std::sync::LazyLock::new(Default::default);
    LOCKS.of(name)
}

/// The fetched copies' uses on this node.
fn cache() -> &'static crate::image_cache::ImageCache {
    static CACHE: std::sync::LazyLock<crate::image_cache::ImageCache> =
        std::sync::LazyLock::new(Default::default);
    &CACHE
}

/// An image a create or a build is about to use: this node keeps its copy
/// until this is dropped.
pub(crate) struct Held(String);

impl Drop for Held {
    fn drop(&mut self) {
        cache().unpin(&self.0);
    }
}

/// Puts image `name` (this node's engine's, just made) in the object
/// store and records it. A name another project's row holds is a 409 (the
/// archive is deleted again).
pub(crate) async fn publish(state: &Arc<AppState>, name: &str) -> ApiResult<()> {
    let engine = Arc::clone(&state.engine);
    let wanted = name.to_owned();
    let (details, archive) = tokio::task::spawn_blocking(move || engine.export_image(&wanted))
        .await
        .map_err(|e| ApiError::internal(format!("the image's archive failed: {e}")))?
        .map_err(ApiError::from)?;
    let (Some(revision), Some(project)) = (details.revision.clone(), details.project.clone())
    else {
        return Err(ApiError::internal(format!(
            "image {name} has no revision or project to publish"
        )));
    };
    let key = archive_key(name, &revision)?;
    let (writer, body) = shellgate_objects::blocking_body();
    let pump = tokio::task::spawn_blocking(move || crate::snapshot_archives::pump(archive, writer));
    let put = state.objects.put(&key, body).await;
    let pumped = pump
        .await
        .map_err(|e| ApiError::internal(format!("the archive's writer failed: {e}")))?;
    let digest = match (put, pumped) {
        (Ok(_), Ok(digest)) => digest,
        (_, Err(error)) => {
            return Err(ApiError::internal(format!(
                "archiving image {name} failed: {error}"
            )))
        }
        (Err(error), Ok(_)) => return Err(crate::blobs::internal(error)),
    };
    let row = ImageRow {
        name: name.to_owned(),
        project,
        revision,
        archive_digest: digest,
        details: serde_json::to_string(&details)
            .map_err(|e| ApiError::internal(format!("encoding image {name}'s details: {e}")))?,
        node_id: state.node_name.clone(),
        created_at: crate::time::now(),
    };
    let written = state.db(move |s| s.put_image(&row)).await?;
    if !written {
        let _ = state.objects.delete(&key).await;
        return Err(ApiError::conflict(format!(
            "an image named {name:?} exists and is not this project's: choose another name"
        )));
    }
    tracing::info!(image = %name, "published an image to the object store");
    Ok(())
}

/// Deletes image `name`'s archive at `revision` (after its row).
pub(crate) async fn unpublish(state: &AppState, name: &str, revision: &str) {
    let removed = match archive_key(name, revision) {
        Ok(key) => state.objects.delete(&key).await.map_err(|e| e.to_string()),
        Err(e) => Err(e.message),
    };
    if let Err(e) = removed {
        // Its row is gone: the sweep deletes it later.
        tracing::warn!(image = %name, "could not delete its archive: {e}");
    }
}

/// The images of this node's engine and of the object store's rows: a
/// row's image this node does not hold (or holds at another revision) as
/// the row says; a project image of this node's no row names is left out.
pub(crate) async fn merged(
    state: &AppState,
    mut local: Vec<ImageInfo>,
) -> ApiResult<Vec<ImageInfo>> {
    let rows = state.db(|s| s.image_rows()).await?;
    let by_name: HashMap<&str, &ImageRow> = rows.iter().map(|r| (r.name.as_str(), r)).collect();
    local.retain(|image| {
        image.details.project.is_none() || by_name.contains_key(image.name.as_str())
    });
    for row in &rows {
        let details: ImageDetails = match serde_json::from_str(&row.details) {
            Ok(details) => details,
            Err(e) => {
                tracing::warn!(image = %row.name, "its row's details are unreadable: {e}");
                continue;
            }
        };
        match local.iter_mut().find(|image| image.name == row.name) {
            Some(image) => image.details = details,
            None => local.push(ImageInfo {
                name: row.name.clone(),
                path: std::path::PathBuf::new(),
                details,
            }),
        }
    }
    local.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(local)
}

/// Makes sure this node's engine holds image `name` at the revision its
/// row names (fetched from the object store if it does not), and keeps it
/// until the answer is dropped (the caller's container is made, or its
/// build is over); `None` for an image no row names (the operator's, on
/// every node's disk).
pub(crate) async fn hold(state: &Arc<AppState>, name: &str) -> ApiResult<Option<Held>> {
    if !archived(state) {
        return Ok(None);
    }
    let wanted = name.to_owned();
    let Some(row) = state.db(move |s| s.image_row(&wanted)).await? else {
        return Ok(None);
    };
    let lock = image_lock(name);
    let fetched = {
        let _one_fetch = lock.lock().await;
        // Pinned under the lock: a removal (which takes it too) sees it.
        cache().pin_with(name, ());
        let held = Held(name.to_owned());
        if held_revision(state, name).await?.as_deref() == Some(row.revision.as_str()) {
            (held, false)
        } else {
            fetch(state, &row).await?;
            (held, true)
        }
    };
    let (held, fetched) = fetched;
    if fetched {
        if let Err(e) = evict(state, None).await {
            tracing::warn!(
                "keeping fetched images within image_cache_bytes failed: {}",
                e.message
            );
        }
    }
    Ok(Some(held))
}

/// The revision of image `name` this node's engine holds.
async fn held_revision(state: &AppState, name: &str) -> ApiResult<Option<String>> {
    let images = crate::engine::images(&state.engine).await?;
    Ok(images
        .into_iter()
        .find(|image| image.name == name)
        .and_then(|image| image.details.revision))
}

/// Fetches `row`'s archive, checks it against its digest and has the
/// engine install it.
async fn fetch(state: &Arc<AppState>, row: &ImageRow) -> ApiResult<()> {
    let key = archive_key(&row.name, &row.revision)?;
    let file = match state.objects.open_file(&key, &state.spool_dir).await {
        Ok(file) => file,
        // Deleted or replaced since its row was read.
        Err(ObjectError::NotFound(_)) => return Err(ApiError::not_found("image", &row.name)),
        Err(e) => return Err(crate::blobs::internal(e)),
    };
    let (expected, what) = (row.archive_digest.clone(), format!("image {}", row.name));
    let file = tokio::task::spawn_blocking(move || {
        crate::snapshot_archives::verify(file, &expected, &what)
    })
    .await
    .map_err(|e| ApiError::internal(format!("the archive's check failed: {e}")))??;
    let details: ImageDetails = serde_json::from_str(&row.details)
        .map_err(|e| ApiError::internal(format!("image {}'s row: {e}", row.name)))?;
    state
        .engine
        .import_image_archive(&row.name, details, file)
        .await
        .map_err(ApiError::from)?;
    tracing::info!(image = %row.name, "installed an image from the object store");
    Ok(())
}

/// Deletes `project`'s image `name` from the cluster: its row, its
/// archive and this node's copy (the other nodes' go with their sweep).
/// `None`: no row of the project's names it.
pub(crate) async fn delete(
    state: &Arc<AppState>,
    project: &str,
    name: &str,
) -> ApiResult<Option<()>> {
    let (owner, wanted) = (project.to_owned(), name.to_owned());
    let Some(row) = state
        .db(move |s| s.delete_image_row(&owner, &wanted))
        .await?
    else {
        return Ok(None);
    };
    unpublish(state, name, &row.revision).await;
    remove_copy(state, name, project).await?;
    Ok(Some(()))
}

/// Removes this node's copy of `project`'s image `name`, if it has one.
async fn remove_copy(state: &AppState, name: &str, project: &str) -> ApiResult<()> {
    let lock = image_lock(name);
    let _one_at_a_time = lock.lock().await;
    match state.engine.delete_image(name, project).await {
        Ok(()) | Err(SandboxError::ImageNotFound(_)) => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// Removes this node's copies of images deleted through other nodes (a
/// project image no row names, unless this node is making it), and, at
/// most once every [`LIST_EVERY_SECONDS`], the archives no row names older
/// than [`ORPHAN_AFTER_SECONDS`] (a younger one may be a build's before
/// its row). Every node may sweep the shared store: a delete is
/// idempotent.
pub(crate) async fn sweep(state: &Arc<AppState>, now: i64) -> ApiResult<()> {
    static LISTED_AT: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
    let rows = state.db(|s| s.image_rows()).await?;
    let named: HashSet<(String, String)> = rows
        .iter()
        .map(|row| (row.name.clone(), row.revision.clone()))
        .collect();
    let names: HashSet<&str> = rows.iter().map(|row| row.name.as_str()).collect();
    let mut local = crate::engine::images(&state.engine).await?;
    let mut removed = HashSet::new();
    for image in &local {
        let Some(project) = &image.details.project else {
            continue;
        };
        let made_here = making().contains_key(&image.name);
        if !made_here && !names.contains(image.name.as_str()) {
            tracing::info!(image = %image.name, "removing a copy of an image deleted in the cluster");
            match remove_copy(state, &image.name, project).await {
                Ok(()) => {
                    removed.insert(image.name.clone());
                }
                Err(e) => tracing::warn!(image = %image.name, "could not remove it: {}", e.message),
            }
        }
    }
    local.retain(|image| !removed.contains(&image.name));
    if let Err(e) = evict(state, Some((local, rows.clone()))).await {
        tracing::warn!(
            "keeping fetched images within image_cache_bytes failed: {}",
            e.message
        );
    }
    let last = LISTED_AT.load(std::sync::atomic::Ordering::SeqCst);
    if last != 0 && now - last < LIST_EVERY_SECONDS {
        return Ok(());
    }
    LISTED_AT.store(now, std::sync::atomic::Ordering::SeqCst);
    let folder = Key::new(FOLDER).map_err(crate::blobs::internal)?;
    let listed = state
        .objects
        .list_folder(&folder)
        .await
        .map_err(crate::blobs::internal)?;
    for object in listed {
        if now - object.modified_unix < ORPHAN_AFTER_SECONDS {
            continue;
        }
        let Some(image) = named_by(&object.key) else {
            continue;
        };
        if !named.contains(&image) {
            tracing::info!(image = %image.0, "deleting an archive no image row names");
            if let Err(e) = state.objects.delete(&object.key).await {
                tracing::warn!(image = %image.0, "could not delete its archive: {e}");
            }
        }
    }
    Ok(())
}

/// This node's copies of the rows' images as the cache's choice sees
/// them (`in_use` as far as creates and builds hold them; the containers
/// are asked only when the fetched ones are over the bound). A copy no
/// row names is the sweep's, not the cache's.
fn copies(state: &AppState, local: &[ImageInfo], rows: &[ImageRow]) -> Vec<NodeCopy> {
    let by_name: HashMap<&str, &ImageRow> = rows.iter().map(|r| (r.name.as_str(), r)).collect();
    let being_made = making();
    local
        .iter()
        .filter(|image| image.details.project.is_some())
        .filter_map(|image| {
            let row = by_name.get(image.name.as_str())?;
            let original = row.node_id == state.node_name
                && image.details.revision.as_deref() == Some(row.revision.as_str());
            let origin = if original || being_made.contains_key(&image.name) {
                Origin::MadeHere
            } else {
                Origin::Fetched
            };
            Some(NodeCopy {
                name: image.name.clone(),
                bytes: image.details.size_bytes.unwrap_or(0),
                origin,
                in_use: cache().pinned(&image.name),
                last_used: cache().last_used(&image.name),
                installed_at: image.details.created_at.unwrap_or(0),
            })
        })
        .collect()
}

/// The images the containers on this node (live, suspended, being made)
/// are made from.
async fn images_in_use(state: &AppState) -> ApiResult<HashSet<String>> {
    let node = state.node_name.clone();
    let images = state.db(move |s| s.images_on_node(&node)).await?;
    Ok(images.into_iter().collect())
}

/// Removes the least recently used fetched copies beyond
/// `image_cache_bytes` (none in use); `listed`: this node's images and the
/// rows, when the caller read them already.
async fn evict(
    state: &Arc<AppState>,
    listed: Option<(Vec<ImageInfo>, Vec<ImageRow>)>,
) -> ApiResult<()> {
    let bound = state.config.cluster.image_cache_bytes.bytes();
    let (local, rows) = match listed {
        Some(listed) => listed,
        None => (
            crate::engine::images(&state.engine).await?,
            state.db(|s| s.image_rows()).await?,
        ),
    };
    let mut copies = copies(state, &local, &rows);
    if crate::image_cache::fetched_bytes(&copies) <= bound {
        return Ok(());
    }
    let used = images_in_use(state).await?;
    for copy in &mut copies {
        copy.in_use |= used.contains(&copy.name);
    }
    for name in crate::image_cache::victims(&copies, bound) {
        let Some(project) = local
            .iter()
            .find(|image| image.name == name)
            .and_then(|image| image.details.project.clone())
        else {
            continue;
        };
        remove_idle_copy(state, &name, &project).await?;
    }
    Ok(())
}

/// Removes this node's fetched copy of image `name`, unless a create or a
/// build took it, a container was made from it or this node is making it
/// since the choice (each looked at again under the image's lock, which a
/// create's [`hold`] pins it under).
async fn remove_idle_copy(state: &AppState, name: &str, project: &str) -> ApiResult<()> {
    let lock = image_lock(name);
    let _one_at_a_time = lock.lock().await;
    if cache().pinned(name) || making().contains_key(name) {
        return Ok(());
    }
    if images_in_use(state).await?.contains(name) {
        return Ok(());
    }
    match state.engine.delete_image(name, project).await {
        Ok(()) | Err(SandboxError::ImageNotFound(_)) => {}
        Err(error) => return Err(error.into()),
    }
    cache().forget_unpinned(name);
    tracing::info!(image = %name, "removed a fetched image beyond image_cache_bytes");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_archives_key_names_its_image_and_revision_whatever_the_name() {
        for name in ["app", "e2b-tpl_1", "my.image-2"] {
            let key = archive_key(name, "18a2b3c4d").expect("key");
            assert_eq!(
                named_by(&key),
                Some((name.to_owned(), "18a2b3c4d".to_owned())),
                "{key:?}"
            );
        }
        let other = Key::new("images/readme.txt").expect("key");
        assert_eq!(named_by(&other), None);
    }
}
