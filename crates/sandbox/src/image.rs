//! Images: what a container's read-only root is made of.
//!
//! - `host` (the default, no set-up): the host's system directories
//!   (`/usr` and the `/bin`, `/lib*`, `/sbin` links or directories) bound
//!   read-only, and an `/etc` *copied* from the host through an allow-list
//!   (only world-readable files: never `shadow`, `sudoers`, ssh keys or
//!   anything private). Nothing of `/root`, `/home`, `/srv`, `/var`, `/opt`,
//!   working trees or the server's data directory exists inside.
//! - any other name: a directory `images/<name>/rootfs` in the data
//!   directory, built by `shellgate image build` from a [`Recipe`] (see
//!   `recipe`: pinned Debian packages and wheels, cached in
//!   `images/.cache`) or imported from a rootfs tarball; it becomes the
//!   lower layer of an overlay. `images/<name>/info.json` says what it is
//!   ([`ImageDetails`]: size, runtimes, and for a built image its recipe's
//!   hash, snapshot, mirror and package lock).
//!
//! Both get generated `passwd`, `group`, `hosts` and `resolv.conf` files, so
//! the sandbox user (`user`, home `/home/user`, as in E2B's sandboxes)
//! exists and no host name or resolver leaks in; and a generated `sudo` at
//! `/usr/local/bin/sudo` (`image/sudo.sh`): the sandbox user has no
//! privileges, so it says so and exits 1, except that `sudo -u user -- CMD`
//! (the prefix agent frameworks add) runs CMD as it is.
//!
//! The host's `/usr/local` (tools installed by hand on the host, outside the
//! package manager) is hidden behind the generated one (`bin/sudo` alone)
//! unless [`HostImageOptions::expose_usr_local`] asks for it (then the
//! generated one lies over it).
//!
//! An imported image is hostile data written by root: a tarball may hold
//! `etc -> /etc` or `etc/resolv.conf -> /etc/shadow`. Everything the store
//! does inside an image root therefore resolves *inside* it (`openat2` with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, `mkdirat`/`unlinkat` relative to
//! directory descriptors), once, when the image is imported or built: a
//! mount point reached through a symbolic link is refused, a symbolic link
//! where an identity file goes is replaced by a plain file. Starting a
//! container only verifies (the same way) and never writes into an image.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

mod commit;
pub mod default_build;
mod half_made;
pub mod oci;
mod recipe;
pub mod runtimes;

pub use recipe::{recipe, version_matches, Built, Expectations, Recipe, Wheel, WheelLock, RECIPES};
/// The Dockerfile subset and the builder run only the sandbox's public
/// face (`SandboxBackend`), so any backend, and the server, use them.
pub use shellgate_sandbox_api::{dockerfile, image_build as build};

use crate::error::{IoContext, SandboxError};
use crate::protocol::{Layer, RootSpec};
use crate::sandbox_user::{SANDBOX_HOME, SANDBOX_UID, SANDBOX_USER};
use crate::sys::{
    openat2, RESOLVE_BENEATH, RESOLVE_IN_ROOT, RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS,
};

pub use shellgate_sandbox_api::image::HOST_IMAGE;

/// Debian's `/etc/profile` asks `id -u` for the user's id, twice-written
/// but once run: a fork and exec of `id` in every login shell, and E2B's
/// SDKs run every command in one (`/bin/bash -l -c`), about 2 ms a command.
/// Bash (and zsh) already know it as `$EUID`; a shell without `EUID` still
/// asks `id -u`. The `host` image's copy of a profile that reads exactly
/// as Debian 12's gets that one change ([`quicker_profile`]); any other
/// profile is copied as it is.
const DEBIAN_PROFILE: &str = include_str!("image/debian-12-profile");
const ID_TEST: &str = r#"if [ "$(id -u)" -eq 0 ]; then"#;
const EUID_TEST: &str = r#"if [ "${EUID:-$(id -u)}" -eq 0 ]; then"#;

/// Debian 12's profile with `$EUID` read where the shell has it; `None`
/// for any other profile.
fn quicker_profile(profile: &str) -> Option<String> {
    (profile == DEBIAN_PROFILE).then(|| profile.replace(ID_TEST, EUID_TEST))
}

/// Host `/etc` entries the `host` image may carry (copied recursively, only
/// world-readable files).
const HOST_ETC_ALLOWLIST: &[&str] = &[
    "alternatives",
    "bash.bashrc",
    "bindresvport.blacklist",
    "ca-certificates",
    "ca-certificates.conf",
    "debian_version",
    "fonts",
    "gai.conf",
    "host.conf",
    "inputrc",
    "issue",
    "java-17-openjdk",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "localtime",
    "magic",
    "magic.mime",
    "matplotlibrc",
    "mime.types",
    "netconfig",
    "networks",
    "nsswitch.conf",
    "os-release",
    "perl",
    "php",
    "profile",
    "profile.d",
    "protocols",
    "python3",
    "python3.11",
    "rpc",
    "ruby",
    "services",
    "shells",
    "skel",
    "ssl",
    "terminfo",
    "timezone",
    "vim",
    "wgetrc",
    "xattr.conf",
    "xdg",
    "xml",
];

/// Host top-level system entries the `host` image exposes.
const HOST_SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// Directories a container mounts over, relative to an image's root (the
/// home directory is `SANDBOX_HOME`'s).
const MOUNT_POINT_DIRS: &[&str] = &["proc", "dev", "tmp", "mnt/data", "home/user", "etc"];
/// Mount points renamed since images were first prepared, (old, new): an
/// image prepared with the old one (the home was `/home/sandbox` before
/// it became E2B's `/home/user`) gets the new one when the store opens, so
/// it keeps serving.
const RENAMED_MOUNT_POINT_DIRS: &[(&str, &str)] = &[("home/sandbox", "home/user")];
/// Mount points only some containers use (a container with skills): made
/// at import and build, and added to images made before they existed when
/// the store opens; not required by [`verify_mount_points`], so an image
/// without one still serves every container that does not need it.
const OPTIONAL_MOUNT_POINT_DIRS: &[&str] = &["mnt/skills", WORKSPACE_MOUNT_POINT];
/// `SANDBOX_WORKSPACE`'s mount point: an image without it (made by hand,
/// or where a link is in the way) serves containers without `/workspace`.
const WORKSPACE_MOUNT_POINT: &str = "workspace";

/// Host directory whose contents the `host` image hides by default.
const USR_LOCAL: &str = "/usr/local";

/// shellgate's `sudo` (see the module documentation): says why there is no
/// sudo, or runs a command asked to run as the sandbox user itself.
const SUDO_SCRIPT: &str = include_str!("image/sudo.sh");
/// Where every container has it: first on PATH after `~/.local/bin` (so it
/// shadows an image's own, which could only fail on `nosuid` mounts).
const SUDO_DIR: &str = "usr/local/bin";
const SUDO_NAME: &str = "sudo";

/// Identity files every image gets.
fn identity_files(hostname: &str) -> [(&'static str, String); 4] {
    [
        (
            "passwd",
            format!(
                "root:x:0:0:root:/root:/bin/bash\n\
                 {SANDBOX_USER}:x:{SANDBOX_UID}:{SANDBOX_UID}:{SANDBOX_USER}:{SANDBOX_HOME}:/bin/bash\n\
                 nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
            ),
        ),
        (
            "group",
            format!("root:x:0:\n{SANDBOX_USER}:x:{SANDBOX_UID}:\nnogroup:x:65534:\n"),
        ),
        ("hosts", format!("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t{hostname}\n")),
        ("resolv.conf", "# shellgate: no network unless a policy allows it\n".to_owned()),
    ]
}

/// How the `host` image is put together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostImageOptions {
    /// Show the host's `/usr/local` inside `host` containers. Off by
    /// default: it holds whatever was installed on the host by hand (and
    /// with it, what the host runs and where), none of it vetted for
    /// sandboxes; on, it is bound read-only like the rest of `/usr`.
    pub expose_usr_local: bool,
}

/// Where images live, and the generated files they share.
#[derive(Debug, Clone)]
pub struct ImageStore {
    root: PathBuf,
    host: HostImageOptions,
}

/// What a container needs to know about its image.
#[derive(Debug, Clone)]
pub struct ResolvedImage {
    pub root: RootSpec,
    /// Generated identity files bound over the image's own.
    pub file_binds: Vec<(PathBuf, String)>,
    /// Generated programs bound over the image (executable: `sudo`).
    pub program_binds: Vec<(PathBuf, String)>,
    /// Whether containers of the image get `SANDBOX_WORKSPACE`.
    pub workspace: bool,
    /// `NAME=value` defaults of every command (an OCI image's `Env`).
    pub env: Vec<String>,
    /// Where commands start by default (an OCI image's `WorkingDir`).
    pub workdir: Option<String>,
}

pub use shellgate_sandbox_api::image::{ImageDetails, ImageInfo};

