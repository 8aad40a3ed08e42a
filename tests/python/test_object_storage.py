"""Object storage through the official `openai` SDK: a
real `shellgate serve` keeping its blobs in an S3 bucket
(`SHELLGATE_OBJECT_STORE=s3://...`) of a real S3-compatible server (moto's,
from PyPI; `scripts/test` starts it and names it in
`SHELLGATE_TEST_S3_ENDPOINT`, else this module starts one from the venv).
What the server says it stored is checked in the bucket itself, listed with
a plain S3 client (boto3): Files API uploads, downloads and deletes, a
container's `file_ids`, a skill's bundle mounted into a container, an upload
cut off midway (no object, no unfinished multipart upload), and the audit
export streamed into the bucket by the CLI."""

import hashlib
import io
import os
import socket
import subprocess
import sys
import tempfile
import uuid
import zipfile
from pathlib import Path

import boto3
import openai
import pytest

from conftest import BINARY, KEY_A, Server, exec_commands, free_port, wait_until

PREFIX = "node-a"


@pytest.fixture(scope="module")
def s3_endpoint():
    endpoint = os.environ.get("SHELLGATE_TEST_S3_ENDPOINT")
    if endpoint:
        yield endpoint
        return
    moto = Path(sys.executable).parent / "moto_server"
    if not moto.exists():
        pytest.fail("no S3-compatible server: set SHELLGATE_TEST_S3_ENDPOINT, or install "
                    "moto[server] into this venv (scripts/test does)")
    port = free_port()
    log = open(Path(tempfile.gettempdir()) / f"shellgate-moto-{port}.log", "ab")
    process = subprocess.Popen([str(moto), "-H", "127.0.0.1", "-p", str(port)],
                               stdout=log, stderr=log, stdin=subprocess.DEVNULL)

    def listening():
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    try:
        assert wait_until(listening, 30), "moto_server did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def s3_client(endpoint):
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id="test", aws_secret_access_key="test")


def s3_settings(endpoint, bucket) -> dict:
    """The server's settings for a bucket, as `Server(**settings)` passes
    them (`SHELLGATE_<NAME>` variables)."""
    return {
        "object_store": f"s3://{bucket}/{PREFIX}",
        "s3_endpoint": endpoint,
        "s3_region": "us-east-1",
        "s3_access_key_id": "test",
        "s3_secret_access_key": "test",
        "s3_allow_http": "true",
    }


@pytest.fixture(scope="module")
def bucket(s3_endpoint):
    name = f"shellgate-{uuid.uuid4().hex[:12]}"
    s3_client(s3_endpoint).create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="module")
def s3_server(upstream, s3_endpoint, bucket):
    with tempfile.TemporaryDirectory(prefix="shellgate-py-s3-") as tmp:
        server = Server(Path(tmp), upstream_url=upstream.url,
                        **s3_settings(s3_endpoint, bucket)).start()
        yield server
        server.stop()


def objects(s3_endpoint, bucket) -> dict:
    """Every object in the bucket: key -> size."""
    listed = {}
    for page in s3_client(s3_endpoint).get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            listed[item["Key"]] = item["Size"]
    return listed


def unfinished_uploads(s3_endpoint, bucket) -> list:
    answer = s3_client(s3_endpoint).list_multipart_uploads(Bucket=bucket)
    return [upload["Key"] for upload in answer.get("Uploads", [])]


def object_bytes(s3_endpoint, bucket, key) -> bytes:
    return s3_client(s3_endpoint).get_object(Bucket=bucket, Key=key)["Body"].read()


def test_files_stream_into_the_bucket_and_out_and_go_with_their_delete(s3_server, s3_endpoint, bucket):
    client = s3_server.client()
    small = client.files.create(file=("notes.txt", io.BytesIO(b"kept in a bucket\n")), purpose="user_data")
    # Over two 8 MiB parts: a multipart upload.
    big_bytes = os.urandom(20 * 1024 * 1024 + 12345)
    big = client.files.create(file=("big.bin", io.BytesIO(big_bytes)), purpose="user_data")
    assert big.bytes == len(big_bytes)
    listed = objects(s3_endpoint, bucket)
    assert listed[f"{PREFIX}/files/{small.id}"] == len(b"kept in a bucket\n")
    assert listed[f"{PREFIX}/files/{big.id}"] == len(big_bytes)
    # Nothing of them on the node's disk.
    assert not (s3_server.data_dir / "files").exists() or not any((s3_server.data_dir / "files").iterdir())
    assert unfinished_uploads(s3_endpoint, bucket) == []

    assert client.files.content(small.id).read() == b"kept in a bucket\n"
    downloaded = client.files.content(big.id).read()
    assert hashlib.sha256(downloaded).digest() == hashlib.sha256(big_bytes).digest()

    client.files.delete(big.id)
    assert f"{PREFIX}/files/{big.id}" not in objects(s3_endpoint, bucket)
    with pytest.raises(openai.NotFoundError):
        client.files.content(big.id)
    client.files.delete(small.id)
    assert not any(key.startswith(f"{PREFIX}/files/") for key in objects(s3_endpoint, bucket))


