"""Every evaluation-baseline behaviour, on SQLite and on PostgreSQL alike: a tenant's history,
the newest first, saving identical figures twice adds nothing, tenants never see each other's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from aml_mcp.aml.evaluation.storage import Baselines
from aml_mcp.aml.evaluation.storage.postgres import MIGRATION, PostgresBaselines
from aml_mcp.aml.evaluation.storage.sqlite import COMPONENT, MIGRATIONS, SqliteBaselines
from aml_mcp.principal import Principal
from aml_mcp.store.sqlite import SqliteDatabase
from tests.support.postgres import scratch_database

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", "postgres"])
async def baselines(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Baselines]:
    if request.param == "sqlite":
        db = SqliteDatabase(tmp_path / "aml-mcp.db")
        db.open()
        await db.migrate(COMPONENT, MIGRATIONS)
        try:
            yield SqliteBaselines(db)
        finally:
            db.close()
        return
    async with scratch_database() as pg:
        await pg.apply(MIGRATION)
        yield PostgresBaselines(pg)


def analyst(tenant: str, subject: str = "alice") -> Principal:
    return Principal(issuer="https://issuer.example", subject=subject, tenant=tenant, client_id="client")


async def test_no_baseline_before_the_first_save(baselines: Baselines) -> None:
    assert await baselines.latest("bank-a") is None


async def test_the_newest_save_is_the_baseline(baselines: Baselines) -> None:
    first = await baselines.save(analyst("bank-a"), "d1", {"ndcg": 0.5})
    second = await baselines.save(analyst("bank-a", "bob"), "d2", {"ndcg": 0.7, "nested": {"a": [1, 2]}})
    latest = await baselines.latest("bank-a")
    assert latest == second
    assert (latest.saved_by, latest.figures) == ("bob", {"ndcg": 0.7, "nested": {"a": [1, 2]}})
    assert first.baseline_id != second.baseline_id
    assert second.saved_at_ms >= first.saved_at_ms > 0


async def test_saving_the_same_digest_again_returns_the_existing_baseline(baselines: Baselines) -> None:
    first = await baselines.save(analyst("bank-a"), "d1", {"ndcg": 0.5})
    again = await baselines.save(analyst("bank-a", "bob"), "d1", {"ndcg": 0.5})
    assert again == first
    await baselines.save(analyst("bank-a"), "d2", {"ndcg": 0.6})
    third = await baselines.save(analyst("bank-a"), "d1", {"ndcg": 0.5})  # an older digest counts anew
    assert third.baseline_id != first.baseline_id


async def test_tenants_keep_their_own_history(baselines: Baselines) -> None:
    await baselines.save(analyst("bank-a"), "d1", {"ndcg": 0.5})
    assert await baselines.latest("bank-b") is None
    mine = await baselines.save(analyst("bank-b"), "d1", {"ndcg": 0.5})
    assert (await baselines.latest("bank-b")) == mine
    assert (await baselines.latest("bank-a")) != mine


async def test_concurrent_saves_of_one_result_add_one_row(baselines: Baselines) -> None:
    saved: list[str] = []

    async def save() -> None:
        saved.append((await baselines.save(analyst("bank-a"), "same", {"x": 1})).baseline_id)

    async with anyio.create_task_group() as group:
        for _ in range(5):
            group.start_soon(save)
    assert len(set(saved)) == 1


async def test_a_hostile_saver_is_recorded_and_read_back(baselines: Baselines) -> None:
    # PostgreSQL TEXT refuses U+0000, so who saved it is stored as bytes there.
    odd = Principal(issuer="iss\x00", subject="eve\x00", tenant="bank-a", client_id="c\x00")
    saved = await baselines.save(odd, "d1", {"ok": "\x00"})
    assert saved.saved_by == "eve\x00"
    assert await baselines.latest("bank-a") == saved
    assert await baselines.latest("bank\x00") is None
