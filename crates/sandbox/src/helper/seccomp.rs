//! The seccomp filter every sandboxed process runs under.
//!
//! A deny-list in classic BPF, written out by hand so each rule is visible.
//! What it denies is what a sandboxed shell never needs and what container
//! escapes have used: new namespaces, mounts, kernel keyrings, BPF,
//! userfaultfd, perf, kexec, module loading, `io_uring` (whose operations
//! seccomp cannot see), file handles (`open_by_handle_at`, the "shocker"
//! escape), `AF_VSOCK` sockets (vsock is not network-namespaced), and
//! terminal injection (`TIOCSTI`). Syscalls of another ABI (x32, i386) are
//! refused outright so the numbers below cannot be sidestepped.
//!
//! `clone3` gets `ENOSYS` rather than `EPERM`: its flags live in memory the
//! filter cannot read, and `ENOSYS` makes libc fall back to `clone`, whose
//! flags the filter checks.
//!
//! `sysinfo` goes to init, when init listens (`SECCOMP_RET_USER_NOTIF`, see
//! `init::sysinfo`): it answers with the container's own figures.
//!
//! `modify_ldt` (x86 segment descriptors: old, rarely used, and the source of
//! several kernel bugs) is refused, and `personality(2)` may only query or
//! keep the default persona: other personas change how the kernel treats
//! the process (`READ_IMPLIES_EXEC`, `ADDR_NO_RANDOMIZE` turning off ASLR,
//! `MMAP_PAGE_ZERO`), which no shell command needs.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

// Classic BPF opcodes (linux/filter.h).
const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const BPF_JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const BPF_JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const BPF_JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K

const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_USER_NOTIF: u32 = libc::SECCOMP_RET_USER_NOTIF;

// Offsets into `struct seccomp_data`.
const OFFSET_NR: u32 = 0;
const OFFSET_ARCH: u32 = 4;
const fn offset_arg_low(index: u32) -> u32 {
    16 + 8 * index // little-endian: the low 32 bits come first
}

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64

/// x32 syscalls on x86_64 carry this bit; we refuse them all.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Syscalls refused with `EPERM`.
const DENIED: &[libc::c_long] = &[
    // New namespaces and joining others.
    libc::SYS_unshare,
    libc::SYS_setns,
    // Mount table changes.
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    // Kernel attack surface a shell never needs.
    libc::SYS_bpf,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_userfaultfd,
    libc::SYS_perf_event_open,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_fanotify_init,
    libc::SYS_quotactl,
    libc::SYS_quotactl_fd,
    libc::SYS_acct,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_syslog,
    libc::SYS_vhangup,
    libc::SYS_lookup_dcookie,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_iopl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_ioperm,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_uselib,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_modify_ldt,
];

/// Namespace flags `clone` may not carry.
const CLONE_NAMESPACE_FLAGS: u32 = (super::CONTAINER_NAMESPACES | 0x80) as u32; // and CLONE_NEWTIME

/// Socket families a sandboxed program may open; others get `EAFNOSUPPORT`.
const ALLOWED_SOCKET_FAMILIES: &[libc::c_int] = &[
    libc::AF_UNIX,
    libc::AF_INET,
    libc::AF_INET6,
    libc::AF_NETLINK,
];

/// `ioctl` requests refused: terminal input injection.
const DENIED_IOCTLS: &[libc::c_ulong] = &[libc::TIOCSTI, libc::TIOCLINUX as libc::c_ulong];

/// `personality(2)` arguments allowed: the default persona (`PER_LINUX`) and
/// the query that changes nothing. The kernel takes an `unsigned int`, so
/// the low 32 bits are the whole argument.
const ALLOWED_PERSONAS: &[u32] = &[0, 0xffff_ffff];

