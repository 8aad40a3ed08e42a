#!/usr/bin/env python3
"""Profiles of a warm command over HTTP and of the one-shot CLI, as text
summaries for bench/profiles/: where the CPU goes (perf's cpu-clock
samples: this machine's perf has no hardware counters) and where a
command waits (sched_switch: every time a thread leaves the CPU, with the
stack it left from), per exec, and the system calls each exec makes
(perf trace's summary). Needs root, perf and target/release/shellgate.

    python3 bench/profile_exec.py --execs 2000 --out bench/profiles

`--only live --live 3000`: the whole machine's CPU while 32 clients exec,
on an empty server and then beside 3,000 idle live containers.
"""

import argparse
import collections
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BINARY = Path(os.environ.get("SHELLGATE_BIN", ROOT / "target" / "release" / "shellgate"))
KEY = "sk-bench-profile"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(data_dir: Path, wrap, **settings):
    port = free_port()
    env = {"PATH": os.environ["PATH"], "SHELLGATE_LOG": "warn", "SHELLGATE_API_KEYS": KEY,
           "SHELLGATE_BUILD_DEFAULT_IMAGE": "false", "SHELLGATE_DEFAULT_IMAGE": "host"}
    env.update({f"SHELLGATE_{k.upper()}": str(v) for k, v in settings.items()})
    server = subprocess.Popen([*wrap, str(BINARY), "--data-dir", str(data_dir), "serve", "--listen",
                               f"127.0.0.1:{port}"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return server, port
        except OSError:
            if server.poll() is not None:
                raise SystemExit("the server did not start")
            time.sleep(0.05)


class Client:
    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port)
        self.headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}

    def call(self, method, path, body=None):
        self.conn.request(method, path, json.dumps(body) if body is not None else None, self.headers)
        response = self.conn.getresponse()
        data = response.read()
        assert response.status == 200, data
        return json.loads(data)


def exec_loop(port, execs, clients):
    """`execs` warm execs of `true`, spread over `clients` keep-alive
    clients, one container each."""
    def one(count):
        client = Client(port)
        container = client.call("POST", "/v1/containers", {"name": "profile"})["id"]
        client.call("POST", f"/v1/containers/{container}/exec", {"commands": ["true"]})
        barrier.wait()
        for _ in range(count):
            client.call("POST", f"/v1/containers/{container}/exec", {"commands": ["true"]})
    barrier = threading.Barrier(clients + 1)
    threads = [threading.Thread(target=one, args=(execs // clients,)) for _ in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    return threads


def summarize(data: Path, out: Path, title: str, execs: int, sort_keys: str, extra=()):
    """perf report's top frames (children and self), by command name."""
    report = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--no-children",
                             "--sort", sort_keys, "--percent-limit", "1.5", "-g", "none", *extra],
                            capture_output=True, text=True).stdout
    lines = [line for line in report.splitlines() if line.strip() and not line.startswith("#")]
    samples = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--sort", "comm",
                              "-g", "none"], capture_output=True, text=True).stdout
    by_comm = [line for line in samples.splitlines() if line.strip() and not line.startswith("#")]
    with out.open("w") as f:
        f.write(f"# {title}\n\n{execs} execs. Samples by process name:\n\n")
        f.write("\n".join(by_comm[:12]) + "\n\n")
        f.write(f"Top frames ({sort_keys}, >= 1.5 %):\n\n")
        f.write("\n".join(lines[:60]) + "\n")


SCHEDULER_FRAMES = ("__schedule", "schedule", "__traceiter_sched_switch", "preempt_schedule",
                    "schedule_hrtimeout_range", "schedule_timeout", "io_schedule", "__cond_resched",
                    "do_nanosleep", "futex_wait_queue", "__x64_sys", "do_syscall_64",
                    "entry_SYSCALL_64", "syscall", "__GI___", "__libc_", "[unknown]")


