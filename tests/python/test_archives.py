"""Archives: a container directory exported as a tar stream and a
tar stream imported into one, over a real `shellgate serve`.

The hostile archives are the classic ones (`..`, absolute paths, symlink and
hard-link escapes, device nodes, a tar bomb, a member through an earlier
link, a cut stream, a client gone mid-upload): each is refused with 400
naming `archive` and the member, and leaves the target directory exactly as
it was. Python's `tarfile` writes whatever names and types it is given,
which is what makes it the hostile client here.
"""

import io
import socket
import tarfile
from urllib.parse import urlparse

import pytest
import requests

from conftest import KEY_A, KEY_B, wait_until


def api(server, method, path, key=KEY_A, **kwargs):
    headers = {"Authorization": f"Bearer {key}", **kwargs.pop("headers", {})}
    return requests.request(method, server.base_url + path, headers=headers, timeout=300, **kwargs)


def run(server, container_id, *commands):
    """Runs commands in the container; each must succeed. Their stdouts."""
    response = api(server, "POST", f"/containers/{container_id}/exec", json={"commands": list(commands)})
    assert response.status_code == 200, response.text
    outputs = response.json()["output"]
    for command, output in zip(commands, outputs):
        assert output["outcome"] == {"type": "exit", "exit_code": 0}, (command, output)
    return [output["stdout"] for output in outputs]


