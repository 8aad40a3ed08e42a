//! Defence in depth, checked by behaviour inside real containers: what a
//! sandbox can learn about the host (paths, kernel command line, host
//! tools), what `/proc` lets it touch, limits every command starts with,
//! and the seccomp filter, syscall by syscall.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{exit_code, TempDir, TestEngine, BINARY};
use shellgate_sandbox::backend::ContainerSpec;

/// One syscall made for real inside a container, and the errno the
/// filter must answer with.
struct Probe {
    name: &'static str,
    nr: libc::c_long,
    args: Vec<i64>,
    errno: i32,
}

fn probe(name: &'static str, nr: libc::c_long, args: &[i64], errno: i32) -> Probe {
    Probe {
        name,
        nr,
        args: args.to_vec(),
        errno,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_seccomp_filter_refuses_each_denied_syscall_for_real() {
    let t = TestEngine::new("seccomp-real").await;
    t.create("c1").await;
    // Arguments are chosen, where possible, so that the kernel itself would
    // answer with another errno (or succeed): the errno seen is the filter's.
    let newuser = libc::CLONE_NEWUSER as i64;
    let mut probes = vec![
        probe("unshare", libc::SYS_unshare, &[newuser], libc::EPERM),
        probe("setns", libc::SYS_setns, &[-1, 0], libc::EPERM),
        probe("mount", libc::SYS_mount, &[0, 0, 0, 0, 0], libc::EPERM),
        probe("umount2", libc::SYS_umount2, &[0, 0], libc::EPERM),
        probe("pivot_root", libc::SYS_pivot_root, &[0, 0], libc::EPERM),
        probe("chroot", libc::SYS_chroot, &[0], libc::EPERM),
        probe("open_tree", libc::SYS_open_tree, &[-1, 0, 0], libc::EPERM),
        probe(
            "move_mount",
            libc::SYS_move_mount,
            &[-1, 0, -1, 0, 0],
            libc::EPERM,
        ),
        probe("fsopen", libc::SYS_fsopen, &[0, 0], libc::EPERM),
        probe("bpf", libc::SYS_bpf, &[0, 0, 0], libc::EPERM),
        probe("keyctl", libc::SYS_keyctl, &[0, 0, 0, 0, 0], libc::EPERM),
        probe("add_key", libc::SYS_add_key, &[0, 0, 0, 0, 0], libc::EPERM),
        probe("userfaultfd", libc::SYS_userfaultfd, &[0], libc::EPERM),
        probe(
            "perf_event_open",
            libc::SYS_perf_event_open,
            &[0, 0, -1, -1, 0],
            libc::EPERM,
        ),
        probe(
            "io_uring_setup",
            libc::SYS_io_uring_setup,
            &[1, 0],
            libc::EPERM,
        ),
        probe(
            "open_by_handle_at",
            libc::SYS_open_by_handle_at,
            &[-1, 0, 0],
            libc::EPERM,
        ),
        // The kernel would return the old persona (0).
        probe(
            "personality_32",
            libc::SYS_personality,
            &[0x0008],
            libc::EPERM,
        ),
        probe(
            "personality_norandom",
            libc::SYS_personality,
            &[0x0040000],
            libc::EPERM,
        ),
        // CLONE_NEWUSER with CLONE_FS: the kernel would say EINVAL.
        probe(
            "clone_newuser",
            libc::SYS_clone,
            &[newuser | libc::CLONE_FS as i64, 0, 0, 0, 0],
            libc::EPERM,
        ),
        probe("clone3", libc::SYS_clone3, &[0, 0], libc::ENOSYS),
        probe(
            "socket_vsock",
            libc::SYS_socket,
            &[libc::AF_VSOCK as i64, libc::SOCK_STREAM as i64, 0],
            libc::EAFNOSUPPORT,
        ),
        // Without the filter: EPERM (no CAP_NET_RAW).
        probe(
            "socket_packet",
            libc::SYS_socket,
            &[libc::AF_PACKET as i64, libc::SOCK_RAW as i64, 0],
            libc::EAFNOSUPPORT,
        ),
        // stdin is /dev/null: without the filter, ENOTTY.
        probe(
            "ioctl_tiocsti",
            libc::SYS_ioctl,
            &[0, libc::TIOCSTI as i64, 0],
            libc::EPERM,
        ),
    ];
    // x86's segment descriptors: reading none would return 0.
    #[cfg(target_arch = "x86_64")]
    probes.push(probe(
        "modify_ldt",
        libc::SYS_modify_ldt,
        &[0, 0, 0],
        libc::EPERM,
    ));

    let mut script = String::from(
        "import ctypes\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         libc.syscall.restype = ctypes.c_long\n\
         def call(name, nr, *args):\n\
         \x20   ctypes.set_errno(0)\n\
         \x20   r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])\n\
         \x20   print(name, r, ctypes.get_errno())\n",
    );
    for p in &probes {
        let args: Vec<String> = p.args.iter().map(i64::to_string).collect();
        script.push_str(&format!(
            "call({:?}, {}, {})\n",
            p.name,
            p.nr,
            args.join(", ")
        ));
    }
    // Allowed: querying the persona, keeping the default one, IPv4 sockets.
    script.push_str(&format!(
        "call('personality_query', {nr}, 0xffffffff)\n\
         call('personality_default', {nr}, 0)\n\
         call('socket_inet', {socket}, {inet}, {stream}, 0)\n",
        nr = libc::SYS_personality,
        socket = libc::SYS_socket,
        inet = libc::AF_INET,
        stream = libc::SOCK_STREAM,
    ));
    let out = t.ok("c1", &format!("python3 - <<'EOF'\n{script}EOF")).await;
    let results: std::collections::HashMap<&str, (i64, i32)> = out
        .lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            Some((
                parts.next()?,
                (parts.next()?.parse().ok()?, parts.next()?.parse().ok()?),
            ))
        })
        .collect();
    for p in &probes {
        assert_eq!(
            results.get(p.name),
            Some(&(-1, p.errno)),
            "{}: {out}",
            p.name
        );
    }
    assert_eq!(results.get("personality_query"), Some(&(0, 0)), "{out}");
    assert_eq!(results.get("personality_default"), Some(&(0, 0)), "{out}");
    assert!(
        results.get("socket_inet").is_some_and(|(fd, _)| *fd >= 0),
        "{out}"
    );
    // Threads (clone without namespace flags) still start.
    assert_eq!(
        t.ok(
            "c1",
            "python3 -c 'import threading; t=threading.Thread(target=print,args=(\"thread\",)); t.start(); t.join()'"
        )
        .await,
        "thread\n"
    );
    t.finish().await;
}

