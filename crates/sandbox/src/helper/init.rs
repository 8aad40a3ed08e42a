//! Init: pid 1 of a container. It builds the container's world once, locks
//! itself down, then starts commands on request and reaps every process.
//!
//! Hardening, in the order applied (each step narrows what follows):
//! 1. become root of the new user namespace (root mode) — a root that maps to
//!    an unprivileged host uid and owns nothing outside its namespaces;
//! 2. build and pivot into the container root ([`super::mounts`]);
//! 3. hostname, loopback up (the network namespace has nothing else); with
//!    an egress policy, every IPv4 address routed locally onto the egress
//!    proxy's sockets, which go to the engine ([`super::network`]);
//! 4. `RLIMIT_CORE` 0 hard (a core pattern piping to a host helper must never
//!    run on a sandbox's behalf), and `RLIMIT_NOFILE` at the spec's value
//!    (4096 by default) rather than the server's, which is raised to serve
//!    many connections;
//! 5. drop the whole capability bounding set and the ambient set, so no
//!    `execve` can ever return a capability;
//! 6. not dumpable (sandboxed code cannot ptrace or read init's memory);
//! 7. `no_new_privs` and the seccomp filter, inherited by every command.
//!
//! Each command is then forked: its own session and process group, stdin
//! `/dev/null` (a process's: a pipe, or a terminal that becomes its
//! controlling one, see [`process`]), the unprivileged sandbox user with no capabilities, a clean
//! environment, every signal's disposition default and none blocked (as
//! container runtimes start what they run, whatever the server inherited),
//! `/mnt/data` as working directory, `bash -c` (or `sh -c`).
//! When the control socket closes (the server stopped the container, or
//! died), init exits and the kernel kills everything in its pid namespace.

use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

mod process;
pub(super) mod sysinfo;

use super::network::{self, ProxySockets};
use super::{mounts, report, report_with_fds, seccomp};
use crate::backend::WORKDIR;
use crate::protocol::{HelperSpec, Report, Request, Status, MAX_MESSAGE};
use crate::sandbox_user::SANDBOX_USER;
use crate::sys;
use shellgate_sandbox_api::setup_error::{SetupError, SetupResult, SetupStep, StepContext};

const SHELLS: [(&str, &str); 2] = [("/bin/bash", "bash"), ("/bin/sh", "sh")];

/// Everything a command start needs, prepared once so that the forked child
/// only makes system calls.
pub(super) struct Launcher {
    pub(super) dev_null: OwnedFd,
    /// Owns the strings `env_pointers` points into (and the base of a
    /// process's own environment, see `process`).
    pub(super) env: Vec<CString>,
    /// NUL-terminated `envp`, built once: the child may not allocate.
    env_pointers: Vec<*const libc::c_char>,
    shells: Vec<(CString, CString)>,
    dash_c: CString,
    pub(super) workdir: CString,
    oom_score_adj: CString,
    /// Whether init is exempt from the OOM killer (root mode) and each
    /// command must take its score back to 0.
    reset_oom_score: bool,
    pub(super) sandbox_uid: u32,
    pub(super) sandbox_gid: u32,
    pub(super) change_ids: bool,
    /// A build sandbox: commands become the namespace's root (not the
    /// sandbox user) and keep [`BUILD_CAPABILITIES`].
    pub(super) build_root: bool,
}

/// What a build sandbox's commands may do as the root of its user
/// namespace, and nothing more: own and change the files of the
/// namespace's ids (`dpkg` unpacking, `chown`, `chmod`), and switch among
/// those ids (`apt`'s download user, `setpriv` for a `USER` step). Each is
/// checked against the namespace: none reaches a host file, process or
/// id outside the container's mapped range. No `CAP_SYS_ADMIN` (mounts, new
/// namespaces), no `CAP_NET_*`, no `CAP_MKNOD`; seccomp refuses the rest as
/// for any container.
const BUILD_CAPABILITIES: u64 = (1 << CAP_CHOWN)
    | (1 << CAP_DAC_OVERRIDE)
    | (1 << CAP_FOWNER)
    | (1 << CAP_FSETID)
    | (1 << CAP_KILL)
    | (1 << CAP_SETGID)
    | (1 << CAP_SETUID);
// linux/capability.h's numbers (libc has none of them).
const CAP_CHOWN: u32 = 0;
const CAP_DAC_OVERRIDE: u32 = 1;
const CAP_FOWNER: u32 = 3;
const CAP_FSETID: u32 = 4;
const CAP_KILL: u32 = 5;
const CAP_SETGID: u32 = 6;
const CAP_SETUID: u32 = 7;

