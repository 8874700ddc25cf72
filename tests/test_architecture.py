"""The folders tell the truth: the import layers hold, no folder is a wall of modules, and a file
name means one thing wherever it appears.

The layers are the import-linter contracts in pyproject.toml (also run by CI on its own); these
tests run them too, and prove they would catch a new back-import, so the contract is not a
formality that passes whatever the code does. They also check that the contracts name every
package and module: import-linter says nothing about a module no contract mentions, so a new
package left out of the lists would be silently unconstrained.
"""

from __future__ import annotations

import ast
import copy
import re
import shutil
import subprocess
import sys
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "aml_mcp"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

CONVENTIONS = {
    "__init__.py",
    "wiring.py",
    "settings.py",
    "sqlite.py",
    "files.py",
    "postgres.py",
    "service.py",
    "events.py",
    "errors.py",
    "routes.py",
    "model.py",
}
"""File names that repeat on purpose, each meaning the same kind of thing in every package: a
feature's assembly, its settings group, its store protocol and that protocol's SQLite and PostgreSQL
implementations (in a `storage/` package: `sqlite.py` or `files.py`, and `postgres.py`; the shared
database helpers in `store/` too), its application service, its event types, its error types, its
HTTP routes besides `/mcp`, its data model."""


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
        ("aml/notes/model.py", "aml_mcp.aml.tools.catalog"),  # the note model reaching for the tool layer
        ("aml/notes/storage/__init__.py", "aml_mcp.aml.notes.storage.sqlite"),  # a protocol on a backend
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


# -- every module is placed by the contracts ----------------------------------------------------------

ENTRY_POINTS = {
    "aml_mcp.__main__": {"aml_mcp.cli"},
    "aml_mcp._version": set(),
}
"""Top-level modules no contract names, and all they may import of aml_mcp: `python -m aml_mcp`
(which only calls the command line) and the version string (which imports nothing). Anything more
in them would be code the contracts do not see, so the test checks their imports too."""

CLIENT_HOSTS = {"aml_mcp.cli"}
"""The server layers that may import the client: the command line, whose `call` and `task` commands
are the client's own. Every other server layer is forbidden to."""


def _contracts(pyproject: Path = ROOT / "pyproject.toml") -> list[dict[str, Any]]:
    contracts: list[dict[str, Any]] = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"][
        "importlinter"
    ]["contracts"]
    return contracts


def _layer_members(layers: list[str]) -> list[str]:
    """The modules a `layers` list names: siblings are joined by `|` (independent) or `:` (not), and
    an optional layer is in parentheses."""
    return [name.strip(" ()") for layer in layers for name in re.split(r"[|:]", layer) if name.strip(" ()")]


def _children(package: Path, dotted: str) -> set[str]:
    """The modules and packages directly inside `package`, by dotted name."""
    return {
        f"{dotted}.{path.stem}"
        for path in package.iterdir()
        if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").is_file()
    }


def _named_by(expression: str, module: str) -> bool:
    """Whether an import-linter module expression names `module` (`*` is one level, `**` any)."""
    pattern = re.escape(expression).replace(r"\*\*", r"[^.]+(\.[^.]+)*").replace(r"\*", r"[^.]+")
    return re.fullmatch(pattern, module) is not None


def _covered(expressions: list[str], modules: set[str]) -> set[str]:
    return {module for module in modules if any(_named_by(e, module) for e in expressions)}


def _forbidding(
    forbidden: list[dict[str, Any]], side: str, module: str, other_side: str, among: set[str]
) -> set[str]:
    """The modules of `among` on the `other_side` of a `forbidden` contract naming `module` on `side`."""
    found: set[str] = set()
    for contract in forbidden:
        if _covered(contract[side], {module}):
            found |= _covered(contract[other_side], among)
    return found


