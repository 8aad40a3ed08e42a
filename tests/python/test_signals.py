"""What a server or a one-shot inherited never reaches a sandboxed
program: `shellgate serve` and `shellgate exec` started with SIGINT,
SIGQUIT and SIGHUP ignored and blocked (what a background job of a
non-interactive shell, or `nohup`, gets), and every program they run
starts with every disposition default and nothing blocked. Python then
installs its KeyboardInterrupt handler, and SIGINT sent through the
processes API ends a process."""

import base64
import os
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest
import requests

from conftest import BINARY, KEY_A, server_inheriting, wait_until

pytestmark = pytest.mark.single_box("starts a server of its own with signals ignored")

INHERITED = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP)

# A program's own view of its signals, and whether Python found SIGINT at
# its default.
PROBE = ("grep -E '^Sig(Blk|Ign):' /proc/self/status; "
         "python3 -c 'import signal; print(signal.getsignal(signal.SIGINT))'")
DEFAULTS = "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n<built-in function default_int_handler>\n"


def ignore_and_block():
    """In the child before exec: the three signals ignored and blocked."""
    for number in INHERITED:
        signal.signal(number, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, INHERITED)


def inherited_mask(pid: int, field: str) -> int:
    """Which of the three signals process `pid` has in `field` (SigIgn, SigBlk)."""
    status = Path(f"/proc/{pid}/status").read_text()
    value = int(next(line for line in status.splitlines() if line.startswith(field + ":")).split()[1], 16)
    return value & sum(1 << (number - 1) for number in INHERITED)


ALL_THREE = sum(1 << (number - 1) for number in INHERITED)


@pytest.fixture
def ignoring_server():
    with server_inheriting(ignore_and_block, "shellgate-py-signals-") as server:
        yield server


def test_a_server_started_with_signals_ignored_runs_programs_with_the_defaults(ignoring_server):
    server = ignoring_server
    # The server did inherit them (else this test would prove nothing): all
    # three blocked, SIGQUIT and SIGHUP ignored (SIGINT it catches itself,
    # to shut down; the helpers it started before that still inherited it).
    assert inherited_mask(server.process.pid, "SigBlk") == ALL_THREE
    assert inherited_mask(server.process.pid, "SigIgn") == ALL_THREE & ~(1 << (signal.SIGINT - 1))
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {KEY_A}"
    base = server.base_url
    created = session.post(f"{base}/containers", json={"name": "signals"}, timeout=60)
    assert created.status_code == 200, created.text
    cid = created.json()["id"]

    # A command through exec.
    ran = session.post(f"{base}/containers/{cid}/exec", json={"commands": [PROBE]}, timeout=60)
    assert ran.status_code == 200, ran.text
    assert ran.json()["output"][0]["stdout"] == DEFAULTS

    # A process, on pipes and on a terminal: the same, and SIGINT through
    # the API ends it (a sleep whose SIGINT was ignored would run on).
    for pty in (None, {"cols": 80, "rows": 24}):
        body = {"command": PROBE + "; echo waiting; exec sleep 600", "timeout_ms": 120000}
        if pty:
            body["pty"] = pty
        started = session.post(f"{base}/containers/{cid}/processes", json=body, timeout=60)
        assert started.status_code == 201, started.text
        pid = started.json()["id"]
        output, after = b"", 0
        while b"waiting" not in output:
            page = session.get(f"{base}/containers/{cid}/processes/{pid}/output",
                               params={"after": after, "wait_ms": 10000}, timeout=60).json()
            for chunk in page["chunks"]:
                output += base64.b64decode(chunk["data"])
            after = page["next_offset"]
            assert page["process"]["status"] == "running" or b"waiting" in output, (output, page)
        assert output.decode().replace("\r\n", "\n") == DEFAULTS + "waiting\n"
        signalled = session.post(f"{base}/containers/{cid}/processes/{pid}/signal",
                                 json={"signal": "SIGINT"}, timeout=60)
        assert signalled.status_code == 204, signalled.text
        process_url = f"{base}/containers/{cid}/processes/{pid}"
        assert wait_until(lambda: session.get(process_url, timeout=60).json()["status"] != "running", 60)
        ended = session.get(process_url, timeout=60).json()
        assert ended["outcome"] == {"type": "exit", "exit_code": 128 + signal.SIGINT}, ended


def test_a_one_shot_started_with_signals_ignored_runs_its_command_with_the_defaults():
    with tempfile.TemporaryDirectory(prefix="shellgate-py-signals-exec-") as tmp:
        # Traversable by every user, as a deployment's data directory is.
        os.chmod(tmp, 0o755)
        done = subprocess.run([str(BINARY), "--data-dir", str(Path(tmp) / "data"), "exec", "-c", PROBE],
                              capture_output=True, text=True, timeout=120, preexec_fn=ignore_and_block)
    assert done.returncode == 0, done.stderr
    assert done.stdout == DEFAULTS, done.stdout
