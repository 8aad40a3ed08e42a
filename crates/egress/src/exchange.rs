//! One HTTP exchange through the proxy, after the request was checked:
//! the request sent by its parsed framing, the answer sent back masked.
//!
//! The request goes out rebuilt (see [`wire::RequestHead::forwarded_lines`])
//! with a body of exactly its declared length, or its chunks decoded and
//! encoded again: nothing the client sends after the body is ever
//! forwarded, so no second request rides on a checked one. Where the
//! policy lets a secret into a body, its placeholders are replaced on
//! every framing (a buffered `Content-Length` body gets its new length; a
//! larger one, or a chunked one, is replaced as a stream that holds back
//! as many bytes as the longest placeholder).
//!
//! For a container with secrets the answer is never relayed as it came:
//! every head (1xx included) and every body, whatever its framing or size,
//! goes through the container's [`Masker`] and is framed again towards the
//! container (chunked, or until close for HTTP/1.0). The origin is asked
//! for `identity`; an answer that is still content-encoded, or uses a
//! transfer coding other than chunked, cannot be inspected and is refused
//! (a 502) rather than passed on. So is a part of an answer (a `206`): a
//! piece shorter than a value hides it from the masker, and the pieces put
//! together give it back (the request's `Range` is not forwarded either).

use std::sync::Arc;
use std::time::Duration;

use aho_corasick::{AhoCorasick, MatchKind};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::secrets::{Masker, SecretValue};
use crate::wire::{self, ChunkedDecoder, Framing, ResponseHead, ResponseParse, MAX_HEAD};

/// How long a body may pause, either way.
const BODY_IDLE: Duration = Duration::from_secs(60);
/// How long the origin may take to start its answer.
const RESPONSE_HEAD_TIMEOUT: Duration = Duration::from_secs(300);
/// Largest `Content-Length` body buffered to replace placeholders in it
/// (keeping it a `Content-Length` body); larger ones are sent chunked.
/// Small, since each of a container's connections may hold one.
const MAX_BUFFERED_BODY: u64 = 256 * 1024;
/// Most interim (1xx) answers before the final one.
const MAX_INTERIM: usize = 8;

/// Why an exchange stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ExchangeError {
    /// The proxy refused to pass the answer on (a 502 was sent): logged
    /// as denied.
    Refused(String),
    /// A side went away or broke its framing.
    Broken(String),
}

fn broken(e: impl std::fmt::Display) -> ExchangeError {
    ExchangeError::Broken(e.to_string())
}

/// A JSON error answer from the proxy itself (`policy_denied`,
/// `bad_request`, `response_refused`), its reason in the body and in the
/// status line.
pub(crate) fn error_response(status: u16, code: &str, reason: &str, host: Option<&str>) -> Vec<u8> {
    let title = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        421 => "Misdirected Request",
        _ => "Bad Gateway",
    };
    let body = serde_json::json!({"error": {
        "type": code,
        "code": code,
        "message": format!("shellgate egress proxy: {reason}"),
        "host": host,
    }})
    .to_string();
    format!(
        "HTTP/1.1 {status} {title} ({})\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\nX-Shellgate-Egress: {code}\r\n\r\n{body}",
        reason_phrase(reason),
        body.len()
    )
    .into_bytes()
}

/// Longest reason put in a status line (in characters).
const MAX_REASON_PHRASE: usize = 200;

/// `shellgate egress proxy: <reason>` for a status line's reason phrase:
/// what a client shows of a refused `CONNECT` (curl -v, Python's
/// `Tunnel connection failed: 403 ...`), which never reads the body.
/// Printable ASCII only (a status line is one line of visible
/// characters), bounded.
fn reason_phrase(reason: &str) -> String {
    let full = format!("shellgate egress proxy: {reason}");
    let mut phrase: String = full
        .chars()
        .take(MAX_REASON_PHRASE)
        .map(|c| {
            if c == ' ' || c.is_ascii_graphic() {
                c
            } else {
                '?'
            }
        })
        .collect();
    if full.chars().nth(MAX_REASON_PHRASE).is_some() {
        phrase.push_str("...");
    }
    phrase
}

/// A stream with some of its bytes already read: those come first.
pub(crate) struct Source<'a, S> {
    stream: &'a mut S,
    buffered: Vec<u8>,
    at: usize,
}

impl<'a, S: AsyncRead + Unpin> Source<'a, S> {
    pub(crate) fn new(stream: &'a mut S, buffered: Vec<u8>) -> Self {
        Self {
            stream,
            buffered,
            at: 0,
        }
    }

