"""Anthropic's tool family on `POST /v1/messages`, for any upstream model:
the client tools (`bash_20250124`, `text_editor_2025*`) offered to the
model and handed back as `tool_use`, as the Anthropic API does; and code
execution (`code_execution_20250522`, `_20250825`, `_20260120`,
`_20260521`), whose sub-tools (`bash_code_execution`,
`text_editor_code_execution`, the Python `code_execution`) shellgate runs in
a container, answering with Anthropic's blocks, streamed as Anthropic
streams them, the request's `container` continuing a container (its Python
variables too). Each case runs with every version that has its sub-tool:
commands and the editor with `_20250825`, `_20260120` and `_20260521`,
Python cells with `_20250522`, `_20260120` and `_20260521` (a cell past
its time is `execution_time_exceeded`, or with `_20260521` past its own
per-cell limit a result with a `detection_timeout` status). Clients: the
official `anthropic` SDK; the model is the scripted upstream (a fixture),
once per upstream protocol (Chat Completions, Responses, Anthropic).
"""

import json

import anthropic
import pytest

from conftest import KEY_A, own_server

PROTOCOLS = ["chat", "responses", "anthropic"]

# Servers of the module's own (one per upstream protocol): in cluster mode,
# clusters of their own, run apart from the session's.
pytestmark = pytest.mark.fresh_server


# How long a command or a Python cell may run: short, so one past it is
# quick to see.
DEADLINE_SECS = 2
# `_20260521`'s per-cell limit (Anthropic's 90 s by default): shorter than
# the deadline, so that a cell reaches it first.
CELL_LIMIT_SECS = 1

# The versions whose model has the commands and the editor, and those
# whose model has Python cells.
BASH_VERSIONS = ["code_execution_20250825", "code_execution_20260120", "code_execution_20260521"]
PYTHON_VERSIONS = ["code_execution_20250522", "code_execution_20260120", "code_execution_20260521"]


@pytest.fixture(scope="module", params=PROTOCOLS)
def served(request, upstream):
    """A server whose upstream speaks `request.param`, and that protocol."""
    with own_server(upstream, upstream_url=upstream.url, upstream_protocol=request.param,
                    upstream_timeout_secs=10, request_deadline_secs=DEADLINE_SECS,
                    code_execution_cell_timeout_secs=CELL_LIMIT_SECS) as server:
        yield server, request.param


def anthropic_client(server):
    # Anthropic's SDK adds /v1 itself: its base URL is the server's root.
    # Strict: each answer must validate against the SDK's own types.
    return anthropic.Anthropic(base_url=server.base_url.removesuffix("/v1"), api_key=KEY_A, max_retries=0,
                               _strict_response_validation=True)


def offered_names(body, protocol):
    """The tool names an upstream request offered the model."""
    if protocol == "chat":
        return [tool["function"]["name"] for tool in body.get("tools", [])]
    return [tool.get("name") for tool in body.get("tools", [])]


EDITORS = [
    ({"type": "text_editor_20250728", "name": "str_replace_based_edit_tool", "max_characters": 10000},
     "str_replace_based_edit_tool"),
    ({"type": "text_editor_20250429", "name": "str_replace_based_edit_tool"}, "str_replace_based_edit_tool"),
    ({"type": "text_editor_20250124", "name": "str_replace_editor"}, "str_replace_editor"),
]


@pytest.mark.parametrize("tool,name", EDITORS)
def test_the_text_editor_is_offered_and_its_calls_handed_back(served, upstream, tool, name):
    server, protocol = served
    client = anthropic_client(server)
    view = {"command": "view", "path": "/etc/hostname"}
    before = len(upstream.requests)
    raw = client.messages.with_raw_response.create(
        model="scripted", max_tokens=256, tools=[tool],
        messages=[{"role": "user", "content": f"Call {name}: {json.dumps(view)}"}])
    assert raw.headers.get("x-shellgate-uncarried") is None
    message = raw.parse()
    [call] = message.content
    assert (call.type, call.name, call.input) == ("tool_use", name, view)
    assert message.stop_reason == "tool_use"
    sent = upstream.requests[before]
    assert offered_names(sent, protocol) == [name]
    if protocol == "anthropic":
        # Anthropic's own declaration, as the client wrote it.
        assert sent["tools"] == [tool]
    else:
        [offered] = sent["tools"]
        schema = offered["function"]["parameters"] if protocol == "chat" else offered["parameters"]
        assert {"command", "path", "old_str", "new_str", "file_text"} <= set(schema["properties"])
    # The client's result goes back to the model.
    answer = client.messages.create(
        model="scripted", max_tokens=256, tools=[tool],
        messages=[{"role": "user", "content": f"Call {name}: {json.dumps(view)}"},
                  {"role": "assistant", "content": message.content},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                "content": "1\tbox"}]}])
    assert answer.content[0].text == "Done: 1\tbox"


