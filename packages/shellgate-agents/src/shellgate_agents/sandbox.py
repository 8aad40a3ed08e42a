"""The shellgate provider for the OpenAI Agents SDK's sandboxes (`agents.sandbox`).

The SDK's four-class pattern: `ShellgateSandboxClientOptions` (what a new container is
made with), `ShellgateSandboxSessionState` (what identifies it again: the server and the
container id, never the API key), `ShellgateSandboxSession` (one container, driven through
shellgate's HTTP API: processes, files by path, archives, ports) and
`ShellgateSandboxClient` (create, resume, delete).

The workspace is the container's `/mnt/data`, the directory its unprivileged user owns.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
import os
import shlex
import tempfile
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import urlencode, urlsplit

import httpx
from agents.sandbox.errors import (
    ConfigurationError,
    ErrorCode,
    ExecNonZeroError,
    ExecTimeoutError,
    ExecTransportError,
    ExposedPortUnavailableError,
    SandboxRuntimeError,
    WorkspaceArchiveReadError,
    WorkspaceArchiveWriteError,
    WorkspaceReadNotFoundError,
    WorkspaceWriteTypeError,
)
from agents.sandbox.files import EntryKind, FileEntry
from agents.sandbox.manifest import Manifest
from agents.sandbox.session import SandboxSession, SandboxSessionState
from agents.sandbox.session.base_sandbox_session import BaseSandboxSession
from agents.sandbox.session.dependencies import Dependencies
from agents.sandbox.session.manager import Instrumentation
from agents.sandbox.session.pty_output import collect_pty_output
from agents.sandbox.session.pty_types import (
    PTY_PROCESSES_MAX,
    PTY_PROCESSES_WARNING,
    PtyExecUpdate,
    allocate_pty_process_id,
    clamp_pty_yield_time_ms,
    process_id_to_prune_from_meta,
    resolve_pty_write_yield_time_ms,
)
from agents.sandbox.session.runtime_helpers import (
    RESOLVE_WORKSPACE_PATH_HELPER,
    RuntimeHelperScript,
)
from agents.sandbox.session.sandbox_client import BaseSandboxClient, BaseSandboxClientOptions
from agents.sandbox.snapshot import SnapshotBase, SnapshotSpec, resolve_snapshot
from agents.sandbox.types import ExecResult, ExposedPortEndpoint, Permissions, User
from agents.sandbox.workspace_paths import sandbox_path_str
from pydantic import Field, ValidationError, field_validator

from ._http import DEFAULT_BASE_URL, ShellgateApiError, ShellgateHttp, iter_sse, normalize_base_url
from ._wire import (
    AllowlistPolicy,
    Container,
    ContainerCreate,
    DroppedEvent,
    ExpiresAfter,
    FsEntry,
    FsList,
    OutputChunk,
    Process,
    ProcessCreate,
    ProcessOutput,
    PtySize,
    Snapshot,
    SnapshotCreate,
)

logger = logging.getLogger(__name__)

BACKEND_ID = "shellgate"
WORKSPACE_ROOT = "/mnt/data"
"""The only directory of a shellgate container its (unprivileged) user owns."""

_SDK_DEFAULT_ROOT = Manifest.model_fields["root"].default
MemoryLimit = Literal["1g", "4g", "16g", "64g"]
WorkspacePersistence = Literal["tar", "snapshot"]

# What a workspace persisted as a native snapshot is: these bytes, then the
# snapshot's id as JSON (a tar archive never starts with them).
_SNAPSHOT_REF_MAGIC = b"SHELLGATE_CONTAINER_SNAPSHOT_V1\n"

# The server's bounds for a process's timeout (api.md §1).
_PROCESS_TIMEOUT_MS_MAX = 300_000
_EXEC_DEFAULT_TIMEOUT_S = 120.0
# A process's environment is at most this many variables; a manifest with more
# passes them through `env` on the command line instead.
_PROCESS_ENV_MAX = 64
# The output long poll's longest wait (the server caps `wait_ms` there).
_OUTPUT_WAIT_MS_MAX = 30_000
# How many times a broken output stream is reattached without any new output.
_STREAM_REATTACH_MAX = 5
# Bytes of a read, a persisted workspace or a file body kept in memory before the
# rest spills to a temporary file (a 50 MB file does not sit in memory whole).
_SPOOL_IN_MEMORY_BYTES = 8 << 20
_UPLOAD_CHUNK_BYTES = 1 << 20
# The exit code shellgate's kill leaves (SIGKILL) when a process has none.
_KILLED_EXIT_CODE = 128 + 9

_STREAMING_TIMEOUT = httpx.Timeout(None, connect=10.0)
_TRANSFER_TIMEOUT = httpx.Timeout(600.0, connect=10.0, read=600.0, write=600.0)


def _env_default(name: str, fallback: str | None) -> str | None:
    value = os.environ.get(name)
    return value if value else fallback


class ShellgateSandboxClientOptions(BaseSandboxClientOptions):
    """How `ShellgateSandboxClient.create` makes a container.

    `base_url` is the server (`SHELLGATE_BASE_URL`, else `http://127.0.0.1:8080`; a
    trailing `/v1` is accepted); `api_key` a project's key (`SHELLGATE_API_KEY`). The
    key is never serialized with the options nor kept in the session state.
    `network_policy` is an allowlist of domain names (`None`: no network, shellgate's
    default); `exposed_ports` the container's TCP ports the server may proxy to
    (1024-65535). `workspace_persistence`: how the SDK's snapshot of the workspace is
    taken: `tar` (the default) streams the workspace as a tar archive into the
    snapshot; `snapshot` takes a shellgate snapshot of the container (all its files,
    on the server: `/v1/snapshots`) and stores only its id, and a restore makes the
    session's container anew from it. The server keeps those snapshots until they
    are deleted (`DELETE /v1/snapshots/{id}`, `shellgate snapshot delete`), within the
    project's snapshot quota. A cluster, which keeps no snapshots, and a manifest
    with mounts or excluded paths get `tar`.
    """

    type: Literal["shellgate"] = "shellgate"
    base_url: str = Field(
        default_factory=lambda: _env_default("SHELLGATE_BASE_URL", DEFAULT_BASE_URL) or ""
    )
    api_key: str | None = Field(default=None, exclude=True, repr=False)
    image: str | None = None
    memory_limit: MemoryLimit | None = None
    network_policy: tuple[str, ...] | None = None
    exposed_ports: tuple[int, ...] = ()
    expires_after_minutes: int | None = Field(default=None, ge=1)
    name: str | None = None
    workspace_persistence: WorkspacePersistence = "tar"

    @field_validator("exposed_ports")
    @classmethod
    def _ports_unique_and_unprivileged(cls, ports: tuple[int, ...]) -> tuple[int, ...]:
        for port in ports:
            if not 1024 <= port <= 65535:
                raise ValueError(f"exposed port {port} is outside 1024-65535")
        if len(set(ports)) != len(ports):
            raise ValueError("exposed_ports must be unique")
        return ports


class ShellgateSandboxSessionState(SandboxSessionState):
    """A shellgate container, as a run's state remembers it: the server, the container,
    and what a replacement would be made with if it is gone. No credentials."""

    type: Literal["shellgate"] = "shellgate"
    base_url: str
    container_id: str
    image: str | None = None
    memory_limit: MemoryLimit | None = None
    network_policy: tuple[str, ...] | None = None
    expires_after_minutes: int | None = None
    workspace_persistence: WorkspacePersistence = "tar"

    def _sanitize_persisted_provider_identity(
        self,
        data: dict[str, Any],
        *,
        mount_authority_redacted: bool,
    ) -> None:
        if mount_authority_redacted:
            data["container_id"] = ""
            data["workspace_root_ready"] = False


@dataclass
class _Interactive:
    """A process started by `exec_command` and not yet seen to end."""

    process_id: str
    tty: bool
    next_offset: int = 0
    exit_code: int | None = None
    ended: bool = False
    last_used: float = field(default_factory=time.monotonic)
    output_chunks: deque[bytes] = field(default_factory=deque)
    output_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    output_notify: asyncio.Event = field(default_factory=asyncio.Event)


def _exit_code_of(process: Process) -> int:
    if process.exit_code is not None:
        return process.exit_code
    if process.outcome is not None and process.outcome.exit_code is not None:
        return process.outcome.exit_code
    return _KILLED_EXIT_CODE


def _timed_out(process: Process) -> bool:
    return process.status == "timeout" or (
        process.outcome is not None and process.outcome.type == "timeout"
    )


def _timeout_ms(timeout_s: float | None, default_s: float) -> int:
    seconds = default_s if timeout_s is None else timeout_s
    return max(1, min(_PROCESS_TIMEOUT_MS_MAX, int(seconds * 1000)))


def _file_entry(entry: FsEntry) -> FileEntry:
    kinds = {
        "file": EntryKind.FILE,
        "directory": EntryKind.DIRECTORY,
        "symlink": EntryKind.SYMLINK,
    }
    kind = kinds.get(entry.type, EntryKind.OTHER)
    try:
        mode = int(entry.mode, 8)
    except ValueError:
        mode = 0
    permissions = Permissions.from_mode(mode & 0o777)
    if kind == EntryKind.DIRECTORY:
        permissions = permissions.model_copy(update={"directory": True})
    # shellgate's entries have no owner: every file a sandbox can see that it may
    # change is its one user's.
    return FileEntry(
        path=entry.path, permissions=permissions, owner="", group="", size=entry.size, kind=kind
    )


def _failed_command(command: tuple[str, ...], error: ShellgateApiError) -> ExecNonZeroError:
    """`ls`/`mkdir`/`rm` refused, as the SDK's exec fallbacks report it (what its
    callers catch)."""
    result = ExecResult(stdout=b"", stderr=error.body.message.encode("utf-8"), exit_code=1)
    return ExecNonZeroError(result, command=command, context=error.context())


async def _chunks_of(data: io.IOBase, first: bytes) -> AsyncIterator[bytes]:
    yield first
    while True:
        chunk = data.read(_UPLOAD_CHUNK_BYTES)
        if not chunk:
            return
        if isinstance(chunk, str):
            chunk = chunk.encode("utf-8")
        yield bytes(chunk)


def _first_chunk(data: io.IOBase, path: Path) -> bytes:
    """The body's first bytes, read before any request so that a payload of the
    wrong type fails as the SDK says (`WorkspaceWriteTypeError`), not mid-upload."""
    chunk = data.read(_UPLOAD_CHUNK_BYTES)
    if chunk is None:
        chunk = b""
    if isinstance(chunk, str):
        return chunk.encode("utf-8")
    if not isinstance(chunk, bytes | bytearray | memoryview):
        raise WorkspaceWriteTypeError(path=path, actual_type=type(chunk).__name__)
    return bytes(chunk)


def _snapshot_id_in(first: bytes) -> str | None:
    """The snapshot id a workspace persisted as a native snapshot names, or `None`
    for a tar archive."""
    if not first.startswith(_SNAPSHOT_REF_MAGIC):
        return None
    try:
        reference = json.loads(first[len(_SNAPSHOT_REF_MAGIC) :])
    except ValueError:
        return None
    snapshot_id = reference.get("snapshot_id") if isinstance(reference, dict) else None
    return snapshot_id if isinstance(snapshot_id, str) and snapshot_id else None


class ShellgateSandboxSession(BaseSandboxSession):
    """One shellgate container, driven through the server's HTTP API."""

    state: ShellgateSandboxSessionState

    def __init__(
        self,
        *,
        state: ShellgateSandboxSessionState,
        api_key: str | None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.state = state
        self._api = ShellgateHttp(base_url=state.base_url, api_key=api_key, transport=transport)
        self._pty_lock = asyncio.Lock()
        self._interactive: dict[int, _Interactive] = {}
        self._reserved_pty_ids: set[int] = set()

    # -- where things are ---------------------------------------------------------

    def _container_path(self, rest: str = "") -> str:
        return f"/v1/containers/{self.state.container_id}{rest}"

    def _runtime_helpers(self) -> tuple[RuntimeHelperScript, ...]:
        return (RESOLVE_WORKSPACE_PATH_HELPER,)

    def _current_runtime_helper_cache_key(self) -> object | None:
        return self.state.container_id

    async def _validate_path_access(self, path: Path | str, *, for_write: bool = False) -> Path:
        # The SDK's workspace confinement, resolved inside the container (a symlink
        # there may point anywhere); the server's own path rules apply on top.
        return await self._validate_remote_path_access(path, for_write=for_write)

    async def retrieve_container(self) -> Container:
        response = await self._api.request(
            "GET", self._container_path(), operation="retrieve container"
        )
        return Container.model_validate_json(response.content)

    # -- lifecycle ----------------------------------------------------------------

    async def running(self) -> bool:
        """Whether the container exists and can run commands: a `suspended` one
        counts, since shellgate wakes it (its files intact) for the next operation."""
        try:
            container = await self.retrieve_container()
        except (ShellgateApiError, httpx.HTTPError):
            return False
        return container.status in ("running", "suspended", "creating")

    async def container_exists(self) -> bool:
        """Whether the container is still there to reattach to (running, suspended or
        being made): `False` only when the server says it is gone (404); a server
        that cannot answer raises, so that a resume does not replace a container
        that may well be alive."""
        if not self.state.container_id:
            return False
        try:
            container = await self.retrieve_container()
        except ShellgateApiError as error:
            if error.status == 404:
                return False
            raise SandboxRuntimeError(
                message=f"shellgate could not say whether the container exists: {error}",
                error_code=ErrorCode.WORKSPACE_START_ERROR,
                op="start",
                context=error.context(),
                cause=error,
                retryable=error.retryable,
            ) from error
        except httpx.HTTPError as error:
            raise SandboxRuntimeError(
                message=f"shellgate at {self._api.base_url} could not be reached: {error}",
                error_code=ErrorCode.WORKSPACE_START_ERROR,
                op="start",
                context={"backend": BACKEND_ID, "base_url": self._api.base_url},
                cause=error,
                retryable=True,
            ) from error
        return container.status in ("running", "suspended", "creating")

    async def _after_stop(self) -> None:
        await self._api.aclose()

    async def _after_shutdown(self) -> None:
        await self._api.aclose()

    async def delete_container(self) -> None:
        """Deletes the container (and its files); one already gone is not an error."""
        try:
            await self._api.request("DELETE", self._container_path(), operation="delete container")
        except ShellgateApiError as error:
            if error.status != 404:
                raise
        finally:
            await self._api.aclose()

    # -- commands -----------------------------------------------------------------

    async def _environment(self) -> dict[str, str]:
        return dict(await self.state.manifest.environment.resolve())

    async def _start_process(
        self,
        argv: list[str],
        *,
        timeout_ms: int,
        tty: bool,
    ) -> Process:
        env = await self._environment()
        if len(env) > _PROCESS_ENV_MAX:
            argv = ["env", *[f"{key}={value}" for key, value in sorted(env.items())], *argv]
            env = {}
        body = ProcessCreate(
            # `bash -c` runs it (as exec does); `exec` leaves the argv itself as the
            # process, so a signal or a kill reaches it, not a shell around it.
            command="exec " + shlex.join(argv),
            stdin=tty,
            pty=PtySize() if tty else None,
            timeout_ms=timeout_ms,
            env=env or None,
        )
        response = await self._api.request(
            "POST",
            self._container_path("/processes"),
            operation="start process",
            json_body=body.model_dump(exclude_none=True),
        )
        return Process.model_validate_json(response.content)

    async def _kill_process(self, process_id: str) -> None:
        try:
            await self._api.request(
                "DELETE",
                self._container_path(f"/processes/{process_id}"),
                operation="kill process",
            )
        except ShellgateApiError as error:
            # Gone already (ended and forgotten, or its container deleted).
            if error.status not in (404, 409):
                raise

    def _transport_error(
        self, command: tuple[str, ...], error: Exception, *, retry_safe: bool = False
    ) -> ExecTransportError:
        context: dict[str, object] = {"backend": BACKEND_ID}
        retryable: bool | None = None
        message = f"shellgate: {error}"
        if isinstance(error, ShellgateApiError):
            context.update(error.context())
            retryable = error.retryable
            if error.unknown_route:
                message = (
                    f"shellgate at {self._api.base_url} does not serve {error.operation}: "
                    "shellgate-agents needs a server with the processes, files and archive "
                    "routes"
                )
        else:
            context["provider_error"] = f"{type(error).__name__}: {error}"
        if retry_safe:
            # The process was never started: running the command another way is safe.
            context["retry_safe"] = True
        return ExecTransportError(
            command=command,
            context=context,
            cause=error,
            message=message,
            retryable=retryable,
        )

    async def _exec_internal(
        self,
        *command: str | Path,
        timeout: float | None = None,
    ) -> ExecResult:
        argv = [str(part) for part in command]
        timeout_ms = _timeout_ms(timeout, _EXEC_DEFAULT_TIMEOUT_S)
        try:
            process = await self._start_process(argv, timeout_ms=timeout_ms, tty=False)
        except (ShellgateApiError, httpx.HTTPError) as error:
            raise self._transport_error(tuple(argv), error, retry_safe=True) from error
        try:
            # The server kills the process at its timeout whatever this client does;
            # this bound only keeps a server that never answers from hanging the run.
            stdout, stderr, ended = await asyncio.wait_for(
                self._read_whole_output(process.id, tuple(argv)),
                timeout=timeout_ms / 1000 + 60,
            )
        except asyncio.TimeoutError as error:
            await self._kill_process_quietly(process.id)
            raise ExecTimeoutError(
                command=argv, timeout_s=timeout_ms / 1000, cause=error
            ) from error
        except BaseException:
            # Cancelled, or the output could not be read: the command must not run on.
            await self._kill_process_quietly(process.id)
            raise
        if _timed_out(ended):
            raise ExecTimeoutError(command=argv, timeout_s=timeout_ms / 1000)
        return ExecResult(stdout=stdout, stderr=stderr, exit_code=_exit_code_of(ended))

    async def _kill_process_quietly(self, process_id: str) -> None:
        try:
            await asyncio.shield(self._kill_process(process_id))
        except (ShellgateApiError, httpx.HTTPError, asyncio.CancelledError) as error:
            logger.debug("shellgate: could not kill process %s: %s", process_id, error)

    async def _read_whole_output(
        self, process_id: str, command: tuple[str, ...]
    ) -> tuple[bytes, bytes, Process]:
        """Every byte the process writes, from its output stream (SSE), until its exit;
        a stream that breaks is reattached from the last offset seen."""
        stdout = bytearray()
        stderr = bytearray()
        offset = 0
        reattach_without_progress = 0
        path = self._container_path(f"/processes/{process_id}/output")
        while True:
            offset_before = offset
            try:
                async with self._api.stream(
                    "GET",
                    path,
                    operation="process output",
                    params={"stream": "true", "after": offset},
                    timeout=_STREAMING_TIMEOUT,
                ) as response:
                    async for event in iter_sse(response):
                        if event.event == "output":
                            chunk = OutputChunk.model_validate_json(event.data)
                            data = base64.b64decode(chunk.data)
                            # A reattached stream may repeat what was already read.
                            skip = max(0, offset - chunk.offset)
                            data = data[skip:]
                            (stderr if chunk.stream == "stderr" else stdout).extend(data)
                            offset = max(offset, chunk.offset + skip + len(data))
                        elif event.event == "dropped":
                            dropped = DroppedEvent.model_validate_json(event.data)
                            raise ExecTransportError(
                                command=command,
                                context={
                                    "backend": BACKEND_ID,
                                    "reason": "output_dropped",
                                    "dropped_bytes": dropped.bytes,
                                },
                                message=(
                                    f"shellgate: {dropped.bytes} bytes of the command's output "
                                    "were dropped before they could be read"
                                ),
                            )
                        elif event.event == "exit":
                            return (
                                bytes(stdout),
                                bytes(stderr),
                                Process.model_validate_json(event.data),
                            )
            except ShellgateApiError as error:
                raise self._transport_error(command, error) from error
            except (httpx.HTTPError, ValidationError) as error:
                if offset == offset_before:
                    reattach_without_progress += 1
                    if reattach_without_progress > _STREAM_REATTACH_MAX:
                        raise self._transport_error(command, error) from error
                else:
                    reattach_without_progress = 0
                continue
            # The stream ended without its `exit` event: reattach from where it stopped.
            if offset == offset_before:
                reattach_without_progress += 1
                if reattach_without_progress > _STREAM_REATTACH_MAX:
                    raise ExecTransportError(
                        command=command,
                        context={"backend": BACKEND_ID, "reason": "stream_ended_without_exit"},
                        message="shellgate: the output stream ended without the process's exit",
                    )

    # -- interactive processes (the SDK's exec_command / write_stdin) -------------

    def supports_pty(self) -> bool:
        return True

    async def pty_exec_start(
        self,
        *command: str | Path,
        timeout: float | None = None,
        shell: bool | list[str] = True,
        user: str | User | None = None,
        tty: bool = False,
        yield_time_s: float | None = None,
        max_output_tokens: int | None = None,
    ) -> PtyExecUpdate:
        argv = self._prepare_exec_command(*command, shell=shell, user=user)
        # An interactive process may outlive many model turns: it gets the longest
        # timeout the server allows unless the caller gave one.
        timeout_ms = _timeout_ms(timeout, _PROCESS_TIMEOUT_MS_MAX / 1000)
        async with self._pty_lock:
            pruned = self._prune_interactive_if_full()
        if pruned is not None:
            # Ended before the new one starts: the server keeps as many live
            # processes per container as the SDK does (64), and refuses one more.
            await self._kill_process_quietly(pruned.process_id)
        try:
            process = await self._start_process(argv, timeout_ms=timeout_ms, tty=tty)
        except (ShellgateApiError, httpx.HTTPError) as error:
            raise self._transport_error(
                tuple(str(part) for part in command), error, retry_safe=True
            ) from error

        entry = _Interactive(process_id=process.id, tty=tty)
        async with self._pty_lock:
            pty_id = allocate_pty_process_id(self._reserved_pty_ids)
            self._reserved_pty_ids.add(pty_id)
            self._interactive[pty_id] = entry
            count = len(self._interactive)
        if count >= PTY_PROCESSES_WARNING:
            logger.warning("shellgate: %s interactive processes are open", count)

        yield_ms = 10_000 if yield_time_s is None else int(yield_time_s * 1000)
        return await self._collect(
            pty_id,
            entry,
            yield_time_ms=clamp_pty_yield_time_ms(yield_ms),
            max_output_tokens=max_output_tokens,
        )

    async def pty_write_stdin(
        self,
        *,
        session_id: int,
        chars: str,
        yield_time_s: float | None = None,
        max_output_tokens: int | None = None,
    ) -> PtyExecUpdate:
        async with self._pty_lock:
            entry = self._resolve_pty_session_entry(
                pty_processes=self._interactive, session_id=session_id
            )
        if chars:
            if not entry.tty:
                # The SDK's words: its tool tells the model to start with `tty=true`.
                raise RuntimeError("stdin is not available for this process")
            try:
                await self._api.request(
                    "POST",
                    self._container_path(f"/processes/{entry.process_id}/stdin"),
                    operation="write stdin",
                    content=chars.encode("utf-8"),
                    headers={"Content-Type": "application/octet-stream"},
                )
            except ShellgateApiError as error:
                # It exited meanwhile: its end is reported with the output below.
                if error.code != "process_exited" and error.status != 409:
                    raise self._transport_error(("write_stdin",), error) from error
            except httpx.HTTPError as error:
                raise self._transport_error(("write_stdin",), error) from error

        yield_ms = 250 if yield_time_s is None else int(yield_time_s * 1000)
        update = await self._collect(
            session_id,
            entry,
            yield_time_ms=resolve_pty_write_yield_time_ms(
                yield_time_ms=yield_ms, input_empty=chars == ""
            ),
            max_output_tokens=max_output_tokens,
        )
        entry.last_used = time.monotonic()
        return update

    async def pty_terminate_all(self) -> None:
        async with self._pty_lock:
            entries = list(self._interactive.values())
            self._interactive.clear()
            self._reserved_pty_ids.clear()
        for entry in entries:
            if not entry.ended:
                await self._kill_process_quietly(entry.process_id)

    def _prune_interactive_if_full(self) -> _Interactive | None:
        if len(self._interactive) < PTY_PROCESSES_MAX:
            return None
        meta = [
            (pty_id, entry.last_used, entry.ended) for pty_id, entry in self._interactive.items()
        ]
        victim = process_id_to_prune_from_meta(meta)
        if victim is None:
            return None
        self._reserved_pty_ids.discard(victim)
        return self._interactive.pop(victim, None)

    async def _poll_output(self, entry: _Interactive, deadline: float) -> None:
        """One long poll of the process's output: waits until something new, its
        end, or the deadline, and queues what came for the SDK's collector."""
        if entry.ended:
            return
        wait_ms = max(0, min(_OUTPUT_WAIT_MS_MAX, int((deadline - time.monotonic()) * 1000)))
        try:
            response = await self._api.request(
                "GET",
                self._container_path(f"/processes/{entry.process_id}/output"),
                operation="process output",
                params={"after": entry.next_offset, "wait_ms": wait_ms},
                timeout=httpx.Timeout(wait_ms / 1000 + 60, connect=10.0),
            )
            output = ProcessOutput.model_validate_json(response.content)
        except (ShellgateApiError, httpx.HTTPError, ValidationError) as error:
            raise self._transport_error(("process output",), error) from error
        received = bytearray()
        for chunk in output.chunks:
            data = base64.b64decode(chunk.data)
            skip = max(0, entry.next_offset - chunk.offset)
            received.extend(data[skip:])
            entry.next_offset = max(entry.next_offset, chunk.offset + len(data))
        entry.next_offset = max(entry.next_offset, output.next_offset)
        if output.dropped_bytes:
            # A terminal nobody read for a while lost its oldest output: say so in it.
            received[:0] = f"[{output.dropped_bytes} bytes of output dropped]\n".encode()
        if received:
            async with entry.output_lock:
                entry.output_chunks.append(bytes(received))
            entry.output_notify.set()
        if output.process.ended and entry.next_offset >= output.process.output_bytes:
            entry.ended = True
            entry.exit_code = _exit_code_of(output.process)

    async def _collect(
        self,
        pty_id: int,
        entry: _Interactive,
        *,
        yield_time_ms: int,
        max_output_tokens: int | None,
    ) -> PtyExecUpdate:
        async def no_wait(_remaining: float) -> None:
            # The long poll itself is the wait.
            return None

        output, original_token_count, ended = await collect_pty_output(
            output_chunks=entry.output_chunks,
            output_lock=entry.output_lock,
            output_notify=entry.output_notify,
            is_done=lambda: entry.ended,
            yield_time_ms=yield_time_ms,
            max_output_tokens=max_output_tokens,
            poll_output=lambda deadline: self._poll_output(entry, deadline),
            wait_for_output=no_wait,
        )
        live_id: int | None = pty_id
        if ended:
            async with self._pty_lock:
                self._interactive.pop(pty_id, None)
                self._reserved_pty_ids.discard(pty_id)
            live_id = None
        return PtyExecUpdate(
            process_id=live_id,
            output=output,
            exit_code=entry.exit_code if ended else None,
            original_token_count=original_token_count,
        )

    # -- files --------------------------------------------------------------------

    async def _download(self, path: str, *, operation: str, params: Any) -> io.IOBase:
        """A streamed GET into a spooled temporary file (memory, then disk), rewound."""
        spool = tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY_BYTES)
        try:
            async with self._api.stream(
                "GET", path, operation=operation, params=params, timeout=_TRANSFER_TIMEOUT
            ) as response:
                async for chunk in response.aiter_bytes():
                    spool.write(chunk)
        except BaseException:
            spool.close()
            raise
        spool.seek(0)
        # A file object the SDK reads and closes (an `io.IOBase` at run time).
        return cast(io.IOBase, spool)

    async def read(self, path: Path | str, *, user: str | User | None = None) -> io.IOBase:
        if user is not None:
            await self._check_read_with_exec(path, user=user)
        workspace_path = await self._validate_path_access(path)
        try:
            return await self._download(
                self._container_path("/fs/content"),
                operation="read file",
                params={"path": sandbox_path_str(workspace_path)},
            )
        except ShellgateApiError as error:
            if error.status == 404:
                raise WorkspaceReadNotFoundError(
                    path=workspace_path, context=error.context()
                ) from error
            raise WorkspaceArchiveReadError(
                path=workspace_path, context=error.context(), retryable=error.retryable
            ) from error
        except httpx.HTTPError as error:
            raise WorkspaceArchiveReadError(path=workspace_path, cause=error) from error

    async def _read_bounded(self, path: Path, *, max_bytes: int) -> bytes:
        workspace_path = await self._validate_path_access(path)
        received = bytearray()
        try:
            async with self._api.stream(
                "GET",
                self._container_path("/fs/content"),
                operation="read file",
                params={"path": sandbox_path_str(workspace_path)},
                timeout=_TRANSFER_TIMEOUT,
            ) as response:
                async for chunk in response.aiter_bytes():
                    received.extend(chunk[: max_bytes - len(received)])
                    if len(received) >= max_bytes:
                        break
        except ShellgateApiError as error:
            if error.status == 404:
                raise WorkspaceReadNotFoundError(path=path) from error
            raise WorkspaceArchiveReadError(
                path=path, context=error.context(), retryable=error.retryable
            ) from error
        return bytes(received)

    async def write(
        self,
        path: Path | str,
        data: io.IOBase,
        *,
        user: str | User | None = None,
    ) -> None:
        if user is not None:
            await self._check_write_with_exec(path, user=user)
        workspace_path = await self._validate_path_access(path, for_write=True)
        first = _first_chunk(data, workspace_path)
        try:
            await self._api.request(
                "PUT",
                self._container_path("/fs/content"),
                operation="write file",
                params={"path": sandbox_path_str(workspace_path), "parents": "true"},
                content=_chunks_of(data, first),
                headers={"Content-Type": "application/octet-stream"},
                timeout=_TRANSFER_TIMEOUT,
            )
        except ShellgateApiError as error:
            raise WorkspaceArchiveWriteError(
                path=workspace_path,
                context=error.context(),
                retryable=error.retryable,
                message=f"failed to write {workspace_path}: {error.body.message}",
            ) from error
        except httpx.HTTPError as error:
            raise WorkspaceArchiveWriteError(path=workspace_path, cause=error) from error

    async def ls(
        self,
        path: Path | str,
        *,
        user: str | User | None = None,
    ) -> list[FileEntry]:
        if user is not None:
            return await super().ls(path, user=user)
        workspace_path = await self._validate_path_access(path)
        path_arg = sandbox_path_str(workspace_path)
        try:
            response = await self._api.request(
                "GET",
                self._container_path("/fs/list"),
                operation="list directory",
                params={"path": path_arg, "depth": 1},
            )
        except ShellgateApiError as error:
            raise _failed_command(("ls", "-la", "--", path_arg), error) from error
        except httpx.HTTPError as error:
            raise self._transport_error(("ls", path_arg), error) from error
        listing = FsList.model_validate_json(response.content)
        if listing.truncated:
            logger.warning("shellgate: the listing of %s was truncated by the server", path_arg)
        return [_file_entry(entry) for entry in listing.data]

    async def mkdir(
        self,
        path: Path | str,
        *,
        parents: bool = False,
        user: str | User | None = None,
    ) -> None:
        if user is not None:
            await super().mkdir(path, parents=parents, user=user)
            return
        workspace_path = await self._validate_path_access(path, for_write=True)
        path_arg = sandbox_path_str(workspace_path)
        try:
            await self._api.request(
                "POST",
                self._container_path("/fs/mkdir"),
                operation="make directory",
                json_body={"path": path_arg, "parents": parents},
            )
        except ShellgateApiError as error:
            raise _failed_command(("mkdir", path_arg), error) from error
        except httpx.HTTPError as error:
            raise self._transport_error(("mkdir", path_arg), error) from error

    async def rm(
        self,
        path: Path | str,
        *,
        recursive: bool = False,
        user: str | User | None = None,
    ) -> None:
        if user is not None:
            await super().rm(path, recursive=recursive, user=user)
            return
        workspace_path = await self._validate_path_access(path, for_write=True)
        path_arg = sandbox_path_str(workspace_path)
        try:
            await self._api.request(
                "DELETE",
                self._container_path("/fs"),
                operation="remove",
                params={"path": path_arg, "recursive": "true" if recursive else "false"},
            )
        except ShellgateApiError as error:
            # `rm -rf`'s rule: a recursive removal of nothing succeeds.
            if recursive and error.status == 404:
                return
            raise _failed_command(("rm", path_arg), error) from error
        except httpx.HTTPError as error:
            raise self._transport_error(("rm", path_arg), error) from error

    # -- the workspace as a tar stream, or as a snapshot --------------------------

    async def persist_workspace(self) -> io.IOBase:
        if self.state.workspace_persistence == "snapshot" and self._native_snapshot_fits():
            native = await self._persist_workspace_as_snapshot()
            if native is not None:
                return native
        return await self._persist_workspace_as_tar()

    def _native_snapshot_fits(self) -> bool:
        """A snapshot holds every file of the container: it stands for the workspace
        only when nothing in it is to be left out (no mounts, no excluded paths)."""
        return (
            not self.state.manifest.mount_targets()
            and not self._persist_workspace_skip_relpaths()
        )

    async def _persist_workspace_as_snapshot(self) -> io.IOBase | None:
        """A shellgate snapshot of the container, as the reference bytes the SDK's
        snapshot stores; `None` where the server keeps no snapshots (501)."""
        root = self._workspace_root_path()
        body = SnapshotCreate(name=f"agents-{self.state.session_id.hex[:12]}")
        try:
            response = await self._api.request(
                "POST",
                self._container_path("/snapshots"),
                operation="snapshot container",
                json_body=body.model_dump(exclude_none=True),
                timeout=_TRANSFER_TIMEOUT,
            )
        except ShellgateApiError as error:
            if error.status == 501:
                return None
            raise WorkspaceArchiveReadError(
                path=root, context=error.context(), retryable=error.retryable
            ) from error
        except httpx.HTTPError as error:
            raise WorkspaceArchiveReadError(path=root, cause=error) from error
        snapshot = Snapshot.model_validate_json(response.content)
        reference = json.dumps({"snapshot_id": snapshot.id}, separators=(",", ":"))
        return io.BytesIO(_SNAPSHOT_REF_MAGIC + reference.encode("utf-8"))

    async def _persist_workspace_as_tar(self) -> io.IOBase:
        root = self._workspace_root_path()
        excludes = sorted(
            rel.as_posix().removeprefix("./") for rel in self._persist_workspace_skip_relpaths()
        )
        params: list[tuple[str, str]] = [("path", root.as_posix())]
        params.extend(("exclude", pattern) for pattern in excludes)
        try:
            return await self._download(
                self._container_path("/fs/archive"),
                operation="export workspace",
                params=params,
            )
        except ShellgateApiError as error:
            raise WorkspaceArchiveReadError(
                path=root, context=error.context(), retryable=error.retryable
            ) from error
        except httpx.HTTPError as error:
            raise WorkspaceArchiveReadError(path=root, cause=error) from error

    async def hydrate_workspace(self, data: io.IOBase) -> None:
        root = self._workspace_root_path()
        first = _first_chunk(data, root)
        snapshot_id = _snapshot_id_in(first)
        if snapshot_id is not None:
            await self._replace_container_from_snapshot(snapshot_id)
            return
        try:
            if root.as_posix() != WORKSPACE_ROOT:
                await self._api.request(
                    "POST",
                    self._container_path("/fs/mkdir"),
                    operation="make directory",
                    json_body={"path": root.as_posix(), "parents": True},
                )
            await self._api.request(
                "POST",
                self._container_path("/fs/archive"),
                operation="import workspace",
                params={"path": root.as_posix()},
                content=_chunks_of(data, first),
                headers={"Content-Type": "application/x-tar"},
                timeout=_TRANSFER_TIMEOUT,
            )
        except ShellgateApiError as error:
            # A refused member (`param: archive`) is named in the message.
            raise WorkspaceArchiveWriteError(
                path=root,
                context=error.context(),
                retryable=error.retryable,
                message=f"failed to import the workspace archive: {error.body.message}",
            ) from error
        except httpx.HTTPError as error:
            raise WorkspaceArchiveWriteError(path=root, cause=error) from error

    async def _replace_container_from_snapshot(self, snapshot_id: str) -> None:
        """Makes the session's container anew from a shellgate snapshot (its files
        whole: the workspace and everything else) and deletes the one it replaces.
        The snapshot is kept: the same state may be restored again."""
        root = self._workspace_root_path()
        body = ContainerCreate(
            name=f"agents-{self.state.session_id.hex[:12]}",
            snapshot_id=snapshot_id,
            memory_limit=self.state.memory_limit,
            network_policy=(
                AllowlistPolicy(allowed_domains=list(self.state.network_policy))
                if self.state.network_policy is not None
                else None
            ),
            expires_after=(
                ExpiresAfter(minutes=self.state.expires_after_minutes)
                if self.state.expires_after_minutes is not None
                else None
            ),
            exposed_ports=list(self.state.exposed_ports) or None,
        )
        try:
            response = await self._api.request(
                "POST",
                "/v1/containers",
                operation="create container from snapshot",
                json_body=body.model_dump(exclude_none=True),
                timeout=_TRANSFER_TIMEOUT,
            )
        except ShellgateApiError as error:
            raise WorkspaceArchiveWriteError(
                path=root,
                context={**error.context(), "snapshot_id": snapshot_id},
                retryable=error.retryable,
                message=f"failed to make a container from snapshot {snapshot_id}: "
                f"{error.body.message}",
            ) from error
        except httpx.HTTPError as error:
            raise WorkspaceArchiveWriteError(path=root, cause=error) from error
        replaced = self.state.container_id
        self.state.container_id = Container.model_validate_json(response.content).id
        try:
            await self._api.request(
                "DELETE", f"/v1/containers/{replaced}", operation="delete container"
            )
        except (ShellgateApiError, httpx.HTTPError) as error:
            # The copy is the session's now; the old one expires as any container does.
            logger.warning("could not delete the replaced container %s: %s", replaced, error)

    # -- ports --------------------------------------------------------------------

    async def _resolve_exposed_port(self, port: int) -> ExposedPortEndpoint:
        """The server's host route to the port (`{port}-{container}.{base domain}`),
        with the container's port token as the query that authorizes it."""
        try:
            container = await self.retrieve_container()
        except (ShellgateApiError, httpx.HTTPError) as error:
            raise ExposedPortUnavailableError(
                port=port,
                exposed_ports=self.state.exposed_ports,
                reason="backend_unavailable",
                context={"backend": BACKEND_ID},
                cause=error,
            ) from error
        exposed = next((item for item in container.exposed_ports if item.port == port), None)
        if exposed is None or not container.port_token:
            raise ExposedPortUnavailableError(
                port=port,
                exposed_ports=self.state.exposed_ports,
                reason="backend_unavailable",
                context={
                    "backend": BACKEND_ID,
                    "detail": "the container does not expose this port (was it created with it?)",
                },
            )
        url = urlsplit(exposed.url)
        tls = url.scheme == "https"
        host = url.hostname or ""
        return ExposedPortEndpoint(
            host=host,
            port=url.port or (443 if tls else 80),
            tls=tls,
            query=urlencode({"shellgate_port_token": container.port_token}),
        )


