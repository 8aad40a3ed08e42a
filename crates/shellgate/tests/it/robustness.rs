//! Regression tests of the engine's robustness: timeouts that hold whatever
//! the caller does, descendants that cannot escape a kill, limits that say
//! so, one notion of busy, and files reached without waking a container.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::{eventually, exit_code, TestEngine};
use shellgate_sandbox::backend::{ContainerSpec, Outcome, RunRequest, SandboxBackend};
use shellgate_sandbox::{ContainerState, SandboxError};

fn request(commands: &[&str], timeout_ms: u64) -> RunRequest {
    let mut request = RunRequest::new(commands.iter().map(|c| c.to_string()).collect());
    request.timeout_ms = timeout_ms;
    request
}

/// Processes whose command line contains `pattern` (written `[s]leep ...`
/// so the shell running pgrep does not match itself).
async fn count(t: &TestEngine, id: &str, pattern: &str) -> u32 {
    let (first, rest) = pattern.split_at(1);
    t.ok(id, &format!("pgrep -c -f '[{first}]{rest}' || true"))
        .await
        .trim()
        .parse()
        .unwrap_or(u32::MAX)
}

/// Processes matching `pattern` once they had up to 2.5 s to go.
async fn left_after_a_while(t: &TestEngine, id: &str, pattern: &str) -> u32 {
    common::eventually_async(Duration::from_millis(2500), || async {
        count(t, id, pattern).await == 0
    })
    .await;
    count(t, id, pattern).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timed_out_command_dies_with_every_descendant_wherever_it_went() {
    let t = TestEngine::new("descendants").await;
    t.create("c1").await;
    // setsid, a double fork and nohup all leave the process group.
    let result = t
        .run_with(
            "c1",
            "setsid sleep 1001 >/dev/null 2>&1 & (sleep 1002 >/dev/null 2>&1 &) ; \
             nohup sleep 1003 >/dev/null 2>&1 & setsid bash -c '(sleep 1004 &) ; sleep 1005' \
             >/dev/null 2>&1 & sleep 60",
            1_000,
        )
        .await;
    assert_eq!(result.outcome, Outcome::Timeout, "{result:?}");
    let left = left_after_a_while(&t, "c1", "sleep 100").await;
    assert_eq!(left, 0, "descendants of a timed-out command survived");
    // A command that ends normally keeps its background services.
    t.ok("c1", "setsid sleep 2001 >/dev/null 2>&1 & true").await;
    t.ok("c1", "true").await;
    assert_eq!(count(&t, "c1", "sleep 2001").await, 1);
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_whose_caller_gives_up_still_kills_its_command() {
    let t = TestEngine::new("dropped").await;
    t.create("c1").await;
    let run = t
        .engine
        .run("c1", request(&["setsid sleep 3001 & sleep 3002"], 300_000));
    assert!(
        tokio::time::timeout(Duration::from_millis(500), run)
            .await
            .is_err(),
        "the command should still be running"
    );
    let left = left_after_a_while(&t, "c1", "sleep 300").await;
    assert_eq!(left, 0, "a dropped run left its command running");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_command_after_a_fork_bomb_is_answered_at_once() {
    let t = TestEngine::new("bomb-next").await;
    let spec = ContainerSpec {
        pids_max: 64,
        ..ContainerSpec::default()
    };
    t.create_with("c1", spec).await;
    let init = t.engine.init_pid("c1").await.unwrap().expect("running");
    // Twenty bombs in a row: the recovery must not depend on where the
    // bomb's process count happens to be when the next command arrives.
    for round in 0..20 {
        // Detached: the command returns at once, the bomb fills the container.
        t.run_with(
            "c1",
            "setsid bash -c 'bomb() { bomb | bomb & }; bomb' >/dev/null 2>&1 & true",
            5_000,
        )
        .await;
        // Awaited: the bomb is at the limit and still running into it (the
        // kernel counts its failed forks) after that command ended.
        let before = failed_forks(init).expect("the container's pids.events");
        assert!(
            eventually(Duration::from_secs(60), || failed_forks(init)
                .is_some_and(|n| n > before))
            .await,
            "round {round}: the bomb never reached the limit"
        );
        // A pipeline needs forks of its own: with the bomb still there,
        // bash would retry them until the timeout.
        let result = t.run_with("c1", "echo answered | cat", 30_000).await;
        assert_eq!(
            result.outcome,
            Outcome::Exit { exit_code: 0 },
            "round {round}: {result:?}"
        );
        assert_eq!(result.stdout, "answered\n", "round {round}: {result:?}");
        assert!(
            result.stderr.contains("process limit (64")
                && result.stderr.contains("left running were ended"),
            "round {round}: the result names the limit and what was ended: {result:?}"
        );
        assert!(!result.stderr.contains("fork"), "round {round}: {result:?}");
    }
    t.finish().await;
}

/// Adversarial: bombs of other shapes, and a bomb beside a
/// bigger crowd of quiet leftovers (which the recovery must not take for
/// the runaway while the bomb refills what it frees).
#[tokio::test(flavor = "multi_thread")]
async fn the_command_after_a_fork_bomb_of_any_shape_is_answered() {
    let t = TestEngine::new("bomb-shapes").await;
    let spec = ContainerSpec {
        pids_max: 64,
        ..ContainerSpec::default()
    };
    t.create_with("c1", spec).await;
    let init = t.engine.init_pid("c1").await.unwrap().expect("running");
    let bombs = [
        // Forty quiet sleepers first (a leftover larger than the bomb).
        "setsid bash -c 'for i in $(seq 40); do sleep 1000 & done; wait' >/dev/null 2>&1 & true",
        "setsid bash -c 'bomb() { bomb | bomb & }; bomb' >/dev/null 2>&1 & true",
        "setsid python3 -c 'import os\nwhile True:\n  try: os.fork()\n  except OSError: pass' >/dev/null 2>&1 & true",
        "setsid perl -e 'while (1) { fork }' >/dev/null 2>&1 & true",
        "setsid python3 -c 'import threading, time\nwhile True:\n  try: threading.Thread(target=time.sleep, args=(1000,)).start()\n  except RuntimeError: pass' >/dev/null 2>&1 & true",
        "yes 1000 | setsid xargs -P 0 -n 1 sleep >/dev/null 2>&1 & true",
        // The bomb hits the limit while its own command still runs (a
        // busy wait: bash forks nothing for it).
        "setsid bash -c 'bomb() { bomb | bomb & }; bomb' >/dev/null 2>&1 & while ((SECONDS < 2)); do :; done",
    ];
    for round in 0..3 {
        for (shape, bomb) in bombs.iter().enumerate().skip(1) {
            if round > 0 || shape == 1 {
                t.run_with("c1", bombs[0], 5_000).await;
            }
            let before = failed_forks(init).expect("the container's pids.events");
            t.run_with("c1", bomb, 5_000).await;
            assert!(
                eventually(Duration::from_secs(60), || failed_forks(init)
                    .is_some_and(|n| n > before))
                .await,
                "round {round}, shape {shape}: the bomb never reached the limit"
            );
            let result = t.run_with("c1", "echo answered | cat", 30_000).await;
            assert_eq!(
                (result.outcome, result.stdout.as_str()),
                (Outcome::Exit { exit_code: 0 }, "answered\n"),
                "round {round}, shape {shape}: {result:?}"
            );
        }
    }
    t.finish().await;
}

/// The kernel's count of forks that failed at the process limit in the
/// cgroup of host process `pid` (cgroup v2, or v1's pids hierarchy).
fn failed_forks(pid: i32) -> Option<u64> {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    cgroups.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        let dir = if controllers.is_empty() {
            format!("/sys/fs/cgroup{path}")
        } else if controllers.split(',').any(|c| c == "pids") {
            format!("/sys/fs/cgroup/pids{path}")
        } else {
            return None;
        };
        let events = std::fs::read_to_string(format!("{dir}/pids.events")).ok()?;
        events
            .lines()
            .find_map(|l| l.strip_prefix("max "))
            .and_then(|n| n.trim().parse().ok())
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn hitting_the_process_or_memory_limit_is_reported_in_the_result() {
    let t = TestEngine::new("limits").await;
    let spec = ContainerSpec {
        pids_max: 32,
        memory_bytes: 128 << 20,
        ..ContainerSpec::default()
    };
    t.create_with("c1", spec).await;
    let result = t
        .run(
            "c1",
            "for i in $(seq 60); do sleep 3 & done 2>/dev/null; wait",
        )
        .await;
    assert!(
        result.stderr.contains("hit its process limit (32"),
        "{result:?}"
    );
    let result = t
        .run("c1", "python3 -c 'b = bytearray(600 * 1024 * 1024)'")
        .await;
    assert_eq!(exit_code(&result), 137, "{result:?}");
    assert!(result.stderr.contains("ran out of memory"), "{result:?}");
    // A clean command after them reports nothing.
    assert_eq!(t.run("c1", "true").await.stderr, "");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_deadline_ends_the_running_command_and_skips_the_rest() {
    let t = TestEngine::new("deadline").await;
    t.create("c1").await;
    let mut run = request(&["echo first", "sleep 30", "echo never"], 60_000);
    run.deadline_ms = Some(1_500);
    let started = Instant::now();
    let results = t.engine.run("c1", run).await.expect("run");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(results.len(), 3);
    assert_eq!(results[0].stdout, "first\n");
    assert_eq!(results[1].outcome, Outcome::Timeout);
    assert!(results[1].stderr.contains("deadline"), "{:?}", results[1]);
    assert_eq!(results[2].outcome, Outcome::Timeout);
    assert!(results[2].stderr.contains("not run"), "{:?}", results[2]);
    assert_eq!(results[2].stdout, "");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_container_gets_one_cpu_by_default() {
    let t = TestEngine::new("cpu").await;
    t.create("c1").await;
    // Two spinning processes for 2 s: without a ceiling they would use
    // about 4 s of CPU on two cores; with one core, at most about 2 s.
    let out = t
        .ok(
            "c1",
            "for i in 1 2; do timeout 2 sh -c 'while :; do :; done' & done; wait; \
             python3 -c 'import os; t = os.times(); print(t.children_user + t.children_system)'",
        )
        .await;
    let cpu: f64 = out.trim().parse().expect("seconds");
    assert!(cpu < 3.0, "two spinners used {cpu} s of CPU in 2 s");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_destroy_interrupts_a_command_with_a_clear_error() {
    let t = TestEngine::new("delete-during").await;
    t.create("c1").await;
    let engine = t.engine.clone();
    // A duration no other test uses: its process is this one.
    let running =
        tokio::spawn(async move { engine.run("c1", request(&["sleep 3004"], 60_000)).await });
    assert!(
        eventually(Duration::from_secs(30), || common::processes_matching(
            "sleep 3004"
        ) > 0)
        .await
    );
    // Busy: the sweeper's destroy refuses; a user's destroy goes ahead.
    assert!(!t.engine.destroy_if_idle("c1").await.unwrap());
    assert!(!t.engine.suspend_if_idle("c1").await.unwrap());
    t.engine.destroy("c1").await.unwrap();
    let result = tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("the run ended")
        .expect("task");
    assert!(
        matches!(result, Err(SandboxError::Deleted(ref id)) if id == "c1"),
        "{result:?}"
    );
    assert!(matches!(
        t.engine.run("c1", request(&["true"], 1_000)).await,
        Err(SandboxError::NotFound(_))
    ));
    t.create("c2").await;
    assert!(t.engine.destroy_if_idle("c2").await.unwrap());
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_containers_files_are_read_without_starting_it() {
    let t = TestEngine::new("views").await;
    t.create("c1").await;
    t.ok("c1", "echo kept > /mnt/data/note.txt").await;
    t.engine.stop("c1").await.unwrap();
    let listing = t.engine.list_files("c1").await.unwrap();
    assert_eq!(listing.files.len(), 1, "{listing:?}");
    assert_eq!(
        t.engine.read_file("c1", "note.txt").await.unwrap(),
        b"kept\n"
    );
    assert_eq!(
        t.engine.inspect("c1").await.unwrap().state,
        ContainerState::Stopped,
        "reading files must not start the container"
    );
    assert_eq!(t.engine.init_pid("c1").await.unwrap(), None);
    // A download still open when the container starts again shares its
    // file system: one disk never has two.
    let open = t.engine.open_file("c1", "note.txt").await.unwrap();
    t.ok("c1", "echo more >> /mnt/data/note.txt").await;
    let image = std::fs::canonicalize(t.data_dir().join("containers/c1/disk.img")).unwrap();
    let attached = std::fs::read_dir("/sys/block")
        .unwrap()
        .flatten()
        .filter(|d| {
            std::fs::read_to_string(d.path().join("loop/backing_file"))
                .is_ok_and(|f| f.trim() == image.to_string_lossy())
        })
        .count();
    assert_eq!(
        attached, 1,
        "the disk is attached to {attached} loop devices"
    );
    drop(open);
    assert_eq!(
        t.engine.read_file("c1", "note.txt").await.unwrap(),
        b"kept\nmore\n"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn files_that_cannot_be_served_or_replaced_are_refused_clearly() {
    let t = TestEngine::new("odd-files").await;
    t.create("c1").await;
    t.ok(
        "c1",
        "truncate -s 1T /mnt/data/sparse && mkfifo /mnt/data/pipe && \
         python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.bind(\"/mnt/data/sock\")'",
    )
    .await;
    assert!(matches!(
        t.engine.open_file("c1", "sparse").await,
        Err(SandboxError::FileTooLarge { bytes, .. }) if bytes == 1 << 40
    ));
    for name in ["pipe", "sock"] {
        let refused = t.engine.write_file("c1", name, b"x").await;
        assert!(
            matches!(refused, Err(SandboxError::Conflict(ref m)) if m.contains(name)),
            "{name}: {refused:?}"
        );
    }
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_listing_says_what_it_left_out() {
    let t = TestEngine::new("listing").await;
    t.create("c1").await;
    t.ok(
        "c1",
        "mkdir -p $(printf 'd/%.0s' $(seq 40)) && touch $(printf 'd/%.0s' $(seq 40))deep \
         && touch \"$(printf 'bad\\377name')\" plain",
    )
    .await;
    let listing = t.engine.list_files("c1").await.unwrap();
    assert_eq!(listing.skipped.non_utf8_names, 1, "{:?}", listing.skipped);
    assert_eq!(
        listing.skipped.too_deep_directories, 1,
        "{:?}",
        listing.skipped
    );
    assert!(!listing.skipped.entry_limit_reached);
    assert!(listing.files.iter().any(|f| f.path == "/mnt/data/plain"));
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_corrupt_id_slot_is_quarantined_never_shared() {
    let t = TestEngine::new("slots").await;
    t.create("good").await;
    t.create("bad").await;
    t.create("twin").await;
    let data = t.data_dir();
    let dir = t.stop().await;
    // Slots kept for good (disks holding host ids, which only an older
    // engine makes: it knows no mark that none is kept): one claimed twice,
    // one out of range.
    let _ = std::fs::remove_file(data.join("no-kept-slots"));
    std::fs::write(data.join("containers/good/uid-slot"), "5").unwrap();
    std::fs::write(data.join("containers/bad/uid-slot"), "0").unwrap();
    std::fs::write(data.join("containers/twin/uid-slot"), "5").unwrap();
    let t = TestEngine::reopen(dir).await;
    let ids: Vec<String> = t
        .engine
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert!(ids.contains(&"good".to_owned()) || ids.contains(&"twin".to_owned()));
    assert_eq!(ids.len(), 1, "only one container may own a slot: {ids:?}");
    assert!(!ids.contains(&"bad".to_owned()));
    assert!(data.join("containers/.quarantine-bad").is_dir());
    t.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_start_reads_no_slot_file_while_none_is_kept_and_a_stray_one_is_refused() {
    let t = TestEngine::new("no-kept-slots").await;
    t.create("a").await;
    t.create("b").await;
    let data = t.data_dir();
    // Every disk holds its container's own ids: the next start may skip
    // every slot file. One changed behind the engine's back is found at
    // that container's first use, refused, and the mark dropped.
    let t = TestEngine::reopen(t.stop().await).await;
    assert!(data.join("no-kept-slots").exists());
    std::fs::write(data.join("containers/b/uid-slot"), "9").unwrap();
    let t = TestEngine::reopen(t.stop().await).await;
    assert_eq!(t.ok("a", "echo fine").await, "fine\n");
    let refused = t.engine.inspect("b").await;
    assert!(
        matches!(&refused, Err(SandboxError::Setup(message)) if message.contains("restart")),
        "{refused:?}"
    );
    assert!(!data.join("no-kept-slots").exists());
    // The next start reads them all again and claims the slot.
    let t = TestEngine::reopen(t.stop().await).await;
    assert_eq!(t.ok("b", "echo claimed").await, "claimed\n");
    assert!(!data.join("no-kept-slots").exists(), "a slot is kept now");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_engine_reads_a_container_at_its_first_use_and_clears_leftovers_behind() {
    let t = TestEngine::new("stored").await;
    for id in ["kept", "no-spec", "throwaway"] {
        t.create(id).await;
    }
    t.ok("kept", "echo x > f").await;
    let data = t.data_dir();
    let dir = t.stop().await;
    // What a crash can leave: a directory whose spec was never written,
    // and a throwaway container's.
    std::fs::remove_file(data.join("containers/no-spec/spec.json")).unwrap();
    let spec_path = data.join("containers/throwaway/spec.json");
    let mut spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&spec_path).unwrap()).unwrap();
    spec["ephemeral"] = serde_json::Value::Bool(true);
    std::fs::write(&spec_path, serde_json::to_vec(&spec).unwrap()).unwrap();
    let t = TestEngine::reopen(dir).await;
    // Leftovers go once the engine serves, no request needed.
    assert!(
        common::wait_until(
            || !data.join("containers/no-spec").exists()
                && !data.join("containers/throwaway").exists(),
            Duration::from_secs(30)
        ),
        "leftovers stayed"
    );
    let ids = t.engine.container_ids().await.unwrap();
    assert_eq!(ids, vec!["kept".to_owned()]);
    assert_eq!(t.ok("kept", "cat f").await, "x\n");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn no_container_may_ask_for_more_memory_than_all_sandboxes_get() {
    let t = TestEngine::with("ceiling", |config| {
        config.pool_size = 0;
        config.spare_helpers = 1;
        config.warm_containers = 0;
        config.memory_ceiling = Some(3 << 30);
    })
    .await;
    let refused = t
        .engine
        .create(
            "big",
            ContainerSpec {
                memory_bytes: 4 << 30,
                ..ContainerSpec::default()
            },
        )
        .await;
    assert!(
        matches!(
            refused,
            Err(SandboxError::InvalidRequest {
                param: "memory_limit",
                ..
            })
        ),
        "{refused:?}"
    );
    // A spare helper (enrolled with the default 1 GiB) takes another limit:
    // on cgroup v1 the memory+swap limit must move first. Give the spare
    // time to enrol.
    tokio::time::sleep(Duration::from_millis(500)).await;
    t.create_with(
        "c1",
        ContainerSpec {
            memory_bytes: 2 << 30,
            ..ContainerSpec::default()
        },
    )
    .await;
    let init = t.engine.init_pid("c1").await.unwrap().expect("running");
    let cgroups = std::fs::read_to_string(format!("/proc/{init}/cgroup")).unwrap();
    let limit = cgroups.lines().find_map(|line| {
        let path = line
            .strip_prefix("4:memory:")
            .or_else(|| line.split_once(":memory:").map(|(_, p)| p))?;
        std::fs::read_to_string(format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes")).ok()
    });
    if let Some(limit) = limit {
        assert_eq!(limit.trim(), (2u64 << 30).to_string());
        let parent_limit = cgroups.lines().find_map(|line| {
            let (_, path) = line.split_once(":memory:")?;
            let parent = std::path::Path::new(path).parent()?;
            std::fs::read_to_string(format!(
                "/sys/fs/cgroup/memory{}/memory.limit_in_bytes",
                parent.display()
            ))
            .ok()
        });
        assert_eq!(
            parent_limit.map(|l| l.trim().to_owned()),
            Some((3u64 << 30).to_string()),
            "every sandbox sits under one capped parent"
        );
    }
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cgroup_takes_a_larger_then_a_smaller_memory_limit() {
    // A spare helper is enrolled with the default 1 GiB; a container of
    // another size changes it. On cgroup v1 the memory+swap limit must never
    // be below the memory limit at any step (EINVAL otherwise), so raising
    // moves memsw first and lowering moves it last.
    let group = format!("shellgate-test-{}", std::process::id());
    let (cgroups, _) = shellgate_sandbox::cgroup::Cgroups::setup(&group);
    if !cgroups.enabled() {
        return;
    }
    let spec = |memory_bytes| ContainerSpec {
        memory_bytes,
        ..ContainerSpec::default()
    };
    cgroups.create("slot", &spec(1 << 30)).unwrap();
    for size in [4u64 << 30, 512 << 20, 64 << 30, 1 << 30] {
        cgroups
            .apply("slot", &spec(size))
            .unwrap_or_else(|e| panic!("{size}: {e}"));
    }
    cgroups
        .remove("slot", Duration::from_secs(5))
        .await
        .unwrap();
    cgroups.remove_base();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_busy_container_near_its_process_limit_keeps_its_processes() {
    let t = TestEngine::new("near-limit").await;
    let spec = ContainerSpec {
        pids_max: 64,
        ..ContainerSpec::default()
    };
    t.create_with("c1", spec).await;
    // 59 tasks (a process and its threads), no fork ever refused.
    t.ok(
        "c1",
        "setsid python3 -c 'import threading, time\n\
         for _ in range(58): threading.Thread(target=time.sleep, args=(100,), daemon=True).start()\n\
         time.sleep(100)' >/dev/null 2>&1 & sleep 1",
    )
    .await;
    let result = t.run("c1", "echo next").await;
    assert_eq!(result.stdout, "next\n");
    assert!(!result.stderr.contains("were ended"), "{result:?}");
    assert_eq!(count(&t, "c1", "python3 -c import threading").await, 1);
    t.finish().await;
}

/// The pids that pidfds open in this process name.
fn pidfd_targets() -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let link = std::fs::read_link(entry.path()).unwrap_or_default();
        if link.to_string_lossy() != "anon_inode:[pidfd]" {
            continue;
        }
        let info = std::fs::read_to_string(format!(
            "/proc/self/fdinfo/{}",
            entry.file_name().to_string_lossy()
        ))
        .unwrap_or_default();
        pids.extend(
            info.lines()
                .filter_map(|l| l.strip_prefix("Pid:"))
                .filter_map(|p| p.trim().parse::<i32>().ok()),
        );
    }
    pids
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_container_costs_the_engine_no_pidfd_and_a_killed_init_is_still_seen() {
    // Live containers are bounded by the server's open-file limit: the
    // engine watches init through the control socket it holds anyway.
    let t = TestEngine::new("no-pidfd").await;
    t.create("c1").await;
    let init = t.engine.init_pid("c1").await.unwrap().expect("running");
    assert!(
        !pidfd_targets().contains(&init),
        "a pidfd names init {init}"
    );
    // SAFETY: SIGKILL to the test's own container init.
    unsafe { libc::kill(init, libc::SIGKILL) };
    assert!(
        common::eventually_async(Duration::from_secs(10), || async {
            matches!(t.engine.init_pid("c1").await, Ok(None))
        })
        .await,
        "the engine never saw its init die"
    );
    // Reaped: no zombie of ours is left of it.
    let our_zombie = || {
        std::fs::read_to_string(format!("/proc/{init}/stat")).is_ok_and(|stat| {
            let rest: Vec<&str> = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .collect();
            rest.first() == Some(&"Z")
                && rest.get(1) == Some(&std::process::id().to_string().as_str())
        })
    };
    assert!(common::eventually(Duration::from_secs(10), || !our_zombie()).await);
    assert_eq!(t.ok("c1", "echo again").await, "again\n");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn file_access_never_goes_through_the_pid_of_init() {
    // The engine reaches a container's files through a descriptor, not
    // /proc/<pid>/root: when init dies (and its pid may be reused by any
    // process, in any container), the files reached are still this
    // container's.
    let t = TestEngine::new("dead-init").await;
    t.create("c1").await;
    t.create("c2").await;
    t.ok("c1", "echo mine > /mnt/data/whose.txt").await;
    t.ok("c2", "echo other > /mnt/data/whose.txt").await;
    let init = t.engine.init_pid("c1").await.unwrap().expect("running");
    // SAFETY: SIGKILL to the test's own container init.
    unsafe { libc::kill(init, libc::SIGKILL) };
    assert!(common::eventually(Duration::from_secs(5), || !common::process_alive(init)).await);
    // The engine learns of the death from init's end of the control socket
    // (then reaps it), a moment after the process is gone from /proc: the
    // test waits for the engine's view.
    assert!(
        common::eventually_async(Duration::from_secs(5), || async {
            matches!(t.engine.init_pid("c1").await, Ok(None))
        })
        .await,
        "the engine never saw its init die"
    );
    assert_eq!(
        t.engine.read_file("c1", "whose.txt").await.unwrap(),
        b"mine\n"
    );
    let listing = t.engine.list_files("c1").await.unwrap();
    assert_eq!(listing.files.len(), 1);
    // The next command starts it again, with the same files.
    assert_eq!(t.ok("c1", "cat whose.txt").await, "mine\n");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_dropped_at_any_moment_leaves_no_command_running() {
    // Whether the caller gives up before init started the command, while
    // its start is on the way, or after: the command never outlives it.
    let t = TestEngine::new("dropped-early").await;
    t.create("c1").await;
    for micros in [0u64, 50, 100, 200, 400, 800, 1_600, 3_200, 6_400, 12_800] {
        let run = t.engine.run("c1", request(&["sleep 3007"], 300_000));
        let _ = tokio::time::timeout(Duration::from_micros(micros), run).await;
    }
    assert_eq!(
        left_after_a_while(&t, "c1", "sleep 3007").await,
        0,
        "a dropped run left its command running"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hold_keeps_the_sweepers_idle_checks_off_until_it_is_dropped() {
    let t = TestEngine::new("held").await;
    t.create("c1").await;
    // Work made of several calls (a kernel starting, then its cell) holds
    // the container between them: neither idle check takes it meanwhile.
    let held = t.engine.hold("c1").await.expect("hold c1");
    assert!(!t.engine.suspend_if_idle("c1").await.unwrap());
    assert!(!t.engine.destroy_if_idle("c1").await.unwrap());
    drop(held);
    assert!(t.engine.suspend_if_idle("c1").await.unwrap());
    assert!(matches!(
        t.engine.hold("c9").await,
        Err(SandboxError::NotFound(_))
    ));
    t.finish().await;
}
