#!/usr/bin/env python3
"""Many suspended containers on one box (BENCHMARKS.md, "Suspended
containers at scale").

A fresh `shellgate serve` (its own data directory; idle suspension after
1 s, the sweep every second, expiry pushed past the run, the per-project
quotas raised past N) gets N containers through `POST /v1/containers`,
--concurrency at a time, each suspended by the server's own sweep soon
after it is made: the data directory then holds exactly what N real
creates and suspensions leave. Creates go in rounds of --round, the next
once at most --live are live (creates outrun the sweep's suspensions, and
thousands live at once cost the host gigabytes of kernel memory). Then,
with N suspended:

  1. cost: disk per container (the data directory's allocated blocks, the
     store included, against the empty server's), the server's RSS,
     descriptors and threads against the empty server's (they should not
     grow with N);
  2. listing: `GET /v1/containers?limit=100` p50 over --repeats, the first
     page, a page half-way through (by `after=`), and with a `name=`
     filter;
  3. restart: the server stopped and started on the same data directory
     (with --cold, the page cache dropped between):
     time from `shellgate serve` to `/healthz`, to the first listing, to
     the first exec (which wakes a suspended container), the start-up's
     phases as the server logs them (`start-up phase` events), the RSS and
     descriptors once listening, and the background reconciliation's
     duration (its `reconciled` phase) when the server has one.

`--keep DIR` makes the data directory DIR and keeps it; `--reuse DIR`
skips the creates and measures (steps 1 to 3) on DIR as a previous run
left it (`--add K` first creates K more), so two binaries can be
compared on the same containers (`SHELLGATE_BIN`). Creates stop at
--floor-gib of MemAvailable or --disk-floor-gib of free disk.

Usage: bench/suspended.py [--count 10000] [--keep DIR | --reuse DIR
[--add K]] [--cold] [--json FILE]. Needs root; stdlib only.
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import (  # noqa: E402  (a sibling script, not a package)
    Server, create_many, drop_caches, meminfo, server_figures)

SETTINGS = {
    "idle_suspend_after_secs": 1,
    "sweep_interval_secs": 1,
    "default_expires_minutes": 10080,
    "max_running_containers_per_project": 1_000_000,
    "max_memory_per_project": "1000t",
    "max_execs_per_project": 1024,
    "rate_limit_per_minute": 0,
    # The start-up's phases are `info` events.
    "log": "info",
}


def allocated_bytes(path: Path) -> int:
    """Blocks allocated under `path` (sparse disk images count what they
    hold, not their size)."""
    out = subprocess.run(["du", "-s", "--block-size=1", str(path)], capture_output=True, text=True)
    return int(out.stdout.split()[0]) if out.stdout else 0


def mounted_disks(data: Path) -> int:
    """Loop devices on the data directory's disk images: the containers
    live now (and the engine's few warm ones)."""
    count = 0
    for name in os.listdir("/sys/block"):
        try:
            if Path("/sys/block", name, "loop", "backing_file").read_text().startswith(str(data)):
                count += 1
        except OSError:
            pass
    return count


def create_suspended(server, args, count: int):
    """Creates --count containers in rounds of --round, each round once
    the sweep has suspended all but --live of the previous ones (creates
    outrun suspensions; thousands live at once would cost the host
    gigabytes this benchmark is not about)."""
    ids, seconds, stop = [], 0.0, None
    while len(ids) < count and not stop:
        round_ids, round_seconds, stop = create_many(
            server, min(args.round, count - len(ids)), args.concurrency,
            int(args.floor_gib * 1048576), args.disk_floor_gib << 30, f"c{len(ids)}-")
        ids += round_ids
        seconds += round_seconds
        while mounted_disks(server.dir) > args.live:
            time.sleep(0.5)
    return ids, seconds, stop


def running(client) -> int:
    """How many of the server's containers the listing shows running."""
    count, after = 0, None
    while True:
        status, page = client.call("GET", "/containers?limit=100" + (f"&after={after}" if after else ""))
        if status != 200:
            raise RuntimeError(f"listing: {status} {page}")
        count += sum(1 for c in page["data"] if c["status"] == "running")
        if not page.get("has_more") or not page["data"]:
            return count
        after = page["data"][-1]["id"]


def wait_suspended(server, limit: float = 900.0) -> float:
    """Waits until the listing shows no container running (the sweep
    suspended every one); returns the seconds it took."""
    started, client = time.monotonic(), server.client()
    while time.monotonic() - started < limit:
        if running(client) == 0:
            return time.monotonic() - started
        time.sleep(1)
    raise RuntimeError("containers still running after the wait")


def p50_ms(client, path: str, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.monotonic()
        status, body = client.call("GET", path)
        times.append((time.monotonic() - started) * 1000)
        if status != 200:
            raise RuntimeError(f"GET {path}: {status} {body}")
    return round(statistics.median(times), 1)


def listings(client, repeats: int) -> dict:
    # A cursor half-way through the listing, found by walking it.
    status, page = client.call("GET", "/containers?limit=100")
    pages, total, after = 1, len(page["data"]), None
    while page.get("has_more") and page["data"]:
        after = page["data"][-1]["id"]
        status, page = client.call("GET", f"/containers?limit=100&after={after}")
        pages += 1
        total += len(page["data"])
    half, walked = pages // 2, 0
    status, page = client.call("GET", "/containers?limit=100")
    cursor = None
    while walked < half and page.get("has_more"):
        cursor = page["data"][-1]["id"]
        status, page = client.call("GET", f"/containers?limit=100&after={cursor}")
        walked += 1
    name = page["data"][0]["name"] if page["data"] else "c0"
    return {
        "listed": total,
        "first_page_p50_ms": p50_ms(client, "/containers?limit=100", repeats),
        "middle_page_p50_ms": p50_ms(client, f"/containers?limit=100&after={cursor}", repeats)
        if cursor else None,
        "name_filter_p50_ms": p50_ms(client, f"/containers?limit=100&name={name}", repeats),
    }


def phases(log: Path, offset: int) -> dict:
    """The `start-up phase` events (JSON log lines) logged since `offset`:
    milliseconds by phase."""
    found = {}
    with open(log, "rb") as f:
        f.seek(offset)
        for line in f.read().decode(errors="replace").splitlines():
            try:
                fields = json.loads(line).get("fields", {})
            except ValueError:
                continue
            if fields.get("message") == "start-up phase":
                found[fields["phase"]] = fields["millis"]
    return found


def measure_at_rest(server, result: dict, args):
    pid = server.process.pid
    client = server.client()
    result["suspended_server"] = server_figures(pid)
    result["disk_bytes"] = allocated_bytes(server.dir)
    result["listing"] = listings(client, args.repeats)


def restart(data: Path, server, result: dict, cold: bool):
    server.stop()
    if cold:
        drop_caches()  # as after a reboot: every directory read from disk
    log = data.parent / f"{data.name}.log"
    offset = log.stat().st_size
    server = Server(data, SETTINGS)
    client = server.client()
    started = time.monotonic()
    status, page = client.call("GET", "/containers?limit=1")
    listed = time.monotonic() - started
    target = page["data"][0]["id"] if status == 200 and page["data"] else None
    started = time.monotonic()
    status, _ = client.call("POST", f"/containers/{target}/exec", {"commands": ["true"]})
    woken = time.monotonic() - started
    figures = server_figures(server.process.pid)
    # The background reconciliation logs when it is done (a server that
    # logs no phases reconciled before listening).
    deadline = time.monotonic() + 600
    found = phases(log, offset)
    while found and not any(p.startswith("reconciled") for p in found) and time.monotonic() < deadline:
        time.sleep(0.5)
        found = phases(log, offset)
    result["restart"] = {
        "to_healthz_s": round(server.start_seconds, 2),
        "first_list_ms": round(listed * 1000, 1),
        "first_exec_ms": round(woken * 1000, 1),
        "first_exec_status": status,
        "server_listening": figures,
        "phases_ms": found,
    }
    return server


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=10000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--round", type=int, default=200, help="containers created between waits")
    parser.add_argument("--live", type=int, default=100, help="at most this many live before the next round")
    parser.add_argument("--floor-gib", type=float, default=6.0)
    parser.add_argument("--disk-floor-gib", type=int, default=15)
    parser.add_argument("--keep", default=None, help="make the data directory here and keep it")
    parser.add_argument("--reuse", default=None, help="measure on this kept data directory")
    parser.add_argument("--add", type=int, default=0, help="with --reuse: create this many more first")
    parser.add_argument("--cold", action="store_true", help="drop the page cache before the restart")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    result = {"goal": args.count}
    if args.reuse:
        data, work = Path(args.reuse), None
        server = Server(data, SETTINGS)
        if args.add:
            ids, _, stop = create_suspended(server, args, args.add)
            result["added"], result["stopped_by"] = len(ids), stop
        wait_suspended(server)
    else:
        if args.keep:
            data = Path(args.keep)
            data.mkdir(parents=True)
            work = None
        else:
            work = Path(tempfile.mkdtemp(prefix="sg-suspended-"))
            data = work / "data"
            data.mkdir()
        data.parent.chmod(0o711)
        server = Server(data, SETTINGS)
    try:
        if not args.reuse:
            time.sleep(5)  # the engine's warm containers and disks, made at start
            result["empty_server"] = server_figures(server.process.pid)
            result["empty_disk_bytes"] = allocated_bytes(data)
            print(f"creating {args.count}", flush=True)
            ids, seconds, stop = create_suspended(server, args, args.count)
            result["created"] = len(ids)
            result["create_per_s"] = round(len(ids) / seconds, 1) if seconds else None
            result["stopped_by"] = stop
            result["suspend_wait_s"] = round(wait_suspended(server), 1)
        measure_at_rest(server, result, args)
        n = result["listing"]["listed"]
        result["suspended"] = n
        if "empty_disk_bytes" in result and n:
            result["disk_per_container_kib"] = round(
                (result["disk_bytes"] - result["empty_disk_bytes"]) / n / 1024, 1)
            result["rss_growth_mib"] = round(
                result["suspended_server"]["rss_mib"] - result["empty_server"]["rss_mib"], 1)
            result["descriptor_growth"] = (
                result["suspended_server"]["descriptors"] - result["empty_server"]["descriptors"])
        print(f"restart with {n} suspended", flush=True)
        server = restart(data, server, result, args.cold)
        result["memavailable_gib"] = round(meminfo() / 1048576, 2)
    finally:
        server.stop()
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
