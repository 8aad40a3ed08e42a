"""`POST /v1/images` against a real `shellgate serve`, with the requests
library: a Dockerfile built by the server's image builder (a root `RUN`
writing to /etc and /usr/local, `COPY` from the context, `ENV`, `WORKDIR`,
`USER`) and a container made from the image sees all of it; the job's
status and log paged as a client polls them; a failing step reported with
its step; an OCI image layout imported; hostile Dockerfiles and contexts
refused with a 400 naming the field; the image is its project's alone."""

import hashlib
import io
import json
import os
import subprocess
import tarfile
import tempfile
import uuid
from pathlib import Path

import pytest
import requests

from conftest import (CLUSTER_MODE, KEY_A, KEY_B, Server, busybox_image_server, exec_commands,
                      import_busybox_image, tiny_rootfs, wait_until)

pytestmark = pytest.mark.skipif(
    CLUSTER_MODE, reason="its server starts with a base image imported into its data directory "
                         "(test_cluster_images.py builds images in a cluster)"
)

# The busybox applets the builder's steps and these tests use.
APPLETS = ["sh", "cat", "echo", "id", "mkdir", "cp", "chown", "chmod", "dirname",
           "ls", "rm", "touch", "sleep", "grep", "pwd", "test", "["]


def busybox_rootfs(rootfs: Path) -> None:
    tiny_rootfs(rootfs, APPLETS)


@pytest.fixture(scope="module")
def server(upstream):
    yield from busybox_image_server(upstream, "shellgate-image-builds-", "tiny", APPLETS)


def v1(server, method: str, path: str, key: str = KEY_A, **kwargs) -> requests.Response:
    return requests.request(method, f"{server.base_url}{path}",
                            headers={"Authorization": f"Bearer {key}"}, timeout=300, **kwargs)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def tar_of(files: dict, gzip: bool = False) -> bytes:
    """A tar of `files` (name → bytes), gzipped if asked."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz" if gzip else "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def build(server, name: str, dockerfile: str, context: bytes = None, key: str = KEY_A) -> requests.Response:
    files = {"name": (None, name), "dockerfile": (None, dockerfile)}
    if context is not None:
        files["context"] = ("context.tar", context, "application/x-tar")
    return v1(server, "POST", "/images", key=key, files=files)


def finished(server, build_id: str, key: str = KEY_A) -> dict:
    """The job once it has ended (a client polling its status)."""
    seen = {}

    def ended():
        status = v1(server, "GET", f"/images/builds/{build_id}", key=key)
        assert status.status_code == 200, status.text
        seen["job"] = status.json()
        return seen["job"]["status"] in ("ready", "error")

    assert wait_until(ended, timeout=600, interval=0.2), seen
    return seen["job"]


def whole_log(server, build_id: str, page: int) -> list:
    """The job's log read page by page from `next_log_offset`."""
    entries, offset = [], 0
    while True:
        status = v1(server, "GET", f"/images/builds/{build_id}?log_offset={offset}&log_limit={page}")
        assert status.status_code == 200, status.text
        body = status.json()
        entries += body["logs"]
        if not body["logs"]:
            return entries
        assert body["next_log_offset"] == offset + len(body["logs"]), body
        offset = body["next_log_offset"]


