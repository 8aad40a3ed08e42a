//! The sandbox engine driven through the real `shellgate` helper binary:
//! commands, output handling, lifecycle, limits and hostile commands.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::Read;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use common::{exit_code, process_alive, TestEngine};
use shellgate_sandbox::backend::{ContainerSpec, Outcome, RunRequest, SandboxBackend};
use shellgate_sandbox::SandboxError;
use shellgate_sandbox_api::process::{OutputRead, ProcessSpec, ProcessStatus, PtySpec};

#[tokio::test(flavor = "multi_thread")]
async fn commands_run_in_order_as_an_unprivileged_user_in_mnt_data() {
    let t = TestEngine::new("basics").await;
    t.create("c1").await;
    let mut request = RunRequest::new(vec![
        "echo hi".into(),
        "python3 -c 'print(sum(range(1,101)))'".into(),
        "echo to-stderr >&2; exit 3".into(),
        "id -u; id -un; pwd; echo $HOME; cat /proc/self/status | grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):'".into(),
        "cat; echo stdin-done".into(),
    ]);
    request.timeout_ms = 10_000;
    let results = t.engine.run("c1", request).await.unwrap();
    assert_eq!(results.len(), 5);
    assert_eq!(results[0].stdout, "hi\n");
    assert_eq!(results[1].stdout, "5050\n");
    assert_eq!(results[2].outcome, Outcome::Exit { exit_code: 3 });
    assert_eq!(results[2].stderr, "to-stderr\n");
    let who = &results[3].stdout;
    assert!(
        who.starts_with("1000\nuser\n/mnt/data\n/home/user\n"),
        "{who}"
    );
    assert!(who.contains("CapEff:\t0000000000000000"), "{who}");
    assert!(who.contains("CapBnd:\t0000000000000000"), "{who}");
    assert!(who.contains("NoNewPrivs:\t1"), "{who}");
    assert!(who.contains("Seccomp:\t2"), "{who}");
    // stdin is /dev/null: `cat` ends at once.
    assert_eq!(results[4].stdout, "stdin-done\n");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_servers_environment_does_not_leak_in() {
    // SAFETY: set before the engine starts any helper; tests in this binary
    // that read the variable do so only here.
    unsafe { std::env::set_var("SHELLGATE_TEST_SECRET", "hunter2") };
    let t = TestEngine::new("env").await;
    t.create("c1").await;
    let env = t.ok("c1", "env").await;
    assert!(!env.contains("hunter2"), "{env}");
    assert!(
        env.contains("PATH=/home/user/.local/bin:/usr/local/sbin"),
        "{env}"
    );
    assert!(env.contains("PIP_BREAK_SYSTEM_PACKAGES=1"), "{env}");
    assert!(env.contains("LANG=C.UTF-8"), "{env}");
    assert!(env.contains("HOME=/home/user"), "{env}");
    let processes = t
        .ok("c1", "cat /proc/1/environ 2>&1 | tr '\\0' '\\n'; true")
        .await;
    assert!(!processes.contains("hunter2"), "{processes}");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_signal_death_reports_128_plus_the_signal_and_the_container_survives() {
    let t = TestEngine::new("signal").await;
    t.create("c1").await;
    assert_eq!(exit_code(&t.run("c1", "kill -9 $$").await), 137);
    assert_eq!(exit_code(&t.run("c1", "kill -SEGV $$").await), 139);
    assert_eq!(t.ok("c1", "echo still-here").await, "still-here\n");
    t.finish().await;
}

/// Set in the copy of this test binary that
/// `programs_start_with_default_signals_whatever_the_server_inherited` starts.
const INHERITED_SIGNALS: &str = "SHELLGATE_TEST_INHERITED_SIGNALS";

/// The signals a background job or `nohup` leaves ignored (and here blocked
/// too) in the process that starts the engine.
const INHERITED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGQUIT, libc::SIGHUP];

/// `SigIgn` and `SigBlk` as `/proc/<pid>/status` shows them, one line each.
const SIGNAL_STATE: &str = "grep -E '^Sig(Ign|Blk):' /proc/self/status";

/// Whether Python found SIGINT at its default (it installs
/// `KeyboardInterrupt` only then).
const PYTHON_SIGINT: &str =
    "python3 -c 'import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)'";

#[test]
fn programs_start_with_default_signals_whatever_the_server_inherited() {
    if std::env::var_os(INHERITED_SIGNALS).is_some() {
        return tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(default_signals_in_every_program());
    }
    // Signal dispositions are the whole process's: a copy of this binary,
    // started with them ignored and blocked, runs the engine, so no other
    // test here inherits them.
    // The test's full name in this binary: its module path without the
    // binary's own name.
    let module = module_path!()
        .split_once("::")
        .map_or("", |(_, module)| module);
    let name =
        format!("{module}::programs_start_with_default_signals_whatever_the_server_inherited");
    let mut copy = std::process::Command::new(std::env::current_exe().unwrap());
    copy.args(["--exact", &name, "--nocapture"])
        .env(INHERITED_SIGNALS, "1");
    // SAFETY: between fork and exec, only sigaction and sigprocmask on
    // values on the stack (async-signal-safe).
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut copy, || {
            let mut ignore: libc::sigaction = std::mem::zeroed();
            ignore.sa_sigaction = libc::SIG_IGN;
            let mut blocked: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut blocked);
            for signal in INHERITED {
                libc::sigaction(signal, &ignore, std::ptr::null_mut());
                libc::sigaddset(&mut blocked, signal);
            }
            libc::sigprocmask(libc::SIG_BLOCK, &blocked, std::ptr::null_mut());
            Ok(())
        });
    }
    let output = copy.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // The copy ran the test (and did not filter it out).
    assert!(stdout.contains("1 passed"), "{stdout}");
}

