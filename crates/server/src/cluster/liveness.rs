//! Whether a node a replica is waiting on is still there. A forwarded
//! request may rightly take long before its first byte (a synchronous exec
//! with a long `timeout_ms`, a create waiting for an image, a model's
//! turn, a large upload), so a replica never cuts one at a fixed time.
//! Instead, once an answer is `node_answer_timeout_secs` late, it asks
//! whether the node is alive at all: it is if anything it was sent was
//! answered within that time, or if its `/livez` answers within it (one
//! probe per node at a time, its outcome shared by every request waiting
//! on that node). A node alive is waited for again; one that is not (a
//! stalled process, whose kernel still accepts connections; a partition)
//! is given up on. A node declared lost ends every wait on it at once.
//!
//! The same question decides whether a node silent in the store (its
//! heartbeats later than `node_lost_after_secs`) is lost: the sweep
//! declares it lost only if it does not answer either, and requests for
//! its containers go to it while it does.
//!
//! A node that failed its probe and has answered nothing since is a
//! suspect: requests any node can answer, and creates, go to others first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shellgate_store::{NodeRow, NodeStatus};

use super::directory::Directory;
use crate::db::Db;

/// How often a wait looks at the node's row (the directory re-reads the
/// nodes once a second) and at how late the answer is.
const TICK: Duration = Duration::from_millis(500);

/// Why a replica stopped waiting for a node's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Silence {
    /// The node was declared lost, or is silent past the limit.
    Lost,
    /// Its answer was late and it did not answer its liveness probe.
    Unresponsive,
}

/// What a replica last heard from one node.
#[derive(Default)]
struct Heard {
    /// When it last answered anything (a forwarded request, a probe).
    answered: Option<Instant>,
    /// When it last failed to (a probe, a connection refused).
    failed: Option<Instant>,
    /// Held while one request probes it.
    probing: Arc<tokio::sync::Mutex<()>>,
}

impl Heard {
    /// Whether it failed, and answered nothing since, within `within`.
    fn suspect(&self, within: Duration) -> bool {
        self.failed.is_some_and(|failed| {
            failed.elapsed() < within && self.answered.is_none_or(|answered| answered < failed)
        })
    }

    fn answered_within(&self, within: Duration) -> bool {
        self.answered
            .is_some_and(|answered| answered.elapsed() < within)
    }
}

/// A replica's view of which nodes answer.
pub(crate) struct Liveness {
    /// How late an answer may be before the node is asked.
    patience: Duration,
    heard: Mutex<HashMap<String, Heard>>,
}

impl Liveness {
    pub(crate) fn new(patience: Duration) -> Self {
        Self {
            patience,
            heard: Mutex::default(),
        }
    }

    fn heard(&self) -> std::sync::MutexGuard<'_, HashMap<String, Heard>> {
        self.heard
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Node `id` answered something just now.
    pub(crate) fn answered(&self, id: &str) {
        self.heard().entry(id.to_owned()).or_default().answered = Some(Instant::now());
    }

    /// Node `id` failed to answer just now.
    pub(crate) fn failed(&self, id: &str) {
        self.heard().entry(id.to_owned()).or_default().failed = Some(Instant::now());
    }

