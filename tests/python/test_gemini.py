"""Google's Gemini API through its official Python SDK (`google-genai`), its
base URL shellgate's, over the scripted upstream (scripted_upstream.py): text
answers, function calls answered by the client (by hand and by the SDK's
automatic function calling), streaming, `codeExecution` run in a shellgate
container (its output, a figure, a failure, code past its time, the
container reused by shellgate's `x-shellgate-container` header), thought signatures
carrying each upstream protocol's sealed reasoning, `files.upload` (Google's
resumable protocol, in chunks) and the files it makes (got, listed by pages,
deleted, their MIME types kept, and named in `fileData` parts: in the code's
container, a new one or the one the extension header names, or given as text),
countTokens, the models list, and errors in Google's envelope."""

import io
import json

import pytest
import requests
from google import genai
from google.genai import errors, types

from conftest import KEY_A

CODE = [types.Tool(code_execution=types.ToolCodeExecution())]
PNG = b"\x89PNG\r\n\x1a\n"


def root(server):
    return server.base_url[: -len("/v1")]


# A `genai.Client` closes its HTTP client when it is collected, so each is
# kept for the session (a test's `gemini(server).models...` would otherwise
# lose it mid-call).
CLIENTS = []


def gemini(server, version="v1beta", key=KEY_A, headers=None):
    client = genai.Client(api_key=key, http_options=types.HttpOptions(
        base_url=root(server), api_version=version, headers=headers or {}))
    CLIENTS.append(client)
    return client


def parts(response):
    return response.candidates[0].content.parts


def test_a_text_answer_with_its_usage_at_either_version(server):
    for version in ("v1beta", "v1"):
        response = gemini(server, version).models.generate_content(
            model="scripted", contents="hi",
            config=types.GenerateContentConfig(system_instruction="be brief", temperature=0.3))
        assert response.text == "Hello from the scripted model."
        assert response.candidates[0].finish_reason == types.FinishReason.STOP
        usage = response.usage_metadata
        assert usage.prompt_token_count > 0 and usage.candidates_token_count > 0
        assert usage.total_token_count == usage.prompt_token_count + usage.candidates_token_count
        assert response.model_version == "scripted"


def test_what_cannot_reach_the_upstream_is_named(server):
    response = requests.post(
        f"{root(server)}/v1beta/models/scripted:generateContent", params={"key": KEY_A},
        json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
              "tools": [{"googleSearch": {}}], "safetySettings": []})
    assert response.status_code == 200, response.text
    assert response.headers["x-shellgate-uncarried"] == "safetySettings, tools[0] (googleSearch)"
    assert response.json()["candidates"][0]["content"]["parts"] == [
        {"text": "Hello from the scripted model."}]


def test_a_function_call_round_trip(server):
    client = gemini(server)
    weather = types.FunctionDeclaration(
        name="get_weather", description="The weather in a city",
        parameters=types.Schema(type="OBJECT", properties={"city": types.Schema(type="STRING")}))
    config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[weather])])
    asked = types.Content(role="user", parts=[types.Part(text='Call get_weather: {"city": "Oslo"}')])
    first = client.models.generate_content(model="scripted", contents=[asked], config=config)
    (call,) = first.function_calls
    assert (call.name, call.args) == ("get_weather", {"city": "Oslo"}) and call.id
    answer = types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
        id=call.id, name="get_weather", response={"temperature": 3}))])
    second = client.models.generate_content(
        model="scripted", contents=[asked, first.candidates[0].content, answer], config=config)
    assert second.text == 'Done: {"temperature":3}'


def test_the_sdks_automatic_function_calling(server):
    def get_weather(city: str) -> dict:
        """The weather in a city."""
        return {"city": city, "temperature": 3}

    response = gemini(server).models.generate_content(
        model="scripted", contents='Call get_weather: {"city": "Oslo"}',
        config=types.GenerateContentConfig(tools=[get_weather]))
    assert response.text == 'Done: {"result":{"city":"Oslo","temperature":3}}'
    assert len(response.automatic_function_calling_history) == 3


