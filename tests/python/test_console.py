"""The web console's server side from outside, as an attacker sees it: its
sessions (cookie, CSRF, sign-out, revocation), its project walls, its
headers, and its live updates. The browser-side tests (rendering, XSS) are
`tests/node/console.test.mjs`."""

import hashlib
import http.client
import json
import threading

import anthropic
import pytest
import requests

from conftest import KEY_A, KEY_B, wait_until

ADMIN_KEY = "sk-test-console-admin"
SPARE_KEY = "sk-test-console-spare"
COOKIE = "__Host-shellgate_console"


@pytest.fixture
def console(fresh_server):
    """A server with two projects' keys, an admin key (project ops) and a
    spare key of project alpha (to revoke)."""
    return fresh_server(api_keys=f"{KEY_A}:alpha,{KEY_B}:beta,{ADMIN_KEY}:ops:admin,{SPARE_KEY}:alpha")


def lines_of(stream):
    """An SSE stream's lines until the test closes it."""
    try:
        yield from stream.iter_lines(decode_unicode=True)
    except (requests.exceptions.RequestException, AttributeError, ValueError):
        return


def collect_events(stream, into: list) -> None:
    """Appends each (event, data) of an SSE stream to `into`, from a thread
    of its own, until the stream is closed."""

    def read():
        event = None
        for line in lines_of(stream):
            if line.startswith("event: "):
                event = line[len("event: "):]
            elif line.startswith("data: ") and event:
                into.append((event, json.loads(line[len("data: "):])))

    threading.Thread(target=read, daemon=True).start()


def root(server) -> str:
    return f"http://{server.host}:{server.port}"


class Session:
    """A browser's view of the console: a cookie jar and the CSRF token."""

    def __init__(self, server, key: str):
        self.base = root(server)
        self.http = requests.Session()
        answer = self.http.post(f"{self.base}/console/session", json={"key": key}, timeout=10)
        assert answer.status_code == 200, answer.text
        self.session = answer.json()
        self.csrf = self.session["csrf_token"]
        # A browser sends a Secure cookie to a loopback address over plain
        # HTTP (a secure context); requests' jar keeps Secure cookies for
        # https:// only, so its copy is told what a browser does.
        for cookie in self.http.cookies:
            cookie.secure = False

    def get(self, path: str, **kw):
        return self.http.get(self.base + path, timeout=30, **kw)

    def send(self, method: str, path: str, csrf=True, **kw):
        headers = kw.pop("headers", {})
        if csrf:
            headers["X-CSRF-Token"] = self.csrf if csrf is True else csrf
        if csrf is not True:
            # Refused before its body is read, the server closes the
            # connection after answering: the next call opens another.
            headers["Connection"] = "close"
        return self.http.request(method, self.base + path, headers=headers, timeout=60, **kw)

    def create(self, name: str) -> str:
        answer = self.send("POST", "/console/api/v1/containers", json={"name": name})
        assert answer.status_code == 200, answer.text
        return answer.json()["id"]


