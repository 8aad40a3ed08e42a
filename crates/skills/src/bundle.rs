//! A skill bundle: one top-level folder holding `SKILL.md` and whatever
//! else the skill needs, read from a zip or from a directory upload, and
//! checked before anything is written anywhere.
//!
//! Everything here is untrusted input. Refused, each with a reason: paths
//! that are absolute, climb (`..`), hold a backslash, NUL or control
//! characters, or are too deep or long; duplicate paths (compared
//! ignoring case and Unicode normalisation, and counted in the zip's own
//! central directory, where a repeated name would otherwise hide the
//! earlier entry); symbolic links,
//! devices, FIFOs and sockets; encrypted entries and compression methods
//! other than stored and deflate; more than [`Limits::max_files`] files;
//! a file, or the whole, larger than the limits once decompressed (sizes
//! are enforced while decompressing: a header that lies gains nothing) or
//! compressed more than [`Limits::max_ratio`] to one; zips nested inside
//! the bundle more than [`Limits::max_nesting`] deep (they are never
//! unpacked, but a recursive zip is a bomb for whatever opens it later);
//! and a missing or malformed `SKILL.md`.
//!
//! Reading nested zips to measure their depth is work an uploader chooses:
//! every level gets the same per-file, ratio and method checks as the
//! bundle itself, and one budget bounds the whole upload: the bytes
//! decompressed at every level together ([`Limits::max_inflated_bytes`])
//! and the wall-clock time ([`Limits::max_read_time`]). A zip of zips of
//! zeros costs at most that budget, whatever its shape.

use std::collections::BTreeMap;
use std::io::{Cursor, Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::manifest::{self, Manifest, ManifestError};

/// What a bundle may hold.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Files (directories do not count).
    pub max_files: usize,
    /// One file, decompressed.
    pub max_file_bytes: u64,
    /// Every file together, decompressed.
    pub max_total_bytes: u64,
    /// Decompressed to compressed size, for entries above 1 MiB.
    pub max_ratio: u64,
    /// Folders below the top-level one.
    pub max_depth: usize,
    /// Zips inside zips inside the bundle.
    pub max_nesting: usize,
    /// Bytes decompressed to read the bundle, at every level of nesting
    /// together (the bundle's own files count too).
    pub max_inflated_bytes: u64,
    /// Wall-clock time reading one bundle may take.
    pub max_read_time: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_files: 500,
            max_file_bytes: 25 << 20,
            max_total_bytes: 100 << 20,
            max_ratio: 200,
            max_depth: 16,
            max_nesting: 2,
            max_inflated_bytes: 200 << 20,
            max_read_time: Duration::from_secs(20),
        }
    }
}

/// One file of a bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleFile {
    /// Below the top-level folder, `/`-separated, checked.
    pub path: String,
    pub bytes: Vec<u8>,
    /// Whether it was marked executable (scripts keep their mode).
    pub executable: bool,
}

/// A checked bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bundle {
    pub manifest: Manifest,
    /// The top-level folder's name, as uploaded.
    pub folder: String,
    /// Sorted by path; `SKILL.md` among them.
    pub files: Vec<BundleFile>,
}

/// Why a bundle was refused (the message is for the uploader).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    #[error("not a valid zip archive: {0}")]
    NotZip(String),
    #[error("{path:?}: {reason}")]
    BadPath { path: String, reason: &'static str },
    #[error("{0:?} is in the bundle twice (paths are compared ignoring case)")]
    Duplicate(String),
    #[error("{path:?} is {kind}; a skill holds regular files and folders only")]
    NotRegular { path: String, kind: &'static str },
    #[error("{0:?} is encrypted")]
    Encrypted(String),
    #[error("{path:?} uses compression method {method}; only stored and deflate are accepted")]
    Compression { path: String, method: String },
    #[error("{count} files; a skill holds at most {limit}")]
    TooManyFiles { count: usize, limit: usize },
    #[error("{path:?} is larger than {limit} bytes once decompressed")]
    FileTooLarge { path: String, limit: u64 },
    #[error("the files are larger than {limit} bytes together once decompressed")]
    TooLarge { limit: u64 },
    #[error("{path:?} is compressed more than {limit} to 1 (a zip bomb?)")]
    Ratio { path: String, limit: u64 },
    #[error("{path:?} holds zips nested more than {limit} deep")]
    Nesting { path: String, limit: usize },
    #[error("reading the bundle and the zips inside it would decompress more than {limit} bytes")]
    TooMuchWork { limit: u64 },
    #[error("reading the bundle took longer than {seconds} s")]
    TooSlow { seconds: u64 },
    #[error("{path:?} does not match its declared size or checksum")]
    Corrupt { path: String },
    #[error("the bundle must hold one top-level folder (e.g. my-skill/SKILL.md); found {0}")]
    Layout(String),
    #[error("the bundle has no {0}/SKILL.md")]
    NoManifest(String),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error("the bundle is empty")]
    Empty,
}

