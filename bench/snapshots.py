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
  allocates), with the host's sharing (`snapshot_sharing` of `/healthz`);
  and, on the XFS file system the script makes (its own), what the
  snapshot, the restore and the 17 forks added to it (`statvfs`), which
  `du` cannot see for shared blocks.

Each measurement is taken twice in one run: on a data directory where the
script is run (this machine's ext4: `copy`), and on an XFS file system with
reflinks (`mkfs.xfs -m reflink=1` on a sparse loop file the script makes and
removes; skipped without `mkfs.xfs`): `reflink`. The cold create and the
200 MiB write on each say what the extra loop layer costs.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
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


def used(path: Path) -> int:
    """Bytes in use on the file system `path` is on."""
    stat = os.statvfs(path)
    return (stat.f_blocks - stat.f_bfree) * stat.f_frsize


def measure(rounds: int, data_dir: Path = None) -> dict:
    """Every measurement on a server over `data_dir` (else a temporary
    directory)."""
    server = Server(data_dir, warm_containers="0", max_snapshot_bytes_per_project="100g")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz") as response:
            sharing = json.loads(response.read()).get("snapshot_sharing")
        cold = []
        for n in range(rounds):
            ms, made = timed(lambda: server.call("POST", "/containers", {"name": f"cold-{n}"}))
            cold.append(ms)
            server.call("DELETE", f"/containers/{made['id']}")
        source = server.call("POST", "/containers", {"name": "source"})["id"]
        write_ms, _ = timed(lambda: server.call("POST", f"/containers/{source}/exec", {
            "commands": ["head -c 209715200 /dev/urandom > /mnt/data/big && sync"], "timeout_ms": 300000}))
        server.call("POST", f"/containers/{source}/processes", {
            "command": "while :; do date >> /mnt/data/ticks; sleep 0.05; done", "timeout_ms": 300000})
        before = used(server.dir)
        snap_ms, snap = timed(lambda: server.call("POST", f"/containers/{source}/snapshots", {}))
        restore_ms, _ = timed(lambda: server.call(
            "POST", "/containers", {"name": "restored", "snapshot_id": snap["id"]}))
        fork1_ms, _ = timed(lambda: server.call("POST", f"/containers/{source}/fork", {"count": 1}))
        fork16_ms, forks = timed(lambda: server.call("POST", f"/containers/{source}/fork", {"count": 16}))
        # The restore, 17 forks, their snapshots and the snapshot: 18 copies.
        added = used(server.dir) - before
        containers = server.dir / "sandbox" / "containers"
        if not containers.exists():
            containers = server.dir / "containers"
        return {
            "sharing": sharing,
            "cold_ms": statistics.median(cold),
            "write_ms": write_ms,
            "snapshot_ms": snap_ms,
            "frozen_ms": snap["frozen_ms"],
            "restore_ms": restore_ms,
            "fork1_ms": fork1_ms,
            "fork16_ms": fork16_ms,
            "full": allocated(containers / source / "disk.img"),
            "per_copy": statistics.median(allocated(containers / c["id"] / "disk.img") for c in forks["data"]),
            "added_per_copy": added / 18,
            # Only a file system of the run's own says what it added: the
            # host's is shared with everything else the machine writes.
            "own_file_system": data_dir is not None,
        }
    finally:
        server.stop()


def on_xfs(rounds: int) -> dict:
    """[`measure`] over an XFS file system with reflinks, on a loop file."""
    tmp = Path(tempfile.mkdtemp(prefix="sg-bench-xfs-"))
    # Sandboxes run as unprivileged host users: the path must be traversable.
    os.chmod(tmp, 0o755)
    image, mount = tmp / "xfs.img", tmp / "data"
    mount.mkdir()
    with open(image, "wb") as sparse:
        sparse.truncate(64 << 30)
    try:
        subprocess.run(["mkfs.xfs", "-q", "-m", "reflink=1", str(image)], check=True)
        subprocess.run(["mount", "-o", "loop", str(image), str(mount)], check=True)
        try:
            os.chmod(mount, 0o755)
            return measure(rounds, mount)
        finally:
            subprocess.run(["umount", str(mount)], check=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def report(name: str, m: dict) -> None:
    cold = m["cold_ms"]
    print(f"== {name}: snapshot_sharing {m['sharing']}")
    print(f"cold create: {cold:.0f} ms; writing 200 MiB: {m['write_ms']:.0f} ms")
    for label, key in [("snapshot (200 MiB)", "snapshot_ms"), ("restore", "restore_ms"),
                       ("fork x1", "fork1_ms"), ("fork x16", "fork16_ms")]:
        print(f"{label}: {m[key]:.0f} ms = {m[key] / cold:.1f}x a cold create")
    print(f"frozen while captured: {m['frozen_ms']} ms")
    print(f"disk per copy (du): {m['per_copy'] / MIB:.0f} MiB against {m['full'] / MIB:.0f} MiB for the "
          f"source's whole disk ({m['per_copy'] / m['full']:.2f})")
    if m["own_file_system"]:
        print(f"file system space per copy: {m['added_per_copy'] / MIB:.1f} MiB "
              f"({m['added_per_copy'] / m['full']:.3f} of a full copy)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    report("data directory here", measure(args.rounds))
    if shutil.which("mkfs.xfs"):
        report("data directory on XFS (reflink=1, loop file)", on_xfs(args.rounds))
    else:
        print("mkfs.xfs not found (xfsprogs): the reflink measurement is skipped")


if __name__ == "__main__":
    main()
