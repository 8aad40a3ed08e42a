"""A real `shellgate serve` for the provider to drive (`SHELLGATE_BIN`, else the
repository's debug build), started with the repository's own test harness
(tests/python/conftest.py's `Server`), imported by path."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

import httpx
import pytest

PACKAGE = Path(__file__).resolve().parents[1]
REPOSITORY = PACKAGE.parents[1]
sys.path.insert(0, str(PACKAGE / "src"))  # the source tree, installed or not


def _load_harness():
    harness = REPOSITORY / "tests" / "python" / "conftest.py"
    if not harness.exists():
        return None
    spec = importlib.util.spec_from_file_location("shellgate_test_harness", harness)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


harness = _load_harness()
KEY = "sk-test-project-a"
OTHER_KEY = "sk-test-project-b"


def _binary() -> Path:
    return Path(os.environ.get("SHELLGATE_BIN", REPOSITORY / "target" / "debug" / "shellgate"))


class RunningServer:
    """A started server: its root URL and the routes it serves."""

    def __init__(self, server) -> None:
        self.server = server
        self.root = f"http://{server.host}:{server.port}"

    def http(self, key: str = KEY) -> httpx.Client:
        return httpx.Client(
            base_url=self.root, headers={"Authorization": f"Bearer {key}"}, timeout=60
        )

    def serves(self, method: str, path: str) -> bool:
        """Whether the server has the route (an unknown one is 404 `unknown_url`;
        a known one about a container that does not exist is another 404)."""
        with self.http() as http:
            response = http.request(method, path)
        if response.status_code != 404:
            return True
        return response.json().get("error", {}).get("code") != "unknown_url"

    def require(self, *routes: tuple[str, str]) -> None:
        missing = [f"{m} {p}" for m, p in routes if not self.serves(m, p)]
        if missing:
            pytest.skip("this shellgate does not serve " + ", ".join(missing))


PROCESSES = ("GET", "/v1/containers/cntr_none/processes")
FILES = ("GET", "/v1/containers/cntr_none/fs/stat?path=/mnt/data")
ARCHIVES = ("GET", "/v1/containers/cntr_none/fs/archive?path=/mnt/data")
PORTS = ("GET", "/v1/containers/cntr_none/ports/8000/")


def _start(**settings) -> tuple[RunningServer, Path]:
    if harness is None:
        pytest.skip("the repository's test harness (tests/python/conftest.py) is not here")
    if not _binary().exists():
        pytest.skip(f"no shellgate binary at {_binary()} (set SHELLGATE_BIN)")
    harness.BINARY = _binary()
    data_dir = Path(tempfile.mkdtemp(prefix="shellgate-agents-"))
    server = harness.Server(data_dir, **settings).start()
    return RunningServer(server), data_dir


@pytest.fixture(scope="session")
def shellgate():
    running, data_dir = _start()
    yield running
    running.server.stop()
    shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def sleepy_shellgate():
    """A server of its own whose idle containers suspend within seconds."""
    running, data_dir = _start(idle_suspend_after_secs=1, sweep_interval_secs=1)
    yield running
    running.server.stop()
    shutil.rmtree(data_dir, ignore_errors=True)


def wait_until(condition, timeout: float) -> bool:
    if harness is not None:
        return harness.wait_until(condition, timeout)
    raise RuntimeError("no harness")
