"""`aml-mcp ingest` on hostile rows: each is named by its line, nothing is written, exit 1, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from aml_mcp.aml.notes.storage.sqlite import SqliteNotes

GOOD = {"case_id": "C-1", "created_at": "2024-03-01T10:00:00Z", "text": "cash deposits under the limit"}

HOSTILE = {
    2: "[" * 100_000 + "]" * 100_000,
    3: json.dumps({**GOOD, "note_id": "N-3", "created_at": "9999-12-31T23:59:59-14:00"}),
    4: json.dumps({**GOOD, "note_id": "N-4", "created_at": "0001-01-01T00:00:00+01:00"}),
    5: '{"note_id": "N-5", "case_id": "C-1", "created_at": "2024-01-01", "text": "x", "amount": '
    + "9" * 5000
    + "}",
    6: '{"note_id": "N-6", "case_id": "C-1", "created_at": "2024-01-01", "text": "x", "subjects": '
    + "[" * 900
    + "]" * 900
    + "}",
    7: json.dumps({**GOOD, "note_id": "N-7", "text": "\ud800"}),
}


def test_hostile_rows_are_listed_by_line_and_nothing_is_written(tmp_path: Path) -> None:
    lines = [json.dumps({**GOOD, "note_id": "N-1"})]
    lines += [HOSTILE[number] for number in sorted(HOSTILE)]
    lines.append(json.dumps({**GOOD, "note_id": "N-8"}))
    source = tmp_path / "notes.jsonl"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    data_dir = tmp_path / "data"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "aml_mcp",
            "ingest",
            str(source),
            "--tenant",
            "bank-a",
            "--data-dir",
            str(data_dir),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert f"not ingested: {len(HOSTILE)} bad row(s) of {len(lines)}; nothing was changed" in done.stdout
    reported = [line.strip() for line in done.stdout.splitlines() if line.startswith("  line ")]
    assert [int(line.split()[1].rstrip(":")) for line in reported] == sorted(HOSTILE)
    assert "nested too deeply" in reported[0]
    assert "out of range once converted to UTC" in reported[1] and "out of range" in reported[2]
    assert "4300 digits" in reported[3]
    with SqliteNotes.open(data_dir) as store:
        assert store.tenant("bank-a").count() == 0
