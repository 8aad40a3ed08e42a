#!/usr/bin/env python3
"""E2B templates' benchmark: a template build from a cached base through
the unmodified `e2b` SDK (`Template.build`: a `RUN` as the sandbox user that
writes 1,000 small files and a `COPY` of a 4 MiB file onto the default
image, `debian-12`), against the same work done directly on the host in the
same run, rounds alternating. Also `Sandbox.create(template=…)` to the first
output, against `Sandbox.create()` of the base.

A template is an image made by the server's image builder, so the baseline
is `bench/image_build.py`'s: the fastest honest way to get the same image
tree on the host, with no isolation at all (an overlay of the base, the
command run by `chroot` as the same user, the file copied, then the tree
made as the builder makes it: a hard-linked copy of the base with the upper
layer over it). The base is the test suite's cached `debian-12`,
hard-linked into this run's own data directory.

Usage: .venv/bin/python bench/e2b_templates.py [--rounds N]. Needs root (the
server makes sandboxes), scripts/test's venv (`e2b`) and the shared
`debian-12`; SHELLGATE_BIN chooses the binary (the release build by default).
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
from image_build import Overlay, data_dir_with_base, tree_of  # noqa: E402 (beside this script)
from sandbox_server import KEY, Server  # noqa: E402

WORK = "mkdir -p /home/user/many && cd /home/user/many && for i in $(seq 1000); do echo $i > f$i; done"


def median_ms(samples):
    return statistics.median(samples) * 1e3


def host_round(base: Path, scratch: Path, context: Path) -> float:
    """The build's work on the host: the command as the user in an overlay
    of the base, the copy, then the image tree."""
    work = scratch / uuid.uuid4().hex[:10]
    started = time.perf_counter()
    overlay = Overlay(base, work)
    with overlay as merged:
        os.chown(merged / "home/user", 1000, 1000)
        subprocess.run(["chroot", "--userspec=1000:1000", str(merged), "/bin/bash", "-c", WORK],
                       check=True, capture_output=True)
        shutil.copy(context / "blob.bin", merged / "home/user/blob.bin")
    tree_of(base, overlay.upper, work / "tree")
    elapsed = time.perf_counter() - started
    shutil.rmtree(work)
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images-dir", default="/var/cache/shellgate-test/images-data/sandbox/images")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="shellgate-bench-templates-") as tmp:
        tmp = Path(tmp)
        data, base = data_dir_with_base(tmp, Path(args.images_dir))
        context, scratch = tmp / "context", tmp / "direct"
        context.mkdir()
        scratch.mkdir()
        (context / "blob.bin").write_bytes(os.urandom(4 << 20))
        server = Server(data_dir=data, default_image="debian-12")
        root = f"http://127.0.0.1:{server.port}"
        os.environ.update({"E2B_API_URL": root, "E2B_SANDBOX_URL": root, "E2B_API_KEY": KEY})
        try:
            builds, hosts, names = [], [], []
            for _ in range(args.rounds):
                elapsed, name = build_round(context)
                builds.append(elapsed)
                names.append(name)
                hosts.append(host_round(base, scratch, context))
            from_template, from_base = [], []
            for index in range(args.rounds):
                from_template.append(create_round(names[index % len(names)]))
                from_base.append(create_round())
        finally:
            server.stop()
        build, host = median_ms(builds), median_ms(hosts)
        print("| measurement | median ms | min ms | ratio |")
        print("|---|---|---|---|")
        print(f"| template build (SDK, cached base) | {build:.0f} | {min(builds) * 1e3:.0f} | {build / host:.2f} |")
        print(f"| the same work on the host | {host:.0f} | {min(hosts) * 1e3:.0f} | 1.00 |")
        base_create = median_ms(from_base)
        print(f"| `Sandbox.create(template)` → first output | {median_ms(from_template):.0f} "
              f"| {min(from_template) * 1e3:.0f} | {median_ms(from_template) / base_create:.2f} |")
        print(f"| `Sandbox.create()` → first output | {base_create:.0f} | {min(from_base) * 1e3:.0f} | 1.00 |")


if __name__ == "__main__":
    main()
