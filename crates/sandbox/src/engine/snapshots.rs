//! Snapshots: a container's disk saved as a directory tree, and new
//! disks filled from one.
//!
//! ```text
//! <data>/snapshots/<id>/snapshot.json   what it holds (`Recorded`)
//! <data>/snapshots/<id>/disk.img        the whole disk image, cloned (`Form::Image`)
//! <data>/snapshots/<id>/disk/           or: upper, data, home, workspace (`Form::Tree`)
//! <data>/snapshots/.creating-<id>/      one being taken (removed at start-up)
//! <data>/snapshots/.trash-<id>/         one being deleted (removed at start-up)
//! ```
//!
//! The disk is reached whole through a file view of it (the container's
//! own superblock, on the loop device it runs on) whose `data` directory's
//! parent is the disk's root. A running container's processes are frozen
//! (see `freezer`) while the disk is captured, so the capture is one
//! instant of its files. How it is captured depends on the host's data
//! directory ([`Sharing`]):
//!
//! * where it can clone a file's blocks (`FICLONE`: XFS with reflink,
//!   btrfs) and disks are ext4 images, the file system is synced and the
//!   whole image cloned, and each copy's image is a clone of that: no
//!   block is copied, each copy writes blocks of its own (copy on write),
//!   keeps its own image's size as its quota, and is independent of the
//!   snapshot (deleting the snapshot frees only the blocks no copy shares);
//! * elsewhere the kept directories are copied with `cp -a
//!   --reflink=auto --sparse=always` (holes kept), out of the image and
//!   into a new one.
//!
//! Files keep their host owners in the snapshot (its directory is the
//! server's alone, mode 0700); a disk filled from it has every owner moved
//! from the source's host id range to its own container's.

use std::fs;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::slots::{DiskIds, ID_RANGE};
use super::{freezer, LocalEngine};
use crate::backend::{validate_container_id, SnapshotTaken};
use crate::disk::{self, DiskKind};
use crate::error::{IoContext, SandboxError};
use crate::image::{ImageInfo, ImageStore, HOST_IMAGE};
use crate::launcher::Helper;
use crate::protocol::FileViewSpec;

/// The disk's directories a snapshot keeps (the overlay's work directory
/// is scratch, remade empty).
const KEPT: [&str; 4] = [
    disk::UPPER_DIR,
    disk::DATA_DIR,
    disk::HOME_DIR,
    disk::WORKSPACE_DIR,
];

/// The file the whole-image form keeps (the name a container's disk has).
const DISK_IMAGE: &str = "disk.img";

/// How a snapshot holds the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Form {
    /// The kept directories, copied file by file (`disk/`).
    #[default]
    Tree,
    /// The whole ext4 image, cloned (`disk.img`).
    Image,
}

/// `snapshot.json`: what a snapshot holds and whose ids its files carry.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Recorded {
    #[serde(flatten)]
    pub taken: SnapshotTaken,
    /// First host id of the source container's range (0 when ids are not
    /// mapped to ranges: rootless).
    pub owner_base: u32,
    /// Snapshots written before the whole-image form are trees.
    #[serde(default)]
    pub form: Form,
}

/// A snapshot a container is being made from.
pub(super) struct Restore {
    pub dir: PathBuf,
    pub recorded: Recorded,
}

impl Restore {
    /// Whether the copy's disk is the snapshot's image cloned whole (so no
    /// formatted disk is provisioned for it).
    pub(super) fn clones_whole_disk(&self) -> bool {
        self.recorded.form == Form::Image
    }
}

/// How this host's data directory lets copies share a snapshot's blocks,
/// as `GET /healthz` reports it (`snapshot_sharing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sharing {
    /// Disk images (and snapshots of them) are cloned whole: a copy
    /// shares every block it has not written.
    Reflink,
    /// Files are copied (holes kept): a copy takes the bytes it holds.
    Copy,
}

