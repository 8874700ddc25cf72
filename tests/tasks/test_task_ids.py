"""Task ids: unguessable, distinct, and safe to paste after a command on a shell line."""

from __future__ import annotations

from aml_mcp.tasks.model import TASK_ID_BYTES, new_task_id

DRAWN = 20_000
"""About 312 of these would begin with `-` (1 in 64) if nothing drew those again."""


def test_no_task_id_begins_with_a_dash() -> None:
    ids = [new_task_id() for _ in range(DRAWN)]
    assert [task_id for task_id in ids if task_id.startswith("-")] == []
    assert len(set(ids)) == DRAWN


def test_a_task_id_carries_its_random_bytes_in_base64url() -> None:
    task_id = new_task_id()
    assert len(task_id) == TASK_ID_BYTES * 4 // 3
    assert set(task_id) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
