"""The test command's runner (scripts/lib/phases.sh): every phase runs
whatever the phases before it did, and the summary at the end gives each
phase's time and result and names every failing test, in the forms pytest,
cargo and `node --test` print them; the run fails if any phase did.

The phases here are tiny real suites (a pytest file, a `node --test` file)
and a stand-in for cargo's output, run by a script that sources the runner
as scripts/test does. Nothing here starts a server."""

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "scripts" / "lib" / "phases.sh"

PYTEST_SUITE = """
def test_passes():
    assert True

def test_fails():
    assert 1 + 1 == 3, "arithmetic"
"""

NODE_SUITE = """
import { test } from 'node:test';
import assert from 'node:assert';

test('outer', async (t) => {
  await t.test('inner passes', () => {});
  await t.test('inner fails', () => { assert.strictEqual(1, 2); });
});
test('another passes', () => {});
"""

CARGO_LIKE = """
echo 'running 2 tests'
echo 'test http_api::serves ... ok'
echo 'test sandbox::runs_a_command ... FAILED'
echo 'error: test failed, to rerun pass `-p shellgate --test it`'
exit 101
"""


def run_script(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    script = tmp_path / "run"
    script.write_text("#!/usr/bin/env bash\nset -euo pipefail\n"
                      f"export PHASES_LOG_DIR={tmp_path / 'logs'}\n"
                      f"source {RUNNER}\n" + textwrap.dedent(body))
    return subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)


def summary_of(stdout: str) -> str:
    assert "== summary" in stdout, stdout
    return stdout[stdout.index("== summary"):]


def test_a_failing_phase_hides_no_other_and_the_summary_names_its_failures(tmp_path):
    (tmp_path / "test_tiny.py").write_text(PYTEST_SUITE)
    (tmp_path / "cargo_like.sh").write_text(CARGO_LIKE)
    node_phase = ""
    if shutil.which("node"):
        (tmp_path / "tiny.test.mjs").write_text(NODE_SUITE)
        node_phase = 'phase "node suite" node --test --test-reporter=tap tiny.test.mjs\n'
    result = run_script(tmp_path, f"""
        phase "passing" touch first-ran
        phase "pytest suite" {sys.executable} -m pytest -q -rfE -p no:cacheprovider --rootdir . test_tiny.py
        phase "cargo-like suite" bash cargo_like.sh
        {node_phase}
        phase "after the failures" touch last-ran
        phases_summary
    """)
    assert result.returncode != 0, result.stdout
    # Every phase ran, the ones after a failure too.
    assert (tmp_path / "first-ran").exists() and (tmp_path / "last-ran").exists()
    summary = summary_of(result.stdout)
    lines = summary.splitlines()
    # Each phase's time and result.
    assert any(line.split()[1:] == ["passing", "ok"] for line in lines), summary
    assert any("pytest suite" in line and "FAILED" in line for line in lines), summary
    assert any("cargo-like suite" in line and "FAILED (exit 101)" in line for line in lines), summary
    assert any(line.split()[1:] == ["after", "the", "failures", "ok"] for line in lines), summary
    # Every failing test, by the name its runner gives it, with one line.
    assert "FAILED test_tiny.py::test_fails - AssertionError: arithmetic" in summary, summary
    assert "test_passes" not in summary, summary
    assert "test sandbox::runs_a_command ... FAILED" in summary, summary
    assert "http_api::serves" not in summary, summary
    if node_phase:
        assert any("node suite" in line and "FAILED" in line for line in lines), summary
        assert "not ok 2 - inner fails" in summary, summary
        assert "not ok 1 - outer" in summary, summary
        assert "passes" not in summary.split("-- node suite failed")[1], summary


def test_a_run_with_every_phase_passing_succeeds(tmp_path):
    (tmp_path / "test_tiny.py").write_text("def test_passes():\n    assert True\n")
    result = run_script(tmp_path, f"""
        phase "one" true
        phase "pytest suite" {sys.executable} -m pytest -q -p no:cacheprovider --rootdir . test_tiny.py
        phases_summary
    """)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = summary_of(result.stdout)
    assert "every phase passed" in summary and "FAILED" not in summary, summary


def test_a_failing_command_inside_a_function_phase_fails_that_phase_only(tmp_path):
    # A phase may be a function of several commands, as scripts/test's
    # lints are; the caller's `set -e` must not end the run inside it.
    result = run_script(tmp_path, """
        two_steps() { echo 'error: could not compile `x`'; false; }
        phase "function" two_steps
        phase "after" touch after-ran
        phases_summary
    """)
    assert result.returncode == 1, result.stdout + result.stderr
    assert (tmp_path / "after-ran").exists()
    summary = summary_of(result.stdout)
    assert "error: could not compile `x`" in summary, summary
