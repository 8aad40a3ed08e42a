"""Idle suspension, expiry and crash recovery of a real server."""

import os
import subprocess
import threading
import time

import openai
import pytest

from conftest import exec_commands, processes_matching, wait_until


def test_idle_containers_suspend_and_wake_with_their_files(fresh_server):
    server = fresh_server(idle_suspend_after_secs=2, sweep_interval_secs=1)
    client = server.client()
    container = client.containers.create(name="sleepy")
    exec_commands(client, container.id, ["echo kept > kept.txt", "nohup sleep 1000 >/dev/null 2>&1 &"])
    assert wait_until(lambda: client.containers.retrieve(container.id).status == "suspended", 15)
    woken = exec_commands(client, container.id, ["cat kept.txt", "pgrep -c sleep || true"])
    assert woken["output"][0]["stdout"] == "kept\n"
    assert woken["output"][1]["stdout"].strip() == "0", "processes are not restored on wake"
    assert client.containers.retrieve(container.id).status == "running"
    usage = client.get("/usage", cast_to=object)
    # Two sessions (create, wake), each billed at least 30 seconds.
    assert usage["sandbox_seconds"] >= 60


@pytest.mark.single_box("reads the container's disk in its one server's data directory")
def test_expired_containers_and_their_files_are_deleted(fresh_server):
    server = fresh_server(sweep_interval_secs=1)
    client = server.client()
    container = client.containers.create(name="brief", expires_after={"anchor": "last_active_at", "minutes": 1})
    exec_commands(client, container.id, ["echo x > f"])
    last_active_at = client.containers.retrieve(container.id).last_active_at

    def gone():
        try:
            client.containers.retrieve(container.id)
            return False
        except openai.NotFoundError:
            return True

    # Gone once its minute of idleness passed, and not before (that it is
    # kept until the very second is the in-process clock test's).
    assert wait_until(gone, 90)
    assert time.time() >= last_active_at + 60
    disk = server.data_dir / "sandbox" / "containers" / container.id
    assert not disk.exists()


def parent_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def alive(pid):
    """Exists and is not a zombie (a dead process not yet reaped)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def sandbox_inits(parent=None):
    """Host pids of sandbox init processes (of one server, if given)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm") as f:
                    if (
                        f.read().strip() == "sandbox-init"
                        and alive(entry)
                        and (parent is None or parent_of(entry) == parent)
                    ):
                        pids.append(int(entry))
            except OSError:
                pass
    return pids


@pytest.mark.single_box("kills its one server with -9 (a cluster's node killed so is test_cluster.py's)")
def test_kill_9_mid_command_loses_nothing(fresh_server):
    server = fresh_server()
    client = server.client()
    containers = [client.containers.create(name=f"durable-{i}") for i in range(3)]
    for i, container in enumerate(containers):
        exec_commands(client, container.id, [f"echo data-{i} > /mnt/data/d.txt"])
    inits_before = set(sandbox_inits(parent=server.process.pid))
    assert len(inits_before) >= 3
    running = threading.Thread(
        target=lambda: pytest.raises(Exception, exec_commands, client, containers[0].id, ["sleep 61"]),
        daemon=True,
    )
    running.start()
    assert wait_until(lambda: processes_matching("sleep 61"), 30), "the command never started"
    server.kill9()
    running.join(timeout=10)
    # The sandboxes died with the server.
    assert wait_until(lambda: not (set(sandbox_inits()) & inits_before), 10), "sandbox processes outlived the server"
    server.start()
    listed = {c.id for c in client.containers.list(name=None)}
    for i, container in enumerate(containers):
        assert container.id in listed
        assert client.containers.retrieve(container.id).status == "suspended"
        out = exec_commands(client, container.id, ["cat /mnt/data/d.txt"])
        assert out["output"][0]["stdout"] == f"data-{i}\n"
    # No init is orphaned: an orphan is adopted by the host's pid 1. (Other
    # inits on the host may belong to other servers, or to test binaries
    # that run an engine in process: their parent is whatever started them.)
    orphans = []
    for pid in sandbox_inits():
        try:
            if parent_of(pid) == 1:
                orphans.append(pid)
        except OSError:
            continue  # it ended while we looked
    assert not orphans, f"inits adopted by pid 1: {orphans}"
    leftovers = subprocess.run(["findmnt", "-rn", "-o", "TARGET"], capture_output=True, text=True).stdout
    assert str(server.data_dir) not in leftovers