impl Sharing {
    pub(super) fn name(self) -> &'static str {
        match self {
            Sharing::Reflink => "reflink",
            Sharing::Copy => "copy",
        }
    }
}

impl LocalEngine {
    pub(super) fn snapshots_dir(&self) -> PathBuf {
        self.inner.config.data_dir.join("snapshots")
    }

    /// Whether a container's disk can be cloned into the snapshots
    /// directory (and back): both on one file system that clones blocks.
    pub(super) fn sharing(&self) -> Sharing {
        *self.inner.snapshot_sharing.get_or_init(|| {
            let containers = self.inner.config.data_dir.join("containers");
            match reflink_supported(&containers, &self.snapshots_dir()) {
                Ok(()) => Sharing::Reflink,
                Err(e) => {
                    tracing::info!(
                        "snapshots and forks copy their files: the data directory cannot clone \
                         blocks ({e}); on XFS (reflink=1) or btrfs they would share them"
                    );
                    Sharing::Copy
                }
            }
        })
    }

    /// The form a snapshot of `container` takes on this host.
    fn form_for(&self, container: &super::container::Container) -> Form {
        let clonable = self.inner.disk_kind == DiskKind::Image
            && !container.spec.ephemeral
            && self.sharing() == Sharing::Reflink;
        if clonable {
            Form::Image
        } else {
            Form::Tree
        }
    }

