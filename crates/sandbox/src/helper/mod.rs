//! The helper: the `shellgate` binary re-executed to build one container.
//!
//! The server never forks from its tokio threads. It spawns
//! `shellgate __sandbox-helper` with the control socket on fd 3. The helper,
//! a fresh single-threaded process:
//!
//! 1. waits for its [`Enrollment`]: the engine moves it into the container's
//!    cgroups, so everything it creates is counted (ahead of time for a few
//!    spare helpers);
//! 2. waits for a [`HelperSpec`], then mounts the container's disk in a
//!    private mount namespace of its own;
//! 3. `clone`s init into new user, mount, pid, network, UTS, IPC and cgroup
//!    namespaces, with `CLONE_PARENT` so init is the *server's* child (one
//!    process per idle container; the server reaps it through a pidfd);
//! 4. writes init's uid/gid maps from outside (only a process in the parent
//!    user namespace may map more than its own id), then lets init go;
//! 5. reports init's pid and exits.
//!
//! Init then builds the container (see [`init`]) and serves commands.

mod connect;
mod init;
mod mounts;
pub mod network;
mod seccomp;
mod worker;

use std::ffi::CString;
use std::fs;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;

use crate::protocol::{
    Enrollment, FileViewSpec, HelperSpec, HelperTask, IdRange, Report, RootSpec, CONTROL_FD,
    MAX_MESSAGE, MAX_REPORT,
};
use crate::sys;
use shellgate_sandbox_api::setup_error::{SetupError, SetupResult, SetupStep, StepContext};

/// The namespaces every container gets (and that seccomp then forbids
/// sandboxed code to create).
pub(crate) const CONTAINER_NAMESPACES: libc::c_int = libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWCGROUP;

/// The argument that makes the `shellgate` binary act as the helper.
pub const HELPER_ARG: &str = "__sandbox-helper";

/// Entry point of the helper process. Never returns.
pub fn helper_main() -> ! {
    // The helper, and so every container's init (a clone of it), starts
    // from default signal dispositions and an empty mask, not from what the
    // server inherited: a SIGCHLD its parent ignored, say, would have the
    // kernel reap init's children before init could read their status.
    // SIGPIPE stays ignored, as Rust's runtime set it for this process: a
    // write to a closed socket is an error here, never the helper's death.
    sys::reset_signals();
    // SAFETY: signal() with a valid signal number and SIG_IGN.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let code = match run_helper(CONTROL_FD) {
        Ok(()) => 0,
        Err(error) => {
            report(CONTROL_FD, &Report::Error { error });
            1
        }
    };
    std::process::exit(code)
}

/// Sends a report to the engine; a failure to do so cannot be reported anywhere.
fn report(control: RawFd, report: &Report) {
    report_with_fds(control, report, &[]);
}

/// Sends a report with descriptors attached.
fn report_with_fds(control: RawFd, report: &Report, fds: &[RawFd]) {
    // Keep every report within what the engine reads (MAX_REPORT): JSON
    // escaping can at most sextuple a byte, so an eighth of it is safe.
    // Keep each of an error's texts within a sixteenth of it.
    let trimmed;
    let report = match report {
        Report::Error { error } => {
            trimmed = Report::Error {
                error: error.trimmed(MAX_REPORT / 16),
            };
            &trimmed
        }
        other => other,
    };
    if let Ok(bytes) = serde_json::to_vec(report) {
        let _ = sys::send_with_fds(control, &bytes, fds);
    }
}

fn format_map(ranges: &[IdRange]) -> String {
    ranges
        .iter()
        .map(|r| format!("{} {} {}\n", r.inside, r.outside, r.count))
        .collect()
}

fn run_helper(control: RawFd) -> SetupResult<()> {
    // Nothing this process inherited (beyond stdio) may reach a sandboxed
    // command: mark every other descriptor close-on-exec, the control socket
    // included.
    // SAFETY: close_range only changes descriptor flags.
    sys::cvt(unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            4u32, /* CLOSE_RANGE_CLOEXEC */
        )
    })
    .step(SetupStep::CloseDescriptors, || "close_range".into())?;

    let mut buf = vec![0u8; MAX_MESSAGE];
    let mut receive = |what: &str| -> SetupResult<Option<Vec<u8>>> {
        match sys::recv_with_fds(control, &mut buf, 0) {
            Ok((0, _)) => Ok(None),
            Ok((len, _)) => Ok(Some(buf[..len].to_vec())),
            Err(e) => Err(SetupError::os(
                SetupStep::ReceiveMessage,
                format!("read {what}"),
                e,
            )),
        }
    };
    // The engine closing the socket before a message is a normal end for a
    // spare helper that was never used.
    let Some(enrollment) = receive("enrollment")? else {
        std::process::exit(0)
    };
    let Enrollment {} = serde_json::from_slice(&enrollment)
        .map_err(|e| SetupError::other(SetupStep::DecodeMessage, "parse enrollment", e))?;
    report(control, &Report::Enrolled);
    let Some(task) = receive("task")? else {
        std::process::exit(0)
    };
    let task: HelperTask = serde_json::from_slice(&task)
        .map_err(|e| SetupError::other(SetupStep::DecodeMessage, "parse task", e))?;
    match task {
        HelperTask::Container(spec) => start_container(&spec, control),
        HelperTask::FileView(spec) => open_file_view(&spec, control),
    }
}

