"""Codex CLI (npm `@openai/codex`, pinned in tests/node and installed by
scripts/test) works unchanged against shellgate: `codex exec` with its
default configuration, only a custom provider's base URL set (`wire_api =
"responses"`), against `shellgate serve` whose upstream is the scripted
Responses model (a fixture that records every request it gets).

The script: Codex's first turn is answered with a call of its local shell
tool, which shellgate hands back; Codex runs the command on this machine and
sends the call's output; the second turn answers with that output,
streamed. With Codex's default model, its tools come in an
`additional_tools` input item (code mode: a freeform `exec` tool of the
`functions` namespace, JavaScript that calls `tools.exec_command`), which
shellgate passes on whole, and the call of `exec` goes back to Codex as the
upstream wrote it. With a model Codex has no metadata for (the second
case; the model is a provider's choice), its tools come in `tools`
(`exec_command` a function, a `namespace` group, the hosted `web_search`).
Before a Chat Completions or Anthropic upstream (the last cases), which
cannot read the `additional_tools` item, shellgate offers the item's tools as it would the
request's: `exec` as the function `functions__exec` of one string, whose
call goes back to Codex as the `custom_tool_call` of `functions.exec`.
The command reads a file, so the proof that it ran is what it read, seen by
the upstream and in Codex's final answer. Codex's own sandbox for local
commands is set, not left to the machine: off (`sandbox_mode =
"danger-full-access"`), since what runs is the script's `cat note.txt` and
what is tested is the traffic through shellgate, not Codex's sandbox. Its
default (read-only) depends on the host: with bubblewrap installed Codex
runs commands through `bwrap` and helper links in its home, which it refuses
to make under `/tmp`, where these tests' homes are, and every command then
fails.

What reaches the upstream is checked too: Codex's `reasoning`, `include`,
`prompt_cache_key` and `client_metadata` verbatim, its tools as Codex wrote
them, and the first turn's reasoning item replayed with its
`encrypted_content`, before the call.
"""

import json
import os
import secrets
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import KEY_A, own_server

CODEX = Path(__file__).resolve().parents[1] / "node" / "node_modules" / ".bin" / "codex"


# Each test's server is its own (a cluster of its own in cluster mode,
# run apart from the session's: one cluster at a time in a process).
pytestmark = pytest.mark.fresh_server


@pytest.fixture
def codex_server(upstream):
    with own_server(upstream, upstream_url=upstream.url, upstream_protocol="responses",
                    upstream_timeout_secs=10) as server:
        yield server


def codex_home(root: Path, base_url: str, model) -> Path:
    """CODEX_HOME with Codex's defaults but for the provider (shellgate's
    URL, the key from an environment variable, the Responses wire API), the
    model when one is given, and its local sandbox off (see above)."""
    home = root / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(
        (f'model = "{model}"\n' if model else "")
        + 'sandbox_mode = "danger-full-access"\n'
        + 'model_provider = "shellgate"\n'
        "\n"
        "[model_providers.shellgate]\n"
        'name = "shellgate"\n'
        f'base_url = "{base_url}"\n'
        'env_key = "SHELLGATE_API_KEY"\n'
        'wire_api = "responses"\n'
    )
    return home


# The call each case's first turn answers with: code mode's `exec`, or the
# `exec_command` function.
CODE_MODE = "Freeform functions.exec: text(await tools.exec_command({cmd: \"cat note.txt\"}))"
FUNCTION = "Call exec_command: " + json.dumps({"cmd": "cat note.txt"})


@pytest.mark.parametrize("model, prompt", [(None, CODE_MODE), ("gpt-5.1-codex", FUNCTION)],
                         ids=["default-model", "tools-list"])
