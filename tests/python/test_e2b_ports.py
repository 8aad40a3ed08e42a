"""A server in an E2B sandbox reached through `get_host(port)` as on E2B:
public unless the sandbox was created with `allow_public_traffic: False`,
then only with its `e2b-traffic-access-token`; never with another
sandbox's token or another project's key.

`get_host()` names `{port}-{id}.{domain}`; the create's `domain` is the
ports' base domain with the server's port (`localhost:PORT`). Browsers
resolve `*.localhost` to the loopback themselves; Python's resolver does
not, so the requests here go to the server's address with that host as
their `Host`, which is what a browser sends."""

import json

import pytest
import requests
from e2b import Sandbox

from conftest import E2B_KEY_B, KEY_A, KEY_B, wait_until

ECHO_SERVER = """
import http.server, json, sys
class Echo(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Echo).serve_forever()
"""


def fetch(server, host: str, path: str = "/", headers: dict = None) -> requests.Response:
    """A plain request (no shellgate key) for `host`, as a browser sends it."""
    return requests.get(
        f"http://{server.host}:{server.port}{path}", headers={"Host": host, **(headers or {})}, timeout=30
    )


def serve(sandbox: Sandbox, port: int) -> None:
    sandbox.files.write("/home/user/echo.py", ECHO_SERVER)
    sandbox.commands.run(f"python3 /home/user/echo.py {port}", background=True)


def test_a_public_sandbox_s_server_is_reached_through_get_host(server, e2b):
    sandbox = Sandbox.create()
    try:
        serve(sandbox, 8000)
        host = sandbox.get_host(8000)
        assert host == f"8000-{sandbox.sandbox_id}.localhost:{server.port}", host
        assert wait_until(lambda: fetch(server, host).status_code == 200, 60), fetch(server, host).text
        seen = fetch(server, host, "/app?x=1", {"Authorization": "Bearer not-forwarded"}).json()
        assert seen["path"] == "/app?x=1", seen
        assert "authorization" not in seen["headers"], seen
        # Any port is reached; one where nothing listens is a 502.
        refused = fetch(server, sandbox.get_host(8001))
        assert refused.status_code == 502, refused.text
        # The path form is shellgate's: it still wants a key.
        by_path = requests.get(f"{server.base_url}/containers/{sandbox.sandbox_id}/ports/8000/", timeout=30)
        assert by_path.status_code == 401, by_path.text
    finally:
        sandbox.kill()
    # Killed, it is no sandbox: its host answers as any container's port
    # asked without a key.
    gone = fetch(server, host)
    assert gone.status_code == 401, gone.text


def test_a_private_sandbox_s_ports_want_its_traffic_token(server, e2b):
    sandbox = Sandbox.create(network={"allow_public_traffic": False})
    other = Sandbox.create(network={"allow_public_traffic": False})
    theirs = Sandbox.create(api_key=E2B_KEY_B, network={"allow_public_traffic": False})
    try:
        token = sandbox.traffic_access_token
        assert token and token != other.traffic_access_token
        serve(sandbox, 8000)
        host = sandbox.get_host(8000)
        mine = {"e2b-traffic-access-token": token}
        assert wait_until(lambda: fetch(server, host, headers=mine).status_code == 200, 60), \
            fetch(server, host, headers=mine).text
        seen = fetch(server, host, headers=mine).json()
        assert "e2b-traffic-access-token" not in seen["headers"], seen

        refused = fetch(server, host)
        assert refused.status_code == 401 and "traffic access token" in refused.text, refused.text
        for wrong in (other.traffic_access_token, theirs.traffic_access_token, token + "x", ""):
            answer = fetch(server, host, headers={"e2b-traffic-access-token": wrong})
            assert answer.status_code == 401, (wrong, answer.text)
        # Another project's key is no key of this sandbox (the unknown
        # container's 404); the project's own key opens it, as a
        # container's port.
        for key in (KEY_B, E2B_KEY_B):
            answer = fetch(server, host, headers={"Authorization": f"Bearer {key}"})
            assert answer.status_code == 404, (key, answer.text)
        owner = fetch(server, host, headers={"Authorization": f"Bearer {KEY_A}"})
        assert owner.status_code == 200, owner.text
    finally:
        for sbx in (sandbox, other, theirs):
            sbx.kill()
