"""`InvocationContext` for a body running as a task.

Asking for input parks the task in `input_required` (durably, so a poll sees the requests) and
waits until `tasks/update` has delivered every answer; answers gathered before the task was
created (multi round-trip preflight) count as already given. Progress becomes the task's status
message; it is advisory, so a progress update the store cannot take right now is skipped and the
body goes on. Log messages have no channel on tasks (the extension excludes them) and stay in the
server log.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, NoReturn

import anyio
import anyio.lowlevel
import mcp_types as types

from aml_mcp.catalog.invocation import InputRequest
from aml_mcp.principal import Principal
from aml_mcp.tasks.clock import Clock
from aml_mcp.tasks.inputs import answered, ask
from aml_mcp.tasks.job import Job, StopReason
from aml_mcp.tasks.model import TaskRecord
from aml_mcp.tasks.storage import Change, StorageUnavailable, TaskStore
from aml_mcp.tasks.transitions import Applied, Decide, apply_change

logger = logging.getLogger(__name__)


def progress_text(progress: float, total: float | None, message: str | None) -> str:
    if message:
        return message
    return f"{progress:g}/{total:g}" if total else f"{progress:g}"


class TaskContext:
    """What a task body sees. `recheck_s` bounds how long a wait relies on an in-process wake-up
    alone (answers stored by another process are found by re-reading)."""

    def __init__(self, *, job: Job, store: TaskStore, clock: Clock, holder: str, recheck_s: float) -> None:
        task = job.task
        self._job = job
        self._store = store
        self._clock = clock
        self._holder = holder
        self._recheck_s = recheck_s
        self._principal = Principal(
            issuer=task.owner.issuer,
            subject=task.owner.subject,
            tenant=task.owner.tenant,
            client_id=task.owner.client_id,
        )
        self._capabilities = types.ClientCapabilities.model_validate(task.client_capabilities)
        self._progress_skipped = False

    @property
    def principal(self) -> Principal:
        """The task's owner (the credential's scopes were checked when the task was created)."""
        return self._principal

    @property
    def client_capabilities(self) -> types.ClientCapabilities:
        return self._capabilities

    async def _change(self, decide: Decide, *, trust_known: bool) -> Applied:
        """Apply `decide`; `trust_known` skips the first read (never when waiting for others' writes)."""
        task = self._job.task
        applied = await apply_change(
            self._store,
            self._clock,
            task.task_id,
            task.owner,
            decide,
            holder=self._holder,
            known=task if trust_known else None,
        )
        if applied is None or applied.current.terminal:
            await self._lost()
        assert applied is not None
        self._job.task = applied.current
        return applied

    async def _lost(self) -> NoReturn:
        """The task ended, expired or moved to another runner: this body must stop, writing nothing."""
        self._job.stop(StopReason.LOST)
        await anyio.lowlevel.checkpoint()
        raise RuntimeError("unreachable: the job's scope is cancelled")  # pragma: no cover

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        text = progress_text(progress, total, message)

        def decide(task: TaskRecord) -> Change | None:
            return None if task.status_message == text else Change(status_message=text)

        try:
            await self._change(decide, trust_known=True)
        except StorageUnavailable as exc:
            if not self._progress_skipped:
                logger.warning(
                    "progress of task %s… not recorded (%s); the task goes on",
                    self._job.task.task_id[:8],
                    exc.cause,
                )
            self._progress_skipped = True
        else:
            self._progress_skipped = False

    async def log(self, level: types.LoggingLevel, data: Any) -> None:
        logger.debug("task %s… logged at %s", self._job.task.task_id[:8], level)

    async def request_inputs(self, requests: Mapping[str, InputRequest]) -> dict[str, Any]:
        if not requests:
            return {}
        while True:
            wake = self._job.arm()

            def decide(task: TaskRecord) -> Change | None:
                got = answered(task, requests)
                missing = {key: request for key, request in requests.items() if key not in got}
                return ask(task, missing) if missing else None

            applied = await self._change(decide, trust_known=False)
            got = answered(applied.current, requests)
            if len(got) == len(requests):
                return got
            self._job.share(None)  # identical tasks following this run must not wait for a human
            async with self._job.slot.lent():
                with anyio.move_on_after(self._recheck_s):
                    await wake.wait()