/// This process's OOM score adjustment, if it can be read.
fn own_oom_score_adj() -> Option<i32> {
    std::fs::read_to_string("/proc/self/oom_score_adj")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Supplementary group ids that mark a command's processes.
///
/// Every command gets one as its only supplementary group. Without
/// `CAP_SETGID` (which no sandboxed process has) a process can never drop
/// it, and everything it starts inherits it, whether it calls `setsid`,
/// double-forks or is `nohup`ed: so "every process of command N" is exactly
/// "every process whose groups include N's marker", and killing a command
/// kills all of its descendants. A command that ends normally leaves its
/// background processes alone. Markers are ids inside the container's
/// mapped range, owned by nothing on disk. (Rootless containers map one id
/// and cannot use `setgroups`: there only the process group is killed.)
pub(super) struct Markers {
    next: u32,
    /// Markers still carried by live processes when the range wrapped.
    in_use: std::collections::HashSet<u32>,
}

const MARKER_FIRST: u32 = 40_000;
const MARKER_END: u32 = 60_000;

impl Markers {
    fn new() -> Self {
        Self {
            next: MARKER_FIRST,
            in_use: Default::default(),
        }
    }

    fn allocate(&mut self) -> u32 {
        for _ in MARKER_FIRST..MARKER_END {
            if self.next >= MARKER_END {
                // Wrapped: skip markers whose processes still run.
                self.next = MARKER_FIRST;
                self.in_use = processes().filter_map(|p| p.marker).collect();
            }
            let marker = self.next;
            self.next += 1;
            if !self.in_use.contains(&marker) {
                return marker;
            }
        }
        // Every marker is held by a live process (20,000 of them, far past
        // any process limit): share one rather than fail.
        MARKER_FIRST
    }
}

/// A process of this container, as /proc shows it.
struct ProcessInfo {
    pid: libc::pid_t,
    /// Its marker, if it carries one.
    marker: Option<u32>,
    /// Tasks (threads) it counts against the process limit.
    threads: u64,
    zombie: bool,
}

/// Every process in the container's pid namespace but init.
fn processes() -> impl Iterator<Item = ProcessInfo> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid: libc::pid_t = entry.file_name().to_str()?.parse().ok()?;
            if pid == 1 {
                return None;
            }
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let field = |name: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(name).map(str::trim))
            };
            Some(ProcessInfo {
                pid,
                marker: field("Groups:")?
                    .split_whitespace()
                    .filter_map(|g| g.parse::<u32>().ok())
                    .find(|g| (MARKER_FIRST..MARKER_END).contains(g)),
                threads: field("Threads:").and_then(|t| t.parse().ok()).unwrap_or(1),
                zombie: field("State:").is_some_and(|s| s.starts_with('Z')),
            })
        })
}

/// SIGKILLs every live process carrying `marker`, again until none is
/// left (processes may fork while we scan); returns how many were killed.
fn kill_marked(marker: u32, running: &mut HashMap<libc::pid_t, RunningCommand>) -> i32 {
    let mut killed = std::collections::HashSet::new();
    for round in 0..200 {
        let (zombies, targets): (Vec<_>, Vec<_>) = processes()
            .filter(|p| p.marker == Some(marker))
            .partition(|p| p.zombie);
        // A killed process keeps its slots until the kernel has torn down
        // its last thread and it was reaped (a multithreaded one shows as
        // a zombie while its threads still exit): wait for that too, or
        // the next command would find the container still at its limit.
        if targets.is_empty() && zombies.is_empty() {
            break;
        }
        for pid in targets.into_iter().map(|p| p.pid) {
            // SAFETY: kill(2) with a pid of this namespace that carries the
            // marker; at worst the process is already gone.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            killed.insert(pid);
        }
        // Orphans re-parented to us must be reaped to free their slots.
        reap(running);
        if round > 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    reap(running);
    killed.len() as i32
}

/// How often init tries a command again (2 ms apart) when what it ended to
/// make room has not left yet.
const RECLAIM_RETRIES: usize = 250;

/// Which runaway [`reclaim`] may end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Runaway {
    /// Failed forks were counted since the last command ended, so what
    /// earlier commands left running holds the container at its limit:
    /// every marker of no running command. Ending only the largest is not
    /// enough: a bomb beside a larger quiet crowd of its own (forty
    /// sleepers, then a bomb) retakes at once the slots the crowd frees,
    /// and the next command's forks fail until its timeout.
    Leftover,
    /// A command could not even be started: the marker holding the most
    /// tasks, whoever's it is.
    Any,
}

/// Frees process slots when the container is at its process limit: ends
/// every process of the runaway's markers (see [`Runaway`]).
fn reclaim(running: &mut HashMap<libc::pid_t, RunningCommand>, which: Runaway) -> i32 {
    if which == Runaway::Leftover {
        return reclaim_leftovers(running);
    }
    let mut tasks: HashMap<u32, u64> = HashMap::new();
    for process in processes().filter(|p| !p.zombie) {
        if let Some(marker) = process.marker {
            *tasks.entry(marker).or_default() += process.threads;
        }
    }
    match tasks.into_iter().max_by_key(|(_, n)| *n) {
        Some((marker, _)) => kill_marked(marker, running),
        None => 0,
    }
}

