"""E2B's snapshots and forks through the unmodified `e2b` SDK, over
shellgate's own snapshots: a sandbox snapshotted and then written to, a
sandbox created from the snapshot (the files as they were at the
snapshot), the snapshot listed, found by sandbox and by name, and deleted;
a sandbox forked (each copy holds the source's files and diverges on its
own); and another project's snapshot, which is E2B's 404 everywhere."""

import uuid

import pytest

from conftest import E2B_KEY_B

e2b_sdk = pytest.importorskip("e2b")
from e2b import Sandbox  # noqa: E402
from e2b.exceptions import SandboxException, SandboxNotFoundException  # noqa: E402


PATH = "/home/user/state.txt"


def listed_ids(**query) -> list:
    return [s.snapshot_id for s in Sandbox.list_snapshots(**query).next_items()]


def test_a_sandbox_made_from_a_snapshot_holds_the_files_as_they_were(server, e2b):
    sandbox = Sandbox.create(timeout=300)
    name = f"snap-{uuid.uuid4().hex[:12]}"
    try:
        sandbox.files.write(PATH, "at the snapshot")
        snapshot = sandbox.create_snapshot(name=name)
        assert snapshot.snapshot_id.startswith("snap_"), snapshot
        assert name in snapshot.names, snapshot
        sandbox.files.write(PATH, "after the snapshot")

        assert snapshot.snapshot_id in listed_ids(), listed_ids()
        assert listed_ids(sandbox_id=sandbox.sandbox_id) == [snapshot.snapshot_id]
        assert listed_ids(name=name) == [snapshot.snapshot_id]
        assert listed_ids(name=f"{name}-none") == []

        copy = Sandbox.create(snapshot.snapshot_id, timeout=300)
        try:
            assert copy.sandbox_id != sandbox.sandbox_id
            seen = copy.files.read(PATH)
            assert seen == "at the snapshot", seen
            copy.files.write(PATH, "in the copy")
            seen = sandbox.files.read(PATH)
            assert seen == "after the snapshot", seen
        finally:
            copy.kill()
    finally:
        sandbox.kill()
    # A snapshot outlives its sandbox, until it is deleted.
    assert snapshot.snapshot_id in listed_ids()
    assert Sandbox.delete_snapshot(snapshot.snapshot_id) is True
    assert Sandbox.delete_snapshot(snapshot.snapshot_id) is False
    assert snapshot.snapshot_id not in listed_ids()
    with pytest.raises(SandboxException) as gone:
        Sandbox.create(snapshot.snapshot_id, timeout=60)
    assert getattr(gone.value, "status_code", None) == 404, repr(gone.value)


def test_a_fork_copies_the_files_and_each_copy_diverges(server, e2b):
    sandbox = Sandbox.create(metadata={"role": "source"}, timeout=300)
    forks = []
    try:
        sandbox.files.write(PATH, "before the fork")
        forks = sandbox.fork(count=2, timeout=120)
        made = [f for f in forks if isinstance(f, Sandbox)]
        assert len(made) == 2, forks
        ids = {f.sandbox_id for f in made}
        assert len(ids) == 2 and sandbox.sandbox_id not in ids, ids
        for n, fork in enumerate(made):
            assert fork.is_running()
            seen = fork.files.read(PATH)
            assert seen == "before the fork", seen
            assert fork.get_info().metadata == {"role": "source"}, fork.get_info()
            fork.files.write(PATH, f"in fork {n}")
        seen = [sandbox.files.read(PATH)] + [f.files.read(PATH) for f in made]
        assert seen == ["before the fork", "in fork 0", "in fork 1"], seen
        # The fork's snapshot is not kept.
        assert listed_ids(sandbox_id=sandbox.sandbox_id) == []
    finally:
        for fork in forks:
            if isinstance(fork, Sandbox):
                fork.kill()
        sandbox.kill()
    with pytest.raises(SandboxNotFoundException):
        sandbox.fork()


def test_another_projects_snapshot_is_not_found(server, e2b):
    sandbox = Sandbox.create(timeout=300)
    try:
        snapshot = sandbox.create_snapshot()
        foreign = {"api_key": E2B_KEY_B}
        try:
            with pytest.raises(SandboxException) as refused:
                Sandbox.create(snapshot.snapshot_id, timeout=60, **foreign)
            assert getattr(refused.value, "status_code", None) == 404, repr(refused.value)
            assert Sandbox.delete_snapshot(snapshot.snapshot_id, **foreign) is False
            assert snapshot.snapshot_id not in listed_ids(**foreign)
            with pytest.raises(SandboxNotFoundException):
                Sandbox.create_snapshot(sandbox.sandbox_id, **foreign)
            with pytest.raises(SandboxNotFoundException):
                Sandbox.fork(sandbox.sandbox_id, **foreign)
            # Still alpha's.
            assert snapshot.snapshot_id in listed_ids()
        finally:
            assert Sandbox.delete_snapshot(snapshot.snapshot_id) is True
    finally:
        sandbox.kill()
