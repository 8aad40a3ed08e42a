"""A container's exposed ports reached through a real `shellgate serve`:
HTTP and WebSocket by path and by host name, the API key or the
container's port token (header, query, cookie), and the hostile cases: no
credentials, another project's container, another container's token, a
port not exposed, nothing listening, the host's own services, a suspended
container (not woken).

The container runs `port_app.py` below (the standard library only): it
answers with what it was asked (path, headers, body) and echoes WebSocket
messages, so a test sees exactly what reached the container."""

import base64
import hashlib
import os
import socket

import openai
import pytest
import requests

from conftest import KEY_A, KEY_B, exec_commands, wait_until

PORT_APP = r'''
import base64, hashlib, http.server, json, socketserver, struct, sys, urllib.parse

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                chunk = self.rfile.read(size)
                self.rfile.readline()
                if size == 0:
                    break
                body += chunk
        if self.headers.get("Upgrade", "").lower() == "websocket":
            return self.websocket()
        if self.path.startswith("/answer"):
            return self.answer_as_asked()
        if self.path.startswith("/echo"):
            payload, kind = body, "application/octet-stream"
        else:
            payload = json.dumps({
                "method": self.command,
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body_bytes": len(body),
            }).encode()
            kind = "application/json"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Set-Cookie", "app=1; Path=/")
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_DELETE = answer

    def answer_as_asked(self):
        """/answer?status=N&h=Name: value&...: that status and those headers."""
        asked = urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query)
        self.send_response(int(dict(asked).get("status", "200")))
        for key, value in asked:
            if key == "h":
                name, _, value = value.partition(":")
                self.send_header(name.strip(), value.strip())
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def websocket(self):
        key = self.headers["Sec-WebSocket-Key"]
        accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        while True:
            head = self.rfile.read(2)
            if len(head) < 2:
                return
            opcode, length = head[0] & 0x0F, head[1] & 0x7F
            if length == 126:
                length = struct.unpack(">H", self.rfile.read(2))[0]
            elif length == 127:
                length = struct.unpack(">Q", self.rfile.read(8))[0]
            mask = self.rfile.read(4)
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(length)))
            if opcode == 8:
                self.wfile.write(b"\x88\x00")
                return
            reply = b"echo:" + data
            self.wfile.write(bytes([0x80 | opcode]) + frame_length(len(reply)) + reply)
            self.wfile.flush()

def frame_length(n):
    if n < 126:
        return bytes([n])
    if n < 65536:
        return bytes([126]) + struct.pack(">H", n)
    return bytes([127]) + struct.pack(">Q", n)

class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True

Server(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
'''

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def start_app(client, container_id, port):
    """Starts port_app.py on `port` in the container, in the background."""
    exec_commands(
        client,
        container_id,
        [
            f"cat > /tmp/port_app.py <<'EOF'\n{PORT_APP}\nEOF",
            f"nohup python3 /tmp/port_app.py {port} >/tmp/app-{port}.log 2>&1 &",
        ],
    )


def path_url(server, container_id, port, rest=""):
    return f"http://{server.host}:{server.port}/v1/containers/{container_id}/ports/{port}/{rest}"


def host_headers(server, container_id, port, **more):
    return {"Host": f"{port}-{container_id}.localhost:{server.port}", **more}


def host_url(server, rest=""):
    return f"http://{server.host}:{server.port}/{rest}"


def bearer(key=KEY_A):
    return {"Authorization": f"Bearer {key}"}


def wait_listening(server, container_id, port):
    """Waits until the app answers through the proxy (502 until it listens)."""
    def up():
        answer = requests.get(path_url(server, container_id, port, "ready"), headers=bearer(), timeout=10)
        return answer.status_code == 200
    assert wait_until(up, 30), "the app never listened"


def create(client, **body):
    return client.post("/containers", body={"name": "ports", **body}, cast_to=object)


@pytest.fixture(scope="module")
def app(server):
    """A container of project A exposing 8000 (the app) and 8001 (nothing)."""
    client = server.client(KEY_A)
    container = create(client, exposed_ports=[8000, 8001])
    start_app(client, container["id"], 8000)
    wait_listening(server, container["id"], 8000)
    return container


