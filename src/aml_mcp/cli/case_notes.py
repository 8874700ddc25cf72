"""`aml-mcp ingest` and `aml-mcp reembed`: a bank's case notes into the notes store."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aml_mcp.cli.options import data_options, settings_from

if TYPE_CHECKING:
    from aml_mcp.aml.notes.storage import NotesBackend
    from aml_mcp.config import Settings


@contextlib.contextmanager
def open_notes(settings: Settings) -> Iterator[NotesBackend]:
    """The notes store the server with these settings serves (the persistence object's: the shared
    PostgreSQL one when `database_url` is set, tables created if missing, else the data directory's)."""
    from aml_mcp.persistence import open_persistence

    storage = open_persistence(settings).notes()
    try:
        storage.start()
        yield storage.notes
    finally:
        storage.notes.close()


def _ingest(args: argparse.Namespace) -> int:
    from aml_mcp.aml.ingest import run_ingest

    settings = settings_from(args)
    with open_notes(settings) as store:
        return run_ingest(
            args.file, args.tenant, settings.ensure_data_dir(), embedder=settings.aml.embedder, store=store
        )


def _reembed(args: argparse.Namespace) -> int:
    """Move stored vectors to the configured dense half (`aml.embedder`), e.g. the static table's
    to the transformer after an upgrade; a tenant keeps serving from its old vectors meanwhile."""
    from aml_mcp.aml.ingest import reembed_tenant
    from aml_mcp.aml.search.choice import load_embedders

    settings = settings_from(args)
    embedder = load_embedders(settings.aml.embedder).primary
    with open_notes(settings) as store:
        for tenant in args.tenant or store.tenants():
            count = reembed_tenant(store, tenant, embedder)
            print(f"{tenant}: {count} note(s) re-embedded" if count else f"{tenant}: already current")
    return 0


def add_commands(commands: Any) -> None:
    ingest = commands.add_parser(
        "ingest",
        parents=[data_options()],
        help="load case notes (JSONL) for one tenant: all rows or none, bad rows listed",
    )
    ingest.add_argument("file", type=Path, help="JSON Lines, one note per line")
    ingest.add_argument("--tenant", required=True, help="the bank the notes belong to")
    ingest.set_defaults(run=_ingest)

    reembed = commands.add_parser(
        "reembed",
        parents=[data_options()],
        help="move stored note vectors to the configured dense half (aml.embedder), e.g. after an upgrade",
    )
    reembed.add_argument("--tenant", action="append", help="only this bank (repeatable; default: all)")
    reembed.set_defaults(run=_reembed)
