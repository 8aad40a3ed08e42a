//! Thin, checked wrappers over the Linux system calls the engine uses, and
//! two small host helpers (a `PATH` lookup, a stable hash).
//!
//! Each wrapper turns the C convention (-1 and `errno`) into `io::Result`, and
//! keeps the `unsafe` in one place with the reason it is sound.

use std::ffi::{CString, OsStr};
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// FNV-1a, 64 bits: a hash that stays the same across runs and builds
/// (std's does not), for names and fingerprints kept on disk.
pub struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl std::hash::Hasher for Fnv1a {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// Whether `path` is on a RAM file system (tmpfs), where files cost no
/// disk I/O to write or delete.
pub fn is_tmpfs(path: &Path) -> bool {
    const TMPFS_MAGIC: libc::c_long = 0x0102_1994;
    rustix::fs::statfs(path).is_ok_and(|stat| stat.f_type == TMPFS_MAGIC)
}

/// Puts every signal's disposition back to the default and empties the
/// signal mask: the state a program expects to start in, and the one
/// container runtimes give what they run. Both would otherwise outlive
/// `execve` (a handler does not, but "ignored" does, and so does the mask):
/// a server started with SIGINT ignored (`nohup`, a background job of a
/// non-interactive shell) would hand that on to every sandboxed program,
/// whose ^C, `SIGINT` through the API and interpreter interrupts then did
/// nothing. The dispositions go first, so no signal unblocked by the mask
/// meets an inherited one.
///
/// Raw system calls, not the C library's wrappers: glibc refuses to touch
/// its two internal real-time signals (32 and 33), and its `posix_spawn`
/// leaves exactly those two ignored in the program it starts (the helper,
/// when it is not born in its cgroup), so only the kernel's own call puts
/// every one back. SIGKILL and SIGSTOP cannot be changed and are skipped.
///
/// Only system calls on the stack, no allocation, async-signal-safe: it
/// runs in a child that shares its parent's memory until `execve`.
pub fn reset_signals() {
    /// The kernel's signal set: 64 signals on every architecture shellgate
    /// builds for (`_NSIG` / 8).
    const KERNEL_SIGSET_BYTES: usize = 8;
    const LAST_SIGNAL: libc::c_int = 64;
    // The kernel's `struct sigaction` all zero, whatever its layout on the
    // architecture (handler, flags, restorer where there is one, mask):
    // SIG_DFL (0), no flags, nothing blocked while a handler runs.
    let default = [0u64; 4];
    let empty: u64 = 0;
    for signal in 1..=LAST_SIGNAL {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        // SAFETY: rt_sigaction reads a zeroed buffer at least as large as
        // the kernel's struct sigaction, and writes nothing (old is null).
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                signal,
                default.as_ptr(),
                std::ptr::null_mut::<libc::c_void>(),
                KERNEL_SIGSET_BYTES,
            );
        }
    }
    // SAFETY: rt_sigprocmask reads one empty kernel signal set.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &empty as *const u64,
            std::ptr::null_mut::<libc::c_void>(),
            KERNEL_SIGSET_BYTES,
        );
    }
}

