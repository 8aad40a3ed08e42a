#!/usr/bin/env python3
"""Many live containers on one box (BENCHMARKS.md, "Scale: live containers").

For each N of --counts (default 1,000, 5,000, 10,000), a fresh `shellgate
serve` (its own data directory, idle suspension and expiry pushed past the
run, the per-project running and memory quotas raised past N) is measured
in one run, in this order:

  1. empty: 32 containers only; the mixed load below for --seconds, its exec
     latency the baseline; the server's descriptors, threads and RSS; the
     host's counts of mounts, loop devices, cgroups and server children.
  2. create: N containers through `POST /v1/containers`, --concurrency at a
     time; the create rate. Creation stops early, and the run says so, when
     MemAvailable falls below --floor-gib (6 GiB: the machine is shared) or
     the data directory's file system has less than --disk-floor-gib free.
  3. memory: host memory per container, as MemAvailable lost with the page
     cache dropped before and after (noisy on a shared machine), as the
     sandboxes' cgroup's charge (pages and kernel objects, the precise one)
     and as the summed PSS of the containers' inits; the server's
     descriptors, threads, RSS.
  4. load (after an unmeasured warm-up, as step 1's, the caches having
     been dropped): 32 client threads for --seconds, each picking a random container
     per request: 90 % `POST .../exec` of `true`, 5 % a 4 KiB upload
     (`POST .../files`), 5 % a listing (`GET /v1/containers?limit=100` or
     the container's files); exec p50/p99 against step 1's (and the host's
     `sysinfo()` time, empty and with N live: every `bash` start makes the
     call, and the kernel walks every block device for it). The server's
     RSS, high-water mark and what it keeps once settled after the load.
  5. restart: the server stopped (its containers end with it) and started on
     the same data directory: time to `/healthz`, to a listing that shows
     all N, and to the first exec (which wakes a container).
  6. delete: every container deleted, --concurrency at a time; the delete
     rate; then the host's counts again: nothing may be left of them
     (mounts, loop devices on the data directory, cgroups, processes).

Usage: bench/scale.py [--counts 1000,5000,10000] [--seconds 20]
[--floor-gib 6] [--json FILE]. Needs root; stdlib only. The server is
SHELLGATE_BIN, else the release build, else the debug build.
"""

import argparse
import http.client
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-bench-scale-project"
CLIENTS = 32
EMPTY_CONTAINERS = 32
KERNEL_FIELDS = ("SUnreclaim", "SReclaimable", "KernelStack", "PageTables")


def binary() -> Path:
    if os.environ.get("SHELLGATE_BIN"):
        return Path(os.environ["SHELLGATE_BIN"])
    release = ROOT / "target" / "release" / "shellgate"
    return release if release.exists() else ROOT / "target" / "debug" / "shellgate"


def meminfo(field: str = "MemAvailable") -> int:
    """A /proc/meminfo field, in KiB."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def status_field(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def children(pid: int) -> list:
    """The processes whose parent is `pid` (a container's init is the
    server's child: the helper clones it with CLONE_PARENT)."""
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(p) for p in f.read().split()]
        except OSError:
            pass
    return found


def pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def server_figures(pid: int) -> dict:
    return {
        "descriptors": len(os.listdir(f"/proc/{pid}/fd")),
        "threads": status_field(pid, "Threads"),
        "rss_mib": round(status_field(pid, "VmRSS") / 1024, 1),
        "hwm_mib": round(status_field(pid, "VmHWM") / 1024, 1),
        "children": len(children(pid)),
    }


def sandbox_group(server_pid: int):
    """The memory cgroup holding every container of this server: the parent
    of a container init's own (found on a child of the server)."""
    for child in children(server_pid):
        try:
            with open(f"/proc/{child}/cgroup") as f:
                for line in f:
                    _, controllers, path = line.rstrip("\n").split(":", 2)
                    if "memory" in controllers.split(","):
                        group = Path("/sys/fs/cgroup/memory" + path).parent
                        if group.name.startswith("shellgate-"):
                            return group
                        if group.parent.name.startswith("shellgate-"):
                            return group.parent
        except OSError:
            continue
    return None


def superblocks(mountinfo: str) -> set:
    """The superblocks (their device numbers) a mount table's mounts are on."""
    return {line.split()[2] for line in mountinfo.splitlines() if len(line.split()) > 2}