def test_sign_in_gives_a_strict_http_only_cookie_and_refuses_wrong_keys(console):
    base = root(console)
    answer = requests.post(f"{base}/console/session", json={"key": KEY_A}, timeout=10)
    assert answer.status_code == 200
    cookie = answer.headers["set-cookie"]
    # `__Host-`: a browser takes it only from this host, Secure, for `/`,
    # with no Domain, so no other host can plant one (a loopback address is
    # a secure context over plain HTTP).
    assert cookie.startswith(f"{COOKIE}=sgc_"), cookie
    attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")[1:]}
    assert {"httponly", "secure", "path"} <= attributes and "domain" not in attributes, cookie
    assert "SameSite=Strict" in cookie and "Path=/;" in cookie
    body = answer.json()
    assert body["project"] == "alpha" and body["role"] == "member" and len(body["csrf_token"]) >= 32
    # Elsewhere over plain HTTP no browser would keep it: refused, saying so;
    # behind a TLS proxy that says so, given.
    for host in ["console.example.com", "10.1.2.3:8080"]:
        plain = requests.post(f"{base}/console/session", json={"key": KEY_A}, headers={"Host": host}, timeout=10)
        assert plain.status_code == 400, plain.text
        assert plain.json()["error"]["code"] == "console_needs_https" and "set-cookie" not in plain.headers
        behind_tls = requests.post(
            f"{base}/console/session", json={"key": KEY_A}, headers={"Host": host, "X-Forwarded-Proto": "https"}, timeout=10
        )
        assert behind_tls.status_code == 200, behind_tls.text
        assert "Secure" in behind_tls.headers["set-cookie"]

    for bad in [{"key": "sk-nope"}, {"key": ""}]:
        refused = requests.post(f"{base}/console/session", json=bad, timeout=10)
        assert refused.status_code == 401, refused.text
        assert "set-cookie" not in refused.headers
        assert refused.json()["error"]["type"] == "invalid_request_error"
    malformed = requests.post(f"{base}/console/session", data="key=sk", timeout=10)
    assert malformed.status_code in (400, 415)
    assert "error" in malformed.json()
    # Without a session nothing under /console/api answers, not even a 404.
    for path in ["/console/api/containers", "/console/api/nothing", "/console/api/v1/containers"]:
        assert requests.get(base + path, timeout=10).status_code == 401
    # The API's bearer auth is unchanged, and the cookie opens nothing there.
    signed = Session(console, KEY_A)
    assert signed.http.get(f"{base}/v1/containers", timeout=10).status_code == 401
    assert requests.get(f"{base}/v1/containers", headers={"Authorization": f"Bearer {KEY_A}"}, timeout=10).ok


def test_every_state_changing_call_needs_the_sessions_csrf_token(console):
    alpha = Session(console, KEY_A)
    other = Session(console, KEY_A)  # another session of the same key: another token
    admin = Session(console, ADMIN_KEY)
    container = alpha.create("csrf")
    process = alpha.send(
        "POST", f"/console/api/v1/containers/{container}/processes", json={"command": "sleep 60"}
    ).json()["id"]
    alpha.send(
        "PUT", f"/console/api/v1/containers/{container}/fs/content", params={"path": "/mnt/data/keep.txt"}, data=b"x"
    ).raise_for_status()
    calls = [
        (alpha, "POST", "/console/api/v1/containers", {"json": {"name": "forged"}}),
        (alpha, "DELETE", f"/console/api/v1/containers/{container}", {}),
        (alpha, "PUT", f"/console/api/v1/containers/{container}/fs/content",
         {"params": {"path": "/mnt/data/forged.txt"}, "data": b"forged"}),
        (alpha, "DELETE", f"/console/api/v1/containers/{container}/fs", {"params": {"path": "/mnt/data/keep.txt"}}),
        (alpha, "POST", f"/console/api/v1/containers/{container}/fs/mkdir", {"json": {"path": "/mnt/data/forged"}}),
        (alpha, "POST", f"/console/api/v1/containers/{container}/processes", {"json": {"command": "true"}}),
        (alpha, "DELETE", f"/console/api/v1/containers/{container}/processes/{process}", {}),
        (alpha, "POST", f"/console/api/v1/containers/{container}/exec", {"json": {"commands": ["touch /mnt/data/forged"]}}),
        (admin, "POST", "/console/api/operator/keys", {"json": {"project": "forged"}}),
        (admin, "DELETE", "/console/api/operator/keys/key_0123456789abcdef", {}),
        (alpha, "DELETE", "/console/session", {}),
    ]
    for who, method, path, kw in calls:
        for token in (False, "0" * 32, other.csrf):
            answer = who.send(method, path, csrf=token, **kw)
            assert answer.status_code == 403, (method, path, token, answer.status_code, answer.text)
            assert answer.headers.get("content-type", "").startswith("application/json"), (method, path, answer.headers)
            assert answer.json()["error"]["code"] == "csrf_failed", answer.text
    # Nothing happened: the container, its file and its process are there,
    # nothing forged exists, no key was made, the session lives.
    listing = alpha.get("/console/api/containers").json()
    assert [c["id"] for c in listing["data"]] == [container]
    files = alpha.get(f"/console/api/v1/containers/{container}/fs/list", params={"path": "/mnt/data"}).json()
    assert sorted(entry["name"] for entry in files["data"]) == ["keep.txt"]
    assert alpha.get(f"/console/api/v1/containers/{container}/processes/{process}").json()["status"] == "running"
    keys = admin.get("/console/api/operator/keys").json()["data"]
    assert {k["project"] for k in keys} == {"alpha", "beta", "ops"}
    assert alpha.get("/console/session").status_code == 200
    # With the token, the same calls work.
    assert alpha.send("POST", f"/console/api/v1/containers/{container}/fs/mkdir",
                      json={"path": "/mnt/data/made"}).status_code == 200
    assert alpha.send("DELETE", f"/console/api/v1/containers/{container}").status_code == 200