/// `source_format` of an image committed from a container.
pub const COMMITTED_FORMAT: &str = "container";

/// The revision given to trees installed before revisions were recorded.
const FIRST_REVISION: &str = "r0";

/// Total apparent size of the regular files below `dir`, links not
/// followed.
fn tree_size(dir: &Path) -> u64 {
    let mut total = 0;
    let mut pending = vec![dir.to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => pending.push(entry.path()),
                Ok(kind) if kind.is_file() => {
                    total += entry.metadata().map(|m| m.len()).unwrap_or(0);
                }
                _ => {}
            }
        }
    }
    total
}

impl ImageStore {
    /// Opens the store under `images_dir` with the safe defaults for the
    /// `host` image, and (re)generates the host image's `/etc` and the
    /// shared identity files.
    pub fn open(images_dir: &Path, hostname: &str) -> Result<Self, SandboxError> {
        Self::open_with(images_dir, hostname, HostImageOptions::default())
    }

    /// As [`ImageStore::open`], with options for the `host` image.
    pub fn open_with(
        images_dir: &Path,
        hostname: &str,
        host: HostImageOptions,
    ) -> Result<Self, SandboxError> {
        let store = Self {
            root: images_dir.to_owned(),
            host,
        };
        fs::create_dir_all(&store.root).context(|| format!("create {}", store.root.display()))?;
        store.generate(hostname)?;
        store.remove_half_made_trees();
        store.add_optional_mount_points();
        Ok(store)
    }

    /// Removes what a build or import interrupted by a crash, a kill or a
    /// power cut left (`images/<name>/rootfs.new`, its package list),
    /// unless another process is building that image now (it holds the
    /// image's lock). Mounts below a tree are detached before it goes.
    fn remove_half_made_trees(&self) {
        let Ok(entries) = fs::read_dir(&self.root) else {
            return;
        };
        for entry in entries.flatten() {
            let dir = entry.path();
            let staging = dir.join("rootfs.new");
            if fs::symlink_metadata(&staging).is_err() {
                continue;
            }
            let Ok(Some(_lock)) = BuildLock::try_take(&dir) else {
                continue;
            };
            tracing::warn!(
                "removing {} (an image build or import was interrupted)",
                staging.display()
            );
            if let Err(e) = half_made::remove_half_made(&staging) {
                tracing::error!("{e}");
            }
            let _ = fs::remove_file(dir.join("packages.new"));
        }
    }

    /// Gives images installed by an older version the mount points added
    /// since (the same resolution inside the image as at import). An image
    /// where one cannot be made (say, `/mnt` is a link) keeps working for
    /// containers that do not need it.
    fn add_optional_mount_points(&self) {
        for image in self.list().iter().filter(|i| i.name != HOST_IMAGE) {
            let Ok(root) = open_image_root(&image.path) else {
                continue;
            };
            // An image prepared before a mount point was renamed gets the
            // new one, if it is otherwise whole (so it was the store's).
            for (old, new) in RENAMED_MOUNT_POINT_DIRS {
                let before_rename = MOUNT_POINT_DIRS
                    .iter()
                    .map(|dir| if dir == new { old } else { dir });
                if verify_mount_points(&root).is_err()
                    && verify_mount_points_in(&root, before_rename).is_ok()
                {
                    if let Err(e) = make_dir_in(&root, new) {
                        tracing::warn!(image = %image.name, "cannot add /{new}: {e}");
                    }
                }
            }
            // Only images the store prepared (an image put in by hand is
            // refused at start, and never written to).
            if verify_mount_points(&root).is_err() {
                continue;
            }
            for dir in OPTIONAL_MOUNT_POINT_DIRS {
                if let Err(e) = make_dir_in(&root, dir) {
                    tracing::warn!(image = %image.name, "cannot add /{dir}: {e}");
                }
            }
            prepare_sudo_target(&root, &image.name);
        }
    }

    fn identity_dir(&self) -> PathBuf {
        self.root.join(".identity")
    }

    fn host_etc(&self) -> PathBuf {
        self.root.join(HOST_IMAGE).join("etc")
    }

    /// The host image's generated `/usr/local` (`bin/sudo`).
    fn host_usr_local(&self) -> PathBuf {
        self.root.join(HOST_IMAGE).join("usr-local")
    }

    /// Builds the generated directories next to the old ones and swaps them
    /// in, so a crash never leaves a half-written `/etc`.
    ///
    /// Both are made again only when what they are made from changed (the
    /// host's allow-listed `/etc`, the host name): a fingerprint of that is
    /// kept beside them. So opening the store costs a walk of ~800 `lstat`s
    /// rather than a copy, and a store opened while containers run (a
    /// one-shot `exec` beside `serve`) never swaps a directory under them.
    fn generate(&self, hostname: &str) -> Result<(), SandboxError> {
        let fingerprint = host_etc_fingerprint(hostname);
        let stamp = self.root.join(HOST_IMAGE).join("etc.fingerprint");
        if self.host_etc().is_dir()
            && self.identity_dir().is_dir()
            && self.host_usr_local().is_dir()
            && fs::read_to_string(&stamp).is_ok_and(|s| s == fingerprint)
        {
            return Ok(());
        }
        let identity = self.identity_dir();
        let staging = self.root.join(".identity.new");
        let _ = fs::remove_dir_all(&staging);
        fs::create_dir_all(&staging).context(|| format!("create {}", staging.display()))?;
        for (name, contents) in identity_files(hostname) {
            fs::write(staging.join(name), contents).context(|| format!("write {name}"))?;
        }
        write_program(&staging.join(SUDO_NAME), SUDO_SCRIPT)?;
        replace_dir(&staging, &identity)?;

        // The host image's /usr/local: shellgate's programs alone (over the
        // host's own, when that is exposed).
        let usr_local = self.host_usr_local();
        let staging = self.root.join(HOST_IMAGE).join("usr-local.new");
        let _ = fs::remove_dir_all(&staging);
        let bin = staging.join("bin");
        fs::create_dir_all(&bin).context(|| format!("create {}", bin.display()))?;
        write_program(&bin.join(SUDO_NAME), SUDO_SCRIPT)?;
        replace_dir(&staging, &usr_local)?;

        let etc = self.host_etc();
        let staging = self.root.join(HOST_IMAGE).join("etc.new");
        let _ = fs::remove_dir_all(&staging);
        fs::create_dir_all(&staging).context(|| format!("create {}", staging.display()))?;
        for name in HOST_ETC_ALLOWLIST {
            copy_public(&Path::new("/etc").join(name), &staging.join(name))
                .context(|| format!("copy /etc/{name} into the host image"))?;
        }
        for (name, contents) in identity_files(hostname) {
            fs::write(staging.join(name), contents).context(|| format!("write {name}"))?;
        }
        let profile = staging.join("profile");
        if let Some(quicker) = fs::read_to_string(&profile)
            .ok()
            .and_then(|text| quicker_profile(&text))
        {
            fs::write(&profile, quicker).context(|| "write profile".into())?;
        }
        fs::write(staging.join("hostname"), format!("{hostname}\n"))
            .context(|| "write hostname".into())?;
        replace_dir(&staging, &etc)?;
        let new_stamp = stamp.with_extension("new");
        fs::write(&new_stamp, &fingerprint)
            .and_then(|()| fs::rename(&new_stamp, &stamp))
            .context(|| "write the host image's fingerprint".into())
    }

    /// Resolves an image name to a root specification.
    pub fn resolve(&self, name: &str) -> Result<ResolvedImage, SandboxError> {
        self.resolve_revision(name, None)
    }

    /// The current revision of an image (`None` for `host`).
    pub fn current_revision(&self, name: &str) -> Option<String> {
        if name == HOST_IMAGE {
            return None;
        }
        Some(
            self.details(name)
                .revision
                .unwrap_or_else(|| FIRST_REVISION.to_owned()),
        )
    }

    /// Where a revision's tree is: the current one, or a retired one.
    pub(crate) fn revision_rootfs(
        &self,
        name: &str,
        revision: Option<&str>,
    ) -> Result<PathBuf, SandboxError> {
        let current = self.rootfs(name)?;
        let Some(revision) = revision else {
            return Ok(current);
        };
        if self.current_revision(name).as_deref() == Some(revision) {
            return Ok(current);
        }
        if !revision.chars().all(|c| c.is_ascii_alphanumeric()) || revision.is_empty() {
            return Err(SandboxError::Setup(format!(
                "bad image revision {revision:?}"
            )));
        }
        let retired = self
            .root
            .join(name)
            .join("retired")
            .join(revision)
            .join("rootfs");
        if retired.is_dir() {
            Ok(retired)
        } else {
            // Removed by hand: the current tree is the best there is.
            tracing::warn!(image = %name, "revision {revision} is gone; using the current one");
            Ok(current)
        }
    }

