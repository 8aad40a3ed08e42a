//! 200 create/run/destroy cycles leave nothing behind: no process, mount,
//! loop device, cgroup, descriptor or directory. (A test binary of its own,
//! so that no other test's processes are counted.)
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::TestEngine;
use shellgate_sandbox::backend::SandboxBackend;

/// Our children on the host, zombies included.
fn children() -> Vec<String> {
    let me = std::process::id().to_string();
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some(after_comm) = stat.rsplit(')').next() else {
            continue;
        };
        let fields: Vec<&str> = after_comm.split_whitespace().collect();
        if fields.get(1) == Some(&me.as_str()) {
            found.push(stat);
        }
    }
    found
}

fn open_fds() -> usize {
    fs::read_dir("/proc/self/fd").unwrap().count()
}

fn loop_devices_under(dir: &Path) -> Vec<String> {
    let dir = dir.display().to_string();
    let mut found = Vec::new();
    for entry in fs::read_dir("/sys/block").unwrap().flatten() {
        if let Ok(backing) = fs::read_to_string(entry.path().join("loop/backing_file")) {
            if backing.starts_with(&dir) {
                found.push(backing.trim().to_owned());
            }
        }
    }
    found
}

/// Every cgroup folder below the `shellgate-*` folders of our own cgroups.
fn engine_cgroups() -> Vec<PathBuf> {
    let mut found = Vec::new();
    let own = fs::read_to_string("/proc/self/cgroup").unwrap();
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (
            parts.next(),
            parts.next().unwrap_or(""),
            parts.next().unwrap_or(""),
        );
        let root = if controllers.is_empty() {
            PathBuf::from("/sys/fs/cgroup")
        } else {
            PathBuf::from("/sys/fs/cgroup").join(controllers.split(',').next().unwrap_or(""))
        };
        let base = root.join(path.trim_start_matches('/'));
        let Ok(entries) = fs::read_dir(&base) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry
                .file_name()
                .to_string_lossy()
                .starts_with("shellgate-")
            {
                for slot in fs::read_dir(entry.path()).into_iter().flatten().flatten() {
                    // Slots are named `<prefix><engine pid>-<n>`: only this
                    // process's engine is judged, not another test run's
                    // (or a server's) working beside it.
                    let name = slot.file_name().to_string_lossy().into_owned();
                    let own_slot = name
                        .trim_start_matches(|c: char| c.is_ascii_alphabetic())
                        .starts_with(&format!("{}-", std::process::id()));
                    if own_slot && slot.path().is_dir() {
                        found.push(slot.path());
                    }
                }
            }
        }
    }
    found
}

fn host_mounts_mentioning(dir: &Path) -> Vec<String> {
    let dir = dir.display().to_string();
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains(&dir))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn two_hundred_create_destroy_cycles_leak_nothing() {
    // With the disk pool, spare helpers and warm containers on, so their
    // paths are covered too.
    let t = TestEngine::with("leaks", |config| {
        config.pool_size = 2;
        config.spare_helpers = 2;
        config.warm_containers = 2;
    })
    .await;
    let fds_before = open_fds();
    // Other (crashed) test runs may have left cgroups; count only new ones.
    let cgroups_before = engine_cgroups();
    for i in 0..200 {
        let id = format!("cycle-{i}");
        t.create(&id).await;
        assert_eq!(
            t.ok(&id, "echo $((6*7)) > answer; cat answer").await,
            "42\n"
        );
        t.engine.destroy(&id).await.unwrap();
    }
    t.engine.settle().await;
    assert!(t.engine.list().await.unwrap().is_empty());
    let data_dir = t.data_dir();
    t.engine.shutdown().await;

    let left: Vec<_> = fs::read_dir(data_dir.join("containers"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "container directories left: {left:?}");
    assert_eq!(host_mounts_mentioning(&data_dir), Vec::<String>::new());
    assert!(
        common::eventually(std::time::Duration::from_secs(10), || loop_devices_under(
            &data_dir
        )
        .is_empty())
        .await,
        "loop devices left: {:?}",
        loop_devices_under(&data_dir)
    );
    let cgroups_left: Vec<PathBuf> = engine_cgroups()
        .into_iter()
        .filter(|c| !cgroups_before.contains(c))
        .collect();
    assert_eq!(cgroups_left, Vec::<PathBuf>::new(), "cgroups left");
    assert_eq!(children(), Vec::<String>::new(), "processes left");
    // Pooled disks may remain (they are the pool); nothing else under run/.
    for dir in ["run/root", "run/disk", "warm"] {
        assert_eq!(
            fs::read_dir(data_dir.join(dir)).unwrap().count(),
            0,
            "{dir} not empty"
        );
    }
    let fds_after = open_fds();
    assert!(
        fds_after <= fds_before + 2,
        "descriptors: {fds_before} before, {fds_after} after"
    );
}
