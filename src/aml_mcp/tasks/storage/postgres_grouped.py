"""Runners' outcome writes on PostgreSQL, several to a transaction (group commit).

A busy runner finishes tasks faster than one statement at a time can record them: each outcome is
its own transaction, its own WAL flush and — since it NOTIFYs listeners — its own turn at the lock
through which PostgreSQL serializes every NOTIFYing commit of the server. Here the first outcome is
sent at once, and those that arrive while it commits wait and then go together: one transaction,
one round trip, one flush, one turn at the NOTIFY lock for the whole group. Under no load nothing
waits; under load a group forms on its own.

Each write is the same conditional statement it would be alone (owner, version and lease holder
checked), so a group changes nothing but the number of commits. If a group fails for anything
but a storage fault (a statement the database refuses), its writes run again one by one, so each
caller gets its own statement's answer and no write is lost with another's error. A storage fault
reaches every caller of the group, as it would have reached each alone.

Row locks: a group locks its rows in task-id order, and the other statements that lock several
tasks' rows (`renew`, `release`) take theirs in the same order, so two of them never wait on each
other in a cycle.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

Rows = list[tuple[Any, ...]]
MOST_PER_GROUP = 64
"""Writes in one transaction at most: a group holds its rows' locks until its commit."""


@dataclass
class _Write:
    task_id: str
    query: str
    params: Any
    answer: asyncio.Future[Rows] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class GroupedWrites:
    """Statements, each changing one task's row, committed a group at a time."""

    def __init__(
        self,
        alone: Callable[[str, Any], Awaitable[Rows]],
        together: Callable[[Sequence[tuple[str, Any]]], Awaitable[list[Rows]]],
        is_fault: Callable[[BaseException], bool],
    ) -> None:
        self._alone = alone
        self._together = together
        self._is_fault = is_fault
        self._waiting: list[_Write] = []
        self._sending: asyncio.Task[None] | None = None

    async def execute(self, task_id: str, query: str, params: Any) -> Rows:
        """The rows `query` returned, once its group committed. The caller waits for the commit even
        when cancelled meanwhile, as it would for a statement of its own (`PostgresDatabase.execute`)."""
        write = _Write(task_id, query, params)
        self._waiting.append(write)
        if self._sending is None or self._sending.done():
            self._sending = asyncio.get_running_loop().create_task(self._send_waiting())
        with anyio.CancelScope(shield=True):
            await asyncio.wait([write.answer])
        await anyio.lowlevel.checkpoint_if_cancelled()
        return write.answer.result()

    async def _send_waiting(self) -> None:
        group: list[_Write] = []
        try:
            while self._waiting:
                group = sorted(self._waiting[:MOST_PER_GROUP], key=lambda write: write.task_id)
                del self._waiting[:MOST_PER_GROUP]
                await self._send(group)
        finally:  # stopped (the event loop closing): no caller waits for ever
            for write in [*group, *self._waiting]:
                if not write.answer.done():
                    write.answer.cancel()

    async def _send(self, group: list[_Write]) -> None:
        if len(group) == 1:
            await self._send_alone(group[0])
            return
        try:
            answers = await self._together([(write.query, write.params) for write in group])
        except Exception as exc:
            if not self._is_fault(exc):
                for write in group:  # a statement the database refused: each answers for itself
                    await self._send_alone(write)
                return
            for write in group:
                write.answer.set_exception(exc)
            return
        for write, rows in zip(group, answers, strict=True):
            write.answer.set_result(rows)

    async def _send_alone(self, write: _Write) -> None:
        try:
            write.answer.set_result(await self._alone(write.query, write.params))
        except Exception as exc:
            write.answer.set_exception(exc)
