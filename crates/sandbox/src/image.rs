//! Images: what a container's read-only root is made of.
//!
//! - `host` (the default, no set-up): the host's system directories
//!   (`/usr` and the `/bin`, `/lib*`, `/sbin` links or directories) bound
//!   read-only, and an `/etc` *copied* from the host through an allow-list
//!   (only world-readable files: never `shadow`, `sudoers`, ssh keys or
//!   anything private). Nothing of `/root`, `/home`, `/srv`, `/var`, `/opt`,
//!   working trees or the server's data directory exists inside.
//! - any other name: a directory `images/<name>/rootfs` in the data
//!   directory, built by `shellgate image build` (mmdebstrap) or imported
//!   from a rootfs tarball; it becomes the lower layer of an overlay.
//!
//! Both get generated `passwd`, `group`, `hosts` and `resolv.conf` files, so
//! the sandbox user exists and no host name or resolver leaks in.
//!
//! The host's `/usr/local` (tools installed by hand on the host, outside the
//! package manager) is hidden behind an empty directory unless
//! [`HostImageOptions::expose_usr_local`] asks for it.

use std::fs;
use std::io;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{IoContext, SandboxError};
use crate::protocol::RootSpec;

/// Name of the image made of the host's own system directories.
pub const HOST_IMAGE: &str = "host";

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

/// Host directory whose contents the `host` image hides by default.
const USR_LOCAL: &str = "/usr/local";

/// Identity files every image gets.
fn identity_files(hostname: &str) -> [(&'static str, String); 4] {
    [
        (
            "passwd",
            "root:x:0:0:root:/root:/bin/bash\n\
             sandbox:x:1000:1000:sandbox:/home/sandbox:/bin/bash\n\
             nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
                .to_owned(),
        ),
        ("group", "root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n".to_owned()),
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
}

/// One entry of `shellgate image list`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ImageInfo {
    pub name: String,
    pub path: PathBuf,
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
        Ok(store)
    }

    fn identity_dir(&self) -> PathBuf {
        self.root.join(".identity")
    }

    fn host_etc(&self) -> PathBuf {
        self.root.join(HOST_IMAGE).join("etc")
    }

    /// Builds the generated directories next to the old ones and swaps them
    /// in, so a crash never leaves a half-written `/etc`.
    fn generate(&self, hostname: &str) -> Result<(), SandboxError> {
        let identity = self.identity_dir();
        let staging = self.root.join(".identity.new");
        let _ = fs::remove_dir_all(&staging);
        fs::create_dir_all(&staging).context(|| format!("create {}", staging.display()))?;
        for (name, contents) in identity_files(hostname) {
            fs::write(staging.join(name), contents).context(|| format!("write {name}"))?;
        }
        replace_dir(&staging, &identity)?;

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
        fs::write(staging.join("hostname"), format!("{hostname}\n"))
            .context(|| "write hostname".into())?;
        replace_dir(&staging, &etc)
    }

    /// Resolves an image name to a root specification.
    pub fn resolve(&self, name: &str) -> Result<ResolvedImage, SandboxError> {
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
            let layers = vec![(self.host_etc(), "/etc".to_owned())];
            let hidden = if self.host.expose_usr_local {
                Vec::new()
            } else {
                vec![USR_LOCAL.to_owned()]
            };
            return Ok(ResolvedImage {
                root: RootSpec::HostBinds {
                    binds,
                    symlinks,
                    layers,
                    hidden,
                },
                file_binds: Vec::new(),
            });
        }
        let rootfs = self.rootfs(name)?;
        if !rootfs.join("bin").exists() && !rootfs.join("usr/bin").exists() {
            return Err(SandboxError::ImageNotFound(name.to_owned()));
        }
        // Images placed in the store by hand (or by an older version) get
        // their mount points here; it is a few stat calls when present.
        prepare_mount_points(&rootfs).context(|| format!("prepare image {name}"))?;
        let identity = self.identity_dir();
        let file_binds = identity_files("")
            .iter()
            .map(|(file, _)| (identity.join(file), format!("/etc/{file}")))
            .collect();
        Ok(ResolvedImage {
            root: RootSpec::Overlay {
                lower: rootfs,
                upper: PathBuf::new(),
                work: PathBuf::new(),
            },
            file_binds,
        })
    }

    /// The rootfs directory of a named image (which may not exist yet).
    pub fn rootfs(&self, name: &str) -> Result<PathBuf, SandboxError> {
        validate_image_name(name)?;
        Ok(self.root.join(name).join("rootfs"))
    }

    /// Every image: `host` and each directory with a rootfs.
    pub fn list(&self) -> Vec<ImageInfo> {
        let mut images = vec![ImageInfo {
            name: HOST_IMAGE.to_owned(),
            path: PathBuf::from("/"),
        }];
        if let Ok(entries) = fs::read_dir(&self.root) {
            let mut named: Vec<ImageInfo> = entries
                .flatten()
                .filter_map(|entry| {
                    let name = entry.file_name().to_str()?.to_owned();
                    let rootfs = entry.path().join("rootfs");
                    (name != HOST_IMAGE && !name.starts_with('.') && rootfs.is_dir())
                        .then_some(ImageInfo { name, path: rootfs })
                })
                .collect();
            named.sort_by(|a, b| a.name.cmp(&b.name));
            images.extend(named);
        }
        images
    }
}