/// Ends every process of a marker no running command holds, largest
/// first, rescanning until none is left (a marker may appear in the scan
/// only once its bomb refilled the slots another's end freed).
fn reclaim_leftovers(running: &mut HashMap<libc::pid_t, RunningCommand>) -> i32 {
    let live: Vec<Option<u32>> = running
        .values()
        .filter(|command| !command.abandoned)
        .map(|command| command.marker)
        .collect();
    let mut killed = 0;
    // Each round ends at least one marker for good; markers are finite.
    for _ in MARKER_FIRST..MARKER_END {
        let mut tasks: HashMap<u32, u64> = HashMap::new();
        for process in processes().filter(|p| !p.zombie) {
            if let Some(marker) = process.marker.filter(|m| !live.contains(&Some(*m))) {
                *tasks.entry(marker).or_default() += process.threads;
            }
        }
        let Some((marker, _)) = tasks.into_iter().max_by_key(|(_, n)| *n) else {
            break;
        };
        killed += kill_marked(marker, running);
    }
    killed
}

/// A command init started and still waits for.
pub(super) struct RunningCommand {
    /// The engine's number for it (`Request::KillCommand` names it).
    pub(super) id: u32,
    status: OwnedFd,
    marker: Option<u32>,
    /// Killed because the engine stopped waiting for it: its status pipe is
    /// no longer watched (it would report the same hang-up for ever).
    abandoned: bool,
}

/// Kills a running command's process group and every process carrying its
/// marker.
pub(super) fn kill_command(pid: libc::pid_t, running: &mut HashMap<libc::pid_t, RunningCommand>) {
    let Some(marker) = running.get(&pid).map(|c| c.marker) else {
        return;
    };
    // SAFETY: kill with a negative pid signals that process group.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
    if let Some(marker) = marker {
        kill_marked(marker, running);
    }
}

/// Runs init: builds the container, reports ready, and serves the
/// engine's requests until it closes the channel. `counters`, opened on
/// the host by the helper, let init answer `sysinfo` (see `sysinfo`).
pub fn run(spec: &HelperSpec, control: RawFd, counters: Option<sysinfo::CgroupCounters>) -> ! {
    let ready = setup(spec, counters).and_then(|(launcher, signals, proxy, answers)| {
        // The engine reaches /mnt/data through this descriptor, opened
        // before any command ran, never through a /proc/<pid> path.
        let data =
            std::fs::File::open(WORKDIR).step(SetupStep::OpenData, || format!("open {WORKDIR}"))?;
        Ok((launcher, signals, data, proxy, answers))
    });
    match ready {
        Ok((launcher, signals, data, proxy, answers)) => {
            let mut fds = vec![data.as_raw_fd()];
            if let Some(proxy) = &proxy {
                fds.extend([
                    proxy.http.as_raw_fd(),
                    proxy.https.as_raw_fd(),
                    proxy.dns.as_raw_fd(),
                ]);
            }
            report_with_fds(control, &Report::Ready, &fds);
            // Init keeps no copy: the engine's are the only ones.
            drop((data, proxy));
            serve(&launcher, &signals, control, answers.as_ref())
        }
        Err(error) => {
            report(control, &Report::Error { error });
            std::process::exit(1)
        }
    }
}

/// A step's system call result: negative is its failure (`errno`).
fn check(step: SetupStep, what: &str, ret: libc::c_long) -> SetupResult<()> {
    if ret < 0 {
        Err(SetupError::last_os(step, what))
    } else {
        Ok(())
    }
}

/// What setup leaves init to serve with: how it starts commands, its
/// signals, the egress proxy's sockets, and the `sysinfo` listener.
type Ready = (
    Launcher,
    OwnedFd,
    Option<ProxySockets>,
    Option<sysinfo::SysinfoAnswers>,
);