def test_a_stream_of_chunks_ends_with_the_finish_and_the_usage(server):
    chunks = list(gemini(server).models.generate_content_stream(model="scripted", contents="hi"))
    assert "".join(chunk.text or "" for chunk in chunks) == "Hello from the scripted model."
    assert len(chunks) > 2
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    assert chunks[-1].usage_metadata.total_token_count > 0


def test_code_runs_in_a_container_whose_kernel_a_later_request_can_reuse(server):
    response = gemini(server).models.generate_content(
        model="scripted", contents="Interpret: x = 40 ||| x += 1\nprint(x)",
        config=types.GenerateContentConfig(tools=CODE))
    got = parts(response)
    codes = [part.executable_code for part in got if part.executable_code]
    results = [part.code_execution_result for part in got if part.code_execution_result]
    assert [code.code for code in codes] == ["x = 40", "x += 1\nprint(x)"]
    assert all(code.language == types.Language.PYTHON for code in codes)
    assert [result.outcome for result in results] == [types.Outcome.OUTCOME_OK] * 2
    assert results[1].output == "41\n"
    assert [code.id for code in codes] == [result.id for result in results]
    assert response.text == "Done: OUTCOME_OK\n41\n"
    container = response.sdk_http_response.headers["x-shellgate-container"]
    assert container.startswith("cntr_")
    # shellgate's extension: the same container, its kernel's variables kept.
    again = gemini(server, headers={"x-shellgate-container": container}).models.generate_content(
        model="scripted", contents="Interpret: print(x * 2)",
        config=types.GenerateContentConfig(tools=CODE))
    (result,) = [part.code_execution_result for part in parts(again) if part.code_execution_result]
    assert result.output == "82\n"
    assert again.sdk_http_response.headers["x-shellgate-container"] == container
    # Without it, a request's code starts afresh.
    fresh = gemini(server).models.generate_content(
        model="scripted", contents="Interpret: print('x' in globals())",
        config=types.GenerateContentConfig(tools=CODE))
    assert fresh.code_execution_result == "False\n"
    assert fresh.sdk_http_response.headers["x-shellgate-container"] != container


def test_a_figure_is_an_inline_png_and_a_failure_is_outcome_failed(server):
    code = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()"
    response = gemini(server).models.generate_content(
        model="scripted", contents="Interpret: " + code, config=types.GenerateContentConfig(tools=CODE))
    images = [part.inline_data for part in parts(response) if part.inline_data]
    assert len(images) == 1 and images[0].mime_type == "image/png"
    assert images[0].data.startswith(PNG)
    failed = gemini(server).models.generate_content(
        model="scripted", contents="Interpret: 1 / 0", config=types.GenerateContentConfig(tools=CODE))
    (result,) = [part.code_execution_result for part in parts(failed) if part.code_execution_result]
    assert result.outcome == types.Outcome.OUTCOME_FAILED
    assert "ZeroDivisionError" in result.output


def test_code_past_its_time_is_outcome_deadline_exceeded(fresh_server):
    # Google's limit is 30 seconds; the setting makes it one for the test.
    server = fresh_server(gemini_code_execution_timeout_secs="1")
    response = gemini(server).models.generate_content(
        model="scripted", contents="Interpret: import time\ntime.sleep(600)",
        config=types.GenerateContentConfig(tools=CODE))
    (result,) = [part.code_execution_result for part in parts(response) if part.code_execution_result]
    assert result.outcome == types.Outcome.OUTCOME_DEADLINE_EXCEEDED
    # The model read the outcome, and the kernel is free for the next code.
    assert response.text.startswith("Done: OUTCOME_DEADLINE_EXCEEDED\n")
    container = response.sdk_http_response.headers["x-shellgate-container"]
    again = gemini(server, headers={"x-shellgate-container": container}).models.generate_content(
        model="scripted", contents="Interpret: print('free')",
        config=types.GenerateContentConfig(tools=CODE))
    assert again.code_execution_result == "free\n"


