"""The provider against a real `shellgate serve`: a `SandboxAgent` driven by the SDK's
own `ScriptedModel` through the SDK's own tools (`exec_command`, `write_stdin`), and the
session's file, snapshot, resume and port operations."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import re
from pathlib import Path

import httpx
from agents import RunConfig, Runner
from agents.run_config import SandboxRunConfig
from agents.sandbox import Manifest, SandboxAgent
from agents.sandbox.entries import File
from agents.sandbox.snapshot import LocalSnapshotSpec
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from conftest import ARCHIVES, FILES, KEY, PORTS, PROCESSES, wait_until

from shellgate_agents import (
    ShellgateSandboxClient,
    ShellgateSandboxClientOptions,
    ShellgateSandboxSessionState,
)


def options_for(shellgate, **settings) -> ShellgateSandboxClientOptions:
    return ShellgateSandboxClientOptions(base_url=shellgate.root, api_key=KEY, **settings)


def tool_output(call, call_id: str) -> str:
    """The text a model call was given as the output of its tool call `call_id`."""
    for item in call.input if isinstance(call.input, list) else []:
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            if item.get("call_id") == call_id:
                output = item.get("output")
                return output if isinstance(output, str) else str(output)
    raise AssertionError(f"no output of {call_id} in the model's input")


def session_id_in(text: str) -> int:
    match = re.search(r"Process running with session ID (\d+)", text)
    assert match, text
    return int(match.group(1))


def container_status(shellgate, container_id: str) -> str | None:
    with shellgate.http() as http:
        response = http.get(f"/v1/containers/{container_id}")
    return response.json()["status"] if response.status_code == 200 else None


def test_a_sandbox_agent_runs_its_tools_in_a_shellgate_container(shellgate):
    shellgate.require(PROCESSES, FILES)

    # No step waits on time for the REPL: input written before it is ready waits
    # in its terminal, and the last step's yield ends at the REPL's exit, with
    # every byte it wrote.
    def write_to_repl(call):
        pty_id = session_id_in(tool_output(call, "repl"))
        return [
            function_call(
                "write_stdin",
                {"session_id": pty_id, "chars": "x = 6 * 7\n", "yield_time_ms": 250},
                call_id="assign",
            )
        ]

    def print_and_quit(call):
        pty_id = session_id_in(tool_output(call, "repl"))
        return [
            function_call(
                "write_stdin",
                {"session_id": pty_id, "chars": "print(x); exit()\n", "yield_time_ms": 30_000},
                call_id="answer",
            )
        ]

    model = ScriptedModel(
        [
            [
                function_call(
                    "exec_command",
                    {"cmd": "cat notes/hello.txt; pwd; test -t 0 || echo no-tty"},
                    call_id="plain",
                )
            ],
            [
                function_call(
                    "exec_command",
                    {"cmd": "tty; echo cols=$(tput cols)", "tty": True},
                    call_id="tty",
                )
            ],
            [
                function_call(
                    "exec_command",
                    {"cmd": "python3 -q", "tty": True, "yield_time_ms": 250},
                    call_id="repl",
                )
            ],
            ModelStep.respond(write_to_repl),
            ModelStep.respond(print_and_quit),
            [assistant_message("done")],
        ]
    )
    agent = SandboxAgent(
        name="shellgate",
        instructions="Use the shell.",
        model=model,
        default_manifest=Manifest(
            entries={"notes/hello.txt": File(content=b"hello from the manifest\n")}
        ),
    )
    result = asyncio.run(
        Runner.run(
            agent,
            "go",
            run_config=RunConfig(
                tracing_disabled=True,
                sandbox=SandboxRunConfig(
                    client=ShellgateSandboxClient(), options=options_for(shellgate)
                ),
            ),
        )
    )
    assert result.final_output == "done"
    calls = model.calls

    plain = tool_output(calls[1], "plain")
    # The manifest was materialised in the workspace, /mnt/data, the command's cwd.
    assert "hello from the manifest" in plain
    assert "/mnt/data" in plain
    assert "no-tty" in plain
    assert "Process exited with code 0" in plain

    tty = tool_output(calls[2], "tty")
    assert "/dev/pts/" in tty
    assert "cols=80" in tty
    assert "Process exited with code 0" in tty

    repl = session_id_in(tool_output(calls[3], "repl"))
    # The same process across model turns, until it exits.
    assert session_id_in(tool_output(calls[4], "assign")) == repl
    answer = tool_output(calls[5], "answer")
    assert "\n42\r\n" in answer
    assert "Process exited with code 0" in answer


def test_a_50_mb_binary_file_is_written_and_read_back_byte_exact(shellgate):
    shellgate.require(PROCESSES, FILES)
    payload = os.urandom(50 * 1024 * 1024)
    digest = hashlib.sha256(payload).hexdigest()

    async def run():
        client = ShellgateSandboxClient()
        session = await client.create(options=options_for(shellgate))
        try:
            await session.start()
            await session.write(Path("data/big.bin"), io.BytesIO(payload))
            size = await session.exec("stat -c %s data/big.bin")
            assert size.stdout.decode().strip() == str(len(payload))
            stream = await session.read(Path("data/big.bin"))
            read_back = hashlib.sha256()
            while chunk := stream.read(1 << 20):
                read_back.update(chunk)
            stream.close()
            assert read_back.hexdigest() == digest
            # The whole output of a command, past exec's 64 KiB cap.
            listing = await session.exec("head -c 300000 /dev/zero | base64 -w 0")
            assert len(listing.stdout) == 400_000
            entries = await session.ls("data")
            assert [(Path(e.path).name, e.size) for e in entries] == [("big.bin", len(payload))]
            await session.rm("data", recursive=True)
            assert await session.ls(".") == []
        finally:
            await client.delete(session)
            # Deleting twice (the runner and the caller both may) is not an error.
            await client.delete(session)

    asyncio.run(run())


def test_a_persisted_workspace_hydrates_a_new_container_after_the_old_is_deleted(
    shellgate, tmp_path
):
    shellgate.require(PROCESSES, FILES, ARCHIVES)
    blob = os.urandom(100_000)

    async def run():
        client = ShellgateSandboxClient()
        first = await client.create(
            options=options_for(shellgate),
            snapshot=LocalSnapshotSpec(base_path=tmp_path),
            manifest=Manifest(entries={"seed.txt": File(content=b"seeded\n")}),
        )
        async with first:  # leaving it persists the workspace to the snapshot
            await first.write(Path("deep/er/blob.bin"), io.BytesIO(blob))
            await first.exec("echo made-by-a-command > made.txt && chmod 0750 deep/er")
        payload = client.serialize_session_state(first.state)
        old_container = first.state.container_id
        await client.delete(first)
        assert container_status(shellgate, old_container) is None

        state = client.deserialize_session_state(payload)
        assert isinstance(state, ShellgateSandboxSessionState)
        second = await client.resume(state)
        try:
            async with second:
                assert second.state.container_id != old_container
                assert (await second.read(Path("deep/er/blob.bin"))).read() == blob
                assert (await second.read(Path("made.txt"))).read() == b"made-by-a-command\n"
                assert (await second.read(Path("seed.txt"))).read() == b"seeded\n"
                mode = await second.exec("stat -c %a deep/er")
                assert mode.stdout.decode().strip() == "750"
        finally:
            await client.delete(second)

    asyncio.run(run())


def test_a_workspace_persisted_as_a_native_snapshot_makes_the_new_container(
    shellgate, tmp_path
):
    shellgate.require(PROCESSES, FILES, ("GET", "/v1/snapshots"))
    blob = os.urandom(100_000)

    async def run():
        client = ShellgateSandboxClient()
        first = await client.create(
            options=options_for(shellgate, workspace_persistence="snapshot"),
            snapshot=LocalSnapshotSpec(base_path=tmp_path),
        )
        async with first:  # leaving it takes a shellgate snapshot of the container
            await first.write(Path("deep/blob.bin"), io.BytesIO(blob))
            await first.exec("echo made-by-a-command > made.txt && chmod 0750 deep")
        stored = [p.read_bytes() for p in tmp_path.glob("*.tar")]
        # Only the snapshot's id is stored: its files stay on the server.
        assert len(stored) == 1, stored
        assert stored[0].startswith(b"SHELLGATE_CONTAINER_SNAPSHOT_V1\n"), stored[0][:200]
        snapshot_id = json.loads(stored[0].split(b"\n", 1)[1])["snapshot_id"]
        with shellgate.http() as http:
            listed = http.get(f"/v1/snapshots/{snapshot_id}")
        assert listed.status_code == 200, listed.text
        payload = client.serialize_session_state(first.state)
        old_container = first.state.container_id
        await client.delete(first)
        assert container_status(shellgate, old_container) is None

        state = client.deserialize_session_state(payload)
        assert isinstance(state, ShellgateSandboxSessionState)
        assert state.workspace_persistence == "snapshot", state
        second = await client.resume(state)
        replacement = second.state.container_id  # made empty by resume, the old one gone
        try:
            async with second:
                copy = second.state.container_id
                assert copy not in (old_container, replacement), (copy, replacement)
                # The empty replacement gave way to the snapshot's copy.
                assert container_status(shellgate, replacement) is None
                assert (await second.read(Path("deep/blob.bin"))).read() == blob
                assert (await second.read(Path("made.txt"))).read() == b"made-by-a-command\n"
                mode = await second.exec("stat -c %a deep")
                assert mode.stdout.decode().strip() == "750", mode
        finally:
            await client.delete(second)
            with shellgate.http() as http:
                http.delete(f"/v1/snapshots/{snapshot_id}")

    asyncio.run(run())


def test_resume_reattaches_to_a_suspended_container(sleepy_shellgate):
    shellgate = sleepy_shellgate
    shellgate.require(PROCESSES, FILES)

    async def start_and_leave():
        client = ShellgateSandboxClient()
        session = await client.create(options=options_for(shellgate))
        await session.start()
        await session.write(Path("kept.txt"), io.BytesIO(b"still here\n"))
        # The client goes away without stopping or deleting anything.
        return client.serialize_session_state(session.state)

    payload = asyncio.run(start_and_leave())
    container_id = payload["container_id"]
    assert wait_until(lambda: container_status(shellgate, container_id) == "suspended", 30)

    async def resume():
        client = ShellgateSandboxClient(api_key=KEY)
        session = await client.resume(client.deserialize_session_state(dict(payload)))
        try:
            assert await session.running()
            await session.start()
            assert session.state.container_id == container_id
            assert (await session.read(Path("kept.txt"))).read() == b"still here\n"
            echo = await session.exec("echo awake")
            assert echo.stdout == b"awake\n"
        finally:
            await client.delete(session)

    asyncio.run(resume())
    assert container_status(shellgate, container_id) is None


def test_an_exposed_port_serves_http_through_the_server(shellgate):
    shellgate.require(PROCESSES, FILES, PORTS)

    async def run():
        client = ShellgateSandboxClient()
        session = await client.create(options=options_for(shellgate, exposed_ports=(8000,)))
        try:
            await session.start()
            await session.write(Path("site/hello.txt"), io.BytesIO(b"served from the sandbox\n"))
            server = await session.pty_exec_start(
                "cd site && exec python3 -m http.server 8000 --bind 127.0.0.1",
                yield_time_s=0.25,
            )
            assert server.process_id is not None, server.output
            endpoint = await session.resolve_exposed_port(8000)
            assert endpoint.host.startswith(f"8000-{session.state.container_id}.")
            # The host route, reached through the server's own address with the
            # `Host:` header a browser would send for `8000-{id}.localhost`.
            url = f"{shellgate.root}/hello.txt?{endpoint.query}"
            headers = {"Host": f"{endpoint.host}:{endpoint.port}"}

            def served():
                response = httpx.get(url, headers=headers, timeout=10)
                return response.status_code == 200 and response

            assert wait_until(served, 30)
            assert served().text == "served from the sandbox\n"
            # Without the token (nor a key), the port is not reachable.
            bare = httpx.get(f"{shellgate.root}/hello.txt", headers=headers, timeout=10)
            assert bare.status_code in (401, 403, 404)
        finally:
            await client.delete(session)

    asyncio.run(run())
