//! `GET /console/api/events`: one console page's live updates, the
//! changes of the projects its session may see as SSE (from
//! [`crate::changes::Changes`]). The app refetches what it shows when told;
//! nothing polls. A stream re-checks its session every few seconds and
//! ends when the session did (signed out, expired, key revoked).

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::State;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use shellgate_wire::console::LiveChange;
use tokio::sync::broadcast;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt as _;

use super::session::{self, Signed};
use super::Console;
use crate::error::ApiResult;
use crate::http::ApiQuery;

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
    let slot = console.streams.open(&signed.session.grant.project).await?;
    let mut changes = console.app.changes.subscribe();
    let (sender, receiver) = tokio::sync::mpsc::channel::<Event>(64);
    let token = signed.token.clone();
    tokio::spawn(async move {
        let _slot = slot;
        let ended = session::ended(&console, &token);
        tokio::pin!(ended);
        loop {
            let event = tokio::select! {
                () = sender.closed() => return,
                () = &mut ended => return,
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
