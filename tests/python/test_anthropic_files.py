"""Anthropic's code execution with files on `POST /v1/messages`, for any
upstream model: a `container_upload` block puts a Files API file into the
code execution container (`/mnt/data`, under its name; the model is told
where), and each file a command or a Python cell creates or changes comes
back in its result's `content` as a Files API file (`file_id`), which the
Files API downloads; and the Files API in Anthropic's shape (`FileMetadata`,
pages newest first, `file_deleted`, Anthropic's errors) to a client that
sends `anthropic-version`, over the same files OpenAI's shape shows; the
Skills API in Anthropic's shape over shellgate's skills (the curated ones
as `anthropic`), and `container.skills` mounting them.
Clients: the official `anthropic` SDK (the `openai` SDK for the Files API
in its OpenAI shape); the model is the scripted
upstream (a fixture), once per upstream protocol (Chat Completions,
Responses, Anthropic).
"""

import json

import anthropic
import pytest
from anthropic.types.beta import BetaDeletedFile, BetaFileMetadata, BetaSkill
from anthropic.types.beta.skills import BetaDeletedSkillVersion, BetaSkillVersion
from anthropic.types.skills import SkillVersion

from conftest import KEY_A, own_server

PROTOCOLS = ["chat", "responses", "anthropic"]

# Servers of the module's own (one per upstream protocol): in cluster mode,
# clusters of their own, run apart from the session's.
pytestmark = pytest.mark.fresh_server

BASH = {"type": "code_execution_20250825", "name": "code_execution"}
PYTHON = {"type": "code_execution_20260120", "name": "code_execution"}
# The versions whose model has the commands, and those with Python cells.
BASH_VERSIONS = ["code_execution_20250825", "code_execution_20260120", "code_execution_20260521"]
PYTHON_VERSIONS = ["code_execution_20250522", "code_execution_20260120", "code_execution_20260521"]


def version(kind):
    return {"type": kind, "name": "code_execution"}


@pytest.fixture(scope="module", params=PROTOCOLS)
def served(request, upstream):
    """A server whose upstream speaks `request.param`, and that protocol."""
    with own_server(upstream, upstream_url=upstream.url, upstream_protocol=request.param,
                    upstream_timeout_secs=10) as server:
        yield server, request.param


def anthropic_client(server):
    # Anthropic's SDK adds /v1 itself: its base URL is the server's root.
    # Strict: each answer must validate against the SDK's own types.
    return anthropic.Anthropic(base_url=server.base_url.removesuffix("/v1"), api_key=KEY_A, max_retries=0,
                               _strict_response_validation=True)


def uploaded(server, name, content):
    """A Files API file (uploaded in OpenAI's shape)."""
    return server.client(KEY_A).files.create(file=(name, content), purpose="user_data").id


def downloaded(server, file_id):
    return server.client(KEY_A).files.content(file_id).read()


def with_upload(file_id, name, arguments, tool=BASH, **extra):
    """A request whose first message uploads `file_id` and whose last asks
    the model to call code execution's sub-tool `name`."""
    return dict(model="scripted", max_tokens=256, tools=[tool], messages=[
        {"role": "user", "content": [{"type": "container_upload", "file_id": file_id},
                                     {"type": "text", "text": "Here is the data."}]},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": f"Call {name}: {json.dumps(arguments)}"},
    ], **extra)


def sent_text(request):
    """Everything an upstream request says, as one string."""
    return json.dumps(request)


