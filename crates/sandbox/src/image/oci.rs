//! OCI images: an image layout (a directory or its tar, `oci-archive`) or a
//! `docker save` / `podman save` archive (`docker-archive`) made into an
//! image's root.
//!
//! The source is read where it is: a directory's blobs by path (digests
//! checked as hex, so a manifest cannot name a file outside `blobs/`), an
//! archive's members by their offset in it (nothing of the outer archive
//! is extracted). The manifest's layers are applied in order into the
//! staging root, each read with the directory import's bounded tar reader
//! (`archive::LayerReader`), gzip-compressed or plain, and each checked
//! against its digest when the source names one.
//!
//! A layer is hostile data written by root, so every change resolves
//! beneath the staging root without following a link (`openat2` with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, `*at` calls on the last
//! component). Refused, with the member named: absolute paths and `..`
//! (the reader's), a member whose path runs through a symbolic link (a
//! layer differ never writes one: its paths are the real ones), hard links
//! to anything but a regular file already in the tree, more bytes or
//! entries than [`OciLimits`]. Neutralised, and counted in the image's
//! details: devices and FIFOs are not made, setuid and setgid bits are
//! dropped. Symbolic links keep their targets, absolute ones included:
//! they resolve inside the container's root, and whatever the host does in
//! an image resolves inside it too (see the `image` module).
//!
//! Whiteouts are the OCI ones: `.wh.NAME` removes `NAME` from the layers
//! below; `.wh..wh..opq` empties its directory of what the layers below
//! put there (what this layer put there stays).

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, ResolveFlags, Timestamps};
use rustix::io::Errno;
use sha2::{Digest, Sha256};

use crate::archive::{self, ArchiveError, ImportLimits, LayerKind, LayerReader};
use crate::error::SandboxError;
use shellgate_sandbox_api::image::{ImageConfig, Neutralised};

/// The prefix of a whiteout's name.
const WHITEOUT: &[u8] = b".wh.";
/// The name of an opaque directory's marker.
const OPAQUE: &[u8] = b".wh..wh..opq";
/// Largest JSON document (index, manifest, config) read from a source.
const MAX_JSON: u64 = 4 << 20;

/// Bounds on one OCI import, over all its layers together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OciLimits {
    /// Bytes of file content, all layers together (what a later layer
    /// replaces still counts).
    pub max_bytes: u64,
    /// Members of all layers together.
    pub max_entries: u64,
}

impl Default for OciLimits {
    fn default() -> Self {
        Self {
            max_bytes: 16 << 30,
            max_entries: 2_000_000,
        }
    }
}

/// What kind of source a path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceFormat {
    /// A directory with `oci-layout` and `index.json`.
    OciLayout,
    /// That directory as a tar.
    OciArchive,
    /// `docker save` / `podman save`: `manifest.json` at the top.
    DockerArchive,
}

impl SourceFormat {
    pub fn name(self) -> &'static str {
        match self {
            Self::OciLayout => "oci-layout",
            Self::OciArchive => "oci-archive",
            Self::DockerArchive => "docker-archive",
        }
    }
}

/// What an import made of the source, beside the tree.
#[derive(Debug, Clone, Default)]
pub struct Imported {
    pub config: ImageConfig,
    pub neutralised: Neutralised,
    pub layers: usize,
}

fn invalid(message: impl Into<String>) -> SandboxError {
    SandboxError::InvalidRequest {
        param: "source",
        message: message.into(),
    }
}

fn from_archive(layer: usize, e: ArchiveError) -> SandboxError {
    if e.is_invalid_request() {
        invalid(format!("layer {layer}: {e}"))
    } else {
        SandboxError::Setup(format!("layer {layer}: {e}"))
    }
}

/// An archive's members: name → (offset of its data, size).
type Members = std::collections::HashMap<String, (u64, u64)>;

/// Where the files of a source are.
enum Source {
    Directory(PathBuf),
    /// Member name → (offset of its data, size) in the archive.
    Archive {
        path: PathBuf,
        members: Members,
    },
}

