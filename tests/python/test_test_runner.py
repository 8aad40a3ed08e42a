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


def test_lanes_run_side_by_side_and_the_summary_names_every_failure(tmp_path):
    # Each lane's first phase waits for the other's to have started: were
    # the lanes one after another, the first would wait in vain and fail.
    result = run_script(tmp_path, """
        await_file() { for _ in $(seq 600); do [ -e "$1" ] && return 0; sleep 0.1; done; return 1; }
        left() {
          phase "left starts" sh -c 'touch left-started'
          phase "left sees right" await_file right-started
          phase "left fails" sh -c 'echo "test left::fails ... FAILED"; exit 101'
          phase "left ends" touch left-ended
        }
        right() {
          phase "right sees left" sh -c 'touch right-started; for _ in $(seq 600); do [ -e left-started ] && exit 0; sleep 0.1; done; exit 1'
          phase "right prints" echo "right's own output"
          # A command between phases that fails ends its lane: the summary
          # says so, as its later phases never ran.
          false
          phase "right never" touch right-never
        }
        phase "before" true
        lane "left" left
        lane "right" right
        lanes_wait
        phase "after" touch after-ran
        phases_summary
    """)
    assert result.returncode == 1, result.stdout + result.stderr
    assert (tmp_path / "left-ended").exists() and (tmp_path / "after-ran").exists()
    assert not (tmp_path / "right-never").exists()
    summary = summary_of(result.stdout)
    lines = summary.splitlines()
    for name in ("before", "left starts", "left sees right", "right sees left", "right prints",
                 "left ends", "after"):
        assert any(line.split()[1:] == name.split() + ["ok"] for line in lines), (name, summary)
    assert any("left fails" in line and "FAILED (exit 101)" in line for line in lines), summary
    assert "test left::fails ... FAILED" in summary, summary
    assert any("lane right ended early" in line and "FAILED" in line for line in lines), summary
    # A lane's phase prints its own output whole, between its start and its
    # times (wall and CPU).
    output = result.stdout + result.stderr
    assert "right's own output" in result.stdout, output
    assert "== right prints starts (lane right," in result.stderr, output
    assert "== right prints: " in result.stderr and "s of CPU (user and system)" in result.stderr, output
    # Its log is its own.
    logs = sorted(p.name for p in (tmp_path / "logs").glob("*.log"))
    assert "right-01-right-prints.log" in logs, logs
    assert (tmp_path / "logs" / "right-01-right-prints.log").read_text() == "right's own output\n"
