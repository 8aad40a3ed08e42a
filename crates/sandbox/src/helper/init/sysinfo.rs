//! `sysinfo(2)` answered by init with the container's own figures.
//!
//! The kernel's answer costs time that grows with the host: it sums the
//! page cache of every block device (`nr_blockdev_pages`), one loop device
//! per live container here, so with thousands of containers every call took
//! most of a millisecond — and every `bash` start makes one (glibc's `qsort`
//! asks for the physical memory size). It also tells a sandbox about the
//! host: its memory, its load, how many processes it runs (every tenant's).
//!
//! So the seccomp filter hands `sysinfo` to init (`SECCOMP_RET_USER_NOTIF`,
//! see `seccomp`), which answers from the container's cgroup: its memory
//! limit as the total, the limit less what it uses as free, its own process
//! count, its own uptime, no swap and no load. The answer is written into
//! the caller's memory with `process_vm_writev` (init is the namespace's
//! root, the caller one of its descendants), after the kernel confirms the
//! caller is still waiting (so a pid reused meanwhile is never written to).
//! Anything that stops init from answering so lets the call go on to the
//! kernel as before (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`): a caller never
//! gets a failure it would not have had.
//!
//! Init itself never calls `sysinfo` (it would wait on itself).

use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

/// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (linux/seccomp.h).
const SYNC_WAKE_UP: libc::c_ulong = 1;

/// Where the cgroup file systems are (on the host, before the pivot).
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The container's cgroup counters, opened by the helper on the host
/// before it clones init (the host's `/sys/fs/cgroup` is out of reach from
/// the container's root), kept by init (close-on-exec: no command has them).
pub(crate) struct CgroupCounters {
    usage: File,
    limit: File,
    pids: Option<File>,
}

impl CgroupCounters {
    /// The counters of the cgroups this process is in (the container's:
    /// the engine enrolled the helper), if its memory is limited.
    pub(crate) fn open_own() -> Option<Self> {
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let root = Path::new(CGROUP_ROOT);
        let (memory, pids, usage, limit) = if root.join("cgroup.controllers").exists() {
            let dir = root.join(cgroup_path(&own, "")?);
            (dir.clone(), Some(dir), "memory.current", "memory.max")
        } else {
            let memory = root.join("memory").join(cgroup_path(&own, "memory")?);
            let pids = cgroup_path(&own, "pids").map(|path| root.join("pids").join(path));
            (
                memory,
                pids,
                "memory.usage_in_bytes",
                "memory.limit_in_bytes",
            )
        };
        let counters = CgroupCounters {
            usage: File::open(memory.join(usage)).ok()?,
            limit: File::open(memory.join(limit)).ok()?,
            pids: pids.and_then(|dir| File::open(dir.join("pids.current")).ok()),
        };
        // Unlimited (the engine sets a limit on every container it makes,
        // but a host may not let it): the kernel's figures stand.
        read_counter(&counters.limit)?;
        Some(counters)
    }

    /// The container's own `struct sysinfo`, `uptime` seconds since it
    /// started.
    fn sysinfo(&self, uptime: u64) -> Option<libc::sysinfo> {
        let total = read_counter(&self.limit)?;
        let used = read_counter(&self.usage).unwrap_or(0);
        let procs = self.pids.as_ref().and_then(read_counter).unwrap_or(1);
        // SAFETY: `sysinfo` is plain integers; all zero is a valid value.
        let mut info: libc::sysinfo = unsafe { std::mem::zeroed() };
        info.uptime = i64::try_from(uptime).unwrap_or(i64::MAX);
        info.totalram = total;
        info.freeram = total.saturating_sub(used);
        info.procs = u16::try_from(procs).unwrap_or(u16::MAX);
        info.mem_unit = 1;
        Some(info)
    }
}

/// A counter file's number (`max` and unparsable read as none).
fn read_counter(file: &File) -> Option<u64> {
    let mut buf = [0u8; 32];
    let len = file.read_at(&mut buf, 0).ok()?;
    let value: u64 = std::str::from_utf8(&buf[..len]).ok()?.trim().parse().ok()?;
    // v1's "unlimited" is a page-rounded i64::MAX.
    (value < 1 << 62).then_some(value)
}

/// The path of this process's cgroup in `controller`'s hierarchy ("" for
/// v2), relative, from the text of `/proc/self/cgroup`.
fn cgroup_path(own: &str, controller: &str) -> Option<String> {
    crate::cgroup::own_cgroup(own, controller).map(|path| path.trim_start_matches('/').to_owned())
}

/// Init's side of the notifications: the listener the filter reports to.
pub(super) struct SysinfoAnswers {
    listener: OwnedFd,
    counters: CgroupCounters,
    started: Instant,
    /// Room for the kernel's `struct seccomp_notif` (it may have grown
    /// past ours): u64s, aligned as the struct wants, kept across calls.
    notif: RefCell<Vec<u64>>,
}

impl SysinfoAnswers {
    pub(super) fn new(listener: OwnedFd, counters: CgroupCounters) -> Self {
        // The caller's wake-up of init, and init's answer back, stay on one
        // CPU (Linux 6.6): several times quicker a round trip than two
        // tasks woken across CPUs. An older kernel refuses the flag.
        // SAFETY: this ioctl takes its flags as the argument's value.
        unsafe {
            libc::ioctl(
                listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS,
                SYNC_WAKE_UP,
            )
        };
        Self {
            listener,
            counters,
            started: Instant::now(),
            notif: RefCell::new(vec![0; notif_size().div_ceil(8)]),
        }
    }