    /// Reads some bytes (0 at the end), waiting at most [`BODY_IDLE`].
    async fn read(&mut self, into: &mut [u8]) -> Result<usize, ExchangeError> {
        if self.at < self.buffered.len() {
            let n = (self.buffered.len() - self.at).min(into.len());
            into[..n].copy_from_slice(&self.buffered[self.at..self.at + n]);
            self.at += n;
            return Ok(n);
        }
        tokio::time::timeout(BODY_IDLE, self.stream.read(into))
            .await
            .map_err(|_| broken("the body stalled"))?
            .map_err(broken)
    }

    /// What was read ahead and not used (bytes after a body).
    fn rest(self) -> Vec<u8> {
        self.buffered[self.at..].to_vec()
    }
}

/// Placeholders turned into their values in a body, in one pass or as a
/// stream that holds back as many bytes as the longest placeholder (less
/// one), so a placeholder split across reads or chunks is still found.
pub(crate) struct Substitution {
    automaton: AhoCorasick,
    values: Vec<SecretValue>,
    longest: usize,
}

impl std::fmt::Debug for Substitution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Substitution")
            .field("placeholders", &self.values.len())
            .finish()
    }
}

impl Substitution {
    /// For `(placeholder, value)` pairs; `None` for none.
    pub(crate) fn new(pairs: &[(&str, &SecretValue)]) -> Option<Arc<Self>> {
        let pairs: Vec<_> = pairs.iter().filter(|(p, _)| !p.is_empty()).collect();
        if pairs.is_empty() {
            return None;
        }
        let automaton = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(pairs.iter().map(|(p, _)| p.as_bytes()))
            .ok()?;
        Some(Arc::new(Self {
            automaton,
            values: pairs.iter().map(|(_, v)| (*v).clone()).collect(),
            longest: pairs.iter().map(|(p, _)| p.len()).max().unwrap_or(0),
        }))
    }

    /// Replaces the matches starting before `safe`; returns the bytes of
    /// `bytes` consumed and how many placeholders were replaced.
    fn replace_into(&self, bytes: &[u8], safe: usize, out: &mut Vec<u8>) -> (usize, usize) {
        let (mut at, mut replaced) = (0, 0);
        for found in self.automaton.find_iter(bytes) {
            if found.start() >= safe {
                break;
            }
            out.extend_from_slice(&bytes[at..found.start()]);
            out.extend_from_slice(self.values[found.pattern().as_usize()].expose().as_bytes());
            at = found.end();
            replaced += 1;
        }
        let decided = safe.max(at);
        if at < decided {
            out.extend_from_slice(&bytes[at..decided]);
        }
        (decided, replaced)
    }

    /// `bytes` with every placeholder replaced, and how many were.
    pub(crate) fn replace(&self, bytes: &[u8]) -> (Vec<u8>, usize) {
        let mut out = Vec::with_capacity(bytes.len());
        let (_, replaced) = self.replace_into(bytes, bytes.len(), &mut out);
        (out, replaced)
    }

    fn stream(self: &Arc<Self>) -> SubstitutionStream {
        SubstitutionStream {
            substitution: Arc::clone(self),
            pending: Vec::new(),
            replaced: 0,
        }
    }
}

struct SubstitutionStream {
    substitution: Arc<Substitution>,
    pending: Vec<u8>,
    replaced: usize,
}

impl SubstitutionStream {
    fn push(&mut self, input: &[u8], out: &mut Vec<u8>) {
        self.pending.extend_from_slice(input);
        let hold = self.substitution.longest.saturating_sub(1);
        let safe = self.pending.len().saturating_sub(hold);
        if safe == 0 {
            return;
        }
        let (consumed, replaced) = self.substitution.replace_into(&self.pending, safe, out);
        self.replaced += replaced;
        self.pending.drain(..consumed);
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        let pending = std::mem::take(&mut self.pending);
        let (_, replaced) = self.substitution.replace_into(&pending, pending.len(), out);
        self.replaced += replaced;
    }
}

/// A request ready to go: its rebuilt head (no framing, no blank line),
/// the client's framing, and the placeholders to replace in its body.
pub(crate) struct Outgoing {
    pub head: String,
    pub framing: Framing,
    pub body: Option<Arc<Substitution>>,
    /// The request is HTTP/1.1 (so a body may be sent chunked).
    pub http11: bool,
}

/// What went through: bytes each way, placeholders replaced in the body.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Exchanged {
    pub bytes_out: u64,
    pub bytes_in: u64,
    pub replaced: usize,
}

