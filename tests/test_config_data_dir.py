"""`Settings.ensure_data_dir`: created 0700 whatever the umask; an open existing one is warned about."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from aml_mcp.config import Settings


@pytest.mark.parametrize("umask", [0o022, 0o000, 0o277], ids=["022", "000", "277"])
def test_a_new_data_dir_is_owner_only(umask: int, tmp_path: Path) -> None:
    previous = os.umask(umask)
    try:
        made = Settings(data_dir=tmp_path / "a" / "var").ensure_data_dir()
    finally:
        os.umask(previous)
    assert stat.S_IMODE(made.stat().st_mode) == 0o700


def test_an_existing_data_dir_open_to_others_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    with caplog.at_level(logging.WARNING, logger="aml_mcp.config"):
        assert Settings(data_dir=shared).ensure_data_dir() == shared
    assert "open to other users (mode 0755)" in caplog.text and "chmod 700" in caplog.text


def test_an_owner_only_data_dir_is_used_quietly(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    with caplog.at_level(logging.WARNING, logger="aml_mcp.config"):
        Settings(data_dir=private).ensure_data_dir()
    assert caplog.text == ""


def test_a_file_where_the_data_dir_should_be_is_refused(tmp_path: Path) -> None:
    (tmp_path / "var").write_text("")
    with pytest.raises(NotADirectoryError, match="is not a directory"):
        Settings(data_dir=tmp_path / "var").ensure_data_dir()
