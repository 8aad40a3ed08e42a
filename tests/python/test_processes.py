"""Processes over HTTP against a real `shellgate serve`: stdin
through a pipe and a terminal, JSON pages, server-sent events and the
WebSocket, reattaching by offset, signals, resizes, kills of every
descendant, the live limit, and the hostile cases: a terminal nobody reads,
stdin to a process that ended, a client that leaves mid-stream, another
project's ids."""

import base64
import json
import os

import requests
import pytest
from websockets.sync.client import connect

from conftest import KEY_A, KEY_B, processes_matching, wait_until


def api(server, key=KEY_A):
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {key}"
    session.base = server.base_url
    return session


def post(session, path, **kwargs):
    return session.post(session.base + path, timeout=60, **kwargs)


def get(session, path, **kwargs):
    return session.get(session.base + path, timeout=60, **kwargs)


def container(session, name="procs"):
    response = post(session, "/containers", json={"name": name})
    assert response.status_code == 200, response.text
    return response.json()["id"]


def start(session, cid, **body):
    response = post(session, f"/containers/{cid}/processes", json=body)
    assert response.status_code == 201, response.text
    process = response.json()
    assert process["object"] == "container.process" and process["id"].startswith("proc_")
    return process


def read_until(session, cid, pid, needle, after=0):
    """Reads JSON pages (each waiting for new output) until `needle`
    shows in one stream (stdout and stderr are two pipes: their bytes
    interleave in no fixed order); returns what was read and the next
    offset."""
    streams = {}
    for _ in range(200):
        page = get(session, f"/containers/{cid}/processes/{pid}/output",
                   params={"after": after, "wait_ms": 10000}).json()
        for chunk in page["chunks"]:
            assert chunk["offset"] == after, (chunk, after)
            data = base64.b64decode(chunk["data"])
            streams[chunk["stream"]] = streams.get(chunk["stream"], b"") + data
            after += len(data)
        assert page["next_offset"] == after
        for text in streams.values():
            if needle.encode() in text:
                return text.decode(errors="replace"), after
        assert page["process"]["status"] == "running", (streams, page["process"])
    raise AssertionError(f"{needle!r} never came: {streams!r}")


def sse_events(response):
    """(event, data) pairs of a server-sent event stream, as they come."""
    name, data = None, []
    for line in response.iter_lines(decode_unicode=True):
        if line is None:
            continue
        if line == "":
            if name or data:
                yield name, json.loads("\n".join(data)) if data else None
            name, data = None, []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())


def socket_url(server, cid, pid, **params):
    query = "&".join(f"{k}={v}" for k, v in params.items())
    base = server.base_url.replace("http://", "ws://")
    return f"{base}/containers/{cid}/processes/{pid}/ws" + (f"?{query}" if query else "")


def socket_read_until(socket, needle):
    text = b""
    while needle.encode() not in text:
        frame = socket.recv(timeout=30)
        assert isinstance(frame, bytes), frame
        text += frame
    return text.decode(errors="replace")