/// A recipe `shellgate image build` knows.
pub struct Recipe {
    pub name: &'static str,
    pub suite: &'static str,
    pub packages: &'static [&'static str],
}

/// `debian-12`: Debian 12 with the languages OpenAI's hosted containers
/// list, as close as Debian 12 has them (Node.js 18 and Go 1.19 rather than
/// 22 and 1.23). `debian-12-slim`: a minimal Debian 12 with Python.
pub const RECIPES: &[Recipe] = &[
    Recipe {
        name: "debian-12-slim",
        suite: "bookworm",
        packages: &["bash", "ca-certificates", "coreutils", "python3-minimal"],
    },
    Recipe {
        name: "debian-12",
        suite: "bookworm",
        packages: &[
            "bash",
            "ca-certificates",
            "coreutils",
            "curl",
            "file",
            "findutils",
            "git",
            "gcc",
            "g++",
            "make",
            "golang-go",
            "jq",
            "less",
            "nodejs",
            "npm",
            "openjdk-17-jdk-headless",
            "php-cli",
            "procps",
            "python3",
            "python3-pip",
            "python3-venv",
            "ruby",
            "sqlite3",
            "unzip",
            "xz-utils",
            "zip",
        ],
    },
];

/// mmdebstrap's stage messages and how far along the build each one is.
const BUILD_STAGES: &[(&str, f64)] = &[
    ("I: chroot architecture", 0.02),
    ("I: running apt-get update", 0.05),
    ("I: downloading packages", 0.10),
    ("I: extracting archives", 0.40),
    ("I: installing essential packages", 0.50),
    ("I: installing remaining packages", 0.60),
    ("I: cleaning package lists", 0.95),
    ("I: success", 1.0),
];

/// Progress of a long image operation: a fraction and what is happening.
pub type Progress<'a> = &'a mut (dyn FnMut(f64, &str) + Send);

