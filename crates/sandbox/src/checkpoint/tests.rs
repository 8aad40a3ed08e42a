use super::*;

use std::sync::atomic::{AtomicUsize, Ordering};

/// A stand-in for `criu`: a shell script answering `--version` with
/// `version_output` and `check` with `check_output` and `check_status`. It
/// is run by `/bin/sh` rather than executed: a script just written could be
/// busy (ETXTBSY) while another test thread forks.
fn fake_criu(
    version_output: &str,
    check_output: &str,
    check_status: i32,
) -> (CriuCommand, PathBuf) {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "shellgate-checkpoint-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("create the fake criu's directory");
    let script = dir.join("criu");
    let body = format!(
        "case \"$1\" in\n--version) printf '%s' '{version_output}' ;;\ncheck) printf '%s' '{check_output}' >&2; exit {check_status} ;;\nesac\n"
    );
    std::fs::write(&script, body).expect("write the fake criu");
    let command = CriuCommand {
        program: PathBuf::from("/bin/sh"),
        leading_args: vec![script.into_os_string()],
    };
    (command, dir)
}

const LINUX_6_18: KernelRelease = KernelRelease {
    major: 6,
    minor: 18,
};
const LINUX_6_1: KernelRelease = KernelRelease { major: 6, minor: 1 };

#[test]
fn criu_versions_are_read_from_its_version_line() {
    let cases = [
        ("Version: 4.1.1\n", Some((4, 1, 1))),
        ("Version: 4.2\nGitID: v4.2\n", Some((4, 2, 0))),
        ("  Version: 3.17.1 \n", Some((3, 17, 1))),
        ("Version: 4.2-rc1\n", Some((4, 2, 0))),
        ("criu: command not found\n", None),
        ("Version: four\n", None),
        ("", None),
    ];
    for (output, expected) in cases {
        let parsed = parse_criu_version(output).map(|v| (v.major, v.minor, v.patch));
        assert_eq!(parsed, expected, "criu --version printed {output:?}");
    }
}

#[test]
fn kernel_releases_are_read_to_their_minor_number() {
    let cases = [
        ("6.18.44-fc-v1252", Some((6, 18))),
        ("5.10.0-28-amd64", Some((5, 10))),
        ("6.1", Some((6, 1))),
        ("6.16rc2", Some((6, 16))),
        ("linux", None),
        ("", None),
    ];
    for (release, expected) in cases {
        let parsed = parse_kernel_release(release).map(|k| (k.major, k.minor));
        assert_eq!(parsed, expected, "uname -r {release:?}");
    }
}

#[test]
fn criu_before_4_2_is_refused_with_the_socket_reason_on_linux_6_16_and_later() {
    let old = CriuVersion {
        major: 4,
        minor: 1,
        patch: 1,
    };
    let refused = judge_version(old, Some(LINUX_6_18));
    assert_eq!(
        refused,
        Err(Unavailable::CriuTooOldForKernel {
            version: old,
            kernel: LINUX_6_18
        })
    );
    let reason = refused.map_err(|r| r.to_string()).err().unwrap_or_default();
    for needle in ["CRIU 4.1.1", "Linux 6.18", "SO_PASSCRED", "4.2.0 or later"] {
        assert!(reason.contains(needle), "{needle:?} not in {reason:?}");
    }
    // On an older kernel (or one that could not be read) the socket reason
    // does not apply, but no version before 4.2 was tried.
    assert_eq!(
        judge_version(old, Some(LINUX_6_1)),
        Err(Unavailable::CriuTooOld { version: old })
    );
    assert_eq!(
        judge_version(old, None),
        Err(Unavailable::CriuTooOld { version: old })
    );
    assert_eq!(judge_version(MIN_CRIU, Some(LINUX_6_18)), Ok(()));
}

#[test]
fn a_missing_criu_is_the_reason_and_names_what_was_run() {
    let missing = CriuCommand::binary("/nonexistent/shellgate-test/criu");
    let support = probe(&missing);
    let reason = support.unavailable_reason().unwrap_or_default();
    assert!(
        matches!(
            support,
            CheckpointSupport::Unavailable(Unavailable::CriuMissing { .. })
        ),
        "{support:?}"
    );
    assert!(
        reason.contains("/nonexistent/shellgate-test/criu"),
        "{reason}"
    );
}

#[test]
fn a_criu_rootfs_is_started_through_its_own_loader() {
    let command = CriuCommand::from_rootfs(Path::new("/cache/rootfs"));
    assert_eq!(
        command.program,
        PathBuf::from("/cache/rootfs/lib64/ld-linux-x86-64.so.2")
    );
    let args: Vec<String> = command
        .leading_args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        args,
        [
            "--library-path",
            "/cache/rootfs/lib/x86_64-linux-gnu:/cache/rootfs/usr/lib/x86_64-linux-gnu",
            "/cache/rootfs/usr/sbin/criu"
        ]
    );
    assert_eq!(command.describe(), "/cache/rootfs/usr/sbin/criu");
}

