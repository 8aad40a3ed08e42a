"""E2B's calls about a running sandbox through the unmodified `e2b` SDK,
against a real `shellgate serve`: its metrics (`get_metrics`, sampled from
its cgroup and disk), a refresh of its timeout, its log (its create and
the processes it ran), and file metadata kept as `user.e2b.*` extended
attributes."""

import datetime

import pytest

from conftest import wait_until

e2b_sdk = pytest.importorskip("e2b")
from e2b import Sandbox  # noqa: E402
from e2b.api.client.api.sandboxes import (  # noqa: E402
    get_sandboxes_metrics,
    get_sandboxes_sandbox_id_logs,
    get_v_2_sandboxes_sandbox_id_logs,
    post_sandboxes_sandbox_id_refreshes,
)
from e2b.api.client.models import LogLevel, LogsDirection, SandboxRefreshRequest  # noqa: E402
from e2b.api.client_sync import get_api_client  # noqa: E402
from e2b.connection_config import ConnectionConfig  # noqa: E402
from e2b.exceptions import InvalidArgumentException, SandboxException  # noqa: E402
from e2b.sandbox.filesystem.filesystem import WriteEntry  # noqa: E402

MIB = 1 << 20


@pytest.fixture
def sbx(e2b):
    sandbox = Sandbox.create(timeout=300)
    yield sandbox
    sandbox.kill()


def api():
    return get_api_client(ConnectionConfig())


def test_metrics_are_the_sandboxs_own_cgroup_and_disk(sbx):
    # Memory a process holds shows in the sandbox's own counter.
    sbx.commands.run(
        "python3 -c \"import time; b = bytearray(96 << 20); open('/tmp/ready', 'w').close(); "
        "time.sleep(600)\"",
        background=True,
    )
    assert wait_until(lambda: sbx.files.exists("/tmp/ready"), 60)
    sbx.files.write("/home/user/blob.bin", b"\0" * (8 * MIB))

    # A sample is up to the sampler's interval (5 s) old, as E2B's are: one
    # taken before the write shows the memory but not yet the file.
    def holding():
        latest = sbx.get_metrics()[-1]
        return latest if latest.mem_used >= 96 * MIB and latest.disk_used >= 8 * MIB else None

    assert wait_until(holding, 60)
    latest = holding() or sbx.get_metrics()[-1]
    assert latest.cpu_count >= 1
    assert 0 <= latest.cpu_used_pct <= 100
    assert latest.mem_total >= latest.mem_used
    assert 8 * MIB <= latest.disk_used < latest.disk_total
    # A window: samples inside it only, oldest first.
    everything = sbx.get_metrics()
    assert [m.timestamp for m in everything] == sorted(m.timestamp for m in everything)
    past = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=1)
    assert sbx.get_metrics(start=past, end=past + datetime.timedelta(seconds=1)) == []
    # The static form, and E2B's listing of several sandboxes' latest.
    assert Sandbox.get_metrics(sbx.sandbox_id)
    listed = get_sandboxes_metrics.sync_detailed(client=api(), sandbox_ids=[sbx.sandbox_id, "cntr_nope"])
    assert listed.status_code == 200, listed.content
    assert set(listed.parsed.sandboxes) == {sbx.sandbox_id}


def test_a_refresh_extends_the_timeout_and_never_shortens_it(sbx):
    before = sbx.get_info().end_at
    shorter = post_sandboxes_sandbox_id_refreshes.sync_detailed(
        sbx.sandbox_id, client=api(), body=SandboxRefreshRequest(duration=30)
    )
    assert shorter.status_code == 204, shorter.content
    assert sbx.get_info().end_at == before
    longer = post_sandboxes_sandbox_id_refreshes.sync_detailed(
        sbx.sandbox_id, client=api(), body=SandboxRefreshRequest(duration=3600)
    )
    assert longer.status_code == 204, longer.content
    assert (sbx.get_info().end_at - before).total_seconds() >= 3000
    too_long = post_sandboxes_sandbox_id_refreshes.sync_detailed(
        sbx.sandbox_id, client=api(), body=SandboxRefreshRequest(duration=3601)
    )
    assert too_long.status_code == 400, too_long.content


