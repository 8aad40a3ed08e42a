//! Snapshots of containers (`/v1/containers/{id}/snapshots`,
//! `/v1/snapshots`): a container's files saved under an id, from which
//! new containers are made (`snapshot_id` of `POST /v1/containers`) and
//! which `POST /v1/containers/{id}/fork` takes and copies at once.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::containers::{ExpiresAfter, MemoryLimit, NetworkPolicy};

/// `POST /v1/containers/{container_id}/snapshots`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSnapshot {
    /// 1 to 256 characters; the container's name with a suffix when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Up to 16 pairs: keys up to 64 characters, values up to 512.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

/// `POST /v1/containers/{container_id}/image`: the container committed to
/// an image of the project's.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CommitImage {
    /// The image's name: 1 to 64 letters, digits, `.`, `_` or `-`. A name
    /// the project committed before gets a new revision; any other image's
    /// name is refused.
    pub name: String,
}

/// The snapshot object.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct Snapshot {
    pub id: String,
    /// Always `container.snapshot`.
    pub object: String,
    pub name: String,
    pub metadata: BTreeMap<String, String>,
    /// Bytes its files occupy on the host (allocated blocks).
    pub size_bytes: u64,
    pub created_at: i64,
    /// The container it was taken from (which may since be deleted).
    pub container_id: String,
    /// The image the container ran and the image's revision: a container
    /// made from the snapshot runs on that revision, which the snapshot
    /// keeps on the host while it exists.
    pub image: String,
    pub image_revision: Option<String>,
    /// Whether processes' memory was saved (their state resumed in a
    /// copy); `false`: files only, every copy starts with no process.
    pub memory: bool,
    /// Why memory was not saved, when `memory` is `false`.
    pub memory_unavailable_reason: Option<String>,
    /// How long the container's processes were frozen while its files were
    /// copied, in milliseconds (0 for a suspended container).
    pub frozen_ms: u64,
}

/// `POST /v1/containers/{container_id}/fork`: copies of a container, each
/// from one snapshot of it taken at the request. Each copy has the source's
/// memory limit, network policy (its `domain_secrets` placeholders, values
/// supplied again) and expiry unless given here.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkContainer {
    /// How many copies: 1 to 16.
    #[serde(default = "one")]
    pub count: u32,
    /// The copies' name; the source's with `-fork-<n>` when omitted.
    #[serde(default)]
    pub name: Option<String>,
    pub memory_limit: Option<MemoryLimit>,
    pub network_policy: Option<NetworkPolicy>,
    pub expires_after: Option<ExpiresAfter>,
}

fn one() -> u32 {
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fork_defaults_to_one_copy_and_refuses_unknown_keys() {
        let fork: ForkContainer = serde_json::from_str("{}").expect("reads");
        assert_eq!(fork.count, 1, "default count");
        let unknown = serde_json::from_str::<ForkContainer>(r#"{"copies":2}"#);
        assert!(unknown.is_err(), "an unknown key was read: {unknown:?}");
        let snapshot = serde_json::from_str::<CreateSnapshot>(r#"{"name":"a","memory":true}"#);
        assert!(snapshot.is_err(), "an unknown key was read: {snapshot:?}");
    }
}
