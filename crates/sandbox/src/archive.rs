//! Directories as tar streams: [`export`] writes a directory's tree as a tar
//! stream, [`import`] writes a tar stream's members into a directory (the
//! Agents SDK's `persist_workspace` / `hydrate_workspace`).
//!
//! Both run inside a container as the sandbox user (a worker forked by its
//! init), and in tests on host directories, so neither relies on the
//! container to contain it: every path below `dir` is opened relative to a
//! descriptor of `dir` with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`
//! (and `*at` calls that never follow a final symlink), so a symlink, a
//! `..` or a directory swapped for a link by a concurrent command can never
//! lead outside. `dir` itself is opened as the caller gives it.
//!
//! **Export** writes members relative to `dir` (no member for `dir`
//! itself), each directory's entries sorted by name and a directory before
//! its contents: regular files, directories and symlinks (as links, never
//! followed), with their permission bits, mtimes and numeric owners. FIFOs,
//! sockets and devices are skipped (counted, never opened); so is anything
//! on another file system (a mount point below `dir`, with all under it,
//! the way `tar --one-file-system` never descends into one) and anything
//! the caller may not read. Hard links are written as copies. The stream is
//! written as it is read: no file, and not the archive, is held in memory.
//! If the export fails midway the stream is left cut (no end-of-archive
//! marker is written), so a reader sees an error, not a short archive.
//!
//! **Import** reads members and refuses, before writing anything of the
//! member: absolute paths, `..` components, names with a NUL byte or
//! longer than `PATH_MAX`, symlinks whose target is absolute or climbs out
//! of `dir` (resolved lexically from the link's directory; a `..` through
//! another symlink member is refused as well), hard links to anything but
//! an earlier regular-file member, devices and FIFOs, GNU sparse files,
//! volume labels, multi-volume and dump-directory members, a member whose
//! path runs through an earlier symlink or file member, more than
//! `max_entries` members and more than `max_bytes` of content (each
//! member's declared size is checked before its data is read, so a tar bomb
//! is refused, not extracted until the quota stops it). Metadata headers
//! (GNU long names, PAX records) are bounded and read into memory only up
//! to those bounds.
//!
//! **A failed import leaves nothing half-written**: members are extracted
//! into a fresh staging directory inside `dir` (`.shellgate-import-<random>`),
//! and only when the whole stream was read and checked, including tar's
//! end-of-archive marker (a stream cut at a member boundary is refused),
//! are its entries moved into place: an existing file or symlink is
//! replaced, an existing directory merged. An existing non-directory where
//! the archive has a directory is replaced by it (a symlink is removed,
//! never followed); an existing directory where the archive has a
//! non-directory refuses the import before anything is moved (an import
//! never deletes a directory). On any error the staging directory is
//! removed. It is locked (`flock`) while its import runs: one left by an
//! import that died (a worker killed at its timeout) is unlocked, and the
//! next import into the same directory removes it. So export never writes
//! such a directory and import refuses member names with its prefix.
//!
//! Permission bits (`0o777`; setuid, setgid and sticky are dropped) and
//! mtimes are applied; owners are not (files belong to whoever imports).
//! Directories' modes and mtimes are set last, once their contents are in
//! place. The names kept for the checks (paths and link targets) are
//! bounded (64 MiB together), whatever the member count.

mod glob;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use glob::ExcludeSet;
pub use glob::{MAX_PATTERNS, MAX_PATTERN_BYTES};

/// Longest path the kernel takes, its terminating NUL included.
const PATH_MAX: usize = libc::PATH_MAX as usize;
/// Longest name of one path component.
const NAME_MAX: usize = 255;
const BLOCK: usize = 512;
/// Largest PAX extended header read (a path and a link of `PATH_MAX` each
/// fit many times over).
const MAX_PAX_HEADER: u64 = 64 * 1024;
/// What is read, and discarded, after the end-of-archive marker (its second
/// block and the padding to a 10 KiB record), so the writer is not cut off.
const MAX_TRAILER: u64 = 1 << 20;
/// Most bytes of member names (paths and link targets) one import keeps in
/// memory for its checks: far more than any real archive's, and bounding a
/// hostile one's to this whatever its member count.
const MAX_NAME_BYTES: usize = 64 << 20;
/// The staging directory's name starts with this (and export skips such
/// directories: they are an import's, not the user's).
pub const STAGING_PREFIX: &str = ".shellgate-import-";

/// How paths below `dir` are resolved: never out of it, never through a
/// link.
const BENEATH: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// What an export wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExportSummary {
    /// Members written (files, directories, symlinks).
    pub entries: u64,
    /// Bytes of file content written.
    pub bytes: u64,
    /// Entries left out: FIFOs, sockets, devices, other file systems, and
    /// what the caller may not read.
    pub skipped: u64,
}

/// What an import wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImportSummary {
    /// Members written (files, directories, symlinks, hard links).
    pub entries: u64,
    /// Bytes of file content written.
    pub bytes: u64,
}

/// Bounds on one import, checked against each member's declared size and
/// count before it is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportLimits {
    /// Total bytes of file content.
    pub max_bytes: u64,
    /// Members (directories and links included). Metadata headers (GNU
    /// long names, PAX records) may number three times as many.
    pub max_entries: u64,
}

impl Default for ImportLimits {
    fn default() -> Self {
        Self {
            max_bytes: 10 << 30,
            max_entries: 100_000,
        }
    }
}

/// Why an export or import failed.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// A member the import will not write (hostile or unsupported).
    #[error("member {member:?} refused: {reason}")]
    Refused { member: String, reason: String },
    /// The members' declared sizes exceed the limit.
    #[error("member {member:?} refused: the archive holds more than {limit} bytes")]
    TooLarge { member: String, limit: u64 },
    /// More members than the limit.
    #[error("the archive has more than {limit} members")]
    TooManyEntries { limit: u64 },
    /// Not a tar stream, or one cut short.
    #[error("not a valid tar stream (at byte {offset}): {reason}")]
    Malformed { offset: u64, reason: String },
    /// A member cannot be put in place over what the directory holds.
    #[error("member {member:?} refused: {reason}")]
    Conflict { member: String, reason: String },
    /// An exclude pattern that cannot be used.
    #[error("invalid exclude pattern {pattern:?}: {reason}")]
    InvalidExclude { pattern: String, reason: String },
    /// The disk (quota) is full.
    #[error("no space left on the disk while writing {member:?}")]
    QuotaExceeded { member: String },
    /// `dir` is missing or not a directory.
    #[error("{path}: {source}")]
    Directory { path: String, source: io::Error },
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
}

impl ArchiveError {
    /// Whether the archive (or the request) is at fault: the API answers
    /// 400 naming `archive` (or `exclude` for [`Self::InvalidExclude`]).
    pub fn is_invalid_request(&self) -> bool {
        matches!(
            self,
            Self::Refused { .. }
                | Self::TooLarge { .. }
                | Self::TooManyEntries { .. }
                | Self::Malformed { .. }
                | Self::Conflict { .. }
                | Self::InvalidExclude { .. }
        )
    }

    /// The member the error is about, when there is one.
    pub fn member(&self) -> Option<&str> {
        match self {
            Self::Refused { member, .. }
            | Self::TooLarge { member, .. }
            | Self::Conflict { member, .. }
            | Self::QuotaExceeded { member } => Some(member),
            _ => None,
        }
    }

