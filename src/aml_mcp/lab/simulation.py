"""The authorization simulation: deliberately wrong requests, sent and judged inside the server.

The page names a case; the server builds the flawed credential itself, sends the request through
the same `/mcp` endpoint every client reaches (in-process: the same admission, gate, handlers and
audit trail, no socket), and answers only what the page shows — the HTTP status, the
`WWW-Authenticate` challenge, the JSON-RPC body and the audit records the request produced.

No credential ever leaves the server. An earlier version handed the flawed tokens to the page, and
one of them, "another bank's analyst", was a fully valid token for another bank with the caller's
scopes (security review 2, N1). The tokens minted here are still built so that the same mistake
could not hurt again: they carry no scope, live seconds, name a subject no analyst can have, and
carry `SIMULATED_CLAIM`, which makes the gate refuse them for every request that could succeed
(see `aml_mcp.auth.gate`).

Each run costs a signature and a request, so runs are limited per caller (`SimulationRate`).
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aml_mcp.audit.storage import AuditReader
from aml_mcp.http.wellformed import has_lone_surrogate
from aml_mcp.lab.exchange import Exchange
from aml_mcp.principal import SIMULATED_CLAIM, Owner, Principal

ELSEWHERE = "https://another-server.example/mcp"
"""The audience of the wrong-audience token: a resource this server is not."""

LIFETIME_SECONDS = 10
"""How long a simulated token is valid: long enough for the one in-process request it is made for."""

OTHER_BANK = "aml-mcp-simulated-bank"
"""The bank of the simulated "analyst of another bank": none of this server's banks, so the records
the demonstration leaves are in no real bank's audit view (the caller sees them in the answer)."""

DEFAULT_TOOL = "search_aml_notes"
"""The tool the token cases call unless the page names another: it needs `aml:read`. Its arguments
never matter, because every flawed call is refused before they are read."""


class MintToken(Protocol):
    """Signs a token with the development issuer's key; returns the token and its `jti`."""

    def __call__(
        self,
        *,
        subject: str,
        tenant: str,
        client_id: str,
        scopes: Sequence[str],
        audience: str | None,
        ttl_seconds: int,
        claims: Mapping[str, Any],
    ) -> tuple[str, str]: ...


SendRequest = Callable[[str, Mapping[str, Any], "str | None", str], Awaitable[Exchange]]
"""Sends one MCP request in-process: `(method, params, bearer token or None, traceparent)`."""


@dataclass(frozen=True, slots=True)
class Case:
    kind: str
    label: str
    needs_issuer: bool
    """Whether the case needs a token signed by the development issuer (all but `no_token`)."""


CASES: tuple[Case, ...] = (
    Case("wrong_audience", "Token for another server", needs_issuer=True),
    Case("expired", "Expired token", needs_issuer=True),
    Case("no_scope", "Token lacking the scope", needs_issuer=True),
    Case("no_token", "No token", needs_issuer=False),
    Case("other_bank", "Another bank reads your task", needs_issuer=True),
)
BY_KIND = {case.kind: case for case in CASES}


class CaseRefused(ValueError):
    """The page asked for something the simulation does not do (an unknown case, a bad task id)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the page shows of one simulated request (never the credential it carried)."""

    case: str
    flaw: str
    method: str
    params: Mapping[str, Any]
    exchange: Exchange
    audit: list[dict[str, Any]]

    def as_json(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "flaw": self.flaw,
            "request": {"method": self.method, "params": dict(self.params)},
            "status": self.exchange.status,
            "challenge": self.exchange.challenge,
            "message": self.exchange.message,
            "audit": self.audit,
        }