/// `clone3`'s flag that starts the child in the cgroup (v2) `cgroup` names.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `struct clone_args` of `clone3(2)` (the version with `cgroup`).
#[repr(C, align(8))]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// Starts `program` with `argv` and an empty environment, born in the
/// cgroup v2 directory open at `cgroup`, with `fd` as its descriptor 3,
/// `/dev/null` as 0 and 1, and no blocked signals; returns its pid once it
/// has exec'd (`CLONE_VFORK`).
///
/// Why not `posix_spawn` and then a write to `cgroup.procs`: moving a
/// process between cgroups takes the kernel's global migration lock for
/// writing, which after a quiet spell waits for an RCU grace period
/// (7–20 ms, BENCHMARKS.md); a process born into its cgroup takes it only
/// for reading. The child is a copy-on-write fork of this (possibly
/// multithreaded) process without shared memory, so between `clone3` and
/// `execve` it makes only async-signal-safe system calls on values prepared
/// before, and never allocates.
pub fn spawn_in_cgroup(
    program: &std::ffi::CStr,
    argv: &[*const libc::c_char],
    fd: RawFd,
    cgroup: RawFd,
) -> io::Result<libc::pid_t> {
    const TARGET_FD: RawFd = 3;
    if argv.last() != Some(&std::ptr::null()) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let envp: [*const libc::c_char; 1] = [std::ptr::null()];
    let dev_null = c"/dev/null";
    let mut args = CloneArgs {
        flags: libc::CLONE_VFORK as u64 | CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup as u64,
        ..CloneArgs::default()
    };
    // SAFETY: without CLONE_VM the child has its own (copied) memory, and
    // CLONE_VFORK suspends this thread until the child execs or exits.
    let pid = unsafe { clone3(&mut args)? };
    if pid == 0 {
        // SAFETY: in the child, only async-signal-safe calls on values made
        // before the clone; every path ends in execve or _exit.
        unsafe {
            let onto = |from: RawFd, to: RawFd| {
                if from == to {
                    // Already there: keep it open across exec.
                    libc::fcntl(to, libc::F_SETFD, 0) >= 0
                } else {
                    libc::dup2(from, to) >= 0
                }
            };
            if !onto(fd, TARGET_FD) {
                libc::_exit(127);
            }
            for (target, mode) in [(0, libc::O_RDONLY), (1, libc::O_WRONLY)] {
                let null = libc::open(dev_null.as_ptr(), mode);
                if null < 0 || !onto(null, target) {
                    libc::_exit(127);
                }
                if null != target {
                    libc::close(null);
                }
            }
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            libc::execve(program.as_ptr(), argv.as_ptr(), envp.as_ptr());
            libc::_exit(127);
        }
    }
    Ok(pid)
}

/// `clone3(2)` with `args`: the child's pid here, 0 in the child.
///
/// # Safety
///
/// As for `clone3` itself: `args` must describe a clone the caller can
/// survive (its flags, stack and what the child may touch are the caller's
/// to get right).
unsafe fn clone3(args: &mut CloneArgs) -> io::Result<libc::pid_t> {
    // SAFETY: `args` is a valid clone_args of the size passed; the rest is
    // the caller's (see above).
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            args as *mut CloneArgs,
            size_of::<CloneArgs>(),
        )
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(pid as libc::pid_t)
}

/// A copy of this process (fork semantics: no shared memory, the child
/// runs on a copy-on-write copy of this stack) that is this process's
/// *sibling*: `CLONE_PARENT` makes it the child of this process's parent,
/// which reaps it. Born in the cgroup v2 directory open at `cgroup` when
/// given. Returns 0 in the child and the child's pid here.
///
/// # Safety
///
/// The calling process must have one thread, so that the child's copy of
/// every lock and of the allocator is consistent.
pub unsafe fn fork_sibling(cgroup: Option<RawFd>) -> io::Result<libc::pid_t> {
    let mut args = CloneArgs {
        // With CLONE_PARENT the exit signal is this process's own (the
        // kernel refuses another one).
        flags: libc::CLONE_PARENT as u64 | cgroup.map_or(0, |_| CLONE_INTO_CGROUP),
        cgroup: cgroup.map_or(0, |fd| fd as u64),
        ..CloneArgs::default()
    };
    // SAFETY: no CLONE_VM and a null stack: the child gets a copy of this
    // process's memory, and the caller guarantees that copy is consistent.
    let pid = unsafe { clone3(&mut args)? };
    Ok(pid)
}

/// The capability that lowers a process's OOM score below its minimum.
pub const CAP_SYS_RESOURCE: u32 = 24;

/// Whether this process has capability `cap` (e.g. [`CAP_SYS_RESOURCE`])
/// in its effective set, as `/proc/self/status` says.
pub fn has_capability(cap: u32) -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
            u64::from_str_radix(hex.trim(), 16).ok()
        })
        .is_some_and(|effective| cap < 64 && effective & (1u64 << cap) != 0)
}