def test_code_execution_streams_its_parts_whole(server):
    chunks = list(gemini(server).models.generate_content_stream(
        model="scripted", contents="Interpret: print(6 * 7)",
        config=types.GenerateContentConfig(tools=CODE)))
    got = [part for chunk in chunks for part in (chunk.candidates[0].content.parts or [])]
    assert [part.executable_code.code for part in got if part.executable_code] == ["print(6 * 7)"]
    (result,) = [part.code_execution_result for part in got if part.code_execution_result]
    assert (result.outcome, result.output) == (types.Outcome.OUTCOME_OK, "42\n")
    assert "".join(part.text or "" for part in got) == "Done: OUTCOME_OK\n42\n"


def test_a_stream_quiet_while_code_runs_parses_to_its_end(server):
    # Past the server's keep-alive interval (a second): what keeps the
    # stream alive is nothing the SDK tries to read as a chunk.
    chunks = list(gemini(server).models.generate_content_stream(
        model="scripted", contents="Interpret: import time\ntime.sleep(3)\nprint('late')",
        config=types.GenerateContentConfig(tools=CODE)))
    got = [part for chunk in chunks for part in (chunk.candidates[0].content.parts or [])]
    (result,) = [part.code_execution_result for part in got if part.code_execution_result]
    assert (result.outcome, result.output) == (types.Outcome.OUTCOME_OK, "late\n")
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP


def test_count_tokens_and_the_models_list(server):
    client = gemini(server)
    assert client.models.count_tokens(model="scripted", contents="hello there").total_tokens > 0
    names = {model.name for model in client.models.list()}
    assert "models/scripted" in names
    assert client.models.get(model="scripted").name == "models/scripted"


def test_errors_are_googles(server):
    with pytest.raises(errors.ClientError) as refused:
        gemini(server, key="sk-wrong").models.generate_content(model="scripted", contents="hi")
    assert refused.value.code == 401 and refused.value.status == "UNAUTHENTICATED"
    with pytest.raises(errors.APIError) as failed:
        gemini(server).models.generate_content(model="scripted-500", contents="hi")
    assert failed.value.code >= 500 and "crashed" in failed.value.message
    with pytest.raises(errors.ClientError) as missing:
        gemini(server, headers={"x-shellgate-container": "cntr_nope"}).models.generate_content(
            model="scripted", contents="hi", config=types.GenerateContentConfig(tools=CODE))
    assert missing.value.code == 404 and missing.value.status == "NOT_FOUND"
    # OpenAI's model route is unchanged beside Gemini's methods.
    listed = requests.get(f"{server.base_url}/models/scripted",
                          headers={"Authorization": f"Bearer {KEY_A}"})
    assert listed.json()["object"] == "model"


@pytest.mark.parametrize("protocol", ["responses", "anthropic"])
def test_every_upstream_protocol(fresh_server, protocol):
    server = fresh_server(upstream_protocol=protocol)
    client = gemini(server)
    assert client.models.generate_content(model="scripted", contents="hi").text == \
        "Hello from the scripted model."
    response = client.models.generate_content(
        model="scripted", contents="Interpret: print(2 + 3)", config=types.GenerateContentConfig(tools=CODE))
    assert response.code_execution_result == "5\n"
    assert response.text == "Done: OUTCOME_OK\n5\n"
    streamed = "".join(chunk.text or "" for chunk in client.models.generate_content_stream(
        model="scripted", contents="hi"))
    assert streamed == "Hello from the scripted model."


WEATHER = types.Tool(function_declarations=[types.FunctionDeclaration(
    name="get_weather", description="The weather in a city",
    parameters=types.Schema(type="OBJECT", properties={"city": types.Schema(type="STRING")}))])