    /// The descriptor init polls.
    pub(super) fn fd(&self) -> i32 {
        self.listener.as_raw_fd()
    }

    /// Answers one waiting call, if any (the listener was readable).
    pub(super) fn answer_one(&self) {
        let mut buf = self.notif.borrow_mut();
        // Zeroed, as the kernel requires.
        buf.fill(0);
        let notif = buf.as_mut_ptr().cast::<libc::seccomp_notif>();
        // SAFETY: `buf` is zeroed and at least the kernel's size of
        // `struct seccomp_notif`, which it fills.
        let got = unsafe { libc::ioctl(self.fd(), libc::SECCOMP_IOCTL_NOTIF_RECV, notif) };
        if got < 0 {
            // The caller went (a signal): nothing to answer.
            return;
        }
        // SAFETY: the kernel filled the struct at the start of `buf`.
        let (id, pid, pointer) = unsafe { ((*notif).id, (*notif).pid, (*notif).data.args[0]) };
        let answered = self.write_answer(id, pid, pointer);
        let mut response = libc::seccomp_notif_resp {
            id,
            val: 0,
            error: 0,
            flags: 0,
        };
        if answered.is_err() {
            response.flags = libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32;
        }
        // SAFETY: `response` is a valid `struct seccomp_notif_resp`. A
        // caller gone meanwhile makes this fail (`ENOENT`): nothing to do.
        unsafe { libc::ioctl(self.fd(), libc::SECCOMP_IOCTL_NOTIF_SEND, &mut response) };
    }

    /// Writes the container's `struct sysinfo` at `pointer` in `pid`.
    fn write_answer(&self, id: u64, pid: u32, pointer: u64) -> io::Result<()> {
        let info = self
            .counters
            .sysinfo(self.started.elapsed().as_secs())
            .ok_or_else(|| io::Error::from(io::ErrorKind::Unsupported))?;
        let mut id = id;
        // The caller still waits, so `pid` still names it.
        // SAFETY: `id` is a valid u64 the kernel reads.
        crate::sys::cvt(unsafe {
            libc::ioctl(self.fd(), libc::SECCOMP_IOCTL_NOTIF_ID_VALID, &mut id)
        })?;
        let pid =
            libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
        let size = std::mem::size_of::<libc::sysinfo>();
        let local = libc::iovec {
            iov_base: std::ptr::from_ref(&info).cast_mut().cast(),
            iov_len: size,
        };
        let remote = libc::iovec {
            iov_base: pointer as *mut libc::c_void,
            iov_len: size,
        };
        // SAFETY: `local` covers `info`, which lives across the call; the
        // kernel checks `remote` against the caller's memory (EFAULT).
        let written = unsafe { libc::process_vm_writev(pid, &local, 1, &remote, 1, 0) };
        match usize::try_from(written) {
            Ok(n) if n == size => Ok(()),
            Ok(_) => Err(io::Error::from(io::ErrorKind::WriteZero)),
            Err(_) => Err(io::Error::last_os_error()),
        }
    }
}

/// The kernel's size of `struct seccomp_notif`.
fn notif_size() -> usize {
    let mut sizes = libc::seccomp_notif_sizes {
        seccomp_notif: 0,
        seccomp_notif_resp: 0,
        seccomp_data: 0,
    };
    // SAFETY: `sizes` is a valid out-pointer for SECCOMP_GET_NOTIF_SIZES.
    let got = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_GET_NOTIF_SIZES,
            0,
            &mut sizes,
        )
    };
    let ours = std::mem::size_of::<libc::seccomp_notif>();
    if got < 0 {
        ours
    } else {
        usize::from(sizes.seccomp_notif).max(ours)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_containers_figures_come_from_its_cgroup() {
        let dir = std::env::temp_dir().join(format!("shellgate-sysinfo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: &str| {
            std::fs::write(dir.join(name), text).unwrap();
            File::open(dir.join(name)).unwrap()
        };
        let counters = CgroupCounters {
            usage: write("usage", "104857600\n"),
            limit: write("limit", "536870912\n"),
            pids: Some(write("pids", "7\n")),
        };
        let info = counters.sysinfo(42).unwrap();
        assert_eq!(
            (
                info.uptime,
                info.totalram,
                info.freeram,
                info.procs,
                info.mem_unit
            ),
            (42, 512 << 20, 412 << 20, 7, 1)
        );
        assert_eq!((info.loads, info.totalswap, info.bufferram), ([0; 3], 0, 0));
        // Unlimited: the kernel answers.
        let unlimited = CgroupCounters {
            usage: write("usage", "1\n"),
            limit: write("max", "9223372036854771712\n"),
            pids: None,
        };
        assert!(unlimited.sysinfo(1).is_none());
        let v2 = CgroupCounters {
            usage: write("usage", "1\n"),
            limit: write("max2", "max\n"),
            pids: None,
        };
        assert!(v2.sysinfo(1).is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
