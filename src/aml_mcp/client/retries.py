"""Safe retries of `tools/call`: an idempotency key per call, and the HTTP transport that resends it.

A create whose answer is lost (the replica died mid-request, the balancer answered 502, or a replica
answered 503 while its database recovered) has an unknown outcome: the task may exist. Sending the
call again is safe only if the server can tell it is the same call, so `McpClient.call_tool` puts a
fresh key in every call's `_meta` (`aml-mcp/idempotencyKey`, random from `secrets`, the same for
every retry and `input_required` round of that one call), and the server answers a repeat with the
task the first attempt made instead of a second one. A sync tool simply runs again on a repeat (the
server keeps nothing to answer twice): harmless for a read such as `search_aml_notes`.

Why retry in the HTTP transport and not around the SDK's call: a connection that fails under a
request ends the SDK's whole session (its transport's task group fails), so a retry above it has
nothing left to send on; below it, the SDK never sees the failed attempt. `CreateRetries` resends
only a `tools/call` that carries an idempotency key, and only when nothing came back but a connection
error, a 502 or a 503: any other answer, a 4xx or a 500 included, is the server's and is returned.
Waits honour `Retry-After` (bounded by `max_wait_seconds`) and back off with jitter otherwise;
attempts are bounded, and the last failure is what the caller sees.
"""

from __future__ import annotations

import email.utils
import json
import logging
import random
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, Self

import anyio
import httpx2

IDEMPOTENCY_KEY_META: Final = "aml-mcp/idempotencyKey"
"""The `_meta` key of `tools/call` that carries the call's idempotency key (the server's name for it;
a test keeps the two equal, since the client imports nothing of the server)."""
DEFAULT_ATTEMPTS: Final = 4
"""Sends of one create at most: the first and three retries."""
RETRIED_STATUSES: Final = frozenset({502, 503})
"""A balancer with no replica to reach, or a replica that cannot serve the request right now: the
request did nothing (503) or may have (502), and a key makes resending it safe either way."""
RETRIED_ERRORS: Final = (httpx2.NetworkError, httpx2.RemoteProtocolError, httpx2.ConnectTimeout)
"""Connection errors: refused, reset, closed before an answer, or not connected in time."""

logger = logging.getLogger(__name__)


def new_idempotency_key() -> str:
    """A fresh key for one logical call: 128 random bits from `secrets`, base64url (22 characters)."""
    return secrets.token_urlsafe(16)


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """`Retry-After` in seconds (delta-seconds or an HTTP date), or `None` when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def carries_key(request: httpx2.Request) -> bool:
    """Whether `request` is a JSON-RPC `tools/call` POST with an idempotency key: the only request
    this transport resends. (Its body is in memory: the SDK sends JSON it built.)"""
    if request.method != "POST":
        return False
    try:
        body: Any = json.loads(request.content)
    except (httpx2.RequestNotRead, ValueError):
        return False
    if not isinstance(body, dict) or body.get("method") != "tools/call":
        return False
    params = body.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and isinstance(meta.get(IDEMPOTENCY_KEY_META), str)


class CreateRetries(httpx2.AsyncBaseTransport):
    """An `httpx2` transport around another that resends keyed `tools/call` requests (see above).

    `McpClient` builds its HTTP client with it; a caller passing its own `http_client` gets retries
    by building that client with `transport=CreateRetries(httpx2.AsyncHTTPTransport())`.
    """

    def __init__(
        self,
        inner: httpx2.AsyncBaseTransport,
        *,
        attempts: int = DEFAULT_ATTEMPTS,
        first_backoff_seconds: float = 0.25,
        max_wait_seconds: float = 10.0,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        if attempts < 1:
            raise ValueError("attempts must be at least 1 (the first send)")
        self._inner = inner
        self.attempts = attempts
        self._first_backoff = first_backoff_seconds
        self._max_wait = max_wait_seconds
        self._sleep = sleep
        self.retries = 0
        """Resends so far (for tests and diagnostics)."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if self.attempts == 1 or request.method != "POST":
            return await self._inner.handle_async_request(request)
        await request.aread()  # in memory already (the SDK sends JSON it built); now resendable
        if not carries_key(request):
            return await self._inner.handle_async_request(request)
        for attempt in range(1, self.attempts + 1):
            last = attempt == self.attempts
            try:
                response = await self._inner.handle_async_request(request)
            except RETRIED_ERRORS as error:
                if last:
                    raise
                wait, why = self._backoff(attempt), f"{type(error).__name__}: {error}"
            else:
                if response.status_code not in RETRIED_STATUSES or last:
                    return response
                hinted = retry_after_seconds(response.headers.get("retry-after"))
                wait = self._backoff(attempt) if hinted is None else hinted
                why = f"HTTP {response.status_code}"
                await response.aclose()
            wait = min(wait, self._max_wait)
            logger.info(
                "tools/call got no answer (%s): sending it again with the same idempotency key in %.2f s"
                " (attempt %d of %d)",
                why,
                wait,
                attempt + 1,
                self.attempts,
            )
            self.retries += 1
            await self._sleep(wait)
        raise AssertionError("unreachable: the last attempt returns or raises")  # pragma: no cover

    def _backoff(self, attempt: int) -> float:
        """Exponential, with full jitter, so clients that failed together do not return together."""
        return random.uniform(0, self._first_backoff * 2 ** (attempt - 1))  # noqa: S311 - not a secret

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._inner.__aexit__(*exc_info)

    async def aclose(self) -> None:
        await self._inner.aclose()


__all__ = [
    "DEFAULT_ATTEMPTS",
    "IDEMPOTENCY_KEY_META",
    "CreateRetries",
    "new_idempotency_key",
    "retry_after_seconds",
]
