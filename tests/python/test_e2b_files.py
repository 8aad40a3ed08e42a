"""E2B's filesystem API: envd's `filesystem.Filesystem` service
and `/files`, driven by the latest `e2b` SDK (`sbx.files.*`) against a real
`shellgate serve`, plus the hostile cases by raw HTTP: unknown or foreign
sandboxes, a 100 MiB upload that must stream, a cut upload."""

import asyncio
import io
import socket
from urllib.parse import quote

import pytest
import requests
from e2b import AsyncSandbox, FileType, Sandbox
from e2b.sandbox.filesystem.filesystem import WriteEntry
from e2b.exceptions import FileNotFoundException, SandboxException

from conftest import KEY_A, exec_commands, wait_until


@pytest.fixture
def sbx(e2b):
    sandbox = Sandbox.create()
    yield sandbox
    sandbox.kill()


def envd_headers(sandbox, token=None):
    return {
        "E2b-Sandbox-Id": sandbox.sandbox_id,
        "X-Access-Token": token if token is not None else sandbox._envd_access_token,
    }


def run(server, sandbox, command):
    """A command in the sandbox through shellgate's own exec (the sandbox
    id is the container id), so this suite needs no other E2B service."""
    result = exec_commands(server.client(KEY_A), sandbox.sandbox_id, [command])
    assert result["output"][0]["outcome"]["exit_code"] == 0, result
    return result["output"][0]["stdout"]