def test_a_built_image_has_its_root_steps_copies_env_workdir_and_user(server):
    name = unique("built")
    dockerfile = (
        "FROM tiny\n"
        "ENV GREETING=\"hi there\"\n"
        "# The build sandbox's root writes anywhere in the image.\n"
        "RUN echo \"$GREETING\" > /etc/greeting && mkdir -p /usr/local/share/app \\\n"
        "    && id -u > /usr/local/share/app/built-by\n"
        "WORKDIR /srv/app\n"
        "COPY hello.txt ./\n"
        "COPY conf /etc/app/\n"
        "RUN mkdir mine && chown 1000:1000 mine\n"
        "USER 1000:1000\n"
        "RUN id -u > mine/step-user\n"
    )
    context = tar_of({"hello.txt": b"hello from the context\n", "conf/app.ini": b"[app]\n"}, gzip=True)
    made = build(server, name, dockerfile, context)
    assert made.status_code == 202, made.text
    job = made.json()
    assert job["object"] == "image.build" and job["kind"] == "build", job
    assert job["status"] in ("queued", "building"), job
    done = finished(server, job["id"])
    assert done["status"] == "ready", (done, whole_log(server, job["id"], page=1000))
    assert done["revision"], done

    log = whole_log(server, job["id"], page=2)
    assert [e["message"] for e in log] == [e["message"] for e in whole_log(server, job["id"], page=1000)]
    messages = [e["message"] for e in log]
    assert any(m.startswith("RUN echo") for m in messages), messages
    assert any(e["step"] == 2 and e["line"] == 4 and e["message"].startswith("RUN") for e in log), log
    assert f"image {name} ready" in messages, messages

    image = v1(server, "GET", f"/images/{name}")
    assert image.status_code == 200, image.text
    assert "GREETING=hi there" in image.json()["config"]["env"], image.json()
    assert image.json()["config"]["working_dir"] == "/srv/app", image.json()
    listed = v1(server, "GET", "/images").json()["data"]
    assert name in [i["id"] for i in listed], listed

    container = v1(server, "POST", "/containers", json={"name": unique("c"), "image": name})
    assert container.status_code == 200, container.text
    out = exec_commands(server.client(KEY_A), container.json()["id"], [
        "cat /etc/greeting /usr/local/share/app/built-by; echo \"$GREETING\"; pwd; "
        "cat hello.txt /etc/app/app.ini mine/step-user",
    ])["output"][0]
    assert out["outcome"]["exit_code"] == 0, out
    assert out["stdout"].split("\n") == [
        "hi there", "0", "hi there", "/srv/app", "hello from the context", "[app]", "1000", "",
    ], out

    # The image is the project's own: another project neither sees nor uses it.
    assert v1(server, "GET", f"/images/{name}", key=KEY_B).status_code == 404
    assert name not in [i["id"] for i in v1(server, "GET", "/images", key=KEY_B).json()["data"]]
    other = v1(server, "POST", "/containers", key=KEY_B, json={"name": unique("c"), "image": name})
    assert other.status_code == 400, other.text
    assert v1(server, "GET", f"/images/builds/{job['id']}", key=KEY_B).status_code == 404
    taken = build(server, name, "FROM tiny\nRUN true\n", key=KEY_B)
    assert taken.status_code == 409, taken.text


def test_a_failing_step_fails_the_job_with_its_step_and_installs_nothing(server):
    name = unique("failing")
    made = build(server, name, "FROM tiny\nRUN echo first-step-ran\nRUN echo about to fail >&2; exit 3\n")
    assert made.status_code == 202, made.text
    done = finished(server, made.json()["id"])
    assert done["status"] == "error", done
    assert done["error"]["step"] == 2, done
    assert "exit code 3" in done["error"]["message"], done
    messages = [e["message"] for e in whole_log(server, made.json()["id"], page=100)]
    assert "first-step-ran" in messages and "about to fail" in messages, messages
    assert v1(server, "GET", f"/images/{name}").status_code == 404


