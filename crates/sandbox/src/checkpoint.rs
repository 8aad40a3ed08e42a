//! Whether a container's memory can be checkpointed with CRIU, and why not.
//!
//! A memory-preserving snapshot (running processes frozen to images and
//! brought back alive) needs three things, checked in this order by
//! [`probe`], the first missing one being the reason a snapshot falls back
//! to files only:
//!
//! 1. a CRIU that runs here: a `criu` binary, or a Debian rootfs holding one
//!    (run through that rootfs's own loader and libraries, so the host's
//!    older Debian needs nothing installed);
//! 2. a CRIU recent enough for this kernel: from Linux 6.16 the kernel
//!    refuses `SO_PASSCRED`/`SO_PASSSEC` on anything but Unix and netlink
//!    sockets, and CRIU before 4.2 fails to dump any TCP socket (a listening
//!    server) because it reads both; `criu check` must pass;
//! 3. a container CRIU can dump whole. CRIU checkpoints a pid namespace only
//!    together with its init, and it restores a tree only into namespaces it
//!    creates itself (joining the user namespace of a live container breaks
//!    on its mount and network namespaces; a subtree restored under a new
//!    user namespace cannot mount its pid namespace's `/proc`). A shellgate
//!    container's init is a clone of the helper, not a program executed
//!    inside the container: its code is mapped from the host's mount of the
//!    `shellgate` binary, which is in no mount namespace of the container,
//!    and it is not dumpable, so CRIU's check of the namespaces' owner from
//!    inside the container's user namespace is refused. Both are properties
//!    of the engine (see [`Unavailable::ContainerShape`]), so a container of
//!    this engine is never checkpointed: [`probe`] says so once CRIU itself
//!    passes.
//!
//! The operator's page `docs/operator/memory-snapshots.md` holds the
//! evidence (commands and CRIU's log lines) and the layout under which CRIU
//! 4.2 did restore a container-shaped tree alive.
//!
//! [`probe`] runs `criu --version` and `criu check` (a few tenths of a
//! second): call it from a blocking context. [`support`] is its answer for
//! the CRIU [`CriuCommand::locate`] finds, probed once per process.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The oldest CRIU that dumps TCP sockets on the kernels that restrict
/// `SO_PASSCRED` (Linux 6.16 and later).
pub const MIN_CRIU: CriuVersion = CriuVersion {
    major: 4,
    minor: 2,
    patch: 0,
};

/// The first kernel that refuses `SO_PASSCRED`/`SO_PASSSEC` on TCP sockets.
pub const PASSCRED_RESTRICTED_KERNEL: KernelRelease = KernelRelease {
    major: 6,
    minor: 16,
};

/// Where the operator's cache of a CRIU rootfs lives by default.
pub const DEFAULT_CRIU_ROOTFS: &str = "/var/cache/shellgate-criu/rootfs";

/// The answer of [`probe`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckpointSupport {
    /// CRIU runs here, is recent enough and passes its checks, and the
    /// engine's containers have a shape it can dump and restore.
    Available {
        /// The CRIU that was probed.
        version: CriuVersion,
    },
    /// A memory snapshot cannot be taken; the snapshot is files only and
    /// carries this reason.
    Unavailable(Unavailable),
}

impl CheckpointSupport {
    /// The reason a memory snapshot falls back to files only, if it does
    /// (the text a snapshot's `memory_unavailable_reason` carries).
    pub fn unavailable_reason(&self) -> Option<String> {
        match self {
            CheckpointSupport::Available { .. } => None,
            CheckpointSupport::Unavailable(reason) => Some(reason.to_string()),
        }
    }
}