    /// A short stable name of the variant (for an error code, or to carry
    /// the kind across a pipe with the message).
    pub fn code(&self) -> &'static str {
        match self {
            Self::Refused { .. } => "archive_member_refused",
            Self::TooLarge { .. } => "archive_too_large",
            Self::TooManyEntries { .. } => "archive_too_many_entries",
            Self::Malformed { .. } => "archive_malformed",
            Self::Conflict { .. } => "archive_conflict",
            Self::InvalidExclude { .. } => "invalid_exclude",
            Self::QuotaExceeded { .. } => "quota_exceeded",
            Self::Directory { .. } => "directory_not_found",
            Self::Io { .. } => "io_error",
        }
    }
}

fn io_error(context: impl Into<String>) -> impl FnOnce(Errno) -> ArchiveError {
    let context = context.into();
    move |e| ArchiveError::Io {
        context,
        source: e.into(),
    }
}

/// A path for messages: lossy UTF-8, at most 300 characters.
fn printable(path: &[u8]) -> String {
    let text = String::from_utf8_lossy(path);
    match text.char_indices().nth(300) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.into_owned(),
    }
}

fn open_root(dir: &Path) -> Result<OwnedFd, ArchiveError> {
    rfs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| ArchiveError::Directory {
        path: dir.display().to_string(),
        source: e.into(),
    })
}

/// Opens `rel` (relative to `base`, `""` for `base` itself) without ever
/// leaving `base` or following a link.
fn open_beneath(
    base: BorrowedFd<'_>,
    rel: &[u8],
    flags: OFlags,
    resolve: ResolveFlags,
) -> Result<OwnedFd, Errno> {
    let rel: &[u8] = if rel.is_empty() { b"." } else { rel };
    rfs::openat2(base, rel, flags | OFlags::CLOEXEC, Mode::empty(), resolve)
}

// ---------------------------------------------------------------------------
// Export

/// Checks exclude patterns as [`export`] will, so a caller can refuse bad
/// ones before it starts a response (an export's own refusal comes when
/// its stream may have begun).
pub fn check_excludes(excludes: &[String]) -> Result<(), ArchiveError> {
    parse_excludes(excludes).map(drop)
}

fn parse_excludes(excludes: &[String]) -> Result<ExcludeSet, ArchiveError> {
    ExcludeSet::parse(excludes).map_err(|e| ArchiveError::InvalidExclude {
        pattern: e.pattern,
        reason: e.reason.to_owned(),
    })
}

/// Writes `dir`'s tree to `out` as a tar stream (see the module doc), minus
/// what `excludes` match.
pub fn export(
    dir: &Path,
    excludes: &[String],
    out: &mut dyn Write,
) -> Result<ExportSummary, ArchiveError> {
    let excludes = parse_excludes(excludes)?;
    let root = open_root(dir)?;
    let root_dev = rfs::fstat(&root)
        .map_err(io_error(format!("stat {}", dir.display())))?
        .st_dev;
    let gate = Gate { out, open: true };
    let mut exporter = Exporter {
        root,
        root_dev,
        excludes,
        builder: tar::Builder::new(io::BufWriter::with_capacity(256 * 1024, gate)),
        summary: ExportSummary::default(),
    };
    let mut path = Vec::with_capacity(256);
    let result = exporter.directory(&mut path).and_then(|()| {
        exporter
            .builder
            .finish()
            .and_then(|()| exporter.builder.get_mut().flush())
            .map_err(|source| ArchiveError::Io {
                context: "write the archive".into(),
                source,
            })
    });
    if result.is_err() {
        // The builder writes the end-of-archive marker when dropped: a
        // failed export must stay visibly cut instead.
        exporter.builder.get_mut().get_mut().open = false;
    }
    result?;
    if exporter.summary.skipped > 0 {
        tracing::debug!(
            skipped = exporter.summary.skipped,
            "export left out special files, other file systems or unreadable entries"
        );
    }
    Ok(exporter.summary)
}

/// The caller's writer, which can be closed so nothing more reaches it.
struct Gate<'a> {
    out: &'a mut dyn Write,
    open: bool,
}

impl Write for Gate<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.open {
            return Err(io::Error::from(io::ErrorKind::BrokenPipe));
        }
        self.out.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.open {
            return Err(io::Error::from(io::ErrorKind::BrokenPipe));
        }
        self.out.flush()
    }
}

/// One entry of a directory being exported.
struct Child {
    name: Vec<u8>,
    stat: rfs::Stat,
    /// A symlink's target, read while its directory was open.
    target: Option<Vec<u8>>,
}

struct Exporter<'a> {
    root: OwnedFd,
    root_dev: u64,
    excludes: ExcludeSet,
    builder: tar::Builder<io::BufWriter<Gate<'a>>>,
    summary: ExportSummary,
}