#[derive(Clone, Copy)]
#[repr(C)]
struct SockFilter {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

#[repr(C)]
struct SockFprog {
    len: u16,
    filter: *const SockFilter,
}

const fn stmt(code: u16, k: u32) -> SockFilter {
    SockFilter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> SockFilter {
    SockFilter { code, jt, jf, k }
}

const fn errno(code: libc::c_int) -> u32 {
    SECCOMP_RET_ERRNO | (code as u32 & 0xffff)
}

/// Appends "if the syscall is `nr`, run `body` (which must end in a return)".
fn on_syscall(program: &mut Vec<SockFilter>, nr: libc::c_long, body: &[SockFilter]) {
    program.push(stmt(BPF_LD_W_ABS, OFFSET_NR));
    program.push(jump(BPF_JEQ_K, nr as u32, 0, body.len() as u8));
    program.extend_from_slice(body);
}

/// Builds the filter program; `sysinfo` is init's to answer when
/// `answer_sysinfo`.
fn build(answer_sysinfo: bool) -> Vec<SockFilter> {
    let mut program = vec![
        stmt(BPF_LD_W_ABS, OFFSET_ARCH),
        jump(BPF_JEQ_K, AUDIT_ARCH, 1, 0),
        stmt(BPF_RET_K, SECCOMP_RET_KILL_PROCESS),
    ];
    #[cfg(target_arch = "x86_64")]
    {
        program.push(stmt(BPF_LD_W_ABS, OFFSET_NR));
        program.push(jump(BPF_JGE_K, X32_SYSCALL_BIT, 0, 1));
        program.push(stmt(BPF_RET_K, errno(libc::ENOSYS)));
    }
    if answer_sysinfo {
        on_syscall(
            &mut program,
            libc::SYS_sysinfo,
            &[stmt(BPF_RET_K, SECCOMP_RET_USER_NOTIF)],
        );
    }
    on_syscall(
        &mut program,
        libc::SYS_clone3,
        &[stmt(BPF_RET_K, errno(libc::ENOSYS))],
    );
    on_syscall(
        &mut program,
        libc::SYS_clone,
        &[
            stmt(BPF_LD_W_ABS, offset_arg_low(0)),
            jump(BPF_JSET_K, CLONE_NAMESPACE_FLAGS, 0, 1),
            stmt(BPF_RET_K, errno(libc::EPERM)),
            stmt(BPF_RET_K, SECCOMP_RET_ALLOW),
        ],
    );
    let mut socket_rule = vec![stmt(BPF_LD_W_ABS, offset_arg_low(0))];
    let families = ALLOWED_SOCKET_FAMILIES.len();
    for (i, family) in ALLOWED_SOCKET_FAMILIES.iter().enumerate() {
        // On a match jump past the remaining checks and the refusal to ALLOW.
        socket_rule.push(jump(BPF_JEQ_K, *family as u32, (families - i) as u8, 0));
    }
    socket_rule.push(stmt(BPF_RET_K, errno(libc::EAFNOSUPPORT)));
    socket_rule.push(stmt(BPF_RET_K, SECCOMP_RET_ALLOW));
    on_syscall(&mut program, libc::SYS_socket, &socket_rule);
    on_syscall(&mut program, libc::SYS_socketpair, &socket_rule);

    let mut ioctl_rule = vec![stmt(BPF_LD_W_ABS, offset_arg_low(1))];
    for request in DENIED_IOCTLS {
        ioctl_rule.push(jump(BPF_JEQ_K, *request as u32, 0, 1));
        ioctl_rule.push(stmt(BPF_RET_K, errno(libc::EPERM)));
    }
    ioctl_rule.push(stmt(BPF_RET_K, SECCOMP_RET_ALLOW));
    on_syscall(&mut program, libc::SYS_ioctl, &ioctl_rule);

    let mut personality_rule = vec![stmt(BPF_LD_W_ABS, offset_arg_low(0))];
    let personas = ALLOWED_PERSONAS.len();
    for (i, persona) in ALLOWED_PERSONAS.iter().enumerate() {
        personality_rule.push(jump(BPF_JEQ_K, *persona, (personas - i) as u8, 0));
    }
    personality_rule.push(stmt(BPF_RET_K, errno(libc::EPERM)));
    personality_rule.push(stmt(BPF_RET_K, SECCOMP_RET_ALLOW));
    on_syscall(&mut program, libc::SYS_personality, &personality_rule);

    program.push(stmt(BPF_LD_W_ABS, OFFSET_NR));
    for nr in DENIED {
        program.push(jump(BPF_JEQ_K, *nr as u32, 0, 1));
        program.push(stmt(BPF_RET_K, errno(libc::EPERM)));
    }
    program.push(stmt(BPF_RET_K, SECCOMP_RET_ALLOW));
    program
}

/// Installs the filter on the calling thread (and everything it later
/// starts). `no_new_privs` must already be set.
pub fn install() -> io::Result<()> {
    load(&build(false), 0).map(drop)
}

/// [`install`], with `sysinfo` handed to the returned listener (which the
/// caller must then answer, and never call `sysinfo` itself). A kernel
/// without user notifications (before 5.0) refuses the flag: then this
/// fails, and the caller installs the plain filter.
pub fn install_answering_sysinfo() -> io::Result<OwnedFd> {
    let listener = load(&build(true), libc::SECCOMP_FILTER_FLAG_NEW_LISTENER)?;
    // SAFETY: with NEW_LISTENER the call returns a new descriptor, ours.
    Ok(unsafe { OwnedFd::from_raw_fd(listener) })
}

/// Loads `program` with `flags`; the call's result (a listener's
/// descriptor with `NEW_LISTENER`).
fn load(program: &[SockFilter], flags: libc::c_ulong) -> io::Result<RawFd> {
    let fprog = SockFprog {
        len: program.len() as u16,
        filter: program.as_ptr(),
    };
    // SAFETY: `fprog` points at `program`, which lives across the call; the
    // kernel copies the filter.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &fprog as *const SockFprog,
        )
    };
    RawFd::try_from(crate::sys::cvt(ret)?).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_fits_and_every_jump_lands_inside() {
        let program = build(true);
        assert!(
            program.len() < 4096,
            "BPF programs are limited to 4096 instructions"
        );
        for (pc, insn) in program.iter().enumerate() {
            if insn.code & 0x07 == 0x05 {
                let far = pc + 1 + insn.jt.max(insn.jf) as usize;
                assert!(far < program.len(), "jump at {pc} leaves the program");
            }
        }
        assert_eq!(program.last().map(|i| i.k), Some(SECCOMP_RET_ALLOW));
    }

