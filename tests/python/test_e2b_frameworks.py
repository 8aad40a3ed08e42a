"""Agent frameworks that pick E2B for their sandbox, unmodified and from PyPI
(pinned in scripts/test), against a real `shellgate serve` as a user points
them at it (E2B's environment variables): smolagents' `CodeAgent(executor_type="e2b")`
with a scripted model, whose executor's first cell is `!pip install` of the
agent's extra imports and whose final answer comes back through the kernel's
error; and agno's `E2BTools`, whose `get_public_url` names a server in the
sandbox that a plain `requests.get` of that URL reaches, with no shellgate key."""
import json
import socket

import pytest
import requests

from conftest import E2B_KEY_A, debian_server, e2b_environment, wait_until

smolagents = pytest.importorskip("smolagents")
from smolagents.models import ChatMessage, MessageRole  # noqa: E402
from smolagents.monitoring import TokenUsage  # noqa: E402
agno_e2b = pytest.importorskip("agno.tools.e2b")


# The module's server is its own, as test_e2b_interpreter.py's.
pytestmark = pytest.mark.fresh_server


@pytest.fixture(scope="module")
def server(upstream):
    with debian_server(upstream) as server:
        yield server


@pytest.fixture
def e2b(server, monkeypatch):
    for name, value in e2b_environment(server).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("E2B_DEBUG", raising=False)


class ScriptedModel(smolagents.Model):
    """A model that answers with the given code blocks in turn, and records
    what each step was shown (the observations of the step before)."""

    def __init__(self, steps):
        super().__init__(model_id="scripted")
        self.steps = list(steps)
        self.seen = []

    def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kwargs):
        self.seen.append(messages)
        code = self.steps.pop(0)
        return ChatMessage(
            role=MessageRole.ASSISTANT,
            content=f"Thought: the next step.\n<code>\n{code}\n</code>",
            token_usage=TokenUsage(input_tokens=1, output_tokens=1),
        )


def message_text(message) -> str:
    content = message.content if hasattr(message, "content") else message.get("content")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


def test_smolagents_code_agent_runs_its_steps_in_an_e2b_sandbox(server, e2b):
    model = ScriptedModel([
        "import numpy as np\ntotal = int(np.arange(7).sum())\nprint('partial', total)",
        "final_answer(total * 2)",
    ])
    # The executor's first cell, at construction, is `!pip install numpy`:
    # numpy is in the image, so pip answers without the network; a failing
    # cell raises here (smolagents' AgentError).
    agent = smolagents.CodeAgent(tools=[], model=model, executor_type="e2b",
                                 additional_authorized_imports=["numpy"], max_steps=4)
    try:
        executor = agent.python_executor
        assert executor.installed_packages == ["numpy"], executor.installed_packages
        answer = agent.run("What is twice the sum of 0..6?")
        assert answer == 42, (answer, [message_text(m) for step in model.seen for m in step][-3:])
        # The second step was shown the first one's printed output.
        observations = "\n".join(message_text(m) for m in model.seen[1])
        assert "partial 21" in observations, observations
        # The first cell's pip, as smolagents runs it.
        pip = executor.sandbox.run_code("!pip install numpy")
        assert pip.error is None, pip
        assert "Requirement already satisfied: numpy" in "".join(pip.logs.stdout), pip.logs
    finally:
        agent.cleanup()


@pytest.fixture
def localhost_names_resolve(monkeypatch):
    """`*.localhost` names resolve to the loopback, as browsers and systemd's
    resolver answer them (RFC 6761); Python's resolver on a plain Debian does
    not, so a test's process is given what a user's machine has."""
    resolve = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        if isinstance(host, str) and host.endswith(".localhost"):
            host = "127.0.0.1"
        return resolve(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def test_agno_get_public_url_reaches_a_server_in_the_sandbox(server, e2b, localhost_names_resolve):
    tools = agno_e2b.E2BTools(api_key=E2B_KEY_A, timeout=600)
    try:
        tools.sandbox.files.write("/home/user/site/index.html", "served from the sandbox\n")
        started = tools.run_background_command("cd /home/user/site && python3 -m http.server 8000")
        # A command handle, or the tool's error as JSON text.
        assert not isinstance(started, str), started
        url = tools.get_public_url(8000)
        assert url == f"http://8000-{tools.sandbox.sandbox_id}.localhost:{server.port}", url

        def reached():
            try:
                return requests.get(url, timeout=30).status_code == 200
            except requests.ConnectionError:
                return False

        assert wait_until(reached, 60), url
        # A plain request: no key, no header of shellgate's.
        page = requests.get(f"{url}/index.html", timeout=30)
        assert page.status_code == 200 and page.text == "served from the sandbox\n", (page.status_code, page.text)
    finally:
        shut = tools.shutdown_sandbox()
        assert json.loads(shut)["status"] == "success", shut
