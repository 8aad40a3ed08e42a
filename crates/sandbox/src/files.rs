//! Host-side access to a container's `/mnt/data`.
//!
//! The engine reaches the files through a descriptor of the directory itself:
//! for a running container, the one its init opened and sent before any
//! command ran; for a stopped one, the one a file-view helper sent (see
//! `helper`). No `/proc/<pid>` path is ever used, so a recycled pid can never
//! redirect an access into another container. Every path is resolved with `openat2`:
//! reads with `RESOLVE_IN_ROOT` (a symlink, absolute or `..`, can never climb
//! out of `/mnt/data`), writes and walks with `RESOLVE_NO_SYMLINKS` (nothing is
//! followed at all). These are the classic escapes of `docker cp` and runc
//! (CVE-2018-15664, CVE-2019-5736); a path string is never trusted.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::backend::{FileEntry, FileListing, WORKDIR};
use crate::error::SandboxError;
use crate::sys::{
    self, openat2, RESOLVE_BENEATH, RESOLVE_IN_ROOT, RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS,
};

/// Largest file the engine reads into memory at once.
pub const MAX_READ_BYTES: u64 = 1 << 30;

/// Turns a caller's path (`/mnt/data/a/b`, `a/b`) into components relative
/// to `/mnt/data`, refusing `..`, empty paths and NUL bytes.
pub fn relative_path(path: &str) -> Result<Vec<String>, SandboxError> {
    let invalid = |why: &str| SandboxError::InvalidRequest {
        param: "path",
        message: format!("invalid path {path:?}: {why}"),
    };
    let rest = match path.strip_prefix(WORKDIR) {
        Some("") => "",
        Some(rest) if rest.starts_with('/') => rest.trim_start_matches('/'),
        _ => path,
    };
    if rest.starts_with('/') {
        return Err(invalid("absolute paths must be under /mnt/data"));
    }
    let parts: Vec<String> = rest
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .map(str::to_owned)
        .collect();
    if parts.is_empty() {
        return Err(invalid("no file name"));
    }
    if parts.iter().any(|p| p == "..") {
        return Err(invalid("'..' is not allowed"));
    }
    if path.contains('\0') {
        return Err(invalid("NUL byte"));
    }
    Ok(parts)
}

/// A container's `/mnt/data`, opened through its mount namespace.
pub struct DataDir {
    dir: OwnedFd,
    owner: (u32, u32),
}

fn not_found_or(path: &str, e: io::Error) -> SandboxError {
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) | Some(libc::ELOOP) | Some(libc::EXDEV) => {
            SandboxError::FileNotFound(path.to_owned())
        }
        Some(libc::EDQUOT) | Some(libc::ENOSPC) => SandboxError::QuotaExceeded,
        Some(libc::EISDIR) => SandboxError::Conflict(format!("{path} is a directory")),
        _ => SandboxError::io(format!("access {path}"), e),
    }
}

impl DataDir {
    /// Wraps a descriptor of a container's `/mnt/data` (any open mode;
    /// `O_PATH` is enough). Files written are owned by `owner` (host uid and
    /// gid of the sandbox user).
    pub fn from_dir(dir: OwnedFd, owner: (u32, u32)) -> Self {
        Self { dir, owner }
    }

    /// The directory's descriptor, for paths resolved beneath it (see
    /// `fs_ops::Root::Beneath`).
    pub fn descriptor(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.dir.as_fd()
    }

    /// Reads a regular file; symlinks resolve inside `/mnt/data` only.
    /// A file larger than `disk_limit` (the container's disk quota: only a
    /// sparse file can claim more) is refused.
    pub fn read(&self, path: &str, disk_limit: u64) -> Result<Vec<u8>, SandboxError> {
        let file = self.open_file(path)?;
        let size = file
            .metadata()
            .map_err(|e| SandboxError::io("stat", e))?
            .len();
        if size > disk_limit {
            return Err(SandboxError::FileTooLarge {
                path: path.to_owned(),
                bytes: size,
                limit: disk_limit,
            });
        }
        if size > MAX_READ_BYTES {
            return Err(SandboxError::InvalidRequest {
                param: "path",
                message: format!(
                    "{path} is larger than {MAX_READ_BYTES} bytes; stream it with open_file"
                ),
            });
        }
        let mut contents = Vec::with_capacity(size as usize);
        file.take(MAX_READ_BYTES)
            .read_to_end(&mut contents)
            .map_err(|e| SandboxError::io("read", e))?;
        Ok(contents)
    }

