"""E2B's in-sandbox API opens on no route with the sandbox id alone: a
sandbox id is in host names, URLs and logs, not a secret. Every route of
envd (processes, filesystem, `/files`, `/health`) and of the code
interpreter (`/execute`, the contexts) named by `E2b-Sandbox-Id` alone is a
401 in the route's E2B envelope; the victim's contexts and variables are
untouched and a paused sandbox is not woken. The sandbox's access token or
the project's key opens them, and the contexts take the traffic token E2B's
SDKs send there, so the unmodified latest `e2b_code_interpreter` (sync and
async) keeps working."""

import asyncio
import json
import struct

import pytest
import requests

from conftest import E2B_KEY_A, E2B_KEY_B, KEY_A

pytest.importorskip("e2b_code_interpreter")
from e2b import Sandbox, SandboxState  # noqa: E402
from e2b_code_interpreter import AsyncSandbox as AsyncCodeSandbox  # noqa: E402
from e2b_code_interpreter import Sandbox as CodeSandbox  # noqa: E402

ENVD, INTERPRETER = "49983", "49999"
# What an attacker's calls would leave behind if any ran.
MARK = "/home/user/opened-by-id-alone"


def root(server) -> str:
    return f"http://{server.host}:{server.port}"


def connect_envelope(message: dict) -> bytes:
    """One Connect streaming envelope (flags 0, JSON)."""
    data = json.dumps(message).encode()
    return struct.pack(">BI", 0, len(data)) + data


def routes(context_id: str) -> list:
    """Every in-sandbox route: (port, method, path, request arguments), each
    asked for something that would show if it ran."""
    unary = {"headers": {"Content-Type": "application/json"}}
    streaming = {"headers": {"Content-Type": "application/connect+json"}}
    start = {"process": {"cmd": "/bin/sh", "args": ["-c", f"touch {MARK}"]}}
    return [
        (ENVD, "POST", "/process.Process/Start", {**streaming, "data": connect_envelope(start)}),
        (ENVD, "POST", "/process.Process/Connect", {**streaming, "data": connect_envelope({"process": {"pid": 1}})}),
        (ENVD, "POST", "/process.Process/List", {**unary, "json": {}}),
        (ENVD, "POST", "/process.Process/SendInput", {**unary, "json": {"process": {"pid": 1}, "input": {"stdin": ""}}}),
        (ENVD, "POST", "/process.Process/StreamInput", {**streaming, "data": b""}),
        (ENVD, "POST", "/process.Process/CloseStdin", {**unary, "json": {"process": {"pid": 1}}}),
        (ENVD, "POST", "/process.Process/SendSignal", {**unary, "json": {"process": {"pid": 1}, "signal": "SIGNAL_SIGKILL"}}),
        (ENVD, "POST", "/process.Process/Update", {**unary, "json": {"process": {"pid": 1}}}),
        (ENVD, "POST", "/filesystem.Filesystem/Stat", {**unary, "json": {"path": "/etc"}}),
        (ENVD, "POST", "/filesystem.Filesystem/ListDir", {**unary, "json": {"path": "/home/user"}}),
        (ENVD, "POST", "/filesystem.Filesystem/MakeDir", {**unary, "json": {"path": MARK}}),
        (ENVD, "POST", "/filesystem.Filesystem/Move", {**unary, "json": {"source": "/home/user/kept.txt", "destination": MARK}}),
        (ENVD, "POST", "/filesystem.Filesystem/Remove", {**unary, "json": {"path": "/home/user/kept.txt"}}),
        (ENVD, "POST", "/filesystem.Filesystem/WatchDir", {**streaming, "data": connect_envelope({"path": "/home/user"})}),
        (ENVD, "POST", "/filesystem.Filesystem/CreateWatcher", {**unary, "json": {"path": "/home/user"}}),
        (ENVD, "POST", "/filesystem.Filesystem/GetWatcherEvents", {**unary, "json": {"watcherId": "w"}}),
        (ENVD, "POST", "/filesystem.Filesystem/RemoveWatcher", {**unary, "json": {"watcherId": "w"}}),
        (ENVD, "GET", "/files", {"params": {"path": "/home/user/kept.txt"}}),
        (ENVD, "POST", "/files", {"params": {"path": MARK}, "data": b"x",
                                  "headers": {"Content-Type": "application/octet-stream"}}),
        (ENVD, "GET", "/health", {}),
        (INTERPRETER, "POST", "/execute", {"json": {"code": f"open({MARK!r}, 'w')"}}),
        (INTERPRETER, "GET", "/contexts", {}),
        # `cwd` would tell whether a directory exists.
        (INTERPRETER, "POST", "/contexts", {"json": {"cwd": "/etc"}}),
        (INTERPRETER, "POST", f"/contexts/{context_id}/restart", {}),
        (INTERPRETER, "DELETE", f"/contexts/{context_id}", {}),
    ]


def call(server, sandbox_id: str, route, credentials: dict = None) -> requests.Response:
    port, method, path, arguments = route
    arguments = dict(arguments)
    headers = {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": port,
               **arguments.pop("headers", {}), **(credentials or {})}
    return requests.request(method, root(server) + path, headers=headers, timeout=60, **arguments)


