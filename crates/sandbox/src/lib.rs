//! shellgate's sandbox engine: persistent, isolated Linux containers that run
//! shell commands.
//!
//! The API layer talks only to [`SandboxBackend`]; [`LocalEngine`] is the
//! local namespace backend. A container is one init process in fresh user,
//! mount, pid, network, UTS, IPC and cgroup namespaces, built by the
//! `shellgate` binary re-executed as a helper ([`helper`]), with cgroup
//! limits ([`cgroup`]), a size-capped disk ([`disk`]), a read-only image
//! ([`image`]) and a seccomp filter. See `ARCHITECTURE.md` for the layers of
//! defence.

pub mod archive;
pub mod backend;
pub mod cgroup;
pub mod checkpoint;
mod children;
pub mod disk;
pub mod engine;
pub mod error;
pub mod files;
pub mod forked_helper;
pub mod fs_ops;
pub mod fs_remove;
pub mod helper;
pub mod image;
mod launcher;
pub mod output;
pub mod protocol;
pub mod sandbox_user;
#[cfg(test)]
mod scratch;
pub mod sys;
pub mod zygote;

pub use backend::{
    CommandResult, ContainerInfo, ContainerSpec, ContainerState, Outcome, RunRequest,
    SandboxBackend,
};
pub use engine::{EngineConfig, LocalEngine};
pub use error::SandboxError;
pub use forked_helper::ForkedHelper;
pub use shellgate_sandbox_api::{PortConnection, PortFailure, SetupError, SetupStep};
