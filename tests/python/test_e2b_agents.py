"""The OpenAI Agents SDK's own E2B provider (`agents.extensions.sandbox.e2b`'s
`E2BSandboxClient`) against shellgate, unmodified: a `SandboxAgent` driven by the
SDK's `ScriptedModel` writes a file with its `apply_patch` tool and runs a command
with `exec_command`; and the basics of the e2b SDK that `openai-agents[e2b]` pins
(2.31.0: create through the older `POST /sandboxes`, `commands.run`, files, kill).

Run with `.venv-e2b-agents` (scripts/test makes it: `openai-agents[e2b]` and
pytest), whose e2b is the pinned one; the main venv has the latest e2b instead,
so there this module skips. scripts/test also runs the sandbox SDK's own suites
(test_e2b_control, _commands, _files) in that venv, against the pinned e2b;
what that version lacks (an idempotency key, `commands.stream_input`) skips."""

from __future__ import annotations

import asyncio
import importlib.metadata

import pytest
from conftest import E2B_KEY_B

agents_e2b = pytest.importorskip(
    "agents.extensions.sandbox.e2b", reason="needs openai-agents[e2b] (.venv-e2b-agents)"
)
PINNED = importlib.metadata.version("e2b")
if PINNED != "2.31.0":
    pytest.skip(
        f"e2b {PINNED} is not the version openai-agents[e2b] pins (run in .venv-e2b-agents)",
        allow_module_level=True,
    )

from agents import RunConfig, Runner  # noqa: E402
from agents.run_config import SandboxRunConfig  # noqa: E402
from agents.sandbox import Manifest, SandboxAgent  # noqa: E402
from agents.sandbox.entries import File  # noqa: E402
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402
from e2b import CommandExitException, Sandbox  # noqa: E402
from e2b.exceptions import NotFoundException  # noqa: E402
from openai.types.responses import ResponseCustomToolCall  # noqa: E402

E2BSandboxClient = agents_e2b.E2BSandboxClient
E2BSandboxClientOptions = agents_e2b.E2BSandboxClientOptions


def tool_output(call, call_id: str) -> str:
    """The text a model call was given as the output of its tool call `call_id`."""
    for item in call.input if isinstance(call.input, list) else []:
        if isinstance(item, dict) and item.get("call_id") == call_id:
            if item.get("type") in ("function_call_output", "custom_tool_call_output"):
                output = item.get("output")
                return output if isinstance(output, str) else str(output)
    raise AssertionError(f"no output of {call_id} in the model's input")


def sandbox_ids(key: str) -> set:
    """The sandboxes the E2B API lists for `key`'s project, every page."""
    paginator = Sandbox.list(api_key=key)
    ids = {info.sandbox_id for info in paginator.next_items()}
    while paginator.has_next:
        ids |= {info.sandbox_id for info in paginator.next_items()}
    return ids


def test_a_sandbox_agent_writes_a_file_and_runs_a_command_through_e2b_sandbox_client(e2b):
    patch = (
        "*** Begin Patch\n"
        "*** Add File: notes/plan.txt\n"
        "+written by apply_patch\n"
        "*** End Patch\n"
    )
    model = ScriptedModel(
        [
            [
                ResponseCustomToolCall(
                    type="custom_tool_call",
                    id="patch",
                    call_id="patch",
                    name="apply_patch",
                    input=patch,
                )
            ],
            [
                function_call(
                    "exec_command",
                    {
                        "cmd": "cat notes/plan.txt notes/hello.txt; pwd; id -un; echo $HOME; "
                        "echo made-by-a-command > made.txt && ls"
                    },
                    call_id="run",
                )
            ],
            [assistant_message("done")],
        ]
    )
    agent = SandboxAgent(
        name="e2b",
        instructions="Use the shell.",
        model=model,
        # The SDK's default root, /workspace: shellgate's user owns it.
        default_manifest=Manifest(
            entries={"notes/hello.txt": File(content=b"hello from the manifest\n")},
        ),
    )
    before = sandbox_ids(e2b["E2B_API_KEY"])
    result = asyncio.run(
        Runner.run(
            agent,
            "go",
            run_config=RunConfig(
                tracing_disabled=True,
                sandbox=SandboxRunConfig(
                    client=E2BSandboxClient(),
                    # The SDK's defaults: the internet asked for (shellgate's
                    # default server lets no container reach it, and says so
                    # in the info), pause on timeout with auto-resume.
                    options=E2BSandboxClientOptions(sandbox_type="e2b", timeout=300),
                ),
            ),
        )
    )
    assert result.final_output == "done"
    calls = model.calls
    assert "notes/plan.txt" in tool_output(calls[1], "patch")
    ran = tool_output(calls[2], "run")
    # (The SDK's patch writes the added line without its newline.)
    assert "written by apply_patchhello from the manifest\n" in ran, ran
    # The workspace is the command's cwd, as the E2B user of /home/user.
    assert "/workspace\nuser\n/home/user\n" in ran, ran
    assert "made.txt" in ran and "notes" in ran, ran
    assert "Process exited with code 0" in ran, ran
    # The session's sandbox was shellgate's, and the run ended it (the
    # provider kills it unless asked to pause on exit).
    assert sandbox_ids(e2b["E2B_API_KEY"]) <= before


def test_the_pinned_e2b_sdk_creates_runs_writes_reads_and_kills(e2b):
    # 2.31.0 sends `allow_internet_access: true` unless told otherwise.
    sandbox = Sandbox.create(timeout=120, metadata={"suite": "agents"}, allow_internet_access=False)
    try:
        assert sandbox.sandbox_id in sandbox_ids(e2b["E2B_API_KEY"])
        # Another project does not see it.
        assert sandbox.sandbox_id not in sandbox_ids(E2B_KEY_B)
        ran = sandbox.commands.run("echo hi; echo err >&2; id -un; pwd")
        assert ran.exit_code == 0
        assert ran.stdout == "hi\nuser\n/home/user\n", ran
        assert ran.stderr == "err\n"
        with pytest.raises(CommandExitException) as failed:
            sandbox.commands.run("echo partial; exit 3")
        assert failed.value.exit_code == 3 and failed.value.stdout == "partial\n"
        sandbox.files.write("/home/user/greeting.txt", "hello from 2.31\n")
        assert sandbox.files.read("/home/user/greeting.txt") == "hello from 2.31\n"
        assert sandbox.commands.run("cat ~/greeting.txt").stdout == "hello from 2.31\n"
        # `sudo -u user --` (what the Agents SDK prefixes) just runs.
        assert sandbox.commands.run("sudo -u user -- whoami").stdout == "user\n"
        assert sandbox.is_running()
    finally:
        sandbox.kill()
    assert sandbox.sandbox_id not in sandbox_ids(e2b["E2B_API_KEY"])
    with pytest.raises(NotFoundException):
        Sandbox.connect(sandbox.sandbox_id)
