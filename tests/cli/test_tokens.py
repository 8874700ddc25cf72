"""`aml-mcp revoke`: revoke a token id or a subject, list what is revoked, lift it again.

(`aml-mcp token` is tested against a running server in `tests/devauth/test_server.py`.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aml_mcp.cli import main as cli_main


def test_revoke_list_and_lift(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server this data directory belongs to trusts https://id.example (as its settings say).
    monkeypatch.setenv("AML_MCP_AUTH__ISSUERS", '[{"issuer": "https://id.example"}]')
    base = ["revoke", "--data-dir", str(tmp_path)]
    assert cli_main([*base, "--jti", "tok-1", "--note", "leaked"]) == 0
    assert cli_main([*base, "--subject", "bob", "--issuer", "https://id.example"]) == 0
    assert cli_main([*base, "--subject", "bob"]) == 2  # a subject needs its issuer
    capsys.readouterr()
    assert cli_main([*base, "--list"]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e["kind"], e["issuer"], e["value"], e["note"]) for e in listed] == [
        ("jti", "", "tok-1", "leaked"),
        ("subject", "https://id.example", "bob", None),
    ]
    assert cli_main([*base, "--jti", "tok-1", "--lift"]) == 0
    assert cli_main([*base, "--jti", "tok-1", "--lift"]) == 1  # nothing left to lift
