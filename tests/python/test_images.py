"""Images chosen per container, through the official SDK: the `image` field
(our extension, sent with `extra_body`), the `default_image` setting, and
`GET /v1/images`."""

import json
import os
import subprocess
import tempfile
from pathlib import Path

import openai
import pytest

from conftest import BINARY, Server, exec_commands, wait_until


def import_tiny_image(data_dir: Path, name: str = "tiny", marker: str = "") -> None:
    """A busybox root file system, imported as an image (before the server
    starts: one engine per data directory); `marker` goes in /etc/marker."""
    with tempfile.TemporaryDirectory() as tmp:
        rootfs = Path(tmp) / "rootfs"
        (rootfs / "bin").mkdir(parents=True)
        (rootfs / "etc").mkdir()
        (rootfs / "etc" / "marker").write_text(marker)
        (rootfs / "bin" / "busybox").write_bytes(Path("/bin/busybox").read_bytes())
        os.chmod(rootfs / "bin" / "busybox", 0o755)
        for applet in ["sh", "cat", "echo", "uname"]:
            os.symlink("busybox", rootfs / "bin" / applet)
        tarball = Path(tmp) / "tiny.tar"
        subprocess.run(["tar", "-cf", str(tarball), "-C", str(rootfs), "."], check=True)
        subprocess.run([str(BINARY), "--data-dir", str(data_dir), "image", "import", name, str(tarball)],
                       check=True, capture_output=True)


@pytest.fixture(scope="module")
def image_server(upstream):
    data_dir = Path(tempfile.mkdtemp(prefix="shellgate-images-"))
    os.chmod(data_dir, 0o755)
    import_tiny_image(data_dir)
    server = Server(data_dir, upstream_url=upstream.url, default_image="tiny", warm_containers="0").start()
    yield server
    server.stop()
    subprocess.run(["rm", "-rf", str(data_dir)], check=False)


def test_images_are_listed_with_their_sizes(image_server):
    client = image_server.client()
    listing = client.get("/images", cast_to=object)
    names = [image["name"] for image in listing["data"]]
    assert names == ["host", "tiny"]
    tiny = listing["data"][1]
    assert tiny["object"] == "image" and tiny["default"] is True
    assert tiny["size_bytes"] >= Path("/bin/busybox").stat().st_size
    assert listing["default_image"] == "tiny"


def test_containers_get_the_image_they_ask_for_or_the_default(image_server):
    client = image_server.client()
    default = client.containers.create(name="default-image")
    assert default.image == "tiny"
    out = exec_commands(client, default.id, ["cat /bin/sh >/dev/null && echo busybox; ls /usr 2>&1 | head -1"])
    assert out["output"][0]["stdout"].startswith("busybox")
    host = client.containers.create(name="host-image", extra_body={"image": "host"})
    assert host.image == "host"
    assert client.containers.retrieve(host.id).image == "host"
    out = exec_commands(client, host.id, ["test -d /usr/lib && echo host"])
    assert out["output"][0]["stdout"] == "host\n"
    listed = {c.id: c.image for c in client.containers.list()}
    assert listed[default.id] == "tiny" and listed[host.id] == "host"


def test_an_unknown_image_is_a_400_naming_the_available_ones(image_server):
    client = image_server.client()
    with pytest.raises(openai.BadRequestError) as refused:
        client.containers.create(name="nope", extra_body={"image": "debian-99"})
    assert refused.value.body["param"] == "image"
    assert "debian-99" in refused.value.message and "host, tiny" in refused.value.message
    with pytest.raises(openai.BadRequestError):
        client.containers.create(name="nope", extra_body={"image": "../etc"})
    assert not [c for c in client.containers.list(name="nope")]


def test_container_auto_takes_an_image(image_server):
    client = image_server.client()
    response = client.responses.create(
        model="scripted",
        tools=[{"type": "shell", "environment": {"type": "container_auto", "image": "host"}}],
        input="Execute: test -d /usr/lib && echo host-image",
    )
    result = next(i for i in response.output if i.type == "shell_call_output")
    assert result.output[0].stdout == "host-image\n"
    with pytest.raises(openai.BadRequestError):
        client.responses.create(
            model="scripted",
            tools=[{"type": "shell", "environment": {"type": "container_auto", "image": "debian-99"}}],
            input="Execute: true",
        )


