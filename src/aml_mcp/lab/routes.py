"""The lab's HTTP routes: the page's assets, its configuration, the audit view and the simulation.

The two API routes authenticate exactly as `/mcp` does — the same admission, so the same 401/403
challenges, revocation checks and audit records — under method names of their own (`lab/audit`,
`lab/simulation`) whose scope rules the lab contributes like any component. Neither answers
anything the caller's own token could not read: the audit view shows the caller's bank's records,
and the simulation answers what its in-process requests got back, never a credential.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aml_mcp.audit.storage import AuditReader, BankQuery
from aml_mcp.http.endpoint import Admission
from aml_mcp.http.responses import storage_unavailable_response
from aml_mcp.lab.settings import LabSettings
from aml_mcp.lab.simulation import CaseRefused, Simulation, SimulationRate
from aml_mcp.principal import Principal
from aml_mcp.scope_rules import ScopeRule, StaticScopeRule
from aml_mcp.store.faults import storage_fault
from aml_mcp.store.text import storable

logger = logging.getLogger(__name__)

AUDIT_METHOD = "lab/audit"
SIMULATION_METHOD = "lab/simulation"
_FILTERS = ("decision", "subject", "method")
_MAX_FILTER_CHARS = 200
_MAX_SEQ = 2**63 - 1
"""The largest event number the store can hold (a larger `after` cannot even be compared)."""
_MAX_SIMULATION_BODY = 4096
"""A simulation request names a case and at most a task id."""

_NO_STORE = {"Cache-Control": "no-store"}

PAGE_HEADERS = {
    # Only the page's own files run, and it talks only to its own origin (`/mcp`, `/oauth`, `/lab/api`).
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self';"
        " base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    # The page is loaded with `?code=…` after sign-in: no Referer may carry it to the assets it loads.
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}


def lab_scope_rules(settings: LabSettings) -> Mapping[str, ScopeRule]:
    """What the lab's two API methods need of a token (the simulation: any verified token)."""
    audit_scope = frozenset({settings.audit_scope})
    return {
        AUDIT_METHOD: StaticScopeRule(lambda _params: audit_scope),
        SIMULATION_METHOD: StaticScopeRule(lambda _params: frozenset()),
    }


@dataclass(frozen=True, slots=True)
class DemoAccount:
    """A demo user of the development authorization server, as the signed-out page names it (its
    sign-in page prints the same: the accounts are public and their passwords are their names)."""

    username: str
    bank: str
    scopes: tuple[str, ...]
    description: str

    def as_json(self) -> dict[str, Any]:
        return {
            "username": self.username,
            "bank": self.bank,
            "scopes": list(self.scopes),
            "description": self.description,
        }


