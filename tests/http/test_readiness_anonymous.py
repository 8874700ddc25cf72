"""Anonymous `/readyz` says ready or not ready with reason codes, never a bank, a count or an internal
message (review finding N4); the details go to the log, once per change, and to the metrics.

`/readyz` answers whoever reaches the port, a balancer's health checks and everyone behind the
balancer included. It used to publish "re-embedding bank 1 of 3 (alpen-privatbank), 128/2000 notes"
during the background re-embedding, and a failing probe's message. Both cases run over real HTTP:
the real `aml-mcp serve` moving three banks to the transformer, and a server on a damaged notes store.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import httpx
import pytest

from aml_mcp.aml.demo.corpus import TENANTS, generate_notes
from aml_mcp.aml.demo.first_start import load_demo_if_empty
from aml_mcp.aml.ingest import write_notes
from aml_mcp.aml.notes.storage.sqlite import DB_FILE_NAME, SqliteNotes
from aml_mcp.aml.search.embeddings import StaticEmbedder
from aml_mcp.aml.settings import AmlSettings
from aml_mcp.app import build_app
from tests.http.announced import AnnouncedServer
from tests.support.damaged_files import checkpointed, scramble_middle
from tests.support.live_server import LiveServer
from tests.support.settings import open_settings

NOTES_PER_BANK = 80
"""Three banks of these take the transformer several seconds to move on 2 cores: long enough to probe."""
MOVING = "re-embedding bank "
DONE = "re-embedding done"


def _readyz_leaks(text: str) -> list[str]:
    """What a readiness answer must never carry: a bank's name or a number (a note count)."""
    leaks = [tenant.name for tenant in TENANTS if tenant.name in text]
    return leaks + [ch for ch in text if ch.isdigit()]


@pytest.mark.slow
def test_readyz_names_no_bank_and_no_count_while_banks_are_reembedded(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    static = StaticEmbedder.load()
    with SqliteNotes.open(data_dir) as store:
        for tenant in TENANTS:
            write_notes(store, tenant.name, [d.note for d in generate_notes(tenant, NOTES_PER_BANK)], static)
    serve = ["serve", "--data-dir", str(data_dir)]
    answers: list[tuple[int, str]] = []
    while_moving = 0
    with AnnouncedServer(serve, env={"AML_MCP_AML__EMBEDDER": "minilm"}) as server:
        deadline = time.monotonic() + 240
        while DONE not in server.stderr():
            assert time.monotonic() < deadline, f"the background move did not end:\n{server.stderr()}"
            moving = MOVING in server.stderr()
            response = httpx.get(f"{server.base}/readyz", timeout=10)
            answers.append((response.status_code, response.text))
            if moving and DONE not in server.stderr():
                while_moving += 1  # the log said a bank was moving before and after this answer
            time.sleep(0.2)
        log = server.stderr()
    assert while_moving >= 1, f"no /readyz answer fell inside the move:\n{log}"
    for status, text in answers:
        assert status == 200 and json.loads(text) == {"status": "ready"}, text
        assert _readyz_leaks(text) == [], text
    # The details are the operator's, in the log: which bank moved, and how far.
    for tenant in TENANTS:
        assert f"of 3 ({tenant.name}): {NOTES_PER_BANK}/{NOTES_PER_BANK} notes" in log, log


def test_a_failing_probe_answers_its_code_and_logs_its_reason_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    aml = AmlSettings(embedder="static", demo_notes_per_tenant=40)
    load_demo_if_empty(aml, tmp_path)
    checkpointed(tmp_path / DB_FILE_NAME)
    scramble_middle(tmp_path / DB_FILE_NAME)
    caplog.set_level(logging.INFO, logger="aml_mcp.http.health")
    with LiveServer(build_app(open_settings(tmp_path, aml=aml))) as server, httpx.Client(timeout=10) as http:
        answers = [http.get(f"{server.url}/readyz") for _ in range(5)]
        health = http.get(f"{server.url}/healthz")
    for answer in answers:
        assert answer.status_code == 503
        assert answer.json() == {"status": "not_ready", "reasons": ["notes_unavailable"]}
        assert "notes.db" not in answer.text and str(tmp_path) not in answer.text
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    said = [r.getMessage() for r in caplog.records if r.name == "aml_mcp.http.health"]
    assert len(said) == 1, said  # five probes, one change: one line
    assert said[0].startswith("not ready (notes_unavailable): notes.db is damaged"), said
    assert "restore it from a backup" in said[0]