def test_codex_exec_runs_its_local_command_through_shellgate(codex_server, upstream, model, prompt):
    token = secrets.token_hex(8)
    before = len(upstream.requests)
    report = run_codex(codex_server, model, prompt, token)

    marker = prompt.split(":", 1)[0]
    turns = [body for body in upstream.requests[before:]
             if any(marker in json.dumps(item) for item in body.get("input", []))]
    assert len(turns) == 2, [list(body) for body in upstream.requests[before:]]
    first, second = turns
    # Codex's own fields, as it sent them (it asks for the sealed reasoning:
    # it keeps nothing upstream either).
    assert first["reasoning"], first
    assert first["include"] == ["reasoning.encrypted_content"]
    assert first["prompt_cache_key"]
    assert first["client_metadata"]["session_id"] == first["prompt_cache_key"]
    assert first["store"] is False
    if model is None:
        # Its tools in an input item, whole: code mode's `exec` (and not
        # offered twice, as tools of the request).
        declared = first["input"][0]
        assert declared["type"] == "additional_tools", declared
        functions = next(group for group in declared["tools"] if group["name"] == "functions")
        assert any(tool["type"] == "custom" and tool["name"] == "exec" for tool in functions["tools"])
        assert not first.get("tools"), first.get("tools")
    else:
        # Its tools as it wrote them: the local shell as a function, a
        # namespace group, the hosted web search.
        kinds = {tool["type"] for tool in first["tools"]}
        assert {"function", "namespace", "web_search"} <= kinds, kinds
        assert any(tool.get("name") == "exec_command" for tool in first["tools"])

    # The second turn: the first turn's reasoning replayed in place, sealed
    # as the upstream made it, then the call as the upstream wrote it, and
    # what the command printed.
    kinds = [item.get("type") for item in second["input"]]
    call_type = "custom_tool_call" if model is None else "function_call"
    call = kinds.index(call_type)
    assert kinds[call - 1] == "reasoning", kinds
    assert second["input"][call - 1]["encrypted_content"].startswith("sealed-")
    if model is None:
        sent = second["input"][call]
        assert (sent["namespace"], sent["name"]) == ("functions", "exec"), sent
        assert sent["input"] == prompt.split(": ", 1)[1]
    else:
        assert second["input"][call]["name"] == "exec_command"
    output = second["input"][kinds.index(call_type + "_output")]
    assert token in json.dumps(output["output"]), report


@pytest.fixture(params=["chat", "anthropic"])
def codex_other_server(request, upstream):
    with own_server(upstream, upstream_url=upstream.url, upstream_protocol=request.param,
                    upstream_timeout_secs=10) as server:
        yield server, request.param


def test_codex_default_model_before_another_upstream_is_offered_its_additional_tools(codex_other_server,
                                                                                      upstream):
    """Before a Chat Completions or Anthropic upstream (which cannot read
    an `additional_tools` item), the item's tools are offered as the
    request's would be: code mode's freeform `exec` of `functions` as the
    function `functions__exec` of one string, whose call goes back to Codex
    as the `custom_tool_call` it declared."""
    server, protocol = codex_other_server
    token = secrets.token_hex(8)
    before = len(upstream.requests)
    report = run_codex(server, None, CODE_MODE, token)

    turns = [body for body in upstream.requests[before:]
             if any("Freeform functions.exec" in json.dumps(m) for m in body.get("messages", []))]
    assert len(turns) == 2, [list(body) for body in upstream.requests[before:]]
    first, second = turns
    if protocol == "chat":
        offered = {tool["function"]["name"]: tool["function"]["parameters"] for tool in first["tools"]}
    else:
        offered = {tool["name"]: tool["input_schema"] for tool in first["tools"]}
    assert "functions__exec" in offered, list(offered)
    assert offered["functions__exec"]["required"] == ["input"]
    # The call, replayed to the upstream by the name it was offered, and
    # what Codex's command read as its result.
    if protocol == "chat":
        call = next(m for m in second["messages"] if m.get("tool_calls"))
        assert call["tool_calls"][0]["function"]["name"] == "functions__exec"
    else:
        call = next(block for m in second["messages"] for block in m["content"]
                    if isinstance(block, dict) and block.get("type") == "tool_use")
        assert call["name"] == "functions__exec"
    assert token in json.dumps(second["messages"][-1]), report


def run_codex(server, model, prompt, token) -> str:
    """Runs `codex exec` with its default configuration but the provider
    (shellgate at `server`), `model` and its sandbox, in a folder whose note.txt holds
    `token`; asserts it exits 0 with the note in its final answer, and
    returns what it printed (for failure messages)."""
    assert CODEX.exists(), "scripts/test installs Codex CLI (npm ci in tests/node)"
    with tempfile.TemporaryDirectory(prefix="shellgate-codex-") as tmp:
        root = Path(tmp)
        work = root / "work"
        work.mkdir()
        (work / "note.txt").write_text(f"the note says {token}\n")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(root),
            "CODEX_HOME": str(codex_home(root, server.base_url, model)),
            "SHELLGATE_API_KEY": KEY_A,
        }
        ran = subprocess.run(
            # The work directory is not a git repository (Codex asks for one
            # unless told to go on; that is about the folder, not the model).
            [str(CODEX), "exec", "--skip-git-repo-check", prompt],
            cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=180,
        )
    report = f"exit {ran.returncode}\nstdout:\n{ran.stdout}\nstderr:\n{ran.stderr[-4000:]}"
    assert ran.returncode == 0, report
    assert "sandbox: danger-full-access" in ran.stderr, report
    # The final answer, streamed by the second turn, holds what the command read.
    assert f"the note says {token}" in ran.stdout, report
    return report
