//! The helper spec: everything the helper needs to build one container,
//! derived from the container's spec, its image, disk and id slot.

use std::path::PathBuf;

use super::container::Container;
use super::slots::{DiskIds, ID_RANGE};
use super::{Inner, SANDBOX_HOME, SANDBOX_UID, SANDBOX_WORKSPACE};
use crate::disk::{self, DiskKind};
use crate::error::SandboxError;
use crate::protocol::{HelperSpec, IdRange, RootSpec};

/// Where a container's skills are shown (read-only).
pub const SKILLS_PATH: &str = "/mnt/skills";

/// What the helper is told to build `container` from, mapped to the host
/// ids of `slot`.
pub(super) fn helper_spec(
    inner: &Inner,
    container: &Container,
    slot: u32,
) -> Result<HelperSpec, SandboxError> {
    let image = inner.images.resolve_revision(
        &container.spec.image,
        container.spec.image_revision.as_deref(),
    )?;
    let disk = Disk::of(inner, container);
    let root = root(image.root, &disk.root, container);
    let ids_rootless = inner.rootless || inner.config.map_invoking_user;
    let network = inner.networks.setup(container, &inner.images)?;
    let mut file_binds = image.file_binds;
    // An OCI image's variables, then the network's (its proxies win).
    let mut env: Vec<(String, String)> = image
        .env
        .iter()
        .filter_map(|entry| entry.split_once('='))
        .filter(|(name, _)| !network.env.iter().any(|(set, _)| set == name))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect();
    env.extend(network.env);
    file_binds.extend(network.file_binds);
    let (sandbox_ids, _) = inner.slots.host_ids(slot, SANDBOX_UID);
    // A disk image holding the container's own ids is shown to it through
    // an idmapped mount of this range; a throwaway tmpfs disk is made anew
    // in the range's host ids.
    let idmap_disk = disk.image.is_some() && container.disk_ids() == DiskIds::Own;
    let (disk_sandbox_ids, disk_root_ids) = if idmap_disk {
        inner.slots.disk_owners(DiskIds::Own, SANDBOX_UID)
    } else {
        inner.slots.host_ids(slot, SANDBOX_UID)
    };
    if ids_rootless && container.spec.build_root {
        // One mapped id: there is no root inside to run a build step as.
        return Err(SandboxError::NotSupported(
            "build sandboxes on a host that maps a single id (rootless)",
        ));
    }
    let (uid_map, gid_map) = if ids_rootless {
        (
            vec![IdRange {
                inside: SANDBOX_UID,
                outside: sandbox_ids.0,
                count: 1,
            }],
            vec![IdRange {
                inside: SANDBOX_UID,
                outside: sandbox_ids.1,
                count: 1,
            }],
        )
    } else {
        let range = IdRange {
            inside: 0,
            outside: inner.slots.id_base(slot),
            count: ID_RANGE,
        };
        (vec![range], vec![range])
    };
    Ok(HelperSpec {
        hostname: inner.config.hostname.clone(),
        uid_map,
        gid_map,
        rootless: ids_rootless,
        sandbox_uid: SANDBOX_UID,
        build_root: container.spec.build_root,
        sandbox_gid: SANDBOX_UID,
        root_mount: inner.config.data_dir.join("run/root"),
        root,
        file_binds,
        program_binds: image.program_binds,
        data_binds: data_binds(&disk.root, image.workspace, container),
        // tmpfs pages are charged to the memory limit but to no process:
        // keep /tmp (and /dev/shm) well below the limit.
        tmp_bytes: container
            .spec
            .tmp_bytes
            .min(container.spec.memory_bytes / 2),
        home: SANDBOX_HOME.to_owned(),
        disk_image: disk.image,
        disk_root: disk.root,
        disk_sandbox_ids,
        disk_root_ids,
        idmap_disk,
        idmap_volumes: container.disk_ids() == DiskIds::Own,
        reuse_loop: container.last_loop(),
        nofile: crate::protocol::DEFAULT_NOFILE,
        egress: network.egress,
        env,
        workdir: image.workdir,
        disk_tmpfs_bytes: disk.tmpfs_bytes,
        hide: container.spec.hidden.clone(),
        read_only_binds: container
            .spec
            .skills
            .iter()
            .map(|dir| (dir.clone(), SKILLS_PATH.to_owned()))
            .collect(),
        volume_binds: container
            .spec
            .volumes
            .iter()
            .map(|volume| (volume.source.clone(), volume.target.clone()))
            .collect(),
        volume_stage: inner.config.data_dir.join("run/volumes"),
    })
}

