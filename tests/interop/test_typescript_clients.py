"""The official TypeScript SDK v2 client (+ ext-tasks) and the MCP Inspector CLI against a real
`aml-mcp serve` subprocess, over real HTTP on 127.0.0.1, each logging in through the development
authorization server by dynamic registration and as the pre-registered `aml-mcp-cli`.

The browser step is `tests/interop/ts/login.mjs`: the SDK script calls it from its redirect handler;
the Inspector opens the authorization URL with `xdg-open`, which runs `$BROWSER` (that script) when
no desktop is present. Versions are pinned in `tests/interop/ts/package-lock.json`.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.interop.conftest import Served, free_port
from tests.support.node_clients import NodeClients

pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.timeout(300)]

CONNECTING = Path(__file__).resolve().parents[2] / "docs" / "connecting-clients.md"


def _steps(output: str) -> dict[str, dict[str, Any]]:
    steps = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    return {step.pop("step"): step for step in steps}


# --- the TypeScript SDK v2 client with ext-tasks ------------------------------------------------


@pytest.mark.parametrize("login", ["dcr", "preregistered"])
def test_typescript_sdk_logs_in_lists_searches_runs_tasks_and_listens(
    clients: NodeClients, served: Served, login: str
) -> None:
    run = subprocess.run(
        [*clients.script("ts-client.mjs"), "--url", served.mcp_url, "--login", login],
        cwd=clients.project,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    steps = _steps(run.stdout)
    assert run.returncode == 0 and "error" not in steps, run.stdout + run.stderr

    signed_in = steps["login"]
    assert signed_in["era"] == "modern" and signed_in["protocolVersion"] == "2026-07-28"
    if login == "dcr":
        registered = signed_in["registered"]
        assert registered["client_id"] != "aml-mcp-cli"
        assert registered["token_endpoint_auth_method"] == "none" and "client_secret" not in registered
    else:
        assert signed_in["registered"] is None and signed_in["clientId"] == "aml-mcp-cli"
        assert signed_in["redirectUri"].endswith("/oauth/callback")  # the SDK's own path, any port

    assert steps["tools/list"]["tools"] == ["draft_sar_batch", "run_full_eval", "search_aml_notes"]
    search = steps["search_aml_notes"]
    assert not search["isError"] and "MRD-" in search["text"] and "HBT-" not in search["text"]

    evaluation = steps["run_full_eval"]
    assert evaluation["kind"] == "task" and evaluation["status"] == "completed"
    assert evaluation["statuses"][-1] == "completed"
    assert evaluation["structured"]["cases"] > 0

    draft = steps["draft_sar_batch"]
    assert draft["kind"] == "task" and draft["status"] == "completed"
    assert "input_required" in draft["statuses"], draft["statuses"]
    assert any("date of birth" in message for message in draft["answered"])
    by_case = {case["case_id"]: case for case in draft["structured"]["cases"]}
    assert by_case["MRD-C000001"]["status"] == "drafted"
    assert by_case["MRD-C000001"]["draft"]["subjects"][0]["date_of_birth_source"] == "analyst"
    assert by_case["HBT-C000001"]["status"] == "not_found"  # another bank's case

    listen = steps["listen"]
    assert listen["acknowledged"] == {"taskIds": [listen["taskId"]]}
    assert {seen["taskId"] for seen in listen["seen"]} == {listen["taskId"]}
    assert listen["seen"][-1]["status"] == "completed"


@pytest.mark.parametrize("client", ["typescript-sdk", "inspector"])
def test_a_client_left_on_the_handshake_is_told_how_to_connect(
    clients: NodeClients, served: Served, token: str, client: str, tmp_path: Path
) -> None:
    """Both clients default to the `initialize` handshake; the error they show their user must
    name 2026-07-28 and the setting that fixes it."""
    if client == "typescript-sdk":
        argv = [*clients.script("legacy-probe.mjs"), served.mcp_url, token]
    else:
        argv = [*clients.inspector(), "--cli", served.mcp_url, "--header", f"Authorization: Bearer {token}"]
        argv += ["--method", "tools/list", "--format", "json"]
    env = {**os.environ, "HOME": str(tmp_path), "MCP_INSPECTOR_SECRET_STORE": "memory"}
    run = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False)
    shown = run.stdout + run.stderr
    assert '"connected":true' not in shown, shown
    assert "-32022" in shown and "2026-07-28" in shown, shown
    assert "versionNegotiation {mode: 'auto'}" in shown and "--protocol-era auto" in shown, shown


# --- the Inspector CLI ----------------------------------------------------------------------------


def _documented_inspector_command() -> list[str]:
    """The Inspector command line of "Connect a client" (docs/connecting-clients.md), as a user would
    paste it."""
    section = CONNECTING.read_text().split("## Connect a client", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("npx @modelcontextprotocol/")]
    assert len(lines) == 1, lines
    return shlex.split(lines[0])


def _inspector(clients: NodeClients, served: Served, argv: list[str], tmp_path: Path) -> dict[str, Any]:
    """Runs the Inspector CLI: `npx @modelcontextprotocol/inspector` is the pinned launcher, the
    documented URL is this server's, and the callback listens on a free port (its path stays the
    Inspector's own `/oauth/callback`)."""
    assert argv[:2] == ["npx", "@modelcontextprotocol/inspector"]
    args = [served.mcp_url if arg == "http://127.0.0.1:8000/mcp" else arg for arg in argv[2:]]
    callback = f"http://127.0.0.1:{free_port()}/oauth/callback"
    env = {
        **os.environ,
        "HOME": str(tmp_path),  # no stored credentials: every run logs in
        "MCP_INSPECTOR_SECRET_STORE": "memory",
        "MCP_AUTO_OPEN_ENABLED": "true",  # open the authorization URL although no TTY
        "BROWSER": str(clients.project / "login.mjs"),
        "AML_MCP_DEMO_USER": "carol",
        "NO_COLOR": "1",
    }
    run = subprocess.run(
        [*clients.inspector(), *args, "--callback-url", callback, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Authorization complete." in run.stderr, run.stderr
    answer = json.loads(run.stdout)
    assert "result" in answer, answer
    return dict(answer["result"])


def _without(argv: list[str], flag: str) -> list[str]:
    at = argv.index(flag)
    return argv[:at] + argv[at + 2 :]


def _replace(argv: list[str], flag: str, value: str) -> list[str]:
    at = argv.index(flag)
    return [*argv[: at + 1], value, *argv[at + 2 :]]


def test_inspector_documented_command_lists_tools_as_the_preregistered_client(
    clients: NodeClients, served: Served, tmp_path: Path
) -> None:
    argv = _documented_inspector_command()
    assert argv[argv.index("--protocol-era") + 1] == "auto"
    assert argv[argv.index("--client-id") + 1] == "aml-mcp-cli"
    result = _inspector(clients, served, argv, tmp_path)
    assert sorted(tool["name"] for tool in result["tools"]) == [
        "draft_sar_batch",
        "run_full_eval",
        "search_aml_notes",
    ]


def test_inspector_registers_dynamically_and_searches(
    clients: NodeClients, served: Served, tmp_path: Path
) -> None:
    argv = _without(_documented_inspector_command(), "--client-id")
    argv = [
        *_replace(argv, "--method", "tools/call"),
        "--tool-name",
        "search_aml_notes",
        "--tool-args-json",
        json.dumps({"query": "cash deposits kept under the reporting threshold", "top_k": 3}),
    ]
    result = _inspector(clients, served, argv, tmp_path)
    assert not result.get("isError") and "MRD-" in result["content"][0]["text"]


def test_inspector_runs_a_task_tool_to_completion(
    clients: NodeClients, served: Served, tmp_path: Path
) -> None:
    argv = [
        *_replace(_documented_inspector_command(), "--method", "tools/call"),
        "--tool-name",
        "run_full_eval",
    ]
    result = _inspector(clients, served, argv, tmp_path)
    assert result["structuredContent"]["cases"] > 0
    assert "Code checks:" in result["content"][0]["text"]