@pytest.mark.single_box("edits its one server's data directory between runs")
def test_a_restart_serves_first_and_reconciles_the_directories_after(fresh_server):
    """What the store and the disk disagree on is settled while serving: a
    container whose directory is gone is not found (a 404) and leaves the
    listing, a directory no row names goes, a create made meanwhile is
    kept, and a container with its directory wakes with its files."""
    server = fresh_server()
    client = server.client()
    kept = client.containers.create(name="kept")
    exec_commands(client, kept.id, ["echo kept > /mnt/data/k.txt"])
    gone = client.containers.create(name="gone")
    server.stop()
    containers = server.data_dir / "sandbox" / "containers"
    subprocess.run(["rm", "-rf", str(containers / gone.id)], check=True)
    # A directory no row names (its row deleted, its disk left).
    stray = containers / "cntr_0123456789abcdef0123456789abcdef"
    subprocess.run(["cp", "-a", str(containers / kept.id), str(stray)], check=True)
    server.start()
    made = client.containers.create(name="made-while-reconciling")
    with pytest.raises(openai.NotFoundError):
        exec_commands(client, gone.id, ["true"])
    assert wait_until(lambda: gone.id not in {c.id for c in client.containers.list(name=None)}, 30), \
        "a container whose directory is gone stayed listed"
    assert wait_until(lambda: not stray.exists(), 30), "a directory no row names stayed"
    assert wait_until(lambda: "reconciled (in the background)" in server.log.read_text(), 30)
    out = exec_commands(client, kept.id, ["cat /mnt/data/k.txt"])
    assert out["output"][0]["stdout"] == "kept\n"
    assert exec_commands(client, made.id, ["echo ok"])["output"][0]["stdout"] == "ok\n"
    assert (containers / made.id).is_dir()


def test_suspended_containers_files_are_listed_and_downloaded_without_waking(fresh_server):
    server = fresh_server(idle_suspend_after_secs=1, sweep_interval_secs=1)
    client = server.client()
    container = client.containers.create(name="asleep")
    exec_commands(client, container.id, ["echo report > report.txt"])
    assert wait_until(lambda: client.containers.retrieve(container.id).status == "suspended", 15)
    before = client.containers.retrieve(container.id)
    billed = client.get("/usage", cast_to=object)["sandbox_seconds"]
    # Once the clock is past its last activity (second resolution), a
    # wrongful renewal by the reads below would show in last_active_at.
    assert wait_until(lambda: int(time.time()) > before.last_active_at, 5)
    files = list(client.containers.files.list(container.id))
    report = next(f for f in files if f.path == "/mnt/data/report.txt")
    data = client.containers.files.content.retrieve(report.id, container_id=container.id).read()
    assert data == b"report\n"
    after = client.containers.retrieve(container.id)
    assert after.status == "suspended"
    assert after.last_active_at == before.last_active_at
    assert client.get("/usage", cast_to=object)["sandbox_seconds"] == billed


def test_quotas_answer_rate_limit_errors_naming_the_limit(fresh_server):
    server = fresh_server(max_running_containers_per_project=1)
    client = server.client()
    client.containers.create(name="only")
    with pytest.raises(openai.RateLimitError) as refused:
        client.containers.create(name="one too many")
    assert refused.value.code == "too_many_running_containers"
    assert "max_running_containers_per_project" in refused.value.message


def test_files_expire_after_what_the_upload_asked(server, client):
    file = client.files.create(
        file=("short.txt", b"brief"),
        purpose="user_data",
        expires_after={"anchor": "created_at", "seconds": 3600},
    )
    assert file.expires_at == file.created_at + 3600
    assert client.files.retrieve(file.id).expires_at == file.expires_at
    with pytest.raises(openai.BadRequestError) as bad:
        client.files.create(
            file=("x.txt", b"x"),
            purpose="user_data",
            expires_after={"anchor": "created_at", "seconds": 5},
        )
    assert bad.value.param == "expires_after.seconds"
    client.files.delete(file.id)


@pytest.mark.single_box("kills its one server with -9 (a cluster's node killed so is test_cluster.py's)")
def test_kill_9_mid_response_leaves_it_failed_never_in_progress(fresh_server):
    server = fresh_server()
    client = server.client()
    response = client.responses.create(
        model="scripted",
        tools=[{"type": "shell", "environment": {"type": "container_auto"}}],
        input="Execute: sleep 62",
        background=True,
    )
    assert wait_until(lambda: client.responses.retrieve(response.id).status == "in_progress", 10)
    assert wait_until(lambda: processes_matching("sleep 62"), 30), "the command never started"
    server.kill9()
    server.start()
    after = client.responses.retrieve(response.id)
    assert after.status == "failed"
    assert "stopped" in after.error.message
