"""Runs task bodies in this process: fair shares of bounded slots, leases with heartbeats, recovery.

Slots are handed out by a `FairScheduler`: per tenant, then per principal, with caps, so one
bank's queue never holds every slot while another bank's task waits.

Each task is held under a lease (holder, expiry) that heartbeats keep extending — only for the
tasks whose bodies this process still runs or queues, never for one whose body is gone. A
runner that dies stops renewing, and once the lease lapses any runner may claim the task: an
idempotent tool is run again from the start (up to `max_attempts` runs in all), anything else is
marked `failed`, because running it twice could do its effect twice. Recovery claims every lapsed
task at once, in batches, and settles the ones it will not run without waiting for a slot. A
graceful stop hands its leases back and those runs are not counted as attempts: `max_attempts`
is for crashes. Claiming goes through the store, so separate worker processes sharing one
database can run tasks the same way later.

How a body ends decides the terminal state: a result (even `isError: true`) is `completed`, a
JSON-RPC error (`MCPError`) is `failed` with that error, any other exception is `failed` with an
internal error (its details stay in the server log), and a client's cancellation is `cancelled`.
Each is one compare-and-set on an active row, so whatever lands first stays.

A body's progress reports are written beside it, at most once per `progress_interval_ms` per task
(`TaskContext`): the latest report wins, and one still waiting when the body ends is written with the
outcome.

Storage failures never strand a task, and never fail one: a progress update that cannot be
written is skipped (it is advisory); a body that dies of a storage failure — of any store it reads,
on either backend (`store.faults.storage_fault`): the task store, the notes, a terminated PostgreSQL
connection, a locked SQLite file — is run again in place while its lease holds (backoff, for up to
one lease: a connection reset costs a blip, not an attempt), and past that handed back, for recovery
to re-run or fail once the store works again; an outcome that cannot be written is retried with
backoff for up to one lease, and then handed back the same way. Only the tool's own errors fail a
task.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR
from pydantic import ValidationError

from aml_mcp.catalog.tools import ToolRegistry, ToolSpec
from aml_mcp.store.faults import storage_fault
from aml_mcp.store.outage import OutageLog
from aml_mcp.tasks.clock import Clock
from aml_mcp.tasks.job import Job, StopReason
from aml_mcp.tasks.model import Outcome, Progress, TaskRecord, TaskStatus
from aml_mcp.tasks.scheduler import FairScheduler
from aml_mcp.tasks.service import CANCELLED_MESSAGE
from aml_mcp.tasks.settings import TaskSettings
from aml_mcp.tasks.storage import Change, StorageUnavailable, TaskStore
from aml_mcp.tasks.task_context import TaskContext
from aml_mcp.tasks.transitions import apply_change

logger = logging.getLogger(__name__)

STORE_REFUSED = "The task's outcome could not be stored"
SHARED_MESSAGE = "Completed (one run for identical tasks created together)"

CLAIM_BATCH = 256
"""Lapsed tasks claimed per store round trip; recovery keeps claiming until a batch comes back short."""
WOKEN_CLAIM_SPACING_SECONDS = 0.01
"""A claim woken by `wake()` starts at least this long after the previous claim started. Each API
replica signals its creates at most once per `CREATED_SIGNAL_SPACING_SECONDS` (the PostgreSQL task
store), so with several replicas the signals come several times as often: spaced, one claim takes
what they all created meanwhile instead of one claim, with its own transaction, per signal."""
FIRST_RETRY_SECONDS = 0.1
"""The first pause before a body stopped by a storage fault runs again in place (then doubled, up
to one heartbeat)."""


@dataclass(frozen=True, slots=True)
class Interrupted:
    """A body that stopped because storage failed under it: nothing to record, hand the task back."""

    cause: str


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
        is_storage_fault: Callable[[BaseException], str | None] = storage_fault,
        on_claimed: Callable[[TaskRecord, int], None] | None = None,
    ) -> None:
        self._store = store
        self._tools = tools
        self._settings = settings
        self._clock = clock
        self._holder = holder or default_holder()
        self._scheduler = FairScheduler(
            settings.max_concurrent,
            per_tenant=settings.max_concurrent_per_tenant,
            per_principal=settings.max_concurrent_per_principal,
        )
        self._storage_fault = is_storage_fault
        """Tells a body's storage failure (the AML stores' too, on either backend) from its bugs."""
        self._on_claimed = on_claimed
        """Told of every claimed task and the time of the claim (metrics: claim lag, takeovers)."""
        self._jobs: dict[str, Job] = {}
        self._joinable: dict[str, Job] = {}
        """Per coalescing key, the job whose run identical tasks created meanwhile follow."""
        self._group: TaskGroup | None = None
        self._outage = OutageLog(
            logger,
            down="task {what} cannot write to the store ({cause}); retrying",
            up="task {what} reaches the store again",
        )
        """Each background job's storage outage (`what`: the lease heartbeat, recovery), logged once."""
        self._wake = anyio.Event()
        """Set by `wake()`: claim now rather than at the next `claim_interval_ms`."""
        self._beat = anyio.Event()
        """Set by `heartbeat_now()`: re-read the leases now rather than at the next `heartbeat_ms`."""

    @property
    def holder(self) -> str:
        return self._holder

    @property
    def scheduler(self) -> FairScheduler:
        """Who runs and who waits (for health checks and tests)."""
        return self._scheduler

    @property
    def active(self) -> int:
        """Jobs this process holds (running, queued for a slot, or waiting for input)."""
        return len(self._jobs)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Runs heartbeats and recovery; on exit stops every body and hands its lease back."""
        stopped: list[str] = []
        try:
            async with anyio.create_task_group() as group:
                self._group = group
                group.start_soon(self._heartbeats)
                group.start_soon(self._recovery)
                try:
                    yield
                finally:
                    self._group = None
                    stopped = list(self._jobs)
                    for job in list(self._jobs.values()):
                        job.stop(StopReason.SHUTDOWN)
                    group.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await self._store.release(self._holder, stopped)
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
        job = Job(task, self._scheduler)
        self._jobs[task.task_id] = job
        self._group.start_soon(
            self._execute, job, self._coalescing_key(task), name=f"task {task.task_id[:8]}"
        )

    def _coalescing_key(self, task: TaskRecord) -> str | None:
        """What makes two tasks the same run: owner, idempotent tool, arguments and answers."""
        tool = self._tools.get(task.tool)
        if not self._settings.coalesce_identical_runs or tool is None or not tool.idempotent:
            return None
        owner = task.owner
        identity = [owner.issuer, owner.subject, owner.tenant, owner.client_id, task.tool]
        return json.dumps(
            [identity, task.arguments, task.input_responses], sort_keys=True, separators=(",", ":")
        )

    def cancel_requested(self, task_id: str) -> None:
        job = self._jobs.get(task_id)
        if job is not None:
            job.stop(StopReason.CANCEL)

    def answers_arrived(self, task_id: str) -> None:
        job = self._jobs.get(task_id)
        if job is not None:
            job.poke()

    # -- execution -----------------------------------------------------------------------------

    async def _execute(self, job: Job, key: str | None = None) -> None:
        task_id = job.task.task_id
        try:
            ended: Outcome | Interrupted | None = None
            with job.scope:
                while key is not None and ended is None:
                    leader = self._joinable.get(key)
                    if leader is None or leader.ended.is_set():
                        self._joinable[key] = job  # identical tasks from now on follow this run
                        break
                    ended = await self._follow(job, leader)
                if ended is None:
                    async with job.slot:
                        asked_before = (dict(job.task.input_requests), dict(job.task.input_responses))
                        ended = await self._run_retrying(job)
                        answered = (dict(job.task.input_requests), dict(job.task.input_responses))
                        job.share(
                            ended
                            if isinstance(ended, Outcome)
                            and ended.status is TaskStatus.COMPLETED
                            and answered == asked_before  # nothing asked: a run like any identical one
                            else None
                        )
            if isinstance(ended, Interrupted):
                await self._hand_back(job, ended.cause)
                return
            if ended is None:
                if job.stop_reason is not StopReason.CANCEL:
                    return  # lost or shutting down: the row belongs to whoever runs it next
                ended = cancelled()
            await self._record(job, ended)
        except Exception:
            logger.exception("task %s… could not be finished", task_id[:8])
        finally:
            if not job.ended.is_set():
                job.share(None)
            if key is not None and self._joinable.get(key) is job:
                del self._joinable[key]
            if self._jobs.get(task_id) is job:
                del self._jobs[task_id]

    async def _follow(self, job: Job, leader: Job) -> Outcome | None:
        """Wait, holding no slot, for the identical run `job` joined; its result, or `None` when the
        run ended otherwise (failed, cancelled, lost, or it asked for input): then look again."""
        await leader.ended.wait()
        if leader.shared is None or leader.shared.result is None:
            return None
        logger.info(
            "task %s… takes the result of identical task %s…", job.task.task_id[:8], leader.task.task_id[:8]
        )
        return Outcome(TaskStatus.COMPLETED, message=SHARED_MESSAGE, result=leader.shared.result)

    async def _run_retrying(self, job: Job) -> Outcome | Interrupted:
        """The body's outcome. An idempotent body stopped by a storage fault runs again here, its
        lease still held (heartbeats go on; a lost lease or a cancel stops the wait), with backoff for
        up to one lease from the first fault; past that, or for a tool not safe to run twice, it is
        handed back."""
        tool = self._tools.get(job.task.tool)
        give_up_at: float | None = None
        delay = FIRST_RETRY_SECONDS
        runs = 1
        while True:
            ended = await self._run_body(job)
            if not isinstance(ended, Interrupted) or tool is None or not tool.idempotent:
                return ended
            now = anyio.current_time()
            give_up_at = now + self._settings.lease_ms / 1000 if give_up_at is None else give_up_at
            if now + delay > give_up_at:
                return ended
            (logger.warning if runs == 1 else logger.info)(
                "task %s… of %s stopped by a storage failure (%s); running it again in place",
                job.task.task_id[:8],
                job.task.tool,
                ended.cause,
            )
            await anyio.sleep(delay)
            delay = min(delay * 2, max(FIRST_RETRY_SECONDS, self._settings.heartbeat_ms / 1000))
            runs += 1

    async def _run_body(self, job: Job) -> Outcome | Interrupted:
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
            progress_interval_s=self._settings.progress_interval_ms / 1000,
        )
        # Progress is written beside the body, throttled; what the body reported last and was not
        # written yet goes with the outcome (`_finish`), so the finished task shows where it ended.
        async with anyio.create_task_group() as progress:
            progress.start_soon(context.flush_progress)
            try:
                ended = await self._call_body(tool, task, context)
            finally:
                progress.cancel_scope.cancel()
        job.progress = context.unwritten_progress()
        return ended

    async def _call_body(
        self, tool: ToolSpec, task: TaskRecord, context: TaskContext
    ) -> Outcome | Interrupted:
        try:
            produced = await tool.body(dict(task.arguments), context)
        except MCPError as exc:
            return failed(exc.error.model_dump(by_alias=True, exclude_none=True, mode="json"))
        except StorageUnavailable as exc:
            return Interrupted(exc.cause)
        except Exception as exc:
            cause = self._storage_fault(exc)
            if cause is not None:
                return Interrupted(cause)
            logger.exception("task body of %s raised", task.tool)
            return failed(_internal_error("Internal error"))
        return completed(produced)

    async def _record(self, job: Job, outcome: Outcome) -> None:
        """Write how the task ended. A storage failure is retried with backoff for up to one lease
        (heartbeats keep the lease meanwhile), then the task is handed back; an outcome the store
        refuses for itself (a bug) is replaced by an internal error, so the task still ends."""
        deadline = anyio.current_time() + self._settings.lease_ms / 1000
        delay = 0.05
        while True:
            try:
                await self._finish(job.task, outcome, known=job.task, progress=job.progress)
                return
            except StorageUnavailable as exc:
                if anyio.current_time() + delay > deadline:
                    await self._hand_back(job, exc.cause)
                    return
                await anyio.sleep(delay)
                delay = min(delay * 2, self._settings.heartbeat_ms / 1000)
            except Exception:
                if outcome.error is not None and outcome.error.get("message") == STORE_REFUSED:
                    raise
                logger.exception("the outcome of task %s… could not be stored", job.task.task_id[:8])
                outcome = failed(_internal_error(STORE_REFUSED))

    async def _hand_back(self, job: Job, cause: str) -> None:
        """Stop holding a task whose body cannot go on: no more heartbeats for it, and its lease is
        given up so recovery re-runs (idempotent) or fails it as soon as the store works again. If
        even that cannot be written, the lease simply lapses — it is no longer renewed."""
        task_id = job.task.task_id
        if self._jobs.get(task_id) is job:
            del self._jobs[task_id]
        logger.warning(
            "task %s… of %s stopped by a storage failure (%s); handed back for recovery",
            task_id[:8],
            job.task.tool,
            cause,
        )
        try:
            await self._store.abandon(task_id, self._holder)
        except Exception as exc:
            logger.warning(
                "could not hand back task %s… (%s); its lease lapses within %d ms",
                task_id[:8],
                exc,
                self._settings.lease_ms,
            )

    async def _finish(
        self,
        task: TaskRecord,
        outcome: Outcome,
        *,
        known: TaskRecord | None = None,
        progress: Progress | None = None,
    ) -> None:
        """Record how the task ended; `known` (the runner's last view) saves a read if nobody else wrote.
        `progress`, the body's last structured progress not written yet, is written with it."""
        change = Change(
            status=outcome.status,
            status_message=outcome.message,
            result=outcome.result,
            error=outcome.error,
            progress=progress,
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
            with anyio.move_on_after(self._settings.heartbeat_ms / 1000):
                await self._beat.wait()
            self._beat = anyio.Event()
            jobs = dict(self._jobs)
            if not jobs:
                continue
            try:
                now = self._clock.now_ms()
                report = await self._store.renew(
                    self._holder, now + self._settings.lease_ms, now, task_ids=list(jobs)
                )
            except StorageUnavailable as exc:
                self._outage.failed(exc.cause, what="lease heartbeat")
                continue
            except Exception:
                logger.exception("task lease heartbeat failed")
                continue
            self._outage.recovered(what="lease heartbeat")
            for task_id, job in jobs.items():
                if self._jobs.get(task_id) is not job:
                    continue  # ended while the heartbeat was being written
                if task_id not in report.held:
                    job.stop(StopReason.LOST)
                elif task_id in report.cancel_requested:
                    job.stop(StopReason.CANCEL)
                else:
                    job.poke()  # answers stored by another process are found on this re-read

    async def _recovery(self) -> None:
        while True:
            started = anyio.current_time()
            try:
                await self.recover_once()
            except StorageUnavailable as exc:
                self._outage.failed(exc.cause, what="recovery")
            except Exception:
                logger.exception("task recovery failed")
            else:
                self._outage.recovered(what="recovery")
            with anyio.move_on_after(self._settings.claim_interval_ms / 1000):
                await self._wake.wait()
            self._wake = anyio.Event()
            await anyio.sleep(max(0.0, started + WOKEN_CLAIM_SPACING_SECONDS - anyio.current_time()))

    def heartbeat_now(self) -> None:
        """Re-read this runner's leases at once: another process asked to cancel a task it runs or
        stored answers for one (the heartbeat finds both). Safe to call from the event loop at any rate."""
        self._beat.set()

    def control_signal(self, holder: str) -> None:
        """A control notification named `holder`: act on it if that is this runner."""
        if holder == self._holder:
            self.heartbeat_now()

    def wake(self) -> None:
        """Claim at once: a task was created for any runner to take (the claim poll is the backstop
        for a signal that never arrives). Safe to call from the event loop at any rate."""
        self._wake.set()

    async def recover_once(self) -> int:
        """Claim every task whose runner vanished and re-run or end each; returns how many were claimed.

        Claims go on in batches until one comes back short, so a crash that left thousands of
        tasks is taken over at once; the tasks that will not run again are settled together (their
        writes share commits) without waiting for a slot, and re-runs queue for slots fairly.
        """
        total = 0
        while True:
            now = self._clock.now_ms()
            claimed = await self._store.claim(
                self._holder, now, now + self._settings.lease_ms, CLAIM_BATCH, exclude=tuple(self._jobs)
            )
            ending: list[tuple[TaskRecord, Outcome]] = []
            for task in claimed:
                if self._on_claimed is not None:
                    self._on_claimed(task, now)
                verdict = self._verdict(task, self._tools.get(task.tool))
                if verdict is None:
                    logger.info(
                        "%s task %s… of %s (attempt %d)",
                        "running" if task.attempts == 1 else "re-running",
                        task.task_id[:8],
                        task.tool,
                        task.attempts,
                    )
                    self.submit(task)
                else:
                    ending.append((task, verdict))
            if ending:
                async with anyio.create_task_group() as group:
                    for task, verdict in ending:
                        group.start_soon(self._settle_claimed, task, verdict)
            total += len(claimed)
            if len(claimed) < CLAIM_BATCH:
                return total

    async def _settle_claimed(self, task: TaskRecord, outcome: Outcome) -> None:
        try:
            await self._finish(task, outcome, known=task)
        except Exception as exc:  # the lease is not renewed: the task is claimed again later
            logger.warning("could not settle recovered task %s… (%s)", task.task_id[:8], exc)

    def _verdict(self, task: TaskRecord, tool: ToolSpec | None) -> Outcome | None:
        """`None` to run the claimed task again, else how it ends without running."""
        if task.cancel_requested:
            return cancelled()
        if tool is None:
            return failed(_internal_error(f"The tool {task.tool!r} is no longer available"))
        if task.attempts == 1:
            return None  # created unleased (an API-only replica) and never run: this is its first run
        if not tool.idempotent:
            return failed(
                _internal_error("Task interrupted by a server restart"),
                message=(
                    f"Interrupted by a server restart or a storage failure; {task.tool} is not safe to "
                    "run twice, so it was not resumed. Call the tool again if needed."
                ),
            )
        if task.counted_attempts > self._settings.max_attempts:
            return failed(
                _internal_error("Task interrupted too many times"),
                message=f"Gave up after {self._settings.max_attempts} interrupted attempts",
            )
        return None