def fold_switches(data: Path, out: Path, title: str, execs: int):
    """Every time a thread left the CPU, by process name and the first
    frames above the scheduler (where it waited), per exec."""
    script = subprocess.run(["perf", "script", "-i", str(data), "-F", "comm,ip,sym"],
                            capture_output=True, text=True).stdout
    counts = collections.Counter()
    comm_counts = collections.Counter()
    for block in script.split("\n\n"):
        lines = [line.strip() for line in block.strip().splitlines()]
        if not lines:
            continue
        comm = lines[0].split()[0]
        frames = []
        for line in lines[1:]:
            parts = line.split(None, 1)
            sym = parts[1] if len(parts) > 1 else parts[0]
            sym = sym.split("+0x")[0]
            if sym.startswith(SCHEDULER_FRAMES) or sym in frames:
                continue
            frames.append(sym)
            if len(frames) == 4:
                break
        counts[(comm, " < ".join(frames))] += 1
        comm_counts[comm] += 1
    with out.open("w") as f:
        f.write(f"# {title}\n\n{execs} execs; context switches (a thread leaving the CPU: "
                f"it waits, or is preempted) per exec, by process name:\n\n")
        for comm, n in comm_counts.most_common(12):
            f.write(f"{n / execs:8.2f}  {comm}\n")
        f.write("\nWhere they waited (the first frames above the scheduler), per exec:\n\n")
        for (comm, stack), n in counts.most_common(40):
            if n / execs < 0.02:
                break
            f.write(f"{n / execs:8.2f}  {comm:16} {stack}\n")