/// `sysinfo(2)` answers with the container's own figures (init answers it
/// for the kernel): its memory limit, what it has free of it, its own
/// processes, its own uptime, no load; never the host's. A bad pointer still
/// gets the kernel's `EFAULT`, a thread's call is answered too, and glibc's
/// physical memory size is the limit.
#[tokio::test(flavor = "multi_thread")]
async fn sysinfo_tells_a_container_its_own_figures_never_the_hosts() {
    let t = TestEngine::new("sysinfo").await;
    let limit: u64 = 384 << 20;
    t.create_with(
        "c1",
        ContainerSpec {
            memory_bytes: limit,
            ..ContainerSpec::default()
        },
    )
    .await;
    let script = "import ctypes, os, threading\n\
        L = ctypes.c_ulong\n\
        class S(ctypes.Structure):\n\
        \x20   _fields_ = [('uptime', ctypes.c_long), ('loads', L * 3), ('totalram', L), ('freeram', L),\n\
        \x20               ('sharedram', L), ('bufferram', L), ('totalswap', L), ('freeswap', L),\n\
        \x20               ('procs', ctypes.c_ushort), ('pad', ctypes.c_ushort), ('totalhigh', L),\n\
        \x20               ('freehigh', L), ('mem_unit', ctypes.c_uint), ('rest', ctypes.c_char * 4)]\n\
        libc = ctypes.CDLL(None, use_errno=True)\n\
        def show(tag):\n\
        \x20   s = S()\n\
        \x20   r = libc.sysinfo(ctypes.byref(s))\n\
        \x20   print(tag, r, s.uptime, list(s.loads), s.totalram * s.mem_unit, s.freeram * s.mem_unit,\n\
        \x20         s.totalswap, s.bufferram, s.procs)\n\
        show('main')\n\
        t = threading.Thread(target=show, args=('thread',)); t.start(); t.join()\n\
        ctypes.set_errno(0)\n\
        print('null', libc.sysinfo(None), ctypes.get_errno())\n\
        print('phys', os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE'))\n";
    let out = t
        .ok("c1", &format!("sleep 1 & python3 - <<'EOF'\n{script}EOF"))
        .await;
    let lines: std::collections::HashMap<&str, Vec<&str>> = out
        .lines()
        .filter_map(|line| {
            let mut words = line.split(' ');
            Some((words.next()?, words.collect()))
        })
        .collect();
    for tag in ["main", "thread"] {
        let line = lines.get(tag).unwrap_or_else(|| panic!("{tag}: {out}"));
        let text = line.join(" ");
        let numbers: Vec<u64> = text
            .replace(['[', ']', ','], " ")
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect();
        // r, uptime, 3 loads, total, free, swap, buffers, procs.
        let [ok, uptime, l1, l2, l3, total, free, swap, buffers, procs] = numbers[..] else {
            panic!("{tag}: {out}");
        };
        assert_eq!(ok, 0, "{out}");
        assert!(uptime < 300, "the container's own uptime: {out}");
        assert_eq!((l1, l2, l3, swap, buffers), (0, 0, 0, 0, 0), "{out}");
        assert_eq!(total, limit, "{out}");
        assert!(free > 0 && free < limit, "{out}");
        // bash, sleep, python (and its thread): the container's, not the
        // host's hundreds.
        assert!((2..40).contains(&procs), "{out}");
    }
    assert_eq!(
        lines.get("null").map(|l| l.join(" ")),
        Some(format!("-1 {}", libc::EFAULT)),
        "{out}"
    );
    assert_eq!(
        lines.get("phys").map(|l| l.join(" ")),
        Some(limit.to_string()),
        "{out}"
    );
    t.finish().await;
}