/// A member name normalised (`./a//b` is `a/b`).
fn clean(name: &str) -> String {
    name.split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect::<Vec<_>>()
        .join("/")
}

impl Source {
    fn open(path: &Path) -> Result<(Self, SourceFormat), SandboxError> {
        let meta = std::fs::metadata(path)
            .map_err(|e| invalid(format!("cannot read {}: {e}", path.display())))?;
        if meta.is_dir() {
            if !path.join("index.json").is_file() {
                return Err(invalid(format!(
                    "{} is a directory without index.json: not an OCI image layout",
                    path.display()
                )));
            }
            return Ok((Self::Directory(path.to_owned()), SourceFormat::OciLayout));
        }
        let members = archive_members(path)?
            .ok_or_else(|| invalid(format!("{} is not a tar archive", path.display())))?;
        let format = if members.contains_key("index.json") {
            SourceFormat::OciArchive
        } else if members.contains_key("manifest.json") {
            SourceFormat::DockerArchive
        } else {
            return Err(invalid(format!(
                "{} has neither index.json nor manifest.json: not an OCI or docker archive",
                path.display()
            )));
        };
        Ok((
            Self::Archive {
                path: path.to_owned(),
                members,
            },
            format,
        ))
    }

    /// A file of the source, by its name in the layout.
    fn read(&self, name: &str) -> Result<Box<dyn Read + '_>, SandboxError> {
        match self {
            Self::Directory(dir) => {
                let name = clean(name);
                if name.split('/').any(|p| p == "..") {
                    return Err(invalid(format!(
                        "the image names {name:?}, outside its layout"
                    )));
                }
                let file = File::open(dir.join(&name))
                    .map_err(|e| invalid(format!("cannot open {name} in the layout: {e}")))?;
                Ok(Box::new(BufReader::with_capacity(1 << 16, file)))
            }
            Self::Archive { path, members } => {
                let (offset, size) = members
                    .get(&clean(name))
                    .ok_or_else(|| invalid(format!("the archive has no {name}")))?;
                let mut file = File::open(path)
                    .map_err(|e| invalid(format!("cannot open {}: {e}", path.display())))?;
                file.seek(SeekFrom::Start(*offset))
                    .map_err(|e| SandboxError::io("seek in the archive", e))?;
                Ok(Box::new(BufReader::with_capacity(
                    1 << 16,
                    file.take(*size),
                )))
            }
        }
    }

    fn json<T: serde::de::DeserializeOwned>(&self, name: &str) -> Result<T, SandboxError> {
        let mut bytes = Vec::new();
        self.read(name)?
            .take(MAX_JSON + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| SandboxError::io(format!("read {name}"), e))?;
        if bytes.len() as u64 > MAX_JSON {
            return Err(invalid(format!("{name} is larger than {MAX_JSON} bytes")));
        }
        serde_json::from_slice(&bytes).map_err(|e| invalid(format!("{name}: {e}")))
    }
}

/// The members of a plain tar archive (regular files; symbolic links, as
/// older `docker save` writes for a layer shared by two images, resolved
/// by name), or `None` if `path` is not one.
fn archive_members(path: &Path) -> Result<Option<Members>, SandboxError> {
    let file =
        File::open(path).map_err(|e| invalid(format!("cannot open {}: {e}", path.display())))?;
    let mut magic = [0u8; 262];
    let got = (&file).read(&mut magic).unwrap_or(0);
    if got < 262 || &magic[257..262] != b"ustar" {
        return Ok(None);
    }
    let mut archive = tar::Archive::new(BufReader::new(
        File::open(path).map_err(|e| invalid(format!("cannot open {}: {e}", path.display())))?,
    ));
    let mut members = std::collections::HashMap::new();
    let mut links = Vec::new();
    let entries = archive
        .entries()
        .map_err(|e| invalid(format!("{}: {e}", path.display())))?;
    for entry in entries {
        let entry = entry.map_err(|e| invalid(format!("{}: {e}", path.display())))?;
        let name = clean(&String::from_utf8_lossy(&entry.path_bytes()));
        match entry.header().entry_type() {
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                members.insert(name, (entry.raw_file_position(), entry.size()));
            }
            tar::EntryType::Symlink => {
                if let Some(target) = entry.link_name_bytes() {
                    links.push((name, String::from_utf8_lossy(&target).into_owned()));
                }
            }
            _ => {}
        }
    }
    for (name, target) in links {
        // Relative to the link's directory, inside the archive.
        let mut at: Vec<&str> = name.split('/').collect();
        at.pop();
        for part in target.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    at.pop();
                }
                p => at.push(p),
            }
        }
        if let Some(found) = members.get(&at.join("/")).copied() {
            members.insert(name, found);
        }
    }
    Ok(Some(members))
}

