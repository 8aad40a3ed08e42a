//! The `shellgate` command line, run as a user would.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{eventually, process_alive, TempDir, BINARY};

fn shellgate(data_dir: &std::path::Path) -> Command {
    let mut command = Command::new(BINARY);
    command
        .arg("--data-dir")
        .arg(data_dir)
        .env("SHELLGATE_LOG", "error")
        // Each test's one-shot lanes of its own, to look into.
        .env("SHELLGATE_ONESHOT_DIR", data_dir.join("oneshot"));
    command
}

#[test]
fn exec_json_prints_the_shell_call_output_object_the_api_returns() {
    let dir = TempDir::new("cli-exec");
    let output = shellgate(dir.path())
        .args([
            "exec",
            "--json",
            "-c",
            "echo hi",
            "-c",
            "python3 -c \"print(sum(range(1,101)))\"",
            "-c",
            "exit 3",
        ])
        .output()
        .unwrap();
    // The exit status is the first failing command's.
    assert_eq!(
        output.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["type"], "shell_call_output");
    assert_eq!(json["status"], "completed");
    assert!(json["id"].as_str().unwrap().starts_with("sho_"));
    assert_eq!(
        json["output"],
        serde_json::json!([
            {"stdout": "hi\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}},
            {"stdout": "5050\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}},
            {"stdout": "", "stderr": "", "outcome": {"type": "exit", "exit_code": 3}}
        ])
    );
    assert_eq!(json["max_output_length"], 16384);
    // The throwaway container is gone.
    assert_eq!(
        std::fs::read_dir(dir.path().join("oneshot/0/containers"))
            .unwrap()
            .count(),
        0
    );
}

#[test]
fn exec_runs_one_program_with_its_arguments_like_docker_run() {
    let dir = TempDir::new("cli-argv");
    let run = |args: &[&str]| shellgate(dir.path()).args(args).output().unwrap();
    // One command, its arguments kept whole (spaces, quotes, `$`, globs).
    let output = run(&[
        "exec",
        "--",
        "python3",
        "-c",
        "import sys; print(sys.argv[1:])",
        "it's",
        "two  spaces",
        "$HOME",
        "*",
    ]);
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "[\"it's\", 'two  spaces', '$HOME', '*']\n"
    );
    // The exit status and the streams are the command's own.
    let output = run(&["exec", "--", "sh", "-c", "echo out; echo err >&2; exit 7"]);
    assert_eq!(output.status.code(), Some(7));
    assert_eq!(output.stdout, b"out\n");
    assert_eq!(output.stderr, b"err\n");
    assert_eq!(run(&["exec", "--", "false"]).status.code(), Some(1));
    assert_eq!(
        run(&["exec", "--", "no-such-program"]).status.code(),
        Some(127)
    );
    assert_eq!(
        run(&["exec", "--", "sh", "-c", "kill -9 $$"]).status.code(),
        Some(137)
    );
    // A timeout is 124, as `timeout` says, with a note on stderr.
    let output = run(&["exec", "--timeout-ms", "300", "--", "sleep", "5"]);
    assert_eq!(output.status.code(), Some(124));
    assert!(String::from_utf8_lossy(&output.stderr).contains("timed out"));
    // Nothing to run, or both forms: a usage error, nothing run.
    for args in [vec!["exec"], vec!["exec", "-c", "true", "--", "true"]] {
        let output = run(&args);
        assert_eq!(output.status.code(), Some(125), "{args:?}");
        assert!(output.stdout.is_empty());
    }
}

#[test]
fn exec_reports_timeouts_and_caps_in_the_json() {
    let dir = TempDir::new("cli-timeout");
    let output = shellgate(dir.path())
        .args([
            "exec",
            "--timeout-ms",
            "300",
            "--max-output-length",
            "64",
            "--json",
            "-c",
            "seq 1 100000; sleep 5",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(124));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        json["output"][0]["outcome"],
        serde_json::json!({"type": "timeout"})
    );
    assert_eq!(json["max_output_length"], 64);
    assert!(
        json["output"][0]["stdout"]
            .as_str()
            .unwrap()
            .chars()
            .count()
            <= 64
    );
}

#[test]
fn exec_refuses_bad_arguments_with_a_clear_message() {
    let dir = TempDir::new("cli-bad");
    for (args, expected) in [
        (
            vec!["exec", "--timeout-ms", "999999999", "--", "true"],
            "timeout_ms",
        ),
        (
            vec!["exec", "--max-output-length", "0", "--", "true"],
            "max_output_length",
        ),
        (vec!["exec", "--memory", "lots", "--", "true"], "--memory"),
        (
            vec!["exec", "--image", "nope", "--", "true"],
            "no image named",
        ),
    ] {
        let output = shellgate(dir.path()).args(&args).output().unwrap();
        assert!(!output.status.success(), "{args:?} succeeded");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty());
    }
}