    /// Removes retired revisions no container uses any more, and the
    /// directory of a deleted image (no current tree) once none is left.
    pub fn prune_retired(&self, in_use: &dyn Fn(&str, &str) -> bool) {
        let Ok(entries) = fs::read_dir(&self.root) else {
            return;
        };
        for entry in entries.flatten() {
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if name == HOST_IMAGE || name.starts_with('.') || validate_image_name(&name).is_err() {
                continue;
            }
            let dir = entry.path();
            let retired = dir.join("retired");
            for revision in fs::read_dir(&retired).into_iter().flatten().flatten() {
                let id = revision.file_name().to_string_lossy().into_owned();
                if !in_use(&name, &id) {
                    let _ = fs::remove_dir_all(revision.path());
                }
            }
            // A deleted image (retired trees, no current one) whose last
            // retired tree went: its directory goes, unless a build or
            // import of the name holds it now (it makes a new image).
            if dir.join("rootfs").exists() || !retired.is_dir() {
                continue;
            }
            if fs::remove_dir(&retired).is_ok() {
                if let Ok(Some(_lock)) = BuildLock::try_take(&dir) {
                    if !dir.join("rootfs").exists() && !dir.join("rootfs.new").exists() {
                        let _ = fs::remove_dir_all(&dir);
                    }
                }
            }
        }
    }

    /// [`resolve`](Self::resolve) for a container made from `revision`.
    pub fn resolve_revision(
        &self,
        name: &str,
        revision: Option<&str>,
    ) -> Result<ResolvedImage, SandboxError> {
        if name == HOST_IMAGE {
            let mut binds = Vec::new();
            let mut symlinks = Vec::new();
            for dir in HOST_SYSTEM_DIRS {
                let path = Path::new(dir);
                match fs::symlink_metadata(path) {
                    Ok(meta) if meta.file_type().is_symlink() => {
                        let target = fs::read_link(path).context(|| format!("readlink {dir}"))?;
                        symlinks.push((dir.to_string(), target.to_string_lossy().into_owned()));
                    }
                    Ok(meta) if meta.is_dir() => binds.push((path.to_owned(), dir.to_string())),
                    _ => {}
                }
            }
            symlinks.push(("/var/tmp".to_owned(), "/tmp".to_owned()));
            // /etc is a directory of the data directory: an overlay of it
            // (unlike a bind) does not print that path in the mount table.
            // So is /usr/local, which covers the host's (hidden) or lies
            // over it (exposed): `sudo` is in every container's. Both are
            // directories of the host image's, so one overlay of that shows
            // both (every superblock costs kernel memory in every memory
            // cgroup); the host's /usr/local beneath takes one of its own.
            let show = |dir: &Path, target: &str| {
                let name = dir.file_name().unwrap_or_default().to_string_lossy();
                (name.into_owned(), target.to_owned())
            };
            let mut shows = vec![show(&self.host_etc(), "/etc")];
            let mut layers = Vec::new();
            if self.host.expose_usr_local && Path::new(USR_LOCAL).is_dir() {
                layers.push(Layer {
                    sources: vec![self.host_usr_local(), PathBuf::from(USR_LOCAL)],
                    name: "usr-local".to_owned(),
                    shows: vec![(String::new(), USR_LOCAL.to_owned())],
                });
            } else {
                shows.push(show(&self.host_usr_local(), USR_LOCAL));
            }
            layers.insert(
                0,
                Layer {
                    sources: vec![self.root.join(HOST_IMAGE)],
                    name: HOST_IMAGE.to_owned(),
                    shows,
                },
            );
            return Ok(ResolvedImage {
                root: RootSpec::HostBinds {
                    binds,
                    symlinks,
                    layers,
                },
                file_binds: Vec::new(),
                program_binds: Vec::new(),
                // Its root is a tmpfs the helper makes the mount point in.
                workspace: true,
                env: Vec::new(),
                workdir: None,
            });
        }
        let rootfs = self.revision_rootfs(name, revision)?;
        let image = match open_image_root(&rootfs) {
            Ok(image) => image,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(SandboxError::ImageNotFound(name.to_owned()))
            }
            Err(e) => return Err(SandboxError::io(format!("open image {name}"), e)),
        };
        if !exists_in_root(&image, "bin", true) && !exists_in_root(&image, "usr/bin", true) {
            return Err(SandboxError::ImageNotFound(name.to_owned()));
        }
        // Mount points were made when the image was imported or built;
        // here they are only checked, never made: a container start writes
        // nothing into an image.
        verify_mount_points(&image).map_err(|problem| {
            SandboxError::Setup(format!(
                "image {name} cannot be used: {problem}; import or build it again"
            ))
        })?;
        let identity = self.identity_dir();
        let file_binds = identity_files("")
            .iter()
            .map(|(file, _)| (identity.join(file), format!("/etc/{file}")))
            .collect();
        // `sudo` goes where the image has a real directory and a plain file
        // (or nothing) for it; an image where a link is in the way (the
        // bind would follow it) still serves, without.
        let sudo = format!("{SUDO_DIR}/{SUDO_NAME}");
        let program_binds = match verify_plain_file(&image, &sudo) {
            Ok(()) => vec![(identity.join(SUDO_NAME), format!("/{sudo}"))],
            Err(problem) => {
                tracing::warn!(image = %name, "containers get no sudo: {problem}");
                Vec::new()
            }
        };
        let workspace = verify_mount_points_in(&image, &[WORKSPACE_MOUNT_POINT]).is_ok();
        let config = run_config(&rootfs);
        Ok(ResolvedImage {
            env: config.env,
            workdir: config.working_dir,
            root: RootSpec::Overlay {
                lower: rootfs,
                upper: PathBuf::new(),
                work: PathBuf::new(),
            },
            file_binds,
            program_binds,
            workspace,
        })
    }

    /// Whether a file may be bound over `path` (under `/etc`) in `image`'s
    /// containers: the `host` image's `/etc` is read-only, so the file must
    /// already be there; other images get it made in their writable layer.
    pub fn can_cover_etc_file(&self, image: &str, path: &str) -> bool {
        if image != HOST_IMAGE {
            return true;
        }
        path.strip_prefix("/etc/").is_some_and(|rest| {
            self.host_etc()
                .join(rest)
                .symlink_metadata()
                .is_ok_and(|m| m.is_file())
        })
    }

    /// The rootfs directory of a named image (which may not exist yet).
    pub fn rootfs(&self, name: &str) -> Result<PathBuf, SandboxError> {
        validate_image_name(name)?;
        Ok(self.root.join(name).join("rootfs"))
    }

    /// What `info.json` says of an image (nothing, if it is missing).
    pub fn details(&self, name: &str) -> ImageDetails {
        fs::read(self.root.join(name).join("info.json"))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    /// Records the runtimes found in an image (`runtimes::record`, at the
    /// end of a build, and `image verify`).
    pub fn set_runtimes(
        &self,
        name: &str,
        runtimes: std::collections::BTreeMap<String, String>,
    ) -> Result<(), SandboxError> {
        validate_image_name(name)?;
        let details = ImageDetails {
            runtimes,
            ..self.details(name)
        };
        self.write_details(name, &details)
    }

    pub(crate) fn write_details(
        &self,
        name: &str,
        details: &ImageDetails,
    ) -> Result<(), SandboxError> {
        let dir = self.root.join(name);
        fs::create_dir_all(&dir).context(|| format!("create {}", dir.display()))?;
        let staging = dir.join("info.json.new");
        let bytes = serde_json::to_vec_pretty(details)
            .map_err(|e| SandboxError::Setup(format!("encode image details: {e}")))?;
        fs::write(&staging, bytes).context(|| "write info.json".into())?;
        fs::rename(&staging, dir.join("info.json")).context(|| "install info.json".into())
    }

    /// Whether an image of that name can be used now.
    pub fn exists(&self, name: &str) -> bool {
        name == HOST_IMAGE || self.rootfs(name).is_ok_and(|rootfs| rootfs.is_dir())
    }

    /// Every image: `host` and each directory with a rootfs.
    /// The images of the store in `images_dir`, read without opening it
    /// (nothing is generated or written: `image list` beside a server).
    pub fn list_in(images_dir: &Path) -> Vec<ImageInfo> {
        Self {
            root: images_dir.to_owned(),
            host: HostImageOptions::default(),
        }
        .list()
    }

    pub fn list(&self) -> Vec<ImageInfo> {
        let mut images = vec![ImageInfo {
            name: HOST_IMAGE.to_owned(),
            path: PathBuf::from("/"),
            details: self.details(HOST_IMAGE),
        }];
        if let Ok(entries) = fs::read_dir(&self.root) {
            let mut named: Vec<ImageInfo> = entries
                .flatten()
                .filter_map(|entry| {
                    let name = entry.file_name().to_str()?.to_owned();
                    let rootfs = entry.path().join("rootfs");
                    (name != HOST_IMAGE && !name.starts_with('.') && rootfs.is_dir()).then(|| {
                        ImageInfo {
                            details: self.details(&name),
                            name,
                            path: rootfs,
                        }
                    })
                })
                .collect();
            named.sort_by(|a, b| a.name.cmp(&b.name));
            images.extend(named);
        }
        images
    }
}

