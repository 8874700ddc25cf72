"""Assembles the lab for the composition root: `build_lab(settings, ...) -> Parts`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aml_mcp.audit.storage import AuditReader
from aml_mcp.component import Parts
from aml_mcp.http.endpoint import Admission
from aml_mcp.lab.routes import DemoAccount, LabRoutes, lab_scope_rules
from aml_mcp.lab.settings import LabSettings
from aml_mcp.lab.simulation import Simulation, SimulationRate


def build_lab(
    settings: LabSettings,
    *,
    admission: Admission,
    audit: AuditReader,
    resource_url: str,
    tenant_claim: str,
    simulation: Simulation | None,
    scope_implies: Mapping[str, Sequence[str]] | None = None,
    demo_users: Sequence[DemoAccount] = (),
) -> Parts:
    """The page's routes. Its scope rules (`lab_scope_rules`) are merged by the app before the gate.

    `scope_implies` maps each scope to every scope it implies (the server's hierarchy), so the page
    sends no request the signed-in user's token would be refused; `demo_users` are named on the
    signed-out page, and are given only with the development authorization server."""
    routes = LabRoutes(
        settings,
        admission=admission,
        trail=audit,
        resource_url=resource_url,
        tenant_claim=tenant_claim,
        simulation=simulation,
        simulation_rate=SimulationRate(settings.simulation_runs_per_minute, 60.0),
        scope_implies=scope_implies,
        demo_users=demo_users,
    )
    return Parts(routes=routes.routes)


def page_url(resource_url: str) -> str:
    """The page's address, on the resource's origin: also where the authorization server sends the
    browser back after sign-in (the page's only redirect URI)."""
    scheme, _, rest = resource_url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}/lab/"


__all__ = ["DemoAccount", "build_lab", "lab_scope_rules", "page_url"]
