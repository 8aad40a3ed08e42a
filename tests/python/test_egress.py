"""Network policy: default deny, domain allowlists through the egress
proxy, secrets put in on the wire, and the egress log.

Everything happens inside a network namespace this module creates: test web
servers (with their own CA) under test host names, a DNS server, and the
shellgate server itself. The test process reaches that server over a veth
pair; nothing here touches the host's own network.
"""

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import openai
import pytest

from conftest import KEY_A, KEY_B, Server, exec_commands, wait_until

HERE = Path(__file__).resolve().parent
PID = os.getpid() % 100000
NETNS = f"sg-egress-{PID}"
HOST_IF, NS_IF = f"sgeh{PID}", f"sgen{PID}"
HOST_ADDR, NS_ADDR = "198.18.77.1", "198.18.77.2"
SECRET = "sk-live-real-secret-value-4242"
BODY_SECRET = "sk-body-only-secret-value-7777"

ORG_DOMAINS = [
    "*.allowed.test", "allowed.test", "evilallowed.test", "allowed.test.evil.test",
    "notlisted.test", "api.secret.test", "other.test", "rebind.test",
    "loop.test", "private.test", "metadata.test", "v6loop.test", "mapped.test", "bench.test",
]
# The world's servers are on a TEST-NET, which no container may reach
# without the operator's exception.
WORLD_EXCEPTION = "203.0.113.0/24"


def sh(*args):
    subprocess.run(args, check=True, capture_output=True)


def make_certificates(directory: Path) -> dict:
    """A test CA and one certificate for every test host name."""
    ca_key, ca = directory / "ca.key", directory / "ca.pem"
    key, csr, cert = directory / "server.key", directory / "server.csr", directory / "server.pem"
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    sh("openssl", "req", "-x509", *ec, "-keyout", str(ca_key), "-out", str(ca), "-days", "2",
       "-subj", "/CN=shellgate egress test CA")
    sh("openssl", "req", *ec, "-keyout", str(key), "-out", str(csr), "-subj", "/CN=allowed.test")
    names = ",".join(f"DNS:{n}" for n in ["allowed.test", "*.allowed.test", "api.secret.test",
                                            "other.test", "rebind.test", "notlisted.test",
                                            "evilallowed.test", "allowed.test.evil.test"])
    extensions = directory / "server.ext"
    extensions.write_text(f"subjectAltName={names}\nbasicConstraints=CA:FALSE\n")
    sh("openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
       "-CAcreateserial", "-out", str(cert), "-days", "2", "-extfile", str(extensions))
    return {"ca": ca, "cert": cert, "key": key}


class World:
    def __init__(self, directory: Path, certificates: dict, upstream):
        self.directory = directory
        self.certificates = certificates
        self.log = directory / "world.log"
        self.upstream = upstream
        self.servers = []

    def requests(self, server=None):
        if not self.log.exists():
            return []
        entries = [json.loads(line) for line in self.log.read_text().splitlines() if line]
        return [e for e in entries if server is None or e.get("server") == server]

    def server(self, **settings) -> Server:
        data_dir = Path(tempfile.mkdtemp(prefix="shellgate-egress-", dir=self.directory))
        settings = {
            "egress_dns_server": "198.51.100.53:53",
            "egress_trusted_roots": str(self.certificates["ca"]),
            "egress_allowed_domains": ",".join(ORG_DOMAINS),
            "egress_private_exceptions": WORLD_EXCEPTION,
            "warm_containers": "0",
            "upstream_url": self.upstream.url,
            **settings,
        }
        server = Server(data_dir, netns=NETNS, host=NS_ADDR, **settings).start()
        self.servers.append(server)
        return server


@pytest.fixture(scope="module")
def world():
    from scripted_upstream import ScriptedUpstream

    directory = Path(tempfile.mkdtemp(prefix="shellgate-egress-world-"))
    os.chmod(directory, 0o755)
    certificates = make_certificates(directory)
    sh("ip", "netns", "add", NETNS)
    process = upstream = world = None
    try:
        ns = ["ip", "-n", NETNS]
        sh(*ns, "link", "set", "lo", "up")
        for address in ["203.0.113.10/32", "203.0.113.20/32", "198.51.100.53/32"]:
            sh(*ns, "addr", "add", address, "dev", "lo")
        sh("ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", NS_IF, "netns", NETNS)
        sh("ip", "addr", "add", f"{HOST_ADDR}/30", "dev", HOST_IF)
        sh("ip", "link", "set", HOST_IF, "up")
        sh(*ns, "addr", "add", f"{NS_ADDR}/30", "dev", NS_IF)
        sh(*ns, "link", "set", NS_IF, "up")
        # The scripted model listens where the namespaced server reaches it.
        upstream = ScriptedUpstream(host=HOST_ADDR)
        world = World(directory, certificates, upstream)
        process = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{NETNS}", sys.executable, str(HERE / "egress_world.py"),
             "--log", str(world.log), "--cert", str(certificates["cert"]), "--key", str(certificates["key"])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )
        assert process.stdout.readline().strip() == b"ready"
        yield world
    finally:
        if world:
            for server in world.servers:
                server.stop()
        if process:
            process.kill()
            process.wait()
        if upstream:
            upstream.stop()
        pids = subprocess.run(["ip", "netns", "pids", NETNS], capture_output=True, text=True).stdout.split()
        for pid in pids:
            subprocess.run(["kill", "-9", pid], check=False)
        subprocess.run(["ip", "netns", "del", NETNS], check=False)
        subprocess.run(["ip", "link", "del", HOST_IF], check=False, capture_output=True)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def server(world):
    return world.server()


@pytest.fixture(scope="module")
def client(server):
    return server.client(KEY_A)


def allowlist(*domains, secrets=(), passthrough=()):
    policy = {"type": "allowlist", "allowed_domains": list(domains)}
    if secrets:
        policy["domain_secrets"] = list(secrets)
    if passthrough:
        policy["tls_passthrough_domains"] = list(passthrough)
    return policy


def run(client, container_id, command, timeout_ms=30_000):
    result = exec_commands(client, container_id, [command], timeout_ms=timeout_ms)
    entry = result["output"][0]
    return entry["stdout"], entry["stderr"], entry["outcome"].get("exit_code")


def egress_log(client, container_id, **params):
    """Every entry of the container's egress log, walking its pages."""
    entries, after = [], None
    for _ in range(100):
        query = {"limit": 20, "order": "asc", **params}
        if after:
            query["after"] = after
        page = client.get(f"/containers/{container_id}/egress", cast_to=object, options={"params": query})
        entries += page["data"]
        if not page["has_more"]:
            return entries
        after = page["last_id"]
    raise AssertionError("the egress log did not end")


def wait_for_log(client, container_id, predicate, timeout=10):
    if wait_until(lambda: any(predicate(e) for e in egress_log(client, container_id)), timeout, interval=0.1):
        return egress_log(client, container_id)
    raise AssertionError(f"no such egress log entry: {egress_log(client, container_id)}")


def put_ca(client, container_id, world):
    """The test servers' CA, for the container's own clients to trust them."""
    pem = world.certificates["ca"].read_text()
    run(client, container_id, f"cat > /mnt/data/test-ca.pem <<'EOF'\n{pem}EOF")
    return "/mnt/data/test-ca.pem"


@pytest.fixture(scope="module")
def networked(client, world):
    container = client.containers.create(
        name="egress-allowlist",
        network_policy=allowlist("*.allowed.test", "rebind.test", "loop.test", "private.test",
                                 "metadata.test", "v6loop.test", "mapped.test"),
    )
    put_ca(client, container.id, world)
    return container.id


# --- allowed names: every kind of client, with and without proxy variables ---

@pytest.mark.parametrize("proxy", ["with proxy variables", "transparent"])
def test_allowed_names_answer_with_curl(client, networked, proxy):
    no_proxy = "" if proxy == "with proxy variables" else "--noproxy '*'"
    out, err, code = run(client, networked,
                         f"curl -sS -m 10 {no_proxy} http://a.allowed.test/plain && echo && "
                         f"curl -sS -m 10 {no_proxy} https://a.allowed.test/tls")
    assert code == 0, err
    first, second = [json.loads(line) for line in out.splitlines() if line]
    assert first["server"] == "a" and first["path"] == "/plain" and first["port"] == 80
    assert second["server"] == "a" and second["path"] == "/tls" and second["port"] == 443


@pytest.mark.parametrize("proxy", [True, False])
def test_allowed_names_answer_with_python_and_node(client, networked, proxy):
    unset = "" if proxy else "unset HTTP_PROXY HTTPS_PROXY http_proxy https_proxy; "
    python = (
        "import json, ssl, urllib.request, requests\n"
        "context = ssl.create_default_context()\n"
        "a = json.load(urllib.request.urlopen('https://a.allowed.test/urllib', context=context))\n"
        "b = requests.get('https://b.allowed.test/requests').json()\n"
        "c = requests.get('http://a.allowed.test/requests-http').json()\n"
        "print(a['path'], b['path'], b['host'], c['path'])\n"
    )
    out, err, code = run(client, networked, f"{unset}python3 -c \"$(cat <<'EOF'\n{python}EOF\n)\"")
    assert code == 0, err
    assert out.split() == ["/urllib", "/requests", "b.allowed.test", "/requests-http"]
    # Node's fetch (undici) ignores proxy variables: it works transparently
    # (trusting the container's CA through NODE_EXTRA_CA_CERTS).
    node = ("fetch('https://a.allowed.test/node').then(r => r.json())"
            ".then(j => console.log(j.path, j.server))")
    out, err, code = run(client, networked, f"{unset}node -e \"{node}\"")
    assert code == 0, err
    assert out.split() == ["/node", "a"]


def test_allowed_traffic_is_logged_with_its_bytes(client, networked):
    run(client, networked, "curl -sS -m 10 --noproxy '*' http://deep.a.allowed.test/logged")
    entries = wait_for_log(client, networked,
                           lambda e: e["kind"] == "http" and e["server_name"] == "deep.a.allowed.test")
    entry = next(e for e in entries if e["server_name"] == "deep.a.allowed.test" and e["kind"] == "http")
    assert entry["verdict"] == "allowed"
    assert entry["requested_name"] == "deep.a.allowed.test"
    assert entry["address"] == "203.0.113.10" and entry["port"] == 80
    assert entry["bytes_out"] > 0 and entry["bytes_in"] > 0
    assert entry["object"] == "container.egress" and entry["container_id"] == networked
    dns = [e for e in entries if e["kind"] == "dns" and e["requested_name"] == "deep.a.allowed.test"]
    assert dns and dns[0]["verdict"] == "allowed"


# --- refusals, each with its reason ---

def web_requests(world):
    return [e for e in world.requests() if e["server"] != "dns"]


