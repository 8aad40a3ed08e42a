"""E2B's template API through the unmodified `e2b` SDK: a template built
by the SDK's builder (`run_cmd`, `copy`, `set_envs`, a start command and
its ready check) against a real `shellgate serve`, a sandbox made from it,
a failing step reported as E2B reports it, `Template.exists` of the
server's and of a missing template (E2B's `{code, message}` 404), an
OCI image shellgate cannot build on, and a template deleted; a root step
(`run_cmd(…, user='root')`) writing to /etc, kept in the template's image.

Templates are images built by the server's image builder, so the module's
server has a real default image: busybox, util-linux's setpriv (steps of
another user) and a `/bin/bash` that is busybox's shell (what E2B's SDK
runs commands with). That image is imported into the server's data directory
before it starts, which a cluster's nodes are not: the module is skipped
there (tests/python/test_cluster_images.py builds in a cluster)."""

import uuid

import pytest
import requests

from conftest import CLUSTER_MODE, E2B_KEY_A, E2B_KEY_B, busybox_image_server

pytestmark = pytest.mark.skipif(
    CLUSTER_MODE, reason="its server starts with a base image imported into its data directory "
                         "(test_cluster_images.py builds images in a cluster)"
)

e2b_sdk = pytest.importorskip("e2b")
from e2b import Sandbox, Template, wait_for_file  # noqa: E402
from e2b.exceptions import BuildException  # noqa: E402


APPLETS = ["sh", "cat", "echo", "id", "mkdir", "cp", "chown", "chmod", "dirname", "ls", "rm",
           "touch", "sleep", "test", "[", "mv", "ln", "env"]


@pytest.fixture(scope="module")
def server(upstream):
    # A `/bin/bash` that is busybox's shell: what the SDK runs commands with.
    yield from busybox_image_server(upstream, "shellgate-e2b-templates-", "base-tiny", APPLETS,
                                    {"/bin/bash": '#!/bin/sh\nexec /bin/sh "$@"\n'})


def root(server) -> str:
    return f"http://{server.host}:{server.port}"


