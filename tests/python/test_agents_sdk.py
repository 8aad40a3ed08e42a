"""The OpenAI Agents SDK (`openai-agents`) against shellgate: a ShellTool with
a local executor, and a hosted (container_auto) ShellTool, each complete a
run with the scripted upstream model."""

import asyncio
import subprocess

from agents import Agent, OpenAIResponsesModel, Runner, ShellTool, set_tracing_disabled
from agents.tool import ShellCallOutcome, ShellCommandOutput, ShellResult
from openai import AsyncOpenAI

from conftest import KEY_A

set_tracing_disabled(True)


def model(server):
    client = AsyncOpenAI(base_url=server.base_url, api_key=KEY_A, max_retries=0)
    return OpenAIResponsesModel(model="scripted", openai_client=client)


def test_a_local_shell_tool_runs_on_the_client(server):
    ran = []

    def executor(request):
        outputs = []
        for command in request.data.action.commands:
            ran.append(command)
            done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30)
            outputs.append(ShellCommandOutput(
                stdout=done.stdout, stderr=done.stderr,
                outcome=ShellCallOutcome(type="exit", exit_code=done.returncode), command=command))
        return ShellResult(output=outputs)

    agent = Agent(name="local", model=model(server), tools=[ShellTool(executor=executor)])
    result = asyncio.run(Runner.run(agent, "Execute: echo local-agent"))
    assert ran == ["echo local-agent"]
    assert result.final_output.startswith("Done: ") and "local-agent" in result.final_output


def test_a_hosted_shell_tool_runs_in_a_shellgate_container(server):
    agent = Agent(
        name="hosted",
        model=model(server),
        tools=[ShellTool(environment={"type": "container_auto"})],
    )
    result = asyncio.run(Runner.run(agent, "Execute: echo hosted-agent && test -d /mnt/data"))
    assert result.final_output.startswith("Done: ") and "hosted-agent" in result.final_output
    kinds = [item.type for item in result.new_items]
    assert "tool_call_item" in kinds or any("shell" in k for k in kinds), kinds
