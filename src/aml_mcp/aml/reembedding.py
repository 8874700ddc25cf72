"""Moving tenants to the transformer's vector space in the background, with progress to show.

Why in the background: the transformer embeds ~25-30 notes/s on 2 cores, so a first start that
embedded the demo corpus before serving would keep an analyst waiting minutes. Instead the demo
(or a store from before the upgrade) is written with the static table in seconds, the server is
ready at once (lexical search and static dense search for those tenants), and this moves each
tenant to the transformer one at a time. A tenant switches in one transaction when all its
vectors are done, so a search never mixes spaces. Progress is a log line per bank (which names it)
and numbers for the metrics (`progress()`, which name no bank).

Replicas sharing one notes store move each bank once: the one that takes the bank's move lock
(`NotesBackend.moving`) embeds it, the others wait until the bank is in the target space and
meanwhile keep searching it in the old one (which the store reloads when the switch lands).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import anyio.to_thread

from aml_mcp.aml.ingest import reembed_tenant
from aml_mcp.aml.notes.model import NotesDamagedError, VectorSpaceMismatchError
from aml_mcp.aml.notes.storage import NotesBackend
from aml_mcp.aml.search.choice import Embedders

_log = logging.getLogger(__name__)
_LOG_EVERY_S = 10.0
_BATCH = 16
"""Notes per step: a stop request is seen within one step (about a second on 2 cores)."""
_ATTEMPTS = 3
"""A bank whose notes keep changing under the move is tried this often, then left for `reembed`."""
_WAIT_FOR_OTHER_S = 2.0
"""How often a replica checks whether the bank another replica moves has switched."""


@dataclass(frozen=True, slots=True)
class Progress:
    """How far the move is, in numbers only: the bank's name stays in the log."""

    banks_left: int
    """Banks not yet in the target space, the one being moved included."""
    notes_done: int
    """Notes of the bank being moved already embedded (0 while another replica moves it)."""
    notes_total: int
    """Notes of the bank being moved (0 until this process starts embedding it)."""


class _Stopped(Exception):
    """The server is shutting down: the tenant being moved keeps its old vectors."""


class BackgroundReembedding:
    """Re-embeds, one tenant after another, every tenant whose vectors another embedder made."""

    def __init__(self, store: NotesBackend, embedders: Embedders) -> None:
        self._store = store
        self._embedders = embedders
        self._stop = threading.Event()
        self._status: str | None = None
        self._progress: Progress | None = None
        self._last_log = 0.0

    def status(self) -> str | None:
        """One sentence naming the bank while work remains, None when every tenant is current.

        It names a bank: never for an anonymous endpoint (`progress()` has the numbers)."""
        return self._status

    def progress(self) -> Progress | None:
        """How far the move is while work remains, None when every tenant is current."""
        return self._progress

    def stop(self) -> None:
        self._stop.set()

    def pending(self) -> list[str]:
        """Tenants whose vectors are in another space than the primary embedder's."""
        target = self._embedders.primary.name
        return [
            t for t in self._store.tenants() if self._store.tenant(t).vector_space() not in (None, target)
        ]

    async def run(self) -> None:
        """Move every pending tenant; returns when done or stopped (never raises on shutdown)."""
        try:
            tenants = await anyio.to_thread.run_sync(self.pending)
        except NotesDamagedError:
            return
        started = time.monotonic()
        for number, tenant in enumerate(tenants, start=1):
            label = f"bank {number} of {len(tenants)} ({tenant})"
            self._status = f"full dense quality pending: re-embedding {label}; lexical search meanwhile"
            self._progress = Progress(banks_left=len(tenants) - number + 1, notes_done=0, notes_total=0)
            for attempt in range(1, _ATTEMPTS + 1):
                try:
                    await anyio.to_thread.run_sync(self._move, tenant, label)
                    break
                except _Stopped:
                    _log.info("re-embedding stopped at shutdown; %s resumes on the next start", tenant)
                    return
                except NotesDamagedError:
                    return
                except (ValueError, VectorSpaceMismatchError) as exc:
                    # Notes were ingested or replaced while the bank was being embedded: start over.
                    _log.info("re-embedding %s again (attempt %d): %s", tenant, attempt + 1, exc)
                except Exception:
                    _log.exception("re-embedding %s failed; it stays in its current space", tenant)
                    break
        if tenants:
            _log.info(
                "re-embedding done: %d bank(s) in %.0f s; full dense quality reached",
                len(tenants),
                time.monotonic() - started,
            )
        self._status = None
        self._progress = None

    def _move(self, tenant: str, label: str) -> None:
        left = self._progress.banks_left if self._progress is not None else 1

        def progress(done: int, total: int) -> None:
            if self._stop.is_set():
                raise _Stopped
            self._progress = Progress(banks_left=left, notes_done=done, notes_total=total)
            self._status = (
                f"full dense quality pending: re-embedding {label}, {done}/{total} notes; "
                "lexical and static dense search meanwhile"
            )
            now = time.monotonic()
            if now - self._last_log >= _LOG_EVERY_S or done == total:
                self._last_log = now
                _log.info("re-embedding %s: %d/%d notes", label, done, total)

        if self._stop.is_set():
            raise _Stopped
        target = self._embedders.primary.name
        while True:
            with self._store.moving(tenant) as mine:
                if mine:
                    reembed_tenant(self._store, tenant, self._embedders.primary, progress, batch=_BATCH)
                    return
            self._status = (
                f"full dense quality pending: another replica is re-embedding {label}; "
                "lexical and static dense search meanwhile"
            )
            if self._store.tenant(tenant).vector_space() in (None, target):
                return
            if self._stop.wait(_WAIT_FOR_OTHER_S):
                raise _Stopped
