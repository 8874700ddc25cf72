"""Runs task bodies in this process: bounded concurrency, leases with heartbeats, crash recovery.

Each task is held under a lease (holder, expiry) that heartbeats keep extending. A runner that
dies stops renewing, and once the lease lapses any runner may claim the task: an idempotent
tool is run again from the start (up to `max_attempts` runs in all), anything else is marked
`failed`, because running it twice could do its effect twice. Claiming goes through the store,
so separate worker processes sharing one database can run tasks the same way later.

How a body ends decides the terminal state: a result (even `isError: true`) is `completed`, a
JSON-RPC error (`MCPError`) is `failed` with that error, any other exception is `failed` with an
internal error (its details stay in the server log), and a client's cancellation is `cancelled`.
Each is one compare-and-set on an active row, so whatever lands first stays.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
from collections.abc import AsyncIterator
from typing import Any

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR
from pydantic import ValidationError

from aml_mcp.catalog.tools import ToolRegistry, ToolSpec
from aml_mcp.tasks.clock import Clock
from aml_mcp.tasks.job import Job, StopReason
from aml_mcp.tasks.model import Outcome, TaskRecord, TaskStatus
from aml_mcp.tasks.service import CANCELLED_MESSAGE
from aml_mcp.tasks.settings import TaskSettings
from aml_mcp.tasks.store import Change, TaskStore
from aml_mcp.tasks.task_context import TaskContext
from aml_mcp.tasks.transitions import apply_change

logger = logging.getLogger(__name__)


def _internal_error(message: str) -> dict[str, Any]:
    return {"code": INTERNAL_ERROR, "message": message}


def failed(error: dict[str, Any], message: str | None = None) -> Outcome:
    return Outcome(
        TaskStatus.FAILED, message=message or f"Tool execution failed: {error.get('message')}", error=error
    )


def completed(produced: Any) -> Outcome:
    """A body's return value as the task's result, shaped exactly like a synchronous `tools/call`."""
    try:
        result = (
            produced
            if isinstance(produced, types.CallToolResult)
            else types.CallToolResult.model_validate(produced)
        )
    except ValidationError:
        logger.exception("a task body returned an invalid tool result")
        return failed(_internal_error("Tool returned an invalid result"))
    wire = result.model_dump(by_alias=True, exclude_none=True, mode="json")
    message = "Completed with a tool error" if result.is_error else "Completed"
    return Outcome(TaskStatus.COMPLETED, message=message, result=wire)


def cancelled() -> Outcome:
    return Outcome(TaskStatus.CANCELLED, message=CANCELLED_MESSAGE)


def default_holder() -> str:
    """Unique per runner instance: host and pid for people, random bits so a restart is someone new."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class TaskRunner:
    """Executes tasks with `max_concurrent` bodies at once; use `running()` for its lifetime."""

    def __init__(
        self,
        store: TaskStore,
        tools: ToolRegistry,
        settings: TaskSettings,
        clock: Clock,
        *,
        holder: str | None = None,
    ) -> None:
        self._store = store
        self._tools = tools
        self._settings = settings
        self._clock = clock
        self._holder = holder or default_holder()
        self._limiter = anyio.Semaphore(settings.max_concurrent)
        self._jobs: dict[str, Job] = {}
        self._group: TaskGroup | None = None

    @property
    def holder(self) -> str:
        return self._holder

    @property
    def active(self) -> int:
        """Jobs this process holds (running, queued for a slot, or waiting for input)."""
        return len(self._jobs)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Runs heartbeats and recovery; on exit stops every body and hands its lease back."""
        try:
            async with anyio.create_task_group() as group:
                self._group = group
                group.start_soon(self._heartbeats)
                group.start_soon(self._recovery)
                try:
                    yield
                finally:
                    self._group = None
                    for job in list(self._jobs.values()):
                        job.stop(StopReason.SHUTDOWN)
                    group.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await self._store.release(self._holder)
                except Exception:
                    logger.exception(
                        "could not release task leases; they lapse after %d ms", self._settings.lease_ms
                    )

    # -- signals from the service ------------------------------------------------------------

    def submit(self, task: TaskRecord) -> None:
        """Run a committed task here. While stopping, the task is left to whoever claims its lease
        next (the row is durable and the lease is handed back), rather than failing a create that
        has already been committed."""
        if self._group is None:
            logger.warning(
                "task %s… created while the runner is stopped; left for recovery", task.task_id[:8]
            )
            return
        job = Job(task, self._limiter)
        self._jobs[task.task_id] = job
        self._group.start_soon(self._execute, job, name=f"task {task.task_id[:8]}")

    def cancel_requested(self, task_id: str) -> None:
        job = self._jobs.get(task_id)
        if job is not None:
            job.stop(StopReason.CANCEL)

    def answers_arrived(self, task_id: str) -> None:
        job = self._jobs.get(task_id)
        if job is not None:
            job.poke()

    # -- execution -----------------------------------------------------------------------------

    async def _execute(self, job: Job) -> None:
        task_id = job.task.task_id
        try:
            outcome: Outcome | None = None
            with job.scope:
                async with job.slot:
                    outcome = await self._run_body(job)
            if outcome is None:
                if job.stop_reason is not StopReason.CANCEL:
                    return  # lost or shutting down: the row belongs to whoever runs it next
                outcome = cancelled()
            await self._finish(job.task, outcome, known=job.task)
        except Exception:
            logger.exception("task %s… could not be finished", task_id[:8])
        finally:
            if self._jobs.get(task_id) is job:
                del self._jobs[task_id]

    async def _run_body(self, job: Job) -> Outcome:
        task = job.task
        tool = self._tools.get(task.tool)
        if tool is None:
            return failed(_internal_error(f"The tool {task.tool!r} is no longer available"))
        context = TaskContext(
            job=job,
            store=self._store,
            clock=self._clock,
            holder=self._holder,
            recheck_s=self._settings.heartbeat_ms / 1000,
        )
        try:
            produced = await tool.body(dict(task.arguments), context)
        except MCPError as exc:
            return failed(exc.error.model_dump(by_alias=True, exclude_none=True, mode="json"))
        except Exception:
            logger.exception("task body of %s raised", task.tool)
            return failed(_internal_error("Internal error"))
        return completed(produced)

    async def _finish(self, task: TaskRecord, outcome: Outcome, *, known: TaskRecord | None = None) -> None:
        """Record how the task ended; `known` (the runner's last view) saves a read if nobody else wrote."""
        change = Change(
            status=outcome.status, status_message=outcome.message, result=outcome.result, error=outcome.error
        )
        await apply_change(
            self._store,
            self._clock,
            task.task_id,
            task.owner,
            lambda _: change,
            holder=self._holder,
            known=known,
        )

    # -- leases --------------------------------------------------------------------------------

    async def _heartbeats(self) -> None:
        while True:
            await anyio.sleep(self._settings.heartbeat_ms / 1000)
            try:
                now = self._clock.now_ms()
                report = await self._store.renew(self._holder, now + self._settings.lease_ms, now)
            except Exception:
                logger.exception("task lease heartbeat failed")
                continue
            for task_id, job in list(self._jobs.items()):
                if task_id not in report.held:
                    job.stop(StopReason.LOST)
                elif task_id in report.cancel_requested:
                    job.stop(StopReason.CANCEL)
                else:
                    job.poke()  # answers stored by another process are found on this re-read

    async def _recovery(self) -> None:
        while True:
            try:
                await self.recover_once()
            except Exception:
                logger.exception("task recovery failed")
            await anyio.sleep(self._settings.claim_interval_ms / 1000)

    async def recover_once(self) -> int:
        """Claim tasks whose runner vanished and re-run or fail each; returns how many were claimed."""
        now = self._clock.now_ms()
        claimed = await self._store.claim(
            self._holder, now, now + self._settings.lease_ms, self._settings.max_concurrent
        )
        for task in claimed:
            verdict = self._verdict(task, self._tools.get(task.tool))
            if verdict is None:
                logger.info(
                    "re-running task %s… of %s (attempt %d)", task.task_id[:8], task.tool, task.attempts
                )
                self.submit(task)
            else:
                await self._finish(task, verdict, known=task)
        return len(claimed)

    def _verdict(self, task: TaskRecord, tool: ToolSpec | None) -> Outcome | None:
        """`None` to run the claimed task again, else how it ends without running."""
        if task.cancel_requested:
            return cancelled()
        if tool is None:
            return failed(_internal_error(f"The tool {task.tool!r} is no longer available"))
        if not tool.idempotent:
            return failed(
                _internal_error("Task interrupted by a server restart"),
                message=(
                    f"Interrupted by a server restart; {task.tool} is not safe to run twice, "
                    "so it was not resumed. Call the tool again if needed."
                ),
            )
        if task.attempts > self._settings.max_attempts:
            return failed(
                _internal_error("Task interrupted too many times"),
                message=f"Gave up after {self._settings.max_attempts} interrupted attempts",
            )
        return None
