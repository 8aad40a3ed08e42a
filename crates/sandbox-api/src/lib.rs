//! The sandbox's public face: the [`SandboxBackend`] trait every backend
//! implements (the local namespace engine, `shellgate-sandbox`, today), the
//! requests and results that cross it, [`ImageInfo`] and [`SandboxError`].
//!
//! The model loop and the HTTP server depend on this crate, not on the
//! engine: nothing above the trait knows how a container is made.

pub mod backend;
pub mod dockerfile;
pub mod error;
pub mod fs;
pub mod image;
pub mod image_build;
pub mod network;
pub mod ports;
pub mod process;
pub mod setup_error;

pub use backend::{
    CommandResult, ContainerInfo, ContainerSpec, ContainerState, Outcome, RunRequest,
    SandboxBackend,
};
pub use error::SandboxError;
pub use image::{ImageDetails, ImageInfo};
pub use ports::{PortConnection, PortFailure};
pub use setup_error::{SetupError, SetupStep};
