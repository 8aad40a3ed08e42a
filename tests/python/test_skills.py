"""Skills through the official `openai` SDK: every Skills endpoint, the
hostile bundles a skill upload may be, and containers that get skills by
reference and inline and run their scripts."""

import base64
import io
import json
import os
import stat
import warnings
import zipfile
from pathlib import Path

import openai
import pytest

from conftest import KEY_B, exec_commands, wait_until

MANIFEST = "---\nname: {name}\ndescription: {description}\n---\n\nUse `python3 {path}`.\n"


def skill_zip(name="basic-math", description="Add or multiply numbers.", extra=None, manifest=None) -> bytes:
    """A skill bundle as OpenAI documents it: one top-level folder with a
    SKILL.md and scripts."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(
            f"{name}/SKILL.md",
            manifest if manifest is not None else MANIFEST.format(
                name=name, description=description, path=f"/mnt/skills/{name}/scripts/run.py"),
        )
        archive.writestr(f"{name}/scripts/run.py", f"import sys\nprint('{name} says', sum(map(int, sys.argv[1:])))\n")
        for path, data in (extra or {}).items():
            archive.writestr(path, data)
    return buffer.getvalue()


def raw_zip(entries) -> bytes:
    """A zip from (ZipInfo or name, bytes) pairs, for hand-made hostile
    entries."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for info, data in entries:
            archive.writestr(info, data)
    return buffer.getvalue()


