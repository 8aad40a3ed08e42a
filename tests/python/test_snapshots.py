"""Snapshots and forks against a real `shellgate serve`: a container with a
running HTTP server, a file being appended to and a Python process holding
state is snapshotted (its processes frozen while its files are copied, then
running again), a container is made from the snapshot and the container is
forked three times: the files match, the copies diverge independently, none
sees another's files or processes, and each is as confined as any container
(seccomp, no capabilities, the same id map's shape). Snapshots outlive their
container, are their project's alone, are bounded by the project's quotas,
and a server killed mid-snapshot leaves nothing half-made."""

import os
import re
import subprocess
import tempfile
import threading
import uuid
from pathlib import Path

import pytest
import requests

from conftest import BINARY, KEY_A, KEY_B, Server, exec_commands, wait_until


def v1(server, method: str, path: str, key: str = KEY_A, **kwargs) -> requests.Response:
    return requests.request(
        method,
        f"{server.base_url}{path}",
        headers={"Authorization": f"Bearer {key}"},
        timeout=300,
        **kwargs,
    )


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def make_container(server, key: str = KEY_A, **body) -> dict:
    made = v1(server, "POST", "/containers", key=key, json={"name": unique("c"), **body})
    assert made.status_code == 200, made.text
    return made.json()


def run(server, container_id: str, command: str) -> dict:
    answer = exec_commands(server.client(), container_id, [command])
    return answer["output"][0]


def ok(server, container_id: str, command: str) -> str:
    entry = run(server, container_id, command)
    assert entry["outcome"]["exit_code"] == 0, entry
    return entry["stdout"]


def start_process(server, container_id: str, **body) -> dict:
    started = v1(server, "POST", f"/containers/{container_id}/processes", json=body)
    assert started.status_code == 201, started.text
    return started.json()


def snapshot(server, container_id: str, key: str = KEY_A, **body) -> requests.Response:
    return v1(server, "POST", f"/containers/{container_id}/snapshots", key=key, json=body)


def confinement(server, container_id: str) -> dict:
    """What the hostile suite's escapes depend on, as the container sees it."""
    status = ok(server, container_id, "cat /proc/self/status")
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    uid_map = ok(server, container_id, "cat /proc/self/uid_map").split()
    return {
        "seccomp": fields["Seccomp"].strip(),
        "cap_eff": fields["CapEff"].strip(),
        "cap_bnd": fields["CapBnd"].strip(),
        "uid": ok(server, container_id, "id -u").strip(),
        # Inside ids and count; the host range is each container's own.
        "uid_map_shape": (uid_map[0], uid_map[2]),
        "uid_map_host": uid_map[1],
    }