/// Mounts a stopped container's disk and hands the engine a descriptor of
/// its `data` directory. The mount namespace dies with this process; the
/// descriptor alone keeps the (now detached) mount alive, visible nowhere.
fn open_file_view(spec: &FileViewSpec, control: RawFd) -> SetupResult<()> {
    private_mount_namespace()?;
    let loop_device =
        crate::disk::mount_image(&spec.disk_image, &spec.mount_point, spec.reuse_loop)?;
    if let Some((sandbox, container_root)) = spec.prepare_layout {
        crate::disk::prepare_layout(&spec.mount_point, sandbox, container_root)?;
    }
    let data = spec.mount_point.join(crate::disk::DATA_DIR);
    let dir =
        fs::File::open(&data).step(SetupStep::OpenData, || format!("open {}", data.display()))?;
    report_with_fds(
        control,
        &Report::FileView {
            loop_device: Some(loop_device),
        },
        &[dir.as_raw_fd()],
    );
    Ok(())
}

fn private_mount_namespace() -> SetupResult<()> {
    // SAFETY: unshare with a constant flag, in a single-threaded process.
    sys::cvt(unsafe { libc::unshare(libc::CLONE_NEWNS) })
        .step(SetupStep::UnshareMountNamespace, || {
            "unshare mount namespace".into()
        })?;
    sys::make_mounts_private().step(SetupStep::MakeMountsPrivate, || "make / private".into())
}

fn start_container(spec: &HelperSpec, control: RawFd) -> SetupResult<()> {
    let (loop_device, disk_data) = prepare_disk(spec)?;
    // What is idmapped below is idmapped in this process's own mount
    // namespace, which init's is then a copy of (`prepare_disk` made one
    // for a disk).
    let mut private = spec.disk_image.is_some() || spec.disk_tmpfs_bytes.is_some();
    let mut make_private = || -> SetupResult<()> {
        if !private {
            private_mount_namespace()?;
            private = true;
        }
        Ok(())
    };
    if let (true, false, RootSpec::Overlay { lower, .. }) =
        (spec.build_root, spec.rootless, &spec.root)
    {
        // A build sandbox's root owns the image's files (see
        // `mounts::idmap_in_place`).
        make_private()?;
        mounts::idmap_in_place(
            lower,
            &format_map(&spec.uid_map),
            &format_map(&spec.gid_map),
        )?;
    }
    // Volumes are reached through the stage: their own directories are
    // host root's alone, which init (another host user) could not traverse.
    let staged = match spec.volume_binds.is_empty() || spec.rootless {
        true => None,
        false => {
            make_private()?;
            Some(stage_volumes(spec)?)
        }
    };
    let spec = staged.as_ref().unwrap_or(spec);
    // Opened here, on the host's cgroup file system (init's root will not
    // show it), for init to answer `sysinfo` from (`init::sysinfo`).
    let counters = init::sysinfo::CgroupCounters::open_own();

    let (sync_read, sync_write) = sys::pipe().step(SetupStep::SyncPipe, || "pipe".into())?;
    let flags = CONTAINER_NAMESPACES | libc::CLONE_PARENT;
    // SAFETY: this process is single-threaded (a freshly exec'd helper that
    // started no threads), so a fork-like clone (no CLONE_VM, null stack: the
    // child runs on a copy-on-write copy of this stack) leaves the child with
    // consistent memory, as fork would.
    let child = unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    match child {
        -1 => Err(SetupError::last_os(
            SetupStep::CloneInit,
            "clone into new namespaces",
        )),
        0 => {
            drop(sync_write);
            let mut byte = [0u8; 1];
            // Wait until the helper has written our id maps; EOF means it failed.
            match sys::read(sync_read.as_raw_fd(), &mut byte) {
                Ok(1) => init::run(spec, control, counters),
                _ => std::process::exit(1),
            }
        }
        pid => {
            let pid = pid as libc::pid_t;
            drop(sync_read);
            // Init must outlive any memory pressure: a tmpfs or shared memory
            // filled to the cgroup limit is charged to no process, so the OOM
            // killer could otherwise pick init and end the container. Each
            // command sets its own score back to 0. (Lowering needs
            // CAP_SYS_RESOURCE on the host: rootless helpers skip this.)
            if !spec.rootless {
                let _ = fs::write(format!("/proc/{pid}/oom_score_adj"), "-1000");
            }
            if let Err(error) = write_id_maps(pid, spec) {
                // SAFETY: `pid` is our just-created child; killing it is harmless.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                return Err(error);
            }
            // Report the pid before releasing init: both write to the same
            // socket, and the engine must learn the pid before init's Ready.
            let fds: Vec<RawFd> = disk_data.iter().map(|dir| dir.as_raw_fd()).collect();
            report_with_fds(control, &Report::InitPid { pid, loop_device }, &fds);
            sys::write_all(sync_write.as_raw_fd(), b"1")
                .step(SetupStep::ReleaseInit, || "release init".into())?;
            Ok(())
        }
    }
}

