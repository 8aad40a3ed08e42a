//! HTTP API benchmark against a real `shellgate serve`: warm exec at 1, 8
//! and 32 concurrent clients (median, p99, throughput), create→exec→delete,
//! and the wake of a suspended container, with `bash -c true` spawned
//! directly as the baseline measured in the same run.
//!
//! Run with `bench/run.sh` or `cargo bench -p shellgate --bench http [-- --quick]`.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/baseline.rs"]
mod baseline;
#[path = "common/server.rs"]
mod server;

use server::{start, KEY};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// A keep-alive HTTP/1.1 connection.
struct Conn {
    reader: BufReader<TcpStream>,
}

impl Conn {
    fn new(stream: TcpStream) -> Self {
        stream.set_nodelay(true).unwrap();
        Self {
            reader: BufReader::new(stream),
        }
    }

    fn open(port: u16) -> Self {
        Self::new(TcpStream::connect(("127.0.0.1", port)).unwrap())
    }

    fn call(&mut self, method: &str, path: &str, body: &str) -> (u16, String) {
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        self.reader.get_mut().write_all(request.as_bytes()).unwrap();
        let mut status_line = String::new();
        self.reader.read_line(&mut status_line).unwrap();
        let status = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let mut length = 0;
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line).unwrap();
            if line == "\r\n" || line.is_empty() {
                break;
            }
            if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; length];
        self.reader.read_exact(&mut body).unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    fn create(&mut self) -> String {
        let (status, body) = self.call("POST", "/v1/containers", r#"{"name":"bench"}"#);
        assert_eq!(status, 200, "{body}");
        let value: serde_json::Value = serde_json::from_str(&body).unwrap();
        value["id"].as_str().unwrap().to_owned()
    }

    fn exec_true(&mut self, id: &str) {
        let (status, body) = self.call(
            "POST",
            &format!("/v1/containers/{id}/exec"),
            r#"{"commands":["true"]}"#,
        );
        assert_eq!(status, 200, "{body}");
    }
}

fn percentile(samples: &mut [Duration], q: f64) -> Duration {
    samples.sort();
    samples[((samples.len() as f64 - 1.0) * q).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1000.0)
}

/// The fastest honest baseline: `posix_spawn` of `/bin/bash` with the
/// container's environment (see `common/baseline.rs`).
fn bash_baseline(runs: usize) -> Duration {
    let mut samples: Vec<Duration> = (0..runs).map(|_| baseline::spawn_bash("true")).collect();
    percentile(&mut samples, 0.5)
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let per_client = if quick { 100 } else { 300 };
    println!("Baseline...");
    let bash = bash_baseline(if quick { 100 } else { 500 });
    // 32 direct spawners at once: what the machine does without shellgate.
    let parallel_start = Instant::now();
    let spawners: Vec<_> = (0..32)
        .map(|_| {
            std::thread::spawn(move || {
                for _ in 0..per_client {
                    baseline::spawn_bash("true");
                }
            })
        })
        .collect();
    for spawner in spawners {
        let _ = spawner.join();
    }
    let bash_throughput = (32 * per_client) as f64 / parallel_start.elapsed().as_secs_f64();
    let server = start("http", &[("SHELLGATE_WARM_CONTAINERS", "4")]);
    let port = server.port;

    let mut rows = Vec::new();
    for clients in [1usize, 8, 32] {
        println!("Warm exec, {clients} clients...");
        let mut setup = Conn::open(port);
        let ids: Vec<String> = (0..clients).map(|_| setup.create()).collect();
        let started = Instant::now();
        let threads: Vec<_> = ids
            .into_iter()
            .map(|id| {
                std::thread::spawn(move || {
                    let mut conn = Conn::open(port);
                    for _ in 0..10 {
                        conn.exec_true(&id);
                    }
                    let mut samples = Vec::with_capacity(per_client);
                    for _ in 0..per_client {
                        let start = Instant::now();
                        conn.exec_true(&id);
                        samples.push(start.elapsed());
                    }
                    conn.call("DELETE", &format!("/v1/containers/{id}"), "");
                    samples
                })
            })
            .collect();
        let mut samples: Vec<Duration> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        let wall = started.elapsed();
        let throughput = samples.len() as f64 / wall.as_secs_f64();
        let median = percentile(&mut samples, 0.5);
        let p99 = percentile(&mut samples, 0.99);
        rows.push((clients, median, p99, throughput));
    }

    println!("Create → first output → delete...");
    let mut conn = Conn::open(port);
    let mut first_output = Vec::new();
    let mut whole = Vec::new();
    for _ in 0..(if quick { 20 } else { 50 }) {
        std::thread::sleep(Duration::from_millis(30));
        let start = Instant::now();
        let id = conn.create();
        conn.exec_true(&id);
        first_output.push(start.elapsed());
        conn.call("DELETE", &format!("/v1/containers/{id}"), "");
        whole.push(start.elapsed());
    }
    drop(server);

    println!("Wake of a suspended container...");
    let server = start(
        "http",
        &[
            ("SHELLGATE_IDLE_SUSPEND_AFTER_SECS", "1"),
            ("SHELLGATE_SWEEP_INTERVAL_SECS", "1"),
            ("SHELLGATE_WARM_CONTAINERS", "0"),
        ],
    );
    let mut conn = Conn::open(server.port);
    let ids: Vec<String> = (0..(if quick { 5 } else { 15 }))
        .map(|_| conn.create())
        .collect();
    for id in &ids {
        conn.exec_true(id);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let suspended = ids.iter().all(|id| {
            conn.call("GET", &format!("/v1/containers/{id}"), "")
                .1
                .contains("suspended")
        });
        if suspended {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut wakes: Vec<Duration> = ids
        .iter()
        .map(|id| {
            std::thread::sleep(Duration::from_millis(30));
            let start = Instant::now();
            conn.exec_true(id);
            start.elapsed()
        })
        .collect();
    drop(server);

    println!();
    println!(
        "| measurement (HTTP, keep-alive) | median ms | p99 ms | ratio / throughput | target |"
    );
    println!("|---|---|---|---|---|");
    println!(
        "| `/bin/bash -c true` by `posix_spawn`, the container's env | {} | | 1.00 | baseline |",
        ms(bash)
    );
    println!("| 32 such spawners in parallel | | | {bash_throughput:.0} spawns/s | baseline |");
    for (clients, median, p99, throughput) in rows {
        let target = match clients {
            1 => "median ≤ 1.35 × bash".to_owned(),
            32 => format!(
                "≥ 80 % of the spawners: {:.0} % {}",
                100.0 * throughput / bash_throughput,
                if throughput >= 0.8 * bash_throughput {
                    "✔"
                } else {
                    "✘"
                }
            ),
            _ => String::new(),
        };
        println!(
            "| warm exec of `true`, {clients} client(s) | {} | {} | {:.2} × bash, {:.0} exec/s | {target} |",
            ms(median),
            ms(p99),
            median.as_secs_f64() / bash.as_secs_f64(),
            throughput
        );
    }
    println!(
        "| create → first output (exec `true`) | {} | {} | | ≤ 15 ms |",
        ms(percentile(&mut first_output, 0.5)),
        ms(percentile(&mut first_output, 0.99))
    );
    println!(
        "| create → exec → delete | {} | {} | | |",
        ms(percentile(&mut whole, 0.5)),
        ms(percentile(&mut whole, 0.99))
    );
    println!(
        "| wake a suspended container (exec `true`) | {} | {} | | ≤ 20 ms |",
        ms(percentile(&mut wakes, 0.5)),
        ms(percentile(&mut wakes, 0.99))
    );
}