def test_the_container_object_shows_its_ports_and_token(server, client, app):
    assert [p["port"] for p in app["exposed_ports"]] == [8000, 8001]
    assert app["port_token"].startswith("sgpt_")
    cid = app["id"]
    # The URLs name the server asked (its Host): `client`'s is `server`'s
    # (in a cluster, each replica names itself).
    shown = client.containers.retrieve(cid).model_dump()
    ports = shown["exposed_ports"]
    assert ports[0]["url"] == f"http://8000-{cid}.localhost:{server.port}/"
    assert ports[0]["path_url"] == f"http://{server.host}:{server.port}/v1/containers/{cid}/ports/8000/"
    again = client.containers.retrieve(cid).model_dump()
    assert again["exposed_ports"] == ports and again["port_token"] == app["port_token"]
    plain = create(client)
    assert plain["exposed_ports"] == [] and "port_token" not in plain
    client.containers.delete(plain["id"])


@pytest.mark.parametrize(
    "ports",
    [[80], [1023], [65536], [8000, 8000], list(range(9000, 9017)), ["http"]],
)
def test_exposed_ports_must_be_few_unique_and_unprivileged(client, ports):
    with pytest.raises(openai.BadRequestError) as refused:
        create(client, exposed_ports=ports)
    assert refused.value.body["param"].startswith("exposed_ports")