def live_watchers(server, sandbox):
    """The sandbox's running watcher processes (shellgate's process list)."""
    r = requests.get(
        f"{server.base_url}/containers/{sandbox.sandbox_id}/processes",
        headers={"Authorization": f"Bearer {KEY_A}"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return [p for p in r.json()["data"] if p["id"].startswith("e2b-watch-") and p["status"] == "running"]


def test_write_read_and_list(sbx):
    info = sbx.files.write("/mnt/data/notes/a.txt", "hello")
    assert (info.name, info.path, info.type) == ("a.txt", "/mnt/data/notes/a.txt", FileType.FILE)
    sbx.files.write("/mnt/data/notes/b.bin", b"\x00\x01\xff")
    written = sbx.files.write_files(
        [
            WriteEntry(path="/mnt/data/notes/deep/c.txt", data="c"),
            WriteEntry(path="/mnt/data/notes/d.txt", data=b"d"),
        ]
    )
    assert [w.path for w in written] == ["/mnt/data/notes/deep/c.txt", "/mnt/data/notes/d.txt"]

    assert sbx.files.read("/mnt/data/notes/a.txt") == "hello"
    assert sbx.files.read("/mnt/data/notes/b.bin", format="bytes") == bytearray(b"\x00\x01\xff")
    with sbx.files.read("/mnt/data/notes/deep/c.txt", format="stream") as stream:
        assert b"".join(stream) == b"c"

    top = {e.name: e for e in sbx.files.list("/mnt/data/notes")}
    assert set(top) == {"a.txt", "b.bin", "deep", "d.txt"}
    assert top["deep"].type == FileType.DIR and top["a.txt"].size == 5
    assert top["a.txt"].permissions == "-rw-r--r--" and top["a.txt"].mode == 0o644
    deep = {e.path for e in sbx.files.list("/mnt/data/notes", depth=2)}
    assert "/mnt/data/notes/deep/c.txt" in deep


def test_stat_make_rename_remove(sbx):
    sbx.files.write("/mnt/data/s/f.txt", "x")
    assert sbx.files.exists("/mnt/data/s/f.txt")
    assert not sbx.files.exists("/mnt/data/s/none")
    info = sbx.files.get_info("/mnt/data/s/f.txt")
    assert (info.name, info.type, info.size) == ("f.txt", FileType.FILE, 1)
    assert info.modified_time.year >= 2024

    assert sbx.files.make_dir("/mnt/data/s/new/deeper") is True
    assert sbx.files.make_dir("/mnt/data/s/new/deeper") is False
    assert sbx.files.get_info("/mnt/data/s/new/deeper").type == FileType.DIR

    moved = sbx.files.rename("/mnt/data/s/f.txt", "/mnt/data/s/new/g.txt")
    assert moved.path == "/mnt/data/s/new/g.txt"
    assert not sbx.files.exists("/mnt/data/s/f.txt")

    sbx.files.remove("/mnt/data/s/new")  # a directory goes with its tree
    assert not sbx.files.exists("/mnt/data/s/new")


def test_removing_what_cannot_be_removed_whole_changes_nothing(server, sbx):
    """envd's Remove takes a directory's whole tree: a mount point (the
    sandbox's disk, its home), or a tree holding an entry the sandbox user
    may not remove, is refused before anything in it goes."""
    sbx.files.write("/mnt/data/kept.txt", "kept")
    sbx.files.write("/home/user/home.txt", "home")
    sbx.files.write("/mnt/data/tree/locked/inner", "x")
    for i in range(20):
        sbx.files.write(f"/mnt/data/tree/f{i}", str(i))
    run(server, sbx, "chmod 555 /mnt/data/tree/locked")
    listing = "find /mnt/data /home/user -mindepth 1 | sort"
    before = run(server, sbx, listing)
    for path in ("/mnt/data", "/home/user", "~"):
        with pytest.raises(SandboxException) as refused:
            sbx.files.remove(path)
        assert "mount point" in str(refused.value) and "nothing was removed" in str(refused.value)
    with pytest.raises(SandboxException) as refused:
        sbx.files.remove("/mnt/data/tree")
    assert "/mnt/data/tree/locked" in str(refused.value)
    assert run(server, sbx, listing) == before
    run(server, sbx, "chmod 755 /mnt/data/tree/locked")
    sbx.files.remove("/mnt/data/tree")
    assert not sbx.files.exists("/mnt/data/tree")
    assert sbx.files.read("/mnt/data/kept.txt") == "kept"


def test_relative_paths_are_in_the_users_home(sbx):
    info = sbx.files.write("rel/x.txt", "home")
    assert info.path == "/home/user/rel/x.txt"
    assert sbx.files.read("~/rel/x.txt") == "home"


def test_gzip_upload(sbx):
    data = "compressible " * 10_000
    sbx.files.write("/mnt/data/z.txt", data, gzip=True)
    assert sbx.files.read("/mnt/data/z.txt") == data


def test_missing_files_and_refused_paths(sbx):
    with pytest.raises(FileNotFoundException):
        sbx.files.read("/mnt/data/missing.txt")
    with pytest.raises(FileNotFoundException):
        sbx.files.get_info("/mnt/data/missing.txt")
    with pytest.raises(FileNotFoundException):
        sbx.files.list("/mnt/data/missing-dir")
    # The sandbox user may not write there: the SDK's error, nothing written.
    with pytest.raises(SandboxException) as refused:
        sbx.files.write("/etc/e2b-was-here", "x")
    assert "403" in str(refused.value) or "ermission" in str(refused.value) or "ead-only" in str(refused.value)
    assert not sbx.files.exists("/etc/e2b-was-here")


def test_only_the_sandbox_user_is_served(sbx):
    sbx.files.write("/mnt/data/u.txt", "u", user="user")
    assert sbx.files.read("/mnt/data/u.txt", user="user") == "u"
    # There is no root to act as: refused, never done as someone else.
    for call in (
        lambda: sbx.files.read("/mnt/data/u.txt", user="root"),
        lambda: sbx.files.write("/mnt/data/u.txt", "root was here", user="root"),
        lambda: sbx.files.get_info("/mnt/data/u.txt", user="root"),
        lambda: sbx.files.remove("/mnt/data/u.txt", user="root"),
    ):
        with pytest.raises(SandboxException) as refused:
            call()
        assert "no privileges" in str(refused.value)
    assert sbx.files.read("/mnt/data/u.txt") == "u"


def test_watch_dir_polling_sees_a_command_write(server, sbx):
    sbx.files.make_dir("/mnt/data/watched")
    handle = sbx.files.watch_dir("/mnt/data/watched")
    run(server, sbx, "echo hi > /mnt/data/watched/by-command.txt")
    seen = []

    def created():
        seen.extend(handle.get_new_events())
        return any(e.name == "by-command.txt" and e.type.value == "create" for e in seen)

    assert wait_until(created, 30), seen
    # An upload shows as its file, never its temporary name.
    sbx.files.write("/mnt/data/watched/uploaded.txt", "u")
    assert wait_until(lambda: seen.extend(handle.get_new_events()) or any(e.name == "uploaded.txt" for e in seen), 30), seen
    assert not any(e.name.startswith(".shellgate-upload") for e in seen)
    assert len(live_watchers(server, sbx)) == 1
    handle.stop()
    with pytest.raises(SandboxException):
        handle.get_new_events()
    # Its process in the sandbox ended with it.
    assert wait_until(lambda: not live_watchers(server, sbx), 30)


def test_one_poll_after_a_write_sees_its_events(sbx):
    # E2B's own suites poll once, right after the write's answer: the poll
    # syncs with the watcher in the sandbox, so the events are there.
    sbx.files.make_dir("/mnt/data/synced/sub")
    handle = sbx.files.watch_dir("/mnt/data/synced", recursive=True, include_entry=True)
    sbx.files.write("/mnt/data/synced/sub/new.txt", "first")
    events = handle.get_new_events()
    seen = [(e.type.value, e.name) for e in events]
    assert seen == [("create", "sub/new.txt"), ("chmod", "sub/new.txt"), ("write", "sub/new.txt")], seen
    entry = events[-1].entry
    assert entry is not None and (entry.path, entry.type) == ("/mnt/data/synced/sub/new.txt", FileType.FILE), events
    sbx.files.write("/mnt/data/synced/sub/new.txt", "second")
    events = handle.get_new_events()
    assert ("write", "sub/new.txt") in [(e.type.value, e.name) for e in events], events
    # Nothing new: an empty poll, answered (the sync needs no event).
    assert handle.get_new_events() == []
    handle.stop()


def test_watch_dir_stream_recursive(server, sbx, e2b):
    async def scenario():
        sandbox = await AsyncSandbox.connect(sbx.sandbox_id)
        await sandbox.files.make_dir("/mnt/data/tree/sub")
        events = []
        got = asyncio.Event()

        def on_event(event):
            events.append(event)
            if event.name == "sub/leaf.txt":
                got.set()

        handle = await sandbox.files.watch_dir("/mnt/data/tree", on_event, recursive=True)
        await asyncio.to_thread(run, server, sbx, "echo x > /mnt/data/tree/sub/leaf.txt")
        await asyncio.wait_for(got.wait(), 30)
        await handle.stop()
        return events

    events = asyncio.run(scenario())
    assert any(e.name == "sub/leaf.txt" for e in events)
    # The stream closed: its process in the sandbox ended with it.
    assert wait_until(lambda: not live_watchers(server, sbx), 30)


def test_watching_a_missing_directory_is_not_found(sbx):
    with pytest.raises(FileNotFoundException):
        sbx.files.watch_dir("/mnt/data/not-there")


def test_foreign_and_unknown_sandboxes_are_refused(server, e2b):
    root = f"http://{server.host}:{server.port}"
    mine = Sandbox.create()
    theirs = Sandbox.create(api_key=server_e2b_key_b())
    try:
        mine.files.write("/mnt/data/secret.txt", "mine")
        # An id nobody has: 404, on /files and on the RPCs.
        unknown = {"E2b-Sandbox-Id": "sbx_doesnotexist", "X-Access-Token": mine._envd_access_token}
        r = requests.get(f"{root}/files", params={"path": "/mnt/data/secret.txt"}, headers=unknown, timeout=30)
        assert r.status_code == 404
        r = requests.post(f"{root}/filesystem.Filesystem/Stat", json={"path": "/mnt/data"}, headers=unknown, timeout=30)
        assert r.status_code == 404 and r.json()["code"] in ("not_found", 404)
        # My sandbox with another project's sandbox's token: the unknown id's
        # 404, nothing read.
        crossed = envd_headers(mine, token=theirs._envd_access_token)
        r = requests.get(f"{root}/files", params={"path": "/mnt/data/secret.txt"}, headers=crossed, timeout=30)
        assert r.status_code == 404 and "mine" not in r.text
        # Watchers are the sandbox's own: another sandbox cannot read them.
        handle = mine.files.watch_dir("/mnt/data")
        r = requests.post(
            f"{root}/filesystem.Filesystem/GetWatcherEvents",
            json={"watcherId": handle._watcher_id},
            headers=envd_headers(theirs),
            timeout=30,
        )
        assert r.status_code == 404
        handle.stop()
    finally:
        mine.kill()
        theirs.kill()


def server_e2b_key_b():
    from conftest import E2B_KEY_B

    return E2B_KEY_B


def peak_rss_reset(pid):
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM, the peak resident set


def peak_rss(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.mark.serial
def test_a_100_mib_upload_and_download_stream(server, sbx):
    size = 100 << 20
    block = bytes(range(256)) * 4096  # 1 MiB

    class Blocks(io.RawIOBase):
        """`size` bytes of `block`s, made as they are read: a file object,
        which every SDK version streams (the older one takes no iterator)."""

        sent = 0

        def readable(self):
            return True

        def readinto(self, buffer):
            count = min(len(buffer), size - self.sent, len(block))
            start = self.sent % len(block)
            piece = (block[start:] + block[:start])[:count]
            buffer[:count] = piece
            self.sent += count
            return count

    # Every server process it crosses (a cluster's replica and node).
    pids = server.pids
    for pid in pids:
        peak_rss_reset(pid)
    before = [peak_rss(pid) for pid in pids]
    sbx.files.write("/mnt/data/big.bin", io.BufferedReader(Blocks()))
    assert sbx.files.get_info("/mnt/data/big.bin").size == size
    total = 0
    with sbx.files.read("/mnt/data/big.bin", format="stream") as stream:
        for piece in stream:
            total += len(piece)
    assert total == size
    # Neither direction held the file: no server's peak grew by as much.
    grown = [peak_rss(pid) - b for pid, b in zip(pids, before)]
    assert all(g < 48 << 20 for g in grown), grown
    sbx.files.remove("/mnt/data/big.bin")


def test_a_cut_upload_leaves_no_file(server, sbx):
    sbx.files.make_dir("/mnt/data/cut")
    path = quote("/mnt/data/cut/part.bin")
    head = (
        f"POST /files?path={path} HTTP/1.1\r\n"
        f"Host: {server.host}\r\n"
        f"E2b-Sandbox-Id: {sbx.sandbox_id}\r\n"
        f"X-Access-Token: {sbx._envd_access_token}\r\n"
        "Content-Type: application/octet-stream\r\n"
        "Content-Length: 10000000\r\n\r\n"
    ).encode()
    with socket.create_connection((server.host, server.port), timeout=30) as conn:
        conn.sendall(head + b"x" * 1_000_000)
    # Once the server dropped the upload, its temporary file is gone too,
    # and the file never appeared.
    def settled():
        return not any(e.name.startswith(".shellgate-upload") for e in sbx.files.list("/mnt/data/cut"))

    assert wait_until(settled, 30)
    assert not sbx.files.exists("/mnt/data/cut/part.bin")


def test_health(server, sbx):
    root = f"http://{server.host}:{server.port}"
    assert requests.get(f"{root}/health", headers=envd_headers(sbx), timeout=30).status_code == 204
    gone = {"E2b-Sandbox-Id": "sbx_doesnotexist", "X-Access-Token": "x"}
    assert requests.get(f"{root}/health", headers=gone, timeout=30).status_code == 502


def test_removing_a_missing_path_is_a_no_op(sbx):
    """envd's Remove is `os.RemoveAll`: a path that is not there is removed
    already."""
    sbx.files.remove("/mnt/data/never-was")
    sbx.files.remove("/mnt/data/no/such/tree")
    sbx.files.write("/mnt/data/there.txt", "x")
    sbx.files.remove("/mnt/data/there.txt")
    assert not sbx.files.exists("/mnt/data/there.txt")


def test_get_info_follows_a_symlink_to_an_absolute_target(server, sbx):
    """As envd's Stat: a link is told with what it leads to (its type, its
    size) and the absolute path it resolves to, marked `isSymlink` (the SDK
    shows such an entry as SYMLINK; older SDKs show the target's type); a
    dangling one as itself."""
    sbx.files.write("/home/user/links/dir/target.txt", "hello")
    run(server, sbx, "cd /home/user/links && ln -s dir/target.txt rel && ln -s /home/user/links/dir abs_dir "
        "&& ln -s rel chain && ln -s nowhere dangling")

    def stat(path):
        reply = requests.post(
            f"{sbx.envd_api_url}/filesystem.Filesystem/Stat",
            headers={**envd_headers(sbx), "content-type": "application/json"},
            json={"path": path},
            timeout=30,
        )
        assert reply.status_code == 200, reply.text
        return reply.json()["entry"]

    rel = stat("/home/user/links/rel")
    assert (rel["name"], rel["path"], rel["type"], rel["isSymlink"]) == (
        "rel", "/home/user/links/rel", "FILE_TYPE_FILE", True), rel
    assert rel["symlinkTarget"] == "/home/user/links/dir/target.txt", rel
    chain = stat("links/chain")
    assert (chain["type"], chain["symlinkTarget"]) == ("FILE_TYPE_FILE", "/home/user/links/dir/target.txt"), chain
    abs_dir = stat("/home/user/links/abs_dir")
    assert (abs_dir["type"], abs_dir["symlinkTarget"]) == ("FILE_TYPE_DIRECTORY", "/home/user/links/dir"), abs_dir
    dangling = stat("/home/user/links/dangling")
    assert (dangling["type"], dangling["symlinkTarget"]) == ("FILE_TYPE_SYMLINK", "nowhere"), dangling
    # SDKs that read `isSymlink` show SYMLINK; older ones (no SYMLINK type)
    # the target's type.
    info = sbx.files.get_info("/home/user/links/rel")
    assert info.type in (getattr(FileType, "SYMLINK", FileType.FILE), FileType.FILE), info
    assert (info.size, info.symlink_target) == (5, "/home/user/links/dir/target.txt"), info
