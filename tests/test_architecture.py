"""The folders tell the truth: the import layers hold, no folder is a wall of modules, and a file
name means one thing wherever it appears.

The layers are the import-linter contracts in pyproject.toml (also run by CI on its own); these
tests run them too, and prove they would catch a new back-import, so the contract is not a
formality that passes whatever the code does.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "aml_mcp"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

CONVENTIONS = {
    "__init__.py",
    "wiring.py",
    "settings.py",
    "store.py",
    "sqlite_store.py",
    "postgres_store.py",
    "service.py",
    "events.py",
    "errors.py",
    "routes.py",
}
"""File names that repeat on purpose, each meaning the same kind of thing in every package: a
feature's assembly, its settings group, its store protocol and that protocol's SQLite and PostgreSQL
implementations, its application service, its event types, its error types, its HTTP routes
besides `/mcp`."""


def _lint(src: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=ROOT,
        env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_the_layer_contracts_hold() -> None:
    result = _lint(ROOT / "src")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "back_import"),
    [
        ("store/sqlite.py", "aml_mcp.tasks.model"),  # storage reaching up into a feature
        ("auth/gate.py", "aml_mcp.config"),  # the resource server reading the settings composition
        ("auth/wiring.py", "aml_mcp.devauth.wiring"),  # the resource server knowing the dev issuer
        ("aml/search/engine.py", "aml_mcp.protocol.server"),  # the domain knowing the protocol
        ("aml/notes.py", "aml_mcp.aml.tools.catalog"),  # the note model reaching for the tool layer
    ],
)
def test_a_new_back_import_breaks_the_contract(tmp_path: Path, module: str, back_import: str) -> None:
    copy = tmp_path / "src" / "aml_mcp"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.npz"))
    target = copy / module
    target.write_text(target.read_text() + f"\nimport {back_import}  # a back-import\n")
    result = _lint(tmp_path / "src")
    assert result.returncode != 0, result.stdout
    assert "BROKEN" in result.stdout and back_import in result.stdout


def test_no_folder_holds_more_than_twenty_modules() -> None:
    for folder in [PACKAGE, *(p for p in PACKAGE.rglob("*") if p.is_dir() and p.name != "__pycache__")]:
        modules = list(folder.glob("*.py"))
        assert len(modules) <= 20, f"{folder.relative_to(ROOT)} holds {len(modules)} modules"


def test_a_repeated_file_name_is_a_convention_never_a_coincidence() -> None:
    names = Counter(path.name for path in PACKAGE.rglob("*.py"))
    repeated = {name for name, count in names.items() if count > 1}
    assert repeated <= CONVENTIONS, sorted(repeated - CONVENTIONS)