@pytest.mark.parametrize("kind", BASH_VERSIONS)
def test_an_uploaded_file_is_in_the_container_and_written_files_come_back(served, upstream, kind):
    server, _ = served
    client = anthropic_client(server)
    file_id = uploaded(server, "data.csv", b"a,b\n1,2\n")
    before = len(upstream.requests)
    message = client.messages.create(**with_upload(
        file_id, "bash_code_execution", {"command": "cat data.csv; wc -l < data.csv > lines.txt"},
        tool=version(kind)))
    call, result, _ = message.content
    assert call.name == "bash_code_execution", message.content
    done = result.content
    assert (done.type, done.stdout, done.return_code) == ("bash_code_execution_result", "a,b\n1,2\n", 0), done
    # The model was told where the file is.
    assert "/mnt/data/data.csv" in sent_text(upstream.requests[before]), upstream.requests[before]
    # The file the command wrote, and only it (the upload was there before).
    [output] = done.content
    assert output.type == "bash_code_execution_output", done
    assert downloaded(server, output.file_id) == b"2\n"
    assert server.client(KEY_A).files.retrieve(output.file_id).filename == "lines.txt"
    # A command that writes nothing returns no files.
    again = client.messages.create(**with_upload(
        file_id, "bash_code_execution", {"command": "cat lines.txt"}, tool=version(kind),
        container=message.container.id))
    assert again.container.id == message.container.id
    assert again.content[1].content.model_dump() == {
        "type": "bash_code_execution_result", "stdout": "2\n", "stderr": "", "return_code": 0,
        "content": []}


@pytest.mark.parametrize("kind", PYTHON_VERSIONS)
def test_a_python_cell_returns_the_files_it_writes(served, kind):
    server, _ = served
    client = anthropic_client(server)
    file_id = uploaded(server, "numbers.txt", b"1 2 3 4\n")
    code = ("total = sum(int(n) for n in open('numbers.txt').read().split())\n"
            "open('total.txt', 'w').write(str(total))\nprint(total)")
    message = client.messages.create(**with_upload(file_id, "code_execution", {"code": code},
                                                   tool=version(kind)))
    result = message.content[1].content
    assert (result.type, result.stdout, result.return_code) == ("code_execution_result", "10\n", 0), result
    [output] = result.content
    assert output.type == "code_execution_output", result
    assert downloaded(server, output.file_id) == b"10"


def test_an_unknown_upload_is_a_404_naming_the_block(served):
    server, _ = served
    with pytest.raises(anthropic.NotFoundError) as raised:
        anthropic_client(server).messages.create(**with_upload(
            "file-none", "bash_code_execution", {"command": "true"}))
    assert "file-none" in str(raised.value), raised.value


def test_an_upload_without_code_execution_is_named_as_not_carried(served):
    server, _ = served
    file_id = uploaded(server, "unused.txt", b"x")
    request = with_upload(file_id, "bash_code_execution", {"command": "true"})
    request.pop("tools")
    request["messages"][-1]["content"] = "Hello"
    raw = anthropic_client(server).messages.with_raw_response.create(**request)
    assert raw.headers.get("x-shellgate-uncarried") == "messages[0].content[0] (container_upload)", raw.headers
    assert raw.parse().content[0].type == "text"


# --- The Files API in Anthropic's shape ---------------------------------


def test_the_files_api_answers_anthropics_sdk_in_its_shape(served):
    server, _ = served
    client = anthropic_client(server)
    meta = client.beta.files.upload(file=("notes.txt", b"hello\n", "text/plain"))
    assert isinstance(meta, BetaFileMetadata), meta
    assert (meta.type, meta.filename, meta.mime_type, meta.size_bytes, meta.downloadable) == (
        "file", "notes.txt", "text/plain", 6, True), meta
    assert meta.created_at.tzinfo is not None, meta
    assert client.beta.files.retrieve_metadata(meta.id) == meta
    assert client.beta.files.download(meta.id).read() == b"hello\n"
    # The same file, in OpenAI's shape to OpenAI's SDK.
    assert server.client(KEY_A).files.retrieve(meta.id).filename == "notes.txt"
    deleted = client.beta.files.delete(meta.id)
    assert isinstance(deleted, BetaDeletedFile) and (deleted.id, deleted.type) == (meta.id, "file_deleted")
    with pytest.raises(anthropic.NotFoundError) as raised:
        client.beta.files.retrieve_metadata(meta.id)
    assert raised.value.body["type"] == "error", raised.value.body
    assert raised.value.body["error"]["type"] == "not_found_error", raised.value.body


