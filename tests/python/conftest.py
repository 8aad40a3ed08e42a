"""Runs a real `shellgate serve` for the official `openai` SDK to talk to.

With `SHELLGATE_TEST_CLUSTER=1` the session's `server` is a cluster
instead (cluster.py): three nodes in network namespaces of their
own, two API replicas, Postgres and S3, with the same keys and projects,
behind a facade (`ClusterServer`) whose clients and URLs alternate between
the two replicas, so the suites run through both. Tests that need one box
(its data directory, its process) are marked `single_box("why")` and
skipped in that mode. A `fresh_server` is a cluster of its own with the
test's settings (on the process's one Postgres and S3 server, which every
cluster it starts shares: a database and a bucket each); since a process
has one cluster up at a time (in a slot of the machine, cluster.py), the
tests using it run in a pytest run of their own (`-m fresh_server`; marked
so at collection), and the session's cluster in another (`-m "not
fresh_server"`).
"""

import contextlib
import itertools
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
API_KEYS = f"{KEY_A}:alpha,{KEY_B}:beta,{E2B_KEY_A}:alpha,{E2B_KEY_B}:beta"
# The suites against a cluster rather than one server (see above).
CLUSTER_MODE = os.environ.get("SHELLGATE_TEST_CLUSTER") == "1"


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "single_box(reason): the test needs one shellgate server (its data directory, its "
        "process, its internals); skipped with SHELLGATE_TEST_CLUSTER=1, saying `reason`",
    )
    config.addinivalue_line(
        "markers",
        "serial: the test measures the server's memory or CPU, or one tenant's share beside "
        "another's: it runs alone, after the suites run in parallel (scripts/test runs "
        "`-n 2 -m \"not serial\"`, then `-m serial`), so another test's load is not in its numbers",
    )
    config.addinivalue_line(
        "markers",
        "fresh_server: the test starts a server (a cluster) of its own; with "
        "SHELLGATE_TEST_CLUSTER=1 such tests run apart from the session's cluster",
    )


# The files whose tests take longest (a whole image build; the previous
# release's build, which the cluster lane's upgrade test then finds cached;
# clusters started, killed and stalled; a minute's expiry), collected first:
# on parallel workers (`--dist loadfile` hands out files in the order
# collected) they start at once instead of being the run's tail.
LONGEST_FIRST = ["test_images.py", "test_upgrade.py", "test_cluster.py", "test_lifecycle.py"]


def pytest_collection_modifyitems(config, items):
    def rank(item):
        name = item.path.name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    # Stable: each file's tests keep their order, and stay together.
    items.sort(key=rank)
    if not CLUSTER_MODE:
        return
    for item in items:
        if "fresh_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.fresh_server)
        marker = item.get_closest_marker("single_box")
        if marker is not None:
            reason = marker.args[0] if marker.args else marker.kwargs.get("reason", "")
            item.add_marker(pytest.mark.skip(reason=f"single box only: {reason}"))


def tiny_rootfs(rootfs: Path, applets) -> None:
    """A root file system of static busybox with `applets`, and
    util-linux's setpriv with the libraries it links (the image builder runs
    a step of another `USER` with it; busybox's setpriv cannot change ids)."""
    (rootfs / "bin").mkdir(parents=True)
    (rootfs / "etc").mkdir(exist_ok=True)
    (rootfs / "bin" / "busybox").write_bytes(Path("/bin/busybox").read_bytes())
    os.chmod(rootfs / "bin" / "busybox", 0o755)
    for applet in applets:
        os.symlink("busybox", rootfs / "bin" / applet)
    linked = subprocess.run(["ldd", "/usr/bin/setpriv"], capture_output=True, text=True, check=True)
    paths = ["/usr/bin/setpriv"] + [word for line in linked.stdout.splitlines()
                                    for word in line.split() if word.startswith("/")]
    for path in paths:
        target = rootfs / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(Path(path).read_bytes())
        os.chmod(target, 0o755)


