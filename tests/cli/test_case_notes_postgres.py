"""`aml-mcp ingest` and `aml-mcp reembed` with `--database-url`: they write the shared PostgreSQL
notes, not the data directory's SQLite; a note PostgreSQL cannot hold is refused by name, with
the whole file, and nothing is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from aml_mcp.aml.notes.storage.postgres import PostgresNotes
from aml_mcp.aml.notes.storage.sqlite import SqliteNotes
from aml_mcp.aml.search.transformer import SPACE_NAME
from aml_mcp.store.postgres import PostgresDatabase
from tests.support.postgres import scratch_schema

GOOD = {"case_id": "C-1", "created_at": "2024-03-01T10:00:00Z", "text": "cash deposits under the limit"}


def run(args: list[str], schema: str, embedder: str = "static") -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "AML_MCP_DATABASE_SCHEMA": schema, "AML_MCP_AML__EMBEDDER": embedder}
    return subprocess.run(
        [sys.executable, "-m", "aml_mcp", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=environment,
        check=False,
    )


def jsonl(path: Path, rows: list[dict[str, str]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_ingest_and_reembed_write_the_shared_notes(tmp_path: Path) -> None:
    source = jsonl(tmp_path / "notes.jsonl", [{**GOOD, "note_id": f"N-{i}"} for i in range(3)])
    data_dir = tmp_path / "data"
    with scratch_schema() as (url, schema):
        ingest = [
            "ingest",
            str(source),
            "--tenant",
            "bank-a",
            "--database-url",
            url,
            "--data-dir",
            str(data_dir),
        ]
        done = run(ingest, schema)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "3" in done.stdout
        with PostgresNotes(PostgresDatabase(url, schema=schema)) as store:
            assert store.tenant("bank-a").count() == 3
            assert str(store.tenant("bank-a").vector_space()).startswith("static:")
        with SqliteNotes.open(data_dir) as local:
            assert local.tenants() == []  # nothing went to the data directory
        moved = run(["reembed", "--database-url", url, "--data-dir", str(data_dir)], schema, "minilm")
        assert moved.returncode == 0, moved.stdout + moved.stderr
        assert "bank-a: 3 note(s) re-embedded" in moved.stdout
        with PostgresNotes(PostgresDatabase(url, schema=schema)) as store:
            assert store.tenant("bank-a").vector_space() == SPACE_NAME
            vectors = store.tenant("bank-a").vectors()
            assert vectors is not None and vectors.matrix.shape[0] == 3


def test_a_note_holding_nul_is_refused_with_its_file(tmp_path: Path) -> None:
    rows = [{**GOOD, "note_id": "N-1"}, {**GOOD, "note_id": "N-2", "text": "bad \u0000 byte"}]
    source = jsonl(tmp_path / "notes.jsonl", rows)
    with scratch_schema() as (url, schema):
        done = run(["ingest", str(source), "--tenant", "bank-a", "--database-url", url], schema)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "'N-2'" in done.stdout and "U+0000" in done.stdout
        assert "Traceback" not in done.stderr
        with PostgresNotes(PostgresDatabase(url, schema=schema)) as store:
            assert store.tenant("bank-a").count() == 0
