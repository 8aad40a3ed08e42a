//! A cluster's nodes (the `nodes` table, issue 22): each node registers
//! itself when it starts and heart-beats; API replicas read them to place
//! new containers and mark those that went silent lost, with their
//! containers, exactly once.

use crate::connection::Store;
use crate::containers::close_session;
use crate::error::Result;
use crate::sql::Row;
use crate::sql::StoredText;
use crate::usage::utc_day;
use crate::values::{ContainerStatus, NodeStatus};

/// A node as it registered and last heart-beat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRow {
    pub id: String,
    /// Where API replicas reach it (`http://10.0.0.7:8080`).
    pub address: String,
    pub status: NodeStatus,
    /// Memory its sandboxes together may use (its engine's ceiling).
    pub memory_bytes: u64,
    /// Containers it holds at most.
    pub max_containers: u64,
    /// The images it can make containers of.
    pub images: Vec<String>,
    /// `v2`, `v1` or `disabled`.
    pub cgroup_layout: String,
    /// The shellgate version it runs.
    pub version: String,
    pub started_at: i64,
    pub heartbeat_at: i64,
}

/// A node with what it holds now: what placement weighs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLoad {
    pub node: NodeRow,
    /// Its containers that are not deleted or lost.
    pub containers: u64,
    /// Memory limits of its containers that hold processes.
    pub claimed_memory: u64,
}

/// `images` as stored: a JSON array of names.
struct ImageList(Vec<String>);

impl StoredText for ImageList {
    fn from_text(text: &str) -> Option<Self> {
        serde_json::from_str(text).ok().map(Self)
    }
}

fn image_list(images: &[String]) -> Result<String> {
    serde_json::to_string(images).map_err(|e| crate::error::StoreError::Corrupt {
        table: "nodes",
        column: "images",
        value: e.to_string(),
    })
}

const NODE_COLUMNS: &str = "id, address, status, memory_bytes, max_containers, images, \
     cgroup_layout, version, started_at, heartbeat_at";

fn node_row(row: &Row) -> Result<NodeRow> {
    Ok(NodeRow {
        id: row.get(0)?,
        address: row.get(1)?,
        status: row.text(2, "nodes", "status")?,
        memory_bytes: row.number(3, "nodes", "memory_bytes")?,
        max_containers: row.number(4, "nodes", "max_containers")?,
        images: row.text::<ImageList>(5, "nodes", "images")?.0,
        cgroup_layout: row.get(6)?,
        version: row.get(7)?,
        started_at: row.get(8)?,
        heartbeat_at: row.get(9)?,
    })
}

impl Store {
    /// Registers a node starting (again): its address, capacity and images,
    /// ready for containers.
    pub fn register_node(&self, row: &NodeRow) -> Result<()> {
        let images =
            serde_json::to_string(&row.images).map_err(|e| crate::error::StoreError::Corrupt {
                table: "nodes",
                column: "images",
                value: e.to_string(),
            })?;
        self.write(|sql| {
            sql.execute(
                &format!(
                    "INSERT INTO nodes ({NODE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
                     ON CONFLICT (id) DO UPDATE SET address = excluded.address, status = excluded.status,
                     memory_bytes = excluded.memory_bytes, max_containers = excluded.max_containers,
                     images = excluded.images, cgroup_layout = excluded.cgroup_layout,
                     version = excluded.version, started_at = excluded.started_at,
                     heartbeat_at = excluded.heartbeat_at"
                ),
                &[
                    &row.id,
                    &row.address,
                    &row.status,
                    &row.memory_bytes,
                    &row.max_containers,
                    &images,
                    &row.cgroup_layout,
                    &row.version,
                    &row.started_at,
                    &row.heartbeat_at,
                ],
            )
        })?;
        Ok(())
    }

    /// A node's heartbeat (with its images now, if given): false if it
    /// was declared lost meanwhile (its containers with it), which it must
    /// then act on.
    pub fn heartbeat(&self, id: &str, now: i64, images: Option<&[String]>) -> Result<bool> {
        let images = images.map(image_list).transpose()?;
        let changed = self.write(|sql| {
            sql.execute(
                "UPDATE nodes SET heartbeat_at = ?2, images = COALESCE(?3, images)
                 WHERE id = ?1 AND status != 'lost'",
                &[&id, &now, &images],
            )
        })?;
        Ok(changed > 0)
    }

