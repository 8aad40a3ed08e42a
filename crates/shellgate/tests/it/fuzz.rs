//! The fuzz targets on the stable toolchain: each parser of hostile bytes
//! (the egress proxy's DNS queries, TLS ClientHellos and HTTP heads, the
//! sandbox protocol's records, the SSE reader, skill zips, the server's
//! request handling) gets its `fuzzing` check fed seeded mutations of its
//! seeds (and of `fuzz/corpus/<target>/`, if there) for a fixed time:
//! `SHELLGATE_FUZZ_SECONDS` (5 by default). `fuzz/` holds the same checks
//! as cargo-fuzz targets for coverage-guided runs on nightly.
//!
//! `cargo test -p shellgate --features fuzzing --test it fuzz::` (`scripts/test`
//! runs it with the workspace's tests, all built with the feature). A failing input is written to `target/fuzz-failures/` and
//! named in the failure; `SHELLGATE_FUZZ_SEED` replays a run's mutations.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A target: its name (as in `fuzz/fuzz_targets/`), its check (panics on a
/// broken invariant), and the inputs its mutations start from.
struct Target {
    name: &'static str,
    check: fn(&[u8]),
    seeds: fn() -> Vec<Vec<u8>>,
}

/// xorshift64*: small, seeded, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// Bytes parsers care about: line ends, separators, lengths' edges.
const INTERESTING: &[u8] = b"\r\n :\t\x00\x01\x03\x16\x7f\x80\xc0\xff{}[]\",0-/";

/// One input mutated a few times: bytes set, inserted, removed, cut,
/// ranges copied within or spliced from another input.
fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut bytes = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(bytes.len() + 1);
        match rng.below(8) {
            0 if at < bytes.len() => bytes[at] = rng.next() as u8,
            1 if at < bytes.len() => bytes[at] = INTERESTING[rng.below(INTERESTING.len())],
            2 => bytes.insert(at, INTERESTING[rng.below(INTERESTING.len())]),
            3 if at < bytes.len() => {
                let end = (at + 1 + rng.below(16)).min(bytes.len());
                bytes.drain(at..end);
            }
            4 => bytes.truncate(at),
            5 if !bytes.is_empty() => {
                let from = rng.below(bytes.len());
                let len = rng.below(bytes.len() - from + 1).min(64);
                let piece = bytes[from..from + len].to_vec();
                let to = rng.below(bytes.len() + 1);
                bytes.splice(to..to, piece);
            }
            6 if !other.is_empty() => {
                let from = rng.below(other.len());
                let len = rng.below(other.len() - from + 1);
                bytes.splice(at..at, other[from..from + len].iter().copied());
            }
            _ if at < bytes.len() => bytes[at] ^= 1 << rng.below(8),
            _ => bytes.push(rng.next() as u8),
        }
    }
    // Inputs stay small: the caps under test are far above this, and the
    // time goes into many inputs, not long ones.
    bytes.truncate(64 * 1024);
    bytes
}

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The seeds, and the files of `fuzz/corpus/<target>/` if there are any.
fn corpus(target: &Target) -> Vec<Vec<u8>> {
    let mut corpus = (target.seeds)();
    if let Ok(entries) = std::fs::read_dir(workspace().join("fuzz/corpus").join(target.name)) {
        for entry in entries.flatten() {
            if let Ok(bytes) = std::fs::read(entry.path()) {
                corpus.push(bytes);
            }
        }
    }
    corpus.push(Vec::new());
    corpus
}

fn run(target: Target) {
    let seconds: u64 = std::env::var("SHELLGATE_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let seed: u64 = std::env::var("SHELLGATE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x9e37_79b9_7f4a_7c15);
    // Each target its own sequence, from its name.
    let mut rng = Rng(target.name.bytes().fold(seed, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    }) | 1);
    let mut corpus = corpus(&target);
    let seeds = corpus.len();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut runs = 0u64;
    // The seeds themselves first, then mutations until the deadline.
    let mut queue: Vec<Vec<u8>> = corpus.clone();
    loop {
        let input = match queue.pop() {
            Some(input) => input,
            None => {
                if Instant::now() >= deadline {
                    break;
                }
                let base = &corpus[rng.below(corpus.len())];
                let other = &corpus[rng.below(corpus.len())];
                mutate(&mut rng, base, other)
            }
        };
        runs += 1;
        if catch_unwind(AssertUnwindSafe(|| (target.check)(&input))).is_err() {
            let dir = workspace().join("target/fuzz-failures");
            let _ = std::fs::create_dir_all(&dir);
            let path = dir.join(format!("{}-{runs}", target.name));
            let _ = std::fs::write(&path, &input);
            panic!(
                "{}: an input broke an invariant (saved in {}): {:?}",
                target.name,
                path.display(),
                String::from_utf8_lossy(&input)
            );
        }
        // Mutations of mutations reach further; the pool stays bounded.
        if runs.is_multiple_of(16) && !input.is_empty() {
            if corpus.len() < seeds + 256 {
                corpus.push(input);
            } else {
                let slot = seeds + rng.below(256);
                corpus[slot] = input;
            }
        }
    }
    eprintln!("{}: {runs} inputs in {seconds} s", target.name);
}

#[test]
fn egress_dns() {
    run(Target {
        name: "egress_dns",
        check: |bytes| {
            shellgate_egress::dns::fuzzing::check_query(bytes);
        },
        seeds: shellgate_egress::dns::fuzzing::seeds,
    });
}

#[test]
fn egress_tls() {
    run(Target {
        name: "egress_tls",
        check: |bytes| {
            shellgate_egress::wire::fuzzing::check_client_hello(bytes);
        },
        seeds: shellgate_egress::wire::fuzzing::tls_seeds,
    });
}

#[test]
fn egress_http() {
    run(Target {
        name: "egress_http",
        check: |bytes| {
            shellgate_egress::wire::fuzzing::check_request_head(bytes);
            shellgate_egress::wire::fuzzing::check_bodies(bytes);
        },
        seeds: shellgate_egress::wire::fuzzing::http_seeds,
    });
}

#[test]
fn sandbox_protocol() {
    run(Target {
        name: "sandbox_protocol",
        check: shellgate_sandbox::protocol::fuzzing::check_records,
        seeds: shellgate_sandbox::protocol::fuzzing::seeds,
    });
}

#[test]
fn sse() {
    run(Target {
        name: "sse",
        check: shellgate_model::upstream::sse::fuzzing::check_events,
        seeds: shellgate_model::upstream::sse::fuzzing::seeds,
    });
}

#[test]
fn skill_bundle() {
    run(Target {
        name: "skill_bundle",
        check: |bytes| {
            shellgate_skills::fuzzing::check_zip(bytes);
        },
        seeds: shellgate_skills::fuzzing::seeds,
    });
}

#[test]
fn request_parsing() {
    run(Target {
        name: "request_parsing",
        check: |bytes| {
            shellgate_server::fuzzing::check_request(bytes);
            // The engine's own parsers of untrusted bytes, as the cargo-fuzz
            // target has them.
            let _ = shellgate_sandbox::files::relative_path(&String::from_utf8_lossy(bytes));
        },
        seeds: shellgate_server::fuzzing::seeds,
    });
}
