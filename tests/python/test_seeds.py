"""The examples of OpenAI's shell-tool guide (the seeds: its Spanish and
Japanese editions, whose code is the same), run verbatim against a real
`shellgate serve` in the `debian-12` image: the Python ones as programs of
their own, the curl ones through bash (the Node ones are
tests/node/seeds.test.mjs). Only what points them at shellgate differs: the
SDK reads `OPENAI_BASE_URL` and `OPENAI_API_KEY`, curl's URL names this
server; and the follow-up example's placeholder ids become the real ones of
the first turn (or, for `container_auto`, its environment does).

The scripted upstream (scripted_upstream.py) makes the model call the shell
as each example expects: "Execute: CMD" runs CMD, "Read /mnt/data/FILE ..."
runs `cat` on it, and the model then answers "Done: " and the output."""

import json
import os
import subprocess
import sys

import pytest

from conftest import KEY_A, KEY_B, debian_server


# seeds/000 (and 001): "container_auto", Python.
FIRST_PYTHON = '''from openai import OpenAI
client = OpenAI()
response = client.responses.create(
model="gpt-6-astra",
tools=[{"type": "shell", "environment": {"type": "container_auto"}}],
input=[
{
"type": "message",
"role": "user",
"content": [
{
"type": "input_text",
"text": "Execute: ls -lah /mnt/data && python --version && node --version",
}
],
}
],
tool_choice="auto",
)
print(response.output_text)
'''

# seeds/000 (and 001): "container_auto", curl.
FIRST_CURL = '''curl -L 'https://api.openai.com/v1/responses' \\
-H "Content-Type: application/json" \\
-H "Authorization: Bearer $OPENAI_API_KEY " \\
-d '{
"model": "gpt-6-astra",
"tools": [
{ "type": "shell", "environment": { "type": "container_auto" } }
],
"input": [
{
"type": "message",
"role": "user",
"content": [
{ "type": "input_text", "text": "Execute: ls -lah /mnt/data && python --version && node --version" }
]
}
],
"tool_choice": "auto"
}'
'''

# seeds/000 (and 001): continuing the work with previous_response_id, Python.
FOLLOW_UP_PYTHON = '''from openai import OpenAI
client = OpenAI()
response = client.responses.create(
model="gpt-6-astra",
previous_response_id="resp_2a8e5c9174d63b0f18a4c572de9f64a1b3c76d508e12f9ab47",
tools=[
{
"type": "shell",
"environment": {
"type": "container_reference",
"container_id": "cntr_f19c2b51e4a06793d82d54a7be0fc9154d3361ab28ce7f6041",
},
}
],
input="Read /mnt/data/top5.csv and report the top candidate.",
)
print(response.output_text)
'''

# seeds/000 (and 001): the same, curl.
FOLLOW_UP_CURL = '''curl -L 'https://api.openai.com/v1/responses' \\
-H "Content-Type: application/json" \\
-H "Authorization: Bearer $OPENAI_API_KEY " \\
-d '{
"model": "gpt-6-astra",
"previous_response_id": "resp_2a8e5c9174d63b0f18a4c572de9f64a1b3c76d508e12f9ab47",
"tools": [
{
"type": "shell",
"environment": {
"type": "container_reference",
"container_id": "cntr_f19c2b51e4a06793d82d54a7be0fc9154d3361ab28ce7f6041"
}
}
],
"input": "Read /mnt/data/top5.csv and report the top candidate."
}'
'''

PLACEHOLDER_RESPONSE = "resp_2a8e5c9174d63b0f18a4c572de9f64a1b3c76d508e12f9ab47"
PLACEHOLDER_CONTAINER = "cntr_f19c2b51e4a06793d82d54a7be0fc9154d3361ab28ce7f6041"
TOP5 = "candidate,score\nada,97\nbob,91\ncy,88\n"


def continuing(example: str, response_id: str, container_id: str = None) -> str:
    """The follow-up example with the first turn's ids; without a container
    id, with `container_auto` in place of its `container_reference` (the
    server then continues the conversation's container)."""
    text = example.replace(PLACEHOLDER_RESPONSE, response_id)
    if container_id:
        return text.replace(PLACEHOLDER_CONTAINER, container_id)
    for reference in ['"container_id": "%s",\n' % PLACEHOLDER_CONTAINER, '"container_id": "%s"\n' % PLACEHOLDER_CONTAINER]:
        text = text.replace(reference, "")
    text = text.replace('"type": "container_reference",\n', '"type": "container_auto"\n')
    assert "container_reference" not in text and "container_auto" in text, text
    return text


# The module's server is its own (a cluster of its own in cluster mode, run
# apart from the session's: one cluster at a time).
pytestmark = pytest.mark.fresh_server


@pytest.fixture(scope="module")
def debian(upstream):
    with debian_server(upstream) as server:
        yield server


