"""Anthropic's Message Batches through the `anthropic` SDK: each request
runs as `POST /v1/messages` runs it, in the background, and its result
(succeeded with the message, or errored with Anthropic's error object)
comes back as the SDK's own JSONL results; bad input is Anthropic's error
envelope."""

import tempfile
import time
from pathlib import Path

import anthropic
import pytest
import requests

from conftest import CLUSTER_MODE, KEY_A, Server

HI = [{"role": "user", "content": "hi"}]


def client(server):
    # Strict: each answer must validate against the SDK's own types.
    return anthropic.Anthropic(base_url=server.base_url.removesuffix("/v1"), api_key=KEY_A, max_retries=0,
                               _strict_response_validation=True)


def ended(sdk, batch_id):
    """The batch once it has ended (a generous bound: the machine is loaded)."""
    deadline = time.monotonic() + 180
    while True:
        batch = sdk.messages.batches.retrieve(batch_id)
        if batch.processing_status == "ended" or time.monotonic() > deadline:
            assert batch.processing_status == "ended", batch
            return batch
        time.sleep(0.2)


def test_a_batch_runs_each_request_and_its_results_parse_with_the_sdk(server):
    sdk = client(server)
    batch = sdk.messages.batches.create(requests=[
        {"custom_id": "first", "params": {"model": "scripted", "max_tokens": 32, "messages": HI}},
        {"custom_id": "bad", "params": {"model": "scripted", "max_tokens": 0, "messages": HI}},
        {"custom_id": "third", "params": {"model": "scripted", "max_tokens": 32, "messages": HI}},
    ])
    assert batch.type == "message_batch" and batch.id.startswith("msgbatch_"), batch
    assert batch.request_counts.processing + batch.request_counts.succeeded + batch.request_counts.errored == 3, batch
    assert batch.expires_at > batch.created_at, batch
    done = ended(sdk, batch.id)
    assert (done.request_counts.succeeded, done.request_counts.errored, done.request_counts.processing) == (2, 1, 0), done
    assert done.ended_at is not None and done.results_url, done
    results = {line.custom_id: line.result for line in sdk.messages.batches.results(batch.id)}
    assert list(results) == ["first", "bad", "third"], results
    assert results["first"].type == "succeeded", results
    assert results["first"].message.content[0].text == "Hello from the scripted model.", results
    assert results["bad"].type == "errored", results
    assert results["bad"].error.error.type == "invalid_request_error", results


def test_a_base_url_ending_in_v1_reaches_the_batches_too(server):
    # The SDK puts its /v1/... paths after the base URL, as it does for messages.
    sdk = anthropic.Anthropic(base_url=server.base_url, api_key=KEY_A, max_retries=0)
    batch = sdk.messages.batches.create(requests=[
        {"custom_id": "only", "params": {"model": "scripted", "max_tokens": 32, "messages": HI}}])
    assert batch.id in [listed.id for listed in sdk.messages.batches.list(limit=100)], batch
    done = ended(sdk, batch.id)
    assert done.request_counts.succeeded == 1, done
    [line] = list(sdk.messages.batches.results(batch.id))
    assert (line.custom_id, line.result.type) == ("only", "succeeded"), line


@pytest.mark.parametrize("requests_body,said", [
    ([], "requests"),
    ([{"custom_id": "same", "params": {"model": "scripted", "max_tokens": 8, "messages": HI}}] * 2,
     "requests.1.custom_id"),
])
def test_bad_input_is_anthropics_error_envelope(server, requests_body, said):
    reply = requests.post(f"{server.base_url}/messages/batches", json={"requests": requests_body}, timeout=30,
                          headers={"x-api-key": KEY_A, "anthropic-version": "2023-06-01"})
    assert reply.status_code == 400, reply.text
    error = reply.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error", error
    assert said in error["error"]["message"], error
    with pytest.raises(anthropic.BadRequestError):
        client(server).messages.batches.create(requests=requests_body)


def test_an_unknown_batch_is_a_404(server):
    with pytest.raises(anthropic.NotFoundError) as raised:
        client(server).messages.batches.retrieve("msgbatch_nope")
    assert raised.value.body["error"]["type"] == "not_found_error", raised.value.body


def test_batches_list_newest_first_in_pages_and_only_an_ended_one_is_deleted(server):
    sdk = client(server)
    one = [{"custom_id": "only", "params": {"model": "scripted", "max_tokens": 8, "messages": HI}}]
    made = [sdk.messages.batches.create(requests=one).id for _ in range(3)]
    first = sdk.messages.batches.list(limit=2)
    assert [b.id for b in first.data] == made[::-1][:2] and first.has_more, first
    assert first.first_id == made[2] and first.last_id == made[1], first
    rest = sdk.messages.batches.list(limit=2, after_id=first.last_id)
    # (The server is shared: older batches of other tests may follow.)
    assert rest.data[0].id == made[0], rest
    newer = sdk.messages.batches.list(limit=2, before_id=made[0])
    assert [b.id for b in newer.data] == [made[2], made[1]], newer
    for batch_id in made:
        ended(sdk, batch_id)
    deleted = sdk.messages.batches.delete(made[0])
    assert (deleted.id, deleted.type) == (made[0], "message_batch_deleted"), deleted
    with pytest.raises(anthropic.NotFoundError):
        sdk.messages.batches.retrieve(made[0])


def test_a_canceled_batch_ends_with_every_request_accounted_for(server):
    sdk = client(server)
    many = [{"custom_id": f"r{i}", "params": {"model": "scripted", "max_tokens": 8, "messages": HI}}
            for i in range(12)]
    batch = sdk.messages.batches.create(requests=many)
    canceled = sdk.messages.batches.cancel(batch.id)
    assert canceled.processing_status in ("canceling", "ended"), canceled
    done = ended(sdk, batch.id)
    assert done.cancel_initiated_at is not None or done.request_counts.succeeded == 12, done
    counts = done.request_counts
    assert (counts.succeeded + counts.canceled, counts.processing) == (12, 0), done
    kinds = {line.result.type for line in sdk.messages.batches.results(batch.id)}
    assert kinds <= {"succeeded", "canceled"}, kinds


@pytest.mark.skipif(CLUSTER_MODE, reason="runs a server of its own")
def test_a_batch_a_killed_server_left_is_resumed_when_it_starts_again(upstream):
    many = [{"custom_id": f"r{i}", "params": {"model": "scripted", "max_tokens": 8, "messages": HI}}
            for i in range(20)]
    with tempfile.TemporaryDirectory(prefix="shellgate-py-") as tmp:
        first = Server(Path(tmp), upstream_url=upstream.url).start()
        try:
            batch = client(first).messages.batches.create(requests=many)
        finally:
            # Killed, not stopped: nothing of the batch is finished on the way out.
            first.process.kill()
            first.process.wait()
        again = Server(Path(tmp), upstream_url=upstream.url).start()
        try:
            done = ended(client(again), batch.id)
            counts = done.request_counts
            assert (counts.succeeded, counts.processing) == (20, 0), (done, again.log.read_text()[-2000:])
            ids = [line.custom_id for line in client(again).messages.batches.results(batch.id)]
            assert ids == [f"r{i}" for i in range(20)], ids
        finally:
            again.stop()
