"""Volumes: a project's persistent directories, through shellgate's own API
(`/v1/volumes`, `volumes` at container create) and E2B's SDK (`Volume`,
`volume_mounts`, the volume content API): written by one sandbox and read
by another, mounted by two at once, outliving them, refused while mounted,
bounded by the project's quotas (count and bytes), and mounted only where
a path may go. Against a cluster, through either replica: a volume lives on
one node, and containers that mount it are placed there."""

import subprocess
import uuid

import pytest
import requests

from conftest import KEY_A, KEY_B, exec_commands


def v1(server, method: str, path: str, key: str = KEY_A, **kwargs) -> requests.Response:
    return requests.request(
        method,
        f"{server.base_url}{path}",
        headers={"Authorization": f"Bearer {key}"},
        timeout=120,
        **kwargs,
    )


def unique(prefix: str) -> str:
    """A name no other test (the session's server is shared) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def make_volume(server, name: str = None, key: str = KEY_A) -> dict:
    made = v1(server, "POST", "/volumes", key=key, json={"name": name or unique("vol")})
    assert made.status_code == 200, made.text
    return made.json()


def make_container(server, volumes: list, key: str = KEY_A) -> requests.Response:
    return v1(server, "POST", "/containers", key=key, json={"name": unique("c"), "volumes": volumes})


def run(server, container_id: str, command: str) -> dict:
    """One command's output entry (its stdout, stderr and outcome)."""
    answer = exec_commands(server.client(), container_id, [command])
    return answer["output"][0]


def remove_container(server, container_id: str) -> None:
    removed = v1(server, "DELETE", f"/containers/{container_id}")
    assert removed.status_code == 200, removed.text


def test_a_volume_outlives_its_writer_is_shared_live_and_kept_while_mounted(server):
    volume = make_volume(server)
    assert volume["object"] == "volume" and volume["id"].startswith("vol_"), volume
    writer = make_container(server, [{"volume_id": volume["id"], "path": "/mnt/shared"}])
    assert writer.status_code == 200, writer.text
    writer = writer.json()["id"]
    wrote = run(server, writer, "echo first > /mnt/shared/note && stat -c '%U %a' /mnt/shared/note")
    # The sandbox user owns what it writes, as in /mnt/data.
    assert wrote["stdout"].split() == ["user", "644"], wrote
    remove_container(server, writer)

    # By name, at another path, after its writer is gone.
    reader = make_container(server, [{"name": volume["name"], "path": "/data"}])
    assert reader.status_code == 200, reader.text
    reader = reader.json()["id"]
    read = run(server, reader, "cat /data/note")
    assert read["stdout"] == "first\n", read
    # Every container of the project is the sandbox user there: the note is
    # the reader's to change as it was its writer's.
    changed = run(server, reader, "echo more >> /data/note && stat -c '%U' /data/note")
    assert changed["stdout"] == "user\n", changed

    # Two containers at once see each other's writes.
    beside = make_container(server, [{"volume_id": volume["id"], "path": "/mnt/shared"}])
    assert beside.status_code == 200, beside.text
    beside = beside.json()["id"]
    wrote = run(server, beside, "echo second > /mnt/shared/other")
    assert wrote["outcome"]["exit_code"] == 0, wrote
    read = run(server, reader, "cat /data/other")
    assert read["stdout"] == "second\n", read

    # Mounted: not deleted, and the answer names who mounts it.
    refused = v1(server, "DELETE", f"/volumes/{volume['id']}")
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["code"] == "volume_in_use", error
    assert reader in error["message"] and beside in error["message"], error
    assert v1(server, "GET", f"/volumes/{volume['id']}").status_code == 200

    listed = v1(server, "GET", "/volumes", params={"limit": 100})
    assert listed.status_code == 200, listed.text
    assert volume["id"] in [v["id"] for v in listed.json()["data"]], listed.text

    remove_container(server, reader)
    remove_container(server, beside)
    deleted = v1(server, "DELETE", f"/volumes/{volume['id']}")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json() == {"id": volume["id"], "object": "volume.deleted", "deleted": True}
    gone = v1(server, "GET", f"/volumes/{volume['id']}")
    assert gone.status_code == 404, gone.text
    # A deleted volume mounts nowhere.
    refused = make_container(server, [{"volume_id": volume["id"], "path": "/mnt/shared"}])
    assert refused.status_code == 404, refused.text


