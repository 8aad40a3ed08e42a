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
KEY = "sk-bench-cli"
BWRAP = ("bwrap --unshare-all --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib "
         "--symlink usr/lib64 /lib64 --proc /proc --dev /dev --tmpfs /tmp true")


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


def one_shot(data_dir: Path, runs: int):
    # The first run makes what later ones reuse (the host image's /etc).
    subprocess.run([str(BINARY), "--data-dir", str(data_dir), "exec", "--", "true"], check=True)
    out = Path(tempfile.mkstemp(suffix=".json")[1])
    subprocess.run(["hyperfine", "-N", "--warmup", "10", "--runs", str(runs), "--style", "none",
                    "--export-json", str(out),
                    f"{BINARY} --data-dir {data_dir} exec -- true", BWRAP],
                   check=True, stdout=subprocess.DEVNULL)
    results = json.loads(out.read_text())["results"]
    out.unlink()
    shellgate, bwrap = (statistics.median(r["times"]) * 1000 for r in results)
    print("| one-shot, end to end (hyperfine, no server) | median ms | ratio |")
    print("|---|---|---|")
    print(f"| `bwrap --unshare-all ... true` | {bwrap:.2f} | 1.00 (baseline) |")
    print(f"| `shellgate exec -- true` | {shellgate:.2f} | {shellgate / bwrap:.2f} × bwrap "
          f"(target ≤ 1.5 ×) {'✔' if shellgate <= 1.5 * bwrap else '✘'} |")


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
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="shellgate-bench-cli-"))
    os.chmod(data_dir, 0o755)
    try:
        one_shot(data_dir, args.runs)
        serve_startup(data_dir, args.rounds)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