def test_cross_site_requests_are_refused_even_with_the_cookie(console):
    alpha = Session(console, KEY_A)
    base = root(console)
    for headers in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"},
                    {"Origin": f"http://127.0.0.1:{console.port + 1}"}, {"Origin": "null"}):
        assert requests.post(f"{base}/console/session", json={"key": KEY_A}, headers=headers, timeout=10).status_code == 403
        # (Refused before its body is read, so the server closes the
        # connection after: the next call opens another.)
        answer = alpha.send("POST", "/console/api/v1/containers", json={"name": "x"},
                            headers={**headers, "Connection": "close"})
        assert answer.status_code == 403, answer.text
        assert alpha.get("/console/api/containers", headers=headers).status_code == 403
    # The same origin is fine (what the app's own fetches send).
    same = alpha.send("POST", "/console/api/v1/containers", json={"name": "ok"}, headers={"Origin": base})
    assert same.status_code == 200, same.text


def test_an_origin_of_another_scheme_is_another_site(console):
    alpha = Session(console, KEY_A)
    base = root(console)
    host = base.split("://", 1)[1]
    tls = {"X-Forwarded-Proto": "https"}
    # Plain HTTP here: an https:// page of the same host is another origin...
    for headers in ({"Origin": f"https://{host}"}, {"Origin": f"ws://{host}"}):
        assert requests.post(f"{base}/console/session", json={"key": KEY_A}, headers=headers, timeout=10).status_code == 403
        assert alpha.get("/console/api/containers", headers=headers).status_code == 403
    # ...and behind a TLS proxy (which says so), an http:// page is.
    insecure_page = {**tls, "Origin": f"http://{host}"}
    assert requests.post(f"{base}/console/session", json={"key": KEY_A}, headers=insecure_page, timeout=10).status_code == 403
    assert alpha.get("/console/api/containers", headers=insecure_page).status_code == 403
    secure_page = {**tls, "Origin": f"https://{host}"}
    assert requests.post(f"{base}/console/session", json={"key": KEY_A}, headers=secure_page, timeout=10).status_code == 200
    assert alpha.get("/console/api/containers", headers=secure_page).status_code == 200


def test_a_request_with_two_session_cookies_is_refused(console):
    alpha = Session(console, KEY_A)
    beta = Session(console, KEY_B)
    base = root(console)
    mine, planted = alpha.http.cookies.get(COOKIE), beta.http.cookies.get(COOKIE)
    for cookie in [f"{COOKIE}={mine}; {COOKIE}={planted}", f"{COOKIE}={planted}; {COOKIE}={mine}",
                   f"{COOKIE}={mine}; {COOKIE}={mine}"]:
        for path in ["/console/session", "/console/api/containers", "/console/api/v1/containers"]:
            answer = requests.get(base + path, headers={"Cookie": cookie}, timeout=10)
            assert answer.status_code == 400, (cookie, path, answer.text)
            assert answer.json()["error"]["code"] == "console_cookie_conflict"
        made = requests.post(f"{base}/console/api/v1/containers", json={"name": "planted"},
                             headers={"Cookie": cookie, "X-CSRF-Token": beta.csrf, "Connection": "close"}, timeout=10)
        assert made.status_code == 400, made.text
    assert "planted" not in beta.get("/console/api/containers").text
    # Two Cookie headers are one cookie list (HTTP/2 sends it so).
    conn = http.client.HTTPConnection(console.host, console.port, timeout=10)
    conn.putrequest("GET", "/console/session")
    conn.putheader("Cookie", f"{COOKIE}={mine}")
    conn.putheader("Cookie", f"{COOKIE}={planted}")
    conn.endheaders()
    assert conn.getresponse().status == 400
    conn.close()
    assert alpha.get("/console/session").json()["project"] == "alpha"
    # A cookie of another name (one a sibling host could set for the whole
    # parent domain) opens nothing.
    for name in ["shellgate_console", "__host-shellgate_console", "__Secure-shellgate_console"]:
        assert requests.get(f"{base}/console/session", headers={"Cookie": f"{name}={mine}"}, timeout=10).status_code == 401