/// Whether `program` is an executable file in a directory of `PATH`, as
/// running it by name would find it (without running it).
pub fn on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(program))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// Converts a C return value into `io::Result`.
pub fn cvt<T: Default + PartialOrd>(ret: T) -> io::Result<T> {
    if ret < T::default() {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Converts a path into a C string; paths with NUL bytes are refused.
pub fn cstr(path: impl AsRef<OsStr>) -> io::Result<CString> {
    CString::new(path.as_ref().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

/// `mount(2)`.
pub fn mount(
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let source = source.map(cstr).transpose()?;
    let target = cstr(target)?;
    let fstype = fstype.map(cstr).transpose()?;
    let data = data.map(cstr).transpose()?;
    let ptr = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: every pointer is either null or a NUL-terminated string that
    // outlives the call.
    cvt(unsafe {
        libc::mount(
            ptr(&source),
            target.as_ptr(),
            ptr(&fstype),
            flags,
            ptr(&data).cast(),
        )
    })?;
    Ok(())
}

/// Makes every mount of this mount namespace private, so that nothing
/// mounted from here on propagates back to the namespace it was copied from.
pub fn make_mounts_private() -> io::Result<()> {
    mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )
}

/// `umount2(2)` (`MNT_*` / `UMOUNT_*` flags, passed as they are).
pub fn umount2(target: &Path, flags: libc::c_int) -> io::Result<()> {
    let flags = rustix::mount::UnmountFlags::from_bits_retain(flags as u32);
    Ok(rustix::mount::unmount(target, flags)?)
}

/// `pivot_root(2)`.
pub fn pivot_root(new_root: &Path, put_old: &Path) -> io::Result<()> {
    Ok(rustix::process::pivot_root(new_root, put_old)?)
}

/// `sethostname(2)`.
pub fn sethostname(name: &str) -> io::Result<()> {
    Ok(rustix::system::sethostname(name.as_bytes())?)
}

/// `statvfs(2)` mount flags (`ST_*`) of the file system holding `path`.
pub fn mount_flags(path: &Path) -> io::Result<libc::c_ulong> {
    Ok(rustix::fs::statvfs(path)?.f_flag.bits())
}

// openat2(2) resolution flags (linux/openat2.h).
pub const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
pub const RESOLVE_NO_SYMLINKS: u64 = 0x04;
pub const RESOLVE_BENEATH: u64 = 0x08;
pub const RESOLVE_IN_ROOT: u64 = 0x10;

#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// `openat2(2)`: opens `path` relative to `dir` (close-on-exec), resolving
/// it as `resolve` allows.
pub fn openat2(dir: RawFd, path: &str, flags: i32, mode: u32, resolve: u64) -> io::Result<OwnedFd> {
    let path = CString::new(path).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: mode as u64,
        resolve,
    };
    // SAFETY: `path` and `how` are valid for the call; openat2 returns a new fd.
    let fd = cvt(unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir,
            path.as_ptr(),
            &how as *const OpenHow,
            size_of::<OpenHow>(),
        )
    })?;
    // SAFETY: the descriptor is new and ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// A connected pair of `SOCK_SEQPACKET` Unix sockets (message boundaries kept,
/// file descriptors can travel), close-on-exec.
pub fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    Ok(rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?)
}

/// A close-on-exec pipe: (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// Most descriptors one message may carry.
pub const MAX_FDS_PER_MESSAGE: usize = 4;