/// Host pids of processes whose parent is `parent`.
fn children_of(parent: u32) -> Vec<i32> {
    let parent = parent.to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            let ppid = stat
                .rsplit(')')
                .next()?
                .split_whitespace()
                .nth(1)?
                .to_owned();
            (ppid == parent).then_some(pid)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_server_takes_its_containers_along_and_a_restart_cleans_up() {
    let dir = TempDir::new("cli-crash");
    let mut server = shellgate(dir.path())
        .args(["exec", "--", "sleep", "60"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server_pid = server.id();
    // Init is the server's child; the command runs below it.
    let mut init = None;
    assert!(
        eventually(Duration::from_secs(20), || {
            init = children_of(server_pid).into_iter().find(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|c| c.trim() == "sandbox-init")
            });
            init.is_some_and(|init| !children_of(init as u32).is_empty())
        })
        .await,
        "the sandbox never started"
    );
    let init = init.unwrap();
    let command_pids = children_of(init as u32);
    server.kill().unwrap();
    server.wait().unwrap();
    assert!(
        eventually(Duration::from_secs(10), || !process_alive(init)
            && command_pids.iter().all(|p| !process_alive(*p)))
        .await,
        "sandbox processes outlived the server"
    );
    // A new run on the same data directory takes the freed lane and
    // removes what the crash left in it.
    let output = shellgate(dir.path())
        .args(["exec", "--", "echo", "again"])
        .output()
        .unwrap();
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stdout).contains("again"));
    assert_eq!(
        std::fs::read_dir(dir.path().join("oneshot/0/containers"))
            .unwrap()
            .count(),
        0
    );
    let slot_prefix = format!("s{server_pid}-");
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let pids_path = own
        .lines()
        .find_map(|l| l.split(":pids:").nth(1))
        .unwrap_or("/")
        .trim_start_matches('/');
    let base = std::path::Path::new("/sys/fs/cgroup/pids").join(pids_path);
    for group in std::fs::read_dir(&base).into_iter().flatten().flatten() {
        for slot in std::fs::read_dir(group.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            assert!(
                !slot.file_name().to_string_lossy().starts_with(&slot_prefix),
                "cgroup left: {:?}",
                slot.path()
            );
        }
    }
}

/// A data directory owned by `nobody` and a copy of the binary that user
/// can surely reach, wherever the checkout lives.
fn rootless_setup(dir: &TempDir) -> (std::path::PathBuf, std::path::PathBuf) {
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let path = std::ffi::CString::new(data.to_str().unwrap()).unwrap();
    // SAFETY: chown on a path we just created.
    assert_eq!(unsafe { libc::chown(path.as_ptr(), 65534, 65534) }, 0);
    let binary = dir.path().join("shellgate");
    std::fs::copy(BINARY, &binary).unwrap();
    let top = std::ffi::CString::new(dir.path().to_str().unwrap()).unwrap();
    // SAFETY: chmod on a directory we just created.
    assert_eq!(unsafe { libc::chmod(top.as_ptr(), 0o755) }, 0);
    (data, binary)
}

/// `shellgate --data-dir DATA` run as `nobody` (setpriv), for the
/// rootless tests.
fn as_nobody(binary: &std::path::Path, data: &std::path::Path) -> Command {
    let mut command = Command::new("setpriv");
    command
        .args([
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            "--",
        ])
        .arg(binary)
        .arg("--data-dir")
        .arg(data);
    command
}

#[test]
fn an_ordinary_user_runs_sandboxes_rootless_with_clear_warnings() {
    let dir = TempDir::new("cli-rootless");
    let (data, binary) = rootless_setup(&dir);
    let output = as_nobody(&binary, &data)
        .args([
            "exec",
            "--json",
            "-c",
            "id -u; echo data > /mnt/data/f; cat /mnt/data/f; grep CapEff /proc/self/status",
        ])
        .env("SHELLGATE_LOG", "warn")
        .env("HOME", dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        json["output"][0]["stdout"], "1000\ndata\nCapEff:\t0000000000000000\n",
        "{json}"
    );
    // What cannot be enforced without root is said, not silently dropped.
    assert!(stderr.contains("disk quotas are off"), "{stderr}");
}