def import_busybox_image(data_dir: Path, name: str, applets, files=None) -> None:
    """`tiny_rootfs` with `applets` (and `files`: path in the image → text,
    made executable) imported as image `name` into `data_dir`, before its
    server starts."""
    with tempfile.TemporaryDirectory() as tmp:
        rootfs = Path(tmp) / "rootfs"
        tiny_rootfs(rootfs, applets)
        for path, text in (files or {}).items():
            target = rootfs / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            os.chmod(target, 0o755)
        tarball = Path(tmp) / "image.tar"
        subprocess.run(["tar", "-cf", str(tarball), "-C", str(rootfs), "."], check=True)
        imported = subprocess.run(
            [str(BINARY), "--data-dir", str(data_dir), "image", "import", name, str(tarball)],
            capture_output=True, text=True,
        )
        assert imported.returncode == 0, imported.stderr


def busybox_image_server(upstream, prefix: str, image: str, applets, files=None):
    """A server of its own (data directory `prefix…`) whose default image is
    `import_busybox_image`'s `image`: yields it, then stops it and removes
    its data. For a module fixture: `yield from busybox_image_server(…)`."""
    data_dir = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(data_dir, 0o755)
    import_busybox_image(data_dir, image, applets, files)
    server = Server(data_dir, upstream_url=upstream.url, default_image=image,
                    warm_containers="0").start()
    yield server
    server.stop()
    subprocess.run(["rm", "-rf", str(data_dir)], check=False)


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


