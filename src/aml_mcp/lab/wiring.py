"""Assembles the lab for the composition root: `build_lab(settings, ...) -> Parts`."""

from __future__ import annotations

from aml_mcp.audit.storage import AuditReader
from aml_mcp.component import Parts
from aml_mcp.http.endpoint import Admission
from aml_mcp.lab.routes import LabRoutes, lab_scope_rules
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
) -> Parts:
    """The page's routes. Its scope rules (`lab_scope_rules`) are merged by the app before the gate."""
    routes = LabRoutes(
        settings,
        admission=admission,
        trail=audit,
        resource_url=resource_url,
        tenant_claim=tenant_claim,
        simulation=simulation,
        simulation_rate=SimulationRate(settings.simulation_runs_per_minute, 60.0),
    )
    return Parts(routes=routes.routes)


def page_url(resource_url: str) -> str:
    """The page's address, on the resource's origin: also where the authorization server sends the
    browser back after sign-in (the page's only redirect URI)."""
    scheme, _, rest = resource_url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}/lab/"


__all__ = ["build_lab", "lab_scope_rules", "page_url"]