    /// The snapshot `id`'s record, if it exists.
    pub(super) fn snapshot_record(&self, id: &str) -> Result<Restore, SandboxError> {
        validate_container_id(id)?;
        let dir = self.snapshots_dir().join(id);
        let text = fs::read(dir.join("snapshot.json")).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => SandboxError::InvalidRequest {
                param: "snapshot_id",
                message: format!("no snapshot with id {id:?} on this host"),
            },
            _ => SandboxError::io(format!("read snapshot {id}"), e),
        })?;
        let recorded = serde_json::from_slice(&text)
            .map_err(|e| SandboxError::Setup(format!("snapshot {id} is corrupt: {e}")))?;
        Ok(Restore { dir, recorded })
    }

    /// The (image, revision) pairs snapshots keep alive.
    pub(super) fn snapshot_revisions(&self) -> Vec<(String, String)> {
        fs::read_dir(self.snapshots_dir())
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                let record = self.snapshot_record(&name).ok()?;
                let taken = record.recorded.taken;
                Some((taken.image, taken.image_revision?))
            })
            .collect()
    }

    pub(super) async fn take_snapshot(
        &self,
        id: &str,
        snapshot_id: &str,
    ) -> Result<SnapshotTaken, SandboxError> {
        self.take_snapshot_as(id, snapshot_id, None).await
    }

    /// Takes snapshot `snapshot_id` of container `id`, in `form` if given,
    /// else in the form this host shares best.
    async fn take_snapshot_as(
        &self,
        id: &str,
        snapshot_id: &str,
        form: Option<Form>,
    ) -> Result<SnapshotTaken, SandboxError> {
        validate_container_id(snapshot_id)?;
        let snapshots = self.snapshots_dir();
        let target = snapshots.join(snapshot_id);
        if target.exists() {
            return Err(SandboxError::AlreadyExists(snapshot_id.to_owned()));
        }
        let container = self.container(id).await?;
        let state = container.state.lock().await;
        if container.destroyed() {
            return Err(SandboxError::NotFound(id.to_owned()));
        }
        let running = state.as_ref().filter(|r| r.alive()).cloned();
        let form = form.unwrap_or_else(|| self.form_for(&container));
        // The disk's root: the data directory's parent, in a view of the
        // disk (for a running container, on the loop device it runs on:
        // the same superblock, never a second one).
        let view: Option<OwnedFd> = match self.inner.disk_kind {
            DiskKind::Directory => None,
            DiskKind::Image if running.is_some() => {
                let Some(loop_device) = container.last_loop() else {
                    return Err(SandboxError::Setup(
                        "the running container's disk device is unknown".into(),
                    ));
                };
                let spec = FileViewSpec {
                    disk_image: container.dir.join("disk.img"),
                    mount_point: self.inner.config.data_dir.join("run/disk"),
                    reuse_loop: Some(loop_device),
                    prepare_layout: None,
                };
                let (dir, device) =
                    Helper::open_view(&self.inner.config.helper_binary, &spec).await?;
                if device != Some(loop_device) {
                    return Err(SandboxError::Setup(
                        "the running container's disk could not be shared".into(),
                    ));
                }
                Some(dir)
            }
            DiskKind::Image => {
                let data = self.file_view(&container).await?;
                Some(data.try_clone().context(|| "duplicate the view".into())?)
            }
        };
        let root = match &view {
            Some(data) => disk_root_of(data),
            None => container.dir.join("disk"),
        };
        let staging = snapshots.join(format!(".creating-{snapshot_id}"));
        fs::create_dir_all(&snapshots).context(|| "create the snapshots directory".into())?;
        restrict(&snapshots)?;
        fs::create_dir(&staging).context(|| format!("create {}", staging.display()))?;
        let copy_to = match form {
            Form::Tree => staging.join("disk"),
            Form::Image => staging.join(DISK_IMAGE),
        };
        // The image form syncs the disk's file system through the view,
        // then clones the image file the loop device writes to.
        let synced_view = match (form, &view) {
            (Form::Image, Some(data)) => {
                Some(data.try_clone().context(|| "duplicate the view".into())?)
            }
            (Form::Image, None) => {
                return Err(SandboxError::Setup(
                    "a whole-image snapshot needs a disk image".into(),
                ))
            }
            (Form::Tree, _) => None,
        };
        let source_image = container.dir.join(DISK_IMAGE);
        let group = super::group_name(&self.inner.config.data_dir);
        let copied = async {
            if form == Form::Tree {
                fs::create_dir(&copy_to).context(|| "create the snapshot's disk".into())?;
            }
            let started = Instant::now();
            let frozen = match &running {
                Some(running) => {
                    freezer::freeze(&self.inner.cgroups, &group, &running.slot).await?
                }
                None => None,
            };
            let root = root.clone();
            let to = copy_to.clone();
            let result = super::blocking(move || match synced_view {
                Some(view) => {
                    sync_file_system(&view)?;
                    clone_file(&source_image, &to)
                }
                None => copy_tree(&root, &to),
            })
            .await;
            if let Some(frozen) = &frozen {
                frozen.thaw().await?;
            }
            result?;
            Ok::<_, SandboxError>((frozen.is_some(), started.elapsed()))
        }
        .await;
        let (was_frozen, elapsed) = match copied {
            Ok(copied) => copied,
            Err(e) => {
                let _ = fs::remove_dir_all(&staging);
                return Err(e);
            }
        };
        let owner_base = self.inner.slots.disk_id_base(container.disk_ids());
        // What its files hold, either form: the kept directories' blocks
        // (a whole image also holds the file system's own, which no quota
        // should charge).
        let measured = match form {
            Form::Tree => copy_to.clone(),
            Form::Image => root.clone(),
        };
        let size_bytes = super::blocking(move || {
            Ok(KEPT
                .iter()
                .map(|name| allocated_bytes(&measured.join(name)))
                .sum::<u64>())
        })
        .await;
        drop(view);
        let size_bytes = match size_bytes {
            Ok(bytes) => bytes,
            Err(e) => {
                let _ = fs::remove_dir_all(&staging);
                return Err(e);
            }
        };
        // The probe runs CRIU once per process (a fraction of a second), so
        // off the async workers; its answer is why this snapshot is files only.
        let memory_unavailable_reason =
            super::blocking(|| Ok(crate::checkpoint::support().unavailable_reason())).await?;
        let recorded = Recorded {
            taken: SnapshotTaken {
                size_bytes,
                image: container.spec.image.clone(),
                image_revision: container.spec.image_revision.clone(),
                disk_bytes: container.spec.disk_bytes,
                frozen_ms: if was_frozen {
                    u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
                } else {
                    0
                },
                memory_unavailable_reason,
            },
            owner_base,
            form,
        };
        drop(state);
        let json =
            serde_json::to_vec_pretty(&recorded).map_err(|e| SandboxError::Setup(e.to_string()))?;
        let committed = fs::write(staging.join("snapshot.json"), json)
            .and_then(|()| fs::rename(&staging, &target));
        if let Err(e) = committed {
            let _ = fs::remove_dir_all(&staging);
            return Err(SandboxError::io("commit the snapshot", e));
        }
        Ok(recorded.taken)
    }

    pub(super) async fn remove_snapshot(&self, snapshot_id: &str) -> Result<(), SandboxError> {
        validate_container_id(snapshot_id)?;
        let snapshots = self.snapshots_dir();
        let trash = snapshots.join(format!(".trash-{}", self.next_name(snapshot_id)));
        match fs::rename(snapshots.join(snapshot_id), &trash) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(SandboxError::io("remove the snapshot", e)),
        }
        let engine = self.clone();
        super::blocking(move || {
            let _ = fs::remove_dir_all(&trash);
            engine.prune_retired_images();
            Ok(())
        })
        .await
    }

    pub(super) fn list_snapshot_ids(&self) -> Vec<String> {
        fs::read_dir(self.snapshots_dir())
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| !name.starts_with('.'))
            .collect()
    }

    /// Commits container `id` to image `name` of `project` (see
    /// [`ImageStore::commit`](crate::image::ImageStore::commit)): its disk is
    /// taken as a snapshot under a private id (frozen while copied), the
    /// snapshot's upper layer and home, their owners moved to the
    /// container's own ids, make the image over the container's image
    /// revision, and the snapshot goes. A crash between leaves a snapshot
    /// no store row names, which the server removes at its next start.
    pub(super) async fn commit_container(
        &self,
        id: &str,
        name: &str,
        project: &str,
        config: Option<shellgate_sandbox_api::image::ImageConfig>,
    ) -> Result<ImageInfo, SandboxError> {
        // Refused before the disk is copied (and checked again under the
        // image's lock).
        ImageStore::check_commit_name(name)?;
        let container = self.container(id).await?;
        let (image, revision) = (
            container.spec.image.clone(),
            container.spec.image_revision.clone(),
        );
        drop(container);
        if image == HOST_IMAGE {
            return Err(SandboxError::InvalidRequest {
                param: "container_id",
                message: "a container of the `host` image has no image tree of its own to commit \
                          (its root is the host's directories)"
                    .into(),
            });
        }
        let images = self.inner.images.clone();
        let owner = (!project.is_empty()).then_some(project);
        if images.exists(name) && images.details(name).project.as_deref() != owner {
            return Err(SandboxError::Conflict(format!(
                "an image named {name:?} exists and is not this project's: choose another name"
            )));
        }
        let base = images.revision_rootfs(&image, revision.as_deref())?;
        let snapshot_id = self.next_name("commit-");
        // The commit reads the snapshot's upper layer and home as trees.
        self.take_snapshot_as(id, &snapshot_id, Some(Form::Tree))
            .await?;
        let made = async {
            let restore = self.snapshot_record(&snapshot_id)?;
            let owner_base = restore.recorded.owner_base;
            let disk = restore.dir.join("disk");
            let (name, project) = (name.to_owned(), project.to_owned());
            super::blocking(move || {
                let (upper, home) = (disk.join(disk::UPPER_DIR), disk.join(disk::HOME_DIR));
                if owner_base != 0 {
                    shift_owners(&upper, owner_base, 0)?;
                    shift_owners(&home, owner_base, 0)?;
                }
                images.commit(&name, &project, &base, &upper, &home, config)
            })
            .await
        }
        .await;
        if let Err(e) = self.remove_snapshot(&snapshot_id).await {
            tracing::warn!(snapshot = %snapshot_id, "could not remove a commit's copy: {e}");
        }
        made
    }

    /// Fills a new container's home (in its staging directory `staging`,
    /// its disk holding `disk_ids`) with `seed`, an image's home (owners in
    /// container ids).
    pub(super) async fn seed_home(
        &self,
        staging: &Path,
        disk_ids: DiskIds,
        seed: &Path,
    ) -> Result<(), SandboxError> {
        let (view, root) = self.new_disk_root(staging, disk_ids).await?;
        let base = self.inner.slots.disk_id_base(disk_ids);
        let seed = seed.to_owned();
        let result = super::blocking(move || {
            let home = root.join(disk::HOME_DIR);
            copy_dir(&seed, &home, "home")?;
            if base != 0 {
                shift_owners(&home, 0, base)?;
            }
            Ok(())
        })
        .await;
        drop(view);
        result
    }

    /// The root of a new container's disk (in its staging directory
    /// `staging`, holding `disk_ids`), laid out, and the view that keeps it
    /// reachable (none for a directory disk).
    async fn new_disk_root(
        &self,
        staging: &Path,
        disk_ids: DiskIds,
    ) -> Result<(Option<OwnedFd>, PathBuf), SandboxError> {
        let view = match self.inner.disk_kind {
            DiskKind::Directory => None,
            DiskKind::Image => {
                let spec = FileViewSpec {
                    disk_image: staging.join("disk.img"),
                    mount_point: self.inner.config.data_dir.join("run/disk"),
                    reuse_loop: None,
                    prepare_layout: Some(
                        self.inner.slots.disk_owners(disk_ids, super::SANDBOX_UID),
                    ),
                };
                let (dir, _) = Helper::open_view(&self.inner.config.helper_binary, &spec).await?;
                Some(dir)
            }
        };
        let root = match &view {
            Some(data) => disk_root_of(data),
            None => staging.join("disk"),
        };
        Ok((view, root))
    }

    /// Fills a new container's disk (in its staging directory `staging`,
    /// holding `disk_ids`) from `restore`.
    pub(super) async fn fill_disk(
        &self,
        staging: &Path,
        disk_ids: DiskIds,
        restore: &Restore,
    ) -> Result<(), SandboxError> {
        let form = restore.recorded.form;
        if form == Form::Image {
            // The copy's disk is the snapshot's image, cloned: its own file,
            // of the snapshot's size (its quota), sharing every block until
            // written. It replaces no provisioned disk (none was made).
            let (from, to) = (restore.dir.join(DISK_IMAGE), staging.join(DISK_IMAGE));
            super::blocking(move || clone_or_copy_file(&from, &to)).await?;
        }
        let (view, root) = self.new_disk_root(staging, disk_ids).await?;
        let from = restore.dir.join("disk");
        // A snapshot of a disk holding its container's own ids has base 0,
        // as has any of a host mapping one id (nothing to shift there).
        let old_base = restore.recorded.owner_base;
        let new_base = self.inner.slots.disk_id_base(disk_ids);
        let shift = old_base != new_base && !self.inner.slots.maps_one_id();
        let root_owner = self.inner.slots.disk_owners(disk_ids, super::SANDBOX_UID).1;
        let result = super::blocking(move || {
            match form {
                Form::Tree => copy_tree(&from, &root)?,
                // The source's overlay left its scratch there while it ran.
                Form::Image => empty_dir(&root.join(disk::WORK_DIR))?,
            }
            if shift {
                for name in KEPT {
                    shift_owners(&root.join(name), old_base, new_base)?;
                }
                // A cloned image's own root too (only the helper sees it).
                std::os::unix::fs::lchown(&root, Some(root_owner.0), Some(root_owner.1))
                    .context(|| "chown the disk's root".into())?;
            }
            Ok(())
        })
        .await;
        drop(view);
        result
    }
}