def oci_layout(files: dict) -> bytes:
    """An OCI image layout, as a tar, of one layer holding `files` over a
    busybox root, its config setting an ENV."""
    with tempfile.TemporaryDirectory() as tmp:
        rootfs = Path(tmp) / "rootfs"
        busybox_rootfs(rootfs)
        for name, data in files.items():
            path = rootfs / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        layer = Path(tmp) / "layer.tar"
        subprocess.run(["tar", "-cf", str(layer), "-C", str(rootfs), "."], check=True)
        blobs = {}

        def blob(data: bytes, media_type: str) -> dict:
            digest = hashlib.sha256(data).hexdigest()
            blobs[digest] = data
            return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}

        layer_bytes = layer.read_bytes()
        config = json.dumps({
            "architecture": "amd64", "os": "linux",
            "config": {"Env": ["IMPORTED=yes"], "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(layer_bytes).hexdigest()}"]},
        }).encode()
        manifest = json.dumps({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": blob(config, "application/vnd.oci.image.config.v1+json"),
            "layers": [blob(layer_bytes, "application/vnd.oci.image.layer.v1.tar")],
        }).encode()
        index = json.dumps({
            "schemaVersion": 2,
            "manifests": [blob(manifest, "application/vnd.oci.image.manifest.v1+json")],
        }).encode()
        layout = Path(tmp) / "layout"
        (layout / "blobs" / "sha256").mkdir(parents=True)
        for digest, data in blobs.items():
            (layout / "blobs" / "sha256" / digest).write_bytes(data)
        (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
        (layout / "index.json").write_bytes(index)
        out = Path(tmp) / "layout.tar"
        subprocess.run(["tar", "-cf", str(out), "-C", str(layout), "."], check=True)
        return out.read_bytes()


def test_an_oci_layout_is_imported_as_the_projects_image(server):
    name = unique("imported")
    archive = oci_layout({"etc/imported.txt": b"from the layer\n"})
    made = v1(server, "POST", "/images",
              files={"name": (None, name), "file": ("image.tar", archive, "application/x-tar")})
    assert made.status_code == 202, made.text
    assert made.json()["kind"] == "import", made.json()
    done = finished(server, made.json()["id"])
    assert done["status"] == "ready", done
    image = v1(server, "GET", f"/images/{name}").json()
    assert image["source_format"] == "oci-archive", image
    container = v1(server, "POST", "/containers", json={"name": unique("c"), "image": name})
    assert container.status_code == 200, container.text
    out = exec_commands(server.client(KEY_A), container.json()["id"],
                        ["cat /etc/imported.txt; echo \"$IMPORTED\""])["output"][0]
    assert out["stdout"] == "from the layer\nyes\n", out
    assert v1(server, "GET", f"/images/{name}", key=KEY_B).status_code == 404


def test_a_deleted_image_is_gone_and_its_containers_keep_it_until_they_go(server):
    name = unique("deleted")
    made = build(server, name, "FROM tiny\nRUN echo kept > /etc/mark\n")
    assert made.status_code == 202, made.text
    assert finished(server, made.json()["id"])["status"] == "ready"
    container = v1(server, "POST", "/containers", json={"name": unique("c"), "image": name})
    assert container.status_code == 200, container.text
    container_id = container.json()["id"]

    assert v1(server, "DELETE", f"/images/{name}", key=KEY_B).status_code == 404, "another project's"
    for built_in in ("tiny", "host"):
        refused = v1(server, "DELETE", f"/images/{built_in}")
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["param"] == "name", refused.json()
    deleted = v1(server, "DELETE", f"/images/{name}")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json() == {"id": name, "object": "image.deleted", "deleted": True}
    assert v1(server, "GET", f"/images/{name}").status_code == 404
    assert name not in [i["name"] for i in v1(server, "GET", "/images").json()["data"]]
    again = v1(server, "DELETE", f"/images/{name}")
    assert again.status_code == 404 and again.json()["error"]["code"] == "not_found", again.text
    refused = v1(server, "POST", "/containers", json={"name": unique("c"), "image": name})
    assert refused.status_code == 400, refused.text

    # The container made before keeps its tree, and so does the disk.
    out = exec_commands(server.client(KEY_A), container_id, ["cat /etc/mark"])["output"][0]
    assert out["stdout"] == "kept\n", out
    image_dir = server.data_dir / "sandbox" / "images" / name
    assert image_dir.is_dir() and not (image_dir / "rootfs").exists()
    assert v1(server, "DELETE", f"/containers/{container_id}").status_code == 200
    assert wait_until(lambda: not image_dir.exists(), timeout=60), list(image_dir.rglob("*"))[:5]

    # The name is free again.
    remade = build(server, name, "FROM tiny\nRUN echo again > /etc/mark\n")
    assert remade.status_code == 202, remade.text
    assert finished(server, remade.json()["id"])["status"] == "ready"


@pytest.mark.parametrize("dockerfile,context,param,words", [
    ("FROM tiny\nADD http://example.com/x /x\n", None, "dockerfile", "ADD"),
    ("FROM tiny\nCOPY ../secret /x\n", tar_of({"a": b"a"}), "dockerfile", "leave the context"),
    ("FROM tiny\nRUN true\nHEALTHCHECK CMD true\n", None, "dockerfile", "HEALTHCHECK"),
    ("FROM missing-image\nRUN true\n", None, "dockerfile", "missing-image"),
    ("FROM tiny\nCOPY a /a\n", None, "context", "context"),
    ("FROM tiny\nCOPY a /a\n", tar_of({"../evil": b"x"}), "context", "leaves the context"),
    ("FROM tiny\nCOPY a /a\n", tar_of({"/etc/evil": b"x"}), "context", "leaves the context"),
    ("FROM tiny\nCOPY a /a\n", b"not a tar at all" * 64, "context", "tar"),
])
def test_hostile_dockerfiles_and_contexts_are_refused_naming_the_field(server, dockerfile, context, param, words):
    refused = build(server, unique("hostile"), dockerfile, context)
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["param"] == param and words in error["message"], error


def test_names_and_fields_are_checked(server):
    for name, status in [("host", 400), ("../x", 400), ("tiny", 409)]:
        refused = build(server, name, "FROM tiny\nRUN true\n")
        assert refused.status_code == status, (name, refused.text)
    both = v1(server, "POST", "/images", files={
        "name": (None, unique("both")), "dockerfile": (None, "FROM tiny\n"),
        "file": ("x.tar", b"x", "application/x-tar")})
    assert both.status_code == 400, both.text
    json_body = v1(server, "POST", "/images", json={"name": "x"})
    assert json_body.status_code == 415, json_body.text
    missing = v1(server, "GET", "/images/builds/imgb_missing")
    assert missing.status_code == 404, missing.text
    bad_page = v1(server, "GET", "/images/builds/imgb_missing?log_limit=0")
    assert bad_page.status_code == 400, bad_page.text


def test_a_job_the_server_stopped_during_is_failed_at_its_next_start(upstream):
    data_dir = Path(tempfile.mkdtemp(prefix="shellgate-image-builds-stop-"))
    os.chmod(data_dir, 0o755)
    import_busybox_image(data_dir, "tiny", APPLETS)
    server = Server(data_dir, upstream_url=upstream.url, default_image="tiny", warm_containers="0").start()
    try:
        name = unique("stopped")
        made = build(server, name, "FROM tiny\nRUN sleep 600\n")
        assert made.status_code == 202, made.text
        build_id = made.json()["id"]
        # The step is logged as it starts (its output when it ends).
        assert wait_until(
            lambda: "RUN sleep 600" in [e["message"] for e in whole_log(server, build_id, page=100)],
            timeout=120, interval=0.2,
        )
        server.kill9()
        server.start()
        status = v1(server, "GET", f"/images/builds/{build_id}")
        assert status.status_code == 200, status.text
        job = status.json()
        assert job["status"] == "error" and "server stopped" in job["error"]["message"], job
        assert v1(server, "GET", f"/images/{name}").status_code == 404
        # The project's next job runs (nothing of the stopped one holds it).
        again = build(server, name, "FROM tiny\nRUN true\n")
        assert again.status_code == 202, again.text
        assert finished(server, again.json()["id"])["status"] == "ready"
    finally:
        server.stop()
        subprocess.run(["rm", "-rf", str(data_dir)], check=False)
