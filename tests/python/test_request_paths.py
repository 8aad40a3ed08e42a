"""A request's path reaches the router in one spelling, whichever server
role answers (a single box, or a cluster's replica with
SHELLGATE_TEST_CLUSTER=1): a path that a router, a path extractor and a
URL parser would read differently (a dot segment however encoded, a
backslash, `//`, a byte that needs encoding) is refused with a 400 in the
OpenAI error envelope before anything routes it, and an absolute-form
target is read as its path. Requests are written on raw sockets: HTTP
clients resolve `..` before sending. The cluster's own walls (a node's
routes never reachable through a replica) are in test_cluster.py."""

import json

import pytest

from conftest import KEY_A, raw_request

AUTH = {"Authorization": f"Bearer {KEY_A}"}

REFUSED = [
    "/v1/../v1/containers",
    "/v1/containers/../containers",
    "/v1/./containers",
    "/v1/%2e%2e/v1/containers",
    "/v1/%2E%2e/v1/containers",
    "/v1/.%2e/v1/containers",
    "/v1/%2e/containers",
    "/v1/x/..%2f/containers",
    "/v1/containers%2f..%2f..%2fmetrics",
    "/v1\\containers",
    "/v1/%5ccontainers",
    "/v1//containers",
    "//v1/containers",
    "/v1/../metrics",
    "/api/v1/../../metrics",
    "/console/api/../../metrics",
    '/v1/containers/"x"',
    "/v1/containers/{x}",
    "/v1/%zz",
]


def body_of(text: str) -> dict:
    return json.loads(text.split("\r\n\r\n", 1)[1])


@pytest.mark.parametrize("target", REFUSED)
def test_a_path_read_otherwise_by_some_reader_is_refused_before_routing(server, target):
    status, text = raw_request(server.host, server.port, "GET", target, AUTH)
    assert status == 400, text
    error = body_of(text)["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_request_path", error
    # A create spelled so makes nothing either.
    status, text = raw_request(server.host, server.port, "POST", target,
                               {**AUTH, "Content-Type": "application/json"}, body=b'{"name": "dotted"}')
    assert status == 400, text


def test_plain_paths_and_absolute_form_targets_are_served(server, client):
    status, text = raw_request(server.host, server.port, "GET", "/v1/containers?limit=1", AUTH)
    assert status == 200, text
    assert body_of(text)["object"] == "list"
    # An absolute-form target is its path, and its authority the Host.
    authority = f"{server.host}:{server.port}"
    status, text = raw_request(server.host, server.port, "GET", f"http://{authority}/v1/containers?limit=1",
                               AUTH, host_header=False)
    assert status == 200, text
    status, text = raw_request(server.host, server.port, "GET", f"http://{authority}/v1/containers",
                               AUTH)
    assert status == 200, text
    # Naming another host than the Host header says is two readings: refused.
    status, text = raw_request(server.host, server.port, "GET", "http://elsewhere.example/v1/containers",
                               AUTH)
    assert status == 400 and body_of(text)["error"]["code"] == "invalid_request_path", text
    status, text = raw_request(server.host, server.port, "GET", "http://elsewhere.example/v1/../metrics",
                               AUTH, host_header=False)
    assert status == 400, text
    # An encoded slash is data in its segment, not a separator: an id that
    # holds one names no container.
    status, text = raw_request(server.host, server.port, "GET", "/v1/containers/cntr_x%2F..%2Fy", AUTH)
    assert status == 400, text
    status, text = raw_request(server.host, server.port, "GET", "/v1/containers/cntr_x%2Fy", AUTH)
    assert status == 404, text
    assert client.containers.list().object == "list"