/// In the copy: it holds the inherited signals, and nothing it starts in a
/// container does.
async fn default_signals_in_every_program() {
    let own = std::fs::read_to_string("/proc/self/status").unwrap();
    let mask = |field: &str| {
        own.lines()
            .find_map(|line| line.strip_prefix(field))
            .map(|hex| u64::from_str_radix(hex.trim(), 16).unwrap())
            .unwrap()
    };
    let inherited: u64 = INHERITED.iter().map(|s| 1u64 << (s - 1)).sum();
    assert_eq!(mask("SigIgn:") & inherited, inherited, "{own}");
    assert_eq!(mask("SigBlk:") & inherited, inherited, "{own}");

    let t = TestEngine::new("inherited-signals").await;
    t.create("c1").await;
    let defaults = "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n";
    // A command.
    let command = t
        .ok("c1", &format!("{SIGNAL_STATE}; {PYTHON_SIGINT}"))
        .await;
    assert_eq!(command, format!("{defaults}True\n"));
    // A process with a terminal, and SIGINT sent to it ends it.
    let e = &t.engine;
    let mut spec = ProcessSpec {
        command: format!("{SIGNAL_STATE}; {PYTHON_SIGINT}; echo waiting; exec sleep 600"),
        stdin: true,
        pty: Some(PtySpec {
            cols: 80,
            rows: 24,
            term: "xterm".into(),
        }),
        timeout_ms: 60_000,
        keeps_awake: true,
        env: Vec::new(),
        cwd: None,
    };
    e.start_process("c1", "tty", spec.clone()).await.unwrap();
    let text = read_process_until(e, "tty", "waiting").await;
    assert_eq!(
        text.replace("\r\n", "\n"),
        format!("{defaults}True\nwaiting\n")
    );
    e.signal_process("c1", "tty", libc::SIGINT).await.unwrap();
    let ended = e.wait_process("c1", "tty").await.unwrap();
    assert_eq!(ended.exit_code(), Some(128 + libc::SIGINT), "{ended:?}");
    // A process on pipes too.
    spec.pty = None;
    e.start_process("c1", "pipe", spec).await.unwrap();
    let text = read_process_until(e, "pipe", "waiting").await;
    assert_eq!(text, format!("{defaults}True\nwaiting\n"));
    e.signal_process("c1", "pipe", libc::SIGINT).await.unwrap();
    let ended = e.wait_process("c1", "pipe").await.unwrap();
    assert_eq!(ended.exit_code(), Some(128 + libc::SIGINT), "{ended:?}");
    t.finish().await;
}

