//! Background responses while they run: how to stop each (`Running`), and
//! the stream events of a run so far for any number of readers (`EventLog`).
//! `AppState` holds the registry; the Responses handlers fill and read it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use shellgate_wire::responses as wire;

/// Background responses still running: how to stop each, and their events.
#[derive(Default)]
pub struct Running(Mutex<HashMap<String, (tokio::task::AbortHandle, Arc<EventLog>)>>);

impl Running {
    pub(crate) fn insert(&self, id: &str, handle: tokio::task::AbortHandle, log: Arc<EventLog>) {
        self.lock().insert(id.to_owned(), (handle, log));
    }

    pub(crate) fn remove(&self, id: &str) -> Option<tokio::task::AbortHandle> {
        self.lock().remove(id).map(|(handle, _)| handle)
    }

    pub(crate) fn log(&self, id: &str) -> Option<Arc<EventLog>> {
        self.lock().get(id).map(|(_, log)| Arc::clone(log))
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, (tokio::task::AbortHandle, Arc<EventLog>)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The stream events of a run so far, for any number of readers: the
/// client that started it, and any that resumes it with `GET ?stream=true`.
#[derive(Default)]
pub struct EventLog {
    /// The events, and whether the run is over.
    events: Mutex<(Vec<wire::StreamEvent>, bool)>,
    added: tokio::sync::Notify,
}

impl EventLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, (Vec<wire::StreamEvent>, bool)> {
        self.events.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn push(&self, event: wire::StreamEvent) {
        self.lock().0.push(event);
        self.added.notify_waiters();
    }

    pub(crate) fn close(&self) {
        self.lock().1 = true;
        self.added.notify_waiters();
    }

    /// The event at `cursor`, waiting for it; `None` once the run is over.
    pub(crate) async fn next(&self, cursor: usize) -> Option<wire::StreamEvent> {
        loop {
            let notified = self.added.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let events = self.lock();
                if let Some(event) = events.0.get(cursor) {
                    return Some(event.clone());
                }
                if events.1 {
                    return None;
                }
            }
            notified.await;
        }
    }
}
