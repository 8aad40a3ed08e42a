//! A real `shellgate serve` for the HTTP tests, and a minimal HTTP/1.1
//! client over plain TCP (so every byte on the wire is the test's own).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use super::{TempDir, BINARY};

pub const KEY: &str = "sk-http-project-a";
pub const OTHER_KEY: &str = "sk-http-project-b";

pub struct Server {
    pub child: Child,
    pub port: u16,
    pub dir: TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let child = &mut self.child;
        if super::wait_until(
            || matches!(child.try_wait(), Ok(Some(_))),
            Duration::from_secs(30),
        ) {
            return;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start(name: &str, settings: &[(&str, &str)]) -> Server {
    let dir = TempDir::new(name);
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let mut command = Command::new(BINARY);
    command
        .arg("--data-dir")
        .arg(dir.path())
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .env(
            "SHELLGATE_API_KEYS",
            format!("{KEY}:alpha,{OTHER_KEY}:beta"),
        )
        .env("SHELLGATE_LOG", "warn")
        .env("SHELLGATE_WARM_CONTAINERS", "1")
        .env("SHELLGATE_BUILD_DEFAULT_IMAGE", "false")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    for (key, value) in settings {
        command.env(key, value);
    }
    let child = command.spawn().unwrap();
    let server = Server { child, port, dir };
    assert!(
        super::wait_until(|| healthy(port), Duration::from_secs(30)),
        "server did not start"
    );
    server
}

pub struct Response {
    pub status: u16,
    pub headers: String,
    pub body: Vec<u8>,
}

impl Response {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// Asserts an OpenAI error envelope with all four keys and `status`.
    pub fn error(&self, status: u16) -> Value {
        assert_eq!(
            self.status,
            status,
            "{}",
            String::from_utf8_lossy(&self.body)
        );
        let body = self.json();
        let error = &body["error"];
        for key in ["message", "type", "param", "code"] {
            assert!(error.get(key).is_some(), "missing {key} in {body}");
        }
        assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()));
        error.clone()
    }
}

/// Whether `/healthz` answers 200 yet: while the server starts, a refused
/// or reset connection only means "not yet" (unlike in [`request`]).
pub fn healthy(port: u16) -> bool {
    let probe = || -> std::io::Result<bool> {
        let mut stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw)?;
        Ok(raw.starts_with(b"HTTP/1.1 200"))
    };
    probe().unwrap_or(false)
}

/// One HTTP/1.1 request on a fresh connection.
pub fn request(
    port: u16,
    method: &str,
    path: &str,
    key: Option<&str>,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    if let Some(key) = key {
        head.push_str(&format!("Authorization: Bearer {key}\r\n"));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    // The server may answer (413) before reading a huge body.
    let _ = stream.write_all(body);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let headers = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = headers
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    let mut body = raw[split + 4..].to_vec();
    if headers
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    Response {
        status,
        headers,
        body,
    }
}

pub fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(line_end) = data.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&data[..line_end]).trim(), 16)
            .unwrap_or(0);
        if size == 0 {
            break;
        }
        out.extend_from_slice(&data[line_end + 2..line_end + 2 + size]);
        data = &data[line_end + 2 + size + 2..];
    }
    out
}

pub fn post_json(port: u16, path: &str, key: &str, body: &Value) -> Response {
    request(
        port,
        "POST",
        path,
        Some(key),
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    )
}

pub fn create_container(port: u16, key: &str) -> String {
    let response = post_json(port, "/v1/containers", key, &json!({"name": "http"}));
    assert_eq!(
        response.status,
        200,
        "{}",
        String::from_utf8_lossy(&response.body)
    );
    response.json()["id"].as_str().unwrap().to_owned()
}

pub fn exec(port: u16, id: &str, commands: &[&str]) -> Response {
    post_json(
        port,
        &format!("/v1/containers/{id}/exec"),
        KEY,
        &json!({"commands": commands}),
    )
}

pub fn list_files(port: u16, id: &str) -> Value {
    request(
        port,
        "GET",
        &format!("/v1/containers/{id}/files"),
        Some(KEY),
        &[],
        b"",
    )
    .json()
}

pub fn container_count(port: u16) -> usize {
    let response = request(port, "GET", "/v1/containers?limit=100", Some(KEY), &[], b"");
    response.json()["data"]
        .as_array()
        .map(Vec::len)
        .unwrap_or(0)
}
