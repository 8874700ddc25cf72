"""`search_aml_notes` over HTTP on two app instances that share one PostgreSQL schema and nothing
else (separate data directories): both return the same notes, a note ingested with
`aml-mcp ingest --database-url` is found on both, and a bank still sees only its own notes; a
baseline saved by `run_full_eval` on one is what the other compares with.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aml_mcp.aml.demo.corpus import TENANTS, DemoNote
from aml_mcp.aml.demo.first_start import load_demo_if_empty
from aml_mcp.aml.notes.storage.postgres import PostgresNotes
from aml_mcp.aml.settings import AmlSettings
from aml_mcp.store.postgres import PostgresDatabase
from tests.aml.tools.aml_client import FAST_TASKS, NOTES_PER_BANK, A, AmlClient, B
from tests.support.oauth import TestIssuer, secured_server
from tests.support.postgres import scratch_schema

SETTINGS = AmlSettings(embedder="static", demo_notes_per_tenant=NOTES_PER_BANK)


@pytest.fixture(scope="module")
def replicas(
    tmp_path_factory: pytest.TempPathFactory, issuer: TestIssuer
) -> Iterator[tuple[AmlClient, AmlClient, str, str]]:
    with scratch_schema() as (url, schema):
        with PostgresNotes(PostgresDatabase(url, schema=schema)) as store:
            loaded = load_demo_if_empty(SETTINGS, tmp_path_factory.mktemp("unused"), store=store)
            assert loaded == {t.name: NOTES_PER_BANK for t in TENANTS}
        shared: dict[str, Any] = {"database_url": url, "database_schema": schema, "tasks": FAST_TASKS}
        with (
            secured_server(tmp_path_factory.mktemp("a"), None, issuer=issuer, aml=SETTINGS, **shared) as a,
            secured_server(tmp_path_factory.mktemp("b"), None, issuer=issuer, aml=SETTINGS, **shared) as b,
        ):
            yield AmlClient(a), AmlClient(b), url, schema


def ids(hits: list[dict[str, object]]) -> list[object]:
    return [h["note_id"] for h in hits]


def test_both_replicas_return_the_same_notes(
    replicas: tuple[AmlClient, AmlClient, str, str], demo_notes: dict[str, list[DemoNote]]
) -> None:
    first, second, _, _ = replicas
    own = {d.note.note_id for d in demo_notes[A]}
    sample = demo_notes[A][7].note
    queries = [
        "structuring cash deposits",
        "wire transfers to a shell company",
        sample.note_id,
        sample.subjects[0].name if sample.subjects else sample.case_id,
    ]
    for query in queries:
        on_a, on_b = first.search(A, query=query, top_k=10), second.search(A, query=query, top_k=10)
        assert on_a, query
        assert ids(on_a) == ids(on_b), query
        assert [h["score"] for h in on_a] == [h["score"] for h in on_b]
        assert set(ids(on_a)) <= own  # never another bank's notes
    exact = first.search(A, query=sample.note_id, top_k=1)
    assert ids(exact) == [sample.note_id]
    assert sample.note_id not in ids(second.search(B, query=sample.note_id, top_k=10))


def test_a_note_ingested_into_the_database_is_found_on_both_replicas(
    replicas: tuple[AmlClient, AmlClient, str, str], tmp_path: Path
) -> None:
    first, second, url, schema = replicas
    for client in (first, second):  # both hold the bank's vectors in memory before the write
        assert "PG-NEW-1" not in ids(client.search(A, query="quokka figurines bearer bonds", top_k=5))
    note = {
        "note_id": "PG-NEW-1",
        "case_id": "PG-CASE-1",
        "created_at": "2026-03-01T10:00:00Z",
        "text": "Quokka figurines used to smuggle bearer bonds through the harbour.",
    }
    source = tmp_path / "notes.jsonl"
    source.write_text(json.dumps(note) + "\n", encoding="utf-8")
    environment = {
        **os.environ,
        "AML_MCP_DATABASE_SCHEMA": schema,
        "AML_MCP_AML__EMBEDDER": "static",
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "aml_mcp",
            "ingest",
            str(source),
            "--tenant",
            A,
            "--database-url",
            url,
            "--data-dir",
            str(tmp_path / "cli"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for client in (first, second):
        hits = client.search(A, query="quokka figurines bearer bonds", top_k=3)
        assert ids(hits)[:1] == ["PG-NEW-1"]
        assert "PG-NEW-1" not in ids(client.search(B, query="PG-NEW-1 quokka figurines", top_k=10))


def _evaluate(client: AmlClient, tenant: str, **arguments: Any) -> dict[str, Any]:
    task_id = client.start("run_full_eval", arguments, tenant=tenant, scope="aml:eval")
    done = client.wait_for(task_id, "completed", "failed", tenant=tenant, scope="aml:eval", within=120)
    assert done["status"] == "completed", done
    report: dict[str, Any] = done["result"]["structuredContent"]
    return report


def test_a_baseline_saved_on_one_replica_is_compared_with_on_the_other(
    replicas: tuple[AmlClient, AmlClient, str, str],
) -> None:
    first, second, _, _ = replicas
    saved = _evaluate(first, B, save_as_baseline=True)
    retrieval = saved["retrieval"]
    # Lexical ranking is ts_rank_cd here, not BM25: the hybrid still finds the labelled notes.
    assert retrieval["available"] is True and retrieval["ndcg_at_10"] > 0.4
    baseline_id = saved["saved_baseline"]["baseline_id"]
    again = _evaluate(second, B)
    assert again["baseline"]["baseline_id"] == baseline_id
    assert (again["deltas"]["recall_at_10"], again["deltas"]["ndcg_at_10"]) == (0.0, 0.0)
    assert _evaluate(second, A)["baseline"] is None


@pytest.mark.parametrize("hostile", ["\u0000", "ACC\u0000-1", "\ud800", "Ma\ud800ria \u0000"])
def test_text_postgresql_cannot_hold_is_answered_never_a_server_error(
    replicas: tuple[AmlClient, AmlClient, str, str], hostile: str
) -> None:
    first, _, _, _ = replicas
    for arguments in ({"query": hostile}, {"query": f"cash {hostile}", "case_id": hostile}):
        response = first.call("search_aml_notes", arguments, tenant=A, scope="aml:read")
        body = response.json()
        if "\ud800" in hostile:  # refused at the door, before any store sees it
            assert (response.status_code, body["error"]["code"]) == (400, -32700), body
            continue
        assert response.status_code == 200, response.text
        assert "result" in body or body["error"]["code"] == -32602, body
        if "result" in body and body["result"].get("isError") is not True:
            assert all(h["note_id"] for h in body["result"]["structuredContent"]["results"])
