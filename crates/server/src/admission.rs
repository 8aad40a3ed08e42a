//! Per-project quotas: how many containers hold processes, the sum of their
//! memory limits, and how many exec requests run at once.
//!
//! A `memory_limit` is a ceiling, not a reservation: thousands of idle `1g`
//! containers fit on a host (an idle one costs about 1.5 MiB), and the host
//! itself is protected by the kernel (every sandbox sits under one parent
//! cgroup whose memory limit keeps the server and the host alive; see the
//! engine). These quotas bound what one tenant may claim, so one tenant can
//! never take every container slot or exec worker from the others.
//!
//! Starting a container (create, or waking a suspended one) is decided by
//! the store, which counts and writes the new state in one transaction
//! under the project's lock: two concurrent starts, on one server or on
//! two API replicas sharing a Postgres store, cannot both take the last
//! slot.
//!
//! Execs at once are counted here on a single box; a cluster's node spends
//! credits of the project's quota shared through the store
//! (`exec_credits`), so the limit holds across every node, not per node.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use shellgate_store::{ContainerRow, Quotas, Refusal};
use shellgate_wire::MemoryLimit;

use crate::config::{Config, Role};
use crate::db::Db;
use crate::error::{ApiError, ApiResult};
use crate::exec_credits::{Credit, ExecCredits};
use shellgate_wire::ErrorCode;

/// One project's admission state on this server.
#[derive(Default)]
struct Gate {
    execs: Arc<AtomicU32>,
}

pub struct Admission {
    /// Where the running containers' memory limits are read.
    db: Db,
    max_running: u32,
    max_memory: u64,
    max_execs: u32,
    projects: Mutex<HashMap<String, Gate>>,
    /// A cluster node's share of the quotas (`None` on a single box).
    credits: Option<Arc<ExecCredits>>,
}

/// Counts one exec request of a project until released or dropped.
pub enum ExecPermit {
    /// Counted on this server (a single box).
    Counted(Counted),
    /// A credit of the cluster-wide count (a node).
    Credit(Credit),
}

