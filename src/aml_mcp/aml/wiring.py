"""Everything the composition root needs for the AML tools, built in one call.

`build_aml` opens the notes store in the data directory, assembles drafter, checks, evaluation
and search, and returns the catalog to serve, the baseline table's migration, and the lifetime to
enter (loads the embedder at start-up, closes the notes store at shutdown). `load_demo_if_empty`
is what `aml-mcp serve` runs before starting, so a first start has data to search.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from aml_mcp.aml.demo.corpus import load_demo
from aml_mcp.aml.evaluation.baselines import COMPONENT, MIGRATIONS, BaselineStore
from aml_mcp.aml.evaluation.labels import DemoLabels
from aml_mcp.aml.evaluation.run import Evaluator
from aml_mcp.aml.note_store import NoteStore
from aml_mcp.aml.sar.batches import CaseWork
from aml_mcp.aml.sar.checks import CheckSuite
from aml_mcp.aml.sar.draft import TYPOLOGY_LABELS, Drafter, TemplateDrafter
from aml_mcp.aml.sar.foreign_ids import IdentifierDirectory
from aml_mcp.aml.search.embeddings import StaticEmbedder
from aml_mcp.aml.search.engine import NoteSearch
from aml_mcp.aml.settings import AmlSettings
from aml_mcp.aml.tools.catalog import aml_catalog
from aml_mcp.aml.tools.service import AmlServices
from aml_mcp.catalog import Catalog
from aml_mcp.store.sqlite import SqliteDatabase


@dataclass(frozen=True, slots=True)
class Aml:
    catalog: Catalog
    migration: tuple[str, list[str]]
    services: AmlServices
    store: NoteStore

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The embedder loaded before the first request; the notes store closed at the end."""
        try:
            await self.services.start()
            yield
        finally:
            self.store.close()


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


def build_aml(settings: AmlSettings, *, data_dir: Path, database: SqliteDatabase) -> Aml:
    store = NoteStore.open(data_dir)
    casework = CaseWork(
        store,
        load_drafter(settings.drafter),
        CheckSuite(frozenset(TYPOLOGY_LABELS) | frozenset(settings.extra_typology_codes)),
        IdentifierDirectory(store.path),
    )
    baselines = BaselineStore(database)
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

    services = AmlServices(
        store=store, load_embedder=StaticEmbedder.load, casework=casework, evaluator=evaluator
    )
    return Aml(
        catalog=aml_catalog(services, settings),
        migration=(COMPONENT, MIGRATIONS),
        services=services,
        store=store,
    )


def load_demo_if_empty(
    settings: AmlSettings, data_dir: Path, announce: Callable[[str], None] | None = None
) -> dict[str, int]:
    """Load the demo banks when the notes store holds no tenant at all; notes written per bank.

    Never touches a store that holds anything (a bank's own data, or an earlier demo load).
    `announce` hears, before the work starts, that it is about to take a while.
    """
    size = settings.demo_notes_per_tenant
    if size == 0:
        return {}
    with NoteStore.open(data_dir) as store:
        if store.tenants():
            return {}
        if announce is not None:
            announce(f"the notes store is empty: loading the demo corpus ({size} notes per bank)")
        return load_demo(store, StaticEmbedder.load(), size, settings.demo_seed)
