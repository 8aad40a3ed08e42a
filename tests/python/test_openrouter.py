"""OpenRouter's server tools and Anthropic's Messages API:
`openrouter:shell` on the Responses and Messages APIs, `openrouter:bash` on
the Messages API (run in the sandbox, or handed to the client), stable
session ids, promote, sleep after `sleep_after_seconds`, billing. Clients:
seeds/004's `requests` example as written, and the official `anthropic`
SDK; the model is the scripted upstream (a fixture), once per protocol.
"""

import re
import subprocess
import sys
import uuid
from pathlib import Path

import anthropic
import pytest
import requests

from conftest import KEY_A, KEY_B, exec_commands, wait_until

SEED = Path(__file__).resolve().parents[2].parent / "shared" / "seeds" / "004_4e69f0a62ed95b50.txt"

# seeds/004's example, as the article prints it (only the base URL is
# ours, as the acceptance says).
SEED_EXAMPLE = '''
import os
import requests

response = requests.post(
    "https://openrouter.ai/api/v1/responses",
    headers={"Authorization": f"Bearer {os.environ['OPENROUTER_API_KEY']}"},
    json={
        "model": "anthropic/claude-sonnet-4.5",
        "input": "Run `cat /etc/os-release` and `python3 --version`, then tell me the OS and Python version in one sentence.",
        "tools": [
            {"type": "openrouter:shell", "parameters": {"engine": "openrouter"}}
        ],
    },
)

for item in response.json()["output"]:
    if item["type"] == "openrouter:shell":
        print(item["container_id"], item["action"]["commands"])
        for result in item["output"]:
            print(result["stdout"], result["outcome"])
'''


def seed_example():
    """The example from the seed itself when it is at hand (it is in the
    workplace), else the copy above."""
    if SEED.exists():
        text = SEED.read_text()
        start = text.index("import os\nimport requests")
        end = text.index('print(result["stdout"], result["outcome"])') + len('print(result["stdout"], result["outcome"])')
        return text[start:end] + "\n"
    return SEED_EXAMPLE