/// The disk root a view's `data` directory is in, as a path `cp` (a child
/// process, which does not inherit the descriptor) can follow.
fn disk_root_of(data: &OwnedFd) -> PathBuf {
    PathBuf::from(format!(
        "/proc/{}/fd/{}/..",
        std::process::id(),
        data.as_raw_fd()
    ))
}

/// Copies the kept directories of disk root `from` into `to` (merged into
/// what is there), with owners, modes, extended attributes (the overlay's
/// whiteouts and opaque markers), holes and, where the file system allows,
/// shared blocks.
fn copy_tree(from: &Path, to: &Path) -> Result<(), SandboxError> {
    for name in KEPT {
        let source = from.join(name);
        if source.exists() {
            copy_dir(&source, &to.join(name), name)?;
        }
    }
    Ok(())
}

/// Copies directory `from` onto `to` (merged into what is there), as
/// [`copy_tree`] copies each of its directories; `shown` names it in an
/// error.
fn copy_dir(from: &Path, to: &Path, shown: &str) -> Result<(), SandboxError> {
    let output = std::process::Command::new("cp")
        .args(["-a", "--reflink=auto", "--sparse=always", "-T"])
        .arg(from)
        .arg(to)
        .output()
        .context(|| "run cp".into())?;
    if output.status.success() {
        Ok(())
    } else {
        Err(SandboxError::Setup(format!(
            "copying the container's {shown} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

/// Moves every owner in `old_base..old_base+ID_RANGE` under `root` to the
/// same place in `new_base`'s range (links themselves, not their targets).
fn shift_owners(root: &Path, old_base: u32, new_base: u32) -> Result<(), SandboxError> {
    let shift = |id: u32| {
        if (old_base..old_base.saturating_add(ID_RANGE)).contains(&id) {
            Some(new_base + (id - old_base))
        } else {
            None
        }
    };
    let mut stack = vec![root.to_owned()];
    while let Some(path) = stack.pop() {
        let meta = match fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(SandboxError::io(format!("stat {}", path.display()), e)),
        };
        let (uid, gid) = (shift(meta.uid()), shift(meta.gid()));
        if uid.is_some() || gid.is_some() {
            // lchown clears set-id bits: put the mode back.
            std::os::unix::fs::lchown(&path, uid, gid)
                .context(|| format!("chown {}", path.display()))?;
            if !meta.file_type().is_symlink() && meta.mode() & 0o6000 != 0 {
                use std::os::unix::fs::PermissionsExt;
                fs::set_permissions(&path, fs::Permissions::from_mode(meta.mode() & 0o7777))
                    .context(|| format!("chmod {}", path.display()))?;
            }
        }
        if meta.is_dir() {
            for entry in fs::read_dir(&path)
                .context(|| format!("list {}", path.display()))?
                .flatten()
            {
                stack.push(entry.path());
            }
        }
    }
    Ok(())
}

/// Bytes allocated to the files under `root` (each hard-linked inode once).
fn allocated_bytes(root: &Path) -> u64 {
    let mut seen = std::collections::HashSet::new();
    let mut total = 0u64;
    let mut stack = vec![root.to_owned()];
    while let Some(path) = stack.pop() {
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if seen.insert((meta.dev(), meta.ino())) {
            total = total.saturating_add(meta.blocks().saturating_mul(512));
        }
        if meta.is_dir() {
            stack.extend(
                fs::read_dir(&path)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.path()),
            );
        }
    }
    total
}

/// The snapshots directory is the server's alone: its files keep the host
/// ids of containers whose ranges may later be handed to others.
pub(super) fn restrict(dir: &Path) -> Result<(), SandboxError> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        .context(|| format!("chmod {}", dir.display()))
}

/// Removes everything in directory `dir` (which stays); a missing one is
/// left missing.
fn empty_dir(dir: &Path) -> Result<(), SandboxError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(SandboxError::io(format!("list {}", dir.display()), e)),
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let removed = match entry.file_type() {
            Ok(kind) if kind.is_dir() => fs::remove_dir_all(&path),
            _ => fs::remove_file(&path),
        };
        removed.context(|| format!("remove {}", path.display()))?;
    }
    Ok(())
}