fn setup(spec: &HelperSpec, counters: Option<sysinfo::CgroupCounters>) -> SetupResult<Ready> {
    if !spec.rootless {
        // Our host uid (0) has no mapping here; become the namespace's root.
        // SAFETY: plain id-changing syscalls with integer arguments.
        unsafe {
            check(
                SetupStep::BecomeRoot,
                "setresgid 0",
                libc::setresgid(0, 0, 0) as libc::c_long,
            )?;
            check(
                SetupStep::BecomeRoot,
                "setgroups",
                libc::setgroups(0, std::ptr::null()) as libc::c_long,
            )?;
            check(
                SetupStep::BecomeRoot,
                "setresuid 0",
                libc::setresuid(0, 0, 0) as libc::c_long,
            )?;
        }
    }
    mounts::build_root(spec)?;
    sys::sethostname(&spec.hostname).step(SetupStep::SetHostname, || "sethostname".into())?;
    loopback_up()?;
    let proxy = if spec.egress {
        network::route_everything_locally()?;
        Some(network::proxy_sockets()?)
    } else {
        None
    };
    let no_core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `no_core` is a valid rlimit.
    let set = unsafe { libc::setrlimit(libc::RLIMIT_CORE, &no_core) };
    check(
        SetupStep::ResourceLimit,
        "setrlimit core",
        set as libc::c_long,
    )?;
    set_nofile(spec.nofile)?;
    // (System V shared memory is sized by `mounts::build_root`, before
    // /proc/sys turns read-only.)

    let dev_null = std::fs::File::open("/dev/null")
        .step(SetupStep::CommandSetup, || "open /dev/null".into())?;
    let workdir = spec.workdir.as_deref().unwrap_or(WORKDIR);
    let env = command_env(&spec.home, workdir, &spec.env);
    let env_pointers = env
        .iter()
        .map(|v| v.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let launcher = Launcher {
        dev_null: dev_null.into(),
        env,
        env_pointers,
        shells: SHELLS
            .iter()
            .filter_map(|(path, name)| Some((CString::new(*path).ok()?, CString::new(*name).ok()?)))
            .collect(),
        dash_c: c"-c".to_owned(),
        workdir: CString::new(workdir)
            .map_err(|e| SetupError::other(SetupStep::CommandSetup, "working directory", e))?,
        oom_score_adj: c"/proc/self/oom_score_adj".to_owned(),
        // Only a score the helper really lowered needs undoing: without
        // CAP_SYS_RESOURCE (some hosts drop it even for root) init stays at
        // 0, commands inherit 0, and the reset would cost every command an
        // open of /proc for nothing (~50 µs). Unreadable: reset, to be safe.
        reset_oom_score: !spec.rootless && own_oom_score_adj().is_none_or(|score| score < 0),
        sandbox_uid: spec.sandbox_uid,
        sandbox_gid: spec.sandbox_gid,
        change_ids: !spec.rootless,
        build_root: spec.build_root && !spec.rootless,
    };

    // A recognisable name in `ps` inside the container (cosmetic: a
    // failure changes nothing).
    let _ = rustix::thread::set_name(c"sandbox-init");
    drop_capability_bounding_set(if launcher.build_root {
        BUILD_CAPABILITIES
    } else {
        0
    })?;
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(std::io::Error::from)
        .step(SetupStep::NotDumpable, || "PR_SET_DUMPABLE".into())?;
    rustix::thread::set_no_new_privs(true)
        .map_err(std::io::Error::from)
        .step(SetupStep::NoNewPrivileges, || "PR_SET_NO_NEW_PRIVS".into())?;
    // With the container's counters, `sysinfo` is init's to answer; a
    // kernel that cannot hand it over gets the filter without that rule.
    let answers = match counters.map(|c| (seccomp::install_answering_sysinfo(), c)) {
        Some((Ok(listener), counters)) => Some(sysinfo::SysinfoAnswers::new(listener, counters)),
        _ => {
            seccomp::install().step(SetupStep::SeccompLoad, || "seccomp".into())?;
            None
        }
    };
    let signals = child_signal_fd()?;
    Ok((launcher, signals, proxy, answers))
}

/// Sets `RLIMIT_NOFILE`, soft and hard, for init and every command.
///
/// Raising the hard limit needs `CAP_SYS_RESOURCE` on the host, which init
/// does not have: if the server's own hard limit is lower, that one stays.
fn set_nofile(nofile: u64) -> SetupResult<()> {
    let mut current = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `current` is a valid out-pointer for getrlimit.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut current) };
    check(
        SetupStep::ResourceLimit,
        "getrlimit nofile",
        got as libc::c_long,
    )?;
    let limit: libc::rlim_t = nofile.min(current.rlim_max);
    let wanted = libc::rlimit {
        rlim_cur: limit,
        rlim_max: limit,
    };
    // SAFETY: `wanted` is a valid rlimit.
    check(SetupStep::ResourceLimit, "setrlimit nofile", unsafe {
        libc::setrlimit(libc::RLIMIT_NOFILE, &wanted)
    }
        as libc::c_long)
}