/// Held while an image is built or imported (an exclusive `flock`).
pub(crate) struct BuildLock {
    _file: fs::File,
}

impl BuildLock {
    /// The lock of the image whose directory is `dir`, if no other process
    /// holds it (`Ok(None)`: one does).
    fn try_take(dir: &Path) -> Result<Option<Self>, SandboxError> {
        let file = Self::open(dir)?;
        // SAFETY: flock on a descriptor owned here.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Ok(None);
        }
        Ok(Some(Self { _file: file }))
    }

    /// The lock of the image whose directory is `dir`, once the process
    /// holding it (another build of the same image) lets it go. Blocks:
    /// call it off the async workers.
    fn take_waiting(dir: &Path) -> Result<Self, SandboxError> {
        let file = Self::open(dir)?;
        loop {
            // SAFETY: flock on a descriptor owned here.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(Self { _file: file });
            }
            let error = std::io::Error::last_os_error();
            if error.kind() != std::io::ErrorKind::Interrupted {
                return Err(SandboxError::Setup(format!(
                    "lock {}/.lock: {error}",
                    dir.display()
                )));
            }
        }
    }

    fn open(dir: &Path) -> Result<fs::File, SandboxError> {
        fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(".lock"))
            .context(|| format!("open {}/.lock", dir.display()))
    }
}

/// Progress of a long image operation: a fraction and what is happening.
pub type Progress<'a> = &'a mut (dyn FnMut(f64, &str) + Send);

impl ImageStore {
    /// Imports an image: an OCI image layout (a directory or its tar), a
    /// `docker save`/`podman save` archive (see [`oci`]), or else a root
    /// file system tarball (any compression tar detects).
    ///
    /// GNU tar refuses absolute and `..` member names; a rootfs tarball is
    /// still trusted as much as the operator who imports it. An OCI
    /// image's layers are checked member by member (see [`oci`]).
    pub async fn import(&self, name: &str, tarball: &Path) -> Result<ImageInfo, SandboxError> {
        let source = tarball.to_owned();
        let format = tokio::task::spawn_blocking(move || oci::detect(&source))
            .await
            .map_err(|e| SandboxError::Setup(format!("inspect the source: {e}")))?;
        if format.is_some() {
            return self
                .import_oci(name, tarball, oci::OciLimits::default())
                .await;
        }
        let (staging, target, _lock) = self.staging(name)?;
        let output = tokio::process::Command::new("tar")
            .arg("--extract")
            .arg("--numeric-owner")
            .arg("--preserve-permissions")
            .arg("--file")
            .arg(tarball)
            .arg("--directory")
            .arg(&staging)
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .context(|| "run tar".into())?;
        if !output.status.success() {
            let _ = fs::remove_dir_all(&staging);
            return Err(SandboxError::InvalidRequest {
                param: "tarball",
                message: format!(
                    "cannot extract {}: {}",
                    tarball.display(),
                    String::from_utf8_lossy(&output.stderr).trim()
                ),
            });
        }
        // Looked up inside the image: its links lead nowhere on the host.
        let has_shell = open_image_root(&staging).is_ok_and(|image| {
            ["bin/sh", "usr/bin/sh", "bin/bash"]
                .iter()
                .any(|p| exists_in_root(&image, p, false))
        });
        if !has_shell {
            let _ = fs::remove_dir_all(&staging);
            return Err(SandboxError::InvalidRequest {
                param: "tarball",
                message: format!(
                    "{} holds no /bin/sh: not a root file system",
                    tarball.display()
                ),
            });
        }
        self.install(name, &staging, &target, ImageDetails::default())
    }

    /// Imports an OCI image layout or archive, or a docker archive (see
    /// [`oci`]) within `limits`.
    pub async fn import_oci(
        &self,
        name: &str,
        source: &Path,
        limits: oci::OciLimits,
    ) -> Result<ImageInfo, SandboxError> {
        self.import_oci_of(name, "", source, limits).await
    }

    /// [`Self::import_oci`] as image `name` of `project` (`""`: the
    /// operator's, every project's): only its containers are made from
    /// it, and a name another project or the operator holds is refused.
    pub async fn import_oci_of(
        &self,
        name: &str,
        project: &str,
        source: &Path,
        limits: oci::OciLimits,
    ) -> Result<ImageInfo, SandboxError> {
        let owner = (!project.is_empty()).then(|| project.to_owned());
        if owner.is_some() {
            Self::check_commit_name(name)?;
        }
        let (staging, target, _lock) = self.staging(name)?;
        // Under the image's lock: no other install of the name between the
        // check and the install.
        if owner.is_some() && self.exists(name) && self.details(name).project != owner {
            let _ = half_made::remove_half_made(&staging);
            return Err(SandboxError::Conflict(format!(
                "an image named {name:?} exists and is not this project's: choose another name"
            )));
        }
        let (source_path, staging_path) = (source.to_owned(), staging.clone());
        let imported =
            tokio::task::spawn_blocking(move || oci::import(&source_path, &staging_path, &limits))
                .await
                .map_err(|e| SandboxError::Setup(format!("import the image: {e}")));
        let (imported, format) = match imported.and_then(|r| r) {
            Ok(done) => done,
            Err(e) => {
                let _ = half_made::remove_half_made(&staging);
                return Err(e);
            }
        };
        let checked = open_image_root(&staging)
            .map_err(|e| SandboxError::io(format!("open {}", staging.display()), e))
            .and_then(|image| {
                let has_shell = ["bin/sh", "usr/bin/sh", "bin/bash"]
                    .iter()
                    .any(|p| exists_in_root(&image, p, false));
                if !has_shell {
                    return Err(SandboxError::InvalidRequest {
                        param: "source",
                        message: format!(
                            "{} holds no /bin/sh: containers run commands with a shell",
                            source.display()
                        ),
                    });
                }
                // Commands start there: it exists in the image, as a
                // container runtime would make it.
                if let Some(dir) = &imported.config.working_dir {
                    let dir = dir.trim_matches('/');
                    if !dir.is_empty() {
                        make_dir_in(&image, dir)?;
                    }
                }
                Ok(())
            });
        if let Err(e) = checked {
            let _ = half_made::remove_half_made(&staging);
            return Err(e);
        }
        let details = ImageDetails {
            source_format: Some(format.name().to_owned()),
            config: Some(imported.config),
            neutralised: Some(imported.neutralised),
            project: owner,
            ..ImageDetails::default()
        };
        self.install(name, &staging, &target, details)
    }

    /// Refuses a name no commit may take: an invalid one, or one of
    /// shellgate's own images (`host`, and those its recipes build).
    pub fn check_commit_name(name: &str) -> Result<(), SandboxError> {
        validate_image_name(name).map_err(|_| SandboxError::InvalidRequest {
            param: "name",
            message: format!(
                "invalid image name {name:?}: 1 to 64 letters, digits, '.', '_' or '-', \
                 not starting with '.'"
            ),
        })?;
        if name == HOST_IMAGE || recipe::RECIPES.iter().any(|r| r.name == name) {
            return Err(SandboxError::InvalidRequest {
                param: "name",
                message: format!("{name:?} is one of shellgate's own images: choose another name"),
            });
        }
        Ok(())
    }

    /// Installs image `name` of `project` (a new one, or a new revision of
    /// the project's own; `""`: the operator's) made of the image tree `base`, the overlay upper
    /// layer `upper` applied over it (see [`commit`]), and `home` as its
    /// sandbox user's home: what every container made from it starts its
    /// home with. The owners in `upper` and `home` are the container's own
    /// ids. Its run configuration is `config` (a build's `ENV`, `WORKDIR`,
    /// `USER`), or else the base's. Blocking (it copies trees).
    pub fn commit(
        &self,
        name: &str,
        project: &str,
        base: &Path,
        upper: &Path,
        home: &Path,
        config: Option<shellgate_sandbox_api::image::ImageConfig>,
    ) -> Result<ImageInfo, SandboxError> {
        Self::check_commit_name(name)?;
        let (staging, target, _lock) = self.staging(name)?;
        // Under the image's lock: no other commit of the name between the
        // check and the install.
        // An empty project is the operator's (`image build --dockerfile`):
        // an image every project may use, as an imported one.
        let owner = (!project.is_empty()).then(|| project.to_owned());
        if self.exists(name) && self.details(name).project != owner {
            let _ = half_made::remove_half_made(&staging);
            return Err(SandboxError::Conflict(format!(
                "an image named {name:?} exists and is not this project's: choose another name"
            )));
        }
        let made = commit::link_tree(base, &staging)
            .and_then(|()| commit::apply_upper(upper, &staging))
            .and_then(|()| commit::install_home(home, &staging, SANDBOX_HOME));
        if let Err(e) = made {
            let _ = half_made::remove_half_made(&staging);
            return Err(e);
        }
        let config = config.unwrap_or_else(|| run_config(base));
        let details = ImageDetails {
            source_format: Some(COMMITTED_FORMAT.to_owned()),
            config: (config != Default::default()).then_some(config),
            project: owner,
            ..ImageDetails::default()
        };
        self.install(name, &staging, &target, details)
    }

