#!/usr/bin/env python3
"""Output streams nobody reads (BENCHMARKS.md, "Output nobody
reads"): the server's resident memory while N clients hold a busy
process's output stream open without reading a byte, and after they
closed, for each kind of stream:

  * sse: `GET /v1/containers/{id}/processes/{pid}/output?stream=true`;
  * ws: the process's WebSocket (`.../processes/{pid}/ws`);
  * e2b: E2B's `process.Process/Connect` (a Connect-RPC server stream) on a
    process started with `process.Process/Start`.

The busy process is `yes` (as much output as the pipe takes). Each client
is a raw socket with a small receive buffer that sends its request and
never reads; the server's RSS (`/proc/<pid>/status` VmRSS) is sampled
until it settles while they are open, then again once they closed (a
server of its own for each kind, so that one kind does not reuse what the
allocator kept of another's). It also reports the server's CPU time
(utime + stime) while the streams opened and sat, and what the server
answers one stream past its bound (429, or E2B's `resource_exhausted`: the
bounds on streams per process and per project).

  * cpu: the server's CPU share over 5 s with a `yes` process nobody reads,
    the same while `curl` reads its SSE stream, and with a streamed exec of
    `yes` whose client never reads.

Usage: bench/streams.py [--streams 500] [--kinds sse,ws,e2b,cpu]. Needs root
(the server makes sandboxes); stdlib only. The server is the release binary
(or SHELLGATE_BIN), with its stream bounds raised to let N streams in.
"""

import argparse
import base64
import json
import os
import re
import resource
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from sandbox_server import KEY, Server  # noqa: E402 (bench/sandbox_server.py, beside this script)

TICKS = os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS:")).split()[1])


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def settled_rss(pid: int, limit: float = 60.0) -> int:
    """The RSS once it stopped moving (within 1 MiB over 3 s), or after `limit` s."""
    samples = []
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        samples.append(rss_kib(pid))
        if len(samples) >= 7 and max(samples[-7:]) - min(samples[-7:]) < 1024:
            break
        time.sleep(0.5)
    return samples[-1]


def raw_request(port: int, head: str, body: bytes = b"") -> socket.socket:
    """A connection that sent `head` and `body` and will never read."""
    client = socket.socket()
    # Small, so what piles up is the server's, not the client kernel's.
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    # An Ethernet-sized segment, as a client across a network has (on
    # loopback the segment is 64 KiB, and the server's kernel then takes
    # megabytes per socket before the server itself holds anything).
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1400)
    client.connect(("127.0.0.1", port))
    client.sendall(head.encode() + body)
    return client


def refusal_of(client: socket.socket) -> str:
    """The status line of a refused request, and the error code its body
    names (a Connect stream's error comes in its end envelope, under 200)."""
    client.settimeout(10)
    answer = client.recv(65536)
    status = answer.split(b"\r\n", 1)[0].decode(errors="replace")
    code = re.search(rb'"code"\s*:\s*"([a-z_]+)"', answer)
    return f"{status} {code.group(1).decode()}" if code else status


def sse_request(port, container, process):
    return raw_request(port, (
        f"GET /v1/containers/{container}/processes/{process}/output?stream=true HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{port}\r\nAuthorization: Bearer {KEY}\r\n\r\n"))


def ws_request(port, container, process):
    key = base64.b64encode(os.urandom(16)).decode()
    return raw_request(port, (
        f"GET /v1/containers/{container}/processes/{process}/ws HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{port}\r\nAuthorization: Bearer {KEY}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"))


def envelope(message: dict) -> bytes:
    data = json.dumps(message).encode()
    return struct.pack(">BI", 0, len(data)) + data


def connect_request(port, sandbox, method, message):
    body = envelope(message)
    return raw_request(port, (
        f"POST /process.Process/{method} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"E2b-Sandbox-Id: {sandbox['sandboxID']}\r\nX-Access-Token: {sandbox['envdAccessToken']}\r\n"
        f"Content-Type: application/connect+json\r\nContent-Length: {len(body)}\r\n\r\n"), body)