impl Exporter<'_> {
    /// Exports the directory at `path` (relative to the root) and all below
    /// it. No descriptor is held across the recursion (each entry is opened
    /// from the root), so a deep tree cannot run out of descriptors.
    fn directory(&mut self, path: &mut Vec<u8>) -> Result<(), ArchiveError> {
        let Some(children) = self.list(path) else {
            return Ok(());
        };
        for child in children {
            let len = path.len();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(&child.name);
            let done = self.member(path, child);
            path.truncate(len);
            done?;
        }
        Ok(())
    }

    /// The entries of the directory at `path`, sorted by name; `None` (and
    /// counted as skipped) when it cannot be read.
    fn list(&mut self, path: &[u8]) -> Option<Vec<Child>> {
        let fd = match open_beneath(
            self.root.as_fd(),
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW,
            BENEATH | ResolveFlags::NO_XDEV,
        ) {
            Ok(fd) => fd,
            Err(e) => {
                tracing::debug!(path = %printable(path), error = %e, "export: directory skipped");
                self.summary.skipped += 1;
                return None;
            }
        };
        let dir_fd = match rustix::io::fcntl_dupfd_cloexec(&fd, 0) {
            Ok(dup) => dup,
            Err(_) => {
                self.summary.skipped += 1;
                return None;
            }
        };
        let Ok(mut entries) = rfs::Dir::new(fd) else {
            self.summary.skipped += 1;
            return None;
        };
        let mut children = Vec::new();
        while let Some(entry) = entries.read() {
            let Ok(entry) = entry else {
                self.summary.skipped += 1;
                break;
            };
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            // Gone meanwhile: nothing to export.
            let Ok(stat) = rfs::statat(&dir_fd, name, AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            let target = if FileType::from_raw_mode(stat.st_mode) == FileType::Symlink {
                match rfs::readlinkat(&dir_fd, name, Vec::new()) {
                    Ok(target) => Some(target.into_bytes()),
                    Err(_) => continue,
                }
            } else {
                None
            };
            children.push(Child {
                name: name.to_vec(),
                stat,
                target,
            });
        }
        children.sort_by(|a, b| a.name.cmp(&b.name));
        Some(children)
    }

    fn header(&self, kind: tar::EntryType, stat: &rfs::Stat) -> tar::Header {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(kind);
        header.set_mode(stat.st_mode & 0o7777);
        header.set_mtime(u64::try_from(stat.st_mtime).unwrap_or(0));
        header.set_uid(u64::from(stat.st_uid));
        header.set_gid(u64::from(stat.st_gid));
        header.set_size(0);
        header
    }

    fn member(&mut self, path: &mut Vec<u8>, child: Child) -> Result<(), ArchiveError> {
        let kind = FileType::from_raw_mode(child.stat.st_mode);
        let is_directory = kind == FileType::Directory;
        if self.excludes.matches(path, is_directory) {
            return Ok(());
        }
        if child.stat.st_dev != self.root_dev || path.len() >= PATH_MAX - 1 {
            tracing::debug!(path = %printable(path), "export: another file system or too long a path, skipped");
            self.summary.skipped += 1;
            return Ok(());
        }
        let write_error = |path: &[u8]| {
            let member = printable(path);
            move |source| ArchiveError::Io {
                context: format!("write member {member:?}"),
                source,
            }
        };
        match kind {
            FileType::Directory => {
                if child.name.starts_with(STAGING_PREFIX.as_bytes()) {
                    return Ok(());
                }
                let mut header = self.header(tar::EntryType::Directory, &child.stat);
                let mut name = path.clone();
                name.push(b'/');
                self.builder
                    .append_data(
                        &mut header,
                        Path::new(OsStr::from_bytes(&name)),
                        io::empty(),
                    )
                    .map_err(write_error(path))?;
                self.summary.entries += 1;
                self.directory(path)
            }
            FileType::RegularFile => self.file(path),
            FileType::Symlink => {
                let Some(target) = child.target.as_deref() else {
                    return Ok(());
                };
                let mut header = self.header(tar::EntryType::Symlink, &child.stat);
                self.builder
                    .append_link(
                        &mut header,
                        Path::new(OsStr::from_bytes(path)),
                        Path::new(OsStr::from_bytes(target)),
                    )
                    .map_err(write_error(path))?;
                self.summary.entries += 1;
                Ok(())
            }
            _ => {
                tracing::debug!(path = %printable(path), kind = ?kind, "export: special file skipped");
                self.summary.skipped += 1;
                Ok(())
            }
        }
    }

    fn file(&mut self, path: &[u8]) -> Result<(), ArchiveError> {
        // O_NONBLOCK: should a FIFO have replaced the file since it was
        // listed, opening it does not wait for a writer (and it is then
        // skipped below).
        let fd = match open_beneath(
            self.root.as_fd(),
            path,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY,
            BENEATH | ResolveFlags::NO_XDEV,
        ) {
            Ok(fd) => fd,
            Err(e) => {
                tracing::debug!(path = %printable(path), error = %e, "export: file skipped");
                self.summary.skipped += 1;
                return Ok(());
            }
        };
        let stat = rfs::fstat(&fd).map_err(io_error(format!("stat {:?}", printable(path))))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile
            || stat.st_dev != self.root_dev
        {
            self.summary.skipped += 1;
            return Ok(());
        }
        let size = u64::try_from(stat.st_size).unwrap_or(0);
        let mut header = self.header(tar::EntryType::Regular, &stat);
        header.set_size(size);
        let file = File::from(fd);
        // Exactly `size` bytes, as the header says, whatever a concurrent
        // writer does: a file that grew is cut at its size, one that shrank
        // is padded with zeros (as GNU tar does).
        let data = (&file).take(size).chain(io::repeat(0)).take(size);
        self.builder
            .append_data(&mut header, Path::new(OsStr::from_bytes(path)), data)
            .map_err(|source| ArchiveError::Io {
                context: format!("export {:?}", printable(path)),
                source,
            })?;
        self.summary.entries += 1;
        self.summary.bytes += size;
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Import: reading the stream

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MemberKind {
    File,
    Directory,
    Symlink,
    HardLink,
    /// A device or FIFO, given only to an image layer's reader (which skips
    /// it); a directory import refuses it in [`TarReader::next`].
    Special,
}

/// One member's header, its extensions applied.
struct Member {
    /// As in the archive (for messages and checks).
    raw_path: Vec<u8>,
    link: Option<Vec<u8>>,
    kind: MemberKind,
    size: u64,
    mode: u32,
    mtime: u64,
    /// Numeric owner (an image layer keeps it; a directory import does not).
    uid: u32,
    gid: u32,
}

/// Values of a PAX extended header that the import honours.
#[derive(Default)]
struct Pax {
    path: Option<Vec<u8>>,
    linkpath: Option<Vec<u8>>,
    size: Option<u64>,
    mtime: Option<u64>,
    sparse: bool,
}

/// A tar stream read header by header, with every metadata block bounded.
struct TarReader<'r> {
    input: &'r mut dyn Read,
    offset: u64,
    /// GNU long-name and PAX headers read.
    metadata_headers: u64,
    /// Whether devices and FIFOs come back as [`MemberKind::Special`]
    /// (an image layer's, to be skipped) rather than refused.
    specials: bool,
}

impl<'r> TarReader<'r> {
    fn malformed(&self, reason: impl Into<String>) -> ArchiveError {
        ArchiveError::Malformed {
            offset: self.offset,
            reason: reason.into(),
        }
    }

    /// Fills `buf` from the stream; how many bytes came (short only at its
    /// end).
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize, ArchiveError> {
        let mut filled = 0;
        while filled < buf.len() {
            match self.input.read(&mut buf[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(ArchiveError::Io {
                        context: "read the archive".into(),
                        source,
                    })
                }
            }
        }
        self.offset += filled as u64;
        Ok(filled)
    }

    /// Copies a member's `size` bytes of data (and its padding) to `sink`;
    /// `sink` errors come back as they are, to be given the member's name.
    fn data(
        &mut self,
        size: u64,
        member: &[u8],
        sink: &mut dyn FnMut(&[u8]) -> Result<(), ArchiveError>,
    ) -> Result<(), ArchiveError> {
        let padded = size.div_ceil(BLOCK as u64) * BLOCK as u64;
        let mut buf = vec![0u8; 64 * 1024];
        let mut left = padded;
        let mut content = size;
        while left > 0 {
            let want = usize::try_from(left.min(buf.len() as u64)).unwrap_or(buf.len());
            let got = self.fill(&mut buf[..want])?;
            if got < want {
                return Err(self.malformed(format!(
                    "the stream ends inside member {:?} (cut short?)",
                    printable(member)
                )));
            }
            let keep = usize::try_from(content.min(got as u64)).unwrap_or(got);
            if keep > 0 {
                sink(&buf[..keep])?;
            }
            content -= keep as u64;
            left -= got as u64;
        }
        Ok(())
    }

    /// A bounded metadata block (a long name, PAX records).
    fn small_data(&mut self, size: u64, limit: u64, what: &str) -> Result<Vec<u8>, ArchiveError> {
        if size > limit {
            return Err(ArchiveError::Refused {
                member: format!("({what})"),
                reason: format!("a {what} of {size} bytes (at most {limit})"),
            });
        }
        let mut data = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        self.data(size, what.as_bytes(), &mut |chunk| {
            data.extend_from_slice(chunk);
            Ok(())
        })?;
        Ok(data)
    }

    /// The next member, or `None` at the end-of-archive marker.
    fn next(&mut self, limits: &ImportLimits) -> Result<Option<Member>, ArchiveError> {
        let mut long_name: Option<Vec<u8>> = None;
        let mut long_link: Option<Vec<u8>> = None;
        let mut pax: Option<Pax> = None;
        let mut block = [0u8; BLOCK];
        loop {
            let start = self.offset;
            let got = self.fill(&mut block)?;
            if got == 0 {
                return Err(self.malformed(
                    "the stream ends without tar's end-of-archive marker (cut short?)",
                ));
            }
            if got < BLOCK {
                return Err(self.malformed("the stream ends inside a header (cut short?)"));
            }
            if block.iter().all(|b| *b == 0) {
                if long_name.is_some() || long_link.is_some() || pax.is_some() {
                    return Err(self.malformed("an extension header with no member after it"));
                }
                self.drain_trailer();
                return Ok(None);
            }
            let header = tar::Header::from_byte_slice(&block);
            let sum: u32 = block[..148]
                .iter()
                .chain(&block[156..])
                .map(|b| u32::from(*b))
                .sum::<u32>()
                + 8 * u32::from(b' ');
            if header.cksum().ok() != Some(sum) {
                self.offset = start;
                return Err(if start == 0 && block[..2] == [0x1f, 0x8b] {
                    self.malformed("the stream is gzip-compressed; send an uncompressed tar")
                } else {
                    self.malformed("bad header checksum (not a tar stream?)")
                });
            }
            let size = header
                .entry_size()
                .map_err(|e| self.malformed(format!("bad size field: {e}")))?;
            let type_byte = header.entry_type().as_byte();
            if matches!(type_byte, b'L' | b'K' | b'x' | b'g') {
                // At most three per member (two of a kind are refused), and
                // global headers: bounded by the member count.
                self.metadata_headers += 1;
                if self.metadata_headers > limits.max_entries.saturating_mul(3).saturating_add(16) {
                    return Err(ArchiveError::TooManyEntries {
                        limit: limits.max_entries,
                    });
                }
            }
            match type_byte {
                b'L' | b'K' => {
                    let taken = if type_byte == b'L' {
                        long_name.is_some()
                    } else {
                        long_link.is_some()
                    };
                    if taken {
                        return Err(self.malformed("two GNU long-name headers for one member"));
                    }
                    let mut data = self.small_data(size, PATH_MAX as u64, "GNU long name")?;
                    while data.last() == Some(&0) {
                        data.pop();
                    }
                    if type_byte == b'L' {
                        long_name = Some(data);
                    } else {
                        long_link = Some(data);
                    }
                }
                b'x' => {
                    if pax.is_some() {
                        return Err(self.malformed("two PAX headers for one member"));
                    }
                    let data = self.small_data(size, MAX_PAX_HEADER, "PAX header")?;
                    pax = Some(self.parse_pax(&data)?);
                }
                b'g' => {
                    // Global PAX records (git archive writes its commit id
                    // there): read and ignored.
                    self.small_data(size, MAX_PAX_HEADER, "PAX global header")?;
                }
                _ => {
                    let pax = pax.unwrap_or_default();
                    let raw_path = pax
                        .path
                        .or(long_name)
                        .unwrap_or_else(|| header.path_bytes().into_owned());
                    let link = pax
                        .linkpath
                        .or(long_link)
                        .or_else(|| header.link_name_bytes().map(|l| l.into_owned()));
                    let refuse = |reason: &str| ArchiveError::Refused {
                        member: printable(&raw_path),
                        reason: reason.to_owned(),
                    };
                    let kind = match type_byte {
                        b'0' | b'\0' | b'7' if pax.sparse => {
                            return Err(refuse("a GNU sparse file (PAX GNU.sparse records), which is not supported"));
                        }
                        // An old (v7) archive marks a directory by its
                        // trailing slash.
                        b'\0' if raw_path.ends_with(b"/") => MemberKind::Directory,
                        b'0' | b'\0' | b'7' => MemberKind::File,
                        b'1' => MemberKind::HardLink,
                        b'2' => MemberKind::Symlink,
                        b'5' => MemberKind::Directory,
                        b'3' | b'4' | b'6' if self.specials => MemberKind::Special,
                        b'3' => return Err(refuse("a character device")),
                        b'4' => return Err(refuse("a block device")),
                        b'6' => return Err(refuse("a FIFO (named pipe)")),
                        b'S' => return Err(refuse("a GNU sparse file, which is not supported")),
                        b'V' => return Err(refuse("a GNU volume label, which is not supported")),
                        b'M' => {
                            return Err(refuse(
                                "a GNU multi-volume continuation, which is not supported",
                            ))
                        }
                        b'D' => return Err(refuse("a GNU dump directory, which is not supported")),
                        b'N' => {
                            return Err(refuse(
                                "an old GNU long-name record, which is not supported",
                            ))
                        }
                        other => {
                            return Err(refuse(&format!(
                                "a member of unsupported type {:?}",
                                char::from(other)
                            )))
                        }
                    };
                    let mode = header
                        .mode()
                        .map_err(|e| self.malformed(format!("bad mode field: {e}")))?;
                    let mtime = match pax.mtime {
                        Some(mtime) => mtime,
                        None => header
                            .mtime()
                            .map_err(|e| self.malformed(format!("bad mtime field: {e}")))?,
                    };
                    return Ok(Some(Member {
                        raw_path,
                        link,
                        kind,
                        size: pax.size.unwrap_or(size),
                        mode,
                        mtime,
                        uid: header
                            .uid()
                            .ok()
                            .and_then(|id| u32::try_from(id).ok())
                            .unwrap_or(0),
                        gid: header
                            .gid()
                            .ok()
                            .and_then(|id| u32::try_from(id).ok())
                            .unwrap_or(0),
                    }));
                }
            }
        }
    }

    fn parse_pax(&self, data: &[u8]) -> Result<Pax, ArchiveError> {
        let mut pax = Pax::default();
        for record in tar::PaxExtensions::new(data) {
            let record = record.map_err(|e| self.malformed(format!("bad PAX record: {e}")))?;
            let value = record.value_bytes();
            match record.key_bytes() {
                b"path" => pax.path = Some(value.to_vec()),
                b"linkpath" => pax.linkpath = Some(value.to_vec()),
                b"size" => {
                    let size = std::str::from_utf8(value)
                        .ok()
                        .and_then(|v| v.parse::<u64>().ok())
                        .ok_or_else(|| self.malformed("bad PAX size record"))?;
                    pax.size = Some(size);
                }
                b"mtime" => {
                    // Seconds, maybe with a fraction, maybe negative.
                    let text = std::str::from_utf8(value).unwrap_or("");
                    let whole = text.split('.').next().unwrap_or("");
                    pax.mtime = Some(whole.parse::<i64>().map_or(0, |s| s.max(0) as u64));
                }
                key if key.starts_with(b"GNU.sparse.") => pax.sparse = true,
                _ => {}
            }
        }
        Ok(pax)
    }

    /// Reads what follows the end-of-archive marker, up to a bound, so a
    /// writer that sends the rest of its record is not cut off.
    fn drain_trailer(&mut self) {
        let _ = io::copy(&mut (&mut *self.input).take(MAX_TRAILER), &mut io::sink());
    }
}

// ---------------------------------------------------------------------------
// Import: checks

/// A member's path, normalised (components joined by `/`, no `.` or empty
/// components; empty for `dir` itself), or why it is refused.
fn normalise(raw: &[u8]) -> Result<Vec<u8>, &'static str> {
    if raw.contains(&0) {
        return Err("a NUL byte in the name");
    }
    if raw.len() >= PATH_MAX {
        return Err("a name longer than PATH_MAX (4096 bytes)");
    }
    if raw.starts_with(b"/") {
        return Err("an absolute path");
    }
    let mut out = Vec::with_capacity(raw.len());
    for part in raw.split(|b| *b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => return Err("a '..' component"),
            p if p.len() > NAME_MAX => return Err("a path component longer than 255 bytes"),
            p => {
                if !out.is_empty() {
                    out.push(b'/');
                }
                out.extend_from_slice(p);
            }
        }
    }
    Ok(out)
}