    /// The home containers of image `name` at `revision` start with: the
    /// sandbox user's home in the tree of an image committed from a
    /// container (`None` for any other image: its home starts empty).
    pub fn home_seed(&self, name: &str, revision: Option<&str>) -> Option<PathBuf> {
        if self.details(name).source_format.as_deref() != Some(COMMITTED_FORMAT) {
            return None;
        }
        let rootfs = self.revision_rootfs(name, revision).ok()?;
        let home = rootfs.join(SANDBOX_HOME.trim_start_matches('/'));
        fs::read_dir(&home).ok()?.next().is_some().then_some(home)
    }

    /// A fresh staging directory next to where image `name` will live,
    /// refused while another process builds or imports the image.
    fn staging(&self, name: &str) -> Result<(PathBuf, PathBuf, BuildLock), SandboxError> {
        let parent = self.image_dir(name)?;
        // One build or import of an image at a time, across processes (a
        // CLI beside a server): they share the staging directory.
        let lock = match BuildLock::try_take(&parent)? {
            Some(lock) => lock,
            None => {
                return Err(SandboxError::InvalidRequest {
                    param: "name",
                    message: format!("image {name} is being built or imported by another process"),
                })
            }
        };
        let (staging, target) = self.staging_locked(name)?;
        Ok((staging, target, lock))
    }

    /// Image `name`'s build lock, once any other process building or
    /// importing it is done: a second `image build` of an image waits for
    /// the first, then finds it built, rather than failing.
    pub(crate) async fn wait_for_build_lock(
        &self,
        name: &str,
        progress: Progress<'_>,
    ) -> Result<BuildLock, SandboxError> {
        let parent = self.image_dir(name)?;
        if let Some(lock) = BuildLock::try_take(&parent)? {
            return Ok(lock);
        }
        progress(
            0.0,
            &format!("shellgate: waiting for another process's build or import of image {name}"),
        );
        tokio::task::spawn_blocking(move || BuildLock::take_waiting(&parent))
            .await
            .map_err(|e| SandboxError::Setup(format!("wait for the image's build lock: {e}")))?
    }

    /// The directory image `name` lives in, made if missing.
    fn image_dir(&self, name: &str) -> Result<PathBuf, SandboxError> {
        if name == HOST_IMAGE {
            return Err(SandboxError::InvalidRequest {
                param: "name",
                message: "`host` is built in".into(),
            });
        }
        let target = self.rootfs(name)?;
        let parent = target
            .parent()
            .map(Path::to_owned)
            .unwrap_or_else(|| self.root.clone());
        fs::create_dir_all(&parent).context(|| format!("create {}", parent.display()))?;
        Ok(parent)
    }

    /// A fresh staging directory for image `name`, whose build lock the
    /// caller holds: `(staging, target)`.
    fn staging_locked(&self, name: &str) -> Result<(PathBuf, PathBuf), SandboxError> {
        let target = self.rootfs(name)?;
        let parent = self.image_dir(name)?;
        let staging = parent.join("rootfs.new");
        half_made::remove_half_made(&staging)?;
        fs::create_dir(&staging).context(|| format!("create {}", staging.display()))?;
        Ok((staging, target))
    }

    /// Swaps a finished staging directory in as the image's root, with
    /// what is known of how it was made (`details`; its size and time are
    /// filled in here).
    fn install(
        &self,
        name: &str,
        staging: &Path,
        target: &Path,
        details: ImageDetails,
    ) -> Result<ImageInfo, SandboxError> {
        // Nothing the builder mounted stays in an installed image (its
        // mount namespace is gone with it; this is for a builder that got
        // out of it).
        if let Err(e) =
            half_made::unmount_below(staging).and_then(|()| prepare_mount_points(staging))
        {
            let _ = half_made::remove_half_made(staging);
            return Err(e);
        }
        let details = ImageDetails {
            size_bytes: Some(tree_size(staging)),
            // An image installed from another node's archive keeps its
            // time and revision; a new one gets them now.
            created_at: details.created_at.or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .ok()
                    .map(|d| d.as_secs() as i64)
            }),
            runtimes: Default::default(),
            revision: details.revision.clone().or_else(|| Some(new_revision())),
            ..details
        };
        self.retire_current(name, target)?;
        let config = config_path(target);
        match &details.config {
            Some(run) => {
                let staged = config.with_extension("new");
                let bytes = serde_json::to_vec(run)
                    .map_err(|e| SandboxError::Setup(format!("encode the image's config: {e}")))?;
                fs::write(&staged, bytes)
                    .and_then(|()| fs::rename(&staged, &config))
                    .context(|| format!("write {}", config.display()))?;
            }
            None => {
                let _ = fs::remove_file(&config);
            }
        }
        replace_dir(staging, target)?;
        self.write_details(name, &details)?;
        Ok(ImageInfo {
            name: name.to_owned(),
            path: target.to_owned(),
            details,
        })
    }
}

impl ImageStore {
    /// Retires image `name`'s current tree (at `target`), if it has one.
    /// The tree may be some containers' lower layer: it moves to
    /// `retired/<revision>` (containers made from it keep it;
    /// `prune_retired` removes it when none is left) rather than going
    /// from under them. The caller holds the image's build lock.
    fn retire_current(&self, name: &str, target: &Path) -> Result<(), SandboxError> {
        if !target.is_dir() {
            return Ok(());
        }
        let old = self
            .current_revision(name)
            .unwrap_or_else(|| FIRST_REVISION.to_owned());
        let retired = self.root.join(name).join("retired").join(&old);
        let _ = fs::remove_dir_all(&retired);
        fs::create_dir_all(&retired).context(|| format!("create {}", retired.display()))?;
        fs::rename(target, retired.join("rootfs"))
            .context(|| format!("retire {}", target.display()))?;
        // Its run configuration goes with it (see `run_config`).
        let _ = fs::rename(config_path(target), config_path(&retired.join("rootfs")));
        Ok(())
    }

    /// Project image `name`'s details and current tree, with its build
    /// lock: held, no build, import or delete changes the tree (the
    /// caller reads it whole, then drops the lock).
    pub(crate) fn export_tree(
        &self,
        name: &str,
    ) -> Result<(ImageDetails, PathBuf, BuildLock), SandboxError> {
        Self::check_commit_name(name)?;
        if !self.exists(name) {
            return Err(SandboxError::ImageNotFound(name.to_owned()));
        }
        let dir = self.image_dir(name)?;
        let Some(lock) = BuildLock::try_take(&dir)? else {
            return Err(SandboxError::Conflict(format!(
                "image {name} is being built, imported or deleted"
            )));
        };
        let details = self.details(name);
        if details.project.is_none() || !self.exists(name) {
            return Err(SandboxError::ImageNotFound(name.to_owned()));
        }
        Ok((details, self.rootfs(name)?, lock))
    }

    /// Installs project image `name` as another node made it: `details`
    /// (its project and revision kept), its tree filled by `unpack` into
    /// the staging directory. Nothing is done if the image is at that
    /// revision already; another project's image of the name is a
    /// conflict. Blocking: it unpacks a tree.
    pub fn install_unpacked(
        &self,
        name: &str,
        details: ImageDetails,
        unpack: impl FnOnce(&Path) -> Result<(), SandboxError>,
    ) -> Result<ImageInfo, SandboxError> {
        Self::check_commit_name(name)?;
        if details.project.is_none() || details.revision.is_none() {
            return Err(SandboxError::InvalidRequest {
                param: "image",
                message: format!("image {name}'s details name no project or revision"),
            });
        }
        let dir = self.image_dir(name)?;
        let lock = BuildLock::take_waiting(&dir)?;
        if self.exists(name) {
            let held = self.details(name);
            if held.project != details.project {
                return Err(SandboxError::Conflict(format!(
                    "an image named {name:?} exists here and is another project's"
                )));
            }
            if held.revision == details.revision {
                return Ok(ImageInfo {
                    name: name.to_owned(),
                    path: self.rootfs(name)?,
                    details: held,
                });
            }
        }
        let (staging, target) = self.staging_locked(name)?;
        if let Err(e) = unpack(&staging) {
            let _ = half_made::remove_half_made(&staging);
            return Err(e);
        }
        let installed = self.install(name, &staging, &target, details);
        drop(lock);
        installed
    }