// The documents of an OCI layout and a docker archive, as far as read.

#[derive(serde::Deserialize)]
struct Descriptor {
    #[serde(rename = "mediaType", default)]
    media_type: String,
    digest: String,
    #[serde(default)]
    platform: Option<Platform>,
}

#[derive(serde::Deserialize)]
struct Platform {
    #[serde(default)]
    architecture: String,
}

#[derive(serde::Deserialize)]
struct Index {
    manifests: Vec<Descriptor>,
}

#[derive(serde::Deserialize)]
struct Manifest {
    config: Descriptor,
    layers: Vec<Descriptor>,
}

#[derive(serde::Deserialize)]
struct DockerManifest {
    #[serde(rename = "Config")]
    config: String,
    #[serde(rename = "Layers")]
    layers: Vec<String>,
}

#[derive(serde::Deserialize, Default)]
struct ConfigBlob {
    #[serde(default)]
    config: Option<RunConfig>,
}

#[derive(serde::Deserialize, Default)]
struct RunConfig {
    #[serde(rename = "Env", default)]
    env: Option<Vec<String>>,
    #[serde(rename = "WorkingDir", default)]
    working_dir: Option<String>,
    #[serde(rename = "User", default)]
    user: Option<String>,
    #[serde(rename = "Entrypoint", default)]
    entrypoint: Option<Vec<String>>,
    #[serde(rename = "Cmd", default)]
    cmd: Option<Vec<String>>,
}

/// The architecture layers must be for: this machine's, in OCI's words.
fn machine_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// `blobs/<algorithm>/<hex>` of a digest, and the hex to check it against
/// (sha256 only), or why not.
fn blob_path(digest: &str) -> Result<(String, Option<String>), SandboxError> {
    let (algorithm, hex) = digest
        .split_once(':')
        .ok_or_else(|| invalid(format!("bad digest {digest:?}")))?;
    let plain = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric());
    if !plain(algorithm) || !plain(hex) {
        return Err(invalid(format!("bad digest {digest:?}")));
    }
    let check = (algorithm == "sha256").then(|| hex.to_ascii_lowercase());
    Ok((format!("blobs/{algorithm}/{hex}"), check))
}

/// A layer to apply: where it is in the source, and its digest if known.
struct LayerRef {
    name: String,
    sha256: Option<String>,
}