/// `path`'s proper prefixes (`a`, `a/b` of `a/b/c`).
fn parents(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    path.iter()
        .enumerate()
        .filter(|(_, b)| **b == b'/')
        .map(move |(i, _)| &path[..i])
}

/// Checks a symlink member's target: relative, and resolved lexically from
/// the link's directory never above `dir`, nor going up (`..`) from inside
/// another symlink member (`x/y -> ..` then `x/z -> y/..` leaves `dir`
/// although each looks inside).
fn check_symlink(
    path: &[u8],
    target: &[u8],
    members: &HashMap<Vec<u8>, MemberKind>,
) -> Result<(), String> {
    let shown = printable(target);
    if target.is_empty() {
        return Err("an empty symlink target".into());
    }
    if target.contains(&0) {
        return Err("a NUL byte in the symlink target".into());
    }
    if target.len() >= PATH_MAX {
        return Err("a symlink target longer than PATH_MAX (4096 bytes)".into());
    }
    if target.starts_with(b"/") {
        return Err(format!("a symlink to the absolute path {shown:?}"));
    }
    let mut at: Vec<&[u8]> = path.split(|b| *b == b'/').collect();
    at.pop();
    for part in target.split(|b| *b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => {
                if at.is_empty() {
                    return Err(format!(
                        "a symlink to {shown:?}, which leaves the directory"
                    ));
                }
                for depth in 1..=at.len() {
                    let prefix = at[..depth].join(&b'/');
                    if members.get(&prefix) == Some(&MemberKind::Symlink) {
                        return Err(format!(
                            "a symlink to {shown:?}, which goes up through the symlink member {:?}",
                            printable(&prefix)
                        ));
                    }
                }
                at.pop();
            }
            p => at.push(p),
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Import: extraction into the staging directory, then the move into place

/// Reads a tar stream from `input` into `dir` (see the module doc):
/// everything or, on any error, nothing.
pub fn import(
    input: &mut dyn Read,
    dir: &Path,
    limits: &ImportLimits,
) -> Result<ImportSummary, ArchiveError> {
    import_bounded(input, dir, limits, MAX_NAME_BYTES)
}

/// [`import`], with the bound on the names kept given (tests use a small
/// one).
fn import_bounded(
    input: &mut dyn Read,
    dir: &Path,
    limits: &ImportLimits,
    max_name_bytes: usize,
) -> Result<ImportSummary, ArchiveError> {
    let root = open_root(dir)?;
    remove_stale_staging(&root);
    let staging = make_staging(&root)?;
    let result = import_via(
        input,
        &root,
        &staging.dir,
        &staging.name,
        limits,
        max_name_bytes,
    );
    if let Err(e) = remove_tree(root.as_fd(), &staging.name) {
        tracing::warn!(error = %e, dir = %dir.display(), "import: the staging directory was not removed");
    }
    // Only now is the lock released (with `staging`).
    drop(staging);
    result
}

/// An import's staging directory, locked (`flock`) while the import runs.
struct Staging {
    name: Vec<u8>,
    dir: OwnedFd,
    /// Held for the import's life: a staging directory nobody holds locked
    /// is an import's that died (its worker killed at a timeout), removed
    /// by the next import into the same directory.
    _lock: OwnedFd,
}

/// Removes staging directories of imports that died: those whose lock
/// anyone may take. One in use (locked) is left alone.
fn remove_stale_staging(root: &OwnedFd) {
    let Ok(names) = list_names(root) else {
        return;
    };
    for name in names {
        if !name.starts_with(STAGING_PREFIX.as_bytes()) {
            continue;
        }
        let Ok(dir) = open_beneath(
            root.as_fd(),
            &name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW,
            BENEATH,
        ) else {
            continue;
        };
        if rfs::flock(&dir, rfs::FlockOperation::NonBlockingLockExclusive).is_ok() {
            if let Err(e) = remove_tree(root.as_fd(), &name) {
                tracing::warn!(error = %e, "import: a dead import's staging directory was not removed");
            }
        }
    }
}

fn make_staging(root: &OwnedFd) -> Result<Staging, ArchiveError> {
    let mut last = Errno::EXIST;
    for attempt in 0..16u32 {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        hasher.write_u32(attempt);
        if let Ok(now) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            hasher.write_u128(now.as_nanos());
        }
        let name = format!("{STAGING_PREFIX}{:016x}", hasher.finish()).into_bytes();
        match rfs::mkdirat(root, name.as_slice(), Mode::from_raw_mode(0o700)) {
            Ok(()) => {}
            Err(Errno::EXIST) => continue,
            Err(e) if is_quota(e) => {
                return Err(ArchiveError::QuotaExceeded {
                    member: STAGING_PREFIX.into(),
                })
            }
            Err(e) => {
                last = e;
                break;
            }
        }
        let open = |flags| {
            open_beneath(
                root.as_fd(),
                &name,
                flags | OFlags::DIRECTORY | OFlags::NOFOLLOW,
                BENEATH,
            )
            .map_err(io_error("open the staging directory"))
        };
        let lock = open(OFlags::RDONLY)?;
        rfs::flock(&lock, rfs::FlockOperation::LockExclusive)
            .map_err(io_error("lock the staging directory"))?;
        // Another import may have taken it, between the mkdir and the lock,
        // for a dead one's and removed it: then it is not ours any more.
        let ours = rfs::fstat(&lock).map_err(io_error("stat the staging directory"))?;
        let linked = rfs::statat(root, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW);
        if !matches!(linked, Ok(s) if s.st_ino == ours.st_ino && s.st_dev == ours.st_dev) {
            continue;
        }
        return Ok(Staging {
            dir: open(OFlags::PATH)?,
            name,
            _lock: lock,
        });
    }
    Err(io_error("make the staging directory")(last))
}

fn is_quota(e: Errno) -> bool {
    matches!(e, Errno::DQUOT | Errno::NOSPC | Errno::FBIG)
}

fn import_via(
    input: &mut dyn Read,
    root: &OwnedFd,
    staging: &OwnedFd,
    staging_name: &[u8],
    limits: &ImportLimits,
    max_name_bytes: usize,
) -> Result<ImportSummary, ArchiveError> {
    let mut reader = TarReader {
        input,
        offset: 0,
        metadata_headers: 0,
        specials: false,
    };
    let mut extractor = Extractor {
        staging,
        limits,
        members: HashMap::new(),
        symlinks: Vec::new(),
        directories: HashMap::new(),
        parent: None,
        summary: ImportSummary::default(),
        seen: 0,
        name_bytes: 0,
        max_name_bytes,
    };
    while let Some(member) = reader.next(limits)? {
        extractor.member(member, &mut reader)?;
    }
    // A symlink checked on arrival may be undone by one that came later.
    for (path, target) in &extractor.symlinks {
        check_symlink(path, target, &extractor.members).map_err(|reason| {
            ArchiveError::Refused {
                member: printable(path),
                reason,
            }
        })?;
    }
    let staging_dev = rfs::fstat(staging)
        .map_err(io_error("stat the staging directory"))?
        .st_dev;
    let mut path = Vec::new();
    merge(staging, root, staging_name, staging_dev, &mut path, false)?;
    merge(staging, root, staging_name, staging_dev, &mut path, true)?;
    let mut directories: Vec<_> = extractor.directories.into_iter().collect();
    // Children before parents: setting a child's metadata touches nothing
    // of its parent, and a parent made read-only last blocks nothing.
    directories.sort_by(|a, b| b.0.cmp(&a.0));
    for (path, (mode, mtime)) in directories {
        if let Err(e) = set_directory_metadata(root, &path, mode, mtime) {
            tracing::warn!(path = %printable(&path), error = %e, "import: a directory's mode or mtime was not set");
        }
    }
    Ok(extractor.summary)
}

/// The timestamps to set: the archive's mtime, the access time untouched.
fn times(mtime: u64) -> rfs::Timestamps {
    // Year 9999 at most: file systems refuse or clamp beyond their range.
    let seconds = mtime.min(253_402_300_799) as i64;
    rfs::Timestamps {
        last_access: rfs::Timespec {
            tv_sec: 0,
            tv_nsec: rfs::UTIME_OMIT,
        },
        last_modification: rfs::Timespec {
            tv_sec: seconds,
            tv_nsec: 0,
        },
    }
}

fn set_directory_metadata(root: &OwnedFd, path: &[u8], mode: u32, mtime: u64) -> Result<(), Errno> {
    let fd = open_beneath(
        root.as_fd(),
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW,
        BENEATH,
    )?;
    rfs::fchmod(&fd, Mode::from_raw_mode(mode & 0o777))?;
    rfs::futimens(&fd, &times(mtime))
}

struct Extractor<'a> {
    staging: &'a OwnedFd,
    limits: &'a ImportLimits,
    /// Every member so far by normalised path (a hard link is a file).
    members: HashMap<Vec<u8>, MemberKind>,
    symlinks: Vec<(Vec<u8>, Vec<u8>)>,
    /// Directory members' mode and mtime, set once all is in place.
    directories: HashMap<Vec<u8>, (u32, u64)>,
    /// The last parent directory opened in the staging tree.
    parent: Option<(Vec<u8>, OwnedFd)>,
    summary: ImportSummary,
    /// Members read (the root's included).
    seen: u64,
    /// Bytes of names kept, and their bound (see [`MAX_NAME_BYTES`]).
    name_bytes: usize,
    max_name_bytes: usize,
}

