"""Anthropic's code execution's Python cells on servers of their own
settings: `code_execution_20260521`'s per-cell limit
(`code_execution_cell_timeout_secs`, a second here) and a container
suspended while idle (its kernel ends with its processes: the next cell is
told its variables are gone), and a written file larger than the Files
API takes (`max_upload_bytes`: `output_file_too_large` for a command, left
out of a cell's files), and a paused cell a restart ended (`unavailable`).
Apart from test_anthropic_code_execution.py,
whose servers (a cluster each in cluster mode) are up for its whole module
and a process runs one cluster at a time. Client: the official `anthropic` SDK; the
model is the scripted upstream.
"""

import json

import anthropic
import pytest

from conftest import KEY_A, wait_until

pytestmark = pytest.mark.fresh_server


def anthropic_client(server):
    # Anthropic's SDK adds /v1 itself: its base URL is the server's root.
    # Strict: each answer must validate against the SDK's own types.
    return anthropic.Anthropic(base_url=server.base_url.removesuffix("/v1"), api_key=KEY_A, max_retries=0,
                               _strict_response_validation=True)


def execute(client, arguments, tool, container=None):
    """A message whose model runs one Python cell of `code_execution`."""
    request = dict(model="scripted", max_tokens=256, tools=[tool],
                   messages=[{"role": "user", "content": f"Call code_execution: {json.dumps(arguments)}"}])
    if container is not None:
        request["container"] = container
    return client.messages.create(**request)


def test_a_20260521_cell_past_its_limit_ends_as_a_detection_timeout_result(fresh_server):
    # The limit is a setting (Anthropic's 90 s by default): a second here.
    server = fresh_server(code_execution_cell_timeout_secs=1)
    client = anthropic_client(server)
    limited = {"type": "code_execution_20260521", "name": "code_execution"}
    code = "import time\nstarted = time.time()\nprint('begun', flush=True)\ntime.sleep(120)"
    message = execute(client, {"code": code}, tool=limited)
    content = message.content[1].content
    # A normal result, not an error object: a non-zero return code and the
    # status in stderr.
    assert content.type == "code_execution_result", message.model_dump()
    assert content.return_code == 1, content.model_dump()
    assert content.stderr.startswith("detection_timeout"), content.model_dump()
    assert content.stdout.startswith("begun"), content.model_dump()
    # The kernel kept its state.
    later = execute(client, {"code": "print(started > 0)"}, tool=limited,
                    container=message.container.id)
    assert later.content[1].content.stdout == "True\n", later.model_dump()
    # The other versions have no such limit: a cell longer than it ends.
    unlimited = {"type": "code_execution_20260120", "name": "code_execution"}
    slow = execute(client, {"code": "import time\ntime.sleep(3)\nprint('slept')"},
                   tool=unlimited)
    assert slow.content[1].content.model_dump() == {
        "type": "code_execution_result", "stdout": "slept\n", "stderr": "", "return_code": 0,
        "content": []}, slow.model_dump()


def test_a_cell_after_the_container_slept_says_its_variables_are_gone(fresh_server):
    # Suspension stops the container's processes, its kernel too: the
    # variables cannot outlive it, and the next cell is told so.
    server = fresh_server(idle_suspend_after_secs=1, sweep_interval_secs=1)
    client = anthropic_client(server)
    tool = {"type": "code_execution_20260120", "name": "code_execution"}
    first = execute(client, {"code": "total = 42\nprint(total)"}, tool=tool)
    assert first.content[1].content.stdout == "42\n", first.model_dump()
    container = first.container.id
    containers = server.client()
    assert wait_until(lambda: containers.containers.retrieve(container).status == "suspended", 60), (
        containers.containers.retrieve(container))
    later = execute(client, {"code": "print(total)"}, tool=tool, container=container)
    assert later.container.id == container
    content = later.content[1].content
    assert content.type == "code_execution_result", later.model_dump()
    assert content.return_code == 1 and "NameError" in content.stdout, content.model_dump()
    assert "suspended" in content.stderr and "variables" in content.stderr, content.model_dump()


def test_a_written_file_larger_than_an_upload_is_output_file_too_large(fresh_server):
    # The Files API's largest file (`max_upload_bytes`, 64 KiB here) bounds
    # what a call's written files may be.
    server = fresh_server(max_upload_bytes=64 * 1024)
    client = anthropic_client(server)
    bash = {"type": "code_execution_20250825", "name": "code_execution"}
    message = client.messages.create(
        model="scripted", max_tokens=256, tools=[bash],
        messages=[{"role": "user", "content": 'Call bash_code_execution: '
                   + json.dumps({"command": "head -c 100000 /dev/zero > big.bin; echo small > small.txt"})}])
    error = message.content[1].content
    assert (error.type, error.error_code) == (
        "bash_code_execution_tool_result_error", "output_file_too_large"), message.model_dump()
    # The model reads the error.
    assert message.content[2].text.startswith("Done: Error: output_file_too_large"), message.model_dump()
    # A Python cell's errors have no such code: the file is left out of
    # its result, the smaller one is there.
    python = {"type": "code_execution_20260120", "name": "code_execution"}
    code = "open('big2.bin', 'wb').write(bytes(100000))\nopen('small2.txt', 'w').write('small')"
    cell = execute(client, {"code": code}, tool=python, container=message.container.id)
    result = cell.content[1].content
    assert (result.type, result.return_code) == ("code_execution_result", 0), cell.model_dump()
    [kept] = result.content
    assert client.beta.files.retrieve_metadata(kept.file_id).filename == "small2.txt", cell.model_dump()


@pytest.mark.single_box("restarts its one server (a paused cell lives in the server's memory)")
def test_a_paused_cell_the_server_lost_is_unavailable(fresh_server):
    # A cell paused at a call of the client's tool waits in the server; a
    # restart ends it, and the client's result then finds none: the cell's
    # result is Anthropic's `unavailable` error, the container goes on.
    server = fresh_server()
    client = anthropic_client(server)
    tools = [{"type": "code_execution_20260120", "name": "code_execution"},
             {"name": "get_weather", "description": "The weather in a city.",
              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
              "allowed_callers": ["code_execution_20260120"]}]
    asked = {"role": "user", "content": 'Call code_execution: {"code": "print(get_weather(\'Paris\'))"}'}
    first = client.messages.create(model="scripted", max_tokens=256, tools=tools, messages=[asked])
    [call] = [block for block in first.content if block.type == "tool_use"]
    assert first.stop_reason == "tool_use", first.model_dump()
    server.stop()
    server.start()
    late = client.messages.create(
        model="scripted", max_tokens=256, tools=tools, container=first.container.id,
        messages=[asked, {"role": "assistant", "content": first.content},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                "content": "sunny"}]}])
    result = late.content[0]
    assert result.type == "code_execution_tool_result", late.model_dump()
    assert result.content.model_dump() == {"type": "code_execution_tool_result_error",
                                           "error_code": "unavailable"}, late.model_dump()
    again = execute(client, {"code": "print(6 * 7)"}, tool=tools[0], container=first.container.id)
    assert again.content[1].content.stdout == "42\n", again.model_dump()