/// Every command's environment: the fixed variables, each unless `extra`
/// sets it (an image's `PATH`, say), then `extra` in order.
fn command_env(home: &str, workdir: &str, extra: &[(String, String)]) -> Vec<CString> {
    let overridden = |entry: &String| {
        entry
            .split_once('=')
            .is_some_and(|(name, _)| extra.iter().any(|(set, _)| set == name))
    };
    [
        // `pip install` and `npm install -g` as the sandbox user land in
        // ~/.local (the system's prefixes are read-only), first on PATH.
        format!(
            "PATH={home}/.local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        ),
        format!("HOME={home}"),
        // Debian marks its Python "externally managed" (PEP 668); a user
        // install cannot break a read-only system, so the wall is lifted.
        "PIP_BREAK_SYSTEM_PACKAGES=1".to_owned(),
        format!("NPM_CONFIG_PREFIX={home}/.local"),
        format!("USER={SANDBOX_USER}"),
        format!("LOGNAME={SANDBOX_USER}"),
        "SHELL=/bin/bash".to_owned(),
        "LANG=C.UTF-8".to_owned(),
        "LC_ALL=C.UTF-8".to_owned(),
        "TERM=dumb".to_owned(),
        "TMPDIR=/tmp".to_owned(),
        format!("PWD={workdir}"),
    ]
    .into_iter()
    .filter(|entry| !overridden(entry))
    .chain(extra.iter().map(|(name, value)| format!("{name}={value}")))
    .filter_map(|v| CString::new(v).ok())
    .collect()
}

/// Brings `lo` up: the network namespace starts with it down and nothing else.
fn loopback_up() -> SetupResult<()> {
    // SAFETY: socket() with constant arguments.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    check(SetupStep::Loopback, "socket", fd as libc::c_long)?;
    // SAFETY: `fd` is a new descriptor owned here.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain data; zero is valid.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in request.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: `request` is a valid ifreq naming "lo"; the ioctls read and
    // write only its flags field.
    unsafe {
        check(
            SetupStep::Loopback,
            "SIOCGIFFLAGS lo",
            libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFFLAGS, &mut request) as libc::c_long,
        )?;
        request.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        check(
            SetupStep::Loopback,
            "SIOCSIFFLAGS lo",
            libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFFLAGS, &request) as libc::c_long,
        )?;
    }
    Ok(())
}

/// Drops from the bounding set every capability not in `keep` (a bit per
/// capability number): what no command can ever regain through `execve`.
fn drop_capability_bounding_set(keep: u64) -> SetupResult<()> {
    let last_cap: u64 = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63);
    for cap in 0..=last_cap {
        // A capability set holds numbers below 64: one beyond is one this
        // kernel cannot know either.
        let Some(bit) = u32::try_from(cap)
            .ok()
            .and_then(|cap| 1u64.checked_shl(cap))
        else {
            break;
        };
        if keep & bit != 0 {
            continue;
        }
        let one = rustix::thread::CapabilitySet::from_bits_retain(bit);
        match rustix::thread::remove_capability_from_bounding_set(one) {
            Ok(()) => {}
            // Capabilities this kernel does not know.
            Err(rustix::io::Errno::INVAL) => break,
            Err(e) => {
                return Err(SetupError::os(
                    SetupStep::DropCapabilities,
                    format!("drop capability {cap} from the bounding set"),
                    e.into(),
                ))
            }
        }
    }
    rustix::thread::clear_ambient_capability_set()
        .map_err(std::io::Error::from)
        .step(SetupStep::DropCapabilities, || {
            "clear ambient capabilities".into()
        })
}

/// Blocks SIGCHLD and returns a signalfd that reads it.
fn child_signal_fd() -> SetupResult<OwnedFd> {
    // SAFETY: sigset manipulation on a local, then sigprocmask/signalfd with
    // valid pointers to it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        check(
            SetupStep::ChildSignals,
            "sigprocmask",
            libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) as libc::c_long,
        )?;
        let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        check(SetupStep::ChildSignals, "signalfd", fd as libc::c_long)?;
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

pub(super) fn send_status(fd: &OwnedFd, status: Status) {
    // The engine may have given up on the command; a broken pipe is fine.
    let _ = sys::write_all(fd.as_raw_fd(), &status.encode());
}

