//! Why the helper or init could not set a container up: which step failed
//! ([`SetupStep`]), what it was acting on, and the operating system's error
//! number when a system call failed. The helper sends it to the engine as
//! such (`Report::Error`), and the engine shows it in
//! [`crate::SandboxError::Helper`] with the same words as before the error
//! was typed (`<what it was doing>: <cause>`).

use std::fmt;
use std::io;

use serde::{Deserialize, Serialize};

/// A step of building a container, in the order the helper and init take
/// them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SetupStep {
    /// Marking inherited descriptors close-on-exec.
    CloseDescriptors,
    /// Reading a message from the engine.
    ReceiveMessage,
    /// Decoding a message from the engine.
    DecodeMessage,
    /// Entering a mount namespace of the helper's own.
    UnshareMountNamespace,
    /// Making every mount private (nothing propagates to the host).
    MakeMountsPrivate,
    /// Mounting the container's disk (a loop device or a throwaway tmpfs).
    MountDisk,
    /// Making the disk's standard directories.
    PrepareDisk,
    /// Opening the container's data directory for the engine.
    OpenData,
    /// The pipe that holds init until its id maps are written.
    SyncPipe,
    /// Cloning init into its new namespaces.
    CloneInit,
    /// Denying `setgroups` in the new user namespace (rootless).
    DenySetgroups,
    /// Writing init's uid map.
    WriteUidMap,
    /// Writing init's gid map.
    WriteGidMap,
    /// Letting init go once its maps are written.
    ReleaseInit,
    /// Becoming the user namespace's root (`setresgid`, `setgroups`,
    /// `setresuid`).
    BecomeRoot,
    /// Making a directory of the new root.
    Mkdir,
    /// Bind-mounting a host path into the new root.
    BindMount,
    /// Keeping a bind mount's locked flags on a read-only remount.
    LockDownMount,
    /// Remounting a mount (read-only).
    Remount,
    /// Covering a file with another (a bind over it).
    Cover,
    /// Mounting a tmpfs.
    MountTmpfs,
    /// Creating a file or link in the new root.
    CreateFile,
    /// Naming a layer of the overlay.
    LayerName,
    /// Copying a file into the scratch tmpfs.
    CopyFile,
    /// Mounting an overlay.
    MountOverlay,
    /// Mounting `/proc`.
    MountProc,
    /// Covering `/proc`'s host-revealing files.
    LockDownProc,
    /// Hiding a path of the new root.
    Hide,
    /// Changing directory.
    Chdir,
    /// `pivot_root` into the new root.
    PivotRoot,
    /// Detaching the host's root.
    DetachHostRoot,
    /// Setting the container's host name.
    SetHostname,
    /// Bringing up the loopback interface.
    Loopback,
    /// Routing every address to the loopback (egress through the proxy).
    Routes,
    /// Opening the egress proxy's sockets.
    ProxySockets,
    /// Setting a resource limit.
    ResourceLimit,
    /// Preparing what commands inherit (`/dev/null`, the environment).
    CommandSetup,
    /// Dropping capabilities (the bounding and ambient sets).
    DropCapabilities,
    /// `PR_SET_DUMPABLE` off.
    NotDumpable,
    /// `PR_SET_NO_NEW_PRIVS` on.
    NoNewPrivileges,
    /// Loading the seccomp filter.
    SeccompLoad,
    /// Blocking `SIGCHLD` into a signalfd.
    ChildSignals,
}

/// A setup step that failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub struct SetupError {
    pub step: SetupStep,
    /// What the step was doing, in words (with what it acted on).
    pub context: String,
    /// The operating system's error number, when a system call failed.
    pub errno: Option<i32>,
    /// Why, in words (the system's text for `errno`, or what was wrong);
    /// empty when `context` says it all.
    pub cause: String,
}

impl SetupError {
    /// A step whose system call failed with `error`.
    pub fn os(step: SetupStep, context: impl Into<String>, error: io::Error) -> Self {
        Self {
            step,
            context: context.into(),
            errno: error.raw_os_error(),
            cause: error.to_string(),
        }
    }

    /// A step whose last system call failed (`errno` as it is now).
    pub fn last_os(step: SetupStep, context: impl Into<String>) -> Self {
        Self::os(step, context, io::Error::last_os_error())
    }

    /// A step that failed for a reason of its own, not a system call's.
    pub fn other(step: SetupStep, context: impl Into<String>, cause: impl fmt::Display) -> Self {
        Self {
            step,
            context: context.into(),
            errno: None,
            cause: cause.to_string(),
        }
    }

    /// Cuts `context` and `cause` to at most `bytes` each (on character
    /// boundaries, marked with an ellipsis): a report must fit what the
    /// engine reads.
    pub fn trimmed(&self, bytes: usize) -> Self {
        fn cut(text: &str, bytes: usize) -> String {
            if text.len() <= bytes {
                return text.to_owned();
            }
            let mut end = bytes;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}…", &text[..end])
        }
        Self {
            step: self.step,
            context: cut(&self.context, bytes),
            errno: self.errno,
            cause: cut(&self.cause, bytes),
        }
    }
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.cause.is_empty() {
            f.write_str(&self.context)
        } else {
            write!(f, "{}: {}", self.context, self.cause)
        }
    }
}

/// The result of a setup step.
pub type SetupResult<T> = Result<T, SetupError>;

/// Adds the step and its context to an `io::Result`.
pub trait StepContext<T> {
    fn step(self, step: SetupStep, context: impl FnOnce() -> String) -> SetupResult<T>;
}

impl<T> StepContext<T> for io::Result<T> {
    fn step(self, step: SetupStep, context: impl FnOnce() -> String) -> SetupResult<T> {
        self.map_err(|error| SetupError::os(step, context(), error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_reads_as_before_and_crosses_the_wire_whole() {
        let error = SetupError::os(
            SetupStep::MountProc,
            "mount /proc",
            io::Error::from_raw_os_error(libc::EPERM),
        );
        assert_eq!(error.errno, Some(libc::EPERM));
        assert!(
            error
                .to_string()
                .starts_with("mount /proc: Operation not permitted"),
            "{error}"
        );
        let json = serde_json::to_string(&error).unwrap();
        assert!(json.contains(r#""step":"mount_proc""#), "{json}");
        assert_eq!(serde_json::from_str::<SetupError>(&json).unwrap(), error);
        let plain = SetupError::other(SetupStep::LayerName, "cannot show \"/\" as a layer", "");
        assert_eq!(plain.to_string(), "cannot show \"/\" as a layer");
        let long = SetupError::other(SetupStep::Mkdir, "é".repeat(100), "x".repeat(100));
        let cut = long.trimmed(11);
        assert_eq!(cut.context, format!("{}…", "é".repeat(5)));
        assert_eq!(cut.cause, format!("{}…", "x".repeat(11)));
    }
}