    /// `struct seccomp_data` as the kernel hands it to the filter.
    struct SeccompData {
        nr: i32,
        arch: u32,
        instruction_pointer: u64,
        args: [u64; 6],
    }

    impl SeccompData {
        fn new(nr: libc::c_long, args: &[u64]) -> Self {
            let mut all = [0u64; 6];
            all[..args.len()].copy_from_slice(args);
            SeccompData {
                nr: nr as i32,
                arch: AUDIT_ARCH,
                instruction_pointer: 0x7fff_0000_1000,
                args: all,
            }
        }

        /// The 64 bytes the filter's absolute loads read (native, that is
        /// little-endian, byte order).
        fn bytes(&self) -> [u8; 64] {
            let mut out = [0u8; 64];
            out[0..4].copy_from_slice(&self.nr.to_le_bytes());
            out[4..8].copy_from_slice(&self.arch.to_le_bytes());
            out[8..16].copy_from_slice(&self.instruction_pointer.to_le_bytes());
            for (i, arg) in self.args.iter().enumerate() {
                out[16 + 8 * i..24 + 8 * i].copy_from_slice(&arg.to_le_bytes());
            }
            out
        }
    }

    /// A classic-BPF interpreter for the opcodes `build` emits, with the
    /// kernel's rules: word loads only inside `seccomp_data` and aligned,
    /// jumps forward only, and the program must end in a return.
    fn run(program: &[SockFilter], data: &SeccompData) -> u32 {
        let bytes = data.bytes();
        let mut accumulator: u32 = 0;
        let mut pc = 0usize;
        loop {
            let insn = program
                .get(pc)
                .unwrap_or_else(|| panic!("ran off the end of the program at {pc}"));
            let taken = |condition: bool| usize::from(if condition { insn.jt } else { insn.jf });
            pc += 1 + match insn.code {
                BPF_LD_W_ABS => {
                    let at = insn.k as usize;
                    assert!(at & 3 == 0 && at + 4 <= bytes.len(), "bad load at {at}");
                    accumulator = u32::from_le_bytes([
                        bytes[at],
                        bytes[at + 1],
                        bytes[at + 2],
                        bytes[at + 3],
                    ]);
                    0
                }
                BPF_JEQ_K => taken(accumulator == insn.k),
                BPF_JGE_K => taken(accumulator >= insn.k),
                BPF_JSET_K => taken(accumulator & insn.k != 0),
                BPF_RET_K => return insn.k,
                other => panic!("opcode {other:#x} at {pc} is not interpreted"),
            };
        }
    }

