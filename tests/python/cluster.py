"""A shellgate cluster on this one machine, for test_cluster.py.

Three nodes, each in a network namespace of its own (`sg-n1`..`sg-n3`,
10.77.0.11-13, joined by veth pairs to the bridge `sgbr0`, 10.77.0.1/16 in
the root namespace), two stateless API replicas in the root namespace on
free loopback ports, one Postgres (Debian's postgresql-15, a throwaway
cluster in a temp directory, listening on 127.0.0.1 and 10.77.0.1) and one
S3-compatible object store (moto's server, from the venv) on 10.77.0.1, so
a file uploaded through one replica is there for every node.

    cluster = Cluster({"max_running_containers_per_project": 5}).start()
    cluster.client(0, MEMBER_KEYS["alpha"])   # the OpenAI SDK through replica 1
    cluster.nodes["n2"].kill9()               # its whole process group
    cluster.nodes["n3"].stall()               # SIGSTOP: a stall (its sandboxes run on)
    cluster.nodes["n3"].resume()              # SIGCONT
    cluster.stop()

or, in a test module, the fixtures at the end: `cluster` (the shared one)
and `clusters` (one with other settings; `taint()` after breaking it).

A machine has SLOTS places for clusters at once (`Slot`): a cluster takes
the first free one, by its lock, and waits while all are taken. A slot's
names are fixed (slot 1's nodes are `sg1-n1`.. at 10.77.1.11-13, on the
same bridge), so everything the cluster makes is removed by `stop`, and a
run that crashed before its `stop` is cleaned up by the next `start` in
its slot (the slot's namespace names and temp directories' prefix say what
is its). The bridge is every slot's: made by the first, removed by the
last. Processes run in sessions of their own, so a "kill -9" takes the
whole process group.

The servers are started with `nsenter --net=/run/netns/NAME`, not `ip netns
exec NAME`: the latter also unshares the mount namespace and mounts a fresh
sysfs on /sys, which hides /sys/fs/cgroup from the sandbox engine (its
containers would run without memory, pids or cpu limits).
"""

import concurrent.futures
import contextlib
import itertools
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import openai
import pytest
import requests

from conftest import BINARY, CLUSTER_MODE, free_port, wait_until

NODE_NAMES = ["n1", "n2", "n3"]
BRIDGE = "sgbr0"
# Every slot's nodes are on the one bridge, each slot in a /24 of its own
# (slot n: 10.77.n.0/24), so the nodes reach the root namespace at one
# address whichever slot their cluster took: the scripted upstreams, the
# Postgres and the S3 server of every run listen there.
GATEWAY = "10.77.0.1"
SUBNET = "10.77.0.0/16"
NODE_PORT = 8080
POSTGRES_BIN = Path("/usr/lib/postgresql/15/bin")
MOTO_SERVER = Path(sys.executable).parent / "moto_server"
BUCKET = "shellgate-cluster"

# Tenants: one admin key (project `ops`) and member keys of projects of
# their own, so each test counts its own project's containers.
ADMIN_KEY = "sk-cluster-admin"
MEMBER_KEYS = {
    "alpha": "sk-cluster-alpha",
    "beta": "sk-cluster-beta-project",
    "bulk": "sk-cluster-bulk-project",
    "quota": "sk-cluster-quota",
    "execs": "sk-cluster-execs",
    "chaos": "sk-cluster-chaos",
}
API_KEYS = ",".join([f"{ADMIN_KEY}:ops:admin"] + [f"{key}:{project}" for project, key in MEMBER_KEYS.items()])
# The operator's credential (every route of a node), and the one a replica
# forwards tenants' requests with (the API alone).
SECRET_HEADER = "X-Shellgate-Cluster-Secret"
FORWARD_HEADER = "X-Shellgate-Cluster-Forward"

HEARTBEAT_SECS = 1
LOST_AFTER_SECS = 5

# How many clusters may be up at once on a machine: a test run's lanes
# (scripts/test) start clusters side by side: two Node files, and
# test_cluster.py's beside them.
SLOTS = 3
LOCK_DIR = Path("/run/lock") if Path("/run/lock").is_dir() else Path(tempfile.gettempdir())
# A cluster's Postgres keeps its files in memory (tmpfs) where the machine
# has one: a throwaway database needs no disk, and the disk is what a
# loaded machine (builds, image copies, other runs) makes everyone wait on;
# initdb and each cluster's CREATE DATABASE then cost a fraction.
POSTGRES_PARENT = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else Path(tempfile.gettempdir())
LOCK_WAIT_SECS = 1800


class Slot:
    """One of the machine's places for a cluster: the names, addresses and
    host ids its cluster uses, apart from every other slot's, and the lock
    that says it is taken (held while its cluster is up and let go with
    its process however it ends). Slot 0's names are the ones a cluster
    always had."""

    def __init__(self, number: int):
        self.number = number
        tag = "" if number == 0 else str(number)
        self.netns = {name: f"sg{tag}-{name}" for name in NODE_NAMES}
        # The host end of each node's veth pair (the namespace end is its eth0).
        self.host_veth = {name: f"sgv{tag}{name}" for name in NODE_NAMES}
        self.address = {name: f"10.77.{number}.{11 + index}" for index, name in enumerate(NODE_NAMES)}
        # Each node's sandboxes' host ids, a range of its own: none starts
        # at the engine's default (3,000,000,000), which every single box
        # on the machine uses (the test run's own server is up beside the
        # cluster), and a slot's are 50,000,000 ids (762 sandboxes a node)
        # from the next slot's.
        self.uid_base = {name: 3_200_000_000 + 200_000_000 * index + 50_000_000 * number
                         for index, name in enumerate(NODE_NAMES)}
        # Never a prefix of another slot's (the leftovers of a slot are
        # found by it).
        self.tmp_prefix = f"shellgate-cluster{tag}-"
        self.lock_file = LOCK_DIR / ("shellgate-cluster.lock" if number == 0 else f"shellgate-cluster-{number}.lock")


