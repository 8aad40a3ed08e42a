//! What this server is in a cluster, and how API replicas and nodes find
//! and wait for each other.

use serde::{Deserialize, Serialize};

use super::{ByteSize, Role, Secret};

/// The server's role in a cluster and how replicas and nodes meet.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterSettings {
    /// What this server is in a cluster: `all` (a single box:
    /// the API and the engine), `node` (the engine, registered in the
    /// shared store, taking requests only from API replicas) or `api` (a
    /// stateless API replica that places containers on nodes and routes
    /// each request to its container's node).
    pub role: Role,
    /// A node's name in the cluster (default: the host name).
    pub node_id: String,
    /// Where API replicas reach this node (`http://10.0.0.7:8080`;
    /// default: `http://` and the listen address).
    pub node_address: String,
    /// The secret API replicas show nodes (`X-Shellgate-Cluster-Secret`):
    /// at least 32 characters, the same on every replica and node.
    pub cluster_secret: Secret,
    /// How often a node heart-beats.
    pub node_heartbeat_secs: u64,
    /// A node silent this long (no heartbeat) that does not answer a
    /// replica either (its `/livez`) is lost, with its containers.
    pub node_lost_after_secs: u64,
    /// An API replica waits this long for a node to begin its answer to a
    /// forwarded request before it asks the node whether it is alive at
    /// all (its `/livez`, given as long to answer): a node that answers
    /// that is waited for again (a long exec, a create building an image,
    /// a model's turn), one that does not is given up on (502
    /// `node_unreachable`; a safe request any node can answer is tried on
    /// another). A node declared lost meanwhile ends the wait at once.
    pub node_answer_timeout_secs: u64,
    /// Containers a node holds at most (placement's count of room).
    pub max_containers_per_node: u64,
    /// Bytes of snapshots restored from the object store a node keeps on
    /// its disk for the next restore (least recently used removed first;
    /// one in use is never removed, so a larger one can pass it).
    pub snapshot_cache_bytes: ByteSize,
    /// Bytes of project images fetched from the object store a node keeps
    /// on its disk for the next create (least recently used removed first,
    /// fetched again when next used; never one a container on the node
    /// uses, nor one the node built itself or the operator's).
    pub image_cache_bytes: ByteSize,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        Self {
            role: Role::All,
            node_id: String::new(),
            node_address: String::new(),
            cluster_secret: Secret::default(),
            node_heartbeat_secs: 2,
            node_lost_after_secs: 15,
            node_answer_timeout_secs: 5,
            max_containers_per_node: 5_000,
            snapshot_cache_bytes: ByteSize {
                text: "20g".to_owned(),
                bytes: 20 << 30,
            },
            image_cache_bytes: ByteSize {
                text: "50g".to_owned(),
                bytes: 50 << 30,
            },
        }
    }
}

impl ClusterSettings {
    /// This server's node name: empty on a single box (its containers'
    /// `node_id`), the configured one (or the host name) on a node.
    pub fn node_name(&self) -> String {
        match self.role {
            Role::All | Role::Api => String::new(),
            Role::Node if !self.node_id.is_empty() => self.node_id.clone(),
            Role::Node => std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|name| name.trim().to_owned())
                .ok()
                .filter(|name| !name.is_empty())
                .unwrap_or_else(|| "node".to_owned()),
        }
    }
}
