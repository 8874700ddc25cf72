"""docs/architecture.md says what the code is, and cannot drift from it unnoticed.

Its layer lines are generated from the import contracts (`scripts/generate_architecture_docs.py`)
and must equal what the script renders today; its folder map has a row for every top-level package
and module, its table of stored state a row for every `storage/` package; and every source path the
architecture and extending pages name exists. A page that was true when written and false after the
next move is worse than none: a newcomer trusts it. The README stays short enough to read (at most
150 lines): the rest belongs in the pages it links to.
"""

from __future__ import annotations

import copy
import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "aml_mcp"
PAGE = ROOT / "docs" / "architecture.md"
REGENERATE = "python scripts/generate_architecture_docs.py"
README_MAX_LINES = 150


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "generate_architecture_docs", ROOT / "scripts" / "generate_architecture_docs.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATOR = _generator()


def _section(text: str, heading: str) -> str:
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def _first_column(table: str) -> str:
    return "\n".join(line.split(" | ", 1)[0] for line in table.splitlines() if line.startswith("| "))


# -- the layers are the contracts' ------------------------------------------------------------------


def test_the_layer_lines_are_what_the_contracts_generate() -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert GENERATOR.render(page, GENERATOR.contracts()) == page, (
        "docs/architecture.md's layers differ from pyproject.toml's import contracts: regenerate them "
        f"with `{REGENERATE}` (the project's .venv/bin/python) and commit the page"
    )


def test_the_generator_check_passes_on_the_committed_page() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "generate_architecture_docs.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_a_changed_contract_makes_the_page_stale() -> None:
    page = PAGE.read_text(encoding="utf-8")
    contracts = copy.deepcopy(GENERATOR.contracts())
    layers = next(c for c in contracts if c["type"] == "layers" and not c.get("containers"))
    layers["layers"].insert(1, "aml_mcp.ledger")
    stale = GENERATOR.render(page, contracts)
    assert stale != page
    assert "cli > ledger > app" in stale


def test_the_layer_lines_wrap_at_a_layer_and_keep_siblings_together() -> None:
    line = GENERATOR._layer_line([f"pkg.{'m' * 20}{i} | pkg.s{i}" for i in range(6)], "pkg")
    rows = line.splitlines()
    assert len(rows) > 1 and all(len(row) <= GENERATOR.WIDTH for row in rows)
    assert all(row.startswith("    > ") for row in rows[1:])
    assert all(f"{'m' * 20}{i} | s{i}" in line for i in range(6))


def test_the_generator_refuses_a_page_without_its_markers() -> None:
    with pytest.raises(ValueError, match="one generated block"):
        GENERATOR.render("# Architecture\n", GENERATOR.contracts())


# -- the page describes the code there is -----------------------------------------------------------


def test_the_page_opens_with_both_shapes_not_one_sqlite_process() -> None:
    opening = PAGE.read_text(encoding="utf-8").split("\n## ", 1)[0]
    assert "one SQLite database" not in opening and "One Python process" not in opening
    assert "SQLite" in opening and "PostgreSQL" in opening and "replicas" in opening


def test_the_folder_map_has_a_row_for_every_top_level_package_and_module() -> None:
    rows = _first_column(_section(PAGE.read_text(encoding="utf-8"), "Folder map"))
    entries = [
        f"`{path.name}/`" if path.is_dir() else f"`{path.name}`"
        for path in sorted(PACKAGE.iterdir())
        if path.suffix == ".py" or (path / "__init__.py").is_file()
    ]
    assert [entry for entry in entries if entry not in rows] == []


def test_every_storage_package_is_in_the_table_of_stored_state() -> None:
    packages = sorted(
        f"`{path.parent.relative_to(PACKAGE).as_posix()}/`" for path in PACKAGE.rglob("storage/__init__.py")
    )
    assert packages, "no storage package found"
    table = _section(PAGE.read_text(encoding="utf-8"), "Where state lives")
    assert [package for package in packages if package not in table] == []


PATH = re.compile(r"`((?:[a-z_][a-z0-9_.-]*/)*[a-z_][a-z0-9_.-]*(?:\.py|/))`")
"""A source path in backticks: `store/locks.py`, `tasks/storage/`, `tests/contract/`."""


@pytest.mark.parametrize("page", ["docs/architecture.md", "docs/extending.md"])
def test_every_path_the_page_names_exists(page: str) -> None:
    tree = {
        path.relative_to(ROOT).as_posix() + ("/" if path.is_dir() else "")
        for folder in ("src", "tests", "scripts", "benchmarks", "deploy", "docs")
        for path in (ROOT / folder).rglob("*")
        if "node_modules" not in path.parts and "__pycache__" not in path.parts
    } | {"src/", "tests/", "benchmarks/", "scripts/", "deploy/", "docs/"}
    text = re.sub(r"```.*?```", "", (ROOT / page).read_text(encoding="utf-8"), flags=re.S)
    missing = sorted(
        {name for name in PATH.findall(text) if not any(p == name or p.endswith("/" + name) for p in tree)}
    )
    assert missing == [], f"{page} names paths that do not exist: {missing}"


def test_the_readme_stays_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move detail into a page under docs/"
    )
