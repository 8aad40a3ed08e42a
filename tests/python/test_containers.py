"""Containers, container files and the Files API through the official SDK."""

import io

import openai
import pytest

from conftest import KEY_B, exec_commands


def test_create_retrieve_list_delete(client):
    created = client.containers.create(
        name="sdk-basic", memory_limit="4g", expires_after={"anchor": "last_active_at", "minutes": 30}
    )
    assert created.id.startswith("cntr_")
    assert created.object == "container"
    assert created.status == "running"
    assert created.memory_limit == "4g"
    assert created.expires_after.minutes == 30
    fetched = client.containers.retrieve(created.id)
    assert fetched.id == created.id and fetched.name == "sdk-basic"
    names = [c.id for c in client.containers.list(name="sdk-basic")]
    assert created.id in names
    client.containers.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        client.containers.retrieve(created.id)


def test_list_auto_paginates_over_150_containers(client):
    ids = {client.containers.create(name="page-me").id for _ in range(150)}
    seen = [c.id for c in client.containers.list(name="page-me", limit=20)]
    assert len(seen) == 150 and set(seen) == ids
    ascending = [c.id for c in client.containers.list(name="page-me", order="asc", limit=33)]
    assert ascending == list(reversed(seen))
    for container_id in ids:
        client.containers.delete(container_id)


def test_commands_run_and_their_files_can_be_downloaded(client):
    container = client.containers.create(name="sdk-exec")
    result = exec_commands(client, container.id, ["echo hi", "python3 -c 'print(6*7)' > answer.txt", "exit 3"])
    assert result["type"] == "shell_call_output"
    assert result["output"][0] == {"stdout": "hi\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}
    assert result["output"][2]["outcome"] == {"type": "exit", "exit_code": 3}
    files = list(client.containers.files.list(container.id))
    made = [f for f in files if f.path == "/mnt/data/answer.txt"]
    assert len(made) == 1 and made[0].source == "assistant" and made[0].bytes == 3
    content = client.containers.files.content.retrieve(made[0].id, container_id=container.id)
    assert content.read() == b"42\n"
    client.containers.delete(container.id)


def test_container_files_upload_list_retrieve_content_delete(client):
    container = client.containers.create(name="sdk-files")
    uploaded = client.containers.files.create(container.id, file=("notes.txt", io.BytesIO(b"uploaded bytes")))
    assert uploaded.object == "container.file"
    assert uploaded.path == "/mnt/data/notes.txt" and uploaded.source == "user" and uploaded.bytes == 14
    assert client.containers.files.retrieve(uploaded.id, container_id=container.id).path == uploaded.path
    listed = [f.id for f in client.containers.files.list(container.id)]
    assert uploaded.id in listed
    seen = exec_commands(client, container.id, ["cat /mnt/data/notes.txt"])
    assert seen["output"][0]["stdout"] == "uploaded bytes"
    data = client.containers.files.content.retrieve(uploaded.id, container_id=container.id).read()
    assert data == b"uploaded bytes"
    client.containers.files.delete(uploaded.id, container_id=container.id)
    with pytest.raises(openai.NotFoundError):
        client.containers.files.retrieve(uploaded.id, container_id=container.id)
    gone = exec_commands(client, container.id, ["ls /mnt/data"])
    assert "notes.txt" not in gone["output"][0]["stdout"]
    client.containers.delete(container.id)


def test_files_api_and_file_ids_reach_the_container(client):
    file = client.files.create(file=("data.csv", io.BytesIO(b"a,b\n1,2\n")), purpose="user_data")
    assert file.id.startswith("file-") and file.bytes == 8 and file.filename == "data.csv"
    assert client.files.retrieve(file.id).purpose == "user_data"
    assert file.id in [f.id for f in client.files.list()]
    assert client.files.content(file.id).read() == b"a,b\n1,2\n"
    container = client.containers.create(name="with-files", file_ids=[file.id])
    out = exec_commands(client, container.id, ["cat /mnt/data/data.csv"])
    assert out["output"][0]["stdout"] == "a,b\n1,2\n"
    copied = client.containers.files.create(container.id, file_id=file.id)
    assert copied.path == "/mnt/data/data.csv"
    client.containers.delete(container.id)
    client.files.delete(file.id)
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(file.id)


def test_projects_cannot_see_or_touch_each_other(server, client):
    other = server.client(KEY_B)
    mine = client.containers.create(name="private")
    my_file = client.files.create(file=("secret.txt", io.BytesIO(b"secret")), purpose="user_data")
    uploaded = client.containers.files.create(mine.id, file=("s.txt", io.BytesIO(b"s")))
    with pytest.raises(openai.NotFoundError):
        other.containers.retrieve(mine.id)
    with pytest.raises(openai.NotFoundError):
        other.containers.delete(mine.id)
    with pytest.raises(openai.NotFoundError):
        other.files.retrieve(my_file.id)
    with pytest.raises(openai.NotFoundError):
        other.files.content(my_file.id)
    with pytest.raises(openai.NotFoundError):
        other.files.delete(my_file.id)
    with pytest.raises(openai.NotFoundError):
        other.containers.files.list(mine.id)
    with pytest.raises(openai.NotFoundError):
        other.containers.files.content.retrieve(uploaded.id, container_id=mine.id)
    with pytest.raises(openai.NotFoundError):
        exec_commands(other, mine.id, ["true"])
    with pytest.raises(openai.NotFoundError):
        other.containers.create(name="x", file_ids=[my_file.id])
    assert mine.id not in [c.id for c in other.containers.list()]
    assert my_file.id not in [f.id for f in other.files.list()]
    # Still intact for its owner.
    assert client.containers.retrieve(mine.id).id == mine.id
    client.containers.delete(mine.id)
    client.files.delete(my_file.id)


def test_errors_use_openai_envelopes(server, client):
    with pytest.raises(openai.BadRequestError) as bad:
        client.containers.create(name="x", memory_limit="2g")
    assert bad.value.param == "memory_limit"
    assert bad.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.AuthenticationError):
        server.client("wrong-key").containers.list()
    container = client.containers.create(name="limits")
    with pytest.raises(openai.BadRequestError) as bad:
        exec_commands(client, container.id, ["true"], timeout_ms=300_001)
    assert bad.value.param == "timeout_ms"
    with pytest.raises(openai.BadRequestError) as bad:
        exec_commands(client, container.id, ["true"] * 101)
    assert bad.value.param == "commands"
    client.containers.delete(container.id)


def test_a_file_gone_since_its_row_was_read_is_a_404(server, client):
    """Adversarial: a Files API file deleted or
    expired between the check of `file_ids` and its copy into the container
    (here: its stored blob removed) is a 404 naming the file, not a
    server_error; no half-made container is left."""
    made = client.files.create(file=("gone.txt", io.BytesIO(b"soon gone\n")), purpose="user_data")
    if hasattr(server, "cluster"):
        server.remove_object(f"files/{made.id}")  # a cluster's blobs are in its S3
    else:
        (server.data_dir / "files" / made.id).unlink()
    before = {c.id for c in client.containers.list(limit=100)}
    with pytest.raises(openai.NotFoundError) as gone:
        client.containers.create(name="late", file_ids=[made.id])
    assert made.id in gone.value.message
    assert {c.id for c in client.containers.list(limit=100)} <= before
    container = client.containers.create(name="there")
    with pytest.raises(openai.NotFoundError):
        client.post(f"/containers/{container.id}/files", body={"file_id": made.id}, cast_to=object)
