#!/usr/bin/env python3
"""Archives: a 10,000-file tree exported as a tar stream through
the API, against the host's `tar -cf` of the same tree, in the same run.

`python3 bench/archive.py` (needs root and the release build,
target/release/shellgate, or SHELLGATE_BIN). A server runs
on a data directory of its own; one container gets a tree of 10,000 small
files (100 directories of 100, 1 to 5 bytes each) in `/mnt/data/tree`.

* **through the API**: `curl -o file` of `GET /v1/containers/{id}/fs/archive
  ?path=/mnt/data/tree`, end to end (curl's start, the HTTP request, the
  file worker forked in the container walking the tree as the sandbox user,
  the stream through the engine's pipe and the server, written to a file);
* **host tar** (the baseline): `tar -cf file -C dir .` of the same tree,
  extracted on the host from the API's own archive into a directory on the
  host's disk, written to a file beside it.

Both run warm (one unmeasured round each first), alternate, `--rounds`
rounds; medians. `bench_archive(server, rounds)` is the measurement alone,
on a `sandbox_server.Server` a caller runs.
"""

import argparse
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sandbox_server import KEY, Server  # noqa: E402 (bench/sandbox_server.py, beside this script)

FILES = 10_000


def timed(command) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return (time.perf_counter() - start) * 1000


def bench_archive(server: Server, rounds: int) -> dict:
    """Medians (ms) of the API export and the host tar of one 10,000-file tree."""
    container = server.call("POST", "/containers", {"name": "bench-archive"})
    work = Path(tempfile.mkdtemp(prefix="shellgate-bench-archive-"))
    try:
        make = ("python3 -c \"import os\nfor i in range(%d):\n"
                "    d = '/mnt/data/tree/d%%d' %% (i %% 100)\n    os.makedirs(d, exist_ok=True)\n"
                "    open('%%s/f%%d' %% (d, i), 'w').write(str(i))\"" % FILES)
        result = server.call("POST", f"/containers/{container['id']}/exec", {"commands": [make]})
        assert result["output"][0]["outcome"] == {"type": "exit", "exit_code": 0}, result
        url = f"{server.base}/containers/{container['id']}/fs/archive?path=/mnt/data/tree"
        through_api = ["curl", "-sSf", "-o", str(work / "api.tar"), "-H", f"Authorization: Bearer {KEY}", url]
        subprocess.run(through_api, check=True)
        host_tree = work / "tree"
        host_tree.mkdir()
        with tarfile.open(work / "api.tar") as archive:
            members = archive.getmembers()
            assert sum(m.isfile() for m in members) == FILES, len(members)
        subprocess.run(["tar", "-xf", str(work / "api.tar"), "-C", str(host_tree)], check=True)
        host_tar = ["tar", "-cf", str(work / "host.tar"), "-C", str(host_tree), "."]
        timed(host_tar)
        api_ms, host_ms = [], []
        for _ in range(rounds):
            api_ms.append(timed(through_api))
            host_ms.append(timed(host_tar))
        return {
            "api_ms": statistics.median(api_ms),
            "host_ms": statistics.median(host_ms),
            "api_bytes": (work / "api.tar").stat().st_size,
            "host_bytes": (work / "host.tar").stat().st_size,
        }
    finally:
        server.call("DELETE", f"/containers/{container['id']}")
        shutil.rmtree(work, ignore_errors=True)


def print_rows(result: dict) -> None:
    print("| Measurement | Host `tar -cf` (baseline) | Through the API | Ratio |")
    print("|---|---|---|---|")
    print(f"| Tar export of a {FILES:,}-file tree (to a file) | {result['host_ms']:.1f} ms "
          f"({result['host_bytes'] / 2**20:.1f} MiB) | {result['api_ms']:.1f} ms "
          f"({result['api_bytes'] / 2**20:.1f} MiB) | {result['api_ms'] / result['host_ms']:.2f}× |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    server = Server()
    try:
        print_rows(bench_archive(server, args.rounds))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
