"""A bound on every answer the client reads from a server.

The SDK's transport reads a JSON answer whole (`response.aread()`) before parsing it, so a server
that answers with hundreds of MiB costs this process several times that in memory (a 300 MiB
`tasks/get` answer took 1.65 GB). The SDK already bounds each event of an SSE stream
(`max_sse_event_size`), but not a JSON body. `AnswerLimit` hooks the HTTP client the transport uses:

- every request asks for `Accept-Encoding: identity`, and a compressed answer is refused unread,
  because a bound on compressed bytes says nothing about what they inflate to;
- every answer that is not an event stream is counted as it is read, chunk by chunk, and reading
  stops with `AnswerTooLarge` as soon as it runs past `max_bytes` (the connection is dropped, so
  the rest is never received); event streams are bounded per event by the SDK, with the same
  number (`McpClient` passes it as `max_sse_event_size`).

Both errors are `httpx2.StreamError`s, which the SDK's transport turns into a JSON-RPC error for
the one request; the limit remembers the refusal, so `McpClient` can raise it to the caller as it
was, not as the SDK's generic "Failed to parse JSON response".
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Final

import httpx2

from aml_mcp.client.errors import AnswerRefused, AnswerTooLarge, CompressedAnswer

DEFAULT_MAX_ANSWER_BYTES: Final = 4 * 1024 * 1024
"""4 MiB: far above any answer aml-mcp gives (a SAR batch's result is tens of KiB), far below what
would hurt a laptop."""


class AnswerLimit:
    """Caps the answers read through the HTTP clients it is installed on (one `McpClient`'s)."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_ANSWER_BYTES) -> None:
        if max_bytes <= 0:
            raise ValueError("max_answer_bytes must be a positive number of bytes")
        self.max_bytes = max_bytes
        self.refusals = 0
        """How many answers were refused so far (a caller compares it before and after a request)."""
        self.last_refusal: AnswerRefused | None = None

    def install(self, http: httpx2.AsyncClient) -> None:
        """Hook `http` (a caller's own client too); `uninstall` takes the hooks off again."""
        http.event_hooks["request"].append(self._on_request)
        http.event_hooks["response"].append(self._on_response)

    def uninstall(self, http: httpx2.AsyncClient) -> None:
        for kind, hook in (("request", self._on_request), ("response", self._on_response)):
            hooks = http.event_hooks[kind]
            if hook in hooks:
                hooks.remove(hook)

    def refusal_since(self, count: int) -> AnswerRefused | None:
        """The latest refusal, if any answer was refused after `refusals` was `count`."""
        return self.last_refusal if self.refusals > count else None

    async def _on_request(self, request: httpx2.Request) -> None:
        request.headers["Accept-Encoding"] = "identity"

    async def _on_response(self, response: httpx2.Response) -> None:
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            response.stream = _Refused(response.stream, self, CompressedAnswer(encoding))
            return
        content_type = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        if content_type != "text/event-stream":
            response.stream = _Capped(response.stream, self)

    def refused(self, refusal: AnswerRefused) -> AnswerRefused:
        """Count `refusal` (raised by a body as it is read) and return it, to be raised."""
        self.refusals += 1
        self.last_refusal = refusal
        return refusal


class _Capped(httpx2.AsyncByteStream):
    """The response body, raising `AnswerTooLarge` at the first chunk that passes the limit."""

    def __init__(self, inner: httpx2.SyncByteStream | httpx2.AsyncByteStream, limit: AnswerLimit) -> None:
        self._inner = inner
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if not isinstance(self._inner, httpx2.AsyncByteStream):
            raise TypeError("an async HTTP client's answer has an async body")
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit.max_bytes:
                raise self._limit.refused(AnswerTooLarge(self._limit.max_bytes))
            yield chunk

    async def aclose(self) -> None:
        if isinstance(self._inner, httpx2.AsyncByteStream):
            await self._inner.aclose()


class _Refused(httpx2.AsyncByteStream):
    """A body that is refused before a byte of it is read."""

    def __init__(
        self,
        inner: httpx2.SyncByteStream | httpx2.AsyncByteStream,
        limit: AnswerLimit,
        refusal: AnswerRefused,
    ) -> None:
        self._inner = inner
        self._limit = limit
        self._refusal = refusal

    async def __aiter__(self) -> AsyncIterator[bytes]:
        raise self._limit.refused(self._refusal)
        yield b""  # pragma: no cover - makes this an async generator

    async def aclose(self) -> None:
        if isinstance(self._inner, httpx2.AsyncByteStream):
            await self._inner.aclose()