/// Splits and checks a path from an archive or an upload.
fn components(path: &str, limits: &Limits) -> Result<Vec<String>, BundleError> {
    let bad = |reason| BundleError::BadPath {
        path: path.to_owned(),
        reason,
    };
    if path.starts_with('/') {
        return Err(bad("absolute paths are not allowed"));
    }
    if path.contains('\\') {
        return Err(bad("backslashes are not allowed in paths"));
    }
    if path.chars().any(|c| c.is_control()) {
        return Err(bad("control characters are not allowed in paths"));
    }
    if path.len() > 1024 {
        return Err(bad("the path is longer than 1024 bytes"));
    }
    let parts: Vec<String> = path
        .trim_end_matches('/')
        .split('/')
        .map(str::to_owned)
        .collect();
    for part in &parts {
        match part.as_str() {
            "" => return Err(bad("empty path components are not allowed")),
            "." | ".." => return Err(bad("`.` and `..` are not allowed in paths")),
            p if p.len() > 255 => return Err(bad("a path component is longer than 255 bytes")),
            _ => {}
        }
    }
    if parts.len() > limits.max_depth + 2 {
        return Err(bad("the path is nested too deep"));
    }
    Ok(parts)
}

/// What reading one bundle has cost, at every level of nesting together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkDone {
    /// Bytes decompressed: the bundle's entries and those of the zips in it.
    pub inflated_bytes: u64,
    /// Nested zips opened to measure how deep they go.
    pub nested_zips: u64,
}

/// The work one upload may still cost: bytes decompressed and time, shared
/// by the bundle and every zip inside it.
struct Budget<'a> {
    limits: &'a Limits,
    started: Instant,
    done: WorkDone,
}

/// How much is decompressed between two looks at the budget.
const INFLATE_CHUNK: usize = 64 * 1024;

impl<'a> Budget<'a> {
    fn new(limits: &'a Limits) -> Self {
        Self {
            limits,
            started: Instant::now(),
            done: WorkDone::default(),
        }
    }

    fn check_time(&self) -> Result<(), BundleError> {
        if self.started.elapsed() > self.limits.max_read_time {
            return Err(BundleError::TooSlow {
                seconds: self.limits.max_read_time.as_secs(),
            });
        }
        Ok(())
    }

    /// Decompresses at most `cap + 1` bytes from `reader`, each chunk
    /// charged to the budget; `None` if the data is corrupt (the zip crate
    /// checks each entry's CRC-32 at its end).
    fn inflate(&mut self, reader: impl Read, cap: u64) -> Result<Option<Vec<u8>>, BundleError> {
        let mut reader = reader.take(cap + 1);
        let mut data = Vec::new();
        let mut chunk = vec![0u8; INFLATE_CHUNK];
        loop {
            let n = match reader.read(&mut chunk) {
                Ok(0) => return Ok(Some(data)),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return Ok(None),
            };
            self.done.inflated_bytes += n as u64;
            if self.done.inflated_bytes > self.limits.max_inflated_bytes {
                return Err(BundleError::TooMuchWork {
                    limit: self.limits.max_inflated_bytes,
                });
            }
            self.check_time()?;
            data.extend_from_slice(&chunk[..n]);
        }
    }
}

/// The checks every entry gets before it is decompressed, at any level:
/// a method we can read, not encrypted, its declared size within the
/// per-file cap and its declared ratio within [`Limits::max_ratio`].
fn check_entry_header<R: Read>(
    entry: &zip::read::ZipFile<'_, R>,
    path: &str,
    limits: &Limits,
) -> Result<(), BundleError> {
    if entry.encrypted() {
        return Err(BundleError::Encrypted(path.to_owned()));
    }
    let method = entry.compression();
    if !matches!(
        method,
        zip::CompressionMethod::Stored | zip::CompressionMethod::Deflated
    ) {
        return Err(BundleError::Compression {
            path: path.to_owned(),
            method: format!("{method:?}"),
        });
    }
    check_size(entry.size(), entry.compressed_size(), path, limits)
}

/// A file's size (declared, or found while decompressing) against the
/// per-file cap and the ratio cap.
fn check_size(size: u64, compressed: u64, path: &str, limits: &Limits) -> Result<(), BundleError> {
    if size > limits.max_file_bytes {
        return Err(BundleError::FileTooLarge {
            path: path.to_owned(),
            limit: limits.max_file_bytes,
        });
    }
    if size > 1 << 20 && size / compressed.max(1) > limits.max_ratio {
        return Err(BundleError::Ratio {
            path: path.to_owned(),
            limit: limits.max_ratio,
        });
    }
    Ok(())
}