impl ImageStore {
    /// Builds an image from a recipe with `mmdebstrap`, reporting progress.
    pub async fn build(
        &self,
        name: &str,
        progress: Progress<'_>,
    ) -> Result<ImageInfo, SandboxError> {
        use tokio::io::AsyncBufReadExt;
        let recipe = RECIPES.iter().find(|r| r.name == name).ok_or_else(|| {
            SandboxError::InvalidRequest {
                param: "name",
                message: format!(
                    "no recipe for {name:?}; known: {}",
                    RECIPES
                        .iter()
                        .map(|r| r.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        })?;
        let (staging, target) = self.staging(name)?;
        let mut child = tokio::process::Command::new("mmdebstrap")
            .arg("--variant=minbase")
            .arg("--verbose")
            .arg(format!("--include={}", recipe.packages.join(",")))
            .arg(recipe.suite)
            .arg(&staging)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                SandboxError::Setup(format!(
                    "cannot run mmdebstrap (apt-get install mmdebstrap): {e}"
                ))
            })?;
        let mut tail: Vec<String> = Vec::new();
        if let Some(stderr) = child.stderr.take() {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            let mut fraction = 0.0;
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some((_, at)) = BUILD_STAGES
                    .iter()
                    .find(|(prefix, _)| line.starts_with(prefix))
                {
                    fraction = *at;
                }
                progress(fraction, &line);
                tail.push(line);
                if tail.len() > 20 {
                    tail.remove(0);
                }
            }
        }
        let status = child
            .wait()
            .await
            .context(|| "wait for mmdebstrap".into())?;
        if !status.success() {
            let _ = fs::remove_dir_all(&staging);
            return Err(SandboxError::Setup(format!(
                "mmdebstrap failed:\n{}",
                tail.join("\n")
            )));
        }
        self.install(name, &staging, &target)
    }

    /// Imports a root file system tarball (any compression tar detects).
    ///
    /// GNU tar refuses absolute and `..` member names; the tarball is still
    /// trusted as much as the operator who imports it.
    pub async fn import(&self, name: &str, tarball: &Path) -> Result<ImageInfo, SandboxError> {
        let (staging, target) = self.staging(name)?;
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
        let has_shell = ["bin/sh", "usr/bin/sh", "bin/bash"]
            .iter()
            .any(|p| staging.join(p).symlink_metadata().is_ok());
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
        self.install(name, &staging, &target)
    }

    /// A fresh staging directory next to where image `name` will live.
    fn staging(&self, name: &str) -> Result<(PathBuf, PathBuf), SandboxError> {
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
        let staging = parent.join("rootfs.new");
        let _ = fs::remove_dir_all(&staging);
        fs::create_dir(&staging).context(|| format!("create {}", staging.display()))?;
        Ok((staging, target))
    }

    /// Swaps a finished staging directory in as the image's root.
    fn install(
        &self,
        name: &str,
        staging: &Path,
        target: &Path,
    ) -> Result<ImageInfo, SandboxError> {
        prepare_mount_points(staging).context(|| format!("prepare {}", staging.display()))?;
        replace_dir(staging, target)?;
        Ok(ImageInfo {
            name: name.to_owned(),
            path: target.to_owned(),
        })
    }
}

/// Creates what a container mounts over in an image root. The image is owned
/// by host root, which has no id inside a container, so even the container's
/// root cannot create these later.
fn prepare_mount_points(root: &Path) -> io::Result<()> {
    for dir in ["proc", "dev", "tmp", "mnt/data", "home/sandbox", "etc"] {
        fs::create_dir_all(root.join(dir))?;
    }
    for file in ["etc/passwd", "etc/group", "etc/hosts", "etc/resolv.conf"] {
        let path = root.join(file);
        // A symlink here (resolv.conf often is one) would be followed by the
        // bind mount: replace it with a plain file.
        if path.symlink_metadata().is_ok_and(|m| !m.is_file()) {
            fs::remove_file(&path)?;
        }
        if !path.exists() {
            fs::write(&path, "")?;
        }
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
    fn host_etc_is_filtered() {
        let dir = std::env::temp_dir().join(format!("shellgate-image-test-{}", std::process::id()));
        let store = ImageStore::open(&dir, "sandbox").unwrap();
        let etc = store.host_etc();
        assert!(etc.join("passwd").exists());
        assert!(!etc.join("shadow").exists());
        assert!(!etc.join("sudoers").exists());
        assert!(!etc.join("ssh").exists());
        let passwd = fs::read_to_string(etc.join("passwd")).unwrap();
        assert!(passwd.contains("sandbox:x:1000"));
        assert!(
            !passwd.contains("/root:/bin/bash\nuser"),
            "host users must not leak"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn image_names_are_checked() {
        assert!(validate_image_name("debian-12").is_ok());
        assert!(validate_image_name("../x").is_err());
        assert!(validate_image_name(".identity").is_err());
        assert!(validate_image_name("").is_err());
    }
}
