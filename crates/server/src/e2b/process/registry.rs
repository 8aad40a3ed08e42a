//! What envd names that shellgate does not: the pid and tag of each process
//! started through envd, and the config it was started with, per container
//! (apart from the service so that `AppState` can hold it without importing
//! the handlers).

use std::collections::HashMap;
use std::sync::Mutex;

use shellgate_wire::envd::process::{
    process_selector, ProcessConfig, ProcessInfo, ProcessSelector,
};

use crate::e2b::connect::ConnectError;

/// What envd knows of a process that shellgate does not.
#[derive(Debug, Clone)]
pub(crate) struct Tracked {
    pub(crate) process_id: String,
    pub(crate) tag: Option<String>,
    pub(crate) config: ProcessConfig,
}

/// The processes started through envd, by container and pid, while they
/// live: each entry goes when its process ends (a task awaits it), so a
/// container holds at most the engine's live processes
/// (`process_limits::MAX_LIVE`, 64).
#[derive(Debug, Default)]
pub struct Registry {
    containers: Mutex<HashMap<String, HashMap<u32, Tracked>>>,
}

impl Registry {
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<u32, Tracked>>> {
        // A panic elsewhere while holding it leaves plain data behind.
        self.containers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether a live process of the container carries `tag`.
    pub(crate) fn tag_taken(&self, container: &str, tag: &str) -> bool {
        self.lock()
            .get(container)
            .is_some_and(|live| live.values().any(|t| t.tag.as_deref() == Some(tag)))
    }

    pub(crate) fn insert(&self, container: &str, pid: u32, tracked: Tracked) {
        self.lock()
            .entry(container.to_owned())
            .or_default()
            .insert(pid, tracked);
    }

    /// Forgets a process that ended (only that one: its pid may be reused).
    pub(crate) fn remove(&self, container: &str, pid: u32, process_id: &str) {
        let mut containers = self.lock();
        if let Some(live) = containers.get_mut(container) {
            if live.get(&pid).is_some_and(|t| t.process_id == process_id) {
                live.remove(&pid);
            }
            if live.is_empty() {
                containers.remove(container);
            }
        }
    }

    /// The process a selector names: its pid and what is tracked of it.
    pub(crate) fn find(
        &self,
        container: &str,
        selector: Option<&ProcessSelector>,
    ) -> Result<(u32, Tracked), ConnectError> {
        let selector = selector
            .and_then(|s| s.selector.as_ref())
            .ok_or_else(|| ConnectError::invalid("process: a pid or a tag is required"))?;
        let containers = self.lock();
        let live = containers.get(container);
        let found = match selector {
            process_selector::Selector::Pid(pid) => {
                live.and_then(|l| l.get(pid)).map(|t| (*pid, t.clone()))
            }
            process_selector::Selector::Tag(tag) => live.and_then(|l| {
                l.iter()
                    .find(|(_, t)| t.tag.as_deref() == Some(tag.as_str()))
                    .map(|(pid, t)| (*pid, t.clone()))
            }),
        };
        found.ok_or_else(|| match selector {
            process_selector::Selector::Pid(pid) => {
                ConnectError::not_found(format!("process with pid {pid} not found"))
            }
            process_selector::Selector::Tag(tag) => {
                ConnectError::not_found(format!("process with tag {tag:?} not found"))
            }
        })
    }

    pub(crate) fn list(&self, container: &str) -> Vec<ProcessInfo> {
        let containers = self.lock();
        let mut processes: Vec<ProcessInfo> = containers
            .get(container)
            .map(|live| {
                live.iter()
                    .map(|(pid, t)| ProcessInfo {
                        config: Some(t.config.clone()),
                        pid: *pid,
                        tag: t.tag.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        processes.sort_by_key(|p| p.pid);
        processes
    }
}
