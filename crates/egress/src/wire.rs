//! What the proxy reads of a connection before deciding: the server name of
//! a TLS ClientHello, or the head of an HTTP request. Both parsers take the
//! bytes read so far and say whether they need more; neither trusts a
//! length it reads beyond the bytes it has.

/// Most bytes read before a decision (a ClientHello or a request head).
pub const MAX_HEAD: usize = 64 * 1024;

/// What the first bytes of a TLS connection say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hello {
    /// More bytes are needed.
    Incomplete,
    /// Not a TLS ClientHello.
    NotTls,
    /// A ClientHello, with its server name if it has one.
    ServerName(Option<String>),
}

/// A cursor over bytes that fails instead of reading past the end.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let slice = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(slice)
    }

    fn u8(&mut self) -> Option<usize> {
        self.take(1).map(|b| b[0] as usize)
    }

    fn u16(&mut self) -> Option<usize> {
        self.take(2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]) as usize)
    }
}

/// Reads the server name (SNI) of a ClientHello from the first bytes of a
/// TLS connection (the handshake may span several records).
pub fn client_hello(bytes: &[u8]) -> Hello {
    // Gather the handshake message from the records it spans.
    let mut handshake = Vec::new();
    let mut records = Reader::new(bytes);
    loop {
        let Some(header) = records.take(5) else {
            return if bytes.len() >= MAX_HEAD {
                Hello::NotTls
            } else {
                Hello::Incomplete
            };
        };
        if header[0] != 22 || header[1] != 3 {
            return Hello::NotTls;
        }
        let length = u16::from_be_bytes([header[3], header[4]]) as usize;
        let Some(fragment) = records.take(length) else {
            return Hello::Incomplete;
        };
        handshake.extend_from_slice(fragment);
        if handshake.len() >= 4 {
            let needed = 4
                + ((handshake[1] as usize) << 16
                    | (handshake[2] as usize) << 8
                    | handshake[3] as usize);
            if handshake[0] != 1 {
                return Hello::NotTls;
            }
            if handshake.len() >= needed {
                handshake.truncate(needed);
                break;
            }
            if needed > MAX_HEAD {
                return Hello::NotTls;
            }
        }
    }
    let name = (|| {
        let mut hello = Reader::new(&handshake);
        hello.take(4)?; // type and length
        hello.take(2 + 32)?; // version, random
        let session = hello.u8()?;
        hello.take(session)?;
        let suites = hello.u16()?;
        hello.take(suites)?;
        let compression = hello.u8()?;
        hello.take(compression)?;
        let extensions = hello.u16()?;
        let mut extensions = Reader::new(hello.take(extensions)?);
        while let Some(kind) = extensions.u16() {
            let length = extensions.u16()?;
            let body = extensions.take(length)?;
            if kind != 0 {
                continue;
            }
            let mut list = Reader::new(body);
            let total = list.u16()?;
            let mut names = Reader::new(list.take(total)?);
            while let Some(name_type) = names.u8() {
                let length = names.u16()?;
                let name = names.take(length)?;
                if name_type == 0 {
                    return Some(String::from_utf8(name.to_vec()).ok());
                }
            }
            return Some(None);
        }
        Some(None)
    })();
    match name {
        Some(name) => Hello::ServerName(name),
        None => Hello::NotTls,
    }
}

/// Most headers in one head.
pub const MAX_HEADERS: usize = 100;
/// Longest line of a chunked body's framing (size line or trailer).
const MAX_CHUNK_LINE: usize = 4096;
/// Most bytes of trailers after a chunked body (read and dropped).
const MAX_TRAILERS: usize = 16 * 1024;

/// How a message's body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    None,
    /// Exactly this many bytes (`Content-Length`).
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the connection closes (responses only).
    Close,
}

/// A checked `host[:port]`: a reg-name (letters, digits, `-`, `.`, `_`;
/// no empty label, one trailing dot at most) or a bracketed IPv6 literal;
/// no userinfo; a port of 1 to 65535 in digits only, without a leading
/// zero.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority {
    /// Lowercase, no trailing dot, brackets removed.
    pub host: String,
    pub port: Option<u16>,
}

impl std::fmt::Display for Authority {
    /// `host[:port]`, an IPv6 literal in brackets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]", self.host)?;
        } else {
            f.write_str(&self.host)?;
        }
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

/// Reads an authority strictly: anything a server might read differently
/// (`a:443@b`, `:443abc`, `:65536`, `:0443`, `a..b`, two colons,
/// percent-escapes) is refused.
pub fn parse_authority(text: &str) -> Result<Authority, String> {
    let refuse = |why: &str| Err(format!("{text:?} is not a valid host[:port] ({why})"));
    if text.is_empty() {
        return refuse("empty");
    }
    if text.contains('@') {
        return refuse("user information is not allowed");
    }
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let Some((literal, tail)) = rest.split_once(']') else {
            return refuse("an unclosed '['");
        };
        if literal.parse::<std::net::Ipv6Addr>().is_err() {
            return refuse("not an IPv6 address in brackets");
        }
        match tail {
            "" => (literal, None),
            _ => match tail.strip_prefix(':') {
                Some(port) => (literal, Some(port)),
                None => return refuse("text after ']'"),
            },
        }
    } else {
        let (host, port) = match text.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        };
        if host.is_empty()
            || !host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
        {
            return refuse("a host name is letters, digits, '-', '.' and '_'");
        }
        // One spelling per name: `a.test.` (the absolute form) is
        // `a.test`, but `a.test..`, `a..test` or `.a.test` are no names
        // at all, and a resolver or server may read them as another.
        let labels = host.strip_suffix('.').unwrap_or(host);
        if labels.len() > 253
            || labels
                .split('.')
                .any(|label| label.is_empty() || label.len() > 63)
        {
            return refuse(
                "a host name is labels of 1 to 63 characters, 253 in all, with one trailing \
                 dot at most",
            );
        }
        (host, port)
    };
    let port = match port {
        None => None,
        Some(port) => {
            // Digits only and no leading zero: `0443` is read as 443 by
            // some and as octal or refused by others.
            if port.is_empty()
                || port.len() > 5
                || port.starts_with('0')
                || !port.bytes().all(|b| b.is_ascii_digit())
            {
                return refuse("the port is 1 to 65535, digits only");
            }
            match port.parse::<u16>() {
                Ok(port) if port > 0 => Some(port),
                _ => return refuse("the port is 1 to 65535, digits only"),
            }
        }
    };
    Ok(Authority {
        host: crate::policy::normalize(host),
        port,
    })
}

