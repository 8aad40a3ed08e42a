"""E2B's signed file URLs: `sandbox.upload_url()` / `download_url()` from the
`e2b` SDK (the latest, and the older one in .venv-e2b-agents), used from
plain `requests` and curl with no header at all, as on E2B. With
`E2B_SANDBOX_URL` set the URL names no sandbox: the signature alone finds
it. Expired, tampered, other-path, other-operation and other-sandbox
signatures are refused in E2B's `{code, message}` envelope."""

import shutil
import subprocess
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import pytest
import requests
from e2b import Sandbox
from e2b.sandbox.signature import get_signature


@pytest.fixture
def sbx(e2b):
    sandbox = Sandbox.create(secure=True)
    yield sandbox
    sandbox.kill()


def with_query(url, **changes):
    """`url` with some of its query's parameters replaced (None: removed)."""
    parts = urlsplit(url)
    query = {name: values[0] for name, values in parse_qs(parts.query).items()}
    for name, value in changes.items():
        if value is None:
            query.pop(name, None)
        else:
            query[name] = value
    return urlunsplit(parts._replace(query=urlencode(query)))


def signature_of(url):
    return parse_qs(urlsplit(url).query)["signature"][0]


def assert_refused(response, message):
    assert response.status_code == 401, (response.status_code, response.text)
    assert response.json() == {"code": 401, "message": message}, response.text


def upload(url, name, content):
    return requests.post(url, files={"file": (name, content)}, timeout=60)