/// A process's output (in container `c1`) until `needle` shows.
async fn read_process_until(
    engine: &shellgate_sandbox::LocalEngine,
    process: &str,
    needle: &str,
) -> String {
    let mut text = String::new();
    let mut after = 0;
    while !text.contains(needle) {
        let read = OutputRead {
            after,
            max_bytes: 1 << 20,
            wait: Duration::from_secs(20),
        };
        let output = engine
            .read_process_output("c1", process, read)
            .await
            .unwrap();
        for chunk in &output.chunks {
            text.push_str(&String::from_utf8_lossy(&chunk.data));
        }
        after = output.next_offset;
        assert!(
            text.contains(needle) || output.process.status == ProcessStatus::Running,
            "ended before {needle:?}: {text:?} {:?}",
            output.process
        );
    }
    text
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timeout_returns_the_partial_output_and_kills_the_command() {
    let t = TestEngine::new("timeout").await;
    t.create("c1").await;
    let started = Instant::now();
    let result = t
        .run_with(
            "c1",
            "echo started; echo err-part >&2; sleep 30; echo never",
            700,
        )
        .await;
    assert_eq!(result.outcome, Outcome::Timeout);
    assert_eq!(result.stdout, "started\n");
    assert_eq!(result.stderr, "err-part\n");
    assert!(started.elapsed() < Duration::from_secs(20));
    // The sleep is gone with its process group.
    let left = t.ok("c1", "ps -eo comm= | grep -c '^sleep$' || true").await;
    assert_eq!(left.trim(), "0");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pipes_held_by_setsid_grandchildren_do_not_hold_the_result() {
    let t = TestEngine::new("grandchild").await;
    t.create("c1").await;
    let result = t
        .run_with("c1", "setsid sleep 60 & echo parent-done", 60_000)
        .await;
    assert_eq!(result.outcome, Outcome::Exit { exit_code: 0 });
    assert_eq!(result.stdout, "parent-done\n");
    // A timed-out command whose setsid child keeps the pipe open still returns.
    let result = t.run_with("c1", "setsid sleep 60 & sleep 60", 500).await;
    assert_eq!(result.outcome, Outcome::Timeout);
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn background_services_keep_running_between_commands() {
    let t = TestEngine::new("service").await;
    t.create("c1").await;
    t.ok("c1", "echo served > index.txt; nohup python3 -m http.server 8000 --bind 127.0.0.1 >/tmp/http.log 2>&1 &").await;
    let fetch = "for i in $(seq 50); do python3 -c \"import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:8000/index.txt').read().decode(),end='')\" 2>/dev/null && exit 0; sleep 0.1; done; exit 1";
    assert_eq!(t.ok("c1", fetch).await, "served\n");
    assert_eq!(t.ok("c1", fetch).await, "served\n");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn output_is_capped_keeping_head_and_tail() {
    let t = TestEngine::new("cap").await;
    t.create("c1").await;
    let mut request = RunRequest::new(vec![
        "echo BEGIN; seq 1 200000; echo END; printf 'bad \\xff\\xfe bytes\\n' >&2".into(),
    ]);
    request.max_output_length = 1000;
    let result = t.engine.run("c1", request).await.unwrap().remove(0);
    assert!(
        result.stdout.chars().count() <= 1000,
        "{}",
        result.stdout.len()
    );
    assert!(result.stdout.starts_with("BEGIN\n1\n2\n"));
    assert!(result.stdout.ends_with("199999\n200000\nEND\n"));
    assert!(result.stdout.contains("characters truncated"));
    assert_eq!(result.stderr, "bad \u{FFFD}\u{FFFD} bytes\n");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flood_returns_capped_in_bounded_memory_and_past_its_burst_is_read_slowly() {
    let t = TestEngine::new("flood").await;
    t.create("c1").await;
    let peak_before = common::peak_rss_kib("self");
    // Within the burst read at full speed (16 MiB): to its end, whole.
    let result = t
        .run_with("c1", "head -c 12000000 /dev/zero; echo done >&2", 120_000)
        .await;
    assert_eq!(result.outcome, Outcome::Exit { exit_code: 0 });
    assert_eq!(result.bytes_out, 12_000_000 + 5);
    assert_eq!(result.stderr, "done\n");
    // A 10 GB flood: past the burst its output is read at the unread rate
    // (1 MiB/s; the writer blocks in between, the server does not spin),
    // so its timeout ends it with the burst and a few seconds' worth read,
    // not gigabytes; the result is capped as ever, head and tail.
    let result = t
        .run_with("c1", "head -c 10000000000 /dev/zero; echo done >&2", 3_000)
        .await;
    assert_eq!(result.outcome, Outcome::Timeout);
    assert!(result.stdout.chars().count() <= 16_384);
    assert!(result.stdout.contains("characters truncated"));
    assert!(
        result.bytes_out > 16 << 20 && result.bytes_out < 24 << 20,
        "{} bytes read",
        result.bytes_out
    );
    // Memory: capture is O(cap), so the peak may only grow by buffers.
    let growth_mib = (common::peak_rss_kib("self") - peak_before) / 1024;
    assert!(growth_mib < 64, "peak RSS grew by {growth_mib} MiB");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_memory_balloon_is_oom_killed_and_the_container_stays_usable() {
    let t = TestEngine::new("oom").await;
    let spec = ContainerSpec {
        memory_bytes: 128 << 20,
        ..ContainerSpec::default()
    };
    t.create_with("c1", spec).await;
    let result = t
        .run(
            "c1",
            "python3 -c 'b = bytearray(600 * 1024 * 1024); print(len(b))'",
        )
        .await;
    assert_eq!(exit_code(&result), 137, "{result:?}");
    assert_eq!(t.ok("c1", "echo alive").await, "alive\n");
    // /tmp and /dev/shm are tmpfs charged to the same limit.
    let result = t
        .run("c1", "head -c 300M /dev/zero > /tmp/big; echo $?")
        .await;
    assert_ne!(result.stdout, "0\n", "{result:?}");
    assert_eq!(t.ok("c1", "rm -f /tmp/big; echo alive").await, "alive\n");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fork_bomb_is_contained_by_the_pids_limit() {
    let t = TestEngine::new("forkbomb").await;
    let spec = ContainerSpec {
        pids_max: 64,
        ..ContainerSpec::default()
    };
    t.create_with("c1", spec).await;
    // In the foreground: the timeout kills every process of the command
    // (its marker) before the result comes back, so the very next command
    // runs, every time.
    for round in 0..5 {
        let result = t
            .run_with("c1", "bomb() { bomb | bomb & }; bomb; sleep 30", 1_000)
            .await;
        assert_eq!(result.outcome, Outcome::Timeout, "round {round}");
        let result = t.run("c1", "echo usable | cat").await;
        assert_eq!(result.stdout, "usable\n", "round {round}: {result:?}");
        assert_eq!(
            result.outcome,
            Outcome::Exit { exit_code: 0 },
            "round {round}"
        );
    }
    // Detached: it saturates the container, never the host; a restart clears it.
    let _ = t
        .run_with(
            "c1",
            "bomb() { bomb | bomb & }; setsid bash -c 'bomb() { bomb | bomb & }; bomb' &",
            3_000,
        )
        .await;
    let host = std::process::Command::new("true")
        .status()
        .expect("the host can still fork");
    assert!(host.success());
    t.engine.stop("c1").await.unwrap();
    t.engine.start("c1").await.unwrap();
    assert_eq!(t.ok("c1", "echo fresh").await, "fresh\n");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn files_survive_stop_and_start_but_processes_do_not() {
    let t = TestEngine::new("lifecycle").await;
    t.create("c1").await;
    t.ok(
        "c1",
        "echo kept > /mnt/data/note.txt; echo home > ~/h.txt; setsid sleep 1000 >/dev/null 2>&1 &",
    )
    .await;
    let init = t.engine.init_pid("c1").await.unwrap().expect("running");
    t.engine.stop("c1").await.unwrap();
    assert_eq!(
        t.engine.inspect("c1").await.unwrap().state,
        shellgate_sandbox::ContainerState::Stopped
    );
    assert!(!process_alive(init), "init survived stop");
    t.engine.start("c1").await.unwrap();
    assert_eq!(
        t.ok("c1", "cat /mnt/data/note.txt ~/h.txt").await,
        "kept\nhome\n"
    );
    assert_eq!(t.ok("c1", "pgrep -c sleep || true").await.trim(), "0");
    // A run on a stopped container starts it transparently.
    t.engine.stop("c1").await.unwrap();
    assert_eq!(t.ok("c1", "cat note.txt").await, "kept\n");
    t.finish().await;
}

/// The dirty pages of the binary's writable mappings in `pid` (its
/// relocated data, the GOT), in KiB: (shared with other processes, its own).
fn binary_dirty_kib(pid: i32) -> (u64, u64) {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let (mut shared, mut private, mut in_binary) = (0, 0, false);
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or("");
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            // A mapping's header: the binary's own, written (relocated) pages.
            let perms = fields.next().unwrap_or("");
            let path = line.split_whitespace().nth(5).unwrap_or("");
            in_binary = perms.starts_with("rw") && path.ends_with("/shellgate");
        } else if in_binary {
            let kib = fields
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            match first {
                "Shared_Dirty:" => shared += kib,
                "Private_Dirty:" => private += kib,
                _ => {}
            }
        }
    }
    (shared, private)
}

#[tokio::test(flavor = "multi_thread")]
async fn inits_share_the_binarys_relocated_pages_and_stay_the_engines_children() {
    let t = TestEngine::new("zygote").await;
    t.create("c1").await;
    t.create("c2").await;
    let mut inits = Vec::new();
    for id in ["c1", "c2"] {
        let init = t.engine.init_pid(id).await.unwrap().expect("running");
        // The engine (this process) is init's parent, as with a spawned
        // helper: it reaps init, and init ends with it.
        let status = std::fs::read_to_string(format!("/proc/{init}/status")).unwrap();
        let ppid = status
            .lines()
            .find_map(|l| l.strip_prefix("PPid:"))
            .unwrap()
            .trim()
            .to_owned();
        assert_eq!(ppid, std::process::id().to_string(), "{status}");
        inits.push(init);
    }
    for init in &inits {
        // Forked from the zygote, the relocated pages are the zygote's,
        // shared by every init; executed afresh, each init would hold its
        // own copy (all of it private).
        let (shared, private) = binary_dirty_kib(*init);
        assert!(
            shared > private,
            "init {init}: {shared} KiB shared, {private} KiB private"
        );
    }
    // Stopped, started again, a container still works (a new helper from
    // the same zygote).
    t.engine.stop("c1").await.unwrap();
    assert!(!process_alive(inits[0]));
    assert_eq!(t.ok("c1", "echo back").await, "back\n");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_disk_left_unclean_by_a_host_crash_is_checked_before_it_is_mounted() {
    let t = TestEngine::new("unclean-disk").await;
    t.create("c1").await;
    t.ok("c1", "echo kept > /mnt/data/k.txt").await;
    t.engine.stop("c1").await.unwrap();
    let image = t.data_dir().join("containers/c1/disk.img");
    if !image.exists() {
        eprintln!("no disk images on this host (no root or no mkfs.ext4): skipped");
        return t.finish().await;
    }
    let needs_check =
        || shellgate_sandbox::disk::needs_check(&std::fs::File::open(&image).unwrap()).unwrap();
    // Unmounted cleanly once the container's processes are gone.
    assert!(common::eventually(Duration::from_secs(10), || !needs_check()).await);
    // What a host crash leaves on a disk without a journal: the superblock
    // still says "mounted" (s_state without its clean bit; `debugfs` keeps
    // its checksum valid, as the kernel does).
    let status = std::process::Command::new("debugfs")
        .args(["-w", "-R", "ssv state 0"])
        .arg(&image)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    assert!(needs_check(), "a journal-less disk left unclean is checked");
    // e2fsck -p runs before the mount; the files are there.
    assert_eq!(t.ok("c1", "cat /mnt/data/k.txt").await, "kept\n");
    t.engine.stop("c1").await.unwrap();
    assert!(common::eventually(Duration::from_secs(10), || !needs_check()).await);
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn destroy_leaves_nothing_and_frees_the_id() {
    let t = TestEngine::new("destroy").await;
    t.create("c1").await;
    t.ok("c1", "echo x > f").await;
    let init = t.engine.init_pid("c1").await.unwrap().expect("running");
    t.engine.destroy("c1").await.unwrap();
    assert!(matches!(
        t.engine.inspect("c1").await,
        Err(SandboxError::NotFound(_))
    ));
    assert!(matches!(
        t.engine
            .run("c1", RunRequest::new(vec!["true".into()]))
            .await,
        Err(SandboxError::NotFound(_))
    ));
    t.engine.settle().await;
    assert!(!process_alive(init));
    let leftovers: Vec<_> = std::fs::read_dir(t.data_dir().join("containers"))
        .unwrap()
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // The id can be used again, and the new container starts empty.
    t.create("c1").await;
    assert_eq!(t.ok("c1", "ls /mnt/data | wc -l").await.trim(), "0");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn host_files_and_other_containers_are_out_of_reach() {
    let t = TestEngine::new("isolation").await;
    t.create("a").await;
    t.create("b").await;
    t.ok("a", "echo secret-of-a > /mnt/data/secret.txt").await;
    let probe = "cat /etc/shadow 2>&1; ls /root /srv /var/lib /work 2>&1; \
                 grep -rl secret-of-a /mnt /home /tmp /etc /dev/shm /var 2>/dev/null; \
                 cat /proc/1/root/etc/shadow 2>&1; true";
    let seen = t.ok("b", probe).await;
    assert!(!seen.contains("secret-of-a"), "{seen}");
    assert!(seen.contains("/etc/shadow: No such file"), "{seen}");
    assert!(!seen.contains("root:"), "{seen}");
    // No other container's directory is mounted inside, and the host's data
    // directory does not exist there.
    let containers = t.data_dir().join("containers").display().to_string();
    let mounts = t.ok("b", "cat /proc/self/mountinfo").await;
    assert!(!mounts.contains(&containers), "{mounts}");
    let listing = t
        .run("b", &format!("ls {} 2>&1", t.data_dir().display()))
        .await;
    assert!(
        listing.stdout.contains("No such file or directory"),
        "{listing:?}"
    );
    // On the host, other users can neither list containers nor read disks.
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: std::path::PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(t.data_dir().join("containers")), 0o711);
    assert_eq!(mode(t.data_dir().join("containers/a/disk.img")), 0o600);
    // /etc holds only what the allow-list copied.
    let etc = t.ok("b", "ls /etc").await;
    for private in ["shadow", "gshadow", "sudoers", "ssh", "subuid"] {
        assert!(
            !etc.lines().any(|l| l == private),
            "/etc/{private} leaked: {etc}"
        );
    }
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn host_processes_are_invisible() {
    let t = TestEngine::new("pidns").await;
    t.create("c1").await;
    // Only init and the processes of this very command exist.
    let comms = t
        .ok("c1", "cat /proc/[0-9]*/comm | sort -u | tr '\\n' ' '")
        .await;
    for comm in comms.split_whitespace() {
        assert!(
            ["sandbox-init", "bash", "cat", "sort", "tr"].contains(&comm),
            "host process visible: {comm} in {comms}"
        );
    }
    let me = std::process::id().to_string();
    let result = t
        .run(
            "c1",
            &format!("kill -0 {me} 2>&1; ls /proc/{me} 2>&1 | head -1"),
        )
        .await;
    assert!(!result.stdout.contains("cmdline"), "{result:?}");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_network_is_empty_and_host_loopback_is_unreachable() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let t = TestEngine::new("net").await;
    t.create("c1").await;
    let links = t
        .ok(
            "c1",
            "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '",
        )
        .await;
    assert_eq!(links.trim(), "lo");
    let connect = format!(
        "python3 - <<'EOF'\nimport socket\nfor host in ['127.0.0.1', '10.0.2.2', '1.1.1.1']:\n    s = socket.socket()\n    s.settimeout(2)\n    try:\n        s.connect((host, {port} if host == '127.0.0.1' else 80))\n        print(host, 'connected')\n    except OSError as e:\n        print(host, 'refused', e.errno)\nEOF"
    );
    let out = t.ok("c1", &connect).await;
    assert!(!out.contains("connected"), "{out}");
    assert!(listener.accept().is_err(), "a connection reached the host");
    // vsock is not namespaced: its sockets are refused outright.
    let vsock = t.ok("c1", "python3 -c 'import socket; socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)' 2>&1; true").await;
    assert!(
        vsock.contains("Errno 97") || vsock.contains("not supported"),
        "{vsock}"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mount_unshare_and_kernel_interfaces_are_denied() {
    let t = TestEngine::new("seccomp").await;
    t.create("c1").await;
    let out = t
        .ok(
            "c1",
            "unshare -U true 2>&1; echo unshare=$?; \
             unshare -r true 2>&1; echo unshare_r=$?; \
             mount -t tmpfs none /tmp 2>&1; echo mount=$?; \
             python3 -c 'import ctypes,os; libc=ctypes.CDLL(None,use_errno=True); r=libc.syscall(425,1,0); print(\"io_uring\",r,ctypes.get_errno())'; \
             python3 -c 'import ctypes; libc=ctypes.CDLL(None,use_errno=True); r=libc.syscall(321,0,0,0); print(\"bpf\",r,ctypes.get_errno())'; \
             python3 -c 'import ctypes; libc=ctypes.CDLL(None,use_errno=True); r=libc.syscall(250,0,0,0); print(\"keyctl\",r,ctypes.get_errno())'; \
             true",
        )
        .await;
    assert!(out.contains("unshare=1"), "{out}");
    assert!(out.contains("unshare_r=1"), "{out}");
    assert!(!out.contains("mount=0"), "{out}");
    assert!(out.contains("io_uring -1 1"), "{out}");
    assert!(out.contains("bpf -1 1"), "{out}");
    assert!(out.contains("keyctl -1 1"), "{out}");
    // Threads and processes still work (clone without namespace flags).
    assert_eq!(t.ok("c1", "python3 -c 'import threading; t=threading.Thread(target=print,args=(\"thread\",)); t.start(); t.join()'").await, "thread\n");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn setuid_binaries_grant_nothing() {
    let t = TestEngine::new("setuid").await;
    t.create("c1").await;
    let setuid = t
        .ok(
            "c1",
            "find /usr/bin -perm -4000 -type f 2>/dev/null | head -5",
        )
        .await;
    assert!(
        !setuid.trim().is_empty(),
        "the host has no setuid binary to try"
    );
    let mounts = t.ok("c1", "grep ' /usr ' /proc/self/mountinfo").await;
    assert!(mounts.contains("nosuid"), "{mounts}");
    // Each setuid-root binary runs with our own ids.
    for binary in setuid.lines() {
        let result = t.run("c1", &format!("{binary} --help >/dev/null 2>&1; grep -E '^(Uid|Gid):' /proc/self/status; ls -ln {binary}")).await;
        assert!(!result.stdout.contains("\t0\t"), "{binary}: {result:?}");
    }
    let su = t
        .run("c1", "su -c 'id -u' root </dev/null 2>&1; echo rc=$?")
        .await;
    assert!(!su.stdout.lines().any(|l| l == "0"), "{su:?}");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_disk_fill_stops_at_the_quota_and_tmp_at_its_cap() {
    let t = TestEngine::new("quota").await;
    let spec = ContainerSpec {
        disk_bytes: 64 << 20,
        tmp_bytes: 32 << 20,
        ..ContainerSpec::default()
    };
    t.create_with("c1", spec).await;
    let result = t
        .run(
            "c1",
            "dd if=/dev/zero of=/mnt/data/fill bs=1M count=200 2>&1; echo rc=$?",
        )
        .await;
    assert!(
        result.stdout.contains("No space left on device"),
        "{result:?}"
    );
    assert!(!result.stdout.contains("rc=0"), "{result:?}");
    t.ok("c1", "rm /mnt/data/fill").await;
    let home = t
        .run(
            "c1",
            "dd if=/dev/zero of=$HOME/fill bs=1M count=200 2>&1; echo rc=$?",
        )
        .await;
    assert!(home.stdout.contains("No space left on device"), "{home:?}");
    let tmp = t
        .run("c1", "dd if=/dev/zero of=/tmp/fill bs=1M count=100 2>&1")
        .await;
    assert!(tmp.stdout.contains("No space left on device"), "{tmp:?}");
    assert_eq!(t.ok("c1", "rm -f /mnt/data/fill $HOME/fill /tmp/fill; echo ok > /mnt/data/after; cat /mnt/data/after").await, "ok\n");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_files_interface_stays_inside_mnt_data() {
    let t = TestEngine::new("files").await;
    t.create("c1").await;
    t.engine
        .write_file("c1", "/mnt/data/in/put.txt", b"uploaded")
        .await
        .unwrap();
    assert_eq!(
        t.ok("c1", "cat in/put.txt; stat -c %U in/put.txt").await,
        "uploadeduser\n"
    );
    t.ok("c1", "echo made > out.txt; ln -s /etc/hostname escape; ln -s ../../../../etc/passwd rel; ln -s out.txt alias").await;
    assert_eq!(
        t.engine.read_file("c1", "out.txt").await.unwrap(),
        b"made\n"
    );
    assert_eq!(
        t.engine.read_file("c1", "/mnt/data/alias").await.unwrap(),
        b"made\n"
    );
    for escape in ["escape", "rel", "../etc/passwd", "/etc/passwd"] {
        let result = t.engine.read_file("c1", escape).await;
        assert!(
            result.is_err(),
            "{escape} was readable: {:?}",
            result.map(|b| String::from_utf8_lossy(&b).into_owned())
        );
    }
    // Writing through a symlink never reaches its target.
    assert!(t.engine.write_file("c1", "escape", b"x").await.is_err());
    t.ok("c1", "mkdir -p d; ln -s /etc dlink").await;
    assert!(t.engine.write_file("c1", "dlink/evil", b"x").await.is_err());
    let files = t.engine.list_files("c1").await.unwrap();
    let paths: Vec<&str> = files.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["/mnt/data/in/put.txt", "/mnt/data/out.txt"]);
    t.engine.delete_file("c1", "out.txt").await.unwrap();
    assert!(matches!(
        t.engine.read_file("c1", "out.txt").await,
        Err(SandboxError::FileNotFound(_))
    ));
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_requests_are_refused_and_change_nothing() {
    let t = TestEngine::new("invalid").await;
    for id in ["", "../x", "a/b", &"x".repeat(65)] {
        assert!(matches!(
            t.engine.create(id, ContainerSpec::default()).await,
            Err(SandboxError::InvalidRequest { param: "id", .. })
        ));
    }
    let missing = ContainerSpec {
        image: "no-such-image".into(),
        ..ContainerSpec::default()
    };
    assert!(matches!(
        t.engine.create("c1", missing).await,
        Err(SandboxError::ImageNotFound(_))
    ));
    t.create("c1").await;
    assert!(matches!(
        t.engine.create("c1", ContainerSpec::default()).await,
        Err(SandboxError::AlreadyExists(_))
    ));
    let mut request = RunRequest::new(vec!["true".into(); 101]);
    assert!(matches!(
        t.engine.run("c1", request.clone()).await,
        Err(SandboxError::InvalidRequest {
            param: "commands",
            ..
        })
    ));
    request.commands = vec!["x".repeat(200_000)];
    assert!(matches!(
        t.engine.run("c1", request).await,
        Err(SandboxError::InvalidRequest {
            param: "commands",
            ..
        })
    ));
    assert_eq!(t.ok("c1", "echo fine").await, "fine\n");
    assert_eq!(t.engine.list().await.unwrap().len(), 1);
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_large_command_is_passed_intact() {
    let t = TestEngine::new("bigcmd").await;
    t.create("c1").await;
    let payload = "y".repeat(100_000);
    let out = t.ok("c1", &format!("x='{payload}'; echo ${{#x}}")).await;
    assert_eq!(out, "100000\n");
    let mut buf = String::new();
    "unicode ☃ \u{1F600}"
        .as_bytes()
        .read_to_string(&mut buf)
        .unwrap();
    assert_eq!(
        t.ok("c1", &format!("echo '{buf}'")).await,
        format!("{buf}\n")
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_warm_container_takes_the_requested_limits() {
    let t = TestEngine::with("warm", |config| {
        config.pool_size = 1;
        config.spare_helpers = 1;
        config.warm_containers = 1;
    })
    .await;
    // Give the background refill time to start a warm container.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let spec = ContainerSpec {
        memory_bytes: 256 << 20,
        pids_max: 32,
        ..ContainerSpec::default()
    };
    t.create_with("w1", spec).await;
    let result = t
        .run(
            "w1",
            "python3 -c 'b = bytearray(600 * 1024 * 1024); print(len(b))'",
        )
        .await;
    assert_eq!(exit_code(&result), 137, "{result:?}");
    let result = t
        .run_with("w1", "for i in $(seq 64); do sleep 5 & done; wait", 2_000)
        .await;
    assert!(
        result.stderr.contains("Resource temporarily unavailable"),
        "{result:?}"
    );
    assert_eq!(
        t.ok("w1", "echo fine; ls /mnt/data | wc -l").await,
        "fine\n0\n"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn suspension_never_cuts_a_running_command_short() {
    let t = TestEngine::new("suspend").await;
    t.create("c1").await;
    let engine = t.engine.clone();
    let running = tokio::spawn(async move {
        let mut request = RunRequest::new(vec!["sleep 1; echo finished".into()]);
        request.timeout_ms = 10_000;
        engine.run("c1", request).await
    });
    assert!(
        common::eventually(Duration::from_secs(30), || {
            common::processes_matching("sleep 1; echo finished") > 0
        })
        .await
    );
    assert!(
        !t.engine.suspend_if_idle("c1").await.unwrap(),
        "suspended while a command ran"
    );
    let result = running.await.unwrap().unwrap().remove(0);
    assert_eq!(result.stdout, "finished\n");
    assert!(t.engine.suspend_if_idle("c1").await.unwrap());
    assert_eq!(
        t.engine.inspect("c1").await.unwrap().state,
        shellgate_sandbox::ContainerState::Stopped
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_home_directory_persists_across_suspension_like_mnt_data() {
    let t = TestEngine::new("home").await;
    t.create("c1").await;
    t.ok(
        "c1",
        "cd && echo kept > notes && mkdir -p .local/bin && \
         printf '#!/bin/sh\\necho tool\\n' > .local/bin/mytool && chmod +x .local/bin/mytool && \
         echo data > /mnt/data/f && echo gone > /tmp/f",
    )
    .await;
    assert!(t.engine.suspend_if_idle("c1").await.unwrap());
    assert_eq!(
        t.engine.inspect("c1").await.unwrap().state,
        shellgate_sandbox::ContainerState::Stopped
    );
    // The next command wakes it: the home (and ~/.local/bin on PATH) is
    // there as /mnt/data is; /tmp is not.
    assert_eq!(
        t.ok(
            "c1",
            "cat /home/user/notes /mnt/data/f; mytool; ls /tmp; stat -c '%U %a' ~"
        )
        .await,
        "kept\ndata\ntool\nuser 750\n"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn each_container_maps_to_host_ids_of_its_own() {
    use std::os::unix::fs::MetadataExt;
    let t = TestEngine::new("idranges").await;
    t.create("a").await;
    t.create("b").await;
    let outside = |pid: i32| -> u32 {
        let map = std::fs::read_to_string(format!("/proc/{pid}/uid_map")).unwrap();
        map.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let init_a = t.engine.init_pid("a").await.unwrap().unwrap();
    let init_b = t.engine.init_pid("b").await.unwrap().unwrap();
    let (base_a, base_b) = (outside(init_a), outside(init_b));
    assert_ne!(base_a, base_b, "two containers share host ids");
    assert!(
        base_a.abs_diff(base_b) >= 65_536,
        "ranges overlap: {base_a} {base_b}"
    );
    // What the sandbox user makes belongs to its container's range on the host.
    for (id, init, base) in [("a", init_a, base_a), ("b", init_b, base_b)] {
        t.ok(id, "touch /mnt/data/mine").await;
        let owner = std::fs::metadata(format!("/proc/{init}/root/mnt/data/mine"))
            .unwrap()
            .uid();
        assert_eq!(owner, base + 1000);
    }
    // A stopped container holds no range: the next start is given it. Its
    // disk holds its own ids, so its files are still its own in whichever
    // range it runs next, and the host stores them unshifted.
    t.engine.stop("a").await.unwrap();
    t.create("c").await;
    let init_c = t.engine.init_pid("c").await.unwrap().unwrap();
    assert_eq!(
        outside(init_c),
        base_a,
        "a stopped container's range was kept"
    );
    t.engine.start("a").await.unwrap();
    let init_a = t.engine.init_pid("a").await.unwrap().unwrap();
    let moved = outside(init_a);
    assert!(![base_a, base_b].contains(&moved), "{moved}");
    assert_eq!(
        t.ok(
            "a",
            "echo more >> /mnt/data/mine && cat /mnt/data/mine && stat -c %u:%g /mnt/data/mine ~"
        )
        .await,
        "more\n1000:1000\n1000:1000\n"
    );
    let owner = std::fs::metadata(format!("/proc/{init_a}/root/mnt/data/mine"))
        .unwrap()
        .uid();
    assert_eq!(owner, moved + 1000);
    // A file the engine writes is the sandbox user's too, and a stopped
    // container's files are read from its disk as they are.
    t.engine
        .write_file("a", "/mnt/data/put", b"x")
        .await
        .unwrap();
    assert_eq!(
        t.ok("a", "stat -c %u:%g /mnt/data/put").await,
        "1000:1000\n"
    );
    t.engine.stop("a").await.unwrap();
    assert_eq!(
        t.engine.read_file("a", "/mnt/data/mine").await.unwrap(),
        b"more\n"
    );
    // A container of a restarted engine runs in a range of its own too,
    // with its files.
    let again = TestEngine::reopen(t.stop().await).await;
    assert_eq!(
        again
            .ok("b", "echo again >> /mnt/data/mine && cat /mnt/data/mine")
            .await,
        "again\n"
    );
    again.finish().await;
}

/// Adds `base` to every owner under `dir` (links themselves), as disks made
/// before idmapped mounts stored them.
fn shift_owners_by(dir: &std::path::Path, base: u32) {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(dir).unwrap();
    std::os::unix::fs::lchown(dir, Some(base + meta.uid()), Some(base + meta.gid())).unwrap();
    if meta.is_dir() {
        for entry in std::fs::read_dir(dir).unwrap() {
            shift_owners_by(&entry.unwrap().path(), base);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_disk_holding_host_ids_keeps_its_range_for_good() {
    let t = TestEngine::new("legacy-ids").await;
    t.create("old").await;
    t.ok("old", "echo kept > /mnt/data/f && mkdir ~/d").await;
    let data = t.data_dir();
    let dir = t.stop().await;
    // Its disk as an engine that stored host ids left it: every owner in
    // slot 7's range, the slot in its directory.
    let base = 3_000_000_000 + 7 * 65_536;
    let mount_point = dir.path().join("legacy-mount");
    std::fs::create_dir(&mount_point).unwrap();
    let mount = std::process::Command::new("mount")
        .arg("-o")
        .arg("loop")
        .arg(data.join("containers/old/disk.img"))
        .arg(&mount_point)
        .status()
        .unwrap();
    assert!(mount.success());
    shift_owners_by(&mount_point, base);
    let umount = std::process::Command::new("umount")
        .arg(&mount_point)
        .status()
        .unwrap();
    assert!(umount.success());
    std::fs::write(data.join("containers/old/uid-slot"), "7").unwrap();
    let _ = std::fs::remove_file(data.join("no-kept-slots"));
    let t = TestEngine::reopen(dir).await;
    assert_eq!(
        t.ok(
            "old",
            "cat /mnt/data/f && echo new > /mnt/data/g && stat -c %u:%g /mnt/data/f ~/d /mnt/data/g"
        )
        .await,
        "kept\n1000:1000\n1000:1000\n1000:1000\n"
    );
    let outside = |pid: i32| -> u32 {
        let map = std::fs::read_to_string(format!("/proc/{pid}/uid_map")).unwrap();
        map.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let init = t.engine.init_pid("old").await.unwrap().unwrap();
    assert_eq!(outside(init), base);
    // Its slot is never leased to another container's run.
    t.engine.stop("old").await.unwrap();
    for id in ["n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8"] {
        t.create(id).await;
        let init = t.engine.init_pid(id).await.unwrap().unwrap();
        assert_ne!(outside(init), base, "{id} was given a kept range");
    }
    t.finish().await;
}

/// Ports: a connection made by init inside the container's
/// network namespace reaches only the container's own loopback.
#[tokio::test(flavor = "multi_thread")]
async fn a_port_is_reached_inside_the_container_only_and_keeps_it_busy() {
    use shellgate_sandbox::PortFailure;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // A service on the host's loopback, at a port the container could ask for.
    let host = TcpListener::bind("127.0.0.1:0").unwrap();
    let host_port = host.local_addr().unwrap().port();
    host.set_nonblocking(true).unwrap();
    let t = TestEngine::new("ports").await;
    t.create("c1").await;
    let refused = |e: SandboxError| {
        matches!(
            e,
            SandboxError::Port {
                failure: PortFailure::NotListening,
                ..
            }
        )
    };
    let e = t.engine.connect_port("c1", 8000).await.unwrap_err();
    assert!(refused(e), "nothing listens yet");
    let e = t.engine.connect_port("c1", host_port).await.unwrap_err();
    assert!(refused(e), "the host's listener must not be reached");
    assert!(host.accept().is_err(), "a connection reached the host");
    let e = t.engine.connect_port("c1", 80).await.unwrap_err();
    assert!(
        matches!(e, SandboxError::InvalidRequest { param: "port", .. }),
        "{e}"
    );
    t.ok("c1", "echo served > index.txt; nohup python3 -m http.server 8000 --bind 127.0.0.1 >/tmp/http.log 2>&1 &").await;
    t.ok("c1", "for i in $(seq 100); do python3 -c \"import socket; socket.create_connection(('127.0.0.1', 8000))\" 2>/dev/null && exit 0; sleep 0.1; done; exit 1").await;
    let mut connection = t.engine.connect_port("c1", 8000).await.unwrap();
    // Open: the container is busy, the sweeper cannot suspend it.
    assert!(!t.engine.suspend_if_idle("c1").await.unwrap());
    connection
        .write_all(b"GET /index.txt HTTP/1.0\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    connection.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.0 200"), "{answer}");
    assert!(answer.ends_with("served\n"), "{answer}");
    drop(connection);
    assert!(t.engine.suspend_if_idle("c1").await.unwrap());
    // Stopped: refused as suspended, and not woken by the attempt.
    let e = t.engine.connect_port("c1", 8000).await.unwrap_err();
    assert!(
        matches!(
            e,
            SandboxError::Port {
                failure: PortFailure::Suspended,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        t.engine.inspect("c1").await.unwrap().state,
        shellgate_sandbox::ContainerState::Stopped
    );
    t.finish().await;
}

/// Ports: a container has at most `MAX_PORT_CONNECTIONS` proxied
/// connections open at once; a closed one frees its place.
#[tokio::test(flavor = "multi_thread")]
async fn a_containers_port_connections_are_capped() {
    use shellgate_sandbox::PortFailure;
    let t = TestEngine::new("port-cap").await;
    t.create("c1").await;
    // A listener that never accepts, with room in its queue for them all.
    t.ok("c1", "nohup python3 -c \"import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 8001)); s.listen(1024); time.sleep(100000)\" >/dev/null 2>&1 &").await;
    t.ok("c1", "for i in $(seq 100); do python3 -c \"import socket; socket.create_connection(('127.0.0.1', 8001))\" 2>/dev/null && exit 0; sleep 0.1; done; exit 1").await;
    let mut open = Vec::new();
    for _ in 0..256 {
        open.push(t.engine.connect_port("c1", 8001).await.unwrap());
    }
    match t.engine.connect_port("c1", 8001).await {
        Err(SandboxError::Port {
            failure: PortFailure::TooManyConnections { limit: 256 },
            ..
        }) => {}
        other => panic!("the 257th connection: {other:?}"),
    }
    open.pop();
    open.push(t.engine.connect_port("c1", 8001).await.unwrap());
    drop(open);
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_volume_is_shared_live_by_containers_as_one_user() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let t = TestEngine::new("volume").await;
    let volume = t.dir.path().join("volume");
    std::fs::create_dir(&volume).unwrap();
    std::fs::set_permissions(&volume, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let spec = || ContainerSpec {
        volumes: vec![shellgate_sandbox::backend::VolumeBind {
            source: volume.clone(),
            target: "/mnt/shared".into(),
        }],
        ..ContainerSpec::default()
    };
    t.create_with("c1", spec()).await;
    t.create_with("c2", spec()).await;
    let wrote = t
        .ok(
            "c1",
            "echo one > /mnt/shared/f && stat -c '%U %a' /mnt/shared/f",
        )
        .await;
    assert_eq!(wrote, "user 644\n");
    // The other container sees it at once, its own user's as well: it
    // changes it, and again after a restart in another host id range.
    let read = t
        .ok("c2", "cat /mnt/shared/f; stat -c %U /mnt/shared/f")
        .await;
    assert_eq!(read, "one\nuser\n");
    t.ok("c2", "echo two >> /mnt/shared/f").await;
    t.engine.stop("c2").await.unwrap();
    t.create("between").await;
    assert_eq!(
        t.ok("c2", "echo three >> /mnt/shared/f && cat /mnt/shared/f")
            .await,
        "one\ntwo\nthree\n"
    );
    // On the host the file holds the container's own ids, never root's.
    let owner = std::fs::metadata(volume.join("f")).unwrap().uid();
    assert_eq!(owner, 1000, "the volume's file on the host");
    // A link inside resolves in the container: the host's volume folder is
    // not there.
    let host_path = volume.display().to_string();
    let looked = t
        .run(
            "c1",
            &format!("ln -s {host_path} /mnt/shared/out && ls /mnt/shared/out/"),
        )
        .await;
    assert_ne!(exit_code(&looked), 0, "{looked:?}");
    // Destroyed containers leave the volume's files.
    t.engine.destroy("c1").await.unwrap();
    t.engine.destroy("c2").await.unwrap();
    assert_eq!(
        std::fs::read_to_string(volume.join("f")).unwrap(),
        "one\ntwo\nthree\n"
    );
    t.finish().await;
}