def environment(server, key=KEY_A):
    """What an SDK or curl user sets to talk to shellgate instead of OpenAI."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": key}


def run_python(server, code: str) -> str:
    ran = subprocess.run([sys.executable, "-c", code], env=environment(server),
                         capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return ran.stdout


def run_curl(server, command: str) -> dict:
    command = command.replace("https://api.openai.com/v1", server.base_url)
    ran = subprocess.run(["bash", "-c", command], env=environment(server),
                         capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return json.loads(ran.stdout)


def assert_versions(text: str):
    """The first example's output: the listing, then Python's and Node's
    versions (the image's 3.11 and 22)."""
    assert "total" in text, text
    assert "Python 3.11." in text, text
    assert "\nv22." in text, text


def model_saw(printed: str) -> dict:
    """The command's result as the scripted model quoted it in its answer
    ("Done: " and the `shell_call_output`'s output, as the model got it)."""
    assert printed.startswith("Done: "), printed
    (entry,) = json.loads(printed[len("Done: "):])
    return entry


def test_the_first_example_in_python_prints_the_versions(debian):
    printed = run_python(debian, FIRST_PYTHON)
    entry = model_saw(printed)
    assert entry["outcome"] == {"type": "exit", "exit_code": 0}, entry
    assert_versions(entry["stdout"])


def test_the_first_example_in_curl_exits_0(debian):
    response = run_curl(debian, FIRST_CURL)
    assert response["status"] == "completed", response
    call, result, message = response["output"]
    assert call["type"] == "shell_call" and call["environment"]["type"] == "container_reference"
    assert call["action"]["commands"] == ["ls -lah /mnt/data && python --version && node --version"]
    entry = result["output"][0]
    assert entry["outcome"] == {"type": "exit", "exit_code": 0}, entry
    assert_versions(entry["stdout"])
    assert message["content"][0]["text"].startswith("Done: ")
    # It ran in the debian-12 image.
    container = debian.client().containers.retrieve(call["environment"]["container_id"])
    assert container.model_extra["image"] == "debian-12"


def first_turn_writes_top5(server, key=KEY_A):
    """A container_auto turn that writes /mnt/data/top5.csv; its response."""
    client = server.client(key)
    first = client.responses.create(
        model="gpt-6-astra",
        tools=[{"type": "shell", "environment": {"type": "container_auto"}}],
        input=r"Execute: printf 'candidate,score\nada,97\nbob,91\ncy,88\n' > /mnt/data/top5.csv && echo written",
    )
    result = next(i for i in first.output if i.type == "shell_call_output")
    assert result.output[0].stdout == "written\n", result
    return first


def container_of(response) -> str:
    return next(i for i in response.output if i.type == "shell_call").environment.container_id


@pytest.mark.parametrize("environment_kind", ["container_reference", "container_auto"])
def test_the_follow_up_example_in_python_reads_the_first_turns_file(debian, environment_kind):
    first = first_turn_writes_top5(debian)
    container = container_of(first) if environment_kind == "container_reference" else None
    printed = run_python(debian, continuing(FOLLOW_UP_PYTHON, first.id, container))
    assert model_saw(printed) == {"outcome": {"type": "exit", "exit_code": 0}, "stderr": "", "stdout": TOP5}


@pytest.mark.parametrize("environment_kind", ["container_reference", "container_auto"])
def test_the_follow_up_example_in_curl_continues_the_container(debian, environment_kind):
    first = first_turn_writes_top5(debian)
    container = container_of(first) if environment_kind == "container_reference" else None
    response = run_curl(debian, continuing(FOLLOW_UP_CURL, first.id, container))
    assert response["status"] == "completed", response
    assert response["previous_response_id"] == first.id
    call, result, message = response["output"]
    assert call["action"]["commands"] == ["cat /mnt/data/top5.csv"]
    # The same container as the first turn's: its file is there.
    assert call["environment"]["container_id"] == container_of(first)
    assert result["output"][0]["stdout"] == TOP5, result
    assert result["output"][0]["outcome"] == {"type": "exit", "exit_code": 0}


def test_a_container_auto_follow_up_with_other_parameters_gets_a_new_container(debian):
    first = first_turn_writes_top5(debian)
    client = debian.client()
    # More memory than the container has, or another image: a new container
    # with them, without the file.
    for environment in [{"type": "container_auto", "memory_limit": "4g"},
                        {"type": "container_auto", "image": "host"}]:
        follow = client.responses.create(
            model="gpt-6-astra", previous_response_id=first.id,
            tools=[{"type": "shell", "environment": environment}],
            input="Read /mnt/data/top5.csv and report the top candidate.")
        call, result = follow.output[0], follow.output[1]
        assert call.environment.container_id != container_of(first), environment
        assert result.output[0].outcome.exit_code == 1, result
        assert "No such file" in result.output[0].stderr, result


def test_another_projects_container_in_replayed_items_is_not_continued(debian):
    """Project B replays a conversation whose shell call names project A's
    container: B's container_auto gets a container of its own (no error),
    and A's file stays out of its reach."""
    first = first_turn_writes_top5(debian)
    theirs = container_of(first)
    replayed = [item.model_dump(exclude_none=True) for item in first.output]
    other = debian.client(KEY_B)
    follow = other.responses.create(
        model="gpt-6-astra",
        tools=[{"type": "shell", "environment": {"type": "container_auto"}}],
        input=replayed + [{"role": "user", "content": "Read /mnt/data/top5.csv and report the top candidate."}],
    )
    assert follow.status == "completed", follow
    call = next(i for i in follow.output if i.type == "shell_call")
    result = next(i for i in follow.output if i.type == "shell_call_output")
    assert call.environment.container_id != theirs
    assert result.output[0].outcome.exit_code == 1 and "No such file" in result.output[0].stderr, result
    # B's container is B's; A's is still A's only.
    assert other.containers.retrieve(call.environment.container_id).id == call.environment.container_id
    with pytest.raises(Exception):
        other.containers.retrieve(theirs)
    # The same replay by A itself continues A's container.
    mine = debian.client().responses.create(
        model="gpt-6-astra",
        tools=[{"type": "shell", "environment": {"type": "container_auto"}}],
        input=replayed + [{"role": "user", "content": "Read /mnt/data/top5.csv and report the top candidate."}],
    )
    result = next(i for i in mine.output if i.type == "shell_call_output")
    assert result.output[0].stdout == TOP5, result