def test_an_expiry_is_anthropics_and_a_bad_one_is_its_400(served):
    server, _ = served
    client = anthropic_client(server)
    meta = client.beta.files.upload(file=("later.txt", b"x"), expires_in_seconds=3600)
    assert (meta.expires_at - meta.created_at).total_seconds() == 3600, meta
    with pytest.raises(anthropic.BadRequestError) as raised:
        client.beta.files.upload(file=("soon.txt", b"x"), expires_in_seconds=5)
    assert raised.value.body["error"]["type"] == "invalid_request_error", raised.value.body
    assert "expires_in_seconds" in raised.value.body["error"]["message"], raised.value.body


def test_anthropic_file_lists_page_newest_first(served):
    server, _ = served
    client = anthropic_client(server)
    oldest, middle, newest = (client.beta.files.upload(file=(f"page-{n}.txt", b"x")).id for n in range(3))
    page = client.beta.files.list(limit=2)
    assert [f.id for f in page.data] == [newest, middle], page
    assert all(isinstance(f, BetaFileMetadata) for f in page.data)
    # The SDK's cursor goes on from `next_page`.
    assert page.next_page and page.next_page.startswith("page_"), page
    assert page.get_next_page().data[0].id == oldest
    raw = client.beta.files.with_raw_response.list(limit=2).http_response.json()
    assert (raw["has_more"], raw["first_id"], raw["last_id"]) == (True, newest, middle), raw
    after = client.beta.files.with_raw_response.list(
        limit=2, extra_query={"after_id": newest}).http_response.json()
    assert [f["id"] for f in after["data"]] == [middle, oldest], after
    before = client.beta.files.with_raw_response.list(
        limit=2, extra_query={"before_id": oldest}).http_response.json()
    assert ([f["id"] for f in before["data"]], before["has_more"]) == ([newest, middle], False), before
    with pytest.raises(anthropic.BadRequestError):
        client.beta.files.list(limit=0)


@pytest.mark.parametrize("kind", [*BASH_VERSIONS, "code_execution_20250522"])
def test_a_file_uploaded_with_anthropics_sdk_is_used_and_an_output_downloaded(served, kind):
    server, _ = served
    client = anthropic_client(server)
    meta = client.beta.files.upload(file=("words.txt", b"one two three\n", "text/plain"))
    if kind in BASH_VERSIONS:
        call = ("bash_code_execution", {"command": "tr ' ' '\\n' < words.txt | sort > sorted.txt"})
        done = "bash_code_execution_result"
    else:
        # The version without commands: a Python cell.
        call = ("code_execution", {"code": "words = sorted(open('words.txt').read().split())\n"
                                            "open('sorted.txt', 'w').write('\\n'.join(words) + '\\n')"})
        done = "code_execution_result"
    message = client.messages.create(**with_upload(meta.id, *call, tool=version(kind)))
    result = message.content[1].content
    assert (result.type, result.return_code) == (done, 0), result
    [output] = result.content
    written = client.beta.files.retrieve_metadata(output.file_id)
    assert (written.filename, written.mime_type, written.downloadable) == ("sorted.txt", "text/plain", True)
    assert client.beta.files.download(output.file_id).read() == b"one\nthree\ntwo\n"


# --- The Skills API in Anthropic's shape, and container.skills --------


def skill_files(name, description="Counts words in a text file."):
    """A skill's folder, as the SDK uploads it."""
    skill_md = f"---\nname: {name}\ndescription: {description}\n---\n\nRun scripts/count.sh FILE.\n"
    return [(f"{name}/SKILL.md", skill_md.encode(), "text/markdown"),
            (f"{name}/scripts/count.sh", b"#!/bin/sh\nwc -w < \"$1\"\n", "text/x-sh")]