def test_the_log_holds_the_create_and_each_process(sbx):
    sbx.commands.run("echo logged-one")
    with pytest.raises(Exception):
        sbx.commands.run("echo logged-two; exit 3")

    def entries(**query):
        answer = get_v_2_sandboxes_sandbox_id_logs.sync_detailed(sbx.sandbox_id, client=api(), **query)
        assert answer.status_code == 200, answer.content
        return answer.parsed.logs

    # The audit is written shortly after a process ends.
    assert wait_until(lambda: any("exit 3" in e.message for e in entries()), 30)
    logs = entries()
    assert logs[0].fields.additional_properties["event"] == "sandbox.created", logs[0]
    assert [e.timestamp for e in logs] == sorted(e.timestamp for e in logs)
    failed = [e for e in logs if e.fields.additional_properties.get("exitCode") == "3"]
    assert len(failed) == 1 and failed[0].level == LogLevel.WARN, logs
    started = [e for e in logs if e.fields.additional_properties.get("event") == "process.start"]
    assert any("logged-one" in e.message for e in started), logs
    # Filters: level, search, backward from the newest.
    assert [e.message for e in entries(level=LogLevel.WARN)] == [failed[0].message]
    assert all("logged-one" in e.message for e in entries(search="logged-one"))
    newest = entries(direction=LogsDirection.BACKWARD, limit=1)
    assert newest[0].message == logs[-1].message
    # The older call: lines and entries from `start` (milliseconds).
    old = get_sandboxes_sandbox_id_logs.sync_detailed(sbx.sandbox_id, client=api(), start=0, limit=2)
    assert old.status_code == 200, old.content
    assert old.parsed.logs[0].line.startswith("sandbox created from template")
    assert len(old.parsed.log_entries) == 2


def test_file_metadata_is_kept_with_the_file(sbx):
    metadata = {"author": "mish", "purpose": "upload"}
    written = sbx.files.write("meta.txt", "content", metadata=metadata)
    assert written.metadata == metadata
    assert sbx.files.get_info("meta.txt").metadata == metadata
    octet = sbx.files.write("meta-octet.txt", "content", metadata=metadata, use_octet_stream=True)
    assert octet.metadata == metadata
    assert sbx.files.get_info("meta-octet.txt").metadata == metadata
    # None without; several files share the map; listing and rename keep it.
    assert sbx.files.write("plain.txt", "x").metadata is None
    assert sbx.files.get_info("plain.txt").metadata is None
    many = sbx.files.write_files(
        [WriteEntry(path="m1.txt", data="1"), WriteEntry(path="m2.txt", data="2")], metadata={"source": "suite"}
    )
    assert [w.metadata for w in many] == [{"source": "suite"}] * 2
    assert sbx.files.get_info("m2.txt").metadata == {"source": "suite"}
    sbx.files.make_dir("listed")
    sbx.files.write("listed/a.txt", "a", metadata={"tag": "listed"})
    assert [e.metadata for e in sbx.files.list("listed")] == [{"tag": "listed"}]
    assert sbx.files.rename("meta.txt", "renamed.txt").metadata == metadata
    # Overwriting without metadata clears it.
    assert sbx.files.write("renamed.txt", "second").metadata is None
    assert sbx.files.get_info("renamed.txt").metadata is None
    # Set inside the sandbox as a `user.e2b.` attribute: shown too.
    sbx.files.write("xattr.txt", "x")
    sbx.commands.run(
        "python3 -c \"import os; os.setxattr('/home/user/xattr.txt', 'user.e2b.author', b'mish')\""
    )
    assert sbx.files.get_info("xattr.txt").metadata == {"author": "mish"}
    # Keys are lowercased; too much is refused with E2B's 400.
    assert sbx.files.write("case.txt", "x", metadata={"Author": "A"}).metadata == {"author": "A"}
    with pytest.raises((InvalidArgumentException, SandboxException)):
        sbx.files.write("big.txt", "x", metadata={"k": "v" * 5000})
    assert not sbx.files.exists("big.txt")


def test_refresh_and_metrics_of_another_projects_sandbox_are_not_found(sbx, server):
    import requests

    from conftest import E2B_KEY_B

    root = f"http://{server.host}:{server.port}"
    headers = {"X-API-KEY": E2B_KEY_B}
    for method, path in [
        ("GET", f"/sandboxes/{sbx.sandbox_id}/metrics"),
        ("GET", f"/v2/sandboxes/{sbx.sandbox_id}/logs"),
        ("POST", f"/sandboxes/{sbx.sandbox_id}/refreshes"),
    ]:
        answer = requests.request(method, root + path, headers=headers, json={}, timeout=30)
        assert answer.status_code == 404, (path, answer.text)
        assert answer.json()["code"] == 404
    # Still alpha's, running.
    assert sbx.is_running()
