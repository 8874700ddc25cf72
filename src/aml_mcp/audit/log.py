"""The audit log: `record` queues an event, a flusher thread hands batches to the sinks.

Recording must not slow the request path: the request only queues the (immutable) event; a flusher
thread formats batches and hands them to the sinks — one multi-row insert joining the database's
next group commit (no fsync waited for), one append to the JSON-lines file. `AuditLog.record`
never raises: a failing sink is logged, and the request goes on.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Iterable, Sequence
from typing import Protocol

from aml_mcp.audit.events import AuditEvent

logger = logging.getLogger(__name__)


class AuditSink(Protocol):
    def write_batch(self, events: Sequence[AuditEvent]) -> None:
        """Take a batch of events (on the audit flusher thread). May raise; the log carries on."""


class AuditLog:
    """Where security decisions are recorded. Built once by the composition root and passed in.

    `record` only appends the (immutable) event to a queue — no formatting, no I/O, no thread
    wake-up — so auditing every request costs the request path well under a microsecond. A flusher
    thread hands what has queued to every sink every `flush_seconds` (sooner when `batch_size` events
    are waiting): the store gets one multi-row insert per batch, the file one write. The price is
    that an event reaches the store up to `flush_seconds` later; `close` flushes what is left.
    """

    def __init__(
        self, sinks: Iterable[AuditSink], *, flush_seconds: float = 0.1, batch_size: int = 512
    ) -> None:
        self.sinks = list(sinks)
        self.flush_seconds = flush_seconds
        self.batch_size = batch_size
        self._queue: collections.deque[AuditEvent] = collections.deque()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    def record(self, event: AuditEvent) -> None:
        """Queue `event` for every sink; never raises (a broken sink must not turn a deny into a 500)."""
        self._queue.append(event)
        if self._thread is None or self._closed:
            self._start_or_flush()
        elif len(self._queue) >= self.batch_size:
            self._wake.set()

    def _start_or_flush(self) -> None:
        if self._closed:
            self.flush()  # after close: write through, so late events are not lost
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="audit-flusher", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self.flush_seconds)
            self._wake.clear()
            self.flush()

    def flush(self) -> None:
        """Hand every queued event to the sinks now."""
        with self._lock:
            batch: list[AuditEvent] = []
            while self._queue:
                batch.append(self._queue.popleft())
            if not batch:
                return
            for sink in self.sinks:
                try:
                    sink.write_batch(batch)
                except Exception:
                    logger.exception("audit sink %s failed on %d events", type(sink).__name__, len(batch))

    def close(self) -> None:
        """Flush, stop the flusher thread and close the sinks (later events are written through)."""
        self._closed = True
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=10)
        self.flush()
        for sink in self.sinks:
            close = getattr(sink, "close", None)
            if callable(close):
                close()