def test_the_bash_tool_is_handed_back(served, upstream):
    server, protocol = served
    client = anthropic_client(server)
    raw = client.messages.with_raw_response.create(
        model="scripted", max_tokens=256, tools=[{"type": "bash_20250124", "name": "bash"}],
        messages=[{"role": "user", "content": "Execute: uname -a"}])
    assert raw.headers.get("x-shellgate-uncarried") is None
    message = raw.parse()
    [call] = message.content
    assert (call.type, call.name, call.input) == ("tool_use", "bash", {"command": "uname -a"})
    assert message.stop_reason == "tool_use"


CODE_EXECUTION = {"type": "code_execution_20250825", "name": "code_execution"}


def execute(client, name, arguments, container=None, stream=False, tool=CODE_EXECUTION):
    """A message whose model calls code execution's sub-tool `name` once."""
    request = dict(model="scripted", max_tokens=256, tools=[tool],
                   messages=[{"role": "user", "content": f"Call {name}: {json.dumps(arguments)}"}])
    if container is not None:
        request["container"] = container
    if stream:
        with client.messages.stream(**request) as events:
            kinds = [(event.type, getattr(getattr(event, "content_block", None), "type", None))
                     for event in events]
            return events.get_final_message(), kinds
    return client.messages.create(**request)


def version(kind):
    return {"type": kind, "name": "code_execution"}


@pytest.mark.parametrize("kind", BASH_VERSIONS)
def test_a_bash_command_runs_in_the_container(served, upstream, kind):
    server, protocol = served
    client = anthropic_client(server)
    before = len(upstream.requests)
    message = execute(client, "bash_code_execution", {"command": "echo out; echo err >&2; exit 3"},
                      tool=version(kind))
    assert offered_names(upstream.requests[before], protocol) == dict(VERSIONS)[kind]
    call, result, text = message.content
    assert (call.type, call.name, call.input) == (
        "server_tool_use", "bash_code_execution", {"command": "echo out; echo err >&2; exit 3"})
    assert result.type == "bash_code_execution_tool_result" and result.tool_use_id == call.id
    assert result.content.model_dump() == {"type": "bash_code_execution_result", "stdout": "out\n",
                                           "stderr": "err\n", "return_code": 3, "content": []}
    assert text.text.startswith("Done: out")
    assert message.stop_reason == "end_turn"
    assert message.container.id.startswith("cntr_") and message.container.expires_at is not None


@pytest.mark.parametrize("kind", BASH_VERSIONS)
def test_the_editor_creates_replaces_and_views_in_one_container(served, kind):
    server, _ = served
    client = anthropic_client(server)
    tool = version(kind)
    created = execute(client, "text_editor_code_execution",
                      {"command": "create", "path": "notes.txt", "file_text": "alpha\nbeta\n"}, tool=tool)
    container = created.container.id
    call, result, _ = created.content
    assert (call.type, call.name) == ("server_tool_use", "text_editor_code_execution")
    assert result.type == "text_editor_code_execution_tool_result"
    assert result.content.model_dump() == {"type": "text_editor_code_execution_create_result",
                                           "is_file_update": False}
    replaced = execute(client, "text_editor_code_execution",
                       {"command": "str_replace", "path": "notes.txt", "old_str": "beta", "new_str": "gamma"},
                       container=container, tool=tool)
    assert replaced.container.id == container
    diff = replaced.content[1].content
    assert diff.type == "text_editor_code_execution_str_replace_result"
    assert (diff.old_start, diff.old_lines, diff.new_start, diff.new_lines, diff.lines) == (
        2, 1, 2, 1, ["-beta", "+gamma"])
    # The object form of `container` names it too.
    viewed = execute(client, "text_editor_code_execution", {"command": "view", "path": "notes.txt"},
                     container={"id": container}, tool=tool)
    view = viewed.content[1].content
    assert view.model_dump(exclude_none=True) == {
        "type": "text_editor_code_execution_view_result", "file_type": "text",
        "content": "alpha\ngamma\n", "num_lines": 2, "start_line": 1, "total_lines": 2}
    again = execute(client, "text_editor_code_execution",
                    {"command": "create", "path": "notes.txt", "file_text": "new"}, container=container,
                    tool=tool)
    assert again.content[1].content.is_file_update is True