def test_signed_urls_work_without_headers(sbx):
    path = "/home/user/signed dir/hello.txt"
    url = sbx.upload_url(path)
    assert "signature=" in url and sbx.sandbox_id not in url, url
    answer = upload(url, "hello.txt", b"signed upload\n")
    assert answer.status_code == 200, answer.text
    assert answer.json()[0]["path"] == path, answer.text
    assert sbx.files.read(path) == "signed upload\n"

    download = sbx.download_url(path)
    got = requests.get(download, timeout=60)
    assert got.status_code == 200, got.text
    assert got.content == b"signed upload\n"
    # The same URL again (a browser's retry), and with an expiry.
    assert requests.get(download, timeout=60).content == b"signed upload\n"
    expiring = sbx.download_url(path, use_signature_expiration=120)
    assert "signature_expiration=" in expiring, expiring
    got = requests.get(expiring, timeout=60)
    assert got.status_code == 200 and got.content == b"signed upload\n", got.text


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_signed_urls_work_from_curl(sbx, tmp_path):
    path = "/home/user/from-curl.bin"
    source = tmp_path / "source.bin"
    source.write_bytes(bytes(range(256)) * 64)
    sent = subprocess.run(
        ["curl", "-sS", "-f", "-F", f"file=@{source}", sbx.upload_url(path, use_signature_expiration=60)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert sent.returncode == 0, (sent.stdout, sent.stderr)
    fetched = subprocess.run(
        ["curl", "-sS", "-f", sbx.download_url(path)],
        capture_output=True,
        timeout=120,
    )
    assert fetched.returncode == 0, fetched.stderr
    assert fetched.stdout == source.read_bytes(), len(fetched.stdout)


def test_wrong_signatures_are_refused_in_e2b_s_envelope(sbx, e2b):
    path = "/home/user/kept.txt"
    sbx.files.write(path, "kept")
    download = sbx.download_url(path)

    # Tampered: one character of the signature changed.
    signature = signature_of(download)
    tampered = signature[:-1] + ("A" if signature[-1] != "A" else "B")
    assert_refused(requests.get(with_query(download, signature=tampered), timeout=60), "invalid signature")
    # Another path with this path's signature.
    other = with_query(download, path="/home/user/other.txt")
    assert_refused(requests.get(other, timeout=60), "invalid signature")
    # Another operation: a download's signature used to upload, and an
    # upload's to download.
    assert_refused(upload(download, "kept.txt", b"overwritten"), "invalid signature")
    assert_refused(requests.get(sbx.upload_url(path), timeout=60), "invalid signature")
    assert sbx.files.read(path) == "kept"
    # Its expiry moved: the signature no longer matches.
    expiring = sbx.download_url(path, use_signature_expiration=60)
    later = int(parse_qs(urlsplit(expiring).query)["signature_expiration"][0]) + 3600
    assert_refused(requests.get(with_query(expiring, signature_expiration=str(later)), timeout=60), "invalid signature")
    # Expired: signed right, for a time past.
    # (The older SDK names the user in the URL, and so in what it signs.)
    user = parse_qs(urlsplit(download).query).get("username", [None])[0]
    past = get_signature(path, "read", user, sbx._envd_access_token, -10)
    expired = with_query(download, signature=past["signature"], signature_expiration=str(past["expiration"]))
    assert_refused(requests.get(expired, timeout=60), "signature is already expired")
    # No signature at all: no sandbox is named, nothing is served.
    unsigned = requests.get(with_query(download, signature=None), timeout=60)
    assert unsigned.status_code in (401, 404), unsigned.text

    # Another sandbox's token: its own URLs open its own files only.
    other_sandbox = Sandbox.create(secure=True)
    try:
        other_sandbox.files.write(path, "other's")
        assert requests.get(other_sandbox.download_url(path), timeout=60).content == b"other's"
        assert requests.get(download, timeout=60).content == b"kept"
        # This sandbox's signature, sent to the other one by its id.
        named = requests.get(download, headers={"E2b-Sandbox-Id": other_sandbox.sandbox_id}, timeout=60)
        assert_refused(named, "invalid signature")
    finally:
        other_sandbox.kill()


def test_a_killed_sandbox_s_urls_open_nothing(e2b):
    sandbox = Sandbox.create(secure=True)
    path = "/home/user/gone.txt"
    sandbox.files.write(path, "soon gone")
    download = sandbox.download_url(path)
    assert requests.get(download, timeout=60).content == b"soon gone"
    sandbox.kill()
    # Refused in E2B's envelope: as a signature of no sandbox (401), or, in
    # a cluster whose replica still knew the sandbox's token, as the
    # sandbox that is gone (404).
    gone = requests.get(download, timeout=60)
    assert gone.status_code in (401, 404), (gone.status_code, gone.text)
    assert gone.json()["code"] == gone.status_code, gone.text
    assert gone.content != b"soon gone", gone.text


def test_the_host_form_reaches_envd_and_the_code_interpreter(server, sbx):
    """`{port}-{id}.{domain}` for envd's and the code interpreter's ports
    (what SDKs ignoring E2B_SANDBOX_URL call: e2b-code-interpreter before
    2.9) is the in-sandbox API, not the container's own port; sent here to
    the server's address with that Host, as a resolver of the domain would."""
    root = f"http://{server.host}:{server.port}"
    path = "/home/user/by-host.txt"
    sbx.files.write(path, "by host")
    envd = sbx.get_host(49983)
    assert envd.startswith(f"49983-{sbx.sandbox_id}."), envd
    signed = urlsplit(sbx.download_url(path))
    got = requests.get(f"{root}/files?{signed.query}", headers={"Host": envd}, timeout=60)
    assert got.status_code == 200 and got.content == b"by host", (got.status_code, got.text)
    # No credentials: refused as E2B refuses, not forwarded.
    bare = requests.get(f"{root}/files?path={path}", headers={"Host": envd}, timeout=60)
    assert bare.status_code == 401, (bare.status_code, bare.text)

    interpreter = sbx.get_host(49999)
    ran = requests.post(
        f"{root}/execute",
        json={"code": "6 * 7", "context_id": None, "language": None, "env_vars": None},
        headers={"Host": interpreter, "X-Access-Token": sbx._envd_access_token},
        timeout=120,
    )
    assert ran.status_code == 200, (ran.status_code, ran.text)
    assert '"text":"42"' in ran.text.replace(" ", ""), ran.text
    refused = requests.post(f"{root}/execute", json={"code": "1"}, headers={"Host": interpreter}, timeout=60)
    assert refused.status_code == 401, (refused.status_code, refused.text)
