"""The contract test: the Python client and the AML server agree on every tool — schemas, scopes,
capabilities and trace — over real HTTP with real tokens; and each seeded mismatch (a renamed
argument, a missing scope, a dropped capability) makes the check fail."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest

from aml_mcp.aml.notes.model import CaseNote
from tests.aml.tools.aml_client import A
from tests.client.contract import ClientPlan, check_contract
from tests.support.aml_live import complete_case
from tests.support.oauth import SecuredServer


@pytest.fixture
def plan(demo_cases: dict[str, dict[str, list[CaseNote]]]) -> ClientPlan:
    """What the analysts' client sends: its calls and the scope it asks a token for, per tool."""
    return ClientPlan(
        arguments={
            "search_aml_notes": {"query": "cash deposits under the reporting threshold", "top_k": 3},
            "run_full_eval": {"save_as_baseline": False},
            "draft_sar_batch": {"case_ids": [complete_case(demo_cases[A])]},
        },
        scopes={"search_aml_notes": "aml:read", "run_full_eval": "aml:eval", "draft_sar_batch": "aml:draft"},
    )


def _token_for(server: SecuredServer) -> Callable[[str], str]:
    return lambda scope: server.mint(tenant=A, scope=scope, subject="contract", client_id="copilot")


def test_the_client_and_the_server_agree(aml_server: SecuredServer, plan: ClientPlan) -> None:
    assert check_contract(aml_server, plan, _token_for(aml_server)) == []


def test_a_renamed_argument_breaks_the_contract(aml_server: SecuredServer, plan: ClientPlan) -> None:
    seeded = copy.deepcopy(plan)
    seeded.arguments["search_aml_notes"] = {"text": "cash deposits", "top_k": 3}
    problems = check_contract(aml_server, seeded, _token_for(aml_server))
    assert any(
        p.startswith("search_aml_notes: the request the client built breaks inputSchema") for p in problems
    )


def test_a_missing_scope_breaks_the_contract(aml_server: SecuredServer, plan: ClientPlan) -> None:
    seeded = copy.deepcopy(plan)
    seeded.scopes["run_full_eval"] = "aml:read"
    problems = check_contract(aml_server, seeded, _token_for(aml_server))
    assert (
        "run_full_eval: the client asks for scope 'aml:read'; the tool's _meta requires 'aml:eval'"
        in problems
    )
    assert (
        "run_full_eval: the client asks for scope 'aml:read'; the server's 403 demands 'aml:eval'" in problems
    )


def test_a_dropped_capability_breaks_the_contract(aml_server: SecuredServer, plan: ClientPlan) -> None:
    seeded = copy.deepcopy(plan)
    seeded.tasks = False
    problems = check_contract(aml_server, seeded, _token_for(aml_server))
    assert any(p.startswith("run_full_eval: the server demands capabilities") for p in problems), problems
    assert any(p.startswith("draft_sar_batch: the server demands capabilities") for p in problems), problems
