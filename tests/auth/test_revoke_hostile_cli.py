"""N8: `aml-mcp revoke` with a subject no store can hold is a clear refusal, on both backends.

A command line cannot carry NUL (the operating system ends an argument there), but it can carry
bytes that are not UTF-8, which Python hands over as lone surrogates; and the command's `main` is
called in-process by whoever embeds it, with any string. Before, PostgreSQL failed on the value
(`psycopg.DataError`) and SQLite's driver could not encode it: a traceback either way. Now both
stores refuse it before anything is sent, and the command says so in one line (exit 2), storing
nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from aml_mcp.cli import main as cli_main
from tests.support.postgres import BACKENDS, scratch_schema

ISSUER = "https://issuer.example"


@pytest.fixture(params=BACKENDS)
def command(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[str]]:
    """`aml-mcp revoke` on a data directory of its own, or on a PostgreSQL schema of its own."""
    base = ["revoke", "--data-dir", str(tmp_path / "operator")]
    if request.param == "sqlite":
        yield base
        return
    with scratch_schema() as (url, schema):
        monkeypatch.setenv("AML_MCP_DATABASE_SCHEMA", schema)
        yield [*base, "--database-url", url]


def listed(command: list[str], capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    capsys.readouterr()
    assert cli_main([*command, "--list"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.mark.parametrize(
    "subject", ["mallory\x00", "\x00", "mal\ud800lory"], ids=["nul", "only-nul", "surrogate"]
)
def test_a_subject_no_store_can_hold_is_refused_in_one_line(
    command: list[str], subject: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status = cli_main([*command, "--subject", subject, "--issuer", ISSUER, "--force"])
    captured = capsys.readouterr()
    assert status == 2, captured
    assert "Traceback" not in captured.err and len(captured.err.strip().splitlines()) == 1
    assert "U+0000 or an unpaired surrogate" in captured.err
    assert listed(command, capsys) == []
    # Lifting it finds nothing to lift (exit 1), and fails on nothing either.
    assert cli_main([*command, "--subject", subject, "--issuer", ISSUER, "--lift"]) == 1


def test_a_subject_of_bytes_that_are_not_utf8_is_refused_by_the_real_command(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [sys.executable.encode(), b"-m", b"aml_mcp", *(part.encode() for part in command)]
    argv += [b"--subject", b"mallory\xff", b"--issuer", ISSUER.encode(), b"--force"]
    done = subprocess.run(argv, capture_output=True, timeout=120, env=os.environ.copy(), check=False)
    stderr = done.stderr.decode("utf-8", "backslashreplace")
    assert done.returncode == 2, stderr
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1
    assert listed(command, capsys) == []


def test_a_nul_cannot_even_reach_the_command_line() -> None:
    with pytest.raises(ValueError, match="embedded null byte"):
        subprocess.run([sys.executable, "-c", "pass", "mallory\x00"], check=False)


def test_a_plain_subject_is_still_revoked(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main([*command, "--subject", "mallory", "--issuer", ISSUER, "--force"]) == 0
    assert [(entry["kind"], entry["value"]) for entry in listed(command, capsys)] == [("subject", "mallory")]