/// Writes every dirty block of the file system `view` is on to its device
/// (for a loop device: into its image file), with its journal committed:
/// the image then holds what a clean crash at this instant would leave,
/// which mounting it recovers.
fn sync_file_system(view: &OwnedFd) -> Result<(), SandboxError> {
    // SAFETY: syncfs on a descriptor this function borrows for the call.
    if unsafe { libc::syncfs(view.as_raw_fd()) } == 0 {
        Ok(())
    } else {
        Err(SandboxError::io(
            "sync the container's disk",
            std::io::Error::last_os_error(),
        ))
    }
}

/// Makes `to` (a new file, mode 0600: only the server and its helper open
/// disk images) a clone of `from`: the same blocks, shared until either
/// writes them.
fn clone_file(from: &Path, to: &Path) -> Result<(), SandboxError> {
    use std::os::unix::fs::OpenOptionsExt;
    let source = fs::File::open(from).context(|| format!("open {}", from.display()))?;
    let clone = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)
        .context(|| format!("create {}", to.display()))?;
    ficlone(&clone, &source).map_err(|e| {
        let _ = fs::remove_file(to);
        SandboxError::io(format!("clone {}", from.display()), e)
    })
}

/// [`clone_file`], or where the blocks cannot be shared (a snapshot
/// directory moved to a file system without clones), a copy with its holes
/// kept.
fn clone_or_copy_file(from: &Path, to: &Path) -> Result<(), SandboxError> {
    match clone_file(from, to) {
        Err(SandboxError::Io { source, .. })
            if matches!(
                source.raw_os_error(),
                Some(libc::EOPNOTSUPP | libc::EXDEV | libc::EINVAL)
            ) =>
        {
            copy_dir(from, to, "disk image")
        }
        cloned => cloned,
    }
}

