#!/usr/bin/env python3
"""How long a server with N live containers takes to stop (SIGTERM to exit).

    SHELLGATE_BIN=target/release/shellgate python3 bench/stop_at_scale.py --count 3000 [--perf FILE]

Creates N containers (each live: started at create) on a fresh data
directory with `bench/scale.py`'s settings, lets the server settle, then
sends SIGTERM and times the exit. With `--perf FILE`, the whole machine is
sampled meanwhile (`perf record -a -g`), for `perf report -i FILE`. Run on
a quiet machine, as root (the engine's isolation needs it).
"""

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--perf", default=None, help="also sample the machine during the stop, into this file")
    parser.add_argument("--perf-seconds", type=int, default=60)
    parser.add_argument("--floor-gib", type=float, default=6.0)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="sg-stop-"))
    work.chmod(0o711)
    data = work / "data"
    data.mkdir()
    server = scale.Server(data, scale.LIVE_SETTINGS)
    ids, seconds, stop = scale.create_many(server, args.count, 8, int(args.floor_gib * 1048576), 8 << 30, "c")
    print(f"{len(ids)} live containers made in {seconds:.1f} s{f' (stopped: {stop})' if stop else ''}", flush=True)
    time.sleep(5)
    perf = None
    if args.perf:
        perf = subprocess.Popen(
            ["perf", "record", "-a", "-g", "-F", "499", "-o", args.perf, "--", "sleep", str(args.perf_seconds)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
    started = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    try:
        server.process.wait(timeout=600)
        print(f"stopped with {len(ids)} live in {time.monotonic() - started:.1f} s", flush=True)
    except subprocess.TimeoutExpired:
        print(f"not stopped in 600 s with {len(ids)} live: killed", flush=True)
        server.process.kill()
        server.process.wait()
    if perf:
        perf.wait()
    print(f"data directory: {data} (its log beside it)")


if __name__ == "__main__":
    main()
