"""OpenAI's `code_interpreter` tool on the Responses API, through the official
SDK, for a model that has no code interpreter of its own (the scripted
upstream, see scripted_upstream.py: "Interpret: A ||| B" calls the tool with
A, then B): shellgate's kernel runs the code in the response's container."""

import base64

import pytest
from openai.types.responses import Response

TOOLS = [{"type": "code_interpreter", "container": {"type": "auto"}}]


def strict(response):
    """Validates a response against the SDK's model (not just constructs it)."""
    return Response.model_validate(response.model_dump())


def calls(response):
    return [item for item in response.output if item.type == "code_interpreter_call"]


def logs(call):
    return "".join(output.logs for output in call.outputs or [] if output.type == "logs")


def test_state_persists_across_calls_and_across_responses_on_the_container(client):
    first = client.responses.create(
        model="scripted", tools=TOOLS, input="Interpret: x = 40 ||| x += 1\nprint(x)")
    strict(first)
    assert first.status == "completed", first.error
    ran = calls(first)
    assert [call.code for call in ran] == ["x = 40", "x += 1\nprint(x)"]
    assert all(call.status == "completed" for call in ran)
    container = ran[0].container_id
    assert container.startswith("cntr_") and ran[1].container_id == container
    assert logs(ran[1]) == "41\n"
    assert first.output[-1].type == "message" and "41" in first.output_text
    # The next turn continues the container, and its kernel.
    second = client.responses.create(
        model="scripted", tools=TOOLS, previous_response_id=first.id, input="Interpret: x * 2")
    strict(second)
    (call,) = calls(second)
    assert call.container_id == container
    assert logs(call) == "82"
    # So does a code_interpreter naming the container.
    third = client.responses.create(
        model="scripted", tools=[{"type": "code_interpreter", "container": container}],
        input="Interpret: import os\nprint(os.getcwd(), x)")
    assert logs(calls(third)[0]) == f"/mnt/data 41\n"
    assert client.containers.retrieve(container).status == "running"


def test_a_matplotlib_chart_comes_back_as_an_image(client):
    code = ("import matplotlib.pyplot as plt\n"
            "plt.plot([1, 2, 3], [1, 4, 9])\n"
            "plt.title('squares')")
    response = client.responses.create(model="scripted", tools=TOOLS, input="Interpret: " + code)
    strict(response)
    (call,) = calls(response)
    images = [output for output in call.outputs if output.type == "image"]
    assert len(images) == 1, call.outputs
    prefix = "data:image/png;base64,"
    assert images[0].url.startswith(prefix)
    assert base64.b64decode(images[0].url[len(prefix):]).startswith(b"\x89PNG\r\n\x1a\n")
    # The model is told an image was shown, not sent its bytes.
    assert "[an image was shown to the user]" in response.output_text
    assert prefix not in response.output_text


def test_an_exception_is_logged_with_its_traceback(client):
    response = client.responses.create(model="scripted", tools=TOOLS, input="Interpret: 1 / 0")
    assert response.status == "completed"
    assert "ZeroDivisionError" in logs(calls(response)[0])


def test_a_file_written_to_mnt_data_is_cited_and_downloadable(client):
    code = ("with open('/mnt/data/report.csv', 'w') as f:\n"
            "    f.write('city,sales\\nOslo,3\\n')\n"
            "print('sandbox:/mnt/data/report.csv')")
    response = client.responses.create(model="scripted", tools=TOOLS, input="Interpret: " + code)
    strict(response)
    (call,) = calls(response)
    message = response.output[-1]
    text = message.content[0]
    (citation,) = text.annotations
    assert citation.type == "container_file_citation"
    assert citation.container_id == call.container_id
    assert citation.filename == "report.csv"
    assert citation.file_id.startswith("cfile_")
    # The citation spans the link in the answer.
    assert text.text[citation.start_index:citation.end_index] == "sandbox:/mnt/data/report.csv"
    content = client.containers.files.content.retrieve(citation.file_id, container_id=call.container_id)
    assert content.read() == b"city,sales\nOslo,3\n"
    listed = client.containers.files.retrieve(citation.file_id, container_id=call.container_id)
    assert listed.path == "/mnt/data/report.csv"


def test_streaming_tells_each_step_in_order(client):
    with client.responses.stream(model="scripted", tools=TOOLS, input="Interpret: print(6 * 7)") as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [event.type for event in events]
    call_id = calls(final)[0].id
    steps = [event.type for event in events if getattr(event, "item_id", None) == call_id
             or (event.type.startswith("response.output_item") and event.item.id == call_id)]
    assert steps == [
        "response.output_item.added",
        "response.code_interpreter_call.in_progress",
        "response.code_interpreter_call_code.delta",
        "response.code_interpreter_call_code.done",
        "response.code_interpreter_call.interpreting",
        "response.code_interpreter_call.completed",
        "response.output_item.done",
    ], kinds
    added = next(e for e in events if e.type == "response.output_item.added" and e.item.id == call_id)
    assert added.item.status == "in_progress"
    done = next(e for e in events if e.type == "response.code_interpreter_call_code.done")
    assert done.code == "print(6 * 7)"
    assert logs(calls(final)[0]) == "42\n"
    assert kinds[-1] == "response.completed"


@pytest.mark.parametrize("container, param", [
    ({"type": "manual"}, "tools[0].container.type"),
    (None, "tools[0].container"),
])
def test_a_bad_container_is_a_400_naming_it(client, container, param):
    import openai

    tool = {"type": "code_interpreter"}
    if container is not None:
        tool["container"] = container
    with pytest.raises(openai.BadRequestError) as error:
        client.responses.create(model="scripted", tools=[tool], input="Interpret: 1")
    assert error.value.body["param"] == param
