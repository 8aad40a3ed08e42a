//! A cluster's nodes (the `nodes` table): each node registers
//! itself when it starts and heart-beats; API replicas read them to place
//! new containers and mark those that went silent lost, with their
//! containers, exactly once. Lost is reversible: a node that comes back
//! with a lost container's disk restores it, unless its tenant deleted it
//! meanwhile; a node's liveness is decided under its row's lock, so a
//! restore and a replica's delete of a lost container never both win.

use shellgate_wire::MemoryLimit;

use crate::connection::Store;
use crate::containers::{admit, bill, close_session, delete_rows, Quotas};
use crate::error::Result;
use crate::sql::Row;
use crate::sql::StoredText;
use crate::usage::utc_day;
use crate::values::{ContainerStatus, NodeStatus};

/// Why an image build or an E2B template build failed with its node's
/// loss (what the build's status says).
pub const BUILD_NODE_LOST: &str =
    "the node running the build stopped answering and was declared lost; start the build again";

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

/// A container a node's engine holds (its disk is there), as the node
/// reports it when it restores its lost containers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldContainer {
    pub id: String,
    /// Whether its processes run (a node that only stalled kept them; one
    /// that restarted did not).
    pub running: bool,
}

/// A lost container given back to its node, and the status it has again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    pub id: String,
    /// `running` (its processes run, a session is open again) or
    /// `suspended` (no processes, or its project's quotas are full now:
    /// the node stops them).
    pub status: ContainerStatus,
}

/// What became of a replica's delete of a container it found lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostDeletion {
    /// Its row is gone (its node, if it comes back, removes its disk).
    Deleted,
    /// Its node is live again: the node deletes it (processes and disk).
    NodeIsLive,
    /// No such container.
    Unknown,
}

/// What a lost container's row says, as a restore reads it.
struct LostRow {
    id: String,
    project: String,
    memory_limit: MemoryLimit,
    lost_from: Option<ContainerStatus>,
    lost_at: Option<i64>,
    last_active_at: i64,
    session_seconds: f64,
}