/// Mounts every volume of the container on a point of its own under
/// `HelperSpec::volume_stage` (a small tmpfs of this mount namespace, which
/// init's copies: the host never sees it), idmapped when the spec says so,
/// and returns the spec with those points as the volumes' sources. The
/// volumes' directories stay private to host root (`0700` above them); init
/// binds each from the stage into the container's root, and the stage goes
/// with the host's tree when init pivots away from it.
fn stage_volumes(spec: &HelperSpec) -> SetupResult<HelperSpec> {
    let stage = &spec.volume_stage;
    sys::mount(
        Some(Path::new("tmpfs")),
        stage,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        Some("size=64k,nr_inodes=64,mode=0711"),
    )
    .step(SetupStep::BindMount, || {
        format!("mount the volumes' stage at {}", stage.display())
    })?;
    let (uid_map, gid_map) = (format_map(&spec.uid_map), format_map(&spec.gid_map));
    let mut staged = spec.clone();
    for (index, (source, _)) in staged.volume_binds.iter_mut().enumerate() {
        let point = stage.join(index.to_string());
        fs::create_dir(&point)
            .step(SetupStep::BindMount, || format!("make {}", point.display()))?;
        if spec.idmap_volumes {
            mounts::idmap_onto(source, &point, &uid_map, &gid_map)?;
        } else {
            mounts::bind(source, &point, false)?;
        }
        *source = point;
    }
    Ok(staged)
}

/// Mounts the container's disk image (in a mount namespace of the helper's
/// own, which init's namespace then copies: the host never sees the mount)
/// and makes its standard directories. Returns the loop device used and,
/// for a disk shown through an idmapped mount, its `data` directory as the
/// disk stores it (see `HelperSpec::idmap_disk`).
fn prepare_disk(spec: &HelperSpec) -> SetupResult<(Option<u32>, Option<fs::File>)> {
    let mut loop_device = None;
    if let Some(bytes) = spec.disk_tmpfs_bytes {
        private_mount_namespace()?;
        let options = CString::new(format!("size={bytes},mode=0755"))
            .map_err(|e| SetupError::other(SetupStep::MountDisk, "tmpfs options", e))?;
        let target = CString::new(spec.disk_root.as_os_str().as_encoded_bytes())
            .map_err(|e| SetupError::other(SetupStep::MountDisk, "disk root", e))?;
        // SAFETY: every pointer is a valid NUL-terminated string that
        // outlives the call.
        sys::cvt(unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                options.as_ptr().cast(),
            )
        })
        .step(SetupStep::MountDisk, || {
            "mount the throwaway disk (tmpfs)".into()
        })?;
    } else if let Some(image) = &spec.disk_image {
        private_mount_namespace()?;
        loop_device = Some(crate::disk::mount_image(
            image,
            &spec.disk_root,
            spec.reuse_loop,
        )?);
    }
    crate::disk::prepare_layout(&spec.disk_root, spec.disk_sandbox_ids, spec.disk_root_ids)?;
    if !(spec.idmap_disk && loop_device.is_some()) {
        return Ok((loop_device, None));
    }
    // Opened before the idmapped mount covers the disk: this descriptor
    // stays on the mount beneath, where host root may create files.
    let data = spec.disk_root.join(crate::disk::DATA_DIR);
    let dir =
        fs::File::open(&data).step(SetupStep::OpenData, || format!("open {}", data.display()))?;
    mounts::idmap_in_place(
        &spec.disk_root,
        &format_map(&spec.uid_map),
        &format_map(&spec.gid_map),
    )?;
    Ok((loop_device, Some(dir)))
}

fn write_id_maps(pid: libc::pid_t, spec: &HelperSpec) -> SetupResult<()> {
    let proc_dir = Path::new("/proc").join(pid.to_string());
    if spec.rootless {
        // Without CAP_SETGID on the host, gid_map may only be written once
        // setgroups(2) is disabled for the namespace.
        fs::write(proc_dir.join("setgroups"), "deny")
            .step(SetupStep::DenySetgroups, || "setgroups deny".into())?;
    }
    fs::write(proc_dir.join("uid_map"), format_map(&spec.uid_map))
        .step(SetupStep::WriteUidMap, || "write uid_map".into())?;
    fs::write(proc_dir.join("gid_map"), format_map(&spec.gid_map))
        .step(SetupStep::WriteGidMap, || "write gid_map".into())?;
    Ok(())
}