def test_names_outside_the_list_are_refused_with_a_reason(client, networked, world):
    before = len(web_requests(world))
    out, err, code = run(client, networked, "curl -sS -m 10 http://notlisted.test/")
    assert code == 0
    body = json.loads(out)
    assert body["error"]["code"] == "policy_denied"
    assert "notlisted.test is not in this container's allowlist" in body["error"]["message"]
    # Without the proxy: the name does not resolve, at once.
    started = time.time()
    out, err, code = run(client, networked, "curl -sS -m 10 --noproxy '*' https://notlisted.test/")
    assert code == 6 and "Could not resolve host" in err
    assert time.time() - started < 5
    # TLS straight at a listed address with an unlisted SNI: reset.
    out, err, code = run(client, networked,
                         "curl -sS -m 10 --noproxy '*' --resolve notlisted.test:443:203.0.113.10 "
                         "--cacert /mnt/data/test-ca.pem https://notlisted.test/")
    assert code in (35, 56), err  # reset during the handshake
    entries = wait_for_log(client, networked,
                           lambda e: e["kind"] == "https" and e["server_name"] == "notlisted.test")
    refused = [e for e in entries if e.get("server_name") == "notlisted.test" or e.get("requested_name") == "notlisted.test"]
    assert refused and all(e["verdict"] == "denied" for e in refused)
    assert all("not in this container's allowlist" in e["reason"] for e in refused)
    assert {e["kind"] for e in refused} >= {"http", "dns", "https"}
    assert len(web_requests(world)) == before, "nothing reached a server"



# --- denials explained where the program and the model read ---

DENIED = "shellgate: egress denied: "


def denial_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith(DENIED)]


def test_a_denied_request_names_its_host_and_reason_in_the_commands_stderr(client, networked, world):
    unlisted = "notlisted.test is not in this container's allowlist"
    out, err, code = run(client, networked, "curl -sS -m 10 https://notlisted.test/")
    # curl's own line says only "403"; the command's stderr says why.
    assert code == 56 and "CONNECT tunnel failed, response 403" in err, err
    assert denial_lines(err) == [f"{DENIED}CONNECT notlisted.test:443: {unlisted}"], err
    # A listed name that does not resolve; one resolving to a private address.
    out, err, code = run(client, networked, "curl -sS -m 10 https://nowhere.allowed.test/")
    assert denial_lines(err) == [
        f"{DENIED}CONNECT nowhere.allowed.test:443: nowhere.allowed.test does not resolve"], err
    out, err, code = run(client, networked, "curl -sS -m 10 https://private.test/")
    assert denial_lines(err) == [
        f"{DENIED}CONNECT private.test:443: private.test resolves to 10.0.0.1, a private address"], err
    # Without the proxy variables the program only looks the name up.
    out, err, code = run(client, networked, "curl -sS -m 10 --noproxy '*' https://notlisted.test/")
    assert code == 6 and "Could not resolve host" in err
    [line] = denial_lines(err)
    assert line.startswith(f"{DENIED}DNS lookup of notlisted.test: {unlisted}"), err
    # Plain HTTP keeps its JSON body, and is told in stderr too.
    out, err, code = run(client, networked, "curl -sS -m 10 http://notlisted.test/")
    assert json.loads(out)["error"]["code"] == "policy_denied"
    assert denial_lines(err) == [f"{DENIED}HTTP to notlisted.test:80: {unlisted}"], err
    # The proxy's 403 carries the reason in its status line (curl -v shows it).
    out, err, code = run(client, networked, "curl -sS -v -m 10 https://notlisted.test/")
    assert f"< HTTP/1.1 403 Forbidden (shellgate egress proxy: {unlisted})" in err, err
    # Each command hears of its own: one that made no refused request, nothing.
    out, err, code = run(client, networked, "curl -sS -m 10 https://a.allowed.test/fine >/dev/null")
    assert code == 0 and denial_lines(err) == [], err
    # The egress log keeps every reason.
    wait_for_log(client, networked,
                 lambda e: e["kind"] == "connect" and e["requested_name"] == "nowhere.allowed.test"
                 and e["verdict"] == "denied" and e["reason"] == "nowhere.allowed.test does not resolve")


def test_the_model_sees_a_denial_in_its_next_turn(client, server, world):
    response = client.responses.create(
        model="scripted",
        tools=[{"type": "shell", "environment": {
            "type": "container_auto", "network_policy": allowlist("a.allowed.test")}}],
        input="Execute: curl -sS -m 10 https://notlisted.test/",
    )
    assert response.status == "completed", response.error
    line = (f"{DENIED}CONNECT notlisted.test:443: notlisted.test is not in this container's "
            "allowlist")
    result = next(i for i in response.output if i.type == "shell_call_output")
    assert line in denial_lines(result.output[0].stderr), result.output[0].stderr
    # What the scripted model was sent for its next turn: the tool result.
    tool_results = [m for m in world.upstream.requests[-1]["messages"] if m["role"] == "tool"]
    assert tool_results and line in json.dumps(tool_results[-1]["content"]), tool_results
    # The same through the Messages API's tool: the one command path.
    openrouter = {"type": "openrouter:shell", "parameters": {"engine": "openrouter", "environment": {
        "type": "container_auto", "network_policy": allowlist("a.allowed.test")}}}
    reply = raw(server, "POST", "/messages", {
        "model": "scripted", "max_tokens": 256, "tools": [openrouter],
        "messages": [{"role": "user", "content": "Execute: curl -sS -m 10 https://notlisted.test/"}]},
        **{"anthropic-version": "2023-06-01"})
    assert reply.status_code == 200, reply.text
    assert line in reply.text, reply.text
    tool_results = [m for m in world.upstream.requests[-1]["messages"] if m["role"] == "tool"]
    assert tool_results and line in json.dumps(tool_results[-1]["content"]), tool_results


def test_subdomain_patterns_match_subdomains_only(client, networked):
    for name in ["allowed.test", "allowed.test.evil.test", "evilallowed.test"]:
        out, err, code = run(client, networked, f"curl -sS -m 10 http://{name}/")
        assert json.loads(out)["error"]["code"] == "policy_denied", name
        out, err, code = run(client, networked, f"curl -sS -m 10 --noproxy '*' http://{name}/")
        assert code == 6, (name, err)


def test_ip_literals_and_other_ports_are_refused(client, networked, world):
    out, err, code = run(client, networked, "curl -sS -m 10 http://203.0.113.10/")
    assert "is an IP address" in json.loads(out)["error"]["message"]
    out, err, code = run(client, networked, "curl -sS -m 10 --noproxy '*' http://203.0.113.10/")
    assert "is an IP address" in json.loads(out)["error"]["message"]
    out, err, code = run(client, networked, "curl -sS -m 10 --noproxy '*' -k https://203.0.113.10/")
    assert code in (35, 56), err
    out, err, code = run(client, networked, "curl -sS -m 10 http://a.allowed.test:8080/")
    assert "only ports 80 and 443" in json.loads(out)["error"]["message"]
    started = time.time()
    out, err, code = run(client, networked, "curl -sS -m 10 --noproxy '*' http://a.allowed.test:8080/")
    assert code == 7 and time.time() - started < 5, err
    assert not [e for e in world.requests("a") if e["port"] == 8080]


def test_host_or_sni_differing_from_the_name_resolved_is_refused(client, networked, world):
    # a.allowed.test resolved to 203.0.113.10; b.allowed.test also did, but
    # other.test (not in this list) never did.
    run(client, networked, "getent hosts a.allowed.test")
    out, err, code = run(client, networked,
                         "curl -sS -m 10 --noproxy '*' -H 'Host: other.test' http://a.allowed.test/")
    assert json.loads(out)["error"]["code"] == "policy_denied"
    # An allowed SNI at an address its name never resolved to.
    out, err, code = run(client, networked,
                         "curl -sS -m 10 --noproxy '*' --resolve b.allowed.test:443:203.0.113.20 "
                         "--cacert /mnt/data/test-ca.pem https://b.allowed.test/")
    assert code in (35, 56), err
    wait_for_log(client, networked,
                 lambda e: e["kind"] == "https" and e["server_name"] == "b.allowed.test"
                 and "is not an address" in e["reason"])
    assert not world.requests("other")


@pytest.mark.parametrize("name,reason", [
    ("loop.test", "loopback"), ("private.test", "private"), ("metadata.test", "metadata"),
    ("v6loop.test", "loopback"), ("mapped.test", "loopback"),
])
def test_names_resolving_to_forbidden_addresses_are_refused(client, networked, world, name, reason):
    out, err, code = run(client, networked, f"curl -sS -m 10 http://{name}/")
    body = json.loads(out)
    assert body["error"]["code"] == "policy_denied" and reason in body["error"]["message"], body
    out, err, code = run(client, networked, f"curl -sS -m 10 --noproxy '*' http://{name}/")
    assert code == 6, err
    assert not world.requests("internal")


def test_dns_rebinding_between_check_and_connect_is_refused(client, networked, world):
    # The first answer is public and checked; the proxy connects to exactly
    # that address. Every later answer (127.0.0.1) is refused.
    out, err, code = run(client, networked,
                         "curl -sS -m 10 --noproxy '*' https://rebind.test/first; "
                         "echo; curl -sS -m 10 --noproxy '*' http://rebind.test/second; echo; "
                         "curl -sS -m 10 http://rebind.test/third")
    lines = [line for line in out.splitlines() if line]
    assert json.loads(lines[0])["server"] == "a"
    assert json.loads(lines[-1])["error"]["code"] == "policy_denied"
    assert not world.requests("internal"), "the rebound address was reached"


def test_udp_icmp_and_raw_sockets_fail(client, networked):
    script = (
        "import socket\n"
        "def attempt(what, make):\n"
        "    try:\n"
        "        make(); print(what, 'open')\n"
        "    except OSError as e:\n"
        "        print(what, 'refused')\n"
        "def udp():\n"
        "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)\n"
        "    s.connect(('203.0.113.10', 9)); s.send(b'x'); s.recv(10)\n"
        "attempt('udp', udp)\n"
        "attempt('raw', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))\n"
        "attempt('icmp', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP))\n"
        "attempt('v6', lambda: socket.create_connection(('2001:db8::1', 443), timeout=2))\n"
    )
    out, err, code = run(client, networked, f"python3 -c \"$(cat <<'EOF'\n{script}EOF\n)\"")
    assert out.split() == ["udp", "refused", "raw", "refused", "icmp", "refused", "v6", "refused"], (out, err)


def test_no_policy_means_nothing_leaves(client):
    container = client.containers.create(name="egress-none")
    started = time.time()
    out, err, code = run(client, container.id,
                         "env | grep -ci proxy; curl -sS -m 5 http://a.allowed.test/; echo $?; "
                         "curl -sS -m 5 http://203.0.113.10/; echo $?; getent hosts a.allowed.test; echo $?")
    assert out.split() == ["0", "6", "7", "2"], (out, err)
    assert time.time() - started < 5
    assert client.containers.retrieve(container.id).network_policy.type == "disabled"


