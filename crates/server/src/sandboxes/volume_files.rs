//! A volume's files reached from the host (E2B's volume content API),
//! with no sandbox running.
//!
//! A volume's directory is written by its sandboxes, which may leave any
//! link in it; the server runs as root. So a caller's path is never handed
//! to a path-taking call: every component is resolved beneath a descriptor
//! of the volume's directory with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS)`, and the last one is acted on relative to its
//! parent's descriptor without being followed. A link inside the volume is
//! shown as a link, never read through, written through or removed
//! beyond.
//!
//! Owners: sandboxes write as their own ids through an idmapped mount (the
//! sandbox user is uid 1000), or, keeping a range for good, as host ids of
//! it; an entry is shown as the sandbox user's (1000) unless the host's
//! root owns it (what this API writes: 0). What
//! this API makes is open to every sandbox of the project (`0777`
//! directories, `0666` files) unless a mode is given, as the volume's root
//! is (`1777`): a sandbox must be able to write into a directory made here.
//! Ids cannot be set: which ids a sandbox's files have is the engine's
//! mapping to decide, not a caller's.

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use shellgate_wire::e2b::{VolumeEntryStat, VolumeEntryType};

/// The sandbox user's uid (and gid) inside every container.
const SANDBOX_ID: u32 = 1000;
/// Most entries one listing returns.
pub(crate) const MAX_LISTED: usize = 10_000;
/// The deepest listing.
pub(crate) const MAX_DEPTH: u32 = 32;
/// Mode bits a caller may set: permissions, and the sticky bit (never
/// set-id bits: a volume's files are run in sandboxes).
const SETTABLE_MODE: u32 = 0o1777;

/// Why a volume's file call failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum VolumeFileError {
    #[error("invalid path {path:?}: {why}")]
    InvalidPath { path: String, why: &'static str },
    #[error("path {0} not found")]
    NotFound(String),
    #[error("path {0} exists")]
    Exists(String),
    #[error("path {0} is a directory")]
    IsDirectory(String),
    #[error("path {0} is not a directory")]
    NotDirectory(String),
    #[error("path {0} is a symbolic link: this API never follows one")]
    Link(String),
    #[error("the volume's root cannot be removed or replaced")]
    Root,
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: String,
        source: Errno,
    },
}

type Result<T> = std::result::Result<T, VolumeFileError>;

/// A caller's path (`/a/b`, `a/b`, `/` for the root) as components.
fn components(path: &str) -> Result<Vec<String>> {
    let invalid = |why| VolumeFileError::InvalidPath {
        path: path.to_owned(),
        why,
    };
    if path.contains('\0') {
        return Err(invalid("NUL byte"));
    }
    let parts: Vec<String> = path
        .split('/')
        .filter(|part| !part.is_empty() && *part != ".")
        .map(str::to_owned)
        .collect();
    if parts.iter().any(|part| part == "..") {
        return Err(invalid("'..' is not allowed"));
    }
    Ok(parts)
}

/// The path shown for `parts`: from the volume's root, absolute.
fn shown(parts: &[String]) -> String {
    format!("/{}", parts.join("/"))
}

fn io<'p>(action: &'static str, parts: &'p [String]) -> impl FnOnce(Errno) -> VolumeFileError + 'p {
    move |errno| match errno {
        Errno::NOENT => VolumeFileError::NotFound(shown(parts)),
        Errno::NOTDIR => VolumeFileError::NotDirectory(shown(parts)),
        Errno::ISDIR => VolumeFileError::IsDirectory(shown(parts)),
        Errno::EXIST => VolumeFileError::Exists(shown(parts)),
        // RESOLVE_NO_SYMLINKS met a link on the way, or O_NOFOLLOW at the end.
        Errno::LOOP => VolumeFileError::Link(shown(parts)),
        source => VolumeFileError::Io {
            action,
            path: shown(parts),
            source,
        },
    }
}

fn beneath_flags() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
}

/// A volume's directory, opened.
pub(crate) struct VolumeFiles {
    root: OwnedFd,
}