/// `FICLONE`: `clone` (empty, writable) gets `source`'s blocks.
fn ficlone(clone: &fs::File, source: &fs::File) -> Result<(), std::io::Error> {
    // SAFETY: FICLONE takes the source's descriptor as its argument; both
    // descriptors are borrowed for the call.
    let status = unsafe { libc::ioctl(clone.as_raw_fd(), libc::FICLONE, source.as_raw_fd()) };
    if status == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether a file in `from` can be cloned into `to` (`FICLONE`): both on
/// one file system that shares blocks.
fn reflink_supported(from: &Path, to: &Path) -> Result<(), std::io::Error> {
    fs::create_dir_all(from)?;
    fs::create_dir_all(to)?;
    let source_path = from.join(format!("{PROBE_PREFIX}{}", std::process::id()));
    let clone_path = to.join(format!("{PROBE_PREFIX}{}-clone", std::process::id()));
    let result = (|| {
        // FICLONE reads its source: a descriptor open for writing only
        // is refused (EBADF), whatever the file system.
        let source = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&source_path)?;
        std::io::Write::write_all(&mut &source, &[0u8; 4096])?;
        let clone = fs::File::create(&clone_path)?;
        ficlone(&clone, &source)
    })();
    let _ = fs::remove_file(&source_path);
    let _ = fs::remove_file(&clone_path);
    result
}

