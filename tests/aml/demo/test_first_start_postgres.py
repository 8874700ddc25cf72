"""Three replicas starting at once against one empty shared notes store load the demo corpus once:
the first holds the advisory lock while it loads, the others wait, find the banks and load nothing."""

from __future__ import annotations

import threading
from pathlib import Path

from aml_mcp.aml.demo.corpus import TENANTS
from aml_mcp.aml.demo.first_start import load_demo_if_empty
from aml_mcp.aml.notes.storage.postgres import PostgresNotes
from aml_mcp.aml.settings import AmlSettings
from aml_mcp.store.postgres import PostgresDatabase
from tests.support.postgres import scratch_schema

SMALL = AmlSettings(embedder="static", demo_notes_per_tenant=40)


def test_three_starts_at_once_load_the_demo_once(tmp_path: Path) -> None:
    with scratch_schema() as (url, schema):
        results: list[dict[str, int]] = []
        failures: list[BaseException] = []
        barrier = threading.Barrier(3, timeout=60)

        def start(number: int) -> None:
            try:
                with PostgresNotes(PostgresDatabase(url, schema=schema)) as store:
                    barrier.wait()
                    results.append(load_demo_if_empty(SMALL, tmp_path / str(number), store=store))
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=start, args=(n,)) for n in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert failures == []
        assert sorted(results, key=len) == [{}, {}, {t.name: 40 for t in TENANTS}]
        with PostgresNotes(PostgresDatabase(url, schema=schema)) as store:
            assert {t: store.tenant(t).count() for t in store.tenants()} == {t.name: 40 for t in TENANTS}
