//! shellgate's own objects beyond OpenAI's API: the images containers are
//! made from (`GET /v1/images`) and the command audit
//! (`GET /v1/containers/{id}/commands`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::outcome::Outcome;

/// An image containers can be made from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct Image {
    /// The image's name (its id).
    pub id: String,
    /// `image`.
    pub object: String,
    pub name: String,
    /// Whether containers that name no image get this one.
    pub default: bool,
    /// Bytes of its files, measured when it was installed (`null` for
    /// `host`, the host's own `/usr`).
    pub size_bytes: Option<u64>,
    /// When it was installed (seconds since the Unix epoch).
    pub created_at: Option<i64>,
    /// Runtime versions (`python`, `node`, ...) as `shellgate image verify`
    /// found them.
    pub runtimes: BTreeMap<String, String>,
    /// What an imported OCI image came as: `oci-layout`, `oci-archive` or
    /// `docker-archive` (absent for other images).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_format: Option<String>,
    /// An imported OCI image's run configuration (absent for other images).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<ImageRunConfig>,
}

/// An OCI image's run configuration, as its config blob gives it.
/// Containers made from the image get `env` as defaults of every command
/// and start commands in `working_dir`; `user`, `entrypoint` and `cmd` are
/// shown, not applied (commands run as the sandbox user, and a command
/// asked for is the command run).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ImageRunConfig {
    /// `NAME=value` entries, in order.
    #[serde(default)]
    pub env: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default)]
    pub entrypoint: Vec<String>,
    #[serde(default)]
    pub cmd: Vec<String>,
}

/// `GET /v1/images`: every image (never paged), and the default's name.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ImageList {
    /// `list`.
    pub object: String,
    pub data: Vec<Image>,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
    /// Always `false`: every image is listed.
    pub has_more: bool,
    pub default_image: String,
}

/// An image build or import (`image.build`): what `POST /v1/images`
/// answers and `GET /v1/images/builds/{id}` shows, with a page of its log.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ImageBuild {
    /// The job's id (`imgb_...`).
    pub id: String,
    /// `image.build`.
    pub object: String,
    /// The image it makes (the project's own).
    pub image: String,
    /// `build` (a Dockerfile and its context) or `import` (an OCI image
    /// layout or a `docker save`/`podman save` archive).
    pub kind: String,
    /// `queued` (waiting for the project's build before it), `building`,
    /// `ready` or `error`.
    pub status: String,
    /// Why it failed (`status: error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ImageBuildError>,
    /// The image revision it installed (`status: ready`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    /// Log entries from the `log_offset` asked for (at most a page).
    pub logs: Vec<ImageBuildLogEntry>,
    /// The offset the next page of the log starts at.
    pub next_log_offset: u64,
}

/// Why an image build failed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ImageBuildError {
    pub message: String,
    /// The Dockerfile step that failed (from 1; absent when the build as
    /// a whole failed: its deadline, the commit, a server stop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<i64>,
}

/// One line of an image build's log.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ImageBuildLogEntry {
    /// RFC 3339.
    pub timestamp: String,
    /// `info`, `warn` (a step's standard error) or `error`.
    pub level: String,
    /// The step (from 1; 0 for the set-up and the commit).
    pub step: u64,
    /// The step's Dockerfile line (0 where none).
    pub line: u64,
    pub message: String,
}

/// One command of a container's command audit (`container.command`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ContainerCommand {
    pub id: String,
    /// `container.command`.
    pub object: String,
    pub container_id: String,
    /// The response whose shell call ran it (`null`: run by `exec`).
    pub response_id: Option<String>,
    /// The command line, a secret's value masked.
    pub command: String,
    pub outcome: Outcome,
    pub duration_ms: u64,
    /// Bytes it wrote to stdout and stderr before any capping.
    pub bytes_out: u64,
    pub created_at: i64,
}
