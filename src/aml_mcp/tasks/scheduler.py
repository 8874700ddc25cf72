"""Fair shares of the runner's slots: first between tenants, then between a tenant's principals.

One global FIFO queue let one bank's forty evaluations hold every slot while another bank's
one-case draft waited behind all of them. Here every waiting body sits in its principal's own
FIFO queue, inside its tenant, and two rules decide who runs:

- **Caps.** A tenant never runs more than `per_tenant` bodies at once, and a principal never more
  than `per_principal`, however many slots are free. With `per_tenant` below the total, a tenant
  with a long queue always leaves slots free, so another tenant's task starts the moment it is
  submitted instead of when someone else's work ends (slots cannot be taken back from a running
  body, so only headroom can promise that).
- **Fewest running first.** When a slot frees, it goes to the waiting tenant that runs the fewest
  bodies (ties: the one served longest ago), and inside it to the principal that runs the fewest
  (same tie rule); each principal's own tasks keep their order.

Keys: tenant = (issuer, tenant), principal = (issuer, tenant, subject) — the same analyst through
two clients is one principal. Everything here runs on the event loop; no locks.
"""

from __future__ import annotations

import itertools
from collections import Counter, deque
from dataclasses import dataclass, field

import anyio

from aml_mcp.principal import Owner

TenantKey = tuple[str, str]
PrincipalKey = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class Share:
    """Whose slot it is: the keys fairness and caps are counted by."""

    tenant: TenantKey
    principal: PrincipalKey

    @classmethod
    def of(cls, owner: Owner) -> Share:
        return cls((owner.issuer, owner.tenant), (owner.issuer, owner.tenant, owner.subject))


@dataclass(eq=False, slots=True)
class _Waiter:
    share: Share
    ready: anyio.Event = field(default_factory=anyio.Event)
    granted: bool = False


class FairScheduler:
    """`slots` run slots handed out by tenant, then principal; `acquire` waits, `release` gives back.

    Caps larger than what contains them are clamped: a principal never gets more than its tenant
    may run, a tenant never more than `slots`.
    """

    def __init__(self, slots: int, *, per_tenant: int, per_principal: int) -> None:
        self._slots = max(1, slots)
        self._per_tenant = max(1, min(per_tenant, self._slots))
        self._per_principal = max(1, min(per_principal, self._per_tenant))
        self._running = 0
        self._by_tenant: Counter[TenantKey] = Counter()
        self._by_principal: Counter[PrincipalKey] = Counter()
        self._waiting: dict[TenantKey, dict[PrincipalKey, deque[_Waiter]]] = {}
        self._turns = itertools.count()
        self._served_tenant: dict[TenantKey, int] = {}
        self._served_principal: dict[PrincipalKey, int] = {}

    @property
    def running(self) -> int:
        """Slots held right now."""
        return self._running

    @property
    def waiting(self) -> int:
        """Bodies queued for a slot."""
        return sum(len(queue) for queues in self._waiting.values() for queue in queues.values())

    def running_for(self, share: Share) -> tuple[int, int]:
        """Slots held by `share`'s tenant and by its principal."""
        return self._by_tenant[share.tenant], self._by_principal[share.principal]

    async def acquire(self, share: Share) -> None:
        """Wait for a slot for `share`. If cancelled while waiting, nothing is held."""
        waiter = _Waiter(share)
        self._waiting.setdefault(share.tenant, {}).setdefault(share.principal, deque()).append(waiter)
        self._dispatch()
        try:
            await waiter.ready.wait()
        except BaseException:
            if waiter.granted:  # granted and cancelled in the same instant: give it straight back
                self.release(share)
            else:
                self._forget(waiter)
            raise

    def release(self, share: Share) -> None:
        """Give back a slot `share` holds, and hand it (or any other now allowed) to the next in turn."""
        self._running -= 1
        self._by_tenant[share.tenant] -= 1
        if self._by_tenant[share.tenant] <= 0:
            del self._by_tenant[share.tenant]
        self._by_principal[share.principal] -= 1
        if self._by_principal[share.principal] <= 0:
            del self._by_principal[share.principal]
        self._tidy(share)
        self._dispatch()

    def _forget(self, waiter: _Waiter) -> None:
        share = waiter.share
        queues = self._waiting.get(share.tenant, {})
        queue = queues.get(share.principal)
        if queue is not None and waiter in queue:
            queue.remove(waiter)
            if not queue:
                del queues[share.principal]
            if not queues:
                del self._waiting[share.tenant]
        self._tidy(share)

    def _tidy(self, share: Share) -> None:
        """Forget when a tenant or principal with nothing running or waiting was last served: the
        bookkeeping stays as small as the set of active callers, and a returning one ranks first."""
        queues = self._waiting.get(share.tenant, {})
        if share.principal not in self._by_principal and share.principal not in queues:
            self._served_principal.pop(share.principal, None)
        if share.tenant not in self._by_tenant and not queues:
            self._served_tenant.pop(share.tenant, None)

    def _dispatch(self) -> None:
        while self._running < self._slots:
            waiter = self._next()
            if waiter is None:
                return
            share = waiter.share
            turn = next(self._turns)
            self._served_tenant[share.tenant] = turn
            self._served_principal[share.principal] = turn
            self._running += 1
            self._by_tenant[share.tenant] += 1
            self._by_principal[share.principal] += 1
            waiter.granted = True
            waiter.ready.set()

    def _next(self) -> _Waiter | None:
        """Pop the waiter whose turn it is, or `None` if every waiting one is at a cap."""
        best: tuple[tuple[int, int], TenantKey, PrincipalKey] | None = None
        for tenant, queues in self._waiting.items():
            running = self._by_tenant[tenant]
            if running >= self._per_tenant:
                continue
            rank = (running, self._served_tenant.get(tenant, -1))
            if best is not None and rank >= best[0]:
                continue
            principal = self._pick_principal(queues)
            if principal is not None:
                best = (rank, tenant, principal)
        if best is None:
            return None
        _, tenant, principal = best
        queues = self._waiting[tenant]
        queue = queues[principal]
        waiter = queue.popleft()
        if not queue:
            del queues[principal]
        if not queues:
            del self._waiting[tenant]
        return waiter  # counted as running by the caller, so `_tidy` is not needed here

    def _pick_principal(self, queues: dict[PrincipalKey, deque[_Waiter]]) -> PrincipalKey | None:
        best: tuple[tuple[int, int], PrincipalKey] | None = None
        for principal in queues:
            running = self._by_principal[principal]
            if running >= self._per_principal:
                continue
            rank = (running, self._served_principal.get(principal, -1))
            if best is None or rank < best[0]:
                best = (rank, principal)
        return best[1] if best is not None else None