/// An absolute-form `http://` target: its authority and its origin form
/// (`/path?query`). Other schemes, fragments and user information are
/// refused.
pub fn parse_absolute(target: &str) -> Result<(Authority, String), String> {
    let scheme_ends = target.find("://").unwrap_or(0);
    if !target[..scheme_ends].eq_ignore_ascii_case("http") {
        return Err(format!(
            "{target:?}: only http:// URLs are sent through the proxy as they are (use CONNECT \
             for https)"
        ));
    }
    let rest = &target[scheme_ends + 3..];
    if rest.contains('#') {
        return Err(format!("{target:?}: a fragment is never sent"));
    }
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = parse_authority(&rest[..split])?;
    let path = &rest[split..];
    let origin = match path.as_bytes().first() {
        None => "/".to_owned(),
        Some(b'?') => format!("/{path}"),
        Some(_) => path.to_owned(),
    };
    Ok((authority, origin))
}

/// The head of an HTTP/1 request, checked strictly (see [`request_head`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    pub method: String,
    /// As written: origin form (`/path`), absolute form (`http://host/path`)
    /// or authority form (`host:443`, for CONNECT).
    pub target: String,
    /// The target as the origin gets it: origin form (empty for CONNECT).
    pub origin_form: String,
    /// An absolute-form target's authority, or a CONNECT's.
    pub target_authority: Option<Authority>,
    /// `HTTP/1.1` or `HTTP/1.0`.
    pub version: String,
    /// The one `Host` header, checked (a CONNECT without one: its target).
    pub host: Authority,
    /// Every header, in order, names as written, values trimmed.
    pub headers: Vec<(String, String)>,
    /// Bytes of the head, its final blank line included.
    pub length: usize,
    /// How the body that follows is framed.
    pub framing: Framing,
    /// A WebSocket handshake (`GET`, `Upgrade: websocket`, `Connection:
    /// upgrade`, a `Sec-WebSocket-Key`): the only upgrade ever forwarded.
    pub websocket: bool,
    /// `Expect: 100-continue` (answered by the proxy, never forwarded).
    pub expect_continue: bool,
}

/// Headers that concern one connection, or the framing the proxy makes
/// itself: never forwarded as the client wrote them.
const NOT_FORWARDED: [&str; 11] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "transfer-encoding",
    "content-length",
    "upgrade",
    "expect",
];

/// Headers not forwarded when the answer is masked: the client's
/// encodings (replaced by `identity`) and anything that asks for a part of
/// the answer (`Range`, and `If-Range`, which only qualifies one).
const NOT_FORWARDED_MASKED: [&str; 3] = ["accept-encoding", "range", "if-range"];

impl RequestHead {
    /// The value of the header `name` (first occurrence).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn connection_tokens(&self) -> Vec<String> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
            .flat_map(|(_, v)| v.split(','))
            .map(|t| t.trim().to_ascii_lowercase())
            .filter(|t| !t.is_empty())
            .collect()
    }

    /// The head to forward, rebuilt from the parsed parts (never the
    /// client's bytes), without its blank line and without framing (the
    /// sender adds `Content-Length` or `Transfer-Encoding` for the body it
    /// sends): `target` as given, connection-specific headers and those
    /// the `Connection` header names dropped, each other header value
    /// passed through `value(name, value)`, and `Connection: close` (or
    /// the WebSocket upgrade's pair), so that one connection carries one
    /// checked request. When the answer is to be `masked`, the origin is
    /// asked for all of it as it is: `Accept-Encoding: identity`, and no
    /// range headers ([`NOT_FORWARDED_MASKED`]), since a piece of an
    /// answer shorter than a value hides that value from any masker, and
    /// the pieces put together give it back.
    pub fn forwarded_lines(
        &self,
        target: &str,
        masked: bool,
        mut value: impl FnMut(&str, &str) -> String,
    ) -> String {
        let named = self.connection_tokens();
        let mut out = format!("{} {} {}\r\n", self.method, target, self.version);
        for (name, v) in &self.headers {
            let lower = name.to_ascii_lowercase();
            if NOT_FORWARDED.contains(&lower.as_str())
                || (lower != "host" && named.contains(&lower))
                || (masked && NOT_FORWARDED_MASKED.contains(&lower.as_str()))
            {
                continue;
            }
            out.push_str(name);
            out.push_str(": ");
            if lower == "host" {
                // The name that was checked, not the client's spelling of
                // it: servers disagree on whether `API.Example.` is
                // `api.example`, and one that routes it to another virtual
                // host would get the request (and its secret) there.
                out.push_str(&self.host.to_string());
            } else {
                out.push_str(&value(name, v));
            }
            out.push_str("\r\n");
        }
        if masked {
            out.push_str("Accept-Encoding: identity\r\n");
        }
        if self.websocket {
            out.push_str("Upgrade: websocket\r\nConnection: Upgrade\r\n");
        } else {
            out.push_str("Connection: close\r\n");
        }
        out
    }
}

/// What the first bytes of a plain connection say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Head {
    /// More bytes are needed.
    Incomplete,
    /// Not a request the proxy forwards, and why (answered with a 400).
    Bad(String),
    Request(RequestHead),
}

/// Where a head ends (its blank line included): `Ok(None)` while it may
/// still come. Lines end with CRLF only: a bare CR or LF, or a folded
/// line (obs-fold), is refused, since servers split such heads in
/// different places than the proxy would.
fn head_end(bytes: &[u8]) -> Result<Option<usize>, String> {
    if matches!(bytes.first(), Some(b'\r' | b'\n' | b' ' | b'\t')) {
        return Err("the head starts with a blank or empty line".into());
    }
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'\n' => return Err("a bare LF (lines must end with CRLF)".into()),
            b'\r' => match (bytes.get(at + 1), bytes.get(at + 2), bytes.get(at + 3)) {
                (None, ..) | (Some(b'\n'), None, _) => return Ok(None),
                (Some(b'\n'), Some(b'\r'), None) => return Ok(None),
                (Some(b'\n'), Some(b'\r'), Some(b'\n')) => return Ok(Some(at + 4)),
                (Some(b'\n'), Some(b'\r'), Some(_)) => {
                    return Err("a bare CR (lines must end with CRLF)".into())
                }
                (Some(b'\n'), Some(b' ' | b'\t'), _) => {
                    return Err("a folded header line (obs-fold)".into())
                }
                (Some(b'\n'), Some(_), _) => at += 2,
                (Some(_), ..) => return Err("a bare CR (lines must end with CRLF)".into()),
            },
            _ => at += 1,
        }
    }
    Ok(None)
}

