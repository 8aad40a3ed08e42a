//! The one way every adapter talks to its upstream: post the request body,
//! retry a 429, then read either one JSON answer or an event stream, all
//! under the turn's bounds ([`Budget`]: its deadline, the wait for each
//! piece, the answer's bytes; the stream's lines and events,
//! [`SseLimits`]). What differs per protocol is only where it posts, how
//! it authenticates, and how its answers become a [`Reply`]: a
//! [`Dialect`].

use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::Serialize;
use shellgate_wire::chat::ErrorReply;

use super::sse::{EventReader, SseLimits, Stop};
use super::{DeltaSink, Reply, UpstreamConfig, UpstreamError};

/// How one protocol's answers are read: a whole JSON answer (a server
/// that does not stream) or its events, one at a time.
pub(crate) trait Dialect {
    /// The whole answer.
    type Body: DeserializeOwned;
    /// The `data` of one event.
    type Event: DeserializeOwned;

    /// The reply of a whole answer.
    fn whole(self, body: Self::Body) -> Result<Reply, UpstreamError>;

    /// Takes one event, sending what it adds to `deltas`; `Ok(false)` once
    /// the answer is complete. A tool call's arguments growing past
    /// `max_arguments` bytes is an error as soon as they do.
    fn event(
        &mut self,
        event: Self::Event,
        deltas: Option<&DeltaSink>,
        max_arguments: usize,
    ) -> Result<bool, UpstreamError>;

    /// The reply once the stream ended (or it stopped), or the error of a
    /// stream that said nothing.
    fn finish(self) -> Result<Reply, UpstreamError>;
}

/// How a request proves who sends it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Auth {
    /// `Authorization: Bearer <key>` (OpenAI's).
    Bearer,
    /// The key in this header (Anthropic's `x-api-key`).
    Header(&'static str),
}

/// Where one adapter posts, and how.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Route {
    /// Below the configured URL, e.g. `chat/completions`.
    pub path: &'static str,
    pub auth: Auth,
    /// Headers sent with every request (e.g. an API version).
    pub headers: &'static [(&'static str, &'static str)],
}

/// What every adapter holds: where its upstream is, and an HTTP client.
pub(crate) struct Endpoint {
    pub config: UpstreamConfig,
    client: reqwest::Client,
    route: Route,
}

impl Endpoint {
    pub fn new(config: UpstreamConfig, route: Route) -> Result<Self, UpstreamError> {
        let client = reqwest::Client::builder()
            .connect_timeout(config.timeout)
            .build()
            .map_err(|e| UpstreamError::Unreachable(e.to_string()))?;
        Ok(Self {
            config,
            client,
            route,
        })
    }

    /// One turn: posts `body`, then reads the answer as `dialect` says.
    /// Text of a whole answer goes to `deltas` at once; every tool call of
    /// the reply is within the turn's cap.
    pub async fn complete<D: Dialect>(
        &self,
        body: &impl Serialize,
        dialect: D,
        deltas: Option<&DeltaSink>,
    ) -> Result<Reply, UpstreamError> {
        self.complete_with(body, &[], dialect, deltas).await
    }

    /// [`Endpoint::complete`] with `headers` of this request's own beside
    /// the route's (a client's `anthropic-beta`).
    pub async fn complete_with<D: Dialect>(
        &self,
        body: &impl Serialize,
        headers: &[(&str, String)],
        mut dialect: D,
        deltas: Option<&DeltaSink>,
    ) -> Result<Reply, UpstreamError> {
        // Serialized once, however many attempts a 429 takes.
        let body = serde_json::to_vec(body)
            .map_err(|e| UpstreamError::Malformed(format!("the request: {e}")))?;
        let max_arguments = self.config.limits.max_tool_call_bytes;
        let mut budget = Budget::turn(&self.config);
        let path = self.route.path;
        let response = send(&self.config, &budget, || self.request(path, &body, headers)).await?;
        let reply = if is_event_stream(&response) {
            // An event may hold the whole answer (the Responses API's
            // `response.completed` repeats it): its caps are the answer's.
            let answer = self.config.limits.max_answer_bytes;
            let sse = SseLimits {
                max_line_bytes: answer,
                max_event_bytes: answer,
            };
            read_events_within(response, &mut budget, sse, |event: D::Event| {
                dialect.event(event, deltas, max_arguments)
            })
            .await?;
            dialect.finish()?
        } else {
            let reply = dialect.whole(json_body(response, &mut budget).await?)?;
            if let Some(sink) = deltas {
                // In the reply's order: its reasoning and other items come
                // before its text.
                for reasoning in &reply.reasoning {
                    let _ = sink.send(super::Delta::Reasoning(reasoning.clone()));
                }
                for native in &reply.native {
                    let _ = sink.send(super::Delta::Native(native.clone()));
                }
                if !reply.text.is_empty() {
                    let _ = sink.send(super::Delta::Text(reply.text.clone()));
                }
            }
            reply
        };
        for call in &reply.tool_calls {
            check_arguments(&call.arguments, max_arguments)?;
        }
        Ok(reply)
    }