def test_a_volume_is_its_projects_alone(server):
    volume = make_volume(server)
    for method in ("GET", "DELETE"):
        foreign = v1(server, method, f"/volumes/{volume['id']}", key=KEY_B)
        assert foreign.status_code == 404, foreign.text
    mounted = make_container(server, [{"volume_id": volume["id"], "path": "/mnt/v"}], key=KEY_B)
    assert mounted.status_code == 404, mounted.text
    by_name = make_container(server, [{"name": volume["name"], "path": "/mnt/v"}], key=KEY_B)
    assert by_name.status_code == 404, by_name.text
    # Project b may use the same name for a volume of its own.
    theirs = make_volume(server, name=volume["name"], key=KEY_B)
    assert theirs["id"] != volume["id"], theirs
    taken = v1(server, "POST", "/volumes", json={"name": volume["name"]})
    assert taken.status_code == 409 and taken.json()["error"]["code"] == "volume_name_taken", taken.text
    for bad in ["", "a/b", "../x", "x" * 65]:
        refused = v1(server, "POST", "/volumes", json={"name": bad})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "name", refused.text
    for body in ({"name": "x", "size": 1}, {}):
        refused = v1(server, "POST", "/volumes", json=body)
        assert refused.status_code == 400, refused.text
    assert v1(server, "DELETE", f"/volumes/{volume['id']}").status_code == 200
    assert v1(server, "DELETE", f"/volumes/{theirs['id']}", key=KEY_B).status_code == 200


@pytest.mark.parametrize(
    "path",
    [
        "mnt/relative",
        "/",
        "/mnt",
        "/mnt/../etc",
        "/mnt/./v",
        "/mnt//v",
        "/mnt/v/",
        "/mnt/data",
        "/mnt/data/inside",
        "/mnt/skills/x",
        "/home/user/v",
        "/etc",
        "/proc/v",
        "/usr/local/v",
        "/tmp/v",
        "/mnt/v w",
    ],
)
def test_a_volume_path_that_could_escape_or_cover_the_system_is_refused(server, path):
    volume = make_volume(server)
    try:
        refused = make_container(server, [{"volume_id": volume["id"], "path": path}])
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["param"] == "volumes[0].path", refused.text
    finally:
        assert v1(server, "DELETE", f"/volumes/{volume['id']}").status_code == 200


def test_mounts_name_one_volume_each_at_paths_apart(server):
    first, second = make_volume(server), make_volume(server)
    try:
        cases = [
            ([{"volume_id": first["id"], "name": first["name"], "path": "/mnt/a"}], "volumes[0]"),
            ([{"path": "/mnt/a"}], "volumes[0]"),
            (
                [{"volume_id": first["id"], "path": "/mnt/a"}, {"volume_id": second["id"], "path": "/mnt/a/b"}],
                "volumes[1].path",
            ),
        ]
        for volumes, param in cases:
            refused = make_container(server, volumes)
            assert refused.status_code == 400, refused.text
            assert refused.json()["error"]["param"] == param, refused.text
        missing = make_container(server, [{"volume_id": "vol_missing", "path": "/mnt/a"}])
        assert missing.status_code == 404 and missing.json()["error"]["param"] == "volumes[0]", missing.text
        both = make_container(
            server,
            [{"volume_id": first["id"], "path": "/mnt/a"}, {"name": second["name"], "path": "/mnt/b"}],
        )
        assert both.status_code == 200, both.text
        seen = run(server, both.json()["id"], "touch /mnt/a/x /mnt/b/y && ls /mnt/a /mnt/b")
        assert seen["stdout"] == "/mnt/a:\nx\n\n/mnt/b:\ny\n", seen
        remove_container(server, both.json()["id"])
    finally:
        for volume in (first, second):
            assert v1(server, "DELETE", f"/volumes/{volume['id']}").status_code == 200