fn serve(
    launcher: &Launcher,
    signals: &OwnedFd,
    control: RawFd,
    sysinfo: Option<&sysinfo::SysinfoAnswers>,
) -> ! {
    let mut running: HashMap<libc::pid_t, RunningCommand> = HashMap::new();
    let mut markers = Markers::new();
    let mut buf = vec![0u8; MAX_MESSAGE];
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let mut watched: Vec<libc::pid_t> = Vec::new();
    loop {
        // The control socket, the signals, the `sysinfo` calls waiting,
        // and the status pipe of every running command: the engine closing
        // its end (a caller that gave up, whatever the reason) shows as
        // POLLERR, and the command is killed, without the engine having to
        // be woken while it runs.
        fds.clear();
        watched.clear();
        for fd in [control, signals.as_raw_fd()]
            .into_iter()
            .chain(sysinfo.map(sysinfo::SysinfoAnswers::fd))
        {
            fds.push(libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
        }
        let fixed = fds.len();
        for (pid, command) in running.iter().filter(|(_, c)| !c.abandoned) {
            fds.push(libc::pollfd {
                fd: command.status.as_raw_fd(),
                events: 0,
                revents: 0,
            });
            watched.push(*pid);
        }
        // SAFETY: `fds` is a valid array of `fds.len()` pollfds.
        if unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) } < 0 {
            continue; // EINTR
        }
        if let Some(answers) = sysinfo.filter(|_| fds[2].revents != 0) {
            answers.answer_one();
        }
        for (pid, fd) in watched.iter().zip(&fds[fixed..]) {
            if fd.revents & (libc::POLLERR | libc::POLLHUP) != 0 {
                kill_command(*pid, &mut running);
                if let Some(command) = running.get_mut(pid) {
                    command.abandoned = true;
                }
            }
        }
        if fds[1].revents != 0 {
            drain_signals(signals);
            reap(&mut running);
        }
        if fds[0].revents != 0 {
            match sys::recv_with_fds(control, &mut buf, libc::MSG_DONTWAIT) {
                // The server closed the channel: end the container. Our exit
                // makes the kernel kill every process in the pid namespace.
                Ok((0, _)) => std::process::exit(0),
                Ok((len, passed)) => {
                    handle(launcher, &buf[..len], passed, &mut running, &mut markers)
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => std::process::exit(1),
            }
        }
    }
}

fn drain_signals(signals: &OwnedFd) {
    let mut info = [0u8; 128 * 4];
    while matches!(sys::read(signals.as_raw_fd(), &mut info), Ok(n) if n > 0) {}
}

fn reap(running: &mut HashMap<libc::pid_t, RunningCommand>) {
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid out-pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
        // Orphans (a command's background children) are reaped silently.
        if let Some(command) = running.remove(&pid) {
            send_status(&command.status, Status::Exited(status));
        }
    }
}

fn handle(
    launcher: &Launcher,
    message: &[u8],
    passed: Vec<OwnedFd>,
    running: &mut HashMap<libc::pid_t, RunningCommand>,
    markers: &mut Markers,
) {
    match Request::decode(message) {
        Some(Request::Run {
            id,
            command,
            reclaim: reclaim_first,
        }) => {
            let Ok([stdout, stderr, status]) = <[OwnedFd; 3]>::try_from(passed) else {
                return;
            };
            let Ok(command) = CString::new(command) else {
                send_status(&status, Status::SpawnFailed(libc::EINVAL));
                return;
            };
            let io = ChildIo {
                stdin: launcher.dev_null.as_raw_fd(),
                stdout: stdout.as_raw_fd(),
                stderr: stderr.as_raw_fd(),
                terminal: false,
                env: launcher.env_pointers.as_ptr(),
                workdir: launcher.workdir.as_ptr(),
            };
            let started = Start {
                id,
                reclaim_first,
                announce: false,
            };
            start_marked(launcher, &started, &command, &io, status, running, markers);
            // Our copies of the output pipes must close, or the engine
            // would never see end-of-file.
            drop((stdout, stderr));
        }
        Some(Request::Start { id, start }) => {
            process::start(launcher, id, start, passed, running, markers)
        }
        Some(Request::SignalCommand { id, signal }) => process::signal(id, signal, running),
        Some(Request::Work { id, task }) => {
            let marker = launcher.change_ids.then(|| markers.allocate());
            let become_user = || become_sandbox_user(launcher, marker);
            if let Some((pid, status)) = super::worker::start(&task, passed, become_user) {
                running.insert(
                    pid,
                    RunningCommand {
                        id,
                        status,
                        marker,
                        abandoned: false,
                    },
                );
            }
        }
        Some(Request::KillCommand { id }) => {
            let pid = running
                .iter()
                .find(|(_, command)| command.id == id)
                .map(|(pid, _)| *pid);
            if let Some(pid) = pid {
                kill_command(pid, running);
            }
        }
        Some(Request::Connect { port }) => super::connect::connect(port, passed),
        None => {}
    }
}

/// How [`start_marked`] starts a command.
pub(super) struct Start {
    /// The engine's number for it.
    pub id: u32,
    /// Forks failed at the process limit since the last start (see `Run`).
    pub reclaim_first: bool,
    /// Tell the engine its pid (`Status::Spawned`): processes show it.
    pub announce: bool,
}

