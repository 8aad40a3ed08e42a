//! What the API layer is told about an image.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde::Serialize;

/// Name of the image made of the host's own system directories.
pub const HOST_IMAGE: &str = "host";

/// One entry of `shellgate image list` (and of `GET /v1/images`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ImageInfo {
    pub name: String,
    pub path: PathBuf,
    #[serde(flatten)]
    pub details: ImageDetails,
}

/// What is known of an image beyond its name, kept in `<name>/info.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ImageDetails {
    /// Bytes of its files (apparent size), measured when it was installed;
    /// `None` for `host` (the host's own `/usr`).
    #[serde(default)]
    pub size_bytes: Option<u64>,
    /// Seconds since the Unix epoch when it was installed.
    #[serde(default)]
    pub created_at: Option<i64>,
    /// Runtime versions, as the end of its build (or `shellgate image
    /// verify`) found them.
    #[serde(default)]
    pub runtimes: std::collections::BTreeMap<String, String>,
    /// The recipe it was built from (`None`: imported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipe: Option<String>,
    /// The recipe's hash (`Recipe::hash` in the engine) of that recipe when it was built: `image build`
    /// does nothing while the recipe still hashes the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipe_hash: Option<String>,
    /// The recipe's snapshot.debian.org time stamp.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// The Debian archive the packages came from: the snapshot, or
    /// deb.debian.org when the snapshot could not be reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<String>,
    /// Every installed Debian package and its version (the lock).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub packages: std::collections::BTreeMap<String, String>,
    /// The wheels unpacked into it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wheels: Vec<WheelLock>,
    /// This build's id. A container records the revision it was made from;
    /// when the image is built or imported again, the previous tree is
    /// retired (kept under `retired/<revision>`) while containers still
    /// use it, so a container keeps its image for life.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Where it was imported from, for an OCI image (`oci-layout`,
    /// `oci-archive` or `docker-archive`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_format: Option<String>,
    /// An OCI image's run configuration (its config blob's `config`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<ImageConfig>,
    /// What an OCI import left out or changed, counted: device nodes and
    /// FIFOs not made, setuid/setgid bits dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neutralised: Option<Neutralised>,
    /// The project an image committed from a container belongs to: only
    /// that project's containers are made from it, and only it lists it.
    /// `None`: the operator's image, every project's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
}

/// An OCI image's run configuration, as its config blob gives it.
///
/// Containers made from the image get `env` (over shellgate's own
/// variables, under a network policy's) and start commands in
/// `working_dir` when the request names no directory. `user`,
/// `entrypoint` and `cmd` are kept and shown: commands run as the sandbox
/// user, and an API command is the command run.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ImageConfig {
    /// `NAME=value` entries, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entrypoint: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cmd: Vec<String>,
}

/// Counts of what an OCI import neutralised.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Neutralised {
    /// Device nodes and FIFOs skipped.
    pub special_files: u64,
    /// Files whose setuid or setgid bit was dropped.
    pub setid_bits: u64,
}

/// A wheel as built into an image, recorded in `info.json`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WheelLock {
    pub project: String,
    pub version: String,
    pub file: String,
    pub sha256: String,
    pub dest: String,
}

/// Where the default image's background build is.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BuildStatus {
    pub image: String,
    /// `building`, `ready` or `failed`.
    pub status: &'static str,
    /// 0.0 to 1.0.
    pub progress: f64,
    /// The builder's latest line, or why it failed.
    pub message: String,
}

/// The background build's status, shared with `/healthz`.
pub type SharedBuildStatus = Arc<Mutex<Option<BuildStatus>>>;
