//! [`ExecCredits`]: a cluster node's share of its projects' concurrent-exec
//! quotas (`max_execs_per_project`), exact across the cluster without a
//! store write on every exec.
//!
//! The node takes credits of a project from the store in batches (at most
//! [`BATCH`] at once, never more than the project has left across every
//! node; `shellgate_store`'s `exec_credits`), spends one per exec it
//! admits, and gets it back when the exec ends: an exec through a replica
//! usually finds a credit on its node and touches no row. Spare credits go
//! back to the store when the node has not needed them for
//! [`IDLE_RETURN`], and at once when another node ran out of them (a want:
//! the keeper looks every [`TICK`] while it holds spares). A node that
//! finds none free waits (up to [`SETTLE_WAIT`]) while other nodes may
//! still be giving spares back, and refuses the exec only once every other
//! holder keeps none spare: the project then has exactly its limit
//! running. While a project is contended its credits go one at a time and
//! each goes back as its exec ends; batches resume once the contention is
//! [`CONTENDED_SECS`] old.
//!
//! Every change a node makes to its row is written as the absolute number
//! it holds, one write at a time per project (`Pool::writer`), and what it
//! may spend grows only once the store recorded it: the store never counts
//! less than a node spends. A write that failed is written again by the
//! keeper; a node whose rows were dropped (declared lost, then back)
//! writes them again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use shellgate_store::{CreditAsk, CreditTake};

use crate::db::Db;
use crate::error::ApiResult;
use crate::time::now;

/// The most credits a node takes at once.
pub(crate) const BATCH: u32 = 8;
/// How often the keeper looks for other nodes' wants and idle spares
/// (only while this node holds spares).
const TICK: Duration = Duration::from_millis(100);
/// Spare credits not needed for this long go back to the store.
const IDLE_RETURN: Duration = Duration::from_secs(1);
/// How long after a project last ran out its credits go one at a time.
const CONTENDED_SECS: i64 = 10;
/// The longest an exec waits for other nodes to give back their spares
/// before it is refused (a node that cannot answer, a hung or cut-off
/// one, keeps its credits until it is declared lost).
const SETTLE_WAIT: Duration = Duration::from_secs(3);
/// How often a waiting exec asks again.
const RETRY: Duration = Duration::from_millis(20);

/// One project's credits on this node.
struct Pool {
    project: String,
    state: Mutex<PoolState>,
    /// One store write of this pool at a time, so that the absolute
    /// numbers written arrive in the order they were decided.
    writer: tokio::sync::Mutex<()>,
}

struct PoolState {
    /// Credits the store counts as this node's.
    held: u32,
    /// Execs running on them.
    in_use: u32,
    /// No spare kept: each credit goes back as its exec ends (the row is
    /// exact).
    tight: bool,
    /// When an exec last took a credit.
    last_spent: Instant,
    /// Changes to `held`/`tight`, and the change the store last recorded.
    changed: u64,
    written: u64,
}

