"""The Messages API on typed wire: a request is read into its
type once, so a field of the wrong type or a key it does not have is a 400
that names the field, in Anthropic's envelope; what the server streams and
answers is what the SDK's own models read, with no key they do not know
beyond shellgate's documented extras."""

import json

import anthropic
import pytest
import requests
from anthropic import types as t
from pydantic import TypeAdapter

from conftest import KEY_A

HI = [{"role": "user", "content": "hi"}]


def post(server, body):
    return requests.post(f"{server.base_url}/messages", json=body, timeout=30,
                         headers={"x-api-key": KEY_A, "anthropic-version": "2023-06-01"})


@pytest.mark.parametrize("change,param", [
    ({"stream": "yes"}, "stream"),
    ({"max_tokens": "64"}, "max_tokens"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"temperature": "warm"}, "temperature"),
    ({"session_id": 5}, "session_id"),
    ({"frequency_penalty": 1}, "frequency_penalty"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]},
     "messages[0].content[0].tool_use_id"),
    ({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": 7, "name": "f"}]}]},
     "messages[0].content[0].id"),
    ({"messages": [{"role": "user", "content": [{"type": "telepathy"}]}]}, "messages[0].content[0].type"),
    ({"tools": [{"name": "lookup"}]}, "tools[0].input_schema"),
    ({"tools": [{"type": "openrouter:shell", "parameters": {"sleep_after_seconds": "soon"}}]},
     "tools[0].parameters.sleep_after_seconds"),
    ({"tool_choice": {"type": "auto", "disable_parallel_tool_use": "no"}},
     "tool_choice.disable_parallel_tool_use"),
    ({"system": [{"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}}]}, "system[0]"),
])
def test_a_bad_field_is_a_400_naming_it(server, change, param):
    body = {"model": "scripted", "max_tokens": 16, "messages": HI, **change}
    reply = post(server, body)
    assert reply.status_code == 400, reply.text
    error = reply.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert error["error"]["message"].startswith(param), error
    # The SDK raises its own exception for it.
    with pytest.raises(anthropic.BadRequestError):
        anthropic.Anthropic(base_url=server.base_url.removesuffix("/v1"), api_key=KEY_A,
                            max_retries=0).post("/v1/messages", cast_to=object, body=body)


def sse(text):
    return [(line[len("event: "):], json.loads(data[len("data: "):]))
            for line, data in zip(text.splitlines(), text.splitlines()[1:])
            if line.startswith("event: ") and data.startswith("data: ")]


def strict_keys(model, data, extra=()):
    """`data` read by the SDK's model, with no key the model does not have
    (save `extra`, shellgate's documented additions)."""
    parsed = TypeAdapter(model).validate_python(data)
    unknown = set(data) - set(type(parsed).model_fields) - set(extra)
    assert not unknown, (model, unknown)
    return parsed


def test_the_answer_and_the_stream_are_the_sdks_shapes(server):
    # (openrouter:bash: its blocks are the SDK's; openrouter:shell's result
    # block is one the SDK keeps raw.)
    body = {"model": "scripted", "max_tokens": 64, "messages": [{"role": "user", "content": "Execute: echo typed"}],
            "tools": [{"type": "openrouter:bash", "parameters": {"engine": "openrouter"}}]}
    message = post(server, body).json()
    strict_keys(t.Message, message)
    strict_keys(t.Usage, message["usage"], extra=("sandbox_seconds", "server_tool_cost"))
    assert [b["type"] for b in message["content"]] == ["server_tool_use", "bash_code_execution_tool_result", "text"]
    assert message["content"][1]["content"]["stdout"] == "typed\n"
    events = sse(post(server, {**body, "stream": True}).text)
    names = [name for name, _ in events]
    assert names[:2] == ["message_start", "ping"] and names[-2:] == ["message_delta", "message_stop"]
    for name, data in events:
        assert data["type"] == name
        model = {"message_start": t.RawMessageStartEvent, "content_block_start": t.RawContentBlockStartEvent,
                 "content_block_delta": t.RawContentBlockDeltaEvent, "content_block_stop": t.RawContentBlockStopEvent,
                 "message_delta": t.RawMessageDeltaEvent, "message_stop": t.RawMessageStopEvent}.get(name)
        if model:
            strict_keys(model, data)
    # message_start has exactly the keys it always had (as Anthropic sends it:
    # no container yet); the final message always names its container.
    [start] = [data for name, data in events if name == "message_start"]
    assert set(start["message"]) == {"id", "type", "role", "model", "content", "stop_reason",
                                     "stop_sequence", "usage"}, start
    assert "container" in message
    [delta] = [data for name, data in events if name == "message_delta"]
    assert delta["delta"]["stop_reason"] == "end_turn"
    assert delta["delta"]["container"]["id"].startswith("cntr_")
    assert set(delta["usage"]) == {"input_tokens", "output_tokens", "sandbox_seconds", "server_tool_cost"}
