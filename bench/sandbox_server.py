"""A `shellgate serve` for the interactive-sandbox benchmarks
(bench/interactive.py, bench/files.py, bench/archive.py): the release
binary (or SHELLGATE_BIN) on a free port and a data directory of its own,
one API key, no default-image build, its JSON API called with urllib."""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BINARY = Path(os.environ.get("SHELLGATE_BIN", ROOT / "target" / "release" / "shellgate"))
KEY = "sk-bench-project-a"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """The server, healthy once constructed; `data_dir` (else a temporary
    directory, removed by `stop`) holds its data."""

    def __init__(self, data_dir: Path = None, **settings: str):
        """`settings` are further server settings (`SHELLGATE_<NAME>`)."""
        self.own_dir = data_dir is None
        self.dir = Path(tempfile.mkdtemp(prefix="sg-bench-")) if data_dir is None else data_dir
        self.port = free_port()
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "SHELLGATE_API_KEYS": f"{KEY}:bench",
            "SHELLGATE_BUILD_DEFAULT_IMAGE": "false",
            "SHELLGATE_LOG": "warn",
        }
        env.update({f"SHELLGATE_{name.upper()}": str(value) for name, value in settings.items()})
        self.process = subprocess.Popen(
            [str(BINARY), "--data-dir", str(self.dir), "serve", "--listen", f"127.0.0.1:{self.port}"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        self.base = f"http://127.0.0.1:{self.port}/v1"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=1):
                    return
            except OSError:
                if self.process.poll() is not None:
                    break
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("server did not start")

    def call(self, method, path, body=None, timeout=300):
        """`method` `/v1{path}` with a JSON body; its JSON answer (None if empty)."""
        request = urllib.request.Request(
            self.base + path, method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read() or b"null")

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=60)
        if self.own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
