"""A container committed to an image (`POST /v1/containers/{id}/image`)
against a real `shellgate serve`: the image is the container's image with
its home as every new container's first home, owned by the new
container's user (the image's own files are host root's, which no id inside
a container maps, so a container's changes are in its home: applying an
upper layer, whiteouts included, is `image::commit`'s unit tests'); what the
source writes afterwards is not in it; the image is its project's alone;
names of other images are refused."""

import uuid

import pytest
import requests

from conftest import CLUSTER_MODE, KEY_A, KEY_B, busybox_image_server, exec_commands

pytestmark = pytest.mark.skipif(
    CLUSTER_MODE, reason="its server starts with a base image imported into its data directory "
                         "(test_cluster_images.py builds images in a cluster)"
)

APPLETS = ["sh", "cat", "echo", "printf", "mkdir", "rm", "chmod", "touch", "ls"]


@pytest.fixture(scope="module")
def commit_server(upstream):
    yield from busybox_image_server(upstream, "shellgate-commit-", "tiny", APPLETS)


def v1(server, method: str, path: str, key: str = KEY_A, **kwargs) -> requests.Response:
    return requests.request(method, f"{server.base_url}{path}",
                            headers={"Authorization": f"Bearer {key}"}, timeout=300, **kwargs)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def make_container(server, key: str = KEY_A, **body) -> dict:
    made = v1(server, "POST", "/containers", key=key, json={"name": unique("c"), **body})
    assert made.status_code == 200, made.text
    return made.json()


def ok(server, container_id: str, command: str, key: str = KEY_A) -> str:
    entry = exec_commands(server.client(key), container_id, [command])["output"][0]
    assert entry["outcome"]["exit_code"] == 0, entry
    return entry["stdout"]


def commit(server, container_id: str, name: str, key: str = KEY_A) -> requests.Response:
    return v1(server, "POST", f"/containers/{container_id}/image", key=key, json={"name": name})


def test_a_committed_image_holds_the_containers_changes_and_home_then_and_no_later(commit_server):
    server = commit_server
    source = make_container(server)["id"]
    ok(server, source, "echo data > /mnt/data/kept-out && echo hello > ~/note.txt && mkdir -p ~/.local/bin"
                       " && printf '#!/bin/sh\\necho installed\\n' > ~/.local/bin/tool"
                       " && chmod +x ~/.local/bin/tool")
    name = unique("mine")
    committed = commit(server, source, name)
    assert committed.status_code == 200, committed.text
    image = committed.json()
    assert (image["name"], image["source_format"]) == (name, "container"), image
    ok(server, source, "echo later > ~/later.txt")

    copy = make_container(server, image=name)
    assert copy["image"] == name, copy
    seen = ok(server, copy["id"], "cat ~/note.txt; ~/.local/bin/tool; ls -a ~ /mnt/data")
    assert seen.split("\n")[:2] == ["hello", "installed"], seen
    for absent in ["later.txt", "kept-out"]:
        assert absent not in seen.split(), seen
    # The home is the new container's user's: it writes there.
    ok(server, copy["id"], "echo more >> ~/note.txt && touch ~/.local/bin/new")

    # The source goes on, unchanged by the commit.
    assert ok(server, source, "cat ~/later.txt") == "later\n"

    # A new revision of the project's own image.
    again = commit(server, copy["id"], name)
    assert again.status_code == 200, again.text
    assert ok(server, copy["id"], "cat ~/note.txt") == "hello\nmore\n"


def test_commits_are_their_projects_and_other_images_names_are_refused(commit_server):
    server = commit_server
    mine = make_container(server)["id"]
    name = unique("ours")
    assert commit(server, mine, name).status_code == 200

    # Another project's container is not found; the image is not theirs to
    # see, use or replace.
    theirs = commit(server, mine, unique("x"), key=KEY_B)
    assert theirs.status_code == 404, theirs.text
    listed = v1(server, "GET", "/images", key=KEY_B).json()
    assert name not in [i["name"] for i in listed["data"]], listed
    assert name in [i["name"] for i in v1(server, "GET", "/images").json()["data"]]
    used = v1(server, "POST", "/containers", key=KEY_B, json={"name": "b", "image": name})
    assert used.status_code == 400 and name in used.text, used.text
    their_container = make_container(server, key=KEY_B)["id"]
    clash = commit(server, their_container, name, key=KEY_B)
    assert clash.status_code == 409 and "not this project's" in clash.text, clash.text

    # The operator's image, shellgate's own, a bad name.
    for taken, status in [("tiny", 409), ("host", 400), ("debian-12", 400), ("../up", 400)]:
        refused = commit(server, mine, taken)
        assert refused.status_code == status, (taken, refused.status_code, refused.text)