    /// Sets a live node's status (draining it, or taking it back); false if
    /// there is no such live node.
    pub fn set_node_status(&self, id: &str, status: NodeStatus) -> Result<bool> {
        let changed = self.write(|sql| {
            sql.execute(
                "UPDATE nodes SET status = ?2 WHERE id = ?1 AND status != 'lost'",
                &[&id, &status],
            )
        })?;
        Ok(changed > 0)
    }

    /// One node.
    pub fn node(&self, id: &str) -> Result<Option<NodeRow>> {
        self.read(|sql| {
            sql.query_opt(
                &format!("SELECT {NODE_COLUMNS} FROM nodes WHERE id = ?1"),
                &[&id],
                node_row,
            )
        })
    }

    /// Every node (without its load: what routing needs), by id.
    pub fn node_rows(&self) -> Result<Vec<NodeRow>> {
        self.read(|sql| {
            sql.query(
                &format!("SELECT {NODE_COLUMNS} FROM nodes ORDER BY id"),
                &[],
                node_row,
            )
        })
    }

    /// Every node with its load, by id.
    pub fn nodes(&self) -> Result<Vec<NodeLoad>> {
        self.read(|sql| {
            let nodes = sql.query(
                &format!("SELECT {NODE_COLUMNS} FROM nodes ORDER BY id"),
                &[],
                node_row,
            )?;
            // Two queries for every node (not two per node): the live
            // containers by node, and the memory claimed on each.
            let counts: Vec<(String, u64)> = sql.query(
                "SELECT node_id, COUNT(*) FROM containers
                 WHERE node_id IS NOT NULL AND status NOT IN ('deleted', 'lost')
                 GROUP BY node_id",
                &[],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )?;
            let claims: Vec<(String, shellgate_wire::MemoryLimit)> = sql.query(
                "SELECT node_id, memory_limit FROM containers
                 WHERE node_id IS NOT NULL AND (session_open = 1 OR status = 'creating')",
                &[],
                |row| Ok((row.get(0)?, row.text(1, "containers", "memory_limit")?)),
            )?;
            let counts: std::collections::HashMap<String, u64> = counts.into_iter().collect();
            let mut claimed = std::collections::HashMap::<String, u64>::new();
            for (node, limit) in claims {
                *claimed.entry(node).or_default() += limit.bytes();
            }
            let loads = nodes
                .into_iter()
                .map(|node| NodeLoad {
                    containers: counts.get(&node.id).copied().unwrap_or(0),
                    claimed_memory: claimed.get(&node.id).copied().unwrap_or(0),
                    node,
                })
                .collect();
            Ok(loads)
        })
    }

    /// Marks lost every live node whose last heartbeat is older than
    /// `cutoff`, and their containers with them (open sessions billed up
    /// to what was recorded): each node and container once, whichever
    /// replica gets there first. Returns the nodes it marked.
    pub fn mark_lost_nodes(&self, cutoff: i64) -> Result<Vec<String>> {
        let day = utc_day();
        self.transaction(|sql| {
            let lost: Vec<String> = sql.query(
                "UPDATE nodes SET status = 'lost' WHERE status != 'lost' AND heartbeat_at < ?1
                 RETURNING id",
                &[&cutoff],
                |row| row.get(0),
            )?;
            for node in &lost {
                let open: Vec<String> = sql.query(
                    "SELECT id FROM containers WHERE node_id = ?1 AND session_open = 1",
                    &[node],
                    |row| row.get(0),
                )?;
                for id in &open {
                    close_session(sql, id, ContainerStatus::Lost, &day)?;
                }
                sql.execute(
                    "UPDATE containers SET status = 'lost' WHERE node_id = ?1 AND status != 'deleted'",
                    &[node],
                )?;
                // What it held open (leases.rs) ended with it.
                sql.execute("DELETE FROM leases WHERE node_id = ?1", &[node])?;
            }
            Ok(lost)
        })
    }

    /// Records that cluster node `node` runs response `id` (its live
    /// events and its cancel are there).
    pub fn set_response_node(&self, id: &str, node: &str) -> Result<()> {
        self.write(|sql| {
            sql.execute(
                "INSERT INTO response_nodes (response_id, node_id) VALUES (?1, ?2)
                 ON CONFLICT (response_id) DO UPDATE SET node_id = excluded.node_id",
                &[&id, &node],
            )
        })?;
        Ok(())
    }

