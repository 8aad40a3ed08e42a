//! Builds a container's root file system inside its fresh mount namespace and
//! pivots into it.
//!
//! Layers, outermost first:
//! - the root: read-only host binds (image `host`) or an overlay of a
//!   read-only image and the container's persistent upper layer;
//! - a fresh `/proc` of the container's pid namespace, with the files that
//!   describe the host (or let a process poke at it) masked and the kernel
//!   tunables read-only;
//! - a minimal read-only `/dev` (null, zero, full, random, urandom), the
//!   container's own devpts instance (`/dev/pts`, `/dev/ptmx`: its
//!   terminals, never the host's) and a writable `/dev/shm`;
//! - a private writable `/tmp`;
//! - read-write binds of the container's persistent directories
//!   (`/mnt/data`, the home directory).
//!
//! Every bind is `nosuid` and `nodev`, so a setuid binary grants nothing,
//! and read-only binds are read-only with everything mounted below them
//! (`mount_setattr(2)` with `AT_RECURSIVE`). No `/sys`: nothing in a shell
//! session needs the host's device tree.
//!
//! Superblocks are few: every one registers a shrinker, and the kernel keeps
//! in *every* memory cgroup a map as long as the highest shrinker id, so
//! each superblock a container makes costs kernel memory in all the others.
//! A container makes five: the scratch tmpfs below, its `/proc`, its
//! devpts, its disk, and the overlay of its root (an image) or of its
//! `/etc` and `/usr/local` (the host image; six when the host's own
//! `/usr/local` is exposed, which takes an overlay of its own). The host
//! image's root, `/dev`, `/dev/shm` and `/tmp` are directories of the
//! scratch tmpfs, bound in place; the kernel refuses `link` and `rename`
//! across mounts, and `..` stops at a bind's root, so no bind reaches
//! another's files. `/tmp` and `/dev/shm` therefore share one size bound,
//! the sum of their two caps (`scratch_bytes`); every page of it is charged
//! to the container's memory cgroup, as any tmpfs's pages are.
//!
//! Nothing in the container's mount table names a host path under the data
//! directory. `/proc/self/mountinfo` prints, for every mount, the path of
//! its root inside its file system and the overlay options: a bind of
//! `<data>/sandbox/images/host/etc` would print that path, an overlay of an
//! image its `lowerdir=`, `upperdir=` and `workdir=`. So the root is built
//! inside a *scratch* tmpfs mounted over `root_mount` (only in this mount
//! namespace, and detached with the host's tree at the pivot):
//!
//! ```text
//! <root_mount>  scratch tmpfs, its mount read-only once filled
//!   root/       the host image's root (bound in place), or the mount
//!               point of an image's overlay; pivoted into
//!   dev/        /dev: device mount points, links, pts/ and shm/
//!   tmp/        /tmp
//!   lower upper work host ...   symbolic links to the host directories
//!               of the layers: overlays are mounted with these short names,
//!               relative to the scratch directory, and print only them
//!   host.tree/  the mount point of a layer shown in parts (the host
//!               image's `etc` and `usr-local`, bound at `/etc` and
//!               `/usr/local`)
//!   empty       an empty directory: masks, hidden paths, the second lower
//!               layer of read-only overlays
//!   null        an empty file: masks for /proc files
//!   file0 ...   copies of the (tiny) identity files bound over an image's
//!   filex0 ...  copies of the generated programs bound over it (`sudo`)
//! ```
//!
//! Binds of scratch entries inherit its mount's read-only, `nosuid`,
//! `nodev` and `noexec` flags, so each mask is a single `mount` call; a
//! program's bind, the root, `/tmp` and `/dev/shm` are remounted without
//! what they must not have (one more call each).

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::fs::{symlink, DirBuilderExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use crate::protocol::{HelperSpec, Layer, RootSpec};
use crate::sys;
use shellgate_sandbox_api::setup_error::{SetupError, SetupResult, SetupStep};

/// Device nodes bound from the host into the container's `/dev`.
const DEVICES: [&str; 5] = ["null", "zero", "full", "random", "urandom"];

/// `/proc` files that describe the host or act on it, covered with an empty
/// read-only file (the OCI runtimes' default masked paths, plus the kernel
/// command line, which names the host's boot image and parameters, and
/// `sysrq-trigger`, which is only made read-only there: masked, even a
/// process that gained write access could not reach the kernel through it).
const MASKED_PROC_FILES: &[&str] = &[
    "kcore",
    "keys",
    "latency_stats",
    "sched_debug",
    "timer_list",
    "timer_stats",
    "sysrq-trigger",
    "cmdline",
];

/// `/proc` directories describing host hardware, covered with an empty
/// read-only directory.
const MASKED_PROC_DIRS: &[&str] = &["acpi", "asound", "scsi"];

/// `/proc` trees of kernel tunables and hardware, made read-only (with
/// everything mounted below them).
const READ_ONLY_PROC: &[&str] = &["bus", "fs", "irq", "sys"];

/// Name of the container's root inside the scratch tmpfs.
const SCRATCH_ROOT: &str = "root";
/// An empty directory in the scratch tmpfs.
const SCRATCH_EMPTY_DIR: &str = "empty";
/// An empty file in the scratch tmpfs.
const SCRATCH_EMPTY_FILE: &str = "null";
/// The container's `/dev` in the scratch tmpfs.
const SCRATCH_DEV: &str = "dev";
/// The container's `/tmp` in the scratch tmpfs.
const SCRATCH_TMP: &str = "tmp";
/// Room in the scratch tmpfs for all but `/tmp` and `/dev/shm`: the
/// identity files and a CA bundle (a few hundred KiB), the host image's
/// mount points and links, `/dev`'s nodes and links.
const SCRATCH_ROOM: u64 = 2 << 20;

// mount_setattr(2) (linux/mount.h, linux/fcntl.h).
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const AT_RECURSIVE: libc::c_uint = 0x8000;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// The cap of `/dev/shm` (and of System V shared memory): a quarter of
/// `/tmp`'s. tmpfs pages count against the memory limit but belong to no
/// process the OOM killer could end, so all of them together must stay well
/// below the limit (the engine caps `/tmp` at half of it), or a full `/tmp`
/// and `/dev/shm` would leave no memory to run the `rm` that frees them.
pub fn shm_bytes(tmp_bytes: u64) -> u64 {
    (tmp_bytes / 4).max(1 << 20)
}

/// The size of the scratch tmpfs, which holds `/tmp` and `/dev/shm` (see
/// the module documentation): their two caps together, plus its own room.
/// What `/tmp` and `/dev/shm` can hold together is no more than when each
/// was a tmpfs of its own; either alone may now use the other's share.
pub fn scratch_bytes(tmp_bytes: u64) -> u64 {
    tmp_bytes
        .saturating_add(shm_bytes(tmp_bytes))
        .saturating_add(SCRATCH_ROOM)
}

/// A setup step's result.
pub type StepResult<T> = SetupResult<T>;

/// `result` with the step and what it was doing, if it failed.
fn step<T>(step: SetupStep, what: impl FnOnce() -> String, result: io::Result<T>) -> StepResult<T> {
    result.map_err(|e| SetupError::os(step, what(), e))
}

/// `root` joined with an absolute path inside the container.
fn inside(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

fn mkdir_all(path: &Path) -> StepResult<()> {
    step(
        SetupStep::Mkdir,
        || format!("mkdir {}", path.display()),
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(path),
    )
}

/// Mount flags of `path`'s file system that a bind remount must keep (in a
/// user namespace the kernel refuses to clear flags it locked).
fn locked_flags(path: &Path) -> io::Result<libc::c_ulong> {
    let st = sys::mount_flags(path)?;
    let pairs = [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ];
    Ok(pairs
        .iter()
        .filter(|(st_flag, _)| st & st_flag != 0)
        .fold(0, |acc, (_, ms)| acc | ms))
}

/// Sets `attributes` on the mount at `target` and on every mount below it.
fn set_attributes_recursively(target: &Path, attributes: u64) -> io::Result<()> {
    let path = sys::cstr(target)?;
    let attr = MountAttr {
        attr_set: attributes,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `path` is a C string and `attr` a mount_attr of the size
    // passed, both alive across the call; the kernel only reads them.
    sys::cvt(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    })?;
    Ok(())
}

/// `mount_setattr`'s idmapped-mount attribute, and `open_tree`'s and
/// `move_mount`'s flags (linux/mount.h).
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

/// Covers `dir` (in this process's own mount namespace) with an idmapped
/// mount of itself: a file owned by id `k` on disk shows as owned by what
/// `k` maps to through `uid_map`/`gid_map` (inside to outside), here the
/// container's own range, so the root of a build sandbox owns the image's
/// files as the root of an image owns them, and may change them (its
/// overlay copies them up; the image itself is only read). Needs host
/// root (the helper before it starts init); the namespace the mapping is
/// read from is made for this and gone when it returns.
pub fn idmap_in_place(dir: &Path, uid_map: &str, gid_map: &str) -> StepResult<()> {
    idmap_onto(dir, dir, uid_map, gid_map)
}

/// An idmapped mount of `source` (see [`idmap_in_place`]) at `target`.
pub fn idmap_onto(source: &Path, target: &Path, uid_map: &str, gid_map: &str) -> StepResult<()> {
    let what = || format!("idmapped mount of {}", source.display());
    let userns = mapping_namespace(uid_map, gid_map)
        .map_err(|e| SetupError::os(SetupStep::BindMount, what(), e))?;
    let path = sys::cstr(source).map_err(|e| SetupError::os(SetupStep::BindMount, what(), e))?;
    let target = sys::cstr(target).map_err(|e| SetupError::os(SetupStep::BindMount, what(), e))?;
    // SAFETY: `path` is a C string alive across the call; the result is a
    // new descriptor owned at once.
    let opened = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint,
        )
    };
    let tree = step(SetupStep::BindMount, what, sys::cvt(opened))?;
    // SAFETY: open_tree returned a new descriptor nobody else owns.
    let tree = unsafe { std::os::fd::OwnedFd::from_raw_fd(tree as RawFd) };
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    // SAFETY: an empty C string and a mount_attr of the size passed, both
    // alive across the call; the kernel only reads them.
    let idmapped = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    step(SetupStep::BindMount, what, sys::cvt(idmapped))?;
    // SAFETY: the detached tree's descriptor, an empty C string and the
    // target's C string, all alive across the call.
    let moved = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    step(SetupStep::BindMount, what, sys::cvt(moved))?;
    Ok(())
}

