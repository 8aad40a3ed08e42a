//! The sandbox's directory watchers, apart from the service so that
//! `AppState` can hold them without importing the handlers.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use shellgate_wire::envd::filesystem::FilesystemEvent;

use crate::e2b::connect::{ConnectCode, ConnectError};

/// Most watchers one sandbox may have at once.
pub const MAX_WATCHERS: usize = 16;

/// The sandbox's live watchers (their processes), bounded per sandbox, and
/// the polling watchers' buffers.
#[derive(Default)]
pub struct Watchers {
    pub(super) live: Mutex<HashMap<String, Vec<String>>>,
    pub(super) polling: Mutex<HashMap<String, Arc<PollingWatcher>>>,
}

/// A `CreateWatcher` watcher: events buffered until polled.
pub(super) struct PollingWatcher {
    pub(super) container_id: String,
    /// The id of its current process in the container.
    pub(super) process: Arc<Mutex<String>>,
    /// The last sync marker a poll sent, and the last the script answered.
    pub(super) syncs_sent: std::sync::atomic::AtomicU64,
    pub(super) synced: tokio::sync::watch::Sender<u64>,
    pub(super) events: Mutex<VecDeque<FilesystemEvent>>,
    pub(super) ended: std::sync::atomic::AtomicBool,
    pub(super) last_poll: Mutex<Instant>,
    pub(super) stop: tokio::sync::Notify,
}

impl Watchers {
    pub(super) fn claim(&self, container: &str, process: &str) -> Result<(), ConnectError> {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let list = live.entry(container.to_owned()).or_default();
        if list.len() >= MAX_WATCHERS {
            return Err(ConnectError::new(
                ConnectCode::ResourceExhausted,
                format!("the sandbox already has {MAX_WATCHERS} directory watchers (its limit); stop one first"),
            ));
        }
        list.push(process.to_owned());
        Ok(())
    }

    pub(super) fn release(&self, container: &str, process: &str) {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(list) = live.get_mut(container) {
            list.retain(|p| p != process);
            if list.is_empty() {
                live.remove(container);
            }
        }
    }

    pub(super) fn polling(&self, container: &str, id: &str) -> Option<Arc<PollingWatcher>> {
        let polling = self.polling.lock().unwrap_or_else(|p| p.into_inner());
        polling
            .get(id)
            .filter(|w| w.container_id == container)
            .cloned()
    }
}
