//! A cluster's nodes as an API replica shows them to admin keys
//! (`GET /v1/cluster/nodes`).

use serde::{Deserialize, Serialize};

/// One node: `{"object": "cluster.node", ...}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct ClusterNode {
    pub id: String,
    pub object: String,
    /// Where replicas reach it.
    pub address: String,
    /// `ready`, `draining` or `lost`.
    pub status: String,
    /// Unix seconds of its last heartbeat.
    pub heartbeat_at: i64,
    pub started_at: i64,
    /// Its containers that are not deleted or lost.
    pub containers: u64,
    pub max_containers: u64,
    /// Memory its sandboxes together may use.
    pub memory_bytes: u64,
    /// Memory limits of its containers holding processes, together.
    pub claimed_memory_bytes: u64,
    pub images: Vec<String>,
    /// `v2`, `v1` or `disabled`.
    pub cgroup_layout: String,
    pub version: String,
}
