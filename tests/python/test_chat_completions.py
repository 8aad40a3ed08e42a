"""Chat Completions and the Models API through real clients: the `openai`
SDK's `chat.completions` (whole and streamed) and `models.list()`, and
litellm's `completion()` and `responses()`, against a real `shellgate
serve` whose upstream is the scripted model server (Chat Completions by
default; Responses for the translated path). shellgate is the one base URL
these clients are given."""

import json
import os

import openai
import pytest

from conftest import KEY_A

# litellm fetches its model price list from the network unless told not to.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

LOOKUP = {"type": "function", "function": {
    "name": "lookup", "description": "Looks a thing up",
    "parameters": {"type": "object", "properties": {"q": {"type": "integer"}}}}}


def test_models_list_through_the_sdk(server, client, upstream):
    listed = {model.id: model for model in client.models.list()}
    assert {"scripted", "scripted-500"} <= set(listed)
    assert listed["scripted"].owned_by == "scripted-lab"
    assert listed["scripted"].created == 1700000000
    assert client.models.retrieve("scripted").id == "scripted"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")
    # OpenRouter's prefix serves the same.
    openrouter = openai.OpenAI(base_url=server.base_url.replace("/v1", "/api/v1"), api_key=KEY_A, max_retries=0)
    assert "scripted" in {model.id for model in openrouter.models.list()}


def test_models_in_anthropics_shape_to_the_anthropic_sdk(server):
    """A request that sends `anthropic-version` (every Anthropic SDK does)
    gets Anthropic's model objects and pages, which the SDK's strict mode
    validates; errors come in Anthropic's envelope."""
    import anthropic

    claude = anthropic.Anthropic(base_url=server.base_url.removesuffix("/v1"), api_key=KEY_A,
                                 max_retries=0, _strict_response_validation=True)
    listed = list(claude.models.list())
    ids = [model.id for model in listed]
    assert {"scripted", "scripted-500"} <= set(ids)
    scripted = next(model for model in listed if model.id == "scripted")
    assert (scripted.type, scripted.display_name) == ("model", "scripted")
    assert scripted.created_at.timestamp() == 1700000000
    # Paged as Anthropic pages: after an id, before one.
    first = claude.models.list(limit=1)
    assert [m.id for m in first.data] == ids[:1] and first.has_more and first.last_id == ids[0]
    after = claude.models.list(limit=1, after_id=ids[0])
    assert [m.id for m in after.data] == ids[1:2] and after.first_id == ids[1]
    before = claude.models.list(limit=5, before_id=ids[1])
    assert [m.id for m in before.data] == ids[:1] and not before.has_more
    assert claude.models.retrieve("scripted").id == "scripted"
    with pytest.raises(anthropic.NotFoundError) as missing:
        claude.models.retrieve("no-such-model")
    assert missing.value.body["type"] == "error"
    # Without the header, OpenAI's shape, unchanged.
    import requests
    plain = requests.get(f"{server.base_url}/models", headers={"Authorization": f"Bearer {KEY_A}"}, timeout=30)
    assert plain.json()["object"] == "list" and "has_more" not in plain.json()


def test_a_chat_completion_reaches_a_chat_upstream_verbatim_with_its_own_key(fresh_server, upstream):
    server = fresh_server(upstream_api_key="sk-upstream-only")
    client = server.client()
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    completion = client.chat.completions.create(
        model="scripted", messages=messages, temperature=0.25, seed=5,
        extra_body={"top_k": 3, "some_vendor_field": {"x": [1, 2]}})
    assert completion.choices[0].message.content == "Hello from the scripted model."
    assert completion.usage.total_tokens == 15
    assert upstream.requests[-1] == {
        "model": "scripted", "messages": messages, "temperature": 0.25, "seed": 5,
        "top_k": 3, "some_vendor_field": {"x": [1, 2]}}
    headers = {k.lower(): v for k, v in upstream.headers[-1].items()}
    assert headers["authorization"] == "Bearer sk-upstream-only"
    assert KEY_A not in json.dumps(upstream.headers[-1])
    # The model list is asked with the upstream's key too, and shows neither.
    listed = client.models.list()
    assert "scripted" in {model.id for model in listed}
    headers = {k.lower(): v for k, v in upstream.headers[-1].items()}
    assert headers["authorization"] == "Bearer sk-upstream-only"
    assert "sk-upstream-only" not in listed.model_dump_json()
    # An upstream's refusal is the client's error, in OpenAI's envelope.
    with pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(model="scripted-500", messages=messages)
    assert failed.value.status_code == 502
    assert "the model crashed" in failed.value.message
    with pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(model="scripted-garbage", messages=messages)
    assert failed.value.status_code == 502
    assert "not a completion" in failed.value.message


