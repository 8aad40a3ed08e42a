//! Connect-RPC's framing with the JSON codec, as envd speaks it (E2B's
//! in-sandbox API): unary calls are a JSON body each way; streams are
//! *envelopes* — a flags byte, a big-endian `u32` length, that many bytes of
//! JSON — with a last, `0x02`-flagged envelope ending a server stream with
//! `{}` or `{"error": …}`.
//!
//! Everything here is bounded before it is buffered: an envelope's declared
//! length is checked on its 5-byte prefix, so a hostile `0xffffffff` costs
//! nothing; flags other than 0 are refused (compression is never
//! negotiated); a body that ends inside an envelope is an error, never a
//! short message.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio_stream::{Stream, StreamExt};

use crate::error::ApiError;

/// Content type of Connect streams with the JSON codec.
pub const STREAM_JSON: &str = "application/connect+json";

/// Largest unary request body.
pub const MAX_UNARY_BYTES: usize = 16 << 20;
/// Largest envelope of a server-streaming call's request.
pub const MAX_STREAM_REQUEST_BYTES: usize = 4 << 20;
/// Largest envelope of a client stream (`StreamInput`).
pub const MAX_CLIENT_ENVELOPE_BYTES: usize = 1 << 20;

/// An envelope carries a message.
const FLAG_MESSAGE: u8 = 0x00;
/// The message is compressed (never negotiated here).
const FLAG_COMPRESSED: u8 = 0x01;
/// The last envelope of a server stream.
const FLAG_END_STREAM: u8 = 0x02;

/// Connect's error codes (connectrpc.com/docs/protocol#error-codes), the
/// protocol's whole table, though envd's handlers answer only some of them.
#[allow(dead_code)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnectCode {
    Canceled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
}

impl ConnectCode {
    /// The HTTP status of a unary error with this code (Connect's table).
    pub fn status(self) -> StatusCode {
        match self {
            Self::Canceled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
            Self::InvalidArgument | Self::FailedPrecondition | Self::OutOfRange => {
                StatusCode::BAD_REQUEST
            }
            Self::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::AlreadyExists | Self::Aborted => StatusCode::CONFLICT,
            Self::PermissionDenied => StatusCode::FORBIDDEN,
            Self::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
            Self::Unimplemented => StatusCode::NOT_IMPLEMENTED,
            Self::Unknown | Self::Internal | Self::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::Unauthenticated => StatusCode::UNAUTHORIZED,
        }
    }

    /// The code a plain HTTP status stands for (the inverse of
    /// [`ConnectCode::status`], as Connect clients read plain errors).
    pub fn of_status(status: StatusCode) -> Self {
        match status.as_u16() {
            400 => Self::InvalidArgument,
            401 => Self::Unauthenticated,
            403 => Self::PermissionDenied,
            404 => Self::NotFound,
            408 | 504 => Self::DeadlineExceeded,
            409 => Self::AlreadyExists,
            413 => Self::ResourceExhausted,
            429 => Self::ResourceExhausted,
            499 => Self::Canceled,
            501 => Self::Unimplemented,
            502 | 503 => Self::Unavailable,
            _ => Self::Internal,
        }
    }
}

/// A Connect error: rendered as the body of a unary call's error response,
/// or inside a server stream's end envelope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConnectError {
    pub code: ConnectCode,
    pub message: String,
    /// In a server stream: the connection is cut here (the body ends in an
    /// error, never an end envelope), as envd's stream breaks when its
    /// sandbox goes. SDKs probe the sandbox on a cut connection only.
    #[serde(skip)]
    pub cut: bool,
}

impl ConnectError {
    pub fn new(code: ConnectCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            cut: false,
        }
    }

    /// A stream's connection cut short (see [`ConnectError::cut`]); its
    /// code and message are what a unary call would answer.
    pub fn cut(code: ConnectCode, message: impl Into<String>) -> Self {
        Self {
            cut: true,
            ..Self::new(code, message)
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ConnectCode::InvalidArgument, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ConnectCode::NotFound, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ConnectCode::Internal, message)
    }
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message)
    }
}

impl From<ApiError> for ConnectError {
    fn from(error: ApiError) -> Self {
        Self::new(ConnectCode::of_status(error.status()), error.message)
    }
}

impl From<shellgate_sandbox_api::SandboxError> for ConnectError {
    fn from(error: shellgate_sandbox_api::SandboxError) -> Self {
        ApiError::from(error).into()
    }
}

