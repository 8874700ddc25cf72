"""The isolation oracle over the whole app, on SQLite and on PostgreSQL, over real HTTP.

Every HTTP route (the lab's API and files, `/oauth/*`, the well-known documents, health and
readiness, the metrics listener), every MCP method and every tool, called as each kind of caller of
bank A with bank B's ids as input: no answer, header or stream event carries a bank B secret, no
answer holds a credential beyond the caller's own, nothing of B's changes — and nothing the app
serves goes unexercised. A meta-test puts the lab simulation's old flaw back (an answer holding a
valid token for another bank) and the oracle must catch it.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.requests import Request as StarletteRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from aml_mcp.aml.ingest import run_ingest
from aml_mcp.aml.notes.storage.postgres import PostgresNotes
from aml_mcp.aml.notes.storage.sqlite import SqliteNotes
from aml_mcp.aml.settings import AmlSettings, EmbedderKind
from aml_mcp.store.postgres import PostgresDatabase
from aml_mcp.tasks.settings import TaskSettings
from tests.isolation.oracle import Oracle, Report, RouteUnit, Seed, route_units, uncovered
from tests.isolation.seeding import Banks, Mint, notes_for, seed_tasks
from tests.support.mcp_http import call_tool, message, post
from tests.support.oauth import SecuredServer, secured_server
from tests.support.postgres import scratch_schema

pytestmark = pytest.mark.slow

BANKS = Banks(a="meridian-bank", b="harbour-trust")
"""Two of the demo users' banks: the simulation's "another bank" for bank A's callers is bank B."""
AML = AmlSettings(embedder="static", demo_notes_per_tenant=0, reembed_in_background=False)
TASKS = TaskSettings(poll_interval_ms=50, heartbeat_ms=200, lease_ms=2000, claim_interval_ms=200)


@dataclass
class Served:
    server: SecuredServer
    metrics: httpx.Client
    seed: Seed
    mint: Mint

    @property
    def app(self) -> Any:
        return self.server.served.app.target  # type: ignore[attr-defined]

    def inventory(self) -> tuple[list[RouteUnit], list[str], list[str]]:
        """What the app serves, found from the app itself: routes, MCP methods, listed tools."""
        units = route_units(self.app.routes) + route_units(self.app.state.metrics_app.routes, on_metrics=True)
        # The SDK keeps its handler table private; it is the only complete list of what `/mcp` answers.
        methods = sorted(self.app.state.mcp_server._request_handlers)
        admin = self.mint(subject="lister", tenant=BANKS.a, client_id="oracle", scope="aml:admin")
        listed = post(self.server.http, message("tools/list"), token=admin).json()
        return units, methods, [tool["name"] for tool in listed["result"]["tools"]]

    def oracle(self, callers: Any = None) -> Oracle:
        units, methods, tools = self.inventory()
        b_token = self.seed.task_owner_tokens[self.seed.b_task_ids[0]]

        def bank_b_works() -> None:  # while bank A's callers listen, bank B's tasks move
            call_tool(self.server.http, "draft_sar_batch", {"case_ids": self.seed.b_case_ids}, token=b_token)

        return Oracle(
            self.server.http,
            self.seed,
            callers if callers is not None else self.callers,
            units=units,
            mcp_methods=methods,
            tools=tools,
            metrics_http=self.metrics,
            during_listen=bank_b_works,
        )

    callers: list[Any] | None = None


def _mint(server: SecuredServer) -> Mint:
    def mint(
        *, subject: str, tenant: str, client_id: str, scope: str, audience: str | None = None, ttl: int = 300
    ) -> str:
        return server.dev_token(
            subject=subject, tenant=tenant, client_id=client_id, scope=scope, audience=audience, ttl=ttl
        ).token

    return mint


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    work = tmp_path_factory.mktemp(f"oracle-{request.param}")
    notes = notes_for(BANKS, work)
    with _backend(request.param, work) as (shared, ingest_into):
        for tenant, path in notes.files.items():
            assert ingest_into(tenant, path) == 0
        with (
            secured_server(
                work / "data", None, dev=True, real_socket=True, aml=AML, tasks=TASKS, **shared
            ) as server,
            httpx.Client(base_url=server.metrics_url, timeout=15) as metrics_http,
        ):
            mint = _mint(server)
            seed, callers = seed_tasks(server.http, mint, BANKS, notes)
            yield Served(server, metrics_http, seed, mint, callers)