    /// Deletes image `name` of `project`: from now on no container is
    /// made from it and no list shows it. Its tree is retired, not
    /// removed: containers made from it (running or stopped) and snapshots
    /// taken of them keep it until the last of them goes
    /// (`prune_retired`). Refused for shellgate's own images and the
    /// operator's (`project` must own it: another's is not found), and
    /// while a build or import of the name runs.
    pub fn remove(&self, name: &str, project: &str) -> Result<(), SandboxError> {
        Self::check_commit_name(name)?;
        if !self.exists(name) || project.is_empty() {
            return Err(SandboxError::ImageNotFound(name.to_owned()));
        }
        let dir = self.image_dir(name)?;
        let Some(_lock) = BuildLock::try_take(&dir)? else {
            return Err(SandboxError::Conflict(format!(
                "image {name} is being built or imported: delete it when that ends"
            )));
        };
        // Under the lock: the owner checked is the owner of the tree retired.
        match self.details(name).project {
            Some(owner) if owner == project => {}
            Some(_) => return Err(SandboxError::ImageNotFound(name.to_owned())),
            None => {
                return Err(SandboxError::InvalidRequest {
                    param: "name",
                    message: format!(
                        "image {name} is the operator's (every project's): it is not deleted \
                         through the API"
                    ),
                })
            }
        }
        if !self.exists(name) {
            return Err(SandboxError::ImageNotFound(name.to_owned()));
        }
        let target = self.rootfs(name)?;
        self.retire_current(name, &target)?;
        // Gone from the list now (it lists directories with a rootfs);
        // its details go after, so a crash between leaves nothing listed.
        let _ = fs::remove_file(dir.join("info.json"));
        Ok(())
    }
}

/// Where the run configuration of the tree at `rootfs` is kept: beside it
/// (`<name>/config.json`, `<name>/retired/<revision>/config.json`), a small
/// file a container start reads rather than the whole `info.json`.
fn config_path(rootfs: &Path) -> PathBuf {
    rootfs.with_file_name("config.json")
}

/// The run configuration of the tree at `rootfs` (none: an image that is
/// not an OCI import).
fn run_config(rootfs: &Path) -> shellgate_sandbox_api::image::ImageConfig {
    fs::read(config_path(rootfs))
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// A fresh revision id: the time in nanoseconds and the process, in hex.
fn new_revision() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{nanos:x}{:x}", std::process::id())
}

/// Walks below a directory descriptor, following nothing: no symbolic link,
/// no `..` above it, no `/proc` magic link.
const STRICTLY_BENEATH: u64 = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;

/// Opens an image's root directory (a path of the store, itself trusted).
fn open_image_root(root: &Path) -> io::Result<OwnedFd> {
    let path = root
        .to_str()
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    openat2(
        libc::AT_FDCWD,
        path,
        libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
        0,
        0,
    )
}

/// Whether `path` exists in the image, symbolic links resolved as the
/// container would see them (inside the image, never on the host); with
/// `follow_last` false, a link as the last component counts as present.
fn exists_in_root(image: &OwnedFd, path: &str, follow_last: bool) -> bool {
    let flags = libc::O_PATH | if follow_last { 0 } else { libc::O_NOFOLLOW };
    openat2(
        image.as_raw_fd(),
        path,
        flags,
        0,
        RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
    )
    .is_ok()
}

/// Opens the directory `name` (one component) right below `dir`.
fn open_dir_beneath(dir: &OwnedFd, name: &str) -> io::Result<OwnedFd> {
    openat2(
        dir.as_raw_fd(),
        name,
        libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
        0,
        STRICTLY_BENEATH,
    )
}

/// `fstatat(2)` of `name` in `dir`, not following a link.
fn stat_beneath(dir: &OwnedFd, name: &str) -> io::Result<libc::stat> {
    let name = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: `name` is a C string and `st` has room for a stat.
    crate::sys::cvt(unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    // SAFETY: fstatat succeeded, so it filled `st`.
    Ok(unsafe { st.assume_init() })
}

/// The refusal of an image whose `shown` path cannot serve as a mount
/// point: it `problem`, and must be a real `kind` inside the image.
fn unsafe_image(shown: &str, problem: &str, kind: &str) -> SandboxError {
    SandboxError::InvalidRequest {
        param: "tarball",
        message: format!(
            "the image's {shown} {problem}: containers mount over it, so it must be a real \
             {kind} inside the image (a symbolic link there could lead outside it)"
        ),
    }
}

/// Opens (making what is missing) the directory `path` of the image,
/// refusing any component that is a symbolic link or not a directory.
fn make_dir_in(image: &OwnedFd, path: &str) -> Result<OwnedFd, SandboxError> {
    let mut current = image
        .try_clone()
        .context(|| "duplicate the image descriptor".into())?;
    let mut shown = String::new();
    for part in path.split('/') {
        shown.push('/');
        shown.push_str(part);
        let refuse = |e: io::Error| match e.raw_os_error() {
            Some(libc::ELOOP) | Some(libc::ENOTDIR) | Some(libc::EXDEV) => {
                unsafe_image(&shown, "is a symbolic link or not a directory", "directory")
            }
            _ => SandboxError::io(format!("open the image's {shown}"), e),
        };
        let next = match open_dir_beneath(&current, part) {
            Ok(next) => next,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let name = CString::new(part)
                    .map_err(|_| unsafe_image(&shown, "has a NUL byte in its name", "directory"))?;
                // SAFETY: `name` is a C string; mkdirat creates one entry
                // right inside `current`, whatever the name holds.
                let made = unsafe { libc::mkdirat(current.as_raw_fd(), name.as_ptr(), 0o755) };
                if made < 0 {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::AlreadyExists {
                        return Err(SandboxError::io(format!("create the image's {shown}"), e));
                    }
                }
                open_dir_beneath(&current, part).map_err(refuse)?
            }
            Err(e) => return Err(refuse(e)),
        };
        current = next;
    }
    Ok(current)
}

/// Makes `<dir>/<name>` a plain file (what a container binds its generated
/// file over): a link, device, pipe or socket there is replaced by an empty
/// file; a directory is refused. `dir_fd` is the image's `dir`.
fn make_plain_file_in(dir_fd: &OwnedFd, dir: &str, name: &str) -> Result<(), SandboxError> {
    let shown = format!("/{dir}/{name}");
    let c_name = CString::new(name)
        .map_err(|_| unsafe_image(&shown, "has a NUL byte in its name", "file"))?;
    match stat_beneath(dir_fd, name) {
        Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFREG => return Ok(()),
        Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => {
            return Err(unsafe_image(&shown, "is a directory", "file"))
        }
        Ok(_) => {
            // SAFETY: `c_name` is a C string; unlinkat removes the entry
            // itself (never what a link points to) right inside `dir_fd`.
            let removed = unsafe { libc::unlinkat(dir_fd.as_raw_fd(), c_name.as_ptr(), 0) };
            if removed < 0 {
                return Err(SandboxError::io(
                    format!("remove the image's {shown}"),
                    io::Error::last_os_error(),
                ));
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(SandboxError::io(format!("inspect the image's {shown}"), e)),
    }
    openat2(
        dir_fd.as_raw_fd(),
        name,
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
        0o644,
        STRICTLY_BENEATH,
    )
    .map(drop)
    .context(|| format!("create the image's {shown}"))
}

/// Creates what a container mounts over in an image root, at import or
/// build. The image is owned by host root, which has no id inside a
/// container, so even the container's root cannot create these later.
///
/// Everything resolves inside the image: a mount point whose path has a
/// symbolic link in it is refused (the container's mount would follow it,
/// and so would this function if it used paths), an identity file that is
/// a link is replaced by a plain file.
fn prepare_mount_points(root: &Path) -> Result<(), SandboxError> {
    let image = open_image_root(root).context(|| format!("open {}", root.display()))?;
    for dir in MOUNT_POINT_DIRS.iter().chain(OPTIONAL_MOUNT_POINT_DIRS) {
        make_dir_in(&image, dir)?;
    }
    let etc = make_dir_in(&image, "etc")?;
    for (file, _) in identity_files("") {
        make_plain_file_in(&etc, "etc", file)?;
    }
    prepare_sudo_target(&image, &root.display().to_string());
    Ok(())
}

/// Makes the place `sudo` is bound over (a real `/usr/local/bin`, a plain
/// file in it), if the image lets it: one whose `/usr/local` is a link
/// serves without (said in the log; [`ImageStore::resolve`] checks again).
fn prepare_sudo_target(image: &OwnedFd, shown: &str) {
    let made =
        make_dir_in(image, SUDO_DIR).and_then(|dir| make_plain_file_in(&dir, SUDO_DIR, SUDO_NAME));
    if let Err(e) = made {
        tracing::warn!(image = %shown, "no place for sudo: {e}");
    }
}

/// Writes a generated program (world-readable and executable).
fn write_program(path: &Path, contents: &str) -> Result<(), SandboxError> {
    fs::write(path, contents)
        .and_then(|()| fs::set_permissions(path, fs::Permissions::from_mode(0o755)))
        .context(|| format!("write {}", path.display()))
}

/// Checks, without changing anything, that an image's mount points are
/// real directories and its identity files plain files, reached without a
/// symbolic link. Says what is wrong otherwise.
fn verify_mount_points(image: &OwnedFd) -> Result<(), String> {
    verify_mount_points_in(image, MOUNT_POINT_DIRS)
}

/// [`verify_mount_points`] with these mount point directories.
fn verify_mount_points_in<'a>(
    image: &OwnedFd,
    dirs: impl IntoIterator<Item = &'a &'a str>,
) -> Result<(), String> {
    for dir in dirs {
        openat2(
            image.as_raw_fd(),
            dir,
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
            STRICTLY_BENEATH,
        )
        .map_err(|e| format!("/{dir} is missing, a symbolic link or not a directory ({e})"))?;
    }
    for (file, _) in identity_files("") {
        verify_plain_file(image, &format!("etc/{file}"))?;
    }
    Ok(())
}

/// Checks that `path` (relative to the image root) is a plain file reached
/// without a symbolic link.
fn verify_plain_file(image: &OwnedFd, path: &str) -> Result<(), String> {
    let fd = openat2(
        image.as_raw_fd(),
        path,
        libc::O_PATH | libc::O_NOFOLLOW,
        0,
        STRICTLY_BENEATH,
    )
    .map_err(|e| format!("/{path} is missing or reached through a link ({e})"))?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: `fd` is open and `st` has room for a stat.
    let ret = unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) };
    if ret < 0 {
        return Err(format!("stat /{path}: {}", io::Error::last_os_error()));
    }
    // SAFETY: fstat succeeded, so it filled `st`.
    let st = unsafe { st.assume_init() };
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(format!("/{path} is not a plain file"));
    }
    Ok(())
}