def test_a_policy_update_decides_the_next_request_without_a_restart(client, world):
    """`PUT /v1/containers/{id}/network_policy`: denied, then allowed again,
    each for the very next request; nothing restarts (its /tmp, a tmpfs
    of this start, keeps what was written before)."""
    container = client.containers.create(name="egress-update", network_policy=allowlist("a.allowed.test"))
    fetch = "curl -s -o /dev/null -w '%{http_code}' http://a.allowed.test/policy-update"
    path = f"/containers/{container.id}/network_policy"
    assert run(client, container.id, fetch)[0] == "200"
    run(client, container.id, "echo kept > /tmp/before-update")
    seen = len([r for r in world.requests() if r.get("path") == "/policy-update"])

    shown = client.put(path, cast_to=object, body={"type": "disabled"})
    assert shown["network_policy"] == {"type": "disabled"}
    assert run(client, container.id, fetch)[0] == "403"
    assert len([r for r in world.requests() if r.get("path") == "/policy-update"]) == seen

    shown = client.put(path, cast_to=object, body=allowlist("a.allowed.test"))
    assert shown["network_policy"]["allowed_domains"] == ["a.allowed.test"]
    assert run(client, container.id, fetch)[0] == "200"
    assert run(client, container.id, "cat /tmp/before-update")[0].strip() == "kept"

    # Within the operator's list only; the create's secrets are not changed here.
    with pytest.raises(openai.BadRequestError):
        client.put(path, cast_to=object, body=allowlist("elsewhere.test"))
    with pytest.raises(openai.BadRequestError):
        client.put(path, cast_to=object, body=allowlist(
            "api.secret.test", secrets=[{"domain": "api.secret.test", "name": "T", "value": "v" * 20}]))
    # A container made without network has no way out to open.
    bare = client.containers.create(name="egress-update-none")
    with pytest.raises(openai.ConflictError) as refused:
        client.put(f"/containers/{bare.id}/network_policy", cast_to=object, body=allowlist("a.allowed.test"))
    assert "created without network" in str(refused.value)


def test_a_container_cannot_reach_the_control_plane_or_another_containers_traffic(client, server, world):
    other = client.containers.create(name="egress-b", network_policy=allowlist("other.test"))
    mine = client.containers.create(name="egress-a", network_policy=allowlist("a.allowed.test"))
    # Another container's allowance is not mine.
    out, err, code = run(client, mine.id, "curl -sS -m 5 http://other.test/")
    assert json.loads(out)["error"]["code"] == "policy_denied"
    # The server's API, by its address and on the container's loopback.
    out, err, code = run(client, mine.id,
                         f"curl -sS -m 5 --noproxy '*' http://{NS_ADDR}:{server.port}/healthz; echo $?; "
                         f"curl -sS -m 5 --noproxy '*' http://127.0.0.1:{server.port}/healthz; echo $?; "
                         f"curl -sS -m 5 http://{NS_ADDR}:{server.port}/healthz")
    codes = [line for line in out.splitlines() if line.strip() in ("7", "0")]
    assert codes[:2] == ["7", "7"], (out, err)
    assert "policy_denied" in out
    # The proxy's own sockets, spoken to directly, check like any other.
    out, err, code = run(client, mine.id,
                         "curl -sS -m 5 --noproxy '*' -H 'Host: a.allowed.test' http://127.0.0.1/")
    assert json.loads(out)["error"]["code"] == "policy_denied"
    # No interface leads anywhere but loopback; routes cannot be changed.
    out, err, code = run(client, mine.id,
                         "python3 -c 'import socket; print(socket.if_nameindex())'; "
                         "ip route add 1.2.3.4 dev lo 2>&1; true")
    assert out.splitlines()[0] == "[(1, 'lo')]", out
    assert "Operation not permitted" in out
    client.containers.delete(other.id)
    client.containers.delete(mine.id)


# --- the organization allowlist and the policy's limits ---

def test_the_organization_allowlist_bounds_every_request(client):
    with pytest.raises(openai.BadRequestError) as refused:
        client.containers.create(name="x", network_policy=allowlist("outside.example"))
    assert "outside.example" in refused.value.message
    assert refused.value.body["param"] == "network_policy.allowed_domains"
    with pytest.raises(openai.BadRequestError):
        client.containers.create(name="x", network_policy=allowlist("*.test"))
    with pytest.raises(openai.BadRequestError) as refused:
        client.containers.create(name="x", network_policy=allowlist("*"))
    assert "'*'" in refused.value.message
    many = [f"h{i}.allowed.test" for i in range(51)]
    with pytest.raises(openai.BadRequestError) as refused:
        client.containers.create(name="x", network_policy=allowlist(*many))
    assert "at most 50" in refused.value.message
    assert client.containers.create(name="x", network_policy=allowlist(*many[:50])).network_policy.type == "allowlist"
    with pytest.raises(openai.BadRequestError):
        client.containers.create(name="x", network_policy=allowlist("203.0.113.10"))
    with pytest.raises(openai.BadRequestError) as refused:
        client.containers.create(name="x", network_policy=allowlist(
            "a.allowed.test", secrets=[{"domain": "other.test", "name": "T", "value": "v"}]))
    assert "other.test" in refused.value.message
    names = [c.name for c in client.containers.list(name="x")]
    assert names == ["x"], "refused requests leave nothing behind"


def test_egress_log_pages_and_belongs_to_its_project(client, server, networked):
    for i in range(5):
        run(client, networked, f"curl -sS -m 5 http://page{i}.not-listed.test/ >/dev/null")
    entries = egress_log(client, networked)
    assert len({e["id"] for e in entries}) == len(entries) > 5
    first = client.get(f"/containers/{networked}/egress", cast_to=object, options={"params": {"limit": 2}})
    assert len(first["data"]) == 2 and first["has_more"] and first["first_id"] == first["data"][0]["id"]
    stranger = server.client(KEY_B)
    with pytest.raises(openai.NotFoundError):
        stranger.get(f"/containers/{networked}/egress", cast_to=object)
    metrics = urllib.request.urlopen(f"http://{NS_ADDR}:{server.port}/metrics").read().decode()
    assert 'shellgate_egress_attempts_total{kind="http",verdict="denied"}' in metrics
    assert 'shellgate_egress_attempts_total{kind="dns",verdict="allowed"}' in metrics


def test_test_net_and_benchmarking_addresses_are_refused_without_the_exception(client, world):
    # This module's server names the world's TEST-NET in its exceptions;
    # a benchmarking address (198.18.0.0/15) stays refused there.
    container = client.containers.create(name="egress-bench", network_policy=allowlist("bench.test"))
    out, err, code = run(client, container.id, "curl -sS -m 10 http://bench.test/")
    assert "a benchmarking address" in json.loads(out)["error"]["message"], out
    out, err, code = run(client, container.id, "curl -sS -m 10 --noproxy '*' http://bench.test/")
    assert code == 6, err
    client.containers.delete(container.id)
    # Without the exception the world's own servers are refused too.
    strict = world.server(egress_private_exceptions="").client(KEY_A)
    container = strict.containers.create(name="egress-strict",
                                         network_policy=allowlist("a.allowed.test", "bench.test"))
    before = len(web_requests(world))
    for name, kind in [("a.allowed.test", "a documentation (TEST-NET) address"),
                       ("bench.test", "a benchmarking address")]:
        out, err, code = run(strict, container.id, f"curl -sS -m 10 http://{name}/")
        body = json.loads(out)
        assert body["error"]["code"] == "policy_denied" and kind in body["error"]["message"], body
        out, err, code = run(strict, container.id, f"curl -sS -m 10 --noproxy '*' http://{name}/")
        assert code == 6, err
    assert len(web_requests(world)) == before, "nothing reached a server"


def test_bytes_are_counted_as_relayed_when_the_upstream_resets(client):
    container = client.containers.create(name="egress-reset", network_policy=allowlist("a.allowed.test"))
    out, err, code = run(client, container.id,
                         "curl -sS -m 30 -D /mnt/data/head -o /mnt/data/body http://a.allowed.test/reset-big; "
                         "echo $?; stat -c %s /mnt/data/head /mnt/data/body")
    exit_code, head, body = (int(n) for n in out.split())
    assert exit_code in (18, 56), (out, err)  # cut short
    assert body > 0, "something was relayed before the reset"
    entries = wait_for_log(client, container.id, lambda e: e["kind"] == "http" and e["bytes_in"] > 0)
    entry = next(e for e in entries if e["kind"] == "http")
    # Exactly what the sandbox received: the head and the part of the body.
    assert entry["bytes_in"] == head + body, (entry, head, body)
    assert entry["bytes_out"] > 0
    client.containers.delete(container.id)


def dns_flood_script(count):
    """A Python script for a container: `count` A queries for distinct names
    under *.allowed.test, one after another; prints the replies' rcodes."""
    return (
        "import collections, json, socket, struct, time\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(10)\n"
        "s.connect(('127.0.0.1', 53))\n"
        "rcodes = collections.Counter(); started = time.monotonic()\n"
        f"for i in range({count}):\n"
        "    name = b''.join(bytes([len(l)]) + l for l in f'x{i}.allowed.test'.encode().split(b'.'))\n"
        "    s.send(struct.pack('!6H', i, 0x0100, 1, 0, 0, 0) + name + b'\\0' + struct.pack('!2H', 1, 1))\n"
        "    while True:\n"
        "        reply = s.recv(512)\n"
        "        if reply[:2] == struct.pack('!H', i): break\n"
        "    rcodes[reply[3] & 15] += 1\n"
        "print(json.dumps({'rcodes': rcodes, 'elapsed': time.monotonic() - started}))\n"
    )