def test_http_by_path_strips_the_prefix_and_the_credentials(server, app):
    cid = app["id"]
    answer = requests.get(
        path_url(server, cid, 8000, "headers/a%2Fb?x=1&y=%20"),
        headers={**bearer(), "X-Forwarded-For": "6.6.6.6", "Cookie": "mine=1"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    seen = answer.json()
    assert seen["path"] == "/headers/a%2Fb?x=1&y=%20"
    headers = seen["headers"]
    assert "authorization" not in headers
    assert headers["x-forwarded-for"] == "127.0.0.1", "the client's own claim is replaced"
    assert headers["x-forwarded-prefix"] == f"/v1/containers/{cid}/ports/8000"
    assert headers["x-forwarded-proto"] == "http"
    # The cookies a browser sends there are the server's origin's (the
    # console's session among them), never the container's.
    assert "cookie" not in headers
    # The server's origin is not the container's to write on.
    assert "set-cookie" not in answer.headers
    assert answer.headers["content-security-policy"].startswith("sandbox")
    root = requests.get(path_url(server, cid, 8000).rstrip("/"), headers=bearer(), timeout=30)
    assert root.json()["path"] == "/"
    alias = requests.get(
        f"http://{server.host}:{server.port}/api/v1/containers/{cid}/ports/8000/x", headers=bearer(), timeout=30
    )
    assert alias.json()["path"] == "/x"


# Headers that would act on the origin serving them, beyond the one answer.
ORIGIN_WIDE = [
    ("Set-Cookie", "toss=1; Path=/"),
    ("Clear-Site-Data", '"*"'),
    ("Service-Worker-Allowed", "/"),
    ("Access-Control-Allow-Origin", "https://evil.example"),
    ("Access-Control-Allow-Credentials", "true"),
    ("Access-Control-Allow-Headers", "authorization"),
    ("Strict-Transport-Security", "max-age=31536000; includeSubDomains"),
    ("Alt-Svc", 'h2="evil.example:443"; ma=86400'),
    ("NEL", '{"report_to":"e","max_age":86400}'),
    ("Report-To", '{"group":"e","max_age":86400,"endpoints":[{"url":"https://evil.example/r"}]}'),
    ("Origin-Agent-Cluster", "?1"),
    ("Accept-CH", "Sec-CH-UA-Full-Version-List"),
    ("Timing-Allow-Origin", "*"),
    ("WWW-Authenticate", 'Basic realm="shellgate"'),
    ("Link", '</sw.js>; rel="serviceworker"'),
    ("Link", "<https://evil.example/x.js>; rel=preload; as=script"),
    ("Refresh", "0; url=https://evil.example/"),
]
# Headers that act on the one answer only.
PER_ANSWER = [
    ("X-App", "1"),
    ("Cache-Control", "no-store"),
    ("X-Frame-Options", "SAMEORIGIN"),
    ("Link", '<?page=2>; rel="next"'),
]


def asked_answer(status, headers):
    return [("status", str(status))] + [("h", f"{name}: {value}") for name, value in headers]


def test_the_path_form_keeps_nothing_that_acts_on_the_servers_origin(server, app):
    cid = app["id"]
    params = asked_answer(200, ORIGIN_WIDE + PER_ANSWER)
    by_path = requests.get(path_url(server, cid, 8000, "answer"), params=params, headers=bearer(), timeout=30)
    assert by_path.status_code == 200, by_path.text
    for name, _ in ORIGIN_WIDE:
        if name != "Link":
            assert name not in by_path.headers, (name, by_path.headers)
    for name, value in PER_ANSWER:
        assert by_path.headers[name] == value, (name, by_path.headers)
    assert by_path.headers["content-security-policy"].startswith("sandbox")
    # The host form is the port's own origin: the same answer passes whole,
    # but a cookie stays the port host's.
    by_host = requests.get(
        host_url(server, "answer"),
        params=asked_answer(200, ORIGIN_WIDE + [("Set-Cookie", "wide=1; Domain=localhost; Path=/")]),
        headers=host_headers(server, cid, 8000, **bearer()),
        timeout=30,
    )
    assert by_host.status_code == 200, by_host.text
    for name, value in ORIGIN_WIDE:
        if name not in ("Link", "Set-Cookie"):
            assert by_host.headers[name] == value, (name, by_host.headers)
    assert by_host.headers["set-cookie"] == "toss=1; Path=/, wide=1; Path=/"


@pytest.mark.parametrize(
    "location, kept",
    [
        ("/login", "{prefix}/login"),
        ("{prefix}/already/there", "{prefix}/already/there"),
        ("next?page=2", "next?page=2"),
        ("{origin}{prefix}/absolute", "{origin}{prefix}/absolute"),
        ("https://evil.example/", None),
        ("//evil.example/", None),
        ("/\\evil.example/", None),
        ("{origin}/console", None),
        ("../../../../console", None),
        ("/%2e%2e/%2e%2e/%2e%2e/%2e%2e/console", None),
        ("javascript:alert(document.domain)", None),
    ],
)
def test_a_redirect_on_the_path_form_stays_under_the_port(server, app, location, kept):
    cid = app["id"]
    origin = f"http://{server.host}:{server.port}"
    prefix = f"/v1/containers/{cid}/ports/8000"
    fill = lambda text: text.format(origin=origin, prefix=prefix)  # noqa: E731
    answer = requests.get(
        path_url(server, cid, 8000, "answer"),
        params=asked_answer(302, [("Location", fill(location)), ("Refresh", f"0; url={fill(location)}")]),
        headers=bearer(),
        allow_redirects=False,
        timeout=30,
    )
    assert answer.status_code == 302, answer.text
    if kept is None:
        assert "location" not in answer.headers and "refresh" not in answer.headers, answer.headers
    else:
        assert answer.headers["location"] == fill(kept)
        assert answer.headers["refresh"] == f"0; url={fill(kept)}"


def raw_request(server, lines):
    """Sends a request's head as written (stdlib only) and returns the status
    line of the answer."""
    with socket.create_connection((server.host, server.port), timeout=30) as conn:
        conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = b""
        while b"\r\n" not in head:
            chunk = conn.recv(4096)
            if not chunk:
                break
            head += chunk
        return head.split(b"\r\n", 1)[0].decode()


def test_a_request_with_two_host_headers_is_refused(server, app):
    port_host = host_headers(server, app["id"], 8000)["Host"]
    api_host = f"{server.host}:{server.port}"
    auth = f"Authorization: Bearer {KEY_A}"
    for hosts in [(port_host, api_host), (api_host, port_host), (port_host, port_host)]:
        status = raw_request(server, ["GET /v1/containers HTTP/1.1", *(f"Host: {h}" for h in hosts), auth, "Connection: close"])
        assert status.startswith("HTTP/1.1 400"), (hosts, status)
    one = raw_request(server, ["GET /v1/containers HTTP/1.1", f"Host: {port_host}", auth, "Connection: close"])
    assert one.startswith("HTTP/1.1 200"), one


def test_bodies_stream_both_ways(server, app):
    payload = os.urandom(3 << 20)
    answer = requests.post(path_url(server, app["id"], 8000, "echo"), data=payload, headers=bearer(), timeout=60)
    assert answer.status_code == 200
    assert answer.content == payload
    chunks = (payload[i : i + 65536] for i in range(0, len(payload), 65536))
    chunked = requests.put(
        host_url(server, "echo"),
        data=chunks,
        headers=host_headers(server, app["id"], 8000, **bearer()),
        timeout=60,
    )
    assert chunked.status_code == 200 and chunked.content == payload


def test_http_by_host_name_forwards_the_whole_path(server, app):
    answer = requests.get(
        host_url(server, "v1/containers?q=1"), headers=host_headers(server, app["id"], 8000, **bearer()), timeout=30
    )
    assert answer.status_code == 200, answer.text
    seen = answer.json()
    assert seen["path"] == "/v1/containers?q=1"
    assert "x-forwarded-prefix" not in seen["headers"]
    assert seen["headers"]["x-forwarded-host"] == f"8000-{app['id']}.localhost:{server.port}"
    # Any other host is the API, untouched.
    api = requests.get(host_url(server, "v1/containers"), headers=bearer(), timeout=30)
    assert api.json()["object"] == "list"


def websocket(server, path, headers, message=b"hello"):
    """Opens a WebSocket through the server, sends `message`, returns the
    first frame's payload (stdlib only)."""
    key = base64.b64encode(os.urandom(16)).decode()
    with socket.create_connection((server.host, server.port), timeout=30) as conn:
        lines = [f"GET {path} HTTP/1.1", f"Host: {server.host}:{server.port}"]
        lines += [f"{k}: {v}" for k, v in headers.items() if k != "Host"]
        if "Host" in headers:
            lines[1] = f"Host: {headers['Host']}"
        lines += ["Upgrade: websocket", "Connection: Upgrade", f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
        conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(4096)
            assert chunk, f"closed during the handshake: {head!r}"
            head += chunk
        head, rest = head.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 101"), head
        accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest())
        fields = dict(
            line.split(": ", 1) for line in head.decode().split("\r\n")[1:] if ": " in line
        )
        assert {k.lower(): v for k, v in fields.items()}["sec-websocket-accept"] == accept.decode()
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(message))
        conn.sendall(bytes([0x82, 0x80 | len(message)]) + mask + masked)
        while len(rest) < 2 or len(rest) < 2 + (rest[1] & 0x7F):
            chunk = conn.recv(4096)
            assert chunk, "closed before the echo"
            rest += chunk
        return rest[2 : 2 + (rest[1] & 0x7F)]


def test_a_websocket_is_relayed_by_path_and_by_host(server, app):
    cid = app["id"]
    assert websocket(server, f"/v1/containers/{cid}/ports/8000/ws", bearer()) == b"echo:hello"
    by_host = host_headers(server, cid, 8000, **bearer())
    assert websocket(server, "/ws", by_host, b"by host") == b"echo:by host"
    token = {"Host": by_host["Host"]}
    assert websocket(server, f"/ws?shellgate_port_token={app['port_token']}", token, b"t") == b"echo:t"


def test_the_port_token_opens_the_port_and_never_reaches_it(server, app):
    cid, token = app["id"], app["port_token"]
    by_header = requests.get(path_url(server, cid, 8000, "h"), headers={"X-Shellgate-Port-Token": token}, timeout=30)
    assert by_header.status_code == 200
    assert "x-shellgate-port-token" not in by_header.json()["headers"]
    # By query on the host form: stripped, and a cookie for that host.
    first = requests.get(
        host_url(server, f"page?a=1&shellgate_port_token={token}"), headers=host_headers(server, cid, 8000), timeout=30
    )
    assert first.status_code == 200, first.text
    assert first.json()["path"] == "/page?a=1"
    cookies = first.headers["set-cookie"]
    assert f"shellgate_port_token={token}" in cookies
    assert "HttpOnly" in cookies and "SameSite=Lax" in cookies
    assert "app=1" in cookies, "the container's own cookies pass on its own host"
    second = requests.get(
        host_url(server, "next"),
        headers=host_headers(server, cid, 8000, Cookie=f"app=1; shellgate_port_token={token}"),
        timeout=30,
    )
    assert second.status_code == 200
    assert second.json()["headers"]["cookie"] == "app=1"


def test_no_credentials_is_401_and_wrong_ones_are_404(server, client, app):
    cid = app["id"]
    nothing = requests.get(path_url(server, cid, 8000), timeout=30)
    assert nothing.status_code == 401
    assert nothing.json()["error"]["code"] == "invalid_api_key"
    assert requests.get(path_url(server, cid, 8000), headers=bearer("sk-wrong"), timeout=30).status_code == 401
    by_host = requests.get(host_url(server), headers=host_headers(server, cid, 8000), timeout=30)
    assert by_host.status_code == 401
    # Project B's key on project A's container.
    foreign = requests.get(path_url(server, cid, 8000), headers=bearer(KEY_B), timeout=30)
    assert foreign.status_code == 404
    assert requests.get(host_url(server), headers=host_headers(server, cid, 8000, **bearer(KEY_B)), timeout=30).status_code == 404
    # Container A's token on another container (B, of the same project).
    other = create(client, exposed_ports=[8000])
    start_app(client, other["id"], 8000)
    wait_listening(server, other["id"], 8000)
    stolen = requests.get(
        path_url(server, other["id"], 8000), headers={"X-Shellgate-Port-Token": app["port_token"]}, timeout=30
    )
    assert stolen.status_code == 404
    assert requests.get(path_url(server, cid, 8000), headers={"X-Shellgate-Port-Token": "sgpt_guess"}, timeout=30).status_code == 404
    # A deleted container is gone for its token too.
    token = other["port_token"]
    client.containers.delete(other["id"])
    gone = requests.get(path_url(server, other["id"], 8000), headers={"X-Shellgate-Port-Token": token}, timeout=30)
    assert gone.status_code == 404


def test_a_port_not_exposed_is_404_and_nothing_listening_is_502(server, app):
    cid = app["id"]
    # 9000 is not exposed.
    assert requests.get(path_url(server, cid, 9000), headers=bearer(), timeout=30).status_code == 404
    assert requests.get(path_url(server, cid, "http"), headers=bearer(), timeout=30).status_code == 404
    silent = requests.get(path_url(server, cid, 8001), headers=bearer(), timeout=30)
    assert silent.status_code == 502
    assert silent.json()["error"]["code"] == "port_not_listening"


def test_the_servers_port_and_host_services_are_not_reached(server, client):
    host_service = socket.socket()
    host_service.bind(("127.0.0.1", 0))
    host_service.listen(8)
    host_service.setblocking(False)
    host_port = host_service.getsockname()[1]
    container = create(client, exposed_ports=[host_port, server.port])
    for port in (host_port, server.port):
        answer = requests.get(path_url(server, container["id"], port), headers=bearer(), timeout=30)
        assert answer.status_code == 502, (port, answer.text)
        assert answer.json()["error"]["code"] == "port_not_listening"
    with pytest.raises(BlockingIOError):
        host_service.accept()
    host_service.close()
    client.containers.delete(container["id"])


def test_a_suspended_container_is_502_and_not_woken(fresh_server):
    server = fresh_server(idle_suspend_after_secs=1, sweep_interval_secs=1)
    client = server.client()
    container = create(client, exposed_ports=[8000])
    start_app(client, container["id"], 8000)
    wait_listening(server, container["id"], 8000)
    assert wait_until(lambda: client.containers.retrieve(container["id"]).status == "suspended", 20)
    before = client.containers.retrieve(container["id"])
    answer = requests.get(path_url(server, container["id"], 8000), headers=bearer(), timeout=30)
    assert answer.status_code == 502
    assert answer.json()["error"]["code"] == "port_not_listening"
    assert "suspended" in answer.json()["error"]["message"]
    after = client.containers.retrieve(container["id"])
    assert after.status == "suspended" and after.last_active_at == before.last_active_at
