//! Sandbox engine benchmark: warm command, cold path, idle memory and output
//! flood, each against baselines measured in the same run (`/bin/true` and
//! `bash -c true` spawned directly, `bwrap` and `podman` where installed).
//!
//! Run with `bench/run.sh` (installs the baselines) or
//! `cargo bench -p shellgate --bench engine [-- --quick]`. Prints a Markdown
//! table for BENCHMARKS.md. Needs root for the full engine.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/baseline.rs"]
mod baseline;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use shellgate_sandbox::backend::{ContainerSpec, RunRequest, SandboxBackend};
use shellgate_sandbox::{EngineConfig, LocalEngine};

struct Stats {
    median: Duration,
    p99: Duration,
}

fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    Stats {
        median: at(0.5),
        p99: at(0.99),
    }
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1000.0)
}

fn time_spawn(program: &str, args: &[&str], runs: usize) -> Option<Stats> {
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        let status = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .ok()?;
        if !status.success() {
            return None;
        }
        samples.push(start.elapsed());
    }
    Some(stats(samples))
}

fn which(program: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {program}"))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Resident and proportional memory of a process, in KiB.
fn memory_of(pid: i32) -> (u64, u64) {
    let read = |file: &str, key: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/{file}"))
            .ok()
            .and_then(|text| {
                text.lines()
                    .find(|l| l.starts_with(key))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse().ok())
            })
            .unwrap_or(0)
    };
    (read("status", "VmRSS:"), read("smaps_rollup", "Pss:"))
}