THINKING = types.GenerateContentConfig(
    tools=[WEATHER], thinking_config=types.ThinkingConfig(thinking_budget=2048))
ASKED = types.Content(role="user", parts=[types.Part(text='Call get_weather: {"city": "Oslo"}')])


def reasoning_sent(protocol, body):
    """The sealed reasoning an upstream's request gives back: the Responses
    items' `encrypted_content`, the Anthropic thinking blocks' signatures."""
    if protocol == "responses":
        return [item.get("encrypted_content") for item in body.get("input", [])
                if item.get("type") == "reasoning"]
    if protocol == "anthropic":
        return [block.get("signature") for message in body.get("messages", [])
                if isinstance(message.get("content"), list)
                for block in message["content"] if block.get("type") == "thinking"]
    return []


def sealed_by(protocol, number):
    """What the scripted upstream seals its `number`th answer's reasoning as."""
    return {"responses": f"sealed-{number}", "anthropic": f"sig-{number}"}.get(protocol)


def signature_round_trip(server, upstream, protocol, stream):
    """A call with the model's reasoning signed on it, echoed back: the
    upstream gets its reasoning back as it sealed it."""
    client = gemini(server)
    before = len(upstream.requests)
    if stream:
        chunks = list(client.models.generate_content_stream(
            model="scripted", contents=[ASKED], config=THINKING))
        said = types.Content(role="model", parts=[
            part for chunk in chunks for part in (chunk.candidates[0].content.parts or [])])
    else:
        said = client.models.generate_content(
            model="scripted", contents=[ASKED], config=THINKING).candidates[0].content
    (call,) = [part for part in said.parts if part.function_call]
    number = len(upstream.requests)
    assert number == before + 1, upstream.requests[before:]
    if protocol == "chat":
        # Chat Completions gives no reasoning to carry.
        assert all(part.thought_signature is None for part in said.parts), said
    else:
        assert call.thought_signature, said
    answer = types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
        id=call.function_call.id, name="get_weather", response={"temperature": 3}))])
    second = client.models.generate_content(
        model="scripted", contents=[ASKED, said, answer], config=THINKING)
    assert second.text == 'Done: {"temperature":3}', second
    assert second.sdk_http_response.headers.get("x-shellgate-uncarried") is None, \
        second.sdk_http_response.headers
    expected = [sealed_by(protocol, number)] if protocol != "chat" else []
    assert reasoning_sent(protocol, upstream.requests[-1]) == expected, upstream.requests[-1]


@pytest.mark.parametrize("protocol", ["responses", "anthropic"])
def test_a_thought_signature_gives_the_upstream_its_reasoning_back(fresh_server, upstream, protocol):
    server = fresh_server(upstream_protocol=protocol)
    for stream in (False, True):
        signature_round_trip(server, upstream, protocol, stream)


def test_a_chat_upstream_gives_no_reasoning_to_sign(server, upstream):
    for stream in (False, True):
        signature_round_trip(server, upstream, "chat", stream)


def test_a_signature_shellgate_did_not_write_is_named(server):
    said = types.Content(role="model", parts=[types.Part(
        function_call=types.FunctionCall(id="c1", name="get_weather", args={"city": "Oslo"}),
        thought_signature=b"from another service")])
    answer = types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
        id="c1", name="get_weather", response={"temperature": 3}))])
    response = gemini(server).models.generate_content(
        model="scripted", contents=[ASKED, said, answer], config=types.GenerateContentConfig(tools=[WEATHER]))
    assert response.text == 'Done: {"temperature":3}', response
    assert response.sdk_http_response.headers["x-shellgate-uncarried"] == \
        "contents[1].parts[0].thoughtSignature", response.sdk_http_response.headers


