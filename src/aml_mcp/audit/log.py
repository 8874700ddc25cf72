"""The audit log: `record` queues an event, a flusher thread hands batches to the sinks.

Recording must not slow the request path: the request only queues the (immutable) event; a flusher
thread formats batches and hands them to the sinks — one multi-row insert joining the database's
next group commit, one append to the JSON-lines file. `AuditLog.record` never raises and never
waits.

What the flusher guarantees, because the trail is a compliance control:

- **One event never costs another its record.** Every field is made writable when it is
  formatted (`AuditEvent.as_record`), and each sink isolates an event it still cannot write (it
  stores a placeholder saying so, counted in `SinkHealth.placeholders`), so the rest of the batch
  is written.
- **A failing sink keeps its events.** When a sink cannot write at all (disk full, read-only
  database, unwritable file), the batch stays queued for that sink and is retried with backoff
  (at most every `MAX_RETRY_SECONDS`); the failure is logged when it starts, every
  `FAILURE_LOG_SECONDS` while it lasts and when it ends, and counted. Only beyond
  `max_pending` events per sink are new events dropped — counted and logged, never silently.
- **The server can tell.** `unavailable_reason()` names the failing sink while any sink cannot
  write; the composition root uses it to refuse calls (503) and report not-ready until the
  retries succeed again, unless `auth.audit_fail_open` says to carry on.
- **Anonymous noise is bounded.** Repeated refusals of unauthenticated requests are counted into
  summaries (`AnonymousRefusals`) before they reach the sinks.

Sinks are only ever driven from the flusher thread (or, on `flush`/`close`, a helper thread), never
from a thread running an event loop, because the store sink waits for its commit on a loop of its
own.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from aml_mcp.audit.anonymous import DEFAULT_MAX_DISTINCT, DEFAULT_WINDOW_SECONDS, AnonymousRefusals
from aml_mcp.audit.events import AuditEvent

logger = logging.getLogger(__name__)

MAX_RETRY_SECONDS = 2.0
"""Longest wait between two attempts of a failing sink: how soon the trail notices it is writable again."""
FAILURE_LOG_SECONDS = 30.0
"""While a sink keeps failing, its failure is logged again this often (not on every retry)."""
DEFAULT_MAX_PENDING = 100_000
"""Events kept per failing sink; beyond that, new events for that sink are dropped and counted."""


class AuditSink(Protocol):
    def write_batch(self, events: Sequence[AuditEvent]) -> int | None:
        """Write a batch (on the audit flusher thread); return how many were stored as placeholders.

        Raise only when the sink cannot write at all: the whole batch is then kept and retried.
        """


class AuditUnavailable(RuntimeError):
    """Raised by the readiness probe while a sink cannot write."""


@dataclass(frozen=True, slots=True)
class SinkHealth:
    """What one sink has done since start (a snapshot)."""

    name: str
    healthy: bool
    pending: int
    """Events waiting for this sink (retried while it fails)."""
    written: int
    placeholders: int
    """Events that could not be stored as they were, written as `unrecordable_event` placeholders."""
    failures: int
    """Attempts that failed as a whole."""
    dropped: int
    """Events lost because more than `max_pending` were waiting."""
    last_error: str | None


@dataclass(frozen=True, slots=True)
class AuditStats:
    """A snapshot of the audit log's counters."""

    recorded: int
    """Events handed to `record` and taken by the flusher."""
    folded: int
    """Anonymous refusals counted into a summary instead of written one by one."""
    sinks: tuple[SinkHealth, ...]


class _SinkState:
    def __init__(self, sink: AuditSink) -> None:
        self.sink = sink
        self.name = type(sink).__name__
        self.pending: collections.deque[AuditEvent] = collections.deque()
        self.healthy = True
        self.written = 0
        self.placeholders = 0
        self.failures = 0
        self.dropped = 0
        self.last_error: str | None = None
        self.retry_at = 0.0
        self.backoff = 0.0
        self.logged_at = 0.0

    def health(self) -> SinkHealth:
        return SinkHealth(
            name=self.name,
            healthy=self.healthy,
            pending=len(self.pending),
            written=self.written,
            placeholders=self.placeholders,
            failures=self.failures,
            dropped=self.dropped,
            last_error=self.last_error,
        )


