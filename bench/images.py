#!/usr/bin/env python3
"""Images: container create time per image, and the disk 100 containers of
one image use. Run by bench/run.sh; needs root and target/release/shellgate.

The server runs on a data directory of its own, with the images from
`--images-dir` (built there with `shellgate image build` if missing: the
cache the test suite shares, by default). Every image is measured in the
same run, from scratch (no warm containers, so no image has a head start):
`POST /v1/containers` until it answers, then the first command
(`POST /v1/containers/{id}/exec` of `true`), as a client times them.

The disk figure is what the host's file system really holds (allocated
blocks, `du`): the image once, plus each container's own disk image (a
sparse ext4 file) after a command that writes a file. The baseline is what
a copy of the image per container (a Docker-less `cp -a` sandbox) would take.
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BINARY = Path(os.environ.get("SHELLGATE_BIN", ROOT / "target" / "release" / "shellgate"))
KEY = "sk-bench-images-project"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(port, method, path, body=None, timeout=120):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                     headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)


def du_bytes(path):
    out = subprocess.run(["du", "-s", "--block-size=1", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--images-dir", default=os.environ.get(
        "SHELLGATE_TEST_IMAGE_CACHE", "/var/cache/shellgate-test/images-data") + "/sandbox/images")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--containers", type=int, default=100)
    args = parser.parse_args()
    images_dir = Path(args.images_dir)
    cache_data = images_dir.parent.parent
    for image in ["debian-12-slim", "debian-12"]:
        subprocess.run([str(BINARY), "--data-dir", str(cache_data), "image", "build", image],
                       check=True, stdout=subprocess.DEVNULL)
    data_dir = Path(tempfile.mkdtemp(prefix="shellgate-bench-images-"))
    os.chmod(data_dir, 0o755)
    port = free_port()
    env = {"PATH": os.environ["PATH"], "SHELLGATE_LOG": "warn", "SHELLGATE_API_KEYS": KEY,
           "SHELLGATE_WARM_CONTAINERS": "0", "SHELLGATE_BUILD_DEFAULT_IMAGE": "false",
           "SHELLGATE_IMAGES_DIR": str(images_dir), "SHELLGATE_MAX_RUNNING_CONTAINERS_PER_PROJECT": "1000"}
    server = subprocess.Popen([str(BINARY), "--data-dir", str(data_dir), "serve", "--listen", f"127.0.0.1:{port}"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except OSError:
                assert time.time() < deadline, "server did not start"
                time.sleep(0.05)
        images = ["host", "debian-12-slim", "debian-12"]
        creates = {i: [] for i in images}
        firsts = {i: [] for i in images}
        # Interleaved, so that drift on a noisy machine hits every image alike.
        for _ in range(args.rounds):
            for image in images:
                start = time.perf_counter()
                container = call(port, "POST", "/v1/containers", {"name": "bench", "image": image})
                created = time.perf_counter()
                result = call(port, "POST", f"/v1/containers/{container['id']}/exec", {"commands": ["true"]})
                ran = time.perf_counter()
                assert result["output"][0]["outcome"]["exit_code"] == 0, result
                creates[image].append((created - start) * 1000)
                firsts[image].append((ran - created) * 1000)
                call(port, "DELETE", f"/v1/containers/{container['id']}")
                time.sleep(0.025)
        print("| image | create median ms | create p90 ms | first command median ms | create ratio to host |")
        print("|---|---|---|---|---|")
        host_median = statistics.median(creates["host"])
        for image in images:
            c = sorted(creates[image])
            print(f"| `{image}` | {statistics.median(c):.2f} | {c[int(len(c) * 0.9) - 1]:.2f} | "
                  f"{statistics.median(firsts[image]):.2f} | {statistics.median(c) / host_median:.2f} |")

        # 100 containers of debian-12, each with a file of its own.
        containers_dir = data_dir / "sandbox" / "containers"
        before = du_bytes(containers_dir)
        made = []
        for n in range(args.containers):
            container = call(port, "POST", "/v1/containers", {"name": f"disk-{n}", "image": "debian-12"})
            call(port, "POST", f"/v1/containers/{container['id']}/exec",
                 {"commands": [f"echo container {n} > /mnt/data/note.txt; python3 -c 'print(1)' >/dev/null"]})
            made.append(container["id"])
        containers_bytes = du_bytes(containers_dir) - before
        image_bytes = du_bytes(images_dir / "debian-12" / "rootfs")
        total = image_bytes + containers_bytes
        copies = image_bytes * args.containers
        print()
        print(f"| {args.containers} containers of `debian-12` | bytes on disk |")
        print("|---|---|")
        print(f"| the image, once | {image_bytes / 2**20:.0f} MiB |")
        print(f"| the containers' own disks and state | {containers_bytes / 2**20:.1f} MiB "
              f"({containers_bytes / args.containers / 2**10:.0f} KiB each) |")
        print(f"| total | {total / 2**20:.0f} MiB |")
        print(f"| baseline: a copy of the image per container | {copies / 2**30:.1f} GiB "
              f"({copies / total:.0f} × shellgate) |")
        for container_id in made:
            call(port, "DELETE", f"/v1/containers/{container_id}")
    finally:
        server.terminate()
        server.wait(timeout=60)
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
