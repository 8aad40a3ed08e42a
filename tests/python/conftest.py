"""Runs a real `shellgate serve` for the official `openai` SDK to talk to."""

import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import urllib.error
import urllib.request
import openai
import pytest

ROOT = Path(__file__).resolve().parents[2]
BINARY = Path(os.environ.get("SHELLGATE_BIN", ROOT / "target" / "debug" / "shellgate"))
KEY_A = "sk-test-project-a"
KEY_B = "sk-test-project-b"
# Keys of the shape E2B's older SDKs insist on (`e2b_` + hex, checked
# client-side), for the same two projects.
E2B_KEY_A = "e2b_" + "a1" * 20
E2B_KEY_B = "e2b_" + "b2" * 20


def wait_until(condition, timeout: float, interval: float = 0.05) -> bool:
    """Waits until `condition()` is true, looking every `interval` seconds,
    for at most `timeout` seconds; returns whether it became true. What a
    test waits for (a status, a log line, a process) is a condition, never a
    fixed sleep: the wait is as short as the machine allows, and the timeout
    only bounds a failure."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return bool(condition())


def processes_matching(needle: str) -> list:
    """Host pids (not zombies) whose command line contains `needle`: a
    sandbox's processes are the host's too, so a test sees a command start
    or end without running another in the container."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/stat") as f:
                zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if needle in cmdline and not zombie:
            pids.append(int(entry))
    return pids


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A shellgate server process on its own data directory and port."""

    def __init__(self, data_dir: Path, netns: str = None, host: str = "127.0.0.1", **settings: str):
        """With `netns`, the server runs in that (test-made) network
        namespace and listens on `host`, an address of it."""
        self.data_dir = data_dir
        self.port = free_port()
        self.settings = settings
        self.netns = netns
        self.host = host
        self.process = None
        self.log = data_dir / "server.log"

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> "Server":
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "SHELLGATE_API_KEYS": f"{KEY_A}:alpha,{KEY_B}:beta,{E2B_KEY_A}:alpha,{E2B_KEY_B}:beta",
            "SHELLGATE_LOG": "info",
            "SHELLGATE_WARM_CONTAINERS": "1",
            # Tests that want the first-start build turn it back on.
            "SHELLGATE_BUILD_DEFAULT_IMAGE": "false",
        }
        env.update({f"SHELLGATE_{k.upper()}": str(v) for k, v in self.settings.items()})
        log = open(self.log, "ab")
        enter = ["nsenter", f"--net=/run/netns/{self.netns}"] if self.netns else []
        self.process = subprocess.Popen(
            enter + [str(BINARY), "--data-dir", str(self.data_dir), "serve", "--listen", f"{self.host}:{self.port}"],
            env=env,
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
        )
        def healthy():
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://{self.host}:{self.port}/healthz", timeout=1) as response:
                    return response.status == 200
            except (urllib.error.URLError, OSError):
                return False

        if wait_until(healthy, 30):
            return self
        raise RuntimeError("server did not become healthy")

    def client(self, key: str = KEY_A) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url, api_key=key, max_retries=0, timeout=120)

    def kill9(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill9()


@pytest.fixture(scope="session")
def upstream():
    """A scripted Chat Completions model server (a fixture, not a product part)."""
    from scripted_upstream import ScriptedUpstream

    scripted = ScriptedUpstream()
    yield scripted
    scripted.stop()


@pytest.fixture(scope="session")
def server(upstream):
    with tempfile.TemporaryDirectory(prefix="shellgate-py-") as tmp:
        server = Server(Path(tmp), upstream_url=upstream.url, upstream_timeout_secs=3).start()
        yield server
        server.stop()


@pytest.fixture
def fresh_server(upstream):
    """A server of its own with short lifecycle settings, for lifecycle tests."""
    servers = []

    def make(**settings):
        settings.setdefault("upstream_url", upstream.url)
        tmp = tempfile.mkdtemp(prefix="shellgate-py-life-")
        server = Server(Path(tmp), **settings).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()
        subprocess.run(["rm", "-rf", str(server.data_dir)], check=False)


@pytest.fixture
def client(server):
    return server.client(KEY_A)


def e2b_environment(server: "Server", key: str = E2B_KEY_A) -> dict:
    """What E2B's SDKs need to use `server`: its root as the API and as
    the one in-sandbox URL (sandboxes are named by header), and a key."""
    root = f"http://{server.host}:{server.port}"
    return {"E2B_API_URL": root, "E2B_SANDBOX_URL": root, "E2B_API_KEY": key}


@pytest.fixture
def e2b(server, monkeypatch):
    """E2B's SDKs pointed at the session's server, as project alpha (the
    environment variables a user sets); returns that environment."""
    environment = e2b_environment(server)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("E2B_DEBUG", raising=False)
    return environment


def exec_commands(client: openai.OpenAI, container_id: str, commands, **options):
    """shellgate's direct exec endpoint, through the SDK's raw POST."""
    return client.post(
        f"/containers/{container_id}/exec",
        body={"commands": commands, **options},
        cast_to=object,
    )