class AuditLog:
    """Where security decisions are recorded. Built once by the composition root and passed in.

    `record` only appends the (immutable) event to a queue — no formatting, no I/O, no thread
    wake-up — so auditing every request costs the request path well under a microsecond. A flusher
    thread hands what has queued to every sink every `flush_seconds` (sooner when `batch_size` events
    are waiting): the store gets one multi-row insert per batch, the file one write. The price is
    that an event reaches the store up to `flush_seconds` later; `close` flushes what is left.
    """

    def __init__(
        self,
        sinks: Iterable[AuditSink],
        *,
        flush_seconds: float = 0.1,
        batch_size: int = 512,
        anonymous_window_seconds: float = DEFAULT_WINDOW_SECONDS,
        anonymous_max_distinct: int = DEFAULT_MAX_DISTINCT,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> None:
        self._states = [_SinkState(sink) for sink in sinks]
        self.flush_seconds = flush_seconds
        self.batch_size = batch_size
        self.max_pending = max_pending
        self.anonymous = AnonymousRefusals(
            window_seconds=anonymous_window_seconds, max_distinct=anonymous_max_distinct
        )
        self._queue: collections.deque[AuditEvent] = collections.deque()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._recorded = 0
        self._unavailable: str | None = None

    @property
    def sinks(self) -> list[AuditSink]:
        return [state.sink for state in self._states]

    def record(self, event: AuditEvent) -> None:
        """Queue `event` for every sink; never raises (a broken sink must not turn a deny into a 500)."""
        self._queue.append(event)
        if self._thread is None or self._closed:
            self._start_or_write_through()
        elif len(self._queue) >= self.batch_size:
            self._wake.set()

    def unavailable_reason(self) -> str | None:
        """Why the trail cannot be written now (the first failing sink and its error), or `None`."""
        return self._unavailable

    async def ready(self) -> None:
        """Readiness probe: raises `AuditUnavailable` while a sink cannot write."""
        reason = self._unavailable
        if reason is not None:
            raise AuditUnavailable(f"audit trail cannot be written: {reason}")

    def stats(self) -> AuditStats:
        """The counters: events recorded and folded, and each sink's health."""
        return AuditStats(
            recorded=self._recorded,
            folded=self.anonymous.folded,
            sinks=tuple(state.health() for state in self._states),
        )

    def _start_or_write_through(self) -> None:
        try:
            if self._closed:
                self._off_loop(lambda: self._flush(final=True))  # late events are not lost
                return
            with self._lock:
                if self._thread is None and not self._closed:
                    thread = threading.Thread(target=self._run, name="audit-flusher", daemon=True)
                    thread.start()
                    self._thread = thread
        except Exception:
            logger.exception("audit flusher could not be started; events stay queued")

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self.flush_seconds)
            self._wake.clear()
            if not self._closed:
                self._flush(final=False)

    def flush(self) -> None:
        """Hand every queued event (and every pending anonymous summary) to the sinks now, and wait."""
        self._off_loop(lambda: self._flush(final=True))

    def close(self) -> None:
        """Flush, stop the flusher thread and close the sinks (later events are written through)."""
        self._closed = True
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=30)
        self._off_loop(lambda: self._flush(final=True))  # closes the sinks once it has written
        for state in self._states:
            if state.pending:
                logger.error(
                    "audit sink %s closed with %d events it could not write (%s)",
                    state.name,
                    len(state.pending),
                    state.last_error,
                )

    def _close_sinks(self) -> None:
        for state in self._states:
            close: Callable[[], object] | None = getattr(state.sink, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:
                    logger.exception("audit sink %s failed to close", state.name)

    @staticmethod
    def _off_loop(work: Callable[[], None]) -> None:
        """Run `work` on a helper thread and wait: sinks are never driven from an event-loop thread."""
        helper = threading.Thread(target=work, name="audit-flush", daemon=True)
        helper.start()
        helper.join(timeout=60)
        if helper.is_alive():
            logger.error("audit flush still running after 60 s; carrying on")

    def _flush(self, *, final: bool) -> None:
        try:
            with self._lock:
                self._flush_locked(final=final)
                if final and self._closed:
                    self._close_sinks()  # closing, or a late write-through: leave nothing open
        except Exception:  # the flusher must never die; the sinks' own failures are handled inside
            logger.exception("audit flush failed")

    def _flush_locked(self, *, final: bool) -> None:
        incoming: list[AuditEvent] = []
        while self._queue:
            incoming.append(self._queue.popleft())
        self._recorded += len(incoming)
        batch = self.anonymous.take(incoming, time.time())
        if final:
            batch += self.anonymous.drain()
        now = time.monotonic()
        for state in self._states:
            self._enqueue(state, batch)
            if state.pending and (final or now >= state.retry_at):
                self._write(state, now)
        self._unavailable = next(
            (f"{state.name}: {state.last_error}" for state in self._states if not state.healthy), None
        )

    def _enqueue(self, state: _SinkState, batch: list[AuditEvent]) -> None:
        room = self.max_pending - len(state.pending)
        if len(batch) > room:
            lost = len(batch) - max(room, 0)
            state.dropped += lost
            logger.error(
                "audit sink %s: %d events dropped, %d already waiting (%s)",
                state.name,
                lost,
                len(state.pending),
                state.last_error,
            )
            batch = batch[: max(room, 0)]
        state.pending.extend(batch)

    def _write(self, state: _SinkState, now: float) -> None:
        while state.pending:
            chunk = [state.pending[i] for i in range(min(self.batch_size, len(state.pending)))]
            try:
                placeholders = state.sink.write_batch(chunk) or 0
            except Exception as error:
                self._failed(state, error, now)
                return
            for _ in chunk:
                state.pending.popleft()
            state.written += len(chunk)
            state.placeholders += placeholders
            if not state.healthy:
                state.healthy = True
                state.backoff = 0.0
                logger.warning(
                    "audit sink %s writes again after %d failed attempts", state.name, state.failures
                )

    def _failed(self, state: _SinkState, error: Exception, now: float) -> None:
        state.failures += 1
        state.last_error = f"{type(error).__name__}: {error}"
        state.backoff = min(max(state.backoff * 2, self.flush_seconds), MAX_RETRY_SECONDS)
        state.retry_at = now + state.backoff
        if state.healthy:
            state.healthy = False
            state.logged_at = now
            logger.error(
                "audit sink %s cannot write; %d events kept to retry",
                state.name,
                len(state.pending),
                exc_info=error,
            )
        elif now - state.logged_at >= FAILURE_LOG_SECONDS:
            state.logged_at = now
            logger.error(
                "audit sink %s still cannot write (%d failed attempts, %d events waiting): %s",
                state.name,
                state.failures,
                len(state.pending),
                state.last_error,
            )
