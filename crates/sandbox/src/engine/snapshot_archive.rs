//! A snapshot as one archive, and a snapshot made from one: how a
//! cluster's snapshot leaves the node that took it (the server puts the
//! archive in the object store) and reaches the node that restores it.
//!
//! The archive is a POSIX tar of the snapshot's directory (`snapshot.json`
//! and its files, in whichever form the snapshot keeps them), compressed with zstd at its fastest level: holes are
//! kept as holes (`--sparse`), owners as numbers (the source container's
//! host ids, moved at restore as for a local snapshot), and extended
//! attributes whole (the overlay's opaque markers; its whiteouts are
//! character devices, which tar keeps too). GNU tar and zstd do the work:
//! both are in every Debian, and tar's sparse scan (`SEEK_HOLE`) and
//! extended attributes are what a hand-made writer would have to redo.
//!
//! An import unpacks into `<data>/snapshots/.creating-<id>-…` (removed at
//! start-up if a crash cuts it short), checks its record, and renames it
//! into place: a snapshot is there whole or not at all.

use std::fs;
use std::io::Read;
use std::process::{Child, ChildStdout, Command, Stdio};

use super::snapshots::{restrict, Recorded};
use super::LocalEngine;
use crate::backend::validate_container_id;
use crate::error::{IoContext, SandboxError};

/// tar's flags for the archive's content, both ways.
const CONTENT_FLAGS: [&str; 4] = [
    "--xattrs",
    "--xattrs-include=*",
    "--acls",
    "--numeric-owner",
];

/// The compressor tar runs: zstd's fastest level, as restores wait for it.
const COMPRESSOR: &str = "--use-compress-program=zstd -1 -q";

/// The most of tar's error output kept for an error's message.
const STDERR_KEPT: usize = 4096;

impl LocalEngine {
    /// Snapshot `id` as an archive, read as tar makes it.
    pub(super) fn snapshot_archive(&self, id: &str) -> Result<Box<dyn Read + Send>, SandboxError> {
        // Only a committed snapshot (its record is written last).
        let restore = self.snapshot_record(id)?;
        archive_of(&restore.dir)
    }

    /// Makes snapshot `id` from `archive`, whole or not at all.
    pub(super) async fn unpack_snapshot(
        &self,
        id: &str,
        archive: fs::File,
    ) -> Result<(), SandboxError> {
        validate_container_id(id)?;
        let snapshots = self.snapshots_dir();
        let target = snapshots.join(id);
        if target.exists() {
            return Err(SandboxError::AlreadyExists(id.to_owned()));
        }
        let staging = snapshots.join(format!(".creating-{}", self.next_name(id)));
        let id = id.to_owned();
        super::blocking(move || {
            fs::create_dir_all(&snapshots).context(|| "create the snapshots directory".into())?;
            restrict(&snapshots)?;
            fs::create_dir(&staging).context(|| format!("create {}", staging.display()))?;
            let unpacked = unpack_into(&staging, archive).and_then(|()| {
                let record = fs::read(staging.join("snapshot.json"))
                    .context(|| "read the archive's snapshot.json".into())?;
                serde_json::from_slice::<Recorded>(&record).map_err(|e| {
                    SandboxError::Setup(format!("the archive of snapshot {id} is corrupt: {e}"))
                })?;
                match fs::rename(&staging, &target) {
                    Ok(()) => Ok(()),
                    // Another restore unpacked it first.
                    Err(_) if target.exists() => Err(SandboxError::AlreadyExists(id.clone())),
                    Err(e) => Err(SandboxError::io("commit the snapshot", e)),
                }
            });
            if unpacked.is_err() {
                let _ = fs::remove_dir_all(&staging);
            }
            unpacked
        })
        .await
    }
}

/// The archive of directory `dir` (a snapshot's; an image's tree, see
/// `image_archive`), read as tar makes it.
pub(super) fn archive_of(dir: &std::path::Path) -> Result<Box<dyn Read + Send>, SandboxError> {
    let mut child = Command::new("tar")
        .args([
            "--create",
            "--file=-",
            "--sparse",
            "--format=posix",
            COMPRESSOR,
        ])
        .args(CONTENT_FLAGS)
        .arg("--directory")
        .arg(dir)
        // The whole directory, whatever form the snapshot's files take
        // (a tree under `disk/`, or a sparse `disk.img`).
        .arg(".")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context(|| "run tar".into())?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| SandboxError::Setup("tar's output was not piped".into()))?;
    let stderr = child
        .stderr
        .take()
        .ok_or_else(|| SandboxError::Setup("tar's errors were not piped".into()))?;
    // Drained beside the archive, so a talkative tar never blocks on it.
    let errors = std::thread::spawn(move || {
        let mut kept = Vec::new();
        let _ = stderr.take(STDERR_KEPT as u64).read_to_end(&mut kept);
        String::from_utf8_lossy(&kept).trim().to_owned()
    });
    Ok(Box::new(ArchiveReader {
        child: Some(child),
        stdout,
        errors: Some(errors),
    }))
}