    /// Posts `body` to `path` (below the configured URL) and reads the
    /// JSON answer, within one turn's bounds (a side request, such as
    /// Anthropic's `messages/count_tokens`).
    pub async fn post_json<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
        headers: &[(&str, String)],
    ) -> Result<T, UpstreamError> {
        let body = serde_json::to_vec(body)
            .map_err(|e| UpstreamError::Malformed(format!("the request: {e}")))?;
        let mut budget = Budget::turn(&self.config);
        let response = send(&self.config, &budget, || self.request(path, &body, headers)).await?;
        json_body(response, &mut budget).await
    }

    /// One attempt's request.
    fn request(
        &self,
        path: &str,
        body: &[u8],
        headers: &[(&str, String)],
    ) -> reqwest::RequestBuilder {
        let url = format!("{}/{}", self.config.url.trim_end_matches('/'), path);
        let mut request = self
            .client
            .post(url)
            .header("content-type", "application/json")
            .body(body.to_vec());
        for (name, value) in self.route.headers {
            request = request.header(*name, *value);
        }
        for (name, value) in headers {
            request = request.header(*name, value.as_str());
        }
        match (&self.config.api_key, self.route.auth) {
            (Some(key), Auth::Bearer) => request.bearer_auth(key),
            (Some(key), Auth::Header(name)) => request.header(name, key),
            (None, _) => request,
        }
    }

    /// The route's headers and the upstream's key on `request` (what
    /// [`Endpoint::request`] puts on a turn's).
    fn authorize(&self, mut request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        for (name, value) in self.route.headers {
            request = request.header(*name, *value);
        }
        match (&self.config.api_key, self.route.auth) {
            (Some(key), Auth::Bearer) => request.bearer_auth(key),
            (Some(key), Auth::Header(name)) => request.header(name, key),
            (None, _) => request,
        }
    }

    /// Posts `body` as it is (a client's own request) and hands back the
    /// answer as it comes, each piece read within a turn's bounds by a task
    /// of its own (which stops when the receiver is dropped). A 429 is
    /// retried as a turn's is; any other status but 2xx is an error.
    pub async fn forward(&self, body: Vec<u8>) -> Result<super::Forwarded, UpstreamError> {
        let mut budget = Budget::turn(&self.config);
        let url = format!(
            "{}/{}",
            self.config.url.trim_end_matches('/'),
            self.route.path
        );
        let post = || {
            let request = self
                .client
                .post(&url)
                .header("content-type", "application/json")
                .body(body.clone());
            self.authorize(request)
        };
        let mut response = send(&self.config, &budget, post).await?;
        let event_stream = is_event_stream(&response);
        // Room for a few pieces: the reader waits for the client beyond it.
        let (sender, receiver) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            loop {
                let read = tokio::select! {
                    // The client left: the upstream's connection closes now,
                    // not at its next piece.
                    () = sender.closed() => return,
                    read = budget.wait(response.chunk()) => read,
                };
                let piece = match read {
                    Err(e) => Err(e),
                    Ok(Err(e)) => Err(UpstreamError::Unreachable(e.to_string())),
                    Ok(Ok(None)) => return,
                    Ok(Ok(Some(chunk))) => budget.count(chunk.len()).map(|()| chunk.to_vec()),
                };
                let failed = piece.is_err();
                if sender.send(piece).await.is_err() || failed {
                    return;
                }
            }
        });
        Ok(super::Forwarded {
            event_stream,
            body: receiver,
        })
    }

    /// `GET {url}/models`, read for its models' ids, within a short
    /// deadline (a model list is a listing, not a turn).
    pub async fn models(&self) -> Result<Vec<super::UpstreamModel>, UpstreamError> {
        const MODELS_WAIT: Duration = Duration::from_secs(10);
        const MODELS_BYTES: usize = 4 * 1024 * 1024;
        let wait = self.config.timeout.min(MODELS_WAIT);
        let mut budget = Budget {
            per_read: wait,
            deadline: Instant::now()
                .checked_add(wait)
                .map(|at| (at, wait.as_secs())),
            max_bytes: MODELS_BYTES,
            read: 0,
        };
        let url = format!("{}/models", self.config.url.trim_end_matches('/'));
        // One attempt: a list that is rate limited is not worth a wait.
        let config = UpstreamConfig {
            attempts: 1,
            ..self.config.clone()
        };
        let response = send(&config, &budget, || self.authorize(self.client.get(&url))).await?;
        let list: shellgate_wire::models::UpstreamModelList =
            json_body(response, &mut budget).await?;
        Ok(list.data)
    }
}

