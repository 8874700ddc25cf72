"""`InvocationContext` for a body running as a task.

Asking for input parks the task in `input_required` (durably, so a poll sees the requests) and
waits until `tasks/update` has delivered every answer; answers gathered before the task was
created (multi round-trip preflight) count as already given. Log messages have no channel on tasks
(the extension excludes them) and stay in the server log.

Progress becomes the task's status message and its structured progress (`_meta["aml-mcp/progress"]`),
throttled and coalesced: a body may report at any rate, `report_progress` only keeps the latest
report, and `flush_progress` (run beside the body) writes it at most once per `progress_interval_s`
— the first at once, later ones when the interval since the last write has passed. Each write is
one compare-and-set on the active row, so listen streams hear it and `tasks/get` shows it, and a
store carrying N bodies takes at most N/interval progress writes a second. Progress is written only
while the task is `working` (a report left over when it asks for input is dropped: the question's
own message stands). A report still waiting when the body ends is handed to the runner
(`unwritten_progress`), which writes it with the outcome; a write that somehow lands after the
outcome changes nothing, since the store changes active rows only. Progress is advisory, so a write
the store cannot take right now is skipped and the body goes on. Messages are data: control
characters become spaces, and they are clipped to `MAX_STATUS_MESSAGE_CHARS`.
"""

from __future__ import annotations

import logging
import math
import unicodedata
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import anyio
import anyio.lowlevel
import mcp_types as types

from aml_mcp.catalog.invocation import InputRequest
from aml_mcp.principal import Principal
from aml_mcp.tasks.clock import Clock
from aml_mcp.tasks.inputs import answered, ask
from aml_mcp.tasks.job import Job, StopReason
from aml_mcp.tasks.model import Progress, TaskRecord, TaskStatus, progress_of
from aml_mcp.tasks.storage import Change, StorageUnavailable, TaskStore
from aml_mcp.tasks.transitions import Applied, Decide, apply_change

logger = logging.getLogger(__name__)


MAX_STATUS_MESSAGE_CHARS = 200
"""Longest progress message kept (longer ones end in `…`): a status line, not a document."""


def bounded_text(text: str, limit: int = MAX_STATUS_MESSAGE_CHARS) -> str:
    """`text` as a one-line status message: control and separator characters (line breaks, U+2028,
    C1 controls) become spaces, an unpaired surrogate becomes U+FFFD, and it is clipped to `limit`."""
    cleaned = "".join(
        " " if unicodedata.category(char) in ("Cc", "Zl", "Zp") else char for char in text[: limit * 2]
    )
    if not cleaned.isascii():  # an unpaired surrogate's bytes are no UTF-8: each becomes U+FFFD
        cleaned = cleaned.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"


def progress_text(progress: float, total: float | None, message: str | None) -> str:
    if isinstance(message, str) and message:
        return bounded_text(message)
    if not isinstance(progress, int | float) or not math.isfinite(progress):
        return ""
    if isinstance(total, int | float) and math.isfinite(total) and total:
        return f"{progress:g}/{total:g}"
    return f"{progress:g}"


@dataclass(frozen=True, slots=True)
class ProgressReport:
    """What a body said about its progress: the status message, and the numbers when they are numbers."""

    message: str
    progress: Progress | None


class ProgressThrottle:
    """Keeps the latest report and hands it to `write` at most once per `interval_s` (`run`).

    The first report is written at once; one arriving sooner than `interval_s` after the last
    write waits until then, and any newer report replaces it meanwhile (the latest wins)."""

    def __init__(
        self,
        interval_s: float,
        write: Callable[[ProgressReport], Awaitable[None]],
        *,
        now: Callable[[], float] = anyio.current_time,
    ) -> None:
        self._interval = interval_s
        self._write = write
        self._now = now
        self._pending: ProgressReport | None = None
        self._last_write = -math.inf
        self._arrived = anyio.Event()

    def report(self, report: ProgressReport) -> None:
        self._pending = report
        self._arrived.set()

    def take(self) -> ProgressReport | None:
        """The report not yet written (if any), which is then no longer the throttle's to write."""
        pending, self._pending = self._pending, None
        return pending

    async def run(self) -> None:
        """Write reports as they come, throttled, until cancelled."""
        while True:
            await self._arrived.wait()
            self._arrived = anyio.Event()
            wait = self._last_write + self._interval - self._now()
            if wait > 0:
                await anyio.sleep(wait)
            report = self.take()
            if report is None:
                continue
            self._last_write = self._now()
            await self._write(report)


class TaskContext:
    """What a task body sees. `recheck_s` bounds how long a wait relies on an in-process wake-up
    alone (answers stored by another process are found by re-reading)."""

    def __init__(
        self,
        *,
        job: Job,
        store: TaskStore,
        clock: Clock,
        holder: str,
        recheck_s: float,
        progress_interval_s: float = 0.25,
    ) -> None:
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
        self._progress = ProgressThrottle(progress_interval_s, self._write_progress)

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
        if applied.current.version >= self._job.task.version:  # a concurrent write may have gone further
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
        """Keep the report for `flush_progress` to write (throttled); never waits for the store."""
        report = ProgressReport(progress_text(progress, total, message), progress_of(progress, total))
        self._progress.report(report)
        await anyio.lowlevel.checkpoint()

    async def flush_progress(self) -> None:
        """Write progress reports, throttled, for as long as the body runs (cancelled when it ends)."""
        await self._progress.run()

    def unwritten_progress(self) -> Progress | None:
        """The structured progress of a report still waiting to be written, for the runner to store
        with the outcome (its message gives way to the outcome's)."""
        pending = self._progress.take()
        if pending is None or pending.progress == self._job.task.progress:
            return None
        return pending.progress

    async def _write_progress(self, report: ProgressReport) -> None:
        def decide(task: TaskRecord) -> Change | None:
            if task.status is not TaskStatus.WORKING:
                return None  # waiting for input (its question is the message) or ended: dropped
            message = report.message if report.message and report.message != task.status_message else None
            progress = report.progress if report.progress != task.progress else None
            if message is None and progress is None:
                return None
            return Change(status_message=message, progress=progress)

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
        except Exception:
            # Advisory: whatever a report trips over, the body goes on (and the next report is tried).
            logger.exception("progress of task %s… could not be recorded", self._job.task.task_id[:8])
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
