"""Images chosen per container, through the official SDK: the `image` field
(our extension, sent with `extra_body`), the `default_image` setting, and
`GET /v1/images`."""

import os
import subprocess
import tempfile
from pathlib import Path

import openai
import pytest

from conftest import BINARY, Server, exec_commands


def import_tiny_image(data_dir: Path, name: str = "tiny") -> None:
    """A busybox root file system, imported as an image (before the server
    starts: one engine per data directory)."""
    with tempfile.TemporaryDirectory() as tmp:
        rootfs = Path(tmp) / "rootfs"
        (rootfs / "bin").mkdir(parents=True)
        (rootfs / "etc").mkdir()
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
