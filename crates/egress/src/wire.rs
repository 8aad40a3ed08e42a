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

/// The head of an HTTP/1 request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    pub method: String,
    /// As written: origin form (`/path`), absolute form (`http://host/path`)
    /// or authority form (`host:443`, for CONNECT).
    pub target: String,
    /// `HTTP/1.1` or `HTTP/1.0`.
    pub version: String,
    /// The `Host` header, if any.
    pub host: Option<String>,
    /// Every header, in order, as written.
    pub headers: Vec<(String, String)>,
    /// Bytes of the head, its final blank line included.
    pub length: usize,
}

/// Headers that concern one connection, not the request: never forwarded.
const HOP_BY_HOP: [&str; 6] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
];

impl RequestHead {
    /// The value of the header `name` (first occurrence).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The head to forward: `target` in origin form, hop-by-hop headers
    /// dropped, each header value passed through `value`, and
    /// `Connection: close`, so that every request on a connection is one
    /// the proxy checked (a WebSocket upgrade keeps its `Connection`).
    pub fn forwarded(&self, target: &str, mut value: impl FnMut(&str) -> String) -> Vec<u8> {
        let mut out = format!("{} {} {}\r\n", self.method, target, self.version);
        for (name, v) in &self.headers {
            if HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h)) {
                continue;
            }
            out.push_str(name);
            out.push_str(": ");
            out.push_str(&value(v));
            out.push_str("\r\n");
        }
        if self.header("upgrade").is_some() {
            out.push_str("Connection: Upgrade\r\n\r\n");
        } else {
            out.push_str("Connection: close\r\n\r\n");
        }
        out.into_bytes()
    }
}

/// The origin form (`/path?query`) of a request target.
pub fn origin_form(target: &str) -> String {
    let rest = match target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"))
    {
        Some(rest) => rest,
        None => return target.to_owned(),
    };
    match rest.find(['/', '?']) {
        Some(i) if rest.as_bytes()[i] == b'/' => rest[i..].to_owned(),
        Some(i) => format!("/{}", &rest[i..]),
        None => "/".to_owned(),
    }
}

/// What the first bytes of a plain connection say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Head {
    Incomplete,
    NotHttp,
    Request(RequestHead),
}

/// An HTTP/1 head's text and length (its blank line included): `Err(true)`
/// while it may still come, `Err(false)` if it cannot be one.
fn head_text(bytes: &[u8]) -> Result<(&str, usize), bool> {
    let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Err(bytes.len() < MAX_HEAD);
    };
    std::str::from_utf8(&bytes[..end])
        .map(|text| (text, end + 4))
        .map_err(|_| false)
}

/// Reads an HTTP/1 request head.
pub fn request_head(bytes: &[u8]) -> Head {
    let (text, length) = match head_text(bytes) {
        Ok(head) => head,
        Err(true) => return Head::Incomplete,
        Err(false) => return Head::NotHttp,
    };
    let mut lines = text.split("\r\n");
    let mut start = lines.next().unwrap_or_default().split(' ');
    let (Some(method), Some(target), Some(version)) = (start.next(), start.next(), start.next())
    else {
        return Head::NotHttp;
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || target.is_empty() {
        return Head::NotHttp;
    }
    let mut headers = Vec::new();
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Head::NotHttp;
        };
        // No whitespace in a name, no line folding: what the proxy checks is
        // what the server reads.
        if name.is_empty() || name.bytes().any(|b| b <= b' ' || b >= 0x7f) {
            return Head::NotHttp;
        }
        headers.push((name.to_owned(), value.trim().to_owned()));
    }
    let hosts: Vec<&String> = headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("host"))
        .map(|(_, v)| v)
        .collect();
    if hosts.len() > 1 {
        // Two Host headers: which one the server reads is anyone's guess.
        return Head::NotHttp;
    }
    Head::Request(RequestHead {
        method: method.to_owned(),
        target: target.to_owned(),
        version: version.to_owned(),
        host: hosts.first().map(|h| (*h).clone()),
        headers,
        length,
    })
}

/// The head of an HTTP/1 response, as far as the proxy needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    pub status: u16,
    pub content_length: Option<usize>,
    pub chunked: bool,
    /// A `Content-Encoding` (compressed: not searched).
    pub encoded: bool,
    /// Bytes of the head, its final blank line included.
    pub length: usize,
}