impl Extractor<'_> {
    fn member(&mut self, member: Member, reader: &mut TarReader<'_>) -> Result<(), ArchiveError> {
        let shown = printable(&member.raw_path);
        let refuse = |reason: String| ArchiveError::Refused {
            member: shown.clone(),
            reason,
        };
        self.seen += 1;
        if self.seen > self.limits.max_entries {
            return Err(ArchiveError::TooManyEntries {
                limit: self.limits.max_entries,
            });
        }
        if member.size > self.limits.max_bytes.saturating_sub(self.summary.bytes) {
            return Err(ArchiveError::TooLarge {
                member: shown,
                limit: self.limits.max_bytes,
            });
        }
        let path = normalise(&member.raw_path).map_err(|r| refuse(r.to_owned()))?;
        if path.is_empty() {
            // `./`: the directory itself, whose metadata is the caller's.
            if member.kind != MemberKind::Directory {
                return Err(refuse("the archive's root must be a directory".into()));
            }
            return reader.data(member.size, &member.raw_path, &mut |_| Ok(()));
        }
        if path
            .split(|b| *b == b'/')
            .any(|part| part.starts_with(STAGING_PREFIX.as_bytes()))
        {
            // An import would take such a directory for a dead import's
            // staging directory, and remove it.
            return Err(refuse(format!(
                "names starting with {STAGING_PREFIX:?} are reserved for imports in progress"
            )));
        }
        for parent in parents(&path) {
            match self.members.get(parent) {
                Some(MemberKind::Symlink) => {
                    return Err(refuse(format!(
                        "its path runs through the symlink member {:?}",
                        printable(parent)
                    )))
                }
                Some(MemberKind::File | MemberKind::HardLink) => {
                    return Err(refuse(format!(
                        "its path runs through the file member {:?}",
                        printable(parent)
                    )))
                }
                _ => {}
            }
        }
        self.name_bytes += path.len() + member.link.as_ref().map_or(0, Vec::len);
        if self.name_bytes > self.max_name_bytes {
            return Err(refuse(format!(
                "the archive's member names exceed {} bytes together",
                self.max_name_bytes
            )));
        }
        let link = match member.kind {
            MemberKind::Symlink | MemberKind::HardLink => {
                let link = member.link.clone().unwrap_or_default();
                if link.is_empty() {
                    return Err(refuse("a link with no target".into()));
                }
                link
            }
            _ => Vec::new(),
        };
        match member.kind {
            MemberKind::Symlink => {
                check_symlink(&path, &link, &self.members).map_err(refuse)?;
            }
            MemberKind::HardLink => {
                let target = normalise(&link)
                    .map_err(|r| refuse(format!("a hard link to {:?}: {r}", printable(&link))))?;
                if target == path {
                    return Err(refuse("a hard link to itself".into()));
                }
                if !matches!(
                    self.members.get(&target),
                    Some(MemberKind::File | MemberKind::HardLink)
                ) {
                    return Err(refuse(format!(
                        "a hard link to {:?}, which is not an earlier file member of the archive",
                        printable(&link)
                    )));
                }
            }
            _ => {}
        }
        let (parent_path, name) = match path.iter().rposition(|b| *b == b'/') {
            Some(i) => (&path[..i], &path[i + 1..]),
            None => (&b""[..], &path[..]),
        };
        let parent = self.parent(parent_path, &shown)?;
        let quota_or = |context: &str| {
            let member = shown.clone();
            let context = format!("{context} {member:?}");
            move |e: Errno| {
                if is_quota(e) {
                    ArchiveError::QuotaExceeded { member }
                } else {
                    ArchiveError::Io {
                        context,
                        source: e.into(),
                    }
                }
            }
        };
        match member.kind {
            // `TarReader::next` refuses them for a directory import.
            MemberKind::Special => return Err(refuse("a device or FIFO".into())),
            MemberKind::File => {
                let fd = create_in(&parent, name, member.kind, &shown, |p, n| {
                    rfs::openat(
                        p,
                        n,
                        OFlags::WRONLY
                            | OFlags::CREATE
                            | OFlags::EXCL
                            | OFlags::NOFOLLOW
                            | OFlags::CLOEXEC,
                        Mode::from_raw_mode(0o600),
                    )
                })
                .map_err(|e| e.or_else(quota_or("create")))?;
                let mut file = File::from(fd);
                let writing = shown.clone();
                reader.data(member.size, &member.raw_path, &mut |chunk| {
                    file.write_all(chunk).map_err(|e| match e.raw_os_error() {
                        Some(code) if is_quota(Errno::from_raw_os_error(code)) => {
                            ArchiveError::QuotaExceeded {
                                member: writing.clone(),
                            }
                        }
                        _ => ArchiveError::Io {
                            context: format!("write {writing:?}"),
                            source: e,
                        },
                    })
                })?;
                rfs::fchmod(&file, Mode::from_raw_mode(member.mode & 0o777))
                    .map_err(quota_or("chmod"))?;
                rfs::futimens(&file, &times(member.mtime)).map_err(quota_or("set the mtime of"))?;
                self.summary.bytes += member.size;
            }
            MemberKind::Directory => {
                match rfs::mkdirat(&parent, name, Mode::from_raw_mode(0o700)) {
                    Ok(()) => {}
                    Err(Errno::EXIST) => {
                        let stat = rfs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW)
                            .map_err(quota_or("stat"))?;
                        if FileType::from_raw_mode(stat.st_mode) != FileType::Directory {
                            return Err(refuse(
                                "a directory where an earlier member of another type has the same path"
                                    .into(),
                            ));
                        }
                    }
                    Err(e) => return Err(quota_or("make the directory")(e)),
                }
                reader.data(member.size, &member.raw_path, &mut |_| Ok(()))?;
                self.directories
                    .insert(path.clone(), (member.mode, member.mtime));
            }
            MemberKind::Symlink => {
                create_in(&parent, name, member.kind, &shown, |p, n| {
                    rfs::symlinkat(link.as_slice(), p, n)
                })
                .map_err(|e| e.or_else(quota_or("make the symlink")))?;
                rfs::utimensat(
                    &parent,
                    name,
                    &times(member.mtime),
                    AtFlags::SYMLINK_NOFOLLOW,
                )
                .map_err(quota_or("set the mtime of"))?;
                reader.data(member.size, &member.raw_path, &mut |_| Ok(()))?;
                self.symlinks.push((path.clone(), link));
            }
            MemberKind::HardLink => {
                let target = normalise(&link).map_err(|r| refuse(r.to_owned()))?;
                let (target_parent, target_name) = match target.iter().rposition(|b| *b == b'/') {
                    Some(i) => (&target[..i], &target[i + 1..]),
                    None => (&b""[..], &target[..]),
                };
                let target_dir = open_beneath(
                    self.staging.as_fd(),
                    target_parent,
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW,
                    BENEATH,
                )
                .map_err(quota_or("open the directory of the link target of"))?;
                create_in(&parent, name, member.kind, &shown, |p, n| {
                    rfs::linkat(&target_dir, target_name, p, n, AtFlags::empty())
                })
                .map_err(|e| e.or_else(quota_or("make the hard link")))?;
                reader.data(member.size, &member.raw_path, &mut |_| Ok(()))?;
                self.summary.bytes += member.size;
            }
        }
        self.members.insert(path, member.kind);
        self.summary.entries += 1;
        Ok(())
    }

    /// The staging directory's subdirectory at `path`, made (with its
    /// parents) if missing; never through a link.
    fn parent(&mut self, path: &[u8], shown: &str) -> Result<OwnedFd, ArchiveError> {
        if let Some((cached, fd)) = &self.parent {
            if cached == path {
                return rustix::io::fcntl_dupfd_cloexec(fd, 0).map_err(io_error("dup"));
            }
        }
        let through_link = |parent: &[u8]| ArchiveError::Refused {
            member: shown.to_owned(),
            reason: format!(
                "its path runs through {:?}, which is not a directory",
                printable(parent)
            ),
        };
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW;
        let fd = match open_beneath(self.staging.as_fd(), path, flags, BENEATH) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => {
                let mut dir = open_beneath(self.staging.as_fd(), b"", flags, BENEATH)
                    .map_err(io_error("open the staging directory"))?;
                for part in path.split(|b| *b == b'/') {
                    match rfs::mkdirat(&dir, part, Mode::from_raw_mode(0o755)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) if is_quota(e) => {
                            return Err(ArchiveError::QuotaExceeded {
                                member: shown.to_owned(),
                            })
                        }
                        Err(e) => {
                            return Err(io_error(format!("make a directory for {shown:?}"))(e))
                        }
                    }
                    dir = open_beneath(dir.as_fd(), part, flags, BENEATH)
                        .map_err(|_| through_link(path))?;
                }
                dir
            }
            Err(Errno::LOOP | Errno::NOTDIR | Errno::XDEV) => return Err(through_link(path)),
            Err(e) => return Err(io_error(format!("open the directory of {shown:?}"))(e)),
        };
        let dup = rustix::io::fcntl_dupfd_cloexec(&fd, 0).map_err(io_error("dup"))?;
        self.parent = Some((path.to_vec(), dup));
        Ok(fd)
    }
}