/// Sends `outgoing` to `upstream` with its body read from `client` by its
/// framing (and nothing after it); returns the bytes sent and the
/// placeholders replaced.
async fn send_request<C, U>(
    client: &mut Source<'_, C>,
    upstream: &mut U,
    outgoing: Outgoing,
) -> Result<(u64, usize), ExchangeError>
where
    C: AsyncRead + Unpin,
    U: AsyncWrite + Unpin,
{
    let mut head = outgoing.head.into_bytes();
    let mut sent = 0u64;
    let mut buffer = vec![0u8; 16 * 1024];
    let mut write = |bytes: Vec<u8>| {
        sent += bytes.len() as u64;
        bytes
    };
    match (outgoing.framing, outgoing.body) {
        (Framing::None | Framing::Close, _) => {
            head.extend_from_slice(b"\r\n");
            upstream.write_all(&write(head)).await.map_err(broken)?;
            Ok((sent, 0))
        }
        (Framing::Length(length), None) => {
            head.extend_from_slice(format!("Content-Length: {length}\r\n\r\n").as_bytes());
            upstream.write_all(&write(head)).await.map_err(broken)?;
            let mut left = length;
            while left > 0 {
                let want = buffer
                    .len()
                    .min(usize::try_from(left).unwrap_or(usize::MAX));
                let n = client.read(&mut buffer[..want]).await?;
                if n == 0 {
                    return Err(broken("the request body ended early"));
                }
                upstream
                    .write_all(&write(buffer[..n].to_vec()))
                    .await
                    .map_err(broken)?;
                left -= n as u64;
            }
            Ok((sent, 0))
        }
        (Framing::Length(length), Some(substitution)) if length <= MAX_BUFFERED_BODY => {
            let mut body = Vec::with_capacity(length as usize);
            while (body.len() as u64) < length {
                let want = buffer.len().min((length - body.len() as u64) as usize);
                let n = client.read(&mut buffer[..want]).await?;
                if n == 0 {
                    return Err(broken("the request body ended early"));
                }
                body.extend_from_slice(&buffer[..n]);
            }
            let (body, replaced) = substitution.replace(&body);
            head.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
            head.extend_from_slice(&body);
            upstream.write_all(&write(head)).await.map_err(broken)?;
            Ok((sent, replaced))
        }
        (Framing::Length(_), Some(_)) if !outgoing.http11 => Err(ExchangeError::Refused(format!(
            "an HTTP/1.0 body over {MAX_BUFFERED_BODY} bytes cannot have a secret put in \
                 (it could only be sent chunked)"
        ))),
        (framing, substitution) => {
            // A chunked body, or one too long to buffer with placeholders
            // to replace: sent chunked, replaced as a stream.
            head.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
            upstream.write_all(&write(head)).await.map_err(broken)?;
            let mut stream = substitution.as_ref().map(Substitution::stream);
            let mut decoder = ChunkedDecoder::default();
            let mut left = match framing {
                Framing::Length(length) => Some(length),
                _ => None,
            };
            let (mut data, mut replaced, mut out) = (Vec::new(), Vec::new(), Vec::new());
            loop {
                let finished = match left {
                    Some(0) => true,
                    Some(_) => false,
                    None => decoder.done(),
                };
                if finished {
                    break;
                }
                let want = match left {
                    Some(left) => buffer
                        .len()
                        .min(usize::try_from(left).unwrap_or(usize::MAX)),
                    None => buffer.len(),
                };
                let n = client.read(&mut buffer[..want]).await?;
                if n == 0 {
                    return Err(broken("the request body ended early"));
                }
                data.clear();
                match &mut left {
                    Some(left) => {
                        data.extend_from_slice(&buffer[..n]);
                        *left -= n as u64;
                    }
                    None => {
                        // Bytes after the last chunk are never forwarded
                        // (the decoder stops there).
                        decoder
                            .feed(&buffer[..n], &mut data)
                            .map_err(ExchangeError::Broken)?;
                    }
                }
                replaced.clear();
                match &mut stream {
                    Some(stream) => stream.push(&data, &mut replaced),
                    None => replaced.extend_from_slice(&data),
                }
                out.clear();
                wire::chunk(&replaced, &mut out);
                if !out.is_empty() {
                    upstream
                        .write_all(&write(out.clone()))
                        .await
                        .map_err(broken)?;
                }
            }
            out.clear();
            let mut count = 0;
            if let Some(stream) = &mut stream {
                replaced.clear();
                stream.finish(&mut replaced);
                wire::chunk(&replaced, &mut out);
                count = stream.replaced;
            }
            out.extend_from_slice(wire::LAST_CHUNK);
            upstream.write_all(&write(out)).await.map_err(broken)?;
            Ok((sent, count))
        }
    }
}