pub struct Counted(Arc<AtomicU32>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl ExecPermit {
    /// Gives the slot back, waiting until every server would see it free:
    /// a client told its exec ended may start another at once.
    pub async fn release(self) {
        match self {
            Self::Counted(counted) => drop(counted),
            Self::Credit(credit) => credit.release().await,
        }
    }
}

fn gib(bytes: u64) -> String {
    let gib = bytes as f64 / (1u64 << 30) as f64;
    format!("{gib:.0} GiB")
}

impl Admission {
    pub fn new(config: &Config, db: Db) -> Self {
        Self {
            max_running: config.sandbox.max_running_containers_per_project,
            // Validated at start-up; an unparsable value cannot reach here.
            max_memory: config.sandbox.max_memory_per_project.bytes(),
            max_execs: config.sandbox.max_execs_per_project,
            projects: Mutex::new(HashMap::new()),
            credits: (config.cluster.role == Role::Node).then(|| {
                ExecCredits::new(
                    db.clone(),
                    &config.cluster.node_name(),
                    config.sandbox.max_execs_per_project,
                )
            }),
            db,
        }
    }

    /// The task that tends a node's exec credits (giving spares back when
    /// idle or wanted elsewhere), for as long as the node serves; `None`
    /// on a single box.
    pub(crate) fn credit_keeper(&self) -> Option<impl std::future::Future<Output = ()>> {
        self.credits
            .as_ref()
            .map(|credits| Arc::clone(credits).keep())
    }

    /// Writes this node's exec credits to the store again (its rows were
    /// dropped when it was declared lost; the execs it runs still count).
    pub(crate) fn rewrite_credits(&self) {
        if let Some(credits) = &self.credits {
            credits.rewrite_all();
        }
    }

    fn with_gate<T>(&self, project: &str, f: impl FnOnce(&Gate) -> T) -> T {
        let mut projects = self.projects.lock().unwrap_or_else(|p| p.into_inner());
        f(projects.entry(project.to_owned()).or_default())
    }

    /// Admits one more exec request of `project`, or refuses with a 429
    /// naming the limit.
    pub async fn exec(&self, project: &str) -> ApiResult<ExecPermit> {
        if let Some(credits) = &self.credits {
            return match credits.acquire(project).await? {
                Some(credit) => Ok(ExecPermit::Credit(credit)),
                None => Err(self.too_many_execs(project, self.max_execs, " across the cluster")),
            };
        }
        let counter = self.with_gate(project, |gate| Arc::clone(&gate.execs));
        let before = counter.fetch_add(1, Ordering::SeqCst);
        let permit = ExecPermit::Counted(Counted(counter));
        if before >= self.max_execs {
            return Err(self.too_many_execs(project, before, ""));
        }
        Ok(permit)
    }

    fn too_many_execs(&self, project: &str, running: u32, where_: &str) -> ApiError {
        ApiError::quota(
            ErrorCode::TooManyConcurrentExecs,
            format!(
                "Project '{project}' already has {running} exec requests running{where_}; the \
                 limit (max_execs_per_project) is {}. Wait for one to finish.",
                self.max_execs
            ),
        )
    }

    /// The running-container quotas, as the store decides them.
    pub(crate) fn quotas(&self) -> Quotas {
        Quotas {
            max_running: self.max_running,
            max_memory_bytes: self.max_memory,
        }
    }

    /// Writes a new container's row (status `creating`) if its project's
    /// quotas admit it, or refuses with a 429 naming the limit.
    pub async fn insert_container(&self, row: ContainerRow) -> ApiResult<()> {
        let quotas = self.quotas();
        let (project, id, memory) = (row.project.clone(), row.id.clone(), row.memory_limit);
        let decision = self
            .db
            .run(move |s| s.insert_container_within(&row, quotas))
            .await?;
        decision.map_err(|refusal| self.refused(&project, &id, memory, refusal))
    }

    /// Opens a session of suspended container `id` (of `memory`) if its
    /// project's quotas admit it, or refuses with a 429 naming the limit.
    pub async fn open_session(
        &self,
        project: &str,
        id: &str,
        memory: MemoryLimit,
    ) -> ApiResult<()> {
        let quotas = self.quotas();
        let (owner, key) = (project.to_owned(), id.to_owned());
        let decision = self
            .db
            .run(move |s| s.open_session_within(&owner, &key, memory, quotas))
            .await?;
        decision.map_err(|refusal| self.refused(project, id, memory, refusal))
    }

    fn refused(&self, project: &str, id: &str, memory: MemoryLimit, refusal: Refusal) -> ApiError {
        match refusal {
            Refusal::Lost => ApiError::container_lost(id),
            Refusal::Running { running } => ApiError::quota(
                ErrorCode::TooManyRunningContainers,
                format!(
                    "Project '{project}' has {running} running containers; the limit \
                     (max_running_containers_per_project) is {}. Delete one, or let idle ones be \
                     suspended.",
                    self.max_running
                ),
            ),
            Refusal::Memory { claimed } => ApiError::quota(
                ErrorCode::ProjectMemoryExceeded,
                format!(
                    "Project '{project}' has running containers with memory limits of {} in \
                     all; another of {} would pass the limit (max_memory_per_project) of {}.",
                    gib(claimed),
                    memory.as_str(),
                    gib(self.max_memory)
                ),
            ),
        }
    }

    /// How much of its limits `project` uses now (the console's usage page).
    pub async fn quota(&self, project: &str) -> ApiResult<shellgate_wire::console::Quota> {
        use shellgate_wire::console::{Meter, Quota};
        let execs = match &self.credits {
            Some(credits) => credits.in_use(project).await?,
            None => u64::from(self.with_gate(project, |gate| gate.execs.load(Ordering::SeqCst))),
        };
        let owner = project.to_owned();
        let load = self.db.run(move |s| s.active_load(&owner)).await?;
        Ok(Quota {
            running_containers: Meter {
                used: load.containers,
                limit: u64::from(self.max_running),
            },
            memory_bytes: Meter {
                used: load.memory_bytes,
                limit: self.max_memory,
            },
            concurrent_execs: Meter {
                used: execs,
                limit: u64::from(self.max_execs),
            },
        })
    }
}