/// Whether `value` is a header value the proxy passes on: visible ASCII,
/// spaces, tabs and UTF-8; no NUL, no other control character, no DEL.
fn valid_value(value: &[u8]) -> bool {
    value
        .iter()
        .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b) || b >= 0x80)
}

/// Reads an HTTP/1 request head, strictly: CRLF line endings only, no
/// folded lines, header names that are tokens, no control characters in
/// values, at most [`MAX_HEADERS`] headers in [`MAX_HEAD`] bytes, exactly
/// one valid `Host` (agreeing with an absolute or CONNECT target), at most
/// one `Content-Length` (digits only), `Transfer-Encoding` only `chunked`
/// and never beside a `Content-Length`. Anything else is [`Head::Bad`]:
/// what the proxy checks must be what every server reads.
pub fn request_head(bytes: &[u8]) -> Head {
    let end = match head_end(bytes) {
        Err(why) => return Head::Bad(why),
        Ok(None) if bytes.len() >= MAX_HEAD => {
            return Head::Bad(format!("the head is longer than {MAX_HEAD} bytes"))
        }
        Ok(None) => return Head::Incomplete,
        Ok(Some(end)) if end > MAX_HEAD => {
            return Head::Bad(format!("the head is longer than {MAX_HEAD} bytes"))
        }
        Ok(Some(end)) => end,
    };
    match parse_request(&bytes[..end]) {
        Ok(head) => Head::Request(head),
        Err(why) => Head::Bad(why),
    }
}

fn parse_request(head: &[u8]) -> Result<RequestHead, String> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut slots);
    match request.parse(head) {
        Ok(httparse::Status::Complete(n)) if n == head.len() => {}
        Ok(_) => return Err("not an HTTP/1 request head".into()),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(format!("more than {MAX_HEADERS} headers"))
        }
        Err(e) => return Err(format!("not an HTTP/1 request head ({e})")),
    }
    let (Some(method), Some(target), Some(version)) =
        (request.method, request.path, request.version)
    else {
        return Err("not an HTTP/1 request head".into());
    };
    if target.is_empty() || !target.bytes().all(|b| (0x21..0x7f).contains(&b)) {
        return Err("the request target is not visible ASCII".into());
    }
    let version = if version == 1 { "HTTP/1.1" } else { "HTTP/1.0" };
    let mut headers = Vec::with_capacity(request.headers.len());
    for header in request.headers.iter() {
        if !valid_value(header.value) {
            return Err(format!(
                "the value of {} holds a control character",
                header.name
            ));
        }
        let Ok(value) = std::str::from_utf8(header.value) else {
            return Err(format!("the value of {} is not UTF-8", header.name));
        };
        headers.push((
            header.name.to_owned(),
            value.trim_matches([' ', '\t']).to_owned(),
        ));
    }
    let all = |name: &str| -> Vec<&str> {
        headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    };
    let connect = method.eq_ignore_ascii_case("CONNECT");
    let hosts = all("host");
    let host = match hosts[..] {
        [host] => Some(parse_authority(host).map_err(|e| format!("Host: {e}"))?),
        // Python's http.client (3.11) sends its CONNECT without one.
        [] if connect => None,
        _ => {
            return Err(format!(
                "a request needs exactly one Host header ({} given)",
                hosts.len()
            ))
        }
    };
    let lengths = all("content-length");
    let codings = all("transfer-encoding");
    let framing = match (&lengths[..], &codings[..]) {
        ([], []) => Framing::None,
        ([length], []) => {
            if length.is_empty() || length.len() > 18 || !length.bytes().all(|b| b.is_ascii_digit())
            {
                return Err(format!("Content-Length {length:?} is not a number"));
            }
            match length.parse::<u64>() {
                Ok(0) => Framing::None,
                Ok(n) => Framing::Length(n),
                Err(_) => return Err(format!("Content-Length {length:?} is not a number")),
            }
        }
        ([], [coding]) if coding.eq_ignore_ascii_case("chunked") && version == "HTTP/1.1" => {
            Framing::Chunked
        }
        ([], [_]) => {
            return Err("Transfer-Encoding may only be chunked (and only in HTTP/1.1)".into())
        }
        ([_, _, ..], _) => return Err("more than one Content-Length".into()),
        (_, [_, _, ..]) => return Err("more than one Transfer-Encoding".into()),
        ([_], [_]) => return Err("both Content-Length and Transfer-Encoding".into()),
    };
    let expects = all("expect");
    let expect_continue = match &expects[..] {
        [] => false,
        [e] if e.eq_ignore_ascii_case("100-continue") => true,
        _ => return Err("the only expectation allowed is one Expect: 100-continue".into()),
    };
    let (origin_form, target_authority) = if connect {
        if framing != Framing::None {
            return Err("a CONNECT request has no body".into());
        }
        let authority = parse_authority(target)?;
        if authority.port.is_none() {
            return Err(format!("CONNECT {target:?} names no port"));
        }
        (String::new(), Some(authority))
    } else if target.starts_with('/') {
        (target.to_owned(), None)
    } else if target.contains("://") {
        let (authority, origin) = parse_absolute(target)?;
        (origin, Some(authority))
    } else {
        return Err(format!(
            "{target:?} is not a request target the proxy forwards"
        ));
    };
    let host = match (host, &target_authority) {
        (Some(host), Some(authority)) => {
            let default_port = if connect { authority.port } else { Some(80) };
            let same_port = host.port.is_none() || host.port == authority.port.or(default_port);
            if host.host != authority.host || !same_port {
                return Err(format!(
                    "the Host header names {}, the request target {}",
                    host.host, authority.host
                ));
            }
            host
        }
        (Some(host), None) => host,
        (None, Some(authority)) => authority.clone(),
        (None, None) => return Err("a request needs exactly one Host header".into()),
    };
    let upgrades = all("upgrade");
    let keys = all("sec-websocket-key");
    let connection_upgrade = all("connection")
        .iter()
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    let websocket = method == "GET"
        && version == "HTTP/1.1"
        && framing == Framing::None
        && matches!(&upgrades[..], [u] if u.eq_ignore_ascii_case("websocket"))
        && connection_upgrade
        && matches!(&keys[..], [k] if !k.is_empty());
    Ok(RequestHead {
        method: method.to_owned(),
        target: target.to_owned(),
        origin_form,
        target_authority,
        version: version.to_owned(),
        host,
        headers,
        length: head.len(),
        framing,
        websocket,
        expect_continue,
    })
}