def profile_http(args, work: Path):
    data_dir = work / "data"
    results = {}
    for kind, events in [("on-cpu", ["-e", "cpu-clock", "-F", "4999"]),
                         ("off-cpu", ["-e", "sched:sched_switch"])]:
        shutil.rmtree(data_dir, ignore_errors=True)
        perf_data = work / f"http-{kind}.data"
        server, port = start_server(data_dir, ["perf", "record", "-g", *events, "-o", str(perf_data), "--"])
        try:
            threads = exec_loop(port, args.execs, args.clients)
            for t in threads:
                t.join()
        finally:
            os.killpg(server.pid, signal.SIGINT)
            server.wait(timeout=120)
        title = f"warm exec of `true` over HTTP, {args.clients} client(s): {kind}"
        target = args.out / f"http-{args.clients}-{kind}.txt"
        if kind == "on-cpu":
            summarize(perf_data, target, title, args.execs, "comm,dso,sym")
        else:
            fold_switches(perf_data, target, title, args.execs)
        results[kind] = perf_data
    # System calls per exec: perf trace's summary of the server and its
    # children over the same loop.
    shutil.rmtree(data_dir, ignore_errors=True)
    server, port = start_server(data_dir, [])
    try:
        threads = exec_loop(port, args.execs // 4, 1)
        trace = subprocess.Popen(["perf", "trace", "-s", "-p", str(server.pid), "-o",
                                  str(work / "trace.txt")], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        time.sleep(1)
        for t in threads:
            t.join()
        trace.send_signal(signal.SIGINT)
        trace.wait(timeout=60)
    finally:
        server.terminate()
        server.wait(timeout=120)
    text = (work / "trace.txt").read_text() if (work / "trace.txt").exists() else ""
    (args.out / "http-1-syscalls.txt").write_text(
        f"# system calls of the server's threads, {args.execs // 4} warm execs of `true` "
        f"(perf trace -s -p SERVER; the first second's execs are missed)\n\n{text}")


def make_idle(port, count, threads=8):
    """`count` live idle containers (started by a first command); their ids."""
    made = []

    def some(n):
        client = Client(port)
        for _ in range(n):
            container = client.call("POST", "/v1/containers", {"name": "idle"})["id"]
            client.call("POST", f"/v1/containers/{container}/exec", {"commands": ["true"]})
            made.append(container)
    workers = [threading.Thread(target=some, args=(count // threads,)) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return made


def profile_live(args, work: Path):
    """The whole machine's CPU (perf record -a) while 32 clients exec
    `true`, first on an empty server, then with --live idle containers
    beside them: what grows with the containers live."""
    for live in (0, args.live):
        data_dir = work / f"live-{live}"
        server, port = start_server(data_dir, [], idle_suspend_after_secs=10**9,
                                    max_running_containers_per_project=10**6,
                                    max_memory_per_project="1000t", max_execs_per_project=1024)
        try:
            idle = make_idle(port, live)
            done = threading.Event()
            counted = [0]

            def client_loop():
                client = Client(port)
                own = client.call("POST", "/v1/containers", {"name": "busy"})["id"]
                while not done.is_set():
                    # Spread: each exec in a container picked at random
                    # among all live (as bench/scale.py's load does).
                    container = random.choice(idle) if args.spread and idle else own
                    client.call("POST", f"/v1/containers/{container}/exec", {"commands": ["true"]})
                    counted[0] += 1
            loops = [threading.Thread(target=client_loop) for _ in range(32)]
            for t in loops:
                t.start()
            time.sleep(2)
            perf_data = work / f"live-{live}.data"
            before = counted[0]
            subprocess.run(["perf", "record", "-a", "-g", "-e", "cpu-clock", "-F", "999", "-o", str(perf_data),
                            "--", "sleep", str(args.seconds)], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            execs = counted[0] - before
            if args.off_cpu:
                # Where every thread of the machine waited, over a shorter
                # window (each switch is a sample).
                switches_data = work / f"live-{live}-off.data"
                before_off = counted[0]
                subprocess.run(["perf", "record", "-a", "-g", "-e", "sched:sched_switch", "-o",
                                str(switches_data), "--", "sleep", str(min(args.seconds, 5.0))],
                               check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                off_execs = counted[0] - before_off
            done.set()
            for t in loops:
                t.join()
        finally:
            # A clean stop: a killed server leaves its containers' cgroups
            # and loop devices on the host, which the next run would pay for.
            os.killpg(server.pid, signal.SIGINT)
            try:
                server.wait(timeout=300)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait(timeout=60)
            subprocess.run(["rm", "-rf", str(data_dir)], check=False)
        spread = ("each exec in a random one of them" if args.spread and live
                  else "each client in a container of its own")
        title = (f"the whole machine while 32 clients exec `true` over HTTP, {live} other containers live, "
                 f"{spread}: {execs / args.seconds:.0f} exec/s")
        name = f"live-{live}{'-spread' if args.spread else ''}-on-cpu.txt"
        summarize(perf_data, args.out / name, title, execs, "comm,dso,sym")
        if args.off_cpu:
            fold_switches(switches_data, args.out / name.replace("on-cpu", "off-cpu"),
                          title.rsplit(":", 1)[0] + f": off-cpu, the whole machine, {off_execs} execs",
                          max(off_execs, 1))


def profile_cli(args, work: Path):
    data_dir = work / "cli-data"
    subprocess.run([str(BINARY), "--data-dir", str(data_dir), "exec", "--", "true"], check=True)
    for kind, events in [("on-cpu", ["-e", "cpu-clock", "-F", "4999"]),
                         ("off-cpu", ["-e", "sched:sched_switch"])]:
        perf_data = work / f"cli-{kind}.data"
        script = f"for i in $(seq {args.runs}); do {BINARY} --data-dir {data_dir} exec -- true; done"
        subprocess.run(["perf", "record", "-g", *events, "-o", str(perf_data), "--", "bash", "-c", script],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        title = f"one-shot `shellgate exec -- true`, back to back: {kind}"
        if kind == "on-cpu":
            summarize(perf_data, args.out / f"cli-{kind}.txt", title, args.runs, "comm,dso,sym")
        else:
            fold_switches(perf_data, args.out / f"cli-{kind}.txt", title, args.runs)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--execs", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=1)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "profiles")
    parser.add_argument("--only", choices=["http", "cli", "live"])
    parser.add_argument("--live", type=int, default=3000,
                        help="idle containers beside the clients' in the `live` profile")
    parser.add_argument("--seconds", type=float, default=10.0, help="the `live` profile's length")
    parser.add_argument("--off-cpu", action="store_true",
                        help="the `live` profile also records where every thread waited")
    parser.add_argument("--spread", action="store_true",
                        help="in the `live` profile, each exec in a random live container")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="shellgate-profile-"))
    os.chmod(work, 0o755)
    try:
        if args.only in (None, "http"):
            profile_http(args, work)
        if args.only in (None, "cli"):
            profile_cli(args, work)
        if args.only in (None, "live"):
            profile_live(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
