//! A real `shellgate serve` for the HTTP benchmarks, on a data directory of
//! its own, ready once `/healthz` answers and its pools have had time to
//! fill.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const KEY: &str = "sk-bench-project-a";

pub struct Server {
    child: Child,
    pub port: u16,
    dir: std::path::PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn healthy(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    let mut answer = Vec::new();
    stream.write_all(request).is_ok()
        && stream.read_to_end(&mut answer).is_ok()
        && answer.starts_with(b"HTTP/1.1 200")
}

/// Starts a server (`name` tells its data directory apart) with these
/// `SHELLGATE_*` settings besides the key.
pub fn start(name: &str, settings: &[(&str, &str)]) -> Server {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = std::env::temp_dir().join(format!(
        "shellgate-{name}-bench-{}-{port}",
        std::process::id()
    ));
    let mut command = Command::new(env!("CARGO_BIN_EXE_shellgate"));
    command
        .arg("--data-dir")
        .arg(&dir)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .env("SHELLGATE_API_KEYS", KEY)
        .env("SHELLGATE_LOG", "warn")
        // No first-start image build competing with the measurement.
        .env("SHELLGATE_BUILD_DEFAULT_IMAGE", "false")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    for (k, v) in settings {
        command.env(k, v);
    }
    let server = Server {
        child: command.spawn().expect("start server"),
        port,
        dir,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if healthy(port) {
            // Let warm containers and pools fill.
            std::thread::sleep(Duration::from_secs(3));
            return server;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("server did not start");
}