/// The head of an HTTP/1 response, as the proxy forwards it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    pub status: u16,
    pub reason: String,
    /// Every header, in order (values as bytes: they are passed on).
    pub headers: Vec<(String, Vec<u8>)>,
    pub content_length: Option<u64>,
    /// `Transfer-Encoding` ends with `chunked`.
    pub chunked: bool,
    /// A transfer coding other than `chunked` (gzip, say): not readable
    /// as it comes.
    pub other_transfer_coding: bool,
    /// A `Content-Encoding` other than `identity` (compressed).
    pub content_encoding: Option<String>,
    /// Bytes of the head, its final blank line included.
    pub length: usize,
}

impl ResponseHead {
    /// How the body after this head is framed, for a request of `method`.
    pub fn framing(&self, method: &str) -> Framing {
        if method.eq_ignore_ascii_case("HEAD")
            || (100..200).contains(&self.status)
            || self.status == 204
            || self.status == 304
        {
            Framing::None
        } else if self.chunked {
            Framing::Chunked
        } else if self.other_transfer_coding {
            Framing::Close
        } else {
            match self.content_length {
                Some(0) => Framing::None,
                Some(n) => Framing::Length(n),
                None => Framing::Close,
            }
        }
    }
}

/// What the first bytes of a response say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseParse {
    Incomplete,
    /// Not a response the proxy can pass on, and why.
    Bad(String),
    Response(ResponseHead),
}

/// Reads an HTTP/1 response head (a 1xx head counts as one).
pub fn response_head(bytes: &[u8]) -> ResponseParse {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut slots);
    let length = match response.parse(bytes) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if bytes.len() < MAX_HEAD => {
            return ResponseParse::Incomplete
        }
        Ok(httparse::Status::Partial) => {
            return ResponseParse::Bad(format!("a response head longer than {MAX_HEAD} bytes"))
        }
        Err(e) => return ResponseParse::Bad(format!("not an HTTP/1 response head ({e})")),
    };
    let Some(status) = response.code else {
        return ResponseParse::Bad("not an HTTP/1 response head".into());
    };
    let mut head = ResponseHead {
        status,
        reason: response.reason.unwrap_or_default().to_owned(),
        headers: Vec::with_capacity(response.headers.len()),
        content_length: None,
        chunked: false,
        other_transfer_coding: false,
        content_encoding: None,
        length,
    };
    for header in response.headers.iter() {
        let value = String::from_utf8_lossy(header.value);
        let value = value.trim();
        if header.name.eq_ignore_ascii_case("content-length") {
            let parsed = value
                .bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| value.parse::<u64>().ok())
                .flatten();
            match (parsed, head.content_length) {
                (Some(n), None) => head.content_length = Some(n),
                (Some(n), Some(m)) if n == m => {}
                _ => {
                    return ResponseParse::Bad(format!(
                        "an invalid or repeated Content-Length {value:?}"
                    ))
                }
            }
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            for coding in value.split(',').map(str::trim).filter(|c| !c.is_empty()) {
                if head.chunked {
                    // Something after chunked: not chunked at all.
                    head.other_transfer_coding = true;
                    head.chunked = false;
                }
                if coding.eq_ignore_ascii_case("chunked") {
                    head.chunked = true;
                } else {
                    head.other_transfer_coding = true;
                }
            }
        } else if header.name.eq_ignore_ascii_case("content-encoding") {
            for coding in value.split(',').map(str::trim).filter(|c| !c.is_empty()) {
                if !coding.eq_ignore_ascii_case("identity") {
                    head.content_encoding = Some(value.to_owned());
                }
            }
        }
        head.headers
            .push((header.name.to_owned(), header.value.to_vec()));
    }
    ResponseParse::Response(head)
}

/// Where a chunked body's decoder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// Reading a size line.
    Size,
    /// This many data bytes still to come.
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    /// Trailer lines, until an empty one.
    Trailer,
    Done,
}

/// A strict, incremental decoder of a chunked body: hex sizes (optionally
/// with extensions, which are dropped), CRLF everywhere, trailers read
/// and dropped; bounded lines.
#[derive(Debug)]
pub struct ChunkedDecoder {
    state: Chunk,
    line: Vec<u8>,
    trailers: usize,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self {
            state: Chunk::Size,
            line: Vec::new(),
            trailers: 0,
        }
    }
}

impl ChunkedDecoder {
    /// Whether the last chunk and the trailers were read.
    pub fn done(&self) -> bool {
        self.state == Chunk::Done
    }

