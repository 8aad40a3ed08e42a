//! [`Changes`]: what changed in the store, told to whoever listens (the
//! console's live pages). The store's triggers write a row per change in
//! the changing transaction itself (`console_changes`); this reads them in
//! order when the store's hook says there are new ones (never on a timer),
//! broadcasts them, and prunes them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shellgate_store::Change;
use tokio::sync::{broadcast, Notify};

use crate::db::Db;
use crate::error::ApiResult;

/// Changes held for streams that fall behind; one further behind is told
/// to refetch everything (`resync`).
const BACKLOG: usize = 1024;
/// How long changes are gathered after a wake before they are read (a
/// burst of writes is one read).
const GATHER: Duration = Duration::from_millis(50);
/// Most changes read at once.
const BATCH: u32 = 500;

/// The store's changes, told to the open streams.
pub(crate) struct Changes {
    changes: broadcast::Sender<Arc<Change>>,
    wake: Arc<Notify>,
    started: AtomicBool,
    /// The task reading them, once started.
    reader: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Default for Changes {
    fn default() -> Self {
        Self {
            changes: broadcast::channel(BACKLOG).0,
            wake: Arc::new(Notify::new()),
            started: AtomicBool::new(false),
            reader: Mutex::new(None),
        }
    }
}

impl Changes {
    /// Starts reading the store's changes (once; later calls do nothing).
    /// What was written before the start is forgotten: no stream was open
    /// to be told.
    pub(crate) async fn start(&self, db: Db) -> ApiResult<()> {
        if self.started.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let wake = Arc::clone(&self.wake);
        let last = db
            .run(move |s| {
                s.on_change(move || wake.notify_one());
                let last = s.last_change()?;
                s.forget_changes(last.saturating_sub(KEPT))?;
                Ok(last)
            })
            .await?;
        let (changes, wake) = (self.changes.clone(), Arc::clone(&self.wake));
        let reader = tokio::spawn(tell_forever(db, changes, wake, last));
        *self.reader.lock().unwrap_or_else(|p| p.into_inner()) = Some(reader);
        Ok(())
    }

    /// Stops reading changes (the server is stopping; its store closes
    /// next).
    pub(crate) fn stop(&self) {
        if let Some(reader) = self.reader.lock().unwrap_or_else(|p| p.into_inner()).take() {
            reader.abort();
        }
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Arc<Change>> {
        self.changes.subscribe()
    }
}

/// Changes kept after they were read: a cluster's servers each read every
/// change (their own consoles' streams), so none prunes what another may
/// not have read yet; one that falls this far behind resyncs its pages.
const KEPT: i64 = 10_000;

/// Reads the changes after `last` whenever the store says there are some,
/// tells them, and prunes them.
async fn tell_forever(
    db: Db,
    changes: broadcast::Sender<Arc<Change>>,
    wake: Arc<Notify>,
    mut last: i64,
) {
    loop {
        wake.notified().await;
        tokio::time::sleep(GATHER).await;
        let pruned = last;
        loop {
            let after = last;
            let batch = match db.run(move |s| s.changes_after(after, BATCH)).await {
                Ok(batch) => batch,
                Err(error) => {
                    tracing::warn!("console live updates: {}", error.message);
                    break;
                }
            };
            let Some(newest) = batch.last().map(|c| c.seq) else {
                break;
            };
            for change in batch {
                // No stream open is not an error: the change is still read
                // and pruned.
                let _ = changes.send(Arc::new(change));
            }
            last = newest;
        }
        // Only what was read is pruned (a wake that found nothing new,
        // as a stale permit can be, writes nothing), and only beyond the
        // newest `KEPT`: the other servers of a cluster read the same rows
        // at their own pace.
        if last > pruned {
            let through = last.saturating_sub(KEPT);
            if let Err(error) = db.run(move |s| s.forget_changes(through)).await {
                tracing::warn!("console live updates: {}", error.message);
            }
        }
    }
}
