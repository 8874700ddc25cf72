"""The demo corpus on a first start: `aml-mcp serve` fills an empty notes store, so there is
something to search before any bank has loaded its own notes."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from aml_mcp.aml.demo.corpus import BankProgress, load_demo
from aml_mcp.aml.notes.storage import NotesBackend
from aml_mcp.aml.notes.storage.sqlite import SqliteNotes
from aml_mcp.aml.search.embeddings import StaticEmbedder


class DemoSize(Protocol):
    """What a first start needs to know of the `aml` settings (which hold the demo's defaults)."""

    @property
    def demo_notes_per_tenant(self) -> int: ...

    @property
    def demo_seed(self) -> int: ...


def load_demo_if_empty(
    settings: DemoSize,
    data_dir: Path,
    announce: Callable[[str], None] | None = None,
    progress: BankProgress | None = None,
    *,
    store: NotesBackend | None = None,
) -> dict[str, int]:
    """Load the demo banks when the notes store holds no tenant at all; notes written per bank.

    The store is `store` when given (the shared PostgreSQL notes; the caller closes it), else the
    SQLite store in `data_dir`. Never touches a store that holds anything (a bank's own data, or
    an earlier demo load). The check and the load run under `first_load()`: replicas starting at
    once against one shared store wait for each other, and only the first loads.
    `announce` hears, before the work starts, that it is about to take a while; `progress` hears
    each bank as it is written, so a slow first start is never silent.
    """
    size = settings.demo_notes_per_tenant
    if size == 0:
        return {}
    with contextlib.ExitStack() as stack:
        notes = store if store is not None else stack.enter_context(SqliteNotes.open(data_dir))
        with notes.first_load():
            if notes.tenants():
                return {}
            if announce is not None:
                announce(f"the notes store is empty: loading the demo corpus ({size} notes per bank)")
            return load_demo(notes, StaticEmbedder.load(), size, settings.demo_seed, progress=progress)
