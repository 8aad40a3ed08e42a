//! The image builder through `shellgate image build NAME --dockerfile`: a
//! build's root steps write anywhere in the image (as the build sandbox's
//! own root, with none of the host's capabilities), `COPY` reads the
//! context, the image keeps `ENV` and `WORKDIR`, and a failed build
//! installs nothing.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::symlink;
use std::process::Command;

use crate::common::{TempDir, BINARY};

/// A root file system of static busybox with the applets the builder and
/// these tests use, imported as image `tiny` into `data`.
fn import_busybox(dir: &std::path::Path, data: &std::path::Path) {
    let rootfs = dir.join("rootfs");
    let bin = rootfs.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(rootfs.join("etc")).unwrap();
    std::fs::copy("/bin/busybox", bin.join("busybox"))
        .expect("busybox-static is installed (apt-get install busybox-static)");
    for applet in [
        "sh", "ls", "cat", "echo", "id", "touch", "mkdir", "rm", "sleep", "cp", "chown", "dirname",
        "grep", "mount", "stat", "head",
    ] {
        symlink("busybox", bin.join(applet)).unwrap();
    }
    let tarball = dir.join("rootfs.tar");
    let tar = Command::new("tar")
        .arg("-cf")
        .arg(&tarball)
        .arg("-C")
        .arg(&rootfs)
        .arg(".")
        .status()
        .unwrap();
    assert!(tar.success());
    let imported = shellgate(
        data,
        &["image", "import", "tiny", tarball.to_str().unwrap()],
    );
    assert!(imported.status.success(), "{}", stderr(&imported));
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

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_dockerfile_build_runs_root_steps_and_its_image_keeps_them() {
    let dir = TempDir::new("image-build");
    let data = dir.path().join("data");
    import_busybox(dir.path(), &data);
    let context = dir.path().join("context");
    std::fs::create_dir_all(context.join("conf")).unwrap();
    std::fs::write(context.join("hello.txt"), "hello from the context\n").unwrap();
    std::fs::write(context.join("conf/app.ini"), "[app]\n").unwrap();
    std::fs::write(
        context.join("Dockerfile"),
        "FROM tiny\n\
         ENV GREETING=\"hi there\"\n\
         # Root of the build sandbox: /etc, /bin and a chown are all its own.\n\
         RUN id -u > /etc/built-by && echo \"$GREETING\" > /etc/greeting \\\n    && rm /bin/sleep && mkdir -p /opt/app && chown 1000:1000 /opt/app\n\
         # No host capability: mounting is refused, and only the build set is effective.\n\
         RUN ! mount -t tmpfs none /mnt 2>/dev/null && grep CapEff /proc/self/status > /etc/caps\n\
         WORKDIR /opt/app\n\
         COPY hello.txt ./\n\
         COPY --chown=1000:1000 conf /etc/app/\n",
    )
    .unwrap();
    let built = shellgate(
        &data,
        &[
            "image",
            "build",
            "built",
            "--dockerfile",
            context.join("Dockerfile").to_str().unwrap(),
        ],
    );
    let log = stderr(&built);
    assert!(built.status.success(), "{log}");
    assert!(log.contains("#2 RUN id -u"), "{log}");
    assert!(log.contains("committing image built"), "{log}");

    let output = shellgate(
        &data,
        &[
            "exec",
            "--image",
            "built",
            "--json",
            "-c",
            "cat /etc/built-by /etc/greeting /etc/caps; echo \"$GREETING\"; pwd; \
             ls /bin/sleep 2>&1 || echo no-sleep; cat hello.txt; id -u; touch /etc/mine 2>/dev/null || echo etc-read-only",
        ],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let stdout = json["output"][0]["stdout"].as_str().unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "0", "the steps ran as the build's root: {stdout}");
    assert_eq!(lines[1], "hi there", "{stdout}");
    // CAP_CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, SETGID, SETUID: 0xfb.
    assert_eq!(lines[2], "CapEff:\t00000000000000fb", "{stdout}");
    assert_eq!(lines[3], "hi there", "the image keeps its ENV: {stdout}");
    assert_eq!(
        lines[4], "/opt/app",
        "the image keeps its WORKDIR: {stdout}"
    );
    assert!(
        lines[5].contains("no-sleep") || lines[6] == "no-sleep",
        "{stdout}"
    );
    assert!(stdout.contains("hello from the context\n"), "{stdout}");
    // Owners as the steps set them, in the image's tree (container ids;
    // a container shows ids outside its own range as `nobody`).
    let rootfs = data.join("sandbox/images/built/rootfs");
    let owner = |path: &str| {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(rootfs.join(path)).unwrap();
        (meta.uid(), meta.gid())
    };
    assert_eq!(owner("opt/app"), (1000, 1000));
    assert_eq!(owner("opt/app/hello.txt"), (0, 0));
    assert_eq!(owner("etc/app/app.ini"), (1000, 1000));
    assert_eq!(owner("etc/built-by"), (0, 0));
    assert!(!rootfs.join("bin/sleep").exists(), "the whiteout applied");
    // Containers of the image run as the sandbox user, as every container.
    assert!(stdout.ends_with("1000\netc-read-only\n"), "{stdout}");
}

#[test]
fn a_failed_or_refused_build_installs_nothing() {
    let dir = TempDir::new("image-build-fail");
    let data = dir.path().join("data");
    import_busybox(dir.path(), &data);
    let dockerfile = dir.path().join("Dockerfile");
    std::fs::write(&dockerfile, "FROM tiny\nRUN touch /etc/half\nRUN exit 3\n").unwrap();
    let failed = shellgate(
        &data,
        &[
            "image",
            "build",
            "broken",
            "--dockerfile",
            dockerfile.to_str().unwrap(),
        ],
    );
    let log = stderr(&failed);
    assert!(!failed.status.success(), "{log}");
    assert!(
        log.contains("step 2 (line 3, RUN) failed: exit code 3"),
        "{log}"
    );
    assert!(!data.join("sandbox/images/broken/rootfs").exists(), "{log}");

    for (text, words) in [
        ("FROM tiny\nADD x /x\n", "line 2: ADD is not supported"),
        ("FROM tiny\nCOPY ../x /x\n", "may not leave the context"),
        ("FROM nothing-here\nRUN true\n", "nothing-here"),
    ] {
        std::fs::write(&dockerfile, text).unwrap();
        let refused = shellgate(
            &data,
            &[
                "image",
                "build",
                "refused",
                "--dockerfile",
                dockerfile.to_str().unwrap(),
            ],
        );
        let log = stderr(&refused);
        assert!(!refused.status.success(), "{text}: {log}");
        assert!(log.contains(words), "{text}: {log}");
    }
    let list = shellgate(&data, &["image", "list"]);
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(
        !list.contains("refused") && !list.contains("broken"),
        "{list}"
    );
}

/// Host processes whose command line is exactly `sleep SECONDS`.
fn sleepers(seconds: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| cmdline == format!("sleep\0{seconds}\0").as_bytes())
        })
        .filter(|pid| crate::common::process_alive(*pid))
        .collect()
}