impl Pool {
    fn state(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// This node's credits of every project.
pub(crate) struct ExecCredits {
    store: Db,
    node: String,
    limit: u32,
    pools: Mutex<HashMap<String, Arc<Pool>>>,
}

/// One running exec's credit, given back when dropped.
pub(crate) struct Credit {
    credits: Arc<ExecCredits>,
    pool: Arc<Pool>,
    given_back: bool,
}

impl ExecCredits {
    pub(crate) fn new(store: Db, node: &str, limit: u32) -> Arc<Self> {
        Arc::new(Self {
            store,
            node: node.to_owned(),
            limit,
            pools: Mutex::new(HashMap::new()),
        })
    }

    fn pools(&self) -> MutexGuard<'_, HashMap<String, Arc<Pool>>> {
        self.pools.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn pool(&self, project: &str) -> Arc<Pool> {
        let mut pools = self.pools();
        let pool = pools.entry(project.to_owned()).or_insert_with(|| {
            Arc::new(Pool {
                project: project.to_owned(),
                state: Mutex::new(PoolState {
                    held: 0,
                    in_use: 0,
                    tight: false,
                    last_spent: Instant::now(),
                    changed: 0,
                    written: 0,
                }),
                writer: tokio::sync::Mutex::new(()),
            })
        });
        Arc::clone(pool)
    }

    /// A credit this node holds and does not use, if it has one.
    fn spend(self: &Arc<Self>, pool: &Arc<Pool>) -> Option<Credit> {
        let mut state = pool.state();
        if state.in_use >= state.held {
            return None;
        }
        state.in_use += 1;
        state.last_spent = Instant::now();
        Some(Credit {
            credits: Arc::clone(self),
            pool: Arc::clone(pool),
            given_back: false,
        })
    }

    /// A credit for one exec of `project`, or `None` when the project has
    /// its limit running across the cluster.
    pub(crate) async fn acquire(self: &Arc<Self>, project: &str) -> ApiResult<Option<Credit>> {
        let pool = self.pool(project);
        let deadline = Instant::now() + SETTLE_WAIT;
        loop {
            if let Some(credit) = self.spend(&pool) {
                return Ok(Some(credit));
            }
            let writer = pool.writer.lock().await;
            // Another exec may have taken a batch meanwhile.
            if let Some(credit) = self.spend(&pool) {
                return Ok(Some(credit));
            }
            let (held, before) = {
                let state = pool.state();
                (state.held, state.changed)
            };
            let now = now();
            let (project, node, limit) = (project.to_owned(), self.node.clone(), self.limit);
            let answer = self
                .store
                .run(move |store| {
                    store.take_exec_credits(CreditAsk {
                        project: &project,
                        node: &node,
                        held,
                        batch: BATCH,
                        limit,
                        now,
                        contended_since: now - CONTENDED_SECS,
                    })
                })
                .await?;
            let settled = {
                let mut state = pool.state();
                // The store now has what this node held then, plus what it
                // granted; an exec that ended meanwhile left a write to
                // make (its pool is ahead of the store).
                let in_step = state.changed == before;
                state.changed += 1;
                if in_step {
                    state.written = state.changed;
                }
                match answer {
                    CreditTake::Granted { granted, contended } => {
                        state.held += granted;
                        state.tight = contended;
                        state.in_use += 1;
                        state.last_spent = Instant::now();
                        drop(state);
                        drop(writer);
                        return Ok(Some(Credit {
                            credits: Arc::clone(self),
                            pool,
                            given_back: false,
                        }));
                    }
                    CreditTake::Exhausted { settled } => {
                        state.tight = true;
                        settled
                    }
                }
            };
            drop(writer);
            if settled || Instant::now() >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(RETRY).await;
        }
    }

    /// Writes what this node holds of `pool`'s project, if the store's copy
    /// is behind; a failed write is left for the keeper to make again.
    async fn sync(&self, pool: &Arc<Pool>) {
        let _writer = pool.writer.lock().await;
        let (held, exact, version) = {
            let state = pool.state();
            if state.written == state.changed {
                return;
            }
            (state.held, state.tight, state.changed)
        };
        let (project, node) = (pool.project.clone(), self.node.clone());
        let written = self
            .store
            .run(move |store| store.set_exec_credits(&project, &node, held, exact))
            .await;
        match written {
            Ok(()) => {
                let mut state = pool.state();
                state.written = state.written.max(version);
            }
            Err(error) => tracing::warn!(
                project = %pool.project,
                "exec credits not written (written again shortly): {}",
                error.message
            ),
        }
    }

    /// Gives back what `pool` holds beyond what it uses, and keeps no spare
    /// from now on (until it takes a batch again).
    async fn give_back_spares(&self, pool: &Arc<Pool>) {
        {
            let mut state = pool.state();
            state.held = state.in_use;
            state.tight = true;
            state.changed += 1;
        }
        self.sync(pool).await;
    }

    /// Writes every pool again (this node's rows were dropped: it was
    /// declared lost and registered again, its execs still running).
    pub(crate) fn rewrite_all(&self) {
        for pool in self.pools().values() {
            pool.state().changed += 1;
        }
    }

    /// How many execs of `project` run across the cluster (at most: other
    /// nodes' spares count as running).
    pub(crate) async fn in_use(&self, project: &str) -> ApiResult<u64> {
        let here = self
            .pools()
            .get(project)
            .map_or(0, |pool| u64::from(pool.state().in_use));
        let (project, node) = (project.to_owned(), self.node.clone());
        let elsewhere = self
            .store
            .run(move |store| store.exec_credits_held_elsewhere(&project, &node))
            .await?;
        Ok(here + elsewhere)
    }

    /// Every [`TICK`]: spares given back where another node wants them or
    /// they sat idle, failed writes made again, empty pools forgotten.
    pub(crate) async fn keep(self: Arc<Self>) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.tend().await;
        }
    }

    async fn tend(&self) {
        let pools: Vec<Arc<Pool>> = {
            let mut pools = self.pools();
            // Only the map holds an idle, empty, written pool: no exec can
            // be taking from it.
            pools.retain(|_, pool| {
                let state = pool.state();
                Arc::strong_count(pool) > 1
                    || state.held > 0
                    || state.in_use > 0
                    || state.written != state.changed
            });
            pools.values().cloned().collect()
        };
        let loose: Vec<&Arc<Pool>> = pools
            .iter()
            .filter(|pool| {
                let state = pool.state();
                !state.tight && state.held > 0
            })
            .collect();
        if !loose.is_empty() {
            let (node, since) = (self.node.clone(), now() - CONTENDED_SECS);
            match self
                .store
                .run(move |store| store.wanted_exec_credits(&node, since))
                .await
            {
                Ok(wanted) => {
                    for pool in &loose {
                        if wanted.contains(&pool.project) {
                            self.give_back_spares(pool).await;
                        }
                    }
                }
                Err(error) => {
                    tracing::warn!("other nodes' wants of exec credits: {}", error.message)
                }
            }
        }
        for pool in &pools {
            let idle = {
                let state = pool.state();
                !state.tight
                    && state.held > state.in_use
                    && state.last_spent.elapsed() >= IDLE_RETURN
            };
            if idle {
                self.give_back_spares(pool).await;
            } else {
                self.sync(pool).await;
            }
        }
    }
}