impl IntoResponse for ConnectError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self).unwrap_or_default();
        (
            self.code.status(),
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body,
        )
            .into_response()
    }
}

/// A unary call's request: its JSON body (≤ [`MAX_UNARY_BYTES`]).
pub struct Unary<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Unary<T> {
    type Rejection = ConnectError;

    async fn from_request(request: Request, _state: &S) -> Result<Self, ConnectError> {
        let content_type = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !content_type.starts_with("application/json") {
            return Err(ConnectError::new(
                ConnectCode::Unimplemented,
                format!("unary calls take 'application/json' (Connect's JSON codec), not '{content_type}'"),
            ));
        }
        if let Some(encoding) = request.headers().get("content-encoding") {
            if encoding.as_bytes() != b"identity" {
                return Err(ConnectError::new(
                    ConnectCode::Unimplemented,
                    "compressed requests are not accepted",
                ));
            }
        }
        let body = axum::body::to_bytes(request.into_body(), MAX_UNARY_BYTES)
            .await
            .map_err(|e| ConnectError::invalid(format!("could not read the request: {e}")))?;
        let body: &[u8] = if body.is_empty() { b"{}" } else { &body };
        serde_json::from_slice(body)
            .map(Unary)
            .map_err(|e| ConnectError::invalid(format!("invalid request message: {e}")))
    }
}

/// A unary call's answer: 200 with the JSON message.
pub struct UnaryReply<T>(pub T);

impl<T: Serialize> IntoResponse for UnaryReply<T> {
    fn into_response(self) -> Response {
        match serde_json::to_vec(&self.0) {
            Ok(body) => (
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                body,
            )
                .into_response(),
            Err(e) => {
                ConnectError::internal(format!("could not encode the reply: {e}")).into_response()
            }
        }
    }
}

/// Reads envelopes off a request body, one at a time, each bounded by
/// `max` before any of it is buffered.
pub struct EnvelopeReader {
    body: axum::body::BodyDataStream,
    buffer: Vec<u8>,
    max: usize,
    ended: bool,
}

impl EnvelopeReader {
    pub fn new(body: Body, max: usize) -> Self {
        Self {
            body: body.into_data_stream(),
            buffer: Vec::new(),
            max,
            ended: false,
        }
    }

    /// The next envelope's message; `Ok(None)` when the body ended between
    /// envelopes. A bad prefix, an oversized length or a body that ends
    /// inside an envelope is an `invalid_argument` error.
    pub async fn next_message(&mut self) -> Result<Option<Bytes>, ConnectError> {
        if !self.fill(5).await? {
            return if self.buffer.is_empty() {
                Ok(None)
            } else {
                Err(ConnectError::invalid(
                    "the stream ended inside an envelope prefix",
                ))
            };
        }
        let flags = self.buffer[0];
        let length = u32::from_be_bytes([
            self.buffer[1],
            self.buffer[2],
            self.buffer[3],
            self.buffer[4],
        ]) as usize;
        match flags {
            FLAG_MESSAGE => {}
            FLAG_COMPRESSED => {
                return Err(ConnectError::new(
                    ConnectCode::Unimplemented,
                    "compressed envelopes are not accepted (no compression was negotiated)",
                ))
            }
            other => {
                return Err(ConnectError::invalid(format!(
                    "unexpected envelope flags 0x{other:02x}"
                )))
            }
        }
        if length > self.max {
            return Err(ConnectError::new(
                ConnectCode::ResourceExhausted,
                format!(
                    "an envelope of {length} bytes is over the limit of {} bytes",
                    self.max
                ),
            ));
        }
        if !self.fill(5 + length).await? {
            return Err(ConnectError::invalid(format!(
                "the stream ended inside an envelope ({} of {length} bytes)",
                self.buffer.len().saturating_sub(5)
            )));
        }
        let message = Bytes::copy_from_slice(&self.buffer[5..5 + length]);
        self.buffer.drain(..5 + length);
        Ok(Some(message))
    }

    /// Reads until `n` bytes are buffered; `false` if the body ended first.
    async fn fill(&mut self, n: usize) -> Result<bool, ConnectError> {
        while self.buffer.len() < n {
            if self.ended {
                return Ok(false);
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.buffer.extend_from_slice(&chunk),
                Some(Err(e)) => {
                    return Err(ConnectError::invalid(format!(
                        "could not read the request: {e}"
                    )))
                }
                None => self.ended = true,
            }
        }
        Ok(true)
    }
}