def assert_unauthorized(response: requests.Response, route) -> None:
    """A 401 in the route's envelope: a Connect error on the RPCs, E2B's
    `{"code", "message"}` elsewhere."""
    _, _, path, _ = route
    assert response.status_code == 401, (path, response.status_code, response.text)
    body = response.json()
    expected = "unauthenticated" if path.startswith(("/process.", "/filesystem.")) else 401
    assert body["code"] == expected and body["message"], (path, body)


def test_no_in_sandbox_route_opens_on_the_sandbox_id_alone(server, e2b):
    victim = CodeSandbox.create(timeout=300)
    try:
        victim.files.write("/home/user/kept.txt", "kept\n")
        context = victim.create_code_context()
        assert victim.run_code("kept = 42", context=context).error is None
        before = sorted(c.id for c in victim.list_code_contexts())

        for route in routes(context.id):
            assert_unauthorized(call(server, victim.sandbox_id, route), route)
        traffic = victim.traffic_access_token
        assert traffic and traffic != victim._envd_access_token
        for route in routes(context.id):
            # The traffic token opens the contexts only.
            if not route[2].startswith("/contexts"):
                answer = call(server, victim.sandbox_id, route, {"E2B-Traffic-Access-Token": traffic})
                assert_unauthorized(answer, route)
            # A wrong credential is a 401 whatever else is given.
            answer = call(server, victim.sandbox_id, route,
                          {"X-Access-Token": "e2bat_wrong", "E2B-Traffic-Access-Token": traffic})
            assert_unauthorized(answer, route)

        # Nothing ran, nothing changed: the same contexts, the variable kept.
        assert sorted(c.id for c in victim.list_code_contexts()) == before
        assert victim.run_code("kept", context=context).text == "42"
        assert victim.files.read("/home/user/kept.txt") == "kept\n"
        assert not victim.files.exists(MARK)

        # The access token, the project's key (E2B's and OpenAI's spelling)
        # and on the contexts the traffic token open them; another
        # project's key is answered as an unknown sandbox.
        listing = (INTERPRETER, "GET", "/contexts", {})
        for credentials in ({"X-Access-Token": victim._envd_access_token}, {"X-API-Key": E2B_KEY_A},
                            {"Authorization": f"Bearer {KEY_A}"}, {"E2B-Traffic-Access-Token": traffic}):
            answer = call(server, victim.sandbox_id, listing, credentials)
            assert answer.status_code == 200, (credentials, answer.text)
            assert sorted(c["id"] for c in answer.json()) == before
        stat = (ENVD, "POST", "/filesystem.Filesystem/Stat",
                {"headers": {"Content-Type": "application/json"}, "json": {"path": "/home/user/kept.txt"}})
        answer = call(server, victim.sandbox_id, stat, {"X-API-Key": E2B_KEY_A})
        assert answer.status_code == 200 and answer.json()["entry"]["name"] == "kept.txt", answer.text
        foreign = call(server, victim.sandbox_id, listing, {"X-API-Key": E2B_KEY_B})
        unknown = call(server, "cntr_" + "0" * 32, listing, {"X-API-Key": E2B_KEY_B})
        assert foreign.status_code == unknown.status_code == 404
        assert foreign.text.replace(victim.sandbox_id, "ID") == unknown.text.replace("cntr_" + "0" * 32, "ID")

        # The unmodified SDK keeps working: its contexts calls carry only
        # the traffic token (sync and async alike).
        victim.restart_code_context(context)
        assert victim.run_code("'kept' in globals()", context=context).text == "False"
        victim.remove_code_context(context)
        assert context.id not in [c.id for c in victim.list_code_contexts()]

        async def through_async():
            sandbox = await AsyncCodeSandbox.connect(victim.sandbox_id)
            made = await sandbox.create_code_context(cwd="/tmp")
            assert made.cwd == "/tmp"
            assert made.id in [c.id for c in await sandbox.list_code_contexts()]
            await sandbox.restart_code_context(made)
            await sandbox.remove_code_context(made)
            return [c.id for c in await sandbox.list_code_contexts()]

        assert sorted(asyncio.run(through_async())) == sorted(set(before) - {context.id})
    finally:
        victim.kill()


def test_a_paused_sandbox_is_not_woken_by_a_caller_without_credentials(server, e2b):
    sandbox = CodeSandbox.create(timeout=300, lifecycle={"on_timeout": "pause", "auto_resume": True})
    try:
        traffic = sandbox.traffic_access_token
        assert sandbox.pause() is True
        assert Sandbox.get_info(sandbox.sandbox_id).state == SandboxState.PAUSED
        for route in routes("ctx_none"):
            assert_unauthorized(call(server, sandbox.sandbox_id, route), route)
        # Still paused: nothing started it, nothing billed its owner.
        assert Sandbox.get_info(sandbox.sandbox_id).state == SandboxState.PAUSED
        # The owner's next call resumes it, as autoResume promises.
        answer = call(server, sandbox.sandbox_id, (INTERPRETER, "GET", "/contexts", {}),
                      {"E2B-Traffic-Access-Token": traffic})
        assert answer.status_code == 200, answer.text
        assert Sandbox.get_info(sandbox.sandbox_id).state == SandboxState.RUNNING
    finally:
        Sandbox.kill(sandbox.sandbox_id)
