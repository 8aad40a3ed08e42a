"""Upgrades keep data: the previous release (release/previous, built by
scripts/previous-release and cached) serves a data directory and a store,
SQLite and then Postgres, filled through its API; it stops, and this
tree's binary starts on the same data directory and settings. Every read
made before the upgrade answers the same after it (fields added by the
new version aside), every key is still listed, the old key opens the
new server, and the container's files are still there for a command.
A cluster of the previous release is upgraded one server at a time
(the replicas, then the nodes) under a client that retries: it loses
no request (the cluster lane runs it, SHELLGATE_TEST_CLUSTER=1).

The reads go through the API, never the tables, so the test knows nothing
of the schema: a release that adds tables or columns runs it unchanged."""

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import openai
import pytest

from conftest import (BINARY, CLUSTER_MODE, KEY_A, ROOT, Server, exec_commands, start_cluster,
                      wait_until)
from test_skills import skill_zip

SINGLE_BOX = pytest.mark.single_box("a single box's data directory, upgraded in place")

# Fields a restart changes by design: a container comes back suspended,
# and its activity times are the engine's.
RESTART_CHANGES = {"status", "last_active_at"}


def previous_release() -> Path:
    """The previous release's binary (built on first use, then cached)."""
    built = subprocess.run([str(ROOT / "scripts" / "previous-release")], capture_output=True,
                           text=True, timeout=3600)
    assert built.returncode == 0, f"building the previous release failed:\n{built.stderr[-4000:]}"
    return Path(built.stdout.strip().splitlines()[-1])


def get(client: openai.OpenAI, path: str):
    return client.get(path, cast_to=object)


def content(client: openai.OpenAI, path: str) -> bytes:
    import httpx

    return client.get(path, cast_to=httpx.Response).content


def fill(client: openai.OpenAI) -> dict:
    """Makes one of each kind of thing the API keeps; returns their ids."""
    container = client.containers.create(name="kept", memory_limit="1g")
    note = exec_commands(client, container.id, ["echo 'written before the upgrade' > /mnt/data/note.txt"])
    assert note["output"][0]["outcome"]["exit_code"] == 0, note
    container_file = client.containers.files.create(
        container.id, file=("uploaded.txt", io.BytesIO(b"a container file\n")))
    uploaded = client.files.create(file=("kept.jsonl", io.BytesIO(b'{"kept": true}\n')), purpose="user_data")
    tools = [{"type": "shell", "environment": {"type": "container_reference", "container_id": container.id}}]
    first = client.responses.create(model="scripted", tools=tools, input="Execute: cat /mnt/data/note.txt")
    assert first.status == "completed", first
    second = client.responses.create(model="scripted", tools=tools, previous_response_id=first.id,
                                     input="Execute: ls /mnt/data")
    assert second.status == "completed", second
    skill = client.skills.create(files=("kept.zip", skill_zip(name="kept-skill"), "application/zip"))
    return {"container": container.id, "container_file": container_file.id, "file": uploaded.id,
            "responses": [first.id, second.id], "skill": skill.id}


def reads(client: openai.OpenAI, made: dict) -> dict:
    """What the API answers about everything `fill` made."""
    container, skill = made["container"], made["skill"]
    answers = {
        "container": get(client, f"/containers/{container}"),
        "containers": get(client, "/containers?limit=100"),
        "container files": get(client, f"/containers/{container}/files"),
        "container file": get(client, f"/containers/{container}/files/{made['container_file']}"),
        "container file content": content(
            client, f"/containers/{container}/files/{made['container_file']}/content"),
        "files": get(client, "/files"),
        "file": get(client, f"/files/{made['file']}"),
        "file content": content(client, f"/files/{made['file']}/content"),
        "skills": get(client, "/skills"),
        "skill": get(client, f"/skills/{skill}"),
        "skill versions": get(client, f"/skills/{skill}/versions"),
        "skill content": content(client, f"/skills/{skill}/content"),
    }
    for response in made["responses"]:
        answers[f"response {response}"] = get(client, f"/responses/{response}")
        answers[f"input items {response}"] = get(client, f"/responses/{response}/input_items")
    # The usage a restart cannot change: tokens and responses (sandbox
    # seconds go on accruing while a container runs).
    usage = get(client, "/usage")
    answers["usage"] = {name: value for name, value in usage.items() if "token" in name or name == "responses"}
    return without_restart_changes(answers)


def without_restart_changes(value):
    if isinstance(value, dict):
        return {key: without_restart_changes(item) for key, item in value.items() if key not in RESTART_CHANGES}
    if isinstance(value, list):
        return [without_restart_changes(item) for item in value]
    return value


def still_served(before, after) -> bool:
    """Whether `after` answers everything `before` did, the same: a newer
    version may add fields (a minor release may, docs/operator/upgrades.md),
    never drop or change one."""
    if isinstance(before, dict):
        return isinstance(after, dict) and all(
            key in after and still_served(value, after[key]) for key, value in before.items())
    if isinstance(before, list):
        return isinstance(after, list) and len(before) == len(after) and all(
            still_served(old, new) for old, new in zip(before, after))
    return before == after