    /// The live node that runs (or ran) response `id`, if one recorded it.
    pub fn response_node(&self, id: &str) -> Result<Option<NodeRow>> {
        self.read(|sql| {
            sql.query_opt(
                &format!(
                    "SELECT {} FROM response_nodes r JOIN nodes n ON n.id = r.node_id
                     WHERE r.response_id = ?1",
                    NODE_COLUMNS
                        .split(", ")
                        .map(|column| format!("n.{column}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                &[&id],
                node_row,
            )
        })
    }

    /// The node a container lives on and its status (whatever its project:
    /// an API replica routes by id; the node checks the project).
    pub fn container_node(&self, id: &str) -> Result<Option<(String, ContainerStatus)>> {
        self.read(|sql| {
            sql.query_opt(
                "SELECT node_id, status FROM containers WHERE id = ?1",
                &[&id],
                |row| Ok((row.get(0)?, row.text(1, "containers", "status")?)),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, heartbeat_at: i64) -> NodeRow {
        NodeRow {
            id: id.into(),
            address: format!("http://{id}:8080"),
            status: NodeStatus::Ready,
            memory_bytes: 8 << 30,
            max_containers: 1000,
            images: vec!["host".into()],
            cgroup_layout: "v2".into(),
            version: "0.1.0".into(),
            started_at: heartbeat_at,
            heartbeat_at,
        }
    }

    #[test]
    fn a_silent_node_is_lost_once_with_its_containers() {
        for store in crate::testing::stores() {
            store.register_node(&node("n1", 100)).unwrap();
            store.register_node(&node("n2", 100)).unwrap();
            for (id, on) in [("c1", "n1"), ("c2", "n1"), ("c3", "n2")] {
                let mut row = crate::tests::container_row(id, "alpha");
                row.node_id = on.into();
                store.insert_container(&row).unwrap();
            }
            store.open_session("c1").unwrap();
            assert!(store.heartbeat("n2", 200, None).unwrap());
            let loads = store.nodes().unwrap();
            assert_eq!(loads[0].containers, 2);
            assert_eq!(loads[0].claimed_memory, 1 << 30);
            assert_eq!(loads[0].node.images, vec!["host".to_owned()]);
            assert_eq!((loads[1].containers, loads[1].claimed_memory), (1, 0));

            assert!(store
                .take_lease("l1", "stream", "alpha", "n1", 1, 100)
                .unwrap());
            assert_eq!(store.mark_lost_nodes(150).unwrap(), vec!["n1".to_owned()]);
            // What the lost node held open ended with it.
            assert!(store
                .take_lease("l2", "stream", "alpha", "n2", 1, 160)
                .unwrap());
            // Once: a second replica finds nothing left to mark.
            assert!(store.mark_lost_nodes(150).unwrap().is_empty());
            assert_eq!(
                store.container_node("c1").unwrap(),
                Some(("n1".into(), ContainerStatus::Lost))
            );
            let c1 = store.container("alpha", "c1").unwrap().unwrap();
            assert!(!c1.session_open);
            assert_eq!(c1.billed_seconds, crate::SESSION_MINIMUM_SECONDS);
            assert_eq!(
                store.container_node("c3").unwrap(),
                Some(("n2".into(), ContainerStatus::Running))
            );
            // A lost node's heartbeat says so; registering again makes it
            // ready, its old containers stay lost.
            assert!(!store.heartbeat("n1", 300, None).unwrap());
            store.register_node(&node("n1", 300)).unwrap();
            assert!(store
                .heartbeat(
                    "n1",
                    301,
                    Some(&["host".to_owned(), "debian-12".to_owned()])
                )
                .unwrap());
            assert_eq!(store.nodes().unwrap()[0].containers, 0);
            assert_eq!(store.nodes().unwrap()[0].node.images.len(), 2);
            assert!(store.set_node_status("n2", NodeStatus::Draining).unwrap());
            assert_eq!(
                store.node("n2").unwrap().unwrap().status,
                NodeStatus::Draining
            );
            assert_eq!(store.containers_on_node("n2").unwrap().len(), 1);
            store.set_response_node("resp_1", "n2").unwrap();
            assert_eq!(store.response_node("resp_1").unwrap().unwrap().id, "n2");
            assert_eq!(store.response_node("resp_2").unwrap(), None);
        }
    }
}