def unique(prefix: str) -> str:
    """A template name of this test's own (the session's server is shared)."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def test_a_built_template_gives_its_sandboxes_the_files_env_and_start_command(server, e2b, tmp_path):
    (tmp_path / "greeting.txt").write_text("hello from the build context\n")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "main.py").write_text("print('app')\n")
    template = (
        Template(file_context_path=str(tmp_path))
        .from_base_image()
        .run_cmd("echo built > /home/user/built.txt && mkdir -p /home/user/data")
        .copy("greeting.txt", "/home/user/greeting.txt")
        .copy("app", "/home/user/app")
        .set_envs({"TEMPLATE_GREETING": "hi from the template"})
        .set_start_cmd("echo started > /home/user/started.txt && sleep 600", wait_for_file("/home/user/started.txt"))
    )
    name = unique("files-env-start")
    logs = []
    info = Template.build(template, name, on_build_logs=logs.append)
    assert info.template_id, info
    messages = [entry.message for entry in logs]
    assert any("Template ready" in m for m in messages), messages
    assert Template.exists(name) is True

    sandbox = Sandbox.create(template=name, timeout=120)
    try:
        checked = sandbox.commands.run(
            "cat /home/user/built.txt /home/user/greeting.txt /home/user/started.txt; "
            "cat /home/user/app/main.py; echo \"$TEMPLATE_GREETING\""
        )
        assert checked.stdout.split("\n") == [
            "built",
            "hello from the build context",
            "started",
            "print('app')",
            "hi from the template",
            "",
        ], (checked.stdout, checked.stderr)
        # The create's own environment is laid over the template's.
        assert sandbox.get_info().template_id == name
    finally:
        sandbox.kill()
    by_id = Sandbox.create(template=info.template_id, envs={"TEMPLATE_GREETING": "overridden"}, timeout=60)
    try:
        out = by_id.commands.run("echo \"$TEMPLATE_GREETING\"; cat /home/user/built.txt")
        assert out.stdout == "overridden\nbuilt\n", (out.stdout, out.stderr)
    finally:
        by_id.kill()


def test_a_failing_step_fails_the_build_through_the_sdk(server, e2b):
    template = (
        Template()
        .from_base_image()
        .run_cmd("echo first-step-ran")
        .run_cmd("echo about to fail >&2; exit 3")
    )
    name = unique("failing")
    logs = []
    with pytest.raises(BuildException) as failure:
        Template.build(template, name, on_build_logs=logs.append)
    assert "exit code 3" in str(failure.value), (str(failure.value), [e.message for e in logs])
    assert "about to fail" in str(failure.value), str(failure.value)
    messages = [entry.message for entry in logs]
    assert "first-step-ran" in messages, messages
    # A template whose build failed cannot make sandboxes.
    made = requests.post(
        f"{root(server)}/sandboxes",
        headers={"X-API-KEY": E2B_KEY_A},
        json={"templateID": name},
        timeout=60,
    )
    assert made.status_code == 400, made.text
    assert made.json()["code"] == 400 and "not ready" in made.json()["message"], made.text


def test_exists_of_the_servers_template_and_of_a_missing_one(server, e2b):
    assert Template.exists("base") is True
    assert Template.exists(unique("missing")) is False
    missing = requests.get(
        f"{root(server)}/templates/aliases/{unique('missing')}",
        headers={"X-API-KEY": E2B_KEY_A},
        timeout=30,
    )
    assert missing.status_code == 404, missing.text
    body = missing.json()
    assert body["code"] == 404 and "not found" in body["message"], body


def test_an_oci_image_is_refused_naming_what_works(server, e2b):
    template = Template().from_image("alpine:3.20").run_cmd("true")
    with pytest.raises(BuildException) as failure:
        Template.build(template, unique("alpine"))
    assert "from_base_image()" in str(failure.value), str(failure.value)


def test_templates_are_the_projects_own_and_can_be_deleted(server, e2b):
    name = unique("owned")
    info = Template.build(Template().from_base_image().run_cmd("echo owned > /home/user/owned.txt"), name)
    headers_b = {"X-API-KEY": E2B_KEY_B}
    other = requests.get(f"{root(server)}/templates/aliases/{name}", headers=headers_b, timeout=30)
    assert other.status_code == 404, other.text
    made = requests.post(f"{root(server)}/sandboxes", headers=headers_b, json={"templateID": name}, timeout=60)
    assert made.status_code == 404, made.text
    deleted = requests.delete(
        f"{root(server)}/templates/{info.template_id}", headers={"X-API-KEY": E2B_KEY_A}, timeout=30
    )
    assert deleted.status_code == 204, deleted.text
    assert Template.exists(name) is False
    # Its image went with it: no sandbox uses it, so its tree is removed.
    assert not (server.data_dir / "sandbox" / "images" / f"e2b-{info.template_id}").exists()


def test_a_root_step_writes_outside_the_home_and_the_template_keeps_it(server, e2b, tmp_path):
    (tmp_path / "tool.sh").write_text("echo tool ran\n")
    template = (
        Template(file_context_path=str(tmp_path))
        .from_base_image()
        .run_cmd("echo x > /etc/marker && mkdir -p /opt/tools", user="root")
        .copy("tool.sh", "/opt/tools/tool.sh", user="root", mode=0o755)
        .set_workdir("/opt/tools")
        .run_cmd("id -u > /home/user/step-user; pwd >> /home/user/step-user")
    )
    name = unique("root-step")
    Template.build(template, name)
    sandbox = Sandbox.create(template=name, timeout=120)
    try:
        out = sandbox.commands.run(
            "cat /etc/marker /home/user/step-user; /opt/tools/tool.sh; "
            "touch /etc/mine 2>/dev/null || echo etc-read-only"
        )
        assert out.stdout == "x\n1000\n/opt/tools\ntool ran\netc-read-only\n", (out.stdout, out.stderr)
    finally:
        sandbox.kill()