/// `exec --allow` without root: the egress proxy needs no privilege on the
/// host (no nftables, no veth), so a rootless sandbox gets exactly its
/// allowlist too. The destination here is an operator exception: a name
/// that may resolve to a loopback address, served by this test.
#[test]
fn rootless_exec_allow_reaches_its_allowlist_and_nothing_else() {
    use std::io::{Read, Write};
    let dir = TempDir::new("cli-rootless-egress");
    let (data, binary) = rootless_setup(&dir);
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        "egress_allowed_domains = \"*.internal.test\"\n\
         egress_private_exceptions = \"mirror.internal.test\"\n\
         [egress_hosts]\n\
         \"mirror.internal.test\" = [\"127.77.0.1\"]\n\
         \"private.internal.test\" = [\"127.77.0.1\"]\n",
    )
    .unwrap();
    // The "mirror": one HTTP answer per connection.
    let listener = std::net::TcpListener::bind("127.77.0.1:80").unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut request = [0u8; 4096];
            let n = stream.read(&mut request).unwrap_or(0);
            let head = String::from_utf8_lossy(&request[..n]).to_string();
            let path = head.split(' ').nth(1).unwrap_or("?").to_owned();
            let body = format!("mirror saw {path}");
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let output = as_nobody(&binary, &data)
        .args(["exec", "--config"])
        .arg(&config)
        .args([
            "--allow",
            "mirror.internal.test",
            "--allow",
            "private.internal.test",
            "--json",
            "-c",
            "curl -sS -m 5 --noproxy '*' http://mirror.internal.test/simple; echo; \
             curl -sS -m 5 http://mirror.internal.test/proxied; echo; \
             curl -sS -m 5 http://private.internal.test/; echo; \
             curl -sS -m 5 http://elsewhere.internal.test/",
        ])
        .env("SHELLGATE_LOG", "error")
        .env("HOME", dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    // The last curl is refused: its failure is the exit status, not the
    // sandbox's (125).
    assert_ne!(output.status.code(), Some(125), "{stderr}");
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let stdout = json["output"][0]["stdout"].as_str().unwrap().to_owned();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "mirror saw /simple", "{stdout}");
    assert_eq!(lines[1], "mirror saw /proxied", "{stdout}");
    // The same address under a name without an exception is refused.
    assert!(lines[2].contains("a loopback address"), "{stdout}");
    assert!(
        lines[3].contains("not in this container's allowlist"),
        "{stdout}"
    );
    // The command's own stderr says which were refused, and why.
    let command_stderr = json["output"][0]["stderr"].as_str().unwrap();
    assert!(
        command_stderr.contains(
            "shellgate: egress denied: HTTP to elsewhere.internal.test:80: \
             elsewhere.internal.test is not in this container's allowlist"
        ),
        "{command_stderr}"
    );
    // A list outside the organization's is refused before anything runs.
    let refused = Command::new(&binary)
        .arg("--data-dir")
        .arg(dir.path().join("data2"))
        .args(["exec", "--config"])
        .arg(&config)
        .args(["--allow", "example.com", "--", "true"])
        .env("SHELLGATE_LOG", "error")
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("example.com"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

#[test]
fn exec_and_image_run_beside_a_server_on_the_same_data_directory() {
    use common::server::{self, request, KEY};
    let server = server::start("cli-beside", &[]);
    let data = server.dir.path();
    // A container of the server's, to compare host ids with.
    let created = request(
        server.port,
        "POST",
        "/v1/containers",
        Some(KEY),
        &[("Content-Type", "application/json")],
        br#"{"name": "beside"}"#,
    )
    .json();
    let id = created["id"].as_str().unwrap().to_owned();
    let served = request(
        server.port,
        "POST",
        &format!("/v1/containers/{id}/exec"),
        Some(KEY),
        &[("Content-Type", "application/json")],
        br#"{"commands": ["cat /proc/self/uid_map"]}"#,
    )
    .json();
    let host_id = |map: &str| -> u64 { map.split_whitespace().nth(1).unwrap().parse().unwrap() };
    let server_base = host_id(served["output"][0]["stdout"].as_str().unwrap());
    // Several one-shots at once, while the server holds its engine.
    let runs: Vec<_> = (0..3)
        .map(|_| {
            shellgate(data)
                .args(["exec", "--", "cat", "/proc/self/uid_map"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut bases = Vec::new();
    for run in runs {
        let output = run.wait_with_output().unwrap();
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        bases.push(host_id(&String::from_utf8_lossy(&output.stdout)));
    }
    // No two sandboxes share host ids: not the one-shots with each other,
    // nor with the server's containers.
    bases.sort();
    bases.dedup();
    assert_eq!(bases.len(), 3, "{bases:?}");
    assert!(bases
        .iter()
        .all(|b| *b != server_base && *b < 3_000_000_000));
    let list = shellgate(data).args(["image", "list"]).output().unwrap();
    assert!(list.status.success());
    assert!(String::from_utf8_lossy(&list.stdout).starts_with("host\t"));
    // The server's container is untouched and still answers.
    let again = request(
        server.port,
        "POST",
        &format!("/v1/containers/{id}/exec"),
        Some(KEY),
        &[("Content-Type", "application/json")],
        br#"{"commands": ["echo still here"]}"#,
    )
    .json();
    assert_eq!(again["output"][0]["stdout"], "still here\n");
}

#[test]
fn one_shot_state_lives_on_a_ram_file_system_not_in_the_data_directory() {
    let dir = TempDir::new("cli-lanes");
    let output = shellgate(dir.path())
        .env_remove("SHELLGATE_ONESHOT_DIR")
        .args(["exec", "--", "true"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!dir.path().join("sandbox/oneshot").exists());
    let lanes = ["/run/shellgate-0/oneshot", "/dev/shm/shellgate-0/oneshot"]
        .into_iter()
        .map(std::path::Path::new)
        .find(|p| p.is_dir())
        .expect("no lanes on /run or /dev/shm");
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::symlink_metadata(lanes.parent().unwrap()).unwrap();
    assert_eq!((owner.uid(), owner.mode() & 0o777), (0, 0o711));
}