/// The key two paths collide under: the same letters ignoring case and
/// Unicode normalisation (a bundle unpacked on a case-insensitive or
/// normalisation-insensitive file system, as on macOS or Windows, would
/// otherwise lose one of them; `café` in NFC and NFD look the same).
fn folded(parts: &[String]) -> Vec<String> {
    parts.iter().map(|part| fold_name(part)).collect()
}

/// One name as [`folded`] compares it: NFC, then lowercase.
fn fold_name(name: &str) -> String {
    use unicode_normalization::UnicodeNormalization;
    name.nfc().collect::<String>().to_lowercase()
}

/// Gathers files (path → bytes) into a bundle.
struct Gatherer<'a> {
    limits: &'a Limits,
    budget: Budget<'a>,
    files: BTreeMap<Vec<String>, (Vec<u8>, bool)>,
    /// The same paths, case-folded (see [`folded`]).
    folded: std::collections::BTreeSet<Vec<String>>,
    total: u64,
}

impl<'a> Gatherer<'a> {
    fn new(limits: &'a Limits) -> Self {
        Self {
            limits,
            budget: Budget::new(limits),
            files: BTreeMap::new(),
            folded: Default::default(),
            total: 0,
        }
    }

    fn add(&mut self, path: &str, bytes: Vec<u8>, executable: bool) -> Result<(), BundleError> {
        let parts = components(path, self.limits)?;
        if self.files.len() >= self.limits.max_files {
            return Err(BundleError::TooManyFiles {
                count: self.files.len() + 1,
                limit: self.limits.max_files,
            });
        }
        if bytes.len() as u64 > self.limits.max_file_bytes {
            return Err(BundleError::FileTooLarge {
                path: path.to_owned(),
                limit: self.limits.max_file_bytes,
            });
        }
        self.total += bytes.len() as u64;
        if self.total > self.limits.max_total_bytes {
            return Err(BundleError::TooLarge {
                limit: self.limits.max_total_bytes,
            });
        }
        if !self.folded.insert(folded(&parts)) {
            return Err(BundleError::Duplicate(path.to_owned()));
        }
        if path.to_ascii_lowercase().ends_with(".zip") {
            let depth = nesting(&mut self.budget, &bytes, path, self.limits.max_nesting + 1)?;
            if depth > self.limits.max_nesting {
                return Err(BundleError::Nesting {
                    path: path.to_owned(),
                    limit: self.limits.max_nesting,
                });
            }
        }
        if self.files.insert(parts, (bytes, executable)).is_some() {
            return Err(BundleError::Duplicate(path.to_owned()));
        }
        Ok(())
    }

    fn finish(self) -> Result<Bundle, BundleError> {
        let mut folders: Vec<&String> = self.files.keys().map(|parts| &parts[0]).collect();
        folders.dedup();
        let folder = match folders.as_slice() {
            [] => return Err(BundleError::Empty),
            [one] => (*one).clone(),
            many => {
                return Err(BundleError::Layout(format!(
                    "{} top-level entries ({})",
                    many.len(),
                    many.iter()
                        .take(3)
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )))
            }
        };
        if self.files.keys().any(|parts| parts.len() < 2) {
            return Err(BundleError::Layout(format!(
                "a file ({folder}) at the top level"
            )));
        }
        // A file and a folder of the same name (ignoring case) cannot both
        // be unpacked: sorted, a file comes right before what is below it.
        let keys: Vec<&Vec<String>> = self.folded.iter().collect();
        for pair in keys.windows(2) {
            if pair[1].len() > pair[0].len() && pair[1][..pair[0].len()] == pair[0][..] {
                return Err(BundleError::Duplicate(pair[0].join("/")));
            }
        }
        let manifest_key = vec![folder.clone(), "SKILL.md".to_owned()];
        let manifest_bytes = &self
            .files
            .get(&manifest_key)
            .ok_or_else(|| BundleError::NoManifest(folder.clone()))?
            .0;
        let text = std::str::from_utf8(manifest_bytes)
            .map_err(|_| ManifestError("is not UTF-8 text".into()))?;
        let manifest = manifest::parse(text)?;
        let files = self
            .files
            .into_iter()
            .map(|(parts, (bytes, executable))| BundleFile {
                path: parts[1..].join("/"),
                bytes,
                executable,
            })
            .collect();
        Ok(Bundle {
            manifest,
            folder,
            files,
        })
    }
}