def own_superblocks(inits) -> dict:
    """How many superblocks each container's mount table holds that the
    host's does not (what the container made): the commonest and the most."""
    with open("/proc/self/mountinfo") as f:
        host = superblocks(f.read())
    counts = []
    for pid in inits:
        try:
            with open(f"/proc/{pid}/mountinfo") as f:
                counts.append(len(superblocks(f.read()) - host))
        except OSError:
            pass
    # The zygote and spare helpers are the server's children too, and hold
    # none of their own.
    counts = [c for c in counts if c > 0]
    return {"containers": len(counts), "most": statistics.mode(counts) if counts else 0,
            "max": max(counts, default=0)}


def shrinker_map_objects(group, probes: int = 16) -> float:
    """`kmalloc-1k` objects a new memory cgroup takes: its shrinker map, one
    object per 64 shrinker ids up to the highest id the kernel ever used
    (a high-water mark kept until reboot). Measured with empty cgroups made
    and removed beside the containers' (other allocations add noise)."""
    def objects():
        with open("/proc/slabinfo") as f:
            for line in f:
                if line.startswith("kmalloc-1k "):
                    return int(line.split()[1])
        return 0
    if group is None:
        return 0.0
    made = [group / f"shrinker-probe-{os.getpid()}-{i}" for i in range(probes)]
    before = objects()
    try:
        for path in made:
            path.mkdir()
        return round((objects() - before) / probes, 1)
    finally:
        for path in made:
            try:
                path.rmdir()
            except OSError:
                pass


def host_counts(data_dir: Path, group) -> dict:
    """What containers of this data directory hold on the host."""
    data = str(data_dir)
    with open("/proc/self/mountinfo") as f:
        mounts = sum(1 for line in f if data in line)
    loops = 0
    for name in os.listdir("/sys/block"):
        backing = Path("/sys/block", name, "loop", "backing_file")
        try:
            if backing.read_text().startswith(data):
                loops += 1
        except OSError:
            pass
    cgroups = 0
    if group is not None:
        name = group.name
        for controller in os.listdir("/sys/fs/cgroup"):
            base = Path("/sys/fs/cgroup", controller)
            for parent in [base, *base.glob("*"), *base.glob("*/*")]:
                if parent.name == name and parent.is_dir():
                    cgroups += sum(1 for p in parent.iterdir() if p.is_dir())
    return {"host_mounts": mounts, "loop_devices": loops, "cgroups": cgroups}


def open_file_limit(pid: int) -> int:
    """The server's soft RLIMIT_NOFILE (it raises it to the hard one)."""
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    return 0


def settled_counts(data_dir: Path, group, pid: int, limit: float = 60.0) -> dict:
    """The host's counts once they stopped moving (the engine refills its
    warm containers and disks in the background), or after `limit` s."""
    samples, deadline = [], time.monotonic() + limit
    while time.monotonic() < deadline:
        counts = host_counts(data_dir, group)
        counts["server_children"] = len(children(pid))
        left = Path(data_dir, "sandbox", "containers")
        counts["container_dirs"] = sum(1 for _ in left.iterdir()) if left.exists() else 0
        samples.append(counts)
        if len(samples) >= 5 and all(c == counts for c in samples[-5:]):
            break
        time.sleep(0.4)
    return samples[-1]


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, data_dir: Path, settings: dict):
        self.dir = data_dir
        self.port = free_port()
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "SHELLGATE_API_KEYS": f"{KEY}:scale",
            "SHELLGATE_BUILD_DEFAULT_IMAGE": "false",
            "SHELLGATE_LOG": "warn",
        }
        env.update({f"SHELLGATE_{k.upper()}": str(v) for k, v in settings.items()})
        self.log = open(data_dir.parent / f"{data_dir.name}.log", "ab")
        started = time.monotonic()
        self.process = subprocess.Popen(
            [str(binary()), "--data-dir", str(data_dir), "serve", "--listen", f"127.0.0.1:{self.port}"],
            env=env, stdout=self.log, stderr=self.log)
        deadline = started + 600
        while time.monotonic() < deadline:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    conn.close()
                    self.start_seconds = time.monotonic() - started
                    return
            except OSError:
                if self.process.poll() is not None:
                    break
            time.sleep(0.05)
        self.stop()
        tail = Path(self.log.name).read_text(errors="replace")[-2000:]
        raise RuntimeError(f"server did not start: {tail}")

    def client(self):
        return Client(self.port)

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