@pytest.fixture(scope="module")
def report(served: Served) -> Report:
    return served.oracle().run()


Ingest = Callable[[str, Path], int]


@contextlib.contextmanager
def _backend(kind: str, work: Path) -> Iterator[tuple[dict[str, Any], Ingest]]:
    """The settings that choose the backend, and how a bank's notes file is ingested into it."""
    if kind == "sqlite":
        data = work / "data"
        data.mkdir(mode=0o700)

        def into_sqlite(tenant: str, path: Path) -> int:
            with SqliteNotes.open(data) as store:
                return run_ingest(path, tenant, data, io.StringIO(), EmbedderKind.STATIC, store=store)

        yield {}, into_sqlite
        return
    with scratch_schema() as (url, schema):

        def into_postgres(tenant: str, path: Path) -> int:
            with PostgresNotes(PostgresDatabase(url, schema=schema)) as store:
                return run_ingest(path, tenant, work, io.StringIO(), EmbedderKind.STATIC, store=store)

        yield {"database_url": url, "database_schema": schema}, into_postgres


def test_no_answer_to_any_caller_of_bank_a_carries_bank_b(report: Report) -> None:
    assert not report.violations, "\n".join(str(v) for v in report.violations[:40])
    # The scan saw what it is looking for where it is allowed: it is not blind.
    assert report.controls == {"bank A sees its own note": True, "the owner sees its own task": True}
    assert report.credentials_tried > 0


def test_every_route_method_and_tool_the_app_serves_was_exercised(served: Served, report: Report) -> None:
    units, methods, tools = served.inventory()
    assert {"/lab/api/simulation", "/lab/api/audit", "/oauth/token", "/readyz", "/metrics"} <= {
        unit.template for unit in units
    }
    assert {"tasks/get", "subscriptions/listen", "tools/call"} <= set(methods)
    assert uncovered(report, units, methods, tools) == []


def test_a_route_that_lands_without_a_probe_fails_the_coverage_check(served: Served, report: Report) -> None:
    units, methods, tools = served.inventory()
    grown = route_units([*served.app.routes, Route("/lab/api/export", _never, methods=["GET"])])
    grown += [unit for unit in units if unit.on_metrics]
    assert uncovered(report, grown, methods, tools) == ["GET /lab/api/export"]
    assert uncovered(report, units, [*methods, "tasks/list"], [*tools, "export_case"]) == [
        "MCP tasks/list",
        "tool export_case",
    ]


async def _never(request: StarletteRequest) -> Response:
    raise AssertionError("never served")


def test_the_oracle_catches_the_simulation_handing_out_another_banks_token(served: Served) -> None:
    """Meta-test: the flaw of security review 2, N1, put back as a stand-in for the simulation."""
    original = list(served.app.router.routes)

    async def flawed_simulation(request: StarletteRequest) -> Response:
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
        if not bearer:
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        payload = bearer.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        other = served.mint(
            subject=f"{claims['sub']}-at-{BANKS.b}",
            tenant=BANKS.b,
            client_id=claims["client_id"],
            scope=claims.get("scope", ""),
        )
        return JSONResponse({"tokens": [{"kind": "other_bank", "token": other}]})

    served.app.router.routes[:] = [
        Route("/lab/api/simulation", flawed_simulation, methods=["POST"])
        if getattr(route, "path", None) == "/lab/api/simulation"
        else route
        for route in original
    ]
    try:
        callers = [c for c in served.callers or [] if c.name in ("read", "admin")]
        found = served.oracle(callers).run()
    finally:
        served.app.router.routes[:] = original
    handed_out = [v for v in found.violations if v.kind == "credential handed out"]
    assert handed_out, found.violations
    assert all("/lab/api/simulation" in v.request for v in handed_out)
    assert {v.caller for v in handed_out} == {"read", "admin"}