/// Where a container's disk is and how it is made.
struct Disk {
    /// The image file mounted, if any.
    image: Option<PathBuf>,
    /// Where the disk's directories are, in the helper's mount namespace.
    root: PathBuf,
    /// The size of a tmpfs made as the disk, if it is one.
    tmpfs_bytes: Option<u64>,
}

impl Disk {
    fn of(inner: &Inner, container: &Container) -> Self {
        match inner.disk_kind {
            // A throwaway container needs no disk that outlives it: a tmpfs,
            // bounded by its size and charged to the container's memory,
            // costs nothing to make (no image to format).
            DiskKind::Image if container.spec.ephemeral => Self {
                image: None,
                root: inner.config.data_dir.join("run/disk"),
                tmpfs_bytes: Some(container.spec.disk_bytes.min(container.spec.memory_bytes)),
            },
            DiskKind::Image => Self {
                image: Some(container.dir.join("disk.img")),
                root: inner.config.data_dir.join("run/disk"),
                tmpfs_bytes: None,
            },
            DiskKind::Directory => Self {
                image: None,
                root: container.dir.join("disk"),
                tmpfs_bytes: None,
            },
        }
    }
}

/// The image's root as this container sees it: an overlay whose upper
/// layer is on its disk, or the host's directories with its own binds.
fn root(image: RootSpec, disk_root: &std::path::Path, container: &Container) -> RootSpec {
    match image {
        RootSpec::Overlay { lower, .. } => RootSpec::Overlay {
            lower,
            upper: disk_root.join(disk::UPPER_DIR),
            work: disk_root.join(disk::WORK_DIR),
        },
        RootSpec::HostBinds {
            mut binds,
            mut symlinks,
            layers,
        } => {
            // A host directory shown whole brings its own entries
            // (`/var/tmp` with `/var`).
            symlinks.retain(|(link, _)| {
                !container
                    .spec
                    .host_binds
                    .iter()
                    .any(|b| std::path::Path::new(link).starts_with(&b.target))
            });
            binds.extend(
                container
                    .spec
                    .host_binds
                    .iter()
                    .filter(|b| !b.writable)
                    .map(|b| (b.source.clone(), b.target.clone())),
            );
            RootSpec::HostBinds {
                binds,
                symlinks,
                layers,
            }
        }
    }
}

/// The writable directories bound in: `/mnt/data`, the home, the workspace
/// (if the image has one) and the writable host binds.
fn data_binds(
    disk_root: &std::path::Path,
    workspace: bool,
    container: &Container,
) -> Vec<(PathBuf, String)> {
    [
        (
            disk_root.join(disk::DATA_DIR),
            crate::backend::WORKDIR.to_owned(),
        ),
        (disk_root.join(disk::HOME_DIR), SANDBOX_HOME.to_owned()),
    ]
    .into_iter()
    .chain(workspace.then(|| {
        (
            disk_root.join(disk::WORKSPACE_DIR),
            SANDBOX_WORKSPACE.to_owned(),
        )
    }))
    .chain(
        container
            .spec
            .host_binds
            .iter()
            .filter(|b| b.writable)
            .map(|b| (b.source.clone(), b.target.clone())),
    )
    .collect()
}