def test_a_busy_container_is_snapshotted_restored_and_forked(server):
    source = make_container(server)["id"]
    ok(server, source, "echo kept > /mnt/data/kept.txt && mkdir -p ~/notes && echo home > ~/notes/h "
                       "&& head -c 1048576 /dev/urandom > /mnt/data/blob && sha256sum /mnt/data/blob")
    blob_sum = ok(server, source, "sha256sum < /mnt/data/blob").split()[0]
    start_process(server, source, command="exec python3 -m http.server 18080 --directory /mnt/data",
                  timeout_ms=300000)
    start_process(server, source, timeout_ms=300000,
                  command="i=0; while :; do echo $i >> /mnt/data/appended; i=$((i+1)); sleep 0.01; done")
    repl = start_process(server, source, command="python3 -iqu", stdin=True, timeout_ms=300000)
    wrote = v1(server, "POST", f"/containers/{source}/processes/{repl['id']}/stdin",
               data=b"state = 42\n")
    assert wrote.status_code == 204, wrote.text
    assert wait_until(lambda: "HTTP/1" in run(server, source, "python3 - <<'E'\nimport urllib.request as u\n"
                                              "print('HTTP/1', u.urlopen('http://127.0.0.1:18080/kept.txt').read())\nE")["stdout"],
                      60), "the source's HTTP server never answered"
    assert wait_until(lambda: len(run(server, source, "cat /mnt/data/appended")["stdout"].split()) > 20, 60)

    taken = snapshot(server, source, name="busy", metadata={"purpose": "test"})
    assert taken.status_code == 200, taken.text
    snap = taken.json()
    assert snap["object"] == "container.snapshot" and snap["id"].startswith("snap_"), snap
    assert (snap["name"], snap["metadata"], snap["container_id"]) == ("busy", {"purpose": "test"}, source), snap
    assert snap["memory"] is False and snap["memory_unavailable_reason"], snap
    assert snap["size_bytes"] >= 1 << 20, snap
    assert snap["image"], snap

    # Thawed: the source's appender goes on after the snapshot.
    after = len(ok(server, source, "cat /mnt/data/appended").split())
    assert wait_until(lambda: len(run(server, source, "cat /mnt/data/appended")["stdout"].split()) > after + 5,
                      60), "the source's processes did not run again after the snapshot"

    retrieved = v1(server, "GET", f"/snapshots/{snap['id']}")
    assert retrieved.status_code == 200 and retrieved.json() == snap, retrieved.text
    listed = v1(server, "GET", "/snapshots", params={"limit": 100})
    assert snap["id"] in [s["id"] for s in listed.json()["data"]], listed.text

    restored = make_container(server, snapshot_id=snap["id"])
    assert restored["image"] == snap["image"], restored
    copy = restored["id"]
    assert ok(server, copy, "cat /mnt/data/kept.txt ~/notes/h") == "kept\nhome\n"
    assert ok(server, copy, "sha256sum < /mnt/data/blob").split()[0] == blob_sum
    # One instant of the appended file: whole lines, in sequence, none torn.
    lines = ok(server, copy, "cat /mnt/data/appended").split("\n")
    assert lines[-1] == "", f"the copy's last line is torn: {lines[-3:]}"
    numbers = [int(n) for n in lines[:-1]]
    assert numbers == list(range(len(numbers))) and len(numbers) > 20, lines[-5:]
    # Files only: the copy runs none of the source's processes.
    procs = ok(server, copy, "ps -eo args")
    assert "http.server" not in procs and "python3 -iqu" not in procs, procs

    forked = v1(server, "POST", f"/containers/{source}/fork", json={"count": 3})
    assert forked.status_code == 200, forked.text
    copies = [c["id"] for c in forked.json()["data"]]
    assert len(set(copies)) == 3 and source not in copies and copy not in copies, forked.text
    for n, fork in enumerate(copies):
        assert ok(server, fork, "cat /mnt/data/kept.txt") == "kept\n"
        ok(server, fork, f"echo mine-{n} > /mnt/data/own-{n}")
    for n, fork in enumerate(copies):
        seen = ok(server, fork, "ls /mnt/data").split()
        others = [f for f in seen if f.startswith("own-") and f != f"own-{n}"]
        assert f"own-{n}" in seen and not others, (fork, seen)
        assert ok(server, fork, f"cat /mnt/data/own-{n}") == f"mine-{n}\n"
        procs = ok(server, fork, "ps -eo args")
        assert "http.server" not in procs and "own-" not in procs, procs
    assert "own-" not in ok(server, source, "ls /mnt/data")

    # As confined as the source: seccomp on, no capability, the same map's shape
    # over a host range of its own.
    mine = confinement(server, source)
    for other in [copy, *copies]:
        theirs = confinement(server, other)
        assert theirs["seccomp"] == "2" and int(theirs["cap_eff"], 16) == 0, theirs
        for key in ("seccomp", "cap_eff", "cap_bnd", "uid", "uid_map_shape"):
            assert theirs[key] == mine[key], (key, mine, theirs)
        assert theirs["uid_map_host"] != mine["uid_map_host"], (mine, theirs)

    # Another project's id is unknown to it.
    for method, path, body in [("GET", f"/snapshots/{snap['id']}", None),
                               ("DELETE", f"/snapshots/{snap['id']}", None),
                               ("POST", "/containers", {"name": "x", "snapshot_id": snap["id"]}),
                               ("POST", f"/containers/{source}/snapshots", {}),
                               ("POST", f"/containers/{source}/fork", {"count": 1})]:
        answer = v1(server, method, path, key=KEY_B, json=body)
        assert answer.status_code == 404, (method, path, answer.text)
    theirs = v1(server, "GET", "/snapshots", key=KEY_B, params={"limit": 100})
    assert snap["id"] not in [s["id"] for s in theirs.json()["data"]], theirs.text

    # It outlives its container.
    for gone in [source, *copies]:
        assert v1(server, "DELETE", f"/containers/{gone}").status_code == 200
    again = make_container(server, snapshot_id=snap["id"])
    assert ok(server, again["id"], "cat /mnt/data/kept.txt") == "kept\n"
    for gone in [copy, again["id"]]:
        assert v1(server, "DELETE", f"/containers/{gone}").status_code == 200
    deleted = v1(server, "DELETE", f"/snapshots/{snap['id']}")
    assert deleted.status_code == 200 and deleted.json()["deleted"] is True, deleted.text
    assert v1(server, "GET", f"/snapshots/{snap['id']}").status_code == 404
    refused = v1(server, "POST", "/containers", json={"name": "x", "snapshot_id": snap["id"]})
    assert refused.status_code == 404 and refused.json()["error"]["param"] == "snapshot_id", refused.text


