"""What current Anthropic clients send the Messages API beside the
conversation: `thinking` and replayed thinking blocks,
`context_management`, `output_config`, `top_k`, `stop_sequences`, beta
headers. To an Anthropic upstream it goes as sent (the thinking blocks in
their assistant message, before its tool_use); to another it is mapped or
named in the `x-shellgate-uncarried` header, never refused.
`/v1/messages/count_tokens` answers: the upstream's count, or an estimate."""

import anthropic
import pytest

from conftest import KEY_A
from scripted_recording import COUNTED, RecordingUpstream, text

REPLAYED = [
    {"role": "user", "content": "List the files."},
    {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "I should run ls.", "signature": "sig-1"},
        {"type": "redacted_thinking", "data": "redacted-1"},
        {"type": "tool_use", "id": "toolu_1", "name": "run", "input": {"command": "ls"}},
    ]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt"}]},
]
TOOLS = [{"name": "run", "description": "Runs a command.",
          "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}]
EXTRAS = dict(
    thinking={"type": "enabled", "budget_tokens": 2048},
    stop_sequences=["END"],
    output_config={"effort": "high"},
    # This SDK no longer has `top_k` (older ones and other clients send it).
    extra_body={"context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
                "top_k": 5},
)


def sdk(server):
    return anthropic.Anthropic(base_url=server.base_url.removesuffix("/v1"), api_key=KEY_A, max_retries=0)


@pytest.fixture
def anthropic_upstream(fresh_server):
    upstream = RecordingUpstream(lambda body: [
        {"type": "thinking", "thinking": "Done thinking.", "signature": "sig-2"}, text("There is a.txt.")])
    yield fresh_server(upstream_url=upstream.url, upstream_protocol="anthropic"), upstream
    upstream.stop()


@pytest.mark.parametrize("stream", [False, True])
def test_an_anthropic_upstream_gets_the_fields_and_thinking_blocks_as_sent(anthropic_upstream, stream):
    server, upstream = anthropic_upstream
    client = sdk(server)
    request = dict(model="claude-sonnet-5-5", max_tokens=4096, messages=REPLAYED, tools=TOOLS,
                   betas=["context-management-2025-06-27"], **EXTRAS)
    if stream:
        with client.beta.messages.stream(**request) as events:
            message = events.get_final_message()
    else:
        raw = client.beta.messages.with_raw_response.create(**request)
        assert "x-shellgate-uncarried" not in raw.headers
        message = raw.parse()
    assert [b.text for b in message.content if b.type == "text"] == ["There is a.txt."]
    sent = upstream.messages()[-1]
    body = sent["body"]
    assert body["thinking"] == EXTRAS["thinking"]
    assert body["top_k"] == 5 and body["stop_sequences"] == ["END"]
    assert body["context_management"] == EXTRAS["extra_body"]["context_management"]
    assert body["output_config"] == {"effort": "high"}
    assert "context-management-2025-06-27" in sent["headers"]["anthropic-beta"].split(",")
    assert body["messages"][1]["content"] == REPLAYED[1]["content"]
    assert body["messages"][2]["content"][0]["tool_use_id"] == "toolu_1"


def test_count_tokens_is_the_anthropic_upstreams_count(anthropic_upstream):
    server, upstream = anthropic_upstream
    count = sdk(server).beta.messages.count_tokens(
        model="claude-sonnet-5-5", messages=REPLAYED, tools=TOOLS, thinking=EXTRAS["thinking"],
        betas=["context-management-2025-06-27"],
        extra_body={"context_management": EXTRAS["extra_body"]["context_management"]})
    assert count.input_tokens == COUNTED
    sent = upstream.requests[-1]
    assert sent["path"].endswith("/messages/count_tokens")
    assert "max_tokens" not in sent["body"] and sent["body"]["thinking"] == EXTRAS["thinking"]
    assert sent["body"]["messages"][1]["content"][0]["signature"] == "sig-1"


def test_a_chat_upstream_gets_what_it_can_and_the_rest_is_named(server, upstream):
    client = sdk(server)
    raw = client.messages.with_raw_response.create(
        model="scripted", max_tokens=4096, messages=REPLAYED, tools=TOOLS, **EXTRAS)
    assert raw.http_response.status_code == 200
    uncarried = raw.headers["x-shellgate-uncarried"].split(", ")
    assert "context_management" in uncarried
    # Mapped (a reasoning effort, stop), not named; top_k is named: Chat
    # Completions has no such field (OpenAI's refuses it), so it is dropped.
    assert "top_k" in uncarried
    assert not {"thinking", "stop_sequences", "output_config"} & set(uncarried)
    assert raw.parse().content[0].type == "text"
    # No thinking block reached the Chat model: it could not read one.
    assert "I should run ls." not in str(upstream.requests[-1])
    # A count is an estimate there, never an error.
    count = client.messages.count_tokens(model="scripted", messages=REPLAYED, tools=TOOLS)
    assert count.input_tokens > 0


def test_a_responses_upstream_has_no_stop_or_top_k_and_says_so(fresh_server, upstream):
    server = fresh_server(upstream_protocol="responses")
    raw = sdk(server).messages.with_raw_response.create(
        model="scripted", max_tokens=4096, messages=REPLAYED, tools=TOOLS, **EXTRAS)
    assert raw.http_response.status_code == 200
    uncarried = raw.headers["x-shellgate-uncarried"].split(", ")
    assert {"top_k", "stop_sequences", "context_management"} <= set(uncarried), uncarried
    # The effort is the Responses API's own `reasoning`: carried, not named.
    assert "thinking" not in uncarried and "output_config" not in uncarried
    assert raw.parse().content[0].type == "text"