def differences(before: dict, after: dict) -> list:
    return [f"{name}:\n  before: {json.dumps(before[name], default=repr)[:1500]}\n"
            f"  after:  {json.dumps(after.get(name), default=repr)[:1500]}"
            for name in before if not still_served(before[name], after.get(name))]


def key_ids(listing: str) -> set:
    """The key ids (`key_` and 16 hex digits) `keys list` printed."""
    return set(re.findall(r"\bkey_[0-9a-f]{16}\b", listing))


def upgrade_in_place(upstream, data_dir: Path, **settings):
    """The previous release fills `data_dir` (and its store), then this
    tree's binary serves the same: the same answers, the same keys."""
    previous = previous_release()
    old = Server(data_dir, binary=previous, upstream_url=upstream.url, **settings).start()
    try:
        client = old.client(KEY_A)
        made = fill(client)
        key = old.run_cli("keys", "create", "--project", "upgraded").stdout.strip().splitlines()[-1]
        keys_before = old.run_cli("keys", "list").stdout
        kept_client = old.client(key)
        kept = kept_client.containers.create(name="under-a-created-key")
        before = reads(client, made)
    finally:
        old.stop()
    assert old.process.returncode == 0, f"the previous release did not stop cleanly:\n{old.log.read_text()[-4000:]}"

    new = Server(data_dir, upstream_url=upstream.url, **settings)
    # The same address, as an upgrade keeps it (URLs in the answers stay comparable).
    new.port = old.port
    new.start()
    try:
        client = new.client(KEY_A)
        after = reads(client, made)
        log = new.log.read_text()[-4000:]
        assert not differences(before, after), "\n".join(differences(before, after)) + f"\n{log}"
        listed = new.run_cli("keys", "list").stdout
        assert key_ids(keys_before) and key_ids(keys_before) <= key_ids(listed), \
            f"keys before:\n{keys_before}\nafter:\n{listed}\n{log}"
        assert new.client(key).containers.retrieve(kept.id).name == "under-a-created-key", log
        # The container's own files, for a command after the upgrade.
        note = exec_commands(client, made["container"], ["cat /mnt/data/note.txt"])["output"][0]
        assert note["stdout"] == "written before the upgrade\n", f"{note}\n{log}"
        # And the upgraded server goes on writing.
        follow_up = client.responses.create(
            model="scripted", previous_response_id=made["responses"][-1], input="Execute: true",
            tools=[{"type": "shell", "environment": {"type": "container_reference",
                                                      "container_id": made["container"]}}])
        assert follow_up.status == "completed", f"{follow_up}\n{log}"
    finally:
        new.stop()