@pytest.mark.parametrize("kind", BASH_VERSIONS)
def test_editor_errors_are_anthropic_error_objects(served, kind):
    server, _ = served
    client = anthropic_client(server)
    tool = version(kind)
    missing = execute(client, "text_editor_code_execution", {"command": "view", "path": "/no/such/file"},
                      tool=tool)
    error = missing.content[1].content
    assert (error.type, error.error_code) == ("text_editor_code_execution_tool_result_error", "file_not_found")
    assert "/no/such/file" in error.error_message
    # The model reads the error.
    assert missing.content[2].text.startswith("Done: Error: file_not_found")
    twice = execute(client, "text_editor_code_execution",
                    {"command": "create", "path": "twice.txt", "file_text": "a a"}, tool=tool)
    ambiguous = execute(client, "text_editor_code_execution",
                        {"command": "str_replace", "path": "twice.txt", "old_str": "a", "new_str": "b"},
                        container=twice.container.id, tool=tool)
    assert ambiguous.content[1].content.error_code == "invalid_tool_input"


@pytest.mark.parametrize("kind", BASH_VERSIONS)
def test_code_execution_streams_as_anthropic_streams_it(served, kind):
    server, _ = served
    client = anthropic_client(server)
    message, kinds = execute(client, "bash_code_execution", {"command": "echo streamed"}, stream=True,
                             tool=version(kind))
    starts = [block for kind, block in kinds if kind == "content_block_start"]
    assert starts == ["server_tool_use", "bash_code_execution_tool_result", "text"]
    # The call's input comes as a JSON delta (the SDK builds `input` from it).
    assert ("input_json", None) in kinds
    call, result, _ = message.content
    assert call.input == {"command": "echo streamed"}
    assert result.content.stdout == "streamed\n"
    assert message.container.id.startswith("cntr_")


def test_an_unknown_container_is_a_404(served):
    server, _ = served
    with pytest.raises(anthropic.NotFoundError):
        execute(anthropic_client(server), "bash_code_execution", {"command": "true"},
                container="cntr_none")


@pytest.mark.parametrize("kind", BASH_VERSIONS)
def test_a_command_past_its_time_is_execution_time_exceeded(served, kind):
    server, _ = served
    message = execute(anthropic_client(server), "bash_code_execution",
                      {"command": f"sleep {DEADLINE_SECS * 15}"}, tool=version(kind))
    error = message.content[1].content
    assert (error.type, error.error_code) == ("bash_code_execution_tool_result_error", "execution_time_exceeded")
    # The model reads the error.
    assert message.content[2].text.startswith("Done: Error: execution_time_exceeded"), message.model_dump()


@pytest.mark.parametrize("kind", ["code_execution_20250522", "code_execution_20260120"])
def test_a_python_cell_past_its_time_is_execution_time_exceeded(served, kind):
    server, _ = served
    client = anthropic_client(server)
    code = f"import time\nstarted = True\ntime.sleep({DEADLINE_SECS * 15})"
    message = execute(client, "code_execution", {"code": code}, tool=version(kind))
    call, result, text = message.content
    assert result.type == "code_execution_tool_result" and result.tool_use_id == call.id, message.model_dump()
    assert result.content.model_dump() == {"type": "code_execution_tool_result_error",
                                           "error_code": "execution_time_exceeded"}, message.model_dump()
    assert text.text.startswith("Done: Error: execution_time_exceeded"), message.model_dump()
    # The kernel was interrupted, not lost: the next cell on the
    # container runs, and sees what the interrupted one set.
    later = execute(client, "code_execution", {"code": "print(started)"}, tool=version(kind),
                    container=message.container.id)
    assert later.content[1].content.stdout == "True\n", later.model_dump()