/// A user namespace with the given maps, held by a descriptor: a child
/// made in a new one waits while its maps are written and the namespace
/// opened, then is ended.
fn mapping_namespace(uid_map: &str, gid_map: &str) -> io::Result<std::os::fd::OwnedFd> {
    let (wait_read, wait_write) = sys::pipe()?;
    // SAFETY: the helper is single-threaded; the child (a fork-like clone
    // into a new user namespace) only reads a pipe and exits.
    let child = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (libc::CLONE_NEWUSER | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    if child < 0 {
        return Err(io::Error::last_os_error());
    }
    if child == 0 {
        drop(wait_write);
        let mut byte = [0u8; 1];
        let _ = sys::read(wait_read.as_raw_fd(), &mut byte);
        // SAFETY: ends this child at once, running nothing of the parent's.
        unsafe { libc::_exit(0) };
    }
    drop(wait_read);
    let pid = child as libc::pid_t;
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let opened = fs::write(proc_dir.join("uid_map"), uid_map)
        .and_then(|()| fs::write(proc_dir.join("gid_map"), gid_map))
        .and_then(|()| fs::File::open(proc_dir.join("ns/user")));
    drop(wait_write);
    let mut status = 0;
    // SAFETY: reaps our own child, which exits once the pipe closed.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    Ok(opened?.into())
}

/// Binds `source` (with everything mounted below it) at `target` and makes
/// the whole subtree `nosuid,nodev`, and read-only if asked.
///
/// A bind remount changes only the top mount: a host submount under, say,
/// `/usr` would stay writable (and setuid-capable) inside. `mount_setattr`
/// with `AT_RECURSIVE` changes the whole subtree at once; kernels before 5.12
/// lack it, and get the old per-mount remount.
pub(super) fn bind(source: &Path, target: &Path, read_only: bool) -> StepResult<()> {
    let what = || format!("bind {} at {}", source.display(), target.display());
    step(
        SetupStep::BindMount,
        what,
        sys::mount(
            Some(source),
            target,
            None,
            libc::MS_BIND | libc::MS_REC,
            None,
        ),
    )?;
    let mut attributes = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    if read_only {
        attributes |= MOUNT_ATTR_RDONLY;
    }
    match set_attributes_recursively(target, attributes) {
        Ok(()) => return Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {}
        Err(e) => {
            return Err(SetupError::os(
                SetupStep::LockDownMount,
                format!("lock down {}", target.display()),
                e,
            ))
        }
    }
    let mut flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_NOSUID | libc::MS_NODEV;
    if read_only {
        flags |= libc::MS_RDONLY;
    }
    flags |= step(SetupStep::LockDownMount, what, locked_flags(target))?;
    step(
        SetupStep::Remount,
        || format!("remount {}", target.display()),
        sys::mount(None, target, None, flags, None),
    )
}

/// Binds a scratch entry (`source`) over `target`: one `mount` call, as the
/// bind inherits the scratch tmpfs's read-only, `nosuid`, `nodev` and
/// `noexec` flags.
fn cover(source: &Path, target: &Path) -> StepResult<()> {
    step(
        SetupStep::Cover,
        || format!("cover {}", target.display()),
        sys::mount(Some(source), target, None, libc::MS_BIND, None),
    )
}

/// Binds a scratch directory (`source`) at `target` and remounts the bind
/// writable and executable (still `nosuid`, `nodev`): the root of the host
/// image while it is filled, `/tmp`, `/dev/shm`. Clearing the read-only
/// flag the bind inherited is allowed: the mount is this namespace's own,
/// and the tmpfs itself was never made read-only.
fn writable_bind(source: &Path, target: &Path) -> StepResult<()> {
    mkdir_all(target)?;
    step(
        SetupStep::BindMount,
        || format!("bind {} at {}", source.display(), target.display()),
        sys::mount(Some(source), target, None, libc::MS_BIND, None),
    )?;
    step(
        SetupStep::Remount,
        || format!("remount {} writable", target.display()),
        sys::mount(
            None,
            target,
            None,
            libc::MS_BIND | libc::MS_REMOUNT | libc::MS_NOSUID | libc::MS_NODEV,
            None,
        ),
    )
}

fn tmpfs(target: &Path, options: &str, extra_flags: libc::c_ulong) -> StepResult<()> {
    mkdir_all(target)?;
    step(
        SetupStep::MountTmpfs,
        || format!("mount tmpfs at {}", target.display()),
        sys::mount(
            Some(Path::new("tmpfs")),
            target,
            Some("tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV | extra_flags,
            Some(options),
        ),
    )
}

/// Creates an empty file to bind another file over, unless one exists.
fn touch(path: &Path) -> StepResult<()> {
    if let Some(parent) = path.parent() {
        mkdir_all(parent)?;
    }
    if path.symlink_metadata().is_ok() {
        return Ok(());
    }
    step(
        SetupStep::CreateFile,
        || format!("create {}", path.display()),
        fs::File::create(path).map(drop),
    )
}

/// Terminals the container's devpts instance holds at most: one per live
/// process (64) and as many again for what commands open themselves
/// (`script`, `tmux`, `expect`).
const MAX_TERMINALS: u32 = 128;

/// The container's own terminals (its processes' PTYs): a *new* devpts
/// instance at `/dev/pts`, never the host's (whose terminals a container
/// must not see or open), `/dev/ptmx` a link to its `ptmx`. Mounted
/// `nosuid,noexec`; its nodes are the instance's own pairs. A kernel that
/// refuses it (no devpts in the user namespace) leaves the container
/// without terminals rather than without a start: a process asking for a
/// PTY is then refused with the errno (`/dev/ptmx` leads nowhere).
fn terminals(dev: &Path) -> StepResult<()> {
    let _ = sys::mount(
        Some(Path::new("devpts")),
        &dev.join("pts"),
        Some("devpts"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some(&format!(
            "newinstance,ptmxmode=0666,mode=0620,max={MAX_TERMINALS}"
        )),
    );
    Ok(())
}

/// Fills the scratch tmpfs's `dev` directory: mount points for the devices
/// and the terminals, the links, and `shm`.
fn fill_dev(dev: &Path) -> StepResult<()> {
    mkdir_all(&dev.join("pts"))?;
    // Whatever the umask: every process walks /dev.
    step(
        SetupStep::Mkdir,
        || "chmod /dev".into(),
        fs::set_permissions(dev, fs::Permissions::from_mode(0o755)),
    )?;
    for name in DEVICES {
        touch(&dev.join(name))?;
    }
    for (link, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ] {
        step(
            SetupStep::CreateFile,
            || format!("link /dev/{link}"),
            symlink(target, dev.join(link)),
        )?;
    }
    world_writable_dir(&dev.join("shm"))
}

/// Makes `path` a sticky world-writable directory, as `/tmp` is.
fn world_writable_dir(path: &Path) -> StepResult<()> {
    mkdir_all(path)?;
    step(
        SetupStep::Mkdir,
        || format!("chmod {}", path.display()),
        fs::set_permissions(path, fs::Permissions::from_mode(0o1777)),
    )
}

/// `/dev`: the scratch's `dev` directory, read-only, `nosuid`, `nodev` and
/// `noexec` (its mount's flags), with the host's harmless devices bound
/// over their mount points, `/dev/shm` writable and the terminals.
fn build_dev(root: &Path, scratch: &Path) -> StepResult<()> {
    let dev = inside(root, "/dev");
    mkdir_all(&dev)?;
    let scratch_dev = scratch.join(SCRATCH_DEV);
    cover(&scratch_dev, &dev)?;
    for name in DEVICES {
        let target = dev.join(name);
        let source = Path::new("/dev").join(name);
        step(
            SetupStep::BindMount,
            || format!("bind {}", source.display()),
            sys::mount(Some(&source), &target, None, libc::MS_BIND, None),
        )?;
    }
    writable_bind(&scratch_dev.join("shm"), &dev.join("shm"))?;
    terminals(&dev)
}

/// The scratch names of a layer's sources: its name, then `<name>.1`,
/// `<name>.2` for the lower ones.
fn layer_names(target: &str, sources: &[PathBuf]) -> StepResult<Vec<String>> {
    let name = layer_name(target)?;
    Ok((0..sources.len())
        .map(|i| {
            if i == 0 {
                name.clone()
            } else {
                format!("{name}.{i}")
            }
        })
        .collect())
}

/// The name of the scratch link to a layer's host directory, checked to be
/// usable in overlay options (which `,`, `:` and `\` would split or escape).
fn layer_name(target: &str) -> StepResult<String> {
    let name = target.trim_matches('/').replace('/', "-");
    let reserved = [
        SCRATCH_ROOT,
        SCRATCH_EMPTY_DIR,
        SCRATCH_EMPTY_FILE,
        SCRATCH_DEV,
        SCRATCH_TMP,
    ];
    // No `.`: `<name>.1` and `<name>.tree` are the scratch's own names.
    if name.is_empty()
        || name.contains([',', ':', '\\', '.'])
        || reserved.contains(&name.as_str())
        || name.starts_with("file")
    {
        return Err(SetupError::other(
            SetupStep::LayerName,
            format!("cannot show {target:?} as a layer"),
            "",
        ));
    }
    Ok(name)
}

/// Fills the scratch tmpfs (see the module documentation) and freezes it.
/// Returns the copies of `spec.file_binds`' files, then of
/// `spec.program_binds`', in order.
fn fill_scratch(scratch: &Path, spec: &HelperSpec) -> StepResult<Vec<PathBuf>> {
    tmpfs(
        scratch,
        &format!("size={},mode=700", scratch_bytes(spec.tmp_bytes)),
        libc::MS_NOEXEC,
    )?;
    let root = scratch.join(SCRATCH_ROOT);
    mkdir_all(&root)?;
    step(
        SetupStep::Mkdir,
        || "chmod the root".into(),
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)),
    )?;
    mkdir_all(&scratch.join(SCRATCH_EMPTY_DIR))?;
    fill_dev(&scratch.join(SCRATCH_DEV))?;
    world_writable_dir(&scratch.join(SCRATCH_TMP))?;
    let empty_file = scratch.join(SCRATCH_EMPTY_FILE);
    step(
        SetupStep::CreateFile,
        || "create the empty file".into(),
        fs::File::create(&empty_file).map(drop),
    )?;
    step(
        SetupStep::CreateFile,
        || "chmod the empty file".into(),
        fs::set_permissions(&empty_file, fs::Permissions::from_mode(0o444)),
    )?;
    let link = |name: &str, target: &Path| {
        step(
            SetupStep::CreateFile,
            || format!("link {name} to a layer"),
            symlink(target, scratch.join(name)),
        )
    };
    match &spec.root {
        RootSpec::HostBinds { layers, .. } => {
            for layer in layers {
                for (name, source) in layer_names(&layer.name, &layer.sources)?
                    .iter()
                    .zip(&layer.sources)
                {
                    link(name, source)?;
                }
                if layer.shows.iter().any(|(dir, _)| !dir.is_empty()) {
                    mkdir_all(&scratch.join(layer_tree(&layer.name)))?;
                }
            }
        }
        RootSpec::Overlay { lower, upper, work } => {
            link("lower", lower)?;
            link("upper", upper)?;
            link("work", work)?;
        }
    }
    // The identity files bound over an image are a few hundred bytes: a
    // copy here shows in the mount table as `/file0`, the original would
    // show its host path.
    // Programs (`sudo`) are copied the same way, as `/filex0`, executable.
    let files = spec.file_binds.iter().enumerate();
    let files = files.map(|(i, (source, _))| (source, format!("file{i}"), 0o644));
    let programs = spec.program_binds.iter().enumerate();
    let programs = programs.map(|(i, (source, _))| (source, format!("filex{i}"), 0o755));
    let mut copies = Vec::with_capacity(spec.file_binds.len() + spec.program_binds.len());
    for (source, name, mode) in files.chain(programs) {
        let copy = scratch.join(name);
        step(
            SetupStep::CopyFile,
            || format!("copy {}", source.display()),
            fs::copy(source, &copy).map(drop),
        )?;
        step(
            SetupStep::CopyFile,
            || format!("chmod {}", copy.display()),
            fs::set_permissions(&copy, fs::Permissions::from_mode(mode)),
        )?;
        copies.push(copy);
    }
    // The mount, not the tmpfs: `/tmp` and `/dev/shm` are binds of it
    // made writable again.
    step(
        SetupStep::Remount,
        || "remount the scratch tmpfs read-only".into(),
        sys::mount(
            None,
            scratch,
            None,
            libc::MS_BIND
                | libc::MS_REMOUNT
                | libc::MS_RDONLY
                | libc::MS_NOSUID
                | libc::MS_NODEV
                | libc::MS_NOEXEC,
            None,
        ),
    )?;
    Ok(copies)
}

/// Mounts an overlay at `target` whose layers are the scratch links named
/// in `options` (the current directory is the scratch tmpfs).
fn overlay(target: &Path, options: &str, flags: libc::c_ulong) -> StepResult<()> {
    step(
        SetupStep::MountOverlay,
        || format!("mount overlay at {}", target.display()),
        sys::mount(
            Some(Path::new("overlay")),
            target,
            Some("overlay"),
            libc::MS_NOSUID | libc::MS_NODEV | flags,
            Some(options),
        ),
    )
}

/// Writes the System V shared memory caps of the container's IPC namespace
/// (see `shm_bytes`). Done here, before `/proc/sys` turns read-only. Best
/// effort: a kernel without these knobs still has the memory cgroup.
fn size_shared_memory(proc_dir: &Path, tmp_bytes: u64) {
    let shm_bytes = shm_bytes(tmp_bytes);
    let shm_pages = (shm_bytes / 4096).max(1);
    let kernel = proc_dir.join("sys/kernel");
    let _ = sys::write_file(&kernel.join("shmmax"), &shm_bytes.to_string());
    let _ = sys::write_file(&kernel.join("shmall"), &shm_pages.to_string());
}

/// Masks what `/proc` tells about the host and freezes its tunables.
///
/// The pid namespace hides host processes, but `/proc` also holds
/// system-wide files: the kernel's memory image (`kcore`), timers and
/// scheduler internals of every host process (`timer_list`, `sched_debug`),
/// keyrings, the host's boot command line, `sysrq-trigger`, and the sysctl
/// tree. Sandboxed code has no capability to use most of them, but each is
/// one kernel bug from mattering: masked, they are plain empty files.
fn lock_down_proc(proc_dir: &Path, scratch: &Path) -> StepResult<()> {
    let present = |name: &str| {
        let path = proc_dir.join(name);
        path.symlink_metadata().is_ok().then_some(path)
    };
    for name in MASKED_PROC_FILES {
        if let Some(path) = present(name) {
            cover(&scratch.join(SCRATCH_EMPTY_FILE), &path)?;
        }
    }
    for name in MASKED_PROC_DIRS {
        if let Some(path) = present(name) {
            cover(&scratch.join(SCRATCH_EMPTY_DIR), &path)?;
        }
    }
    for name in READ_ONLY_PROC {
        if let Some(path) = present(name) {
            bind(&path, &path, true)?;
        }
    }
    Ok(())
}

/// Mounts `layer`'s read-only overlay: at its one path inside when that
/// shows all of it, else in the scratch tmpfs (`<name>.tree`), with each
/// directory shown bound from there (the binds inherit its read-only,
/// `nosuid` and `nodev`).
fn show_layer(root: &Path, scratch: &Path, layer: &Layer) -> StepResult<()> {
    let mut lowers = layer_names(&layer.name, &layer.sources)?;
    // A read-only overlay needs two lower layers; a second one is empty.
    if lowers.len() < 2 {
        lowers.push(SCRATCH_EMPTY_DIR.to_owned());
    }
    let options = format!("lowerdir={},userxattr", lowers.join(":"));
    if let [(whole, target)] = layer.shows.as_slice() {
        if whole.is_empty() {
            let target = inside(root, target);
            mkdir_all(&target)?;
            return overlay(&target, &options, libc::MS_RDONLY);
        }
    }
    let tree = scratch.join(layer_tree(&layer.name));
    overlay(&tree, &options, libc::MS_RDONLY)?;
    for (dir, target) in &layer.shows {
        let source = tree.join(dir);
        let below = Path::new(dir).components();
        if dir.is_empty() || !below.into_iter().all(|c| matches!(c, Component::Normal(_))) {
            return Err(SetupError::other(
                SetupStep::LayerName,
                format!("cannot show {dir:?} of layer {:?}", layer.name),
                "",
            ));
        }
        let target = inside(root, target);
        mkdir_all(&target)?;
        cover(&source, &target)?;
    }
    Ok(())
}

/// The mount point in the scratch tmpfs of a layer shown in parts.
fn layer_tree(name: &str) -> String {
    format!("{name}.tree")
}

/// Builds the whole tree inside a scratch tmpfs at `spec.root_mount` and
/// pivots into it.
/// Covers `path` (inside the root) with the scratch tmpfs's empty
/// directory. Only a real directory can hide anything (and a link must not
/// lead the mount elsewhere): anything else is left as it is.
fn hide(root: &Path, scratch: &Path, path: &str) -> StepResult<()> {
    let target = inside(root, path);
    if target.symlink_metadata().is_ok_and(|m| m.is_dir()) {
        cover(&scratch.join(SCRATCH_EMPTY_DIR), &target)?;
    }
    Ok(())
}

pub fn build_root(spec: &HelperSpec) -> StepResult<()> {
    let scratch = spec.root_mount.as_path();
    // Nothing we mount may propagate back to the host.
    step(
        SetupStep::MakeMountsPrivate,
        || "make / private".into(),
        sys::make_mounts_private(),
    )?;
    let file_copies = fill_scratch(scratch, spec)?;
    // Overlay layers are named relative to the scratch directory.
    step(
        SetupStep::Chdir,
        || "chdir to the scratch tmpfs".into(),
        std::env::set_current_dir(scratch),
    )?;
    let root = scratch.join(SCRATCH_ROOT);
    let root = root.as_path();
    match &spec.root {
        RootSpec::HostBinds {
            binds,
            symlinks,
            layers,
        } => {
            // A mount point of its own (`pivot_root` wants one), on the
            // scratch tmpfs rather than a tmpfs of its own.
            writable_bind(root, root)?;
            for (source, target) in binds {
                let target = inside(root, target);
                mkdir_all(&target)?;
                bind(source, &target, true)?;
            }
            for layer in layers {
                show_layer(root, scratch, layer)?;
            }
            for (link, target) in symlinks {
                let link = inside(root, link);
                if let Some(parent) = link.parent() {
                    mkdir_all(parent)?;
                }
                step(
                    SetupStep::CreateFile,
                    || format!("link {}", link.display()),
                    symlink(target, &link),
                )?;
            }
        }
        RootSpec::Overlay { .. } => {
            overlay(
                root,
                "lowerdir=lower,upperdir=upper,workdir=work,userxattr",
                0,
            )?;
        }
    }
    let (file_copies, program_copies) = file_copies.split_at(spec.file_binds.len());
    for ((_, target), copy) in spec.file_binds.iter().zip(file_copies) {
        let target = inside(root, target);
        touch(&target)?;
        cover(copy, &target)?;
    }
    for ((_, target), copy) in spec.program_binds.iter().zip(program_copies) {
        let target = inside(root, target);
        touch(&target)?;
        cover(copy, &target)?;
        // The cover inherited the scratch's `noexec`: this one mount
        // drops it (still read-only, `nosuid`, `nodev`).
        step(
            SetupStep::Remount,
            || format!("remount {} executable", target.display()),
            sys::mount(
                None,
                &target,
                None,
                libc::MS_BIND
                    | libc::MS_REMOUNT
                    | libc::MS_RDONLY
                    | libc::MS_NOSUID
                    | libc::MS_NODEV,
                None,
            ),
        )?;
    }
    // /proc must be mounted while the host's /proc is still visible: the
    // kernel only lets a user namespace mount proc next to a fully visible one.
    let proc_dir = inside(root, "/proc");
    mkdir_all(&proc_dir)?;
    step(
        SetupStep::MountProc,
        || "mount /proc".into(),
        sys::mount(
            Some(Path::new("proc")),
            &proc_dir,
            Some("proc"),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            None,
        ),
    )?;
    size_shared_memory(&proc_dir, spec.tmp_bytes);
    lock_down_proc(&proc_dir, scratch)?;
    build_dev(root, scratch)?;
    writable_bind(&scratch.join(SCRATCH_TMP), &inside(root, "/tmp"))?;
    for (source, target) in &spec.data_binds {
        let target = inside(root, target);
        mkdir_all(&target)?;
        bind(source, &target, false)?;
    }
    for (source, target) in &spec.read_only_binds {
        let target = inside(root, target);
        mkdir_all(&target)?;
        bind(source, &target, true)?;
    }
    for (source, target) in &spec.volume_binds {
        let target = inside(root, target);
        refuse_links_on_the_way(root, &target)?;
        mkdir_all(&target)?;
        bind(source, &target, false)?;
    }
    for path in &spec.hide {
        hide(root, scratch, path)?;
    }
    if matches!(spec.root, RootSpec::HostBinds { .. }) {
        // The root holds only mount points and links: freeze it (its
        // mount: the tmpfs holds `/tmp` too).
        step(
            SetupStep::Remount,
            || "remount / read-only".into(),
            sys::mount(
                None,
                root,
                None,
                libc::MS_BIND
                    | libc::MS_REMOUNT
                    | libc::MS_RDONLY
                    | libc::MS_NOSUID
                    | libc::MS_NODEV,
                None,
            ),
        )?;
    }
    pivot(root)
}

/// Fails if any existing component of `target` below `root` is a symbolic
/// link: the mount is made before the pivot, so a link (planted in an
/// image or a writable layer) would be resolved against the host's tree and
/// the volume land somewhere other than where the container will look.
fn refuse_links_on_the_way(root: &Path, target: &Path) -> StepResult<()> {
    let Ok(below) = target.strip_prefix(root) else {
        return Err(SetupError::os(
            SetupStep::BindMount,
            format!("volume at {}: outside the root", target.display()),
            io::Error::from_raw_os_error(libc::EINVAL),
        ));
    };
    let mut path = root.to_path_buf();
    for component in below.components() {
        path.push(component);
        match path.symlink_metadata() {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(SetupError::os(
                    SetupStep::BindMount,
                    format!(
                        "volume at {}: {} is a symbolic link",
                        target.display(),
                        path.display()
                    ),
                    io::Error::from_raw_os_error(libc::ELOOP),
                ));
            }
            Ok(_) => {}
            // Nothing further exists: mkdir makes real directories.
            Err(_) => break,
        }
    }
    Ok(())
}