/// Image names: 1 to 64 letters, digits, `.`, `_`, `-`, not starting with `.`.
pub fn validate_image_name(name: &str) -> Result<(), SandboxError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(SandboxError::InvalidRequest {
            param: "image",
            message: format!("invalid image name {name:?}: use letters, digits, '.', '_' or '-'"),
        })
    }
}

fn replace_dir(staging: &Path, target: &Path) -> Result<(), SandboxError> {
    let old = target.with_extension("old");
    let _ = fs::remove_dir_all(&old);
    if target.exists() {
        fs::rename(target, &old).context(|| format!("move {} aside", target.display()))?;
    }
    fs::rename(staging, target).context(|| format!("install {}", target.display()))?;
    let _ = fs::remove_dir_all(&old);
    Ok(())
}

/// Copies `source` to `dest` recursively, keeping symlinks as links and
/// skipping anything not readable by everyone (private keys, shadow files).
/// What the host image's `/etc` and the identity files are made from: the
/// host name, this binary's identity files, and the allow-listed host
/// entries: each directory's and regular file's path, mode, size, inode and
/// modification time, and each symbolic link's name. A link is not looked
/// at: making, removing or retargeting one (a new link renamed over the
/// old) changes its directory's time, and most of the ~800 entries are
/// links (`alternatives`, `ssl/certs`), so the walk costs ~100 `lstat`s.
fn host_etc_fingerprint(hostname: &str) -> String {
    use crate::sys::Fnv1a as Fnv;
    use std::hash::Hasher;
    fn stat(path: &Path, hash: &mut Fnv) -> Option<fs::Metadata> {
        let meta = fs::symlink_metadata(path).ok()?;
        hash.write(path.as_os_str().as_encoded_bytes());
        for value in [
            u64::from(meta.mode()),
            meta.size(),
            meta.ino(),
            meta.mtime() as u64,
            meta.mtime_nsec() as u64,
        ] {
            hash.write(&value.to_le_bytes());
        }
        Some(meta)
    }
    fn walk_dir(dir: &Path, hash: &mut Fnv) {
        let mut entries: Vec<_> = fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| (e.file_name(), e.file_type().ok()))
            .collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, kind) in entries {
            let path = dir.join(&name);
            match kind {
                Some(kind) if kind.is_symlink() => {
                    hash.write(path.as_os_str().as_encoded_bytes());
                }
                Some(kind) if kind.is_dir() => {
                    if stat(&path, hash).is_some() {
                        walk_dir(&path, hash);
                    }
                }
                _ => {
                    stat(&path, hash);
                }
            }
        }
    }
    let mut hash = Fnv::default();
    hash.write(hostname.as_bytes());
    // What the copy changes (a new rule makes the copy again).
    hash.write(EUID_TEST.as_bytes());
    for (name, contents) in identity_files(hostname) {
        hash.write(name.as_bytes());
        hash.write(contents.as_bytes());
    }
    hash.write(SUDO_SCRIPT.as_bytes());
    for name in HOST_ETC_ALLOWLIST {
        let path = Path::new("/etc").join(name);
        if let Some(meta) = stat(&path, &mut hash) {
            if meta.is_dir() {
                walk_dir(&path, &mut hash);
            } else if meta.file_type().is_symlink() {
                // A top-level link (`localtime`): where it leads counts.
                if let Ok(target) = fs::read_link(&path) {
                    hash.write(target.as_os_str().as_encoded_bytes());
                }
            }
        }
    }
    format!("{:016x}", hash.finish())
}

