//! `GET /console/api/containers/{id}/output`: the output of the container's
//! running exec commands as it comes, as SSE: a `run` event for each run
//! (those already running first, each followed by its output so far as
//! `output` events, stdout and stderr apart), `output` events as pieces arrive, `end` when a run
//! ended, `resync` when this stream fell too far behind (the app reopens
//! it). The stream ends when its session does, as the change stream does.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use shellgate_wire::console::LiveRunEvent;
use tokio::sync::broadcast;

use super::session::{self, Signed};
use super::streams::StreamSlot;
use super::Console;
use crate::error::ApiResult;
use crate::http::Project;
use crate::sandboxes::containers::owned;

/// The `end` event's data.
#[derive(Serialize)]
struct Ended<'a> {
    run_id: &'a str,
}

fn event(name: &str, data: &impl Serialize) -> Option<Event> {
    let json = serde_json::to_string(data).ok()?;
    Some(Event::default().event(name).data(json))
}

pub(super) async fn output(
    State(console): State<Arc<Console>>,
    signed: Signed,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let project = Project(signed.project_of(&headers)?);
    owned(&console.app, &project, &id).await?;
    let slot = console.streams.open(&signed.session.grant.project).await?;
    let mut watch = console.app.live_output.watch(&id);
    let mut first = VecDeque::new();
    for (run, tail) in std::mem::take(&mut watch.running) {
        first.extend(event("run", &run));
        for piece in &tail {
            first.extend(event("output", piece));
        }
    }
    let ended = {
        let (console, token) = (Arc::clone(&console), signed.token.clone());
        Box::pin(async move { session::ended(&console, &token).await })
    };
    let watcher = Watcher {
        pending: first,
        events: watch.events,
        ended,
        _unwatch: Unwatch {
            console,
            container: id,
        },
        _slot: slot,
    };
    let stream = futures_util::stream::unfold(watcher, |mut watcher| async move {
        let event = watcher.next().await?;
        Some((Ok::<_, Infallible>(event), watcher))
    });
    Ok(Sse::new(stream)
        .keep_alive(crate::http::sse_keep_alive())
        .into_response())
}

/// One output stream: the runs going on when it opened (with their output
/// so far), then the container's events, each made into an SSE event only
/// when the client took the one before. The events wait in the
/// container's broadcast channel, shared by every watcher (a stream that
/// fell too far behind is told `resync`), so a client that does not read
/// holds no queue of its own.
struct Watcher {
    /// The opening snapshot's events, not yet taken.
    pending: VecDeque<Event>,
    events: broadcast::Receiver<Arc<LiveRunEvent>>,
    /// Completes when the session ended (signed out, expired, revoked).
    ended: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
    /// After `events` (fields drop in order): the container's entry is
    /// idle only once this stream's receiver is gone.
    _unwatch: Unwatch,
    /// Counted among the project's console streams until dropped.
    _slot: StreamSlot,
}

impl Watcher {
    async fn next(&mut self) -> Option<Event> {
        if let Some(event) = self.pending.pop_front() {
            return Some(event);
        }
        loop {
            let received = tokio::select! {
                () = &mut self.ended => return None,
                received = self.events.recv() => received,
            };
            let next = match received {
                Ok(change) => match &*change {
                    LiveRunEvent::Started(run) => event("run", run),
                    LiveRunEvent::Output(output) => event("output", output),
                    LiveRunEvent::Ended { run_id } => event("end", &Ended { run_id }),
                },
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    Some(Event::default().event("resync").data("{}"))
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            };
            if next.is_some() {
                return next;
            }
        }
    }
}

/// Forgets the container's watch entry, if nothing else needs it, when
/// its stream is dropped (it ended, or its client left).
struct Unwatch {
    console: Arc<Console>,
    container: String,
}

impl Drop for Unwatch {
    fn drop(&mut self) {
        self.console.app.live_output.unwatch(&self.container);
    }
}