def test_a_chat_completion_streams_through_the_sdk(client, upstream):
    stream = client.chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": "hello"}],
        stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert upstream.requests[-1]["stream"] is True
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello from the scripted model."
    assert chunks[-1].usage.completion_tokens == 5
    # A tool call, its arguments in pieces, assembled by the SDK's helper.
    with client.chat.completions.stream(
        model="scripted", messages=[{"role": "user", "content": 'Call lookup: {"q": 7}'}],
        tools=[LOOKUP],
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    call = final.choices[0].message.tool_calls[0]
    assert final.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "lookup" and json.loads(call.function.arguments) == {"q": 7}


def test_the_shell_tools_are_refused_naming_the_apis_that_run_them(client, upstream):
    before = len(upstream.requests)
    for tool in ({"type": "shell", "environment": {"type": "container_auto"}}, {"type": "openrouter:shell"}):
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(
                model="scripted", messages=[{"role": "user", "content": "ls"}], tools=[LOOKUP, tool])
        error = refused.value.body
        assert error["param"] == "tools[1]"
        assert error["type"] == "invalid_request_error"
        assert "/v1/responses and /v1/messages" in error["message"]
    assert len(upstream.requests) == before


@pytest.mark.parametrize("protocol", ["responses", "anthropic"])
def test_a_chat_completion_to_another_protocol_is_translated(fresh_server, upstream, protocol):
    server = fresh_server(upstream_protocol=protocol)
    client = server.client()
    raw = client.chat.completions.with_raw_response.create(
        model="scripted", messages=[{"role": "user", "content": "hello"}], seed=1)
    completion = raw.parse()
    assert completion.object == "chat.completion"
    assert completion.choices[0].message.content == "Hello from the scripted model."
    assert completion.usage.prompt_tokens == {"responses": 11, "anthropic": 12}[protocol]
    # What the upstream cannot take is named, not silently lost.
    assert raw.headers["x-shellgate-uncarried"] == "seed"
    sent = upstream.requests[-1]
    assert (sent["input"] if protocol == "responses" else sent["messages"])[0]["role"] == "user"
    # A tool call comes back for the client to run, streamed too.
    completion = client.chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": 'Call lookup: {"q": 2}'}], tools=[LOOKUP])
    call = completion.choices[0].message.tool_calls[0]
    assert completion.choices[0].finish_reason == "tool_calls"
    assert (call.function.name, json.loads(call.function.arguments)) == ("lookup", {"q": 2})
    chunks = list(client.chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": "hello"}], stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello from the scripted model."
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_litellm_completion_and_responses(server, upstream):
    import litellm

    reply = litellm.completion(
        model="openai/scripted", api_base=server.base_url, api_key=KEY_A,
        messages=[{"role": "user", "content": "hello"}])
    assert reply.choices[0].message.content == "Hello from the scripted model."
    assert upstream.requests[-1]["model"] == "scripted"
    response = litellm.responses(
        model="openai/scripted", api_base=server.base_url, api_key=KEY_A,
        input="Execute: echo from-litellm",
        tools=[{"type": "shell", "environment": {"type": "container_auto"}}])
    outputs = [item for item in response.output if getattr(item, "type", None) == "shell_call_output"
               or (isinstance(item, dict) and item.get("type") == "shell_call_output")]
    assert outputs, response.output
    output = outputs[0] if isinstance(outputs[0], dict) else outputs[0].model_dump()
    assert output["output"][0]["stdout"] == "from-litellm\n"


def test_a_passed_through_stream_is_bounded_like_a_turn(fresh_server, upstream):
    # An upstream that streams for ever is cut off at the answer's cap, and
    # the client's stream ends with an error event saying so.
    server = fresh_server(upstream_max_answer_bytes=300000)
    client = server.client()
    stream = client.chat.completions.create(
        model="scripted-endless", messages=[{"role": "user", "content": "go"}], stream=True)
    with pytest.raises(openai.APIError) as cut:
        for _ in stream:
            pass
    assert "larger than the limit of 300000 bytes" in str(cut.value)
