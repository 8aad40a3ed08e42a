"""One shellgate server, spoken to over HTTP: authentication, the error envelope, and
server-sent events.

Everything here raises `ShellgateApiError` (the server answered with an error) or
`httpx.HTTPError` (it could not be reached, or the connection broke); the session maps
both onto the Agents SDK's error types, where it knows which operation failed.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import ValidationError

from ._wire import ApiErrorBody, ApiErrorEnvelope

DEFAULT_BASE_URL = "http://127.0.0.1:8080"

# A request that is not a long poll or a stream: generous, since a create may wait
# for a container to be made and a command for its container to wake.
_DEFAULT_TIMEOUT = httpx.Timeout(120.0, connect=10.0)
_MAX_ERROR_MESSAGE_CHARS = 2000

# The HTTP statuses a retry of the same request may fix.
_RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})


class ShellgateApiError(Exception):
    """The server answered with an error (OpenAI's envelope, or a bare status)."""

    def __init__(self, *, status: int, body: ApiErrorBody, operation: str) -> None:
        self.status = status
        self.body = body
        self.operation = operation
        detail = body.message or f"HTTP {status}"
        super().__init__(f"{operation}: HTTP {status}: {detail}")

    @property
    def code(self) -> str | None:
        return self.body.code

    @property
    def param(self) -> str | None:
        return self.body.param

    @property
    def retryable(self) -> bool:
        return self.status in _RETRYABLE_STATUSES

    @property
    def unknown_route(self) -> bool:
        """The server does not serve this route at all (an older shellgate)."""
        return self.status == 404 and self.body.code == "unknown_url"

    def context(self) -> dict[str, object]:
        """What the SDK's errors carry about it (never a request body)."""
        context: dict[str, object] = {
            "backend": "shellgate",
            "operation": self.operation,
            "http_status": self.status,
            "message": self.body.message,
        }
        if self.body.code:
            context["code"] = self.body.code
        if self.body.param:
            context["param"] = self.body.param
        return context


def normalize_base_url(base_url: str) -> str:
    """The server's root: `http://host:8080`, `http://host:8080/` and
    `http://host:8080/v1` (what OpenAI clients are given) all name it."""
    root = base_url.strip().rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    return root


def _error_from(response: httpx.Response, body: bytes, operation: str) -> ShellgateApiError:
    try:
        parsed = ApiErrorEnvelope.model_validate_json(body).error
    except (ValidationError, ValueError):
        text = body.decode("utf-8", errors="replace").strip()[:_MAX_ERROR_MESSAGE_CHARS]
        parsed = ApiErrorBody(message=text or response.reason_phrase)
    return ShellgateApiError(status=response.status_code, body=parsed, operation=operation)


@dataclass(frozen=True)
class ServerSentEvent:
    event: str
    data: str


async def iter_sse(response: httpx.Response) -> AsyncIterator[ServerSentEvent]:
    """The events of a `text/event-stream` body, as the HTML standard frames them
    (`event:`/`data:` lines, a blank line ends one; comments ignored)."""
    event = ""
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if data or event:
                yield ServerSentEvent(event=event or "message", data="\n".join(data))
            event, data = "", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)
    if data:
        yield ServerSentEvent(event=event or "message", data="\n".join(data))


class ShellgateHttp:
    """An HTTP client of one server with one API key. Made lazily, because an
    `httpx.AsyncClient` belongs to the event loop it first runs on, and remade after
    `aclose()` (a session may be stopped and started again)."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = normalize_base_url(base_url)
        self._api_key = api_key
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    def __repr__(self) -> str:
        # Never the key.
        return f"ShellgateHttp(base_url={self.base_url!r})"

    def _http(self) -> httpx.AsyncClient:
        if self._client is None or self._client.is_closed:
            headers = {"User-Agent": "shellgate-agents/0.1.0"}
            if self._api_key:
                headers["Authorization"] = f"Bearer {self._api_key}"
            self._client = httpx.AsyncClient(
                base_url=self.base_url,
                headers=headers,
                timeout=_DEFAULT_TIMEOUT,
                transport=self._transport,
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None and not self._client.is_closed:
            await self._client.aclose()
        self._client = None

    async def request(
        self,
        method: str,
        path: str,
        *,
        operation: str,
        params: Mapping[str, Any] | list[tuple[str, Any]] | None = None,
        json_body: object | None = None,
        content: bytes | AsyncIterator[bytes] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: httpx.Timeout | None = None,
    ) -> httpx.Response:
        """A request whose whole answer is read; an error status raises."""
        kwargs: dict[str, Any] = {"params": params, "headers": headers}
        if json_body is not None:
            kwargs["content"] = json.dumps(json_body).encode("utf-8")
            kwargs["headers"] = {"Content-Type": "application/json", **(headers or {})}
        elif content is not None:
            kwargs["content"] = content
        if timeout is not None:
            kwargs["timeout"] = timeout
        response = await self._http().request(method, path, **kwargs)
        if response.status_code >= 400:
            raise _error_from(response, response.content, operation)
        return response

    @asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        operation: str,
        params: Mapping[str, Any] | list[tuple[str, Any]] | None = None,
        timeout: httpx.Timeout | None = None,
    ) -> AsyncIterator[httpx.Response]:
        """A response whose body is read as it arrives; an error status raises
        (with its body read, which is small)."""
        async with self._http().stream(
            method, path, params=params, timeout=timeout or _DEFAULT_TIMEOUT
        ) as response:
            if response.status_code >= 400:
                body = await response.aread()
                raise _error_from(response, body, operation)
            yield response