def test_the_skills_api_answers_anthropics_sdk_in_its_shape(served):
    server, _ = served
    client = anthropic_client(server)
    raw = client.beta.skills.with_raw_response.create(files=skill_files("word-counter"),
                                                      display_name="word-counter")
    assert raw.headers.get("x-shellgate-uncarried") is None, raw.headers
    skill = raw.parse()
    assert isinstance(skill, BetaSkill), skill
    assert (skill.type, skill.display_name, skill.source.type) == ("skill", "word-counter", "custom"), skill
    assert skill.latest_version_id.startswith("skillver_") and skill.created_at.tzinfo is not None, skill
    assert client.beta.skills.retrieve(skill.id) == skill
    listed = client.beta.skills.list(limit=1000)
    assert skill.id in [s.id for s in listed.data], listed
    assert all(isinstance(s, BetaSkill) for s in listed.data)
    # The same skill in OpenAI's shape, to OpenAI's SDK.
    assert server.client(KEY_A).skills.retrieve(skill.id).name == "word-counter"
    # Another display name is not kept, and the answer says so.
    renamed = client.beta.skills.with_raw_response.create(files=skill_files("word-counter-2"),
                                                          display_name="Counter")
    assert renamed.headers.get("x-shellgate-uncarried") == "display_name", renamed.headers
    assert renamed.parse().display_name == "word-counter-2"
    deleted = client.beta.skills.delete(skill.id)
    assert (deleted.id, deleted.type) == (skill.id, "skill_deleted"), deleted
    with pytest.raises(anthropic.NotFoundError) as raised:
        client.beta.skills.retrieve(skill.id)
    assert raised.value.body["error"]["type"] == "not_found_error", raised.value.body


def test_skills_shellgate_ships_are_anthropics_source(served):
    server, _ = served
    client = anthropic_client(server)
    shipped = client.beta.skills.list(source="anthropic")
    ids = [s.id for s in shipped.data]
    assert "shellgate-spreadsheet-analyst" in ids, shipped
    assert {s.source.type for s in shipped.data} == {"anthropic"}, shipped
    assert client.beta.skills.retrieve("shellgate-report-writer").display_name == "report-writer"


def test_anthropic_skill_lists_page(served):
    server, _ = served
    client = anthropic_client(server)
    made = [client.beta.skills.create(files=skill_files(f"pager-{n}")).id for n in range(3)]
    page = client.beta.skills.list(limit=2)
    assert [s.id for s in page.data] == made[:0:-1], page
    assert page.next_page and page.get_next_page().data[0].id == made[0]