/// A tmpfs mounted on the host under `/usr` for one test, removed on drop.
struct HostSubmount(PathBuf);

impl HostSubmount {
    fn new() -> Self {
        let dir = PathBuf::from(format!("/usr/share/shellgate-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "mode=1777,size=1m", "shellgate-test"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(mounted.success(), "mount a tmpfs at {}", dir.display());
        HostSubmount(dir)
    }
}

impl Drop for HostSubmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn read_only_binds_are_read_only_all_the_way_down() {
    // A world-writable file system mounted on the host below /usr: the
    // container's /usr bind carries it along, and must freeze it too.
    let submount = HostSubmount::new();
    let t = TestEngine::new("recursive-ro").await;
    t.create("c1").await;
    let inside = submount.0.display().to_string();
    let result = t
        .run(
            "c1",
            &format!("touch {inside}/x 2>&1; grep ' {inside} ' /proc/self/mountinfo"),
        )
        .await;
    assert!(
        result.stdout.contains("Read-only file system"),
        "{result:?}"
    );
    let line = result
        .stdout
        .lines()
        .find(|l| l.contains(&format!(" {inside} ")))
        .unwrap_or_else(|| panic!("the submount is not inside: {result:?}"));
    for flag in ["ro,", "nosuid", "nodev"] {
        assert!(line.contains(flag), "{flag} missing: {line}");
    }
    assert!(!submount.0.join("x").exists());
    t.finish().await;
    drop(submount);
}

#[tokio::test(flavor = "multi_thread")]
async fn commands_start_with_their_own_oom_score_and_descriptor_limit() {
    let t = TestEngine::new("limits").await;
    t.create("c1").await;
    // Init may be exempt from the OOM killer; commands never are.
    assert_eq!(t.ok("c1", "cat /proc/self/oom_score_adj").await, "0\n");
    // The server's descriptor limit (this test process's) does not leak in.
    assert_eq!(t.ok("c1", "ulimit -n; ulimit -Hn").await, "4096\n4096\n");
    let opened = t
        .run(
            "c1",
            "python3 -c 'import os\nfds=[]\ntry:\n    while True: fds.append(os.open(\"/dev/null\", os.O_RDONLY))\nexcept OSError as e: print(len(fds) < 4096, e.errno)'",
        )
        .await;
    assert_eq!(opened.stdout, "True 24\n", "{opened:?}");
    t.finish().await;
}

/// A tiny root file system: static busybox and its applet links.
fn busybox_rootfs(dir: &Path) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(dir.join("etc")).unwrap();
    std::fs::copy("/bin/busybox", bin.join("busybox"))
        .expect("busybox-static is installed (apt-get install busybox-static)");
    for applet in ["sh", "cat", "ls", "echo", "grep", "readlink", "tr"] {
        symlink("busybox", bin.join(applet)).unwrap();
    }
}

/// Imports [`busybox_rootfs`] as image `tiny`; a spec of a container of it.
async fn import_busybox_image(t: &TestEngine) -> ContainerSpec {
    let rootfs = t.dir.path().join("rootfs");
    busybox_rootfs(&rootfs);
    let tarball = t.dir.path().join("rootfs.tar.gz");
    tarball_of(&rootfs, &tarball);
    t.engine
        .images()
        .import("tiny", &tarball)
        .await
        .expect("import");
    ContainerSpec {
        image: "tiny".into(),
        ..ContainerSpec::default()
    }
}

fn tarball_of(dir: &Path, tarball: &Path) {
    let status = Command::new("tar")
        .arg("-czf")
        .arg(tarball)
        .arg("-C")
        .arg(dir)
        .arg(".")
        .status()
        .unwrap();
    assert!(status.success());
}

/// Checks a container's mount table and pid 1 for anything naming the
/// host's layout.
async fn assert_no_host_paths(t: &TestEngine, id: &str) -> String {
    let data_dir = t.data_dir().display().to_string();
    let test_dir = t.dir.path().display().to_string();
    let mountinfo = t.ok(id, "cat /proc/self/mountinfo").await;
    for leak in [&data_dir, &test_dir, "/sandbox/images", "/containers/"] {
        assert!(!mountinfo.contains(leak), "{leak} in {mountinfo}");
    }
    // Init is a fork of the zygote (or, should the zygote fail, of a helper
    // executed for it): its argument vector names no path.
    let cmdline = t.ok(id, "cat /proc/1/cmdline | tr '\\0' ' '").await;
    assert!(
        ["shellgate __sandbox-zygote ", "shellgate __sandbox-helper "].contains(&cmdline.as_str()),
        "{cmdline}"
    );
    assert!(!cmdline.contains(BINARY));
    // The executable link and the memory map would name the binary's path,
    // but init is not dumpable: nobody inside may read them.
    let probe = t
        .run(
            id,
            "readlink /proc/1/exe; echo exe=$?; cat /proc/1/maps; echo maps=$?; \
             ls -l /proc/1/cwd /proc/1/root 2>&1; true",
        )
        .await;
    assert!(probe.stdout.contains("exe=1"), "{probe:?}");
    assert!(probe.stdout.contains("maps=1"), "{probe:?}");
    let everything = format!("{}{}", probe.stdout, probe.stderr);
    for leak in [BINARY, &data_dir] {
        assert!(!everything.contains(leak), "{leak} in {probe:?}");
    }
    mountinfo
}

#[tokio::test(flavor = "multi_thread")]
async fn nothing_inside_a_host_image_container_names_a_host_path() {
    let t = TestEngine::new("hostpaths").await;
    t.create("c1").await;
    let mountinfo = assert_no_host_paths(&t, "c1").await;
    // /etc and /usr/local are directories of one overlay of the host
    // image's, which shows under a short name.
    for (target, root) in [("/etc", "/etc"), ("/usr/local", "/usr-local")] {
        let line = mountinfo
            .lines()
            .find(|l| l.split_whitespace().nth(4) == Some(target))
            .unwrap_or_else(|| panic!("no {target} mount: {mountinfo}"));
        assert!(
            line.contains(" - overlay overlay ro,lowerdir=host:empty"),
            "{line}"
        );
        assert_eq!(line.split_whitespace().nth(3), Some(root), "{line}");
    }
    // The sandbox user still exists there.
    assert!(t.ok("c1", "id -un").await.starts_with("user"));
    // The kernel command line (the host's boot image and parameters) reads empty.
    assert_eq!(t.ok("c1", "wc -c < /proc/cmdline").await.trim(), "0");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn nothing_inside_an_image_container_names_a_host_path() {
    let t = TestEngine::new("imagepaths").await;
    let spec = import_busybox_image(&t).await;
    t.create_with("c1", spec).await;
    let mountinfo = assert_no_host_paths(&t, "c1").await;
    let root = mountinfo
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some("/"))
        .unwrap_or_else(|| panic!("no root mount: {mountinfo}"));
    assert!(
        root.contains("lowerdir=lower,upperdir=upper,workdir=work"),
        "{root}"
    );
    // The generated identity files are bound from copies, not host files.
    let passwd = mountinfo
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some("/etc/passwd"))
        .unwrap_or_else(|| panic!("no /etc/passwd mount: {mountinfo}"));
    assert!(passwd.contains(" ro,"), "{passwd}");
    assert!(t
        .ok("c1", "cat /etc/passwd")
        .await
        .contains("user:x:1000:1000:user:/home/user:"));
    t.finish().await;
}

