"""What a Responses client asks beyond shellgate's own fields reaches a
Responses upstream verbatim, and what that upstream returns beside text and
calls comes back: `reasoning` items (with their `encrypted_content` when
`include` asks for it), cached and reasoning tokens; a reasoning is
replayed in place, from a stored conversation or from the client's input.
Driven through the `openai` SDK against a real `shellgate serve` whose
upstream is the scripted Responses model (a fixture)."""

import json

import pytest

from conftest import own_server

ASKED = dict(
    reasoning={"effort": "low", "summary": "auto"},
    include=["reasoning.encrypted_content"],
    prompt_cache_key="cache-key-1",
    safety_identifier="user-1",
    service_tier="auto",
    truncation="auto",
    extra_body={"client_metadata": {"session_id": "session-1"}},
)


# The module's server is its own (a cluster of its own in cluster mode, run
# apart from the session's: one cluster at a time).
pytestmark = pytest.mark.fresh_server


@pytest.fixture(scope="module")
def responses_server(upstream):
    with own_server(upstream, upstream_url=upstream.url, upstream_protocol="responses",
                    upstream_timeout_secs=3) as server:
        yield server


def sent_after(upstream, before):
    """The one request the upstream got since `before` requests."""
    assert len(upstream.requests) == before + 1, upstream.requests[before:]
    return upstream.requests[before]


def test_carried_fields_reach_the_upstream_and_reasoning_comes_back(responses_server, upstream):
    client = responses_server.client()
    before = len(upstream.requests)
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"],
              "additionalProperties": False}
    text = {"format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}}
    response = client.responses.create(model="scripted", input="hi", text=text, **ASKED)
    sent = sent_after(upstream, before)
    # Verbatim, beside shellgate's own fields (the conversation is kept here).
    for key in ("reasoning", "include", "prompt_cache_key", "safety_identifier", "service_tier",
                "truncation", "text"):
        value = ASKED.get(key, text if key == "text" else None)
        assert sent[key] == value, key
    assert sent["client_metadata"] == {"session_id": "session-1"}
    assert sent["store"] is False and sent["stream"] is True
    assert [item.type for item in response.output] == ["reasoning", "message"]
    reasoning = response.output[0]
    assert reasoning.id.startswith("rs_")
    assert reasoning.summary[0].text.startswith("Thinking")
    assert reasoning.encrypted_content.startswith("sealed-")
    assert json.loads(response.output_text) == {"answer": "Hello from the scripted model."}
    # The response object echoes what was asked.
    assert response.text.format.type == "json_schema" and response.text.format.name == "answer"
    assert response.truncation == "auto"
    assert response.usage.output_tokens_details.reasoning_tokens == 2
    assert response.usage.input_tokens_details.cached_tokens == 3

    # Continued with previous_response_id: the stored reasoning goes back in
    # its place, sealed as the upstream made it.
    before = len(upstream.requests)
    follow = client.responses.create(model="scripted", previous_response_id=response.id,
                                     input="again", **ASKED)
    replayed = sent_after(upstream, before)["input"]
    assert [item.get("type") for item in replayed] == ["message", "reasoning", "message", "message"]
    assert replayed[1]["id"] == reasoning.id
    assert replayed[1]["encrypted_content"] == reasoning.encrypted_content
    assert follow.output[0].type == "reasoning"


def test_a_stateless_client_replays_reasoning_from_its_input(responses_server, upstream):
    """As Codex does: `store: false`, the previous turn's items (reasoning
    with `encrypted_content` and `content: null`) sent again as input."""
    client = responses_server.client()
    before = len(upstream.requests)
    client.responses.create(model="scripted", store=False, input=[
        {"role": "user", "content": "hi"},
        {"type": "reasoning", "id": "rs_earlier", "summary": [{"type": "summary_text", "text": "plan"}],
         "content": None, "encrypted_content": "sealed-earlier"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello."}]},
        # Not readable by the upstream (nothing is stored there): left out.
        {"type": "reasoning", "id": "rs_unsealed", "summary": []},
        {"role": "user", "content": "again"},
    ], **ASKED)
    replayed = sent_after(upstream, before)["input"]
    assert [item.get("type") for item in replayed] == ["message", "reasoning", "message", "message"]
    assert replayed[1] == {"type": "reasoning", "id": "rs_earlier",
                           "summary": [{"type": "summary_text", "text": "plan"}],
                           "encrypted_content": "sealed-earlier"}


def test_a_stream_tells_the_reasoning_before_the_message(responses_server):
    client = responses_server.client()
    with client.responses.stream(model="scripted", input="hi", **ASKED) as stream:
        events = list(stream)
        final = stream.get_final_response()
    told = [(e.type, e.item.type) for e in events if e.type.startswith("response.output_item.")]
    assert told == [
        ("response.output_item.added", "reasoning"),
        ("response.output_item.done", "reasoning"),
        ("response.output_item.added", "message"),
        ("response.output_item.done", "message"),
    ]
    done = next(e.item for e in events if e.type == "response.output_item.done")
    assert done.encrypted_content == final.output[0].encrypted_content
    # Its summary streamed before it was done, under its id.
    summary = [e for e in events if e.type.startswith("response.reasoning_summary")]
    assert [e.type for e in summary] == [
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
    ]
    assert {e.item_id for e in summary} == {done.id}
    assert summary[1].delta == summary[2].text == done.summary[0].text
    assert [item.type for item in final.output] == ["reasoning", "message"]


def test_what_is_about_this_server_is_not_sent_and_is_reported(responses_server, upstream):
    client = responses_server.client()
    before = len(upstream.requests)
    raw = client.responses.with_raw_response.create(
        model="scripted", input="hi", stream_options={"include_obfuscation": False}, stream=True,
        conversation="conv_1")
    assert raw.headers["x-shellgate-uncarried"] == "conversation, stream_options"
    list(raw.parse())
    sent = sent_after(upstream, before)
    assert "conversation" not in sent and "stream_options" not in sent
    # Nothing dropped: no header.
    plain = client.responses.with_raw_response.create(model="scripted", input="hi")
    assert "x-shellgate-uncarried" not in plain.headers


def test_a_hosted_tools_items_come_back_whole_and_go_back_in_place(responses_server, upstream):
    """A hosted tool shellgate does not run reaches a Responses upstream,
    which runs it: its item (`web_search_call`) is in the output as the
    upstream wrote it, and replayed in place on the next turn."""
    client = responses_server.client()
    before = len(upstream.requests)
    response = client.responses.create(model="scripted", input="Search shellgate",
                                       tools=[{"type": "web_search"}])
    assert sent_after(upstream, before)["tools"] == [{"type": "web_search"}]
    assert [item.type for item in response.output] == ["web_search_call", "message"]
    searched = response.output[0].to_dict()
    assert searched == {"type": "web_search_call", "id": searched["id"], "status": "completed",
                        "action": {"type": "search", "query": "shellgate"}}
    before = len(upstream.requests)
    client.responses.create(model="scripted", previous_response_id=response.id, input="thanks",
                            tools=[{"type": "web_search"}])
    replayed = sent_after(upstream, before)["input"]
    assert [item.get("type") for item in replayed] == ["message", "web_search_call", "message", "message"]
    assert replayed[1] == searched
