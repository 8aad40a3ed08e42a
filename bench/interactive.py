#!/usr/bin/env python3
"""Interactive sandboxes' benchmarks (BENCHMARKS.md, "Interactive sandboxes"),
each measured in the same run as its baseline, on this machine.

  * pty: a keystroke's round trip through a process's terminal over the
    WebSocket (one byte to `cat` in raw mode, wait for its echo), against
    the same on a local pty (`os.openpty` with the same `cat`, no server).

  * files: a 1 GiB file written and read through the API against `cat` on
    the host (bench/files.py).
  * archive: a 10,000-file tree exported as tar through the API against the
    host's `tar -cf` (bench/archive.py).

Usage: bench/interactive.py [--only pty|files|archive] [--rounds N] (each
part has its own default number of rounds). Needs root (the
server makes sandboxes) and the `websockets` package (scripts/test's venv:
`.venv/bin/python bench/interactive.py`).
"""

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from sandbox_server import KEY, Server  # noqa: E402 (bench/sandbox_server.py, beside this script)

# Raw mode and no echo of its own: every byte goes to `cat` and comes
# back only through it, in both measurements.
CAT = "stty raw -echo; echo ready; exec cat"


def summary(samples):
    samples = sorted(samples)
    return {
        "median_us": statistics.median(samples) * 1e6,
        "p99_us": samples[int(len(samples) * 0.99) - 1] * 1e6,
    }


def local_pty_round_trips(rounds):
    """One byte to `cat` on a local pty and its echo back, `rounds` times."""
    master, slave = os.openpty()
    child = subprocess.Popen(["sh", "-c", CAT], stdin=slave, stdout=slave, stderr=slave,
                             start_new_session=True)
    os.close(slave)
    seen = b""
    while b"ready" not in seen:
        seen += os.read(master, 1024)
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        os.write(master, b"x")
        got = b""
        while b"x" not in got:
            got += os.read(master, 1024)
        samples.append(time.perf_counter() - started)
    child.kill()
    child.wait()
    os.close(master)
    return samples


def websocket_round_trips(server, rounds):
    """The same through a shellgate process's terminal over the WebSocket."""
    from websockets.sync.client import connect

    container = server.call("POST", "/containers", {"name": "bench-pty"})["id"]
    process = server.call("POST", f"/containers/{container}/processes",
                          {"command": CAT, "pty": {"cols": 80, "rows": 24}, "timeout_ms": 300000})
    url = (server.base.replace("http://", "ws://")
           + f"/containers/{container}/processes/{process['id']}/ws?access_token={KEY}")
    samples = []
    with connect(url, compression=None) as socket:
        seen = b""
        while b"ready" not in seen:
            seen += socket.recv(timeout=30)
        for _ in range(rounds):
            started = time.perf_counter()
            socket.send(b"x")
            got = b""
            while b"x" not in got:
                got += socket.recv(timeout=30)
            samples.append(time.perf_counter() - started)
    server.call("DELETE", f"/containers/{container}/processes/{process['id']}")
    server.call("DELETE", f"/containers/{container}")
    return samples


def bench_pty(rounds):
    """A keystroke's round trip: shellgate's PTY WebSocket vs a local pty."""
    server = Server()
    try:
        # Alternating halves, so that neither side gets the quieter machine.
        local, remote = [], []
        for _ in range(2):
            local += local_pty_round_trips(rounds // 2)
            remote += websocket_round_trips(server, rounds // 2)
    finally:
        server.stop()
    local, remote = summary(local), summary(remote)
    print(f"keystroke round trip, {rounds} rounds each")
    print(f"  local pty (os.openpty + cat):      median {local['median_us']:8.1f} µs   p99 {local['p99_us']:8.1f} µs")
    print(f"  shellgate PTY WebSocket (+ cat):   median {remote['median_us']:8.1f} µs   p99 {remote['p99_us']:8.1f} µs")
    print(f"  ratio (median): {remote['median_us'] / local['median_us']:.1f}x   "
          f"(p99: {remote['p99_us'] / local['p99_us']:.1f}x)")


def bench_files(rounds):
    import files  # bench/files.py, beside this script

    files.bench_files(rounds or 3)


def bench_archive(rounds):
    # Its own server and tree: bench/archive.py, as a script.
    subprocess.run([sys.executable, str(ROOT / "bench" / "archive.py"), "--rounds", str(rounds or 20)],
                   check=True)


BENCHES = {"pty": lambda rounds: bench_pty(rounds or 2000), "files": bench_files, "archive": bench_archive}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(BENCHES), action="append")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    for name in args.only or sorted(BENCHES):
        BENCHES[name](args.rounds)


if __name__ == "__main__":
    sys.exit(main())
