//! Live updates: [`Live`] reads what changed from the store (rows the
//! store's triggers write in the changing transaction, `console_changes`),
//! woken by the store's hook rather than on a timer, and tells every open
//! console stream; `GET /console/api/events` is one such stream (SSE), of
//! the changes of the projects its session may see. The app refetches what
//! it shows when told; nothing polls.
//!
//! A stream re-checks its session every few seconds and ends when the
//! session did (signed out, expired, key revoked).

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use shellgate_store::Change;
use shellgate_wire::console::LiveChange;
use tokio::sync::{broadcast, Notify};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt as _;

use super::session::Signed;
use super::Console;
use crate::db::Db;
use crate::error::ApiResult;
use crate::http::ApiQuery;
use crate::time::now;

/// Changes held for streams that fall behind; one further behind is told
/// to refetch everything (`resync`).
const BACKLOG: usize = 1024;
/// How long changes are gathered after a wake before they are read (a
/// burst of writes is one read).
const GATHER: Duration = Duration::from_millis(50);
/// Most changes read at once.
const BATCH: u32 = 500;
/// How often a stream re-checks that its session still lives.
const SESSION_CHECK: Duration = Duration::from_secs(5);

/// The store's changes, told to the open streams.
pub(crate) struct Live {
    changes: broadcast::Sender<Arc<Change>>,
    wake: Arc<Notify>,
    started: AtomicBool,
}

impl Default for Live {
    fn default() -> Self {
        Self {
            changes: broadcast::channel(BACKLOG).0,
            wake: Arc::new(Notify::new()),
            started: AtomicBool::new(false),
        }
    }
}

impl Live {
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
                s.forget_changes(last)?;
                Ok(last)
            })
            .await?;
        let (changes, wake) = (self.changes.clone(), Arc::clone(&self.wake));
        tokio::spawn(tell_forever(db, changes, wake, last));
        Ok(())
    }

    fn subscribe(&self) -> broadcast::Receiver<Arc<Change>> {
        self.changes.subscribe()
    }
}

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
        if let Err(error) = db.run(move |s| s.forget_changes(last)).await {
            tracing::warn!("console live updates: {}", error.message);
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EventsQuery {
    /// A project, or `*` (admins): every project (EventSource cannot send
    /// the project header).
    project: Option<String>,
}

/// `GET /console/api/events`: the session's projects' changes, as SSE
/// events named by topic (`container`, `command`, `egress`, `response`),
/// `resync` when the stream fell too far behind, and a close when the
/// session ends.
pub(super) async fn events(
    State(console): State<Arc<Console>>,
    signed: Signed,
    ApiQuery(query): ApiQuery<EventsQuery>,
) -> ApiResult<Response> {
    let scope = signed.scope(query.project.as_deref())?;
    let mut changes = console.app.live.subscribe();
    let (sender, receiver) = tokio::sync::mpsc::channel::<Event>(64);
    let token = signed.token.clone();
    tokio::spawn(async move {
        let mut check = tokio::time::interval(SESSION_CHECK);
        check.tick().await;
        loop {
            let event = tokio::select! {
                () = sender.closed() => return,
                _ = check.tick() => {
                    let lookup = token.clone();
                    match console.app.db(move |s| s.console_session(&lookup, now())).await {
                        Ok(Some(_)) => continue,
                        // Ended (or the store failed): the stream ends.
                        _ => return,
                    }
                }
                change = changes.recv() => match change {
                    Ok(change) => {
                        if scope.as_deref().is_some_and(|p| p != change.project) {
                            continue;
                        }
                        let data = LiveChange {
                            project: change.project.clone(),
                            id: change.object_id.clone(),
                            container_id: change.container_id.clone(),
                        };
                        match serde_json::to_string(&data) {
                            Ok(json) => Event::default().event(change.topic.as_str()).data(json),
                            Err(_) => continue,
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        Event::default().event("resync").data("{}")
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            };
            if sender.send(event).await.is_err() {
                return;
            }
        }
    });
    let stream = ReceiverStream::new(receiver).map(Ok::<_, Infallible>);
    Ok(Sse::new(stream)
        .keep_alive(crate::http::sse_keep_alive())
        .into_response())
}
