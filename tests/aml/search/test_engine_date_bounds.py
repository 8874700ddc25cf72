"""Search date bounds at the edge of the calendar (L2), on the argument model and over real HTTP.

`date_to` `9999-12-31` means "until the end of that day", one microsecond before year 10000:
computing it raised `OverflowError`, which pydantic does not turn into a validation error, so the
call answered -32603 with a traceback instead of a tool error the assistant can correct.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError

from aml_mcp.aml.demo.corpus import TENANTS
from aml_mcp.aml.demo.first_start import load_demo_if_empty
from aml_mcp.aml.search.engine import SearchRequest
from aml_mcp.aml.settings import AmlSettings
from tests.support.mcp_http import TASKS_EXTENSION
from tests.support.oauth import SecuredServer, TestIssuer, secured_server

BANK = TENANTS[0].name


@pytest.mark.parametrize(
    "bounds",
    [
        {"date_to": "9999-12-31"},
        {"date_from": "9999-12-31", "date_to": "9999-12-31"},
        {"date_from": "2024-01-01", "date_to": "9999-12-31"},
        {"date_to": "10000-01-01"},
        {"date_from": "0000-12-31"},
    ],
)
def test_an_unrepresentable_bound_is_a_validation_error_naming_the_field(bounds: dict[str, str]) -> None:
    with pytest.raises(ValidationError) as raised:
        SearchRequest.model_validate({"query": "cash", **bounds})
    assert {error["loc"][0] for error in raised.value.errors()} <= {"date_from", "date_to"}


@pytest.mark.parametrize(
    "bounds",
    [
        {"date_from": "9999-12-31"},
        {"date_to": "9999-12-30"},
        {"date_from": "0001-01-01", "date_to": "9999-12-30T23:59:59+00:00"},
    ],
)
def test_the_last_representable_bounds_still_filter(bounds: dict[str, str]) -> None:
    request = SearchRequest.model_validate({"query": "cash", **bounds})
    request.note_filter()  # computes both instants


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredServer]:
    data_dir = tmp_path_factory.mktemp("date-bounds")
    settings = AmlSettings(embedder="static", demo_notes_per_tenant=20)
    load_demo_if_empty(settings, data_dir)
    with TestIssuer() as issuer, secured_server(data_dir, None, issuer=issuer, aml=settings) as running:  # type: ignore[arg-type]
        yield running


def search(server: SecuredServer, arguments: dict[str, Any]) -> Any:
    token = server.mint(tenant=BANK, scope="aml:read")
    return server.post("tools/call", {"name": "search_aml_notes", "arguments": arguments}, token=token)


@pytest.mark.parametrize(
    "bounds",
    [{"date_to": "9999-12-31"}, {"date_from": "9999-12-31", "date_to": "9999-12-31"}],
)
def test_date_to_at_the_end_of_the_calendar_is_a_tool_error_over_http(
    server: SecuredServer, bounds: dict[str, str]
) -> None:
    response = search(server, {"query": "cash deposits", **bounds})
    assert response.status_code == 200
    result = response.json()["result"]
    assert result["isError"] is True
    assert "date_to" in result["content"][0]["text"]


def test_a_surrogate_in_draft_case_ids_never_reaches_the_task_store(server: SecuredServer) -> None:
    token = server.mint(tenant=BANK, scope="aml:draft")
    response = server.post(
        "tools/call",
        {"name": "draft_sar_batch", "arguments": {"case_ids": ["\ud800"]}},
        token=token,
        capabilities={"extensions": {TASKS_EXTENSION: {}}},
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32700
