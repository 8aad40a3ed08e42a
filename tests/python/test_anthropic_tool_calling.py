"""Anthropic's programmatic tool calling on `POST /v1/messages`, for any
upstream model: a client tool whose `allowed_callers` lists the code
execution version is a function of the model's Python cells; the cell
pauses at its call, the response ends with a `tool_use` whose `caller`
names the cell's `server_tool_use` (`stop_reason: "tool_use"`, the
`container`), and the client's next request (the same container, a
`tool_result`) resumes the cell, which gets the result as the call's
value and runs to its end. A call never answered raises `TimeoutError` in
the code (past `code_execution_tool_result_timeout_secs`, a few seconds
here) and the container stays usable. The round trip runs with each version
whose code calls tools (`_20250825`, whose model gets Python cells for it,
`_20260120` and `_20260521`). Client: the official `anthropic` SDK; the
model is the scripted upstream, once per upstream protocol.
"""

import json

import anthropic
import pytest

from conftest import KEY_A, own_server, wait_until

PROTOCOLS = ["chat", "responses", "anthropic"]

# Servers of the module's own: in cluster mode, clusters of their own.
pytestmark = pytest.mark.fresh_server

CODE_EXECUTION = {"type": "code_execution_20260120", "name": "code_execution"}
CALLER = "code_execution_20260120"

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city, as one word.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                     "required": ["city"]},
    "allowed_callers": [CALLER],
}
SECRET = {
    "name": "read_secret",
    "description": "Reads a secret.",
    "input_schema": {"type": "object", "properties": {"name": {"type": "string"}}},
}
TOOLS = [CODE_EXECUTION, WEATHER, SECRET]


# How long a paused cell waits for its client: a setting (Anthropic's
# ~4.5 min by default), short here so that the test of a call never
# answered waits little, and still far longer than a client's answer takes
# to come back in the other tests (a response, then the next request). One
# server per protocol for the module: in cluster mode a cluster each, and
# one cluster runs at a time on a machine.
TOOL_RESULT_TIMEOUT_SECS = 5


@pytest.fixture(scope="module", params=PROTOCOLS)
def served(request, upstream):
    """A server whose upstream speaks `request.param`, and that protocol."""
    with own_server(upstream, upstream_url=upstream.url, upstream_protocol=request.param,
                    upstream_timeout_secs=10,
                    code_execution_tool_result_timeout_secs=TOOL_RESULT_TIMEOUT_SECS) as server:
        yield server, request.param


def anthropic_client(server):
    # Anthropic's SDK adds /v1 itself: its base URL is the server's root.
    # Strict: each answer must validate against the SDK's own types.
    return anthropic.Anthropic(base_url=server.base_url.removesuffix("/v1"), api_key=KEY_A, max_retries=0,
                               _strict_response_validation=True)


def ask(code):
    """The user's message that has the model run `code` in a cell."""
    return {"role": "user", "content": f"Call code_execution: {json.dumps({'code': code})}"}


def answer(client, messages, message, results, is_error=False, tools=TOOLS):
    """The client's next request: the conversation so far, the paused
    message, and a tool_result for each of its calls (by tool name)."""
    calls = [block for block in message.content if block.type == "tool_use"]
    messages = messages + [
        {"role": "assistant", "content": message.content},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call.id, "content": results[call.input["city"]],
             "is_error": is_error}
            for call in calls]},
    ]
    reply = client.messages.create(model="scripted", max_tokens=256, tools=tools,
                                   container=message.container.id, messages=messages)
    return messages, reply


def paused_calls(message):
    """A paused response's calls of the client's tools, checked: each names
    the cell that made it."""
    assert message.stop_reason == "tool_use", message.model_dump()
    assert message.container is not None and message.container.id, message.model_dump()
    calls = [block for block in message.content if block.type == "tool_use"]
    assert calls, message.model_dump()
    return calls