class SimulationRate:
    """At most `limit` runs per caller in any `window_seconds`, counted in this process.

    Per process on purpose: what it protects is this process's CPU (each run signs a token and
    serves a request). Behind a balancer a caller may run `limit` per replica in a window, which
    costs each replica no more than its own limit.
    """

    def __init__(self, limit: int, window_seconds: float, *, max_callers: int = 10_000) -> None:
        self.limit = limit
        self.window = window_seconds
        self.max_callers = max_callers
        self._runs: OrderedDict[Owner, deque[float]] = OrderedDict()

    def retry_after(self, owner: Owner, now: float) -> float | None:
        """Seconds until `owner` may run again, or `None` (and the run is counted)."""
        runs = self._runs.pop(owner, None) or deque()
        while runs and runs[0] <= now - self.window:
            runs.popleft()
        self._runs[owner] = runs
        while len(self._runs) > self.max_callers:
            self._runs.popitem(last=False)
        if len(runs) >= self.limit:
            return runs[0] + self.window - now
        runs.append(now)
        return None


class Simulation:
    """Runs the cases for a caller and reads back what the server recorded of each."""

    def __init__(
        self,
        *,
        send: SendRequest,
        trail: AuditReader,
        flush_audit: Callable[[], Awaitable[None]],
        mint: MintToken | None,
    ) -> None:
        self._send = send
        self._trail = trail
        self._flush_audit = flush_audit
        self._mint = mint

    @property
    def cases(self) -> list[Case]:
        """The cases this server can run: without the development issuer, only the missing token."""
        return [case for case in CASES if self._mint is not None or not case.needs_issuer]

    async def run(self, caller: Principal, kind: str, *, tool: Any = None, task_id: Any = None) -> Outcome:
        """Runs case `kind`: a call of `tool` (default `DEFAULT_TOOL`), or for `other_bank` a
        lookup of the caller's task `task_id`, with the case's flawed credential."""
        case = BY_KIND.get(kind)
        if case is None or case not in self.cases:
            raise CaseRefused(f"case must be one of: {', '.join(c.kind for c in self.cases)}")
        method: str = "tools/call"
        name = _text(DEFAULT_TOOL if tool is None else tool, "tool")
        params: dict[str, Any] = {"name": name, "arguments": {}}
        if kind == "other_bank":
            method, params = "tasks/get", {"taskId": _text(task_id, "taskId")}
        token, token_id, flaw = self._credential(caller, kind)
        trace_id = secrets.token_hex(16)
        head = await self._trail.head()
        exchange = await self._send(method, params, token, f"00-{trace_id}-{secrets.token_hex(8)}-01")
        await self._flush_audit()
        audit = await self._trail.request_events(after=head, token_id=token_id, trace_id=trace_id)
        return Outcome(kind, flaw, method, params, exchange, audit)

    def _credential(self, caller: Principal, kind: str) -> tuple[str | None, str | None, str]:
        """The flawed token for `kind` (none for `no_token`), its id, and what is wrong with it."""
        if kind == "no_token":
            return None, None, "the request carries no Authorization header"
        assert self._mint is not None  # `cases` offers the others only with an issuer
        now = int(time.time())
        subject, tenant, audience = caller.subject, caller.tenant, None
        claims: dict[str, Any] = {SIMULATED_CLAIM: kind}
        if kind == "wrong_audience":
            audience, flaw = ELSEWHERE, f"its audience is {ELSEWHERE}, not this server"
        elif kind == "expired":
            claims.update(iat=now - 7_200, nbf=now - 7_200, exp=now - 3_600)
            flaw = "it expired an hour ago"
        elif kind == "no_scope":
            flaw = "it grants no scope at all"
        else:
            tenant = OTHER_BANK
            # Nobody can be this analyst: the subject is new each time and no user name has this form.
            subject = f"urn:aml-mcp:simulated:{secrets.token_hex(12)}"
            flaw = "it is a valid token of an analyst at another bank"
        token, token_id = self._mint(
            subject=subject,
            tenant=tenant,
            client_id=caller.client_id,
            scopes=(),
            audience=audience,
            ttl_seconds=LIFETIME_SECONDS,
            claims=claims,
        )
        return token, token_id, flaw


def _text(value: Any, name: str) -> str:
    """A name the page sent for the request: short text (it becomes a header), else refused."""
    if not isinstance(value, str) or not 0 < len(value) <= 128 or has_lone_surrogate(value):
        raise CaseRefused(f"{name} must be a string of 1 to 128 characters")
    return value