    fn verdict(nr: libc::c_long, args: &[u64]) -> u32 {
        run(&build(false), &SeccompData::new(nr, args))
    }

    const EPERM: u32 = SECCOMP_RET_ERRNO | libc::EPERM as u32;
    const ENOSYS: u32 = SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    const EAFNOSUPPORT: u32 = SECCOMP_RET_ERRNO | libc::EAFNOSUPPORT as u32;

    #[test]
    fn every_denied_syscall_gets_eperm_whatever_its_arguments() {
        for nr in DENIED {
            assert_eq!(verdict(*nr, &[]), EPERM, "syscall {nr}");
            assert_eq!(verdict(*nr, &[u64::MAX; 6]), EPERM, "syscall {nr}");
        }
        #[cfg(target_arch = "x86_64")]
        assert_eq!(verdict(libc::SYS_modify_ldt, &[0, 0, 0]), EPERM);
    }

    #[test]
    fn sysinfo_goes_to_init_only_when_it_listens() {
        let data = SeccompData::new(libc::SYS_sysinfo, &[0x7fff_0000]);
        assert_eq!(run(&build(true), &data), SECCOMP_RET_USER_NOTIF);
        assert_eq!(run(&build(false), &data), SECCOMP_RET_ALLOW);
        // Everything else is decided as without it.
        let unshare = SeccompData::new(libc::SYS_unshare, &[0]);
        assert_eq!(run(&build(true), &unshare), errno(libc::EPERM));
    }

    #[test]
    fn ordinary_syscalls_are_allowed() {
        for nr in [
            libc::SYS_read,
            libc::SYS_write,
            libc::SYS_openat,
            libc::SYS_close,
            libc::SYS_mmap,
            libc::SYS_execve,
            libc::SYS_wait4,
            libc::SYS_exit_group,
            libc::SYS_connect,
            libc::SYS_prctl,
            #[cfg(target_arch = "x86_64")]
            libc::SYS_fork,
        ] {
            assert_eq!(verdict(nr, &[]), SECCOMP_RET_ALLOW, "syscall {nr}");
        }
    }

