//! `GET /console/api/containers/{id}/output`: the output of the container's
//! running exec commands as it comes, as SSE: a `run` event for each run
//! (those already running first, each followed by its output so far as
//! `output` events, stdout and stderr apart), `output` events as pieces arrive, `end` when a run
//! ended, `resync` when this stream fell too far behind (the app reopens
//! it). The stream ends when its session does, as the change stream does.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use shellgate_wire::console::LiveRunEvent;
use tokio::sync::broadcast;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt as _;

use super::session::{self, Signed};
use super::Console;
use crate::containers::owned;
use crate::error::ApiResult;
use crate::http::Project;

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
    let (sender, receiver) = tokio::sync::mpsc::channel::<Event>(64);
    let token = signed.token.clone();
    tokio::spawn(async move {
        let _slot = slot;
        let mut first = Vec::new();
        for (run, tail) in std::mem::take(&mut watch.running) {
            first.extend(event("run", &run));
            for piece in &tail {
                first.extend(event("output", piece));
            }
        }
        for event in first {
            if sender.send(event).await.is_err() {
                console.app.live_output.unwatch(&id);
                return;
            }
        }
        let ended = session::ended(&console, &token);
        tokio::pin!(ended);
        loop {
            let next = tokio::select! {
                () = sender.closed() => break,
                () = &mut ended => break,
                received = watch.events.recv() => match received {
                    Ok(change) => match &*change {
                        LiveRunEvent::Started(run) => event("run", run),
                        LiveRunEvent::Output(output) => event("output", output),
                        LiveRunEvent::Ended { run_id } => {
                            event("end", &Ended { run_id })
                        }
                    },
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        Some(Event::default().event("resync").data("{}"))
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                },
            };
            if let Some(next) = next {
                if sender.send(next).await.is_err() {
                    break;
                }
            }
        }
        drop(watch);
        console.app.live_output.unwatch(&id);
    });
    let stream = ReceiverStream::new(receiver).map(Ok::<_, Infallible>);
    Ok(Sse::new(stream)
        .keep_alive(crate::http::sse_keep_alive())
        .into_response())
}