def raw_request(host: str, port: int, method: str, target: str, headers: dict = None,
                host_header: bool = True, body: bytes = b"") -> tuple:
    """One HTTP/1.1 request written byte for byte, its target exactly as
    given (HTTP clients resolve `..` and `%2e%2e` before sending, curl
    unless `--path-as-is`), on a connection of its own; returns the
    answer's status (0 when the server closed without one) and its whole
    text, head and body."""
    lines = [f"{method} {target} HTTP/1.1"]
    if host_header:
        lines.append(f"Host: {host}:{port}")
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    lines += ["Connection: close", f"Content-Length: {len(body)}", "", ""]
    with socket.create_connection((host, port), timeout=60) as connection:
        connection.sendall("\r\n".join(lines).encode("utf-8") + body)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    status_line = answer.split(b"\r\n", 1)[0].split()
    status = int(status_line[1]) if len(status_line) > 1 and status_line[1].isdigit() else 0
    return status, answer.decode("utf-8", errors="replace")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A shellgate server process on its own data directory and port."""

    def __init__(self, data_dir: Path, netns: str = None, host: str = "127.0.0.1",
                 preexec_fn=None, binary: Path = None, **settings: str):
        """With `netns`, the server runs in that (test-made) network
        namespace and listens on `host`, an address of it; `preexec_fn`
        runs in its process before the exec (what it inherits); `binary`
        is another build than the one under test (an older release's)."""
        self.binary = binary or BINARY
        self.data_dir = data_dir
        self.preexec_fn = preexec_fn
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
            "SHELLGATE_API_KEYS": API_KEYS,
            "SHELLGATE_LOG": "info",
            "SHELLGATE_WARM_CONTAINERS": "1",
            # Tests that want the first-start build turn it back on.
            "SHELLGATE_BUILD_DEFAULT_IMAGE": "false",
        }
        env.update({f"SHELLGATE_{k.upper()}": str(v) for k, v in self.settings.items()})
        log = open(self.log, "ab")
        enter = ["nsenter", f"--net=/run/netns/{self.netns}"] if self.netns else []
        self.process = subprocess.Popen(
            enter + [str(self.binary), "--data-dir", str(self.data_dir), "serve", "--listen", f"{self.host}:{self.port}"],
            env=env,
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            preexec_fn=self.preexec_fn,
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

    @property
    def pids(self) -> list:
        """The server's processes (one; a cluster's are its replicas and
        nodes): what a test measures the memory of."""
        return [self.process.pid]

    def store_bytes(self) -> bytes:
        """Everything its store holds, as bytes (the SQLite files)."""
        return b"".join(file.read_bytes() for file in sorted(self.data_dir.glob("shellgate.db*")))

    def run_cli(self, *args: str) -> subprocess.CompletedProcess:
        """`shellgate ARGS` on this server's data directory (its store)."""
        # With the server's settings: its store may be elsewhere (`database_url`).
        env = {**os.environ, **{f"SHELLGATE_{k.upper()}": str(v) for k, v in self.settings.items()}}
        return subprocess.run([str(self.binary), "--data-dir", str(self.data_dir), *args],
                              capture_output=True, text=True, check=True, env=env)

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


@contextlib.contextmanager
def server_inheriting(preexec_fn, prefix: str):
    """A server of a test's own on a fresh data directory (traversable by
    every user, as a deployment's is), `preexec_fn` run in its process
    before the exec: what it inherits."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        os.chmod(tmp, 0o755)
        server = Server(Path(tmp), preexec_fn=preexec_fn).start()
        try:
            yield server
        finally:
            server.stop()


class ClusterLogs:
    """Every server's log of a cluster, read as one (what a test's failure
    message quotes as `server.log.read_text()`)."""

    def __init__(self, cluster):
        self.cluster = cluster

    def read_text(self) -> str:
        parts = []
        for server in self.cluster.replicas + list(self.cluster.nodes.values()):
            try:
                parts.append(f"--- {server.name} ---\n{server.log.read_text(errors='replace')}")
            except OSError:
                pass
        return "\n".join(parts)


class ClusterServer:
    """The session's cluster as the suites see a `Server`. Each test has a
    replica of its own, the next in turn (`next_test`): `port` and
    `base_url` name it for the whole test (URLs a server builds from the
    request's Host stay comparable). `client()` alternates: a test's first
    client is its replica's, the next one the other replica's, and so on,
    so what one makes another reads (the `client` fixture is the first).
    What exists on one box only (a data directory, a process) is not here:
    the tests using it are single_box."""

    host = "127.0.0.1"

    def __init__(self, cluster):
        self.cluster = cluster
        self.tests = itertools.count()
        self.current = 0
        self.clients = itertools.count()
        self.log = ClusterLogs(cluster)

    def next_test(self) -> None:
        self.current = next(self.tests) % len(self.cluster.replicas)
        self.clients = itertools.count()

    @property
    def replica(self):
        return self.cluster.replicas[self.current]

    @property
    def port(self) -> int:
        return self.replica.port

    @property
    def base_url(self) -> str:
        return self.replica.base_url

    @property
    def pids(self) -> list:
        """Every replica's and node's process (what a request crosses)."""
        return [server.pid for server in self.cluster.replicas + list(self.cluster.nodes.values())]

    def store_bytes(self) -> bytes:
        """Everything its store holds, as bytes (a dump of its Postgres
        database's rows)."""
        from cluster import POSTGRES_BIN

        postgres = self.cluster.postgres
        return subprocess.run(
            [str(POSTGRES_BIN / "pg_dump"), "--data-only", "-h", "127.0.0.1", "-p", str(postgres.port),
             "-U", "postgres", self.cluster.database],
            capture_output=True, check=True).stdout

    def run_cli(self, *args: str) -> subprocess.CompletedProcess:
        """`shellgate ARGS` on the cluster's store (its Postgres and S3,
        as a replica has them)."""
        replica = self.cluster.replicas[0]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
               **{f"SHELLGATE_{k.upper()}": str(v) for k, v in self.cluster.common_settings().items()}}
        return subprocess.run([str(BINARY), "--data-dir", str(replica.data_dir), *args],
                              capture_output=True, text=True, check=True, env=env)

    def s3(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.cluster.objects.endpoint, region_name="us-east-1",
                            aws_access_key_id="test", aws_secret_access_key="test")

    def object_names(self, prefix: str) -> set:
        """The names (last path segment) of the objects stored under
        `prefix` in the cluster's S3 bucket (where a single box keeps
        `<data dir>/<prefix>`)."""
        names = set()
        pages = self.s3().get_paginator("list_objects_v2").paginate(Bucket=self.cluster.bucket,
                                                                    Prefix=f"objects/{prefix}")
        for page in pages:
            names |= {entry["Key"].rsplit("/", 1)[-1] for entry in page.get("Contents", [])}
        return names

    def remove_object(self, key: str) -> None:
        """Removes a stored object (`files/<id>`: a single box's
        `<data dir>/files/<id>`) from the cluster's S3 bucket."""
        self.s3().head_object(Bucket=self.cluster.bucket, Key=f"objects/{key}")  # there, or this raises
        self.s3().delete_object(Bucket=self.cluster.bucket, Key=f"objects/{key}")

    def client(self, key: str = KEY_A) -> openai.OpenAI:
        replicas = self.cluster.replicas
        replica = replicas[(self.current + next(self.clients)) % len(replicas)]
        return openai.OpenAI(base_url=replica.base_url, api_key=key, max_retries=0, timeout=120)

    def stop(self) -> None:
        """Every node and replica stopped (with `start`, a restart of the
        whole cluster, as an upgrade makes)."""
        self.cluster.stop_servers()

    def start(self) -> "ClusterServer":
        self.cluster.start_servers()
        return self

    def __getattr__(self, name):
        if name in ("data_dir", "process", "kill9", "settings"):
            raise AttributeError(f"a cluster has no single server's `{name}`: mark the test "
                                 f"@pytest.mark.single_box(...)")
        raise AttributeError(name)


def start_cluster(upstream, binary: Path = None, **settings):
    """The cluster of SHELLGATE_TEST_CLUSTER=1: the replicas take the
    suites' keys or the test's `api_keys` (cluster.py lists the nodes with
    their first admin key, adding its own when they have none); the other
    `settings` go to every server, the nodes running the model loops. Its
    servers run `binary` (an older release's) instead of the build under
    test if given."""
    import cluster as harness

    why_not = harness.can_run()
    if why_not:
        raise RuntimeError(f"SHELLGATE_TEST_CLUSTER=1, but {why_not}")

    api_keys = settings.pop("api_keys", API_KEYS)
    global _cluster_services
    if _cluster_services is None:
        _cluster_services = harness.Services().start()
    return harness.Cluster({
        "upstream_url": upstream.url,
        "warm_containers": "1",
        # A node is lost after a silence far beyond a loaded machine's
        # stalls: the suites check the API, not the failure detector.
        "node_lost_after_secs": "30",
        **settings,
    }, api_keys=api_keys, services=_cluster_services, binary=binary or BINARY).start()


# The run's Postgres, S3 server and bridge, which every cluster it starts
# shares (each with a database and a bucket of its own): started with the
# first cluster, stopped when the run ends.
_cluster_services = None


def pytest_sessionfinish(session, exitstatus):
    global _cluster_services
    if _cluster_services is not None:
        _cluster_services.stop()
        _cluster_services = None


@pytest.fixture(scope="session")
def upstream():
    """A scripted Chat Completions model server (a fixture, not a product
    part). In cluster mode the nodes, each in its network namespace, call
    it: it listens on every address and is named by the bridge's."""
    from scripted_upstream import ScriptedUpstream

    if CLUSTER_MODE:
        from cluster import GATEWAY

        scripted = ScriptedUpstream(host="0.0.0.0", advertise=GATEWAY)
    else:
        scripted = ScriptedUpstream()
    yield scripted
    scripted.stop()


# The session server's wait for the scripted upstream's answer to begin:
# what a model that never answers (`scripted-slow`) costs a test, and long
# enough for the scripted upstream (a thread of the test's own process) to
# answer on a loaded machine running the suites in parallel.
UPSTREAM_TIMEOUT_SECS = 10


@pytest.fixture(scope="session")
def server(upstream):
    if CLUSTER_MODE:
        global _session_cluster_up
        cluster = start_cluster(upstream, upstream_timeout_secs=UPSTREAM_TIMEOUT_SECS)
        _session_cluster_up = True
        try:
            yield ClusterServer(cluster)
        finally:
            _session_cluster_up = False
            cluster.stop()
        return
    with tempfile.TemporaryDirectory(prefix="shellgate-py-") as tmp:
        server = Server(Path(tmp), upstream_url=upstream.url, upstream_timeout_secs=UPSTREAM_TIMEOUT_SECS).start()
        yield server
        server.stop()


@pytest.fixture(autouse=True)
def _cluster_replica_turn(request):
    """In cluster mode, each test that uses the session's server gets the
    next replica (see ClusterServer); nothing otherwise."""
    if CLUSTER_MODE and "server" in request.fixturenames:
        request.getfixturevalue("server").next_test()


@pytest.fixture
def fresh_server(upstream):
    """A server of its own with short lifecycle settings, for lifecycle tests."""
    if CLUSTER_MODE:
        yield from _fresh_clusters(upstream)
        return
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


_session_cluster_up = False


def _own_cluster(upstream, **settings) -> "ClusterServer":
    """A cluster of a test's own (three nodes, two replicas, a database
    and a bucket of its own on the run's Postgres and S3), seen as a
    ClusterServer whose first test turn
    is replica 1's; skipped beside the session's cluster."""
    if _session_cluster_up:
        pytest.skip("a cluster of its own cannot start beside the session's cluster (one "
                    "cluster at a time): run the fresh_server tests apart (-m fresh_server)")
    server = ClusterServer(start_cluster(upstream, **settings))
    server.next_test()
    return server


def _fresh_clusters(upstream):
    """fresh_server in cluster mode: each call a cluster of its own."""
    servers = []

    def make(**settings):
        if servers:
            # One at a time: the one before is done with.
            servers[-1].cluster.stop()
        servers.append(_own_cluster(upstream, **settings))
        return servers[-1]

    try:
        yield make
    finally:
        for server in servers:
            server.cluster.stop()


# The cached debian-12 build (pandas, matplotlib, numpy, Node, Java; shared
# with the Rust image test): built once per machine, a no-op when up to
# date, rebuilt when its recipe changed.
IMAGE_CACHE = Path(os.environ.get("SHELLGATE_TEST_IMAGE_CACHE", "/var/cache/shellgate-test/images-data"))


@contextlib.contextmanager
def debian_server(upstream, **settings):
    """A server of a module's own (`own_server`) whose default image is
    debian-12, as a deployment running its users' code would have: the
    cached build, built first if it is not."""
    built = subprocess.run([str(BINARY), "--data-dir", str(IMAGE_CACHE), "image", "build", "debian-12"],
                           capture_output=True, text=True, timeout=3600)
    assert built.returncode == 0, built.stderr[-3000:]
    with own_server(upstream, upstream_url=upstream.url, default_image="debian-12",
                    images_dir=str(IMAGE_CACHE / "sandbox" / "images"), warm_containers="0",
                    **settings) as server:
        yield server


@contextlib.contextmanager
def own_server(upstream, **settings):
    """A server of a module's own, with its settings: one box, or in
    cluster mode a cluster of its own (the module is then marked
    `fresh_server`, to run apart from the session's cluster)."""
    if CLUSTER_MODE:
        server = _own_cluster(upstream, **settings)
        try:
            yield server
        finally:
            server.cluster.stop()
        return
    data_dir = Path(tempfile.mkdtemp(prefix="shellgate-py-own-"))
    # Traversable by every user, as a deployment's is (images kept outside).
    os.chmod(data_dir, 0o755)
    server = Server(data_dir, **settings).start()
    try:
        yield server
    finally:
        server.stop()
        subprocess.run(["rm", "-rf", str(data_dir)], check=False)


@pytest.fixture
def client(server):
    return server.client(KEY_A)


def e2b_environment(server: "Server", key: str = E2B_KEY_A) -> dict:
    """What E2B's SDKs need to use `server`: its root as the API, as the
    one in-sandbox URL (sandboxes are named by header) and as the volume
    content API, and a key."""
    root = f"http://{server.host}:{server.port}"
    return {"E2B_API_URL": root, "E2B_SANDBOX_URL": root, "E2B_VOLUME_API_URL": root, "E2B_API_KEY": key}


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