def test_another_projects_containers_are_404_and_members_cannot_switch_project(console):
    alpha = Session(console, KEY_A)
    beta = Session(console, KEY_B)
    theirs = beta.create("beta-only")
    beta.send("PUT", f"/console/api/v1/containers/{theirs}/fs/content",
              params={"path": "/mnt/data/secret.txt"}, data=b"beta's").raise_for_status()
    for path in [
        f"/console/api/containers/{theirs}",
        f"/console/api/v1/containers/{theirs}",
        f"/console/api/v1/containers/{theirs}/fs/content?path=/mnt/data/secret.txt",
        f"/console/api/v1/containers/{theirs}/fs/list?path=/mnt/data",
        f"/console/api/v1/containers/{theirs}/commands",
        f"/console/api/v1/containers/{theirs}/egress",
        f"/console/api/v1/containers/{theirs}/processes",
    ]:
        answer = alpha.get(path)
        assert answer.status_code == 404, (path, answer.status_code, answer.text)
        assert "beta" not in answer.text
    assert alpha.send("DELETE", f"/console/api/v1/containers/{theirs}").status_code == 404
    assert theirs not in alpha.get("/console/api/containers").text
    # A member naming another project is refused, by header or query.
    assert alpha.get("/console/api/containers", headers={"X-Shellgate-Project": "beta"}).status_code == 403
    assert alpha.get("/console/api/containers", params={"project": "beta"}).status_code == 403
    assert alpha.get("/console/api/containers", params={"project": "*"}).status_code == 403
    assert alpha.get(f"/console/api/v1/containers/{theirs}", headers={"X-Shellgate-Project": "beta"}).status_code == 403
    assert alpha.get("/console/api/events", params={"project": "beta"}).status_code == 403
    assert alpha.get("/console/api/operator/keys").status_code == 403
    assert alpha.get("/console/api/operator/health").status_code == 403
    # The admin sees every project and acts for the one it names.
    admin = Session(console, ADMIN_KEY)
    projects = [p["project"] for p in admin.get("/console/api/projects").json()["data"]]
    assert {"alpha", "beta", "ops"} <= set(projects)
    assert [p["project"] for p in alpha.get("/console/api/projects").json()["data"]] == ["alpha"]
    every = admin.get("/console/api/containers", params={"project": "*"}).json()
    assert theirs in [c["id"] for c in every["data"]]
    as_beta = admin.get(f"/console/api/v1/containers/{theirs}/fs/content",
                        params={"path": "/mnt/data/secret.txt"}, headers={"X-Shellgate-Project": "beta"})
    assert as_beta.status_code == 200 and as_beta.content == b"beta's"
    # Where a browser cannot send the header (a WebSocket), `?project=`
    # says it; it does not reach the API (whose queries refuse unknown
    # fields), and a member cannot use it either.
    by_query = admin.get(f"/console/api/v1/containers/{theirs}/fs/content",
                         params={"path": "/mnt/data/secret.txt", "project": "beta"})
    assert by_query.status_code == 200 and by_query.content == b"beta's"
    assert alpha.get(f"/console/api/v1/containers/{theirs}/fs/content",
                     params={"path": "/mnt/data/secret.txt", "project": "beta"}).status_code == 403


def test_a_cookie_opens_nothing_after_sign_out(console):
    alpha = Session(console, KEY_A)
    stolen = alpha.http.cookies.get(COOKIE)
    assert stolen
    assert alpha.send("DELETE", "/console/session").status_code == 204
    thief = requests.Session()
    thief.cookies.set(COOKIE, stolen)
    base = root(console)
    for path in ["/console/session", "/console/api/containers", "/console/api/v1/containers", "/console/api/events"]:
        assert thief.get(base + path, timeout=10).status_code == 401, path
    answer = thief.post(f"{base}/console/api/v1/containers", json={"name": "x"},
                        headers={"X-CSRF-Token": alpha.csrf}, timeout=10)
    assert answer.status_code == 401