def test_a_20260521_cell_past_its_own_limit_is_a_detection_timeout_result(served):
    server, _ = served
    client = anthropic_client(server)
    code = f"import time\nprint('begun', flush=True)\ntime.sleep({DEADLINE_SECS * 15})"
    message = execute(client, "code_execution", {"code": code}, tool=version("code_execution_20260521"))
    content = message.content[1].content
    # A normal result: a non-zero return code and the status in stderr.
    assert (content.type, content.return_code) == ("code_execution_result", 1), message.model_dump()
    assert content.stderr.startswith("detection_timeout"), message.model_dump()
    assert content.stdout.startswith("begun"), message.model_dump()


VERSIONS = [
    ("code_execution_20250522", ["code_execution"]),
    ("code_execution_20250825", ["bash_code_execution", "text_editor_code_execution"]),
    ("code_execution_20260120", ["bash_code_execution", "text_editor_code_execution", "code_execution"]),
    ("code_execution_20260521", ["bash_code_execution", "text_editor_code_execution", "code_execution"]),
]


@pytest.mark.parametrize("kind,names", VERSIONS)
def test_each_version_offers_its_sub_tools(served, upstream, kind, names):
    server, protocol = served
    before = len(upstream.requests)
    raw = anthropic_client(server).messages.with_raw_response.create(
        model="scripted", max_tokens=64, tools=[{"type": kind, "name": "code_execution"}],
        messages=[{"role": "user", "content": "Hello"}])
    assert raw.headers.get("x-shellgate-uncarried") is None
    assert offered_names(upstream.requests[before], protocol) == names


@pytest.mark.parametrize("kind", PYTHON_VERSIONS)
def test_a_python_variable_survives_into_the_next_request_on_the_container(served, kind):
    server, _ = served
    client = anthropic_client(server)
    tool = {"type": kind, "name": "code_execution"}
    code = "total = 6 * 7\nprint(total)"
    first = execute(client, "code_execution", {"code": code}, tool=tool)
    call, result, text = first.content
    assert (call.type, call.name, call.input) == ("server_tool_use", "code_execution", {"code": code})
    assert result.type == "code_execution_tool_result" and result.tool_use_id == call.id
    assert result.content.model_dump() == {"type": "code_execution_result", "stdout": "42\n",
                                           "stderr": "", "return_code": 0, "content": []}
    assert text.text.startswith("Done: 42")
    later = execute(client, "code_execution", {"code": "print(total + 1)"}, tool=tool,
                    container=first.container.id)
    assert later.container.id == first.container.id
    assert later.content[1].content.stdout == "43\n"


@pytest.mark.parametrize("kind", PYTHON_VERSIONS)
def test_a_python_cell_that_raises_has_return_code_1(served, kind):
    server, _ = served
    message = execute(anthropic_client(server), "code_execution", {"code": "1 / 0"}, tool=version(kind))
    content = message.content[1].content
    assert (content.type, content.return_code) == ("code_execution_result", 1)
    assert "ZeroDivisionError" in content.stdout
    # A file that is not there is the cell's own error, as Python raises it.
    missing = execute(anthropic_client(server), "code_execution", {"code": "open('/no/such/file')"},
                      tool=version(kind))
    content = missing.content[1].content
    assert (content.type, content.return_code) == ("code_execution_result", 1), missing.model_dump()
    assert "FileNotFoundError" in content.stdout and "/no/such/file" in content.stdout, missing.model_dump()


@pytest.mark.parametrize("kind", PYTHON_VERSIONS)
def test_a_python_cell_streams_as_anthropic_streams_it(served, kind):
    server, _ = served
    message, kinds = execute(anthropic_client(server), "code_execution", {"code": "print('streamed')"},
                             tool=version(kind), stream=True)
    starts = [block for kind, block in kinds if kind == "content_block_start"]
    assert starts == ["server_tool_use", "code_execution_tool_result", "text"]
    call, result, _ = message.content
    assert call.input == {"code": "print('streamed')"}
    assert result.content.stdout == "streamed\n"