# Each version whose code calls tools: the `allowed_callers` entry a tool
# opts in with, and the `caller` its calls come back with (`_20260521`'s
# are tagged `_20260120`, as Anthropic tags them).
VERSIONS = [
    ("code_execution_20250825", "code_execution_20250825", "code_execution_20250825"),
    ("code_execution_20260120", "code_execution_20260120", "code_execution_20260120"),
    ("code_execution_20260521", "code_execution_20260521", "code_execution_20260120"),
]


@pytest.mark.parametrize("kind,allowed,caller", VERSIONS)
def test_a_cell_calls_a_client_tool_and_resumes_with_its_result(served, upstream, kind, allowed, caller):
    server, protocol = served
    client = anthropic_client(server)
    tools = [{"type": kind, "name": "code_execution"}, {**WEATHER, "allowed_callers": [allowed]}, SECRET]
    code = "weather = get_weather('Paris')\nprint('Paris is', weather)"
    messages = [ask(code)]
    before = len(upstream.requests)
    with client.messages.stream(model="scripted", max_tokens=256, tools=tools, messages=messages) as events:
        first = events.get_final_message()
    sent = upstream.requests[before]
    # The model is offered the code execution tool (telling it of the
    # function) and the direct tool, not the code-only one.
    if protocol == "chat":
        offered = {tool["function"]["name"]: tool["function"] for tool in sent["tools"]}
    else:
        offered = {tool["name"]: tool for tool in sent["tools"]}
    assert "get_weather" not in offered and "read_secret" in offered, sorted(offered)
    assert "get_weather(city)" in offered["code_execution"]["description"], offered["code_execution"]
    cell, call = first.content
    assert (cell.type, cell.name, cell.input) == ("server_tool_use", "code_execution", {"code": code})
    [paused] = paused_calls(first)
    assert paused is call
    assert (call.name, call.input) == ("get_weather", {"city": "Paris"}), first.model_dump()
    assert call.caller.model_dump() == {"type": caller, "tool_id": cell.id}, first.model_dump()
    assert call.id.startswith("toolu_"), call.id
    _, done = answer(client, messages, first, {"Paris": "sunny"}, tools=tools)
    # The cell's result alone (its call was in the earlier response), then
    # the model's answer, which read the cell's output.
    result, text = done.content
    assert result.type == "code_execution_tool_result" and result.tool_use_id == cell.id, done.model_dump()
    assert result.content.model_dump() == {"type": "code_execution_result", "stdout": "Paris is sunny\n",
                                           "stderr": "", "return_code": 0, "content": []}
    assert text.text.startswith("Done: Paris is sunny"), done.model_dump()
    assert done.stop_reason == "end_turn" and done.container.id == first.container.id


def test_a_cell_calling_twice_pauses_twice(served):
    server, _ = served
    client = anthropic_client(server)
    code = ("first = get_weather(city='Paris')\n"
            "second = get_weather('Rome') if first == 'sunny' else 'unasked'\n"
            "print(first, second)")
    messages = [ask(code)]
    first = client.messages.create(model="scripted", max_tokens=256, tools=TOOLS, messages=messages)
    cell = first.content[0]
    [call] = paused_calls(first)
    assert call.input == {"city": "Paris"}, first.model_dump()
    messages, second = answer(client, messages, first, {"Paris": "sunny"})
    # Paused again: only the new call, naming the same cell.
    [again] = paused_calls(second)
    assert [block.type for block in second.content] == ["tool_use"], second.model_dump()
    assert again.input == {"city": "Rome"} and again.caller.tool_id == cell.id, second.model_dump()
    assert second.container.id == first.container.id
    _, done = answer(client, messages, second, {"Rome": "rainy"})
    result, text = done.content
    assert result.tool_use_id == cell.id and result.content.stdout == "sunny rainy\n", done.model_dump()
    assert text.text.startswith("Done: sunny rainy"), done.model_dump()


