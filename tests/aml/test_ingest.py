"""Ingestion is all-or-nothing per file, names every bad line, and replaces re-ingested notes."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aml_mcp.aml.ingest import ingest_file, run_ingest
from aml_mcp.aml.notes.model import NoteFilter
from aml_mcp.aml.notes.storage.sqlite import SqliteNotes
from aml_mcp.aml.search.choice import EmbedderKind
from aml_mcp.aml.search.embeddings import StaticEmbedder
from aml_mcp.aml.search.engine import NoteSearch, SearchRequest
from aml_mcp.aml.search.transformer import SPACE_NAME
from tests.support.notes import note_by_id


def _row(note_id: str, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "note_id": note_id,
        "case_id": "C-1",
        "created_at": "2024-05-01T09:30:00+02:00",
        "text": f"Cash deposits below the threshold, note {note_id}.",
        "subjects": [{"name": "Ana B. Costa", "account_id": "ACC-778899", "role": "primary"}],
        "typologies": ["Structuring"],
        "amount": 9500,
        "currency": "USD",
    }
    row.update(extra)
    return row


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_valid_file_is_ingested(tmp_path: Path, store: SqliteNotes, embedder: StaticEmbedder) -> None:
    path = _write(tmp_path / "ok.jsonl", [json.dumps(_row("n1")), "", json.dumps(_row("n2"))])
    report = ingest_file(path, "bank-a", store, embedder)
    assert report.ok
    assert (report.rows, report.inserted, report.replaced) == (2, 2, 0)
    note = note_by_id(store.tenant("bank-a"), "n1")
    assert note is not None
    assert note.typologies == ("structuring",)
    assert note.created_at.isoformat() == "2024-05-01T07:30:00+00:00"


def test_bad_rows_change_nothing_and_every_bad_line_is_named(
    tmp_path: Path, store: SqliteNotes, embedder: StaticEmbedder
) -> None:
    good = tmp_path / "good.jsonl"
    _write(good, [json.dumps(_row("keep", text="Original wording of the kept note."))])
    assert ingest_file(good, "bank-a", store, embedder).ok
    lines = [
        json.dumps(_row("keep", text="Would replace the kept note.")),  # 1: valid, must not be applied
        "{not json",  # 2
        json.dumps(_row("n3", created_at="yesterday")),  # 3
        json.dumps({"note_id": "n4", "case_id": "C-1", "created_at": "2024-01-01"}),  # 4: no text
        "",  # blank lines are skipped but still counted for numbering
        "[1, 2]",  # 6
        json.dumps(_row("n7", unexpected="field")),  # 7
        json.dumps(_row("n8", subjects=[{"name": "X", "date_of_birth": "1990-13-45"}])),  # 8
        json.dumps(_row("n9")),  # 9: valid
        json.dumps(_row("n9")),  # 10: duplicate id in the same file
        json.dumps(_row("n11", amount=-5)),  # 11
        json.dumps(_row("n12", currency="dollars")),  # 12
    ]
    report = ingest_file(_write(tmp_path / "bad.jsonl", lines), "bank-a", store, embedder)
    assert not report.ok
    by_line = {e.line: e.reason for e in report.errors}
    assert sorted(by_line) == [2, 3, 4, 6, 7, 8, 10, 11, 12]
    assert "not valid JSON" in by_line[2]
    assert "created_at" in by_line[3]
    assert "text" in by_line[4] and "required" in by_line[4].lower()
    assert "JSON object" in by_line[6]
    assert "unexpected" in by_line[7]
    assert "date_of_birth" in by_line[8]
    assert "line 9" in by_line[10]
    assert "amount" in by_line[11]
    assert "currency" in by_line[12]
    tenant = store.tenant("bank-a")
    assert tenant.count() == 1
    kept = note_by_id(tenant, "keep")
    assert kept is not None and kept.text == "Original wording of the kept note."
    assert note_by_id(tenant, "n9") is None
    rendered = report.render()
    for line in sorted(by_line):
        assert f"line {line}:" in rendered
    assert "nothing was changed" in rendered


def test_reingest_replaces_the_note(tmp_path: Path, store: SqliteNotes, embedder: StaticEmbedder) -> None:
    search = NoteSearch(embedder)
    first = _write(tmp_path / "a.jsonl", [json.dumps(_row("n1", text="Zebra-striped invoices from Lagos."))])
    assert ingest_file(first, "bank-a", store, embedder).ok
    second = _write(tmp_path / "b.jsonl", [json.dumps(_row("n1", text="Casino chips bought with cash."))])
    report = ingest_file(second, "bank-a", store, embedder)
    assert (report.inserted, report.replaced) == (0, 1)
    tenant = store.tenant("bank-a")
    assert tenant.count() == 1
    assert tenant.lexical('"zebra"', NoteFilter(), 10) == []  # the old text left the index
    hits = search.search(tenant, SearchRequest(query="casino chips"))
    assert [h.note_id for h in hits] == ["n1"]
    assert "**" in hits[0].snippet


@pytest.mark.parametrize(
    ("content", "expected"),
    [(b"\xff\xfe\x00garbage", "not UTF-8"), (b"\n\n", "no notes")],
)
def test_unusable_files_are_refused(
    tmp_path: Path, store: SqliteNotes, embedder: StaticEmbedder, content: bytes, expected: str
) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(content)
    report = ingest_file(path, "bank-a", store, embedder)
    assert not report.ok and report.fatal is not None and expected in report.fatal
    assert store.tenant("bank-a").count() == 0


def test_missing_file_and_bad_tenant(tmp_path: Path, store: SqliteNotes, embedder: StaticEmbedder) -> None:
    missing = ingest_file(tmp_path / "nope.jsonl", "bank-a", store, embedder)
    assert missing.fatal is not None and "cannot read" in missing.fatal
    path = _write(tmp_path / "ok.jsonl", [json.dumps(_row("n1"))])
    bad_tenant = ingest_file(path, "Bank A; DROP TABLE notes", store, embedder)
    assert bad_tenant.fatal is not None and "invalid tenant" in bad_tenant.fatal
    assert store.tenants() == []


def test_run_ingest_prints_report_and_returns_exit_code(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    ok = _write(tmp_path / "ok.jsonl", [json.dumps(_row("n1"))])
    out = io.StringIO()
    assert run_ingest(ok, "bank-a", data_dir, out=out) == 0
    assert "ingested 1 note(s)" in out.getvalue()
    bad = _write(tmp_path / "bad.jsonl", ["{", json.dumps(_row("n2"))])
    out = io.StringIO()
    assert run_ingest(bad, "bank-a", data_dir, out=out) == 1
    assert "line 1:" in out.getvalue()
    with SqliteNotes.open(data_dir) as store:
        assert store.tenant("bank-a").count() == 1


def test_reembed_command_moves_stale_vectors_to_the_shipped_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from aml_mcp.cli import main as cli_main

    data_dir = tmp_path / "data"
    ok = _write(tmp_path / "ok.jsonl", [json.dumps(_row("n1"))])
    assert run_ingest(ok, "bank-a", data_dir, embedder=EmbedderKind.STATIC) == 0
    with SqliteNotes.open(data_dir) as store:
        notes = store.tenant("bank-a")
        current = notes.vector_space()
        rowids = [rowid for batch in notes.iter_texts() for rowid, _ in batch]
        notes.replace_vectors(
            [(rowid, np.zeros(8, dtype=np.float32)) for rowid in rowids], space="an-older-table"
        )
    assert cli_main(["reembed", "--data-dir", str(data_dir)]) == 0
    assert "bank-a: 1 note(s) re-embedded" in capsys.readouterr().out
    with SqliteNotes.open(data_dir) as store:
        assert store.tenant("bank-a").vector_space() == current
    assert cli_main(["reembed", "--data-dir", str(data_dir), "--tenant", "bank-a"]) == 0
    assert "bank-a: already current" in capsys.readouterr().out


def test_reembed_command_moves_a_static_bank_to_the_transformer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The upgrade path: notes embedded with the static table, then `aml.embedder = minilm`."""
    from aml_mcp.cli import main as cli_main

    data_dir = tmp_path / "data"
    rows = [json.dumps(_row(f"n{i}")) for i in range(3)]
    assert (
        run_ingest(_write(tmp_path / "ok.jsonl", rows), "bank-a", data_dir, embedder=EmbedderKind.STATIC) == 0
    )
    monkeypatch.setenv("AML_MCP_AML__EMBEDDER", "minilm")
    assert cli_main(["reembed", "--data-dir", str(data_dir)]) == 0
    assert "bank-a: 3 note(s) re-embedded" in capsys.readouterr().out
    with SqliteNotes.open(data_dir) as store:
        notes = store.tenant("bank-a")
        assert notes.vector_space() == SPACE_NAME
        vectors = notes.vectors()
        assert vectors is not None and vectors.matrix.shape == (3, 384)
    more = _write(tmp_path / "more.jsonl", [json.dumps(_row("n9"))])
    assert run_ingest(more, "bank-a", data_dir) == 0, "a transformer bank takes transformer ingests"