/// Locks node `id`'s row until the transaction ends and reads its status
/// (`None`: no such node): a restore and a delete of a lost container
/// decide on the same row, one after the other.
fn lock_node(sql: &mut dyn crate::sql::Sql, id: &str) -> Result<Option<NodeStatus>> {
    sql.query_opt(
        "UPDATE nodes SET status = status WHERE id = ?1 RETURNING status",
        &[&id],
        |row| row.text(0, "nodes", "status"),
    )
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
            // Over `containers_active_by_node`: the containers holding
            // processes only, one row per node and memory limit.
            let claims: Vec<(String, shellgate_wire::MemoryLimit, u64)> = sql.query(
                "SELECT node_id, memory_limit, COUNT(*) FROM containers
                 WHERE session_open = 1 OR status = 'creating'
                 GROUP BY node_id, memory_limit",
                &[],
                |row| {
                    Ok((
                        row.get(0)?,
                        row.text(1, "containers", "memory_limit")?,
                        row.get(2)?,
                    ))
                },
            )?;
            let counts: std::collections::HashMap<String, u64> = counts.into_iter().collect();
            let mut claimed = std::collections::HashMap::<String, u64>::new();
            for (node, limit, count) in claims {
                let bytes = limit.bytes().saturating_mul(count);
                let total = claimed.entry(node).or_default();
                *total = total.saturating_add(bytes);
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
    /// `cutoff`, and their containers with them at `now` (each keeping the
    /// status it had, for its node to restore it from if it comes back;
    /// open sessions closed and billed up to what was recorded): each node
    /// and container once, whichever replica gets there first. Returns the
    /// nodes it marked. The image builds and E2B template builds a lost
    /// node ran are failed with [`BUILD_NODE_LOST`] (a node that comes
    /// back and ends one after all records its end as it was).
    pub fn mark_lost_nodes(&self, cutoff: i64, now: i64) -> Result<Vec<String>> {
        let silent: Vec<String> = self
            .silent_nodes(cutoff)?
            .into_iter()
            .map(|node| node.id)
            .collect();
        self.mark_nodes_lost(&silent, cutoff, now)
    }

    /// The live nodes whose last heartbeat is older than `cutoff`: those a
    /// replica asks whether they answer before it declares them lost.
    pub fn silent_nodes(&self, cutoff: i64) -> Result<Vec<NodeRow>> {
        self.read(|sql| {
            sql.query(
                &format!(
                    "SELECT {NODE_COLUMNS} FROM nodes
                     WHERE status != 'lost' AND heartbeat_at < ?1 ORDER BY id"
                ),
                &[&cutoff],
                node_row,
            )
        })
    }

    /// [`mark_lost_nodes`](Self::mark_lost_nodes) for the nodes `ids`
    /// alone (those a replica found silent and not answering it either: a
    /// heartbeat late under load is not a node gone), each only if it is
    /// still silent since before `cutoff`.
    pub fn mark_nodes_lost(&self, ids: &[String], cutoff: i64, now: i64) -> Result<Vec<String>> {
        let day = utc_day();
        self.transaction(|sql| {
            let mut lost = Vec::new();
            for node in ids {
                // Its row decides, under its lock: another replica may have
                // marked it meanwhile, or its heartbeat come.
                let marked = sql.execute(
                    "UPDATE nodes SET status = 'lost'
                     WHERE id = ?1 AND status != 'lost' AND heartbeat_at < ?2",
                    &[node, &cutoff],
                )?;
                if marked > 0 {
                    lost.push(node.clone());
                }
            }
            for node in &lost {
                sql.execute(
                    "UPDATE containers SET lost_from = status, lost_at = ?2, status = 'lost'
                     WHERE node_id = ?1 AND status NOT IN ('deleted', 'lost')",
                    &[node, &now],
                )?;
                let open: Vec<String> = sql.query(
                    "SELECT id FROM containers WHERE node_id = ?1 AND session_open = 1",
                    &[node],
                    |row| row.get(0),
                )?;
                for id in &open {
                    close_session(sql, id, ContainerStatus::Lost, &day)?;
                }
                // What it held open (leases.rs) and the execs it ran
                // (exec_credits.rs) ended with it.
                sql.execute("DELETE FROM leases WHERE node_id = ?1", &[node])?;
                sql.execute("DELETE FROM exec_credits WHERE node_id = ?1", &[node])?;
                // The builds it ran never end otherwise (its restart fails
                // them, but it may never come back).
                crate::image_builds::fail_builds_on_node(sql, node, BUILD_NODE_LOST, now)?;
                crate::e2b_templates::fail_builds_on_node(sql, node, BUILD_NODE_LOST, now)?;
            }
            Ok(lost)
        })
    }

    /// Gives node `node`, live again, back its lost containers whose disks
    /// it still `held`: each as it is now (running, with a session open
    /// again, if its processes run and its project's `quotas` admit it;
    /// else suspended), its idle time as it was when it was lost (the
    /// blind time is not held against its expiry). Containers whose loss
    /// cut their creation short are left to whoever ends that creation.
    /// `None` while the node is still lost (it must register first). The
    /// node's row is locked first: a replica deleting one of them (which
    /// decides on the same row) comes wholly before or wholly after.
    ///
    /// Billing: the session open when the node was lost was closed and
    /// billed then; the blind time is not billed. A container back running
    /// opens a new session, which starts with the command time its node
    /// recorded while it was lost; one back suspended is billed that time
    /// as it is.
    pub fn restore_lost_containers(
        &self,
        node: &str,
        now: i64,
        held: &[HeldContainer],
        quotas: Quotas,
    ) -> Result<Option<Vec<Restored>>> {
        let day = utc_day();
        self.transaction(|sql| {
            let live = lock_node(sql, node)?.is_some_and(|status| status != NodeStatus::Lost);
            if !live {
                return Ok(None);
            }
            let mut lost: Vec<LostRow> = sql
                .query(
                    "SELECT id, project, memory_limit, lost_from, lost_at, last_active_at, session_seconds
                     FROM containers WHERE node_id = ?1 AND status = 'lost'",
                    &[&node],
                    |row| {
                        Ok(LostRow {
                            id: row.get(0)?,
                            project: row.get(1)?,
                            memory_limit: row.text(2, "containers", "memory_limit")?,
                            lost_from: row
                                .get::<Option<String>>(3)?
                                .map(|text| {
                                    ContainerStatus::parse(&text).ok_or_else(|| {
                                        crate::sql::corrupt("containers", "lost_from", text)
                                    })
                                })
                                .transpose()?,
                            lost_at: row.get(4)?,
                            last_active_at: row.get(5)?,
                            session_seconds: row.get(6)?,
                        })
                    },
                )?
                .into_iter()
                .filter(|row| row.lost_from != Some(ContainerStatus::Creating))
                .collect();
            // Projects' admission locks always taken in one order.
            lost.sort_by(|a, b| (&a.project, &a.id).cmp(&(&b.project, &b.id)));
            // By id: a node back with thousands of disks and thousands
            // lost looked each one up in the whole list.
            let disks: std::collections::HashMap<&str, &HeldContainer> =
                held.iter().map(|disk| (disk.id.as_str(), disk)).collect();
            let mut restored = Vec::new();
            for row in lost {
                let Some(disk) = disks.get(row.id.as_str()) else {
                    continue;
                };
                let idle_when_lost = row
                    .lost_at
                    .map_or(0, |lost_at| (lost_at - row.last_active_at).max(0));
                let last_active_at = (now - idle_when_lost).max(row.last_active_at);
                let admitted = disk.running
                    && admit(sql, &row.project, row.memory_limit, quotas)?.is_ok();
                let status = if admitted {
                    ContainerStatus::Running
                } else {
                    // What its node recorded after the loss, as it is.
                    if row.session_seconds > 0.0 {
                        bill(sql, &row.project, &row.id, row.session_seconds, &day)?;
                    }
                    ContainerStatus::Suspended
                };
                sql.execute(
                    "UPDATE containers SET status = ?2, session_open = ?3, last_active_at = ?4,
                     lost_from = NULL, lost_at = NULL WHERE id = ?1",
                    &[&row.id, &status, &admitted, &last_active_at],
                )?;
                restored.push(Restored { id: row.id, status });
            }
            Ok(Some(restored))
        })
    }

    /// Deletes container `id` for a replica that found it lost, if its node
    /// is declared lost (a replica marks a silent node lost first: a node
    /// that comes back unmarked would never look for what was deleted),
    /// else leaves it to the node, live again. Decided under the node's
    /// row lock, as a restore is.
    pub fn delete_lost_container(&self, id: &str) -> Result<LostDeletion> {
        let day = utc_day();
        self.transaction(|sql| {
            let Some(node) = sql.query_opt(
                "SELECT node_id FROM containers WHERE id = ?1",
                &[&id],
                |row| row.get::<String>(0),
            )?
            else {
                return Ok(LostDeletion::Unknown);
            };
            let live = lock_node(sql, &node)?.is_some_and(|status| status != NodeStatus::Lost);
            if live {
                return Ok(LostDeletion::NodeIsLive);
            }
            delete_rows(sql, id, &day)?;
            Ok(LostDeletion::Deleted)
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
            let ask = |node, held| crate::CreditAsk {
                project: "alpha",
                node,
                held,
                batch: 8,
                limit: 2,
                now: 100,
                contended_since: 0,
            };
            let all = crate::CreditTake::Granted {
                granted: 2,
                contended: false,
            };
            assert_eq!(store.take_exec_credits(ask("n1", 0)).unwrap(), all);
            let build = |id: &str, node: &str| crate::ImageBuildRow {
                id: id.into(),
                project: "alpha".into(),
                image: format!("image-{id}"),
                kind: "build".into(),
                status: crate::IMAGE_BUILD_QUEUED.into(),
                reason: None,
                failed_step: None,
                revision: None,
                node_id: node.into(),
                created_at: 100,
                updated_at: 100,
            };
            store.insert_image_build(&build("imgb_1", "n1")).unwrap();
            store.insert_image_build(&build("imgb_2", "n2")).unwrap();
            let template = crate::E2bTemplateRow {
                template_id: "tpl1".into(),
                project: "alpha".into(),
                name: "app".into(),
                build_id: "imgb_1".into(),
                status: crate::TEMPLATE_WAITING.into(),
                spec: "{}".into(),
                reason: None,
                failed_step: None,
                layer_bytes: 0,
                upload_token: "tok".into(),
                created_at: 100,
                updated_at: 100,
            };
            store.begin_e2b_template_build(&template).unwrap();
            assert!(store
                .start_e2b_template_build("tpl1", "imgb_1", "{}", "n1", 100)
                .unwrap());
            assert_eq!(
                store.mark_lost_nodes(150, 150).unwrap(),
                vec!["n1".to_owned()]
            );
            // The builds it ran failed, saying why; another node's not.
            let failed = store.image_build("alpha", "imgb_1").unwrap().unwrap();
            assert_eq!(
                (failed.status.as_str(), failed.reason.as_deref()),
                (crate::IMAGE_BUILD_ERROR, Some(BUILD_NODE_LOST))
            );
            let other = store.image_build("alpha", "imgb_2").unwrap().unwrap();
            assert_eq!(other.status, crate::IMAGE_BUILD_QUEUED);
            let template = store.e2b_template("alpha", "tpl1").unwrap().unwrap();
            assert_eq!(
                (template.status.as_str(), template.reason.as_deref()),
                (crate::TEMPLATE_ERROR, Some(BUILD_NODE_LOST))
            );
            // What the lost node held open, and the execs it ran, ended
            // with it.
            assert!(store
                .take_lease("l2", "stream", "alpha", "n2", 1, 160)
                .unwrap());
            assert_eq!(store.take_exec_credits(ask("n2", 0)).unwrap(), all);
            // Once: a second replica finds nothing left to mark.
            assert!(store.mark_lost_nodes(150, 150).unwrap().is_empty());
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

    /// A silent node that answers the replica is spared (and stays
    /// silent, for the next sweep to ask again); one that does not is
    /// marked, with its containers.
    #[test]
    fn a_silent_node_that_answers_is_not_declared_lost() {
        for store in crate::testing::stores() {
            for (id, beat) in [("n1", 100), ("n2", 100), ("n3", 200)] {
                store.register_node(&node(id, beat)).unwrap();
                let mut row = crate::tests::container_row(&format!("c-{id}"), "alpha");
                row.node_id = id.into();
                store.insert_container(&row).unwrap();
            }
            let silent: Vec<String> = store
                .silent_nodes(150)
                .unwrap()
                .into_iter()
                .map(|node| node.id)
                .collect();
            assert_eq!(silent, ["n1", "n2"]);
            // n2 answered its replica: not named. n3 is, but beats.
            let lost = store
                .mark_nodes_lost(&["n1".to_owned(), "n3".to_owned()], 150, 160)
                .unwrap();
            assert_eq!(lost, ["n1"]);
            assert_eq!(
                store.container_node("c-n2").unwrap(),
                Some(("n2".into(), ContainerStatus::Running))
            );
            assert_eq!(
                store.container_node("c-n1").unwrap(),
                Some(("n1".into(), ContainerStatus::Lost))
            );
            // Still silent: asked again by the next sweep; a beat since
            // takes it off the list.
            assert_eq!(store.silent_nodes(150).unwrap().len(), 1);
            assert!(store.heartbeat("n2", 170, None).unwrap());
            assert!(store.silent_nodes(150).unwrap().is_empty());
            assert!(store.mark_lost_nodes(150, 170).unwrap().is_empty());
        }
    }

    fn held(id: &str, running: bool) -> HeldContainer {
        HeldContainer {
            id: id.into(),
            running,
        }
    }

    fn status(store: &Store, id: &str) -> Option<ContainerStatus> {
        store.container_node(id).unwrap().map(|(_, status)| status)
    }

    const ROOMY: Quotas = Quotas {
        max_running: 100,
        max_memory_bytes: 1 << 40,
    };

    #[test]
    fn a_lost_node_back_with_its_disks_gets_its_containers_back_as_they_were() {
        for store in crate::testing::stores() {
            store.register_node(&node("n1", 100)).unwrap();
            store.register_node(&node("n2", 100)).unwrap();
            for (id, status) in [
                ("running", ContainerStatus::Running),
                ("asleep", ContainerStatus::Suspended),
                ("deleted", ContainerStatus::Running),
                ("diskless", ContainerStatus::Running),
                ("creating", ContainerStatus::Creating),
            ] {
                let mut row = crate::tests::container_row(id, "alpha");
                (row.node_id, row.status, row.last_active_at) = ("n1".into(), status, 90);
                store.insert_container(&row).unwrap();
            }
            for id in ["running", "deleted", "diskless"] {
                store.open_session(id).unwrap();
            }
            store.record_activity("running", 95, 4.0).unwrap();
            // Silent, not yet declared lost: a delete is not the replica's.
            assert_eq!(
                store.delete_lost_container("deleted").unwrap(),
                LostDeletion::NodeIsLive
            );
            // n2 heart-beats; n1 went silent at 100 and is lost at 160.
            assert!(store.heartbeat("n2", 155, None).unwrap());
            assert_eq!(
                store.mark_lost_nodes(150, 160).unwrap(),
                vec!["n1".to_owned()]
            );
            let lost = store.container("alpha", "running").unwrap().unwrap();
            assert_eq!(lost.status, ContainerStatus::Lost);
            assert!(!lost.session_open);
            assert_eq!(lost.billed_seconds, crate::SESSION_MINIMUM_SECONDS);

            // Still lost: nothing is given back, nothing woken or finished.
            assert_eq!(
                store
                    .restore_lost_containers("n1", 170, &[held("running", true)], ROOMY)
                    .unwrap(),
                None
            );
            assert_eq!(
                store
                    .open_session_within("alpha", "asleep", MemoryLimit::OneGb, ROOMY)
                    .unwrap(),
                Err(crate::Refusal::Lost)
            );
            assert!(!store.finish_creating("creating").unwrap());
            // A suspension the stalled node finishes late leaves it lost.
            store
                .close_session("asleep", ContainerStatus::Suspended)
                .unwrap();
            assert_eq!(status(&store, "asleep"), Some(ContainerStatus::Lost));
            // The node, stalled, still writes the time of a command that
            // ran on; the tenant deletes one while its node is lost.
            store.record_activity("running", 96, 2.0).unwrap();
            assert_eq!(
                store.delete_lost_container("deleted").unwrap(),
                LostDeletion::Deleted
            );
            assert_eq!(status(&store, "deleted"), None);
            assert_eq!(
                store.delete_lost_container("nothing").unwrap(),
                LostDeletion::Unknown
            );

            // Back: registered (live), then its containers restored. From
            // its registration on, a replica's delete goes to the node.
            store.register_node(&node("n1", 300)).unwrap();
            assert_eq!(
                store.delete_lost_container("diskless").unwrap(),
                LostDeletion::NodeIsLive
            );
            let disks = [
                held("running", true),
                held("asleep", false),
                held("deleted", true),
                held("creating", true),
            ];
            let restored = store
                .restore_lost_containers("n1", 300, &disks, ROOMY)
                .unwrap()
                .unwrap();
            assert_eq!(
                restored,
                vec![
                    Restored {
                        id: "asleep".into(),
                        status: ContainerStatus::Suspended
                    },
                    Restored {
                        id: "running".into(),
                        status: ContainerStatus::Running
                    },
                ]
            );
            let running = store.container("alpha", "running").unwrap().unwrap();
            assert_eq!(running.status, ContainerStatus::Running);
            assert!(running.session_open);
            // Billed once for the session the loss closed; the time its
            // node recorded since is the new session's.
            assert_eq!(running.billed_seconds, crate::SESSION_MINIMUM_SECONDS);
            assert_eq!(running.session_seconds, 2.0);
            // Idle as long as when it was lost (since 96: 64 s), not for
            // the blind time.
            assert_eq!(running.last_active_at, 300 - 64);
            let asleep = store.container("alpha", "asleep").unwrap().unwrap();
            assert_eq!(
                (asleep.status, asleep.session_open),
                (ContainerStatus::Suspended, false)
            );
            // No disk here: lost it stays; its creation's end is not ours.
            assert_eq!(status(&store, "diskless"), Some(ContainerStatus::Lost));
            assert_eq!(status(&store, "creating"), Some(ContainerStatus::Lost));
            let lost_while_creating: Vec<String> = store
                .containers_to_settle("n1")
                .unwrap()
                .into_iter()
                .filter(|row| row.status == ContainerStatus::Lost)
                .map(|row| row.id)
                .collect();
            assert_eq!(lost_while_creating, vec!["creating".to_owned()]);
            // Given back once.
            assert_eq!(
                store
                    .restore_lost_containers("n1", 301, &disks, ROOMY)
                    .unwrap(),
                Some(Vec::new())
            );
            assert_eq!(store.nodes().unwrap()[0].containers, 2);
        }
    }

    #[test]
    fn a_restart_settles_only_the_rows_being_made_or_with_open_sessions() {
        for store in crate::testing::stores() {
            store.register_node(&node("n1", 100)).unwrap();
            store.register_node(&node("n2", 100)).unwrap();
            for (id, on, status, open) in [
                ("making", "n1", ContainerStatus::Creating, false),
                ("open", "n1", ContainerStatus::Suspended, true),
                ("asleep", "n1", ContainerStatus::Suspended, false),
                ("lost-making", "n2", ContainerStatus::Creating, false),
                ("lost-open", "n2", ContainerStatus::Suspended, true),
            ] {
                let mut row = crate::tests::container_row(id, "alpha");
                row.node_id = on.into();
                row.status = status;
                store.insert_container(&row).unwrap();
                if open {
                    store.open_session(id).unwrap();
                }
            }
            assert!(store.heartbeat("n1", 200, None).unwrap());
            assert_eq!(
                store.mark_lost_nodes(150, 160).unwrap(),
                vec!["n2".to_owned()]
            );
            let settled = |node: &str| -> Vec<String> {
                let rows = store.containers_to_settle(node).unwrap();
                rows.into_iter().map(|row| row.id).collect()
            };
            assert_eq!(settled("n1"), vec!["making".to_owned(), "open".to_owned()]);
            // Of a lost node's, only the one lost while being made.
            assert_eq!(settled("n2"), vec!["lost-making".to_owned()]);
            assert!(settled("n3").is_empty());
        }
    }

    #[test]
    fn a_restored_container_past_its_projects_quota_comes_back_suspended() {
        for store in crate::testing::stores() {
            store.register_node(&node("n1", 100)).unwrap();
            for id in ["a", "b"] {
                let mut row = crate::tests::container_row(id, "alpha");
                row.node_id = "n1".into();
                store.insert_container(&row).unwrap();
                store.open_session(id).unwrap();
            }
            assert_eq!(store.mark_lost_nodes(150, 160).unwrap().len(), 1);
            // While it was lost, the project started another elsewhere.
            let mut other = crate::tests::container_row("elsewhere", "alpha");
            other.node_id = "n2".into();
            store.insert_container(&other).unwrap();
            store.open_session("elsewhere").unwrap();
            store.register_node(&node("n1", 300)).unwrap();
            let quotas = Quotas {
                max_running: 2,
                max_memory_bytes: 1 << 40,
            };
            let restored = store
                .restore_lost_containers("n1", 300, &[held("a", true), held("b", true)], quotas)
                .unwrap()
                .unwrap();
            let statuses: Vec<ContainerStatus> = restored.iter().map(|r| r.status).collect();
            assert_eq!(
                statuses,
                vec![ContainerStatus::Running, ContainerStatus::Suspended]
            );
            assert_eq!(store.active_load("alpha").unwrap().containers, 2);
        }
    }
}
