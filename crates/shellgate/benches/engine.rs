//! Sandbox engine benchmark: warm command, cold path, idle memory and output
//! flood, each against baselines measured in the same run (`/bin/true` and
//! `bash -c true` spawned directly, `bwrap` and `podman` where installed).
//!
//! Run with `bench/run.sh` (installs the baselines) or
//! `cargo bench -p shellgate --bench engine [-- --quick]`. Prints a Markdown
//! table for BENCHMARKS.md. Needs root for the full engine.

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
        // Let the disk pool fill so the cold path measures the sandbox, not mkfs.
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

        println!("Cold path...");
        let cold_runs = if quick { 30 } else { 50 };
        let mut samples = Vec::with_capacity(cold_runs);
        let (mut creates, mut firsts, mut destroys) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..cold_runs {
            let id = format!("cold-{i}");
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
        let cold = stats(samples);
        println!(
            "cold breakdown (median ms): create {} first command {} destroy {}",
            ms(stats(creates).median),
            ms(stats(firsts).median),
            ms(stats(destroys).median)
        );

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
                RunRequest::new(vec![format!(
                    "head -c {flood_bytes} /dev/zero | tr '\\0' x"
                )]),
            )
            .await
            .expect("flood");
        let flood_time = start.elapsed();
        let after = own_peak_rss_kib();
        assert!(flood[0].stdout.chars().count() <= 16_384);
        engine.destroy("flood").await.expect("destroy flood");
        engine.shutdown().await;
        (warm, cold, rss, pss, before, after, flood_time)
    });
    let (warm, cold, rss, pss, before, after, flood_time) = report;
    let _ = std::fs::remove_dir_all(&data_dir);

    let ratio = |a: Duration, b: Duration| format!("{:.2}", a.as_secs_f64() / b.as_secs_f64());
    println!();
    println!("| measurement | median ms | p99 ms | ratio | target |");
    println!("|---|---|---|---|---|");
    println!(
        "| `/bin/true` spawned directly | {} | {} | | baseline |",
        ms(true_direct.median),
        ms(true_direct.p99)
    );
    println!(
        "| `bash -c true` spawned directly | {} | {} | 1.00 | baseline |",
        ms(bash_direct.median),
        ms(bash_direct.p99)
    );
    if let Some(bwrap) = &bwrap {
        println!(
            "| `bwrap --unshare-all ... true` | {} | {} | | baseline |",
            ms(bwrap.median),
            ms(bwrap.p99)
        );
    }
    if let Some(podman) = &podman {
        println!(
            "| `podman run --rm --network=none debian:12 true` | {} | {} | | baseline |",
            ms(podman.median),
            ms(podman.p99)
        );
    }
    println!(
        "| warm command (`true`, engine API) | {} | {} | {} × `bash -c true` | ≤ 1.3 |",
        ms(warm.median),
        ms(warm.p99),
        ratio(warm.median, bash_direct.median)
    );
    let cold_vs_bwrap = bwrap
        .as_ref()
        .map(|b| format!("{} × bwrap", ratio(cold.median, b.median)))
        .unwrap_or_default();
    println!(
        "| cold path (create + `true` + destroy) | {} | {} | {cold_vs_bwrap} | ≤ 10 ms, < bwrap |",
        ms(cold.median),
        ms(cold.p99)
    );
    if let Some(podman) = &podman {
        println!(
            "| cold path vs podman run | | | {} × podman | |",
            ratio(cold.median, podman.median)
        );
    }
    println!(
        "| {idle_containers} idle containers: RSS per container | {:.2} MiB (PSS {:.2} MiB) | | | ≤ 2 MiB |",
        rss as f64 / 1024.0 / idle_containers as f64,
        pss as f64 / 1024.0 / idle_containers as f64
    );
    println!(
        "| {:.1} GB to stdout, default cap | {:.0} ms | | server peak RSS {} → {} MiB | flat |",
        flood_bytes as f64 / 1e9,
        flood_time.as_secs_f64() * 1000.0,
        before / 1024,
        after / 1024
    );
}