def test_a_dns_flood_is_rate_limited_and_cannot_hide_a_connection(client, server, world):
    container = client.containers.create(name="egress-flood", network_policy=allowlist("*.allowed.test"))
    count = 1000
    script = dns_flood_script(count)
    out, err, code = run(client, container.id, f"python3 -c \"$(cat <<'EOF'\n{script}EOF\n)\"",
                         timeout_ms=120_000)
    assert code == 0, err
    result = json.loads(out)
    refused = result["rcodes"].get("5", 0)
    answered = count - refused
    # 50 lookups a second beyond a burst of 100: the rest REFUSED at once.
    assert refused > 0, result
    assert answered <= 100 + 50 * (result["elapsed"] + 1), result
    asked = {e["name"] for e in world.requests("dns") if e["name"].endswith(".allowed.test")
             and e["name"].startswith("x") and e["name"][1:].split(".")[0].isdigit()}
    assert len(asked) <= answered, "refused lookups never reach the upstream DNS"
    # A real connection right after the flood is logged all the same.
    out, err, code = run(client, container.id, "curl -sS -m 10 http://b.allowed.test/after-flood")
    assert json.loads(out)["path"] == "/after-flood"
    entries = wait_for_log(client, container.id,
                           lambda e: e["kind"] == "http" and e["server_name"] == "b.allowed.test")
    assert [e for e in entries if e["kind"] == "http"][-1]["verdict"] == "allowed"
    # What was not logged one by one is in aggregate rows, and counted.
    # (The last aggregate row comes within a second.)
    def accounted_for():
        lookups = [e for e in egress_log(client, container.id) if e["kind"] == "dns"]
        aggregates = [e for e in lookups if e["verdict"] == "aggregated"]
        return len(lookups) - len(aggregates) + sum(e["aggregated"] for e in aggregates), aggregates

    wait_until(lambda: accounted_for()[0] >= count, 30, interval=0.2)
    accounted, aggregates = accounted_for()
    assert accounted == count, (accounted, aggregates)
    assert sum(e["aggregated"] for e in aggregates) >= refused
    assert all("DNS lookups not logged one by one" in e["reason"] for e in aggregates)
    page = client.get(f"/containers/{container.id}/egress", cast_to=object, options={"params": {"limit": 1}})
    assert page["dropped"] == sum(e["aggregated"] for e in aggregates)
    metrics = urllib.request.urlopen(f"http://{NS_ADDR}:{server.port}/metrics").read().decode()
    limited = [line for line in metrics.splitlines()
               if line.startswith('shellgate_egress_lookups_unlogged_total{reason="rate_limited"}')]
    assert limited and int(limited[0].split()[-1]) >= refused, limited
    client.containers.delete(container.id)


def test_old_egress_rows_are_deleted_by_the_sweeper(world):
    keeper = world.server(egress_log_retention_secs="2", sweep_interval_secs="1").client(KEY_A)
    container = keeper.containers.create(name="egress-retention", network_policy=allowlist("a.allowed.test"))
    run(keeper, container.id, "curl -sS -m 10 http://a.allowed.test/kept-briefly; curl -sS -m 10 http://no.test/")
    wait_for_log(keeper, container.id, lambda e: e["kind"] == "http")
    assert wait_until(lambda: not egress_log(keeper, container.id), 60, interval=0.2), \
        "old egress rows were never deleted"
    # The container itself is untouched.
    assert keeper.containers.retrieve(container.id).status == "running"


# --- secrets ---

def test_domain_secrets_reach_their_domain_only_and_are_never_shown(client, server, world):
    container = client.containers.create(
        name="egress-secret",
        network_policy=allowlist("api.secret.test", "other.test",
                                 secrets=[{"domain": "api.secret.test", "name": "API_TOKEN", "value": SECRET,
                                           "inject": ["header", "query", "body"]}]),
    )
    policy = container.network_policy.model_dump()
    assert policy == {"type": "allowlist", "allowed_domains": ["api.secret.test", "other.test"]}
    out, err, code = run(client, container.id, "echo $API_TOKEN")
    placeholder = out.strip()
    put_ca(client, container.id, world)
    run(client, container.id, "cat /etc/ssl/certs/ca-certificates.crt /mnt/data/test-ca.pem > /mnt/data/both.pem")
    # Commands never spell the value out (the command audit keeps commands):
    # the container makes it from its base64 when a test needs it.
    import base64
    encoded = base64.b64encode(SECRET.encode()).decode()
    make_value = f"$(echo {encoded} | base64 -d)"
    assert placeholder.startswith("shellgate-secret-") and SECRET not in placeholder
    # The system trust store and the usual variables hold the container's CA.
    out, err, code = run(client, container.id,
                         'curl -sS -m 10 -H "Authorization: Bearer $API_TOKEN" '
                         'https://api.secret.test/echo?token=$API_TOKEN')
    assert code == 0, err
    echo = json.loads(out)
    # The server got the value; the container saw only the placeholder back.
    got = [e for e in world.requests("a") if e["path"].startswith("/echo")][-1]
    assert got["authorization"] == f"Bearer {SECRET}"
    assert got["path"] == f"/echo?token={SECRET}"
    assert echo["authorization"] == f"Bearer {placeholder}"
    assert SECRET not in out
    # Python requests through the proxy variables, a JSON body.
    script = (
        "import os, requests\n"
        "r = requests.post('https://api.secret.test/body', json={'key': os.environ['API_TOKEN']})\n"
        "print(r.json()['body'])\n"
    )
    out, err, code = run(client, container.id, f"python3 -c \"$(cat <<'EOF'\n{script}EOF\n)\"")
    assert code == 0, err
    assert json.loads([e for e in world.requests("a") if e["path"] == "/body"][-1]["body"]) == {"key": SECRET}
    assert SECRET not in out
    # Java (no proxy variables, its own trust store) where the host has it.
    if shutil.which("java"):
        java = (
            "import java.net.URI; import java.net.http.*;\n"
            "public class Fetch { public static void main(String[] a) throws Exception {\n"
            "  var request = HttpRequest.newBuilder(URI.create(\"https://api.secret.test/java\"))\n"
            "    .header(\"Authorization\", \"Bearer \" + System.getenv(\"API_TOKEN\")).build();\n"
            "  System.out.println(HttpClient.newHttpClient().send(request,\n"
            "    HttpResponse.BodyHandlers.ofString()).statusCode()); } }\n"
        )
        out, err, code = run(client, container.id,
                             f"cat > /tmp/Fetch.java <<'EOF'\n{java}EOF\njava /tmp/Fetch.java", timeout_ms=120_000)
        assert code == 0 and out.strip() == "200", (out, err)
        assert [e for e in world.requests("a") if e["path"] == "/java"][-1]["authorization"] == f"Bearer {SECRET}"
    # Elsewhere the placeholder stays a placeholder: directly, and through a
    # redirect whose client forwards its headers (--location-trusted).
    run(client, container.id,
        'curl -sS -m 10 -H "Authorization: Bearer $API_TOKEN" --cacert /mnt/data/both.pem '
        'https://other.test/direct')
    out, err, code = run(client, container.id,
                         'curl -sS -m 10 -L --location-trusted -H "Authorization: Bearer $API_TOKEN" '
                         '--cacert /mnt/data/both.pem '
                         '"https://api.secret.test/redirect?to=https://other.test/redirected"')
    assert code == 0, err
    at_other = {e["path"]: e["authorization"] for e in world.requests("other")}
    assert at_other["/direct"] == f"Bearer {placeholder}"
    assert at_other["/redirected"] == f"Bearer {placeholder}"
    # Nothing the container can read holds the value.
    out, err, code = run(client, container.id,
                         f'env; cat /proc/1/environ 2>/dev/null; grep -rlF "{make_value}" /etc /mnt/data /home /tmp '
                         f'2>/dev/null; echo "found: $?"')
    assert SECRET not in out and "found: 0" not in out, out
    # Output that holds the value (here made by the command) is masked.
    out, err, code = run(client, container.id, f'echo "{make_value}"')
    assert out.strip() == placeholder
    entries = egress_log(client, container.id)
    assert any(e["reason"] == "allowed; secret put in" for e in entries)
    assert SECRET not in json.dumps(entries)
    assert SECRET not in json.dumps(client.containers.retrieve(container.id).model_dump())
    assert SECRET not in json.dumps([c.model_dump() for c in client.containers.list()])
    # Not in the store's files, nor in any log.
    server.stop()
    # (The containers' disk images are left out: the value never enters a
    # container, and reading every sparse 4 GiB image takes long.)
    leaked = subprocess.run(["grep", "-rla", "--exclude=*.img", SECRET, str(server.data_dir)],
                            capture_output=True, text=True)
    assert leaked.stdout == "", leaked.stdout
    # After a restart the value is gone from memory: the container wakes
    # with its network off (no request leaves, with or without the
    # placeholder), says so in its object and its egress log, and still
    # masks the value (known by its salted digest).
    server.start()
    assert client.containers.retrieve(container.id).model_dump()["secrets_missing"] == ["API_TOKEN"]
    out, err, code = run(client, container.id, "echo $API_TOKEN")
    assert out.strip() == placeholder
    wait_for_log(client, container.id,
                 lambda e: e["kind"] == "secret" and e["verdict"] == "notice" and "API_TOKEN" in e["reason"]
                 and "network off" in e["reason"])
    out, err, code = run(client, container.id,
                         'curl -sS -m 10 -k -H "Authorization: Bearer $API_TOKEN" '
                         'https://api.secret.test/after-restart')
    assert code != 0
    assert not [e for e in world.requests("a") if e["path"] == "/after-restart"]
    out, err, code = run(client, container.id,
                         f'echo "{make_value}"; printf %s "{make_value}" | od -An -v -tx1 | tr -d " \\n"')
    assert out.split() == [placeholder, placeholder], out
    # Supplied again (the same value, checked against its digest): the
    # network is back.
    supply = lambda value: client.post(f"/containers/{container.id}/secrets", cast_to=object, body={
        "domain_secrets": [{"domain": "api.secret.test", "name": "API_TOKEN", "value": value}]})
    with pytest.raises(openai.BadRequestError) as refused:
        supply("sk-live-real-secret-value-9999")
    assert refused.value.body["param"] == "domain_secrets"
    assert "not the one" in refused.value.message
    assert not supply(SECRET).get("secrets_missing")
    assert not client.containers.retrieve(container.id).model_dump().get("secrets_missing")
    out, err, code = run(client, container.id,
                         'curl -sS -m 10 -H "Authorization: Bearer $API_TOKEN" '
                         'https://api.secret.test/after-supply')
    assert code == 0, err
    assert [e for e in world.requests("a") if e["path"] == "/after-supply"][-1]["authorization"] == f"Bearer {SECRET}"
    assert SECRET not in out


# --- the interceptor: every answer masked, secrets scoped, strict parsing ---

def value_of(secret):
    """A shell expression that makes `secret` inside the container (commands
    never spell a value out: the command audit keeps them)."""
    return f"$(echo {base64.b64encode(secret.encode()).decode()} | base64 -d)"


def leak_check(path):
    """A shell snippet: does the file at `path` (or its base64 decoding)
    hold the secret's value?"""
    return (f'v="{value_of(SECRET)}"; if grep -qF "$v" {path} || base64 -d {path} 2>/dev/null | '
            f'grep -qF "$v"; then echo LEAKED; else echo clean; fi')


@pytest.fixture(scope="module")
def secret_box(client, world):
    container = client.containers.create(
        name="egress-mask",
        network_policy=allowlist("api.secret.test", "a.allowed.test", secrets=[
            {"domain": "api.secret.test", "name": "API_TOKEN", "value": SECRET},
            {"domain": "api.secret.test", "name": "BODY_TOKEN", "value": BODY_SECRET,
             "inject": ["body"], "methods": ["POST"], "paths": ["/v1/"]},
        ]),
    )
    placeholders = run(client, container.id, "echo $API_TOKEN $BODY_TOKEN")[0].split()
    return container.id, placeholders[0], placeholders[1]