/// How deep zips nest in `bytes` (0: not a zip), looking no further than
/// `limit`. Every nested `.zip` entry is checked like one of the bundle's
/// own ([`check_entry_header`], [`check_size`]) and decompressed on the
/// upload's budget; entries that are not zips are never decompressed.
fn nesting(
    budget: &mut Budget<'_>,
    bytes: &[u8],
    path: &str,
    limit: usize,
) -> Result<usize, BundleError> {
    if limit == 0 {
        return Ok(0);
    }
    budget.check_time()?;
    let Ok(mut archive) = zip::ZipArchive::new(Cursor::new(bytes)) else {
        return Ok(0);
    };
    budget.done.nested_zips += 1;
    let limits = budget.limits;
    let mut deepest = 0;
    for index in 0..archive.len().min(limits.max_files * 2 + 64) {
        let Ok(entry) = archive.by_index_raw(index) else {
            continue;
        };
        let name = String::from_utf8_lossy(entry.name_raw()).into_owned();
        if !name.to_ascii_lowercase().ends_with(".zip") || entry.is_dir() {
            continue;
        }
        let inner_path = format!("{path}!/{name}");
        check_entry_header(&entry, &inner_path, limits)?;
        let compressed = entry.compressed_size();
        drop(entry);
        let Ok(entry) = archive.by_index(index) else {
            continue;
        };
        // A corrupt nested zip is opaque data: nothing opens it.
        let Some(inner) = budget.inflate(entry, limits.max_file_bytes)? else {
            continue;
        };
        check_size(inner.len() as u64, compressed, &inner_path, limits)?;
        deepest = deepest.max(nesting(budget, &inner, &inner_path, limit - 1)?);
    }
    Ok(1 + deepest)
}

/// The names in a zip's central directory, every record of it, read at
/// `start` (the zip crate keeps only the last of a repeated name, so its
/// own listing cannot show duplicates). At most `max` names.
fn central_directory_names(bytes: &[u8], start: u64, max: usize) -> Vec<&[u8]> {
    const SIGNATURE: &[u8] = b"PK\x01\x02";
    const FIXED: usize = 46;
    let field = |at: usize| -> Option<usize> {
        let pair = bytes.get(at..at + 2)?;
        Some(u16::from_le_bytes([pair[0], pair[1]]) as usize)
    };
    let mut names = Vec::new();
    let Ok(mut at) = usize::try_from(start) else {
        return names;
    };
    while names.len() < max && bytes.get(at..at + 4) == Some(SIGNATURE) {
        let (Some(name_len), Some(extra_len), Some(comment_len)) =
            (field(at + 28), field(at + 30), field(at + 32))
        else {
            break;
        };
        let Some(name) = bytes.get(at + FIXED..at + FIXED + name_len) else {
            break;
        };
        names.push(name);
        at += FIXED + name_len + extra_len + comment_len;
    }
    names
}

/// Refuses a zip whose central directory holds a name twice (ignoring
/// case and a trailing `/`).
fn check_central_duplicates(
    archive: &zip::ZipArchive<Cursor<&[u8]>>,
    bytes: &[u8],
    limits: &Limits,
) -> Result<(), BundleError> {
    let names = central_directory_names(
        bytes,
        archive.central_directory_start(),
        limits.max_files * 2 + 65,
    );
    let mut seen = std::collections::HashSet::new();
    for raw in &names {
        let name = String::from_utf8_lossy(raw);
        if !seen.insert(fold_name(name.trim_end_matches('/'))) {
            return Err(BundleError::Duplicate(name.into_owned()));
        }
    }
    // Names that differ in their bytes but that the zip crate still took
    // for one (a Unicode path field, say): one entry would be hidden.
    if names.len() > archive.len() {
        return Err(BundleError::NotZip(format!(
            "the central directory lists {} entries under {} distinct names",
            names.len(),
            archive.len()
        )));
    }
    Ok(())
}

const S_IFMT: u32 = 0o170000;
const S_IFREG: u32 = 0o100000;
const S_IFDIR: u32 = 0o040000;
const S_IFLNK: u32 = 0o120000;

/// Reads a zip archive.
pub fn from_zip(bytes: &[u8], limits: &Limits) -> Result<Bundle, BundleError> {
    from_zip_measured(bytes, limits).0
}

/// Reads a zip archive, and tells what reading it cost (accepted or not).
pub fn from_zip_measured(bytes: &[u8], limits: &Limits) -> (Result<Bundle, BundleError>, WorkDone) {
    let mut gatherer = Gatherer::new(limits);
    let result = read_zip(bytes, limits, &mut gatherer);
    let done = gatherer.budget.done;
    (result.and_then(|()| gatherer.finish()), done)
}