/// Sends one message with up to [`MAX_FDS_PER_MESSAGE`] descriptors attached.
pub fn send_with_fds(socket: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    assert!(fds.len() <= MAX_FDS_PER_MESSAGE);
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let mut control = [0u64; 8]; // 64 bytes, 8-aligned: enough for 4 fds.
                                 // SAFETY: msghdr is plain data; zero is a valid starting value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let payload = std::mem::size_of_val(fds) as u32;
        // SAFETY: CMSG_SPACE only computes a size.
        let space = unsafe { libc::CMSG_SPACE(payload) } as usize;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: msg_control points to `control`, which is at least `space`
        // bytes, so CMSG_FIRSTHDR returns a valid header inside it and
        // CMSG_DATA leaves room for `payload` bytes.
        unsafe {
            let header = libc::CMSG_FIRSTHDR(&msg);
            (*header).cmsg_level = libc::SOL_SOCKET;
            (*header).cmsg_type = libc::SCM_RIGHTS;
            (*header).cmsg_len = libc::CMSG_LEN(payload) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr(),
                libc::CMSG_DATA(header).cast::<RawFd>(),
                fds.len(),
            );
        }
    }
    loop {
        // SAFETY: `msg` describes live buffers for the duration of the call.
        let sent = unsafe { libc::sendmsg(socket, &msg, libc::MSG_NOSIGNAL) };
        match cvt(sent) {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Receives one message into `buf`; returns its length (0 at end of stream)
/// and the descriptors that came with it, owned and close-on-exec.
pub fn recv_with_fds(
    socket: RawFd,
    buf: &mut [u8],
    flags: libc::c_int,
) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain data; zero is a valid starting value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<[u64; 8]>() as _;
    let len = loop {
        // SAFETY: `msg` describes live buffers for the duration of the call.
        let got = unsafe { libc::recvmsg(socket, &mut msg, flags | libc::MSG_CMSG_CLOEXEC) };
        match cvt(got) {
            Ok(n) => break n as usize,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    };
    let mut fds = Vec::new();
    // SAFETY: recvmsg filled `msg`'s control area; the CMSG macros walk it
    // within `msg_controllen`, and each SCM_RIGHTS payload holds whole fds
    // that the kernel just installed in this process.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(&msg);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(header).cast::<RawFd>();
                let bytes = (*header).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..bytes / size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            header = libc::CMSG_NXTHDR(&msg, header);
        }
    }
    if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "message truncated",
        ));
    }
    Ok((len, fds))
}

/// Writes all of `data` to a raw descriptor, retrying on EINTR.
pub fn write_all(fd: RawFd, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        // SAFETY: the pointer and length describe `data`.
        match cvt(unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) }) {
            Ok(n) => data = &data[n as usize..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads into `buf` from a raw descriptor, retrying on EINTR.
pub fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: the pointer and length describe `buf`.
        match cvt(unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) }) {
            Ok(n) => return Ok(n as usize),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Writes a small text file (for `/proc` and cgroup knobs) in one `write`.
pub fn write_file(path: &Path, contents: &str) -> io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new().write(true).open(path)?;
    file.write_all(contents.as_bytes())
}

/// `pidfd_open(2)`: a descriptor that becomes readable when `pid` exits.
pub fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // A pid of 0 or below names no one process: refused as the kernel
    // refuses it.
    let pid = rustix::process::Pid::from_raw(pid).ok_or(rustix::io::Errno::INVAL)?;
    Ok(rustix::process::pidfd_open(
        pid,
        rustix::process::PidfdFlags::empty(),
    )?)
}

/// `pidfd_send_signal(2)`, as kill(2) would send it (no siginfo).
pub fn pidfd_kill(pidfd: &OwnedFd, signal: libc::c_int) -> io::Result<()> {
    let signal = rustix::process::Signal::from_named_raw(signal).ok_or(rustix::io::Errno::INVAL)?;
    Ok(rustix::process::pidfd_send_signal(pidfd, signal)?)
}

/// Reaps the exited process behind `pidfd` (it must be our child) without
/// blocking; `Ok(None)` while it still runs.
pub fn reap_pidfd(pidfd: &OwnedFd) -> io::Result<Option<libc::c_int>> {
    // SAFETY: siginfo_t is plain data; zero is valid.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    const P_PIDFD: libc::idtype_t = 3;
    // SAFETY: `info` is a valid siginfo_t for waitid to fill.
    cvt(unsafe {
        libc::waitid(
            P_PIDFD,
            pidfd.as_raw_fd() as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG,
        )
    })?;
    // SAFETY: waitid filled `info`; si_pid is 0 when nothing has exited yet.
    let pid = unsafe { info.si_pid() };
    if pid == 0 {
        return Ok(None);
    }
    // SAFETY: as above; si_status is valid when si_pid is set.
    Ok(Some(unsafe { info.si_status() }))
}

