"""Cross-principal isolation at the service: 27 owners (3 subjects x 3 tenants x 3 clients) plus
owners whose fields would collide if ever joined with a separator.

Every foreign get, update and cancel must look exactly like an unknown id and change nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from aml_mcp.tasks.model import TaskStatus
from aml_mcp.tasks.service import CancelVerdict, UpdateVerdict
from tests.tasks.factories import principal_matrix, state
from tests.tasks.harness import harness

pytestmark = pytest.mark.anyio


async def test_every_foreign_get_update_and_cancel_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    owners = principal_matrix()
    assert len(set(owners)) == len(owners) == 31
    async with harness(tmp_path / "db") as h:
        tasks = [await h.start("asks", who) for who in owners]
        for task in tasks:
            await h.wait_for(task, lambda t: t.status is TaskStatus.INPUT_REQUIRED)
        before = {task.task_id: state(await h.service.get(task.task_id, task.owner)) for task in tasks}

        for task in tasks:
            for caller in owners:
                if caller == task.owner:
                    continue
                assert await h.service.get(task.task_id, caller) is None
                assert await h.service.scope_of(task.task_id, caller) is None
                update = await h.service.update(
                    task.task_id, caller, {"a": {"action": "accept", "content": {"name": "x"}}}
                )
                assert update.verdict is UpdateVerdict.NOT_FOUND
                assert await h.service.cancel(task.task_id, caller) is CancelVerdict.NOT_FOUND

        for task in tasks:
            assert state(await h.service.get(task.task_id, task.owner)) == before[task.task_id]
        # The owners themselves still can.
        for task in tasks:
            assert await h.service.cancel(task.task_id, task.owner) is CancelVerdict.REQUESTED
        for task in tasks:
            assert (await h.settled(task)).status is TaskStatus.CANCELLED


async def test_unknown_ids_answer_exactly_like_foreign_ones(tmp_path: Path) -> None:
    owners = principal_matrix()
    async with harness(tmp_path / "db") as h:
        task = await h.start("asks", owners[0])
        for task_id in ("", "x" * 10_000, "../../etc", task.task_id[:-1], task.task_id + "A", "' OR 1=1 --"):
            assert await h.service.get(task_id, owners[0]) is None
            assert (await h.service.update(task_id, owners[0], {})).verdict is UpdateVerdict.NOT_FOUND
            assert await h.service.cancel(task_id, owners[0]) is CancelVerdict.NOT_FOUND
        await h.service.cancel(task.task_id, owners[0])