def sh(*args, check=True, netns=None):
    """Runs a command (in `netns` if given), returning its stdout; raises
    with its stderr when it fails and `check`."""
    enter = ["nsenter", f"--net=/run/netns/{netns}"] if netns else []
    done = subprocess.run(enter + [str(a) for a in args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args))}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def can_run() -> str:
    """Why a cluster cannot be made here, or "" if it can."""
    if os.geteuid() != 0:
        return "the cluster tests need root (network namespaces, a bridge, the sandbox engine)"
    for tool in ["ip", "nsenter", "runuser"]:
        if shutil.which(tool) is None:
            return f"the cluster tests need `{tool}`"
    if not (POSTGRES_BIN / "postgres").exists():
        return f"the cluster tests need Debian's postgresql-15 ({POSTGRES_BIN})"
    if not BINARY.exists():
        return f"no shellgate binary at {BINARY}"
    return ""


def own_clusters_only() -> "pytest.MarkDecorator":
    """The mark of a module whose tests start clusters of their own: skipped
    where no cluster can be made, or beside the session's cluster."""
    why_not = can_run() or (CLUSTER_MODE and "the session's cluster is up (SHELLGATE_TEST_CLUSTER=1); "
                                            "these tests start clusters of their own")
    return pytest.mark.skipif(bool(why_not), reason=why_not or "")


_held = []


def _try_lock(path: Path):
    """The lock at `path` (an open file holding it), or None if another
    process holds it."""
    import fcntl

    held = open(path, "a")
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return held
    except BlockingIOError:
        held.close()
        return None


def take_slot() -> tuple:
    """The machine's first free cluster slot and its lock (an open file
    holding it): (Slot, file), waited for up to LOCK_WAIT_SECS while every
    slot is taken. One cluster per process: a second fails at once (the
    harness keeps a process's cluster state in one place)."""
    if any(not f.closed for f in _held):
        raise RuntimeError("this process's cluster is already up (one cluster per process)")
    deadline = time.monotonic() + LOCK_WAIT_SECS
    said = False
    while True:
        for number in range(SLOTS):
            slot = Slot(number)
            held = _try_lock(slot.lock_file)
            if held is not None:
                _held[:] = [held]
                return slot, held
        if time.monotonic() > deadline:
            raise RuntimeError(f"every cluster slot ({SLOTS}) was taken for {LOCK_WAIT_SECS}s")
        if not said:
            print(f"cluster.py: other runs' clusters take every slot ({SLOTS}); waiting", file=sys.stderr)
            said = True
        time.sleep(1)


# --- leftovers --------------------------------------------------------------


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _pids_whose_cmdline_has(needle: str) -> list:
    return [int(p) for p in os.listdir("/proc")
            if p.isdigit() and int(p) != os.getpid() and needle in _cmdline(int(p))]


