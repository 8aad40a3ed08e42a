//! Volumes: a project's persistent directories, made, listed and deleted
//! on their own (`/v1/volumes` in `volumes`, E2B's `/volumes` in
//! `e2b::volumes`, both translating to this), and mounted read-write into
//! containers at create.
//!
//! A volume is a directory of the data directory, `volumes/<id>` (the
//! parent `0700`: no host user but the server's reaches it; the sandbox
//! helper, as host root, mounts each volume a container names on a stage of
//! its own mount namespace, from which init binds it). Its root is `1777`.
//! A container whose disk holds its own ids sees the volume through an
//! idmapped mount of its range (see the engine's `slots`): its files are
//! stored as its own ids, so the sandbox user of every container of the
//! project owns them, in whichever range each runs. (A container keeping a
//! range for good writes as the host ids of that range.) The bind is made
//! inside the container's mount namespace (`ContainerSpec::volumes`), at a path
//! `check_volume_path` accepts, through no symbolic link; a link inside the
//! volume resolves in the container's root, never the host's.
//!
//! Quotas: `max_volumes_per_project` is decided in the store's transaction
//! under the project's lock; `max_volume_bytes_per_project` is measured
//! (the volumes' allocated blocks, links never followed) when a container
//! that mounts a volume is made: a project over it mounts no volume until
//! it deletes files or volumes.
//!
//! In a cluster a volume lives on the node that made it (`VolumeRow::node_id`,
//! empty on a single box): a replica sends its content calls and its
//! delete there and places containers that mount it there, and a node
//! refuses a volume it does not hold (409 `volume_on_another_node`), so a
//! mount never binds an empty directory (see `docs/developer/cluster.md`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use shellgate_sandbox_api::backend::{check_volume_path, VolumeBind};
use shellgate_store::{VolumeDelete, VolumeRefusal, VolumeRow};
use shellgate_wire::{new_id, ErrorCode, VolumeMount};

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// Most volumes one container mounts.
pub const MAX_MOUNTS: usize = 8;
/// Longest volume name, in characters.
pub const MAX_NAME: usize = 64;

/// Where the volumes' directories are.
fn volumes_dir(state: &AppState) -> PathBuf {
    state.config.server.data_dir.join("volumes")
}

/// The directory of volume `id`.
pub(crate) fn volume_dir(state: &AppState, id: &str) -> PathBuf {
    volumes_dir(state).join(id)
}

/// 409 `volume_on_another_node` unless `row`'s directory is on this
/// server's disk (a replica sends what names a volume to its node; this
/// catches a request that reached another, and mounts of two nodes).
pub(crate) fn check_here(state: &AppState, row: &VolumeRow) -> ApiResult<()> {
    if row.node_id != state.node_name {
        return Err(ApiError::of(
            ErrorCode::VolumeOnAnotherNode,
            format!(
                "Volume '{}' lives on node '{}', not on this one ('{}'): a container mounts \
                 only volumes of the node it runs on, all of one node.",
                row.id, row.node_id, state.node_name
            ),
        ));
    }
    Ok(())
}

/// A name is 1 to 64 ASCII letters, digits, `-`, `_` and `.`, not only dots.
fn check_name(name: &str) -> ApiResult<()> {
    let plain = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if name.is_empty() || name.len() > MAX_NAME || !plain || name.bytes().all(|b| b == b'.') {
        return Err(ApiError::invalid(
            "name",
            format!(
                "a volume's name is 1 to {MAX_NAME} letters, digits, '-', '_' and '.' (not only \
                 dots)"
            ),
        ));
    }
    Ok(())
}

/// Makes the volume's directory (its parent first), root-owned and `1777`,
/// under a parent only its owner may enter: a sandbox reaches its volumes
/// through mounts the sandbox helper makes (`HelperSpec::volume_stage`),
/// never by this path, and no other host user reaches them at all.
fn make_dir(parent: &Path, dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(parent)?;
    std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o700))?;
    std::fs::DirBuilder::new().mode(0o700).create(dir)?;
    // Set after the create: the umask must not narrow it.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777))
}