fn own_peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let runs = if quick { 100 } else { 500 };
    let idle_containers = if quick { 100 } else { 500 };
    let flood_bytes: u64 = if quick { 1 << 30 } else { 10_000_000_000 };

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let data_dir = std::env::temp_dir().join(format!("shellgate-bench-{}", std::process::id()));
    let mut config = EngineConfig::new(&data_dir);
    config.helper_binary = PathBuf::from(env!("CARGO_BIN_EXE_shellgate"));
    config.pool_size = 64;

    println!("Measuring baselines ({runs} runs each)...");
    let true_direct = time_spawn("/bin/true", &[], runs).expect("/bin/true");
    let bash_direct = time_spawn("bash", &["-c", "true"], runs).expect("bash -c true");
    // The honest baseline: posix_spawn of /bin/bash, the container's env.
    let bash_fast = stats((0..runs).map(|_| baseline::spawn_bash("true")).collect());
    let bwrap_args = [
        "--unshare-all",
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/bin",
        "/bin",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "true",
    ];
    let bwrap = which("bwrap")
        .then(|| time_spawn("bwrap", &bwrap_args, runs))
        .flatten();
    let podman = which("podman")
        .then(|| {
            time_spawn(
                "podman",
                &["run", "--rm", "--network=none", "debian:12", "true"],
                20,
            )
        })
        .flatten();

    let report = runtime.block_on(async {
        let (engine, warnings) = LocalEngine::open(config).await.expect("open engine");
        for warning in warnings {
            println!("warning: {warning}");
        }
        // Let the disk pool, spare helpers and warm containers fill.
        tokio::time::sleep(Duration::from_secs(if quick { 2 } else { 4 })).await;

        println!("Warm command...");
        engine
            .create("warm", ContainerSpec::default())
            .await
            .expect("create warm");
        let request = RunRequest::new(vec!["true".into()]);
        for _ in 0..20 {
            engine.run("warm", request.clone()).await.expect("warm-up");
        }
        let mut samples = Vec::with_capacity(runs);
        for _ in 0..runs {
            let start = Instant::now();
            let result = engine.run("warm", request.clone()).await.expect("warm run");
            samples.push(start.elapsed());
            assert_eq!(result.len(), 1);
        }
        let warm = stats(samples);
        engine.destroy("warm").await.expect("destroy warm");

        let cold_runs = if quick { 30 } else { 100 };
        println!("Cold path (warm containers on)...");
        let cold = cold_path(&engine, "cold", cold_runs).await;
        let cold_scratch = {
            let mut config = EngineConfig::new(data_dir.join("scratch"));
            config.helper_binary = PathBuf::from(env!("CARGO_BIN_EXE_shellgate"));
            config.pool_size = cold_runs + 4;
            config.warm_containers = 0;
            let (scratch, _) = LocalEngine::open(config)
                .await
                .expect("open scratch engine");
            tokio::time::sleep(Duration::from_secs(if quick { 3 } else { 6 })).await;
            println!("Cold path (from scratch)...");
            let stats = cold_path(&scratch, "scratch", cold_runs).await;
            scratch.shutdown().await;
            stats
        };

        println!("{idle_containers} idle containers...");
        let mut pids = Vec::new();
        for i in 0..idle_containers {
            let id = format!("idle-{i}");
            engine
                .create(&id, ContainerSpec::default())
                .await
                .expect("create idle");
            pids.push(engine.init_pid(&id).await.expect("pid").expect("running"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (rss, pss) = pids
            .iter()
            .map(|p| memory_of(*p))
            .fold((0, 0), |(r, p), (r2, p2)| (r + r2, p + p2));
        for i in 0..idle_containers {
            engine
                .destroy(&format!("idle-{i}"))
                .await
                .expect("destroy idle");
        }
        engine.settle().await;

        println!("Output flood of {flood_bytes} bytes...");
        engine
            .create("flood", ContainerSpec::default())
            .await
            .expect("create flood");
        let before = own_peak_rss_kib();
        let start = Instant::now();
        let flood = engine
            .run(
                "flood",
                RunRequest::new(vec![format!("head -c {flood_bytes} /dev/zero")]),
            )
            .await
            .expect("flood");
        let flood_time = start.elapsed();
        let after = own_peak_rss_kib();
        assert!(flood[0].stdout.chars().count() <= 16_384);
        engine.destroy("flood").await.expect("destroy flood");
        engine.shutdown().await;
        Report {
            warm,
            cold,
            cold_scratch,
            rss,
            pss,
            before,
            after,
            flood_time,
        }
    });
    let _ = std::fs::remove_dir_all(&data_dir);

    let ratio = |a: Duration, b: Duration| format!("{:.2}", a.as_secs_f64() / b.as_secs_f64());
    let row = |name: &str, s: &Stats, ratio: String, target: &str| {
        println!(
            "| {name} | {} | {} | {ratio} | {target} |",
            ms(s.median),
            ms(s.p99)
        );
    };
    println!();
    println!("| measurement | median ms | p99 ms | ratio | target |");
    println!("|---|---|---|---|---|");
    row(
        "`/bin/true` spawned directly",
        &true_direct,
        String::new(),
        "baseline",
    );
    row(
        "`bash -c true` spawned directly (`std::process::Command`, PATH search, full env)",
        &bash_direct,
        String::new(),
        "baseline",
    );
    row(
        "`/bin/bash -c true` by `posix_spawn`, the container's env",
        &bash_fast,
        "1.00".into(),
        "baseline",
    );
    if let Some(bwrap) = &bwrap {
        row(
            "`bwrap --unshare-all` ... `true`",
            bwrap,
            "1.00 × bwrap".into(),
            "baseline",
        );
    }
    if let Some(podman) = &podman {
        row(
            "`podman run --rm --network=none debian:12 true`",
            podman,
            String::new(),
            "baseline",
        );
    }
    row(
        "warm command (`true` in an existing container, engine API)",
        &report.warm,
        format!(
            "{} × posix_spawn (`{}` × Command)",
            ratio(report.warm.median, bash_fast.median),
            ratio(report.warm.median, bash_direct.median)
        ),
        "≤ 1.15 ×",
    );
    let vs = |d: Duration| {
        let mut out = String::new();
        if let Some(bwrap) = &bwrap {
            out.push_str(&format!("{} × bwrap", ratio(d, bwrap.median)));
        }
        if let Some(podman) = &podman {
            out.push_str(&format!(", {} × podman", ratio(d, podman.median)));
        }
        out
    };
    row(
        "cold path: create + `true` + destroy (warm containers)",
        &report.cold,
        vs(report.cold.median),
        "≤ 10 ms, < bwrap",
    );
    row(
        "cold path from scratch (no warm container)",
        &report.cold_scratch,
        vs(report.cold_scratch.median),
        "",
    );
    println!(
        "| {idle_containers} idle containers: host memory per container | RSS {:.2} MiB, PSS {:.2} MiB | | | ≤ 2 MiB |",
        report.rss as f64 / 1024.0 / idle_containers as f64,
        report.pss as f64 / 1024.0 / idle_containers as f64
    );
    println!(
        "| {:.1} GB to stdout, default cap | {:.0} ms total | | server peak RSS {} → {} MiB | flat |",
        flood_bytes as f64 / 1e9,
        report.flood_time.as_secs_f64() * 1000.0,
        report.before / 1024,
        report.after / 1024
    );
}

struct Report {
    warm: Stats,
    cold: Stats,
    cold_scratch: Stats,
    rss: u64,
    pss: u64,
    before: u64,
    after: u64,
    flood_time: Duration,
}

/// Creates, runs `true` in and destroys containers one after another, 25 ms
/// apart (an arrival rate the background refills can follow), and returns
/// the latency of the three calls together.
async fn cold_path(engine: &LocalEngine, prefix: &str, runs: usize) -> Stats {
    let request = RunRequest::new(vec!["true".into()]);
    let mut samples = Vec::with_capacity(runs);
    let (mut creates, mut firsts, mut destroys) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..runs {
        tokio::time::sleep(Duration::from_millis(25)).await;
        let id = format!("{prefix}-{i}");
        let start = Instant::now();
        engine
            .create(&id, ContainerSpec::default())
            .await
            .expect("create cold");
        let created = start.elapsed();
        engine.run(&id, request.clone()).await.expect("cold run");
        let ran = start.elapsed();
        engine.destroy(&id).await.expect("destroy cold");
        samples.push(start.elapsed());
        creates.push(created);
        firsts.push(ran - created);
        destroys.push(start.elapsed() - ran);
    }
    println!(
        "  {prefix}: median create {} ms, first command {} ms, destroy {} ms",
        ms(stats(creates).median),
        ms(stats(firsts).median),
        ms(stats(destroys).median)
    );
    engine.settle().await;
    stats(samples)
}