def test_a_revoked_keys_sessions_end_and_its_live_stream_closes(console):
    spare = Session(console, SPARE_KEY)
    admin = Session(console, ADMIN_KEY)
    stream = spare.http.get(spare.base + "/console/api/events", stream=True, timeout=30)
    assert stream.status_code == 200
    ended = threading.Event()

    def drain():
        for _ in stream.iter_lines():
            pass
        ended.set()

    threading.Thread(target=drain, daemon=True).start()
    # A key's id is `key_` and the start of its SHA-256 (never the key).
    revoked = "key_" + hashlib.sha256(SPARE_KEY.encode()).hexdigest()[:16]
    assert revoked in admin.get("/console/api/operator/keys").text
    assert admin.send("DELETE", f"/console/api/operator/keys/{revoked}").status_code == 204
    # At once: the session is gone.
    assert spare.get("/console/session").status_code == 401
    assert spare.get("/console/api/containers").status_code == 401
    # The stream re-checks its session every 5 s (console::session::ended):
    # a generous bound for a loaded machine's stalls, met at its first check.
    assert wait_until(ended.is_set, 60), "the revoked session's event stream stayed open for 60 s"
    # The API stops taking the key too (its cache holds grants for 5 s).
    base = root(console)
    assert wait_until(lambda: requests.get(f"{base}/v1/containers", timeout=5,
                                           headers={"Authorization": f"Bearer {SPARE_KEY}"}).status_code == 401, 15)
    # And the revoked key cannot sign in again.
    assert requests.post(f"{base}/console/session", json={"key": SPARE_KEY}, timeout=10).status_code == 401
    listed = admin.get("/console/api/operator/keys").json()["data"]
    assert next(k for k in listed if k["id"] == revoked)["revoked_at"]
    # Unknown ids are a 404.
    assert admin.send("DELETE", "/console/api/operator/keys/key_ffffffffffffffff").status_code == 404


def test_keys_made_on_the_operator_page_are_shown_once_and_work(console):
    admin = Session(console, ADMIN_KEY)
    made = admin.send("POST", "/console/api/operator/keys", json={"project": "gamma"})
    assert made.status_code == 201, made.text
    key = made.json()["key"]
    listed = admin.get("/console/api/operator/keys").text
    assert key not in listed and made.json()["id"] in listed
    assert Session(console, key).session["project"] == "gamma"
    for bad in [{"project": ""}, {"project": "*"}, {"project": "x", "role": "root"}, {"project": "a\nb"}]:
        answer = admin.send("POST", "/console/api/operator/keys", json=bad)
        assert answer.status_code == 400, (bad, answer.text)


def test_clickjacking_and_content_headers(console):
    base = root(console)
    page = requests.get(f"{base}/console", timeout=10)
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert page.headers["x-frame-options"] == "DENY"
    policy = page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in policy and "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert page.headers["x-content-type-options"] == "nosniff"
    # Assets revalidate by ETag.
    asset = requests.get(f"{base}/console/assets/app.js", timeout=10)
    assert asset.status_code == 200 and "javascript" in asset.headers["content-type"]
    again = requests.get(f"{base}/console/assets/app.js", headers={"If-None-Match": asset.headers["etag"]}, timeout=10)
    assert again.status_code == 304
    assert requests.get(f"{base}/console/assets/../Cargo.toml", timeout=10).status_code == 404
    # An encoded dot segment reaches no router at all.
    assert requests.get(f"{base}/console/assets/%2e%2e/build.rs", timeout=10).status_code == 400
    # A file a sandbox wrote is data: never a page of this origin.
    alpha = Session(console, KEY_A)
    container = alpha.create("headers")
    alpha.send("PUT", f"/console/api/v1/containers/{container}/fs/content",
               params={"path": "/mnt/data/evil.html"},
               data=b"<script>parent.document.title='pwned'</script>").raise_for_status()
    download = alpha.get(f"/console/api/v1/containers/{container}/fs/content", params={"path": "/mnt/data/evil.html"})
    assert download.status_code == 200
    assert "sandbox" in download.headers["content-security-policy"]
    assert download.headers["x-content-type-options"] == "nosniff"
    assert download.headers["x-frame-options"] == "DENY"
    assert download.headers["cache-control"] == "no-store"


