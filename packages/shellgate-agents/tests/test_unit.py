"""The provider's own logic, against a small fake of shellgate's HTTP API (an
`httpx.MockTransport`): options and state round trips, what is never serialized, the
exec output stream reassembled across a reattach, the interactive process flow, the
exposed-port endpoint, and error mapping."""

from __future__ import annotations

import asyncio
import base64
import json
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from agents.sandbox import Manifest
from agents.sandbox.errors import (
    ConfigurationError,
    ExecTimeoutError,
    ExecTransportError,
    ExposedPortUnavailableError,
    PtySessionNotFoundError,
    SandboxRuntimeError,
    WorkspaceArchiveReadError,
    WorkspaceReadNotFoundError,
)
from agents.sandbox.session.sandbox_client import BaseSandboxClientOptions

from shellgate_agents import (
    ShellgateSandboxClient,
    ShellgateSandboxClientOptions,
    ShellgateSandboxSession,
    ShellgateSandboxSessionState,
)
from shellgate_agents.sandbox import _Interactive, _snapshot_id_in

SECRET = "sk-very-secret"


@dataclass
class FakeProcess:
    id: str
    command: str
    body: dict
    output: list[tuple[str, bytes]] = field(default_factory=list)
    status: str = "running"
    exit_code: int | None = None
    stdin: bytearray = field(default_factory=bytearray)

    def offset(self) -> int:
        return sum(len(data) for _, data in self.output)

    def json(self) -> dict:
        return {
            "id": self.id,
            "object": "container.process",
            "status": self.status,
            "exit_code": self.exit_code,
            "outcome": {"type": "timeout"}
            if self.status == "timeout"
            else (
                {"type": "exit", "exit_code": self.exit_code}
                if self.exit_code is not None
                else None
            ),
            "output_bytes": self.offset(),
        }

    def chunks_after(self, after: int) -> list[dict]:
        chunks, offset = [], 0
        for stream, data in self.output:
            if offset + len(data) > after:
                chunks.append(
                    {"stream": stream, "offset": offset, "data": base64.b64encode(data).decode()}
                )
            offset += len(data)
        return chunks