@pytest.mark.parametrize("kind", ["echo", "chunked", "large", "close", "b64", "reflect-header", "head"])
def test_every_answer_is_masked_whatever_its_framing(client, world, secret_box, kind):
    container, placeholder, _ = secret_box
    method = "-I" if kind == "head" else ""
    path = "reflect-header" if kind == "head" else kind
    out, err, code = run(client, container,
                         f'curl -sS -m 30 {method} -D /tmp/head -o /tmp/body '
                         f'-H "Authorization: Bearer $API_TOKEN" https://api.secret.test/mask/{path}; '
                         f'echo "curl: $?"; cat /tmp/head /tmp/body > /tmp/answer; {leak_check("/tmp/answer")}; '
                         f'grep -c "$API_TOKEN" /tmp/answer; wc -c < /tmp/body')
    lines = out.split()
    assert "curl: 0" in out, (out, err)
    assert "clean" in lines and "LEAKED" not in lines, out
    assert int(lines[-2]) >= 1, "the placeholder came back instead"
    if kind == "large":
        assert int(lines[-1]) > 1536 * 1024
    got = [e for e in world.requests("a") if e["path"] == f"/mask/{path}"][-1]
    assert got["authorization"] == f"Bearer {SECRET}"
    assert got["accept_encoding"] == "identity"


# Every reading of a text a client could make to find a value in it: as it
# is, any case, escapes undone (once and twice), UTF-16, base32 runs.
READINGS_CHECK = r"""
import base64, codecs, html, re, sys, urllib.parse
value = base64.b64decode(sys.argv[1]).decode().lower()
body = open(sys.argv[2], "rb").read()
text = body.decode("latin-1")
def unescape(t):
    t = re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), t)
    return html.unescape(urllib.parse.unquote(t))
readings = [text, unescape(text), unescape(unescape(text)),
            body.decode("utf-16-le", "ignore"), body.decode("utf-16-be", "ignore")]
for run in re.findall(r"[A-Z2-7]{16,}", text.upper()):
    for cut in range(8):
        piece = run[cut:]
        piece = piece[: len(piece) // 8 * 8]
        try:
            readings.append(base64.b32decode(piece).decode("latin-1"))
        except Exception:
            pass
print("LEAKED" if any(value in r.lower() for r in readings) else "clean")
"""


@pytest.mark.parametrize("scheme", ["upper", "percent", "percent-some", "json-u", "mixed", "html",
                                    "utf16le", "base32"])
def test_a_value_reflected_in_another_spelling_is_masked(client, world, secret_box, scheme):
    """A server that writes the value back upper-cased, escaped a character at
    a time (percent, JSON \\u, HTML, mixed), as UTF-16 or base32, chunked in
    5-byte pieces: the container reads its placeholder, and no reading of
    the answer gives the value."""
    container, placeholder, _ = secret_box
    secret = base64.b64encode(SECRET.encode()).decode()
    out, err, code = run(client, container,
                         f'curl -sS -m 30 -o /tmp/reflected -H "Authorization: Bearer $API_TOKEN" '
                         f'https://api.secret.test/mask/reflect/{scheme}; echo "curl: $?"; '
                         f'python3 -c \'{READINGS_CHECK}\' {secret} /tmp/reflected; '
                         f'grep -c "$API_TOKEN" /tmp/reflected')
    lines = out.split()
    assert "curl: 0" in out, (out, err)
    assert "clean" in lines and "LEAKED" not in lines, (out, err)
    assert lines[-1] == "1", "the placeholder came back instead"
    got = [e for e in world.requests("a") if e["path"] == f"/mask/reflect/{scheme}"][-1]
    assert got["authorization"] == f"Bearer {SECRET}"


def test_a_value_cannot_be_fetched_in_pieces_with_range_requests(client, world, secret_box):
    # Each 16-byte piece is shorter than the value, so no masker can see
    # the value in it: fetched piece by piece and put together, the pieces
    # would be the answer unmasked. A container with secrets never gets a
    # piece of an answer (its Range is not forwarded; a 206 is refused).
    container, _, _ = secret_box
    out, err, code = run(client, container,
                         'rm -f /tmp/pieces; for at in $(seq 0 16 2048); do '
                         'curl -sS -m 10 -o /tmp/piece -r "$(printf %05d $at)-$(printf %05d $((at + 15)))" '
                         '-H "Authorization: Bearer $API_TOKEN" https://api.secret.test/mask/range || break; '
                         'cat /tmp/piece >> /tmp/pieces; [ -s /tmp/piece ] || break; '
                         '[ "$(wc -c < /tmp/piece)" -le 16 ] || break; done; '
                         + leak_check("/tmp/pieces"), timeout_ms=120_000)
    assert "LEAKED" not in out, out
    assert "clean" in out, (out, err)
    reached = [e for e in world.requests("a") if e["path"] == "/mask/range"]
    assert reached and not [e for e in reached if e["range"]], reached


def test_an_answer_that_cannot_be_inspected_is_refused(client, world, secret_box):
    container, _, _ = secret_box
    out, err, code = run(client, container,
                         'curl -sS -m 10 -o /tmp/gz -w "%{http_code}" -H "Authorization: Bearer $API_TOKEN" '
                         f'https://api.secret.test/mask/gzip; echo; {leak_check("/tmp/gz")}; '
                         'gzip -dc /tmp/gz > /tmp/gunzipped 2>/dev/null; ' + leak_check("/tmp/gunzipped"))
    assert out.split()[0] == "502", out
    assert "LEAKED" not in out
    wait_for_log(client, container, lambda e: e["verdict"] == "denied" and "content-encoded" in e["reason"])


def test_secrets_go_only_where_their_scope_says(client, world, secret_box):
    container, placeholder, body_placeholder = secret_box
    marker = f"{PID}-{time.time_ns()}"
    # One file with the body secret's placeholder at its start, middle and
    # end: sent with a length (> 1 MiB), and chunked.
    script = (
        "import os\n"
        "p = os.environ['BODY_TOKEN']\n"
        "open('/tmp/large', 'w').write(p + 'x' * (600 * 1024) + p + 'y' * (600 * 1024) + p)\n"
        "open('/tmp/small', 'w').write('a=' + p + '&b=' + p)\n"
    )
    run(client, container, f"python3 -c \"$(cat <<'EOF'\n{script}EOF\n)\"")
    commands = [
        # The default: header values only, never the query or the body.
        f'curl -sS -m 10 -H "Authorization: Bearer $API_TOKEN" -d "k=$API_TOKEN" '
        f'"https://api.secret.test/default-{marker}?token=$API_TOKEN"',
        # A body secret: POST under /v1/ only, in the body only.
        f'curl -sS -m 10 -d @/tmp/small https://api.secret.test/v1/small-{marker}',
        f'curl -sS -m 10 -X PUT -d @/tmp/small https://api.secret.test/v1/put-{marker}',
        f'curl -sS -m 10 -d @/tmp/small https://api.secret.test/v2/other-{marker}',
        f'curl -sS -m 10 --path-as-is -d @/tmp/small https://api.secret.test/v1/../dots-{marker}',
        f'curl -sS -m 10 -H "Authorization: $BODY_TOKEN" -d x https://api.secret.test/v1/header-{marker}',
        f'curl -sS -m 30 --data-binary @/tmp/large https://api.secret.test/v1/large-{marker}',
        f'curl -sS -m 30 -H "Transfer-Encoding: chunked" --data-binary @/tmp/large '
        f'https://api.secret.test/v1/chunked-{marker}',
    ]
    # Each request must have gone through: the first that did not ends
    # the command, and its curl error is the failure's message.
    out, err, code = run(client, container, " && ".join(f"{c} > /dev/null" for c in commands), timeout_ms=90_000)
    assert code == 0, err
    got = {e["path"].split("?")[0].split("-" + marker)[0]: e for e in world.requests("a")
           if marker in e["path"]}
    assert sorted(got) == sorted(["/default", "/v1/small", "/v1/put", "/v2/other", "/v1/../dots",
                                  "/v1/header", "/v1/large", "/v1/chunked"]), (sorted(got), err)
    default = got["/default"]
    assert default["authorization"] == f"Bearer {SECRET}"
    assert default["path"].endswith(f"?token={placeholder}") and default["body"] == f"k={placeholder}"
    assert got["/v1/small"]["body"] == f"a={BODY_SECRET}&b={BODY_SECRET}"
    for refused in ["/v1/put", "/v2/other", "/v1/../dots"]:
        assert got[refused]["body"] == f"a={body_placeholder}&b={body_placeholder}", refused
    assert got["/v1/header"]["authorization"] == body_placeholder
    for framing in ["/v1/large", "/v1/chunked"]:
        body = got[framing]["body"]
        assert body.count(BODY_SECRET) == 3 and body_placeholder not in body, framing
        assert len(body) == 1200 * 1024 + 3 * len(BODY_SECRET), framing
    assert got["/v1/chunked"]["transfer_encoding"] == "chunked"



def test_a_placeholder_sent_where_it_stays_one_is_explained(client, world, secret_box):
    container, placeholder, _ = secret_box
    notes = lambda err: [line for line in err.splitlines() if line.startswith("shellgate: egress")]
    bearer = '-o /dev/null -H "Authorization: Bearer $API_TOKEN"'
    # Another host: sent as the placeholder (never refused), and told.
    out, err, code = run(client, container, f"curl -sS -m 10 {bearer} https://a.allowed.test/stray")
    assert code == 0, err
    assert notes(err) == [
        "shellgate: egress note: CONNECT a.allowed.test:443: carried the placeholder of $API_TOKEN, "
        "which is put in only for api.secret.test: sent as the placeholder"], err
    assert [e for e in world.requests("a") if e["path"] == "/stray"][-1]["authorization"] == \
        f"Bearer {placeholder}"
    # Its own host over plain HTTP; a part outside its policy.
    out, err, code = run(client, container, f"curl -sS -m 10 {bearer} http://api.secret.test/plain")
    assert notes(err) == [
        "shellgate: egress note: HTTP to api.secret.test:80: carried the placeholder of $API_TOKEN "
        "over plain HTTP, where no secret is put in (use https): sent as the placeholder"], err
    out, err, code = run(client, container,
                         'curl -sS -m 10 -o /dev/null -H "X-Key: $BODY_TOKEN" -d x https://api.secret.test/v1/key')
    assert notes(err) == [
        "shellgate: egress note: CONNECT api.secret.test:443: carried the placeholder of $BODY_TOKEN "
        "in a header, where its policy does not put it in: sent as the placeholder"], err
    # Put in where it belongs: nothing to tell.
    out, err, code = run(client, container, f"curl -sS -m 10 {bearer} https://api.secret.test/fine")
    assert code == 0 and notes(err) == [], err
    # The egress log says so too.
    wait_for_log(client, container,
                 lambda e: e["verdict"] == "allowed" and e["requested_name"] == "a.allowed.test"
                 and "placeholder of $API_TOKEN, which is put in only for api.secret.test" in e["reason"])