    /// Opens a regular file for reading; symlinks resolve inside
    /// `/mnt/data` only. The descriptor stays valid whatever happens to the
    /// path afterwards.
    pub fn open_file(&self, path: &str) -> Result<File, SandboxError> {
        let relative = relative_path(path)?.join("/");
        let fd = openat2(
            self.dir.as_raw_fd(),
            &relative,
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
            0,
            RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
        )
        .map_err(|e| not_found_or(path, e))?;
        let file = File::from(fd);
        let meta = file.metadata().map_err(|e| SandboxError::io("stat", e))?;
        if !meta.is_file() {
            return Err(SandboxError::FileNotFound(path.to_owned()));
        }
        Ok(file)
    }

    /// Opens (creating as needed) the directory holding the last component.
    fn parent_of(&self, parts: &[String], path: &str) -> Result<OwnedFd, SandboxError> {
        let mut dir = openat2(
            self.dir.as_raw_fd(),
            ".",
            libc::O_PATH | libc::O_DIRECTORY,
            0,
            RESOLVE_BENEATH,
        )
        .map_err(|e| SandboxError::io("open /mnt/data", e))?;
        for part in &parts[..parts.len() - 1] {
            let name = CString::new(part.as_str())
                .map_err(|_| SandboxError::FileNotFound(path.to_owned()))?;
            // SAFETY: `dir` is a valid directory descriptor, `name` a C string.
            let made = unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o755) };
            if made == 0 {
                // SAFETY: as above; fchownat with AT_SYMLINK_NOFOLLOW on what we just made.
                unsafe {
                    libc::fchownat(
                        dir.as_raw_fd(),
                        name.as_ptr(),
                        self.owner.0,
                        self.owner.1,
                        libc::AT_SYMLINK_NOFOLLOW,
                    )
                };
            }
            dir = openat2(
                dir.as_raw_fd(),
                part,
                libc::O_PATH | libc::O_DIRECTORY,
                0,
                RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
            )
            .map_err(|e| not_found_or(path, e))?;
        }
        Ok(dir)
    }

    /// Writes a file, creating parent directories; never follows a symlink.
    pub fn write(&self, path: &str, contents: &[u8]) -> Result<(), SandboxError> {
        self.write_from(path, &mut &contents[..]).map(drop)
    }

    /// Writes a file from a reader (so large uploads never sit in memory),
    /// creating parent directories; never follows a symlink. Returns the
    /// bytes written.
    pub fn write_from(&self, path: &str, source: &mut dyn Read) -> Result<u64, SandboxError> {
        let parts = relative_path(path)?;
        let parent = self.parent_of(&parts, path)?;
        let name = &parts[parts.len() - 1];
        refuse_special_file(&parent, name, path)?;
        let fd = openat2(
            parent.as_raw_fd(),
            name,
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            0o644,
            RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
        )
        .map_err(|e| not_found_or(path, e))?;
        let file = File::from(fd);
        let meta = file.metadata().map_err(|e| SandboxError::io("stat", e))?;
        if !meta.is_file() {
            return Err(SandboxError::InvalidRequest {
                param: "path",
                message: format!("{path} is not a regular file"),
            });
        }
        // SAFETY: fchown on a descriptor we own.
        sys::cvt(unsafe { libc::fchown(file.as_raw_fd(), self.owner.0, self.owner.1) })
            .map_err(|e| SandboxError::io("chown", e))?;
        let written = std::io::copy(source, &mut &file).map_err(|e| not_found_or(path, e))?;
        file.sync_data().map_err(|e| not_found_or(path, e))?;
        Ok(written)
    }

    /// Removes a file (not a directory); never follows a symlink.
    pub fn delete(&self, path: &str) -> Result<(), SandboxError> {
        let parts = relative_path(path)?;
        let parent = self.parent_of_existing(&parts, path)?;
        let name = CString::new(parts[parts.len() - 1].as_str())
            .map_err(|_| SandboxError::FileNotFound(path.to_owned()))?;
        rustix::fs::unlinkat(&parent, name.as_c_str(), rustix::fs::AtFlags::empty())
            .map_err(|e| not_found_or(path, e.into()))?;
        Ok(())
    }

    fn parent_of_existing(&self, parts: &[String], path: &str) -> Result<OwnedFd, SandboxError> {
        let parent = parts[..parts.len() - 1].join("/");
        openat2(
            self.dir.as_raw_fd(),
            if parent.is_empty() { "." } else { &parent },
            libc::O_PATH | libc::O_DIRECTORY,
            0,
            RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
        )
        .map_err(|e| not_found_or(path, e))
    }

    /// Every regular file below `/mnt/data`, without following links, up to
    /// the listing's bounds; what they left out is counted, not dropped
    /// silently.
    pub fn list(&self) -> Result<FileListing, SandboxError> {
        let mut listing = FileListing::default();
        let top = openat2(
            self.dir.as_raw_fd(),
            ".",
            libc::O_RDONLY | libc::O_DIRECTORY,
            0,
            RESOLVE_BENEATH,
        )
        .map_err(|e| SandboxError::io("open /mnt/data", e))?;
        walk(&top, WORKDIR, &mut listing, 0)?;
        listing.files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(listing)
    }
}