/// The layers (bottom first) and the config file's name.
fn read_manifest(
    source: &Source,
    format: SourceFormat,
) -> Result<(Vec<LayerRef>, String), SandboxError> {
    if format == SourceFormat::DockerArchive {
        let manifests: Vec<DockerManifest> = source.json("manifest.json")?;
        let [manifest] = <[DockerManifest; 1]>::try_from(manifests).map_err(|all| {
            invalid(format!(
                "manifest.json lists {} images: import an archive of one",
                all.len()
            ))
        })?;
        let layers = manifest
            .layers
            .into_iter()
            .map(|name| {
                // Newer docker names blobs by digest: check it too.
                let sha256 = name
                    .strip_prefix("blobs/sha256/")
                    .map(|hex| hex.to_ascii_lowercase());
                LayerRef { name, sha256 }
            })
            .collect();
        return Ok((layers, manifest.config));
    }
    let index: Index = source.json("index.json")?;
    let pick = |manifests: Vec<Descriptor>| -> Result<Descriptor, SandboxError> {
        let count = manifests.len();
        let mut matching: Vec<Descriptor> = manifests
            .into_iter()
            .filter(|m| {
                m.platform.as_ref().is_none_or(|p| {
                    p.architecture.is_empty() || p.architecture == machine_architecture()
                })
            })
            .collect();
        if matching.len() != 1 {
            return Err(invalid(format!(
                "the index lists {count} manifests, {} for this machine: import a layout of one image",
                matching.len()
            )));
        }
        Ok(matching.remove(0))
    };
    let mut descriptor = pick(index.manifests)?;
    // An index may point at another index (a multi-platform image).
    if descriptor.media_type.ends_with("image.index.v1+json")
        || descriptor.media_type.ends_with("manifest.list.v2+json")
    {
        let (name, _) = blob_path(&descriptor.digest)?;
        let inner: Index = source.json(&name)?;
        descriptor = pick(inner.manifests)?;
    }
    let (name, _) = blob_path(&descriptor.digest)?;
    let manifest: Manifest = source.json(&name)?;
    let layers = manifest
        .layers
        .iter()
        .map(|layer| {
            if layer.media_type.contains("zstd") {
                return Err(invalid(format!(
                    "layer {} is zstd-compressed: save the image with gzip or uncompressed layers",
                    layer.digest
                )));
            }
            if layer.media_type.contains("nondistributable") || layer.media_type.contains("foreign")
            {
                return Err(invalid(format!(
                    "layer {} is a foreign (non-distributable) layer, which is not in the archive",
                    layer.digest
                )));
            }
            let (name, sha256) = blob_path(&layer.digest)?;
            Ok(LayerRef { name, sha256 })
        })
        .collect::<Result<_, _>>()?;
    let (config, _) = blob_path(&manifest.config.digest)?;
    Ok((layers, config))
}

/// Reads a source's bytes, hashing them as they go.
struct Hashing<R> {
    inner: R,
    hash: Sha256,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
}

/// The format of `path` if it is an OCI layout, an OCI archive or a docker
/// archive (`None`: something else, such as a root file system tarball).
pub fn detect(path: &Path) -> Option<SourceFormat> {
    Source::open(path).ok().map(|(_, format)| format)
}

