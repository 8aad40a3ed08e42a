#!/usr/bin/env python3
"""The command line as a user times it: the one-shot `shellgate exec --
true` against `bwrap --unshare-all ... true` in the same hyperfine run (no
warm server), and `shellgate serve` start-up (start to the first
`/healthz`, and to the first exec). Run by bench/run.sh; needs root,
hyperfine and bwrap (run.sh installs them) and target/release/shellgate.
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BINARY = Path(os.environ.get("SHELLGATE_BIN", ROOT / "target" / "release" / "shellgate"))
KEY = "sk-bench-cli-project"
BWRAP = ("bwrap --unshare-all --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib "
         "--symlink usr/lib64 /lib64 --proc /proc --dev /dev --tmpfs /tmp true")


def bwrap_in_cgroups(work: Path):
    """bwrap doing the same work as a shellgate sandbox's limits: a fresh
    memory, pids and CPU cgroup (limits written, the sandbox born in it,
    removed after), by a small C launcher (bench/bwrap_in_cgroup.c, built
    here with gcc): no shell in between. bwrap alone sets no limits."""
    launcher = work / "bwrap_in_cgroup"
    subprocess.run(["gcc", "-O2", "-o", str(launcher), str(ROOT / "bench" / "bwrap_in_cgroup.c")],
                   check=True)
    layout = "v2" if Path("/sys/fs/cgroup/cgroup.controllers").exists() else "v1"
    return f"{launcher} {layout} {BWRAP.removeprefix('bwrap ')}"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(port, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                     headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)


def hyperfine_medians(commands, runs, prepare=None):
    out = Path(tempfile.mkstemp(suffix=".json")[1])
    extra = ["--prepare", prepare] if prepare else []
    subprocess.run(["hyperfine", "-N", "--warmup", "10", "--runs", str(runs), "--style", "none",
                    *extra, "--export-json", str(out), *commands],
                   check=True, stdout=subprocess.DEVNULL)
    results = json.loads(out.read_text())["results"]
    out.unlink()
    return [statistics.median(r["times"]) * 1000 for r in results]


def migration_wait_ms(samples=10):
    """What the first cgroup migration after a quiet spell costs: the time
    to write this process's pid into the cgroup it already is in (nothing
    moves, but the kernel's global migration lock is taken), after 100 ms
    of quiet, then again at once."""
    own = next((line.split(":", 2)[2].strip() for line in open("/proc/self/cgroup")
                if ":memory:" in line or line.startswith("0::")), None)
    mount = "/sys/fs/cgroup" if Path("/sys/fs/cgroup/cgroup.controllers").exists() \
        else "/sys/fs/cgroup/memory"
    procs = Path(mount + own) / "cgroup.procs"
    quiet, at_once = [], []
    for _ in range(samples):
        time.sleep(0.1)
        for bucket in (quiet, at_once):
            start = time.perf_counter()
            procs.write_text(str(os.getpid()))
            bucket.append((time.perf_counter() - start) * 1000)
    return statistics.median(quiet), statistics.median(at_once)


def cpu_ms(command: str, runs: int):
    """CPU time (every process of the run together: perf stat's task-clock
    follows children) and context switches per run, from perf stat: less
    moved by other load on the machine than wall time."""
    out = subprocess.run(["perf", "stat", "-x", ",", "-e", "task-clock,context-switches", "-r", str(runs),
                          "--", *command.split()], capture_output=True, text=True)
    values = {}
    for line in out.stderr.splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[0].replace(".", "").isdigit():
            values[fields[2]] = float(fields[0])
    return values.get("task-clock", float("nan")), values.get("context-switches", float("nan"))


def one_shot(data_dir: Path, runs: int, versus: Path | None):
    # The first run makes what later ones reuse (the host image's /etc).
    subprocess.run([str(BINARY), "--data-dir", str(data_dir), "exec", "--", "true"], check=True)
    builds = [BINARY] + ([versus] if versus else [])
    commands = [f"{build} --data-dir {data_dir} exec -- true" for build in builds]
    commands += [BWRAP, bwrap_in_cgroups(data_dir)]
    back_to_back = hyperfine_medians(commands, runs)
    # A user runs one command after a pause: 100 ms of quiet before each run
    # (not timed).
    after_quiet = hyperfine_medians(commands, max(runs // 4, 10), prepare="sleep 0.1")
    print("| one-shot, end to end (hyperfine, no server) | median ms | ratio |")
    print("|---|---|---|")
    for label, medians in [("back to back", back_to_back), ("each after 100 ms of quiet", after_quiet)]:
        *shellgates, bwrap, bwrap_cg = medians
        print(f"| `bwrap --unshare-all ... true`, {label} | {bwrap:.2f} | 1.00 (baseline) |")
        print(f"| the same bwrap in a fresh memory/pids/CPU cgroup, {label} | {bwrap_cg:.2f} | "
              f"{bwrap_cg / bwrap:.2f} × bwrap |")
        for build, shellgate in zip(builds, shellgates):
            name = "" if build == BINARY else f" (`{build}`)"
            print(f"| `shellgate exec -- true`{name}, {label} | {shellgate:.2f} | "
                  f"{shellgate / bwrap:.2f} × bwrap (target ≤ 1.5 ×) "
                  f"{'✔' if shellgate <= 1.5 * bwrap else '✘'}; {shellgate / bwrap_cg:.2f} × bwrap in a cgroup |")
    print()
    print("| one-shot, CPU of every process of a run (perf stat, back to back) | CPU ms | context switches |")
    print("|---|---|---|")
    for name, command in zip([str(b) for b in builds] + ["bwrap", "bwrap in a cgroup"], commands):
        cpu, switches = cpu_ms(command, max(runs // 4, 10))
        print(f"| `{name}` | {cpu:.2f} | {switches:.1f} |")
    quiet, at_once = migration_wait_ms()
    print()
    print("| a no-op cgroup migration (write own pid to own `cgroup.procs`) | median ms |")
    print("|---|---|")
    print(f"| after 100 ms of quiet | {quiet:.2f} |")
    print(f"| right after another | {at_once:.2f} |")


def serve_startup(data_dir: Path, rounds: int):
    healthy, first_exec = [], []
    env = {"PATH": os.environ["PATH"], "SHELLGATE_LOG": "warn", "SHELLGATE_API_KEYS": KEY,
           "SHELLGATE_BUILD_DEFAULT_IMAGE": "false", "SHELLGATE_DEFAULT_IMAGE": "host"}
    for round_ in range(rounds + 1):
        port = free_port()
        start = time.perf_counter()
        server = subprocess.Popen([str(BINARY), "--data-dir", str(data_dir), "serve", "--listen",
                                   f"127.0.0.1:{port}"], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        try:
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                        break
                except OSError:
                    time.sleep(0.0005)
            up = time.perf_counter()
            container = call(port, "POST", "/v1/containers", {"name": "startup"})
            call(port, "POST", f"/v1/containers/{container['id']}/exec", {"commands": ["true"]})
            ran = time.perf_counter()
            call(port, "DELETE", f"/v1/containers/{container['id']}")
        finally:
            server.terminate()
            server.wait(timeout=60)
        if round_ > 0:  # the first start makes the data directory
            healthy.append((up - start) * 1000)
            first_exec.append((ran - start) * 1000)
    print()
    print("| `shellgate serve` start-up (existing data directory) | median ms | p90 ms | target |")
    print("|---|---|---|---|")
    for label, samples, target in [("start → first `/healthz` 200", healthy, 100),
                                   ("start → first exec answered (create + exec)", first_exec, None)]:
        samples.sort()
        median = statistics.median(samples)
        mark = "" if target is None else f"≤ {target} ms {'✔' if median <= target else '✘'}"
        print(f"| {label} | {median:.1f} | {samples[int(len(samples) * 0.9) - 1]:.1f} | {mark} |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--versus", type=Path, help="another build's binary, measured beside")
    parser.add_argument("--skip-serve", action="store_true", help="the one-shot rows only")
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="shellgate-bench-cli-"))
    os.chmod(data_dir, 0o755)
    try:
        one_shot(data_dir, args.runs, args.versus)
        if not args.skip_serve:
            serve_startup(data_dir, args.rounds)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