class FakeShellgate:
    """Enough of api.md for the provider's logic: containers, processes (whose
    behaviour a test scripts), their output as JSON and SSE, stdin, kill."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.containers: dict[str, dict] = {}
        self.processes: dict[str, FakeProcess] = {}
        self.on_start = lambda process: None
        self.on_stdin = lambda process, data: None
        self.streams_served = 0
        self.break_first_stream_after = None  # chunks, then the stream ends
        self.handle_processes = True  # False: an older server
        self.dropped = 0  # what the output page says was dropped

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def error(self, status: int, code: str, message: str = "no") -> httpx.Response:
        return httpx.Response(
            status,
            json={
                "error": {
                    "message": message,
                    "type": "invalid_request_error",
                    "param": None,
                    "code": code,
                }
            },
        )

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        parts = request.url.path.strip("/").split("/")
        if parts[:2] != ["v1", "containers"]:
            return self.error(404, "unknown_url")
        if len(parts) == 2 and request.method == "POST":
            body = json.loads(request.content)
            cid = f"cntr_{len(self.containers) + 1}"
            ports = body.get("exposed_ports") or []
            self.containers[cid] = {
                "id": cid,
                "status": "running",
                "body": body,
                "exposed_ports": [
                    {"port": p, "url": f"http://{p}-{cid}.localhost:8080/", "path_url": "x"}
                    for p in ports
                ],
                "port_token": "tok en/1" if ports else None,
            }
            return httpx.Response(201, json=self.containers[cid])
        cid = parts[2]
        if cid not in self.containers:
            return self.error(404, "container_not_found")
        if len(parts) == 3:
            if request.method == "DELETE":
                del self.containers[cid]
                return httpx.Response(200, json={"id": cid, "deleted": True})
            return httpx.Response(200, json=self.containers[cid])
        if parts[3] == "snapshots":
            # As a cluster answers: it keeps no snapshots.
            return self.error(501, "not_supported", "Snapshots are not served by a cluster")
        if parts[3] == "fs":
            return self.error(404, "file_not_found")
        if parts[3] != "processes" or not self.handle_processes:
            return self.error(404, "unknown_url")
        if len(parts) == 4 and request.method == "POST":
            body = json.loads(request.content)
            process = FakeProcess(
                id=f"proc_{len(self.processes) + 1}", command=body["command"], body=body
            )
            self.processes[process.id] = process
            self.on_start(process)
            return httpx.Response(201, json=process.json())
        process = self.processes.get(parts[4])
        if process is None:
            return self.error(404, "process_not_found")
        if len(parts) == 5 and request.method == "DELETE":
            if process.status == "running":
                process.status, process.exit_code = "killed", None
            return httpx.Response(200, json=process.json())
        if parts[5] == "stdin":
            if process.status != "running":
                return self.error(409, "process_exited")
            process.stdin.extend(request.content)
            self.on_stdin(process, request.content)
            return httpx.Response(204)
        if parts[5] == "output":
            after = int(request.url.params.get("after", "0"))
            if request.url.params.get("stream") == "true":
                return self.sse(process, after)
            return httpx.Response(
                200,
                json={
                    "chunks": process.chunks_after(after),
                    "next_offset": process.offset(),
                    "dropped_bytes": self.dropped,
                    "process": process.json(),
                },
            )
        return self.error(404, "unknown_url")

    def sse(self, process: FakeProcess, after: int) -> httpx.Response:
        self.streams_served += 1
        chunks = process.chunks_after(after)
        broken = self.streams_served == 1 and self.break_first_stream_after is not None
        if broken:
            chunks = chunks[: self.break_first_stream_after]
        text = "".join(f"event: output\ndata: {json.dumps(c)}\n\n" for c in chunks)
        if not broken:
            text += f"event: exit\ndata: {json.dumps(process.json())}\n\n"
        return httpx.Response(200, text=text, headers={"Content-Type": "text/event-stream"})


def make_session(fake: FakeShellgate, **state) -> ShellgateSandboxSession:
    fake.containers.setdefault(
        "cntr_1",
        {"id": "cntr_1", "status": "running", "exposed_ports": [], "port_token": None},
    )
    session_state = ShellgateSandboxSessionState(
        manifest=Manifest(root="/mnt/data"),
        snapshot={"type": "noop", "id": "s"},
        base_url="http://shellgate.test/v1",
        container_id="cntr_1",
        **state,
    )
    return ShellgateSandboxSession(state=session_state, api_key=SECRET, transport=fake.transport())


def test_options_round_trip_by_type_and_never_carry_the_api_key():
    options = ShellgateSandboxClientOptions(
        base_url="http://h:1",
        api_key=SECRET,
        image="debian-12",
        memory_limit="4g",
        network_policy=("pypi.org",),
        exposed_ports=(8000, 9000),
        expires_after_minutes=30,
    )
    dumped = options.model_dump(mode="json")
    assert dumped["type"] == "shellgate"
    assert (
        "api_key" not in dumped and SECRET not in json.dumps(dumped) and SECRET not in repr(options)
    )
    parsed = BaseSandboxClientOptions.parse(dumped)
    assert isinstance(parsed, ShellgateSandboxClientOptions)
    assert parsed.exposed_ports == (8000, 9000) and parsed.network_policy == ("pypi.org",)


def test_options_take_the_environment_and_refuse_privileged_or_repeated_ports(monkeypatch):
    monkeypatch.setenv("SHELLGATE_BASE_URL", "http://from-env:9")
    assert ShellgateSandboxClientOptions().base_url == "http://from-env:9"
    with pytest.raises(ValueError):
        ShellgateSandboxClientOptions(exposed_ports=(80,))
    with pytest.raises(ValueError):
        ShellgateSandboxClientOptions(exposed_ports=(8000, 8000))


def test_create_makes_the_container_and_its_state_round_trips_without_the_key():
    fake = FakeShellgate()

    async def run():
        client = ShellgateSandboxClient(transport=fake.transport())
        options = ShellgateSandboxClientOptions(
            base_url="http://shellgate.test",
            api_key=SECRET,
            memory_limit="4g",
            network_policy=("pypi.org",),
            exposed_ports=(8000,),
            expires_after_minutes=20,
        )
        session = await client.create(options=options)
        return client, session

    client, session = asyncio.run(run())
    created = fake.containers["cntr_1"]["body"]
    assert created["memory_limit"] == "4g"
    assert created["network_policy"] == {"type": "allowlist", "allowed_domains": ["pypi.org"]}
    assert created["exposed_ports"] == [8000]
    assert created["expires_after"] == {"anchor": "last_active_at", "minutes": 20}
    assert fake.requests[0].headers["Authorization"] == f"Bearer {SECRET}"
    # The SDK's default root becomes the container's workspace.
    assert session.state.manifest.root == "/mnt/data"
    payload = client.serialize_session_state(session.state)
    assert SECRET not in json.dumps(payload)
    state = client.deserialize_session_state(json.loads(json.dumps(payload)))
    assert isinstance(state, ShellgateSandboxSessionState)
    assert state.container_id == "cntr_1" and state.exposed_ports == (8000,)


def test_create_without_exposed_ports_sends_no_such_field():
    # A server without the ports feature refuses unknown fields.
    fake = FakeShellgate()
    client = ShellgateSandboxClient(transport=fake.transport(), api_key=SECRET)
    asyncio.run(client.create(options=ShellgateSandboxClientOptions(base_url="http://x")))
    assert set(fake.containers["cntr_1"]["body"]) == {"name"}


def test_a_create_the_server_refuses_is_a_configuration_error():
    def refuse(request):
        return httpx.Response(
            400,
            json={
                "error": {
                    "message": "bad image",
                    "type": "invalid_request_error",
                    "param": "image",
                    "code": None,
                }
            },
        )

    client = ShellgateSandboxClient(transport=httpx.MockTransport(refuse), api_key=SECRET)
    with pytest.raises(ConfigurationError) as raised:
        asyncio.run(
            client.create(options=ShellgateSandboxClientOptions(base_url="http://x", image="nope"))
        )
    assert raised.value.context["param"] == "image"
    assert "bad image" in str(raised.value)


def test_exec_reads_the_whole_output_across_a_broken_stream_without_repeats():
    fake = FakeShellgate()
    big = b"x" * 200_000

    def start(process):
        process.output = [("stdout", b"one\n"), ("stderr", b"warn\n"), ("stdout", big)]
        process.status, process.exit_code = "exited", 3

    fake.on_start = start
    fake.break_first_stream_after = 2
    session = make_session(
        fake,
    )
    result = asyncio.run(session._exec_internal("sh", "-c", "echo 'a b'"))
    assert result.stdout == b"one\n" + big
    assert result.stderr == b"warn\n"
    assert result.exit_code == 3
    assert fake.streams_served == 2
    started = fake.processes["proc_1"].body
    assert started["command"] == "exec sh -c 'echo '\"'\"'a b'\"'\"''"
    assert started["stdin"] is False and "pty" not in started


def test_exec_at_its_timeout_is_the_sdks_timeout_error():
    fake = FakeShellgate()

    def start(process):
        process.status = "timeout"

    fake.on_start = start
    with pytest.raises(ExecTimeoutError):
        asyncio.run(make_session(fake)._exec_internal("sleep", "999", timeout=2))
    assert fake.processes["proc_1"].body["timeout_ms"] == 2000


def test_exec_on_a_deleted_container_is_a_transport_error():
    fake = FakeShellgate()
    session = make_session(fake)
    fake.containers.clear()
    with pytest.raises(ExecTransportError) as raised:
        asyncio.run(session._exec_internal("true"))
    assert raised.value.context["http_status"] == 404


def test_an_interactive_process_through_pty_start_and_write_stdin():
    fake = FakeShellgate()

    def start(process):
        process.output.append(("pty", b">>> "))

    def stdin(process, data):
        if data == b"print(6 * 7)\n":
            process.output.append(("pty", b"print(6 * 7)\r\n42\r\n>>> "))
        elif data == b"exit()\n":
            process.status, process.exit_code = "exited", 0

    fake.on_start, fake.on_stdin = start, stdin
    session = make_session(fake)

    async def run():
        started = await session.pty_exec_start("python3 -q", tty=True, yield_time_s=0.3)
        assert started.process_id is not None and started.exit_code is None
        assert started.output == b">>> "
        body = fake.processes["proc_1"].body
        assert body["pty"] == {"cols": 80, "rows": 24, "term": "xterm-256color"}
        assert body["stdin"] is True and body["timeout_ms"] == 300_000
        answer = await session.pty_write_stdin(
            session_id=started.process_id, chars="print(6 * 7)\n", yield_time_s=0.3
        )
        # Only what came after the last read.
        assert answer.output == b"print(6 * 7)\r\n42\r\n>>> "
        done = await session.pty_write_stdin(
            session_id=started.process_id, chars="exit()\n", yield_time_s=5
        )
        assert done.exit_code == 0 and done.process_id is None
        with pytest.raises(PtySessionNotFoundError):
            await session.pty_write_stdin(session_id=started.process_id, chars="x")

    asyncio.run(run())


def test_a_process_without_tty_takes_no_stdin_and_terminate_all_kills_the_live_ones():
    fake = FakeShellgate()
    session = make_session(fake)

    async def run():
        started = await session.pty_exec_start("sleep 100", tty=False, yield_time_s=0.25)
        assert started.process_id is not None
        assert "pty" not in fake.processes["proc_1"].body
        with pytest.raises(RuntimeError, match="stdin is not available for this process"):
            await session.pty_write_stdin(session_id=started.process_id, chars="x")
        await session.pty_terminate_all()

    asyncio.run(run())
    assert fake.processes["proc_1"].status == "killed"


def test_an_exposed_port_resolves_to_the_servers_host_route_with_the_port_token():
    fake = FakeShellgate()
    fake.containers["cntr_1"] = {
        "id": "cntr_1",
        "status": "running",
        "exposed_ports": [
            {"port": 8000, "url": "https://8000-cntr_1.sg.example/", "path_url": "x"}
        ],
        "port_token": "t/k n",
    }
    session = make_session(fake, exposed_ports=(8000, 9000))
    endpoint = asyncio.run(session.resolve_exposed_port(8000))
    assert endpoint.host == "8000-cntr_1.sg.example"
    assert endpoint.port == 443 and endpoint.tls
    assert endpoint.query == "shellgate_port_token=t%2Fk+n"
    # Declared in the state but not exposed by the container: unavailable, not a crash.
    with pytest.raises(ExposedPortUnavailableError):
        asyncio.run(session.resolve_exposed_port(9000))
    with pytest.raises(ExposedPortUnavailableError):
        asyncio.run(session.resolve_exposed_port(7000))


def test_a_missing_file_is_the_sdks_not_found_error():
    fake = FakeShellgate()
    session = make_session(fake)

    async def no_remote_check(path, *, for_write=False):
        return Path(path)

    session._validate_path_access = no_remote_check
    with pytest.raises(WorkspaceReadNotFoundError):
        asyncio.run(session.read(Path("/mnt/data/missing")))


def test_resume_of_a_gone_container_makes_a_replacement_with_the_same_settings():
    fake = FakeShellgate()
    client = ShellgateSandboxClient(transport=fake.transport(), api_key=SECRET)
    state = ShellgateSandboxSessionState(
        manifest=Manifest(root="/mnt/data"),
        snapshot={"type": "noop", "id": "s"},
        base_url="http://shellgate.test",
        container_id="cntr_gone",
        memory_limit="16g",
        exposed_ports=(8000,),
        workspace_root_ready=True,
    )
    session = asyncio.run(client.resume(state))
    assert session.state.container_id == "cntr_1"
    assert session.state.workspace_root_ready is False
    assert fake.containers["cntr_1"]["body"]["memory_limit"] == "16g"
    assert fake.containers["cntr_1"]["body"]["exposed_ports"] == [8000]
    # And a live one is reattached, not replaced.
    again = asyncio.run(client.resume(session.state))
    assert again.state.container_id == "cntr_1" and len(fake.containers) == 1


def test_delete_is_idempotent():
    fake = FakeShellgate()
    client = ShellgateSandboxClient(transport=fake.transport(), api_key=SECRET)
    session = asyncio.run(client.create(options=ShellgateSandboxClientOptions(base_url="http://x")))
    asyncio.run(client.delete(session))
    asyncio.run(client.delete(session))
    assert fake.containers == {}


def test_a_server_without_the_processes_api_is_named_as_too_old():
    fake = FakeShellgate()
    session = make_session(fake)
    fake.handle_processes = False
    with pytest.raises(ExecTransportError, match="does not serve start process"):
        asyncio.run(session._exec_internal("true"))


def test_resume_by_the_same_client_uses_the_key_its_create_was_given():
    fake = FakeShellgate()
    client = ShellgateSandboxClient(transport=fake.transport())
    options = ShellgateSandboxClientOptions(base_url="http://shellgate.test", api_key=SECRET)
    session = asyncio.run(client.create(options=options))
    payload = client.serialize_session_state(session.state)
    assert SECRET not in json.dumps(payload)
    resumed = asyncio.run(client.resume(client.deserialize_session_state(payload)))
    assert resumed.state.container_id == "cntr_1"
    assert all(r.headers["Authorization"] == f"Bearer {SECRET}" for r in fake.requests)


def test_at_the_sdks_64_processes_the_least_recently_used_ends_before_a_new_one_starts():
    fake = FakeShellgate()
    session = make_session(fake)

    async def run():
        for number in range(64):
            process = FakeProcess(id=f"proc_old{number}", command="sleep", body={})
            fake.processes[process.id] = process
            entry = _Interactive(process_id=process.id, tty=False, last_used=float(number))
            session._interactive[1000 + number] = entry
            session._reserved_pty_ids.add(1000 + number)
        started = await session.pty_exec_start("sleep 1", yield_time_s=0.25)
        assert started.process_id is not None and len(session._interactive) == 64
        assert 1000 not in session._interactive

    asyncio.run(run())
    assert fake.processes["proc_old0"].status == "killed"
    order = [(r.method, r.url.path.rsplit("/", 1)[-1]) for r in fake.requests]
    assert order.index(("DELETE", "proc_old0")) < order.index(("POST", "processes"))


def test_output_a_terminal_dropped_is_said_in_it():
    fake = FakeShellgate()
    session = make_session(fake)
    entry = _Interactive(process_id="proc_1", tty=True)
    fake.processes["proc_1"] = FakeProcess(id="proc_1", command="x", body={})
    fake.processes["proc_1"].output = [("pty", b"tail")]
    fake.dropped = 5000

    async def run():
        await session._poll_output(entry, deadline=0)
        return b"".join(entry.output_chunks)

    assert asyncio.run(run()) == b"[5000 bytes of output dropped]\ntail"


def test_resume_when_the_server_cannot_answer_fails_instead_of_replacing_the_container():
    fake = FakeShellgate()
    fake.containers["cntr_1"] = {"id": "cntr_1", "status": "running"}

    def unavailable(request):
        if request.method == "GET":
            return httpx.Response(503, text="busy")
        return fake.handle(request)

    client = ShellgateSandboxClient(transport=httpx.MockTransport(unavailable), api_key=SECRET)
    state = ShellgateSandboxSessionState(
        manifest=Manifest(root="/mnt/data"),
        snapshot={"type": "noop", "id": "s"},
        base_url="http://shellgate.test",
        container_id="cntr_1",
    )
    with pytest.raises(SandboxRuntimeError) as raised:
        asyncio.run(client.resume(state))
    assert raised.value.retryable is True
    assert list(fake.containers) == ["cntr_1"]


def test_a_server_that_keeps_no_snapshots_gets_the_workspace_as_tar_instead():
    fake = FakeShellgate()
    session = make_session(fake, workspace_persistence="snapshot")
    # The fake holds no files: the tar export it falls back to fails, after asking.
    with pytest.raises(WorkspaceArchiveReadError):
        asyncio.run(session.persist_workspace())
    asked = [(r.method, r.url.path) for r in fake.requests]
    assert asked == [
        ("POST", "/v1/containers/cntr_1/snapshots"),
        ("GET", "/v1/containers/cntr_1/fs/archive"),
    ], asked


def test_only_a_snapshot_reference_names_a_snapshot():
    reference = b'SHELLGATE_CONTAINER_SNAPSHOT_V1\n{"snapshot_id":"snap_1"}'
    assert _snapshot_id_in(reference) == "snap_1"
    assert _snapshot_id_in(b"./\x00\x00 a tar archive") is None
    assert _snapshot_id_in(b"SHELLGATE_CONTAINER_SNAPSHOT_V1\nnot json") is None
    assert _snapshot_id_in(b'SHELLGATE_CONTAINER_SNAPSHOT_V1\n{"snapshot_id":""}') is None

