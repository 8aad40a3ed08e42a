//! [`Terminals`]: the web console's terminals (PTY processes started
//! through the console), which people open in a tab and leave by closing
//! it.
//!
//! A terminal lives while someone looks at it: it counts its viewers (the
//! WebSockets and output streams attached to it, through the console or
//! the API), and once the last one has left (or none came after it
//! started) it ends after a grace (`console_terminal_grace_secs`), unless
//! a viewer attaches within it (a reloaded tab reattaches). A closed tab
//! therefore frees what its shell held within the grace, not at the
//! terminal's one-hour timeout.
//!
//! Terminals are bounded per project on their own
//! (`max_console_terminals_per_project`, a lease each in the store, so
//! across a cluster), apart from the concurrent-exec quota: people's open
//! shells never take the project's API execs from it, nor the other way
//! round.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use shellgate_sandbox_api::SandboxBackend;

use crate::config::Config;
use crate::db::Db;
use crate::error::{ApiError, ApiResult};
use crate::lease::Lease;
use shellgate_wire::ErrorCode;

/// The leases' kind.
const TERMINAL_LEASE: &str = "console_terminal";

/// A terminal's process: (container, process).
type Key = (String, String);

/// Who looks at one terminal.
#[derive(Default)]
struct Watched {
    viewers: u32,
    /// How many times it was left with no viewer: a grace ends it only if
    /// nobody came (and left) since the grace began.
    left: u64,
}

pub(crate) struct Terminals {
    engine: Arc<dyn SandboxBackend>,
    store: Db,
    /// This server's node (its leases' holder).
    node: String,
    grace: Duration,
    limit: u32,
    open: Mutex<HashMap<Key, Watched>>,
}

/// A terminal's place in its project's bound, held until it ends.
pub(crate) type TerminalSlot = Lease;

/// One viewer of a terminal, counted until dropped.
pub(crate) struct Viewer {
    terminals: Arc<Terminals>,
    key: Key,
}

impl Terminals {
    pub(crate) fn new(config: &Config, engine: Arc<dyn SandboxBackend>, store: Db) -> Arc<Self> {
        Arc::new(Self {
            engine,
            store,
            node: config.cluster.node_name(),
            grace: Duration::from_secs(config.console.console_terminal_grace_secs),
            limit: config.console.max_console_terminals_per_project,
            open: Mutex::new(HashMap::new()),
        })
    }

    fn open(&self) -> MutexGuard<'_, HashMap<Key, Watched>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place for a new terminal of `project`, or a 429 naming the bound.
    pub(crate) async fn admit(&self, project: &str) -> ApiResult<TerminalSlot> {
        let lease =
            Lease::take(&self.store, TERMINAL_LEASE, project, &self.node, self.limit).await?;
        lease.ok_or_else(|| {
            ApiError::quota(
                ErrorCode::TooManyConsoleTerminals,
                format!(
                    "Project '{project}' has {} console terminals open; the limit \
                     (max_console_terminals_per_project) is {}. End one (End shell), or close \
                     its tab and it ends within {} s.",
                    self.limit,
                    self.limit,
                    self.grace.as_secs()
                ),
            )
        })
    }

    /// Terminal process `process` of `container` started: it ends after the
    /// grace unless a viewer attaches.
    pub(crate) fn started(self: &Arc<Self>, container: &str, process: &str) {
        let key = (container.to_owned(), process.to_owned());
        self.open().insert(key.clone(), Watched::default());
        self.end_after_grace(key, 0);
    }

    /// The terminal's process ended: nothing more to watch.
    pub(crate) fn ended(&self, container: &str, process: &str) {
        self.open()
            .remove(&(container.to_owned(), process.to_owned()));
    }

    /// Counts a viewer of `process` while the returned guard lives, if it
    /// is a console terminal.
    pub(crate) fn viewer(self: &Arc<Self>, container: &str, process: &str) -> Option<Viewer> {
        let key = (container.to_owned(), process.to_owned());
        let mut open = self.open();
        let watched = open.get_mut(&key)?;
        watched.viewers += 1;
        Some(Viewer {
            terminals: Arc::clone(self),
            key,
        })
    }

    /// Ends the terminal after the grace if it is still unwatched then, and
    /// nobody came and went meanwhile (`left` unchanged).
    fn end_after_grace(self: &Arc<Self>, key: Key, left: u64) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let terminals = Arc::clone(self);
        runtime.spawn(async move {
            tokio::time::sleep(terminals.grace).await;
            let unwatched = terminals
                .open()
                .get(&key)
                .is_some_and(|watched| watched.viewers == 0 && watched.left == left);
            if !unwatched {
                return;
            }
            let (container, process) = key;
            tracing::info!(
                container = %container,
                process = %process,
                "a console terminal nobody attached to for {} s ends",
                terminals.grace.as_secs()
            );
            // Gone already (ended, its container suspended or deleted):
            // nothing left to end.
            let _ = terminals.engine.kill_process(&container, &process).await;
        });
    }
}

impl Drop for Viewer {
    fn drop(&mut self) {
        let left = {
            let mut open = self.terminals.open();
            let Some(watched) = open.get_mut(&self.key) else {
                return;
            };
            watched.viewers = watched.viewers.saturating_sub(1);
            if watched.viewers > 0 {
                return;
            }
            watched.left += 1;
            watched.left
        };
        self.terminals
            .end_after_grace(std::mem::take(&mut self.key), left);
    }
}