def test_live_updates_tell_a_project_its_own_changes_only(console):
    alpha = Session(console, KEY_A)
    beta = Session(console, KEY_B)
    seen = []
    stream = alpha.http.get(alpha.base + "/console/api/events", stream=True, timeout=60)
    assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream")

    collect_events(stream, seen)
    theirs = beta.create("beta-live")
    mine = alpha.create("alpha-live")
    alpha.send("POST", f"/console/api/v1/containers/{mine}/exec", json={"commands": ["echo hi"]}).raise_for_status()
    assert wait_until(lambda: any(e == "command" and d["container_id"] == mine for e, d in seen), 15), seen
    assert any(e == "container" and d["id"] == mine for e, d in seen)
    assert all(d["project"] == "alpha" for _, d in seen)
    assert not any(theirs in json.dumps(d) for _, d in seen)
    stream.close()


def test_a_running_exec_commands_output_is_seen_live_and_ends(console):
    alpha = Session(console, KEY_A)
    beta = Session(console, KEY_B)
    container = alpha.create("live-output")
    assert beta.get(f"/console/api/containers/{container}/output").status_code == 404
    events = []
    stream = alpha.http.get(f"{alpha.base}/console/api/containers/{container}/output", stream=True, timeout=60)
    assert stream.status_code == 200

    collect_events(stream, events)
    # A command that prints, then waits for a file before it ends: its
    # output must be seen while it still runs.
    script = "echo first-line; while [ ! -e /mnt/data/go ]; do sleep 0.05; done; echo second-line"
    done = {}

    def run():
        done["answer"] = alpha.send("POST", f"/console/api/v1/containers/{container}/exec",
                                    json={"commands": [script]})

    runner = threading.Thread(target=run)
    runner.start()
    assert wait_until(lambda: any(e == "output" and "first-line" in d["text"] for e, d in events), 20), events
    started = next(d for e, d in events if e == "run")
    assert started["commands"] == [script] and started["container_id"] == container
    assert "answer" not in done  # still running
    # A watcher arriving now gets the run and its output so far.
    late = alpha.http.get(f"{alpha.base}/console/api/containers/{container}/output", stream=True, timeout=30)
    lines = late.iter_lines(decode_unicode=True)
    first = [next(lines) for _ in range(6)]
    assert any(line.startswith("event: run") for line in first), first
    assert any("first-line" in line for line in first), first
    late.close()
    # Another session's exec through the API ends it.
    requests.post(f"{alpha.base}/v1/containers/{container}/exec", json={"commands": ["touch /mnt/data/go"]},
                  headers={"Authorization": f"Bearer {KEY_A}"}, timeout=30).raise_for_status()
    runner.join(30)
    assert done["answer"].status_code == 200, done["answer"].text
    assert wait_until(lambda: any(e == "end" and d["run_id"] == started["id"] for e, d in events), 20), events
    assert any(e == "output" and "second-line" in d["text"] for e, d in events)
    stream.close()


def test_a_project_has_a_bounded_number_of_live_streams(console):
    alpha = Session(console, KEY_A)
    beta = Session(console, KEY_B)
    opened = []
    try:
        for _ in range(64):
            stream = requests.get(f"{alpha.base}/console/api/events", cookies=alpha.http.cookies, stream=True, timeout=30)
            assert stream.status_code == 200
            opened.append(stream)
        refused = requests.get(f"{alpha.base}/console/api/events", cookies=alpha.http.cookies, timeout=30)
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "too_many_console_streams"
        # Another project is not affected.
        other = requests.get(f"{beta.base}/console/api/events", cookies=beta.http.cookies, stream=True, timeout=30)
        assert other.status_code == 200
        other.close()
        # A closed stream frees its slot (once the server sees it gone).
        opened.pop().close()

        def reopened():
            answer = requests.get(f"{alpha.base}/console/api/events", cookies=alpha.http.cookies, stream=True, timeout=30)
            if answer.status_code == 200:
                opened.append(answer)
                return True
            answer.close()
            return False

        assert wait_until(reopened, 20)
    finally:
        for stream in opened:
            stream.close()