class LabRoutes:
    def __init__(
        self,
        settings: LabSettings,
        *,
        admission: Admission,
        trail: AuditReader,
        resource_url: str,
        tenant_claim: str,
        simulation: Simulation | None,
        simulation_rate: SimulationRate,
        scope_implies: Mapping[str, Sequence[str]] | None = None,
        demo_users: Sequence[DemoAccount] = (),
    ) -> None:
        self.settings = settings
        self.admission = admission
        self.trail = trail
        """Where the trail is read (the SQLite file, or the shared database with replicas)."""
        self.resource_url = resource_url
        self.tenant_claim = tenant_claim
        self.simulation = simulation
        self.simulation_rate = simulation_rate
        self.scope_implies = {scope: sorted(implied) for scope, implied in (scope_implies or {}).items()}
        """Each scope and every scope it implies (the hierarchy's closure): the page compares the
        token's scopes with what a view needs as the server does, so it never asks for a refusal."""
        self.demo_users = tuple(demo_users)
        """Named on the signed-out page; only with the development authorization server."""

    @property
    def routes(self) -> Sequence[BaseRoute]:
        assets = _WithHeaders(
            StaticFiles(directory=str(files("aml_mcp.lab") / "static"), html=True), PAGE_HEADERS
        )
        return [
            Route("/lab", _to_page, methods=["GET"]),
            # Browsers ask every page of this origin for it (the sign-in pages too): one icon, no 404s.
            Route("/favicon.ico", _icon, methods=["GET"]),
            Route("/lab/config.json", self.config, methods=["GET"]),
            Route("/lab/api/audit", self.audit, methods=["GET"]),
            Route("/lab/api/simulation", self.simulate, methods=["POST"]),
            Mount("/lab", assets, name="lab"),
        ]

    async def config(self, request: Request) -> Response:
        """What the page needs to start: which resource, which client, where the tenant is in a token,
        what each scope implies, and (with the development authorization server) its demo users."""
        return JSONResponse(
            {
                "resource": self.resource_url,
                "clientId": self.settings.client_id,
                "tenantClaim": self.tenant_claim,
                "auditScope": self.settings.audit_scope,
                "scopeImplies": self.scope_implies,
                "simulation": [case.kind for case in self.simulation.cases] if self.simulation else [],
                "demoUsers": [user.as_json() for user in self.demo_users],
            },
            headers=_NO_STORE,
        )

    async def audit(self, request: Request) -> Response:
        return await self._as(request, AUDIT_METHOD, self._audit)

    async def _audit(self, request: Request, caller: Principal) -> Response:
        query = request.query_params
        try:
            after = int(query.get("after", "0"))
        except ValueError:
            return _bad("after must be an integer")
        if after < 0:
            return _bad("after must not be negative")
        if after > _MAX_SEQ:
            return _bad("after is out of range")
        filters: dict[str, str | None] = {}
        for name in _FILTERS:
            value = query.get(name) or None
            if value is not None and len(value) > _MAX_FILTER_CHARS:
                return _bad(f"{name} is longer than {_MAX_FILTER_CHARS} characters")
            if value is not None and not storable(value):
                # No record holds one (the trail keeps U+0000 as its escape), and PostgreSQL could
                # not even compare it: the same 400 whichever database keeps the trail.
                return _bad(f"{name} must not hold U+0000 or an unpaired surrogate")
            filters[name] = value
        events = await self.trail.bank_events(
            BankQuery(
                tenant=caller.tenant,
                after=after,
                limit=self.settings.audit_page_size,
                # The view's own polls are audited too, but would bury everything else: on request.
                except_method=AUDIT_METHOD if filters["method"] is None else None,
                **filters,
            )
        )
        return JSONResponse({"tenant": caller.tenant, "events": events}, headers=_NO_STORE)

    async def simulate(self, request: Request) -> Response:
        return await self._as(request, SIMULATION_METHOD, self._simulate)

    async def _simulate(self, request: Request, caller: Principal) -> Response:
        if self.simulation is None:
            return JSONResponse(
                {"error": "the simulation is not served here"}, status_code=404, headers=_NO_STORE
            )
        wait = self.simulation_rate.retry_after(caller.owner, time.monotonic())
        if wait is not None:
            return JSONResponse(
                {"error": "too many simulations; try again shortly"},
                status_code=429,
                headers={**_NO_STORE, "Retry-After": str(max(1, math.ceil(wait)))},
            )
        body = await _small_json(request, _MAX_SIMULATION_BODY)
        if not isinstance(body, dict) or not isinstance(body.get("case"), str):
            return _bad('the body must be a JSON object naming a "case"')
        try:
            outcome = await self.simulation.run(
                caller, body["case"], tool=body.get("tool"), task_id=body.get("taskId")
            )
        except CaseRefused as refused:
            return _bad(str(refused))
        return JSONResponse(outcome.as_json(), headers=_NO_STORE)

    async def _as(
        self,
        request: Request,
        method: str,
        handler: Callable[[Request, Principal], Awaitable[Response]],
    ) -> Response:
        """Admit the request as `/mcp` would admit a call of `method`, then run `handler` for the
        caller. A database fault on the way (the trail unreadable) is answered as `/mcp` answers one:
        503 with `Retry-After` and the retryable JSON-RPC error, never a 500 page."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": None, "method": method, "params": {}}
        try:
            admitted = await self.admission.admit(request, message)
            if isinstance(admitted, Response):
                return admitted
            return await handler(request, admitted)
        except Exception as error:
            cause = storage_fault(error)
            if cause is None:
                raise
            logger.warning("lab: %s could not reach its store (%s); answered 503", method, cause)
            return storage_unavailable_response(cause)


class _WithHeaders:
    """Adds fixed headers to every response of the app it wraps (the page's security headers)."""

    def __init__(self, app: ASGIApp, headers: Mapping[str, str]) -> None:
        self.app = app
        self.raw = [(name.lower().encode(), value.encode()) for name, value in headers.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *self.raw]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


async def _icon(request: Request) -> Response:
    icon = (files("aml_mcp.lab") / "static" / "favicon.svg").read_bytes()
    return Response(icon, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})


async def _to_page(request: Request) -> Response:
    return RedirectResponse("/lab/", status_code=308)


async def _small_json(request: Request, limit: int) -> Any:
    """The request's JSON body, or `None` when it is longer than `limit` bytes or not JSON text."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            return None
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


def _bad(message: str) -> Response:
    return JSONResponse({"error": message}, status_code=400, headers=_NO_STORE)