/// Unpacks `archive` into the empty directory `into`.
pub(super) fn unpack_into(into: &std::path::Path, archive: fs::File) -> Result<(), SandboxError> {
    let output = Command::new("tar")
        .args(["--extract", "--file=-", COMPRESSOR])
        .args(CONTENT_FLAGS)
        .arg("--directory")
        .arg(into)
        .stdin(archive)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .context(|| "run tar".into())?;
    if output.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let shown: String = stderr.trim().chars().take(STDERR_KEPT).collect();
        Err(SandboxError::Setup(format!(
            "unpacking the archive failed: {shown}"
        )))
    }
}

/// tar's output; at its end, tar's exit status (a tar that failed ends
/// the read in an error, so no cut-off archive is taken for whole).
struct ArchiveReader {
    child: Option<Child>,
    stdout: ChildStdout,
    errors: Option<std::thread::JoinHandle<String>>,
}

impl Read for ArchiveReader {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        let read = self.stdout.read(buffer)?;
        if read > 0 || buffer.is_empty() {
            return Ok(read);
        }
        let Some(mut child) = self.child.take() else {
            return Ok(0);
        };
        let status = child.wait()?;
        let errors = self
            .errors
            .take()
            .and_then(|errors| errors.join().ok())
            .unwrap_or_default();
        if status.success() {
            Ok(0)
        } else {
            Err(std::io::Error::other(format!(
                "archiving failed ({status}): {errors}"
            )))
        }
    }
}

impl Drop for ArchiveReader {
    fn drop(&mut self) {
        // Dropped before its end (the upload failed): tar is stopped, and
        // reaped.
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;

    use super::*;
    use crate::scratch::Scratch;

    #[test]
    fn an_archive_unpacks_to_the_same_files_with_holes_kept() {
        let dir = Scratch::new("snapshot-archive");
        let source = dir.path().join("source");
        fs::create_dir_all(source.join("disk/upper/empty")).expect("mkdir");
        fs::write(source.join("snapshot.json"), b"{}").expect("write");
        fs::write(source.join("disk/upper/text"), b"hello").expect("write");
        std::os::unix::fs::symlink("text", source.join("disk/upper/link")).expect("symlink");
        let sparse = fs::File::create(source.join("disk/upper/sparse")).expect("create");
        sparse.set_len(64 << 20).expect("truncate");
        (&sparse).write_all(b"start").expect("write");

        let mut archive = archive_of(&source).expect("archive");
        let packed = dir.path().join("packed");
        let mut file = fs::File::create(&packed).expect("create");
        std::io::copy(&mut archive, &mut file).expect("read whole");
        assert!(
            fs::metadata(&packed).expect("stat").len() < 1 << 20,
            "the hole is not in the archive"
        );

        let into = dir.path().join("into");
        fs::create_dir(&into).expect("mkdir");
        unpack_into(&into, fs::File::open(&packed).expect("open")).expect("unpack");
        let upper = into.join("disk/upper");
        assert_eq!(fs::read(upper.join("text")).expect("read"), b"hello");
        assert_eq!(
            fs::read_link(upper.join("link")).expect("link"),
            std::path::Path::new("text")
        );
        assert!(upper.join("empty").is_dir());
        let restored = fs::metadata(upper.join("sparse")).expect("stat");
        assert_eq!(restored.len(), 64 << 20);
        assert!(
            restored.blocks() * 512 < 1 << 20,
            "still a hole: {} blocks",
            restored.blocks()
        );
    }

    #[test]
    fn a_failed_archive_ends_its_read_in_an_error_and_a_bad_one_unpacks_nothing() {
        let dir = Scratch::new("snapshot-archive-bad");
        // No such directory: tar fails, and says so at the end.
        let mut archive = archive_of(&dir.path().join("missing")).expect("tar starts");
        let mut sink = Vec::new();
        assert!(std::io::copy(&mut archive, &mut sink).is_err());

        let garbage = dir.path().join("garbage");
        fs::write(&garbage, b"not an archive").expect("write");
        let into = dir.path().join("into");
        fs::create_dir(&into).expect("mkdir");
        let refused = unpack_into(&into, fs::File::open(&garbage).expect("open"));
        assert!(refused.is_err(), "{refused:?}");
    }
}