def test_every_view_of_usage_adds_up_to_the_billed_totals(console):
    """Usage has one source: the console's views (per day, per container,
    per model) and /v1/usage add up to the same totals, whichever model API
    was called (Responses stored or not, Messages, Chat Completions) and
    whether the container still exists."""
    client = console.client(KEY_A)
    stored = client.responses.create(model="scripted", input="hello")
    unstored = client.responses.create(model="scripted", input="hello", store=False)
    chat = client.chat.completions.create(model="scripted", messages=[{"role": "user", "content": "hello"}])
    messages = anthropic.Anthropic(base_url=console.base_url.removesuffix("/v1"), api_key=KEY_A, max_retries=0)
    message = messages.messages.create(model="scripted", max_tokens=64, messages=[{"role": "user", "content": "hello"}])
    input_tokens = (stored.usage.input_tokens + unstored.usage.input_tokens + chat.usage.prompt_tokens
                    + message.usage.input_tokens)
    output_tokens = (stored.usage.output_tokens + unstored.usage.output_tokens + chat.usage.completion_tokens
                     + message.usage.output_tokens)
    # Sandbox time: a container still there, and one used then deleted.
    kept = client.containers.create(name="usage-kept")
    gone = client.containers.create(name="usage-gone")
    for container in (kept, gone):
        client.post(f"/containers/{container.id}/exec", body={"commands": ["true"]}, cast_to=object)
    client.containers.delete(gone.id)

    billed = client.get("/usage", cast_to=object)
    assert (billed["input_tokens"], billed["output_tokens"], billed["responses"]) == (input_tokens, output_tokens, 4)
    per_container = {c["container_id"]: c["sandbox_seconds"] for c in billed["containers"]}
    assert per_container[gone.id] > 0 and per_container[kept.id] > 0
    assert sum(per_container.values()) == pytest.approx(billed["sandbox_seconds"])

    shown = Session(console, KEY_A).get("/console/api/usage").json()
    total = billed["sandbox_seconds"]
    assert shown["sandbox_seconds"] == pytest.approx(total)
    assert sum(d["sandbox_seconds"] for d in shown["days"]) == pytest.approx(total)
    containers = {c["container_id"]: c["sandbox_seconds"] for c in shown["containers"]}
    assert containers[gone.id] == pytest.approx(per_container[gone.id])
    assert sum(containers.values()) + shown["other_containers"]["sandbox_seconds"] == pytest.approx(total)
    models = shown["models"]
    assert [m["model"] for m in models] == ["scripted"]
    assert sum(m["input_tokens"] for m in models) == shown["input_tokens"] == billed["input_tokens"]
    assert sum(m["output_tokens"] for m in models) == shown["output_tokens"] == billed["output_tokens"]
    assert sum(m["responses"] for m in models) == shown["responses"] == billed["responses"]


# --- terminals ------------------------------------------------------------------


def start_terminal(session: Session, container: str):
    """A terminal (a PTY process) started the way the console's terminal
    tab starts one; the answer."""
    return session.send("POST", f"/console/api/v1/containers/{container}/processes", json={
        "command": "bash --norc -i", "pty": {"cols": 100, "rows": 30}, "timeout_ms": 3_600_000,
    })


def terminal_socket(session: Session, container: str, process: str):
    """The terminal's WebSocket as the console's page opens it: the
    session's cookie, the page's origin."""
    connect = pytest.importorskip("websockets.sync.client").connect
    url = session.base.replace("http://", "ws://", 1) + \
        f"/console/api/v1/containers/{container}/processes/{process}/ws"
    cookie = "; ".join(f"{c.name}={c.value}" for c in session.http.cookies)
    return connect(url, additional_headers={"Cookie": cookie, "Origin": session.base}, open_timeout=30)


def typed(socket, line: str, needle: str) -> str:
    """Sends `line` to a terminal and reads its output until `needle`."""
    socket.send(line.encode() + b"\n")
    text = b""
    while needle.encode() not in text:
        frame = socket.recv(timeout=60)
        if isinstance(frame, bytes):
            text += frame
    return text.decode(errors="replace")