def test_an_uploaded_file_is_listed_read_and_deleted(server, tmp_path):
    client = gemini(server)
    path = tmp_path / "numbers.csv"
    path.write_text("n\n1\n2\n3\n")
    uploaded = client.files.upload(file=path, config={"display_name": "numbers.csv"})
    assert uploaded.name.startswith("files/") and uploaded.state == types.FileState.ACTIVE, uploaded
    assert (uploaded.mime_type, uploaded.size_bytes, uploaded.display_name) == \
        ("text/csv", 8, "numbers.csv"), uploaded
    assert uploaded.uri.endswith("/v1beta/" + uploaded.name), uploaded
    assert uploaded.expiration_time > uploaded.create_time, uploaded
    assert client.files.get(name=uploaded.name).size_bytes == 8
    other = client.files.upload(file=io.BytesIO(b"x"), config={"mime_type": "text/plain"})
    assert other.display_name == "upload.txt" and other.mime_type == "text/plain", other
    # Paged one a page, the listing reaches both.
    listed = [file.name for file in client.files.list(config={"page_size": 1})]
    assert {uploaded.name, other.name} <= set(listed), listed
    client.files.delete(name=other.name)
    with pytest.raises(errors.ClientError) as gone:
        client.files.get(name=other.name)
    assert gone.value.code == 404 and gone.value.status == "NOT_FOUND", gone.value
    # The same files are the project's files of the OpenAI API.
    openai_file = requests.get(f"{server.base_url}/files/{uploaded.name[len('files/'):]}",
                               headers={"Authorization": f"Bearer {KEY_A}"})
    assert openai_file.json()["filename"] == "numbers.csv", openai_file.text


