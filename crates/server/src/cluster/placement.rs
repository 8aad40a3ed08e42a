//! Which node a new container goes to: a live, ready node with room
//! (container slots; the image asked for), the least loaded, counting the
//! creates this replica has sent and not yet seen written; ties broken at
//! random so that two replicas placing at once spread too.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;

use shellgate_store::{NodeLoad, NodeRow, NodeStatus};

/// A replica's placements in flight, by node.
#[derive(Default)]
pub(crate) struct Placements {
    in_flight: Mutex<HashMap<String, u64>>,
}

/// Counts a placement on a node until dropped (the create answered: its
/// row is in the store's counts from then on).
pub(crate) struct Placed<'a> {
    placements: &'a Placements,
    node: String,
}

impl Drop for Placed<'_> {
    fn drop(&mut self) {
        let mut in_flight = self.placements.lock();
        if let Some(count) = in_flight.get_mut(&self.node) {
            *count = count.saturating_sub(1);
        }
    }
}

/// Whether `node` is alive at `now` (it heart-beat within `lost_after`).
pub(crate) fn alive(node: &NodeRow, now: i64, lost_after: i64) -> bool {
    node.status != NodeStatus::Lost && now - node.heartbeat_at <= lost_after
}

fn random() -> u64 {
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

impl Placements {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.in_flight
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The node for a new container (of `image`, if the request named
    /// one), skipping `tried`; `None` if no node has room.
    pub(crate) fn choose(
        &self,
        loads: &[NodeLoad],
        image: Option<&str>,
        tried: &[String],
        now: i64,
        lost_after: i64,
    ) -> Option<(NodeRow, Placed<'_>)> {
        let mut in_flight = self.lock();
        let mut best: Option<(u64, u64, &NodeLoad)> = None;
        for load in loads {
            let node = &load.node;
            let pending = in_flight.get(&node.id).copied().unwrap_or(0);
            let held = load.containers + pending;
            let eligible = node.status == NodeStatus::Ready
                && alive(node, now, lost_after)
                && held < node.max_containers
                && image.is_none_or(|image| node.images.iter().any(|i| i == image))
                && !tried.contains(&node.id);
            if !eligible {
                continue;
            }
            let tie = random();
            if best.is_none_or(|(least, best_tie, _)| (held, tie) < (least, best_tie)) {
                best = Some((held, tie, load));
            }
        }
        let (_, _, load) = best?;
        *in_flight.entry(load.node.id.clone()).or_default() += 1;
        Some((
            load.node.clone(),
            Placed {
                placements: self,
                node: load.node.id.clone(),
            },
        ))
    }

    /// A live node for a request any node can answer, at random.
    pub(crate) fn any(
        loads: &[NodeLoad],
        tried: &[String],
        now: i64,
        lost_after: i64,
    ) -> Option<NodeRow> {
        let live: Vec<&NodeLoad> = loads
            .iter()
            .filter(|load| alive(&load.node, now, lost_after) && !tried.contains(&load.node.id))
            .collect();
        if live.is_empty() {
            return None;
        }
        let pick = usize::try_from(random() % live.len() as u64).unwrap_or(0);
        live.get(pick).map(|load| load.node.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(id: &str, containers: u64, status: NodeStatus, heartbeat_at: i64) -> NodeLoad {
        NodeLoad {
            node: NodeRow {
                id: id.into(),
                address: format!("http://{id}"),
                status,
                memory_bytes: 8 << 30,
                max_containers: 10,
                images: vec!["host".into()],
                cgroup_layout: "v2".into(),
                version: "test".into(),
                started_at: 0,
                heartbeat_at,
            },
            containers,
            claimed_memory: 0,
        }
    }

    #[test]
    fn placement_spreads_over_live_ready_nodes_with_room() {
        let placements = Placements::default();
        let loads = vec![
            load("a", 3, NodeStatus::Ready, 100),
            load("b", 1, NodeStatus::Ready, 100),
            load("c", 0, NodeStatus::Draining, 100),
            load("d", 0, NodeStatus::Ready, 10),
            load("e", 10, NodeStatus::Ready, 100),
        ];
        // b has the fewest; then, with two in flight there, a ties it and
        // each gets picked; c drains, d is silent, e is full.
        let mut held = Vec::new();
        let mut picked = HashMap::new();
        for _ in 0..6 {
            let (node, placed) = placements.choose(&loads, None, &[], 100, 30).unwrap();
            *picked.entry(node.id).or_insert(0) += 1;
            held.push(placed);
        }
        assert_eq!(picked.get("a"), Some(&2));
        assert_eq!(picked.get("b"), Some(&4));
        assert_eq!(picked.len(), 2);
        // Placements answered leave the count.
        held.clear();
        let (node, _) = placements.choose(&loads, None, &[], 100, 30).unwrap();
        assert_eq!(node.id, "b");
        // A tried node is skipped; an image no node has places nowhere.
        let (node, _) = placements
            .choose(&loads, None, &["b".into()], 100, 30)
            .unwrap();
        assert_eq!(node.id, "a");
        assert!(placements
            .choose(&loads, Some("debian-12"), &[], 100, 30)
            .is_none());
        let any = Placements::any(&loads, &["a".into(), "b".into()], 100, 30).unwrap();
        assert!(["c", "e"].contains(&any.id.as_str()));
    }
}
