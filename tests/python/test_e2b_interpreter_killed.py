"""A sandbox that ends while `run_code` runs a cell (killed, or its timeout
reached) breaks the execution's stream, as a connection to a sandbox that
is gone breaks on E2B: the latest `e2b_code_interpreter` SDK then probes
the sandbox, finds it gone and raises its `TimeoutException`, never
returning the cell as if it had ended."""

import threading

from e2b.exceptions import TimeoutException
from e2b_code_interpreter import Sandbox

CELL = "import time\nprint('started', flush=True)\ntime.sleep(600)"


def start_cell(sandbox):
    """Runs CELL in a thread; returns (thread, outcome, started), where
    `started` is set once the cell printed (it is running)."""
    started = threading.Event()
    outcome = {}

    def run():
        try:
            outcome["execution"] = sandbox.run_code(CELL, on_stdout=lambda _: started.set())
        except Exception as error:  # what the SDK raised is the test's subject
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(300), f"the cell never printed: {outcome}"
    return thread, outcome


def assert_broken(thread, outcome):
    thread.join(300)
    assert not thread.is_alive(), "run_code is still waiting on a sandbox that ended"
    error = outcome.get("error")
    assert isinstance(error, TimeoutException), f"expected the SDK's TimeoutException, got {outcome!r}"
    assert "killed" in str(error), str(error)


def test_a_sandbox_killed_mid_run_code_breaks_the_stream(e2b):
    sandbox = Sandbox.create()
    thread, outcome = start_cell(sandbox)
    sandbox.kill()
    assert_broken(thread, outcome)


def test_a_sandbox_timing_out_mid_run_code_breaks_the_stream(e2b):
    sandbox = Sandbox.create()
    try:
        thread, outcome = start_cell(sandbox)
        sandbox.set_timeout(1)
        assert_broken(thread, outcome)
    finally:
        sandbox.kill()


def test_a_cell_ending_normally_still_ends_normally(e2b):
    sandbox = Sandbox.create()
    try:
        execution = sandbox.run_code("print('fine')\n1 + 1")
        assert execution.error is None, execution
        assert execution.text == "2", execution
        assert execution.logs.stdout == ["fine\n"], execution
        # A cell that fails ends with its error, not a broken stream.
        failed = sandbox.run_code("raise ValueError('boom')")
        assert failed.error is not None and failed.error.name == "ValueError", failed
    finally:
        sandbox.kill()
