#!/usr/bin/env python3
"""An image build from a cached base (`shellgate image build --dockerfile`)
against the same steps run directly on the host, in the same run.

The base is `debian-12`, hard-linked from the image cache the test suite
shares (`--images-dir`; nothing is written there) into a data directory of
this run's own. The Dockerfile copies a Debian package from the context,
removes and reinstalls it with `dpkg` as root, writes under `/etc`, sets
`ENV` and `WORKDIR`, copies a file and runs a step as the sandbox user: what
a template's root steps do, without the network (this host's resolver
points the archive at a documentation address).

The baseline is the fastest honest way to get the same image tree on the
host, with no isolation at all: an overlay of the base (as the builder's
sandbox has), the same commands run as real root by `chroot`, then the
image made as the builder makes it (a hard-linked copy of the base, the
upper layer copied over it, the whiteouts applied). Rounds alternate.
Needs root, the shared debian-12 image and `target/*/shellgate`.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BINARY = Path(os.environ.get("SHELLGATE_BIN", ROOT / "target" / "release" / "shellgate"))
PACKAGE = "python3-jdcal_1.0-1.3_all.deb"

STEPS = [
    "dpkg --purge --force-depends python3-jdcal",
    f"dpkg -i /tmp/{PACKAGE}",
    "python3 -c 'import jdcal'",
    f"rm /tmp/{PACKAGE}",
    "echo built > /etc/motd",
]

DOCKERFILE = f"""FROM debian-12
COPY {PACKAGE} /tmp/
RUN {' && '.join(STEPS)}
ENV APP_HOME=/opt/app
WORKDIR /opt/app
COPY app.py ./
USER user
RUN echo made-by-user > /home/user/note
"""


def shellgate_build(data, context, name):
    done = subprocess.run([str(BINARY), "--data-dir", str(data), "image", "build", name,
                           "--dockerfile", str(context / "Dockerfile")],
                          capture_output=True, text=True, env={**os.environ, "SHELLGATE_LOG": "error"})
    if done.returncode != 0:
        raise SystemExit(f"image build {name} failed:\n{done.stderr}")


class Overlay:
    """An overlay of `base` under `work` (upper, work, merged), mounted
    while the `with` lasts: the writable view a build's steps run in."""

    def __init__(self, base, work):
        self.base, self.upper, self.workdir, self.merged = (
            base, work / "upper", work / "work", work / "merged")

    def __enter__(self):
        for d in (self.upper, self.workdir, self.merged):
            d.mkdir(parents=True)
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        f"lowerdir={self.base},upperdir={self.upper},workdir={self.workdir}",
                        str(self.merged)], check=True)
        return self.merged

    def __exit__(self, *_):
        subprocess.run(["umount", str(self.merged)], check=True)


def tree_of(base, upper, tree):
    """The image tree as the builder makes it: a hard-linked copy of the
    base, the upper layer's whiteouts applied and the rest copied over."""
    subprocess.run(["cp", "-a", "--link", "-T", str(base), str(tree)], check=True)
    # Whiteouts (0/0 character devices) remove; the rest is copied over.
    for path in sorted(upper.rglob("*"), reverse=True):
        if path.is_char_device() and os.stat(path, follow_symlinks=False).st_rdev == 0:
            target = tree / path.relative_to(upper)
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
            path.unlink()
    subprocess.run(["cp", "-a", "--remove-destination", "-T", str(upper), str(tree)], check=True)


def direct_build(base, scratch, context, name):
    """The same steps on the host: overlay, chroot as root, then the tree."""
    work = scratch / name
    overlay = Overlay(base, work)
    with overlay as merged:
        shutil.copy(context / PACKAGE, merged / "tmp" / PACKAGE)
        subprocess.run(["chroot", str(merged), "/bin/sh", "-c", " && ".join(STEPS)],
                       check=True, capture_output=True)
        (merged / "opt/app").mkdir(parents=True, exist_ok=True)
        # The builder's home is the sandbox user's own directory.
        os.chown(merged / "home/user", 1000, 1000)
        shutil.copy(context / "app.py", merged / "opt/app/app.py")
        subprocess.run(["chroot", "--userspec=1000:1000", str(merged), "/bin/sh", "-c",
                        "echo made-by-user > /home/user/note"], check=True, capture_output=True)
    tree_of(base, overlay.upper, work / "tree")


def data_dir_with_base(tmp, cached):
    """A data directory under `tmp` whose image store holds the cached
    `debian-12`, hard-linked (nothing is written to the cache); its path
    and the base's root."""
    # The containers' helpers reach the data directory as other ids.
    tmp.chmod(0o755)
    data = tmp / "data"
    images = data / "sandbox" / "images"
    images.mkdir(parents=True)
    subprocess.run(["cp", "-a", "--link", str(cached / "debian-12"), str(images)], check=True)
    (images / "debian-12" / ".lock").unlink(missing_ok=True)
    return data, images / "debian-12" / "rootfs"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images-dir", default="/var/cache/shellgate-test/images-data/sandbox/images")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    cached = Path(args.images_dir)
    with tempfile.TemporaryDirectory(prefix="shellgate-bench-build-") as tmp:
        tmp = Path(tmp)
        data, base = data_dir_with_base(tmp, cached)
        images = data / "sandbox" / "images"
        context = tmp / "context"
        context.mkdir()
        shutil.copy(cached / ".cache" / "apt" / "debian-12" / PACKAGE, context / PACKAGE)
        (context / "app.py").write_text("print('hello')\n")
        (context / "Dockerfile").write_text(DOCKERFILE)
        scratch = tmp / "direct"
        timings = {"shellgate": [], "direct": []}
        for round_ in range(args.rounds):
            started = time.perf_counter()
            shellgate_build(data, context, f"bench-{round_}")
            timings["shellgate"].append(time.perf_counter() - started)
            started = time.perf_counter()
            direct_build(base, scratch, context, f"direct-{round_}")
            timings["direct"].append(time.perf_counter() - started)
            shutil.rmtree(scratch / f"direct-{round_}")
            shutil.rmtree(images / f"bench-{round_}")
        direct = statistics.median(timings["direct"])
        print("| build | median s | min s | ratio to direct |")
        print("|---|---|---|---|")
        for name, values in timings.items():
            median = statistics.median(values)
            print(f"| {name} | {median:.2f} | {min(values):.2f} | {median / direct:.2f} |")


if __name__ == "__main__":
    main()