def test_skill_versions_answer_anthropics_sdk_in_its_shape(served):
    server, _ = served
    client = anthropic_client(server)
    skill = client.beta.skills.create(files=skill_files("versioned", "One."))
    first_id = skill.latest_version_id
    second = client.beta.skills.versions.create(skill.id, files=skill_files("versioned", "Two."))
    assert isinstance(second, BetaSkillVersion), second
    assert (second.type, second.skill_id, second.name, second.description) == \
        ("skill_version", skill.id, "versioned", "Two."), second
    assert second.created_at.tzinfo is not None and second.id != first_id, second
    # The new version is the skill's latest, the one a container gets.
    assert client.beta.skills.retrieve(skill.id).latest_version_id == second.id
    listed = client.beta.skills.versions.list(skill.id)
    assert [v.id for v in listed.data] == [second.id, first_id], listed
    assert all(isinstance(v, BetaSkillVersion) for v in listed.data), listed
    page = client.beta.skills.versions.list(skill.id, limit=1)
    assert [v.id for v in page.data] == [second.id] and page.next_page, page
    assert [v.id for v in page.get_next_page().data] == [first_id], page
    # A version is named by its id, or `latest`; the non-beta types parse it too.
    assert client.beta.skills.versions.retrieve(second.id, skill_id=skill.id) == second
    assert client.beta.skills.versions.retrieve("latest", skill_id=skill.id) == second
    plain = client.skills.versions.retrieve(first_id, skill_id=skill.id)
    assert isinstance(plain, SkillVersion) and plain.description == "One.", plain
    deleted = client.beta.skills.versions.delete(first_id, skill_id=skill.id)
    assert isinstance(deleted, BetaDeletedSkillVersion), deleted
    assert (deleted.id, deleted.type) == (first_id, "skill_version_deleted"), deleted
    with pytest.raises(anthropic.NotFoundError) as raised:
        client.beta.skills.versions.retrieve(first_id, skill_id=skill.id)
    assert raised.value.body["error"]["type"] == "not_found_error", raised.value.body
    # The skill's last version goes with the skill.
    with pytest.raises(anthropic.BadRequestError) as raised:
        client.beta.skills.versions.delete(second.id, skill_id=skill.id)
    assert raised.value.body["error"]["type"] == "invalid_request_error", raised.value.body
    client.beta.skills.delete(skill.id)
    # A skill shellgate ships has one version, named by the skill's id.
    [shipped] = client.beta.skills.versions.list("shellgate-report-writer").data
    assert (shipped.id, shipped.name) == ("shellgate-report-writer", "report-writer"), shipped
    assert client.beta.skills.versions.retrieve("latest", skill_id=shipped.skill_id) == shipped


def test_container_skills_take_anthropics_own_skill_names(served):
    server, _ = served
    client = anthropic_client(server)
    message = client.messages.create(
        model="scripted", max_tokens=256, tools=[BASH],
        container={"skills": [{"type": "anthropic", "skill_id": "xlsx", "version": "latest"},
                              {"type": "anthropic", "skill_id": "pdf"}]},
        messages=[{"role": "user", "content": 'Call bash_code_execution: {"command": "ls /mnt/skills"}'}])
    result = message.content[1].content
    assert (result.stdout, result.return_code) == ("report-writer\nspreadsheet-analyst\n", 0), result
    # One shellgate does not ship is a 400 naming the ones it does.
    with pytest.raises(anthropic.BadRequestError) as raised:
        client.messages.create(
            model="scripted", max_tokens=64, tools=[BASH],
            container={"skills": [{"type": "anthropic", "skill_id": "pptx"}]},
            messages=[{"role": "user", "content": 'Call bash_code_execution: {"command": "true"}'}])
    error = raised.value.body["error"]
    assert error["type"] == "invalid_request_error", raised.value.body
    assert '"pptx"' in error["message"] and "shellgate-spreadsheet-analyst (xlsx)" in error["message"] \
        and "shellgate-report-writer (docx, pdf)" in error["message"], raised.value.body


def test_container_skills_mount_the_projects_and_the_shipped_skills(served):
    server, _ = served
    client = anthropic_client(server)
    skill = client.beta.skills.create(files=skill_files("tally"))
    container = {"skills": [{"type": "custom", "skill_id": skill.id, "version": "latest"},
                            {"type": "anthropic", "skill_id": "shellgate-report-writer"}]}
    message = client.messages.create(
        model="scripted", max_tokens=256, tools=[BASH], container=container,
        messages=[{"role": "user", "content": 'Call bash_code_execution: {"command": "ls /mnt/skills"}'}])
    result = message.content[1].content
    assert (result.stdout, result.return_code) == ("report-writer\ntally\n", 0), result
    # The next request names the container (its skills are the ones it was made with).
    again = client.messages.create(
        model="scripted", max_tokens=256, tools=[BASH],
        container={"id": message.container.id, "skills": container["skills"]},
        messages=[{"role": "user", "content": 'Call bash_code_execution: {"command": "sh /mnt/skills/tally/scripts/count.sh /mnt/skills/tally/SKILL.md"}'}])
    assert again.container.id == message.container.id
    assert again.content[1].content.return_code == 0, again.content[1].content