def _start_time(pid: int):
    """A process's start time (clock ticks since boot), which tells it
    from a later process given the same pid."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _kill_recorded(pid_dir: Path) -> None:
    """Kills the process groups a run recorded in `pid_dir` (pid and start
    time, one file each) that still run."""
    for record in pid_dir.glob("*") if pid_dir.is_dir() else []:
        try:
            pid, started = (int(x) for x in record.read_text().split())
        except ValueError:
            continue
        if _start_time(pid) == started:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _kill_pids(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def remove_network(slot: Slot) -> None:
    """Deletes the slot's namespaces and veths, killing whatever still runs
    in a namespace (a previous run's servers included), and the bridge if
    no other slot is taken (their locks, held for the moment, keep a
    cluster from starting on it meanwhile)."""
    remove_namespaces(slot)
    others = [Slot(number) for number in range(SLOTS) if number != slot.number]
    held = [_try_lock(other.lock_file) for other in others]
    try:
        if all(h is not None for h in held):
            sh("ip", "link", "del", BRIDGE, check=False)
    finally:
        for h in held:
            if h is not None:
                h.close()


def remove_namespaces(slot: Slot) -> None:
    """Deletes the slot's nodes' namespaces and veths (the bridge stays),
    killing whatever still runs in them."""
    for name in NODE_NAMES:
        netns = slot.netns[name]
        if Path(f"/run/netns/{netns}").exists():
            pids = sh("ip", "netns", "pids", netns, check=False).split()
            _kill_pids(int(p) for p in pids)
            sh("ip", "netns", "del", netns, check=False)
        # Gone with its peer when the namespace goes; a half-made pair not.
        sh("ip", "link", "del", slot.host_veth[name], check=False)


def _unmount_under(directory: Path) -> None:
    """Lazily unmounts anything still mounted below `directory` (deepest
    first), so removing it never walks into a mounted file system."""
    prefix = str(directory.resolve()) + "/"
    try:
        with open("/proc/self/mountinfo") as f:
            points = [line.split()[4] for line in f]
    except OSError:
        return
    for point in sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)


def _cgroup_group_name(data_dir: Path) -> str:
    """The cgroup folder of the engine of a server's data directory:
    `shellgate-` and the low 48 bits of the FNV-1a hash of the engine's
    directory, `<data dir>/sandbox` (crates/sandbox/src/engine,
    group_name)."""
    value = 0xCBF29CE484222325
    for byte in str(data_dir / "sandbox").encode():
        value ^= byte
        value = (value * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"shellgate-{value & 0xFFFFFFFFFFFF:012x}"


def _cgroup_mounts() -> list:
    mounts = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                fstype = fields[fields.index("-") + 1]
                if fstype in ("cgroup", "cgroup2"):
                    mounts.append(Path(fields[4]))
    except (OSError, ValueError, IndexError):
        pass
    return mounts


def kill_cgroups(group: str) -> None:
    """Kills every process in the cgroups named `group` (an engine's base,
    in each hierarchy) and removes them: the sandboxes of a node killed
    with -9 outlive it (they are not in its process group), and nothing
    else would end them."""
    found = []
    for mount in _cgroup_mounts():
        for directory, subdirs, _ in os.walk(mount):
            if Path(directory).name == group:
                found.append(Path(directory))
                subdirs.clear()
            elif len(Path(directory).relative_to(mount).parts) >= 6:
                subdirs.clear()
    for base in found:
        for _ in range(50):
            pids = []
            for directory, _, _ in os.walk(base):
                try:
                    pids += [int(p) for p in Path(directory, "cgroup.procs").read_text().split()]
                except OSError:
                    pass
            if not pids:
                break
            _kill_pids(pids)
            time.sleep(0.1)
        for directory, _, _ in sorted(os.walk(base), key=lambda w: len(w[0]), reverse=True):
            try:
                os.rmdir(directory)
            except OSError:
                pass


def remove_leftovers(slot: Slot) -> None:
    """What a crashed run left in the slot: its processes (the process
    groups it recorded, and any whose command line names one of its
    directories), its namespaces (and the bridge, if no other slot is
    taken), its sandboxes' cgroups, its Postgres, and its directories."""
    tmp = Path(tempfile.gettempdir())
    stale = [d for d in tmp.glob(f"{slot.tmp_prefix}*") if d.is_dir()]
    stale_postgres = [directory for parent in {tmp, POSTGRES_PARENT}
                      for directory in parent.glob(f"{slot.tmp_prefix}postgres-*") if directory.is_dir()]
    for directory in stale:
        _kill_recorded(directory / "pids")
    for directory in stale + stale_postgres:
        for data in [directory / "data", directory / "postgres" / "data"]:
            if (data / "postmaster.pid").exists():
                sh("runuser", "-u", "postgres", "--", POSTGRES_BIN / "pg_ctl", "-D", data,
                   "-m", "immediate", "-w", "stop", check=False)
        _kill_pids(_pids_whose_cmdline_has(str(directory)))
    for directory in stale_postgres:
        subprocess.run(["rm", "-rf", "--one-file-system", str(directory)], capture_output=True)
    stale = [d for d in stale if d.exists()]
    remove_network(slot)
    for directory in stale:
        for data_dir in directory.glob("node-*"):
            kill_cgroups(_cgroup_group_name(data_dir))
        _unmount_under(directory)
        subprocess.run(["rm", "-rf", "--one-file-system", str(directory)], capture_output=True)


# --- the parts --------------------------------------------------------------


def make_network(slot: Slot) -> None:
    make_bridge()
    make_namespaces(slot)


def make_bridge() -> None:
    """The bridge every slot's nodes join, unless another slot's cluster
    made it already (two starting at once: one makes it, neither fails)."""
    if not Path(f"/sys/class/net/{BRIDGE}").exists():
        sh("ip", "link", "add", BRIDGE, "type", "bridge", check=False)
    sh("ip", "addr", "replace", f"{GATEWAY}/16", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")


def ip_batch(commands: list, netns: str = None) -> None:
    """`ip` commands (each without the `ip`) run by one `ip -batch` (in
    `netns` if given), in order, stopping at the first that fails: a
    fresh cluster's namespaces are a few processes, not dozens."""
    enter = ["nsenter", f"--net=/run/netns/{netns}"] if netns else []
    done = subprocess.run(enter + ["ip", "-batch", "-"], input="\n".join(commands) + "\n",
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip -batch ({'; '.join(commands)}): exit {done.returncode}: {done.stderr.strip()}")


def make_namespaces(slot: Slot) -> None:
    """Each of the slot's nodes' namespace, joined to the bridge (made
    before)."""
    host = []
    for name in NODE_NAMES:
        netns, veth = slot.netns[name], slot.host_veth[name]
        host += [f"netns add {netns}",
                 f"link add {veth} type veth peer name eth0 netns {netns}",
                 f"link set {veth} master {BRIDGE}",
                 f"link set {veth} up"]
    ip_batch(host)
    for name in NODE_NAMES:
        ip_batch(["link set lo up",
                  f"addr add {slot.address[name]}/16 dev eth0",
                  "link set eth0 up",
                  f"route add default via {GATEWAY}"], netns=slot.netns[name])


class Postgres:
    """A throwaway postgresql-15 cluster, as scripts/lib/postgres.sh makes
    one, reachable from the root namespace and from the nodes'. Its
    directory is a new one in POSTGRES_PARENT named by the slot's prefix
    (so a crashed run's is found by remove_leftovers); `remove`, after
    `stop`, deletes it."""

    def __init__(self, slot: Slot):
        self.directory = Path(tempfile.mkdtemp(prefix=f"{slot.tmp_prefix}postgres-", dir=POSTGRES_PARENT))
        self.port = free_port()

    def start(self) -> "Postgres":
        shutil.chown(self.directory, "postgres", "postgres")
        data = self.directory / "data"
        as_postgres = ["runuser", "-u", "postgres", "--"]
        sh(*as_postgres, POSTGRES_BIN / "initdb", "-D", data, "-U", "postgres",
           "--auth=trust", "--no-sync", "-E", "UTF8")
        with open(data / "pg_hba.conf", "a") as f:
            f.write(f"host all all {SUBNET} trust\n")
        self._run()
        self.psql("CREATE DATABASE shellgate")
        return self

    def _run(self) -> None:
        options = (f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1,{GATEWAY} "
                   "-c max_connections=300 -c fsync=off -c synchronous_commit=off -c full_page_writes=off")
        sh("runuser", "-u", "postgres", "--", POSTGRES_BIN / "pg_ctl", "-D", self.directory / "data",
           "-l", self.directory / "log", "-w", "-o", options, "start")

    def outage(self) -> None:
        """Stops the server, as an outage would (its data stays):
        `recover` starts it again on the same port."""
        sh("runuser", "-u", "postgres", "--", POSTGRES_BIN / "pg_ctl", "-D", self.directory / "data",
           "-m", "fast", "-w", "stop")

    def recover(self) -> None:
        self._run()

    def url(self, host: str = GATEWAY, database: str = "shellgate") -> str:
        return f"postgres://postgres@{host}:{self.port}/{database}"

    def psql(self, sql: str, host: str = "127.0.0.1", database: str = "postgres", netns: str = None) -> str:
        return sh("psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", host, "-p", self.port,
                  "-U", "postgres", "-d", database, "-c", sql, netns=netns)

    def stop(self) -> None:
        data = self.directory / "data"
        if data.exists():
            sh("runuser", "-u", "postgres", "--", POSTGRES_BIN / "pg_ctl", "-D", data,
               "-m", "immediate", "-w", "stop", check=False)

    def remove(self) -> None:
        """Stopped, and its directory deleted."""
        self.stop()
        subprocess.run(["rm", "-rf", "--one-file-system", str(self.directory)], capture_output=True)


class Process:
    """One long-running process of the cluster, in a session (and process
    group) of its own, its output in `log`."""

    def __init__(self, name: str, command: list, env: dict, log: Path, netns: str = None):
        # Recorded (pid, start time) where the next run finds them if this
        # one dies before its teardown.
        self.pid_dir = log.parent.parent / "pids"
        self.name = name
        self.command = command
        self.env = env
        self.log = log
        self.netns = netns
        self.popen = None
        self.stopping = False

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def binary(self) -> Path:
        return Path(self.command[0])

    def replace_binary(self, binary: Path) -> None:
        """Another build for the next `start` (an upgrade's)."""
        self.command[0] = binary

    def start(self) -> "Process":
        enter = ["nsenter", f"--net=/run/netns/{self.netns}"] if self.netns else []
        self.stopping = False
        with open(self.log, "ab") as log:
            self.popen = subprocess.Popen(
                enter + [str(c) for c in self.command], env=self.env, stdout=log, stderr=log,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        self.pid_dir.mkdir(exist_ok=True)
        (self.pid_dir / f"{self.popen.pid}").write_text(f"{self.popen.pid} {_start_time(self.popen.pid)}\n")
        return self

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stall(self) -> None:
        """SIGSTOP to the whole process group: the process stops as in a
        long pause (its kernel still accepts connections for it, which
        nobody answers), while what runs outside its group (a node's
        sandboxes) carries on. `resume` ends it (and so does `stop`)."""
        os.killpg(self.popen.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT to the whole process group (after `stall`)."""
        try:
            os.killpg(self.popen.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass

    def kill9(self) -> None:
        """SIGKILL to the whole process group, then reaped."""
        if self.popen is None:
            return
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.popen.wait()

    def terminate(self, patience: float = 60) -> int:
        """SIGTERM to the process alone (as a rollout, a drain or `kubectl
        delete pod` sends it), and its exit status once it ended."""
        self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout=patience)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise AssertionError(f"{self.name} still ran {patience}s after SIGTERM: {self.log_tail()}")

    def begin_stop(self) -> None:
        """SIGTERM to its group, without waiting: `stop` then waits for it
        (several begun first end together, not one after another)."""
        if not self.alive() or self.stopping:
            return
        self.stopping = True
        try:
            os.killpg(self.popen.pid, signal.SIGTERM)
            # A stalled one (`stall`) acts on it once continued.
            os.killpg(self.popen.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass

    def stop(self, patience: float = 30) -> None:
        if not self.alive():
            if self.popen is not None:
                self.popen.wait()
                # Its group may outlive it (children it left).
                try:
                    os.killpg(self.popen.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return
        self.begin_stop()
        try:
            self.popen.wait(timeout=patience)
        except subprocess.TimeoutExpired:
            pass
        self.kill9()


class Server(Process):
    """A `shellgate serve`: a node (in its namespace) or an API replica."""

    def __init__(self, name: str, role, data_dir: Path, host: str, port: int, settings: dict,
                 netns: str = None, secret: str = "", binary: Path = BINARY):
        data_dir.mkdir(parents=True, exist_ok=True)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "SHELLGATE_LOG": os.environ.get("SHELLGATE_CLUSTER_LOG", "info"),
            "SHELLGATE_DATA_DIR": str(data_dir),
            "SHELLGATE_LISTEN": f"{host}:{port}",
            "SHELLGATE_BUILD_DEFAULT_IMAGE": "false",
        }
        if role:
            env["SHELLGATE_ROLE"] = role
        env.update({f"SHELLGATE_{k.upper()}": str(v) for k, v in settings.items()})
        # The data directory on the command line as well: it names the
        # process as one of this run's (see remove_leftovers).
        super().__init__(name, [binary, "--data-dir", data_dir, "serve"], env, data_dir / "server.log", netns)
        self.settings = settings
        self.role = role
        self.data_dir = data_dir
        self.host = host
        self.port = port
        self.secret = secret

    @property
    def root(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root}/v1"

    def healthy(self) -> bool:
        if not self.alive():
            raise RuntimeError(f"{self.name} exited ({self.popen.returncode}): {self.log_tail()}")
        try:
            headers = {SECRET_HEADER: self.secret} if self.secret else {}
            return requests.get(f"{self.root}/healthz", headers=headers, timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def wait_healthy(self, timeout: float = 60) -> "Server":
        if not wait_until(self.healthy, timeout, 0.1):
            raise RuntimeError(f"{self.name} did not become healthy at {self.root}: {self.log_tail()}")
        return self


class ObjectStore(Process):
    """moto's S3-compatible server (a registry package, not a fake of our
    own) on the bridge's address, with one bucket."""

    def __init__(self, directory: Path):
        self.port = free_port()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(directory)}
        super().__init__("s3", [sys.executable, MOTO_SERVER, "-H", GATEWAY, "-p", str(self.port)],
                         env, directory / "moto.log")
        self.directory = directory

    @property
    def endpoint(self) -> str:
        return f"http://{GATEWAY}:{self.port}"

    def start(self) -> "ObjectStore":
        self.directory.mkdir(exist_ok=True)
        super().start()

        def up():
            if not self.alive():
                raise RuntimeError(f"moto_server exited: {self.log_tail()}")
            try:
                requests.get(self.endpoint, timeout=1)
                return True
            except requests.RequestException:
                return False

        if not wait_until(up, 30, 0.1):
            raise RuntimeError(f"moto_server did not answer: {self.log_tail()}")
        self.create_bucket(BUCKET)
        return self

    def create_bucket(self, bucket: str) -> None:
        created = requests.put(f"{self.endpoint}/{bucket}", timeout=10)
        if created.status_code != 200:
            raise RuntimeError(f"bucket {bucket}: {created.status_code} {created.text}")

    def settings(self, bucket: str = BUCKET) -> dict:
        return {
            "object_store": f"s3://{bucket}/objects",
            "s3_endpoint": self.endpoint,
            "s3_region": "us-east-1",
            "s3_access_key_id": "test",
            "s3_secret_access_key": "test",
            "s3_allow_http": "true",
        }


# --- the cluster ------------------------------------------------------------


class Services:
    """What the clusters of one test run can share: the machine's cluster
    lock, the bridge, one Postgres and one S3 server. A cluster on them
    (`Cluster(services=...)`) has a database and a bucket of its own and
    its own namespaces, so a suite that starts a cluster per test pays for
    a Postgres and a moto start once, not per test. The services take a
    slot of the machine (`Slot`), which their clusters use, one after
    another."""

    def __init__(self):
        self.slot = None
        self.lock = None
        self.directory = None
        self.postgres = None
        self.objects = None
        self.stores = itertools.count(1)
        self.removals = []
        # Making and dropping a database (and making a bucket) happen on
        # this one thread, beside the tests: the next cluster's store is
        # made while the one before runs (`spare`), and a stopped
        # cluster's database is dropped while the next starts.
        self.chores = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="cluster-stores")
        self.spare = None
        self.drops = []

    def start(self) -> "Services":
        self.slot, self.lock = take_slot()
        remove_leftovers(self.slot)
        self.directory = Path(tempfile.mkdtemp(prefix=self.slot.tmp_prefix))
        os.chmod(self.directory, 0o755)
        try:
            make_bridge()
            self.postgres, self.objects = start_stores(self.slot, self.directory)
        except BaseException:
            self.stop()
            raise
        return self

    def new_store(self) -> tuple:
        """A fresh database and bucket, never used before: (database,
        bucket). The one made beside the cluster before, if any; the
        next is begun at once."""
        spare = self.spare or self.chores.submit(self._make_store)
        self.spare = self.chores.submit(self._make_store)
        return spare.result()

    def _make_store(self) -> tuple:
        number = next(self.stores)
        database, bucket = f"shellgate_{number}", f"{BUCKET}-{number}"
        self.postgres.psql(f"CREATE DATABASE {database}")
        if self.objects:
            self.objects.create_bucket(bucket)
        return database, bucket

    def drop_database(self, database: str) -> None:
        """Drops a stopped cluster's database, beside whatever runs next
        (`stop` waits for it)."""
        self.drops.append(self.chores.submit(
            self.postgres.psql, f"DROP DATABASE IF EXISTS {database} WITH (FORCE)"))

    def remove_later(self, directory: Path) -> None:
        """A stopped cluster's directory removed in the background (its
        containers' trees take seconds to delete, which the next cluster
        need not wait for); `stop` waits for every removal."""
        self.removals.append(subprocess.Popen(["rm", "-rf", "--one-file-system", str(directory)],
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def stop(self) -> None:
        for removal in self.removals:
            removal.wait()
        self.removals.clear()
        # The spare store and the drops finished (a failed one is of no
        # matter now: the whole Postgres goes).
        self.chores.shutdown(wait=True)
        self.spare = None
        self.drops.clear()
        if self.objects:
            self.objects.stop()
        if self.postgres:
            self.postgres.remove()
        if self.slot is not None:
            remove_network(self.slot)
        if self.directory:
            subprocess.run(["rm", "-rf", "--one-file-system", str(self.directory)], capture_output=True)
        if self.lock is not None:
            self.lock.close()
            self.lock = None


def start_stores(slot: Slot, directory: Path) -> tuple:
    """A new Postgres and (if moto is installed) S3 server: (Postgres,
    ObjectStore or None), started side by side (neither needs the other).
    If either fails, both are stopped and the failure raised."""
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="cluster-s3") as beside:
        objects = beside.submit(lambda: ObjectStore(directory / "s3").start()) if MOTO_SERVER.exists() else None
        postgres = Postgres(slot)
        try:
            postgres.start()
        except BaseException:
            postgres.remove()
            if objects is not None:
                with contextlib.suppress(BaseException):
                    objects.result().stop()
            raise
        try:
            return postgres, objects.result() if objects is not None else None
        except BaseException:
            postgres.remove()
            raise


class Cluster:
    """Three nodes, two replicas, Postgres and S3. `settings` go to every
    server (as `SHELLGATE_<NAME>`); `roles=False` starts the nodes as plain
    single boxes (no `SHELLGATE_ROLE`) and no replica: the harness's own
    check, for a binary without the roles. With `services` (started), the
    cluster runs on theirs (a database and a bucket of its own) instead of
    starting its own."""

    def __init__(self, settings: dict = None, roles: bool = True, replicas: int = 2, nodes: int = 3,
                 api_keys: str = API_KEYS, services: Services = None, binary: Path = BINARY):
        # The replicas' keys; the nodes are listed with the first admin key
        # among them, and only without one is this module's own added (its
        # project `ops` then exists too, which a suite counting the
        # projects an admin sees would notice).
        entries = [entry.split(":") for entry in api_keys.split(",") if entry]
        admins = [fields[0] for fields in entries if len(fields) > 2 and fields[2] == "admin"]
        self.admin_key = admins[0] if admins else ADMIN_KEY
        self.api_keys = api_keys if admins else ",".join(k for k in [api_keys, f"{ADMIN_KEY}:ops:admin"] if k)
        self.settings = {
            "warm_containers": "0",
            "node_heartbeat_secs": str(HEARTBEAT_SECS),
            "node_lost_after_secs": str(LOST_AFTER_SECS),
            **(settings or {}),
        }
        self.roles = roles
        # The build its servers start with (an older release's, to upgrade).
        self.binary = binary
        # Fewer nodes than three: the benchmarks' one-node cluster.
        self.node_names = NODE_NAMES[:nodes]
        self.replica_count = replicas if roles else 0
        self.secret = "cluster-" + secrets.token_hex(24)
        self.services = services
        self.directory = None
        self.postgres = None
        self.objects = None
        self.database = "shellgate"
        self.bucket = BUCKET
        self.nodes = {}
        self.replicas = []
        self.extra = []
        self.slot = None
        self.lock = None

    # Starting and stopping.

    def start(self) -> "Cluster":
        if self.services is None:
            self.slot, self.lock = take_slot()
            remove_leftovers(self.slot)
        else:
            self.slot = self.services.slot
        self.directory = Path(tempfile.mkdtemp(prefix=self.slot.tmp_prefix))
        os.chmod(self.directory, 0o755)
        try:
            if self.services is not None:
                make_namespaces(self.slot)
                self.database, self.bucket = self.services.new_store()
                self.postgres, self.objects = self.services.postgres, self.services.objects
            else:
                make_network(self.slot)
                self.postgres, self.objects = start_stores(self.slot, self.directory)
            if self.objects is None and self.roles:
                raise RuntimeError(f"no {MOTO_SERVER}: a cluster's nodes share their blobs through S3 "
                                   "(`pip install 'moto[server]'` into the venv)")
            for name in self.node_names:
                self.nodes[name] = self._node(name).start()
            for index in range(self.replica_count):
                self.replicas.append(self._replica(f"replica-{index + 1}").start())
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def common_settings(self) -> dict:
        settings = {"database_url": self.postgres.url(database=self.database),
                    **(self.objects.settings(self.bucket) if self.objects else {})}
        if self.roles:
            settings["cluster_secret"] = self.secret
        return {**settings, **self.settings}

    def _node(self, name: str) -> Server:
        settings = self.common_settings()
        if self.roles:
            settings.update(node_id=name, node_address=f"http://{self.slot.address[name]}:{NODE_PORT}")
        else:
            settings["api_keys"] = API_KEYS
        settings["sandbox_uid_base"] = str(self.slot.uid_base[name])
        return Server(f"node {name}", "node" if self.roles else None, self.directory / f"node-{name}",
                      self.slot.address[name], NODE_PORT, settings, netns=self.slot.netns[name],
                      secret=self.secret if self.roles else "", binary=self.binary)

    def _replica(self, name: str, **overrides) -> Server:
        settings = {**self.common_settings(), "api_keys": self.api_keys, **overrides}
        return Server(name, "api", self.directory / name, "127.0.0.1", free_port(), settings,
                      binary=self.binary)

    def add_replica(self, **overrides) -> Server:
        """One more replica (e.g. with other quotas), stopped with the rest."""
        replica = self._replica(f"replica-x{len(self.extra) + 1}", **overrides).start()
        self.extra.append(replica)
        return replica.wait_healthy()

    def restart_replica(self, index: int) -> Server:
        """A replica killed by a test, started again on a new port (the
        same settings: it keeps nothing of its own)."""
        old = self.replicas[index]
        old.stop()
        replica = Server(old.name, old.role, old.data_dir, old.host, free_port(), old.settings,
                         binary=old.binary)
        self.replicas[index] = replica.start().wait_healthy()
        return replica

    def restart_node(self, name: str) -> Server:
        """A node killed by a test started again as it was (its id,
        address and data directory), and ready."""
        node = self.nodes[name]
        node.stop()
        node.start().wait_healthy()
        self.wait_nodes(lambda nodes: {n["id"]: n["status"] for n in nodes}.get(name) == "ready",
                        60, f"{name} ready again")
        return node

    def stop_servers(self) -> None:
        """Every node and replica stopped (an upgrade's first half); the
        store, the objects and the data directories stay."""
        for server in self.extra + self.replicas + list(self.nodes.values()):
            server.stop()

    def start_servers(self) -> None:
        """Every node and replica started again as they were (the same
        data directories, addresses and ports), and ready."""
        for server in list(self.nodes.values()) + self.replicas + self.extra:
            server.start()
        self._wait_ready()

    def _wait_ready(self) -> None:
        """Every server healthy, and (with roles) every node ready."""
        for server in list(self.nodes.values()) + self.replicas + self.extra:
            server.wait_healthy()
        if self.roles:
            self.wait_nodes(lambda nodes: sorted(n["id"] for n in nodes if n["status"] == "ready")
                            == self.node_names, 60, "every node ready")

    def stop(self) -> None:
        """Everything down and removed, whatever state it is in (on
        shared services: its database; they stay up)."""
        for server in self.extra + self.replicas:
            server.stop()
        # The nodes all told first, then awaited: they drain together.
        for node in self.nodes.values():
            node.begin_stop()
        for node in self.nodes.values():
            node.stop()
        for node in self.nodes.values():
            kill_cgroups(_cgroup_group_name(node.data_dir))
        if self.services is not None:
            if self.slot is not None:
                remove_namespaces(self.slot)
            if self.postgres:
                self.services.drop_database(self.database)
            self.postgres = self.objects = None
        else:
            if self.objects:
                self.objects.stop()
            if self.postgres:
                self.postgres.remove()
            if self.slot is not None:
                remove_network(self.slot)
        if self.directory:
            _unmount_under(self.directory)
            if self.services is not None:
                self.services.remove_later(self.directory)
            else:
                subprocess.run(["rm", "-rf", "--one-file-system", str(self.directory)], capture_output=True)
        if self.lock is not None:
            self.lock.close()
            self.lock = None

    def all_alive(self) -> bool:
        return all(server.alive() for server in list(self.nodes.values()) + self.replicas)

    def logs(self, chars: int = 2000) -> str:
        """Each server's last lines, for a failure's message."""
        parts = []
        for server in list(self.nodes.values()) + self.replicas + self.extra:
            parts.append(f"--- {server.name} ({'alive' if server.alive() else 'dead'}) ---\n"
                         f"{server.log_tail(chars)}")
        return "\n".join(parts)

    # Using it.

    def request(self, method: str, path: str, key: str, replica: int = 0, **kwargs) -> requests.Response:
        """One request (`/v1{path}`) through replica `replica` with `key`. A
        read answered 503 (no node reachable for that moment, as a replica
        says while a busy node's heartbeat is late) is asked again, as the
        SDKs do, for a bounded time."""
        def send():
            return requests.request(method, f"{self.replicas[replica].base_url}{path}",
                                    headers={"Authorization": f"Bearer {key}"}, timeout=300, **kwargs)

        answer = {"last": send()}

        def answered():
            if answer["last"].status_code != 503 or method != "GET":
                return True
            answer["last"] = send()
            return answer["last"].status_code != 503

        wait_until(answered, 60, 1)
        return answer["last"]

    @property
    def replica_urls(self) -> list:
        """Each replica's API base (`http://127.0.0.1:PORT/v1`)."""
        return [replica.base_url for replica in self.replicas]

    @property
    def node_pids(self) -> dict:
        """Each node's pid (its process group's too: `os.killpg`), by id."""
        return {name: node.pid for name, node in self.nodes.items()}

    def client(self, replica=0, key: str = MEMBER_KEYS["alpha"], **options) -> openai.OpenAI:
        """The OpenAI SDK pointed at a replica (an index or a Server)."""
        server = self.replicas[replica] if isinstance(replica, int) else replica
        options = {"max_retries": 0, "timeout": 120, **options}
        return openai.OpenAI(base_url=server.base_url, api_key=key, **options)

    def session(self, replica=0, key: str = MEMBER_KEYS["alpha"]) -> requests.Session:
        """A requests session with the key; `session.base` is the replica's
        `/v1` URL."""
        server = self.replicas[replica] if isinstance(replica, int) else replica
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {key}"
        session.base = server.base_url
        return session

    def node_list(self, replica=0) -> list:
        """`GET /v1/cluster/nodes` as the admin (from a live replica)."""
        candidates = [self.replicas[replica]] + self.replicas if isinstance(replica, int) else [replica]
        for server in candidates:
            if not server.alive():
                continue
            response = requests.get(f"{server.base_url}/cluster/nodes", timeout=10,
                                    headers={"Authorization": f"Bearer {self.admin_key}"})
            if response.status_code == 404:
                raise RuntimeError(f"{server.name} has no /v1/cluster/nodes (a binary without the "
                                   f"cluster roles?): {response.text[:300]}")
            if response.status_code != 200:
                raise AssertionError(f"GET /v1/cluster/nodes: {response.status_code} {response.text}")
            body = response.json()
            assert body["object"] == "list", body
            return body["data"]
        raise AssertionError("no live replica")

    def node_counts(self) -> dict:
        """Containers per node id, as the cluster reports them."""
        return {n["id"]: n["containers"] for n in self.node_list()}

    def node_status(self) -> dict:
        return {n["id"]: n["status"] for n in self.node_list()}

    def wait_nodes(self, condition, timeout: float, what: str) -> list:
        """Polls the node list until `condition(nodes)`; fails saying `what`
        was awaited and what the list was."""
        seen = []

        def check():
            nonlocal seen
            try:
                seen = self.node_list()
            except (requests.RequestException, AssertionError):
                return False
            return condition(seen)

        if not wait_until(check, timeout, 0.2):
            raise AssertionError(f"waited {timeout}s for {what}; nodes: {json.dumps(seen)}\n{self.logs()}")
        return seen

    def node_holding(self, container_id: str):
        """Which node's engine has the container's directory (the engine
        keeps `sandbox/containers/<id>` in its data directory), or None:
        what the harness can tell beside the API."""
        for name, node in self.nodes.items():
            if (node.data_dir / "sandbox" / "containers" / container_id).exists():
                return name
        return None


# --- fixtures ---------------------------------------------------------------


def binary_has_roles() -> bool:
    """Whether the binary knows the cluster roles (it carries the error
    code its nodes answer tenants with); one without them would start five
    single boxes and fail every test for want of `/v1/cluster/nodes`."""
    import mmap

    with open(BINARY, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as image:
        return image.find(b"cluster_secret_required") >= 0


class Clusters:
    """A test module's one cluster at a time, started on demand with the
    settings a test asks for and kept for the next test that asks for the same; a test that breaks it (kills
    a node or a replica) taints it, and the next test gets a new one."""

    def __init__(self):
        self.current = None
        self.settings = None
        self.tainted = False

    def get(self, **settings) -> Cluster:
        settings = {k: str(v) for k, v in settings.items()}
        if (self.current is not None and self.settings == settings and not self.tainted
                and self.current.all_alive()):
            return self.current
        self.stop()
        self.current = Cluster(settings).start()
        self.settings, self.tainted = settings, False
        return self.current

    def taint(self) -> None:
        self.tainted = True

    def stop(self) -> None:
        if self.current is not None:
            self.current.stop()
        self.current = None


# What every cluster test but the quota one runs with: room for the
# thousand containers of one project (1g each, the smallest limit).
ROOMY = {"max_running_containers_per_project": 2000, "max_memory_per_project": "4t"}


@pytest.fixture(scope="module")
def clusters():
    made = Clusters()
    yield made
    made.stop()


@pytest.fixture
def cluster(clusters) -> Cluster:
    """The shared cluster (three nodes, two replicas), healthy."""
    return clusters.get(**ROOMY)


# --- the command line -------------------------------------------------------


def serve(settings: dict, api_keys: str) -> None:
    """A cluster for a test run of another language (tests/node/harness.mjs
    with SHELLGATE_TEST_CLUSTER=1): started with `settings` (every server)
    and `api_keys` (the replicas'), announced as ONE JSON line on stdout
    once every part is healthy, and stopped (everything removed) when stdin
    reaches EOF, on SIGTERM, SIGHUP or SIGINT, or if starting fails."""
    def terminate(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGHUP, terminate)
    cluster = Cluster(settings, api_keys=api_keys)
    try:
        cluster.start()
        print(json.dumps({
            "replicas": [replica.root for replica in cluster.replicas],
            "gateway": GATEWAY,
            "directory": str(cluster.directory),
        }), flush=True)
        # Until whoever started it closes our stdin (or dies: the same EOF).
        while sys.stdin.buffer.read(65536):
            pass
    finally:
        # Not interrupted by a second signal while it tears down.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        cluster.stop()


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="A shellgate cluster on this machine (see the module's docstring).")
    commands = parser.add_subparsers(dest="command", required=True)
    serving = commands.add_parser(
        "serve", help="start a cluster, print its replicas' URLs as one JSON line, stop it at stdin's EOF")
    serving.add_argument("--settings", default="{}",
                         help='a JSON object of settings for every server, e.g. {"upstream_url": "http://..."}')
    serving.add_argument("--api-keys", default="", help="the replicas' api_keys (KEY:PROJECT[:admin],...)")
    args = parser.parse_args(argv)
    settings = json.loads(args.settings)
    if not isinstance(settings, dict):
        parser.error("--settings must be a JSON object")
    why_not = can_run()
    if why_not:
        print(f"cluster.py: {why_not}", file=sys.stderr)
        return 2
    serve({str(k): str(v) for k, v in settings.items()}, args.api_keys)
    return 0


if __name__ == "__main__":
    sys.exit(main())