class ShellgateSandboxClient(BaseSandboxClient[ShellgateSandboxClientOptions]):
    """Makes, reattaches and deletes shellgate containers for the Agents SDK.

    `api_key` (else the options', else `SHELLGATE_API_KEY`) authenticates. `resume`
    has only a session state (no key in it): it uses the client's key, else the one
    this client's creates were given for that server, else `SHELLGATE_API_KEY`.
    """

    backend_id = BACKEND_ID
    _instrumentation: Instrumentation

    def __init__(
        self,
        *,
        api_key: str | None = None,
        instrumentation: Instrumentation | None = None,
        dependencies: Dependencies | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """`transport` replaces httpx's own (a proxy, or a test's fake server)."""
        super().__init__()
        self._api_key = api_key
        self._transport = transport
        # The keys this client's creates were given, by server: a `resume` by the
        # same client (its state carries no key) uses them. In memory only.
        self._keys_by_server: dict[str, str] = {}
        self._instrumentation = (
            instrumentation if instrumentation is not None else Instrumentation()
        )
        self._dependencies = dependencies

    def __repr__(self) -> str:
        return "ShellgateSandboxClient()"

    def _key(
        self,
        options: ShellgateSandboxClientOptions | None = None,
        *,
        base_url: str | None = None,
    ) -> str | None:
        if self._api_key:
            return self._api_key
        if options is not None and options.api_key:
            self._keys_by_server[normalize_base_url(options.base_url)] = options.api_key
            return options.api_key
        if base_url is not None and normalize_base_url(base_url) in self._keys_by_server:
            return self._keys_by_server[normalize_base_url(base_url)]
        return _env_default("SHELLGATE_API_KEY", None)

    @staticmethod
    def _workspace_manifest(manifest: Manifest | None) -> Manifest:
        """The SDK's default root (`/workspace`) cannot exist in a shellgate
        container (its user may write only `/mnt/data` and `/tmp`): it becomes
        `/mnt/data`. Any other root is kept as given."""
        if manifest is None:
            return Manifest(root=WORKSPACE_ROOT)
        if manifest.root == _SDK_DEFAULT_ROOT:
            return manifest.model_copy(update={"root": WORKSPACE_ROOT})
        return manifest

    async def _create_container(
        self,
        *,
        base_url: str,
        api_key: str | None,
        name: str,
        image: str | None,
        memory_limit: str | None,
        network_policy: tuple[str, ...] | None,
        expires_after_minutes: int | None,
        exposed_ports: tuple[int, ...],
    ) -> Container:
        body = ContainerCreate(
            name=name,
            image=image,
            memory_limit=memory_limit,
            network_policy=(
                AllowlistPolicy(allowed_domains=list(network_policy))
                if network_policy is not None
                else None
            ),
            expires_after=(
                ExpiresAfter(minutes=expires_after_minutes)
                if expires_after_minutes is not None
                else None
            ),
            exposed_ports=list(exposed_ports) or None,
        )
        api = ShellgateHttp(base_url=base_url, api_key=api_key, transport=self._transport)
        try:
            response = await api.request(
                "POST",
                "/v1/containers",
                operation="create container",
                json_body=body.model_dump(exclude_none=True),
            )
            return Container.model_validate_json(response.content)
        except ShellgateApiError as error:
            raise ConfigurationError(
                message=f"shellgate could not create a container: {error.body.message}",
                error_code=ErrorCode.SANDBOX_CONFIG_INVALID,
                op="start",
                context=error.context(),
                cause=error,
                retryable=error.retryable,
            ) from error
        except httpx.HTTPError as error:
            raise ConfigurationError(
                message=f"shellgate at {api.base_url} could not be reached: {error}",
                error_code=ErrorCode.SANDBOX_CONFIG_INVALID,
                op="start",
                context={"backend": BACKEND_ID, "base_url": api.base_url},
                cause=error,
                retryable=True,
            ) from error
        finally:
            await api.aclose()

    async def create(
        self,
        *,
        snapshot: SnapshotSpec | SnapshotBase | None = None,
        manifest: Manifest | None = None,
        options: ShellgateSandboxClientOptions,
    ) -> SandboxSession:
        if not options.base_url:
            raise ConfigurationError(
                message="ShellgateSandboxClientOptions.base_url must not be empty",
                error_code=ErrorCode.SANDBOX_CONFIG_INVALID,
                op="start",
                context={"backend": BACKEND_ID},
            )
        manifest = self._validate_manifest_for_create(self._workspace_manifest(manifest))
        api_key = self._key(options)
        session_id = uuid.uuid4()
        container = await self._create_container(
            base_url=options.base_url,
            api_key=api_key,
            name=options.name or f"agents-{session_id.hex[:12]}",
            image=options.image,
            memory_limit=options.memory_limit,
            network_policy=options.network_policy,
            expires_after_minutes=options.expires_after_minutes,
            exposed_ports=options.exposed_ports,
        )
        state = ShellgateSandboxSessionState(
            session_id=session_id,
            manifest=manifest,
            snapshot=resolve_snapshot(snapshot, str(session_id)),
            base_url=options.base_url,
            container_id=container.id,
            exposed_ports=options.exposed_ports,
            image=options.image,
            memory_limit=options.memory_limit,
            network_policy=options.network_policy,
            expires_after_minutes=options.expires_after_minutes,
            workspace_persistence=options.workspace_persistence,
        )
        inner = ShellgateSandboxSession(state=state, api_key=api_key, transport=self._transport)
        return self._wrap_session(inner, instrumentation=self._instrumentation)

    async def delete(self, session: SandboxSession) -> SandboxSession:
        inner = session._inner
        if not isinstance(inner, ShellgateSandboxSession):
            raise TypeError("ShellgateSandboxClient.delete expects a ShellgateSandboxSession")
        cleanup_error: BaseException | None = None
        try:
            await inner.shutdown()
        except Exception as error:
            cleanup_error = error
        await inner.delete_container()
        if cleanup_error is not None:
            raise cleanup_error
        return session

    async def resume(self, state: SandboxSessionState) -> SandboxSession:
        """Reattaches to the state's container if it still exists (running or
        suspended: its files are kept); otherwise makes a replacement with the same
        settings, which `start()` hydrates from the state's snapshot."""
        if not isinstance(state, ShellgateSandboxSessionState):
            raise TypeError("ShellgateSandboxClient.resume expects a ShellgateSandboxSessionState")
        state.assert_path_grants_rebound()
        api_key = self._key(base_url=state.base_url)
        inner = ShellgateSandboxSession(state=state, api_key=api_key, transport=self._transport)
        alive = await inner.container_exists()
        if not alive:
            container = await self._create_container(
                base_url=state.base_url,
                api_key=api_key,
                name=f"agents-{state.session_id.hex[:12]}",
                image=state.image,
                memory_limit=state.memory_limit,
                network_policy=state.network_policy,
                expires_after_minutes=state.expires_after_minutes,
                exposed_ports=state.exposed_ports,
            )
            state.container_id = container.id
            state.workspace_root_ready = False
        inner._set_start_state_preserved(alive)
        return self._wrap_session(inner, instrumentation=self._instrumentation)

    def deserialize_session_state(self, payload: dict[str, object]) -> SandboxSessionState:
        return self._deserialize_session_state_payload(payload, ShellgateSandboxSessionState)
