"""`aml-mcp devauth`: the development issuer's commands.

(`devauth rotate-keys` is tested against a running server in `tests/devauth/test_server.py`.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from aml_mcp.cli import main as cli_main
from aml_mcp.devauth.wiring import service_client_secret
from aml_mcp.shared_secrets.storage.files import FilesSecrets


def test_client_secret_command_prints_the_service_clients_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["devauth", "client-secret", "--data-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == service_client_secret(FilesSecrets(tmp_path / "keys"))
