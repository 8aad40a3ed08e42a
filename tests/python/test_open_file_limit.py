"""A server near its open-file limit: every live container holds a few of
the server's descriptors, so past a point a start is refused, 503
`no_room` saying why and when to retry, before the process runs out
(`EMFILE` would fail every accept, open and pipe, for every tenant). The
server keeps serving meanwhile, and a container deleted makes room."""

import resource

import pytest
import requests

from conftest import KEY_A, server_inheriting, wait_until

pytestmark = pytest.mark.single_box("starts a server of its own with a low open-file limit")

# Low enough that the refusal comes after a hundred-odd containers.
OPEN_FILES = 320


def low_open_file_limit():
    """In the child before exec: soft and hard limits both low (the server
    raises its soft limit to the hard one)."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))


@pytest.fixture
def limited_server():
    with server_inheriting(low_open_file_limit, "shellgate-py-nofile-") as server:
        yield server


def test_a_start_past_the_descriptors_it_can_spare_is_a_503_and_the_server_serves_on(limited_server):
    server = limited_server
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {KEY_A}"
    base = server.base_url

    def start_one(name):
        """Creates a container and runs a command in it (it is live):
        (its id, the refusal if one was refused)."""
        made = session.post(f"{base}/containers", json={"name": name}, timeout=60)
        if made.status_code == 503:
            return None, made
        assert made.status_code == 200, made.text
        container = made.json()["id"]
        ran = session.post(f"{base}/containers/{container}/exec", json={"commands": ["true"]}, timeout=60)
        if ran.status_code == 503:
            return container, ran
        assert ran.status_code == 200, ran.text
        return container, None

    live, refused, made = [], None, None
    while refused is None:
        assert len(live) < OPEN_FILES, "never refused: the server would have run out of descriptors"
        made, refused = start_one(f"c{len(live)}")
        if refused is None:
            live.append(made)
    print(f"\n{len(live)} live before the refusal: {refused.json()['error']['message']}")
    # Many started first; the refusal says what ran out, and when to retry.
    assert len(live) > 50, len(live)
    error = refused.json()["error"]
    assert error["code"] == "no_room", refused.text
    assert "descriptors" in error["message"] and "RLIMIT_NOFILE" in error["message"], refused.text
    assert refused.headers.get("retry-after") == "5", refused.headers

    # The server serves on: health, a listing, a command in a live container.
    assert requests.get(f"http://127.0.0.1:{server.port}/healthz", timeout=10).status_code == 200
    # Nothing half-made: a refused create left no container; one whose
    # start was refused at its first command is there, suspended.
    shown, after = {}, None
    while True:
        listed = session.get(f"{base}/containers", params={"limit": 100, **({"after": after} if after else {})},
                             timeout=30)
        assert listed.status_code == 200, listed.text
        page = listed.json()
        shown.update({c["id"]: c["status"] for c in page["data"]})
        if not page["has_more"]:
            break
        after = page["data"][-1]["id"]
    assert set(shown) == set(live) | ({made} if made else set()), (len(shown), len(live), made)
    ran = session.post(f"{base}/containers/{live[0]}/exec", json={"commands": ["echo still"]}, timeout=60)
    assert ran.status_code == 200 and ran.json()["output"][0]["stdout"] == "still\n", ran.text

    # Containers deleted give their descriptors back once their processes
    # are gone (a delete answers first; the teardown follows): another
    # starts, for a client that retries as told.
    for container in live[-4:]:
        assert session.delete(f"{base}/containers/{container}", timeout=60).status_code == 200
    late = []

    def started():
        # The create may start it too, and be the one refused meanwhile.
        if not late:
            made = session.post(f"{base}/containers", json={"name": "after"}, timeout=60)
            assert made.status_code in (200, 503), made.text
            if made.status_code == 503:
                return False
            late.append(made.json()["id"])
        ran = session.post(f"{base}/containers/{late[0]}/exec", json={"commands": ["true"]}, timeout=60)
        assert ran.status_code in (200, 503), ran.text
        return ran.status_code == 200

    assert wait_until(started, 60, interval=0.5)
    assert "Too many open files" not in server.log.read_text()
