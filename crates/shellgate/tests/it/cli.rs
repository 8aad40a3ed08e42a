//! The `shellgate` command line, run as a user would.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

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

/// The first host id a `/proc/self/uid_map` maps (its first line's second
/// field).
fn uid_map_base(map: &str) -> u64 {
    map.split_whitespace()
        .nth(1)
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("not a uid_map: {map:?}"))
}

/// Waits for a one-shot that printed its `uid_map` and succeeded: the
/// first host id its sandbox maps.
fn one_shot_uid_base(run: std::process::Child) -> u64 {
    let output = run.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "stdout {stdout:?}, stderr {:?}",
        String::from_utf8_lossy(&output.stderr)
    );
    uid_map_base(&stdout)
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
    let id = created["id"]
        .as_str()
        .unwrap_or_else(|| panic!("create answered {created}"))
        .to_owned();
    let served = request(
        server.port,
        "POST",
        &format!("/v1/containers/{id}/exec"),
        Some(KEY),
        &[("Content-Type", "application/json")],
        br#"{"commands": ["cat /proc/self/uid_map"]}"#,
    )
    .json();
    let server_base = uid_map_base(
        served["output"][0]["stdout"]
            .as_str()
            .unwrap_or_else(|| panic!("exec answered {served}")),
    );
    // Several one-shots at once, while the server holds its engine; each
    // holds its lane a while, so none ends (freeing its ids for the next)
    // before the others started.
    let runs: Vec<_> = (0..3)
        .map(|_| {
            shellgate(data)
                .args(["exec", "--", "sh", "-c", "cat /proc/self/uid_map; sleep 3"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut bases: Vec<u64> = runs.into_iter().map(one_shot_uid_base).collect();
    // No two sandboxes share host ids: not the one-shots with each other,
    // nor with the server's containers.
    bases.sort();
    bases.dedup();
    assert_eq!(bases.len(), 3, "{bases:?}");
    assert!(
        bases
            .iter()
            .all(|b| *b != server_base && *b < 3_000_000_000),
        "one-shots {bases:?}, the server's container {server_base}"
    );
    let list = shellgate(data).args(["image", "list"]).output().unwrap();
    assert!(
        list.status.success() && String::from_utf8_lossy(&list.stdout).starts_with("host\t"),
        "image list: {list:?}"
    );
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
    assert_eq!(again["output"][0]["stdout"], "still here\n", "{again}");
}

#[test]
fn one_shots_whose_lanes_live_in_different_folders_never_share_host_ids() {
    // Each data directory below keeps its lanes in a folder of its own
    // (`oneshot_dir`), so each folder's first lane is lane 0: the host id
    // ranges must still differ while they run at once.
    let dirs: Vec<_> = (0..3).map(|_| TempDir::new("cli-lane-ids")).collect();
    let runs: Vec<_> = dirs
        .iter()
        .map(|dir| {
            shellgate(dir.path())
                // Each holds its lane until all have read their maps.
                .args(["exec", "--", "sh", "-c", "cat /proc/self/uid_map; sleep 3"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let bases: Vec<u64> = runs.into_iter().map(one_shot_uid_base).collect();
    let mut distinct = bases.clone();
    distinct.sort();
    distinct.dedup();
    // SAFETY: geteuid cannot fail. (An ordinary user's sandboxes all run as
    // that user: there are no ranges to tell apart.)
    if unsafe { libc::geteuid() } == 0 {
        assert_eq!(distinct.len(), 3, "host id bases {bases:?}");
    }
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

/// A one-shot `exec` builds its sandbox with a helper forked from itself
/// (where that saves time): the sandbox must still hold nothing of its
/// caller's but stdio (a descriptor a caller leaked, its environment), as
/// a helper executed afresh would.
#[tokio::test(flavor = "multi_thread")]
async fn a_one_shot_sandbox_holds_nothing_of_its_callers_but_stdio() {
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::unix::fs::MetadataExt;
    let dir = TempDir::new("cli-inherit");
    let mut ends = [0; 2];
    // SAFETY: pipe() fills the two descriptors, owned below. Without
    // O_CLOEXEC, as a careless caller would leave them: the CLI inherits
    // the write end.
    assert_eq!(unsafe { libc::pipe(ends.as_mut_ptr()) }, 0);
    // SAFETY: both were just made, and are owned only here.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    let pipe_inode = std::fs::File::from(write_end.try_clone().unwrap())
        .metadata()
        .unwrap()
        .ino();
    let mut cli = shellgate(dir.path())
        .args(["exec", "--", "sleep", "60"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    drop(write_end);
    let mut init = None;
    assert!(
        eventually(Duration::from_secs(20), || {
            init = children_of(cli.id()).into_iter().find(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|c| c.trim() == "sandbox-init")
            });
            init.is_some_and(|init| !children_of(init as u32).is_empty())
        })
        .await,
        "the sandbox never started"
    );
    let init = init.unwrap();
    let held: Vec<String> = std::fs::read_dir(format!("/proc/{init}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .map(|target| target.to_string_lossy().into_owned())
        .collect();
    assert!(
        !held.contains(&format!("pipe:[{pipe_inode}]")),
        "the sandbox's init holds its caller's descriptor: {held:?}"
    );
    cli.kill().unwrap();
    cli.wait().unwrap();
    drop(read_end);
    let output = shellgate(dir.path())
        .env("SHELLGATE_TEST_CALLERS_SECRET", "do-not-pass")
        .args(["exec", "--", "env"])
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(printed.contains("PATH="), "{printed}");
    assert!(!printed.contains("do-not-pass"), "{printed}");
}

// --- the first run ---------------------------------------------------------

/// A port nobody listens on (taken, then let go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `shellgate serve` on a fresh data directory inside `dir`, its stderr in
/// `dir/stderr` (a file: not a terminal), the default image neither built
/// nor there, nothing warmed.
fn serve_logged(
    dir: &TempDir,
    port: u16,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Child {
    let stderr = std::fs::File::create(dir.path().join("stderr")).unwrap();
    let mut command = Command::new(BINARY);
    command
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(args)
        .env_remove("SHELLGATE_LOG")
        .env_remove("SHELLGATE_API_KEYS")
        .env_remove("SHELLGATE_UPSTREAM_URL")
        .env_remove("NO_COLOR")
        .env("SHELLGATE_WARM_CONTAINERS", "0")
        .env("SHELLGATE_BUILD_DEFAULT_IMAGE", "false")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    for (key, value) in env {
        command.env(key, value);
    }
    command.spawn().unwrap()
}

/// Waits until the server on `port` answers `/healthz` (the summary is
/// said before it serves), or its process ends.
fn wait_healthy(child: &mut std::process::Child, port: u16) {
    let up = common::wait_until(
        || common::server::healthy(port) || matches!(child.try_wait(), Ok(Some(_))),
        Duration::from_secs(60),
    );
    assert!(
        up && matches!(child.try_wait(), Ok(None)),
        "the server did not start"
    );
}

/// Stops a server with SIGTERM and waits for it.
fn stop(mut child: std::process::Child) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
}

#[test]
fn serve_on_a_taken_address_fails_at_once_naming_it_and_starts_nothing() {
    let dir = TempDir::new("cli-port-taken");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    // The default image would be built (a first start, the recipe's image
    // missing) if the server got that far.
    let mut child = serve_logged(
        &dir,
        port,
        &[],
        &[
            ("SHELLGATE_BUILD_DEFAULT_IMAGE", "true"),
            ("SHELLGATE_DEFAULT_IMAGE", "debian-12-slim"),
        ],
    );
    let exited = common::wait_until(
        || matches!(child.try_wait(), Ok(Some(_))),
        Duration::from_secs(60),
    );
    assert!(exited, "serve kept running on a taken address");
    let status = child.wait().unwrap();
    let stderr = std::fs::read_to_string(dir.path().join("stderr")).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot listen on 127.0.0.1:{port}: address already in use"
        )),
        "{stderr}"
    );
    // Nothing was made or started: no data directory, no build, no key.
    assert!(!dir.path().join("data").exists(), "{stderr}");
    assert!(!stderr.contains("building"), "{stderr}");
    drop(taken);
}

#[test]
fn serve_warns_of_an_unknown_shellgate_variable_naming_the_closest_setting() {
    let dir = TempDir::new("cli-unknown-variable");
    let port = free_port();
    let mut child = serve_logged(
        &dir,
        port,
        &["--log-format", "text"],
        &[
            ("SHELLGATE_MAX_CONTAINER", "3"),
            // Not settings, but read by shellgate's tools and tests.
            ("SHELLGATE_BIN", "/usr/bin/true"),
            ("SHELLGATE_TEST_ANYTHING", "1"),
        ],
    );
    wait_healthy(&mut child, port);
    stop(child);
    let stderr = std::fs::read_to_string(dir.path().join("stderr")).unwrap();
    let warned = |name: &str| {
        stderr
            .lines()
            .filter(|line| line.contains(&format!("{name} is not a setting")))
            .collect::<Vec<_>>()
    };
    let mistyped = warned("SHELLGATE_MAX_CONTAINER");
    assert_eq!(mistyped.len(), 1, "{stderr}");
    assert!(
        mistyped[0].contains("WARN")
            && mistyped[0].contains(
                "SHELLGATE_MAX_CONTAINER is not a setting and is ignored; \
                 did you mean SHELLGATE_MAX_CONTAINERS_PER_NODE?"
            ),
        "{stderr}"
    );
    assert!(warned("SHELLGATE_BIN").is_empty(), "{stderr}");
    assert!(warned("SHELLGATE_TEST_ANYTHING").is_empty(), "{stderr}");
}

#[test]
fn serve_logs_json_off_a_terminal_with_a_summary_and_no_upstream_answers_503() {
    let dir = TempDir::new("cli-summary-json");
    let port = free_port();
    let mut child = serve_logged(&dir, port, &[], &[]);
    wait_healthy(&mut child, port);
    let key = std::fs::read_to_string(dir.path().join("data/initial-api-key")).unwrap();
    let key = key.trim();
    // No upstream configured: the model APIs answer 503, in the envelope.
    let answer = common::server::request(
        port,
        "POST",
        "/v1/responses",
        Some(key),
        &[("content-type", "application/json")],
        br#"{"model": "gpt-5", "input": "hi"}"#,
    );
    assert_eq!(answer.error(503)["code"], "upstream_not_configured");
    stop(child);
    let stderr = std::fs::read_to_string(dir.path().join("stderr")).unwrap();
    // Every line of the log is a JSON object.
    let events: Vec<serde_json::Value> = stderr
        .lines()
        .filter(|line| !line.is_empty())
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    let summary = events
        .iter()
        .find(|e| e["fields"]["message"] == "shellgate is serving")
        .unwrap_or_else(|| panic!("no summary in {stderr}"));
    let fields = &summary["fields"];
    assert_eq!(fields["listen"], format!("127.0.0.1:{port}"));
    let data_dir = dir.path().join("data");
    assert_eq!(fields["data_dir"], data_dir.to_str().unwrap());
    // The key was just made: shown once, with its file.
    let keys = fields["api_key"].as_str().unwrap();
    assert!(
        keys.contains(key) && keys.contains("initial-api-key"),
        "{keys}"
    );
    assert!(
        fields["upstreams"]
            .as_str()
            .unwrap()
            .starts_with("none configured: the model APIs will answer 503"),
        "{fields}"
    );
    assert_eq!(fields["default_image"], "debian-12");
    assert!(
        fields["default_image_status"]
            .as_str()
            .unwrap()
            .starts_with("missing"),
        "{fields}"
    );
    // The next start made no key: it says where the first one is, not what.
    // On a port of its own: the first one, let go, may since have been
    // handed to another test's listener.
    let port = free_port();
    let mut child = serve_logged(&dir, port, &[], &[]);
    wait_healthy(&mut child, port);
    stop(child);
    let stderr = std::fs::read_to_string(dir.path().join("stderr")).unwrap();
    let summary: serde_json::Value = stderr
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .find(|e: &serde_json::Value| e["fields"]["message"] == "shellgate is serving")
        .unwrap_or_else(|| panic!("no summary in {stderr}"));
    let keys = summary["fields"]["api_key"].as_str().unwrap();
    assert!(keys.contains("initial-api-key"), "{keys}");
    assert!(!stderr.contains(key), "the key printed again: {stderr}");
}

#[test]
fn serve_on_text_logs_says_a_readable_summary_without_secrets() {
    let dir = TempDir::new("cli-summary-text");
    let port = free_port();
    let config = dir.path().join("shellgate.toml");
    std::fs::write(
        &config,
        "[[upstreams]]\nprefix = \"claude-\"\nurl = \"https://api.anthropic.com\"\n\
         api_key = \"sk-ant-route-secret\"\nprotocol = \"anthropic\"\n",
    )
    .unwrap();
    let mut child = serve_logged(
        &dir,
        port,
        &["--log-format", "text", "--config", config.to_str().unwrap()],
        &[
            ("SHELLGATE_API_KEYS", "sk-configured-secret:alpha"),
            (
                "SHELLGATE_UPSTREAM_URL",
                "http://user:sk-in-url-secret@127.0.0.1:9/v1?key=sk-query-secret",
            ),
            ("SHELLGATE_UPSTREAM_API_KEY", "sk-upstream-secret"),
        ],
    );
    wait_healthy(&mut child, port);
    stop(child);
    let stderr = std::fs::read_to_string(dir.path().join("stderr")).unwrap();
    let data_dir = dir.path().join("data");
    for line in [
        format!("shellgate is serving on http://127.0.0.1:{port} (API base URL http://127.0.0.1:{port}/v1)"),
        "  API key:       1 from the configuration".to_owned(),
        format!("  data dir:      {}", data_dir.display()),
        "  upstreams:     claude-* -> https://api.anthropic.com (anthropic)".to_owned(),
        "(every other model) -> http://127.0.0.1:9/v1 (chat)".to_owned(),
        "  default image: debian-12 (missing".to_owned(),
    ] {
        assert!(stderr.contains(&line), "{line:?} not in:\n{stderr}");
    }
    assert!(!stderr.contains("secret"), "a secret printed:\n{stderr}");
    // Text, not JSON, and no colour codes into a file.
    assert!(!stderr.contains("{\"timestamp\""), "{stderr}");
    assert!(!stderr.contains("\x1b["), "{stderr:?}");
}

/// A scripted Responses API for `shellgate local`: the first request is
/// answered with a `shell_call` of `command`, every later one with a
/// message; each as a stream ending in `response.completed`.
fn scripted_responses_api(command: &'static str) -> u16 {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for (turn, stream) in listener.incoming().enumerate() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                let lower = line.to_ascii_lowercase();
                if let Some(value) = lower.strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let output = if turn == 0 {
                serde_json::json!([{"type": "shell_call", "id": "sh_1", "call_id": "call_1",
                    "status": "completed", "action": {"commands": [command]}}])
            } else {
                serde_json::json!([{"type": "message", "id": "msg_1", "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": "done", "annotations": []}]}])
            };
            let mut events = String::new();
            if turn > 0 {
                events.push_str(
                    "data: {\"type\":\"response.output_text.delta\",\"delta\":\"done\"}\n\n",
                );
            }
            let completed = serde_json::json!({"type": "response.completed", "response": {
                "id": format!("resp_{turn}"), "object": "response", "status": "completed",
                "output": output}});
            events.push_str(&format!("data: {completed}\n\n"));
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{events}",
                events.len()
            );
        }
    });
    port
}

/// `shellgate local` against [`scripted_responses_api`], piped (off a
/// terminal), in `dir`.
fn local_piped(dir: &TempDir, command: &'static str, approve: &str) -> std::process::Output {
    let port = scripted_responses_api(command);
    Command::new(BINARY)
        .args([
            "local",
            "--base-url",
            &format!("http://127.0.0.1:{port}/v1"),
            "--model",
            "scripted",
            "--approve",
            approve,
            "--audit",
        ])
        .arg(dir.path().join("audit.jsonl"))
        .arg("do the task")
        .current_dir(dir.path())
        .env("SHELLGATE_LOG", "warn")
        .env_remove("NO_COLOR")
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn local_off_a_terminal_exits_3_when_its_policy_rejected_commands_and_writes_no_colour() {
    let dir = TempDir::new("cli-local-rejected");
    // `auto` with no policy allows nothing: the command is rejected.
    let rejected = local_piped(&dir, "touch should-not-exist", "auto");
    let stderr = String::from_utf8_lossy(&rejected.stderr);
    let stdout = String::from_utf8_lossy(&rejected.stdout);
    assert_eq!(rejected.status.code(), Some(3), "{stderr}");
    assert!(!dir.path().join("should-not-exist").exists());
    assert!(
        stdout.contains("done"),
        "the model still answered: {stdout}"
    );
    assert!(
        stderr.contains("not running `touch should-not-exist`")
            && stderr.contains("the policy rejected 1 command"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("\x1b[") && !stdout.contains("\x1b["),
        "{stderr:?}"
    );
    // What the policy lets run exits 0, its echo plain text.
    let ran = local_piped(&dir, "echo ran > ran.txt", "never-ask");
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert_eq!(ran.status.code(), Some(0), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("ran.txt")).unwrap(),
        "ran\n"
    );
    assert!(stderr.contains("$ echo ran > ran.txt\n"), "{stderr:?}");
    assert!(!stderr.contains("\x1b["), "{stderr:?}");
}

#[test]
fn local_on_a_terminal_dims_the_command_unless_no_color_is_set() {
    // A pseudo-terminal made by `script` (util-linux): stderr is a terminal.
    let dir = TempDir::new("cli-local-tty");
    let on_a_terminal = |no_color: Option<&str>| {
        let port = scripted_responses_api("echo hello");
        let line = format!(
            "{BINARY} local --base-url http://127.0.0.1:{port}/v1 --model scripted \
             --approve never-ask --audit {}/audit.jsonl 'do it'",
            dir.path().display()
        );
        let mut command = Command::new("script");
        command
            .args(["-qec", &line, "/dev/null"])
            .current_dir(dir.path())
            .env("SHELLGATE_LOG", "warn")
            .env_remove("NO_COLOR")
            .stdin(Stdio::null());
        if let Some(value) = no_color {
            command.env("NO_COLOR", value);
        }
        let output = command.output().unwrap();
        assert!(output.status.success(), "{output:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let coloured = on_a_terminal(None);
    assert!(
        coloured.contains("\x1b[2m$ echo hello\x1b[0m"),
        "{coloured:?}"
    );
    let plain = on_a_terminal(Some("1"));
    assert!(
        plain.contains("$ echo hello") && !plain.contains("\x1b["),
        "{plain:?}"
    );
}