    /// The nodes that failed within `within` and answered nothing since.
    pub(crate) fn suspects(&self, within: Duration) -> Vec<String> {
        self.heard()
            .iter()
            .filter(|(_, heard)| heard.suspect(within))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Whether `node` is alive: it answered something lately, or its
    /// `/livez` answers now, within the patience. One probe per node at a
    /// time; a request that waited for another's probe takes its outcome.
    pub(crate) async fn answers(&self, client: &reqwest::Client, node: &NodeRow) -> bool {
        let probing = {
            let mut heard = self.heard();
            let heard = heard.entry(node.id.clone()).or_default();
            if heard.answered_within(self.patience) {
                return true;
            }
            Arc::clone(&heard.probing)
        };
        let _probing = probing.lock().await;
        {
            let heard = self.heard();
            if let Some(heard) = heard.get(&node.id) {
                if heard.answered_within(self.patience) {
                    return true;
                }
                if heard.suspect(self.patience) {
                    return false;
                }
            }
        }
        let probe = client
            .get(format!("{}/livez", node.address))
            .timeout(self.patience)
            .send()
            .await;
        match probe {
            Ok(_) => {
                self.answered(&node.id);
                true
            }
            Err(error) => {
                tracing::warn!(node = %node.id, "the node did not answer its liveness probe: {error}");
                self.failed(&node.id);
                false
            }
        }
    }

    /// Waits as long as `node` is alive, which a forwarded request's
    /// answer is raced against: returns only when the node was declared
    /// lost, or its answer is late and it answers no probe. Its row is
    /// looked at while a probe runs too.
    pub(crate) async fn watch(
        &self,
        client: &reqwest::Client,
        directory: &Directory,
        store: &Db,
        node: &NodeRow,
    ) -> Silence {
        let mut asked_at = Instant::now();
        loop {
            tokio::time::sleep(TICK).await;
            if declared_lost(directory, store, node).await {
                return Silence::Lost;
            }
            if asked_at.elapsed() < self.patience {
                continue;
            }
            let probe = self.answers(client, node);
            tokio::pin!(probe);
            let answered = loop {
                tokio::select! {
                    answered = &mut probe => break answered,
                    () = tokio::time::sleep(TICK) => {
                        if declared_lost(directory, store, node).await {
                            return Silence::Lost;
                        }
                    }
                }
            };
            if !answered {
                return Silence::Unresponsive;
            }
            asked_at = Instant::now();
        }
    }
}

/// Whether `node` is declared lost (or gone from the store), as the
/// directory's copy of the nodes says (a store that does not answer says
/// nothing about the node). Silence alone is not: a node whose heartbeats
/// are late may be answering this very request.
async fn declared_lost(directory: &Directory, store: &Db, node: &NodeRow) -> bool {
    directory
        .node(store, &node.id)
        .await
        .is_ok_and(|row| row.is_none_or(|row| row.status == NodeStatus::Lost))
}

#[cfg(test)]
mod tests {
    use super::{Liveness, Silence};
    use crate::cluster::directory::Directory;
    use crate::db::Db;
    use std::time::Duration;

    fn node(id: &str, address: String) -> shellgate_store::NodeRow {
        let now = crate::time::now();
        shellgate_store::NodeRow {
            id: id.into(),
            address,
            status: shellgate_store::NodeStatus::Ready,
            memory_bytes: 1 << 30,
            max_containers: 10,
            images: Vec::new(),
            cgroup_layout: "v2".into(),
            version: "test".into(),
            started_at: now,
            heartbeat_at: now,
        }
    }

    /// A node that accepts connections and never answers them (a stalled
    /// process: its kernel still completes the handshake) is given up on,
    /// and suspect until it answers again; one whose `/livez` answers is
    /// waited for; one declared lost ends the wait.
    #[tokio::test]
    async fn a_wait_ends_when_the_node_answers_no_probe_or_is_declared_lost() {
        let store = Db::new(shellgate_store::Store::in_memory().unwrap());
        let directory = Directory::default();
        let client = reqwest::Client::new();
        let patience = Duration::from_millis(600);

        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stalled = node(
            "stalled",
            format!("http://{}", silent.local_addr().unwrap()),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let alive = node(
            "alive",
            format!("http://{}", listener.local_addr().unwrap()),
        );
        let app = axum::Router::new().route("/livez", axum::routing::get(|| async { "ok" }));
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        for row in [&stalled, &alive] {
            let row = row.clone();
            store.run(move |s| s.register_node(&row)).await.unwrap();
        }

        let liveness = Liveness::new(patience);
        let gave_up = liveness.watch(&client, &directory, &store, &stalled).await;
        assert_eq!(gave_up, Silence::Unresponsive);
        assert_eq!(liveness.suspects(Duration::from_secs(60)), vec!["stalled"]);
        liveness.answered("stalled");
        assert!(liveness.suspects(Duration::from_secs(60)).is_empty());

        // Alive: still waited on after several probes' worth of time.
        let waited = tokio::time::timeout(
            patience * 4,
            liveness.watch(&client, &directory, &store, &alive),
        )
        .await;
        assert!(waited.is_err(), "gave up on a live node: {waited:?}");
        assert!(liveness.suspects(Duration::from_secs(60)).is_empty());

        // Declared lost (the sweep's mark): the wait ends, probe or not.
        store
            .run(|s| s.mark_lost_nodes(i64::MAX, crate::time::now()))
            .await
            .unwrap();
        let gave_up = liveness.watch(&client, &directory, &store, &alive).await;
        assert_eq!(gave_up, Silence::Lost);
        server.abort();
        drop(silent);
    }
}