/// Starts a command with its own marker, first freeing the container's
/// process slots if asked (or if even the start fails at the limit), and
/// records it as running; its status pipe tells the engine what became of
/// it. Returns its pid.
pub(super) fn start_marked(
    launcher: &Launcher,
    start: &Start,
    command: &CString,
    io: &ChildIo,
    status: OwnedFd,
    running: &mut HashMap<libc::pid_t, RunningCommand>,
    markers: &mut Markers,
) -> Option<libc::pid_t> {
    let marker = launcher.change_ids.then(|| markers.allocate());
    let mut reclaimed = 0;
    if start.reclaim_first && launcher.change_ids {
        // Ended (and reaped) before the command starts: nothing of
        // the runaway is left to take the slots its forks need.
        reclaimed = reclaim(running, Runaway::Leftover);
    }
    let mut spawned = spawn(launcher, command, marker, io, &status);
    // What was ended may still be leaving (threads of a process
    // whose zombie was left to another parent): a few short
    // retries, bounded, before the command is given up.
    for _ in 0..RECLAIM_RETRIES {
        if spawned != Err(libc::EAGAIN) || reclaimed == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
        reap(running);
        spawned = spawn(launcher, command, marker, io, &status);
    }
    if spawned == Err(libc::EAGAIN) && reclaimed == 0 && launcher.change_ids {
        // At the process limit: free the runaway's slots, try once more.
        reclaimed = reclaim(running, Runaway::Any);
        if reclaimed > 0 {
            spawned = spawn(launcher, command, marker, io, &status);
        }
    }
    if reclaimed > 0 {
        send_status(&status, Status::Reclaimed(reclaimed));
    }
    match spawned {
        Err(errno) => {
            send_status(&status, Status::SpawnFailed(errno));
            None
        }
        Ok(pid) => {
            if start.announce {
                send_status(&status, Status::Spawned(pid));
            }
            running.insert(
                pid,
                RunningCommand {
                    id: start.id,
                    status,
                    marker,
                    abandoned: false,
                },
            );
            Some(pid)
        }
    }
}

/// The descriptors and settings a command starts with, prepared before
/// `clone` (the child may not allocate).
pub(super) struct ChildIo {
    pub stdin: RawFd,
    pub stdout: RawFd,
    pub stderr: RawFd,
    /// Stdin is a terminal that becomes the command's controlling one.
    pub terminal: bool,
    /// NUL-terminated `envp`, alive until the child has exec'd.
    pub env: *const *const libc::c_char,
    pub workdir: *const libc::c_char,
}

/// Arguments of the spawned child, passed through `clone`'s pointer.
struct ChildArgs<'a> {
    launcher: &'a Launcher,
    command: &'a CString,
    marker: Option<u32>,
    io: &'a ChildIo,
    status: &'a OwnedFd,
}

/// Size of the stack the child runs on until `execve`.
const CHILD_STACK: usize = 64 * 1024;