def test_a_repl_through_a_pipe_and_a_terminal_over_json_and_the_websocket(server):
    s = api(server)
    cid = container(s)
    # Through a pipe: not a terminal; the JSON pages carry its stdout.
    piped = start(s, cid, command="python3 -iqu", stdin=True, env={"GREETING": "hi"})
    assert piped["status"] == "running" and piped["stdin"] is True and piped["pty"] is None
    answer = post(s, f"/containers/{cid}/processes/{piped['id']}/stdin",
                  data=b"import os, sys; print(6*7, sys.stdin.isatty(), os.environ['GREETING'])\n")
    assert answer.status_code == 204, answer.text
    text, _ = read_until(s, cid, piped["id"], "42 False hi")
    # eof ends the REPL: exit 0, and stdin is refused from then on (409).
    post(s, f"/containers/{cid}/processes/{piped['id']}/stdin", params={"eof": "true"})
    assert wait_until(lambda: get(s, f"/containers/{cid}/processes/{piped['id']}").json()["status"] == "exited", 30)
    ended = get(s, f"/containers/{cid}/processes/{piped['id']}").json()
    assert ended["exit_code"] == 0 and ended["outcome"] == {"type": "exit", "exit_code": 0}
    late = post(s, f"/containers/{cid}/processes/{piped['id']}/stdin", data=b"print(1)\n")
    assert late.status_code == 409 and late.json()["error"]["code"] == "process_exited", late.text
    # SIGINT through the signal route interrupts the running statement;
    # the REPL goes on.
    sleeper = start(s, cid, command="python3 -iqu", stdin=True)
    post(s, f"/containers/{cid}/processes/{sleeper['id']}/stdin",
         data=b"import time; print('sleep' + 'ing'); time.sleep(600)\n")
    _, offset = read_until(s, cid, sleeper["id"], "sleeping")
    signalled = post(s, f"/containers/{cid}/processes/{sleeper['id']}/signal", json={"signal": "SIGINT"})
    assert signalled.status_code == 204, signalled.text
    _, offset = read_until(s, cid, sleeper["id"], "KeyboardInterrupt", after=offset)
    post(s, f"/containers/{cid}/processes/{sleeper['id']}/stdin", data=b"print('after', 1 + 1)\n")
    read_until(s, cid, sleeper["id"], "after 2", after=offset)

    # A terminal over the WebSocket, the key in the query as a browser sends it.
    tty = start(s, cid, command="python3 -iq", pty={"cols": 100, "rows": 30})
    assert tty["pty"] == {"cols": 100, "rows": 30, "term": "xterm-256color"}
    with connect(socket_url(server, cid, tty["id"], access_token=KEY_A)) as socket:
        socket.send(b"import os, sys; print('tty', sys.stdin.isatty(), os.environ['TERM'], os.get_terminal_size())\n")
        # Each step waits for the prompt, as a user does: input typed ahead
        # of readline (which switches the terminal's modes, and reads the
        # window size and writes it back, undoing a resize in between) is
        # the terminal's own race, not the server's.
        text = socket_read_until(socket, "lines=30)\r\n>>> ")
        assert "tty True xterm-256color" in text and "columns=100" in text, text
        socket.send(json.dumps({"type": "resize", "cols": 132, "rows": 43}))
        socket.send(b"import subprocess; subprocess.run(['stty', 'size'])\n")
        socket_read_until(socket, "43 132")
        socket.send(b"import time; print('nap' + 'ping'); time.sleep(600)\n")
        socket_read_until(socket, "napping")
        socket.send(json.dumps({"type": "signal", "signal": "SIGINT"}))
        # Back at the prompt (readline reading again), ^D is the end.
        socket_read_until(socket, "KeyboardInterrupt\r\n>>> ")
        socket.send(json.dumps({"type": "eof"}))
        frames = []
        while True:
            frame = socket.recv(timeout=30)
            if isinstance(frame, str):
                message = json.loads(frame)
                break
            frames.append(frame)
        assert message["type"] == "exit", message
        # (A REPL whose last statement was interrupted exits 128 + SIGINT.)
        assert message["process"]["status"] == "exited", message
    retrieved = get(s, f"/containers/{cid}/processes/{tty['id']}").json()
    assert retrieved["pty"] == {"cols": 132, "rows": 43, "term": "xterm-256color"}
    # Reattached from an offset (here after the process ended): the kept
    # output from there, then the exit.
    half = retrieved["output_bytes"] // 2
    with connect(socket_url(server, cid, tty["id"], after=half, access_token=KEY_A)) as socket:
        replayed = b""
        while isinstance(frame := socket.recv(timeout=30), bytes):
            replayed += frame
        assert json.loads(frame)["type"] == "exit"
    assert len(replayed) == retrieved["output_bytes"] - half
    assert replayed == b"".join(frames)[-len(replayed):] or b"KeyboardInterrupt" in replayed
    # Without a key, or with a wrong one, no socket.
    with pytest.raises(Exception):
        with connect(socket_url(server, cid, tty["id"])):
            pass
    listed = get(s, f"/containers/{cid}/processes").json()
    assert listed["object"] == "list"
    assert {p["id"] for p in listed["data"]} == {piped["id"], sleeper["id"], tty["id"]}


