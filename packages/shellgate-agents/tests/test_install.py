"""The install lines the documentation gives, run as written: the package is not on
PyPI, so its README and docs/guide/agents-sdk.md say to install it from a clone of
the repository. Each `pip install` line they hold is run at the repository's root in
a fresh virtual environment, and the installed package (not the source tree) then
runs a `SandboxAgent` against a real `shellgate serve`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import KEY, PROCESSES, REPOSITORY

# Every page that says how to install one of the Agents SDK providers.
PAGES = (
    REPOSITORY / "packages" / "shellgate-agents" / "README.md",
    REPOSITORY / "packages" / "shellgate-agents-js" / "README.md",
    REPOSITORY / "docs" / "guide" / "agents-sdk.md",
)
# A command in a shell block's line or in inline code.
INSTALL_LINE = re.compile(r"^\s*((?:pip|npm) install [^`\n]+?)\s*$|`((?:pip|npm) install [^`\n]+)`", re.M)

AGENT_RUN = textwrap.dedent(
    """
    import asyncio, sys
    import shellgate_agents
    from agents import RunConfig, Runner
    from agents.run_config import SandboxRunConfig
    from agents.sandbox import SandboxAgent
    from agents.testing import ScriptedModel, assistant_message, function_call
    from shellgate_agents import ShellgateSandboxClient, ShellgateSandboxClientOptions

    print("imported from", shellgate_agents.__file__)
    model = ScriptedModel([
        [function_call("exec_command", {"cmd": "echo installed; pwd"}, call_id="echo")],
        [assistant_message("done")],
    ])
    agent = SandboxAgent(name="installed", instructions="Use the shell.", model=model)
    options = ShellgateSandboxClientOptions(base_url=sys.argv[1], api_key=sys.argv[2])
    config = RunConfig(tracing_disabled=True,
                       sandbox=SandboxRunConfig(client=ShellgateSandboxClient(), options=options))
    result = asyncio.run(Runner.run(agent, "go", run_config=config))
    print("final output:", result.final_output)
    for item in model.calls[1].input:
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            print("tool output:", item.get("output"))
    """
)


def install_lines() -> list[str]:
    """Every install command the pages hold, in the order written."""
    lines = []
    for page in PAGES:
        for match in INSTALL_LINE.finditer(page.read_text()):
            lines.append(match.group(1) or match.group(2))
    return lines


def test_every_install_line_names_a_path_in_the_repository():
    lines = install_lines()
    assert any(line.startswith("pip install") for line in lines), lines
    assert any(line.startswith("npm install") for line in lines), lines
    for line in lines:
        # Neither package is on a registry: each line installs from the clone.
        paths = [word for word in line.split()[2:] if "/" in word and not word.startswith("@")]
        assert paths, f"{line!r} installs by name from a registry the package is not on"
        if line.startswith("pip install"):
            assert all((REPOSITORY / path).is_dir() for path in paths), line
        else:
            # npm's lines run in a project beside the clone (`../shellgate/...`).
            assert all(path.startswith("../shellgate/") for path in paths), line
            assert all((REPOSITORY / path.removeprefix("../shellgate/")).is_dir() for path in paths), line


def test_the_documented_pip_install_gives_a_working_provider(shellgate, tmp_path):
    shellgate.require(PROCESSES)
    venv = tmp_path / "venv"
    made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    environment = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
                   "VIRTUAL_ENV": str(venv), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    environment.pop("PYTHONPATH", None)
    pip_lines = sorted({line for line in install_lines() if line.startswith("pip install")})
    for line in pip_lines:
        installed = subprocess.run(["bash", "-c", line], cwd=REPOSITORY, env=environment,
                                   capture_output=True, text=True, timeout=900)
        assert installed.returncode == 0, f"{line}\n{installed.stdout}\n{installed.stderr}"
    script = tmp_path / "run_agent.py"
    script.write_text(AGENT_RUN)
    ran = subprocess.run([str(venv / "bin" / "python"), str(script), shellgate.root, KEY],
                         cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=300)
    output = ran.stdout + ran.stderr
    assert ran.returncode == 0, output
    # The package the venv holds, not the source tree.
    assert f"imported from {venv}" in output, output
    assert "final output: done" in output, output
    assert re.search(r"tool output: .*installed\n/mnt/data", output, re.S), output