/// The name the probe's files start with (removed at start-up if a crash
/// left them).
const PROBE_PREFIX: &str = ".reflink-probe-";

/// Removes snapshots half taken or half deleted by a previous run, and
/// the sharing probe's files.
pub(super) fn recover(data_dir: &Path) {
    let probes = fs::read_dir(data_dir.join("containers"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(PROBE_PREFIX));
    for probe in probes {
        let _ = fs::remove_file(probe.path());
    }
    let dir = data_dir.join("snapshots");
    for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(".creating-")
            || name.starts_with(".trash-")
            || name.starts_with(PROBE_PREFIX)
        {
            tracing::info!("removing {name}, left by a previous run");
            let path = entry.path();
            let _ = fs::remove_dir_all(&path).or_else(|_| fs::remove_file(&path));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::Scratch;

    #[test]
    fn owners_in_the_old_range_move_to_the_new_one_and_others_stay() {
        if crate::sys::geteuid() != 0 {
            return;
        }
        let dir = Scratch::new("owners");
        let root = dir.path().join("tree");
        fs::create_dir(&root).expect("mkdir");
        let inside = root.join("inside");
        let outside = root.join("outside");
        fs::write(&inside, b"x").expect("write");
        fs::write(&outside, b"y").expect("write");
        let old = 3_000_065_536;
        let new = 3_000_131_072;
        std::os::unix::fs::lchown(&inside, Some(old + 1000), Some(old + 1000)).expect("chown");
        std::os::unix::fs::lchown(&outside, Some(12345), Some(12345)).expect("chown");
        shift_owners(&root, old, new).expect("shift");
        let inside_meta = fs::metadata(&inside).expect("stat");
        let outside_meta = fs::metadata(&outside).expect("stat");
        assert_eq!(
            (inside_meta.uid(), inside_meta.gid()),
            (new + 1000, new + 1000),
            "an owner in the old range moves"
        );
        assert_eq!(
            (outside_meta.uid(), outside_meta.gid()),
            (12345, 12345),
            "an owner outside it stays"
        );
    }

    #[test]
    fn half_made_snapshots_are_removed_and_committed_ones_kept() {
        let dir = Scratch::new("recover");
        let snapshots = dir.path().join("snapshots");
        for name in [".creating-snap_a", ".trash-snap_b-1-2", "snap_c"] {
            fs::create_dir_all(snapshots.join(name).join("disk")).expect("mkdir");
        }
        recover(dir.path());
        let left: Vec<String> = fs::read_dir(&snapshots)
            .expect("list")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, vec!["snap_c".to_owned()], "left: {left:?}");
    }

    #[test]
    fn the_sharing_probe_answers_for_the_file_system_and_leaves_nothing() {
        let dir = Scratch::new("probe");
        let (from, to) = (dir.path().join("containers"), dir.path().join("snapshots"));
        // Either answer is the file system's (this one's may clone or not),
        // never a refusal of how the probe opened its files.
        if let Err(e) = reflink_supported(&from, &to) {
            assert_ne!(e.raw_os_error(), Some(libc::EBADF), "{e}");
        }
        for left in [&from, &to] {
            let names: Vec<_> = fs::read_dir(left).expect("list").flatten().collect();
            assert!(names.is_empty(), "the probe left {names:?}");
        }
    }

    #[test]
    fn a_work_directory_is_emptied_and_kept() {
        let dir = Scratch::new("work");
        let work = dir.path().join("work");
        fs::create_dir_all(work.join("work").join("deep")).expect("mkdir");
        fs::write(work.join("file"), b"x").expect("write");
        empty_dir(&work).expect("empty");
        assert!(work.is_dir(), "the directory itself stays");
        assert_eq!(fs::read_dir(&work).expect("list").count(), 0);
        empty_dir(&dir.path().join("missing")).expect("a missing one is no error");
    }

    #[test]
    fn allocated_bytes_counts_blocks_not_holes() {
        let dir = Scratch::new("sparse");
        let sparse = fs::File::create(dir.path().join("sparse")).expect("create");
        sparse.set_len(64 << 20).expect("truncate");
        let bytes = allocated_bytes(dir.path());
        assert!(bytes < 1 << 20, "a 64 MiB hole counted {bytes} bytes");
    }
}
