"""The JSON shapes of shellgate's HTTP API this provider reads and writes.

Typed (pydantic) rather than walked as dicts, so a shape the server changes fails
here, at the boundary, with the field's name. Unknown fields are ignored: a newer
server may add some.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Shape(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class ApiErrorBody(_Shape):
    message: str = ""
    type: str | None = None
    param: str | None = None
    code: str | None = None


class ApiErrorEnvelope(_Shape):
    """OpenAI's error envelope, which every shellgate error uses."""

    error: ApiErrorBody


class ExposedPort(_Shape):
    """One of a container's `exposed_ports`: where the server serves it."""

    port: int
    url: str
    path_url: str | None = None


class Container(_Shape):
    id: str
    status: str
    exposed_ports: tuple[ExposedPort, ...] = ()
    port_token: str | None = None


class ProcessOutcome(_Shape):
    type: str
    exit_code: int | None = None


class Process(_Shape):
    id: str
    status: Literal["running", "exited", "killed", "timeout"] | str
    exit_code: int | None = None
    outcome: ProcessOutcome | None = None
    output_bytes: int = 0

    @property
    def ended(self) -> bool:
        return self.status != "running"


class OutputChunk(_Shape):
    stream: Literal["stdout", "stderr", "pty"] | str
    offset: int
    data: str
    """Base64."""


class ProcessOutput(_Shape):
    chunks: tuple[OutputChunk, ...] = ()
    next_offset: int
    dropped_bytes: int = 0
    process: Process


class DroppedEvent(_Shape):
    bytes: int


class FsEntry(_Shape):
    path: str
    name: str = ""
    type: Literal["file", "directory", "symlink", "other"] | str
    size: int = 0
    mode: str = "0644"
    """Octal, as a string."""
    modified_at: int | None = None
    link_target: str | None = None


class FsList(_Shape):
    data: tuple[FsEntry, ...] = ()
    truncated: bool = False


class PtySize(_Shape):
    cols: int = 80
    rows: int = 24
    term: str = "xterm-256color"


class ProcessCreate(BaseModel):
    """`POST /v1/containers/{id}/processes`."""

    model_config = ConfigDict(extra="forbid")

    command: str
    stdin: bool = False
    pty: PtySize | None = None
    timeout_ms: int = Field(ge=1, le=300_000)
    env: dict[str, str] | None = None


class AllowlistPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["allowlist"] = "allowlist"
    allowed_domains: list[str]


class ExpiresAfter(BaseModel):
    model_config = ConfigDict(extra="forbid")

    anchor: Literal["last_active_at"] = "last_active_at"
    minutes: int


class ContainerCreate(BaseModel):
    """`POST /v1/containers`. Fields left out are the server's defaults (and a
    server without a feature, e.g. `exposed_ports`, accepts a request that does
    not use it)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    image: str | None = None
    memory_limit: str | None = None
    network_policy: AllowlistPolicy | None = None
    expires_after: ExpiresAfter | None = None
    exposed_ports: list[int] | None = None
    snapshot_id: str | None = None


class SnapshotCreate(BaseModel):
    """`POST /v1/containers/{id}/snapshots`."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None


class Snapshot(_Shape):
    """The snapshot object (`container.snapshot`): the fields this provider reads."""

    id: str
    container_id: str
