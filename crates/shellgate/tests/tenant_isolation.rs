//! One tenant never slows another: while one project lists a container of
//! 100,000 files (twice at once), another project's execs and `/healthz`
//! stay fast. A test binary of its own, so that no other test's servers
//! compete for the two cores while it measures.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::server::*;
use serde_json::json;

fn get(port: u16, path: &str, key: &str) -> Response {
    request(port, "GET", path, Some(key), &[], b"")
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[index]
}

#[test]
fn listing_a_hundred_thousand_files_stalls_no_other_tenant() {
    let server = start("http-many-files", &[]);
    let port = server.port;
    let crowded = create_container(port, KEY);
    let made = post_json(
        port,
        &format!("/v1/containers/{crowded}/exec"),
        KEY,
        &json!({"commands": ["mkdir many && cd many && python3 -c \"import os\nfor i in range(100000): os.close(os.open(f'f{i}', os.O_CREAT | os.O_WRONLY))\""], "timeout_ms": 120000}),
    );
    assert_eq!(made.json()["output"][0]["outcome"]["exit_code"], 0);
    let other = create_container(port, OTHER_KEY);
    let listings: Vec<_> = (0..2)
        .map(|_| {
            let path = format!("/v1/containers/{crowded}/files?limit=100");
            std::thread::spawn(move || {
                let started = Instant::now();
                let page = get(port, &path, KEY);
                (page.status, page.json(), started.elapsed())
            })
        })
        .collect();
    let mut latencies = Vec::new();
    while listings.iter().any(|l| !l.is_finished()) {
        let started = Instant::now();
        assert_eq!(request(port, "GET", "/healthz", None, &[], b"").status, 200);
        latencies.push(started.elapsed());
        let started = Instant::now();
        let done = post_json(
            port,
            &format!("/v1/containers/{other}/exec"),
            OTHER_KEY,
            &json!({"commands": ["true"]}),
        );
        assert_eq!(done.status, 200);
        latencies.push(started.elapsed());
    }
    for listing in listings {
        let (status, page, took) = listing.join().unwrap();
        assert_eq!(status, 200, "{page}");
        assert_eq!(page["data"].as_array().map(Vec::len), Some(100));
        assert_eq!(page["has_more"], true);
        eprintln!("a 100,000-file listing took {took:?}");
    }
    assert!(latencies.len() >= 10, "only {} samples", latencies.len());
    let p99 = percentile(&mut latencies, 0.99);
    eprintln!(
        "{} requests of another tenant meanwhile, p99 {p99:?}",
        latencies.len()
    );
    assert!(p99 < Duration::from_millis(100), "p99 {p99:?}");
}