fn copy_public(source: &Path, dest: &Path) -> io::Result<()> {
    let meta = match fs::symlink_metadata(source) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let world_readable = meta.mode() & 0o004 != 0;
    if meta.file_type().is_symlink() {
        symlink(fs::read_link(source)?, dest)
    } else if meta.is_dir() {
        if !world_readable || meta.mode() & 0o001 == 0 {
            return Ok(());
        }
        fs::create_dir(dest)?;
        fs::set_permissions(dest, fs::Permissions::from_mode(meta.mode() & 0o755))?;
        for entry in fs::read_dir(source)? {
            let entry = entry?;
            copy_public(&entry.path(), &dest.join(entry.file_name()))?;
        }
        Ok(())
    } else if meta.is_file() && world_readable {
        fs::copy(source, dest)?;
        fs::set_permissions(dest, fs::Permissions::from_mode(meta.mode() & 0o755))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_build_lock_held_elsewhere_is_refused_to_a_try_and_awaited_by_a_wait() {
        let scratch = crate::scratch::Scratch::new("build-lock");
        let first = BuildLock::try_take(scratch.path()).unwrap().expect("free");
        assert!(BuildLock::try_take(scratch.path()).unwrap().is_none());
        let dir = scratch.path().to_owned();
        let (took, waited) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let lock = BuildLock::take_waiting(&dir);
            let _ = took.send(());
            lock.map(drop)
        });
        // The waiter takes the lock only once the first holder lets it go:
        // it has not sent while `first` lives, whenever it runs.
        assert!(waited.try_recv().is_err());
        drop(first);
        waiter.join().unwrap().unwrap();
        assert!(waited.try_recv().is_ok());
        assert!(BuildLock::try_take(scratch.path()).unwrap().is_some());
    }

    #[test]
    fn only_debian_12s_profile_is_changed_and_only_its_uid_test() {
        let quicker = quicker_profile(DEBIAN_PROFILE).unwrap();
        assert_eq!(quicker.matches(EUID_TEST).count(), 2, "{quicker}");
        assert!(!quicker.contains("$(id -u)\" -eq"));
        assert_eq!(
            quicker.replace(EUID_TEST, ID_TEST),
            DEBIAN_PROFILE,
            "nothing else differs"
        );
        assert_eq!(quicker_profile(&format!("{DEBIAN_PROFILE}\n")), None);
        assert_eq!(quicker_profile("export PATH=/bin\n"), None);
    }

    #[test]
    fn the_quicker_profile_sets_the_same_path_as_debians() {
        // Run both under sh (dash: no EUID, so `id -u`) and bash, as the
        // current user: the same PATH comes out.
        let quicker = quicker_profile(DEBIAN_PROFILE).unwrap();
        for shell in ["/bin/sh", "/bin/bash"] {
            let run = |profile: &str| {
                std::process::Command::new(shell)
                    .args(["-c", &format!("{profile}\necho \"$PATH\"")])
                    .env_clear()
                    .output()
                    .unwrap()
                    .stdout
            };
            assert_eq!(run(&quicker), run(DEBIAN_PROFILE), "{shell}");
        }
    }

    #[test]
    fn host_etc_is_filtered() {
        let dir = std::env::temp_dir().join(format!("shellgate-image-test-{}", std::process::id()));
        let store = ImageStore::open(&dir, "sandbox").unwrap();
        let etc = store.host_etc();
        assert!(etc.join("passwd").exists());
        assert!(!etc.join("shadow").exists());
        assert!(!etc.join("sudoers").exists());
        assert!(!etc.join("ssh").exists());
        let passwd = fs::read_to_string(etc.join("passwd")).unwrap();
        // Exactly the generated accounts: no host user leaks in.
        assert_eq!(
            passwd.lines().collect::<Vec<_>>(),
            [
                "root:x:0:0:root:/root:/bin/bash",
                "user:x:1000:1000:user:/home/user:/bin/bash",
                "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin",
            ]
        );
        let group = fs::read_to_string(etc.join("group")).unwrap();
        assert!(group.contains("\nuser:x:1000:\n"), "{group}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_home_mount_point_is_the_sandbox_users_home() {
        let home = SANDBOX_HOME.trim_start_matches('/');
        assert!(MOUNT_POINT_DIRS.contains(&home), "{MOUNT_POINT_DIRS:?}");
        assert_eq!(
            crate::sandbox_user::SANDBOX_WORKSPACE.trim_start_matches('/'),
            WORKSPACE_MOUNT_POINT
        );
        assert!(RENAMED_MOUNT_POINT_DIRS
            .iter()
            .all(|(_, new)| MOUNT_POINT_DIRS.contains(new)));
    }

    #[test]
    fn an_image_prepared_with_the_old_home_gets_the_new_one_when_the_store_opens() {
        let store_dir = Scratch::new("renamed-store");
        let rootfs = store_dir.0.join("old").join("rootfs");
        fs::create_dir_all(rootfs.join("bin")).unwrap();
        fs::write(rootfs.join("bin/sh"), "").unwrap();
        prepare_mount_points(&rootfs).unwrap();
        // As an image prepared before the rename: /home/sandbox, no /home/user.
        fs::rename(rootfs.join("home/user"), rootfs.join("home/sandbox")).unwrap();
        assert!(verify(&rootfs).is_err());
        // And an image put in by hand, missing more: left as it is.
        let by_hand = store_dir.0.join("by-hand").join("rootfs");
        fs::create_dir_all(by_hand.join("home/sandbox")).unwrap();

        let store = ImageStore::open(&store_dir.0, "sandbox").unwrap();
        assert_eq!(verify(&rootfs), Ok(()));
        assert!(rootfs.join("home/user").is_dir());
        assert!(store.resolve("old").is_ok());
        assert!(!by_hand.join("home/user").exists());
    }

    /// Installs a one-file image `name` of `project` (`""`: the operator's).
    fn install_tiny(store: &ImageStore, name: &str, project: &str) -> ImageInfo {
        let (staging, target, _lock) = store.staging(name).unwrap();
        fs::create_dir_all(staging.join("bin")).unwrap();
        fs::write(staging.join("bin/sh"), "").unwrap();
        let details = ImageDetails {
            project: (!project.is_empty()).then(|| project.to_owned()),
            ..ImageDetails::default()
        };
        store.install(name, &staging, &target, details).unwrap()
    }

    #[test]
    fn a_deleted_image_is_unlisted_at_once_and_its_tree_goes_with_its_last_user() {
        let store_dir = Scratch::new("delete-store");
        let store = ImageStore::open(&store_dir.0, "sandbox").unwrap();
        let made = install_tiny(&store, "mine", "proj_a");
        install_tiny(&store, "shared", "");
        let revision = made.details.revision.clone().unwrap();

        for (name, project) in [("mine", "proj_b"), ("mine", ""), ("missing", "proj_a")] {
            assert!(
                matches!(
                    store.remove(name, project),
                    Err(SandboxError::ImageNotFound(_))
                ),
                "{name} of {project:?}"
            );
        }
        for built_in in ["shared", "host"] {
            let refused = store.remove(built_in, "proj_a");
            assert!(
                matches!(
                    refused,
                    Err(SandboxError::InvalidRequest { .. } | SandboxError::ImageNotFound(_))
                ),
                "{built_in}: {refused:?}"
            );
            assert!(store.exists(built_in));
        }
        {
            let _building = BuildLock::try_take(&store_dir.0.join("mine")).unwrap();
            assert!(matches!(
                store.remove("mine", "proj_a"),
                Err(SandboxError::Conflict(_))
            ));
        }

        store.remove("mine", "proj_a").unwrap();
        assert!(!store.exists("mine"));
        assert!(store.list().iter().all(|i| i.name != "mine"));
        // A container made from it still resolves its revision.
        let resolved = store.resolve_revision("mine", Some(&revision)).unwrap();
        assert!(matches!(
            resolved.root,
            RootSpec::Overlay { ref lower, .. } if lower.ends_with(format!("retired/{revision}/rootfs"))
        ));
        store.prune_retired(&|image, r| image == "mine" && r == revision);
        assert!(
            store_dir.0.join("mine/retired").join(&revision).is_dir(),
            "in use"
        );
        store.prune_retired(&|_, _| false);
        assert!(!store_dir.0.join("mine").exists(), "the last user went");
        assert!(store.exists("shared"), "another image is left alone");
        install_tiny(&store, "mine", "proj_b");
        assert!(store.exists("mine"), "the name is free again");
    }

    /// A scratch image root with a shell, removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Self {
            let dir = std::env::temp_dir().join(format!(
                "shellgate-image-{name}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(dir.join("bin")).unwrap();
            fs::write(dir.join("bin/sh"), "").unwrap();
            Scratch(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn verify(root: &Path) -> Result<(), String> {
        verify_mount_points(&open_image_root(root).unwrap())
    }

    #[test]
    fn mount_points_are_made_inside_the_image_and_then_only_verified() {
        let image = Scratch::new("plain");
        assert!(verify(&image.0).is_err(), "an unprepared image passed");
        prepare_mount_points(&image.0).unwrap();
        assert_eq!(verify(&image.0), Ok(()));
        for dir in MOUNT_POINT_DIRS {
            assert!(image.0.join(dir).is_dir(), "{dir}");
        }
        // Preparing twice changes nothing and keeps existing files.
        fs::write(image.0.join("etc/hosts"), "kept").unwrap();
        prepare_mount_points(&image.0).unwrap();
        assert_eq!(
            fs::read_to_string(image.0.join("etc/hosts")).unwrap(),
            "kept"
        );
    }

    #[test]
    fn a_mount_point_reached_through_a_link_is_refused() {
        let outside = Scratch::new("outside");
        for (link, target) in [
            ("etc", outside.0.clone()),
            ("etc", PathBuf::from("/etc")),
            ("mnt", outside.0.clone()),
            ("home", PathBuf::from("../../../..")),
        ] {
            let image = Scratch::new("linked");
            symlink(&target, image.0.join(link)).unwrap();
            match prepare_mount_points(&image.0) {
                Err(SandboxError::InvalidRequest { param, message }) => {
                    assert_eq!(param, "tarball");
                    assert!(
                        message.contains(&format!("the image's /{link} is a symbolic link")),
                        "{message}"
                    );
                }
                other => panic!("{link} -> {}: {other:?}", target.display()),
            }
            assert!(verify(&image.0).is_err());
        }
        // Nothing was made where the links pointed.
        let made: Vec<_> = fs::read_dir(&outside.0)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(made, ["bin"]);
    }

    #[test]
    fn linked_identity_files_become_plain_files_and_directories_are_refused() {
        let outside = Scratch::new("victim");
        fs::write(outside.0.join("secret"), "host secret").unwrap();
        let image = Scratch::new("identity");
        fs::create_dir(image.0.join("etc")).unwrap();
        symlink(outside.0.join("secret"), image.0.join("etc/resolv.conf")).unwrap();
        symlink("../../../../../etc/passwd", image.0.join("etc/passwd")).unwrap();
        symlink("hosts", image.0.join("etc/hosts")).unwrap(); // a loop
        prepare_mount_points(&image.0).unwrap();
        for file in ["passwd", "group", "hosts", "resolv.conf"] {
            let meta = fs::symlink_metadata(image.0.join("etc").join(file)).unwrap();
            assert!(meta.is_file(), "{file}");
        }
        assert_eq!(
            fs::read_to_string(outside.0.join("secret")).unwrap(),
            "host secret"
        );
        assert_eq!(verify(&image.0), Ok(()));

        let image = Scratch::new("identity-dir");
        fs::create_dir_all(image.0.join("etc/group")).unwrap();
        assert!(matches!(
            prepare_mount_points(&image.0),
            Err(SandboxError::InvalidRequest { message, .. }) if message.contains("/etc/group is a directory")
        ));
    }

    #[test]
    fn lookups_of_an_image_stay_inside_it() {
        let image = Scratch::new("inside");
        // An absolute link resolves inside the image, as in a container.
        symlink("/bin", image.0.join("usr")).unwrap();
        let root = open_image_root(&image.0).unwrap();
        assert!(exists_in_root(&root, "usr/sh", true));
        assert!(!exists_in_root(&root, "usr/bash", true));
        symlink("/etc/passwd", image.0.join("bin/passwd-link")).unwrap();
        assert!(exists_in_root(&root, "bin/passwd-link", false));
        assert!(!exists_in_root(&root, "bin/passwd-link", true));
    }

    #[test]
    fn image_names_are_checked() {
        assert!(validate_image_name("debian-12").is_ok());
        assert!(validate_image_name("../x").is_err());
        assert!(validate_image_name(".identity").is_err());
        assert!(validate_image_name("").is_err());
    }
}