fn read_zip(bytes: &[u8], limits: &Limits, gatherer: &mut Gatherer<'_>) -> Result<(), BundleError> {
    let mut archive =
        zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| BundleError::NotZip(e.to_string()))?;
    if archive.len() > limits.max_files * 2 + 64 {
        return Err(BundleError::TooManyFiles {
            count: archive.len(),
            limit: limits.max_files,
        });
    }
    check_central_duplicates(&archive, bytes, limits)?;
    for index in 0..archive.len() {
        let entry = archive
            .by_index_raw(index)
            .map_err(|e| BundleError::NotZip(e.to_string()))?;
        let path =
            String::from_utf8(entry.name_raw().to_vec()).map_err(|_| BundleError::BadPath {
                path: String::from_utf8_lossy(entry.name_raw()).into_owned(),
                reason: "the name is not UTF-8",
            })?;
        let mode = entry.unix_mode();
        let kind = mode.map(|m| m & S_IFMT);
        if entry.is_dir() || kind == Some(S_IFDIR) {
            components(&path, limits)?;
            continue;
        }
        match kind {
            None | Some(0) | Some(S_IFREG) => {}
            Some(S_IFLNK) => {
                return Err(BundleError::NotRegular {
                    path,
                    kind: "a symbolic link",
                })
            }
            Some(_) => {
                return Err(BundleError::NotRegular {
                    path,
                    kind: "a device, FIFO or socket",
                })
            }
        }
        check_entry_header(&entry, &path, limits)?;
        let declared = entry.size();
        let executable = mode.is_some_and(|m| m & 0o111 != 0);
        drop(entry);
        let entry = archive
            .by_index(index)
            .map_err(|e| BundleError::NotZip(e.to_string()))?;
        // Never more than the limit, whatever the header said.
        let data = match gatherer.budget.inflate(entry, limits.max_file_bytes)? {
            Some(data) if data.len() as u64 > limits.max_file_bytes => {
                return Err(BundleError::FileTooLarge {
                    path,
                    limit: limits.max_file_bytes,
                })
            }
            Some(data) if data.len() as u64 == declared => data,
            _ => return Err(BundleError::Corrupt { path }),
        };
        gatherer.add(&path, data, executable)?;
    }
    Ok(())
}

/// Reads a directory upload: each part's file name is its path inside one
/// top-level folder (`my-skill/SKILL.md`, `my-skill/scripts/run.py`).
pub fn from_files(
    parts: impl IntoIterator<Item = (String, Vec<u8>)>,
    limits: &Limits,
) -> Result<Bundle, BundleError> {
    let mut gatherer = Gatherer::new(limits);
    for (path, bytes) in parts {
        // Scripts uploaded as plain parts lose their mode: the usual ones
        // are made executable again.
        let executable = [".sh", ".py", ".rb", ".pl", ".js"]
            .iter()
            .any(|ext| path.ends_with(ext))
            && bytes.starts_with(b"#!");
        gatherer.add(&path, bytes, executable)?;
    }
    gatherer.finish()
}

impl Bundle {
    /// Its total size, decompressed.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.bytes.len() as u64).sum()
    }

    /// The bundle as a zip under one top-level folder named after the
    /// skill (what the content endpoints return).
    pub fn to_zip(&self) -> Vec<u8> {
        let mut out = Cursor::new(Vec::new());
        {
            let mut writer = zip::ZipWriter::new(&mut out);
            for file in &self.files {
                let options = zip::write::SimpleFileOptions::default()
                    .compression_method(zip::CompressionMethod::Deflated)
                    .unix_permissions(if file.executable { 0o755 } else { 0o644 });
                let name = format!("{}/{}", self.manifest.name, file.path);
                // Writing to memory cannot fail but for a bug: the paths
                // were checked and the sizes are in memory already.
                if writer.start_file(name, options).is_ok() {
                    let _ = writer.write_all(&file.bytes);
                }
            }
            let _ = writer.finish();
        }
        out.into_inner()
    }

    /// Writes the files below `dir` (which must be empty or not exist):
    /// directories 0755, files 0644 (0755 if executable), nothing followed
    /// or replaced.
    pub fn unpack(&self, dir: &Path) -> std::io::Result<()> {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        std::fs::create_dir_all(dir)?;
        for file in &self.files {
            let path = dir.join(&file.path);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
                std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755))?;
            }
            let mode = if file.executable { 0o755 } else { 0o644 };
            let mut handle = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .custom_flags(libc_o_nofollow())
                .open(&path)?;
            handle.write_all(&file.bytes)?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
        }
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
    }
}

