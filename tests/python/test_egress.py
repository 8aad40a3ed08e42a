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

from conftest import KEY_A, KEY_B, Server, exec_commands

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
    "loop.test", "private.test", "metadata.test", "v6loop.test", "mapped.test",
]


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
    deadline = time.time() + timeout
    while time.time() < deadline:
        entries = egress_log(client, container_id)
        if any(predicate(e) for e in entries):
            return entries
        time.sleep(0.1)
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
    # After a restart the value is gone: the container wakes without it and
    # its egress log says so.
    server.start()
    out, err, code = run(client, container.id, "echo $API_TOKEN")
    assert out.strip() == placeholder
    wait_for_log(client, container.id,
                 lambda e: e["kind"] == "secret" and e["verdict"] == "notice" and "API_TOKEN" in e["reason"])
    out, err, code = run(client, container.id,
                         'curl -sS -m 10 -k -H "Authorization: Bearer $API_TOKEN" '
                         'https://api.secret.test/after-restart')
    after = [e for e in world.requests("a") if e["path"] == "/after-restart"]
    assert after and after[-1]["authorization"] == f"Bearer {placeholder}"


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
    out, err, code = run(client, container, "; ".join(f"{c} > /dev/null" for c in commands), timeout_ms=90_000)
    assert code == 0, err
    got = {e["path"].split("?")[0].split("-" + marker)[0]: e for e in world.requests("a")
           if marker in e["path"]}
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


def test_secret_scopes_are_checked(client):
    def refused(**extra):
        secret = {"domain": "api.secret.test", "name": "T", "value": "v" * 12, **extra}
        with pytest.raises(openai.BadRequestError) as error:
            client.containers.create(name="scope", network_policy=allowlist("api.secret.test", secrets=[secret]))
        assert error.value.body["param"] == "network_policy.domain_secrets", error.value.body
        return error.value.message

    assert "inject" in refused(inject=[])
    with pytest.raises(openai.BadRequestError) as error:
        client.containers.create(name="scope", network_policy=allowlist("api.secret.test", secrets=[
            {"domain": "api.secret.test", "name": "T", "value": "v" * 12, "inject": ["cookie"]}]))
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
               "notlisted.test:443@a.allowed.test:443", "a.allowed.test:+443", "a.allowed.test"]
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
    )
    command = ["nsenter", f"--net=/run/netns/{NETNS}", str(BINARY), "--data-dir", str(tmp_path / "data"),
               "exec", "--config", str(config), "--allow", "a.allowed.test", "--json", "-c",
               "curl -sS -m 10 http://a.allowed.test/from-the-cli; echo; curl -sS -m 10 http://other.test/"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    output = json.loads(done.stdout)["output"][0]["stdout"].splitlines()
    assert json.loads(output[0])["path"] == "/from-the-cli"
    assert json.loads(output[1])["error"]["code"] == "policy_denied"
    assert "other.test" in done.stderr  # denials are reported on stderr
    refused = subprocess.run(command[:-2] + ["--allow", "outside.example", "--", "true"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "outside.example" in refused.stderr