/// What the first bytes of a response say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseParse {
    Incomplete,
    NotHttp,
    Response(ResponseHead),
}

/// Reads an HTTP/1 response head (a 1xx head counts as one).
pub fn response_head(bytes: &[u8]) -> ResponseParse {
    let (text, length) = match head_text(bytes) {
        Ok(head) => head,
        Err(true) => return ResponseParse::Incomplete,
        Err(false) => return ResponseParse::NotHttp,
    };
    let mut lines = text.split("\r\n");
    let mut start = lines.next().unwrap_or_default().splitn(3, ' ');
    let (Some(version), Some(status)) = (start.next(), start.next()) else {
        return ResponseParse::NotHttp;
    };
    let Ok(status) = status.parse::<u16>() else {
        return ResponseParse::NotHttp;
    };
    if !version.starts_with("HTTP/1.") {
        return ResponseParse::NotHttp;
    }
    let mut head = ResponseHead {
        status,
        content_length: None,
        chunked: false,
        encoded: false,
        length,
    };
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return ResponseParse::NotHttp;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            head.content_length = value.parse().ok();
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            head.chunked = value.to_ascii_lowercase().contains("chunked");
        } else if name.eq_ignore_ascii_case("content-encoding") {
            head.encoded = !value.eq_ignore_ascii_case("identity");
        }
    }
    ResponseParse::Response(head)
}

/// Splits `host[:port]` (or `[v6]:port`) into the host and the port.
pub fn split_authority(authority: &str) -> (String, Option<u16>) {
    let authority = authority.trim();
    if let Some(rest) = authority.strip_prefix('[') {
        if let Some((host, tail)) = rest.split_once(']') {
            let port = tail.strip_prefix(':').and_then(|p| p.parse().ok());
            return (host.to_owned(), port);
        }
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => (host.to_owned(), port.parse().ok()),
        _ => (authority.to_owned(), None),
    }
}

/// The host of an absolute-form target (`http://host[:port]/path`).
pub fn absolute_host(target: &str) -> Option<(String, Option<u16>)> {
    let rest = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"))?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit('@').next()?;
    Some(split_authority(authority))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn forwarded_heads_are_checked_and_closed() {
        let raw = b"GET http://a.test/x?y=1 HTTP/1.1\r\nHost: a.test\r\nProxy-Connection: keep-alive\r\nAuthorization: Bearer PH\r\n\r\nbody";
        let Head::Request(head) = request_head(raw) else {
            panic!("not parsed")
        };
        assert_eq!(head.header("authorization"), Some("Bearer PH"));
        let out = head.forwarded(&origin_form(&head.target), |v| v.replace("PH", "real"));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "GET /x?y=1 HTTP/1.1\r\nHost: a.test\r\nAuthorization: Bearer real\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(origin_form("http://a.test"), "/");
        assert_eq!(origin_form("http://a.test?q"), "/?q");
        assert_eq!(origin_form("/p"), "/p");
        // Ambiguous heads are refused.
        assert_eq!(
            request_head(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
            Head::NotHttp
        );
        assert_eq!(
            request_head(b"GET / HTTP/1.1\r\nHost : a\r\n folded\r\n\r\n"),
            Head::NotHttp
        );
    }

    /// A minimal TLS 1.2/1.3 ClientHello with an SNI extension.
    pub fn hello_for(name: &str) -> Vec<u8> {
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
    fn request_heads_give_the_host_and_the_target() {
        let head = b"GET /x HTTP/1.1\r\nUser-Agent: t\r\nhOsT: Api.Test:80\r\n\r\nbody";
        match request_head(head) {
            Head::Request(r) => {
                assert_eq!(r.host.as_deref(), Some("Api.Test:80"));
                assert_eq!(r.length, head.len() - 4);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(request_head(b"GET / HTTP/1.1\r\nHost: x"), Head::Incomplete);
        assert_eq!(request_head(b"\x16\x03\x01junk\r\n\r\n"), Head::NotHttp);
        assert_eq!(split_authority("a.test:443"), ("a.test".into(), Some(443)));
        assert_eq!(split_authority("[::1]:80"), ("::1".into(), Some(80)));
        assert_eq!(
            absolute_host("http://user@a.test:8080/p?q"),
            Some(("a.test".into(), Some(8080)))
        );
    }
}
