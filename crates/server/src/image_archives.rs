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

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use shellgate_objects::{Key, ObjectError};
use shellgate_sandbox_api::image::{ImageDetails, ImageInfo};
use shellgate_sandbox_api::SandboxError;
use shellgate_store::ImageRow;

use crate::error::{ApiError, ApiResult};
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
/// row names (fetched from the object store if it does not); nothing for
/// an image no row names (the operator's, on every node's disk).
pub(crate) async fn hold(state: &Arc<AppState>, name: &str) -> ApiResult<()> {
    if !archived(state) {
        return Ok(());
    }
    let wanted = name.to_owned();
    let Some(row) = state.db(move |s| s.image_row(&wanted)).await? else {
        return Ok(());
    };
    let lock = image_lock(name);
    let _one_fetch = lock.lock().await;
    if held_revision(state, name).await?.as_deref() == Some(row.revision.as_str()) {
        return Ok(());
    }
    fetch(state, &row).await
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
    let local = crate::engine::images(&state.engine).await?;
    for image in local {
        let Some(project) = &image.details.project else {
            continue;
        };
        let made_here = making().contains_key(&image.name);
        if !made_here && !names.contains(image.name.as_str()) {
            tracing::info!(image = %image.name, "removing a copy of an image deleted in the cluster");
            if let Err(e) = remove_copy(state, &image.name, project).await {
                tracing::warn!(image = %image.name, "could not remove it: {}", e.message);
            }
        }
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
