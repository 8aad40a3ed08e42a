#!/usr/bin/env python3
"""E2B compatibility's benchmarks (BENCHMARKS.md, "E2B's SDKs"),
each measured in the same run as its baseline, against one `shellgate serve`
(the release binary, bench/sandbox_server.py).

  * create: `Sandbox.create()` then `commands.run("echo hi")` through the
    unmodified `e2b` SDK, timed from the call to the first stdout callback,
    against the same work through shellgate's own API (`POST
    /v1/containers`, then `POST /v1/containers/{id}/exec` of `echo hi`) on
    a kept-alive HTTP connection (httpx, the HTTP client E2B's SDK uses).
    The sandbox or container is removed after each round, untimed; the
    series alternate, so the warm pool serves them alike. Two more series
    split the SDK's figure: the SDK's own two requests sent by hand (httpx,
    kept-alive: `POST /v2/sandboxes`, then `process.Process/Start` of the
    `/bin/bash -l -c "echo hi"` the SDK asks for), and the same with
    `bash -c`. SDK minus wire is the SDK's client-side cost; wire minus
    wire-without-login is the login shell E2B's SDK asks for; what is left
    against shellgate's API is the compatibility layer.
  * run_code: `run_code("1+1")` in a warm context (the `e2b_code_interpreter`
    SDK), against `python3 -c 'print(1+1)'` through exec in the same
    container: the interpreter's round trip against starting Python.
  * JS cell: `run_code("1+1")` in a warm JavaScript context, against
    `node -e 'console.log(1+1)'` through exec in the same container.

Usage: .venv/bin/python bench/e2b_sdks.py [--rounds N]. Needs root (the server
makes sandboxes) and scripts/test's venv (`e2b`, `e2b-code-interpreter`,
`httpx`).
"""

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from sandbox_server import KEY, Server  # noqa: E402 (beside this script)


def summary(samples):
    samples = sorted(samples)
    return {
        "median_ms": statistics.median(samples) * 1e3,
        "p90_ms": samples[max(0, int(len(samples) * 0.9) - 1)] * 1e3,
    }


def e2b_create_to_output(sandbox_cls):
    """Seconds from `Sandbox.create()` to the first stdout of `echo hi`."""
    first = threading.Event()
    started = time.perf_counter()
    sandbox = sandbox_cls.create()
    seen = []

    def on_stdout(text):
        if not seen:
            seen.append(time.perf_counter())
            first.set()

    sandbox.commands.run("echo hi", on_stdout=on_stdout)
    elapsed = seen[0] - started
    sandbox.kill()
    return elapsed


def shellgate_create_to_output(http):
    """Seconds from the create call to exec's answer carrying `hi`."""
    started = time.perf_counter()
    container = http.post("/containers", json={"name": "bench"}).raise_for_status().json()
    result = http.post(
        f"/containers/{container['id']}/exec", json={"commands": ["echo hi"]}
    ).raise_for_status().json()
    elapsed = time.perf_counter() - started
    assert "hi" in json.dumps(result), result
    http.delete(f"/containers/{container['id']}").raise_for_status()
    return elapsed