def test_sse_follows_a_process_and_a_reader_reattaches_at_its_offset(server):
    s = api(server)
    cid = container(s)
    repl = start(s, cid, command="python3 -iqu", stdin=True)
    path = f"/containers/{cid}/processes/{repl['id']}"
    post(s, path + "/stdin", data=b"print('first')\n")
    seen = b""
    last = 0
    with get(s, path + "/output", params={"stream": "true"}, stream=True) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for name, data in sse_events(response):
            assert name == "output", (name, data)
            assert data["offset"] == last and data["stream"] in ("stdout", "stderr")
            seen += base64.b64decode(data["data"])
            last = data["offset"] + len(base64.b64decode(data["data"]))
            if b"first" in seen:
                break
    # Disconnected: the process goes on; what it writes meanwhile is kept.
    post(s, path + "/stdin", data=b"print('second')\n", params={"eof": "true"})
    events = []
    with get(s, path + "/output", params={"stream": "true", "after": last}, stream=True) as response:
        for name, data in sse_events(response):
            events.append((name, data))
            if name == "exit":
                break
    outputs = [data for name, data in events if name == "output"]
    assert outputs[0]["offset"] == last
    rest = b"".join(base64.b64decode(d["data"]) for d in outputs)
    assert b"second" in rest and b"first" not in rest
    name, process = events[-1]
    assert name == "exit" and process["status"] == "exited" and process["output_bytes"] == last + len(rest)


@pytest.mark.serial
def test_a_terminal_nobody_reads_stays_bounded_and_dies_at_its_timeout(server):
    s = api(server)
    cid = container(s)

    def rss_kib():
        """Each server process's resident memory (a cluster's replicas and nodes)."""
        sizes = []
        for pid in server.pids:
            with open(f"/proc/{pid}/status") as f:
                sizes.append(int(next(l for l in f if l.startswith("VmRSS:")).split()[1]))
        return sizes

    before = rss_kib()
    flood = start(s, cid, command="exec yes procs-flood", pty={}, timeout_ms=4000)
    path = f"/containers/{cid}/processes/{flood['id']}"
    assert wait_until(lambda: get(s, path).json()["status"] != "running", 60)
    ended = get(s, path).json()
    assert ended["status"] == "timeout" and ended["outcome"] == {"type": "timeout"}
    # More than the buffer went through it (once the buffer is full of
    # output nobody read, the rest is read at the unread rate: see
    # test_unread_output.py); only the newest 1 MiB is kept.
    assert ended["output_bytes"] > (1 << 20) + (1 << 16), ended
    page = get(s, path + "/output", params={"after": 0, "max_bytes": 16}).json()
    assert page["dropped_bytes"] == ended["output_bytes"] - (1 << 20)
    assert page["chunks"][0]["offset"] == page["dropped_bytes"]
    # The server's memory did not follow the output (one buffer, not a queue).
    after = rss_kib()
    assert all(a - b < 64 * 1024 for a, b in zip(after, before)), (before, after)
    assert wait_until(lambda: not processes_matching("procs-flood"), 30)


