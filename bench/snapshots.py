#!/usr/bin/env python3
"""Snapshots and forks: a container with 200 MiB written to `/mnt/data`,
snapshotted, a container made from the snapshot (restore) and the container
forked once and 16 times, each as a ratio to a cold create (no warm
container) in the same run; the disk bytes each copy takes against a full
copy of the source's disk.

`python3 bench/snapshots.py` (needs root; the release build,
target/release/shellgate, or SHELLGATE_BIN). A server runs on a data
directory of its own with `warm_containers=0`, so every create is cold.

* **cold create**: `POST /v1/containers` to its answer (median of
  `--rounds`);
* **snapshot**: `POST /v1/containers/{id}/snapshots` of the source (running,
  a process appending to a file) to its answer, and the time its processes
  were frozen (`frozen_ms`);
* **restore**: `POST /v1/containers` with `snapshot_id` to its answer;
* **fork ×1, ×16**: `POST /v1/containers/{id}/fork` to its answer (one
  snapshot taken, the copies made one after another, the snapshot removed);
* **disk per copy**: the allocated bytes of a copy's disk image (`du`)
  against the source's (a full copy: what `cp` of the whole image
  allocates), with the host's sharing (`snapshot_sharing` of `/healthz`).
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sandbox_server import Server  # noqa: E402 (bench/sandbox_server.py, beside this script)

MIB = 1 << 20


def timed(call) -> tuple:
    start = time.perf_counter()
    answer = call()
    return (time.perf_counter() - start) * 1000, answer


def allocated(path: Path) -> int:
    return int(subprocess.run(["du", "-B1", "-s", str(path)], capture_output=True, text=True,
                              check=True).stdout.split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    server = Server(warm_containers="0", max_snapshot_bytes_per_project="100g")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz") as response:
            sharing = json.loads(response.read()).get("snapshot_sharing")
        cold = []
        for n in range(args.rounds):
            ms, made = timed(lambda: server.call("POST", "/containers", {"name": f"cold-{n}"}))
            cold.append(ms)
            server.call("DELETE", f"/containers/{made['id']}")
        cold_ms = statistics.median(cold)
        source = server.call("POST", "/containers", {"name": "source"})["id"]
        server.call("POST", f"/containers/{source}/exec", {
            "commands": ["head -c 209715200 /dev/urandom > /mnt/data/big && sync"], "timeout_ms": 300000})
        server.call("POST", f"/containers/{source}/processes", {
            "command": "while :; do date >> /mnt/data/ticks; sleep 0.05; done", "timeout_ms": 300000})
        snap_ms, snap = timed(lambda: server.call("POST", f"/containers/{source}/snapshots", {}))
        restore_ms, restored = timed(lambda: server.call(
            "POST", "/containers", {"name": "restored", "snapshot_id": snap["id"]}))
        fork1_ms, _ = timed(lambda: server.call("POST", f"/containers/{source}/fork", {"count": 1}))
        fork16_ms, forks = timed(lambda: server.call("POST", f"/containers/{source}/fork", {"count": 16}))
        containers = server.dir / "sandbox" / "containers"
        full = allocated(containers / source / "disk.img")
        per_copy = statistics.median(allocated(containers / c["id"] / "disk.img") for c in forks["data"])
        snapshot_bytes = allocated(server.dir / "sandbox" / "snapshots" / snap["id"])
        print(f"sharing on this host: {sharing}")
        print(f"cold create: {cold_ms:.0f} ms (median of {args.rounds})")
        for name, ms in [("snapshot (200 MiB)", snap_ms), ("restore", restore_ms),
                         ("fork x1", fork1_ms), ("fork x16", fork16_ms)]:
            print(f"{name}: {ms:.0f} ms = {ms / cold_ms:.1f}x a cold create")
        print(f"frozen while copied: {snap['frozen_ms']} ms")
        print(f"snapshot on disk: {snapshot_bytes / MIB:.0f} MiB")
        print(f"disk per copy: {per_copy / MIB:.0f} MiB against {full / MIB:.0f} MiB for the "
              f"source's whole disk ({per_copy / full:.2f})")
        del restored
    finally:
        server.stop()


if __name__ == "__main__":
    main()