def test_a_file_past_the_sdks_chunk_comes_in_chunks_whole_and_keeps_its_type(server, tmp_path):
    # The SDK sends 8 MiB a request: this file takes two `upload`s and an
    # `upload, finalize`, at the offsets of the bytes taken.
    client = gemini(server)
    chunk = 8 * 1024 * 1024
    body = bytes(range(256)) * ((2 * chunk + 1000) // 256) + b"tail"
    path = tmp_path / "blob"
    path.write_bytes(body)
    uploaded = client.files.upload(file=path, config={"display_name": "data", "mime_type": "text/csv"})
    assert (uploaded.size_bytes, uploaded.display_name, uploaded.mime_type) == \
        (len(body), "data", "text/csv"), uploaded
    assert client.files.get(name=uploaded.name).mime_type == "text/csv"
    content = requests.get(f"{server.base_url}/files/{uploaded.name[len('files/'):]}/content",
                           headers={"Authorization": f"Bearer {KEY_A}"})
    assert content.status_code == 200, content.text[:500]
    assert len(content.content) == len(body) and content.content == body, \
        (len(content.content), content.content[:64], content.content[-64:])


def test_an_upload_answers_its_progress_and_refuses_a_chunk_out_of_place(server):
    started = requests.post(
        f"{root(server)}/upload/v1beta/files", params={"key": KEY_A},
        headers={"X-Goog-Upload-Protocol": "resumable", "X-Goog-Upload-Command": "start"},
        json={"file": {"displayName": "parts.txt"}})
    assert started.status_code == 200, started.text
    url = started.headers["x-goog-upload-url"]

    def send(command, offset, data=b""):
        return requests.post(url, data=data, headers={
            "X-Goog-Upload-Command": command, "X-Goog-Upload-Offset": str(offset)})

    first = send("upload", 0, b"abc")
    assert (first.status_code, first.headers.get("x-goog-upload-status")) == (200, "active"), \
        (first.status_code, first.headers, first.text)
    asked = send("query", 0)
    assert asked.headers.get("x-goog-upload-size-received") == "3", (asked.headers, asked.text)
    misplaced = send("upload, finalize", 1, b"def")
    assert misplaced.status_code == 400, misplaced.text
    assert "X-Goog-Upload-Offset: 3" in misplaced.json()["error"]["message"], misplaced.text
    # The session outlives the refused chunk: the right offset finishes it.
    final = send("upload, finalize", 3, b"def")
    assert (final.status_code, final.headers.get("x-goog-upload-status")) == (200, "final"), \
        (final.status_code, final.headers, final.text)
    made = final.json()["file"]
    assert (made["sizeBytes"], made["mimeType"]) == ("6", "text/plain"), made
    content = requests.get(f"{server.base_url}/files/{made['name'][len('files/'):]}/content",
                           headers={"Authorization": f"Bearer {KEY_A}"})
    assert content.content == b"abcdef", content.content


def test_an_uploaded_file_reaches_the_code_or_the_model(server, upstream, tmp_path):
    client = gemini(server)
    path = tmp_path / "numbers.csv"
    path.write_text("n\n1\n2\n3\n")
    uploaded = client.files.upload(file=path, config={"display_name": "numbers.csv"})
    attached = types.Content(role="user", parts=[
        types.Part.from_uri(file_uri=uploaded.uri, mime_type=uploaded.mime_type)])
    # With code execution the file is in the code's container, where the
    # model is told it is.
    code = "print(sum(int(n) for n in open('/mnt/data/numbers.csv').read().split()[1:]))"
    response = client.models.generate_content(
        model="scripted", contents=[attached, types.Content(role="user", parts=[
            types.Part(text="Interpret: " + code)])],
        config=types.GenerateContentConfig(tools=CODE))
    assert response.code_execution_result == "6\n", response
    told = json.dumps(upstream.requests[-2])
    assert "[attached file /mnt/data/numbers.csv (text/csv)" in told, told
    # In a container the extension header names, the file is put there too.
    container = response.sdk_http_response.headers["x-shellgate-container"]
    fresh = gemini(server).models.generate_content(
        model="scripted", contents="Interpret: print('fresh')",
        config=types.GenerateContentConfig(tools=CODE))
    reused = fresh.sdk_http_response.headers["x-shellgate-container"]
    assert reused != container, fresh.sdk_http_response.headers
    response = gemini(server, headers={"x-shellgate-container": reused}).models.generate_content(
        model="scripted", contents=[attached, types.Content(role="user", parts=[
            types.Part(text="Interpret: " + code)])],
        config=types.GenerateContentConfig(tools=CODE))
    assert response.code_execution_result == "6\n", response
    assert response.sdk_http_response.headers["x-shellgate-container"] == reused
    # Without it, a text file's content goes to the model.
    response = client.models.generate_content(
        model="scripted", contents=[attached, types.Content(role="user", parts=[types.Part(text="hi")])])
    assert response.text == "Hello from the scripted model.", response
    told = json.dumps(upstream.requests[-1])
    assert json.dumps("[attached file numbers.csv, text/csv]\nn\n1\n2\n3\n")[1:-1] in told, told
    # A file the upstream's protocol cannot take (an image, here) is named.
    image = client.files.upload(file=io.BytesIO(PNG), config={"mime_type": "image/png"})
    raw = requests.post(
        f"{root(server)}/v1beta/models/scripted:generateContent", params={"key": KEY_A},
        json={"contents": [{"role": "user", "parts": [
            {"fileData": {"fileUri": image.uri, "mimeType": "image/png"}}, {"text": "hi"}]}]})
    assert raw.status_code == 200, raw.text
    assert raw.headers["x-shellgate-uncarried"] == "contents[0].parts[0] (fileData)", raw.headers
    # One that is not the project's is a 404 naming the part.
    missing = requests.post(
        f"{root(server)}/v1beta/models/scripted:generateContent", params={"key": KEY_A},
        json={"contents": [{"role": "user", "parts": [{"fileData": {"fileUri": "files/file-nope"}}]}]})
    assert missing.status_code == 404, missing.text
    assert missing.json()["error"]["status"] == "NOT_FOUND", missing.text