/// Reads a response head from `upstream` into `buffer`.
async fn read_response_head<U: AsyncRead + Unpin>(
    upstream: &mut U,
    buffer: &mut Vec<u8>,
) -> Result<ResponseHead, ExchangeError> {
    let deadline = tokio::time::Instant::now() + RESPONSE_HEAD_TIMEOUT;
    let mut chunk = [0u8; 8192];
    loop {
        match wire::response_head(buffer) {
            ResponseParse::Response(head) => return Ok(head),
            ResponseParse::Bad(reason) => return Err(ExchangeError::Refused(reason)),
            ResponseParse::Incomplete if buffer.len() >= MAX_HEAD => {
                return Err(ExchangeError::Refused(
                    "the answer's head is too long".into(),
                ))
            }
            ResponseParse::Incomplete => {}
        }
        let n = tokio::time::timeout_at(deadline, upstream.read(&mut chunk))
            .await
            .map_err(|_| ExchangeError::Refused("the server did not answer in time".into()))?
            .map_err(broken)?;
        if n == 0 {
            return Err(ExchangeError::Refused(
                "the server closed the connection without an answer".into(),
            ));
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
}

/// Headers of an answer that the proxy makes again itself.
const ANSWER_NOT_FORWARDED: [&str; 6] = [
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "trailer",
    "proxy-connection",
];

/// An unmasked final head: the origin's status, headers and framing, its
/// connection headers replaced by `Connection: close`.
fn closing_head(head: &ResponseHead) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {} {}\r\n", head.status, head.reason).into_bytes();
    for (name, value) in &head.headers {
        let lower = name.to_ascii_lowercase();
        if ["connection", "keep-alive", "proxy-connection"].contains(&lower.as_str()) {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

/// The head towards the container: the origin's status and headers
/// (masked), the proxy's framing.
fn masked_head(head: &ResponseHead, masker: &Masker, body: bool, chunked: bool) -> Vec<u8> {
    let mut text = format!("HTTP/1.1 {} {}\r\n", head.status, head.reason).into_bytes();
    for (name, value) in &head.headers {
        if ANSWER_NOT_FORWARDED.contains(&name.to_ascii_lowercase().as_str()) {
            continue;
        }
        text.extend_from_slice(name.as_bytes());
        text.extend_from_slice(b": ");
        text.extend_from_slice(value);
        text.extend_from_slice(b"\r\n");
    }
    let mut out = masker.mask(&text);
    if (100..200).contains(&head.status) {
        out.extend_from_slice(b"\r\n");
        return out;
    }
    if body && chunked {
        out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

/// How the answer is read and sent back.
pub(crate) struct Answering<'a> {
    /// The request's method (a `HEAD` answer has no body).
    pub method: &'a str,
    /// The container's masker, if it has secrets.
    pub masker: Option<&'a Arc<Masker>>,
    /// A WebSocket upgrade was forwarded.
    pub websocket: bool,
    /// The client speaks HTTP/1.1 (chunked answers); else until close.
    pub client_http11: bool,
    /// Told of a refused answer (its masked reason) before the client is
    /// sent the 502: the container's denials for its running commands
    /// (see [`crate::denials`]).
    pub on_refusal: Option<&'a (dyn Fn(&str) + Sync)>,
}

/// The exchange: `outgoing` to `upstream` (its body from `client`, the
/// bytes in `leftover` first), and the answer back to `client`. A
/// WebSocket answered with `101` becomes a two-way relay. An answer the
/// proxy refuses gets the client a 502 that says why. What went through
/// is counted as it goes, so an exchange cut short (a reset, say) still
/// reports the bytes it relayed.
pub(crate) async fn exchange<C, U>(
    client: &mut C,
    leftover: Vec<u8>,
    outgoing: Outgoing,
    expect_continue: bool,
    upstream: &mut U,
    answering: Answering<'_>,
) -> (Exchanged, Result<(), ExchangeError>)
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let mut exchanged = Exchanged::default();
    let masker = answering.masker.cloned();
    let answering_refusal = answering.on_refusal;
    let mut result = exchange_inner(
        client,
        leftover,
        outgoing,
        expect_continue,
        upstream,
        answering,
        &mut exchanged,
    )
    .await;
    // A reason may quote the origin (a header value, a chunk line), and it
    // goes to the container (the 502) and to the egress log: masked too.
    if let (Some(masker), Err(ExchangeError::Refused(reason) | ExchangeError::Broken(reason))) =
        (&masker, &mut result)
    {
        *reason = masker.mask_str(reason);
    }
    if let Err(ExchangeError::Refused(reason)) = &result {
        if let Some(on_refusal) = answering_refusal {
            on_refusal(reason);
        }
        let _ = client
            .write_all(&error_response(502, "response_refused", reason, None))
            .await;
        let _ = client.shutdown().await;
    }
    (exchanged, result)
}

async fn exchange_inner<C, U>(
    client: &mut C,
    leftover: Vec<u8>,
    outgoing: Outgoing,
    expect_continue: bool,
    upstream: &mut U,
    answering: Answering<'_>,
    exchanged: &mut Exchanged,
) -> Result<(), ExchangeError>
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    if expect_continue && outgoing.framing != Framing::None {
        client
            .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .await
            .map_err(broken)?;
    }
    let mut source = Source::new(client, leftover);
    let (bytes_out, replaced) = send_request(&mut source, upstream, outgoing).await?;
    let rest = source.rest();
    exchanged.bytes_out = bytes_out;
    exchanged.replaced = replaced;
    let mut buffer = Vec::new();
    let refuse = |reason: String| ExchangeError::Refused(reason);
    let Some(masker) = answering.masker else {
        // Nothing to mask: the answer goes back as it comes (one answer,
        // since the origin was told to close), but a 101 only after a
        // WebSocket request was forwarded.
        let head = read_response_head(upstream, &mut buffer).await?;
        if head.status == 101 && !answering.websocket {
            return Err(refuse("the server switched protocols unasked".into()));
        }
        if head.status >= 200 {
            // The head as the origin framed it, but saying `Connection:
            // close`: the client must not send a second request here.
            let closing = closing_head(&head);
            client.write_all(&closing).await.map_err(broken)?;
            exchanged.bytes_in += closing.len() as u64;
            client
                .write_all(&buffer[head.length..])
                .await
                .map_err(broken)?;
            exchanged.bytes_in += (buffer.len() - head.length) as u64;
        } else {
            client.write_all(&buffer).await.map_err(broken)?;
            exchanged.bytes_in += buffer.len() as u64;
        }
        if head.status == 101 {
            upstream.write_all(&rest).await.map_err(broken)?;
            let (out, back) = crate::relay::relay(client, upstream).await;
            exchanged.bytes_out += rest.len() as u64 + out;
            exchanged.bytes_in += back;
        } else {
            // Counted as written: an answer that ends in a reset still
            // reports what reached the container.
            let mut chunk = vec![0u8; 16 * 1024];
            loop {
                let n = match upstream.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if client.write_all(&chunk[..n]).await.is_err() {
                    break;
                }
                exchanged.bytes_in += n as u64;
            }
        }
        let _ = client.shutdown().await;
        return Ok(());
    };
    let mut interim = 0;
    let head = loop {
        let head = read_response_head(upstream, &mut buffer).await?;
        exchanged.bytes_in += head.length as u64;
        if head.status == 101 {
            // No upgrade is forwarded for a container with secrets: its
            // frames would reach the container unmasked.
            return Err(refuse("the server switched protocols unasked".into()));
        }
        if !(100..200).contains(&head.status) {
            break head;
        }
        interim += 1;
        if interim > MAX_INTERIM {
            return Err(refuse("too many interim (1xx) answers".into()));
        }
        client
            .write_all(&masked_head(&head, masker, false, false))
            .await
            .map_err(broken)?;
        buffer.drain(..head.length);
    };
    if let Some(coding) = &head.content_encoding {
        return Err(refuse(format!(
            "the answer is content-encoded ({coding}) despite Accept-Encoding: identity, so \
             it cannot be checked for the container's secrets"
        )));
    }
    if head.status == 206
        || head
            .headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case("content-range"))
    {
        // The request's range was not forwarded; a piece of an answer
        // could hold a piece of a value, too short for any masker to see.
        return Err(refuse(
            "the answer is a part of the resource (206 or Content-Range), so it cannot be \
             checked for the container's secrets"
                .into(),
        ));
    }
    if head.other_transfer_coding {
        return Err(refuse(
            "the answer uses a transfer coding other than chunked, so it cannot be checked \
             for the container's secrets"
                .into(),
        ));
    }
    let framing = head.framing(answering.method);
    let body = framing != Framing::None;
    let chunked = answering.client_http11;
    client
        .write_all(&masked_head(&head, masker, body, chunked))
        .await
        .map_err(broken)?;
    let mut masking = masker.stream();
    let mut body_bytes = buffer.split_off(head.length);
    exchanged.bytes_in += body_bytes.len() as u64;
    let mut decoder = ChunkedDecoder::default();
    let mut left = match framing {
        Framing::Length(length) => Some(length),
        _ => None,
    };
    let mut chunk = vec![0u8; 16 * 1024];
    let (mut data, mut masked, mut out) = (Vec::new(), Vec::new(), Vec::new());
    let mut ended = framing == Framing::None;
    while !ended {
        if body_bytes.is_empty() {
            let read = tokio::time::timeout(BODY_IDLE, upstream.read(&mut chunk))
                .await
                .map_err(|_| broken("the answer stalled"))?;
            let n = match read {
                Ok(n) => n,
                // Many servers end a close-delimited answer over TLS
                // without close_notify; as browsers do, that is its end.
                Err(e)
                    if framing == Framing::Close
                        && e.kind() == std::io::ErrorKind::UnexpectedEof =>
                {
                    0
                }
                Err(e) => return Err(broken(e)),
            };
            if n == 0 {
                if framing == Framing::Close {
                    break;
                }
                // Cut short: the container must not take it for whole.
                return Err(broken("the server closed the connection mid-answer"));
            }
            exchanged.bytes_in += n as u64;
            body_bytes.extend_from_slice(&chunk[..n]);
        }
        data.clear();
        match framing {
            Framing::Length(_) => {
                let wanted = left.unwrap_or(0);
                let take = body_bytes
                    .len()
                    .min(usize::try_from(wanted).unwrap_or(usize::MAX));
                // Bytes past the declared length are not part of the answer.
                data.extend_from_slice(&body_bytes[..take]);
                left = Some(wanted - take as u64);
                ended = left == Some(0);
                body_bytes.clear();
            }
            Framing::Chunked => {
                decoder
                    .feed(&body_bytes, &mut data)
                    .map_err(|e| broken(format!("the answer's chunks: {e}")))?;
                body_bytes.clear();
                ended = decoder.done();
            }
            _ => {
                data.append(&mut body_bytes);
            }
        }
        masked.clear();
        masking.push(&data, &mut masked);
        out.clear();
        if chunked {
            wire::chunk(&masked, &mut out);
        } else {
            out.extend_from_slice(&masked);
        }
        if !out.is_empty() {
            client.write_all(&out).await.map_err(broken)?;
        }
    }
    masked.clear();
    masking.finish(&mut masked);
    out.clear();
    if body && chunked {
        wire::chunk(&masked, &mut out);
        out.extend_from_slice(wire::LAST_CHUNK);
    } else {
        out.extend_from_slice(&masked);
    }
    client.write_all(&out).await.map_err(broken)?;
    let _ = client.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::DomainSecret;
    use crate::wire::{request_head, Head};
    use tokio::io::{duplex, DuplexStream};

    fn masker() -> Arc<Masker> {
        Arc::new(
            Masker::new(&[DomainSecret {
                domain: "a.test".into(),
                name: "T".into(),
                placeholder: "PH".into(),
                value: Some(SecretValue::new("real-value")),
                ..DomainSecret::default()
            }])
            .unwrap(),
        )
    }

    fn head(raw: &[u8]) -> wire::RequestHead {
        match request_head(raw) {
            Head::Request(head) => head,
            other => panic!("{other:?}"),
        }
    }

    /// Runs one exchange: `request` (head and what follows it, as the
    /// client sent it) through the proxy to an origin that reads until
    /// `request_ends` and answers `answer`; returns what the origin got and
    /// what the client got.
    async fn run(
        request: &[u8],
        substitution: Option<Arc<Substitution>>,
        masker: Option<Arc<Masker>>,
        request_ends: &'static [u8],
        answer: Vec<Vec<u8>>,
    ) -> (Vec<u8>, Vec<u8>) {
        let parsed = head(request);
        let (mut client, mut proxy_client) = duplex(1 << 16);
        let (mut proxy_upstream, mut origin) = duplex(1 << 16);
        let origin = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut buffer = [0u8; 4096];
            while !got.ends_with(request_ends) {
                let n = origin.read(&mut buffer).await.unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buffer[..n]);
            }
            for piece in answer {
                origin.write_all(&piece).await.unwrap();
            }
            drop(origin);
            got
        });
        let outgoing = Outgoing {
            head: parsed
                .forwarded_lines(&parsed.origin_form, masker.is_some(), |_, v| v.to_owned()),
            framing: parsed.framing,
            body: substitution,
            http11: parsed.version == "HTTP/1.1",
        };
        let leftover = request[parsed.length..].to_vec();
        let _ = exchange(
            &mut proxy_client,
            leftover,
            outgoing,
            parsed.expect_continue,
            &mut proxy_upstream,
            Answering {
                method: &parsed.method,
                masker: masker.as_ref(),
                websocket: parsed.websocket,
                client_http11: true,
                on_refusal: None,
            },
        )
        .await;
        drop(proxy_client);
        let mut received = Vec::new();
        client.read_to_end(&mut received).await.unwrap();
        (origin.await.unwrap(), received)
    }

    fn body_of(answer: &[u8]) -> (String, Vec<u8>) {
        let end = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8_lossy(&answer[..end]).into_owned();
        let mut body = Vec::new();
        if head.contains("Transfer-Encoding: chunked") {
            let mut decoder = ChunkedDecoder::default();
            decoder.feed(&answer[end..], &mut body).unwrap();
            assert!(decoder.done(), "the answer's last chunk is missing");
        } else {
            body = answer[end..].to_vec();
        }
        (head, body)
    }

    #[tokio::test]
    async fn a_request_goes_by_its_framing_and_nothing_after_it() {
        let answer = vec![b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec()];
        let (got, _) = run(
            b"POST /c HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: b.test\r\n\r\n",
            None,
            None,
            b"0\r\n\r\n",
            answer.clone(),
        )
        .await;
        assert_eq!(
            String::from_utf8(got).unwrap(),
            "POST /c HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
        );
        let (got, received) = run(
            b"POST /l HTTP/1.1\r\nHost: a.test\r\nContent-Length: 2\r\n\r\nokGET /smuggled HTTP/1.1\r\nHost: b.test\r\n\r\n",
            None,
            None,
            b"ok",
            vec![b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok".to_vec()],
        )
        .await;
        // Unmasked, the answer keeps its framing but tells the client the
        // connection ends with it.
        assert_eq!(
            String::from_utf8(received).unwrap(),
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
        );
        assert_eq!(
            String::from_utf8(got).unwrap(),
            "POST /l HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"
        );
    }

    #[tokio::test]
    async fn placeholders_in_bodies_are_replaced_on_every_framing() {
        let value = SecretValue::new("real-value");
        let substitution = Substitution::new(&[("PLACEHOLDER", &value)]);
        let answer = vec![b"HTTP/1.1 204 No Content\r\n\r\n".to_vec()];
        // Split across chunks.
        let (got, _) = run(
            b"POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nPLACE\r\n8\r\nHOLDER x\r\n0\r\n\r\n",
            substitution.clone(),
            None,
            b"0\r\n\r\n",
            answer.clone(),
        )
        .await;
        let (_, body) = body_of(&got);
        assert_eq!(body, b"real-value x");
        let (got, _) = run(
            b"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 13\r\n\r\n[PLACEHOLDER]",
            substitution,
            None,
            b"]",
            answer,
        )
        .await;
        let text = String::from_utf8(got).unwrap();
        assert!(
            text.ends_with("Content-Length: 12\r\n\r\n[real-value]"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn answers_are_masked_on_every_framing() {
        let value_in_pieces = |head: &[u8], framing: &str| -> Vec<Vec<u8>> {
            let body = b"{\"echo\": \"Bearer real-value\"}";
            let mut pieces = vec![head.to_vec()];
            match framing {
                "chunked" => {
                    for byte in body {
                        pieces.push(format!("1\r\n{}\r\n", *byte as char).into_bytes());
                    }
                    pieces.push(b"0\r\n\r\n".to_vec());
                }
                _ => pieces.extend(body.chunks(3).map(<[u8]>::to_vec)),
            }
            pieces
        };
        for (name, answer) in [
            (
                "length",
                value_in_pieces(b"HTTP/1.1 200 OK\r\nContent-Length: 29\r\n\r\n", "length"),
            ),
            (
                "chunked",
                value_in_pieces(
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                    "chunked",
                ),
            ),
            (
                "close",
                value_in_pieces(b"HTTP/1.1 200 OK\r\nX-Echo: real-value\r\n\r\n", "close"),
            ),
            (
                "interim",
                value_in_pieces(
                    b"HTTP/1.1 103 Early Hints\r\nLink: real-value\r\n\r\nHTTP/1.1 200 OK\r\n\r\n",
                    "close",
                ),
            ),
        ] {
            let (got, received) = run(
                b"GET / HTTP/1.1\r\nHost: a.test\r\nAccept-Encoding: gzip\r\n\r\n",
                None,
                Some(masker()),
                b"\r\n\r\n",
                answer,
            )
            .await;
            assert!(
                String::from_utf8_lossy(&got).contains("Accept-Encoding: identity\r\n"),
                "{name}"
            );
            let text = String::from_utf8_lossy(&received).into_owned();
            assert!(!text.contains("real-value"), "{name}: {text}");
            let final_answer = match text.find("HTTP/1.1 200") {
                Some(at) => &received[at..],
                None => panic!("{name}: {text}"),
            };
            let (_, body) = body_of(final_answer);
            assert_eq!(body, b"{\"echo\": \"Bearer PH\"}", "{name}");
        }
        // A HEAD answer has no body, whatever its length says.
        let (_, received) = run(
            b"HEAD / HTTP/1.1\r\nHost: a.test\r\n\r\n",
            None,
            Some(masker()),
            b"\r\n\r\n",
            vec![b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\nX: real-value\r\n\r\n".to_vec()],
        )
        .await;
        assert_eq!(
            String::from_utf8(received).unwrap(),
            "HTTP/1.1 200 OK\r\nX: PH\r\nConnection: close\r\n\r\n"
        );
    }

    #[tokio::test]
    async fn answers_that_cannot_be_inspected_are_refused() {
        for answer in [
            &b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc"[..],
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\nreal-value",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-3/30\r\nContent-Length: 4\r\n\r\nreal",
            b"HTTP/1.1 200 OK\r\nContent-Range: bytes 4-9/30\r\nContent-Length: 6\r\n\r\n-value",
        ] {
            let (_, received) = run(
                b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n",
                None,
                Some(masker()),
                b"\r\n\r\n",
                vec![answer.to_vec()],
            )
            .await;
            let text = String::from_utf8(received).unwrap();
            assert!(text.starts_with("HTTP/1.1 502 "), "{text}");
            assert!(!text.contains("real-value"));
        }
    }

    #[tokio::test]
    async fn reasons_quoting_the_origin_are_masked() {
        for answer in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: real-value\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nreal-value\r\n",
        ] {
            let (mut client, mut proxy_client) = duplex(1 << 16);
            let (mut proxy_upstream, mut origin) = duplex(1 << 16);
            let answer = answer.to_vec();
            let origin = tokio::spawn(async move {
                let (mut got, mut buffer) = (Vec::new(), [0u8; 1024]);
                while !got.ends_with(b"\r\n\r\n") {
                    let n = origin.read(&mut buffer).await.unwrap();
                    got.extend_from_slice(&buffer[..n]);
                }
                origin.write_all(&answer).await.unwrap();
            });
            let parsed = head(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n");
            let masker = masker();
            let (_, result) = exchange(
                &mut proxy_client,
                Vec::new(),
                Outgoing {
                    head: parsed.forwarded_lines("/", true, |_, v| v.to_owned()),
                    framing: parsed.framing,
                    body: None,
                    http11: true,
                },
                false,
                &mut proxy_upstream,
                Answering {
                    method: "GET",
                    masker: Some(&masker),
                    websocket: false,
                    client_http11: true,
                    on_refusal: None,
                },
            )
            .await;
            drop(proxy_client);
            origin.await.unwrap();
            let mut received = Vec::new();
            client.read_to_end(&mut received).await.unwrap();
            let logged = format!("{result:?}");
            assert!(result.is_err(), "{logged}");
            assert!(!logged.contains("real-value"), "{logged}");
            assert!(
                !String::from_utf8_lossy(&received).contains("real-value"),
                "{}",
                String::from_utf8_lossy(&received)
            );
        }
    }

    #[tokio::test]
    async fn a_websocket_is_relayed_only_after_its_101() {
        let parsed = head(b"GET /ws HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: k\r\n\r\n");
        let (mut client, mut proxy_client): (DuplexStream, DuplexStream) = duplex(4096);
        let (mut proxy_upstream, mut origin) = duplex(4096);
        let origin = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut buffer = [0u8; 1024];
            while !got.ends_with(b"\r\n\r\n") {
                let n = origin.read(&mut buffer).await.unwrap();
                got.extend_from_slice(&buffer[..n]);
            }
            origin
                .write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
                .await
                .unwrap();
            let n = origin.read(&mut buffer).await.unwrap();
            origin.write_all(&buffer[..n]).await.unwrap();
            String::from_utf8(got).unwrap()
        });
        let proxy = tokio::spawn(async move {
            exchange(
                &mut proxy_client,
                Vec::new(),
                Outgoing {
                    head: parsed.forwarded_lines("/ws", false, |_, v| v.to_owned()),
                    framing: parsed.framing,
                    body: None,
                    http11: true,
                },
                false,
                &mut proxy_upstream,
                Answering {
                    method: "GET",
                    masker: None,
                    websocket: true,
                    client_http11: true,
                    on_refusal: None,
                },
            )
            .await
        });
        let mut buffer = vec![0u8; 1024];
        let mut answer = Vec::new();
        while !answer.ends_with(b"\r\n\r\n") {
            let n = client.read(&mut buffer).await.unwrap();
            answer.extend_from_slice(&buffer[..n]);
        }
        assert!(answer.starts_with(b"HTTP/1.1 101"));
        client.write_all(b"frame").await.unwrap();
        let n = client.read(&mut buffer).await.unwrap();
        assert_eq!(&buffer[..n], b"frame");
        let forwarded = origin.await.unwrap();
        assert!(forwarded.ends_with("Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n"));
        drop(client);
        let _ = proxy.await;
    }
}
