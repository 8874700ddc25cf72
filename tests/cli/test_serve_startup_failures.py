"""`aml-mcp serve` on a damaged or read-only data directory, or a busy port: one clear line, non-zero exit.

Each case runs the real command in a child process on a copy of a data directory a real server
has used (demo notes, tasks store, dev issuer database and keys), damaged the way disks, copies
and full file systems damage files. Nothing may start serving on top of the damage: an empty
`aml-mcp.db` taken for a new store would forget every revocation.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.support.damaged_files import checkpointed, replace_header, scramble_middle, truncate_to_zero
from tests.support.read_only import read_only, read_only_file
from tests.support.subprocess_server import ServerProcess

SMALL_DEMO = {"AML_MCP_AML__DEMO_NOTES_PER_TENANT": "40"}
EXIT_DATA_DIR = 3
EXIT_LISTEN = 4


@pytest.fixture(scope="module")
def used_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory after a real server ran on it (and was stopped cleanly)."""
    data_dir = tmp_path_factory.mktemp("template") / "data"
    server = ServerProcess(["serve", "--data-dir", str(data_dir)], env=SMALL_DEMO).start(timeout=120)
    try:
        httpx.post(f"{server.url}/mcp", json={})  # an audited refusal: audit.jsonl and audit rows exist
        mint = ["token", "--data-dir", str(data_dir), "--port", str(server.port)]
        token = subprocess.run(
            [*aml_mcp(), *mint, "--subject", "alice", "--tenant", "meridian-bank"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert token
    finally:
        server.terminate()
        server.wait(30)
    for name in ("aml-mcp.db", "notes.db", "devauth.db"):
        checkpointed(data_dir / name)
    return data_dir


@pytest.fixture
def data_dir(used_data_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "data"
    shutil.copytree(used_data_dir, copy)
    return copy


def aml_mcp() -> list[str]:
    return [sys.executable, "-m", "aml_mcp"]


def serve(data_dir: Path, port: int | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*aml_mcp(), "serve", "--data-dir", str(data_dir), "--port", str(port or 0)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **SMALL_DEMO},
    )


def the_one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The refusal: the only thing on stderr, one line, no traceback."""
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("aml-mcp: "), lines
    assert "serving" not in done.stderr
    return lines[0]


def half(path: Path) -> None:
    size = path.stat().st_size
    with path.open("r+b") as handle:
        handle.truncate(size // 2)


DAMAGE: dict[str, tuple[str, Callable[[Path], None], str]] = {
    "aml-mcp.db emptied": ("aml-mcp.db", truncate_to_zero, "is empty (0 bytes)"),
    "aml-mcp.db cut in half": ("aml-mcp.db", half, "is damaged"),
    "notes.db emptied": ("notes.db", truncate_to_zero, "is empty (0 bytes)"),
    "notes.db cut in half": ("notes.db", half, "is damaged"),
    "notes.db pages scrambled": ("notes.db", scramble_middle, "is damaged"),
    "devauth.db emptied": ("devauth.db", truncate_to_zero, "is empty (0 bytes)"),
    "devauth.db header replaced": ("devauth.db", replace_header, "is not a SQLite database"),
    "signing keys truncated": ("keys/devauth-signing.json", half, "is damaged"),
}


@pytest.mark.parametrize("case", list(DAMAGE), ids=list(DAMAGE))
def test_a_damaged_file_refuses_to_start_with_one_line(case: str, data_dir: Path) -> None:
    name, damage, says = DAMAGE[case]
    damage(data_dir / name)
    before = (data_dir / name).read_bytes()
    done = serve(data_dir)
    assert done.returncode == EXIT_DATA_DIR, done.stderr
    line = the_one_line(done)
    assert name.split("/")[-1] in line and says in line, line
    assert "restore it from a backup" in line
    assert (data_dir / name).read_bytes() == before  # left as found, for the operator


def test_an_empty_store_is_refused_even_when_nothing_else_is_there(tmp_path: Path) -> None:
    (tmp_path / "aml-mcp.db").write_bytes(b"")
    done = serve(tmp_path)
    assert done.returncode == EXIT_DATA_DIR
    assert "aml-mcp.db is empty" in the_one_line(done)
    assert not (tmp_path / "notes.db").exists()  # nothing was loaded on top


@pytest.mark.parametrize("used", [False, True], ids=["fresh", "used"])
def test_a_read_only_data_dir_refuses_to_start_with_one_line(used: bool, data_dir: Path) -> None:
    if not used:
        shutil.rmtree(data_dir)
        data_dir.mkdir(mode=0o700)
    with read_only(data_dir):
        done = serve(data_dir)
    assert done.returncode == EXIT_DATA_DIR, done.stderr
    line = the_one_line(done)
    assert f"the data directory {data_dir} is not writable" in line


def test_a_read_only_database_file_refuses_to_start_with_one_line(data_dir: Path) -> None:
    store = data_dir / "aml-mcp.db"
    (data_dir / "aml-mcp.db-wal").unlink(missing_ok=True)
    (data_dir / "aml-mcp.db-shm").unlink(missing_ok=True)
    with read_only_file(store):
        done = serve(data_dir)
    assert done.returncode == EXIT_DATA_DIR, done.stderr
    assert f"{store} is not writable" in the_one_line(done)


def test_a_busy_port_refuses_before_loading_or_announcing_anything(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = serve(tmp_path / "data", port)
    assert done.returncode == EXIT_LISTEN, done.stderr
    line = the_one_line(done)
    assert f"cannot listen on 127.0.0.1:{port}" in line and "in use" in line
    assert not (tmp_path / "data" / "notes.db").exists()  # the demo corpus was not loaded