/// Whether a tool call's arguments are within `limit`.
pub(crate) fn check_arguments(arguments: &str, limit: usize) -> Result<(), UpstreamError> {
    if arguments.len() > limit {
        return Err(UpstreamError::ToolCallTooLarge { limit });
    }
    Ok(())
}

/// Shortens an upstream's error text for a response (bodies can be long).
pub(crate) fn excerpt(text: &str) -> String {
    const MOST: usize = 1000;
    let text = text.trim();
    if text.len() <= MOST {
        return text.to_owned();
    }
    let mut end = MOST;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// What is left of one turn: its deadline, the wait for each piece, and
/// the bytes it may still read.
pub(crate) struct Budget {
    per_read: Duration,
    deadline: Option<(Instant, u64)>,
    max_bytes: usize,
    read: usize,
}

impl Budget {
    /// A turn beginning now.
    pub fn turn(config: &UpstreamConfig) -> Self {
        let limits = config.limits;
        Self {
            per_read: config.timeout,
            deadline: Instant::now()
                .checked_add(limits.turn_timeout)
                .map(|at| (at, limits.turn_timeout.as_secs())),
            max_bytes: limits.max_answer_bytes,
            read: 0,
        }
    }

    /// Only a wait for each piece (no deadline, no cap on the bytes).
    pub fn per_read(per_read: Duration) -> Self {
        Self {
            per_read,
            deadline: None,
            max_bytes: usize::MAX,
            read: 0,
        }
    }

    /// Waits for `future` at most the wait for one piece, and never past
    /// the turn's deadline.
    pub async fn wait<F: std::future::Future>(
        &self,
        future: F,
    ) -> Result<F::Output, UpstreamError> {
        let mut wait = self.per_read;
        if let Some((at, _)) = self.deadline {
            wait = wait.min(at.saturating_duration_since(Instant::now()));
        }
        tokio::time::timeout(wait, future)
            .await
            .map_err(|_| self.timed_out())
    }

    /// The error for a wait that ran out: the turn's, once it is over.
    pub fn timed_out(&self) -> UpstreamError {
        match self.deadline {
            Some((at, seconds)) if Instant::now() >= at => UpstreamError::TurnTimeout { seconds },
            _ => UpstreamError::Timeout {
                seconds: self.per_read.as_secs(),
            },
        }
    }

    /// Sleeps (a backoff), unless that would pass the turn's deadline.
    pub async fn sleep(&self, wait: Duration) -> Result<(), UpstreamError> {
        if let Some((at, seconds)) = self.deadline {
            if Instant::now() + wait >= at {
                return Err(UpstreamError::TurnTimeout { seconds });
            }
        }
        tokio::time::sleep(wait).await;
        Ok(())
    }

    /// Counts `bytes` more of the answer.
    pub fn count(&mut self, bytes: usize) -> Result<(), UpstreamError> {
        self.read = self.read.saturating_add(bytes);
        if self.read > self.max_bytes {
            return Err(UpstreamError::AnswerTooLarge {
                limit: self.max_bytes,
            });
        }
        Ok(())
    }
}

/// Sends a request (made afresh for each attempt by `request`), retrying a
/// 429 with backoff (its `Retry-After` when given, at most 10 s, never past
/// the turn's deadline), and a request that got no answer at all (a
/// connection refused, or a kept-alive one the upstream closed just as the
/// request went out on it), as the providers' own SDKs do; any other status
/// but 2xx is an error with the upstream's message.
async fn send(
    config: &UpstreamConfig,
    budget: &Budget,
    request: impl Fn() -> reqwest::RequestBuilder,
) -> Result<reqwest::Response, UpstreamError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let response = match budget.wait(request().send()).await? {
            Err(e) if e.is_timeout() => return Err(budget.timed_out()),
            Err(e) if (e.is_connect() || e.is_request()) && attempt < config.attempts.max(1) => {
                tracing::debug!("upstream request got no answer ({e}); sending it again");
                budget
                    .sleep(Duration::from_millis(250 * u64::from(attempt)))
                    .await?;
                continue;
            }
            // reqwest's errors name the URL, never the key.
            Err(e) => return Err(UpstreamError::Unreachable(e.to_string())),
            Ok(response) => response,
        };
        let status = response.status().as_u16();
        if status == 429 {
            if attempt >= config.attempts.max(1) {
                return Err(UpstreamError::RateLimited { attempts: attempt });
            }
            let wait = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<f64>().ok())
                .filter(|seconds| seconds.is_finite() && *seconds >= 0.0)
                .map(|seconds| Duration::from_secs_f64(seconds.min(10.0)))
                .unwrap_or(Duration::from_millis(500 << attempt.min(6)))
                .min(Duration::from_secs(10));
            budget.sleep(wait).await?;
            continue;
        }
        if !(200..300).contains(&status) {
            // Only the start of an error body is read: it is only shown.
            const ERROR_BODY_BYTES: usize = 64 * 1024;
            let text = read_body(response, budget, ERROR_BODY_BYTES, false)
                .await
                .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
                .unwrap_or_default();
            let message = serde_json::from_str::<ErrorReply>(&text)
                .ok()
                .and_then(|reply| reply.error)
                .and_then(|error| error.message())
                .unwrap_or(text);
            return Err(UpstreamError::Status {
                status,
                message: excerpt(&message),
            });
        }
        return Ok(response);
    }
}

