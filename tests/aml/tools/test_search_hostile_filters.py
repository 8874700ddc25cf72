"""N8 over HTTP: `search_aml_notes` filters holding NUL get the same answer on SQLite and PostgreSQL.

A `case_id` or `typology` filter no note can hold matches nothing (and must never reach PostgreSQL
as a value it cannot compare, nor SQLite's LIKE, which ends a pattern at NUL and so matched every
note). Two real servers (uvicorn on a socket), the same demo corpus, one keeping its notes in the
data directory, one in a PostgreSQL schema: each hostile search is answered, never with a 5xx, and
both answer alike.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aml_mcp.aml.demo.corpus import TENANTS
from aml_mcp.aml.demo.first_start import load_demo_if_empty
from aml_mcp.aml.notes.storage.postgres import PostgresNotes
from aml_mcp.aml.settings import AmlSettings
from aml_mcp.store.postgres import PostgresDatabase
from tests.aml.tools.aml_client import FAST_TASKS, NOTES_PER_BANK, A, AmlClient
from tests.support.oauth import TestIssuer, secured_server
from tests.support.postgres import scratch_schema

SETTINGS = AmlSettings(embedder="static", demo_notes_per_tenant=NOTES_PER_BANK)
HOSTILE = {
    "nul": "\u0000",
    "nul-inside": "CASE\u0000-1",
    "sql": "' OR '1'='1",
    "percent": "%",
    "long": "x" * 200,
}
"""Filter values no note holds. (A typology is normalised to letters, digits and `_` before the
store sees it, so there a NUL only shortens the code: `structuring\u0000` is `structuring`.)"""
CASES = [(field, name) for field in ("case_id", "typology") for name in HOSTILE]


@pytest.fixture(scope="module")
def servers(
    tmp_path_factory: pytest.TempPathFactory, issuer: TestIssuer, demo_data: Path
) -> Iterator[dict[str, AmlClient]]:
    """{"sqlite": ..., "postgres": ...}: the same corpus on both."""
    sqlite_dir = tmp_path_factory.mktemp("hostile-sqlite")
    shutil.copytree(demo_data, sqlite_dir, dirs_exist_ok=True)
    with scratch_schema() as (url, schema):
        with PostgresNotes(PostgresDatabase(url, schema=schema)) as store:
            loaded = load_demo_if_empty(SETTINGS, tmp_path_factory.mktemp("unused"), store=store)
            assert loaded == {t.name: NOTES_PER_BANK for t in TENANTS}
        shared: dict[str, Any] = {"database_url": url, "database_schema": schema}
        with (
            secured_server(
                sqlite_dir, None, issuer=issuer, aml=SETTINGS, tasks=FAST_TASKS, real_socket=True
            ) as on_sqlite,
            secured_server(
                tmp_path_factory.mktemp("hostile-postgres"),
                None,
                issuer=issuer,
                aml=SETTINGS,
                tasks=FAST_TASKS,
                real_socket=True,
                **shared,
            ) as on_postgres,
        ):
            yield {"sqlite": AmlClient(on_sqlite), "postgres": AmlClient(on_postgres)}


def answer(client: AmlClient, arguments: dict[str, Any]) -> tuple[int, Any]:
    """(HTTP status, what the caller learns): the hits' note ids, or the error's code."""
    response = client.call("search_aml_notes", arguments, tenant=A, scope="aml:read")
    assert response.status_code < 500, response.text
    body = response.json()
    if "error" in body:
        return response.status_code, ("error", body["error"]["code"])
    result = body["result"]
    if result.get("isError"):
        return response.status_code, ("tool error", result["content"][0]["text"])
    return response.status_code, [hit["note_id"] for hit in result["structuredContent"]["results"]]


@pytest.mark.parametrize(("field", "name"), CASES, ids=[f"{field}-{name}" for field, name in CASES])
def test_a_hostile_filter_matches_nothing_alike_on_both(
    servers: dict[str, AmlClient], field: str, name: str
) -> None:
    arguments = {"query": "cash deposits structuring", "top_k": 10, field: HOSTILE[name]}
    on_sqlite, on_postgres = (answer(servers[name], arguments) for name in ("sqlite", "postgres"))
    assert on_sqlite == on_postgres
    status, learned = on_sqlite
    assert status == 200
    assert learned == [] or learned[0] in ("error", "tool error"), learned


def test_the_same_search_without_the_filter_finds_notes(servers: dict[str, AmlClient]) -> None:
    for client in servers.values():
        status, learned = answer(client, {"query": "cash deposits structuring", "top_k": 10})
        assert status == 200 and isinstance(learned, list) and learned