@pytest.mark.single_box("it plants a file in the server's data directory")
def test_links_inside_a_volume_resolve_in_the_container_not_on_the_host(server):
    volume = make_volume(server)
    # A file on the host beside the volumes, named by its absolute path.
    secret = server.data_dir / unique("host-secret")
    secret.write_text("host only\n")
    try:
        made = make_container(server, [{"volume_id": volume["id"], "path": "/mnt/v"}])
        assert made.status_code == 200, made.text
        container = made.json()["id"]
        tried = run(
            server,
            container,
            f"ln -s {secret} /mnt/v/to-host && ln -s / /mnt/v/to-root && "
            f"cat /mnt/v/to-host; ls /mnt/v/to-root/ | grep -c -x volumes; "
            f"ls -d {server.data_dir}/volumes 2>&1",
        )
        assert "host only" not in tried["stdout"], tried
        # `/` is the container's root: no `volumes` directory there.
        assert tried["stdout"].splitlines()[0] == "0", tried
        assert "No such file" in tried["stdout"], tried
        remove_container(server, container)
        # Another container reading the planted links gets its own tree too.
        again = make_container(server, [{"volume_id": volume["id"], "path": "/mnt/v"}])
        assert again.status_code == 200, again.text
        read = run(server, again.json()["id"], "cat /mnt/v/to-host")
        assert "host only" not in read["stdout"], read
        remove_container(server, again.json()["id"])
    finally:
        secret.unlink()
        assert v1(server, "DELETE", f"/volumes/{volume['id']}").status_code == 200