def special_entry(path: str, mode: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(path)
    info.create_system = 3  # unix: the mode is in the high bits
    info.external_attr = mode << 16
    return info


def blobs(server) -> set:
    """The names of the stored skill bundles: in the server's data
    directory, or a cluster's object store."""
    if hasattr(server, "cluster"):
        return server.object_names("skills/")
    return {p.name for p in (server.data_dir / "skills").iterdir()}


def no_skill_mounts(server) -> bool:
    """Whether no container's skills are mounted any more: in the server's
    data directory, or any node's of a cluster."""
    data_dirs = [n.data_dir for n in server.cluster.nodes.values()] if hasattr(server, "cluster") \
        else [server.data_dir]
    mounts = [d / "skill-mounts" for d in data_dirs]
    return not any(m.exists() and any(m.iterdir()) for m in mounts)


def test_skill_lifecycle_through_every_endpoint(server):
    client = server.client()
    skill = client.skills.create(files=("basic-math.zip", skill_zip(), "application/zip"))
    assert skill.id.startswith("skill_") and skill.object == "skill"
    assert skill.name == "basic-math" and skill.description == "Add or multiply numbers."
    assert skill.default_version == "1" and skill.latest_version == "1"
    assert client.skills.retrieve(skill.id) == skill

    # A second version from a directory upload (`files[]` parts, each path
    # inside one top-level folder), not the default.
    manifest = MANIFEST.format(name="basic-math", description="Add numbers, version two.", path="x")
    v2 = client.skills.versions.create(
        skill.id,
        files=[("basic-math/SKILL.md", manifest.encode(), "text/markdown"),
               ("basic-math/scripts/run.py", b"print(2)\n", "text/plain")],
        default=False,
    )
    assert v2.object == "skill.version" and v2.version == "2" and v2.skill_id == skill.id
    assert v2.description == "Add numbers, version two."
    after = client.skills.retrieve(skill.id)
    assert (after.default_version, after.latest_version) == ("1", "2")
    assert after.description == "Add or multiply numbers."  # the default's

    v3 = client.skills.versions.create(skill.id, files=("v3.zip", skill_zip(description="Three."), "application/zip"),
                                       default=True)
    assert v3.version == "3"
    assert client.skills.retrieve(skill.id).default_version == "3"

    versions = client.skills.versions.list(skill.id)
    assert [v.version for v in versions.data] == ["3", "2", "1"]
    page = client.skills.versions.list(skill.id, limit=1, order="asc")
    assert [v.version for v in page.data] == ["1"] and page.has_more
    assert client.skills.versions.retrieve("2", skill_id=skill.id) == v2

    # Set the default back; the skill takes the default's name and description.
    updated = client.skills.update(skill.id, default_version="1")
    assert updated.default_version == "1" and updated.description == "Add or multiply numbers."

    # Content: the default's zip, and any version's.
    content = client.skills.content.retrieve(skill.id)
    with zipfile.ZipFile(io.BytesIO(content.read())) as archive:
        assert "basic-math/SKILL.md" in archive.namelist()
        assert "print('basic-math says'" in archive.read("basic-math/scripts/run.py").decode()
    version_content = client.skills.versions.content.retrieve("2", skill_id=skill.id)
    with zipfile.ZipFile(io.BytesIO(version_content.read())) as archive:
        assert archive.read("basic-math/scripts/run.py") == b"print(2)\n"

    # The default version cannot go; another can, and its number is not reused.
    with pytest.raises(openai.BadRequestError) as refused:
        client.skills.versions.delete("1", skill_id=skill.id)
    assert refused.value.body["param"] == "version"
    deleted = client.skills.versions.delete("3", skill_id=skill.id)
    assert deleted.deleted and deleted.version == "3"
    assert client.skills.retrieve(skill.id).latest_version == "2"
    v4 = client.skills.versions.create(skill.id, files=("v.zip", skill_zip(), "application/zip"))
    assert v4.version == "4"
    with pytest.raises(openai.NotFoundError):
        client.skills.versions.retrieve("3", skill_id=skill.id)

    # Another project sees none of it.
    other = server.client(KEY_B)
    with pytest.raises(openai.NotFoundError):
        other.skills.retrieve(skill.id)
    assert skill.id not in [s.id for s in other.skills.list()]

    assert skill.id in [s.id for s in client.skills.list(limit=100)]
    gone = client.skills.delete(skill.id)
    assert gone.deleted and gone.id == skill.id
    with pytest.raises(openai.NotFoundError) as missing:
        client.skills.retrieve(skill.id)
    assert missing.value.body["type"] == "invalid_request_error"
    assert not any(name.startswith(v4.id) for name in blobs(server))


def test_skill_lists_page_with_cursors(server):
    client = server.client()
    made = [client.skills.create(files=("s.zip", skill_zip(name=f"pager-{i}"), "application/zip")).id
            for i in range(3)]
    first = client.skills.list(limit=2, order="asc")
    assert first.has_more
    seen = [s.id for s in client.skills.list(limit=2, order="asc")]
    assert [i for i in seen if i in made] == made
    for skill_id in made:
        client.skills.delete(skill_id)


def many_files_zip(count: int) -> bytes:
    return raw_zip([("many/SKILL.md", MANIFEST.format(name="many", description="d", path="x"))]
                   + [(f"many/f{i}.txt", b"x") for i in range(count)])


def compressible(size: int) -> bytes:
    """Data deflate shrinks about a hundredfold: under the ratio cap, yet
    small to send."""
    chunk = bytearray(4096)
    out = bytearray()
    while len(out) < size:
        chunk[:24] = os.urandom(24)
        out += chunk
    return bytes(out[:size])


def nested_zip(depth: int) -> bytes:
    inner = b"innermost"
    for _ in range(depth):
        inner = raw_zip([("layer.txt", b"layer"), ("inner.zip", inner)])
    return inner


def duplicate_names_zip(second: str) -> bytes:
    """A bundle with `dup/run.py` and `second`: the same name twice in the
    central directory (the zip format allows it; one would hide the
    other), or the same ignoring case."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of the duplicate
        return raw_zip([("dup/SKILL.md", MANIFEST.format(name="dup", description="d", path="x")),
                        ("dup/run.py", b"print(1)"), (second, b"print(2)")])


def nested_zip_bomb() -> bytes:
    """About 100 KB: a zip of 8 zips of 8 entries named `.zip`, each 4 MiB
    of zeros (256 MiB if every level were inflated)."""
    leaves = raw_zip([(f"z{i}.zip", bytes(4 << 20)) for i in range(8)])
    middle = raw_zip([(f"a{i}.zip", leaves) for i in range(8)])
    return raw_zip([("nbomb/SKILL.md", MANIFEST.format(name="nbomb", description="d", path="x")),
                    ("nbomb/bomb.zip", middle)])


HOSTILE = {
    "zip slip": lambda: raw_zip([("evil/SKILL.md", MANIFEST.format(name="evil", description="d", path="x")),
                                 ("evil/../../etc/cron.d/x", b"boom")]),
    "absolute path": lambda: raw_zip([("/etc/evil/SKILL.md", b"x")]),
    "symbolic link": lambda: raw_zip([("link/SKILL.md", MANIFEST.format(name="link", description="d", path="x")),
                                      (special_entry("link/passwd", stat.S_IFLNK | 0o777), b"/etc/passwd")]),
    "device file": lambda: raw_zip([("dev/SKILL.md", MANIFEST.format(name="dev", description="d", path="x")),
                                    (special_entry("dev/sda", stat.S_IFBLK | 0o666), b"")]),
    "more than 500 files": lambda: many_files_zip(500),
    "zip bomb (ratio)": lambda: raw_zip([("bomb/SKILL.md", MANIFEST.format(name="bomb", description="d", path="x")),
                                         ("bomb/zeros", bytes(20 << 20))]),
    "zip bomb (one file)": lambda: raw_zip([("big/SKILL.md", MANIFEST.format(name="big", description="d", path="x")),
                                            ("big/huge", compressible(26 << 20))]),
    "zip bomb (total)": lambda: raw_zip([("tot/SKILL.md", MANIFEST.format(name="tot", description="d", path="x"))]
                                        + [(f"tot/part{i}", compressible(21 << 20)) for i in range(5)]),
    "nested zips": lambda: raw_zip([("nest/SKILL.md", MANIFEST.format(name="nest", description="d", path="x")),
                                    ("nest/deep.zip", nested_zip(3))]),
    "no SKILL.md": lambda: raw_zip([("nomanifest/README.md", b"hello")]),
    "front matter without a name": lambda: raw_zip([("anon/SKILL.md", b"---\ndescription: d\n---\nbody\n")]),
    "SKILL.md without front matter": lambda: raw_zip([("plain/SKILL.md", b"# just a heading\n")]),
    "name unlike the folder's rules": lambda: raw_zip([("bad/SKILL.md", b"---\nname: ../../x\ndescription: d\n---\n")]),
    "two top-level folders": lambda: raw_zip([("a/SKILL.md", MANIFEST.format(name="a", description="d", path="x")),
                                              ("b/SKILL.md", MANIFEST.format(name="b", description="d", path="x"))]),
    "not a zip at all": lambda: b"PK\x03\x04 this is not really a zip",
    "duplicate names": lambda: duplicate_names_zip("dup/run.py"),
    "names differing only in case": lambda: duplicate_names_zip("dup/RUN.py"),
    "nested zip bomb": nested_zip_bomb,
}


def test_duplicates_and_nested_bombs_are_named(server):
    client = server.client()
    for bundle, fragment in [
        (duplicate_names_zip("dup/run.py"), '"dup/run.py" is in the bundle twice'),
        (duplicate_names_zip("dup/RUN.py"), '"dup/RUN.py" is in the bundle twice'),
        (nested_zip_bomb(), '"nbomb/bomb.zip!/a0.zip!/z0.zip" is compressed more than 200 to 1'),
    ]:
        with pytest.raises(openai.BadRequestError) as refused:
            client.skills.create(files=("bundle.zip", bundle, "application/zip"))
        assert fragment in refused.value.body["message"], refused.value.body


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_bundles_are_refused_and_leave_nothing(server, case):
    client = server.client()
    before_skills = {s.id for s in client.skills.list(limit=100)}
    before_blobs = blobs(server)
    with pytest.raises(openai.BadRequestError) as refused:
        client.skills.create(files=("bundle.zip", HOSTILE[case](), "application/zip"))
    error = refused.value.body
    assert error["type"] == "invalid_request_error" and error["param"] == "files", error
    assert error["message"], error
    # As a new version of an existing skill, and as an inline container skill.
    assert {s.id for s in client.skills.list(limit=100)} == before_skills
    assert blobs(server) == before_blobs
    inline = {"type": "inline", "name": "x", "description": "d",
              "source": {"type": "base64", "media_type": "application/zip",
                         "data": base64.b64encode(HOSTILE[case]()).decode()}}
    before_containers = {c.id for c in client.containers.list(limit=100)}
    with pytest.raises(openai.BadRequestError) as inline_refused:
        client.containers.create(name="hostile", skills=[inline])
    assert inline_refused.value.body["param"] == "skills[0].source.data"
    assert {c.id for c in client.containers.list(limit=100)} == before_containers
    assert no_skill_mounts(server)


def test_directory_uploads_are_checked_too(server):
    client = server.client()
    for files, fragment in [
        ([("d/SKILL.md", MANIFEST.format(name="d", description="x", path="y").encode()),
          ("d/../../escape", b"x")], ".."),
        ([("d/SKILL.md", MANIFEST.format(name="d", description="x", path="y").encode()),
          ("other/file", b"x")], "one top-level folder"),
        ([("d/notes.md", b"no manifest")], "SKILL.md"),
    ]:
        with pytest.raises(openai.BadRequestError) as refused:
            client.skills.create(files=files)
        assert fragment in refused.value.body["message"], refused.value.body


def test_oversize_uploads_are_refused(server):
    client = server.client()
    with pytest.raises(openai.APIStatusError) as refused:
        client.skills.create(files=("big.zip", b"PK" + os.urandom(65 << 20), "application/zip"))
    assert refused.value.status_code == 413


def test_malformed_skill_entries_on_a_container_are_400(server):
    client = server.client()
    cases = [
        ([{"type": "nope"}], "skills[0].type"),
        ([{"type": "skill_reference"}], "skills[0].skill_id"),
        ([{"type": "skill_reference", "skill_id": "skill_doesnotexist"}], "skills[0].skill_id"),
        ([{"type": "inline", "name": "x", "description": "d",
           "source": {"type": "base64", "media_type": "application/zip", "data": "!!!"}}], "skills[0].source.data"),
        ([{"type": "inline", "name": "x", "description": "d",
           "source": {"type": "url", "media_type": "application/zip", "data": "eA=="}}], "skills[0].source"),
        (["just a string"], "skills[0].type"),
    ]
    for skills, param in cases:
        with pytest.raises(openai.BadRequestError) as refused:
            client.containers.create(name="bad-skills", skills=skills)
        assert refused.value.body["param"] == param, (skills, refused.value.body)
    skill = client.skills.create(files=("s.zip", skill_zip(name="versioned"), "application/zip"))
    with pytest.raises(openai.BadRequestError) as refused:
        client.containers.create(name="bad-version", skills=[
            {"type": "skill_reference", "skill_id": skill.id, "version": "7"}])
    assert refused.value.body["param"] == "skills[0].version"
    # Two skills of one name would share a folder.
    with pytest.raises(openai.BadRequestError):
        client.containers.create(name="twice", skills=[
            {"type": "skill_reference", "skill_id": skill.id},
            {"type": "skill_reference", "skill_id": skill.id, "version": "latest"}])
    client.skills.delete(skill.id)


def test_a_container_runs_a_referenced_and_an_inline_skill(server):
    client = server.client()
    referenced = client.skills.create(files=("adder.zip", skill_zip(name="adder"), "application/zip"))
    client.skills.versions.create(referenced.id, files=("adder2.zip", skill_zip(
        name="adder", extra={"adder/VERSION": "two"}), "application/zip"))
    inline = {"type": "inline", "name": "echoer", "description": "Echoes.",
              "source": {"type": "base64", "media_type": "application/zip",
                         "data": base64.b64encode(skill_zip(name="echoer", description="Echoes.")).decode()}}
    container = client.containers.create(name="skilled", skills=[
        {"type": "skill_reference", "skill_id": referenced.id, "version": "latest"}, inline])
    out = exec_commands(client, container.id, [
        "ls /mnt/skills",
        "python3 /mnt/skills/adder/scripts/run.py 2 3",
        "python3 /mnt/skills/echoer/scripts/run.py 40 2",
        "cat /mnt/skills/adder/VERSION",
        "touch /mnt/skills/adder/x 2>&1; echo > /mnt/skills/echoer/SKILL.md 2>&1; echo rc=$?",
        "head -3 /mnt/skills/echoer/SKILL.md",
    ])["output"]
    assert out[0]["stdout"].split() == ["adder", "echoer"]
    assert out[1]["stdout"] == "adder says 5\n"
    assert out[2]["stdout"] == "echoer says 42\n"
    assert out[3]["stdout"] == "two"
    assert "Read-only file system" in out[4]["stdout"] and "rc=1" in out[4]["stdout"]
    assert "name: echoer" in out[5]["stdout"]
    # The container object says which skills it has (our extension).
    listed = client.containers.retrieve(container.id).model_extra.get("skills")
    assert [(s["name"], s["path"]) for s in listed] == [("adder", "/mnt/skills/adder"),
                                                        ("echoer", "/mnt/skills/echoer")]
    assert listed[0]["skill_id"] == referenced.id and listed[0]["version"] == "2"
    # Deleting the skill later does not pull it out of a running container.
    client.skills.delete(referenced.id)
    again = exec_commands(client, container.id, ["python3 /mnt/skills/adder/scripts/run.py 1 1"])["output"]
    assert again[0]["stdout"] == "adder says 2\n"
    client.containers.delete(container.id)
    assert no_skill_mounts(server)


def test_skills_stay_across_suspension_and_wake(fresh_server):
    server = fresh_server(idle_suspend_after_secs=1, sweep_interval_secs=1)
    client = server.client()
    skill = client.skills.create(files=("s.zip", skill_zip(name="sleeper"), "application/zip"))
    container = client.containers.create(name="sleepy", skills=[{"type": "skill_reference", "skill_id": skill.id}])
    assert exec_commands(client, container.id, ["python3 /mnt/skills/sleeper/scripts/run.py 1"])["output"][0][
        "stdout"] == "sleeper says 1\n"
    assert wait_until(lambda: client.containers.retrieve(container.id).status == "suspended", 30), "never suspended"
    out = exec_commands(client, container.id, ["python3 /mnt/skills/sleeper/scripts/run.py 2 2"])["output"]
    assert out[0]["stdout"] == "sleeper says 4\n"
    # And across a server restart (an upgrade): the container keeps them.
    server.stop()
    server.start()
    client = server.client()
    out = exec_commands(client, container.id, ["cat /mnt/skills/sleeper/SKILL.md | head -2"])["output"]
    assert out[0]["stdout"] == "---\nname: sleeper\n"


def shell_description(upstream, marker: str) -> str:
    """The shell tool's description the upstream model was sent, for the
    request whose input held `marker`."""
    for body in reversed(upstream.requests):
        if marker in json.dumps(body.get("messages", [])):
            return next(t["function"]["description"] for t in body["tools"] if t["function"]["name"] == "shell")
    raise AssertionError("the upstream never saw the request")


def test_responses_container_auto_mounts_skills_and_tells_the_model(server, upstream):
    client = server.client()
    skill = client.skills.create(files=("s.zip", skill_zip(name="tally", description="Adds numbers up."),
                                        "application/zip"))
    inline = {"type": "inline", "name": "greeter", "description": "Greets.",
              "source": {"type": "base64", "media_type": "application/zip",
                         "data": base64.b64encode(skill_zip(name="greeter", description="Greets.")).decode()}}
    response = client.responses.create(
        model="scripted",
        tools=[{"type": "shell", "environment": {
            "type": "container_auto",
            "skills": [{"type": "skill_reference", "skill_id": skill.id}, inline]}}],
        input="Execute: python3 /mnt/skills/tally/scripts/run.py 20 22 && python3 /mnt/skills/greeter/scripts/run.py 1",
    )
    assert response.status == "completed", response
    output = response.output[1].output[0]
    assert output.stdout == "tally says 42\ngreeter says 1\n", output
    description = shell_description(upstream, "/mnt/skills/tally/scripts/run.py 20 22")
    assert "- tally (/mnt/skills/tally/SKILL.md): Adds numbers up." in description, description
    assert "- greeter (/mnt/skills/greeter/SKILL.md): Greets." in description, description
    # A later turn on the same container (container_reference) still lists them.
    container_id = response.output[0].environment.container_id
    again = client.responses.create(
        model="scripted",
        tools=[{"type": "shell", "environment": {"type": "container_reference", "container_id": container_id}}],
        input="Execute: ls /mnt/skills # second turn",
    )
    assert again.output[1].output[0].stdout == "greeter\ntally\n"
    assert "- tally (/mnt/skills/tally/SKILL.md)" in shell_description(upstream, "ls /mnt/skills # second turn")
    # A malformed entry fails the request before anything runs.
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(
            model="scripted",
            tools=[{"type": "shell", "environment": {"type": "container_auto", "skills": [{"type": "nope"}]}}],
            input="Execute: echo never",
        )
    assert refused.value.body["param"] == "tools.environment.skills[0].type"
