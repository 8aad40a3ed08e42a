"""Claude Code (npm `@anthropic-ai/claude-code`, pinned in tests/node and
installed by scripts/test) works unchanged against shellgate: `claude -p`
with a current model name, `ANTHROPIC_BASE_URL` = shellgate and a shellgate
key, over a scripted upstream of either protocol (Anthropic's, and Chat
Completions as a self-hosted model serves it). The script has the model
call Claude Code's own `Bash` tool (a client tool: shellgate hands the call
back), Claude Code runs it here and sends its `tool_result`, and the script
answers the final text. What Claude Code sends beside the conversation
(`thinking`, `context_management`, the `anthropic-beta` header, its cache
breakpoints) reaches an Anthropic upstream as it was sent; a Chat upstream
gets the nearest equivalents and the rest is logged as not carried.

Claude Code refuses `--dangerously-skip-permissions` as root; the test
allows just its Bash tool (`--allowedTools Bash`), which is what a user
running `claude -p` non-interactively does."""

import os
import subprocess

import pytest

from conftest import KEY_A, ROOT
from scripted_recording import RecordingUpstream, last_user_blocks, text

CLAUDE = ROOT / "tests" / "node" / "node_modules" / ".bin" / "claude"
MODEL = "claude-sonnet-5-5"
MADE = "made-by-claude.txt"
FINAL = "FINAL: the file is written."
CALL = {"type": "tool_use", "id": "toolu_cc_1", "name": "Bash",
        "input": {"command": f"echo made by claude > {MADE}", "description": "Write the file"}}


def tool_names(body):
    """The tools a request offers (Anthropic's `name`, Chat's `function.name`)."""
    return [tool.get("name") or tool.get("function", {}).get("name") for tool in body.get("tools", [])]


def answered(body):
    """Whether the request's last turn is the Bash call's result."""
    messages = body.get("messages", [])
    if messages and messages[-1].get("role") == "tool":
        return True
    return any(block.get("type") == "tool_result" for block in last_user_blocks(body))


def script(body):
    """Claude Code's turns: its main loop (the one offered `Bash`) calls
    Bash, then answers once the result is back; side requests (a title, a
    quota check: no tools) get a short text."""
    if "Bash" not in tool_names(body):
        return [text("Writing a file")]
    if answered(body):
        return [text(FINAL)]
    return [{"type": "thinking", "thinking": "I will write the file with Bash.", "signature": "sig-cc-1"}, CALL]


@pytest.fixture(params=["anthropic", "chat"])
def served(request, fresh_server):
    upstream = RecordingUpstream(script)
    server = fresh_server(upstream_url=upstream.url, upstream_protocol=request.param)
    yield server, upstream, request.param
    upstream.stop()


def test_claude_code_completes_a_task_with_its_tools_through_shellgate(served, tmp_path):
    server, upstream, protocol = served
    assert CLAUDE.exists(), "Claude Code is installed by scripts/test (tests/node: npm ci)"
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        # The SDK adds /v1/messages to the base URL.
        "ANTHROPIC_BASE_URL": server.base_url.removesuffix("/v1"),
        "ANTHROPIC_API_KEY": KEY_A,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
    }
    done = subprocess.run(
        [str(CLAUDE), "-p", f"Write the file {MADE}", "--model", MODEL, "--allowedTools", "Bash"],
        cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, (done.stdout, done.stderr, server.log.read_text()[-3000:])
    assert FINAL in done.stdout
    # Claude Code ran the command the model asked for, here.
    assert (work / MADE).read_text() == "made by claude\n"

    main = [r for r in upstream.messages() if "Bash" in tool_names(r["body"])]
    assert len(main) >= 2, [r["body"].get("model") for r in upstream.messages()]
    first, last = main[0]["body"], main[-1]["body"]
    assert first["model"] == MODEL
    if protocol == "chat":
        # The call came back with its result, as Chat Completions says it.
        assert last["messages"][-1] == {"role": "tool", "tool_call_id": CALL["id"],
                                        "content": last["messages"][-1]["content"]}
        # What Chat Completions has no place for is named, not refused.
        assert "context_management" in server.log.read_text()
        return
    # What Claude Code sends beside the conversation reaches the upstream.
    assert first["thinking"]["type"] in ("adaptive", "enabled"), first["thinking"]
    assert first["context_management"]["edits"], first["context_management"]
    # Its blocks' cache breakpoints, which the loop's text conversation
    # cannot hold, become the request's automatic prompt caching.
    assert first["cache_control"]["type"] == "ephemeral"
    betas = main[0]["headers"].get("anthropic-beta", "").split(",")
    assert "context-management-2025-06-27" in betas, betas
    # The tool result came back for the call the upstream made, after the
    # call (and the thinking, when the answer carried it back) in place.
    results = [b for b in last_user_blocks(last) if b.get("type") == "tool_result"]
    assert results and results[0]["tool_use_id"] == CALL["id"]
    assert last["messages"][-2]["content"][-1]["id"] == CALL["id"]