def test_a_path_scope_holds_against_paths_servers_read_as_others(client, world, secret_box):
    # Tomcat and Spring read `..;` as `..`; some servers decode twice or
    # decode overlong UTF-8: each of these is /admin or /v2 to some server,
    # so none gets the secret scoped to /v1/.
    container, _, body_placeholder = secret_box
    marker = f"{PID}-{time.time_ns()}"
    run(client, container, "printf 'a=%s' \"$BODY_TOKEN\" > /tmp/scoped")
    paths = ["/v1/..;/semi", "/v1/..;x=1/param", "/v1/..%3b/escaped-semi", "/v1/%252e%252e/double",
             "/v1/%c0%ae%c0%ae/overlong"]
    out, err, code = run(client, container, "; ".join(
        f"curl -sS -m 10 --path-as-is -d @/tmp/scoped -o /dev/null 'https://api.secret.test{path}-{marker}'"
        for path in paths))
    assert code == 0, err
    got = [e for e in world.requests("a") if marker in e["path"]]
    assert len(got) == len(paths), got
    for entry in got:
        assert entry["body"] == f"a={body_placeholder}", entry["path"]


def test_secret_scopes_are_checked(client):
    def refused(**extra):
        secret = {"domain": "api.secret.test", "name": "T", "value": "scope-test-value-9f3a1c", **extra}
        with pytest.raises(openai.BadRequestError) as error:
            client.containers.create(name="scope", network_policy=allowlist("api.secret.test", secrets=[secret]))
        assert error.value.body["param"] == "network_policy.domain_secrets", error.value.body
        return error.value.message

    assert "inject" in refused(inject=[])
    with pytest.raises(openai.BadRequestError) as error:
        client.containers.create(name="scope", network_policy=allowlist("api.secret.test", secrets=[
            {"domain": "api.secret.test", "name": "T", "value": "scope-test-value-9f3a1c", "inject": ["cookie"]}]))
    assert "cookie" in error.value.message and error.value.body["param"] == "network_policy"
    assert "twice" in refused(inject=["header", "header"])
    assert "method" in refused(methods=["get"])
    assert "path prefix" in refused(paths=["v1/"])
    assert "path prefix" in refused(paths=["/v1/../admin"])
    assert "path prefix" in refused(paths=["/v1/%2e%2e/"])


SMUGGLE = r"""
import socket, ssl, sys
def send(raw, host="a.allowed.test", address=None, tls=False):
    s = socket.create_connection((address or host, 443 if tls else 80), timeout=10)
    if tls:
        s = ssl.create_default_context().wrap_socket(s, server_hostname=host)
    s.sendall(raw)
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    print(data.split(b"\r\n", 1)[0].decode() or "(nothing)")
"""


def test_requests_are_parsed_strictly_and_nothing_rides_along(client, world, secret_box):
    container, placeholder, _ = secret_box
    smuggled = "Host: notlisted.test\r\nAuthorization: Bearer " + placeholder + "\r\n\r\n"
    cases = [
        # (request, transport, expected status)
        ("GET /s1 HTTP/1.1\r\nHost: a.allowed.test\r\nUpgrade: foo\r\nConnection: Upgrade\r\n\r\n"
         "GET /smuggled1 HTTP/1.1\r\n" + smuggled, "plain", "200"),
        ("GET /s2 HTTP/1.1\nHost: a.allowed.test\n\nGET /smuggled2 HTTP/1.1\n" + smuggled, "plain", "400"),
        ("GET /s3 HTTP/1.1\r\nHost: a.allowed.test\nHost: notlisted.test\r\n\r\n", "plain", "400"),
        ("POST /s4 HTTP/1.1\r\nHost: a.allowed.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
         "0\r\n\r\nGET /smuggled4 HTTP/1.1\r\n" + smuggled, "plain", "400"),
        ("POST /s5 HTTP/1.1\r\nHost: a.allowed.test\r\nContent-Length: 2\r\n\r\nok"
         "GET /smuggled5 HTTP/1.1\r\n" + smuggled, "plain", "200"),
        ("POST /s6 HTTP/1.1\r\nHost: a.allowed.test\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"
         "GET /smuggled6 HTTP/1.1\r\n" + smuggled, "plain", "200"),
        ("GET /s7 HTTP/1.1\r\nHost: a.allowed.test\r\nX: y\r\n Host: notlisted.test\r\n\r\n", "plain", "400"),
        ("GET http://a.allowed.test/s8 HTTP/1.1\r\nHost: a.allowed.test\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n"
         "GET http://notlisted.test/smuggled8 HTTP/1.1\r\n" + smuggled, "proxy", "200"),
        ("GET /s9 HTTP/1.1\nHost: api.secret.test\n\nGET /smuggled9 HTTP/1.1\r\n" + smuggled, "tls", "400"),
        ("GET /s10 HTTP/1.1\r\nHost: api.secret.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
         "GET /smuggled10 HTTP/1.1\r\n" + smuggled, "tls", "200"),
        ("POST /s11 HTTP/1.1\r\nHost: api.secret.test\r\nContent-Length: 2\r\n\r\nok"
         "GET /smuggled11 HTTP/1.1\r\n" + smuggled, "tls", "200"),
    ]
    script = SMUGGLE
    for raw, transport, _ in cases:
        if transport == "plain":
            script += f"send({raw.encode()!r})\n"
        elif transport == "proxy":
            script += f"send({raw.encode()!r}, address='127.0.0.1')\n"
        else:
            script += f"send({raw.encode()!r}, host='api.secret.test', tls=True)\n"
    out, err, code = run(client, container, f"python3 -c \"$(cat <<'EOF'\n{script}EOF\n)\"")
    assert code == 0, err
    statuses = [line.split()[1] if line.startswith("HTTP/") else line for line in out.splitlines()]
    assert statuses == [expected for _, _, expected in cases], out
    reached = world.requests()
    assert not [e for e in reached if "smuggled" in e.get("path", "")], "a smuggled request got through"
    assert not [e for e in reached if e.get("host") == "notlisted.test"]
    assert SECRET not in json.dumps([e for e in reached if e.get("host") != "api.secret.test"])
    entries = wait_for_log(client, container, lambda e: "malformed" in e["reason"])
    assert any("bare LF" in e["reason"] and e["verdict"] == "denied" for e in entries)


def test_the_host_goes_on_as_it_was_checked(client, world, secret_box):
    # `API.Secret.Test.` is api.secret.test to the proxy; a server that
    # routes it to another virtual host (its default one) would get the
    # secret there. The origin gets the checked name, however it was spelt.
    container, _, _ = secret_box
    marker = f"{PID}-{time.time_ns()}"
    script = SMUGGLE + (
        "import os\n"
        f"send(b'GET /spelt-{marker} HTTP/1.1\\r\\nHost: API.Secret.Test.:443\\r\\nAuthorization: Bearer '"
        " + os.environ['API_TOKEN'].encode() + b'\\r\\n\\r\\n', host='api.secret.test', tls=True)\n"
        f"send(b'GET /spelt-plain-{marker} HTTP/1.1\\r\\nHost: A.Allowed.TEST.\\r\\n\\r\\n')\n"
    )
    out, err, code = run(client, container, f"python3 -c \"$(cat <<'EOF'\n{script}EOF\n)\"")
    assert out.split()[1::3] == ["200", "200"], (out, err)
    got = {e["path"]: e for e in world.requests("a") if marker in e["path"]}
    assert got[f"/spelt-{marker}"]["host"] == "api.secret.test:443"
    assert got[f"/spelt-{marker}"]["authorization"] == f"Bearer {SECRET}"
    assert got[f"/spelt-plain-{marker}"]["host"] == "a.allowed.test"


WEBSOCKET = r"""
import socket
s = socket.create_connection(("a.allowed.test", 80), timeout=10)
s.sendall(b"GET /ws HTTP/1.1\r\nHost: a.allowed.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
          b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(4096)
print(head.split(b"\r\n", 1)[0].decode())
if b" 101 " in head.split(b"\r\n", 1)[0]:
    s.sendall(b"frame-bytes")
    print(s.recv(4096).decode())
"""


def test_only_websocket_upgrades_pass_and_not_beside_secrets(client, networked, world, secret_box):
    out, err, code = run(client, networked, f"python3 -c \"$(cat <<'EOF'\n{WEBSOCKET}EOF\n)\"")
    assert out.split("\n")[:2] == ["HTTP/1.1 101 Switching Protocols", "frame-bytes"], (out, err)
    # In a container with secrets the Upgrade is not forwarded (its frames
    # could not be masked): a plain answer comes back.
    container, _, _ = secret_box
    out, err, code = run(client, container, f"python3 -c \"$(cat <<'EOF'\n{WEBSOCKET}EOF\n)\"")
    assert out.split("\n")[0] == "HTTP/1.1 200 OK", (out, err)


def test_malformed_connect_targets_are_refused(client, networked, world):
    script = SMUGGLE
    targets = ["a.allowed.test:65536", "a.allowed.test:443abc", "443@a.allowed.test",
               "notlisted.test:443@a.allowed.test:443", "a.allowed.test:+443", "a.allowed.test",
               # One spelling per name and port: no empty label, no leading zero.
               "a.allowed.test..:443", "a.allowed.test:0443", "a..allowed.test:443"]
    for target in targets:
        script += f"send(b'CONNECT {target} HTTP/1.1\\r\\n\\r\\n', address='127.0.0.1')\n"
    out, err, code = run(client, networked, f"python3 -c \"$(cat <<'EOF'\n{script}EOF\n)\"")
    assert code == 0, err
    assert [line.split()[1] for line in out.splitlines()] == ["400"] * len(targets), out


def test_https_is_intercepted_and_its_host_must_be_its_sni(client, networked, world):
    out, err, code = run(client, networked,
                         "curl -sS -m 10 -o /dev/null -w '%{http_code}' -H 'Host: notlisted.test' "
                         "https://a.allowed.test/fronted; echo; "
                         "curl -sS -m 10 -o /dev/null -w '%{http_code}' --noproxy '*' -H 'Host: notlisted.test' "
                         "https://a.allowed.test/fronted; echo; "
                         "curl -sS -m 10 -v -o /dev/null https://a.allowed.test/issuer 2>&1 | grep -i 'issuer:'")
    lines = out.splitlines()
    assert lines[:2] == ["421", "421"], out
    assert "shellgate egress proxy" in lines[2], out
    assert not [e for e in world.requests() if e.get("host") == "notlisted.test"]
    wait_for_log(client, networked, lambda e: e["verdict"] == "denied"
                 and "carried a request for notlisted.test" in e["reason"])