    /// Decodes from `input`, appending data to `out`; returns how many
    /// bytes of `input` it used (all of them, unless the body ended: what
    /// follows it is not part of it).
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, String> {
        let mut at = 0;
        while at < input.len() {
            match self.state {
                Chunk::Done => break,
                Chunk::Data(left) => {
                    let n = (input.len() - at).min(usize::try_from(left).unwrap_or(usize::MAX));
                    out.extend_from_slice(&input[at..at + n]);
                    at += n;
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        Chunk::DataEnd
                    } else {
                        Chunk::Data(left)
                    };
                }
                Chunk::Size | Chunk::DataEnd | Chunk::Trailer => {
                    let byte = input[at];
                    at += 1;
                    if self.line.last() == Some(&b'\r') && byte != b'\n' {
                        return Err("a bare CR in a chunked body".into());
                    }
                    if byte == b'\n' && self.line.last() != Some(&b'\r') {
                        return Err("a bare LF in a chunked body".into());
                    }
                    self.line.push(byte);
                    if self.line.len() > MAX_CHUNK_LINE {
                        return Err("a chunked body's line is too long".into());
                    }
                    if byte == b'\n' {
                        let line = std::mem::take(&mut self.line);
                        self.line_done(&line[..line.len() - 2])?;
                    }
                }
            }
        }
        Ok(at)
    }

    fn line_done(&mut self, line: &[u8]) -> Result<(), String> {
        match self.state {
            Chunk::DataEnd if line.is_empty() => self.state = Chunk::Size,
            Chunk::DataEnd => return Err("a chunk is longer than its size".into()),
            Chunk::Size => {
                let (size, extension) = match line.iter().position(|&b| b == b';') {
                    Some(i) => (&line[..i], &line[i..]),
                    None => (line, &line[..0]),
                };
                if size.is_empty()
                    || size.len() > 15
                    || !size.iter().all(u8::is_ascii_hexdigit)
                    || !valid_value(extension)
                {
                    return Err(format!(
                        "{:?} is not a chunk size",
                        String::from_utf8_lossy(line)
                    ));
                }
                let text = std::str::from_utf8(size).map_err(|e| e.to_string())?;
                let size = u64::from_str_radix(text, 16).map_err(|e| e.to_string())?;
                self.state = if size == 0 {
                    Chunk::Trailer
                } else {
                    Chunk::Data(size)
                };
            }
            Chunk::Trailer if line.is_empty() => self.state = Chunk::Done,
            Chunk::Trailer => {
                self.trailers += line.len();
                if self.trailers > MAX_TRAILERS || !valid_value(line) {
                    return Err("a chunked body's trailers are too long or invalid".into());
                }
            }
            Chunk::Data(_) | Chunk::Done => {}
        }
        Ok(())
    }
}

