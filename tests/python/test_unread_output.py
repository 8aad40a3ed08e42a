"""Output nobody reads, against a real `shellgate serve` (or a cluster):
streams of a busy process's output whose clients never read (server-sent
events, the process WebSocket, E2B's `process.Process/Connect`) hold a
small bounded share of the server's memory, are bounded in number per
process and per project (429 in OpenAI's envelope, `resource_exhausted` in
E2B's), and give their memory back to the kernel once they close; and a
process, or a streamed exec, whose output nobody reads costs the server
next to no CPU, while a reader that comes later still gets its output.

The non-reading clients are raw sockets with a small receive buffer and an
Ethernet-sized segment (as a client across a network has: on loopback the
segment is 64 KiB, and the server's kernel takes megabytes per socket
before the server itself holds anything)."""

import base64
import json
import os
import socket
import struct
import threading
import time
from urllib.parse import urlsplit

import pytest
import requests
from e2b import Sandbox

from conftest import CLUSTER_MODE, E2B_KEY_B, KEY_A, e2b_environment, processes_matching, wait_until

# It measures the server's memory and CPU: alone, with no other test's load.
pytestmark = pytest.mark.serial

TICKS = os.sysconf("SC_CLK_TCK")
# Non-reading streams of each kind (the E2B process gets twice as many).
STREAMS = 200
# What one stream nobody reads may hold of the server's memory, at most
# (measured: ~100 KiB for server-sent events and E2B, ~40 KiB for a
# WebSocket: one page of output and the connection's write buffer).
STREAM_BOUND_KIB = 192
# The servers a stream passes through, each holding its own page and
# connection buffers: a cluster's replica and node, or the one box.
SERVERS_A_STREAM_CROSSES = 2 if CLUSTER_MODE else 1


def api(server, key=KEY_A):
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {key}"
    session.base = server.base_url
    return session


def rss_kib(server) -> int:
    """The server's resident memory (a cluster's: every replica and node)."""
    total = 0
    for pid in server.pids:
        with open(f"/proc/{pid}/status") as f:
            total += int(next(line for line in f if line.startswith("VmRSS:")).split()[1])
    return total


def cpu_seconds(server) -> float:
    """The server's CPU time so far, user and system (every process of it)."""
    total = 0
    for pid in server.pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / TICKS


def cpu_share(server, seconds: float) -> float:
    """The server's CPU time over the next `seconds`, as a share of one core."""
    cpu, wall = cpu_seconds(server), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(server) - cpu) / (time.monotonic() - wall)


def settled_rss_kib(server, timeout: float = 60) -> int:
    """The server's RSS once it stopped moving (within 1 MiB over 3 s)."""
    samples = []

    def settled():
        samples.append(rss_kib(server))
        return len(samples) >= 7 and max(samples[-7:]) - min(samples[-7:]) < 1024

    wait_until(settled, timeout, interval=0.5)
    return samples[-1]


def written_bytes(needle: str) -> int:
    """Bytes the sandboxed processes whose command line holds `needle` have
    written so far (their `wchar`, as the host sees them)."""
    total = 0
    for pid in processes_matching(needle):
        try:
            with open(f"/proc/{pid}/io") as f:
                total += int(next(line for line in f if line.startswith("wchar:")).split()[1])
        except (OSError, StopIteration):
            pass
    return total


def raw_request(host: str, port: int, head: str, body: bytes = b"") -> socket.socket:
    """A connection that sent its request and will not read its answer."""
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1400)
    client.connect((host, port))
    client.sendall(head.encode() + body)
    return client


def status_line(client: socket.socket) -> str:
    """The answer's status line: the client reads that much and no more."""
    client.settimeout(30)
    line = b""
    while not line.endswith(b"\r\n"):
        byte = client.recv(1)
        if not byte:
            break
        line += byte
    return line.decode(errors="replace").strip()


def whole_answer(client: socket.socket) -> bytes:
    """A refusal's whole answer, head and body (it is small: a JSON error,
    or a Connect stream of one end envelope)."""
    client.settimeout(30)
    answer = b""
    while True:
        head, _, body = answer.partition(b"\r\n\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in head.lower().split(b"\r\n")
                       if line.startswith(b"content-length:")), None)
        if length is not None and len(body) >= length:
            break
        if body.endswith(b"\r\n0\r\n\r\n"):
            break
        data = client.recv(65536)
        if not data:
            break
        answer += data
    client.close()
    return answer