def e2b_sandbox(server):
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.port}/sandboxes", method="POST",
        data=json.dumps({"templateID": "base", "timeout": 3600}).encode(),
        headers={"X-API-Key": KEY, "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def e2b_busy_process(server, sandbox) -> int:
    """Starts `yes` through `process.Process/Start`; its pid (the start
    event, the stream's first message). The client then leaves: the
    process goes on, as envd's do."""
    client = connect_request(server.port, sandbox, "Start",
                             {"process": {"cmd": "/bin/bash", "args": ["-c", "exec yes e2b-streams-bench"]}})
    client.settimeout(30)
    data = b""
    while b"\r\n\r\n" not in data or b'"pid"' not in data:
        data += client.recv(65536)
    client.close()
    return int(re.search(rb'"pid":\s*(\d+)', data).group(1))


def measure(server, kind: str, streams: int) -> dict:
    pid = server.process.pid
    if kind == "e2b":
        sandbox = e2b_sandbox(server)
        process = e2b_busy_process(server, sandbox)
        open_one = lambda: connect_request(server.port, sandbox, "Connect", {"process": {"pid": process}})
    else:
        container = server.call("POST", "/containers", {"name": f"streams-{kind}"})["id"]
        process = server.call("POST", f"/containers/{container}/processes",
                              {"command": "exec yes streams-bench", "timeout_ms": 300_000})["id"]
        request = sse_request if kind == "sse" else ws_request
        open_one = lambda: request(server.port, container, process)
    before = settled_rss(pid)
    cpu_before, started = cpu_seconds(pid), time.monotonic()
    clients = [open_one() for _ in range(streams)]
    held = settled_rss(pid)
    cpu = (cpu_seconds(pid) - cpu_before) / (time.monotonic() - started)
    # One more past the bound is refused.
    refused = refusal_of(open_one())
    for client in clients:
        client.close()
    closed_at = time.monotonic()
    after = settled_rss(pid)
    after_10s = None
    while time.monotonic() < closed_at + 10:
        time.sleep(0.5)
    after_10s = rss_kib(pid)
    return {
        "kind": kind,
        "streams": streams,
        "rss_before_mib": round(before / 1024, 1),
        "rss_open_mib": round(held / 1024, 1),
        "per_stream_kib": round((held - before) / streams, 1),
        "rss_closed_mib": round(after / 1024, 1),
        "rss_closed_10s_mib": round(after_10s / 1024, 1),
        "cpu_share_while_open": round(cpu, 3),
        "one_more": refused,
    }


def cpu_share(pid: int, seconds: float) -> float:
    """The server's CPU time over the next `seconds`, as a share of a core."""
    cpu, wall = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - cpu) / (time.monotonic() - wall)


def written(needle: str) -> int:
    """What the sandboxed processes whose command line holds `needle` wrote
    (their `wchar`, as the host sees them)."""
    total = 0
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if needle.encode() not in f.read():
                    continue
            with open(f"/proc/{entry}/io") as f:
                total += int(next(line for line in f if line.startswith("wchar:")).split()[1])
        except (OSError, StopIteration, ValueError):
            pass
    return total


def wait_written(needle: str, at_least: int, limit: float = 60.0):
    deadline = time.monotonic() + limit
    while written(needle) < at_least and time.monotonic() < deadline:
        time.sleep(0.1)


def measure_cpu(server, seconds: float = 5.0) -> dict:
    """The server's CPU share while output goes unread: a `yes` process
    nobody reads (once its first MiB is buffered), the same with a reader
    (`curl` of its SSE stream, to /dev/null), and a streamed exec of `yes`
    whose client never reads (past its first 16 MiB)."""
    pid = server.process.pid
    container = server.call("POST", "/containers", {"name": "streams-cpu"})["id"]
    process = server.call("POST", f"/containers/{container}/processes",
                          {"command": "exec yes streams-cpu-process", "timeout_ms": 120_000})["id"]
    wait_written("streams-cpu-process", 2 << 20)
    unread = cpu_share(pid, seconds)
    reader = subprocess.Popen(
        ["curl", "-sN", "-H", f"Authorization: Bearer {KEY}",
         f"{server.base}/containers/{container}/processes/{process}/output?stream=true"],
        stdout=subprocess.DEVNULL)
    try:
        time.sleep(1)
        reading = cpu_share(pid, seconds)
    finally:
        reader.kill()
        reader.wait()
    server.call("DELETE", f"/containers/{container}/processes/{process}")
    body = json.dumps({"commands": ["yes streams-cpu-exec"], "timeout_ms": 120_000, "stream": True}).encode()
    client = raw_request(server.port, (
        f"POST /v1/containers/{container}/exec HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"), body)
    wait_written("streams-cpu-exec", 20 << 20)
    streamed = cpu_share(pid, seconds)
    client.close()
    server.call("DELETE", f"/containers/{container}")
    return {
        "kind": "cpu",
        "process_unread": round(unread, 3),
        "process_read": round(reading, 3),
        "streamed_exec_unread": round(streamed, 3),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--kinds", default="sse,ws,e2b,cpu")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * args.streams + 1024)), hard))
    for kind in args.kinds.split(","):
        # A server of its own for each kind: memory one kind freed and the
        # allocator kept would otherwise serve the next.
        server = Server(max_streams_per_process=args.streams, max_streams_per_project=args.streams)
        try:
            result = measure_cpu(server) if kind == "cpu" else measure(server, kind, args.streams)
            print(json.dumps(result), flush=True)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