    #[test]
    fn a_foreign_architecture_kills_the_process() {
        const AUDIT_ARCH_I386: u32 = 0x4000_0003;
        for nr in [libc::SYS_read, libc::SYS_unshare, libc::SYS_clone] {
            let mut data = SeccompData::new(nr, &[]);
            data.arch = AUDIT_ARCH_I386;
            assert_eq!(run(&build(false), &data), SECCOMP_RET_KILL_PROCESS);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x32_syscalls_are_refused() {
        for nr in [libc::SYS_read, libc::SYS_unshare, libc::SYS_mount, 512, 547] {
            let x32 = (nr as u32 | X32_SYSCALL_BIT) as libc::c_long;
            assert_eq!(verdict(x32, &[]), ENOSYS, "x32 syscall {nr}");
        }
    }

    #[test]
    fn clone_may_not_create_namespaces_and_clone3_falls_back() {
        assert_eq!(verdict(libc::SYS_clone3, &[0, 88]), ENOSYS);
        for flag in [
            libc::CLONE_NEWUSER,
            libc::CLONE_NEWNS,
            libc::CLONE_NEWPID,
            libc::CLONE_NEWNET,
            libc::CLONE_NEWUTS,
            libc::CLONE_NEWIPC,
            libc::CLONE_NEWCGROUP,
            0x80, // CLONE_NEWTIME
        ] {
            let flags = flag as u64 | libc::SIGCHLD as u64;
            assert_eq!(verdict(libc::SYS_clone, &[flags]), EPERM, "{flag:#x}");
        }
        let thread = (libc::CLONE_VM
            | libc::CLONE_FS
            | libc::CLONE_FILES
            | libc::CLONE_SIGHAND
            | libc::CLONE_THREAD
            | libc::CLONE_SYSVSEM
            | libc::CLONE_SETTLS
            | libc::CLONE_PARENT_SETTID
            | libc::CLONE_CHILD_CLEARTID) as u64;
        assert_eq!(verdict(libc::SYS_clone, &[thread]), SECCOMP_RET_ALLOW);
        let fork = (libc::CLONE_CHILD_SETTID | libc::CLONE_CHILD_CLEARTID | libc::SIGCHLD) as u64;
        assert_eq!(verdict(libc::SYS_clone, &[fork]), SECCOMP_RET_ALLOW);
        let vfork = (libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD) as u64;
        assert_eq!(verdict(libc::SYS_clone, &[vfork]), SECCOMP_RET_ALLOW);
    }

    #[test]
    fn only_unix_inet_and_netlink_sockets_open() {
        for nr in [libc::SYS_socket, libc::SYS_socketpair] {
            for family in 0..64 {
                let expected = if ALLOWED_SOCKET_FAMILIES.contains(&family) {
                    SECCOMP_RET_ALLOW
                } else {
                    EAFNOSUPPORT
                };
                let args = [family as u64, libc::SOCK_STREAM as u64, 0];
                assert_eq!(verdict(nr, &args), expected, "syscall {nr} family {family}");
            }
            for family in [
                libc::AF_VSOCK,
                libc::AF_PACKET,
                libc::AF_ALG,
                libc::AF_BLUETOOTH,
            ] {
                assert_eq!(verdict(nr, &[family as u64, 1, 0]), EAFNOSUPPORT);
            }
        }
    }

    #[test]
    fn terminal_injection_ioctls_are_refused() {
        for request in DENIED_IOCTLS {
            assert_eq!(verdict(libc::SYS_ioctl, &[0, *request]), EPERM);
            // The kernel reads the request as 32 bits: high bits change nothing.
            let padded = *request | 0xffff_ffff_0000_0000;
            assert_eq!(verdict(libc::SYS_ioctl, &[0, padded]), EPERM);
        }
        for request in [libc::TCGETS, libc::FIONREAD, libc::TIOCGWINSZ] {
            let args = [1, request];
            assert_eq!(verdict(libc::SYS_ioctl, &args), SECCOMP_RET_ALLOW);
        }
    }

    #[test]
    fn personality_may_only_query_or_keep_the_default() {
        for persona in [0u64, 0xffff_ffff, 0xdead_0000_0000_0000] {
            let allowed = verdict(libc::SYS_personality, &[persona]);
            assert_eq!(allowed, SECCOMP_RET_ALLOW, "{persona:#x}");
        }
        for persona in [
            0x0008,    // PER_LINUX32
            0x0040000, // ADDR_NO_RANDOMIZE
            0x0400000, // READ_IMPLIES_EXEC
            0x0100000, // MMAP_PAGE_ZERO
            0x0020000, // UNAME26
            0xffff_fffe,
            0x1_0000_0008,
        ] {
            let refused = verdict(libc::SYS_personality, &[persona]);
            assert_eq!(refused, EPERM, "{persona:#x}");
        }
    }
}