/// Refuses to write over anything but a regular file: opening a FIFO would
/// block or fail (`ENXIO`), a socket or device is not a file to replace, and
/// a symbolic link is never followed.
fn refuse_special_file(parent: &OwnedFd, name: &str, path: &str) -> Result<(), SandboxError> {
    let c_name = CString::new(name).map_err(|_| SandboxError::FileNotFound(path.to_owned()))?;
    // SAFETY: stat is plain data (zero is valid); fstatat fills it from a
    // valid directory descriptor and C string, without following a final
    // symlink.
    let (found, stat) = unsafe {
        let mut stat: libc::stat = std::mem::zeroed();
        let ret = libc::fstatat(
            parent.as_raw_fd(),
            c_name.as_ptr(),
            &mut stat,
            libc::AT_SYMLINK_NOFOLLOW,
        );
        (ret == 0, stat)
    };
    if !found {
        return Ok(());
    }
    let kind = match stat.st_mode & libc::S_IFMT {
        libc::S_IFREG => return Ok(()),
        libc::S_IFDIR => "a directory",
        libc::S_IFIFO => "a named pipe (FIFO)",
        libc::S_IFSOCK => "a socket",
        libc::S_IFLNK => "a symbolic link",
        _ => "a device or other special file",
    };
    Err(SandboxError::Conflict(format!(
        "{path} is {kind}; only a regular file can be replaced by an upload"
    )))
}

pub use shellgate_sandbox_api::backend::limits::{
    MAX_LISTED_DEPTH as MAX_DEPTH, MAX_LISTED_FILES as MAX_ENTRIES,
};

fn walk(
    dir: &OwnedFd,
    prefix: &str,
    out: &mut FileListing,
    depth: usize,
) -> Result<(), SandboxError> {
    // The magic link names exactly the directory we opened, whatever happens
    // to the path meanwhile; entries are then opened relative to `dir`.
    let listing = Path::new("/proc/self/fd").join(dir.as_raw_fd().to_string());
    let reader = std::fs::read_dir(&listing).map_err(|e| SandboxError::io("list /mnt/data", e))?;
    for entry in reader.flatten() {
        if out.files.len() >= MAX_ENTRIES {
            out.skipped.entry_limit_reached = true;
            return Ok(());
        }
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            out.skipped.non_utf8_names += 1;
            continue;
        };
        let Ok(file_type) = entry.file_type() else {
            continue;
        };
        let path = format!("{prefix}/{name}");
        if file_type.is_dir() {
            if depth >= MAX_DEPTH {
                out.skipped.too_deep_directories += 1;
                continue;
            }
            if let Ok(child) = openat2(
                dir.as_raw_fd(),
                &name,
                libc::O_RDONLY | libc::O_DIRECTORY,
                0,
                RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
            ) {
                walk(&child, &path, out, depth + 1)?;
            }
        } else if file_type.is_file() {
            let Ok(fd) = openat2(
                dir.as_raw_fd(),
                &name,
                libc::O_PATH,
                0,
                RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
            ) else {
                continue;
            };
            let Ok(meta) = File::from(fd).metadata() else {
                continue;
            };
            out.files.push(FileEntry {
                path,
                bytes: meta.len(),
                modified_unix: meta.mtime(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_made_relative_and_checked() {
        assert_eq!(
            relative_path("/mnt/data/a/b.txt").unwrap(),
            vec!["a", "b.txt"]
        );
        assert_eq!(relative_path("a/./b").unwrap(), vec!["a", "b"]);
        assert!(relative_path("/etc/passwd").is_err());
        assert!(relative_path("/mnt/data/../etc").is_err());
        assert!(relative_path("/mnt/data/").is_err());
        assert!(relative_path("a/../../x").is_err());
        assert!(relative_path("/mnt/dataX/y").is_err());
    }
}