impl VolumeFiles {
    /// Opens the volume's directory `dir` (made by the server, never a link).
    pub(crate) fn open(dir: &Path) -> Result<Self> {
        let root = rfs::open(
            dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| VolumeFileError::Io {
            action: "open the volume's directory",
            path: "/".to_owned(),
            source: errno,
        })?;
        Ok(Self { root })
    }

    /// Opens `parts` (relative to the root; none is the root) beneath it.
    fn open_beneath(&self, parts: &[String], flags: OFlags) -> Result<OwnedFd> {
        let rel = if parts.is_empty() {
            ".".to_owned()
        } else {
            parts.join("/")
        };
        rfs::openat2(
            self.root.as_fd(),
            rel.as_str(),
            flags | OFlags::CLOEXEC,
            Mode::empty(),
            beneath_flags(),
        )
        .map_err(io("open", parts))
    }

    /// The parent directory of `parts` (not the root) and its last name.
    fn parent<'p>(&self, parts: &'p [String]) -> Result<(OwnedFd, &'p str)> {
        let (last, above) = parts.split_last().ok_or(VolumeFileError::Root)?;
        let dir = self
            .open_beneath(above, OFlags::PATH | OFlags::DIRECTORY)
            .map_err(|error| match error {
                VolumeFileError::NotFound(_) => VolumeFileError::NotFound(shown(parts)),
                other => other,
            })?;
        Ok((dir, last.as_str()))
    }

    /// The entry at `path`, a link shown as a link.
    pub(crate) fn stat(&self, path: &str) -> Result<VolumeEntryStat> {
        let parts = components(path)?;
        if parts.is_empty() {
            let stat = rfs::fstat(&self.root).map_err(io("stat", &parts))?;
            return Ok(entry(&parts, &stat, None));
        }
        let (dir, name) = self.parent(&parts)?;
        stat_at(dir.as_fd(), name, &parts)
    }

    /// The entries of the directory at `path`, `depth` levels down (at
    /// least 1), directories before what they hold; links never entered.
    pub(crate) fn list(&self, path: &str, depth: u32) -> Result<Vec<VolumeEntryStat>> {
        let parts = components(path)?;
        let dir = self.open_beneath(&parts, OFlags::RDONLY | OFlags::DIRECTORY)?;
        let mut listed = Vec::new();
        list_into(dir, &parts, depth.clamp(1, MAX_DEPTH), &mut listed)?;
        Ok(listed)
    }

    /// Makes the directory at `path` (its parents too with `force`); an
    /// existing directory is kept as it is with `force`, else `Exists`.
    pub(crate) fn make_dir(
        &self,
        path: &str,
        force: bool,
        mode: Option<u32>,
    ) -> Result<VolumeEntryStat> {
        let parts = components(path)?;
        if parts.is_empty() {
            return Err(VolumeFileError::Root);
        }
        if force {
            for end in 1..parts.len() {
                self.make_one_dir(&parts[..end], true, None)?;
            }
        }
        self.make_one_dir(&parts, force, mode)?;
        self.stat(path)
    }

    fn make_one_dir(&self, parts: &[String], existing_ok: bool, mode: Option<u32>) -> Result<()> {
        let (dir, name) = self.parent(parts)?;
        match rfs::mkdirat(&dir, name, Mode::from_raw_mode(0o700)) {
            Ok(()) => {}
            Err(Errno::EXIST) if existing_ok => {
                let stat = rfs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(io("stat", parts))?;
                return match FileType::from_raw_mode(stat.st_mode) {
                    FileType::Directory => Ok(()),
                    FileType::Symlink => Err(VolumeFileError::Link(shown(parts))),
                    _ => Err(VolumeFileError::NotDirectory(shown(parts))),
                };
            }
            Err(errno) => return Err(io("make", parts)(errno)),
        }
        // Set after the make: the umask must not narrow it.
        let made = rfs::openat2(
            &dir,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            beneath_flags(),
        )
        .map_err(io("open", parts))?;
        set_mode(&made, mode.unwrap_or(0o777), parts)
    }

    /// A file to be written at `path` (its directory must exist; an
    /// existing file is replaced only with `force`, as E2B's API): a
    /// temporary beside it, renamed over it by [`NewFile::commit`] (removed
    /// if never committed), so a cut upload leaves nothing.
    pub(crate) fn new_file(&self, path: &str, force: bool, mode: Option<u32>) -> Result<NewFile> {
        let parts = components(path)?;
        let (dir, name) = self.parent(&parts)?;
        // A directory or a link is never replaced by a file.
        match rfs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => match FileType::from_raw_mode(stat.st_mode) {
                FileType::RegularFile if force => {}
                FileType::RegularFile => return Err(VolumeFileError::Exists(shown(&parts))),
                FileType::Directory => return Err(VolumeFileError::IsDirectory(shown(&parts))),
                FileType::Symlink => return Err(VolumeFileError::Link(shown(&parts))),
                _ => return Err(VolumeFileError::Exists(shown(&parts))),
            },
            Err(Errno::NOENT) => {}
            Err(errno) => return Err(io("stat", &parts)(errno)),
        }
        let temp = format!(".shellgate-upload-{}", shellgate_wire::new_id(""));
        let file = rfs::openat(
            &dir,
            temp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(io("create", &parts))?;
        set_mode(&file, mode.unwrap_or(0o666), &parts)?;
        Ok(NewFile {
            dir,
            temp,
            name: name.to_owned(),
            parts: parts.clone(),
            file: Some(File::from(file)),
            committed: false,
        })
    }

    /// The regular file at `path`, opened for reading (never through a link).
    pub(crate) fn open_file(&self, path: &str) -> Result<(File, u64)> {
        let parts = components(path)?;
        let (dir, name) = self.parent(&parts)?;
        let fd = rfs::openat2(
            &dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
            beneath_flags(),
        )
        .map_err(io("open", &parts))?;
        let stat = rfs::fstat(&fd).map_err(io("stat", &parts))?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => {}
            FileType::Directory => return Err(VolumeFileError::IsDirectory(shown(&parts))),
            _ => return Err(VolumeFileError::NotFound(shown(&parts))),
        }
        // Reads of a regular file never block on O_NONBLOCK's account; it
        // only kept a FIFO from holding the open.
        let size = u64::try_from(stat.st_size).unwrap_or(0);
        Ok((File::from(fd), size))
    }

    /// Removes the entry at `path` (a directory with all it holds; a link
    /// as a link).
    pub(crate) fn remove(&self, path: &str) -> Result<()> {
        let parts = components(path)?;
        let (dir, name) = self.parent(&parts)?;
        remove_at(dir.as_fd(), name, &parts)
    }

    /// Sets the mode of the entry at `path` (not a link).
    pub(crate) fn set_mode(&self, path: &str, mode: u32) -> Result<VolumeEntryStat> {
        let parts = components(path)?;
        let fd = self.open_beneath(&parts, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW)?;
        set_mode(&fd, mode, &parts)?;
        self.stat(path)
    }
}