def e2b_wire_create_to_output(api, envd, login):
    """Seconds from the SDK's create request to the first stdout frame of
    its Start, the two requests sent by hand (`login`: `bash -l`, as the
    SDK sends)."""
    started = time.perf_counter()
    sandbox = api.post("/v2/sandboxes", json={"templateID": "base", "metadata": {}, "envVars": {}})
    sandbox = sandbox.raise_for_status().json()
    args = ["-l", "-c", "echo hi"] if login else ["-c", "echo hi"]
    body = json.dumps({"process": {"cmd": "/bin/bash", "args": args}, "stdin": False}).encode()
    headers = {
        "E2b-Sandbox-Id": sandbox["sandboxID"],
        "E2b-Sandbox-Port": "49983",
        "X-Access-Token": sandbox["envdAccessToken"],
        "Content-Type": "application/connect+json",
        "Connect-Protocol-Version": "1",
    }
    frame = b"\0" + len(body).to_bytes(4, "big") + body
    elapsed, seen = None, b""
    with envd.stream("POST", "/process.Process/Start", content=frame, headers=headers) as stream:
        for chunk in stream.iter_raw():
            seen += chunk
            if elapsed is None and b'"stdout"' in seen:
                elapsed = time.perf_counter() - started
    assert elapsed is not None, seen
    api.delete(f"/sandboxes/{sandbox['sandboxID']}").raise_for_status()
    return elapsed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()

    server = Server()
    root = f"http://127.0.0.1:{server.port}"
    os.environ.update({"E2B_API_URL": root, "E2B_SANDBOX_URL": root, "E2B_API_KEY": KEY})
    os.environ.pop("E2B_DEBUG", None)
    from e2b import Sandbox
    from e2b_code_interpreter import Sandbox as CodeSandbox

    results = {}
    try:
        http = httpx.Client(
            base_url=server.base, headers={"Authorization": f"Bearer {KEY}"}, timeout=300
        )
        # One of each first: the SDK's imports and connection set-up, the
        # warm pool's first fill.
        api = httpx.Client(base_url=root, headers={"X-API-KEY": KEY}, timeout=300)
        envd = httpx.Client(base_url=root, timeout=300)
        series = {
            "e2b_sdk": lambda: e2b_create_to_output(Sandbox),
            "e2b_wire": lambda: e2b_wire_create_to_output(api, envd, login=True),
            "e2b_wire_without_login": lambda: e2b_wire_create_to_output(api, envd, login=False),
            "shellgate_api": lambda: shellgate_create_to_output(http),
        }
        for run in series.values():
            run()
        samples = {name: [] for name in series}
        for _ in range(args.rounds):
            for name, run in series.items():
                samples[name].append(run())
        stats = {name: summary(values) for name, values in samples.items()}
        api_median = stats["shellgate_api"]["median_ms"]
        results["create_to_first_output"] = {
            **stats,
            "ratio": stats["e2b_sdk"]["median_ms"] / api_median,
            "wire_ratio": stats["e2b_wire"]["median_ms"] / api_median,
            "layer_ratio": stats["e2b_wire_without_login"]["median_ms"] / api_median,
        }

        sandbox = CodeSandbox.create()
        sandbox.run_code("x = 1")  # the context's kernel started, warm
        http.post(f"/containers/{sandbox.sandbox_id}/exec", json={"commands": ["true"]})
        run_code, python_c = [], []
        for _ in range(args.rounds):
            started = time.perf_counter()
            execution = sandbox.run_code("1+1")
            run_code.append(time.perf_counter() - started)
            assert execution.text == "2", execution
            started = time.perf_counter()
            result = http.post(
                f"/containers/{sandbox.sandbox_id}/exec",
                json={"commands": ["python3 -c 'print(1+1)'"]},
            ).raise_for_status().json()
            python_c.append(time.perf_counter() - started)
            assert "2" in json.dumps(result), result
        code_stats, python_stats = summary(run_code), summary(python_c)
        results["run_code_1_plus_1"] = {
            "run_code_warm_context": code_stats,
            "python3_c_through_exec": python_stats,
            "ratio": code_stats["median_ms"] / python_stats["median_ms"],
        }

        # A JavaScript cell in a warm JS context, against starting Node for
        # the same line through exec in the same container.
        context = sandbox.create_code_context(language="js")
        sandbox.run_code("let warm = 1", context=context)
        js_cell, node_e = [], []
        for _ in range(args.rounds):
            started = time.perf_counter()
            execution = sandbox.run_code("1+1", context=context)
            js_cell.append(time.perf_counter() - started)
            assert execution.text == "2", execution
            started = time.perf_counter()
            result = http.post(
                f"/containers/{sandbox.sandbox_id}/exec",
                json={"commands": ["node -e 'console.log(1+1)'"]},
            ).raise_for_status().json()
            node_e.append(time.perf_counter() - started)
            assert "2" in json.dumps(result), result
        sandbox.kill()
        js_stats, node_stats = summary(js_cell), summary(node_e)
        results["js_cell_1_plus_1"] = {
            "run_code_warm_js_context": js_stats,
            "node_e_through_exec": node_stats,
            "ratio": js_stats["median_ms"] / node_stats["median_ms"],
        }
    finally:
        server.stop()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
