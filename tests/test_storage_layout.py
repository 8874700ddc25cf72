"""Where state lives, enforced: one layout for every store, the backend chosen in one place, every
advisory-lock key in one registry, and no module past 600 lines.

A store that does not follow the layout fails here, not in a review: its protocol and records in
`<feature>/storage/__init__.py` (importing no backend), its implementations in `sqlite.py` (or
`files.py`) and `postgres.py` beside it, named `Sqlite<Thing>`, `Files<Thing>`, `Postgres<Thing>`
(a backend too large for one module keeps its parts beside it as `<backend>_<part>.py`); and any
module that owns tables (defines a `Migration`) is such a backend module or one of its parts.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from aml_mcp.store.locks import AdvisoryLock, LockClass

SRC = Path(__file__).resolve().parents[1] / "src" / "aml_mcp"
BACKEND_MODULES = {"sqlite.py": "Sqlite", "files.py": "Files", "postgres.py": "Postgres"}
DRIVERS = ("sqlite3", "psycopg", "psycopg_pool")
BACKEND_IMPORTS = ("aml_mcp.store.sqlite", "aml_mcp.store.postgres", "aml_mcp.store.postgres_sync", *DRIVERS)
MAX_LINES = 600

DRIVER_USERS = {
    # Infrastructure, not a store: each owns no table of a feature.
    "store/sqlite.py": "the SQLite handle every SQLite store runs on",
    "store/postgres.py": "the async PostgreSQL handle",
    "store/postgres_sync.py": "the blocking PostgreSQL pool",
    "subscriptions/postgres_bus.py": "the LISTEN connection that carries task changes between processes",
    "cli/cluster.py": "the local cluster drops the schema it created",
    "cli/startup.py": "start-up checks name a database error in one line",
    "cli/serve_run.py": "serve names an unreachable database in one line",
}
"""Modules outside the storage packages that may import a database driver, and why."""

BACKEND_CHOICE = re.compile(r"database_url is (not )?None|is_postgres_url\(")
CHOOSERS = {
    "persistence.py": "the one place the backend is chosen",
    "config.py": "settings validation: an API-only replica needs a shared database",
    "cli/worker.py": "flag validation: a worker needs --database-url",
    "store/postgres.py": "what a PostgreSQL URL is",
}


def _modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(SRC).as_posix()


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, at any depth (including imports inside functions)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.level:
                base = ".".join(["aml_mcp", *_rel(path).split("/")[:-1]][: 1 - node.level or None])
                found.add(f"{base}.{node.module}")
            else:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _storage_packages() -> list[Path]:
    return sorted(path.parent for path in SRC.rglob("storage/__init__.py"))


def test_there_is_a_storage_package_for_every_kind_of_state() -> None:
    packages = {_rel(package) for package in _storage_packages()}
    assert packages == {
        "tasks/storage",
        "aml/notes/storage",
        "aml/evaluation/storage",
        "audit/storage",
        "auth/storage",
        "devauth/storage",
        "shared_secrets/storage",
    }


@pytest.mark.parametrize("package", _storage_packages(), ids=lambda p: _rel(p))
def test_a_storage_package_has_its_protocol_and_both_backends_and_nothing_else(package: Path) -> None:
    names = {path.name for path in package.glob("*.py")}
    assert "postgres.py" in names, f"{_rel(package)} has no PostgreSQL backend"
    assert names & {"sqlite.py", "files.py"}, f"{_rel(package)} has no local backend (sqlite.py or files.py)"
    parts = {name for name in names if name.split("_")[0] + ".py" in names & set(BACKEND_MODULES)}
    assert names <= {"__init__.py", *BACKEND_MODULES, *parts}, f"{_rel(package)} holds more than its layout"
    protocol = _imports(package / "__init__.py")
    own = ".".join(["aml_mcp", *_rel(package).split("/")])
    leaked = {
        name
        for name in protocol
        if name.startswith(BACKEND_IMPORTS)
        or any(name.startswith(f"{own}.{m[:-3]}") for m in BACKEND_MODULES)
    }
    assert not leaked, f"{_rel(package)}/__init__.py imports a backend: {sorted(leaked)}"


@pytest.mark.parametrize("package", _storage_packages(), ids=lambda p: _rel(p))
def test_backend_classes_are_named_after_their_backend(package: Path) -> None:
    for module, prefix in BACKEND_MODULES.items():
        path = package / module
        if not path.exists():
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        public = [
            node.name
            for node in tree.body
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_")
        ]
        wrong = [name for name in public if not name.startswith(prefix)]
        assert not wrong, f"{_rel(path)}: public classes must be named {prefix}<Thing>: {wrong}"


def test_every_module_that_owns_tables_is_a_storage_backend() -> None:
    owners = []
    for path in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defines = any(
            isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Migration"
            for statement in tree.body
            if isinstance(statement, ast.Assign | ast.AnnAssign)
            for node in ast.walk(statement)
        )
        if defines:
            owners.append(_rel(path))
    outside = [
        owner
        for owner in owners
        if owner.split("/")[-2:-1] != ["storage"]
        or owner.split("/")[-1].split("_")[0].removesuffix(".py") + ".py" not in BACKEND_MODULES
    ]
    assert owners, "no module defines a Migration: the check would prove nothing"
    assert not outside, f"modules that own tables outside a storage backend: {outside}"


def test_only_storage_backends_and_named_infrastructure_import_a_database_driver() -> None:
    users = {
        _rel(path)
        for path in _modules()
        if any(
            name == driver or name.startswith(f"{driver}.") for name in _imports(path) for driver in DRIVERS
        )
    }
    backends = {
        user
        for user in users
        if "/storage/" in f"/{user}"
        and user.split("/")[-1].split("_")[0].removesuffix(".py") + ".py" in BACKEND_MODULES
    }
    assert users - backends <= set(DRIVER_USERS), sorted(users - backends - set(DRIVER_USERS))


def test_the_backend_is_chosen_in_one_place() -> None:
    choosing = {_rel(path) for path in _modules() if BACKEND_CHOICE.search(path.read_text(encoding="utf-8"))}
    assert "persistence.py" in choosing
    assert choosing <= set(CHOOSERS), (
        f"modules that branch on the backend: {sorted(choosing - set(CHOOSERS))}"
    )


def test_no_module_is_longer_than_600_lines() -> None:
    long = {
        _rel(path): count
        for path in _modules()
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, long


def test_advisory_lock_keys_are_unique_and_live_only_in_the_registry() -> None:
    singles = [member.value for member in AdvisoryLock]
    classes = [member.value for member in LockClass]
    assert len(set(singles)) == len(singles) and len(set(classes)) == len(classes)
    assert all(-(2**63) <= key < 2**63 for key in singles), "a single key is a signed 64-bit integer"
    assert all(-(2**31) <= key < 2**31 for key in classes), "a two-key lock's first key is a 32-bit integer"
    literal = re.compile(r"pg_(try_)?advisory_\w*lock\w*\(\s*\d|0x616D6C", re.IGNORECASE)
    elsewhere = [
        _rel(path)
        for path in _modules()
        if _rel(path) != "store/locks.py" and literal.search(path.read_text(encoding="utf-8"))
    ]
    assert not elsewhere, f"advisory-lock keys written outside store/locks.py: {elsewhere}"