#[test]
fn an_interrupted_build_removes_its_sandbox_and_installs_nothing() {
    use std::io::BufRead;
    let dir = TempDir::new("image-build-cancel");
    let data = dir.path().join("data");
    import_busybox(dir.path(), &data);
    let dockerfile = dir.path().join("Dockerfile");
    // A length no other process on the machine sleeps for.
    std::fs::write(
        &dockerfile,
        "FROM tiny\nRUN touch /etc/started && sleep 6143\n",
    )
    .unwrap();
    let mut child = Command::new(BINARY)
        .arg("--data-dir")
        .arg(&data)
        .args(["image", "build", "cancelled", "--dockerfile"])
        .arg(&dockerfile)
        .env("SHELLGATE_LOG", "error")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("#1 RUN") {
        let mut line = String::new();
        assert!(log.read_line(&mut line).unwrap() > 0, "{seen}");
        seen.push_str(&line);
    }
    assert!(
        crate::common::wait_until(
            || !sleepers("6143").is_empty(),
            std::time::Duration::from_secs(60)
        ),
        "the step never started"
    );
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let status = child.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut log, &mut rest).unwrap();
    assert!(!status.success(), "{seen}{rest}");
    assert!(rest.contains("the build was cancelled"), "{seen}{rest}");
    // The step's processes went with the build sandbox, before the exit.
    assert!(sleepers("6143").is_empty(), "a step outlived its build");
    assert!(!data.join("sandbox/images/cancelled/rootfs").exists());
}