def test_awaited_calls_come_together_and_an_error_raises_tool_error(served):
    server, _ = served
    client = anthropic_client(server)
    code = ("import asyncio\n"
            "cities = await asyncio.gather(get_weather('Paris'), get_weather('Rome'))\n"
            "print(cities)\n"
            "try:\n"
            "    await get_weather('Oslo')\n"
            "except ToolError as e:\n"
            "    print('failed:', e)")
    messages = [ask(code)]
    first = client.messages.create(model="scripted", max_tokens=256, tools=TOOLS, messages=messages)
    calls = paused_calls(first)
    assert sorted(call.input["city"] for call in calls) == ["Paris", "Rome"], first.model_dump()
    messages, second = answer(client, messages, first, {"Paris": "sunny", "Rome": "rainy"})
    [oslo] = paused_calls(second)
    assert oslo.input == {"city": "Oslo"}, second.model_dump()
    _, done = answer(client, messages, second, {"Oslo": "no such city"}, is_error=True)
    result = done.content[0].content
    assert result.stdout == "['sunny', 'rainy']\nfailed: no such city\n", done.model_dump()
    assert result.return_code == 0


def test_a_tool_not_allowed_for_code_raises_a_clear_error_in_the_cell(served):
    server, _ = served
    client = anthropic_client(server)
    code = ("try:\n"
            "    read_secret('key')\n"
            "except PermissionError as e:\n"
            "    print('refused:', e)")
    message = client.messages.create(model="scripted", max_tokens=256, tools=TOOLS, messages=[ask(code)])
    cell, result, text = message.content
    assert result.type == "code_execution_tool_result", message.model_dump()
    stdout = result.content.stdout
    assert stdout.startswith("refused: the tool 'read_secret' may not be called from code"), stdout
    assert CALLER in stdout, stdout
    assert message.stop_reason == "end_turn"


def test_resuming_needs_the_container(served):
    server, _ = served
    client = anthropic_client(server)
    messages = [ask("print(get_weather('Paris'))")]
    first = client.messages.create(model="scripted", max_tokens=256, tools=TOOLS, messages=messages)
    [call] = paused_calls(first)
    resumed = messages + [
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}]},
    ]
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(model="scripted", max_tokens=256, tools=TOOLS, messages=resumed)
    assert "container" in str(refused.value), refused.value
    # Text beside the results is refused too, as Anthropic refuses it.
    resumed[-1]["content"].append({"type": "text", "text": "and also"})
    with pytest.raises(anthropic.BadRequestError) as mixed:
        client.messages.create(model="scripted", max_tokens=256, tools=TOOLS, messages=resumed,
                               container=first.container.id)
    assert "tool_result" in str(mixed.value), mixed.value
    # The cell still waits: answered properly, it ends.
    _, done = answer(client, messages, first, {"Paris": "sunny"})
    assert done.content[0].content.stdout == "sunny\n", done.model_dump()


def test_a_call_never_answered_times_out_and_the_container_stays_usable(served):
    server, _ = served
    client = anthropic_client(server)
    code = ("try:\n"
            "    get_weather('Paris')\n"
            "except TimeoutError as e:\n"
            "    open('/mnt/data/gave_up.txt', 'w').write(str(e))\n"
            "    raise")
    messages = [ask(code)]
    first = client.messages.create(model="scripted", max_tokens=256, tools=TOOLS, messages=messages)
    paused_calls(first)
    container = first.container.id
    files = server.client(KEY_A).containers.files

    def gave_up():
        return any(f.path == "/mnt/data/gave_up.txt" for f in files.list(container))

    assert wait_until(gave_up, 60), [f.path for f in files.list(container)]
    # The late result finds the cell ended: its result says why, in
    # Anthropic's shape, and the model reads it.
    _, late = answer(client, messages, first, {"Paris": "sunny"})
    result, text = late.content
    assert result.type == "code_execution_tool_result", late.model_dump()
    assert result.content.return_code == 1, late.model_dump()
    assert "TimeoutError" in result.content.stdout, late.model_dump()
    assert f"within {TOOL_RESULT_TIMEOUT_SECS} s" in result.content.stdout, late.model_dump()
    assert text.text.startswith("Done: "), late.model_dump()
    # The container (and its kernel) goes on.
    later = client.messages.create(model="scripted", max_tokens=256, tools=TOOLS, container=container,
                                   messages=[ask("print(6 * 7)")])
    assert later.content[1].content.stdout == "42\n", later.model_dump()