/// The superblocks a container's mounts are on that the host has none of
/// its own mounts on (what the container made), each as its file system
/// type and the container's mount points on it.
async fn own_superblocks(t: &TestEngine, id: &str) -> Vec<(String, Vec<String>)> {
    // Fields: id, parent, major:minor, root, mount point, ..., `-`, type.
    let mounts = |mountinfo: &str| -> Vec<(String, String, String)> {
        mountinfo
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let dash = fields.iter().position(|f| *f == "-")?;
                Some((
                    fields.get(2)?.to_string(),
                    fields.get(4)?.to_string(),
                    fields.get(dash + 1)?.to_string(),
                ))
            })
            .collect()
    };
    let host = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let host: std::collections::BTreeSet<String> =
        mounts(&host).into_iter().map(|(dev, _, _)| dev).collect();
    let inside = t.ok(id, "cat /proc/self/mountinfo").await;
    let mut own: std::collections::BTreeMap<String, (String, Vec<String>)> = Default::default();
    for (dev, point, kind) in mounts(&inside) {
        if !host.contains(&dev) {
            own.entry(dev).or_insert((kind, Vec::new())).1.push(point);
        }
    }
    own.into_values().collect()
}

/// Every superblock registers a shrinker, and each memory cgroup keeps a
/// map as long as the highest shrinker id: the kernel memory of N live
/// containers grows as N times their superblocks. The scratch tmpfs holds
/// the host image's root, `/dev`, `/dev/shm` and `/tmp`; what is left is
/// `/proc`, the terminals, the disk and the overlays.
#[tokio::test(flavor = "multi_thread")]
async fn a_container_makes_few_superblocks_and_its_binds_stay_apart() {
    let t = TestEngine::new("superblocks").await;
    t.create("c1").await;
    let host = own_superblocks(&t, "c1").await;
    // scratch, proc, devpts, disk, the overlay of /etc and /usr/local.
    assert!(host.len() <= 5, "{host:?}");
    let spec = import_busybox_image(&t).await;
    t.create_with("c2", spec).await;
    // scratch, proc, devpts, disk, the root's overlay.
    let image = own_superblocks(&t, "c2").await;
    assert!(image.len() <= 5, "{image:?}");

    // /tmp, /dev/shm and /dev share a tmpfs, but no bind reaches past its
    // own root: no link or rename across them, `..` stays inside.
    let probe = t
        .run(
            "c1",
            "echo x > /tmp/a; ln /tmp/a /dev/shm/b; echo ln=$?; \
             python3 -c 'import os; os.rename(\"/tmp/a\", \"/dev/shm/a\")' 2>&1 | tail -1; \
             touch /dev/x; echo dev=$?; touch /x; echo root=$?; \
             ls -A /tmp/.. | grep -c -x -e null -e empty -e file0; \
             printf '#!/bin/sh\\necho ran\\n' > /tmp/s; chmod +x /tmp/s; /tmp/s; \
             cp /tmp/s /dev/shm/s; /dev/shm/s",
        )
        .await;
    assert!(
        probe.stderr.contains("Invalid cross-device link"),
        "{probe:?}"
    );
    for expected in [
        "ln=1",
        "OSError: [Errno 18] Invalid cross-device link",
        "dev=1",
        "root=1",
        "\n0\n",
        "ran\nran\n",
    ] {
        assert!(probe.stdout.contains(expected), "{expected}: {probe:?}");
    }
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn proc_is_masked_and_its_tunables_are_read_only() {
    let t = TestEngine::new("procmask").await;
    let spec = ContainerSpec {
        tmp_bytes: 64 << 20,
        ..ContainerSpec::default()
    };
    t.create_with("c1", spec).await;
    for file in [
        "kcore",
        "keys",
        "latency_stats",
        "sched_debug",
        "timer_list",
        "timer_stats",
        "sysrq-trigger",
        "cmdline",
    ] {
        // Either the kernel has no such file or it reads empty.
        let out = t
            .ok(
                "c1",
                &format!("test -e /proc/{file} && wc -c < /proc/{file} || echo absent"),
            )
            .await;
        assert!(
            out.trim() == "0" || out.trim() == "absent",
            "/proc/{file}: {out}"
        );
    }
    for dir in ["acpi", "asound", "scsi"] {
        let out = t
            .ok(
                "c1",
                &format!("test -e /proc/{dir} && ls -A /proc/{dir} | wc -l || echo absent"),
            )
            .await;
        assert!(
            out.trim() == "0" || out.trim() == "absent",
            "/proc/{dir}: {out}"
        );
    }
    // The host has timers and an ACPI tree: masked, not merely absent.
    if Path::new("/proc/timer_list").exists() {
        let mounts = t.ok("c1", "cat /proc/self/mountinfo").await;
        assert!(mounts.contains(" /proc/timer_list ro,"), "{mounts}");
    }
    let writes = t
        .run(
            "c1",
            "echo b > /proc/sysrq-trigger; echo 1 > /proc/sys/kernel/shmmax; \
             grep -E ' /proc/(sys|bus|fs|irq) ' /proc/self/mountinfo",
        )
        .await;
    // (Kernels without magic SysRq have no trigger to mask.)
    let sysrq = Path::new("/proc/sysrq-trigger").exists();
    assert_eq!(
        writes.stderr.matches("Read-only file system").count(),
        if sysrq { 2 } else { 1 },
        "{writes:?}"
    );
    for tree in ["sys", "bus", "fs", "irq"] {
        if Path::new("/proc").join(tree).exists() {
            let line = writes
                .stdout
                .lines()
                .find(|l| l.contains(&format!(" /proc/{tree} ")))
                .unwrap_or_else(|| panic!("/proc/{tree} not remounted: {writes:?}"));
            assert!(line.contains(" ro,"), "{line}");
        }
    }
    // Init sized System V shared memory before /proc/sys turned read-only:
    // a quarter of /tmp.
    assert_eq!(
        t.ok("c1", "cat /proc/sys/kernel/shmmax").await.trim(),
        (16u64 << 20).to_string()
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_hosts_usr_local_is_hidden() {
    let t = TestEngine::new("usrlocal").await;
    t.create("c1").await;
    // Only shellgate's own /usr/local shows: `bin/sudo`.
    assert_eq!(
        t.ok("c1", "cd /usr/local && find . | sort").await,
        ".\n./bin\n./bin/sudo\n"
    );
    let host_entries = std::fs::read_dir("/usr/local").map_or(0, |d| d.count());
    assert!(
        host_entries > 0,
        "the host's /usr/local is empty: nothing to hide"
    );
    // Covered, not removed: the rest of /usr is there, and nothing can be
    // written under the cover.
    let result = t
        .run("c1", "ls /usr/bin | wc -l; touch /usr/local/x 2>&1")
        .await;
    assert!(
        result.stdout.contains("Read-only file system"),
        "{result:?}"
    );
    assert!(
        result
            .stdout
            .lines()
            .next()
            .and_then(|n| n.trim().parse::<u32>().ok())
            .is_some_and(|n| n > 10),
        "{result:?}"
    );
    t.finish().await;
}

#[test]
fn the_host_image_can_expose_usr_local_on_request() {
    use shellgate_sandbox::image::{HostImageOptions, ImageStore};
    use shellgate_sandbox::protocol::RootSpec;
    let dir = TempDir::new("usrlocal-option");
    // /usr/local is a layer: the generated one (`bin/sudo`) alone, or over
    // the host's.
    // (The generated one alone is a directory of the host image's layer.)
    let usr_local = |store: &ImageStore| match store.resolve("host").unwrap().root {
        RootSpec::HostBinds { layers, .. } => {
            let layer = layers
                .into_iter()
                .find(|layer| layer.shows.iter().any(|(_, to)| to == "/usr/local"))
                .expect("a /usr/local layer");
            let (dir, _) = layer
                .shows
                .iter()
                .find(|(_, to)| to == "/usr/local")
                .unwrap();
            let mut sources = layer.sources.clone();
            sources[0] = sources[0].join(dir);
            sources
        }
        other => panic!("host image resolved to {other:?}"),
    };
    let default = ImageStore::open(dir.path(), "sandbox").unwrap();
    let generated = usr_local(&default);
    assert_eq!(generated.len(), 1, "{generated:?}");
    assert!(generated[0].starts_with(dir.path()), "{generated:?}");
    assert!(generated[0].join("bin/sudo").is_file());
    let exposed = ImageStore::open_with(
        dir.path(),
        "sandbox",
        HostImageOptions {
            expose_usr_local: true,
        },
    )
    .unwrap();
    assert_eq!(
        usr_local(&exposed),
        [generated[0].clone(), "/usr/local".into()]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_exposed_usr_local_shows_the_hosts_tools_under_shellgates_sudo() {
    let t = TestEngine::with("usrlocal-exposed", |config| {
        config.expose_host_usr_local = true
    })
    .await;
    t.create("c1").await;
    let host_bin: Vec<String> = std::fs::read_dir("/usr/local/bin")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let inside = t.ok("c1", "ls -A /usr/local/bin").await;
    for name in &host_bin {
        assert!(
            inside.lines().any(|l| l == name),
            "{name} missing: {inside}"
        );
    }
    assert!(t.run("c1", "sudo true").await.stderr.starts_with(NO_SUDO));
    t.finish().await;
}

/// What the generated `sudo` prints when it refuses.
const NO_SUDO: &str = "shellgate: the sandbox user has no privileges; sudo is not available.";

#[tokio::test(flavor = "multi_thread")]
async fn sudo_says_why_there_is_none_and_runs_a_command_as_the_sandbox_user_itself() {
    let t = TestEngine::new("sudo").await;
    t.create("c1").await;
    assert_eq!(t.ok("c1", "command -v sudo").await, "/usr/local/bin/sudo\n");
    // Anything that asks for another user, a shell, a listing or nothing.
    for refused in [
        "sudo id",
        "sudo -u root id",
        "sudo -uroot id",
        "sudo --user=nobody id",
        "sudo -i",
        "sudo -s id",
        "sudo -l",
        "sudo -v",
        "sudo -nEi id",
        "sudo",
        "sudo -u user",
        "sudo -u user --",
        "sudo -u",
        "sudo apt-get install -y jq",
    ] {
        let result = t.run("c1", refused).await;
        assert_eq!(exit_code(&result), 1, "{refused}: {result:?}");
        assert!(result.stderr.starts_with(NO_SUDO), "{refused}: {result:?}");
        assert!(
            result.stderr.contains("/home/user"),
            "{refused}: {result:?}"
        );
        assert_eq!(result.stdout, "", "{refused}: {result:?}");
    }
    // As the sandbox user itself (the Agents SDK's `sudo -u user -- CMD`):
    // the command runs as it is, its arguments and exit status untouched.
    for (allowed, stdout) in [
        ("sudo -u user -- id -un", "user\n"),
        ("sudo -u user id -u", "1000\n"),
        (
            "sudo -E -H -n -u user -- sh -c 'echo $HOME'",
            "/home/user\n",
        ),
        ("sudo -nE --user=user printf '%s|' a 'b c' ''", "a|b c||"),
        ("sudo -u '#1000' -- pwd", "/mnt/data\n"),
        ("sudo -uuser -- sudo -u user -- echo nested", "nested\n"),
    ] {
        let result = t.run("c1", allowed).await;
        assert_eq!(exit_code(&result), 0, "{allowed}: {result:?}");
        assert_eq!(result.stdout, stdout, "{allowed}: {result:?}");
    }
    assert_eq!(
        exit_code(&t.run("c1", "sudo -u user -- sh -c 'exit 7'").await),
        7
    );
    // Nobody in the container can replace it or give it more.
    let result = t
        .run(
            "c1",
            "echo 'exit 0' > /usr/local/bin/sudo; rm -f /usr/local/bin/sudo; \
             chmod u+s /usr/local/bin/sudo; stat -c '%a %U' /usr/local/bin/sudo",
        )
        .await;
    // Read-only, and not the sandbox user's (host root's: `nobody` inside).
    assert_eq!(result.stdout, "755 nobody\n", "{result:?}");
    assert_eq!(
        result.stderr.matches("Read-only file system").count(),
        3,
        "{result:?}"
    );
    assert!(t.run("c1", "sudo true").await.stderr.starts_with(NO_SUDO));
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_imported_image_gets_sudo_too_over_its_own() {
    let t = TestEngine::new("imagesudo").await;
    let rootfs = t.dir.path().join("rootfs");
    busybox_rootfs(&rootfs);
    // The image's own sudo (which could only fail on nosuid mounts) and a
    // link where shellgate's goes: covered, never followed.
    std::fs::create_dir_all(rootfs.join("usr/bin")).unwrap();
    std::fs::write(rootfs.join("usr/bin/sudo"), "#!/bin/sh\necho image sudo\n").unwrap();
    std::fs::create_dir_all(rootfs.join("usr/local/bin")).unwrap();
    let victim = t.dir.path().join("victim");
    std::fs::write(&victim, "host file").unwrap();
    symlink(&victim, rootfs.join("usr/local/bin/sudo")).unwrap();
    let tarball = t.dir.path().join("rootfs.tar.gz");
    tarball_of(&rootfs, &tarball);
    t.engine
        .images()
        .import("tiny", &tarball)
        .await
        .expect("import");
    let spec = ContainerSpec {
        image: "tiny".into(),
        ..ContainerSpec::default()
    };
    t.create_with("c1", spec).await;
    let result = t.run("c1", "sudo echo hi").await;
    assert_eq!(exit_code(&result), 1, "{result:?}");
    assert!(result.stderr.starts_with(NO_SUDO), "{result:?}");
    assert_eq!(t.ok("c1", "sudo -u user -- echo hi").await, "hi\n");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "host file");
    t.finish().await;
}
