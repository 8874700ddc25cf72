"""A transport wrapper that gives every result without `resultType` the `"complete"` the protocol
says to assume.

2026-07-28 lets a server omit `resultType` and requires the client to read the result as
`"complete"`; the SDK instead validates each result against the revision's schema, where the member
is required, and fails the call. Filling the default in on the read side, before the SDK sees the
message, keeps the SDK's validation for everything else. Results of earlier revisions are unaffected:
their schemas ignore the member and the SDK drops it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, Self

import mcp_types as types
from mcp.client._transport import ReadStream, Transport, TransportStreams
from mcp.shared.message import SessionMessage


def with_default_result_type(message: SessionMessage | Exception) -> SessionMessage | Exception:
    """The message, with `resultType: "complete"` added when it is a result that names none."""
    if not isinstance(message, SessionMessage) or not isinstance(message.message, types.JSONRPCResponse):
        return message
    result = message.message.result
    if "resultType" in result:
        return message
    response = message.message.model_copy(update={"result": {**result, "resultType": "complete"}})
    return SessionMessage(response, metadata=message.metadata)


class DefaultResultTypeStream:
    """A read stream that passes each message through `with_default_result_type`."""

    def __init__(self, inner: ReadStream[SessionMessage | Exception]) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        # `last_context` and any other attribute a context-aware stream carries.
        return getattr(self._inner, name)

    async def receive(self) -> SessionMessage | Exception:
        return with_default_result_type(await self._inner.receive())

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        return with_default_result_type(await self._inner.__anext__())

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        await self.aclose()
        return None


@asynccontextmanager
async def default_result_type(transport: Transport) -> AsyncIterator[TransportStreams]:
    """`transport`, its read side wrapped in `DefaultResultTypeStream`."""
    async with transport as (read_stream, write_stream):
        yield DefaultResultTypeStream(read_stream), write_stream