class Client:
    """One kept-alive HTTP/1.1 connection."""

    def __init__(self, port: int):
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)

    def call(self, method, path, body=None, content_type="application/json"):
        headers = {"Authorization": f"Bearer {KEY}"}
        if body is not None:
            headers["Content-Type"] = content_type
            if not isinstance(body, bytes):
                body = json.dumps(body).encode()
        for attempt in range(2):
            try:
                self.conn.request(method, "/v1" + path, body=body, headers=headers)
                response = self.conn.getresponse()
                data = response.read()
                return response.status, (json.loads(data) if data else None)
            except (http.client.HTTPException, ConnectionError):
                self.conn.close()
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
                if attempt:
                    raise

    def upload(self, container, name, content: bytes):
        boundary = "scalebenchboundary"
        body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n"
                f"Content-Type: application/octet-stream\r\n\r\n").encode() + content + f"\r\n--{boundary}--\r\n".encode()
        return self.call("POST", f"/containers/{container}/files", body,
                         f"multipart/form-data; boundary={boundary}")


def run_parallel(jobs: int, work):
    threads = [threading.Thread(target=work, args=(i,)) for i in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def create_many(server, count: int, concurrency: int, floor_kib: int, disk_floor: int, prefix: str):
    """Creates up to `count` containers; stops at the memory or disk floor.
    Returns (ids, seconds, stop reason or None)."""
    ids, lock = [], threading.Lock()
    state = {"next": 0, "stop": None, "refused": 0}

    def work(_):
        client = server.client()
        while True:
            with lock:
                if state["stop"] or state["next"] >= count:
                    return
                if meminfo() < floor_kib:
                    state["stop"] = f"MemAvailable below {floor_kib // 1048576} GiB"
                    return
                if shutil.disk_usage(server.dir).free < disk_floor:
                    state["stop"] = f"free disk below {disk_floor >> 30} GiB"
                    return
                i = state["next"]
                state["next"] += 1
            status, body = client.call("POST", "/containers", {"name": f"{prefix}{i}"})
            if status == 200:
                with lock:
                    ids.append(body["id"])
                    if len(ids) % 500 == 0:
                        print(f"    {len(ids)} containers, MemAvailable {meminfo() >> 20} GiB", flush=True)
            else:
                with lock:
                    state["refused"] += 1
                    if state["refused"] > 20:
                        state["stop"] = f"create refused: {status} {body}"
                    else:
                        print(f"    create refused: {status} {body}", flush=True)

    started = time.monotonic()
    run_parallel(concurrency, work)
    return ids, time.monotonic() - started, state["stop"]


def delete_many(server, ids, concurrency: int):
    queue, lock, failures = list(ids), threading.Lock(), []

    def work(_):
        client = server.client()
        while True:
            with lock:
                if not queue:
                    return
                container = queue.pop()
            status, body = client.call("DELETE", f"/containers/{container}")
            if status != 200:
                with lock:
                    failures.append((container, status, body))

    started = time.monotonic()
    run_parallel(concurrency, work)
    return time.monotonic() - started, failures


def mixed_load(server, ids, seconds: float) -> dict:
    """CLIENTS threads, each request on a random container of `ids`."""
    latencies, listings, counts, errors, lock = [], [], {"exec": 0, "upload": 0, "list": 0}, [], threading.Lock()
    end = time.monotonic() + seconds
    payload = os.urandom(4096)

    def work(n):
        client = server.client()
        rng = random.Random(n)
        mine, lists, kinds = [], [], {"exec": 0, "upload": 0, "list": 0}
        while time.monotonic() < end:
            container = rng.choice(ids)
            roll = rng.random()
            if roll < 0.90:
                started = time.perf_counter()
                status, body = client.call("POST", f"/containers/{container}/exec", {"commands": ["true"]})
                mine.append(time.perf_counter() - started)
                kind = "exec"
            elif roll < 0.95:
                status, body = client.upload(container, f"load-{n}-{kinds['upload']}.bin", payload)
                kind = "upload"
            else:
                path = "/containers?limit=100" if roll < 0.975 else f"/containers/{container}/files?limit=100"
                started = time.perf_counter()
                status, body = client.call("GET", path)
                if roll < 0.975:
                    lists.append(time.perf_counter() - started)
                kind = "list"
            if status != 200:
                with lock:
                    errors.append((kind, status, body))
            kinds[kind] += 1
        with lock:
            latencies.extend(mine)
            listings.extend(lists)
            for k, v in kinds.items():
                counts[k] += v

    started = time.monotonic()
    run_parallel(CLIENTS, work)
    wall = time.monotonic() - started
    latencies.sort()
    listings.sort()
    pick = lambda q, xs=latencies: xs[min(len(xs) - 1, int(q * len(xs)))] * 1000 if xs else 0.0
    return {
        "requests": counts,
        "errors": len(errors),
        "first_errors": [str(e)[:200] for e in errors[:3]],
        "exec_per_s": round(counts["exec"] / wall, 1),
        "exec_p50_ms": round(pick(0.50), 2),
        "exec_p99_ms": round(pick(0.99), 2),
        "list_p50_ms": round(pick(0.50, listings), 2),
    }


def sysinfo_us(calls: int = 100, batches: int = 5) -> float:
    """The host's `sysinfo()` (through `sysconf(_SC_PHYS_PAGES)`), median µs
    of --batches: the kernel sums the page cache of every block device on
    each call, and every `bash` start makes one (glibc's qsort asks for the
    machine's memory), so each live container's loop device adds to every
    command's cost."""
    times = []
    for _ in range(batches):
        started = time.perf_counter()
        for _ in range(calls):
            os.sysconf("SC_PHYS_PAGES")
        times.append((time.perf_counter() - started) / calls * 1e6)
    return round(statistics.median(times), 1)


def settled_rss(pid: int, limit: float = 30.0) -> float:
    samples, deadline = [], time.monotonic() + limit
    while time.monotonic() < deadline:
        samples.append(status_field(pid, "VmRSS"))
        if len(samples) >= 7 and max(samples[-7:]) - min(samples[-7:]) < 1024:
            break
        time.sleep(0.5)
    return round(samples[-1] / 1024, 1)


def slab_bytes() -> dict:
    """Every slab cache's size in bytes (objects times object size)."""
    sizes = {}
    with open("/proc/slabinfo") as f:
        for line in f.readlines()[2:]:
            fields = line.split()
            sizes[fields[0]] = int(fields[2]) * int(fields[3])
    return sizes


def smaps_parts(pids) -> dict:
    """The inits' summed smaps_rollup fields that say where their pages are."""
    parts = dict.fromkeys(("Rss", "Pss", "Pss_Anon", "Pss_File", "Pss_Shmem",
                           "Shared_Clean", "Private_Clean", "Private_Dirty"), 0)
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    key, _, rest = line.partition(":")
                    if key in parts:
                        parts[key] += int(rest.split()[0])
        except OSError:
            pass
    return parts


def kernel_threads() -> int:
    """Tasks whose parent is kthreadd (jbd2, workqueue rescuers, ...)."""
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[1] == "2":
                        count += 1
            except (OSError, IndexError):
                pass
    return count


def cgroup_stat(group) -> dict:
    """The group's memory.stat totals (v1: total_*) and kernel memory, KiB."""
    stats = {}
    try:
        for line in (group / "memory.stat").read_text().splitlines():
            key, value = line.split()
            stats[key] = int(value) // 1024
        stats["kmem"] = int((group / "memory.kmem.usage_in_bytes").read_text()) // 1024
    except (OSError, TypeError, ValueError):
        pass
    return stats


def breakdown(before: dict, after: dict, made: int) -> dict:
    """Per container, KiB: where the memory went between two samples."""
    slabs = {k: (after["slab"].get(k, 0) - before["slab"].get(k, 0)) / 1024 / made
             for k in set(before["slab"]) | set(after["slab"])}
    wanted = ("total_rss", "total_cache", "total_shmem", "total_mapped_file", "kmem",
              "rss", "cache", "shmem", "anon", "file", "kernel", "kernel_stack",
              "pagetables", "percpu", "sock", "slab_unreclaimable", "slab_reclaimable")
    return {
        "meminfo": {k: round((after["meminfo"][k] - before["meminfo"][k]) / made, 1)
                    for k in after["meminfo"]},
        "slab_caches": {k: round(v, 1) for k, v in
                        sorted(slabs.items(), key=lambda kv: -abs(kv[1]))[:20]},
        "cgroup": {k: round((after["cgroup"].get(k, 0) - before["cgroup"].get(k, 0)) / made, 1)
                   for k in wanted if k in after["cgroup"]},
        "inits": {k: round((after["inits"][k] - before["inits"][k]) / made, 1)
                  for k in after["inits"]},
        "kernel_threads": round((after["kthreads"] - before["kthreads"]) / made, 2),
        "init_threads": after["init_threads"],
    }


def sample(pid: int, group) -> dict:
    inits = children(pid)
    return {
        "meminfo": {f: meminfo(f) for f in ("MemAvailable", "MemFree", "Slab", "SUnreclaim",
                                            "SReclaimable", "KernelStack", "PageTables",
                                            "Percpu", "VmallocUsed", "Shmem")},
        "slab": slab_bytes(),
        "cgroup": cgroup_stat(group),
        "inits": smaps_parts(inits),
        "kthreads": kernel_threads(),
        "init_threads": sorted({status_field(c, "Threads") for c in inits}),
    }


def cgroup_charge_kib(group) -> int:
    try:
        return int((group / "memory.usage_in_bytes").read_text()) // 1024
    except (OSError, TypeError, ValueError):
        return 0


# A server that keeps every container live and lets one project hold them
# all (shared with `stop_at_scale.py`).
LIVE_SETTINGS = {
    "idle_suspend_after_secs": 10**9,
    "default_expires_minutes": 10080,
    "max_running_containers_per_project": 1_000_000,
    "max_memory_per_project": "1000t",
    "max_execs_per_project": 1024,
    "rate_limit_per_minute": 0,
}


def measure(count: int, args) -> dict:
    work = Path(tempfile.mkdtemp(prefix="sg-scale-", dir=args.dir))
    work.chmod(0o711)
    data = work / "data"
    data.mkdir()
    settings = LIVE_SETTINGS
    floor_kib = int(args.floor_gib * 1048576)
    result = {"goal": count}
    server = Server(data, settings)
    pid = server.process.pid
    try:
        print(f"N={count}: empty server", flush=True)
        result["open_file_limit"] = open_file_limit(pid)
        # The engine's warm containers are the server's children from the
        # start: their cgroup's parent is every container's.
        deadline, group = time.monotonic() + 60, None
        while group is None and time.monotonic() < deadline:
            group = sandbox_group(pid)
            time.sleep(0.2)
        # What a server with no container of the benchmark's holds: the
        # baseline the counts after the deletes are held to.
        result["fresh_host"] = settled_counts(data, group, pid)
        base_ids, _, stop = create_many(server, EMPTY_CONTAINERS, 8, floor_kib, args.disk_floor_gib << 30, "empty")
        if stop:
            raise RuntimeError(stop)
        mixed_load(server, base_ids, min(3.0, args.seconds))  # warm-up, unmeasured
        result["empty_load"] = mixed_load(server, base_ids, args.seconds)
        result["empty_server"] = server_figures(pid)
        result["sysinfo_us"] = {"empty": sysinfo_us()}
        drop_caches()
        available_before, charge_before = meminfo(), cgroup_charge_kib(group)
        kernel_before = {f: meminfo(f) for f in KERNEL_FIELDS}
        pss_before = sum(pss_kib(c) for c in children(pid))
        sample_before = sample(pid, group)

        print(f"N={count}: creating", flush=True)
        ids, seconds, stop = create_many(server, count, args.concurrency, floor_kib,
                                         args.disk_floor_gib << 30, "c")
        result["created"] = len(ids)
        result["create_seconds"] = round(seconds, 1)
        result["create_per_s"] = round(len(ids) / seconds, 1)
        result["stopped_by"] = stop
        drop_caches()
        made = max(1, len(ids))
        result["memory_per_container_kib"] = {
            "memavailable": round((available_before - meminfo()) / made),
            "cgroup_charge": round((cgroup_charge_kib(group) - charge_before) / made),
            "init_pss": round((sum(pss_kib(c) for c in children(pid)) - pss_before) / made),
        }
        # The kernel's own objects (not all charged to a cgroup): slab
        # (namespaces, mounts, the loop devices' queues, ext4 and its
        # journal), stacks, page tables.
        result["kernel_per_container_kib"] = {
            f: round((meminfo(f) - kernel_before[f]) / made) for f in KERNEL_FIELDS}
        result["breakdown_per_container_kib"] = breakdown(sample_before, sample(pid, group), made)
        # Every superblock registers a shrinker; every memory cgroup keeps a
        # map of them (kmalloc-1k grows as cgroups x superblocks).
        result["superblocks_per_container"] = own_superblocks(children(pid))
        result["shrinker_map_objects_per_memcg"] = shrinker_map_objects(group)
        result["memavailable_gib_at_peak"] = round(meminfo() / 1048576, 2)
        result["sysinfo_us"]["live"] = sysinfo_us()
        result["live"] = server_figures(pid)
        result["live_host"] = host_counts(data, group)
        result["descriptors_per_container"] = round(
            (result["live"]["descriptors"] - result["empty_server"]["descriptors"]) / made, 2)
        if result["descriptors_per_container"] > 0:
            result["descriptor_bound_containers"] = int(
                (result["open_file_limit"] - result["empty_server"]["descriptors"])
                / result["descriptors_per_container"]) + EMPTY_CONTAINERS
        all_ids = base_ids + ids

        print(f"N={count}: load over {len(all_ids)} containers", flush=True)
        # Warmed up as the empty server's was: the caches were just dropped
        # for the memory figures, and a cold start measured against a warm
        # baseline made the ratio a measure of the dropped caches.
        mixed_load(server, all_ids, min(3.0, args.seconds))  # unmeasured
        result["load"] = mixed_load(server, all_ids, args.seconds)
        result["after_load"] = server_figures(pid)
        result["after_load"]["rss_settled_mib"] = settled_rss(pid)
        result["exec_p50_ratio"] = round(result["load"]["exec_p50_ms"] / result["empty_load"]["exec_p50_ms"], 2)
        result["exec_p99_ratio"] = round(result["load"]["exec_p99_ms"] / result["empty_load"]["exec_p99_ms"], 2)

        if not args.no_restart:
            print(f"N={count}: restart", flush=True)
            stop_started = time.monotonic()
            server.stop()
            result["stop_seconds"] = round(time.monotonic() - stop_started, 2)
            server = Server(data, settings)
            pid = server.process.pid
            client = server.client()
            started = time.monotonic()
            _status, page = client.call("GET", "/containers?limit=1")
            listed = time.monotonic() - started
            started = time.monotonic()
            status, _ = client.call("POST", f"/containers/{random.choice(ids or base_ids)}/exec", {"commands": ["true"]})
            woken = time.monotonic() - started
            result["restart"] = {
                "to_healthz_s": round(server.start_seconds, 2),
                "first_list_ms": round(listed * 1000, 1),
                "first_exec_ms": round(woken * 1000, 1),
                "first_exec_status": status,
                "server": server_figures(pid),
            }
            group = sandbox_group(pid) or group

        print(f"N={count}: deleting", flush=True)
        seconds, failures = delete_many(server, all_ids, args.concurrency)
        result["delete_seconds"] = round(seconds, 1)
        result["delete_per_s"] = round(len(all_ids) / seconds, 1)
        result["delete_failures"] = len(failures)
        result["after_delete_host"] = settled_counts(data, group, pid)
        result["after_delete"] = server_figures(pid)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", default="1000,5000,10000")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--floor-gib", type=float, default=6.0,
                        help="stop creating when MemAvailable falls below this (default 6)")
    parser.add_argument("--disk-floor-gib", type=int, default=8)
    parser.add_argument("--dir", default=None, help="where the data directories go (default: TMPDIR)")
    parser.add_argument("--no-restart", action="store_true")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (the server makes sandboxes; the page cache is dropped)")
    print(f"binary: {binary()}", flush=True)
    results = []
    for count in [int(c) for c in args.counts.split(",")]:
        result = measure(count, args)
        results.append(result)
        print(json.dumps(result, indent=1), flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
        if result.get("stopped_by"):
            print(f"stopped at N={result['created']} of {count}: {result['stopped_by']}", flush=True)
            break
    print()
    print("| N live | create/s | host KiB per container (MemAvailable / cgroup / init PSS) | "
          "exec p50 / p99 ms (empty) | ratio | server fds / threads | RSS / HWM / settled MiB | restart s | leaks |")
    print("|---|---:|---|---|---:|---|---|---:|---|")
    for r in results:
        m, load, empty = r["memory_per_container_kib"], r["load"], r["empty_load"]
        before, after = r["fresh_host"], r["after_delete_host"]
        leaks = {k: after[k] - before[k] for k in before}
        print(f"| {r['created']:,} | {r['create_per_s']} | {m['memavailable']} / {m['cgroup_charge']} / {m['init_pss']} | "
              f"{load['exec_p50_ms']} / {load['exec_p99_ms']} ({empty['exec_p50_ms']} / {empty['exec_p99_ms']}) | "
              f"{r['exec_p50_ratio']} / {r['exec_p99_ratio']} | {r['live']['descriptors']} / {r['live']['threads']} | "
              f"{r['live']['rss_mib']} / {r['after_load']['hwm_mib']} / {r['after_load']['rss_settled_mib']} | "
              f"{r.get('restart', {}).get('to_healthz_s', '-')} | {leaks} |")


if __name__ == "__main__":
    main()