/// Encodes a wait status as a shell would: the exit code, or 128 + signal.
pub fn exit_code_of(status: libc::c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        128
    }
}

/// The current effective uid.
pub fn geteuid() -> u32 {
    rustix::process::geteuid().as_raw()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_travel_over_seqpacket() {
        let (a, b) = seqpacket_pair().unwrap();
        let (read_end, write_end) = pipe().unwrap();
        send_with_fds(a.as_raw_fd(), b"hello", &[write_end.as_raw_fd()]).unwrap();
        drop(write_end);
        let mut buf = [0u8; 16];
        let (len, fds) = recv_with_fds(b.as_raw_fd(), &mut buf, 0).unwrap();
        assert_eq!(&buf[..len], b"hello");
        assert_eq!(fds.len(), 1);
        write_all(fds[0].as_raw_fd(), b"via passed fd").unwrap();
        drop(fds);
        let mut out = [0u8; 32];
        let n = read(read_end.as_raw_fd(), &mut out).unwrap();
        assert_eq!(&out[..n], b"via passed fd");
    }

    /// A process started into a cgroup v2 directory is in it from its first
    /// instruction (needs root and a cgroup v2 hierarchy: the unified one of
    /// a hybrid host, or the only one).
    #[test]
    fn a_process_is_born_in_its_cgroup() {
        use std::io::Read;
        let (mount, own) =
            match std::fs::read_to_string("/proc/self/cgroup")
                .ok()
                .and_then(|text| {
                    let own = text.lines().find_map(|l| l.strip_prefix("0::"))?.to_owned();
                    let mount = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
                        .into_iter()
                        .find(|m| Path::new(m).join("cgroup.controllers").exists())?;
                    Some((mount, own))
                }) {
                Some(found) if geteuid() == 0 => found,
                _ => return,
            };
        let name = format!("shellgate-born-{}", std::process::id());
        let dir = Path::new(mount)
            .join(own.trim_start_matches('/'))
            .join(&name);
        if std::fs::create_dir(&dir).is_err() {
            return;
        }
        let cgroup = std::fs::File::open(&dir).unwrap();
        let (read, write) = pipe().unwrap();
        let program = c"/bin/sh";
        let script = c"cat /proc/self/cgroup >&3";
        let argv = [
            c"sh".as_ptr(),
            c"-c".as_ptr(),
            script.as_ptr(),
            std::ptr::null(),
        ];
        let pid = spawn_in_cgroup(program, &argv, write.as_raw_fd(), cgroup.as_raw_fd());
        drop(write);
        let mut seen = String::new();
        let _ = std::fs::File::from(read).read_to_string(&mut seen);
        let mut status = 0;
        if let Ok(pid) = pid {
            // SAFETY: waiting for our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
        }
        let _ = std::fs::remove_dir(&dir);
        pid.unwrap();
        let line = seen
            .lines()
            .find(|l| l.starts_with("0::"))
            .unwrap_or_default();
        assert!(line.ends_with(&format!("/{name}")), "{seen}");
        // A misuse is refused before anything starts.
        assert!(spawn_in_cgroup(program, &[c"sh".as_ptr()], 0, cgroup.as_raw_fd()).is_err());
    }

    #[test]
    fn tells_tmpfs_from_other_file_systems() {
        assert!(is_tmpfs(Path::new("/dev/shm")) || !Path::new("/dev/shm").exists());
        assert!(!is_tmpfs(Path::new("/proc")));
        assert!(!is_tmpfs(Path::new("/no/such/dir")));
    }

    #[test]
    fn exit_codes_follow_the_shell_convention() {
        assert_eq!(exit_code_of(3 << 8), 3);
        assert_eq!(exit_code_of(libc::SIGKILL), 137);
    }
}