#[test]
fn an_old_criu_is_the_reason_before_its_check_runs() {
    // Its check would fail too: the version is the first blocker named.
    let (criu, dir) = fake_criu("Version: 4.1.1\n", "Error (cr-check.c:1): nope", 1);
    let result = probe_criu(&criu, Some(LINUX_6_18));
    let _ = std::fs::remove_dir_all(dir);
    assert!(
        matches!(result, Err(Unavailable::CriuTooOldForKernel { .. })),
        "{result:?}"
    );
}

#[test]
fn a_failing_criu_check_is_the_reason_with_its_error_line() {
    let (criu, dir) = fake_criu(
        "Version: 4.2.1\n",
        "Warn (cr-check.c:824): Dirty tracking is OFF\nError (criu/cr-check.c:1218): UFFD is not supported\nLooks bad.",
        1,
    );
    let result = probe_criu(&criu, Some(LINUX_6_18));
    let _ = std::fs::remove_dir_all(dir);
    assert_eq!(
        result,
        Err(Unavailable::CriuCheckFailed {
            detail: "Error (criu/cr-check.c:1218): UFFD is not supported".into()
        })
    );
}

#[test]
fn an_unreadable_version_is_the_reason_with_what_criu_printed() {
    let (criu, dir) = fake_criu("criu from the future\n", "Looks good.", 0);
    let result = probe_criu(&criu, Some(LINUX_6_18));
    let _ = std::fs::remove_dir_all(dir);
    match result {
        Err(Unavailable::CriuVersionUnreadable { output, .. }) => {
            assert_eq!(output, "criu from the future")
        }
        other => panic!("expected an unreadable version, got {other:?}"),
    }
}

#[test]
fn a_working_criu_leaves_the_container_shape_as_the_reason() {
    let (criu, dir) = fake_criu("Version: 4.2.1\n", "Looks good.", 0);
    let version = probe_criu(&criu, Some(LINUX_6_18));
    let support = probe(&criu);
    let _ = std::fs::remove_dir_all(dir);
    assert_eq!(
        version,
        Ok(CriuVersion {
            major: 4,
            minor: 2,
            patch: 1
        })
    );
    assert_eq!(
        support,
        CheckpointSupport::Unavailable(Unavailable::ContainerShape)
    );
    let reason = support.unavailable_reason().unwrap_or_default();
    for needle in [
        "init is a clone of the helper",
        "not dumpable",
        "Can't lookup mount",
    ] {
        assert!(reason.contains(needle), "{needle:?} not in {reason:?}");
    }
}

#[test]
fn checkpointable_containers_with_a_working_criu_are_available() {
    assert_eq!(
        judge_container_shape(MIN_CRIU, true),
        CheckpointSupport::Available { version: MIN_CRIU }
    );
    assert_eq!(
        CheckpointSupport::Available { version: MIN_CRIU }.unavailable_reason(),
        None
    );
}

#[test]
fn this_hosts_answer_is_a_reason_and_is_probed_once() {
    let first = support();
    let again = support();
    assert!(std::ptr::eq(first, again), "support() probed twice");
    let reason = first.unavailable_reason();
    assert!(
        reason.as_deref().is_some_and(|r| !r.is_empty()),
        "this engine's containers cannot be checkpointed, yet: {first:?}"
    );
}

/// The real CRIU of a rootfs the operator cached (`SHELLGATE_TEST_CRIU_ROOTFS`,
/// see docs/operator/memory-snapshots.md): whatever it is, the answer is a
/// precise reason, never "available" for this engine's containers.
#[test]
fn a_cached_criu_rootfs_gives_a_precise_reason() {
    let Some(rootfs) = std::env::var_os("SHELLGATE_TEST_CRIU_ROOTFS") else {
        eprintln!("skipped: SHELLGATE_TEST_CRIU_ROOTFS names no CRIU rootfs");
        return;
    };
    let support = probe(&CriuCommand::from_rootfs(Path::new(&rootfs)));
    eprintln!("probe of {}: {support:?}", Path::new(&rootfs).display());
    match support {
        CheckpointSupport::Unavailable(Unavailable::ContainerShape)
        | CheckpointSupport::Unavailable(Unavailable::CriuTooOldForKernel { .. })
        | CheckpointSupport::Unavailable(Unavailable::CriuTooOld { .. })
        | CheckpointSupport::Unavailable(Unavailable::CriuCheckFailed { .. }) => {}
        other => panic!("the cached CRIU at {rootfs:?} did not run: {other:?}"),
    }
}