def test_a_container_gets_its_file_ids_from_the_bucket(s3_server, s3_endpoint, bucket):
    client = s3_server.client()
    data = os.urandom(9 * 1024 * 1024)
    made = client.files.create(file=("data.bin", io.BytesIO(data)), purpose="user_data")
    note = client.files.create(file=("readme.md", io.BytesIO(b"# from S3\n")), purpose="user_data")
    assert f"{PREFIX}/files/{made.id}" in objects(s3_endpoint, bucket)
    container = client.containers.create(name="from-s3", file_ids=[made.id, note.id])
    out = exec_commands(client, container.id, ["sha256sum /mnt/data/data.bin", "cat /mnt/data/readme.md"])["output"]
    assert out[0]["stdout"].split()[0] == hashlib.sha256(data).hexdigest()
    assert out[1]["stdout"] == "# from S3\n"
    # A later copy by file_id, too.
    copied = client.post(f"/containers/{container.id}/files", body={"file_id": note.id}, cast_to=object)
    assert copied["bytes"] == len(b"# from S3\n")
    # A file whose object is gone from the bucket is a 404, not a half-made container.
    s3_client(s3_endpoint).delete_object(Bucket=bucket, Key=f"{PREFIX}/files/{note.id}")
    with pytest.raises(openai.NotFoundError) as gone:
        client.containers.create(name="late", file_ids=[note.id])
    assert note.id in gone.value.message
    client.containers.delete(container.id)
    client.files.delete(made.id)
    client.files.delete(note.id)


def skill_zip(name: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{name}/SKILL.md", f"---\nname: {name}\ndescription: Adds numbers.\n---\n\nRun it.\n")
        archive.writestr(f"{name}/scripts/run.py", "import sys\nprint('sum', sum(map(int, sys.argv[1:])))\n")
    return buffer.getvalue()


def test_a_skill_bundle_lives_in_the_bucket_and_mounts_into_a_container(s3_server, s3_endpoint, bucket):
    client = s3_server.client()
    skill = client.skills.create(files=("adder.zip", skill_zip("adder"), "application/zip"))
    version = client.skills.versions.retrieve("1", skill_id=skill.id)
    key = f"{PREFIX}/skills/{version.id}.zip"
    stored = object_bytes(s3_endpoint, bucket, key)
    with zipfile.ZipFile(io.BytesIO(stored)) as archive:
        assert "adder/scripts/run.py" in archive.namelist()
    assert not (s3_server.data_dir / "skills").exists() or not any((s3_server.data_dir / "skills").iterdir())
    # Downloaded from the bucket.
    assert client.skills.content.retrieve(skill.id).read() == stored
    container = client.containers.create(name="skilled-from-s3", skills=[
        {"type": "skill_reference", "skill_id": skill.id}])
    out = exec_commands(client, container.id, ["python3 /mnt/skills/adder/scripts/run.py 20 22"])["output"]
    assert out[0]["stdout"] == "sum 42\n"
    client.containers.delete(container.id)
    client.skills.delete(skill.id)
    assert key not in objects(s3_endpoint, bucket)


def test_an_upload_cut_off_midway_leaves_nothing_in_the_bucket(s3_server, s3_endpoint, bucket):
    before = objects(s3_endpoint, bucket)
    boundary = "shellgate-cut-upload"
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nuser_data\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"cut.bin\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n").encode()
    declared = len(head) + 40 * 1024 * 1024
    sock = socket.create_connection(("127.0.0.1", s3_server.port))
    sock.sendall((f"POST /v1/files HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY_A}\r\n"
                  f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
                  f"Content-Length: {declared}\r\n\r\n").encode() + head)
    chunk = b"x" * (1024 * 1024)
    for _ in range(20):
        sock.sendall(chunk)
    # A multipart upload began (20 MiB sent: two parts' worth)...
    assert wait_until(lambda: unfinished_uploads(s3_endpoint, bucket) != [], 30), \
        "the upload never reached the bucket"
    # ...and the client goes away.
    sock.close()
    assert wait_until(lambda: unfinished_uploads(s3_endpoint, bucket) == [], 30), \
        unfinished_uploads(s3_endpoint, bucket)
    assert objects(s3_endpoint, bucket) == before


def test_the_audit_export_streams_into_the_bucket(s3_server, s3_endpoint, bucket):
    client = s3_server.client()
    container = client.containers.create(name="audited")
    marker = f"audit-marker-{uuid.uuid4().hex[:8]}"
    exec_commands(client, container.id, [f"echo {marker}"])
    client.containers.delete(container.id)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        **{f"SHELLGATE_{k.upper()}": v for k, v in s3_settings(s3_endpoint, bucket).items()},
    }

    def export(*args):
        return subprocess.run([str(BINARY), "--data-dir", str(s3_server.data_dir), "audit", "export", *args],
                              env=env, capture_output=True, text=True, timeout=120)

    # The commands may wait in a batch before they are written: until the
    # export has the marker.
    def exported():
        done = export("--to-object", "run-1.jsonl")
        assert done.returncode == 0, done.stderr
        return marker in object_bytes(s3_endpoint, bucket, f"{PREFIX}/audit/run-1.jsonl").decode()

    assert wait_until(exported, 30, interval=1)
    lines = object_bytes(s3_endpoint, bucket, f"{PREFIX}/audit/run-1.jsonl").decode().splitlines()
    assert any(marker in line for line in lines)
    # The same lines as the export to stdout.
    plain = export()
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.splitlines() == lines
    # A name that would leave audit/ is refused, and nothing is written.
    refused = export("--to-object", "../escape.jsonl")
    assert refused.returncode != 0 and "--to-object" in refused.stderr
    assert not any("escape" in key for key in objects(s3_endpoint, bucket))


def test_a_bucket_that_is_not_there_fails_the_start(upstream, s3_endpoint):
    with tempfile.TemporaryDirectory(prefix="shellgate-py-s3-missing-") as tmp:
        server = Server(Path(tmp), upstream_url=upstream.url,
                        **s3_settings(s3_endpoint, f"missing-{uuid.uuid4().hex[:12]}"))
        with pytest.raises(RuntimeError) as failed:
            server.start()
        server.stop()
        assert "object store" in str(failed.value) and "NoSuchBucket" in str(failed.value)
