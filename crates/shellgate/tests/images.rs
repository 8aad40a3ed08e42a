//! Images: a rootfs tarball imported with `shellgate image import` runs as an
//! overlay root, with `sh` standing in when there is no bash.

mod common;

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
        &["exec", "--image", "tiny", "--", "ls /bin | head -3; id -u; cat /etc/passwd | cut -d: -f1; echo made > /mnt/data/f; cat /mnt/data/f; ls /usr 2>&1; true"],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let stdout = json["output"][0]["stdout"].as_str().unwrap();
    assert_eq!(json["output"][0]["outcome"]["exit_code"], 0, "{json}");
    assert!(
        stdout.starts_with("busybox\ncat\necho\n1000\nroot\nsandbox\nnobody\nmade\n"),
        "{stdout}"
    );
    // No host directory leaks into an image root.
    assert!(stdout.contains("No such file or directory"), "{stdout}");
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
    let output = shellgate(
        &data,
        &[
            "exec",
            "--image",
            "debian-12-slim",
            "--",
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
    assert!(stdout.ends_with("42\nsandbox\n/mnt/data\n"), "{stdout}");
    let unknown = shellgate(&data, &["image", "build", "windows-95"]);
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no recipe"));
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
            "--",
            "cat /etc/resolv.conf /etc/passwd /etc/hosts",
        ],
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let stdout = json["output"][0]["stdout"].as_str().unwrap();
    assert!(stdout.starts_with("# shellgate: no network"), "{json}");
    assert!(stdout.contains("sandbox:x:1000"), "{json}");
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
    let output = shellgate(&data, &["exec", "--image", "byhand", "--", "echo ran"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("import or build it again"), "{stderr}");
    for made in ["proc", "dev", "tmp", "mnt", "home", "etc/passwd"] {
        assert!(!rootfs.join(made).exists(), "{made} was created");
    }
}