/// Runs `make` (which creates `name` in `parent`); when the name is taken
/// by an earlier member of the same kind (a duplicate: the later one wins,
/// as in tar), removes that one and tries once more. `Ok(Err(errno))` is a
/// system error for the caller to name; `Err` a refusal.
fn create_in<T>(
    parent: &OwnedFd,
    name: &[u8],
    kind: MemberKind,
    shown: &str,
    mut make: impl FnMut(BorrowedFd<'_>, &[u8]) -> Result<T, Errno>,
) -> Result<T, MakeError> {
    match make(parent.as_fd(), name) {
        Err(Errno::EXIST) => {}
        other => return other.map_err(MakeError::System),
    }
    let stat = rfs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW).map_err(MakeError::System)?;
    let existing = FileType::from_raw_mode(stat.st_mode);
    let same = match kind {
        MemberKind::File | MemberKind::HardLink => existing == FileType::RegularFile,
        MemberKind::Symlink => existing == FileType::Symlink,
        MemberKind::Directory | MemberKind::Special => false,
    };
    if !same {
        return Err(MakeError::Refused(ArchiveError::Refused {
            member: shown.to_owned(),
            reason: "an earlier member of another type has the same path".into(),
        }));
    }
    rfs::unlinkat(parent, name, AtFlags::empty()).map_err(MakeError::System)?;
    make(parent.as_fd(), name).map_err(MakeError::System)
}