/// A file being written (see [`VolumeFiles::new_file`]).
pub(crate) struct NewFile {
    dir: OwnedFd,
    temp: String,
    name: String,
    parts: Vec<String>,
    file: Option<File>,
    committed: bool,
}

impl NewFile {
    /// The file to write to (taken once).
    pub(crate) fn take_file(&mut self) -> Option<File> {
        self.file.take()
    }

    /// Puts the written file in place.
    pub(crate) fn commit(mut self) -> Result<()> {
        rfs::renameat(&self.dir, self.temp.as_str(), &self.dir, self.name.as_str())
            .map_err(io("rename", &self.parts))?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for NewFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = rfs::unlinkat(&self.dir, self.temp.as_str(), AtFlags::empty());
        }
    }
}

fn set_mode(fd: &OwnedFd, mode: u32, parts: &[String]) -> Result<()> {
    rfs::fchmod(fd, Mode::from_raw_mode(mode & SETTABLE_MODE)).map_err(io("chmod", parts))
}

fn stat_at(dir: BorrowedFd<'_>, name: &str, parts: &[String]) -> Result<VolumeEntryStat> {
    let stat = rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(io("stat", parts))?;
    let target = (FileType::from_raw_mode(stat.st_mode) == FileType::Symlink)
        .then(|| rfs::readlinkat(dir, name, Vec::new()).ok())
        .flatten()
        .map(|target| target.to_string_lossy().into_owned());
    Ok(entry(parts, &stat, target))
}

