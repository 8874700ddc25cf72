"""`audit.jsonl` is bounded on disk: rotated by size (N files kept), or reopened after an external rename.

And a batch is written whole or not at all: a write that fails midway (here a real file-size
limit, `RLIMIT_FSIZE`, in a child process) is cut back, so the file never holds half a line.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from aml_mcp.audit import AuditEvent, Decision
from aml_mcp.audit.sinks import JsonLinesSink
from aml_mcp.principal import Principal
from tests.support.audit_trail import call_body, jsonl_events, raw_post, read_catalog, wait_until
from tests.support.oauth import SecuredServer, TestIssuer, auth_settings, secured_server

ALICE = Principal("https://id.example", "alice", "bank-a", "copilot", token_id="j")


def _batch(start: int, size: int) -> list[AuditEvent]:
    return [
        AuditEvent.about(ALICE, decision=Decision.ALLOW, reason="ok", method="tools/call", target=f"e{n}")
        for n in range(start, start + size)
    ]


def _targets(path: Path) -> list[str]:
    return [json.loads(line)["target"] for line in path.read_text().splitlines()]


def test_the_file_rotates_by_size_and_keeps_n_backups(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sink = JsonLinesSink(path, max_bytes=4000, backups=2)
    for start in range(0, 200, 5):
        sink.write_batch(_batch(start, 5))
    sink.close()

    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"]
    assert sink.rotations > 2
    for name in files:
        assert (tmp_path / name).stat().st_size <= 4000
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600  # the trail is not world-readable
    kept = [e["target"] for e in jsonl_events(tmp_path)]
    assert kept == [f"e{n}" for n in range(200 - len(kept), 200)]  # the newest, in order, no gap
    assert _targets(tmp_path / "audit.jsonl.2")[0] == kept[0]


def test_an_external_rename_is_followed_by_a_new_file(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sink = JsonLinesSink(path, max_bytes=0)  # rotation left to logrotate
    sink.write_batch(_batch(0, 3))
    os.rename(path, tmp_path / "audit.jsonl-20261201")  # what logrotate does (no copytruncate)
    sink.write_batch(_batch(3, 2))
    sink.close()
    assert _targets(tmp_path / "audit.jsonl-20261201") == ["e0", "e1", "e2"]
    assert _targets(path) == ["e3", "e4"]


_FILE_SIZE_LIMIT = textwrap.dedent(
    """
    import json, resource, signal, sys
    from pathlib import Path
    from aml_mcp.audit import AuditEvent, Decision
    from aml_mcp.audit.sinks import JsonLinesSink

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write then fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (6000, 6000))
    sink = JsonLinesSink(Path(sys.argv[1]), max_bytes=0)
    def batch(start, size):
        return [AuditEvent(decision=Decision.DENY, reason="no_token", target=f"e{n}" + "x" * 100)
                for n in range(start, start + size)]
    sink.write_batch(batch(0, 10))
    try:
        sink.write_batch(batch(10, 100))
        outcome = "written"
    except OSError as error:
        outcome = type(error).__name__
    print(json.dumps({"outcome": outcome}))
    """
)


def test_a_batch_that_fails_midway_is_cut_back_to_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", _FILE_SIZE_LIMIT, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(done.stdout) == {"outcome": "OSError"}
    raw = path.read_bytes()
    assert raw.endswith(b"\n") and len(raw) < 6000
    assert [t.rstrip("x") for t in _targets(path)] == [
        f"e{n}" for n in range(10)
    ]  # only the first batch, whole


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SecuredServer]:
    with TestIssuer() as issuer:
        settings = auth_settings([issuer], audit_file_max_bytes=3000, audit_file_backups=3)
        with secured_server(tmp_path, read_catalog(), issuer=issuer, auth=settings) as running:
            yield running


def test_the_running_server_rotates_its_file_by_the_settings(server: SecuredServer) -> None:
    for n in range(60):
        token = server.mint(subject="alice", scope="aml:read", jti=f"rot-{n}")
        assert raw_post(server.http, call_body(), token=token, name="probe_read").status_code == 200
    wait_until(lambda: (server.data_dir / "audit.jsonl.3").exists(), what="three rotations")
    wait_until(
        lambda: "rot-59" in {e["token_id"] for e in jsonl_events(server.data_dir)}, what="the last event"
    )
    assert not (server.data_dir / "audit.jsonl.4").exists()
    # A batch is cut at line ends, so every file stays within the limit whatever the batching.
    for file in [server.data_dir / "audit.jsonl", *server.data_dir.glob("audit.jsonl.*")]:
        assert file.stat().st_size <= 3000, file
