"""Creates and runners' outcomes on PostgreSQL, several to a transaction (group commit).

A busy replica writes tasks faster than one statement at a time can commit them: each create and
each outcome is its own transaction, its own round trip and WAL flush, and an outcome, which
NOTIFYs listeners, its own turn at the lock through which PostgreSQL serializes every NOTIFYing
commit of the server. Here the first write is sent at once, and those that arrive while it commits
wait and then go together: one transaction, one round trip, one flush, one turn at the NOTIFY lock
for the whole group. Under no load nothing waits; under load a group forms on its own.

Each write is the same statement it would be alone (a create counts its tenant under the tenant's
lock; an outcome checks owner, version and lease holder), and later statements of a group see what
earlier ones wrote, so a group changes nothing but the number of commits. If a group fails for
anything but a storage fault (a statement the database refuses, a deadlock it broke), its writes
run again one by one, so each caller gets its own statement's answer and no write is lost with
another's error. A storage fault reaches every caller of the group, as it would have reached each
alone.

Locks: creates and outcomes form separate groups (a group of creates takes tenants' advisory
locks, one of outcomes takes rows), and a group runs its statements in the order of their keys —
the tenant's lock name, the task id — so two groups take their locks in one order. The other
statements that lock several tasks' rows (`renew`, `release`) take theirs in task-id order too.
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
    order: str
    query: str
    params: Any
    answer: asyncio.Future[Rows] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class GroupedWrites:
    """Statements, each writing one task's row, committed a group at a time; a group's statements run
    in the order of their `order` keys, so two groups take their locks in one order."""

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

    async def execute(self, order: str, query: str, params: Any) -> Rows:
        """The rows `query` returned, once its group committed. The caller waits for the commit even
        when cancelled meanwhile, as it would for a statement of its own (`PostgresDatabase.execute`)."""
        write = _Write(order, query, params)
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
                group = sorted(self._waiting[:MOST_PER_GROUP], key=lambda write: write.order)
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