/// `O_NOFOLLOW` (Linux): a link where a file goes is an error.
fn libc_o_nofollow() -> i32 {
    0o400000
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = "---\nname: csv-tool\ndescription: Sums columns.\n---\nRun sum.py.\n";

    /// A zip of `(name, bytes, unix mode)` entries.
    pub(crate) fn zip_of(entries: &[(&str, &[u8], u32)]) -> Vec<u8> {
        let mut out = Cursor::new(Vec::new());
        {
            let mut writer = zip::ZipWriter::new(&mut out);
            for (name, bytes, mode) in entries {
                let options = zip::write::SimpleFileOptions::default()
                    .compression_method(zip::CompressionMethod::Deflated)
                    .unix_permissions(*mode);
                if name.ends_with('/') {
                    writer.add_directory(*name, options).unwrap();
                } else if mode & S_IFMT == S_IFLNK {
                    let target = std::str::from_utf8(bytes).unwrap();
                    writer.add_symlink(*name, target, options).unwrap();
                } else {
                    writer.start_file(*name, options).unwrap();
                    writer.write_all(bytes).unwrap();
                }
            }
            writer.finish().unwrap();
        }
        let mut zip = out.into_inner();
        // The writer only sets permission bits: file types other than
        // regular files and links are patched into the central directory.
        for (name, _, mode) in entries {
            if !matches!(mode & S_IFMT, 0 | S_IFREG | S_IFDIR | S_IFLNK) {
                let at = zip
                    .windows(4 + name.len())
                    .enumerate()
                    .rfind(|(_, w)| w.ends_with(name.as_bytes()))
                    .map(|(i, _)| i)
                    .unwrap();
                // Central header: the name starts at 46; attributes at 38.
                let header = at + 4 - 46;
                assert_eq!(&zip[header..header + 4], b"PK\x01\x02");
                zip[header + 38..header + 42].copy_from_slice(&(mode << 16).to_le_bytes());
            }
        }
        zip
    }

    #[test]
    fn a_good_bundle_reads_round_trips_and_unpacks() {
        let zip = zip_of(&[
            ("csv-tool/", b"", 0o755),
            ("csv-tool/SKILL.md", MANIFEST.as_bytes(), 0o644),
            (
                "csv-tool/scripts/sum.py",
                b"#!/usr/bin/env python3\nprint(1)\n",
                0o755,
            ),
        ]);
        let bundle = from_zip(&zip, &Limits::default()).unwrap();
        assert_eq!(bundle.manifest.name, "csv-tool");
        assert_eq!(bundle.folder, "csv-tool");
        let paths: Vec<&str> = bundle.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["SKILL.md", "scripts/sum.py"]);
        assert!(bundle.files[1].executable && !bundle.files[0].executable);
        let again = from_zip(&bundle.to_zip(), &Limits::default()).unwrap();
        assert_eq!(again, bundle);
        let dir = std::env::temp_dir().join(format!("skill-unpack-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        bundle.unpack(&dir).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("SKILL.md")).unwrap(),
            MANIFEST
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join("scripts/sum.py"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        std::fs::remove_dir_all(&dir).unwrap();
        // The same from a directory upload.
        let uploaded = from_files(
            [
                ("csv-tool/SKILL.md".to_owned(), MANIFEST.as_bytes().to_vec()),
                (
                    "csv-tool/scripts/sum.py".to_owned(),
                    b"#!/usr/bin/env python3\nprint(1)\n".to_vec(),
                ),
            ],
            &Limits::default(),
        )
        .unwrap();
        assert_eq!(uploaded.files, bundle.files);
    }

    #[test]
    fn hostile_bundles_are_refused_with_a_reason() {
        let limits = Limits::default();
        let manifest = ("s/SKILL.md", MANIFEST.as_bytes(), 0o644);
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                zip_of(&[manifest, ("s/../../etc/passwd", b"x", 0o644)]),
                "`..`",
            ),
            (
                zip_of(&[manifest, ("/etc/passwd", b"x", 0o644)]),
                "absolute",
            ),
            (zip_of(&[manifest, ("s\\..\\x", b"x", 0o644)]), "backslash"),
            (
                zip_of(&[manifest, ("s/link", b"/etc/shadow", 0o120777)]),
                "symbolic link",
            ),
            (zip_of(&[manifest, ("s/dev", b"", 0o020644)]), "device"),
            (zip_of(&[("s/readme.txt", b"x", 0o644)]), "no s/SKILL.md"),
            (
                zip_of(&[manifest, ("t/SKILL.md", MANIFEST.as_bytes(), 0o644)]),
                "one top-level folder",
            ),
            (
                zip_of(&[("SKILL.md", MANIFEST.as_bytes(), 0o644)]),
                "one top-level folder",
            ),
            (
                zip_of(&[("s/SKILL.md", b"no front matter", 0o644)]),
                "front matter",
            ),
            (b"not a zip at all".to_vec(), "not a valid zip"),
            (zip_of(&[]), "empty"),
        ];
        for (zip, why) in cases {
            let error = from_zip(&zip, &limits).unwrap_err().to_string();
            assert!(error.contains(why), "{why}: {error}");
        }
        // Too many files.
        let names: Vec<String> = (0..501).map(|i| format!("s/f{i}")).collect();
        let mut entries: Vec<(&str, &[u8], u32)> = names
            .iter()
            .map(|n| (n.as_str(), &b"x"[..], 0o644))
            .collect();
        entries.push(manifest);
        let error = from_zip(&zip_of(&entries), &limits)
            .unwrap_err()
            .to_string();
        assert!(error.contains("at most 500"), "{error}");
        // A bomb: 200 MiB of zeros compress to ~200 KiB.
        let zeros = vec![0u8; 30 << 20];
        let error = from_zip(&zip_of(&[manifest, ("s/zeros", &zeros, 0o644)]), &limits)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("larger than") || error.contains("compressed more"),
            "{error}"
        );
        let ratio = vec![0u8; 5 << 20];
        let error = from_zip(&zip_of(&[manifest, ("s/zeros", &ratio, 0o644)]), &limits)
            .unwrap_err()
            .to_string();
        assert!(error.contains("compressed more than 200 to 1"), "{error}");
        // Many files that fit one by one but not together.
        let small = Limits {
            max_total_bytes: 1000,
            ..limits
        };
        let big = vec![b'a'; 600];
        let error = from_zip(
            &zip_of(&[manifest, ("s/a", &big, 0o644), ("s/b", &big, 0o644)]),
            &small,
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("together"), "{error}");
        // Zips in zips in zips.
        let inner = zip_of(&[("x.txt", b"x", 0o644)]);
        let middle = zip_of(&[("inner.zip", &inner, 0o644)]);
        let outer = zip_of(&[("middle.zip", &middle, 0o644)]);
        assert!(from_zip(&zip_of(&[manifest, ("s/ok.zip", &middle, 0o644)]), &limits).is_ok());
        let error = from_zip(&zip_of(&[manifest, ("s/deep.zip", &outer, 0o644)]), &limits)
            .unwrap_err()
            .to_string();
        assert!(error.contains("nested more than 2"), "{error}");
        // Duplicates, and a file where a folder is.
        let error = from_files(
            [
                ("s/SKILL.md".to_owned(), MANIFEST.as_bytes().to_vec()),
                ("s/a".to_owned(), b"1".to_vec()),
                ("s/a/b".to_owned(), b"2".to_vec()),
            ],
            &limits,
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("twice"), "{error}");
    }

    #[test]
    fn duplicate_names_are_refused_even_where_the_zip_crate_hides_them() {
        let limits = Limits::default();
        let manifest = ("s/SKILL.md", MANIFEST.as_bytes(), 0o644);
        // Two central-directory records of one name: the zip crate keeps
        // only the last, so the reader must count the records itself.
        let mut zip = zip_of(&[
            manifest,
            ("s/dupA", b"one", 0o644),
            ("s/dupB", b"two", 0o644),
        ]);
        let mut patched = 0;
        while let Some(at) = zip.windows(6).position(|w| w == b"s/dupB") {
            zip[at + 5] = b'A';
            patched += 1;
        }
        assert_eq!(patched, 2, "the local and the central header");
        let error = from_zip(&zip, &limits).unwrap_err();
        assert_eq!(error, BundleError::Duplicate("s/dupA".into()));
        assert!(error
            .to_string()
            .contains("\"s/dupA\" is in the bundle twice"));
        // Names that differ only in case, a file and a folder that differ
        // only in case, and a folder entry with a file's name.
        for entries in [
            vec![
                manifest,
                ("s/Readme.md", b"1", 0o644),
                ("s/README.md", b"2", 0o644),
            ],
            vec![
                manifest,
                ("s/lib", b"1", 0o644),
                ("s/LIB/x.py", b"2", 0o644),
            ],
            vec![manifest, ("s/data/", b"", 0o755), ("s/data", b"2", 0o644)],
            // Adversarial: the same name in NFC and NFD.
            vec![
                manifest,
                ("s/caf\u{e9}.txt", b"1", 0o644),
                ("s/cafe\u{301}.txt", b"2", 0o644),
            ],
        ] {
            let error = from_zip(&zip_of(&entries), &limits)
                .unwrap_err()
                .to_string();
            assert!(error.contains("twice"), "{entries:?}: {error}");
        }
        // The same in a directory upload.
        let error = from_files(
            [
                ("s/SKILL.md".to_owned(), MANIFEST.as_bytes().to_vec()),
                ("s/run.sh".to_owned(), b"1".to_vec()),
                ("s/RUN.sh".to_owned(), b"2".to_vec()),
            ],
            &limits,
        )
        .unwrap_err();
        assert_eq!(error, BundleError::Duplicate("s/RUN.sh".into()));
        // Not a duplicate: the same name in different folders.
        assert!(from_zip(
            &zip_of(&[manifest, ("s/a/x", b"1", 0o644), ("s/b/x", b"2", 0o644)]),
            &limits
        )
        .is_ok());
    }

    /// Data deflate shrinks about a hundredfold: under the ratio cap.
    fn compressible(size: usize) -> Vec<u8> {
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut out = vec![0u8; size];
        for chunk in out.chunks_mut(4096) {
            for byte in chunk.iter_mut().take(24) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                *byte = seed as u8;
            }
        }
        out
    }

    /// A bundle holding `s/bomb.zip`: a zip of `wide` zips, each of `wide`
    /// entries named `.zip` holding `leaf`.
    fn nested_bomb(leaf: &[u8], wide: usize) -> Vec<u8> {
        let leaves: Vec<String> = (0..wide).map(|i| format!("z{i}.zip")).collect();
        let inner = zip_of(
            &leaves
                .iter()
                .map(|name| (name.as_str(), leaf, 0o644))
                .collect::<Vec<_>>(),
        );
        let middles: Vec<String> = (0..wide).map(|i| format!("a{i}.zip")).collect();
        let middle = zip_of(
            &middles
                .iter()
                .map(|name| (name.as_str(), inner.as_slice(), 0o644))
                .collect::<Vec<_>>(),
        );
        zip_of(&[
            ("s/SKILL.md", MANIFEST.as_bytes(), 0o644),
            ("s/bomb.zip", &middle, 0o644),
        ])
    }

    #[test]
    fn a_nested_zip_bomb_costs_no_more_than_the_budget() {
        // Zeros: every nested level gets the ratio cap, so the first leaf
        // is refused before it is decompressed.
        let bomb = nested_bomb(&vec![0u8; 4 << 20], 8);
        assert!(bomb.len() < 200 << 10, "{} bytes", bomb.len());
        let (result, done) = from_zip_measured(&bomb, &Limits::default());
        assert_eq!(
            result.unwrap_err(),
            BundleError::Ratio {
                path: "s/bomb.zip!/a0.zip!/z0.zip".into(),
                limit: 200
            }
        );
        assert!(done.inflated_bytes < 1 << 20, "{done:?}");
        // Under the ratio cap, but 8 x 8 x 2 MiB in all: the shared budget
        // stops it (here 8 MiB), not the size of any one entry.
        let wide = nested_bomb(&compressible(2 << 20), 8);
        let limits = Limits {
            max_inflated_bytes: 8 << 20,
            ..Limits::default()
        };
        let (result, done) = from_zip_measured(&wide, &limits);
        assert_eq!(
            result.unwrap_err(),
            BundleError::TooMuchWork { limit: 8 << 20 }
        );
        assert!(
            done.inflated_bytes <= (8 << 20) + INFLATE_CHUNK as u64,
            "{done:?}"
        );
        assert!(from_zip(&wide, &limits)
            .unwrap_err()
            .to_string()
            .contains("would decompress more than 8388608 bytes"));
        // The default budget lets a legitimate nested zip through and
        // counts what it opened.
        let small = nested_bomb(b"not a zip", 2);
        let (result, done) = from_zip_measured(&small, &Limits::default());
        assert!(result.is_ok(), "{result:?}");
        assert_eq!(done.nested_zips, 3, "bomb.zip, a0.zip, a1.zip");
        // The wall-clock bound, reached at once.
        let limits = Limits {
            max_read_time: Duration::ZERO,
            ..Limits::default()
        };
        assert_eq!(
            from_zip(&small, &limits).unwrap_err(),
            BundleError::TooSlow { seconds: 0 }
        );
    }

    #[test]
    fn a_lying_header_gains_nothing() {
        // A stored entry whose declared size is smaller than its data: the
        // reader stops at the declared size and the CRC does not match.
        let mut zip = zip_of(&[
            ("s/SKILL.md", MANIFEST.as_bytes(), 0o644),
            ("s/f", b"hello world", 0o644),
        ]);
        // Corrupt one byte of the deflated data of the last entry.
        let at = zip.windows(3).position(|w| w == b"s/f").unwrap() + 3 + 2;
        zip[at] ^= 0xff;
        assert!(from_zip(&zip, &Limits::default()).is_err());
    }

    #[test]
    fn mutated_zips_are_refused_or_safe_never_a_panic() {
        // A deterministic cousin of the cargo-fuzz target `skill_bundle`:
        // byte flips, truncations and splices of a valid bundle.
        let zip = zip_of(&[
            ("s/SKILL.md", MANIFEST.as_bytes(), 0o644),
            (
                "s/scripts/run.py",
                b"print('hello')\n".repeat(40).as_slice(),
                0o755,
            ),
            ("s/data/inner.zip", &zip_of(&[("x", b"y", 0o644)]), 0o644),
        ]);
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut accepted = 0;
        for round in 0..3000 {
            let mut bytes = zip.clone();
            match round % 3 {
                0 => {
                    for _ in 0..1 + next() % 4 {
                        let at = (next() as usize) % bytes.len();
                        bytes[at] = next() as u8;
                    }
                }
                1 => bytes.truncate((next() as usize) % bytes.len()),
                _ => {
                    let from = (next() as usize) % bytes.len();
                    let to = (next() as usize) % bytes.len();
                    let len = ((next() as usize) % 64).min(bytes.len() - from.max(to));
                    bytes.copy_within(from..from + len, to);
                }
            }
            if crate::fuzzing::check_zip(&bytes) {
                accepted += 1;
            }
        }
        // Some mutations only touch data the reader ignores (comments,
        // padding); the rest are refused.
        assert!(accepted < 3000);
    }
}
