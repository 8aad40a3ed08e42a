#!/usr/bin/env python3
"""E2B templates' benchmark: a template build from a cached base through
the unmodified `e2b` SDK (`Template.build`: a `RUN` that writes 1,000 small
files and a `COPY` of a 4 MiB file, the default image already built or
`host`), against the same work on the host in the same run (the same
shell command in a scratch home, the file copied, the home written as a
tar: what the build saves as the layer). Also `Sandbox.create(template=…)`
to the first output, against `Sandbox.create()` of the base.

Usage: .venv/bin/python bench/e2b_templates.py [--rounds N]. Needs root (the
server makes sandboxes) and scripts/test's venv (`e2b`); SHELLGATE_BIN
chooses the binary (the release build by default).
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from sandbox_server import KEY, Server  # noqa: E402 (beside this script)

WORK = "mkdir -p /home/user/many && cd /home/user/many && for i in $(seq 1000); do echo $i > f$i; done"


def median_ms(samples):
    return statistics.median(samples) * 1e3


def host_round(context: Path) -> float:
    """The build's work on the host: the command, the copy, the home as tar."""
    home = Path(tempfile.mkdtemp(prefix="sg-bench-home-"))
    started = time.perf_counter()
    subprocess.run(["bash", "-c", WORK.replace("/home/user", str(home))], check=True)
    shutil.copy(context / "blob.bin", home / "blob.bin")
    subprocess.run(["tar", "-cf", str(home.with_suffix(".tar")), "-C", str(home), "."], check=True)
    elapsed = time.perf_counter() - started
    shutil.rmtree(home)
    os.unlink(home.with_suffix(".tar"))
    return elapsed


def build_round(context: Path):
    from e2b import Template

    template = (
        Template(file_context_path=str(context))
        .from_base_image()
        .run_cmd(WORK)
        .copy("blob.bin", "/home/user/blob.bin")
    )
    name = f"bench-{uuid.uuid4().hex[:10]}"
    started = time.perf_counter()
    Template.build(template, name)
    return time.perf_counter() - started, name


def create_round(template=None) -> float:
    from e2b import Sandbox

    started = time.perf_counter()
    sandbox = Sandbox.create(template=template) if template else Sandbox.create()
    sandbox.commands.run("echo hi")
    elapsed = time.perf_counter() - started
    sandbox.kill()
    return elapsed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    server = Server()
    context = Path(tempfile.mkdtemp(prefix="sg-bench-context-"))
    (context / "blob.bin").write_bytes(os.urandom(4 << 20))
    root = f"http://127.0.0.1:{server.port}"
    os.environ.update({"E2B_API_URL": root, "E2B_SANDBOX_URL": root, "E2B_API_KEY": KEY})
    try:
        builds, hosts, names = [], [], []
        for _ in range(args.rounds):
            elapsed, name = build_round(context)
            builds.append(elapsed)
            names.append(name)
            hosts.append(host_round(context))
        from_template, from_base = [], []
        for index in range(args.rounds):
            from_template.append(create_round(names[index % len(names)]))
            from_base.append(create_round())
        print(f"template build (SDK, cached base): {median_ms(builds):.0f} ms")
        print(f"same work on the host:             {median_ms(hosts):.0f} ms")
        print(f"ratio:                             {median_ms(builds) / median_ms(hosts):.1f}x")
        print(f"create from the template → output: {median_ms(from_template):.0f} ms")
        print(f"create from base → output:          {median_ms(from_base):.0f} ms")
    finally:
        server.stop()
        shutil.rmtree(context, ignore_errors=True)


if __name__ == "__main__":
    main()