enum MakeError {
    System(Errno),
    Refused(ArchiveError),
}

impl MakeError {
    fn or_else(self, name: impl FnOnce(Errno) -> ArchiveError) -> ArchiveError {
        match self {
            Self::System(e) => name(e),
            Self::Refused(e) => e,
        }
    }
}

/// Moves the staging tree's entries at `path` into the same place below
/// `root` (`apply`), or only checks that they can be (`!apply`: the first
/// pass, so a conflict refuses the import before anything moved).
///
/// A staged directory where `root` has none is moved whole; where `root`
/// has one, their contents are merged. No descriptor is held across the
/// recursion.
fn merge(
    staging: &OwnedFd,
    root: &OwnedFd,
    staging_name: &[u8],
    staging_dev: u64,
    path: &mut Vec<u8>,
    apply: bool,
) -> Result<(), ArchiveError> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW;
    let from = open_beneath(staging.as_fd(), path, flags, BENEATH)
        .map_err(io_error("open the staging directory"))?;
    let to =
        open_beneath(root.as_fd(), path, flags, BENEATH).map_err(|e| ArchiveError::Conflict {
            member: printable(path),
            reason: format!("the directory changed during the import ({e})"),
        })?;
    if !apply {
        let stat = rfs::fstat(&to).map_err(io_error("stat"))?;
        if stat.st_dev != staging_dev {
            return Err(ArchiveError::Conflict {
                member: printable(path),
                reason: "a mount point (another file system) in the directory".into(),
            });
        }
        if rfs::accessat(
            &to,
            ".",
            rfs::Access::WRITE_OK | rfs::Access::EXEC_OK,
            AtFlags::EACCESS,
        )
        .is_err()
        {
            return Err(ArchiveError::Conflict {
                member: printable(path),
                reason: "a directory the import may not write to".into(),
            });
        }
    }
    let mut names = list_names(&from)?;
    names.sort();
    let mut both_directories = Vec::new();
    for name in names {
        let member = || {
            let mut member = path.clone();
            if !member.is_empty() {
                member.push(b'/');
            }
            member.extend_from_slice(&name);
            printable(&member)
        };
        if path.is_empty() && name == staging_name {
            return Err(ArchiveError::Conflict {
                member: member(),
                reason: "the name of the import's staging directory".into(),
            });
        }
        let staged = rfs::statat(&from, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW)
            .map_err(io_error("stat a staged entry"))?;
        let staged_is_directory = FileType::from_raw_mode(staged.st_mode) == FileType::Directory;
        let existing = match rfs::statat(&to, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Some(FileType::from_raw_mode(stat.st_mode)),
            Err(Errno::NOENT) => None,
            Err(e) => return Err(io_error(format!("stat {:?}", member()))(e)),
        };
        match (staged_is_directory, existing) {
            (true, Some(FileType::Directory)) => both_directories.push(name),
            (false, Some(FileType::Directory)) => {
                return Err(ArchiveError::Conflict {
                    member: member(),
                    reason: "the directory holds a directory there and the archive a \
                             non-directory (an import never removes a directory)"
                        .into(),
                })
            }
            _ if !apply => {}
            (true, Some(_)) => {
                // A file or symlink where the archive has a directory: the
                // archive's wins. Swapped in one step (the old entry, a link
                // never followed, goes into the staging tree and is removed
                // with it).
                match rfs::renameat_with(
                    &from,
                    name.as_slice(),
                    &to,
                    name.as_slice(),
                    rfs::RenameFlags::EXCHANGE,
                ) {
                    Ok(()) => {}
                    // A file system without RENAME_EXCHANGE: in two steps.
                    Err(Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => {
                        rfs::unlinkat(&to, name.as_slice(), AtFlags::empty())
                            .map_err(io_error(format!("remove {:?}", member())))?;
                        rfs::renameat(&from, name.as_slice(), &to, name.as_slice())
                            .map_err(io_error(format!("move {:?} into place", member())))?;
                    }
                    Err(e) => return Err(io_error(format!("move {:?} into place", member()))(e)),
                }
            }
            _ => rfs::renameat(&from, name.as_slice(), &to, name.as_slice())
                .map_err(io_error(format!("move {:?} into place", member())))?,
        }
    }
    drop((from, to));
    for name in both_directories {
        let len = path.len();
        if !path.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(&name);
        let done = merge(staging, root, staging_name, staging_dev, path, apply);
        path.truncate(len);
        done?;
    }
    Ok(())
}