/// Makes `root` the root and detaches the host's tree entirely.
fn pivot(root: &Path) -> StepResult<()> {
    step(
        SetupStep::Chdir,
        || format!("chdir {}", root.display()),
        std::env::set_current_dir(root),
    )?;
    // pivot_root(".", ".") stacks the old root on top of the new one; the
    // detach below then removes exactly the old root, with no directory to
    // create for it.
    step(
        SetupStep::PivotRoot,
        || "pivot_root".into(),
        sys::pivot_root(Path::new("."), Path::new(".")),
    )?;
    step(
        SetupStep::DetachHostRoot,
        || "detach the host root".into(),
        sys::umount2(Path::new("."), libc::MNT_DETACH),
    )?;
    step(
        SetupStep::Chdir,
        || "chdir /".into(),
        std::env::set_current_dir("/"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_names_are_short_and_safe_in_overlay_options() {
        assert_eq!(layer_name("/etc").as_deref(), Ok("etc"));
        assert_eq!(layer_name("/usr/share/x").as_deref(), Ok("usr-share-x"));
        for bad in [
            "/", "/a,b", "/a:b", "/a\\b", "/root", "/empty", "/null", "/file0", "/dev", "/tmp",
            "/a.b",
        ] {
            assert!(layer_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_volume_is_never_mounted_through_a_link() {
        let dir = std::env::temp_dir().join(format!(
            "shellgate-volume-links-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = fs::remove_dir_all(&dir);
        let root = dir.as_path();
        fs::create_dir_all(root.join("mnt/real")).expect("mkdir");
        symlink("/etc", root.join("mnt/link")).expect("symlink");
        assert!(refuse_links_on_the_way(root, &root.join("mnt/real/vol")).is_ok());
        assert!(refuse_links_on_the_way(root, &root.join("new/vol")).is_ok());
        let refused = refuse_links_on_the_way(root, &root.join("mnt/link/vol"));
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.to_string().contains("symbolic link")),
            "a path through a link was not refused: {refused:?}"
        );
        assert!(refuse_links_on_the_way(root, &root.join("mnt/link")).is_err());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn shared_memory_is_a_quarter_of_tmp_and_at_least_a_mebibyte() {
        assert_eq!(shm_bytes(64 << 20), 16 << 20);
        assert_eq!(shm_bytes(0), 1 << 20);
    }

    #[test]
    fn the_scratch_holds_tmp_and_shared_memory_and_its_own_room() {
        assert_eq!(
            scratch_bytes(64 << 20),
            (64 << 20) + (16 << 20) + SCRATCH_ROOM
        );
        assert_eq!(scratch_bytes(u64::MAX), u64::MAX);
    }
}