def sse(server, cid, pid) -> socket.socket:
    host, port = server.host, server.port
    return raw_request(host, port, (
        f"GET /v1/containers/{cid}/processes/{pid}/output?stream=true HTTP/1.1\r\n"
        f"Host: {host}:{port}\r\nAuthorization: Bearer {KEY_A}\r\n\r\n"))


def websocket(server, cid, pid) -> socket.socket:
    host, port = server.host, server.port
    key = base64.b64encode(os.urandom(16)).decode()
    return raw_request(host, port, (
        f"GET /v1/containers/{cid}/processes/{pid}/ws HTTP/1.1\r\n"
        f"Host: {host}:{port}\r\nAuthorization: Bearer {KEY_A}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"))


def connect_call(sandbox: Sandbox, pid: int) -> socket.socket:
    address = urlsplit(sandbox.envd_api_url)
    message = json.dumps({"process": {"pid": pid}}).encode()
    body = struct.pack(">BI", 0, len(message)) + message
    headers = "".join(f"{k}: {v}\r\n" for k, v in sandbox.connection_config.sandbox_headers.items())
    return raw_request(address.hostname, address.port, (
        f"POST /process.Process/Connect HTTP/1.1\r\nHost: {address.netloc}\r\n{headers}"
        f"Content-Type: application/connect+json\r\nContent-Length: {len(body)}\r\n\r\n"), body)


def quiet(server) -> bool:
    """The server is doing next to nothing (under a tenth of a core)."""
    return cpu_share(server, 1.0) < 0.1


def test_streams_nobody_reads_hold_little_are_bounded_and_give_their_memory_back(fresh_server, monkeypatch):
    server = fresh_server(max_streams_per_process=2 * STREAMS, max_streams_per_project=2 * STREAMS)
    s = api(server)
    created = s.post(s.base + "/containers", json={"name": "unread-streams"}, timeout=60)
    assert created.status_code == 200, created.text
    cid = created.json()["id"]
    start = s.post(s.base + f"/containers/{cid}/processes",
                   json={"command": "exec yes unread-streams", "timeout_ms": 300_000}, timeout=60)
    assert start.status_code == 201, start.text
    process = start.json()["id"]
    # An E2B sandbox of another project, with its own busy process (the
    # SDK's client leaves; the process goes on, as envd's do).
    for name, value in e2b_environment(server, E2B_KEY_B).items():
        monkeypatch.setenv(name, value)
    sandbox = Sandbox.create()
    clients = []
    try:
        handle = sandbox.commands.run("exec yes unread-streams-e2b", background=True, timeout=300)
        handle.disconnect()
        before = settled_rss_kib(server)

        # Every kind of stream, opened and answered, then never read.
        for _ in range(STREAMS):
            clients.append(sse(server, cid, process))
            clients.append(websocket(server, cid, process))
            clients.append(connect_call(sandbox, handle.pid))
            clients.append(connect_call(sandbox, handle.pid))
        statuses = {}
        for client in clients:
            line = status_line(client)
            statuses[line] = statuses.get(line, 0) + 1
        assert statuses == {"HTTP/1.1 200 OK": 3 * STREAMS, "HTTP/1.1 101 Switching Protocols": STREAMS}, statuses
        # Past the bounds: the process's, then the project's, refused in
        # each dialect's envelope, nothing started. Asked at once: on a
        # loaded machine settling takes minutes, and the processes' time
        # limits run meanwhile.
        refused = whole_answer(sse(server, cid, process))
        assert refused.startswith(b"HTTP/1.1 429"), refused[:200]
        assert b'"code":"too_many_process_streams"' in refused, refused
        refused = whole_answer(websocket(server, cid, process))
        assert refused.startswith(b"HTTP/1.1 429"), refused[:200]
        other = s.post(s.base + f"/containers/{cid}/processes",
                       json={"command": "sleep 300", "timeout_ms": 300_000}, timeout=60).json()["id"]
        refused = whole_answer(sse(server, cid, other))
        assert refused.startswith(b"HTTP/1.1 429"), refused[:200]
        assert b'"code":"too_many_output_streams"' in refused, refused
        assert b"max_streams_per_project" in refused
        refused = whole_answer(connect_call(sandbox, handle.pid))
        assert refused.startswith(b"HTTP/1.1 200") and b'"resource_exhausted"' in refused, refused

        # Each stream took what it could hold and stopped; the processes
        # wait at their buffers' ends, and the server goes quiet.
        wait_until(lambda: quiet(server), 120)
        held = settled_rss_kib(server)
        per_stream = (held - before) / len(clients)
        assert per_stream < STREAM_BOUND_KIB * SERVERS_A_STREAM_CROSSES, (
            f"{len(clients)} streams nobody reads took {(held - before) // 1024} MiB "
            f"({per_stream:.0f} KiB each)")

        # Closed: their memory goes back to the kernel, and new streams
        # are let in again.
        for client in clients:
            client.close()
        clients = []
        assert wait_until(lambda: rss_kib(server) - before < 16 * 1024, 60), (
            f"{(rss_kib(server) - before) // 1024} MiB still held after the streams closed "
            f"(they held {(held - before) // 1024} MiB)")

        # A process started now: the earlier ones may have met their time
        # limits on a loaded machine.
        fresh = s.post(s.base + f"/containers/{cid}/processes",
                       json={"command": "sleep 120", "timeout_ms": 120_000}, timeout=60).json()["id"]

        def admitted():
            client = sse(server, cid, fresh)
            try:
                return status_line(client) == "HTTP/1.1 200 OK"
            finally:
                client.close()

        assert wait_until(admitted, 30)
    finally:
        for client in clients:
            client.close()
        sandbox.kill()


