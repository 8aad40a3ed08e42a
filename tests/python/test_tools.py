"""Every Responses tool type, through the official
`openai` SDK: Codex CLI's own tool list (captured from `codex exec`,
`codex_request_tools.json`: functions, a `namespace` group and the hosted
`web_search`) is accepted before a Chat Completions upstream, the group
flattened for the model and its calls handed back with their namespace,
the hosted tool left out and reported (`x-shellgate-uncarried`, the
response's metadata); a `custom` (freeform) tool's call comes back as a
`custom_tool_call` with the raw input. Before a Responses upstream the
namespace and the hosted tool go as the client wrote them. With
`unsupported_tools = "reject"` the server refuses what it cannot carry
with a 400 naming the tool. The model is the scripted upstream (a fixture).
"""

import json
from pathlib import Path

import openai
import pytest

CODEX = json.loads((Path(__file__).with_name("codex_request_tools.json")).read_text())
TOOLS = CODEX["tools"]
WEB_SEARCH = next(i for i, t in enumerate(TOOLS) if t["type"] == "web_search")
APPLY_PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Use the `apply_patch` tool to edit files.",
    "format": {"type": "grammar", "syntax": "lark", "definition": 'start: begin_patch hunk+ end_patch\nbegin_patch: "*** Begin Patch" LF\n'},
}


def create(client, **request):
    """A response and the HTTP answer's headers."""
    raw = client.responses.with_raw_response.create(model="scripted", **request)
    return raw.parse(), raw.headers


def test_codex_tools_before_a_chat_upstream_are_flattened_and_the_hosted_tool_reported(client, upstream):
    response, headers = create(
        client,
        input='Call multi_agent_v1__spawn_agent: {"message": "look around"}',
        tools=TOOLS,
        tool_choice=CODEX["tool_choice"],
        parallel_tool_calls=CODEX["parallel_tool_calls"],
    )
    assert response.status == "completed"
    note = f"tools[{WEB_SEARCH}] (web_search)"
    assert headers["x-shellgate-uncarried"] == note
    assert response.metadata["shellgate_uncarried"] == note
    # The model saw the group's tools flattened, and no web_search.
    sent = [t["function"]["name"] for t in upstream.requests[-1]["tools"]]
    assert "multi_agent_v1__spawn_agent" in sent and "exec_command" in sent
    assert not any("web_search" in name for name in sent)
    # Its call is handed back as Codex named the tool: in its namespace.
    [call] = response.output
    assert call.type == "function_call"
    assert (call.name, call.namespace) == ("spawn_agent", "multi_agent_v1")
    assert json.loads(call.arguments) == {"message": "look around"}
    # Its result, replayed, reaches the model as that call's result.
    follow, headers = create(
        client,
        previous_response_id=response.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "agent a1 started"}],
        tools=TOOLS,
    )
    assert follow.output_text == "Done: agent a1 started"


def test_the_report_comes_with_a_stream_too(client):
    with client.responses.with_streaming_response.create(
        model="scripted", input="hi", tools=TOOLS, stream=True
    ) as raw:
        assert raw.headers["x-shellgate-uncarried"] == f"tools[{WEB_SEARCH}] (web_search)"
        kinds = [event.type for event in raw.parse()]
    assert kinds[-1] == "response.completed"


def test_a_request_the_upstream_carries_whole_has_no_report(client):
    response, headers = create(client, input="hi", tools=[t for t in TOOLS if t["type"] != "web_search"])
    assert "x-shellgate-uncarried" not in headers
    assert "shellgate_uncarried" not in (response.metadata or {})


def test_a_custom_tool_call_comes_back_with_its_raw_input(client, upstream):
    patch = "*** Begin Patch\n*** Add File: a.txt\n+hello\n*** End Patch\n"
    response, _ = create(
        client,
        input="Call apply_patch: " + json.dumps({"input": patch}),
        tools=[APPLY_PATCH],
        tool_choice={"type": "custom", "name": "apply_patch"},
    )
    # The Chat upstream was offered a function of one string, the grammar
    # in its description, and was told to call it.
    [tool] = upstream.requests[-1]["tools"]
    assert tool["function"]["name"] == "apply_patch"
    assert "lark" in tool["function"]["parameters"]["properties"]["input"]["description"]
    assert upstream.requests[-1]["tool_choice"]["function"]["name"] == "apply_patch"
    [call] = response.output
    assert call.type == "custom_tool_call"
    assert (call.name, call.input) == ("apply_patch", patch)
    follow, _ = create(
        client,
        previous_response_id=response.id,
        input=[{"type": "custom_tool_call_output", "call_id": call.call_id, "output": "Done!"}],
        tools=[APPLY_PATCH],
    )
    assert follow.output_text == "Done: Done!"
    # The replayed call went back to the model as its function's arguments.
    replayed = upstream.requests[-1]["messages"]
    calls = [m for m in replayed if m.get("tool_calls")]
    assert json.loads(calls[-1]["tool_calls"][0]["function"]["arguments"]) == {"input": patch}


def test_a_user_function_named_shell_works_without_the_hosted_shell(client):
    response, _ = create(
        client,
        input='Call shell: {"command": ["ls"]}',
        tools=[{"type": "function", "name": "shell", "parameters": {"type": "object"}}],
    )
    [call] = response.output
    assert (call.type, call.name) == ("function_call", "shell")


def test_before_a_responses_upstream_the_tools_go_as_written(fresh_server, upstream):
    server = fresh_server(upstream_protocol="responses")
    raw = server.client().responses.with_raw_response.create(
        model="scripted", input="hi", tools=TOOLS + [APPLY_PATCH]
    )
    assert raw.parse().output_text == "Hello from the scripted model."
    assert "x-shellgate-uncarried" not in raw.headers
    sent = upstream.requests[-1]["tools"]
    [group] = [t for t in sent if t["type"] == "namespace"]
    assert group["name"] == "multi_agent_v1"
    assert {t["name"] for t in group["tools"]} == {
        t["name"] for t in TOOLS[4]["tools"]
    }
    assert {"type": "web_search", "external_web_access": False} in sent
    assert [t for t in sent if t["type"] == "custom"][0]["format"] == APPLY_PATCH["format"]


def test_a_server_that_rejects_unsupported_tools_names_the_tool(fresh_server):
    server = fresh_server(unsupported_tools="reject")
    with pytest.raises(openai.BadRequestError) as refused:
        server.client().responses.create(model="scripted", input="hi", tools=TOOLS)
    error = refused.value.body
    assert error["param"] == f"tools[{WEB_SEARCH}]"
    assert error["type"] == "invalid_request_error"
    assert "web_search" in error["message"] and "chat" in error["message"]
    # What it can carry is served as before.
    response = server.client().responses.create(
        model="scripted", input="hi", tools=[t for t in TOOLS if t["type"] != "web_search"]
    )
    assert response.status == "completed"


def test_a_streamed_custom_tool_call_has_its_input_events(client):
    stream = client.responses.create(
        model="scripted", input="Call apply_patch: " + json.dumps({"input": "*** Begin Patch"}),
        tools=[APPLY_PATCH], stream=True,
    )
    events = list(stream)
    [done] = [e for e in events if e.type == "response.custom_tool_call_input.done"]
    assert done.input == "*** Begin Patch"
    [item] = [e.item for e in events if e.type == "response.output_item.done"]
    assert (item.type, item.input) == ("custom_tool_call", "*** Begin Patch")
