//! A project's image as one archive, and an image installed from one: how
//! a cluster's image can leave the node that made it (the server puts the
//! archive in the object store) and reach a node that makes containers of
//! it.
//!
//! The archive is the image's current tree (`images/<name>/rootfs`) in
//! the snapshot archive's form (`snapshot_archive`: a POSIX tar, zstd,
//! holes, numeric owners and extended attributes kept); what is known of
//! the image (its revision, run configuration and project: its
//! `info.json`) travels beside it, with the archive's digest. The export
//! holds the image's build lock until the archive is read whole, so a
//! rebuild never swaps the tree mid-archive. An import unpacks into the
//! image's staging directory under the same lock and installs it with the
//! revision it had on its first node (so containers and snapshots name one
//! revision cluster-wide): whole or not at all.

use std::fs;
use std::io::Read;

use super::snapshot_archive::{archive_of, unpack_into};
use super::LocalEngine;
use crate::error::SandboxError;
use crate::image::{BuildLock, ImageDetails, ImageInfo};

/// An archive being read, and the image's build lock held until it ends.
struct Locked {
    archive: Box<dyn Read + Send>,
    _lock: BuildLock,
}

impl Read for Locked {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        self.archive.read(buffer)
    }
}

impl LocalEngine {
    /// Project image `name`'s current tree as an archive, and its details.
    pub(super) fn image_archive(
        &self,
        name: &str,
    ) -> Result<(ImageDetails, Box<dyn Read + Send>), SandboxError> {
        let (details, rootfs, lock) = self.inner.images.export_tree(name)?;
        let archive = archive_of(&rootfs)?;
        Ok((
            details,
            Box::new(Locked {
                archive,
                _lock: lock,
            }),
        ))
    }

    /// Installs image `name` from `archive` (one
    /// [`image_archive`](Self::image_archive) made, checked by the
    /// caller) with `details` as its own, revision included.
    pub(super) async fn unpack_image(
        &self,
        name: &str,
        details: ImageDetails,
        archive: fs::File,
    ) -> Result<ImageInfo, SandboxError> {
        let images = self.inner.images.clone();
        let name = name.to_owned();
        super::blocking(move || {
            images.install_unpacked(&name, details, |staging| unpack_into(staging, archive))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::ImageStore;
    use crate::scratch::Scratch;

    /// A store at `dir` with a small image `name` of `project`.
    fn store_with(dir: &std::path::Path, name: &str, project: &str) -> (ImageStore, ImageInfo) {
        let store = ImageStore::open(dir, "sandbox").expect("open");
        let source = dir.join("source");
        fs::create_dir_all(source.join("bin")).expect("mkdir");
        fs::write(source.join("bin/sh"), b"#!shell").expect("write");
        fs::create_dir_all(source.join("etc")).expect("mkdir");
        fs::write(source.join("etc/mark"), b"made here\n").expect("write");
        let tarball = dir.join("source.tar");
        let packed = std::process::Command::new("tar")
            .arg("-cf")
            .arg(&tarball)
            .arg("-C")
            .arg(&source)
            .arg(".")
            .status()
            .expect("tar");
        assert!(packed.success());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let info = runtime
            .block_on(store.import(name, &tarball))
            .expect("import");
        // As a project's image (an import through the API records it so).
        let details = ImageDetails {
            project: Some(project.to_owned()),
            ..info.details.clone()
        };
        store.write_details(name, &details).expect("details");
        (store, ImageInfo { details, ..info })
    }

    fn open(path: &std::path::Path) -> Result<fs::File, SandboxError> {
        fs::File::open(path).map_err(|e| SandboxError::io("open the archive", e))
    }

    #[test]
    fn an_image_travels_as_an_archive_and_keeps_its_revision_and_project() {
        let dir = Scratch::new("image-archive");
        let (first, made) = store_with(&dir.path().join("first"), "app", "proj_a");
        let (details, mut archive) = first
            .export_tree("app")
            .and_then(|(details, rootfs, lock)| {
                let archive = archive_of(&rootfs)?;
                Ok((
                    details,
                    Locked {
                        archive,
                        _lock: lock,
                    },
                ))
            })
            .expect("export");
        assert_eq!(details.revision, made.details.revision);
        assert!(
            matches!(
                first.remove("app", "proj_a"),
                Err(SandboxError::Conflict(_))
            ),
            "the export holds the image's lock"
        );
        let packed = dir.path().join("app.tar.zst");
        std::io::copy(
            &mut archive,
            &mut fs::File::create(&packed).expect("create"),
        )
        .expect("read whole");
        drop(archive);

        let second = ImageStore::open(&dir.path().join("second"), "sandbox").expect("open");
        let installed = second
            .install_unpacked("app", details.clone(), |staging| {
                unpack_into(staging, open(&packed)?)
            })
            .expect("install");
        assert_eq!(installed.details.revision, made.details.revision);
        assert_eq!(installed.details.project.as_deref(), Some("proj_a"));
        assert_eq!(
            fs::read(installed.path.join("etc/mark")).expect("read"),
            b"made here\n"
        );
        assert!(second.resolve("app").is_ok());
        // Installed already at that revision: nothing is unpacked again.
        let again = second
            .install_unpacked("app", details.clone(), |_| {
                Err(SandboxError::Setup("not unpacked twice".into()))
            })
            .expect("held already");
        assert_eq!(again.details.revision, made.details.revision);
        // Another project's image of the name is not replaced.
        let theirs = ImageDetails {
            project: Some("proj_b".into()),
            revision: Some("ffff".into()),
            ..details.clone()
        };
        let refused = second.install_unpacked("app", theirs, |staging| {
            unpack_into(staging, open(&packed)?)
        });
        assert!(
            matches!(refused, Err(SandboxError::Conflict(_))),
            "{refused:?}"
        );
        // A broken archive installs nothing and leaves the image as it was.
        fs::write(&packed, b"not an archive").expect("write");
        let newer = ImageDetails {
            revision: Some("abcd".into()),
            ..details
        };
        let broken =
            second.install_unpacked("app", newer, |staging| unpack_into(staging, open(&packed)?));
        assert!(broken.is_err());
        assert_eq!(
            second.details("app").revision,
            made.details.revision,
            "unchanged"
        );
        assert!(!dir.path().join("second/app/rootfs.new").exists());
    }
}
