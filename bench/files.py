#!/usr/bin/env python3
"""Files by path (BENCHMARKS.md, "Interactive sandboxes"): a 1 GiB file
written into a container and read back through the API as a user times it
(`curl -T file` and `curl -o file` against
`/v1/containers/{id}/fs/content`), against `cat` on the host moving the same
bytes file to file, in the same run, on this machine.

Every copy starts from a file in the page cache and writes a new file, so
both sides do the same work: the API's adds the HTTP hop, the server's
pipe into the container and the sandbox user's worker there (splice in,
sendfile out). The container's `/mnt/data` is its own ext4 disk image; the
host's copy goes to a directory on the data directory's file system.

Usage: bench/files.py [--rounds N] [--mib M]. Needs root (the server makes
sandboxes), curl and target/release/shellgate. `functions()` is the
`--only files` entry of bench/interactive.py.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sandbox_server import KEY, Server  # noqa: E402 (bench/sandbox_server.py, beside this script)


def timed(argv):
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def cat(source: Path, target: Path):
    return timed(["sh", "-c", f"cat '{source}' > '{target}'"])


def curl(*args):
    return timed(["curl", "-sf", "-H", f"Authorization: Bearer {KEY}", *args])


def curl_allowing_404(*args):
    return timed(["curl", "-s", "-H", f"Authorization: Bearer {KEY}", *args])


def bench_files(rounds=3, mib=1024):
    work = Path(tempfile.mkdtemp(prefix="sg-bench-files-", dir=os.environ.get("BENCH_DIR", "/var/tmp")))
    # Sandboxes run as unprivileged host users: they must traverse it.
    work.chmod(0o711)
    server = Server(work / "data")
    try:
        cid = server.call("POST", "/containers", {"name": "bench-files"})["id"]
        source = work / "source.bin"
        with open(source, "wb") as out:
            chunk = os.urandom(1 << 20)
            for _ in range(mib):
                out.write(chunk)
        # Into the page cache, as every copy below reads it.
        cat(source, work / "warm.bin")
        url = f"{server.base}/containers/{cid}/fs/content?path=/mnt/data/big.bin"
        host_write, api_write, host_read, api_read = [], [], [], []
        host_reread, api_reread = [], []
        for round_ in range(rounds):
            for path in (work / "copy.bin", work / "back.bin", work / "again.bin"):
                path.unlink(missing_ok=True)
            host_write.append(cat(source, work / "copy.bin"))
            # A new file on both sides: the container's old one is removed
            # first, untimed (as the host's copies are), since freeing a
            # gibibyte on its disk image is work the host side does not do.
            remove = url.replace("/fs/content?", "/fs?")
            curl_allowing_404("-X", "DELETE", "-o", "/dev/null", remove)
            api_write.append(curl("-X", "PUT", "-T", str(source), "-o", "/dev/null", url))
            host_read.append(cat(work / "copy.bin", work / "again.bin"))
            api_read.append(curl("-o", str(work / "back.bin"), url))
            # Read once more: the first read of a file just written also
            # waits for the container's disk (an ext4 image on a loop device)
            # to write it back; the second shows the API's own cost.
            for path in (work / "back.bin", work / "again.bin"):
                path.unlink(missing_ok=True)
            host_reread.append(cat(work / "copy.bin", work / "again.bin"))
            api_reread.append(curl("-o", str(work / "back.bin"), url))
            if round_ == 0:
                same = subprocess.run(["cmp", "-s", str(source), str(work / "back.bin")]).returncode == 0
                if not same:
                    raise RuntimeError("the file read back differs")
        size = mib << 20
        rows = []
        for name, api, host in (("write (curl -T, PUT)", api_write, host_write),
                                ("read (curl -o, GET)", api_read, host_read),
                                ("read again (curl -o, GET)", api_reread, host_reread)):
            a, h = statistics.median(api), statistics.median(host)
            rows.append((name, a, h, size / a / 1e6, size / h / 1e6))
        print(f"files by path: {mib} MiB, median of {rounds} rounds")
        print("| transfer | through the API s (MB/s) | host `cat` file to file s (MB/s) | ratio |")
        print("|---|---|---|---|")
        for name, a, h, a_rate, h_rate in rows:
            print(f"| {name} | {a:.2f} ({a_rate:.0f}) | {h:.2f} ({h_rate:.0f}) | {a / h:.2f} × cat |")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def functions():
    """The benchmarks this file adds to bench/interactive.py."""
    return {"files": lambda rounds=3: bench_files(rounds)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mib", type=int, default=1024)
    args = parser.parse_args()
    bench_files(args.rounds, args.mib)


if __name__ == "__main__":
    main()
