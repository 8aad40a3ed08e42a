"""Wrong API keys are throttled per client address and per key prefix,
against a real `shellgate serve`, on every door a key opens (the API's
Bearer header, E2B's `X-API-KEY`, the console's sign-in, a container's
port); a right key is never slowed where it is known, and another address
is not held back by a guesser's failures.

The other addresses are other loopback addresses (all of 127.0.0.0/8 is
this machine's): a connection made from 127.0.0.N is client 127.0.0.N."""

import http.client
import json

import pytest

from conftest import E2B_KEY_B, KEY_A, KEY_B

# What a bucket holds before it refuses (auth::FAILURE_BURST).
BURST = 20


def call(server, key, source="127.0.0.1", path="/v1/containers", method="GET", body=None, headers=None):
    """(status, headers, JSON body) of a request made from `source`."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=30, source_address=(source, 0))
    try:
        sent = {"Connection": "close", **(headers or {})}
        if key is not None:
            sent.setdefault("Authorization", f"Bearer {key}")
        payload = None
        if body is not None:
            payload = json.dumps(body)
            sent["Content-Type"] = "application/json"
        conn.request(method, path, body=payload, headers=sent)
        answer = conn.getresponse()
        raw = answer.read()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, json.loads(raw or b"null")
    finally:
        conn.close()


def guess_until_throttled(server, path, guesses):
    """Sends each (source address, wrong key) of `guesses` to `path` until one
    is refused with a 429; returns the statuses."""
    statuses = []
    for source, guess in guesses:
        status, headers, body = call(server, guess, source, path=path)
        statuses.append(status)
        if status == 429:
            assert int(headers["retry-after"]) >= 1, headers
            assert body["error"]["code"] == "too_many_failed_keys", body
            return statuses
        assert status == 401, (status, body)
    raise AssertionError(f"never throttled: {statuses}")


def own_container(server):
    """A container of KEY_A's project exposing a port nothing listens on.
    Requests naming it go to its node (in a cluster, where each node keeps
    its own buckets: one node sees every guess)."""
    return server.client(KEY_A).containers.create(name="throttle", extra_body={"exposed_ports": [8000]}).id


def test_wrong_keys_from_one_address_are_throttled_and_a_right_key_is_not(fresh_server):
    server = fresh_server()
    cid = own_container(server)
    mine = f"/v1/containers/{cid}"
    # KEY_A is known from 127.0.0.1 before the guessing starts.
    assert call(server, KEY_A, path=mine)[0] == 200
    # Each guess of another prefix: only the address's bucket runs out.
    statuses = guess_until_throttled(server, mine, (("127.0.0.1", f"{n:03}-not-a-key-at-all") for n in range(400)))
    assert statuses[:BURST] == [401] * BURST
    # Throttled, a guess is refused before its key is read, through every
    # door a key opens: the API, E2B's X-API-KEY (in E2B's envelope), a port.
    guess = "999-not-a-key-at-all"
    assert call(server, guess, path=mine)[0] == 429
    status, _, body = call(server, None, path=f"/sandboxes/{cid}", headers={"X-API-KEY": guess})
    assert status == 429 and body["code"] == 429, body
    assert call(server, guess, path=f"{mine}/ports/8000/")[0] == 429
    # The right key known there is served at once, through each of them.
    assert call(server, KEY_A, path=mine)[0] == 200
    assert call(server, None, path=f"/sandboxes/{cid}", headers={"X-API-KEY": KEY_A})[0] == 404
    assert call(server, KEY_A, path=f"{mine}/ports/8000/")[0] == 502
    # Another address is not held back: a key never used before is read (here
    # another project's: 404), a wrong one is a plain 401.
    assert call(server, KEY_B, source="127.0.0.2", path=mine)[0] == 404
    assert call(server, guess, source="127.0.0.2", path=mine)[0] == 401


@pytest.mark.single_box("console sign-in lands on any node, and each node keeps its own buckets")
def test_console_sign_in_is_throttled_like_the_api(fresh_server):
    server = fresh_server()
    sign_in = lambda key, source="127.0.0.1": call(  # noqa: E731
        server, None, source, path="/console/session", method="POST", body={"key": key})
    assert sign_in(KEY_A)[0] == 200
    statuses = [sign_in(f"{n:03}-not-a-key-at-all")[0] for n in range(BURST + 1)]
    assert statuses == [401] * BURST + [429], statuses
    assert sign_in(KEY_A)[0] == 200
    assert sign_in(KEY_B, source="127.0.0.2")[0] == 200


def test_guesses_at_one_key_prefix_from_many_addresses_are_throttled(fresh_server):
    server = fresh_server()
    cid = own_container(server)
    mine = f"/v1/containers/{cid}"
    assert call(server, KEY_A, source="127.0.0.3", path=mine)[0] == 200
    # One guess per address, all of KEY_A's prefix ("sk-test-").
    guesses = ((f"127.0.1.{n % 250 + 1}", f"sk-test-guess-{n:03}") for n in range(400))
    statuses = guess_until_throttled(server, mine, guesses)
    assert statuses[:BURST] == [401] * BURST
    # KEY_A, known from its own address, still opens; a right key of another
    # prefix opens from anywhere (another project's here: 404). One of the
    # throttled prefix, from an address it never opened anything from, waits
    # like the guesses: the refusal says nothing of whether it is right.
    assert call(server, KEY_A, source="127.0.0.3", path=mine)[0] == 200
    assert call(server, E2B_KEY_B, source="127.0.2.1", path=mine)[0] == 404
    assert call(server, KEY_B, source="127.0.2.1", path=mine)[0] == 429


@pytest.mark.single_box("reads the log of the server that refused to start")
@pytest.mark.parametrize("keys", ["sk-short:alpha", f"{KEY_A}:alpha,tiny:beta"])
def test_a_configured_key_too_short_to_be_safe_is_refused_at_start(fresh_server, keys):
    with pytest.raises(Exception) as refused:
        fresh_server(api_keys=keys)
    assert "at least 16" in str(refused.value)
    assert "sk-short" not in str(refused.value) and "tiny" not in str(refused.value)
