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