def test_an_unknown_container_skill_is_anthropics_400_naming_it(served):
    server, _ = served
    client = anthropic_client(server)
    for skill, param in [({"type": "custom", "skill_id": "skill_none"}, "skill_none"),
                         ({"type": "anthropic", "skill_id": "xlsx-none"}, "xlsx-none")]:
        with pytest.raises(anthropic.BadRequestError) as raised:
            client.messages.create(
                model="scripted", max_tokens=64, tools=[BASH], container={"skills": [skill]},
                messages=[{"role": "user", "content": 'Call bash_code_execution: {"command": "true"}'}])
        error = raised.value.body["error"]
        assert error["type"] == "invalid_request_error" and param in error["message"], raised.value.body


def bash_call(client, command, **extra):
    """A Messages request whose model runs `command` with code execution,
    and its raw answer (headers and the parsed message)."""
    raw = client.messages.with_raw_response.create(
        model="scripted", max_tokens=256, tools=[BASH],
        messages=[{"role": "user", "content": f"Call bash_code_execution: {json.dumps({'command': command})}"}],
        **extra)
    return raw, raw.parse()


def test_container_skills_are_added_to_an_existing_container(served):
    server, _ = served
    client = anthropic_client(server)
    tally = client.beta.skills.create(files=skill_files("tally"))
    shipped = {"type": "anthropic", "skill_id": "shellgate-report-writer"}
    _, first = bash_call(client, "echo kept > /tmp/mark; stat -c %i /mnt/skills/report-writer",
                         container={"skills": [shipped]})
    inode = first.content[1].content.stdout
    assert first.content[1].content.return_code == 0 and inode.strip(), first.content[1].content
    # The same container with a skill more: the new one is there beside
    # the one it held (kept as it was, at the same version), and the
    # container's own state stayed.
    custom = {"type": "custom", "skill_id": tally.id, "version": "latest"}
    raw, second = bash_call(client, "ls /mnt/skills; stat -c %i /mnt/skills/report-writer; cat /tmp/mark",
                            container={"id": first.container.id, "skills": [shipped, custom]})
    assert raw.headers.get("x-shellgate-uncarried") is None, raw.headers
    assert second.container.id == first.container.id
    result = second.content[1].content
    assert (result.stdout, result.return_code) == (f"report-writer\ntally\n{inode}kept\n", 0), result
    assert sorted((s.skill_id, s.type, s.version) for s in second.container.skills) == sorted(
        [("shellgate-report-writer", "anthropic", "1"), (tally.id, "custom", "1")]), second.container
    # A newer version of a skill the container holds replaces it whole.
    client.beta.skills.versions.create(tally.id, files=skill_files("tally", "Counts words, twice."))
    _, third = bash_call(client, "grep description /mnt/skills/tally/SKILL.md; ls /mnt/skills",
                         container={"id": first.container.id, "skills": [custom]})
    assert third.content[1].content.stdout == \
        "description: Counts words, twice.\nreport-writer\ntally\n", third.content[1].content
    assert (tally.id, "custom", "2") in [(s.skill_id, s.type, s.version) for s in third.container.skills]


def test_container_skills_for_a_container_made_without_skills_are_named_not_carried(served):
    server, _ = served
    client = anthropic_client(server)
    _, first = bash_call(client, "true")
    raw, again = bash_call(client, "ls /mnt/skills | wc -l", container={
        "id": first.container.id, "skills": [{"type": "anthropic", "skill_id": "xlsx"}]})
    assert raw.headers.get("x-shellgate-uncarried") == \
        f"container.skills (container {first.container.id} was made without skills)", raw.headers
    assert (again.container.id, again.container.skills) == (first.container.id, None), again.container
    assert again.content[1].content.stdout == "0\n", again.content[1].content
