//! Files by path: the values the backend's file operations take
//! and give — an entry (`lstat`), a listing, a download's stream, an
//! upload's sink.
//!
//! Paths are absolute container paths; each operation runs with exactly
//! the rights of the sandbox user (a backend runs it inside the container),
//! except reads of a stopped container's `/mnt/data`, which a backend may
//! serve from its disk without starting it.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::SandboxError;

/// Deepest listing a caller may ask for.
pub const MAX_LIST_DEPTH: u32 = 32;
/// Most entries one listing returns (and the default).
pub const MAX_LIST_ENTRIES: u32 = 10_000;
/// Entries a listing returns when the caller does not say.
pub const DEFAULT_LIST_ENTRIES: u32 = 1_000;
/// Where commands start, `backend::WORKDIR` (kept here so the two files
/// do not import each other; backend's tests check they agree).
pub const WORKDIR: &str = "/mnt/data";

/// Longest path accepted (the kernel's `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;

/// What an entry is (`lstat`: a symbolic link is reported, not followed).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FsKind {
    File,
    Directory,
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

/// One entry of a container's file system.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FsEntry {
    /// Absolute path inside the container.
    pub path: String,
    /// Its last component (`/` for the root).
    pub name: String,
    pub kind: FsKind,
    pub size: u64,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Modification time, seconds since the Unix epoch.
    pub modified_unix: i64,
    /// A symbolic link's target (lossy where it is not UTF-8).
    pub link_target: Option<String>,
    /// User metadata of a file or directory: its `user.e2b.*` extended
    /// attributes, by name without that prefix (UTF-8 values only).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub metadata: std::collections::BTreeMap<String, String>,
}

/// The extended attribute namespace of a file's user metadata.
pub const METADATA_XATTR_PREFIX: &str = "user.e2b.";
/// A file's metadata at most: entries, and bytes of names and values
/// together (within what one ext4 attribute block holds).
pub const MAX_METADATA_ENTRIES: usize = 32;
pub const MAX_METADATA_BYTES: usize = 2048;

/// A directory's entries, depth first, each directory's sorted by name.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct FsListing {
    pub entries: Vec<FsEntry>,
    /// Stopped at the listing's limit: more entries exist.
    pub truncated: bool,
    /// Names that are not UTF-8, left out (the API speaks JSON); counted,
    /// never dropped silently.
    pub non_utf8_names: u64,
}

/// How a file is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteOptions {
    /// Permission bits of the new file (`0o644` by default).
    pub mode: u32,
    /// Create missing parent directories (`0o755`).
    pub parents: bool,
    /// User metadata the new file carries (its `user.e2b.*` extended
    /// attributes; checked by the caller against the bounds above). A file
    /// replaced keeps none of the old one's.
    pub metadata: std::collections::BTreeMap<String, String>,
}

impl Default for WriteOptions {
    fn default() -> Self {
        Self {
            mode: 0o644,
            parents: true,
            metadata: std::collections::BTreeMap::new(),
        }
    }
}

/// What an archive import wrote.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct ArchiveImported {
    pub entries: u64,
    pub bytes: u64,
}

/// A download: what it reads, then its bytes as they come. The stream ends
/// with an error if the transfer failed part way (the client must not take
/// a cut stream for the whole file).
pub struct FsDownload {
    /// The file read, or the directory an archive is of (`None` where a
    /// backend cannot tell).
    pub entry: Option<FsEntry>,
    /// The exact number of bytes the stream carries, when known.
    pub length: Option<u64>,
    pub body: tokio::sync::mpsc::Receiver<std::io::Result<Vec<u8>>>,
}

/// An upload under way. Its bytes are written with back-pressure; nothing
/// takes effect until [`Upload::finish`]: an upload dropped before (its
/// client left, its body failed) changes nothing.
#[async_trait]
pub trait Upload<T>: Send {
    /// Writes the next piece. An error means the other side stopped
    /// reading (it failed or refused): call `finish` to learn why.
    async fn write(&mut self, chunk: &[u8]) -> Result<(), SandboxError>;
    /// The whole body arrived: commit it and say what was made.
    async fn finish(self: Box<Self>) -> Result<T, SandboxError>;
}

/// A path a caller gave, made absolute (a relative one is relative to
/// `/mnt/data`, where commands start) and checked: not empty, no NUL byte,
/// at most [`MAX_PATH_BYTES`]. `.` and empty components are dropped; `..`
/// is kept for the kernel to resolve, with the sandbox user's rights.
pub fn container_path(path: &str, param: &'static str) -> Result<String, SandboxError> {
    let invalid = |why: &str| SandboxError::InvalidRequest {
        param,
        message: format!("invalid path {path:?}: {why}"),
    };
    if path.is_empty() {
        return Err(invalid("it is empty"));
    }
    if path.contains('\0') {
        return Err(invalid("it contains a NUL byte"));
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(invalid("it is longer than 4096 bytes"));
    }
    let absolute = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("{WORKDIR}/{path}")
    };
    let parts: Vec<&str> = absolute
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    Ok(format!("/{}", parts.join("/")))
}

/// A path's place below `/mnt/data`, if it is there lexically (no `..`):
/// `Some("")` for `/mnt/data` itself, `Some("a/b")` for `/mnt/data/a/b`.
pub fn under_workdir(path: &str) -> Option<&str> {
    let rest = path.strip_prefix(WORKDIR)?;
    let rest = match rest {
        "" => "",
        rest => rest.strip_prefix('/')?,
    };
    if rest.split('/').any(|p| p == "..") {
        return None;
    }
    Some(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_made_absolute_and_checked() {
        assert_eq!(container_path("a/./b", "path").unwrap(), "/mnt/data/a/b");
        assert_eq!(container_path("/tmp//x/", "path").unwrap(), "/tmp/x");
        assert_eq!(container_path("/", "path").unwrap(), "/");
        assert_eq!(container_path("/a/../b", "path").unwrap(), "/a/../b");
        for bad in ["", "a\0b"] {
            assert!(container_path(bad, "path").is_err(), "{bad:?}");
        }
        assert!(container_path(&"a".repeat(5000), "path").is_err());
    }

    #[test]
    fn only_plain_paths_below_mnt_data_are_under_it() {
        assert_eq!(under_workdir("/mnt/data"), Some(""));
        assert_eq!(under_workdir("/mnt/data/a/b"), Some("a/b"));
        assert_eq!(under_workdir("/mnt/dataX"), None);
        assert_eq!(under_workdir("/mnt/data/../etc"), None);
        assert_eq!(under_workdir("/tmp/a"), None);
    }
}