/// Makes a volume of `project`: its directory, then its row (so no row
/// names a directory that is not there); a refused row removes the
/// directory again.
pub(crate) async fn make_volume(
    state: &Arc<AppState>,
    project: &str,
    name: &str,
) -> ApiResult<VolumeRow> {
    check_name(name)?;
    let row = VolumeRow {
        id: new_id("vol_"),
        project: project.to_owned(),
        name: name.to_owned(),
        token: new_id("sgvt_"),
        created_at: crate::time::now(),
        node_id: state.node_name.clone(),
    };
    let (parent, dir) = (volumes_dir(state), volume_dir(state, &row.id));
    let made = dir.clone();
    tokio::task::spawn_blocking(move || make_dir(&parent, &made))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::internal(format!("cannot make the volume's directory: {e}")))?;
    let max = state.config.sandbox.max_volumes_per_project;
    let inserted = row.clone();
    let refusal = match state.db(move |s| s.insert_volume(&inserted, max)).await {
        Ok(Ok(())) => return Ok(row),
        Ok(Err(refusal)) => Ok(refusal),
        Err(error) => Err(error),
    };
    let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir)).await;
    Err(match refusal? {
        VolumeRefusal::NameTaken => ApiError::of(
            ErrorCode::VolumeNameTaken,
            format!("The project has a volume named '{name}' already."),
        )
        .with_param("name"),
        VolumeRefusal::TooMany { max } => ApiError::quota(
            ErrorCode::TooManyVolumes,
            format!("The project holds its most volumes ({max}, max_volumes_per_project)."),
        ),
    })
}

/// A volume of `project` by id (404 for a missing or foreign one).
pub(crate) async fn owned_volume(
    state: &Arc<AppState>,
    project: &str,
    id: &str,
) -> ApiResult<VolumeRow> {
    let (owner, key) = (project.to_owned(), id.to_owned());
    state
        .db(move |s| s.volume(&owner, &key))
        .await?
        .ok_or_else(|| ApiError::not_found("volume", id))
}

/// Deletes a volume of `project` that no container mounts (409
/// `volume_in_use` naming them), then its directory.
pub(crate) async fn remove_volume(state: &Arc<AppState>, project: &str, id: &str) -> ApiResult<()> {
    // Its directory is removed by the node that holds it.
    check_here(state, &owned_volume(state, project, id).await?)?;
    let (owner, key) = (project.to_owned(), id.to_owned());
    match state.db(move |s| s.delete_volume(&owner, &key)).await? {
        VolumeDelete::Deleted => {
            let dir = volume_dir(state, id);
            tokio::task::spawn_blocking(move || match std::fs::remove_dir_all(&dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    tracing::warn!("cannot remove the deleted volume's {}: {e}", dir.display());
                }
                _ => {}
            })
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?;
            Ok(())
        }
        VolumeDelete::NotFound => Err(ApiError::not_found("volume", id)),
        VolumeDelete::Mounted(containers) => Err(ApiError::of(
            ErrorCode::VolumeInUse,
            format!(
                "Volume '{id}' is mounted by {}: delete them first (a volume outlives the \
                 containers that mount it, never the other way round).",
                containers.join(", ")
            ),
        )),
    }
}

/// Bytes allocated beneath `dir`, links never followed, other file
/// systems never entered; what cannot be read counts nothing.
fn allocated_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(top) = std::fs::symlink_metadata(dir) else {
        return 0;
    };
    let device = top.dev();
    let mut total = top.blocks() * 512;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&next) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            total = total.saturating_add(meta.blocks() * 512);
            if meta.is_dir() && meta.dev() == device {
                pending.push(entry.path());
            }
        }
    }
    total
}

