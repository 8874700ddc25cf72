"""Assembles the AML tools for the composition root: `build_aml(settings, ...) -> Aml`.

`build_aml` is handed the notes and the baselines by the persistence object (the data directory's,
or the PostgreSQL database every replica shares, so every replica searches the same notes and
compares with the same baselines). It assembles drafter, checks, evaluation and search, and returns
a `Component` (a lifetime that opens or checks the notes store and loads the embedder at start-up
and closes the notes store at shutdown) with the catalog to serve, `notes_problem` for the
readiness probe and `progress_gauges` for the metrics.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field

import anyio.to_thread
from starlette.routing import BaseRoute

from aml_mcp.aml.evaluation.labels import DemoLabels
from aml_mcp.aml.evaluation.run import Evaluator
from aml_mcp.aml.evaluation.storage import Baselines
from aml_mcp.aml.notes.storage import ForeignIdentifiers, NotesBackend
from aml_mcp.aml.reembedding import BackgroundReembedding, Progress
from aml_mcp.aml.sar.batches import CaseWork
from aml_mcp.aml.sar.checks import CheckSuite
from aml_mcp.aml.sar.draft import TYPOLOGY_LABELS, Drafter, TemplateDrafter
from aml_mcp.aml.search.choice import load_embedders
from aml_mcp.aml.search.engine import NoteSearch
from aml_mcp.aml.settings import AmlSettings
from aml_mcp.aml.tools import aml_catalog
from aml_mcp.aml.tools.service import AmlService
from aml_mcp.catalog import Catalog
from aml_mcp.scope_rules import ScopeRule


@dataclass(frozen=True, slots=True)
class Aml:
    catalog: Catalog
    service: AmlService
    store: NotesBackend
    open_store: Callable[[], object] | None = None
    """Connects the notes store (blocking, so off the event loop) as the app starts."""
    routes: Sequence[BaseRoute] = ()
    scope_rules: Mapping[str, ScopeRule] = field(default_factory=dict)
    reembed_in_background: bool = True
    _reembedding: list[BackgroundReembedding] = field(default_factory=list, init=False)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The notes store checked and the embedders loaded before the first request; tenants
        whose vectors an older embedder made moved to the current one in the background; the
        store closed at the end.

        A damaged store does not stop the server (tasks, auth and the audit trail still work):
        readiness reports it and searches refuse with a clear error until it is restored.
        """
        try:
            if self.open_store is not None:
                await anyio.to_thread.run_sync(self.open_store)
            await anyio.to_thread.run_sync(self.store.verify)
            await self.service.start()
            async with anyio.create_task_group() as background:
                if self.reembed_in_background and self.store.damage is None:
                    mover = BackgroundReembedding(self.store, self.service.embedders())
                    self._reembedding.append(mover)
                    background.start_soon(mover.run)
                try:
                    yield
                finally:
                    for mover in self._reembedding:
                        mover.stop()
        finally:
            self.service.close()
            self.store.close()

    def search_progress(self) -> Progress | None:
        """While tenants are being moved to the transformer: how far, in numbers, else None."""
        for mover in self._reembedding:
            progress = mover.progress()
            if progress is not None:
                return progress
        return None

    def progress_gauges(self) -> list[tuple[str, str, Callable[[], float]]]:
        """(name, help, read) of the background move's gauges, for the metrics listener. None has a
        bank label: which bank is moving is in the log, never on an endpoint."""

        def read(figure: Callable[[Progress], int]) -> Callable[[], float]:
            def value() -> float:
                progress = self.search_progress()
                return 0.0 if progress is None else float(figure(progress))

            return value

        return [
            (
                "aml_mcp_reembedding_banks_left",
                "Banks still to move to the configured embedder in the background (0: full dense quality)",
                read(lambda p: p.banks_left),
            ),
            (
                "aml_mcp_reembedding_notes_done",
                "Notes of the bank being moved already embedded",
                read(lambda p: p.notes_done),
            ),
            (
                "aml_mcp_reembedding_notes_total",
                "Notes of the bank being moved",
                read(lambda p: p.notes_total),
            ),
        ]

    async def notes_problem(self) -> str | None:
        """Why the notes store cannot serve (one line, no paths), or None: for the readiness log."""
        return await anyio.to_thread.run_sync(self.store.probe)


def load_drafter(path: str | None) -> Drafter:
    """The configured drafter: `module:factory` called with no arguments, or the template drafter."""
    if path is None:
        return TemplateDrafter()
    module_name, _, attribute = path.partition(":")
    factory = getattr(importlib.import_module(module_name), attribute, None)
    if not callable(factory):
        raise ValueError(f"aml.drafter: {path} is not a callable")
    drafter: Drafter = factory()
    if not callable(getattr(drafter, "draft", None)):
        raise ValueError(f"aml.drafter: {path} did not return a Drafter")
    return drafter


def build_aml(
    settings: AmlSettings,
    *,
    notes: NotesBackend,
    identifiers: ForeignIdentifiers,
    baselines: Baselines,
    start_notes: Callable[[], object] | None = None,
) -> Aml:
    """The AML tools on `notes` and `baselines` (from the persistence object: the data directory's,
    or the database every replica shares). `start_notes` connects the notes as the app starts."""
    store, directory = notes, identifiers
    casework = CaseWork(
        store,
        load_drafter(settings.drafter),
        CheckSuite(frozenset(TYPOLOGY_LABELS) | frozenset(settings.extra_typology_codes)),
        directory,
    )
    labels = DemoLabels(seed=settings.demo_seed)

    def evaluator(searcher: Callable[[], NoteSearch]) -> Evaluator:
        return Evaluator(
            store=store,
            casework=casework,
            searcher=searcher,
            labels=labels,
            baselines=baselines,
            slice_s=settings.eval_slice_ms / 1000,
        )

    service = AmlService(
        store=store,
        load_embedder=lambda: load_embedders(settings.embedder),
        casework=casework,
        evaluator=evaluator,
        searches_per_tenant=settings.search_concurrency_per_tenant,
    )
    return Aml(
        catalog=aml_catalog(service, settings),
        service=service,
        store=store,
        open_store=start_notes,
        reembed_in_background=settings.reembed_in_background,
    )
