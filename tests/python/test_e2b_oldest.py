"""The oldest E2B code interpreter SDK frameworks pin (`crewai-tools[e2b]`:
e2b-code-interpreter ~=2.6.0, e2b ~=2.20.0), unmodified, in a venv of its
own (.venv-e2b-oldest, made by scripts/test). It ignores E2B_SANDBOX_URL
and calls `https://49999-{id}.{domain}`: shellgate serves that host form
(envd's and the interpreter's ports of an E2B sandbox are its in-sandbox
API), and this test plays the HTTPS front the guide asks for: it resolves
`*.localhost` to the loopback (as systemd-resolved and browsers do) and
terminates TLS with a certificate made for each name (sandbox ids hold `_`,
which no wildcard certificate matches), trusted through SSL_CERT_FILE,
relaying the bytes to the server unchanged."""

import datetime
import ipaddress
import socket
import ssl
import threading

import pytest

from conftest import e2b_environment

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402

pytestmark = pytest.mark.single_box("the test's HTTPS front relays to one server's address")


def _name(common):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


class Authority:
    """A CA made for the test, and a certificate per name from it."""

    def __init__(self, directory):
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name("shellgate test front CA"))
            .issuer_name(_name("shellgate test front CA"))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
            )
            .sign(self.key, hashes.SHA256())
        )
        self.directory = directory
        self.ca_file = directory / "ca.pem"
        self.ca_file.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        self.contexts = {}
        self.lock = threading.Lock()

    def context_for(self, name):
        with self.lock:
            if name in self.contexts:
                return self.contexts[name]
            key = ec.generate_private_key(ec.SECP256R1())
            now = datetime.datetime.now(datetime.timezone.utc)
            alt = (
                x509.IPAddress(ipaddress.ip_address(name))
                if name.replace(".", "").isdigit()
                else x509.DNSName(name)
            )
            cert = (
                x509.CertificateBuilder()
                .subject_name(_name("front"))
                .issuer_name(self.cert.subject)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
                .sign(self.key, hashes.SHA256())
            )
            n = len(self.contexts)
            cert_file = self.directory / f"leaf-{n}.pem"
            key_file = self.directory / f"leaf-{n}.key"
            cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
            key_file.write_bytes(
                key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                )
            )
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(cert_file, key_file)
            self.contexts[name] = context
            return context


def _pipe(source, sink):
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Front:
    """TLS on a free loopback port, each name its own certificate, every
    connection's bytes relayed to the server's plain port."""

    def __init__(self, authority, upstream):
        self.authority = authority
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.base = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.base.sni_callback = self._sni
        self.base.load_cert_chain(*self._files_for("localhost"))
        threading.Thread(target=self._accept, daemon=True).start()

    def _files_for(self, name):
        self.authority.context_for(name)
        n = list(self.authority.contexts).index(name)
        return self.authority.directory / f"leaf-{n}.pem", self.authority.directory / f"leaf-{n}.key"

    def _sni(self, sock, name, _context):
        if name:
            sock.context = self.authority.context_for(name)

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client):
        try:
            tls = self.base.wrap_socket(client, server_side=True)
        except (OSError, ssl.SSLError):
            client.close()
            return
        upstream = socket.create_connection(self.upstream)
        threading.Thread(target=_pipe, args=(upstream, tls), daemon=True).start()
        _pipe(tls, upstream)

    def close(self):
        self.listener.close()


@pytest.fixture
def front(server, tmp_path, monkeypatch):
    authority = Authority(tmp_path)
    relay = Front(authority, (server.host, server.port))
    # `*.localhost` is the loopback, as the guide's front needs the names
    # under the sandbox domain to resolve to it.
    real = socket.getaddrinfo

    def resolve(host, *args, **kwargs):
        if isinstance(host, str) and host.endswith(".localhost"):
            host = "127.0.0.1"
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    monkeypatch.setenv("SSL_CERT_FILE", str(authority.ca_file))
    root = f"https://localhost:{relay.port}"
    for name, value in e2b_environment(server).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("E2B_API_URL", root)
    monkeypatch.delenv("E2B_SANDBOX_URL", raising=False)
    monkeypatch.delenv("E2B_DEBUG", raising=False)
    yield relay
    relay.close()


def test_the_pinned_code_interpreter_runs_code_through_the_host_form(front):
    from e2b_code_interpreter import Sandbox

    sandbox = Sandbox.create()
    try:
        assert sandbox.get_host(49999) == f"49999-{sandbox.sandbox_id}.localhost:{front.port}"
        execution = sandbox.run_code("x = 6 * 7\nprint('hi')\nx")
        assert execution.error is None, execution
        assert execution.text == "42", execution
        assert execution.logs.stdout == ["hi\n"], execution
        # State kept; a context of its own; files and commands through envd's host form.
        assert sandbox.run_code("x + 1").text == "43"
        context = sandbox.create_code_context()
        assert sandbox.run_code("y = 1\ny", context=context).text == "1"
        sandbox.files.write("/home/user/old.txt", "from the pinned SDK")
        assert sandbox.commands.run("cat /home/user/old.txt").stdout == "from the pinned SDK"
    finally:
        sandbox.kill()