@pytest.mark.parametrize("protocol", ["chat", "responses", "anthropic"])
def test_the_seed_example_runs_unchanged_against_every_upstream_protocol(fresh_server, protocol, tmp_path):
    server = fresh_server(upstream_protocol=protocol)
    script = tmp_path / "example.py"
    script.write_text(seed_example().replace("https://openrouter.ai/api/v1", server.base_url))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          env={"OPENROUTER_API_KEY": KEY_A, "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    container, commands = lines[0].split(" ", 1)
    assert container.startswith("cntr_")
    assert commands == "['cat /etc/os-release', 'python3 --version']"
    assert "PRETTY_NAME=" in done.stdout
    assert re.search(r"Python 3\.\d+", done.stdout)
    assert len(re.findall(r"\{'exit_code': 0, 'type': 'exit'\}|\{'type': 'exit', 'exit_code': 0\}", done.stdout)) == 2


def responses(server, body, key=KEY_A):
    reply = requests.post(f"{server.base_url}/responses", json=body, timeout=120,
                          headers={"Authorization": f"Bearer {key}"})
    return reply


def shell_items(reply):
    return [item for item in reply.json()["output"] if item["type"] == "openrouter:shell"]


def test_openrouter_shell_on_responses_has_its_shape_and_bills_the_minimum(server):
    reply = responses(server, {
        "model": "scripted", "input": "Execute: echo hello",
        "tools": [{"type": "openrouter:shell", "parameters": {"engine": "auto"}}],
    })
    assert reply.status_code == 200, reply.text
    body = reply.json()
    [item] = shell_items(reply)
    assert item["action"] == {"commands": ["echo hello"]}
    assert item["output"] == [{"stdout": "hello\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]
    assert item["status"] == "completed"
    assert body["output"][-1]["type"] == "message"
    # A new container: the 30-second minimum at $0.0001 a second.
    assert body["usage"]["server_tool_cost"] == pytest.approx(0.003)
    # OpenAI's native shell shape is accepted as shorthand and keeps its items.
    native = responses(server, {"model": "scripted", "input": "Execute: echo native",
                                "tools": [{"type": "shell", "environment": {"type": "container_auto"}}]})
    assert [i["type"] for i in native.json()["output"]][:2] == ["shell_call", "shell_call_output"]


def test_bad_openrouter_tools_are_clear_400s(server):
    for tool, param in [
        ({"type": "openrouter:shell", "parameters": {"engine": "native"}}, "tools[0].parameters.engine"),
        ({"type": "openrouter:shell", "parameters": {"sleep_after_seconds": 2_592_001}},
         "tools[0].parameters.sleep_after_seconds"),
        ({"type": "openrouter:shell", "parameters": {"environment": {"type": "container_reference",
                                                                      "container_id": "x" * 41}}},
         "tools[0].parameters.environment.container_id"),
        ({"type": "openrouter:shell", "parameters": {"environment": {"type": "local"}}},
         "tools[0].parameters.environment.type"),
        ({"type": "openrouter:bash", "parameters": {"engine": "openrouter"}}, "tools[0].type"),
    ]:
        reply = responses(server, {"model": "scripted", "input": "hi", "tools": [tool]})
        assert reply.status_code == 400, (tool, reply.text)
        error = reply.json()["error"]
        assert error["param"] == param, error
        assert error["type"] == "invalid_request_error"
    reply = responses(server, {"model": "scripted", "input": "hi", "tools": [
        {"type": "openrouter:bash", "parameters": {"engine": "openrouter"}}]})
    assert "Messages API" in reply.json()["error"]["message"]


def run_in_session(server, session_id, command, key=KEY_A):
    body = {"model": "scripted", "input": f"Execute: {command}",
            "tools": [{"type": "openrouter:shell", "parameters": {"engine": "openrouter"}}]}
    if session_id is not None:
        body["session_id"] = session_id
    reply = responses(server, body, key=key)
    assert reply.status_code == 200, reply.text
    [item] = shell_items(reply)
    return item["container_id"], item["output"][0]["stdout"]


def test_a_session_id_names_the_same_container_and_files_every_time(server):
    session = f"art10-{uuid.uuid4().hex[:12]}"
    first, _ = run_in_session(server, session, "echo kept > note.txt")
    second, stdout = run_in_session(server, session, "cat note.txt")
    assert first == second
    assert stdout == "kept\n"
    # The same session id in another project is another session.
    other, stdout = run_in_session(server, session, "cat note.txt 2>&1 || true", key=KEY_B)
    assert other != first and "No such file" in stdout


def test_long_session_ids_use_their_last_20_characters(server):
    tail = uuid.uuid4().hex[:20]
    first, _ = run_in_session(server, "a" * 30 + tail, "echo shared > tail.txt")
    second, stdout = run_in_session(server, "b" * 10 + tail, "cat tail.txt")
    assert first == second and stdout == "shared\n"
    third, _ = run_in_session(server, tail[1:], "true")
    assert third != first


def test_a_session_id_with_other_characters_is_ignored(server):
    first, _ = run_in_session(server, "bad id!", "echo x > bad.txt")
    second, stdout = run_in_session(server, "bad id!", "cat bad.txt 2>&1 || true")
    assert first != second and "No such file" in stdout


def test_without_a_session_the_replayed_conversations_container_is_used(server):
    tools = [{"type": "openrouter:shell", "parameters": {"engine": "openrouter"}}]
    first = responses(server, {"model": "scripted", "input": "Execute: echo one > one.txt", "tools": tools})
    [item] = shell_items(first)
    # The conversation replayed by hand: the earlier items, then a new turn.
    replayed = [i for i in first.json()["output"]] + [
        {"type": "message", "role": "user", "content": "Execute: cat one.txt"}]
    second = responses(server, {"model": "scripted", "input": replayed, "tools": tools})
    assert second.status_code == 200, second.text
    [again] = shell_items(second)
    assert again["container_id"] == item["container_id"]
    assert again["output"][0]["stdout"] == "one\n"
    # And through previous_response_id.
    third = responses(server, {"model": "scripted", "input": "Execute: cat one.txt", "tools": tools,
                               "previous_response_id": first.json()["id"]})
    assert shell_items(third)[0]["container_id"] == item["container_id"]
    # A container_reference keeps its id whole and must exist.
    reference = {"type": "openrouter:shell", "parameters": {"engine": "openrouter", "environment": {
        "type": "container_reference", "container_id": item["container_id"]}}}
    fourth = responses(server, {"model": "scripted", "input": "Execute: cat one.txt", "tools": [reference]})
    assert shell_items(fourth)[0]["output"][0]["stdout"] == "one\n"
    reference["parameters"]["environment"]["container_id"] = "cntr_missing"
    assert responses(server, {"model": "scripted", "input": "hi", "tools": [reference]}).status_code == 404


def test_a_container_file_is_promoted_into_the_files_api(server, client):
    container = client.containers.create(name="promote")
    exec_commands(client, container.id, ["printf 'quarterly\\n' > /mnt/data/report.txt"])
    files = client.containers.files.list(container.id)
    [report] = [f for f in files.data if f.path == "/mnt/data/report.txt"]
    promoted = requests.post(f"{server.base_url}/containers/{container.id}/files/{report.id}/promote",
                             headers={"Authorization": f"Bearer {KEY_A}"}, timeout=30)
    assert promoted.status_code == 200, promoted.text
    file = promoted.json()
    assert (file["object"], file["purpose"], file["filename"], file["bytes"]) == \
        ("file", "user_data", "report.txt", len("quarterly\n"))
    client.containers.delete(container.id)
    # It outlives the container.
    assert client.files.content(file["id"]).read() == b"quarterly\n"
    assert client.files.retrieve(file["id"]).purpose == "user_data"
    missing = requests.post(f"{server.base_url}/containers/{container.id}/files/{report.id}/promote",
                            headers={"Authorization": f"Bearer {KEY_A}"}, timeout=30)
    assert missing.status_code == 404


def test_a_container_sleeps_after_its_sleep_after_seconds(fresh_server):
    server = fresh_server(sweep_interval_secs=1)
    tools = [{"type": "openrouter:shell", "parameters": {"engine": "openrouter", "sleep_after_seconds": 2}}]
    session = f"sleepy-{uuid.uuid4().hex[:8]}"
    reply = responses(server, {"model": "scripted", "input": "Execute: echo awake > a.txt", "tools": tools,
                               "session_id": session})
    [item] = shell_items(reply)
    client = server.client()
    assert client.containers.retrieve(item["container_id"]).status == "running"
    assert wait_until(lambda: client.containers.retrieve(item["container_id"]).status == "suspended", 15), \
        "the container did not sleep"
    # The next request of the session wakes it, with its files, and pays
    # the minimum again.
    again = responses(server, {"model": "scripted", "input": "Execute: cat a.txt", "tools": tools,
                               "session_id": session})
    [woken] = shell_items(again)
    assert woken["container_id"] == item["container_id"]
    assert woken["output"][0]["stdout"] == "awake\n"
    assert again.json()["usage"]["server_tool_cost"] == pytest.approx(0.003)


# --- the Messages API, with the official anthropic SDK -------------------


def anthropic_client(server):
    # Anthropic's SDK adds /v1 itself: its base URL is the server's root.
    return anthropic.Anthropic(base_url=server.base_url.removesuffix("/v1"), api_key=KEY_A, max_retries=0)


SHELL_TOOL = {"type": "openrouter:shell", "parameters": {"engine": "openrouter"}}


def blocks_of(message):
    return [block.model_dump(exclude_unset=True) for block in message.content]


@pytest.mark.parametrize("streaming", [False, True])
def test_messages_with_openrouter_shell_run_in_the_sandbox(server, streaming):
    client = anthropic_client(server)
    request = dict(model="scripted", max_tokens=256, tools=[SHELL_TOOL],
                   messages=[{"role": "user", "content": "Execute: echo from-messages"}])
    if streaming:
        with client.messages.stream(**request) as stream:
            message = stream.get_final_message()
    else:
        message = client.messages.create(**request)
    blocks = blocks_of(message)
    assert [b["type"] for b in blocks] == ["server_tool_use", "openrouter_shell_tool_result", "text"]
    assert blocks[0]["name"] == "shell" and blocks[0]["input"] == {"commands": ["echo from-messages"]}
    result = blocks[1]
    assert result["tool_use_id"] == blocks[0]["id"]
    assert result["container_id"].startswith("cntr_")
    assert result["content"] == [{"stdout": "from-messages\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]
    assert "from-messages" in blocks[2]["text"]
    assert message.stop_reason == "end_turn"
    assert message.container.id == result["container_id"]
    if not streaming:
        # The Messages API's usage carries the sandbox's cost too (the SDK
        # keeps extra fields of the final message).
        assert message.usage.server_tool_cost == pytest.approx(0.003)
        assert message.usage.input_tokens > 0


@pytest.mark.parametrize("streaming", [False, True])
def test_messages_with_openrouter_bash_in_the_sandbox(server, streaming):
    client = anthropic_client(server)
    request = dict(model="scripted", max_tokens=256,
                   tools=[{"type": "openrouter:bash", "parameters": {"engine": "openrouter"}}],
                   messages=[{"role": "user", "content": "Execute: id -un; exit 3"}])
    if streaming:
        with client.messages.stream(**request) as stream:
            message = stream.get_final_message()
    else:
        message = client.messages.create(**request)
    call, result, text = message.content
    assert call.type == "server_tool_use" and call.name == "bash_code_execution"
    assert call.input == {"command": "id -un; exit 3"}
    assert result.type == "bash_code_execution_tool_result"
    assert result.content.type == "bash_code_execution_result"
    assert result.content.stdout.strip() in ("user", "root", "nobody") or result.content.stdout
    assert result.content.return_code == 3
    assert text.type == "text"


@pytest.mark.parametrize("engine,streaming", [("auto", False), ("native", False), ("auto", True)])
def test_a_client_side_bash_loop_completes_through_tool_results(server, engine, streaming):
    client = anthropic_client(server)
    tools = [{"type": "openrouter:bash", "parameters": {"engine": engine}}]
    messages = [{"role": "user", "content": "Execute in turns: echo first ||| echo second"}]
    ran = []
    for _ in range(5):
        request = dict(model="scripted", max_tokens=256, tools=tools, messages=messages)
        if streaming:
            with client.messages.stream(**request) as stream:
                message = stream.get_final_message()
        else:
            message = client.messages.create(**request)
        if message.stop_reason != "tool_use":
            break
        [call] = [b for b in message.content if b.type == "tool_use"]
        assert call.name == "bash"
        # The client runs it, here, and answers with a tool_result.
        done = subprocess.run(["bash", "-c", call.input["command"]], capture_output=True, text=True)
        ran.append(call.input["command"])
        messages += [{"role": "assistant", "content": message.content},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                   "content": done.stdout}]}]
    assert ran == ["echo first", "echo second"]
    assert message.stop_reason == "end_turn"
    assert message.content[-1].text.startswith("Done: ")
    # Nothing ran in a sandbox.
    assert message.container is None


def test_anthropic_bash_tool_and_user_tools_pass_through_streaming(server):
    client = anthropic_client(server)
    tools = [{"type": "bash_20250124", "name": "bash"},
             {"name": "lookup", "description": "Looks a word up.",
              "input_schema": {"type": "object", "properties": {"word": {"type": "string"}}}}]
    with client.messages.stream(model="scripted", max_tokens=64, tools=tools,
                                messages=[{"role": "user", "content": 'Call lookup: {"word": "shell"}'}]) as stream:
        message = stream.get_final_message()
    [call] = message.content
    assert (call.type, call.name, call.input) == ("tool_use", "lookup", {"word": "shell"})
    assert message.stop_reason == "tool_use"


def test_messages_sessions_and_replayed_blocks_reuse_the_container(server):
    client = anthropic_client(server)
    session = f"msg-{uuid.uuid4().hex[:10]}"
    first = client.messages.create(model="scripted", max_tokens=64, tools=[SHELL_TOOL],
                                   messages=[{"role": "user", "content": "Execute: echo m > m.txt"}],
                                   extra_body={"session_id": session})
    second = client.messages.create(model="scripted", max_tokens=64, tools=[SHELL_TOOL],
                                    messages=[{"role": "user", "content": "Execute: cat m.txt"}],
                                    extra_body={"session_id": session})
    assert first.container.id == second.container.id
    assert blocks_of(second)[1]["content"][0]["stdout"] == "m\n"
    # The SDK's own blocks replayed (to_param), with no session id: the
    # conversation's container.
    third = client.messages.create(model="scripted", max_tokens=64, tools=[SHELL_TOOL], messages=[
        {"role": "user", "content": "Execute: echo m > m.txt"},
        {"role": "assistant", "content": first.to_param()["content"]},
        {"role": "user", "content": "Execute: cat m.txt"}])
    assert third.container.id == first.container.id


def test_messages_errors_use_anthropics_envelope_and_exceptions(server):
    client = anthropic_client(server)
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.create(model="scripted", max_tokens=0, messages=[{"role": "user", "content": "hi"}])
    assert bad.value.body["type"] == "error"
    assert bad.value.body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in bad.value.body["error"]["message"]
    # Anthropic's server tools are the upstream's to run: this
    # Chat upstream cannot, so the tool is left out and named, not refused.
    raw = client.messages.with_raw_response.create(
        model="scripted", max_tokens=10, messages=[{"role": "user", "content": "hi"}],
        tools=[{"type": "web_search_20250305", "name": "web_search"}])
    assert raw.headers["x-shellgate-uncarried"] == "tools[0] (web_search_20250305)"
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=client.base_url, api_key="sk-wrong", max_retries=0).messages.create(
            model="scripted", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    # x-api-key, as curl and older SDKs send it.
    reply = requests.post(f"{server.base_url}/messages", timeout=30,
                          headers={"x-api-key": KEY_A, "anthropic-version": "2023-06-01"},
                          json={"model": "scripted", "max_tokens": 10,
                                "messages": [{"role": "user", "content": "hi"}]})
    assert reply.status_code == 200 and reply.json()["content"][0]["text"] == "Hello from the scripted model."
    # An upstream failure is an api_error, not a hang or a 200.
    with pytest.raises(anthropic.InternalServerError):
        client.messages.create(model="scripted-500", max_tokens=10, messages=[{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("stream", [True, False])
def test_a_client_that_hangs_up_ends_its_messages_commands(server, stream):
    import json
    import socket
    marker = f"sleep 3{7 if stream else 8}.{uuid.uuid4().int % 1000:03d}"
    body = json.dumps({"model": "scripted", "max_tokens": 100, "stream": stream, "tools": [SHELL_TOOL],
                       "messages": [{"role": "user", "content": f"Execute: {marker}"}]}).encode()
    host, port = server.base_url.split("//")[1].split("/")[0].split(":")
    client = socket.create_connection((host, int(port)))
    client.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: " + KEY_A.encode()
                   + b"\r\nContent-Type: application/json\r\nContent-Length: "
                   + str(len(body)).encode() + b"\r\n\r\n" + body)

    def running():
        return subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()

    assert wait_until(running, 20), "the command never started"
    client.close()
    assert wait_until(lambda: not running(), 10), "the command outlived its client"


def test_a_session_reused_with_other_skills_runs_where_the_model_is_told(server):
    """Adversarial: a session whose next request asks
    for other skills gets a container holding those skills (the tool
    description lists the request's), not the first one's."""
    import base64

    from test_skills import skill_zip

    session = f"skills-{uuid.uuid4().hex[:12]}"

    def turn(name):
        inline = {"type": "inline", "name": name, "description": "d",
                  "source": {"type": "base64", "media_type": "application/zip",
                             "data": base64.b64encode(skill_zip(name=name)).decode()}}
        reply = responses(server, {
            "model": "scripted", "session_id": session, "input": "Execute: ls /mnt/skills",
            "tools": [{"type": "openrouter:shell", "parameters": {
                "engine": "openrouter", "environment": {"type": "container_auto", "skills": [inline]}}}]})
        assert reply.status_code == 200, reply.text
        [item] = shell_items(reply)
        return item["container_id"], item["output"][0]["stdout"].split()

    first, listed = turn("alpha")
    assert listed == ["alpha"]
    second, listed = turn("beta")
    assert listed == ["beta"] and second != first
    third, listed = turn("beta")
    assert third == second and listed == ["beta"]