/// What the mounts of a container to be made are: each volume resolved in
/// `project` and its path checked (400 naming `volumes[i]`, 404 for a
/// missing volume), and the project's volumes within their bytes (429).
/// Returns the engine's binds and the store's `(volume id, path)` rows.
pub(crate) async fn resolve_mounts(
    state: &Arc<AppState>,
    project: &str,
    mounts: &[VolumeMount],
    param: &str,
) -> ApiResult<(Vec<VolumeBind>, Vec<(String, String)>)> {
    if mounts.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    if mounts.len() > MAX_MOUNTS {
        return Err(ApiError::invalid(
            param,
            format!("at most {MAX_MOUNTS} volumes are mounted in one container"),
        ));
    }
    let mut binds: Vec<VolumeBind> = Vec::new();
    let mut rows = Vec::new();
    for (index, mount) in mounts.iter().enumerate() {
        let at = format!("{param}[{index}]");
        check_volume_path(&mount.path).map_err(|m| ApiError::invalid(format!("{at}.path"), m))?;
        if let Some(other) = binds.iter().find(|b| {
            let (a, b) = (Path::new(&b.target), Path::new(&mount.path));
            a.starts_with(b) || b.starts_with(a)
        }) {
            return Err(ApiError::invalid(
                format!("{at}.path"),
                format!(
                    "volume path {:?} is at or inside another mount ({:?}) or holds it",
                    mount.path, other.target
                ),
            ));
        }
        let owner = project.to_owned();
        let row = match (&mount.volume_id, &mount.name) {
            (Some(id), None) => {
                let id = id.clone();
                state.db(move |s| s.volume(&owner, &id)).await?
            }
            (None, Some(name)) => {
                let name = name.clone();
                state.db(move |s| s.volume_named(&owner, &name)).await?
            }
            _ => {
                return Err(ApiError::invalid(
                    at,
                    "a mount names its volume by exactly one of volume_id and name",
                ))
            }
        };
        let row = row.ok_or_else(|| {
            match (&mount.volume_id, &mount.name) {
                (Some(id), _) => ApiError::not_found("volume", id),
                (None, name) => ApiError::of(
                    ErrorCode::NotFound,
                    format!(
                        "No volume found with name '{}'.",
                        name.as_deref().unwrap_or_default()
                    ),
                ),
            }
            .with_param(at.clone())
        })?;
        check_here(state, &row).map_err(|error| error.with_param(at.clone()))?;
        binds.push(VolumeBind {
            source: volume_dir(state, &row.id),
            target: mount.path.clone(),
        });
        rows.push((row.id, mount.path.clone()));
    }
    check_bytes(state, project).await?;
    Ok((binds, rows))
}

/// 429 `volume_bytes_exceeded` when `project`'s volumes (those on this
/// node's disk: in a cluster the bound is per node) hold more than
/// `max_volume_bytes_per_project`.
pub(crate) async fn check_bytes(state: &Arc<AppState>, project: &str) -> ApiResult<()> {
    let owner = project.to_owned();
    let volumes = state.db(move |s| s.project_volumes(&owner)).await?;
    let dirs: Vec<PathBuf> = volumes
        .iter()
        .filter(|v| v.node_id == state.node_name)
        .map(|v| volume_dir(state, &v.id))
        .collect();
    let held: u64 =
        tokio::task::spawn_blocking(move || dirs.iter().map(|d| allocated_bytes(d)).sum())
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?;
    let max = state.config.sandbox.max_volume_bytes_per_project.bytes();
    if held > max {
        return Err(ApiError::quota(
            ErrorCode::VolumeBytesExceeded,
            format!(
                "The project's volumes hold {held} bytes, more than its {max} \
                 (max_volume_bytes_per_project): delete files or volumes to mount one again."
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_volume_name_is_plain_and_short() {
        for fine in ["data", "my-volume_2", "a.b"] {
            assert!(check_name(fine).is_ok(), "{fine}");
        }
        for refused in ["", ".", "..", "a/b", "a b", "ä", &"x".repeat(MAX_NAME + 1)] {
            assert!(check_name(refused).is_err(), "{refused:?} was accepted");
        }
    }

    #[test]
    fn allocated_bytes_count_files_below_and_never_follow_links() {
        let dir = std::env::temp_dir().join(format!("shellgate-volume-bytes-{}", new_id("t")));
        std::fs::create_dir_all(dir.join("sub")).expect("mkdir");
        std::fs::write(dir.join("sub/file"), vec![1u8; 64 * 1024]).expect("write");
        let before = allocated_bytes(&dir);
        // A link to a large tree counts as the link alone.
        std::os::unix::fs::symlink("/usr", dir.join("usr")).expect("symlink");
        let after = allocated_bytes(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        assert!(before >= 64 * 1024, "64 KiB written, {before} counted");
        assert!(
            after < before + 64 * 1024,
            "a link was followed: {before} bytes before it, {after} after"
        );
    }
}