/// The names in a directory (`.` and `..` left out).
fn list_names(dir: &OwnedFd) -> Result<Vec<Vec<u8>>, ArchiveError> {
    let readable = open_beneath(
        dir.as_fd(),
        b"",
        OFlags::RDONLY | OFlags::DIRECTORY,
        BENEATH,
    )
    .map_err(io_error("open a directory to list it"))?;
    let mut entries = rfs::Dir::new(readable).map_err(io_error("list a directory"))?;
    let mut names = Vec::new();
    while let Some(entry) = entries.read() {
        let entry = entry.map_err(io_error("list a directory"))?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(name.to_vec());
        }
    }
    Ok(names)
}

/// Removes `name` (in `base`) and all below it, never following a link.
pub(crate) fn remove_tree(base: BorrowedFd<'_>, name: &[u8]) -> Result<(), ArchiveError> {
    match rfs::unlinkat(base, name, AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => return Ok(()),
        Err(Errno::ISDIR) => {}
        Err(e) => return Err(io_error("remove a staged entry")(e)),
    }
    let mut path = name.to_vec();
    clear_tree(base, &mut path)?;
    rfs::unlinkat(base, name, AtFlags::REMOVEDIR).map_err(io_error("remove a staged directory"))
}

/// Empties the directory at `path` (below `base`); no descriptor is held
/// across the recursion, so a deep tree cannot run out of them.
pub(crate) fn clear_tree(base: BorrowedFd<'_>, path: &mut Vec<u8>) -> Result<(), ArchiveError> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW;
    let open = |path: &[u8]| {
        open_beneath(base, path, flags, BENEATH).map_err(io_error("open a staged directory"))
    };
    let dir = open(path)?;
    let mut subdirectories = Vec::new();
    for entry in list_names(&dir)? {
        match rfs::unlinkat(&dir, entry.as_slice(), AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(Errno::ISDIR) => subdirectories.push(entry),
            Err(e) => return Err(io_error("remove a staged entry")(e)),
        }
    }
    drop(dir);
    for entry in &subdirectories {
        let len = path.len();
        path.push(b'/');
        path.extend_from_slice(entry);
        let done = clear_tree(base, path);
        path.truncate(len);
        done?;
    }
    if !subdirectories.is_empty() {
        let dir = open(path)?;
        for entry in &subdirectories {
            rfs::unlinkat(&dir, entry.as_slice(), AtFlags::REMOVEDIR)
                .map_err(io_error("remove a staged directory"))?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Image layers: the same bounded reader, for `image::oci`

/// What a layer member is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LayerKind {
    File,
    Directory,
    Symlink,
    HardLink,
    /// A device or FIFO: never made in an image.
    Special,
}

/// One member of an image layer: its path normalised (refused if absolute
/// or with a `..`), the rest as the header says.
pub(crate) struct LayerMember {
    pub path: Vec<u8>,
    pub link: Option<Vec<u8>>,
    pub kind: LayerKind,
    pub size: u64,
    pub mode: u32,
    pub mtime: u64,
    pub uid: u32,
    pub gid: u32,
}

/// An image layer's tar stream, read member by member with the bounds of a
/// directory import (metadata headers, names), devices and FIFOs given
/// back for the caller to skip.
pub(crate) struct LayerReader<'r> {
    reader: TarReader<'r>,
}

impl<'r> LayerReader<'r> {
    pub(crate) fn new(input: &'r mut dyn Read) -> Self {
        Self {
            reader: TarReader {
                input,
                offset: 0,
                metadata_headers: 0,
                specials: true,
            },
        }
    }

    /// The next member (its data still to be read with [`Self::data`]), or
    /// `None` at the end-of-archive marker.
    pub(crate) fn next(
        &mut self,
        limits: &ImportLimits,
    ) -> Result<Option<LayerMember>, ArchiveError> {
        let Some(member) = self.reader.next(limits)? else {
            return Ok(None);
        };
        let path = normalise(&member.raw_path).map_err(|reason| ArchiveError::Refused {
            member: printable(&member.raw_path),
            reason: reason.to_owned(),
        })?;
        let kind = match member.kind {
            MemberKind::File => LayerKind::File,
            MemberKind::Directory => LayerKind::Directory,
            MemberKind::Symlink => LayerKind::Symlink,
            MemberKind::HardLink => LayerKind::HardLink,
            MemberKind::Special => LayerKind::Special,
        };
        Ok(Some(LayerMember {
            path,
            link: member.link,
            kind,
            size: member.size,
            mode: member.mode,
            mtime: member.mtime,
            uid: member.uid,
            gid: member.gid,
        }))
    }

    /// Passes a member's `size` bytes of data to `sink` (and skips its
    /// padding); every member's data must be read or skipped this way.
    pub(crate) fn data(
        &mut self,
        size: u64,
        member: &[u8],
        sink: &mut dyn FnMut(&[u8]) -> Result<(), ArchiveError>,
    ) -> Result<(), ArchiveError> {
        self.reader.data(size, member, sink)
    }
}

/// A layer member's path normalised as a directory import's are.
pub(crate) fn normalise_member(raw: &[u8]) -> Result<Vec<u8>, ArchiveError> {
    normalise(raw).map_err(|reason| ArchiveError::Refused {
        member: printable(raw),
        reason: reason.to_owned(),
    })
}

/// [`printable`], for the image layer code's messages.
pub(crate) fn shown(path: &[u8]) -> String {
    printable(path)
}

#[cfg(test)]
mod tests;
