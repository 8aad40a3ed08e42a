"""Anthropic's tool family on `POST /v1/messages`, for any upstream model:
the client tools (`bash_20250124`, `text_editor_2025*`) offered to the
model and handed back as `tool_use`, as the Anthropic API does. Clients: the
official `anthropic` SDK; the model is the scripted upstream (a fixture),
once per upstream protocol (Chat Completions, Responses, Anthropic).
"""

import json

import anthropic
import pytest

from conftest import KEY_A, own_server

PROTOCOLS = ["chat", "responses", "anthropic"]


@pytest.fixture(scope="module", params=PROTOCOLS)
def served(request, upstream):
    """A server whose upstream speaks `request.param`, and that protocol."""
    with own_server(upstream, upstream_url=upstream.url, upstream_protocol=request.param,
                    upstream_timeout_secs=10) as server:
        yield server, request.param


def anthropic_client(server):
    # Anthropic's SDK adds /v1 itself: its base URL is the server's root.
    return anthropic.Anthropic(base_url=server.base_url.removesuffix("/v1"), api_key=KEY_A, max_retries=0)


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