def test_a_missing_default_image_falls_back_to_host_and_says_so(server):
    # The session server's default is debian-12, which nobody built there.
    client = server.client()
    container = client.containers.create(name="fallback")
    assert container.image == "host"
    assert "is not there yet" in server.log.read_text()


def health(server) -> dict:
    import json
    import urllib.request
    with urllib.request.urlopen(f"http://{server.host}:{server.port}/healthz", timeout=5) as response:
        return json.load(response)


def test_a_first_start_builds_the_default_image_in_the_background(upstream):
    """The README's serve command on a fresh machine: the default image is
    built in the background (here the small debian-12-slim recipe), its
    progress in /healthz and the log, `host` meanwhile."""
    data_dir = Path(tempfile.mkdtemp(prefix="shellgate-first-start-"))
    os.chmod(data_dir, 0o755)
    server = Server(data_dir, upstream_url=upstream.url, default_image="debian-12-slim",
                    build_default_image="true", warm_containers="0").start()
    try:
        client = server.client()
        status = health(server)
        assert status["status"] == "ok"
        assert status["default_image"]["image"] == "debian-12-slim"
        assert status["default_image"]["status"] in ("building", "ready")
        early = client.containers.create(name="before-the-build")
        if health(server)["default_image"]["status"] == "building":
            assert early.image == "host"
        log = server.log.read_text()
        assert "building it in the background" in log, log[-2000:]
        seen = set()

        def built():
            build = health(server)["default_image"]
            seen.add(round(build["progress"], 2))
            return build["status"] != "building"

        # Sampled once a second: the progress it went through is checked.
        assert wait_until(built, 900, interval=1), health(server)["default_image"]
        build = health(server)["default_image"]
        assert build["status"] == "ready" and build["progress"] == 1.0, build
        assert len(seen) > 2, seen  # progress moved through mmdebstrap's stages
        assert "image debian-12-slim is built" in server.log.read_text()
        # Its runtimes are listed as soon as it is ready, without a restart
        # or an `image verify`.
        listing = client.get("/images", cast_to=object)
        slim = next(i for i in listing["data"] if i["name"] == "debian-12-slim")
        assert slim["runtimes"].get("python", "").startswith("3."), slim
        late = client.containers.create(name="after-the-build")
        assert late.image == "debian-12-slim"
        out = exec_commands(client, late.id, ["cat /etc/debian_version; command -v curl || echo no-curl"])
        stdout = out["output"][0]["stdout"]
        assert stdout.startswith("12.") and stdout.endswith("no-curl\n"), stdout
        # A container made before keeps the image it was made with.
        assert client.containers.retrieve(early.id).image == early.image
        # The next start finds it built: nothing to do.
        server.stop()
        server.start()
        assert "default_image" not in health(server)
        listing = server.client().get("/images", cast_to=object)
        assert "debian-12-slim" in [i["name"] for i in listing["data"]]
        # Built from an older recipe (a shellgate upgrade changed it): the
        # start rebuilds it, and containers use the old build meanwhile.
        server.stop()
        info_path = data_dir / "sandbox" / "images" / "debian-12-slim" / "info.json"
        info = json.loads(info_path.read_text())
        current = info["recipe_hash"]
        info["recipe_hash"] = "0" * 64
        info_path.write_text(json.dumps(info))
        server.start()
        assert health(server)["default_image"]["image"] == "debian-12-slim"
        assert "built from an older recipe: rebuilding it" in server.log.read_text()
        assert server.client().containers.create(name="during-the-rebuild").image == "debian-12-slim"
        assert wait_until(built, 900, interval=1), health(server)["default_image"]
        assert health(server)["default_image"]["status"] == "ready"
        assert json.loads(info_path.read_text())["recipe_hash"] == current
    finally:
        server.stop()
        subprocess.run(["rm", "-rf", str(data_dir)], check=False)