fn entry(parts: &[String], stat: &rfs::Stat, target: Option<String>) -> VolumeEntryStat {
    let kind = match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => VolumeEntryType::File,
        FileType::Directory => VolumeEntryType::Directory,
        FileType::Symlink => VolumeEntryType::Symlink,
        _ => VolumeEntryType::Unknown,
    };
    let shown_id = |id: u32| if id == 0 { 0 } else { SANDBOX_ID };
    let time = shellgate_wire::time::rfc3339;
    VolumeEntryStat {
        name: parts.last().cloned().unwrap_or_else(|| "/".to_owned()),
        kind,
        path: shown(parts),
        size: u64::try_from(stat.st_size).unwrap_or(0),
        mode: stat.st_mode & 0o7777,
        uid: shown_id(stat.st_uid),
        gid: shown_id(stat.st_gid),
        atime: time(stat.st_atime),
        mtime: time(stat.st_mtime),
        ctime: time(stat.st_ctime),
        target,
    }
}

/// Adds the entries of `dir` (at `parts`) to `listed`, `depth` levels down.
fn list_into(
    dir: OwnedFd,
    parts: &[String],
    depth: u32,
    listed: &mut Vec<VolumeEntryStat>,
) -> Result<()> {
    let mut names: Vec<String> = Vec::new();
    let entries = rfs::Dir::read_from(&dir).map_err(io("list", parts))?;
    for item in entries {
        let item = item.map_err(io("list", parts))?;
        let name = item.file_name().to_string_lossy().into_owned();
        if name == "." || name == ".." || name.starts_with(".shellgate-upload-") {
            continue;
        }
        names.push(name);
    }
    names.sort();
    for name in names {
        if listed.len() >= MAX_LISTED {
            return Ok(());
        }
        let child: Vec<String> = parts.iter().cloned().chain([name.clone()]).collect();
        let stat = match stat_at(dir.as_fd(), &name, &child) {
            Ok(stat) => stat,
            // Gone since it was listed.
            Err(VolumeFileError::NotFound(_)) => continue,
            Err(error) => return Err(error),
        };
        let descend = depth > 1 && stat.kind == VolumeEntryType::Directory;
        listed.push(stat);
        if descend {
            let inner = rfs::openat2(
                &dir,
                name.as_str(),
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
                beneath_flags(),
            );
            match inner {
                Ok(inner) => list_into(inner, &child, depth - 1, listed)?,
                // Replaced or removed meanwhile: listed as it was.
                Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => {}
                Err(errno) => return Err(io("open", &child)(errno)),
            }
        }
    }
    Ok(())
}