def unplaced_modules(package: Path, contracts: list[dict[str, Any]]) -> list[str]:
    """What the import contracts leave unconstrained under `package` (empty: nothing), one line each.

    Every top-level package and module is either a server layer (a member of the root `layers`
    contract, and so forbidden to the client and forbidden to import it) or client-side (a source of
    a `forbidden` contract that keeps it off the server); every module directly inside a container
    of a `layers` contract is one of its layers. A module left out of a contract is one no contract
    checks, which import-linter never reports on its own.
    """
    root = package.name
    layered = [c for c in contracts if c["type"] == "layers"]
    forbidden = [c for c in contracts if c["type"] == "forbidden"]
    top = _children(package, root) - set(ENTRY_POINTS)
    server_contracts = [c for c in layered if not c.get("containers")]
    assert len(server_contracts) == 1, "expected one layers contract over the whole package"
    server = _covered(_layer_members(server_contracts[0]["layers"]), top)
    client_side = {
        module
        for c in forbidden
        if not _covered(c["source_modules"], server)
        for module in _covered(c["source_modules"], top)
    }
    problems = [
        f"{m}: in no import contract (a server layer, or client-side)"
        for m in sorted(top - server - client_side)
    ]
    problems += [f"{m}: both a server layer and client-side" for m in sorted(server & client_side)]
    for client in sorted(client_side):
        keeps_off = _forbidding(forbidden, "source_modules", client, "forbidden_modules", server)
        kept_from = _forbidding(forbidden, "forbidden_modules", client, "source_modules", server)
        problems += [f"{m}: not forbidden to the client-side {client}" for m in sorted(server - keeps_off)]
        problems += [
            f"{m}: not forbidden to import the client-side {client}"
            for m in sorted(server - CLIENT_HOSTS - kept_from)
        ]
    for contract in (c for c in layered if c.get("containers")):
        members = _layer_members(contract["layers"])
        for container in contract["containers"]:
            folder = package.joinpath(*container.split(".")[1:])
            inside = _children(folder, container)
            named = _covered([f"{container}.{m}" for m in members], inside)
            problems += [f"{m}: in no layer of the {container} contract" for m in sorted(inside - named)]
    return problems


def test_every_module_is_placed_by_an_import_contract() -> None:
    assert unplaced_modules(PACKAGE, _contracts()) == []


def test_the_entry_points_no_contract_names_import_only_what_they_are_allowed() -> None:
    for module, allowed in ENTRY_POINTS.items():
        path = PACKAGE / f"{module.split('.', 1)[1]}.py"
        assert path.is_file(), f"{module} is gone: drop it from ENTRY_POINTS"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {
            node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
        }
        imported |= {
            alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
        }
        assert {name for name in imported if name.split(".")[0] == "aml_mcp"} <= allowed, module


def test_a_package_or_module_left_out_of_the_contracts_is_reported(tmp_path: Path) -> None:
    copy = tmp_path / "aml_mcp"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.npz", "static", "*.onnx"))
    (copy / "ledger").mkdir()
    (copy / "ledger" / "__init__.py").write_text('"""A made-up feature no contract names."""\n')
    (copy / "audit_export.py").write_text('"""A made-up top-level module."""\n')
    (copy / "aml" / "made_up.py").write_text('"""A made-up AML module outside the AML layers."""\n')
    assert unplaced_modules(copy, _contracts()) == [
        "aml_mcp.audit_export: in no import contract (a server layer, or client-side)",
        "aml_mcp.ledger: in no import contract (a server layer, or client-side)",
        "aml_mcp.aml.made_up: in no layer of the aml_mcp.aml contract",
    ]


def test_a_server_package_missing_from_the_client_contracts_is_reported() -> None:
    contracts = copy.deepcopy(_contracts())
    for contract in contracts:
        for key in ("forbidden_modules", "source_modules"):
            if "aml_mcp.principal" in contract.get(key, []):
                contract[key] = [m for m in contract[key] if m != "aml_mcp.principal"]
    problems = unplaced_modules(PACKAGE, contracts)
    assert "aml_mcp.principal: not forbidden to the client-side aml_mcp.client" in problems
    assert "aml_mcp.principal: not forbidden to import the client-side aml_mcp.client" in problems


@pytest.mark.parametrize(
    ("expression", "module", "named"),
    [
        ("aml_mcp.store", "aml_mcp.store", True),
        ("aml_mcp.store", "aml_mcp.store_extra", False),
        ("aml_mcp.*", "aml_mcp.store", True),
        ("aml_mcp.*", "aml_mcp.store.sqlite", False),
        ("aml_mcp.**", "aml_mcp.store.sqlite", True),
    ],
)
def test_module_expressions_are_read_as_import_linter_reads_them(
    expression: str, module: str, named: bool
) -> None:
    assert _named_by(expression, module) is named
