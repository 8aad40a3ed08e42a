#!/usr/bin/env python3
"""Anthropic's code execution against `openrouter:bash` in one run: what a
`bash_code_execution` call costs a Messages request beyond what the same
command costs as an `openrouter:bash` call.

Two Messages requests (`POST /v1/messages`) on a kept-alive connection to
one `shellgate serve`, against a scripted upstream model, both running
`true` once in the same container (two model turns and one command each):
- `code_execution_20250825` on the request's `container`;
- `openrouter:bash` (`engine: openrouter`) on a `container_reference`.

The two alternate within each round (A then B, then B then A), so a
machine's load falls on both alike. Prints each one's median, the spread
(10th to 90th percentile) and the ratio of the medians, in wall time and
in the server's own CPU time per request (bench/versus.py's measure, which
a loaded machine disturbs far less than the wall time), and the machine's
load average before and after.

    python3 bench/code_execution.py BINARY [--rounds N]

e.g. `python3 bench/code_execution.py target/release/shellgate --rounds
500`. Needs root (the engine's namespaces), as `shellgate serve` does.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from versus import Server, spread, timed  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
import scripted_upstream  # noqa: E402
from scripted_upstream import ScriptedUpstream  # noqa: E402


def requests(container):
    """The two requests, by name, each running `true` once in `container`."""
    code_execution = {
        "model": "scripted", "max_tokens": 64, "container": container,
        "tools": [{"type": "code_execution_20250825", "name": "code_execution"}],
        "messages": [{"role": "user", "content": 'Call bash_code_execution: {"command": "true"}'}],
    }
    openrouter_bash = {
        "model": "scripted", "max_tokens": 64,
        "tools": [{"type": "openrouter:bash", "parameters": {
            "engine": "openrouter",
            "environment": {"type": "container_reference", "container_id": container}}}],
        "messages": [{"role": "user", "content": "Execute: true"}],
    }
    return {"code execution": code_execution, "openrouter:bash": openrouter_bash}


def ran_true(kind, message):
    """Whether `message` holds the call's result block, the command's exit 0."""
    results = [block for block in message["content"]
               if block["type"] == "bash_code_execution_tool_result"]
    assert len(results) == 1 and results[0]["content"]["return_code"] == 0, (kind, message)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("binary", metavar="BINARY")
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()

    scripted_upstream.Handler.disable_nagle_algorithm = True
    upstream = ScriptedUpstream()
    server = Server(args.binary, upstream.url)
    container = server.post("/v1/containers", {"name": "bench"})["id"]
    bodies = requests(container)
    kinds = list(bodies)
    for _ in range(10):  # warm-up: connections, caches
        for kind in kinds:
            ran_true(kind, server.post("/v1/messages", bodies[kind]))
    load_before = os.getloadavg()
    wall = {kind: [] for kind in kinds}
    cpu = {kind: [] for kind in kinds}
    for i in range(args.rounds):
        for kind in (kinds if i % 2 == 0 else kinds[::-1]):
            w, c = timed(server, lambda: server.post("/v1/messages", bodies[kind]))
            wall[kind].append(w)
            cpu[kind].append(c)
        upstream.server.requests.clear()
    load_after = os.getloadavg()
    a, b = kinds
    print(f"{args.binary}\n{args.rounds} rounds, alternating; median (p10–p90) in ms; "
          f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after "
          f"({os.cpu_count()} CPUs)")
    for title, samples in [("wall time", wall), ("server CPU", cpu)]:
        ma, mb = statistics.median(samples[a]), statistics.median(samples[b])
        print(f"{title}: {a} {ma:.3f} ({spread(samples[a])}), {b} {mb:.3f} "
              f"({spread(samples[b])}), {a} / {b} {ma / mb:.3f}")
    server.stop()
    upstream.stop()


if __name__ == "__main__":
    main()
