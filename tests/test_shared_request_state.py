"""A multi-round-trip request sealed by one replica opens on another that shares the database.

Two apps in this process, separate data directories, one PostgreSQL schema: the only thing they
share is the database, so the second round trip succeeding on B proves the sealing key is shared.
"""

from __future__ import annotations

from pathlib import Path

from aml_mcp.app import build_app
from aml_mcp.conformance.fixtures import fixture_catalog
from tests.support.asgi import InProcessServer
from tests.support.mcp_http import message, post
from tests.support.postgres import scratch_schema
from tests.support.settings import open_settings

CALL = {"name": "test_input_required_result_multi_round", "arguments": {}}
ANSWER = {"action": "accept", "content": {"name": "Ada"}}


def _second_round(state: str) -> dict[str, object]:
    return message("tools/call", {**CALL, "inputResponses": {"step1": ANSWER}, "requestState": state})


def test_state_sealed_on_replica_a_opens_on_replica_b(tmp_path: Path) -> None:
    with scratch_schema() as (url, schema):
        shared = {"database_url": url, "database_schema": schema}
        app_a = build_app(open_settings(tmp_path / "a", **shared), catalog=fixture_catalog())
        app_b = build_app(open_settings(tmp_path / "b", **shared), catalog=fixture_catalog())
        with (
            InProcessServer(app_a) as a,
            InProcessServer(app_b) as b,
            a.client(timeout=10) as http_a,
            b.client(timeout=10) as http_b,
        ):
            first = post(http_a, message("tools/call", CALL)).json()["result"]
            assert first["resultType"] == "input_required"
            second = post(http_b, _second_round(first["requestState"])).json()
            assert "result" in second, second
            assert set(second["result"]["inputRequests"]) == {"step2"}


def test_replicas_with_their_own_data_dirs_and_no_database_do_not_share_state(tmp_path: Path) -> None:
    """The counterpart that shows the test above can fail: separate files, separate keys."""
    app_a = build_app(open_settings(tmp_path / "a"), catalog=fixture_catalog())
    app_b = build_app(open_settings(tmp_path / "b"), catalog=fixture_catalog())
    with (
        InProcessServer(app_a) as a,
        InProcessServer(app_b) as b,
        a.client(timeout=10) as http_a,
        b.client(timeout=10) as http_b,
    ):
        first = post(http_a, message("tools/call", CALL)).json()["result"]
        refused = post(http_b, _second_round(first["requestState"])).json()
        assert refused["error"]["code"] == -32602