/// Why a memory snapshot is not possible here, first blocker first.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    /// No CRIU could be started.
    #[error("CRIU is not installed: {program} could not be run ({error}); CRIU {MIN_CRIU} or later is needed (Debian 13's 4.1 is too old on this kernel, Debian unstable has 4.2)")]
    CriuMissing {
        /// The program that was started.
        program: String,
        /// Why it could not be.
        error: String,
    },
    /// `criu --version` printed no version.
    #[error("CRIU at {program} printed no version (`criu --version` said: {output:?})")]
    CriuVersionUnreadable {
        /// The program that was started.
        program: String,
        /// What it printed.
        output: String,
    },
    /// CRIU is older than the kernel needs.
    #[error("CRIU {version} cannot dump a TCP socket on Linux {kernel}: from Linux {PASSCRED_RESTRICTED_KERNEL} the kernel refuses SO_PASSCRED and SO_PASSSEC on TCP sockets (CRIU: `sockets: Can't get 1:16 opt: Operation not supported`); CRIU {MIN_CRIU} or later is needed")]
    CriuTooOldForKernel {
        /// The CRIU found.
        version: CriuVersion,
        /// The running kernel.
        kernel: KernelRelease,
    },
    /// CRIU is older than any version tried with these containers.
    #[error(
        "CRIU {version} is older than {MIN_CRIU}, the oldest tried with container-shaped trees"
    )]
    CriuTooOld {
        /// The CRIU found.
        version: CriuVersion,
    },
    /// `criu check` failed on this kernel.
    #[error("`criu check` fails on this kernel: {detail}")]
    CriuCheckFailed {
        /// Its last error line.
        detail: String,
    },
    /// The engine's containers cannot be dumped whole (see the module's
    /// documentation).
    #[error("a shellgate container cannot be checkpointed: its init is a clone of the helper, so its code is mapped from the host's mount of the shellgate binary, outside the container's mount namespaces (CRIU: `Can't lookup mount=N for fd=-3 path=.../shellgate`), and it is not dumpable, so CRIU cannot open its namespaces from inside the container's user namespace (CRIU: `Can't open N/ns/net on procfs: Permission denied`); CRIU dumps a pid namespace only with its init, and a subtree without it cannot be restored into a live container's namespaces")]
    ContainerShape,
}

/// A CRIU release, `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct CriuVersion {
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
    /// Patch number (0 when the release has none).
    pub patch: u32,
}

impl fmt::Display for CriuVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// A kernel release, `major.minor` (what decides the features CRIU needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct KernelRelease {
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
}

impl fmt::Display for KernelRelease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// How to start CRIU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CriuCommand {
    program: PathBuf,
    leading_args: Vec<OsString>,
}

impl CriuCommand {
    /// A `criu` binary (a path, or a name looked up on `PATH`).
    pub fn binary(program: impl Into<PathBuf>) -> Self {
        CriuCommand {
            program: program.into(),
            leading_args: Vec::new(),
        }
    }

    /// The `criu` of a Debian rootfs (as `mmdebstrap --variant=minbase
    /// --include=criu,iproute2,iptables SUITE DIR` makes it), started through
    /// that rootfs's loader with its libraries, so it runs on a host whose
    /// own libraries are older.
    pub fn from_rootfs(rootfs: &Path) -> Self {
        let libraries = [
            rootfs.join("lib/x86_64-linux-gnu"),
            rootfs.join("usr/lib/x86_64-linux-gnu"),
        ];
        let library_path = std::env::join_paths(&libraries).unwrap_or_default();
        CriuCommand {
            program: rootfs.join("lib64/ld-linux-x86-64.so.2"),
            leading_args: vec![
                "--library-path".into(),
                library_path,
                rootfs.join("usr/sbin/criu").into_os_string(),
            ],
        }
    }

    /// The rootfs at [`DEFAULT_CRIU_ROOTFS`] if it holds a `criu`, else
    /// `criu` on `PATH`.
    pub fn locate() -> Self {
        let rootfs = Path::new(DEFAULT_CRIU_ROOTFS);
        if rootfs.join("usr/sbin/criu").is_file() {
            CriuCommand::from_rootfs(rootfs)
        } else {
            CriuCommand::binary("criu")
        }
    }

    /// A readable name of what is started, for messages.
    pub fn describe(&self) -> String {
        match self.leading_args.last() {
            Some(criu) => Path::new(criu).display().to_string(),
            None => self.program.display().to_string(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.program);
        command
            .args(&self.leading_args)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }
}

/// What the engine's containers allow CRIU to do (see the module's
/// documentation): they cannot be dumped whole, so this is the last
/// blocker once CRIU passes.
const CONTAINERS_CHECKPOINTABLE: bool = false;

/// Whether a memory snapshot can be taken here, with `criu`, on the running
/// kernel; the first blocker if not.
pub fn probe(criu: &CriuCommand) -> CheckpointSupport {
    let kernel = running_kernel();
    match probe_criu(criu, kernel) {
        Err(reason) => CheckpointSupport::Unavailable(reason),
        Ok(version) => judge_container_shape(version, CONTAINERS_CHECKPOINTABLE),
    }
}

/// [`probe`] of [`CriuCommand::locate`], run once per process and kept (the
/// kernel, CRIU and the engine do not change under a running server).
pub fn support() -> &'static CheckpointSupport {
    static SUPPORT: std::sync::OnceLock<CheckpointSupport> = std::sync::OnceLock::new();
    SUPPORT.get_or_init(|| probe(&CriuCommand::locate()))
}