def tar_of(*members) -> bytes:
    """A GNU tar stream of (TarInfo, data) pairs, written as given."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
            else:
                archive.addfile(info)
    return buffer.getvalue()


def raw_members(*members) -> bytes:
    """Members as raw blocks, without tar's end-of-archive marker (nor the
    padding `tarfile` adds to a 10 KiB record)."""
    out = b""
    for info, data in members:
        data = data or b""
        info.size = len(data)
        out += info.tobuf(format=tarfile.GNU_FORMAT) + data + b"\0" * (-len(data) % 512)
    return out


END = b"\0" * 1024


def member(name, kind=tarfile.REGTYPE, link="", mode=0o644, **fields):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.mode = mode
    info.mtime = 1_700_000_000
    for key, value in fields.items():
        setattr(info, key, value)
    return info


def import_tar(server, container_id, data, path):
    return api(
        server,
        "POST",
        f"/containers/{container_id}/fs/archive",
        params={"path": path},
        data=data,
        headers={"Content-Type": "application/x-tar"},
    )


def export_tar(server, container_id, path, excludes=()):
    params = [("path", path)] + [("exclude", e) for e in excludes]
    response = api(server, "GET", f"/containers/{container_id}/fs/archive", params=params)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/x-tar")
    return response.content


def listing(server, container_id, path):
    """Every entry below `path`: relative path, type, mode, size, link."""
    (out,) = run(server, container_id, f"cd {path} && find . -mindepth 1 -printf '%P %y %m %s %l\\n' | sort")
    return out


@pytest.fixture(scope="module")
def container(server):
    created = api(server, "POST", "/containers", json={"name": "archives"}).json()
    yield created["id"]
    api(server, "DELETE", f"/containers/{created['id']}")


def seeded(server, container_id, name):
    """A directory with a few entries, to be left exactly as it is."""
    path = f"/mnt/data/{name}"
    run(server, container_id, f"mkdir -p {path}/sub && echo old > {path}/keep.txt && echo in > {path}/sub/inner")
    return path


HOSTILE = {
    "parent": ([(member("ok.txt"), b"fine"), (member("../evil"), b"x")], "../evil", "'..'"),
    "deep-parent": ([(member("a/../../evil"), b"x")], "a/../../evil", "'..'"),
    "absolute": ([(member("/etc/evil"), b"x")], "/etc/evil", "absolute path"),
    "symlink-absolute": ([(member("l", tarfile.SYMTYPE, "/etc"), None)], "l", "absolute path"),
    "symlink-escape": ([(member("a/l", tarfile.SYMTYPE, "../../x"), None)], "a/l", "leaves the directory"),
    "hardlink-absolute": ([(member("h", tarfile.LNKTYPE, "/etc/passwd"), None)], "h", "absolute path"),
    "hardlink-escape": ([(member("h", tarfile.LNKTYPE, "../../etc/passwd"), None)], "h", "'..'"),
    "hardlink-not-a-member": ([(member("h", tarfile.LNKTYPE, "passwd"), None)], "h", "not an earlier file member"),
    "char-device": ([(member("null", tarfile.CHRTYPE, devmajor=1, devminor=3), None)], "null", "character device"),
    "block-device": ([(member("sda", tarfile.BLKTYPE, devmajor=8, devminor=0), None)], "sda", "block device"),
    "fifo": ([(member("pipe", tarfile.FIFOTYPE), None)], "pipe", "FIFO"),
    "through-symlink": (
        [
            (member("sub", tarfile.DIRTYPE, mode=0o755), None),
            (member("link", tarfile.SYMTYPE, "sub"), None),
            (member("link/passwd"), b"root::0:0::/:/bin/sh\n"),
        ],
        "link/passwd",
        "runs through the symlink member",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_archives_are_refused_and_change_nothing(server, container, case):
    members, name, reason = HOSTILE[case]
    path = seeded(server, container, f"hostile-{case}")
    before = listing(server, container, path)
    response = import_tar(server, container, tar_of(*members), path)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "archive"
    assert error["type"] == "invalid_request_error"
    assert name in error["message"] and reason in error["message"], error
    assert listing(server, container, path) == before


def test_a_tar_bomb_is_refused_before_its_data(server, container):
    """A header declaring 100 GiB, and nothing after it: refused on the
    header alone (nothing is extracted until the quota stops it)."""
    path = seeded(server, container, "bomb")
    before = listing(server, container, path)
    bomb = member("bomb.bin", size=100 << 30).tobuf(format=tarfile.GNU_FORMAT)
    response = import_tar(server, container, raw_members((member("first.txt"), b"1")) + bomb, path)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "archive" and "bomb.bin" in error["message"], error
    assert listing(server, container, path) == before


def test_a_cut_stream_leaves_nothing(server, container):
    path = seeded(server, container, "cut")
    before = listing(server, container, path)
    members = raw_members((member("a.txt"), b"a" * 5000), (member("b.txt"), b"b" * 5000))
    # Cut inside the second member; or whole but without the end marker.
    for cut in (members[: len(members) - 2000], members):
        response = import_tar(server, container, cut, path)
        assert response.status_code == 400, response.text
        assert response.json()["error"]["param"] == "archive"
        assert listing(server, container, path) == before


def test_a_client_gone_mid_upload_leaves_nothing(server, container):
    path = seeded(server, container, "gone")
    before = listing(server, container, path)
    whole = tar_of((member("big.bin"), b"z" * (4 << 20)))
    url = urlparse(server.base_url)
    with socket.create_connection((url.hostname, url.port)) as connection:
        head = (
            f"POST {url.path}/containers/{container}/fs/archive?path={path} HTTP/1.1\r\n"
            f"Host: {url.hostname}\r\nAuthorization: Bearer {KEY_A}\r\n"
            f"Content-Type: application/x-tar\r\nContent-Length: {len(whole)}\r\n\r\n"
        )
        connection.sendall(head.encode() + whole[: len(whole) // 2])

        def staged():
            (count,) = run(server, container, f"ls -A {path} | grep -c shellgate-import || true")
            return count.strip() != "0"

        # The import is under way (its staging directory made) when the
        # client goes: awaited, or a check could run before it began.
        assert wait_until(staged, 60)
    # The import notices the end of the body and removes its staging
    # directory: await that, then the directory is as it was.
    assert wait_until(lambda: listing(server, container, path) == before, 60)
    assert not staged()


def test_a_pre_existing_symlink_is_replaced_never_followed(server, container):
    path = "/mnt/data/prelink"
    run(server, container, f"mkdir -p {path} /tmp/outside && ln -s /tmp/outside {path}/out")
    data = tar_of((member("out/planted"), b"p"))
    response = import_tar(server, container, data, path)
    assert response.status_code == 200, response.text
    run(server, container, f"test -d {path}/out && ! test -L {path}/out", f"test -f {path}/out/planted")
    (outside,) = run(server, container, "ls -A /tmp/outside")
    assert outside == ""


def test_export_with_excludes_round_trips(server, container):
    source = "/mnt/data/tree"
    run(
        server,
        container,
        f"mkdir -p {source}/src/pkg {source}/node_modules/dep {source}/src/node_modules/x {source}/empty",
        f"printf '#!/bin/sh\\necho hi\\n' > {source}/run.sh && chmod 755 {source}/run.sh",
        f"head -c 100000 /dev/urandom > {source}/src/pkg/blob.bin && chmod 600 {source}/src/pkg/blob.bin",
        f"echo log > {source}/debug.log && echo log > {source}/src/keep.log && echo m > {source}/node_modules/dep/m.js",
        f"echo x > {source}/src/node_modules/x/y && ln -s run.sh {source}/link && ln -s src/pkg {source}/dirlink",
    )
    tar = export_tar(server, container, source, excludes=["*.log", "**/node_modules"])
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        names = archive.getnames()
    # Sorted, a directory before its contents (`tarfile` drops the
    # directories' trailing slashes).
    assert names == ["dirlink", "empty", "link", "run.sh", "src", "src/keep.log", "src/pkg", "src/pkg/blob.bin"]
    restored = "/mnt/data/restored"
    response = import_tar(server, container, tar, restored)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "container.fs_archive" and body["path"] == restored
    assert body["entries"] == 8 and body["bytes"] == 100000 + len("#!/bin/sh\necho hi\n") + len("log\n")
    expected = [
        line for line in listing(server, container, source).splitlines()
        if not line.startswith(("debug.log", "node_modules", "src/node_modules"))
    ]
    assert listing(server, container, restored).splitlines() == expected
    run(server, container, f"cmp {source}/src/pkg/blob.bin {restored}/src/pkg/blob.bin")


def test_ten_thousand_files_round_trip(server, container):
    source = "/mnt/data/many"
    run(
        server,
        container,
        "python3 -c \"import os\nfor i in range(10000):\n"
        f"    d = '{source}/d%d' % (i % 100)\n    os.makedirs(d, exist_ok=True)\n"
        "    open('%s/f%d' % (d, i), 'w').write(str(i))\"",
    )
    tar = export_tar(server, container, source)
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        assert len(archive.getmembers()) == 10_100
    response = import_tar(server, container, tar, "/mnt/data/many-copy")
    assert response.status_code == 200, response.text
    assert response.json()["entries"] == 10_100
    run(server, container, f"diff -r {source} /mnt/data/many-copy")


def test_another_projects_container_is_not_found(server, container):
    assert api(server, "GET", f"/containers/{container}/fs/archive", key=KEY_B).status_code == 404
    response = api(server, "POST", f"/containers/{container}/fs/archive", key=KEY_B, data=tar_of((member("x"), b"x")))
    assert response.status_code == 404


def test_a_bad_exclude_pattern_is_a_400_naming_exclude(server, container):
    response = api(server, "GET", f"/containers/{container}/fs/archive", params={"path": "/mnt/data", "exclude": "../x"})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "exclude"


def test_reserved_staging_names_are_refused(server, container):
    path = seeded(server, container, "reserved")
    before = listing(server, container, path)
    response = import_tar(server, container, tar_of((member(".shellgate-import-0/x"), b"x")), path)
    assert response.status_code == 400 and response.json()["error"]["param"] == "archive", response.text
    assert listing(server, container, path) == before