/// Reads a body, a piece at a time within `budget`, at most `most` bytes:
/// past them it is an error (`strict`) or cut off there.
async fn read_body(
    mut response: reqwest::Response,
    budget: &Budget,
    most: usize,
    strict: bool,
) -> Result<Vec<u8>, UpstreamError> {
    let mut body = Vec::new();
    loop {
        let chunk = match budget.wait(response.chunk()).await? {
            Err(e) => return Err(UpstreamError::Unreachable(e.to_string())),
            Ok(None) => return Ok(body),
            Ok(Some(chunk)) => chunk,
        };
        if body.len() + chunk.len() > most {
            if strict {
                return Err(UpstreamError::AnswerTooLarge { limit: most });
            }
            body.extend_from_slice(&chunk[..most - body.len()]);
            return Ok(body);
        }
        body.extend_from_slice(&chunk);
    }
}

/// Whether a response is an event stream.
fn is_event_stream(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// Reads a whole JSON body, within the turn's budget.
async fn json_body<T: DeserializeOwned>(
    response: reqwest::Response,
    budget: &mut Budget,
) -> Result<T, UpstreamError> {
    let most = budget.max_bytes.saturating_sub(budget.read);
    let bytes = read_body(response, budget, most, true)
        .await
        .map_err(|e| match e {
            UpstreamError::AnswerTooLarge { .. } => UpstreamError::AnswerTooLarge {
                limit: budget.max_bytes,
            },
            other => other,
        })?;
    budget.count(bytes.len())?;
    serde_json::from_slice(&bytes).map_err(|e| {
        if e.is_data() {
            UpstreamError::Malformed(format!("an unexpected answer: {e}"))
        } else {
            UpstreamError::Malformed(format!(
                "not JSON: {}",
                excerpt(&String::from_utf8_lossy(&bytes))
            ))
        }
    })
}

/// Reads a server-sent event stream within a turn's `budget` (its deadline,
/// the wait for each piece, the answer's bytes) and `limits` (its lines and
/// events), calling `on_event` with each event's `data` read as JSON
/// (`[DONE]` ends the stream); `on_event` returns `false` to stop.
pub(crate) async fn read_events_within<T: DeserializeOwned>(
    response: reqwest::Response,
    budget: &mut Budget,
    limits: SseLimits,
    mut on_event: impl FnMut(T) -> Result<bool, UpstreamError>,
) -> Result<(), UpstreamError> {
    use tokio_stream::StreamExt;
    let mut stream = response.bytes_stream();
    let mut reader = EventReader::new(limits);
    let mut each = |event: super::sse::Event| {
        if event.data == "[DONE]" {
            return Ok(false);
        }
        let value: T = serde_json::from_str(&event.data).map_err(|e| {
            UpstreamError::Malformed(if e.is_data() {
                format!("an unexpected event ({e}): {}", excerpt(&event.data))
            } else {
                format!("an unreadable event: {}", excerpt(&event.data))
            })
        })?;
        on_event(value)
    };
    loop {
        let chunk = match budget.wait(stream.next()).await? {
            None => break,
            Some(Err(e)) => return Err(UpstreamError::Unreachable(e.to_string())),
            Some(Ok(chunk)) => chunk,
        };
        budget.count(chunk.len())?;
        match reader.push(&chunk, &mut each) {
            Ok(true) => {}
            Ok(false) => return Ok(()),
            Err(Stop::Sse(e)) => return Err(UpstreamError::Malformed(e.to_string())),
            Err(Stop::Handler(e)) => return Err(e),
        }
    }
    match reader.finish() {
        Some(event) => each(event).map(|_| ()),
        None => Ok(()),
    }
}