/// Applies the image at `source` into `staging` (an empty directory).
pub fn import(
    source: &Path,
    staging: &Path,
    limits: &OciLimits,
) -> Result<(Imported, SourceFormat), SandboxError> {
    let (source, format) = Source::open(source)?;
    let (layers, config_name) = read_manifest(&source, format)?;
    let config: ConfigBlob = source.json(&config_name)?;
    let run = config.config.unwrap_or_default();
    let root = rfs::open(
        staging,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| SandboxError::io(format!("open {}", staging.display()), e.into()))?;
    let mut applier = Applier {
        root: &root,
        limits: ImportLimits {
            max_bytes: limits.max_bytes,
            max_entries: limits.max_entries,
        },
        bytes: 0,
        entries: 0,
        neutralised: Neutralised::default(),
        made: HashSet::new(),
    };
    for (index, layer) in layers.iter().enumerate() {
        let number = index + 1;
        let raw = source.read(&layer.name)?;
        let mut hashing = Hashing {
            inner: raw,
            hash: Sha256::new(),
        };
        applier.made.clear();
        {
            let mut buffered = BufReader::with_capacity(1 << 16, &mut hashing);
            let head = buffered
                .fill_buf()
                .map_err(|e| SandboxError::io(format!("read layer {number}"), e))?;
            let mut stream: Box<dyn Read + '_> = match head {
                [0x1f, 0x8b, ..] => Box::new(flate2::bufread::MultiGzDecoder::new(buffered)),
                [0x28, 0xb5, 0x2f, 0xfd, ..] => {
                    return Err(invalid(format!(
                        "layer {number} is zstd-compressed: save the image with gzip or uncompressed layers"
                    )))
                }
                _ => Box::new(buffered),
            };
            applier
                .layer(&mut *stream)
                .map_err(|e| from_archive(number, e))?;
            // The rest (a compressed stream's trailer) belongs to the hash.
            io::copy(&mut stream, &mut io::sink())
                .map_err(|e| SandboxError::io(format!("read layer {number}"), e))?;
        }
        io::copy(&mut hashing.inner, &mut io::sink())
            .map_err(|e| SandboxError::io(format!("read layer {number}"), e))?;
        if let Some(expected) = &layer.sha256 {
            let got: String = hashing
                .hash
                .finalize()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            if &got != expected {
                return Err(invalid(format!(
                    "layer {number} ({}) does not match its digest (sha256 {got})",
                    layer.name
                )));
            }
        }
    }
    let config = ImageConfig {
        env: run
            .env
            .unwrap_or_default()
            .into_iter()
            .filter(|entry| {
                entry
                    .split_once('=')
                    .is_some_and(|(name, _)| !name.is_empty())
            })
            .collect(),
        working_dir: run.working_dir.filter(|dir| !dir.is_empty()),
        user: run.user.filter(|user| !user.is_empty()),
        entrypoint: run.entrypoint.unwrap_or_default(),
        cmd: run.cmd.unwrap_or_default(),
    };
    if let Some(dir) = &config.working_dir {
        if !dir.starts_with('/') || dir.split('/').any(|p| p == "..") {
            return Err(invalid(format!(
                "the image's working directory {dir:?} is not an absolute path"
            )));
        }
    }
    Ok((
        Imported {
            config,
            neutralised: applier.neutralised,
            layers: layers.len(),
        },
        format,
    ))
}

/// How paths below the root are resolved: never out of it, never through a
/// link.
const BENEATH: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// Applies layers to the staging root.
struct Applier<'a> {
    root: &'a OwnedFd,
    limits: ImportLimits,
    bytes: u64,
    entries: u64,
    neutralised: Neutralised,
    /// Paths this layer made (an opaque marker keeps them).
    made: HashSet<Vec<u8>>,
}

fn refused(member: &[u8], reason: impl Into<String>) -> ArchiveError {
    ArchiveError::Refused {
        member: archive::shown(member),
        reason: reason.into(),
    }
}

fn system(member: &[u8], what: &str) -> impl FnOnce(Errno) -> ArchiveError {
    let member = archive::shown(member);
    let what = what.to_owned();
    move |e| ArchiveError::Io {
        context: format!("{what} {member:?}"),
        source: e.into(),
    }
}

/// `path` split into its directory and last component.
fn split(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|b| *b == b'/') {
        Some(at) => (&path[..at], &path[at + 1..]),
        None => (b"", path),
    }
}