@pytest.fixture
def data_dir():
    directory = Path(tempfile.mkdtemp(prefix="shellgate-py-upgrade-"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@SINGLE_BOX
def test_an_upgrade_keeps_a_single_box_on_sqlite(upstream, data_dir):
    upgrade_in_place(upstream, data_dir)


@SINGLE_BOX
def test_an_upgrade_keeps_a_single_box_on_postgres(upstream, data_dir):
    url = os.environ.get("SHELLGATE_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("no Postgres (SHELLGATE_TEST_POSTGRES_URL: scripts/test starts one)")
    # The test server's certificate is signed by the run's own CA.
    ca = {"database_ca_file": os.environ["SHELLGATE_TEST_POSTGRES_CA"]} \
        if os.environ.get("SHELLGATE_TEST_POSTGRES_CA") else {}
    upgrade_in_place(upstream, data_dir, database_url=url,
                     database_schema=f"upgrade_{os.getpid()}_{data_dir.name.rsplit('-', 1)[-1]}".lower(), **ca)
    assert not list(data_dir.glob("shellgate.db*")), "a server with `database_url` kept a SQLite store"



@pytest.mark.single_box("a single box's own SQLite store, set to a newer schema")
def test_a_store_a_newer_version_migrated_is_refused_saying_so(data_dir):
    """Migrations only go forward: a server whose store is at a schema
    version past its own migrations (a newer shellgate's) refuses to
    start, naming the versions and the way back, and leaves it as it was."""
    import sqlite3

    store = data_dir / "shellgate.db"
    with contextlib.closing(sqlite3.connect(store)) as database:
        database.execute("PRAGMA user_version = 100000")
        database.commit()
    started = subprocess.run([str(BINARY), "--data-dir", str(data_dir), "serve", "--listen", "127.0.0.1:0"],
                             capture_output=True, text=True, timeout=120,
                             env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                  "SHELLGATE_BUILD_DEFAULT_IMAGE": "false"})
    assert started.returncode != 0, f"a server started on a newer schema:\n{started.stderr[-3000:]}"
    assert "schema is version 100000, newer than this shellgate's" in started.stderr \
        and "restore the backup" in started.stderr, started.stderr[-3000:]
    with contextlib.closing(sqlite3.connect(store)) as database:
        assert database.execute("PRAGMA user_version").fetchone() == (100000,)


# How long the client retries one request before it counts it lost: far
# beyond a server's restart on a loaded machine.
RETRY_BOUND_SECS = 180


class RetryingClient(threading.Thread):
    """Writes a file per request into a container, through the replicas in
    turn, until told to stop: each request retried (on the other replica
    first) until it succeeds, or counted lost after RETRY_BOUND_SECS. The
    request is idempotent (`echo N > request-N`), so a retry of one that
    ran is harmless."""

    def __init__(self, cluster, container_id: str):
        super().__init__(daemon=True)
        self.cluster = cluster
        self.container_id = container_id
        self.stopping = threading.Event()
        self.done = []
        self.lost = []
        self.retries = 0

    def run(self):
        number = 0
        while not self.stopping.is_set():
            number += 1
            self.request(number)

    def request(self, number: int):
        started = time.monotonic()
        attempt = 0
        last = None
        while time.monotonic() - started < RETRY_BOUND_SECS:
            replica = self.cluster.replicas[(number + attempt) % len(self.cluster.replicas)]
            attempt += 1
            try:
                client = self.cluster.client(replica, key=KEY_A, timeout=30)
                answer = exec_commands(client, self.container_id,
                                       [f"echo {number} > /mnt/data/request-{number}"])
                outcome = answer["output"][0]["outcome"]
                if outcome.get("exit_code") == 0:
                    self.done.append(number)
                    return
                last = answer
            except (openai.APIError, OSError) as error:
                last = repr(error)
            self.retries += 1
            # A retry's pause: the server it failed on is restarting.
            time.sleep(0.2)
        self.lost.append((number, last))


@pytest.mark.fresh_server
def test_a_rolling_upgrade_of_a_cluster_loses_no_retried_request(upstream):
    if not CLUSTER_MODE:
        pytest.skip("a cluster of its own: the cluster lane runs it (SHELLGATE_TEST_CLUSTER=1)")
    import conftest

    if conftest._session_cluster_up:
        pytest.skip("a cluster of its own cannot start beside the session's cluster: run the "
                    "fresh_server tests apart (-m fresh_server)")
    previous = previous_release()
    # A node being restarted is not declared lost meanwhile: its containers
    # wait for it (a rolling upgrade restarts each node once).
    cluster = start_cluster(upstream, binary=previous, node_lost_after_secs="300")
    try:
        client = cluster.client(0, key=KEY_A)
        container = client.containers.create(name="rolled", memory_limit="1g")
        kept = client.files.create(file=("kept.txt", io.BytesIO(b"kept across the cluster\n")),
                                   purpose="user_data")
        writer = RetryingClient(cluster, container.id)
        writer.start()
        assert wait_for_requests(writer, 3), f"no request went through before the upgrade:\n{cluster.logs()}"
        for replica in cluster.replicas:
            replica.stop()
            replica.replace_binary(BINARY)
            replica.start().wait_healthy()
            assert wait_for_requests(writer, 3), f"{replica.name} upgraded, then no request:\n{cluster.logs()}"
        for name, node in cluster.nodes.items():
            node.stop()
            node.replace_binary(BINARY)
            node.start().wait_healthy()
            cluster.wait_nodes(lambda nodes: {n["id"]: n["status"] for n in nodes}.get(name) == "ready",
                               120, f"{name} ready after its upgrade")
            assert wait_for_requests(writer, 3), f"node {name} upgraded, then no request:\n{cluster.logs()}"
        writer.stopping.set()
        writer.join(RETRY_BOUND_SECS + 60)
        assert not writer.is_alive(), f"the client did not stop:\n{cluster.logs()}"
        assert not writer.lost, f"requests lost (number, last answer): {writer.lost}\n{cluster.logs()}"
        servers = cluster.replicas + list(cluster.nodes.values())
        assert all(server.binary == BINARY for server in servers), [(s.name, s.binary) for s in servers]
        # Every request that succeeded left its file, and what was made
        # before the upgrade is served by the upgraded cluster.
        listing = exec_commands(cluster.client(1, key=KEY_A), container.id, ["ls /mnt/data"])["output"][0]["stdout"]
        missing = [n for n in writer.done if f"request-{n}" not in listing.split()]
        assert not missing, f"requests answered but not written: {missing}\n{listing}"
        assert content(cluster.client(1, key=KEY_A), f"/files/{kept.id}/content") == b"kept across the cluster\n"
        print(f"{len(writer.done)} requests, {writer.retries} retries during the rolling upgrade")
    finally:
        cluster.stop()


def wait_for_requests(writer: RetryingClient, count: int) -> bool:
    """Whether `count` more requests succeed before one is lost."""
    target = len(writer.done) + count
    wait_until(lambda: len(writer.done) >= target or writer.lost, RETRY_BOUND_SECS, 0.1)
    return len(writer.done) >= target and not writer.lost