/// Starts a command the way `posix_spawn` does: `clone(CLONE_VM |
/// CLONE_VFORK)` onto a stack of its own, so nothing of init is copied and
/// init waits (microseconds) until the child has exec'd or failed.
fn spawn(
    launcher: &Launcher,
    command: &CString,
    marker: Option<u32>,
    io: &ChildIo,
    status: &OwnedFd,
) -> Result<libc::pid_t, i32> {
    extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` points to the ChildArgs below, alive while init is
        // suspended by CLONE_VFORK.
        let args = unsafe { &*(arg as *const ChildArgs) };
        exec_command(
            args.launcher,
            args.command,
            args.marker,
            args.io,
            args.status,
        )
    }
    let args = ChildArgs {
        launcher,
        command,
        marker,
        io,
        status,
    };
    let mut stack = vec![0u8; CHILD_STACK];
    // SAFETY: the stack grows down from its (16-byte aligned) top; with
    // CLONE_VFORK this thread is suspended until the child execs or exits,
    // so `stack` and `args` outlive every use. The child only makes system
    // calls and never allocates (see `exec_command`).
    let pid = unsafe {
        let top = stack.as_mut_ptr().add(CHILD_STACK) as usize & !15;
        libc::clone(
            child_main,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            &args as *const ChildArgs as *mut libc::c_void,
        )
    };
    if pid < 0 {
        Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO))
    } else {
        Ok(pid)
    }
}

/// In the spawned child: become the sandboxed command. Never returns, and
/// never allocates: it shares init's memory until `execve`.
fn exec_command(
    launcher: &Launcher,
    command: &CString,
    marker: Option<u32>,
    io: &ChildIo,
    status: &OwnedFd,
) -> ! {
    let fail = |errno: i32| -> ! {
        send_status(status, Status::SpawnFailed(errno));
        // SAFETY: _exit ends the child without running init's destructors.
        unsafe { libc::_exit(127) }
    };
    let errno = || {
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    };
    if let Err(code) = become_sandbox_user(launcher, marker) {
        fail(code);
    }
    // SAFETY: each call below is a plain syscall with valid arguments, made in
    // a single-threaded child that is about to exec.
    unsafe {
        // A terminal becomes the new session's controlling terminal
        // (job control, ^C, SIGWINCH and SIGHUP reach the command); its
        // slave belongs to the sandbox user, who may do this.
        if io.terminal && libc::ioctl(io.stdin, libc::TIOCSCTTY, 0) < 0 {
            fail(errno());
        }
        if libc::dup2(io.stdin, 0) < 0
            || libc::dup2(io.stdout, 1) < 0
            || libc::dup2(io.stderr, 2) < 0
        {
            fail(errno());
        }
        // As the sandbox user: a working directory it may not enter is refused.
        if libc::chdir(io.workdir) < 0 {
            fail(errno());
        }
        let mut last = libc::ENOENT;
        for (path, name) in &launcher.shells {
            let argv = [
                name.as_ptr(),
                launcher.dash_c.as_ptr(),
                command.as_ptr(),
                std::ptr::null(),
            ];
            libc::execve(path.as_ptr(), argv.as_ptr(), io.env);
            last = errno();
        }
        fail(last)
    }
}

/// The steps that make a child of init the sandbox user, shared by a
/// command (before `execve`) and a file worker (before its task): its own
/// session, init's OOM immunity undone, the marker as its only
/// supplementary group, the sandbox user's ids, no capabilities, and every
/// signal's disposition default with none blocked. Never allocates: a command's child shares init's
/// memory until `execve`. Returns the errno of the step that failed.
fn become_sandbox_user(launcher: &Launcher, marker: Option<u32>) -> Result<(), i32> {
    let errno = || {
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    };
    // SAFETY: each call below is a plain syscall with valid arguments, made
    // in a single-threaded child of init.
    unsafe {
        // Every disposition default and nothing blocked: what init set up
        // for itself (blocked SIGCHLD, Rust's ignored SIGPIPE), and whatever
        // the server's own parent ignored or blocked, would be inherited
        // across exec.
        sys::reset_signals();

        if libc::setsid() < 0 {
            return Err(errno());
        }
        // Undo init's OOM immunity (see the helper), or fail: a child left
        // at -1000 could fill memory and never be the one the OOM killer
        // picks. Raising the score is always allowed, but /proc/self of a
        // non-dumpable process belongs to host root, whom nobody here may
        // act as: a command's child shares init's (non-dumpable) memory
        // until `execve`, so it marks that memory dumpable for the one write
        // and back. Init is suspended (CLONE_VFORK) or copied (a worker's
        // fork), and no other process in the container runs as root, so
        // nothing can use the window; nothing can cut it short either
        // (this child is root and still at -1000).
        if launcher.reset_oom_score {
            libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
            let oom = launcher.oom_score_adj.as_ptr();
            let fd = libc::open(oom, libc::O_WRONLY | libc::O_CLOEXEC);
            let reset = if fd < 0 {
                Err(errno())
            } else {
                let written = libc::write(fd, b"0".as_ptr().cast(), 1);
                let result = match written {
                    1 => Ok(()),
                    0 => Err(libc::EIO),
                    _ => Err(errno()),
                };
                libc::close(fd);
                result
            };
            if libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) < 0 {
                return Err(errno());
            }
            reset?;
        }
        // Raw syscalls: glibc's wrappers would try to change the ids of
        // every thread sharing our memory, and a command's child shares init's.
        let (uid, gid) = if launcher.build_root {
            (0, 0)
        } else {
            (launcher.sandbox_uid, launcher.sandbox_gid)
        };
        // The marker is the only supplementary group (see `Markers`).
        let groups: [libc::gid_t; 1] = [marker.unwrap_or(0)];
        let group_count = usize::from(marker.is_some());
        if launcher.change_ids
            && (libc::syscall(libc::SYS_setgroups, group_count, groups.as_ptr()) < 0
                || libc::syscall(libc::SYS_setresgid, gid, gid, gid) < 0
                || libc::syscall(libc::SYS_setresuid, uid, uid, uid) < 0)
        {
            return Err(errno());
        }
        let kept = if launcher.build_root {
            BUILD_CAPABILITIES
        } else {
            0
        };
        if set_capabilities(kept) < 0 {
            return Err(errno());
        }
    }
    Ok(())
}

/// Sets the effective and permitted capability sets to `kept` (a bit per
/// capability number, all below 32) and clears the inheritable one: a
/// command keeps nothing else, and `execve` gives it nothing more.
///
/// # Safety
/// Only calls capset with valid pointers.
unsafe fn set_capabilities(kept: u64) -> libc::c_int {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let header = Header {
        version: 0x2008_0522,
        pid: 0,
    }; // _LINUX_CAPABILITY_VERSION_3
    let low = (kept & 0xffff_ffff) as u32;
    let data = [
        Data {
            effective: low,
            permitted: low,
            inheritable: 0,
        },
        Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        },
    ];
    libc::syscall(libc::SYS_capset, &header, data.as_ptr()) as libc::c_int
}
