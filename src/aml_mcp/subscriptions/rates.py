"""Per-caller token buckets for listen (re)connects, and the admission that enforces them (D6).

One client reconnecting a listen stream in a loop made the server re-read and re-send every
followed task's complete state on each connect (1.45 MB for one 200-case result), which slowed
every replica enough for the balancer to drain them all. `ListenRates` holds, per caller (issuer
and subject, as the stream slots count them), a bucket of connects and a bucket of current-state
bytes (`ListenSettings`). `ListenRateAdmission` wraps the endpoint's admission: a listen from a
caller whose bucket is empty is refused with HTTP 429, `Retry-After` and a retryable JSON-RPC error
(-32012) after authentication, and the listen scope rule asks `would_admit` first, so a refused
listen costs no task lookup. The handler charges the state bytes it sent once the stream started.

A refusal is cheap, but a client that ignores `Retry-After` and asks again at once would still
take a large share of the process (measured: 300 refusals a second from one client made another
bank's `tasks/get` 2.5 times slower). So the refusal is held back up to `HOLD_SECONDS` (no work,
a sleeping request) before it is sent: such a loop then asks about once a second. At most
`HELD_PER_CALLER` refusals of one caller are held at once; beyond that they are sent at once.

Buckets are per process (a replica protects itself; through the balancer a caller gets about
the sum of the replicas' rates). A full bucket is the same as no bucket, so those are forgotten
when the table grows, and memory stays bounded by the callers active within one refill.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import Response

from aml_mcp.audit import AuditEvent, AuditRecorder, Decision
from aml_mcp.http.endpoint import Admission
from aml_mcp.http.responses import jsonrpc_error, request_id_of
from aml_mcp.principal import Principal
from aml_mcp.protocol.errors import retry_hint
from aml_mcp.subscriptions.settings import ListenSettings

TOO_MANY_LISTENS = -32012
"""Implementation-defined (-32000..-32019): the caller (re)connects listen streams faster than it
may; retry after `retryAfterMs`."""
LISTEN_METHOD = "subscriptions/listen"
PRUNE_AT = 4096
"""Callers tracked before full buckets are forgotten."""
HOLD_SECONDS = 1.0
"""Longest time a refusal is held back before it is sent (never longer than the wait it announces)."""
HELD_PER_CALLER = 4
"""Refusals of one caller held back at once; more are sent at once."""

Caller = tuple[str, str]


def caller_of(principal: Principal) -> Caller:
    """Who a bucket belongs to: issuer and subject, whichever client or bank the token names."""
    return (principal.issuer, principal.subject)


class _Bucket:
    """A token bucket whose level may go below zero (a debt repaid by the refill)."""

    __slots__ = ("capacity", "level", "rate", "stamp")

    def __init__(self, capacity: float, rate: float, now: float) -> None:
        self.capacity = capacity
        self.rate = rate
        self.level = capacity
        self.stamp = now

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    def wait_for(self, amount: float) -> float:
        """Seconds until the level reaches `amount` (0 when it has)."""
        return max(0.0, (amount - self.level) / self.rate)

    @property
    def full(self) -> bool:
        return self.level >= self.capacity


class ListenRates:
    """The connect and state-bytes buckets of every caller of this process (module docstring)."""

    def __init__(self, settings: ListenSettings, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._settings = settings
        self._clock = clock
        self._buckets: dict[Caller, tuple[_Bucket, _Bucket]] = {}
        self.refused = 0
        """Listen requests refused since start."""

    def _buckets_of(self, caller: Caller) -> tuple[_Bucket, _Bucket]:
        now = self._clock()
        buckets = self._buckets.get(caller)
        if buckets is None:
            if len(self._buckets) >= PRUNE_AT:
                self._prune(now)
            s = self._settings
            buckets = (
                _Bucket(s.connects_burst, s.connects_per_second, now),
                _Bucket(s.state_bytes_burst, s.state_bytes_per_second, now),
            )
            self._buckets[caller] = buckets
        for bucket in buckets:
            bucket.refill(now)
        return buckets

    def _prune(self, now: float) -> None:
        for caller, buckets in list(self._buckets.items()):
            for bucket in buckets:
                bucket.refill(now)
            if all(bucket.full for bucket in buckets):
                del self._buckets[caller]

    def _wait(self, connects: _Bucket, state: _Bucket) -> float:
        # A connect needs a whole token; current state only a bucket not in debt.
        return max(connects.wait_for(1.0), state.wait_for(0.0))

    def would_admit(self, principal: Principal) -> bool:
        """Whether a listen of `principal` would be admitted now (nothing taken)."""
        return self._wait(*self._buckets_of(caller_of(principal))) == 0.0

    def admit(self, principal: Principal) -> float | None:
        """Take a connect for `principal`: `None` when admitted, else the seconds until one would be."""
        connects, state = self._buckets_of(caller_of(principal))
        wait = self._wait(connects, state)
        if wait > 0.0:
            self.refused += 1
            return wait
        connects.level -= 1.0
        return None

    def charge(self, principal: Principal, state_bytes: int) -> None:
        """Count `state_bytes` of current state sent to a stream of `principal` (may leave a debt)."""
        if state_bytes > 0:
            self._buckets_of(caller_of(principal))[1].level -= state_bytes


class ListenRateAdmission:
    """An `Admission` that refuses a caller's listen requests beyond its rate (module docstring).

    It runs after `inner` (the caller must be known); anything but a listen passes untouched."""

    def __init__(
        self,
        inner: Admission,
        rates: ListenRates,
        *,
        audit: AuditRecorder | None = None,
        hold_seconds: float = HOLD_SECONDS,
    ) -> None:
        self.inner = inner
        self.rates = rates
        self.record = audit
        self.hold_seconds = hold_seconds
        self._held: dict[Caller, int] = {}

    async def admit(self, request: Request, message: Any) -> Principal | Response:
        verdict = await self.inner.admit(request, message)
        if isinstance(verdict, Response) or not _is_listen(message):
            return verdict
        wait = self.rates.admit(verdict)
        if wait is None:
            return verdict
        if self.record is not None:
            self.record(
                AuditEvent.about(
                    verdict, decision=Decision.DENY, reason="too_many_listens", method=LISTEN_METHOD
                )
            )
        wait -= await self._hold(caller_of(verdict), wait)
        retry_ms = max(1, math.ceil(wait * 1000))
        seconds = max(1, math.ceil(wait))
        return jsonrpc_error(
            429,
            TOO_MANY_LISTENS,
            f"Too many listen requests by you; retry in {seconds} s (keep one stream open rather "
            "than reconnecting)",
            request_id=request_id_of(message),
            data=retry_hint("too_many_listens", retry_ms),
            headers={"Retry-After": str(seconds), "Cache-Control": "no-store"},
        )

    async def _hold(self, caller: Caller, wait: float) -> float:
        """Sleep before a refusal (module docstring); the seconds slept."""
        held = self._held.get(caller, 0)
        if held >= HELD_PER_CALLER:
            return 0.0
        hold = min(wait, self.hold_seconds)
        self._held[caller] = held + 1
        try:
            await anyio.sleep(hold)
        finally:
            left = self._held.get(caller, 1) - 1
            if left > 0:
                self._held[caller] = left
            else:
                self._held.pop(caller, None)
        return hold


def _is_listen(message: Any) -> bool:
    return isinstance(message, dict) and message.get("method") == LISTEN_METHOD
