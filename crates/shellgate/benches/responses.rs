//! Responses API benchmark against a real `shellgate serve` and a scripted
//! upstream model (in this process): the time shellgate adds per model turn
//! (a response with one shell call, minus the upstream's own time and the
//! command's own exec time measured in the same run), and 50 concurrent
//! responses of 5 shell calls each.
//!
//! Run with `bench/run.sh` or `cargo bench -p shellgate --bench responses [-- --quick]`.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/server.rs"]
mod server;

use server::{start, KEY};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Reads one HTTP/1.1 request (head and Content-Length body); `None` at EOF.
fn read_request(reader: &mut BufReader<TcpStream>) -> Option<(String, Vec<u8>)> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let head = line.clone();
    let mut length = 0;
    loop {
        line.clear();
        reader.read_line(&mut line).ok()?;
        if line == "\r\n" || line.is_empty() {
            break;
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).ok()?;
    Some((head, body))
}

/// The scripted model: calls the shell (`true`) until the conversation has
/// as many tool results as the model name says (`calls-5`; 1 by default),
/// then answers.
fn decide(body: &serde_json::Value) -> serde_json::Value {
    let wanted: usize = body["model"]
        .as_str()
        .and_then(|m| m.strip_prefix("calls-"))
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let results = messages.iter().filter(|m| m["role"] == "tool").count();
    let has_shell = body["tools"]
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t["function"]["name"] == "shell"));
    let message = if has_shell && results < wanted {
        serde_json::json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": format!("call_{results}"), "type": "function",
            "function": {"name": "shell", "arguments": "{\"commands\":[\"true\"]}"}}]})
    } else {
        serde_json::json!({"role": "assistant", "content": "done"})
    };
    serde_json::json!({"choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
}

/// Starts the scripted upstream; the counter sums its handling time (µs).
fn scripted_upstream() -> (u16, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let busy = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&busy);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let counter = Arc::clone(&counter);
            std::thread::spawn(move || {
                let _ = stream.set_nodelay(true);
                let mut reader = BufReader::new(stream);
                while let Some((_, body)) = read_request(&mut reader) {
                    let started = Instant::now();
                    let request: serde_json::Value =
                        serde_json::from_slice(&body).unwrap_or_default();
                    let reply = decide(&request).to_string();
                    let response = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{reply}",
                        reply.len()
                    );
                    if reader.get_mut().write_all(response.as_bytes()).is_err() {
                        return;
                    }
                    counter.fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
                }
            });
        }
    });
    (port, busy)
}

/// A keep-alive connection to shellgate.
struct Conn(BufReader<TcpStream>);

impl Conn {
    fn open(port: u16) -> Self {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_nodelay(true).unwrap();
        Conn(BufReader::new(stream))
    }

    fn post(&mut self, path: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
        let body = body.to_string();
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        self.0.get_mut().write_all(request.as_bytes()).unwrap();
        let (head, body) = read_request(&mut self.0).expect("a response");
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        (status, serde_json::from_slice(&body).unwrap_or_default())
    }
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(|a, b| a.total_cmp(b));
    samples[samples.len() / 2]
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let runs = if quick { 50 } else { 300 };
    let (upstream, busy) = scripted_upstream();
    let upstream_url = format!("http://127.0.0.1:{upstream}/v1");
    let server = start(
        "responses",
        &[
            ("SHELLGATE_UPSTREAM_URL", upstream_url.as_str()),
            ("SHELLGATE_GUARDRAIL_INPUT_DEFAULT", "off"),
        ],
    );
    let mut conn = Conn::open(server.port);
    let (_, container) = conn.post("/v1/containers", &serde_json::json!({"name": "bench"}));
    let id = container["id"].as_str().expect("a container").to_owned();
    let exec = serde_json::json!({"commands": ["true"]});
    let response = serde_json::json!({
        "model": "calls-1",
        "tools": [{"type": "shell", "environment": {"type": "container_reference", "container_id": id}}],
        "input": "run true",
    });
    let answer_only = serde_json::json!({"model": "calls-0", "input": "hi"});
    for _ in 0..10 {
        conn.post(&format!("/v1/containers/{id}/exec"), &exec);
        conn.post("/v1/responses", &response);
    }
    println!("Responses: one shell call, {runs} runs each, alternating...");
    let (mut execs, mut responses, mut answers) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let started = Instant::now();
        let (status, _) = conn.post(&format!("/v1/containers/{id}/exec"), &exec);
        assert_eq!(status, 200);
        execs.push(started.elapsed().as_secs_f64() * 1000.0);

        let before = busy.load(Ordering::Relaxed);
        let started = Instant::now();
        let (status, body) = conn.post("/v1/responses", &response);
        let took = started.elapsed().as_secs_f64() * 1000.0;
        assert_eq!(status, 200);
        assert_eq!(body["status"], "completed", "{body}");
        let upstream_ms = (busy.load(Ordering::Relaxed) - before) as f64 / 1000.0;
        responses.push((took, upstream_ms));

        let before = busy.load(Ordering::Relaxed);
        let started = Instant::now();
        let (status, _) = conn.post("/v1/responses", &answer_only);
        assert_eq!(status, 200);
        let upstream_ms = (busy.load(Ordering::Relaxed) - before) as f64 / 1000.0;
        answers.push(started.elapsed().as_secs_f64() * 1000.0 - upstream_ms);
    }
    let exec_ms = median(execs.clone());
    let response_ms = median(responses.iter().map(|(t, _)| *t).collect());
    let upstream_ms = median(responses.iter().map(|(_, u)| *u).collect());
    // A response with one shell call is two model turns and one exec.
    let added = median(responses.iter().map(|(t, u)| t - u - exec_ms).collect());
    let per_turn = added / 2.0;
    let answer_ms = median(answers);

    println!("50 concurrent responses of 5 shell calls each...");
    let started = Instant::now();
    let threads: Vec<_> = (0..50)
        .map(|_| {
            let port = server.port;
            std::thread::spawn(move || {
                let mut conn = Conn::open(port);
                let (status, body) = conn.post(
                    "/v1/responses",
                    &serde_json::json!({
                        "model": "calls-5",
                        "tools": [{"type": "shell", "environment": {"type": "container_auto"}}],
                        "input": "run true five times",
                    }),
                );
                let calls = body["output"]
                    .as_array()
                    .map(|o| {
                        o.iter()
                            .filter(|i| i["type"] == "shell_call_output")
                            .count()
                    })
                    .unwrap_or(0);
                status == 200 && body["status"] == "completed" && calls == 5
            })
        })
        .collect();
    let ok = threads
        .into_iter()
        .map(|t| t.join().unwrap_or(false))
        .filter(|ok| *ok)
        .count();
    let concurrent = started.elapsed().as_secs_f64();

    println!();
    println!("| measurement | median ms | note |");
    println!("|---|---|---|");
    println!("| exec of `true` (HTTP) | {exec_ms:.3} | the command's own exec time |");
    println!("| response with one shell call | {response_ms:.3} | 2 model turns + 1 exec |");
    println!("| scripted upstream's own time in it | {upstream_ms:.3} | both turns |");
    println!("| shellgate's time per model turn | {per_turn:.3} | (response − upstream − exec) / 2; target ≤ 2 ms |");
    println!(
        "| response answered without a tool, minus the upstream | {answer_ms:.3} | 1 model turn |"
    );
    println!(
        "| 50 concurrent responses × 5 shell calls | {:.0} ms total | {ok}/50 completed, 250 commands, 50 containers |",
        concurrent * 1000.0
    );
    assert_eq!(ok, 50, "some concurrent responses failed");
}
