//! Where a replica finds a container's node without asking the store each
//! time: a container never moves, so its node is cached once known (with
//! the node's incarnation, its `started_at`: a node that registered again
//! since has declared its old containers lost, and those are read again);
//! the nodes themselves (address, status, heartbeat) are re-read when the
//! copy is older than a second, which is also how soon a lost node is seen
//! (by one request at a time: the many waiting on a node's answer, which
//! look at its row twice a second, share one read).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shellgate_store::{ContainerStatus, NodeRow};

use crate::db::Db;
use crate::error::ApiResult;

/// How old the copy of the nodes may be.
const NODES_FRESH: Duration = Duration::from_secs(1);

/// Containers whose node is remembered, at most (then forgotten at once:
/// the store answers again).
const HOMES: usize = 100_000;

/// A container's node and its incarnation when it was looked up.
#[derive(Clone)]
struct Home {
    node: String,
    started_at: i64,
}

/// The nodes by id, as read at an instant.
type NodesCopy = (Instant, Arc<HashMap<String, NodeRow>>);

/// The replica's directory of containers and nodes.
#[derive(Default)]
pub(crate) struct Directory {
    homes: Mutex<HashMap<String, Home>>,
    nodes: Mutex<Option<NodesCopy>>,
    /// Held by the request re-reading the nodes.
    reading: tokio::sync::Mutex<()>,
}

/// Where a container is, as far as routing needs to know.
pub(crate) enum Whereabouts {
    /// No such container.
    Unknown,
    /// On this node (which may have gone silent: the caller checks).
    On(NodeRow),
    /// Lost, or its node is gone from the store.
    Lost,
}

impl Directory {
    /// The copy of the nodes, if it is fresh.
    fn fresh_nodes(&self) -> Option<Arc<HashMap<String, NodeRow>>> {
        self.nodes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .as_ref()
            .filter(|(read_at, _)| read_at.elapsed() < NODES_FRESH)
            .map(|(_, nodes)| Arc::clone(nodes))
    }

    /// The nodes, re-read when the copy is older than [`NODES_FRESH`].
    async fn nodes(&self, store: &Db) -> ApiResult<Arc<HashMap<String, NodeRow>>> {
        if let Some(nodes) = self.fresh_nodes() {
            return Ok(nodes);
        }
        let _reading = self.reading.lock().await;
        // Read meanwhile by the request this one waited for.
        if let Some(nodes) = self.fresh_nodes() {
            return Ok(nodes);
        }
        let rows = store.run(|s| s.node_rows()).await?;
        let nodes: Arc<HashMap<String, NodeRow>> =
            Arc::new(rows.into_iter().map(|row| (row.id.clone(), row)).collect());
        *self
            .nodes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) =
            Some((Instant::now(), Arc::clone(&nodes)));
        Ok(nodes)
    }

    /// Node `id` as last read (at most a second ago; read again if the
    /// copy does not have it: it registered since), if it is registered.
    pub(crate) async fn node(&self, store: &Db, id: &str) -> ApiResult<Option<NodeRow>> {
        if let Some(node) = self.nodes(store).await?.get(id) {
            return Ok(Some(node.clone()));
        }
        self.forget_nodes();
        Ok(self.nodes(store).await?.get(id).cloned())
    }

    /// Drops the copy of the nodes: the next look reads them again.
    fn forget_nodes(&self) {
        *self
            .nodes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
    }

    /// Node `id` as the store has it now (the copy re-read): a node the
    /// copy shows silent may have answered again since it was read.
    pub(crate) async fn node_now(&self, store: &Db, id: &str) -> ApiResult<Option<NodeRow>> {
        self.forget_nodes();
        Ok(self.nodes(store).await?.get(id).cloned())
    }

    /// Where container `id` is.
    pub(crate) async fn locate(&self, store: &Db, id: &str) -> ApiResult<Whereabouts> {
        let nodes = self.nodes(store).await?;
        let remembered = self
            .homes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(id)
            .cloned();
        if let Some(home) = remembered {
            if let Some(node) = nodes
                .get(&home.node)
                .filter(|n| n.started_at == home.started_at)
            {
                return Ok(Whereabouts::On(node.clone()));
            }
        }
        let key = id.to_owned();
        let Some((node_id, status)) = store.run(move |s| s.container_node(&key)).await? else {
            return Ok(Whereabouts::Unknown);
        };
        // A node registered since the copy was read: read them again.
        let nodes = match nodes.get(&node_id) {
            Some(_) => nodes,
            None => {
                self.forget_nodes();
                self.nodes(store).await?
            }
        };
        let Some(node) = nodes.get(&node_id) else {
            return Ok(Whereabouts::Lost);
        };
        if status == ContainerStatus::Lost {
            return Ok(Whereabouts::Lost);
        }
        let mut homes = self
            .homes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if homes.len() >= HOMES {
            homes.clear();
        }
        homes.insert(
            id.to_owned(),
            Home {
                node: node_id,
                started_at: node.started_at,
            },
        );
        Ok(Whereabouts::On(node.clone()))
    }
}