def test_a_client_that_leaves_mid_stream_changes_nothing(server):
    s = api(server)
    cid = container(s)
    ticker = start(s, cid, command="while true; do echo tick-tock; sleep 0.05; done", timeout_ms=2500)
    path = f"/containers/{cid}/processes/{ticker['id']}"
    with get(s, path + "/output", params={"stream": "true"}, stream=True) as response:
        for name, data in sse_events(response):
            assert name == "output"
            break
    with connect(socket_url(server, cid, ticker["id"]), additional_headers={"Authorization": f"Bearer {KEY_A}"}) as socket:
        assert b"tick-tock" in socket.recv(timeout=30)
    # Both readers left; the process is killed at its timeout all the same,
    # billed, and written to the command audit.
    assert wait_until(lambda: get(s, path).json()["status"] == "timeout", 60)
    audit = get(s, f"/containers/{cid}/commands").json()["data"]
    row = next(r for r in audit if "tick-tock" in r["command"])
    assert row["outcome"]["type"] == "timeout", row
    assert row["duration_ms"] >= 2500
    usage = get(s, "/usage").json()
    seconds = next(c["sandbox_seconds"] for c in usage["containers"] if c["container_id"] == cid)
    assert seconds >= 2.5


def test_kill_ends_every_descendant_and_refusals_name_their_reason(server):
    s = api(server)
    cid = container(s)
    tree = start(s, cid, command="setsid sleep 1001 & sleep 1002 & echo started; wait")
    read_until(s, cid, tree["id"], "started")
    assert wait_until(lambda: processes_matching("sleep 1001"), 30)
    killed = s.delete(s.base + f"/containers/{cid}/processes/{tree['id']}", timeout=60)
    assert killed.status_code == 200 and killed.json()["status"] == "killed", killed.text
    assert wait_until(lambda: not processes_matching("sleep 1001") and not processes_matching("sleep 1002"), 30)
    # No stdin: a write is the caller's mistake; no terminal: a resize too.
    quiet = start(s, cid, command="sleep 1003")
    refused = post(s, f"/containers/{cid}/processes/{quiet['id']}/stdin", data=b"x")
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "stdin", refused.text
    refused = post(s, f"/containers/{cid}/processes/{quiet['id']}/resize", json={"cols": 10, "rows": 10})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "pty", refused.text
    refused = post(s, f"/containers/{cid}/processes/{quiet['id']}/signal", json={"signal": "SIGBOGUS"})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "signal", refused.text
    for body, param in [({"command": "x", "timeout_ms": 0}, "timeout_ms"),
                        ({"command": "x", "pty": {"cols": 0}}, "cols"),
                        ({"command": "x", "env": {"A B": "1"}}, "env"),
                        ({"command": "x", "cwd": "/no/such"}, "cwd")]:
        refused = post(s, f"/containers/{cid}/processes", json=body)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == param, (body, refused.text)
    # SIGKILL through the signal route is a kill too.
    post(s, f"/containers/{cid}/processes/{quiet['id']}/signal", json={"signal": 9})
    assert wait_until(lambda: get(s, f"/containers/{cid}/processes/{quiet['id']}").json()["status"] == "killed", 30)

    # Another project sees none of it: its container, its process ids.
    other = api(server, KEY_B)
    assert get(other, f"/containers/{cid}/processes/{tree['id']}").status_code == 404
    assert get(other, f"/containers/{cid}/processes").status_code == 404
    assert post(other, f"/containers/{cid}/processes", json={"command": "id"}).status_code == 404
    own = container(other, "other-project")
    missing = get(other, f"/containers/{own}/processes/{tree['id']}")
    assert missing.status_code == 404 and "process" in missing.json()["error"]["message"], missing.text
    with pytest.raises(Exception):
        with connect(socket_url(server, cid, tree["id"], access_token=KEY_B)):
            pass


def test_the_65th_live_process_of_a_container_is_refused(fresh_server):
    # The project's exec quota is raised past the container's own limit,
    # which is what this test is about (each live process takes a slot).
    server = fresh_server(max_execs_per_project="100")
    s = api(server)
    cid = container(s)
    started = [start(s, cid, command="exec sleep 1000")["id"] for _ in range(64)]
    refused = post(s, f"/containers/{cid}/processes", json={"command": "sleep 1000"})
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "too_many_processes", refused.text
    s.delete(s.base + f"/containers/{cid}/processes/{started[0]}", timeout=60)
    start(s, cid, command="true")