def test_output_nobody_reads_costs_the_server_no_cpu_and_a_later_reader_still_gets_it(server):
    s = api(server)
    created = s.post(s.base + "/containers", json={"name": "unread-cpu"}, timeout=60)
    assert created.status_code == 200, created.text
    cid = created.json()["id"]
    try:
        start = s.post(s.base + f"/containers/{cid}/processes",
                       json={"command": "exec yes unread-process", "timeout_ms": 120_000}, timeout=60)
        assert start.status_code == 201, start.text
        process = start.json()["id"]
        # Nobody reads: once its buffer (1 MiB) is full, the process waits
        # on its pipe instead of the server reading for nobody.
        assert wait_until(lambda: written_bytes("unread-process") > 1 << 20, 30)
        unread = cpu_share(server, 3)

        # A reader comes: it gets the output, and the process runs on at
        # the reader's pace; now the server works (the same measurement).
        got = {"bytes": 0, "first": b""}
        stop = threading.Event()

        def read():
            with s.get(s.base + f"/containers/{cid}/processes/{process}/output",
                       params={"stream": "true"}, stream=True, timeout=60) as response:
                for line in response.iter_lines(chunk_size=1 << 16):
                    if line.startswith(b"data:"):
                        data = json.loads(line[5:])
                        if "data" in data:
                            chunk = base64.b64decode(data["data"])
                            got["first"] = got["first"] or chunk
                            got["bytes"] += len(chunk)
                    if stop.is_set():
                        return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert wait_until(lambda: got["bytes"] > 1 << 20, 30)
        reading = cpu_share(server, 3)
        stop.set()
        assert b"unread-process\n" in got["first"], got["first"][:100]
        assert unread < reading / 5 and unread < 0.05, (unread, reading)
        s.delete(s.base + f"/containers/{cid}/processes/{process}", timeout=60)

        # A streamed exec whose client never reads: past the first 16 MiB
        # (read at full speed), its output waits in its pipe too.
        body = json.dumps({"commands": ["yes unread-exec"], "timeout_ms": 60_000, "stream": True}).encode()
        client = raw_request(server.host, server.port, (
            f"POST /v1/containers/{cid}/exec HTTP/1.1\r\nHost: {server.host}:{server.port}\r\n"
            f"Authorization: Bearer {KEY_A}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"), body)
        try:
            assert status_line(client) == "HTTP/1.1 200 OK"
            assert wait_until(lambda: written_bytes("unread-exec") > 16 << 20, 30)
            streamed = cpu_share(server, 3)
            assert streamed < reading / 5 and streamed < 0.05, (streamed, reading)
        finally:
            client.close()
    finally:
        # Deleting the container ends the exec too.
        s.delete(s.base + f"/containers/{cid}", timeout=60)
    assert wait_until(lambda: not processes_matching("unread-exec"), 30)