/// Removes `name` of `dir`: a directory after what it holds, never
/// entering a link.
fn remove_at(dir: BorrowedFd<'_>, name: &str, parts: &[String]) -> Result<()> {
    match rfs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) => return Ok(()),
        Err(Errno::ISDIR) => {}
        Err(errno) => return Err(io("remove", parts)(errno)),
    }
    let inner = rfs::openat2(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        beneath_flags(),
    )
    .map_err(io("open", parts))?;
    let mut names = Vec::new();
    for item in rfs::Dir::read_from(&inner).map_err(io("list", parts))? {
        let item = item.map_err(io("list", parts))?;
        let child = item.file_name().to_string_lossy().into_owned();
        if child != "." && child != ".." {
            names.push(child);
        }
    }
    for child in names {
        let below: Vec<String> = parts.iter().cloned().chain([child.clone()]).collect();
        match remove_at(inner.as_fd(), &child, &below) {
            Ok(()) | Err(VolumeFileError::NotFound(_)) => {}
            Err(error) => return Err(error),
        }
    }
    rfs::unlinkat(dir, name, AtFlags::REMOVEDIR).map_err(io("remove", parts))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Scratch(std::path::PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn scratch() -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "shellgate-volume-files-{}",
            shellgate_wire::new_id("t")
        ));
        std::fs::create_dir_all(dir.join("volume")).expect("mkdir");
        Scratch(dir)
    }

    fn write(files: &VolumeFiles, path: &str, bytes: &[u8]) -> Result<()> {
        use std::io::Write;
        let mut new = files.new_file(path, true, None)?;
        new.take_file()
            .expect("file")
            .write_all(bytes)
            .expect("write");
        new.commit()
    }

    #[test]
    fn paths_are_components_of_the_volume_never_above_it() {
        assert_eq!(components("/a//b/./c").unwrap(), ["a", "b", "c"]);
        assert!(components("/").unwrap().is_empty());
        for refused in ["../x", "/a/../../b", "a\0b"] {
            assert!(components(refused).is_err(), "{refused:?} was accepted");
        }
    }

    #[test]
    fn files_are_written_listed_read_and_removed_beneath_the_volume() {
        let scratch = scratch();
        let files = VolumeFiles::open(&scratch.0.join("volume")).unwrap();
        assert!(matches!(
            write(&files, "/data/deep/hello.txt", b"hello"),
            Err(VolumeFileError::NotFound(_))
        ));
        files.make_dir("/data/deep", true, None).unwrap();
        write(&files, "/data/deep/hello.txt", b"hello").unwrap();
        assert!(matches!(
            files.new_file("/data/deep/hello.txt", false, None),
            Err(VolumeFileError::Exists(_))
        ));
        let stat = files.stat("data/deep/hello.txt").unwrap();
        assert_eq!(
            (stat.kind, stat.size, stat.path.as_str(), stat.name.as_str()),
            (
                VolumeEntryType::File,
                5,
                "/data/deep/hello.txt",
                "hello.txt"
            )
        );
        assert_eq!(stat.mode, 0o666);
        let listed: Vec<String> = files
            .list("/", 3)
            .unwrap()
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert_eq!(listed, ["/data", "/data/deep", "/data/deep/hello.txt"]);
        let shallow: Vec<String> = files
            .list("/", 1)
            .unwrap()
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert_eq!(shallow, ["/data"]);
        let (mut file, size) = files.open_file("/data/deep/hello.txt").unwrap();
        let mut read = String::new();
        std::io::Read::read_to_string(&mut file, &mut read).unwrap();
        assert_eq!((read.as_str(), size), ("hello", 5));
        assert!(matches!(
            files.make_dir("/data", false, None),
            Err(VolumeFileError::Exists(_))
        ));
        assert_eq!(
            files.make_dir("/data", true, None).unwrap().kind,
            VolumeEntryType::Directory
        );
        assert_eq!(
            files.set_mode("/data/deep/hello.txt", 0o4640).unwrap().mode,
            0o640
        );
        files.remove("/data").unwrap();
        assert!(matches!(
            files.stat("/data"),
            Err(VolumeFileError::NotFound(_))
        ));
        assert!(matches!(files.remove("/"), Err(VolumeFileError::Root)));
    }

    #[test]
    fn a_link_a_sandbox_left_is_shown_never_followed() {
        let scratch = scratch();
        let outside = scratch.0.join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), b"host").unwrap();
        let volume = scratch.0.join("volume");
        std::os::unix::fs::symlink(&outside, volume.join("escape")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), volume.join("secret")).unwrap();
        let files = VolumeFiles::open(&volume).unwrap();
        let link = files.stat("/escape").unwrap();
        assert_eq!(link.kind, VolumeEntryType::Symlink);
        assert_eq!(link.target.as_deref(), outside.to_str());
        assert!(files.open_file("/secret").is_err());
        assert!(files.open_file("/escape/secret").is_err());
        assert!(files.list("/escape", 1).is_err());
        assert!(write(&files, "/escape/planted", b"x").is_err());
        assert!(write(&files, "/secret", b"x").is_err());
        assert!(files.set_mode("/secret", 0o777).is_err());
        // Removing the link removes the link, not what it names.
        files.remove("/escape").unwrap();
        assert_eq!(std::fs::read(outside.join("secret")).unwrap(), b"host");
        assert!(!outside.join("planted").exists());
    }

    #[test]
    fn a_cut_write_leaves_nothing() {
        let scratch = scratch();
        let files = VolumeFiles::open(&scratch.0.join("volume")).unwrap();
        drop(files.new_file("/half", false, None).unwrap());
        assert!(files.list("/", 1).unwrap().is_empty());
        assert!(std::fs::read_dir(scratch.0.join("volume"))
            .unwrap()
            .next()
            .is_none());
    }
}
