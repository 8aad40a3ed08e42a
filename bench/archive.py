#!/usr/bin/env python3
"""Archives (issue 19): a 10,000-file tree exported as a tar stream through
the API, against the host's `tar -cf` of the same tree, in the same run.

`python3 bench/archive.py` (needs root and a built shellgate: SHELLGATE_BIN,
else target/release/shellgate, else target/debug/shellgate). A server runs
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
rounds; medians. `bench_archive(port, key, rounds)` is the measurement
alone, for a script that runs its own server (bench/interactive.py).
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-bench-archive"
FILES = 10_000


def binary() -> Path:
    if os.environ.get("SHELLGATE_BIN"):
        return Path(os.environ["SHELLGATE_BIN"])
    release = ROOT / "target" / "release" / "shellgate"
    return release if release.exists() else ROOT / "target" / "debug" / "shellgate"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(port, key, method, path, body=None, timeout=300):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)


def timed(command) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return (time.perf_counter() - start) * 1000


def bench_archive(port: int, key: str, rounds: int) -> dict:
    """Medians (ms) of the API export and the host tar of one 10,000-file tree."""
    container = call(port, key, "POST", "/v1/containers", {"name": "bench-archive"})
    work = Path(tempfile.mkdtemp(prefix="shellgate-bench-archive-"))
    try:
        make = ("python3 -c \"import os\nfor i in range(%d):\n"
                "    d = '/mnt/data/tree/d%%d' %% (i %% 100)\n    os.makedirs(d, exist_ok=True)\n"
                "    open('%%s/f%%d' %% (d, i), 'w').write(str(i))\"" % FILES)
        result = call(port, key, "POST", f"/v1/containers/{container['id']}/exec", {"commands": [make]})
        assert result["output"][0]["outcome"] == {"type": "exit", "exit_code": 0}, result
        url = f"http://127.0.0.1:{port}/v1/containers/{container['id']}/fs/archive?path=/mnt/data/tree"
        through_api = ["curl", "-sSf", "-o", str(work / "api.tar"), "-H", f"Authorization: Bearer {key}", url]
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
        call(port, key, "DELETE", f"/v1/containers/{container['id']}")
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
    data_dir = Path(tempfile.mkdtemp(prefix="shellgate-bench-archive-data-"))
    os.chmod(data_dir, 0o755)
    port = free_port()
    env = {"PATH": os.environ["PATH"], "SHELLGATE_LOG": "warn", "SHELLGATE_API_KEYS": KEY,
           "SHELLGATE_BUILD_DEFAULT_IMAGE": "false"}
    server = subprocess.Popen([str(binary()), "--data-dir", str(data_dir), "serve", "--listen", f"127.0.0.1:{port}"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except OSError:
                assert time.time() < deadline and server.poll() is None, "server did not start"
                time.sleep(0.05)
        print_rows(bench_archive(port, KEY, args.rounds))
    finally:
        server.terminate()
        server.wait(timeout=60)
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
