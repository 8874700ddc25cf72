"""The checks `serve` runs before it loads or announces anything, in process (the child-process
tests in test_serve_startup_failures.py show what an operator sees)."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest

from aml_mcp.cli.startup import EXIT_DATA_DIR, EXIT_LISTEN, StartupError, bind_listener, check_data_dir
from aml_mcp.config import Settings
from aml_mcp.shared_secrets.storage.files import load_or_create_secret
from aml_mcp.store.sqlite import SqliteDatabase


def test_a_used_data_dir_that_lost_its_store_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    load_or_create_secret(tmp_path / "keys" / "request-state.key")  # a server ran here
    with caplog.at_level(logging.WARNING):
        check_data_dir(Settings(data_dir=tmp_path))
    assert "aml-mcp.db is missing" in caplog.text and "revocation" in caplog.text


def test_a_fresh_or_intact_data_dir_passes_quietly(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        check_data_dir(Settings(data_dir=tmp_path / "new"))
        database = SqliteDatabase(tmp_path / "new" / "aml-mcp.db")
        database.open()
        database.close()
        load_or_create_secret(tmp_path / "new" / "keys" / "request-state.key")
        check_data_dir(Settings(data_dir=tmp_path / "new"))
    assert caplog.text == ""
    assert [p.name for p in (tmp_path / "new").iterdir() if p.name.startswith(".")] == []  # probe removed


def test_damaged_signing_keys_are_refused_when_the_dev_issuer_is_on(tmp_path: Path) -> None:
    keys = tmp_path / "keys" / "devauth-signing.json"
    keys.parent.mkdir()
    keys.write_text('{"current": "k1", "keys": [{"kid": "k1", "pem": "-----BEG')
    with pytest.raises(StartupError, match=r"devauth-signing\.json is damaged") as refused:
        check_data_dir(Settings(data_dir=tmp_path))
    assert refused.value.exit_code == EXIT_DATA_DIR
    check_data_dir(Settings(data_dir=tmp_path, auth={"dev": {"enabled": False}}))  # not used: not read


def test_a_port_in_use_is_refused_with_the_listen_exit_code() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(StartupError, match=f"cannot listen on 127.0.0.1:{port}") as refused:
            bind_listener("127.0.0.1", port)
    assert refused.value.exit_code == EXIT_LISTEN


def test_port_zero_binds_a_free_port() -> None:
    sock = bind_listener("127.0.0.1", 0)
    try:
        assert sock.getsockname()[1] > 0
    finally:
        sock.close()