def test_tls_passthrough_is_opt_in_and_bounded(client, world):
    with pytest.raises(openai.BadRequestError) as refused:
        client.containers.create(name="pt", network_policy=allowlist("a.allowed.test", passthrough=["other.test"]))
    assert refused.value.body["param"] == "network_policy.tls_passthrough_domains"
    with pytest.raises(openai.BadRequestError) as refused:
        client.containers.create(name="pt", network_policy=allowlist(
            "*.allowed.test", "api.secret.test", passthrough=["api.secret.test"],
            secrets=[{"domain": "api.secret.test", "name": "T", "value": SECRET}]))
    assert "domain_secrets" in refused.value.message
    with pytest.raises(openai.BadRequestError) as refused:
        client.containers.create(name="pt", network_policy=allowlist(
            "*.allowed.test", "api.secret.test", passthrough=["b.allowed.test"],
            secrets=[{"domain": "api.secret.test", "name": "T", "value": SECRET}]))
    assert "cannot be checked" in refused.value.message
    container = client.containers.create(
        name="pt", network_policy=allowlist("a.allowed.test", "b.allowed.test", passthrough=["b.allowed.test"]))
    assert container.network_policy.model_dump()["tls_passthrough_domains"] == ["b.allowed.test"]
    put_ca(client, container.id, world)
    out, err, code = run(client, container.id,
                         "curl -sS -m 10 -o /dev/null -w '%{http_code}' --cacert /mnt/data/test-ca.pem "
                         "https://b.allowed.test/passthrough; echo; "
                         "curl -sS -m 10 -o /dev/null -w '%{http_code}' https://b.allowed.test/untrusted; echo \" $?\"; "
                         "curl -sS -m 10 -o /dev/null -w '%{http_code}' https://a.allowed.test/intercepted")
    lines = out.splitlines()
    # The origin's own certificate (the test CA's): not terminated.
    assert lines[0] == "200", (out, err)
    assert lines[1].split()[-1] == "60", (out, err)
    assert lines[2] == "200", (out, err)
    client.containers.delete(container.id)


# --- the Responses API ---

def test_container_auto_gets_its_network_policy_and_tells_the_model(client, world):
    response = client.responses.create(
        model="scripted",
        tools=[{"type": "shell", "environment": {
            "type": "container_auto", "network_policy": allowlist("a.allowed.test")}}],
        input="Execute: curl -sS -m 10 http://a.allowed.test/from-a-model",
    )
    assert response.status == "completed"
    result = next(i for i in response.output if i.type == "shell_call_output")
    assert json.loads(result.output[0].stdout)["path"] == "/from-a-model"
    tools = json.dumps(world.upstream.requests[-1].get("tools", []))
    assert "a.allowed.test" in tools
    # A secret in container_auto: put in on the wire, never echoed.
    response = client.responses.create(
        model="scripted",
        tools=[{"type": "shell", "environment": {
            "type": "container_auto", "network_policy": allowlist(
                "api.secret.test",
                secrets=[{"domain": "api.secret.test", "name": "API_TOKEN", "value": SECRET}])}}],
        input='Execute: curl -sS -m 10 -H "Authorization: Bearer $API_TOKEN" https://api.secret.test/auto',
    )
    assert response.status == "completed", response.error
    got = [e for e in world.requests("a") if e["path"] == "/auto"][-1]
    assert got["authorization"] == f"Bearer {SECRET}"
    assert SECRET not in json.dumps(response.model_dump())
    assert SECRET not in json.dumps(client.responses.retrieve(response.id).model_dump())
    assert SECRET not in json.dumps(world.upstream.requests[-1])
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(
            model="scripted",
            tools=[{"type": "shell", "environment": {
                "type": "container_auto", "network_policy": allowlist("outside.example")}}],
            input="Execute: true",
        )
    assert "outside.example" in refused.value.message


# --- the CLI ---