fn require_stream_content_type(headers: &HeaderMap) -> Result<(), ConnectError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if content_type.starts_with(STREAM_JSON) {
        Ok(())
    } else {
        Err(ConnectError::new(
            ConnectCode::Unimplemented,
            format!("streaming calls take '{STREAM_JSON}', not '{content_type}'"),
        ))
    }
}

fn decode<T: DeserializeOwned>(message: &[u8]) -> Result<T, ConnectError> {
    serde_json::from_slice(message)
        .map_err(|e| ConnectError::invalid(format!("invalid request message: {e}")))
}

/// A server-streaming call's request: exactly one envelope (≤
/// [`MAX_STREAM_REQUEST_BYTES`]).
pub struct StreamRequest<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for StreamRequest<T> {
    type Rejection = Response;

    async fn from_request(request: Request, _state: &S) -> Result<Self, Response> {
        // A streaming call's errors come in an end envelope, with HTTP 200.
        let fail = |e: ConnectError| server_stream(tokio_stream::once(Err::<(), _>(e)));
        require_stream_content_type(request.headers()).map_err(|e| e.into_response())?;
        let mut reader = EnvelopeReader::new(request.into_body(), MAX_STREAM_REQUEST_BYTES);
        let message = match reader.next_message().await {
            Ok(Some(message)) => message,
            Ok(None) => return Err(fail(ConnectError::invalid("the request has no message"))),
            Err(e) => return Err(fail(e)),
        };
        match reader.next_message().await {
            Ok(None) => {}
            Ok(Some(_)) => {
                return Err(fail(ConnectError::invalid(
                    "a server-streaming call takes exactly one request message",
                )))
            }
            Err(e) => return Err(fail(e)),
        }
        decode(&message).map(StreamRequest).map_err(fail)
    }
}

/// A client stream's requests (`StreamInput`), read as they come.
pub struct ClientStream<T> {
    reader: EnvelopeReader,
    message: std::marker::PhantomData<fn() -> T>,
}

impl<T: DeserializeOwned> ClientStream<T> {
    /// The next message, `None` when the client ended its stream; an
    /// error ends the stream (the reader is not usable after it).
    pub async fn next(&mut self) -> Option<Result<T, ConnectError>> {
        match self.reader.next_message().await {
            Ok(Some(message)) => Some(decode(&message)),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    }
}

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ClientStream<T> {
    type Rejection = Response;

    async fn from_request(request: Request, _state: &S) -> Result<Self, Response> {
        require_stream_content_type(request.headers()).map_err(|e| e.into_response())?;
        Ok(Self {
            reader: EnvelopeReader::new(request.into_body(), MAX_CLIENT_ENVELOPE_BYTES),
            message: std::marker::PhantomData,
        })
    }
}

/// One envelope.
fn envelope(flags: u8, message: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(5 + message.len());
    out.push(flags);
    out.extend_from_slice(
        &u32::try_from(message.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    out.extend_from_slice(message);
    Bytes::from(out)
}

/// The end-of-stream envelope: `{}` or `{"error": …}`.
fn end_envelope(error: Option<&ConnectError>) -> Bytes {
    #[derive(Serialize)]
    struct End<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<&'a ConnectError>,
    }
    let body = serde_json::to_vec(&End { error }).unwrap_or_else(|_| b"{}".to_vec());
    envelope(FLAG_END_STREAM, &body)
}

/// A server stream's response: 200 `application/connect+json`, one
/// envelope per item, then the end envelope — with the first error, which
/// also ends the stream, or `{}` when the items run out.
pub fn server_stream<T, S>(items: S) -> Response
where
    T: Serialize + Send + 'static,
    S: Stream<Item = Result<T, ConnectError>> + Send + 'static,
{
    let frames = async_frames(items);
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static(STREAM_JSON))],
        Body::from_stream(frames),
    )
        .into_response()
}