def process_status(session: Session, container: str, process: str) -> str:
    answer = session.get(f"/console/api/v1/containers/{container}/processes/{process}")
    assert answer.status_code == 200, answer.text
    return answer.json()["status"]


# A grace short enough to wait for in a test, long enough to reattach in.
TERMINAL_GRACE_SECS = 4


def test_a_console_terminal_nobody_looks_at_ends_after_the_grace_and_one_reattached_lives(fresh_server):
    server = fresh_server(api_keys=f"{KEY_A}:alpha", console_terminal_grace_secs=str(TERMINAL_GRACE_SECS))
    alpha = Session(server, KEY_A)
    container = alpha.create("terminals")
    # One started and never attached to (its tab closed at once).
    orphan = start_terminal(alpha, container)
    assert orphan.status_code == 201, orphan.text
    worked = start_terminal(alpha, container).json()["id"]
    # Attached: it lives past the grace (the shell's own sleep is the wait).
    with terminal_socket(alpha, container, worked) as socket:
        typed(socket, f"sleep {TERMINAL_GRACE_SECS + 1}; echo attached-$((6*7))", "attached-42")
    # Left and attached to again within the grace: it lives past the first
    # grace's end, and keeps its shell's state.
    with terminal_socket(alpha, container, worked) as socket:
        typed(socket, f"MARK=kept; sleep {TERMINAL_GRACE_SECS + 1}; echo reattached-$((6*7))", "reattached-42")
    with terminal_socket(alpha, container, worked) as socket:
        assert "still-kept" in typed(socket, "echo still-$MARK", "still-kept")
    assert process_status(alpha, container, worked) == "running"
    # Left for good: it ends after the grace, as does the one nobody saw.
    for process in [worked, orphan.json()["id"]]:
        assert wait_until(lambda: process_status(alpha, container, process) != "running", 60), process
        assert process_status(alpha, container, process) == "killed"


def test_console_terminals_have_their_own_bound_apart_from_the_exec_quota(fresh_server):
    limit = 64
    server = fresh_server(api_keys=f"{KEY_A}:alpha,{KEY_B}:beta", max_execs_per_project=str(limit),
                          max_console_terminals_per_project=str(limit), console_terminal_grace_secs="600")
    alpha = Session(server, KEY_A)
    # Two containers (a container runs at most 64 live processes).
    containers = [alpha.create("terminals-a"), alpha.create("terminals-b")]
    opened = []
    for n in range(limit):
        answer = start_terminal(alpha, containers[n % 2])
        assert answer.status_code == 201, (n, answer.text)
        opened.append((containers[n % 2], answer.json()["id"]))
    # The project's API execs and processes are not touched by them.
    api = requests.Session()
    api.headers["Authorization"] = f"Bearer {KEY_A}"
    ran = api.post(f"{alpha.base}/v1/containers/{containers[0]}/exec", json={"commands": ["echo ran"]}, timeout=60)
    assert ran.status_code == 200, ran.text
    assert ran.json()["output"][0]["stdout"] == "ran\n"
    made = api.post(f"{alpha.base}/v1/containers/{containers[1]}/processes",
                    json={"command": "echo process"}, timeout=60)
    assert made.status_code == 201, made.text
    # One more terminal: refused with the terminals' own error.
    refused = start_terminal(alpha, containers[0])
    assert refused.status_code == 429, refused.text
    error = refused.json()["error"]
    assert error["code"] == "too_many_console_terminals", error
    assert "max_console_terminals_per_project" in error["message"] and str(limit) in error["message"], error
    # Another project's console is not affected.
    beta = Session(server, KEY_B)
    beta_terminal = start_terminal(beta, beta.create("beta-terminal"))
    assert beta_terminal.status_code == 201, beta_terminal.text
    # A terminal ended frees its place.
    container, process = opened.pop()
    ended = alpha.send("DELETE", f"/console/api/v1/containers/{container}/processes/{process}")
    assert ended.status_code == 200, ended.text

    def another():
        answer = start_terminal(alpha, containers[0])
        if answer.status_code == 201:
            opened.append((containers[0], answer.json()["id"]))
            return True
        assert answer.status_code == 429, answer.text
        return False

    assert wait_until(another, 30)
    for container in containers:
        assert alpha.send("DELETE", f"/console/api/v1/containers/{container}").status_code == 200