def test_fork_counts_and_snapshot_fields_are_checked(server):
    source = make_container(server)["id"]
    for count in (0, 17):
        refused = v1(server, "POST", f"/containers/{source}/fork", json={"count": count})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "count", refused.text
    refused = snapshot(server, source, metadata={f"k{i}": "v" for i in range(17)})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "metadata", refused.text
    refused = snapshot(server, source, memory=True)
    assert refused.status_code == 400, refused.text
    assert v1(server, "DELETE", f"/containers/{source}").status_code == 200


def snapshot_cli(server, *args: str, key: str = KEY_A) -> subprocess.CompletedProcess:
    """`shellgate snapshot ARGS` against the server's API (its `/v1` base:
    the command accepts the suffix), with only these variables."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "SHELLGATE_BASE_URL": server.base_url, "SHELLGATE_API_KEY": key}
    return subprocess.run([str(BINARY), "snapshot", *args],
                          capture_output=True, text=True, env=env, timeout=300)


def test_the_snapshot_command_lists_takes_and_deletes_through_the_api(server):
    source = make_container(server)["id"]
    ok(server, source, "echo kept > /mnt/data/note")
    name = unique("cli")
    taken = snapshot_cli(server, "create", source, "--name", name)
    assert taken.returncode == 0, (taken.stdout, taken.stderr)
    fields = taken.stdout.strip().split("\t")
    assert len(fields) == 5 and fields[1] == name and fields[2] == source, taken.stdout
    snap_id = fields[0]
    shown = v1(server, "GET", f"/snapshots/{snap_id}")
    assert shown.status_code == 200 and shown.json()["name"] == name, shown.text
    listed = snapshot_cli(server, "list")
    assert listed.returncode == 0 and taken.stdout.strip() in listed.stdout.splitlines(), (listed.stdout, listed.stderr)
    # Another project's key lists only its own, and cannot delete this one.
    theirs = snapshot_cli(server, "list", key=KEY_B)
    assert theirs.returncode == 0 and snap_id not in theirs.stdout, (theirs.stdout, theirs.stderr)
    refused = snapshot_cli(server, "delete", snap_id, key=KEY_B)
    assert refused.returncode == 1 and "404" in refused.stderr, (refused.stdout, refused.stderr)
    deleted = snapshot_cli(server, "delete", snap_id)
    assert deleted.returncode == 0, (deleted.stdout, deleted.stderr)
    assert v1(server, "GET", f"/snapshots/{snap_id}").status_code == 404
    again = snapshot_cli(server, "list")
    assert again.returncode == 0 and snap_id not in again.stdout, (again.stdout, again.stderr)
    assert v1(server, "DELETE", f"/containers/{source}").status_code == 200


def engine_dir(server) -> Path:
    """The engine's data directory inside the server's."""
    nested = Path(server.data_dir) / "sandbox"
    return nested if nested.exists() else Path(server.data_dir)


def leftovers(server) -> list:
    snapshots = engine_dir(server) / "snapshots"
    return sorted(p.name for p in snapshots.glob("*")) if snapshots.exists() else []


@pytest.mark.single_box("reads its server's data directory (test_cluster_snapshots.py checks a cluster's quota)")
def test_the_projects_snapshot_count_and_bytes_are_bounded(fresh_server):
    server = fresh_server(max_snapshots_per_project=2, max_snapshot_bytes_per_project="1m")
    small = make_container(server)["id"]
    first = snapshot(server, small)
    assert first.status_code == 200, first.text
    big = make_container(server)["id"]
    ok(server, big, "head -c 2097152 /dev/urandom > /mnt/data/big")
    over = snapshot(server, big)
    assert over.status_code == 429, over.text
    error = over.json()["error"]
    assert error["code"] == "snapshot_bytes_exceeded" and "max_snapshot_bytes_per_project" in error["message"], error
    # The refused snapshot's files are gone at once.
    assert leftovers(server) == [first.json()["id"]], leftovers(server)
    assert snapshot(server, small).status_code == 200
    third = snapshot(server, small)
    assert third.status_code == 429 and third.json()["error"]["code"] == "too_many_snapshots", third.text
    # Another project's count is its own.
    theirs = make_container(server, key=KEY_B)["id"]
    assert snapshot(server, theirs, key=KEY_B).status_code == 200


@pytest.mark.single_box("kills its one server (test_cluster_snapshots.py kills a node mid-upload)")
def test_a_server_killed_mid_snapshot_leaves_nothing_half_made(fresh_server):
    killed_mid_snapshot(fresh_server())


@pytest.mark.single_box("kills its one server, on a data directory of its own")
def test_a_server_killed_mid_clone_leaves_nothing_half_made(reflink_server):
    killed_mid_snapshot(reflink_server)


def killed_mid_snapshot(server) -> None:
    """A server killed while it takes a snapshot (or just after) starts again
    with the snapshot whole or not there at all, and its source unfrozen."""
    source = make_container(server)["id"]
    # Enough files that the copy takes a while.
    ok(server, source, "for i in $(seq 1 400); do head -c 262144 /dev/urandom > /mnt/data/f$i; done")
    start_process(server, source, timeout_ms=300000,
                  command="while :; do date >> /mnt/data/ticks; sleep 0.05; done")
    outcome = {}

    def take():
        try:
            outcome["answer"] = snapshot(server, source)
        except requests.RequestException as error:
            outcome["error"] = error

    taker = threading.Thread(target=take)
    taker.start()
    assert wait_until(lambda: any(n.startswith(".creating-") for n in leftovers(server))
                      or "answer" in outcome, 120), leftovers(server)
    server.kill9()
    taker.join(timeout=60)
    restarted = Server(server.data_dir, **server.settings)
    restarted.port = server.port
    restarted.start()
    try:
        assert not [n for n in leftovers(restarted) if n.startswith(".")], leftovers(restarted)
        listed = v1(restarted, "GET", "/snapshots").json()["data"]
        if "answer" in outcome and outcome["answer"].status_code == 200:
            # Committed before the kill: kept whole, files and row.
            assert [s["id"] for s in listed] == [outcome["answer"].json()["id"]], listed
            assert leftovers(restarted) == [listed[0]["id"]], leftovers(restarted)
        else:
            assert listed == [] and leftovers(restarted) == [], (listed, leftovers(restarted))
        # The source was not left frozen: it runs commands again.
        assert ok(restarted, source, "ls /mnt/data | wc -l").strip() != "0"
        taken = snapshot(restarted, source)
        assert taken.status_code == 200, taken.text
        made = make_container(restarted, snapshot_id=taken.json()["id"])
        assert ok(restarted, made["id"], "ls /mnt/data/f400")
    finally:
        restarted.stop()


@pytest.fixture
def reflink_server(upstream):
    """A server whose data directory is an XFS file system with reflinks
    (a loop-mounted image the test makes and removes), as an operator's
    would be to share a snapshot's blocks with its copies; the tests using
    it are single_box."""
    tmp = Path(tempfile.mkdtemp(prefix="shellgate-py-xfs-"))
    # Traversable by every user, as a deployment's is.
    os.chmod(tmp, 0o755)
    image, data_dir = tmp / "xfs.img", tmp / "data"
    data_dir.mkdir()
    with open(image, "wb") as sparse:
        sparse.truncate(16 << 30)
    subprocess.run(["mkfs.xfs", "-q", "-m", "reflink=1", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(data_dir)], check=True)
    server = None
    try:
        os.chmod(data_dir, 0o755)
        # No warm container: once every container is gone, no loop device
        # may be left on the data directory's files.
        server = Server(data_dir, upstream_url=upstream.url, warm_containers=0).start()
        yield server
    finally:
        if server is not None:
            server.stop()
        # A server that failed to start leaves its log open in this process
        # (in the error's traceback): detach the mount then, gone once closed.
        if subprocess.run(["umount", str(data_dir)], check=False).returncode != 0:
            subprocess.run(["umount", "--lazy", str(data_dir)], check=True)
        subprocess.run(["rm", "-rf", str(tmp)], check=False)


def used_bytes(path: Path) -> int:
    """Bytes in use on the file system `path` is on."""
    stat = os.statvfs(path)
    return (stat.f_blocks - stat.f_bfree) * stat.f_frsize


def devices_of(data_dir: Path) -> tuple:
    """The mounts and loop devices that name a file under `data_dir`."""
    mounts = [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if f" {data_dir}/" in line]
    loops = [line for line in subprocess.run(["losetup", "--list", "--noheadings", "-O", "NAME,BACK-FILE"],
                                             capture_output=True, text=True, check=True).stdout.splitlines()
             if f"{data_dir}/" in line]
    return mounts, loops


@pytest.mark.single_box("reads its one server's data directory, a file system of its own")
def test_on_a_reflink_data_directory_copies_share_the_snapshots_blocks(reflink_server):
    server = reflink_server
    health = requests.get(f"http://127.0.0.1:{server.port}/healthz", timeout=30).json()
    assert health["snapshot_sharing"] == "reflink", health
    source = make_container(server)["id"]
    blob_sum = ok(server, source, "head -c 67108864 /dev/urandom > /mnt/data/blob && sync "
                                  "&& sha256sum < /mnt/data/blob").split()[0]
    start_process(server, source, timeout_ms=300000,
                  command="i=0; while :; do echo $i >> /mnt/data/appended; i=$((i+1)); sleep 0.01; done")
    assert wait_until(lambda: len(run(server, source, "cat /mnt/data/appended")["stdout"].split()) > 20, 60)

    before = used_bytes(server.data_dir)
    taken = snapshot(server, source)
    assert taken.status_code == 200, taken.text
    snap = taken.json()
    assert snap["size_bytes"] >= 64 << 20, snap
    kept = engine_dir(server) / "snapshots" / snap["id"]
    assert (kept / "disk.img").is_file() and not (kept / "disk").exists(), sorted(kept.iterdir())
    forked = v1(server, "POST", f"/containers/{source}/fork", json={"count": 3})
    assert forked.status_code == 200, forked.text
    copies = [c["id"] for c in forked.json()["data"]]
    restored = make_container(server, snapshot_id=snap["id"])["id"]
    copies.append(restored)
    # The snapshot, the fork's own and four copies of a 64 MiB disk: the
    # blocks are the source's, shared (less than one copy's worth added).
    grown = used_bytes(server.data_dir) - before
    assert grown < 64 << 20, f"the snapshot and its copies took {grown} bytes"

    source_size = ok(server, source, "df -B1 --output=size /mnt/data | tail -1")
    for n, copy in enumerate(copies):
        assert ok(server, copy, "sha256sum < /mnt/data/blob").split()[0] == blob_sum
        lines = ok(server, copy, "cat /mnt/data/appended").split("\n")
        assert lines[-1] == "", f"the copy's last line is torn: {lines[-3:]}"
        numbers = [int(n) for n in lines[:-1]]
        assert numbers == list(range(len(numbers))), lines[-5:]
        # Its own file system, of the source's size: its own quota.
        assert ok(server, copy, "df -B1 --output=size /mnt/data | tail -1") == source_size
        ok(server, copy, f"echo mine-{n} > /mnt/data/own-{n} && head -c 1048576 /dev/urandom >> /mnt/data/blob")
    for n, copy in enumerate(copies):
        seen = ok(server, copy, "ls /mnt/data").split()
        assert [f for f in seen if f.startswith("own-")] == [f"own-{n}"], (copy, seen)
        procs = ok(server, copy, "ps -eo args")
        assert "appended" not in procs, procs
    assert "own-" not in ok(server, source, "ls /mnt/data")
    assert ok(server, source, "sha256sum < /mnt/data/blob").split()[0] == blob_sum

    # The snapshot goes while its copies live: they are files of their own.
    deleted = v1(server, "DELETE", f"/snapshots/{snap['id']}")
    assert deleted.status_code == 200, deleted.text
    assert not kept.exists()
    for n, copy in enumerate(copies):
        assert ok(server, copy, f"cat /mnt/data/own-{n}") == f"mine-{n}\n"
        ok(server, copy, "head -c 1048576 /dev/urandom > /mnt/data/later && sync")

    # A copy of a copy, and nothing left behind once all are gone.
    again = snapshot(server, copies[0])
    assert again.status_code == 200, again.text
    grandchild = make_container(server, snapshot_id=again.json()["id"])["id"]
    assert ok(server, grandchild, "cat /mnt/data/own-0") == "mine-0\n"
    for gone in [source, grandchild, *copies]:
        assert v1(server, "DELETE", f"/containers/{gone}").status_code == 200
    assert v1(server, "DELETE", f"/snapshots/{again.json()['id']}").status_code == 200
    containers = engine_dir(server) / "containers"
    assert wait_until(lambda: not [p for p in containers.iterdir() if not p.name.startswith(".")], 60), \
        sorted(containers.iterdir())
    assert wait_until(lambda: devices_of(Path(server.data_dir)) == ([], []), 60), devices_of(Path(server.data_dir))