/// `data` as one chunk of a chunked body (nothing for no data: an empty
/// chunk would end the body).
pub fn chunk(data: &[u8], out: &mut Vec<u8>) {
    if data.is_empty() {
        return;
    }
    out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// The end of a chunked body.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// The parsers' invariants, shared by the unit tests, the fuzz targets
/// (`fuzz/fuzz_targets/egress_http.rs`, `egress_tls.rs`) and the stable
/// runner.
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing {
    use super::*;

    /// A ClientHello (one record) naming `name`, after another extension.
    pub fn client_hello_for(name: &str) -> Vec<u8> {
        let mut sni = Vec::new();
        let name = name.as_bytes();
        sni.extend_from_slice(&((name.len() + 3) as u16).to_be_bytes());
        sni.push(0);
        sni.extend_from_slice(&(name.len() as u16).to_be_bytes());
        sni.extend_from_slice(name);
        let mut extensions = Vec::new();
        extensions.extend_from_slice(&[0x00, 0x0a, 0x00, 0x02, 0x00, 0x00]); // another extension
        extensions.extend_from_slice(&[0, 0]);
        extensions.extend_from_slice(&(sni.len() as u16).to_be_bytes());
        extensions.extend_from_slice(&sni);
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.push(0); // session id
        body.extend_from_slice(&[0, 2, 0x13, 0x01]); // one cipher suite
        body.extend_from_slice(&[1, 0]); // compression
        body.extend_from_slice(&(extensions.len() as u16).to_be_bytes());
        body.extend_from_slice(&extensions);
        let mut handshake = vec![1];
        handshake.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        handshake.extend_from_slice(&body);
        let mut record = vec![22, 3, 1];
        record.extend_from_slice(&(handshake.len() as u16).to_be_bytes());
        record.extend_from_slice(&handshake);
        record
    }

    /// Inputs to start from: heads of each kind the proxy reads.
    pub fn http_seeds() -> Vec<Vec<u8>> {
        [
            &b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"[..],
            b"POST /x?y=1 HTTP/1.1\r\nHost: a.test:8080\r\nContent-Length: 5\r\n\r\nhello",
            b"POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n",
            b"GET /ws HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        ]
        .iter()
        .map(|seed| seed.to_vec())
        .collect()
    }

    /// Inputs to start from: ClientHellos, whole and in two records.
    pub fn tls_seeds() -> Vec<Vec<u8>> {
        let hello = client_hello_for("a.allowed.test");
        // The same handshake split over two records.
        let handshake = &hello[5..];
        let (first, second) = handshake.split_at(handshake.len() / 2);
        let mut split = Vec::new();
        for part in [first, second] {
            split.extend_from_slice(&[22, 3, 1]);
            split.extend_from_slice(&(part.len() as u16).to_be_bytes());
            split.extend_from_slice(part);
        }
        vec![hello, split, client_hello_for("")]
    }

    /// Any bytes: [`client_hello`] never panics; a server name it reads is
    /// in the bytes; and below [`MAX_HEAD`] (where the proxy stops reading)
    /// a decision stays the same when more bytes follow: it never read
    /// past what it had. Returns whether a ClientHello was read.
    pub fn check_client_hello(bytes: &[u8]) -> bool {
        let hello = client_hello(bytes);
        if let Hello::ServerName(Some(name)) = &hello {
            assert!(
                name.is_empty() || bytes.windows(name.len()).any(|w| w == name.as_bytes()),
                "{name:?}"
            );
        }
        if hello != Hello::Incomplete && bytes.len() < MAX_HEAD {
            let mut more = bytes.to_vec();
            more.extend_from_slice(b"\x16\x03\x01\x00\x00 more");
            assert_eq!(client_hello(&more), hello);
        }
        matches!(hello, Hello::ServerName(_))
    }

    /// Any bytes: [`request_head`] never panics, and a head it accepts has
    /// CRLF lines only, no NUL, one Host (or none, for a CONNECT), and is
    /// forwarded as a head that reads back the same. Returns whether the
    /// bytes were accepted.
    pub fn check_request_head(bytes: &[u8]) -> bool {
        let Head::Request(head) = request_head(bytes) else {
            return false;
        };
        let text = &bytes[..head.length];
        let shown = || String::from_utf8_lossy(text).into_owned();
        for (i, &b) in text.iter().enumerate() {
            if b == b'\n' {
                assert_eq!(text[i - 1], b'\r', "{}", shown());
            }
            if b == b'\r' {
                assert_eq!(text[i + 1], b'\n', "{}", shown());
            }
            assert!(b != 0, "{}", shown());
        }
        let hosts = head
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("host"))
            .count();
        // The parser, like the proxy, reads the method CONNECT in any case.
        let connect = head.method.eq_ignore_ascii_case("CONNECT");
        assert!(hosts == 1 || (hosts == 0 && connect));
        if connect {
            assert!(head
                .target_authority
                .as_ref()
                .is_some_and(|a| a.port.is_some()));
            return true;
        }
        let mut again = head
            .forwarded_lines(&head.origin_form, false, |_, v| v.to_owned())
            .into_bytes();
        match head.framing {
            Framing::Length(n) => {
                again.extend_from_slice(format!("Content-Length: {n}\r\n").as_bytes())
            }
            Framing::Chunked => again.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
            Framing::None | Framing::Close => {}
        }
        again.extend_from_slice(b"\r\n");
        let Head::Request(back) = request_head(&again) else {
            panic!(
                "{} was forwarded as a head that does not read back",
                shown()
            );
        };
        assert_eq!(
            (
                &back.method,
                &back.origin_form,
                &back.host,
                back.framing,
                back.websocket
            ),
            (
                &head.method,
                &head.origin_form,
                &head.host,
                head.framing,
                head.websocket
            ),
            "{}",
            shown()
        );
        true
    }

    /// Any bytes: the chunked decoder and the response head reader never
    /// panic, and the decoder never uses more bytes than it was given.
    pub fn check_bodies(bytes: &[u8]) {
        let _ = response_head(bytes);
        let mut decoder = ChunkedDecoder::default();
        let mut out = Vec::new();
        for piece in bytes.chunks(7) {
            match decoder.feed(piece, &mut out) {
                Ok(used) => assert!(used <= piece.len()),
                Err(_) => break,
            }
            if decoder.done() {
                break;
            }
        }
        assert!(out.len() <= bytes.len());
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn parsed(raw: &[u8]) -> RequestHead {
        match request_head(raw) {
            Head::Request(head) => head,
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(raw)),
        }
    }

    fn refused(raw: &[u8]) -> String {
        match request_head(raw) {
            Head::Bad(why) => why,
            other => panic!(
                "{:?} was not refused: {other:?}",
                String::from_utf8_lossy(raw)
            ),
        }
    }

    #[test]
    fn forwarded_heads_are_rebuilt_and_closed() {
        let raw = b"GET http://a.test/x?y=1 HTTP/1.1\r\nHost: a.test\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive, X-Drop\r\nX-Drop: 1\r\nUpgrade: h2c\r\nAuthorization: Bearer PH\r\nAccept-Encoding: gzip\r\nRange: bytes=0-3\r\nIf-Range: \"e\"\r\n\r\nbody";
        let head = parsed(raw);
        assert_eq!(head.header("authorization"), Some("Bearer PH"));
        assert_eq!(head.origin_form, "/x?y=1");
        assert_eq!(head.length, raw.len() - 4);
        assert!(!head.websocket, "only WebSocket upgrades are forwarded");
        let out = head.forwarded_lines(&head.origin_form, false, |_, v| v.replace("PH", "real"));
        assert_eq!(
            out,
            "GET /x?y=1 HTTP/1.1\r\nHost: a.test\r\nAuthorization: Bearer real\r\nAccept-Encoding: gzip\r\nRange: bytes=0-3\r\nIf-Range: \"e\"\r\nConnection: close\r\n"
        );
        // Masked: the whole answer, as it is.
        let out = head.forwarded_lines("/", true, |_, v| v.to_owned());
        assert!(
            out.ends_with("Accept-Encoding: identity\r\nConnection: close\r\n"),
            "{out}"
        );
        assert!(!out.contains("gzip"));
        assert!(!out.to_ascii_lowercase().contains("range"), "{out}");
        // The Host goes as it was checked, whatever its spelling.
        let odd = parsed(b"GET / HTTP/1.1\r\nhost:  A.Test.:80 \r\n\r\n");
        assert!(odd
            .forwarded_lines("/", false, |_, v| v.to_owned())
            .starts_with("GET / HTTP/1.1\r\nhost: a.test:80\r\n"));
        let v6 = parsed(b"GET / HTTP/1.1\r\nHost: [2001:DB8::1]:8080\r\n\r\n");
        assert!(v6
            .forwarded_lines("/", false, |_, v| v.to_owned())
            .contains("Host: [2001:db8::1]:8080\r\n"));
        assert_eq!(parse_absolute("http://a.test").unwrap().1, "/");
        assert_eq!(parse_absolute("http://a.test?q").unwrap().1, "/?q");
        // A WebSocket handshake is the one upgrade forwarded.
        let ws = parsed(b"GET /chat HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: abc==\r\nSec-WebSocket-Version: 13\r\n\r\n");
        assert!(ws.websocket);
        let out = ws.forwarded_lines("/chat", false, |_, v| v.to_owned());
        assert!(
            out.ends_with(
                "Sec-WebSocket-Version: 13\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            ),
            "{out}"
        );
        for not_ws in [
            &b"POST /chat HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: abc==\r\n\r\n"[..],
            b"GET /chat HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\nConnection: keep-alive\r\nSec-WebSocket-Key: abc==\r\n\r\n",
            b"GET /chat HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
            b"GET /chat HTTP/1.0\r\nHost: a.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: abc==\r\n\r\n",
        ] {
            let head = parsed(not_ws);
            assert!(!head.websocket);
            assert!(!head.forwarded_lines("/", false, |_, v| v.to_owned()).contains("pgrade"));
        }
    }

    #[test]
    fn request_heads_give_the_host_the_target_and_the_framing() {
        let raw = b"POST /x HTTP/1.1\r\nUser-Agent: t\r\nhOsT: Api.Test:80\r\nContent-Length: 12\r\n\r\nbody";
        let head = parsed(raw);
        assert_eq!(
            head.host,
            Authority {
                host: "api.test".into(),
                port: Some(80)
            }
        );
        assert_eq!(head.framing, Framing::Length(12));
        assert_eq!(head.length, raw.len() - 4);
        let chunked = parsed(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n");
        assert_eq!(chunked.framing, Framing::Chunked);
        let expect = parsed(
            b"PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nExpect: 100-continue\r\n\r\n",
        );
        assert!(expect.expect_continue);
        assert!(!expect
            .forwarded_lines("/", false, |_, v| v.to_owned())
            .contains("xpect"));
        assert_eq!(request_head(b"GET / HTTP/1.1\r\nHost: x"), Head::Incomplete);
        assert_eq!(
            request_head(b"GET / HTTP/1.1\r\nHost: x\r\n\r"),
            Head::Incomplete
        );
        let connect = parsed(b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n");
        assert_eq!(
            connect.target_authority,
            Some(Authority {
                host: "a.test".into(),
                port: Some(443)
            })
        );
        // Python's http.client sends its CONNECT without a Host.
        let bare = parsed(b"CONNECT a.test:443 HTTP/1.0\r\n\r\n");
        assert_eq!(bare.host.host, "a.test");
        let v6 = parsed(b"CONNECT [2001:db8::1]:443 HTTP/1.1\r\nHost: [2001:db8::1]:443\r\n\r\n");
        assert_eq!(v6.host.host, "2001:db8::1");
    }

    #[test]
    fn ambiguous_heads_are_refused() {
        for raw in [
            // Line endings: bare LF, bare CR, folding.
            &b"GET / HTTP/1.1\nHost: a\n\n"[..],
            b"GET / HTTP/1.1\r\nHost: a\nX: y\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX: y\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\rX: y\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX: y\r\n\rZ",
            b"GET / HTTP/1.1\r\nHost: a\r\nX: y\r\n folded\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX: y\r\n\tfolded\r\n\r\n",
            b"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
            // Host: none, two, invalid, disagreeing with the target.
            b"GET / HTTP/1.1\r\nX: y\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: u@a\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a:99999\r\n\r\n",
            b"GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n",
            b"GET http://a.test/ HTTP/1.1\r\nHost: a.test:8080\r\n\r\n",
            b"GET http://u@a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
            b"GET https://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
            b"GET ftp://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
            b"GET http://a.test/#f HTTP/1.1\r\nHost: a.test\r\n\r\n",
            b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET a.test/ HTTP/1.1\r\nHost: a\r\n\r\n",
            // Names and values.
            b"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX(y): z\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\n: z\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x1bb\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x7fb\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX: \xff\xfe\r\n\r\n",
            b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET / HTTP/2.0\r\nHost: a\r\n\r\n",
            b"G\x01T / HTTP/1.1\r\nHost: a\r\n\r\n",
            // Framing.
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1,1\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x10\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n",
            b"POST / HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nExpect: something\r\n\r\n",
            // CONNECT targets.
            b"CONNECT a.test:65536 HTTP/1.1\r\nHost: a.test:65536\r\n\r\n",
            b"CONNECT a.test:443abc HTTP/1.1\r\n\r\n",
            b"CONNECT 443@evil.test HTTP/1.1\r\n\r\n",
            b"CONNECT a.test:443@evil.test:443 HTTP/1.1\r\n\r\n",
            b"CONNECT evil.test:443@a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n",
            b"CONNECT a.test HTTP/1.1\r\nHost: a.test\r\n\r\n",
            b"CONNECT a.test:0 HTTP/1.1\r\n\r\n",
            b"CONNECT a.test: HTTP/1.1\r\n\r\n",
            b"CONNECT [::1:443 HTTP/1.1\r\n\r\n",
            b"CONNECT ::1:443 HTTP/1.1\r\n\r\n",
            b"CONNECT a.test:443 HTTP/1.1\r\nHost: b.test:443\r\n\r\n",
            b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:80\r\n\r\n",
            b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\n\r\n",
        ] {
            refused(raw);
        }
        let mut many = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
        for i in 0..MAX_HEADERS {
            many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert!(refused(&many).contains("headers"));
        let mut long = b"GET / HTTP/1.1\r\nHost: a\r\nX: ".to_vec();
        long.resize(MAX_HEAD + 1, b'a');
        assert!(refused(&long).contains("longer"));
        assert!(refused(b"\x16\x03\x01junk\r\n\r\n").contains("HTTP/1"));
    }

    #[test]
    fn authorities_are_read_strictly() {
        assert_eq!(
            parse_authority("A.Test:443").unwrap(),
            Authority {
                host: "a.test".into(),
                port: Some(443)
            }
        );
        assert_eq!(parse_authority("a.test").unwrap().port, None);
        assert_eq!(parse_authority("[::1]:80").unwrap().host, "::1");
        for bad in [
            "",
            ":443",
            "a.test:",
            "a.test:65536",
            "a.test:443abc",
            "a.test:-1",
            "a.test: 443",
            "443@evil",
            "evil:443@a.test:443",
            "a.test:443:443",
            "a%2etest",
            "[::1",
            "[x]:1",
            "[::1]x",
            "a test",
            "a.test:00000443",
            // One spelling per name and per port: no empty label, one
            // trailing dot at most, no leading zero.
            "a.test..:443",
            "a.test..",
            "a..test:443",
            ".a.test:443",
            ".",
            "a.test:0443",
            "a.test:0",
            "a.test:00",
            "[::1]:080",
            &format!("{}.test", "a".repeat(64)),
            &format!("{}test", "a.".repeat(127)),
        ] {
            assert!(parse_authority(bad).is_err(), "{bad:?}");
        }
        // The absolute form (one trailing dot) is the same name.
        assert_eq!(
            parse_authority("a.test.:443").unwrap(),
            parse_authority("a.test:443").unwrap()
        );
        assert_eq!(parse_authority("a.test:8080").unwrap().port, Some(8080));
    }

    fn encode_chunked(data: &[u8], size: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for piece in data.chunks(size) {
            chunk(piece, &mut out);
        }
        out.extend_from_slice(b"0\r\nTrailer: x\r\n\r\n");
        out
    }

    #[test]
    fn chunked_bodies_decode_in_any_pieces_and_stop_at_their_end() {
        let data: Vec<u8> = (0..2000u32).map(|i| (i % 251) as u8).collect();
        for size in [1, 7, 100, 5000] {
            let mut encoded = encode_chunked(&data, size);
            encoded.extend_from_slice(b"GET /smuggled HTTP/1.1\r\n");
            for piece in [1, 3, 64, encoded.len()] {
                let mut decoder = ChunkedDecoder::default();
                let (mut out, mut used) = (Vec::new(), 0);
                for bytes in encoded.chunks(piece) {
                    if decoder.done() {
                        break;
                    }
                    used += decoder.feed(bytes, &mut out).unwrap();
                }
                assert!(decoder.done());
                assert_eq!(out, data, "chunks of {size} in pieces of {piece}");
                assert_eq!(&encoded[used..], b"GET /smuggled HTTP/1.1\r\n");
            }
        }
        for bad in [
            &b"5\nhello\r\n0\r\n\r\n"[..],
            b"5\r\nhello\n0\r\n\r\n",
            b"5\r\nhelloX\r\n0\r\n\r\n",
            b"x\r\n",
            b"-5\r\n",
            b" 5\r\n",
            b"5 \r\n",
            b"\r\n",
            b"ffffffffffffffffff\r\n",
            b"5;a\x00b\r\n",
            b"0\r\nTrailer: x\n\r\n",
        ] {
            let mut decoder = ChunkedDecoder::default();
            assert!(
                decoder.feed(bad, &mut Vec::new()).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    /// A deterministic fuzz: mutations of valid heads (bytes inserted,
    /// removed and replaced, with CR, LF, spaces, colons, NUL and the
    /// like) never panic, and whatever is accepted has CRLF lines only,
    /// one Host, one framing, and is forwarded as a head that reads back
    /// the same.
    #[test]
    fn mutated_heads_are_refused_or_read_consistently() {
        let seeds: [&[u8]; 5] = [
            b"GET /a?b=c HTTP/1.1\r\nHost: a.test\r\nX-Y: z\r\n\r\n",
            b"POST http://a.test/p HTTP/1.1\r\nHost: a.test\r\nContent-Length: 10\r\nConnection: keep-alive\r\n\r\n",
            b"PUT /u HTTP/1.1\r\nHost: a.test:80\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n",
            b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n",
            b"GET /ws HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\nConnection: upgrade\r\nSec-WebSocket-Key: k\r\n\r\n",
        ];
        let interesting = b"\r\n :\t\x00\x0b\x7f\xff@,;Hh0-/";
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut accepted = 0;
        for round in 0..20_000 {
            let mut bytes = seeds[round % seeds.len()].to_vec();
            for _ in 0..1 + next() % 3 {
                let at = (next() as usize) % bytes.len();
                let byte = interesting[(next() as usize) % interesting.len()];
                match next() % 3 {
                    0 => bytes.insert(at, byte),
                    1 => {
                        bytes.remove(at);
                    }
                    _ => bytes[at] = byte,
                }
                if bytes.is_empty() {
                    bytes.push(b'G');
                }
            }
            if fuzzing::check_request_head(&bytes) {
                accepted += 1;
            }
            fuzzing::check_bodies(&bytes);
        }
        assert!(
            accepted > 1000,
            "the mutations left too few heads valid: {accepted}"
        );
    }

    #[test]
    fn response_heads_give_their_framing() {
        let ResponseParse::Response(head) = response_head(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Encoding: gzip\r\n\r\n",
        ) else {
            panic!()
        };
        assert_eq!(head.framing("GET"), Framing::Length(5));
        assert_eq!(head.framing("HEAD"), Framing::None);
        assert_eq!(head.content_encoding.as_deref(), Some("gzip"));
        let ResponseParse::Response(head) = response_head(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
        ) else {
            panic!()
        };
        assert_eq!(head.framing("GET"), Framing::Chunked);
        let ResponseParse::Response(head) =
            response_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n")
        else {
            panic!()
        };
        assert!(head.other_transfer_coding);
        let ResponseParse::Response(head) = response_head(b"HTTP/1.0 200 OK\r\n\r\n") else {
            panic!()
        };
        assert_eq!(head.framing("GET"), Framing::Close);
        let ResponseParse::Response(head) =
            response_head(b"HTTP/1.1 304 x\r\nContent-Length: 9\r\n\r\n")
        else {
            panic!()
        };
        assert_eq!(head.framing("GET"), Framing::None);
        assert!(matches!(
            response_head(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"),
            ResponseParse::Bad(_)
        ));
        assert_eq!(
            response_head(b"HTTP/1.1 200 OK\r\n"),
            ResponseParse::Incomplete
        );
    }

    /// A minimal TLS 1.2/1.3 ClientHello with an SNI extension.
    pub fn hello_for(name: &str) -> Vec<u8> {
        fuzzing::client_hello_for(name)
    }

    #[test]
    fn the_server_name_is_read_from_a_client_hello_even_in_pieces() {
        let hello = hello_for("a.allowed.test");
        assert_eq!(
            client_hello(&hello),
            Hello::ServerName(Some("a.allowed.test".into()))
        );
        for cut in [0, 3, 5, 20, hello.len() - 1] {
            assert_eq!(
                client_hello(&hello[..cut]),
                Hello::Incomplete,
                "cut at {cut}"
            );
        }
        assert_eq!(client_hello(b"GET / HTTP/1.1\r\n"), Hello::NotTls);
        // A lying length never reads past the bytes given.
        let mut broken = hello.clone();
        broken[45] = 0xff;
        let _ = client_hello(&broken);
    }

    #[test]
    fn mutated_client_hellos_never_panic_nor_read_past_their_bytes() {
        // A deterministic cousin of the fuzz target `egress_tls`.
        let hello = hello_for("a.allowed.test");
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut read = 0;
        for round in 0..5_000 {
            let mut bytes = hello.clone();
            for _ in 0..1 + next() % 3 {
                let at = (next() as usize) % bytes.len();
                bytes[at] = next() as u8;
            }
            if round % 5 == 0 {
                bytes.truncate((next() as usize) % bytes.len());
            }
            if fuzzing::check_client_hello(&bytes) {
                read += 1;
            }
        }
        assert!(read > 0);
        assert!(fuzzing::check_client_hello(&hello));
    }
}