/// The running kernel's release, `None` if it cannot be read or parsed (the
/// kernel-dependent checks are then skipped: `criu check` still runs).
fn running_kernel() -> Option<KernelRelease> {
    let uname = rustix::system::uname();
    parse_kernel_release(&uname.release().to_string_lossy())
}

/// CRIU's version if it runs, is recent enough for `kernel` and passes
/// `criu check`.
fn probe_criu(
    criu: &CriuCommand,
    kernel: Option<KernelRelease>,
) -> Result<CriuVersion, Unavailable> {
    let program = criu.describe();
    let output =
        criu.command(&["--version"])
            .output()
            .map_err(|error| Unavailable::CriuMissing {
                program: program.clone(),
                error: error.to_string(),
            })?;
    let printed = String::from_utf8_lossy(&output.stdout);
    let version = match parse_criu_version(&printed) {
        Some(version) if output.status.success() => version,
        _ => {
            let mut said = printed.trim().to_owned();
            said.push_str(String::from_utf8_lossy(&output.stderr).trim());
            return Err(Unavailable::CriuVersionUnreadable {
                program,
                output: said,
            });
        }
    };
    judge_version(version, kernel)?;
    let check = criu
        .command(&["check"])
        .output()
        .map_err(|error| Unavailable::CriuMissing {
            program: program.clone(),
            error: error.to_string(),
        })?;
    if !check.status.success() {
        return Err(Unavailable::CriuCheckFailed {
            detail: last_error_line(&check.stdout, &check.stderr),
        });
    }
    Ok(version)
}

/// Whether CRIU `version` can dump what a container holds on `kernel`.
fn judge_version(version: CriuVersion, kernel: Option<KernelRelease>) -> Result<(), Unavailable> {
    if version >= MIN_CRIU {
        return Ok(());
    }
    match kernel {
        Some(kernel) if kernel >= PASSCRED_RESTRICTED_KERNEL => {
            Err(Unavailable::CriuTooOldForKernel { version, kernel })
        }
        _ => Err(Unavailable::CriuTooOld { version }),
    }
}

/// The answer once CRIU passed: available only if the containers can be
/// dumped whole.
fn judge_container_shape(version: CriuVersion, checkpointable: bool) -> CheckpointSupport {
    if checkpointable {
        CheckpointSupport::Available { version }
    } else {
        CheckpointSupport::Unavailable(Unavailable::ContainerShape)
    }
}

/// The version in `criu --version`'s output (`Version: 4.2.1`, or `4.2`).
pub fn parse_criu_version(output: &str) -> Option<CriuVersion> {
    let line = output
        .lines()
        .find_map(|line| line.trim().strip_prefix("Version:"))?;
    let mut numbers = line.trim().split('.').map(|part| {
        let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<u32>().ok()
    });
    let major = numbers.next()??;
    let minor = numbers.next()??;
    let patch = numbers.next().flatten().unwrap_or(0);
    Some(CriuVersion {
        major,
        minor,
        patch,
    })
}

/// The `major.minor` of a kernel release string (`6.18.44-fc-v1252`).
pub fn parse_kernel_release(release: &str) -> Option<KernelRelease> {
    let mut numbers = release.trim().split(['.', '-']);
    let major = numbers.next()?.parse().ok()?;
    let minor_part = numbers.next()?;
    let digits: String = minor_part
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let minor = digits.parse().ok()?;
    Some(KernelRelease { major, minor })
}

/// The line that says why `criu check` failed: its last `Error` line, else
/// its last line at all.
fn last_error_line(stdout: &[u8], stderr: &[u8]) -> String {
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(stdout),
        String::from_utf8_lossy(stderr)
    );
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect();
    lines
        .iter()
        .rev()
        .find(|line| line.contains("Error"))
        .or(lines.last())
        .map(|line| (*line).to_owned())
        .unwrap_or_else(|| "it printed nothing".to_owned())
}

#[cfg(test)]
mod tests;