/// The envelopes of a server stream: each item's, ending at the first
/// error (its end envelope; a body error for a cut one) or, when the items
/// run out, with `{}`.
fn async_frames<T, S>(items: S) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send
where
    T: Serialize + Send + 'static,
    S: Stream<Item = Result<T, ConnectError>> + Send + 'static,
{
    enum Phase<S> {
        Items(std::pin::Pin<Box<S>>),
        Done,
    }
    futures_util::stream::unfold(Phase::Items(Box::pin(items)), |phase| async move {
        let Phase::Items(mut items) = phase else {
            return None;
        };
        let frame = match items.next().await {
            Some(Ok(item)) => match serde_json::to_vec(&item) {
                Ok(message) => {
                    return Some((Ok(envelope(FLAG_MESSAGE, &message)), Phase::Items(items)))
                }
                Err(e) => end_envelope(Some(&ConnectError::internal(format!(
                    "could not encode a message: {e}"
                )))),
            },
            Some(Err(error)) if error.cut => {
                return Some((
                    Err(std::io::Error::new(
                        std::io::ErrorKind::ConnectionAborted,
                        error.message,
                    )),
                    Phase::Done,
                ))
            }
            Some(Err(error)) => end_envelope(Some(&error)),
            None => end_envelope(None),
        };
        Some((Ok(frame), Phase::Done))
    })
}

/// A client-streaming call's answer: its one message and the end
/// envelope, or the end envelope with its error.
pub fn client_stream_reply<T: Serialize + Send + 'static>(
    reply: Result<T, ConnectError>,
) -> Response {
    server_stream(tokio_stream::once(reply))
}

/// The deadline a Connect client set (`connect-timeout-ms`), if any.
pub fn deadline(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get("connect-timeout-ms")?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read(body: Vec<u8>, max: usize) -> Vec<Result<Option<Bytes>, ConnectError>> {
        let mut reader = EnvelopeReader::new(Body::from(body), max);
        let mut out = Vec::new();
        loop {
            let next = reader.next_message().await;
            let stop = !matches!(next, Ok(Some(_)));
            out.push(next);
            if stop {
                return out;
            }
        }
    }

    #[tokio::test]
    async fn envelopes_are_read_whole_and_in_order() {
        let mut body = envelope(0, b"{\"a\":1}").to_vec();
        body.extend_from_slice(&envelope(0, b"{}"));
        let got = read(body, 100).await;
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].as_ref().unwrap().as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(got[1].as_ref().unwrap().as_deref(), Some(&b"{}"[..]));
        assert!(matches!(got[2], Ok(None)));
    }

    #[tokio::test]
    async fn an_oversized_length_is_refused_on_its_prefix() {
        let got = read(vec![0, 0xff, 0xff, 0xff, 0xff], 1 << 20).await;
        assert_eq!(
            got[0].as_ref().unwrap_err().code,
            ConnectCode::ResourceExhausted
        );
    }

    #[tokio::test]
    async fn truncated_and_flagged_envelopes_are_refused() {
        let mut cut = envelope(0, b"{\"abc\":1}").to_vec();
        cut.truncate(8);
        assert_eq!(
            read(cut, 100).await[0].as_ref().unwrap_err().code,
            ConnectCode::InvalidArgument
        );
        assert_eq!(
            read(vec![0, 0], 100).await[0].as_ref().unwrap_err().code,
            ConnectCode::InvalidArgument
        );
        let compressed = envelope(FLAG_COMPRESSED, b"x").to_vec();
        assert_eq!(
            read(compressed, 100).await[0].as_ref().unwrap_err().code,
            ConnectCode::Unimplemented
        );
        let end = envelope(FLAG_END_STREAM, b"{}").to_vec();
        assert_eq!(
            read(end, 100).await[0].as_ref().unwrap_err().code,
            ConnectCode::InvalidArgument
        );
    }

    #[tokio::test]
    async fn a_server_stream_ends_with_its_first_error() {
        let items = tokio_stream::iter(vec![
            Ok(serde_json::json!({"n": 1})),
            Err(ConnectError::not_found("gone")),
            Ok(serde_json::json!({"n": 2})),
        ]);
        let response = server_stream(items);
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        let mut reader = EnvelopeReader::new(Body::from(body.clone()), 1 << 20);
        assert_eq!(
            reader.next_message().await.unwrap().unwrap(),
            &b"{\"n\":1}"[..]
        );
        // The end envelope carries the error; nothing follows it.
        let rest = &body[5 + 7..];
        assert_eq!(rest[0], FLAG_END_STREAM);
        let end: serde_json::Value = serde_json::from_slice(&rest[5..]).unwrap();
        assert_eq!(end["error"]["code"], "not_found");
        assert_eq!(
            rest.len(),
            5 + u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize
        );
    }

    #[test]
    fn deadlines_are_read_from_the_header() {
        let mut headers = HeaderMap::new();
        assert_eq!(deadline(&headers), None);
        headers.insert("connect-timeout-ms", HeaderValue::from_static("60000"));
        assert_eq!(deadline(&headers), Some(Duration::from_secs(60)));
    }
}