def test_a_container_keeps_its_image_when_the_image_is_replaced(upstream):
    """Importing (or building) an image again retires the old tree instead
    of deleting it under the containers made from it; it goes when the last
    of them does."""
    data_dir = Path(tempfile.mkdtemp(prefix="shellgate-revisions-"))
    os.chmod(data_dir, 0o755)
    import_tiny_image(data_dir, marker="first")
    server = Server(data_dir, upstream_url=upstream.url, default_image="tiny", warm_containers="0").start()
    try:
        client = server.client()
        old = client.containers.create(name="old")
        untouched = client.containers.create(name="untouched")
        assert exec_commands(client, old.id, ["cat /etc/marker"])["output"][0]["stdout"] == "first"
        server.stop()
        import_tiny_image(data_dir, marker="second")
        retired = data_dir / "sandbox" / "images" / "tiny" / "retired"
        assert len(list(retired.iterdir())) == 1
        server.start()
        client = server.client()
        new = client.containers.create(name="new")
        assert exec_commands(client, new.id, ["cat /etc/marker"])["output"][0]["stdout"] == "second"
        # The old container wakes (a restart stopped it) on its own tree.
        assert exec_commands(client, old.id, ["cat /etc/marker"])["output"][0]["stdout"] == "first"
        client.containers.delete(old.id)
        # One made from it, not read since the restart, keeps it still.
        containers = data_dir / "sandbox" / "containers"
        assert wait_until(lambda: not any(p.name.startswith(".trash-") for p in containers.iterdir()), 20)
        assert len(list(retired.iterdir())) == 1
        client.containers.delete(untouched.id)
        assert wait_until(lambda: not any(retired.iterdir()), 20), list(retired.iterdir())
        assert exec_commands(client, new.id, ["cat /etc/marker"])["output"][0]["stdout"] == "second"
    finally:
        server.stop()
        subprocess.run(["rm", "-rf", str(data_dir)], check=False)


def test_an_imported_oci_image_shows_its_config_and_containers_of_it_follow_it(upstream):
    """A buildah-made OCI archive (no registry), imported before the server
    starts: `GET /v1/images` shows its run configuration, and a container
    made from it through the API starts commands in its WorkingDir with its
    Env."""
    data_dir = Path(tempfile.mkdtemp(prefix="shellgate-oci-images-"))
    os.chmod(data_dir, 0o755)
    with tempfile.TemporaryDirectory() as tmp:
        rootfs = Path(tmp) / "rootfs"
        (rootfs / "bin").mkdir(parents=True)
        (rootfs / "etc").mkdir()
        (rootfs / "bin" / "busybox").write_bytes(Path("/bin/busybox").read_bytes())
        os.chmod(rootfs / "bin" / "busybox", 0o755)
        for applet in ["sh", "cat", "echo", "pwd"]:
            os.symlink("busybox", rootfs / "bin" / applet)
        buildah = ["buildah", "--root", f"{tmp}/storage", "--runroot", f"{tmp}/run", "--storage-driver", "vfs"]

        def run(*args: str) -> str:
            done = subprocess.run([*buildah, *args], capture_output=True, text=True)
            assert done.returncode == 0, f"buildah {args}: {done.stderr}"
            return done.stdout.strip()

        container = run("from", "scratch")
        run("copy", container, str(rootfs), "/")
        run("config", "--env", "GREETING=from the image", "--workingdir", "/srv/app", "--user", "1000",
            "--entrypoint", '["/bin/sh"]', container)
        archive = f"{tmp}/app.tar"
        run("commit", "-q", container, f"oci-archive:{archive}")
        imported = subprocess.run([str(BINARY), "--data-dir", str(data_dir), "image", "import", "app", archive],
                                  capture_output=True, text=True)
        assert imported.returncode == 0, imported.stderr
    server = Server(data_dir, upstream_url=upstream.url, default_image="app", warm_containers="0").start()
    try:
        client = server.client()
        listing = client.get("/images", cast_to=object)
        app = next(image for image in listing["data"] if image["name"] == "app")
        assert app["source_format"] == "oci-archive", app
        assert app["config"]["working_dir"] == "/srv/app", app
        assert "GREETING=from the image" in app["config"]["env"], app
        assert app["config"]["entrypoint"] == ["/bin/sh"], app
        host = next(image for image in listing["data"] if image["name"] == "host")
        assert "config" not in host and "source_format" not in host, host
        made = client.containers.create(name="oci-app")
        assert made.image == "app"
        out = exec_commands(client, made.id, ['pwd; echo "$GREETING"'])
        assert out["output"][0]["stdout"] == "/srv/app\nfrom the image\n", out
    finally:
        server.stop()
        subprocess.run(["rm", "-rf", str(data_dir)], check=False)
