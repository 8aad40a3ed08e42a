#!/usr/bin/env python3
"""Two shellgate builds side by side in one run, against a scripted upstream
model: which of two revisions is faster at what a request does end to end.

Three measurements, each a request on a kept-alive connection to a release
build's `shellgate serve`:
- a warm HTTP exec of `true` in a container (`POST /v1/containers/{id}/exec`);
- a Responses request with one hosted shell call on a `container_reference`
  (two model turns and one command);
- a Responses request answered without a tool (one model turn).

The builds alternate within each round (A then B, then B then A), so a
machine's load falls on both alike. Prints each build's median, the spread
(10th to 90th percentile) and the ratio of the medians B/A, and the
server's own CPU time per request (the sum over its threads' run time,
/proc/PID/task/*/schedstat), which a loaded machine disturbs far less than
the wall time.

    python3 bench/versus.py A_BINARY B_BINARY [--rounds N]

e.g. a revision before a change (built in a worktree of its own) against
this tree's: `python3 bench/versus.py /tmp/base/target/release/shellgate
target/release/shellgate --rounds 500`. Needs root (the engine's
namespaces), as `shellgate serve` does.

The upstream (tests/python/scripted_upstream.py) writes a response's
headers and its body in two sends. With Nagle's algorithm on, the body waits
for the ACK of the headers, which the receiving kernel may delay by up to
40 ms: whether it does depends on the connection's recent timing, so a turn
costs ~1 ms or ~40 ms by chance and the medians measure the kernel's ACK
timer, not shellgate. The upstream here sends with TCP_NODELAY, as real
HTTP servers do.
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
import scripted_upstream  # noqa: E402
from scripted_upstream import ScriptedUpstream  # noqa: E402

KEY = "sk-bench-project-a"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A `shellgate serve` of one binary, with a data directory of its own."""

    def __init__(self, binary, upstream_url):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="shellgate-versus-")
        env = dict(os.environ, SHELLGATE_API_KEYS=KEY, SHELLGATE_LOG="warn",
                   SHELLGATE_BUILD_DEFAULT_IMAGE="false", SHELLGATE_UPSTREAM_URL=upstream_url,
                   SHELLGATE_GUARDRAIL_INPUT_DEFAULT="off", SHELLGATE_WARM_CONTAINERS="4")
        self.child = subprocess.Popen([binary, "--data-dir", self.dir, "serve", "--listen",
                                       f"127.0.0.1:{self.port}"], env=env,
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                c.request("GET", "/healthz")
                if c.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.05)
        else:
            raise SystemExit(f"{binary} did not start")
        time.sleep(3)  # the warm containers and pools fill
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)

    def post(self, path, body):
        self.conn.request("POST", path, json.dumps(body), {
            "Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
        r = self.conn.getresponse()
        data = r.read()
        assert r.status == 200, (r.status, data[:500])
        return json.loads(data)

    def stop(self):
        self.child.send_signal(signal.SIGTERM)
        self.child.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def cpu_ms(pid):
    """The run time of a process's threads so far, in ms."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:  # the thread ended
            pass
    return total / 1e6


def timed(server, f):
    """(wall ms, server CPU ms) of `f`."""
    cpu = cpu_ms(server.child.pid)
    start = time.perf_counter()
    f()
    wall = (time.perf_counter() - start) * 1000
    return wall, cpu_ms(server.child.pid) - cpu


def spread(samples):
    deciles = statistics.quantiles(samples, n=10)
    return f"{deciles[0]:.3f}–{deciles[-1]:.3f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", metavar="A_BINARY")
    parser.add_argument("b", metavar="B_BINARY")
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()

    scripted_upstream.Handler.disable_nagle_algorithm = True
    upstream = ScriptedUpstream()
    servers = {"A": Server(args.a, upstream.url), "B": Server(args.b, upstream.url)}
    work = {}
    for name, s in servers.items():
        cid = s.post("/v1/containers", {"name": "bench"})["id"]
        exec_body = {"commands": ["true"]}
        call = {"model": "scripted", "input": "Execute: true",
                "tools": [{"type": "shell", "environment": {"type": "container_reference", "container_id": cid}}]}
        answer = {"model": "scripted", "input": "hi"}
        work[name] = (s, cid, exec_body, call, answer)
        for _ in range(10):  # warm-up: connections, caches
            s.post(f"/v1/containers/{cid}/exec", exec_body)
            s.post("/v1/responses", call)
    kinds = ["exec", "response with a shell call", "response, one model turn"]
    wall = {n: {kind: [] for kind in kinds} for n in servers}
    cpu = {n: {kind: [] for kind in kinds} for n in servers}
    for i in range(args.rounds):
        for n in (["A", "B"] if i % 2 == 0 else ["B", "A"]):
            s, cid, exec_body, call, answer = work[n]
            for kind, path, body in [("exec", f"/v1/containers/{cid}/exec", exec_body),
                                     ("response with a shell call", "/v1/responses", call),
                                     ("response, one model turn", "/v1/responses", answer)]:
                w, c = timed(s, lambda: s.post(path, body))
                wall[n][kind].append(w)
                cpu[n][kind].append(c)
        upstream.server.requests.clear()
    print(f"A = {args.a}\nB = {args.b}\n{args.rounds} rounds, alternating; median (p10–p90) in ms")
    for title, samples in [("wall time", wall), ("server CPU", cpu)]:
        print(title)
        for kind in kinds:
            a, b = samples["A"][kind], samples["B"][kind]
            ma, mb = statistics.median(a), statistics.median(b)
            print(f"  {kind:28s} A {ma:7.3f} ({spread(a):>15s})  B {mb:7.3f} ({spread(b):>15s})  B/A {mb / ma:.3f}")
    for s in servers.values():
        s.stop()
    upstream.stop()


if __name__ == "__main__":
    main()