impl Credit {
    /// Gives the credit back (once): true if the store must be told (a
    /// tight pool keeps no spare).
    fn give_back(&mut self) -> bool {
        if std::mem::replace(&mut self.given_back, true) {
            return false;
        }
        let mut state = self.pool.state();
        state.in_use = state.in_use.saturating_sub(1);
        if state.tight {
            state.held = state.held.saturating_sub(1);
            state.changed += 1;
        }
        state.tight
    }

    /// Gives the credit back and waits until the store has it, so that a
    /// client told its exec ended can start another on any node at once.
    pub(crate) async fn release(mut self) {
        if self.give_back() {
            self.credits.sync(&self.pool).await;
        }
    }
}

impl Drop for Credit {
    fn drop(&mut self) {
        if !self.give_back() {
            return;
        }
        // Written on a task of its own; without a runtime (the server is
        // ending), the node's next start drops its rows.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (credits, pool) = (Arc::clone(&self.credits), Arc::clone(&self.pool));
            runtime.spawn(async move { credits.sync(&pool).await });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(dir: &crate::testing::TempDir) -> Db {
        Db::new(shellgate_store::Store::open(&dir.path().join("shellgate.db")).unwrap())
    }

    async fn acquired(credits: &Arc<ExecCredits>, project: &str) -> Option<Credit> {
        credits.acquire(project).await.unwrap()
    }

    #[tokio::test]
    async fn nodes_share_a_projects_limit_exactly_and_spares_move_where_wanted() {
        let dir = crate::testing::TempDir::new();
        let store = store(&dir);
        let limit = 5;
        let one = ExecCredits::new(store.clone(), "n1", limit);
        let two = ExecCredits::new(store.clone(), "n2", limit);
        let keepers = [
            tokio::spawn(Arc::clone(&one).keep()),
            tokio::spawn(Arc::clone(&two).keep()),
        ];
        // n1's first exec takes a batch: the whole limit, 4 of it spare.
        let mut running = vec![acquired(&one, "alpha").await.unwrap()];
        assert_eq!(one.pool("alpha").state().held, limit);
        // n2 finds none free, and gets one once n1 gave its spares back.
        running.push(
            acquired(&two, "alpha")
                .await
                .expect("n1's spare moves to n2"),
        );
        // Both nodes fill the rest; exactly the limit runs.
        for n in 0..6 {
            let node = if n % 2 == 0 { &one } else { &two };
            if let Some(credit) = acquired(node, "alpha").await {
                running.push(credit);
            }
        }
        assert_eq!(running.len(), limit as usize);
        for node in [&one, &two] {
            assert!(acquired(node, "alpha").await.is_none());
        }
        assert_eq!(one.in_use("alpha").await.unwrap(), u64::from(limit));
        // Another project is not affected.
        assert!(acquired(&two, "beta").await.is_some());
        // When they end, the limit can run again, on either node.
        for credit in running.drain(..) {
            credit.release().await;
        }
        for n in 0..limit {
            let node = if n % 2 == 0 { &two } else { &one };
            running.push(acquired(node, "alpha").await.expect("freed credits"));
        }
        assert!(acquired(&one, "alpha").await.is_none());
        // A node that starts again (or is lost) holds nothing: its
        // credits come back.
        let on_one = running.len() / 2;
        store
            .run(|store| store.release_exec_credits_of("n1"))
            .await
            .unwrap();
        for _ in 0..on_one {
            running.push(
                acquired(&two, "alpha")
                    .await
                    .expect("n1's credits came back"),
            );
        }
        for keeper in keepers {
            keeper.abort();
        }
    }

    #[tokio::test]
    async fn a_lone_node_keeps_its_spares_while_busy_and_gives_them_back_when_idle() {
        let dir = crate::testing::TempDir::new();
        let store = store(&dir);
        let one = ExecCredits::new(store.clone(), "n1", 64);
        let keeper = tokio::spawn(Arc::clone(&one).keep());
        for _ in 0..20 {
            acquired(&one, "alpha").await.unwrap().release().await;
        }
        // One batch served all twenty.
        assert_eq!(one.pool("alpha").state().held, BATCH);
        let held = || {
            let store = store.clone();
            async move {
                store
                    .run(|store| store.exec_credits_held_elsewhere("alpha", "nobody"))
                    .await
                    .unwrap()
            }
        };
        assert_eq!(held().await, u64::from(BATCH));
        // Idle: given back.
        let mut waits = 0;
        while held().await > 0 {
            waits += 1;
            assert!(waits < 300, "idle spares were never given back");
            tokio::time::sleep(TICK).await;
        }
        keeper.abort();
    }
}