@pytest.mark.single_box("the volume's directory is on its node's disk, not the fixture's")
def test_a_volumes_files_are_out_of_other_host_users_reach(server):
    """The volumes' directory is the server's alone on the host (the
    sandbox helper mounts a volume for the container), and a container
    still writes and reads it as its own user."""
    volume = make_volume(server)
    made = make_container(server, [{"volume_id": volume["id"], "path": "/mnt/v"}])
    assert made.status_code == 200, made.text
    container = made.json()["id"]
    try:
        wrote = run(server, container, "echo mine > /mnt/v/note && cat /mnt/v/note && stat -c '%U' /mnt/v/note")
        assert wrote["stdout"].split() == ["mine", "user"], wrote
        parent = server.data_dir / "volumes"
        assert (parent.stat().st_uid, parent.stat().st_mode & 0o7777) == (0, 0o700)
        # uid 1000 on the host holds the sandbox user's files, and still
        # cannot reach them.
        note = parent / volume["id"] / "note"
        tried = subprocess.run(["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "cat", str(note)],
                               capture_output=True, text=True, check=False)
        assert tried.returncode != 0 and "Permission denied" in tried.stderr, tried
    finally:
        remove_container(server, container)
        assert v1(server, "DELETE", f"/volumes/{volume['id']}").status_code == 200


@pytest.mark.single_box("the bytes are bounded per node, and a project's volumes may span nodes there")
def test_the_projects_volume_count_and_bytes_are_bounded(fresh_server):
    server = fresh_server(max_volumes_per_project=2, max_volume_bytes_per_project="1m")
    first, second = make_volume(server), make_volume(server)
    refused = v1(server, "POST", "/volumes", json={"name": unique("third")})
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "too_many_volumes", refused.text
    # Another project has its own count.
    theirs = make_volume(server, key=KEY_B)

    made = make_container(server, [{"volume_id": first["id"], "path": "/mnt/v"}])
    assert made.status_code == 200, made.text
    filled = run(server, made.json()["id"], "head -c 2097152 /dev/urandom > /mnt/v/big && sync")
    assert filled["outcome"]["exit_code"] == 0, filled
    over = make_container(server, [{"volume_id": second["id"], "path": "/mnt/v"}])
    assert over.status_code == 429, over.text
    error = over.json()["error"]
    assert error["code"] == "volume_bytes_exceeded" and "max_volume_bytes_per_project" in error["message"], error
    # Project b's volumes are counted apart.
    assert make_container(server, [{"volume_id": theirs["id"], "path": "/mnt/v"}], key=KEY_B).status_code == 200
    # Freed, a volume mounts again.
    freed = run(server, made.json()["id"], "rm /mnt/v/big")
    assert freed["outcome"]["exit_code"] == 0, freed
    again = make_container(server, [{"volume_id": second["id"], "path": "/mnt/v"}])
    assert again.status_code == 200, again.text
    # A deleted volume frees its place in the count.
    remove_container(server, again.json()["id"])
    assert v1(server, "DELETE", f"/volumes/{second['id']}").status_code == 200
    make_volume(server)


e2b_sdk = pytest.importorskip("e2b")
from e2b import Sandbox, Volume  # noqa: E402
from e2b.exceptions import (  # noqa: E402
    AuthenticationException,
    NotFoundException,
    SandboxException,
    VolumeException,
    VolumeNotFoundException,
)


def test_e2b_volume_written_by_one_sandbox_is_read_by_another(server, e2b):
    volume = Volume.create(unique("e2b"))
    assert volume.volume_id.startswith("vol_") and volume.token, volume
    assert volume.name in [v.name for v in Volume.list()]
    info = Volume.get_info(volume.volume_id)
    assert (info.volume_id, info.name) == (volume.volume_id, volume.name)
    writer = Sandbox.create(volume_mounts={"/mnt/shared": volume}, timeout=120)
    try:
        wrote = writer.commands.run("echo from-e2b > /mnt/shared/greeting && id -un")
        assert wrote.stdout == "user\n", wrote
    finally:
        writer.kill()
    reader = Sandbox.create(volume_mounts={"/mnt/elsewhere": volume.name}, timeout=120)
    try:
        assert reader.files.read("/mnt/elsewhere/greeting") == "from-e2b\n"
        # Mounted: E2B's SDK raises the 409.
        with pytest.raises(VolumeException) as refused:
            Volume.destroy(volume.volume_id)
        assert reader.sandbox_id in str(refused.value), refused.value
    finally:
        reader.kill()
    assert Volume.destroy(volume.volume_id) is True
    # Gone: the SDK reads E2B's 404 as its own answers.
    assert Volume.destroy(volume.volume_id) is False
    with pytest.raises(VolumeNotFoundException):
        Volume.get_info(volume.volume_id)


def test_e2b_missing_volume_answers_e2bs_404(server, e2b):
    answer = requests.get(
        f"{e2b['E2B_API_URL']}/volumes/vol_missing", headers={"X-API-KEY": e2b["E2B_API_KEY"]}, timeout=60
    )
    assert answer.status_code == 404, answer.text
    assert answer.json() == {"code": 404, "message": 'volume "vol_missing" was not found'}, answer.text
    with pytest.raises(VolumeNotFoundException):
        Volume.connect("vol_missing")
    with pytest.raises(SandboxException) as missing:
        Sandbox.create(volume_mounts={"/mnt/v": "no-such-volume"}, timeout=60)
    assert "404" in str(missing.value) and "no-such-volume" in str(missing.value), missing.value
    volume = Volume.create(unique("e2b-path"))
    try:
        with pytest.raises(Exception) as refused:
            Sandbox.create(volume_mounts={"/etc": volume}, timeout=60)
        assert "volumeMounts[0].path" in str(refused.value), refused.value
    finally:
        assert Volume.destroy(volume.volume_id) is True


def test_e2b_volume_content_api_reads_and_writes_what_sandboxes_see(server, e2b):
    """The SDK's `Volume` file calls (E2B's `/volumecontent`), with no
    sandbox running: written there, read in a sandbox; written in a
    sandbox, read there; a second sandbox (placed on the volume's node in a
    cluster) sees both."""
    volume = Volume.create(unique("content"))
    try:
        made = volume.make_dir("/data/deep", force=True)
        assert (made.type.value, made.path, made.name) == ("directory", "/data/deep", "deep"), made
        wrote = volume.write_file("/data/deep/hello.txt", "hello from the API\n")
        assert (wrote.type.value, wrote.size, wrote.path) == ("file", 19, "/data/deep/hello.txt"), wrote
        volume.write_file("/data/blob.bin", bytes(range(256)) * 1024)
        # An existing file is replaced only with `force`, as on E2B.
        with pytest.raises(VolumeException):
            volume.write_file("/data/blob.bin", b"again")
        with pytest.raises(NotFoundException):
            volume.write_file("/no/such/dir/file", b"x")
        listed = [entry.path for entry in volume.list("/data", depth=2)]
        assert listed == ["/data/blob.bin", "/data/deep", "/data/deep/hello.txt"], listed
        assert volume.exists("/data/deep/hello.txt") and not volume.exists("/data/missing")

        writer = Sandbox.create(volume_mounts={"/mnt/vol": volume}, timeout=120)
        try:
            seen = writer.commands.run("cat /mnt/vol/data/deep/hello.txt")
            assert seen.stdout.splitlines()[0] == "hello from the API", seen
            # A directory the API made is writable by sandboxes.
            writer.commands.run("echo from-sandbox > /mnt/vol/data/deep/reply.txt && ln -s / /mnt/vol/root")
        finally:
            writer.kill()
        assert volume.read_file("/data/deep/reply.txt") == "from-sandbox\n"
        assert volume.read_file("/data/blob.bin", format="bytes") == bytes(range(256)) * 1024
        streamed = b"".join(volume.read_file("/data/blob.bin", format="stream"))
        assert len(streamed) == 256 * 1024
        reply = volume.get_info("/data/deep/reply.txt")
        assert (reply.uid, reply.size) == (1000, 13), reply
        # A link a sandbox left is shown, never followed.
        link = volume.get_info("/root")
        assert (link.type.value, link.target) == ("symlink", "/"), link
        with pytest.raises(VolumeException, match="symbolic link"):
            volume.read_file("/root/etc/passwd")

        reader = Sandbox.create(volume_mounts={"/mnt/elsewhere": volume.name}, timeout=120)
        try:
            both = reader.commands.run("cat /mnt/elsewhere/data/deep/hello.txt /mnt/elsewhere/data/deep/reply.txt")
            assert both.stdout == "hello from the API\nfrom-sandbox\n", both
        finally:
            reader.kill()

        changed = volume.update_metadata("/data/deep/hello.txt", mode=0o600)
        assert changed.mode == 0o600, changed
        volume.remove("/data")
        assert not volume.exists("/data")
        with pytest.raises(NotFoundException):
            volume.remove("/data")
        # The token is the volume's credential: another is refused.
        stranger = Volume(volume.volume_id, volume.name, token="sgvt_wrong")
        with pytest.raises((AuthenticationException, VolumeException)):
            stranger.list("/")
        refused = requests.get(
            f"{e2b['E2B_VOLUME_API_URL']}/volumecontent/{volume.volume_id}/dir",
            params={"path": "/"},
            headers={"Authorization": f"Bearer {e2b['E2B_API_KEY']}"},
            timeout=60,
        )
        assert refused.status_code == 401, refused.text
        escape = requests.get(
            f"{e2b['E2B_VOLUME_API_URL']}/volumecontent/{volume.volume_id}/file",
            params={"path": "/../../etc/passwd"},
            headers={"Authorization": f"Bearer {volume.token}"},
            timeout=60,
        )
        assert escape.status_code == 400, escape.text
    finally:
        assert Volume.destroy(volume.volume_id) is True