def test_cli_exec_allow(world):
    from conftest import BINARY
    tmp_path = Path(tempfile.mkdtemp(prefix="cli-", dir=world.directory))
    os.chmod(tmp_path, 0o755)
    config = tmp_path / "config.toml"
    config.write_text(
        f'egress_dns_server = "198.51.100.53:53"\n'
        f'egress_allowed_domains = "{",".join(ORG_DOMAINS)}"\n'
        f'egress_private_exceptions = "{WORLD_EXCEPTION}"\n'
    )
    command = ["nsenter", f"--net=/run/netns/{NETNS}", str(BINARY), "--data-dir", str(tmp_path / "data"),
               "exec", "--config", str(config), "--allow", "a.allowed.test", "--json", "-c",
               "curl -sS -m 10 http://a.allowed.test/from-the-cli; echo; curl -sS -m 10 http://other.test/"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    output = json.loads(done.stdout)["output"][0]["stdout"].splitlines()
    assert json.loads(output[0])["path"] == "/from-the-cli"
    assert json.loads(output[1])["error"]["code"] == "policy_denied"
    # The refusal is told in the command's own stderr (once: the CLI does
    # not print the egress log beside it).
    command_stderr = json.loads(done.stdout)["output"][0]["stderr"]
    assert ("shellgate: egress denied: HTTP to other.test:80: other.test is not in this "
            "container's allowlist") in command_stderr, command_stderr
    assert "egress denied" not in done.stderr, done.stderr
    refused = subprocess.run(command[:-2] + ["--allow", "outside.example", "--", "true"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "outside.example" in refused.stderr


# --- secrets never stored, shown or misused ---

# The value, assembled by the sandbox from its parts (a command never
# spells it out, and the container's output is the realistic leak).
ASSEMBLE = "printf '%s%s\\n' sk-live-real- secret-value-4242"
SECRET_POLICY = allowlist("api.secret.test",
                          secrets=[{"domain": "api.secret.test", "name": "API_TOKEN", "value": SECRET}])


def raw(server, method, path, body=None, **headers):
    """A request as bytes on the wire (no SDK parsing in between)."""
    import requests
    return requests.request(method, f"{server.base_url}{path}", json=body, timeout=120,
                            headers={"Authorization": f"Bearer {KEY_A}", **headers})


def leaked_files(server):
    """Files of the data directory holding the value (disk images aside:
    the value never enters a container)."""
    found = subprocess.run(["grep", "-rlaF", "--exclude=*.img", SECRET, str(server.data_dir)],
                           capture_output=True, text=True)
    return found.stdout


def test_secret_values_are_never_stored_or_echoed_on_any_api(world):
    server = world.server()
    shell = {"type": "shell", "environment": {"type": "container_auto", "network_policy": SECRET_POLICY}}
    openrouter = {"type": "openrouter:shell", "parameters": {
        "engine": "openrouter", "environment": {"type": "container_auto", "network_policy": SECRET_POLICY}}}
    texts, ids = [], []
    for tool in [shell, openrouter]:
        for mode in ["plain", "stream", "background"]:
            body = {"model": "scripted", "input": f"Execute: {ASSEMBLE}", "tools": [tool]}
            if mode != "plain":
                body[mode] = True
            reply = raw(server, "POST", "/responses", body)
            assert reply.status_code == 200, reply.text
            texts.append(reply.text)
            if mode == "stream":
                created = next(json.loads(line[5:]) for line in reply.text.splitlines()
                               if line.startswith("data:") and '"response.created"' in line)
                ids.append(created["response"]["id"])
            else:
                ids.append(reply.json()["id"])
            # The tool is echoed, its value redacted; the output masked.
            if mode == "plain":
                echoed = json.dumps(reply.json()["tools"])
                assert "API_TOKEN" in echoed and "<redacted>" in echoed
                assert "shellgate-secret-api_token-" in reply.text
    for response_id in ids:
        wait_until(lambda: raw(server, "GET", f"/responses/{response_id}").json()["status"]
                   not in ("queued", "in_progress"), 60, interval=0.1)
        got = raw(server, "GET", f"/responses/{response_id}")
        assert got.json()["status"] == "completed", got.text
        texts.append(got.text)
        texts.append(raw(server, "GET", f"/responses/{response_id}?stream=true").text)
        texts.append(raw(server, "GET", f"/responses/{response_id}/input_items").text)
    for stream in [False, True]:
        reply = raw(server, "POST", "/messages", {
            "model": "scripted", "max_tokens": 256, "tools": [openrouter], "stream": stream,
            "messages": [{"role": "user", "content": f"Execute: {ASSEMBLE}"}]},
            **{"anthropic-version": "2023-06-01"})
        assert reply.status_code == 200, reply.text
        assert "shellgate-secret-api_token-" in reply.text
        texts.append(reply.text)
    for text in texts:
        assert SECRET not in text, text[:2000]
    assert SECRET not in json.dumps(world.upstream.requests)
    # Not in the store, its WAL, nor any file of the data directory: while
    # it runs, and after its shutdown's checkpoint.
    assert leaked_files(server) == ""
    server.stop()
    assert leaked_files(server) == ""


def test_weak_values_and_dangerous_names_are_refused_on_every_path(client):
    def policy(name="API_TOKEN", value=SECRET):
        return allowlist("api.secret.test", secrets=[{"domain": "api.secret.test", "name": name, "value": value}])

    for name, value, says in [
        ("API_TOKEN", "1234", "at least 16"), ("API_TOKEN", "x", "at least 16"),
        ("API_TOKEN", "abababababababababab", "distinct"),
        ("PATH", SECRET, "reserved"), ("LD_PRELOAD", SECRET, "reserved"), ("BASH_ENV", SECRET, "reserved"),
        ("https_proxy", SECRET, "reserved"), ("SSL_CERT_FILE", SECRET, "reserved"),
        ("PYTHONSTARTUP", SECRET, "reserved"), ("GIT_SSH_COMMAND", SECRET, "reserved"),
        ("LOCPATH", SECRET, "C library"), ("GCONV_PATH", SECRET, "reserved"),
    ]:
        with pytest.raises(openai.BadRequestError) as refused:
            client.containers.create(name="weak", network_policy=policy(name, value))
        assert refused.value.body["param"] == "network_policy.domain_secrets", refused.value.body
        # (The message never repeats a value; a 1- or 4-byte one could
        # occur in any text, so only longer ones are looked for.)
        assert says in refused.value.message and (len(value) < 5 or value not in refused.value.message)
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="scripted", input="Execute: true", tools=[
                {"type": "shell", "environment": {"type": "container_auto", "network_policy": policy(name, value)}}])
        assert refused.value.body["param"].endswith("network_policy.domain_secrets")
        assert says in refused.value.message
    server_tool = {"type": "openrouter:shell", "parameters": {"environment": {
        "type": "container_auto", "network_policy": policy("LD_PRELOAD")}}}
    with pytest.raises(openai.BadRequestError) as refused:
        client.post("/responses", cast_to=object, body={"model": "scripted", "input": "hi", "tools": [server_tool]})
    assert "reserved" in refused.value.message
    with pytest.raises(openai.BadRequestError) as refused:
        client.post("/messages", cast_to=object, body={
            "model": "scripted", "max_tokens": 64, "tools": [server_tool],
            "messages": [{"role": "user", "content": "hi"}]})
    assert "reserved" in str(refused.value.body)
    assert [c.name for c in client.containers.list(name="weak")] == [], "refused requests leave nothing behind"


def sse_events(text):
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


def test_a_value_in_a_container_is_masked_in_output_streams_downloads_and_promote(client, server):
    container = client.containers.create(name="egress-masking", network_policy=SECRET_POLICY)
    placeholder = run(client, container.id, "echo $API_TOKEN")[0].strip()
    # A file holding the value, uploaded; another the sandbox wrote.
    import io
    uploaded = client.containers.files.create(
        container.id, file=("uploaded.txt", io.BytesIO(f"token={SECRET}\n".encode())))
    run(client, container.id, f"{ASSEMBLE} > /mnt/data/made.txt; {ASSEMBLE} | base64 > /mnt/data/made.b64")
    out, err, code = run(client, container.id, "cat uploaded.txt made.txt; cat made.b64 | tr -d '\\n'")
    assert SECRET not in out and out.count(placeholder) == 3, out
    # Streamed: the value split across two writes (two deltas), at every
    # boundary; each command's deltas together are the placeholder.
    commands = [f"printf %s '{SECRET[:i]}'; sleep 0.05; printf %s '{SECRET[i:]}'"
                for i in range(1, len(SECRET))]
    # (The commands themselves hold the value's halves only.)
    reply = raw(server, "POST", f"/containers/{container.id}/exec",
                {"commands": commands, "stream": True})
    assert reply.status_code == 200, reply.text
    events = sse_events(reply.text)
    streamed = {}
    for event in events:
        if event["type"] == "exec.output.delta" and event["stream"] == "stdout":
            streamed[event["command_index"]] = streamed.get(event["command_index"], "") + event["delta"]
    assert SECRET not in reply.text
    assert streamed == {i: placeholder for i in range(len(commands))}, streamed
    completed = next(e for e in events if e["type"] == "exec.completed")
    assert [o["stdout"] for o in completed["shell_call_output"]["output"]] == [placeholder] * len(commands)
    # Downloads and promote go through the same masking.
    files = {f.path: f for f in client.containers.files.list(container.id).data}
    for path in ["/mnt/data/uploaded.txt", "/mnt/data/made.txt"]:
        content = raw(server, "GET", f"/containers/{container.id}/files/{files[path].id}/content")
        assert content.status_code == 200 and SECRET.encode() not in content.content
        assert placeholder.encode() in content.content
        promoted = raw(server, "POST", f"/containers/{container.id}/files/{files[path].id}/promote")
        assert promoted.status_code == 200, promoted.text
        blob = raw(server, "GET", f"/files/{promoted.json()['id']}/content").content
        assert SECRET.encode() not in blob and placeholder.encode() in blob
    assert uploaded.id in {f.id for f in files.values()}
    # Files by path too; an archive, whose sizes masking would
    # break, is refused.
    by_path = raw(server, "GET", f"/containers/{container.id}/fs/content?path=/mnt/data/made.txt")
    assert by_path.status_code == 200 and SECRET.encode() not in by_path.content
    assert placeholder.encode() in by_path.content
    archive = raw(server, "GET", f"/containers/{container.id}/fs/archive?path=/mnt/data")
    assert archive.status_code == 409 and archive.json()["error"]["code"] == "archive_unmaskable"
    # A name asked for that holds the value is logged masked.
    run(client, container.id, 'curl -sS -m 5 "http://$(printf %s%s sk-live-real- secret-value-4242).notlisted.test/"; true')
    entries = wait_for_log(client, container.id, lambda e: placeholder in (e["requested_name"] or ""))
    assert SECRET not in json.dumps(entries)
    # A file whose name is the value is not listed (nor stored).
    run(client, container.id, f"touch /mnt/data/\"$({ASSEMBLE})\"")
    listing = client.get(f"/containers/{container.id}/files", cast_to=object)
    assert SECRET not in json.dumps(listing)
    assert "secret's value" in listing["incomplete"]["message"]
    by_path = client.get(f"/containers/{container.id}/fs/list?path=/mnt/data", cast_to=object)
    assert SECRET not in json.dumps(by_path) and by_path["secret_names"] == 1, by_path


def test_a_session_reused_with_another_policy_gets_a_new_container_and_the_truth(client, world):
    session = f"policy-{os.getpid()}"
    curl = 'curl -sS -m 5 -o /dev/null -w "%{http_code}" -H "Authorization: Bearer $API_TOKEN" ' \
           'https://api.secret.test/from-a-session; echo " exit=$?"'

    def turn(policy, path):
        environment = {"type": "container_auto"}
        if policy:
            environment["network_policy"] = policy
        reply = client.post("/responses", cast_to=object, body={
            "model": "scripted", "session_id": session, "input": f"Execute: {curl.replace('from-a-session', path)}",
            "tools": [{"type": "openrouter:shell", "parameters": {"engine": "openrouter", "environment": environment}}]})
        [item] = [i for i in reply["output"] if i["type"] == "openrouter:shell"]
        [tool] = [t for t in world.upstream.requests[-1]["tools"] if t["function"]["name"] == "shell"]
        return item["container_id"], item["output"][0]["stdout"], tool["function"]["description"]

    first, out, told = turn(SECRET_POLICY, "with-policy")
    assert out.startswith("200"), out
    assert "limited to: api.secret.test" in told
    assert [e for e in world.requests("a") if e["path"] == "/with-policy"][-1]["authorization"] == f"Bearer {SECRET}"
    # The same session asking for no network: a new container, without
    # the secret's domain, and the model is told so.
    second, out, told = turn(None, "without-policy")
    assert second != first
    assert "exit=0" not in out, out
    assert not [e for e in world.requests("a") if e["path"] == "/without-policy"]
    assert "There is no network access." in told and "api.secret.test" not in told
    # The session now maps to the new container; the same policy again
    # keeps it.
    third, out, told = turn(None, "again-without")
    assert third == second and "There is no network access." in told


def test_a_session_reused_with_a_narrower_secret_scope_gets_a_new_container(client, world):
    """Adversarial: the same domains, names and values
    but a secret scoped more narrowly (methods, paths, where it goes) is
    another policy: the session's container, which puts the value in
    everywhere, is not reused for it."""
    session = f"scope-{os.getpid()}"

    def turn(secret, path):
        policy = allowlist("api.secret.test", secrets=[secret])
        curl = ('curl -sS -m 5 -o /dev/null -w "%{http_code}" -H "Authorization: Bearer $API_TOKEN" '
                f'https://api.secret.test{path}; echo " exit=$?"')
        reply = client.post("/responses", cast_to=object, body={
            "model": "scripted", "session_id": session, "input": f"Execute: {curl}",
            "tools": [{"type": "openrouter:shell", "parameters": {
                "engine": "openrouter", "environment": {"type": "container_auto", "network_policy": policy}}}]})
        [item] = [i for i in reply["output"] if i["type"] == "openrouter:shell"]
        [seen] = [e for e in world.requests("a") if e["path"] == path][-1:]
        return item["container_id"], seen["authorization"]

    wide = {"domain": "api.secret.test", "name": "API_TOKEN", "value": SECRET}
    first, sent = turn(wide, "/scope-wide")
    assert sent == f"Bearer {SECRET}"
    narrow = {**wide, "paths": ["/only-here/"]}
    second, sent = turn(narrow, "/scope-elsewhere")
    assert second != first
    assert SECRET not in sent, "the reused container put the value outside the request's paths"
    third, sent = turn(narrow, "/only-here/x")
    assert third == second and sent == f"Bearer {SECRET}"
    methods = {**narrow, "methods": ["POST"]}
    fourth, sent = turn(methods, "/only-here/y")
    assert fourth != third and SECRET not in sent


def test_after_a_restart_a_session_gets_its_secrets_back_only_with_the_same_values(world):
    server = world.server()
    client = server.client(KEY_A)
    session = f"restart-{os.getpid()}"
    curl = 'curl -sS -m 5 -o /dev/null -w "%{http_code}" -H "Authorization: Bearer $API_TOKEN" ' \
           'https://api.secret.test/PATH; echo " exit=$?"'

    def turn(value, path):
        policy = allowlist("api.secret.test",
                           secrets=[{"domain": "api.secret.test", "name": "API_TOKEN", "value": value}])
        reply = client.post("/responses", cast_to=object, body={
            "model": "scripted", "session_id": session, "input": f"Execute: {curl.replace('PATH', path)}",
            "tools": [{"type": "openrouter:shell", "parameters": {"engine": "openrouter", "environment": {
                "type": "container_auto", "network_policy": policy}}}]})
        [item] = [i for i in reply["output"] if i["type"] == "openrouter:shell"]
        return item["container_id"], item["output"][0]["stdout"]

    first, out = turn(SECRET, "before-restart")
    assert out.startswith("200"), out
    server.stop()
    server.start()
    # The container alone: network off.
    assert client.containers.retrieve(first).model_dump()["secrets_missing"] == ["API_TOKEN"]
    out, err, code = run(client, first, "curl -sS -m 5 https://api.secret.test/alone")
    assert code != 0 and not [e for e in world.requests("a") if e["path"] == "/alone"]
    # Another value under the same name: not this container's; a new one.
    other, out = turn("sk-live-another-value-0000", "other-value")
    assert other != first
    # The session's container (now the new one) asked for with the first
    # value: yet another container (the value differs from the new one's,
    # which would otherwise be used); the first container, continued by a
    # replay, gets its value back.
    again, out = turn(SECRET, "same-value")
    assert again not in (first, other)
    assert [e for e in world.requests("a") if e["path"] == "/same-value"][-1]["authorization"] == f"Bearer {SECRET}"
    reply = client.post("/responses", cast_to=object, body={
        "model": "scripted", "input": [
            {"type": "openrouter:shell", "id": "sh_1", "call_id": "call_1", "container_id": first,
             "action": {"commands": ["true"]}, "status": "completed", "output": []},
            {"type": "message", "role": "user", "content": f"Execute: {curl.replace('PATH', 'replayed')}"}],
        "tools": [{"type": "openrouter:shell", "parameters": {"engine": "openrouter", "environment": {
            "type": "container_auto", "network_policy": SECRET_POLICY}}}]})
    [item] = [i for i in reply["output"] if i["type"] == "openrouter:shell"]
    assert item["container_id"] == first
    assert item["output"][0]["stdout"].startswith("200"), item
    assert [e for e in world.requests("a") if e["path"] == "/replayed"][-1]["authorization"] == f"Bearer {SECRET}"
    assert not client.containers.retrieve(first).model_dump().get("secrets_missing")
    server.stop()
