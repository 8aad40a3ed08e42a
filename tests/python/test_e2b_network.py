"""E2B's network update (`Sandbox.update_network`, `PUT
/sandboxes/{id}/network`) through E2B's own SDK: a running sandbox's egress
rules replaced, in force for the next request, kept across a pause and a
restart of the server; a sandbox created without network refused with a
409 that says why.

The sandboxes reach the egress tests' world (test_egress.py): web servers
under test host names inside a network namespace of the test's own.
"""

import pytest
from e2b import Sandbox, SandboxException

from conftest import e2b_environment, wait_until
from test_egress import world  # noqa: F401 (the module's fixture)

# The web server's answer (200) or the egress proxy's refusal (403),
# through the proxy the sandbox's HTTP_PROXY names.
FETCH = "curl -s -o /dev/null -w '%{http_code}' http://a.allowed.test/e2b-network"
ALLOW_A = {"allow_out": ["a.allowed.test"], "deny_out": ["0.0.0.0/0"]}


@pytest.fixture(scope="module")
def server(world):  # noqa: F811
    return world.server()


@pytest.fixture
def e2b(server, monkeypatch):
    for name, value in e2b_environment(server).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("E2B_DEBUG", raising=False)


def fetch(sandbox) -> str:
    return sandbox.commands.run(FETCH).stdout.strip()


def answered(sandbox):
    """`fetch`, or None while the sandbox cannot be reached yet."""
    try:
        return fetch(sandbox)
    except SandboxException:
        return None


def requests_seen(world) -> int:  # noqa: F811
    return sum(1 for r in world.requests() if r.get("path") == "/e2b-network")


def test_an_update_denies_and_allows_again_at_once(server, e2b, world):  # noqa: F811
    sandbox = Sandbox.create(network=ALLOW_A, timeout=120)
    try:
        assert fetch(sandbox) == "200"
        seen = requests_seen(world)

        # Everything denied: the proxy refuses the very next request, and
        # nothing reaches the server.
        sandbox.update_network({"deny_out": ["0.0.0.0/0"]})
        assert fetch(sandbox) == "403"
        assert requests_seen(world) == seen
        info = sandbox.get_info()
        assert info.allow_internet_access is False
        assert not (info.network or {}).get("allow_out")

        # Allowed again, with no restart of its processes: a process
        # started before the updates is still there.
        sleeper = sandbox.commands.run("sleep 600", background=True)
        sandbox.update_network(ALLOW_A)
        assert fetch(sandbox) == "200"
        assert sleeper.pid in [p.pid for p in sandbox.commands.list()]
        assert sandbox.get_info().network["allow_out"] == ["a.allowed.test"]

        # Another name only: a.allowed.test is refused; a denyOut entry
        # of an open network (everything but it) cannot be said.
        sandbox.update_network({"allow_out": ["other.test"], "deny_out": ["0.0.0.0/0"]})
        assert fetch(sandbox) == "403"
        with pytest.raises(SandboxException) as partial:
            sandbox.update_network({"deny_out": ["a.allowed.test"]})
        assert "400" in str(partial.value) and "denyOut[0]" in str(partial.value)
    finally:
        sandbox.kill()


def test_an_update_is_kept_across_a_pause_and_a_restart(server, e2b, world):  # noqa: F811
    sandbox = Sandbox.create(network=ALLOW_A, timeout=300)
    try:
        sandbox.update_network({"allow_internet_access": False})
        sandbox.pause()
        resumed = Sandbox.connect(sandbox.sandbox_id)
        assert fetch(resumed) == "403"

        resumed.update_network(ALLOW_A)
        server.stop()
        server.start()
        again = Sandbox.connect(sandbox.sandbox_id)
        assert wait_until(lambda: answered(again) == "200", 60, interval=0.5)
        again.update_network({"allow_internet_access": False})
        assert fetch(again) == "403"
    finally:
        Sandbox.kill(sandbox.sandbox_id)


def test_a_sandbox_created_without_network_cannot_be_given_one(server, e2b):
    sandbox = Sandbox.create(allow_internet_access=False, timeout=60)
    try:
        with pytest.raises(SandboxException) as refused:
            sandbox.update_network(ALLOW_A)
        said = str(refused.value)
        assert said.startswith("409") and "created without network" in said, said
        # Nothing changed: still no network at all.
        assert sandbox.get_info().allow_internet_access is False
        assert "HTTP_PROXY" not in sandbox.commands.run("env").stdout
    finally:
        sandbox.kill()