impl Applier<'_> {
    fn layer(&mut self, input: &mut dyn Read) -> Result<(), ArchiveError> {
        let mut reader = LayerReader::new(input);
        while let Some(member) = reader.next(&self.limits)? {
            self.entries += 1;
            if self.entries > self.limits.max_entries {
                return Err(ArchiveError::TooManyEntries {
                    limit: self.limits.max_entries,
                });
            }
            if member.kind == LayerKind::File {
                self.bytes = self.bytes.saturating_add(member.size);
                if self.bytes > self.limits.max_bytes {
                    return Err(ArchiveError::TooLarge {
                        member: archive::shown(&member.path),
                        limit: self.limits.max_bytes,
                    });
                }
            }
            self.member(&member, &mut reader)?;
        }
        Ok(())
    }

    /// Opens the directory `path` below the root, making what is missing
    /// (mode 0755, as a layer differ leaves implied parents); a component
    /// that is a link or not a directory refuses `member`.
    fn directory(&mut self, path: &[u8], member: &[u8]) -> Result<OwnedFd, ArchiveError> {
        let mut dir = self.root.try_clone().map_err(|e| ArchiveError::Io {
            context: "duplicate the root".into(),
            source: e,
        })?;
        if path.is_empty() {
            return Ok(dir);
        }
        for part in path.split(|b| *b == b'/') {
            let open = |dir: &OwnedFd| {
                rfs::openat2(
                    dir,
                    part,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                    BENEATH,
                )
            };
            dir = match open(&dir) {
                Ok(next) => next,
                Err(Errno::NOENT) => {
                    match rfs::mkdirat(&dir, part, Mode::from_raw_mode(0o755)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(system(member, "make the parent of")(e)),
                    }
                    open(&dir).map_err(|e| self.through(member, path, e))?
                }
                Err(e) => return Err(self.through(member, path, e)),
            };
        }
        Ok(dir)
    }

    fn through(&self, member: &[u8], path: &[u8], e: Errno) -> ArchiveError {
        match e {
            Errno::LOOP | Errno::XDEV | Errno::NOTDIR => refused(
                member,
                format!(
                    "its path runs through {:?}, which is a symbolic link or not a directory",
                    archive::shown(path)
                ),
            ),
            e => system(member, "open the parent of")(e),
        }
    }

    fn member(
        &mut self,
        member: &archive::LayerMember,
        reader: &mut LayerReader<'_>,
    ) -> Result<(), ArchiveError> {
        let path = member.path.as_slice();
        let skip = |reader: &mut LayerReader<'_>| reader.data(member.size, path, &mut |_| Ok(()));
        if path.is_empty() {
            // The root itself: its mode is the store's.
            return skip(reader);
        }
        let (parent_path, name) = split(path);
        if name == OPAQUE {
            let parent = self.directory(parent_path, path)?;
            self.clear_below(&parent, parent_path)?;
            return skip(reader);
        }
        if let Some(hidden) = name.strip_prefix(WHITEOUT) {
            if hidden.starts_with(WHITEOUT) {
                // AUFS's own bookkeeping (`.wh..wh.plnk`): not content.
                return skip(reader);
            }
            let parent = self.directory(parent_path, path)?;
            archive::remove_tree(parent.as_fd(), hidden)?;
            return skip(reader);
        }
        let parent = self.directory(parent_path, path)?;
        self.made.insert(path.to_vec());
        let mut mode = member.mode & 0o7777;
        if mode & 0o6000 != 0 && member.kind != LayerKind::Directory {
            self.neutralised.setid_bits += 1;
        }
        if member.kind != LayerKind::Directory {
            mode &= 0o1777 & !0o1000;
        } else {
            // setgid on a directory only passes its group on; dropped too.
            mode &= 0o1777;
        }
        let mode = Mode::from_raw_mode(mode);
        let owner = (
            Some(rustix::fs::Uid::from_raw(member.uid)),
            Some(rustix::fs::Gid::from_raw(member.gid)),
        );
        match member.kind {
            LayerKind::Special => {
                self.neutralised.special_files += 1;
                skip(reader)
            }
            LayerKind::Directory => {
                match rfs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {}
                    Ok(_) => {
                        rfs::unlinkat(&parent, name, AtFlags::empty())
                            .map_err(system(path, "replace"))?;
                        rfs::mkdirat(&parent, name, mode).map_err(system(path, "make"))?;
                    }
                    Err(Errno::NOENT) => {
                        rfs::mkdirat(&parent, name, mode).map_err(system(path, "make"))?
                    }
                    Err(e) => return Err(system(path, "inspect")(e)),
                }
                rfs::chownat(&parent, name, owner.0, owner.1, AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(system(path, "set the owner of"))?;
                rfs::chmodat(&parent, name, mode, AtFlags::empty())
                    .map_err(system(path, "set the mode of"))?;
                skip(reader)
            }
            LayerKind::File => {
                self.clear_place(&parent, name, path)?;
                let file = rfs::openat2(
                    &parent,
                    name,
                    OFlags::WRONLY
                        | OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                    BENEATH,
                )
                .map_err(system(path, "create"))?;
                let mut out = File::from(file);
                reader.data(member.size, path, &mut |chunk| {
                    io::Write::write_all(&mut out, chunk).map_err(|source| ArchiveError::Io {
                        context: format!("write {:?}", archive::shown(path)),
                        source,
                    })
                })?;
                rfs::fchown(&out, owner.0, owner.1).map_err(system(path, "set the owner of"))?;
                // After the owner: chown clears setuid bits, and there are none left.
                rfs::fchmod(&out, mode).map_err(system(path, "set the mode of"))?;
                let time = rfs::Timespec {
                    tv_sec: i64::try_from(member.mtime).unwrap_or(0),
                    tv_nsec: 0,
                };
                let _ = rfs::futimens(
                    &out,
                    &Timestamps {
                        last_access: time,
                        last_modification: time,
                    },
                );
                Ok(())
            }
            LayerKind::Symlink => {
                let target = member.link.as_deref().unwrap_or_default();
                if target.is_empty() || target.contains(&0) {
                    return Err(refused(path, "a symbolic link with no target"));
                }
                self.clear_place(&parent, name, path)?;
                rfs::symlinkat(target, &parent, name).map_err(system(path, "make"))?;
                rfs::chownat(&parent, name, owner.0, owner.1, AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(system(path, "set the owner of"))?;
                skip(reader)
            }
            LayerKind::HardLink => {
                let raw = member.link.as_deref().unwrap_or_default();
                let target = archive::normalise_member(raw).map_err(|e| {
                    refused(
                        path,
                        format!("a hard link to {:?}: {e}", archive::shown(raw)),
                    )
                })?;
                let (target_parent, target_name) = split(&target);
                if target_name.is_empty() || target == path {
                    return Err(refused(path, "a hard link to itself or to the root"));
                }
                let source_dir = rfs::openat2(
                    self.root,
                    if target_parent.is_empty() {
                        &b"."[..]
                    } else {
                        target_parent
                    },
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                    BENEATH,
                )
                .map_err(|_| {
                    refused(
                        path,
                        format!(
                            "a hard link to {:?}, which is not a file of the image",
                            archive::shown(&target)
                        ),
                    )
                })?;
                match rfs::statat(&source_dir, target_name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile => {}
                    _ => {
                        return Err(refused(
                            path,
                            format!(
                                "a hard link to {:?}, which is not a regular file of the image",
                                archive::shown(&target)
                            ),
                        ))
                    }
                }
                self.clear_place(&parent, name, path)?;
                rfs::linkat(&source_dir, target_name, &parent, name, AtFlags::empty())
                    .map_err(system(path, "link"))?;
                skip(reader)
            }
        }
    }

    /// Removes what is at `name` in `parent` (a layer's member replaces it).
    fn clear_place(&self, parent: &OwnedFd, name: &[u8], path: &[u8]) -> Result<(), ArchiveError> {
        match rfs::unlinkat(parent, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(Errno::ISDIR) => archive::remove_tree(parent.as_fd(), name),
            Err(e) => Err(system(path, "replace")(e)),
        }
    }

    /// An opaque directory: removes its entries that this layer did not
    /// make.
    fn clear_below(&self, dir: &OwnedFd, dir_path: &[u8]) -> Result<(), ArchiveError> {
        let listing = rfs::openat(
            dir,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(system(dir_path, "list"))?;
        let mut names = Vec::new();
        let entries = rfs::Dir::read_from(&listing).map_err(system(dir_path, "list"))?;
        for entry in entries {
            let entry = entry.map_err(system(dir_path, "list"))?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(name.to_vec());
            }
        }
        for name in names {
            let mut full = dir_path.to_vec();
            if !full.is_empty() {
                full.push(b'/');
            }
            full.extend_from_slice(&name);
            if !self.made.contains(&full) {
                archive::remove_tree(dir.as_fd(), &name)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
