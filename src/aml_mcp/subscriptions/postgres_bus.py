"""`EventBus` across processes, on PostgreSQL LISTEN/NOTIFY.

Task stores on PostgreSQL send `NOTIFY aml_task_events` inside the transaction of every status
change, with ids only (task id, version, owner). Each process keeps one dedicated autocommit
connection that LISTENs, turns each notification into a local event, and fans it out to its own
subscribers (the listen streams), exactly as `LocalEventBus` does. `publish` stays local: the
events a process publishes itself (list changes, access changes) concern its own streams, and task
changes reach every process through the database.

- **Lookup, owner-scoped, only when followed here.** A notification carries no state. Tasks no
  stream of this process follows (`FollowedTasks`) are skipped without a query; for the others,
  `resolve(task_id, owner)` reads the task by id *and* owner (the rule of `tasks/get`) and returns
  the event to fan out, or `None`.
  Streams drop a version not newer than the last one they sent, so notifications that arrive late,
  twice, or after a resync already delivered the state do no harm.
- **Liveness.** `notifies(timeout=...)` returns every `liveness_seconds`; a `SELECT 1` then proves
  the connection is alive. TCP keepalives catch a silent network.
- **Reconnect = resync, owed until it succeeds.** NOTIFY is never replayed: whatever was sent
  while the connection was down is lost. After every (re)connect, once LISTEN is in place again,
  the pool's idle connections are checked (a reset killed them too) and every registered resync
  callback runs (listen streams re-read their tasks' current state), so no final state is lost.
  A callback that fails is *owed*: it is run again, with jittered exponential backoff up to
  `max_backoff_seconds`, until it succeeds, and a round counts in `resyncs` only once every
  callback owed has succeeded. Reconnects back off the same way. Notifications dropped because the
  lookups fell `backlog` behind are treated like a reconnect: a resync once the backlog drained.
- **A failed lookup is retried, then owed.** A notified task whose lookup fails (its pooled
  connection died with the listener's) is looked up again, `lookup_attempts` times in all with
  backoff; if it still fails, a resync is owed, which re-reads every followed task until it works.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import psycopg
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from psycopg import sql

from aml_mcp.listeners import Listeners
from aml_mcp.principal import Owner
from aml_mcp.store.outage import OutageLog
from aml_mcp.store.postgres import PostgresDatabase
from aml_mcp.subscriptions.bus import Listener
from aml_mcp.subscriptions.events import Event
from aml_mcp.subscriptions.followed import FollowedTasks

logger = logging.getLogger(__name__)

TASK_CHANNEL = "aml_task_events"
"""The task store's channel (`tasks.storage.postgres.CHANNEL`), as this deployment names it."""
Resolver = Callable[[str, Owner], Awaitable[Event | None]]
Signal = Callable[[str], None]
"""Called with the payload of each notification on an extra channel (`on_signal`), on the event
loop: it must not block (a wake-up, a comparison), and nothing is looked up for it."""
Resync = Callable[[], Awaitable[None]]
Jitter = Callable[[], float]
"""A number in [0, 1): how far into the second half of a backoff a retry waits (spreads retries
of many processes after one reset)."""


def _signal(hooks: dict[object, Signal], payload: str) -> None:
    for hook in list(hooks.values()):
        try:
            hook(payload)
        except Exception:
            logger.exception("a signal hook raised; the others still run")


def listener_name(schema: str | None) -> str:
    """The listener connection's `application_name`: operators (and fault tests) find it by this."""
    return "aml-mcp listener" + (f" {schema}" if schema else "")


def parse_payload(payload: str) -> tuple[str, Owner] | None:
    """(task id, owner) from a task notification, or `None` when it names no owner or is malformed."""
    try:
        body = json.loads(payload)
        task_id, owner = body["id"], body["o"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(task_id, str) or not isinstance(owner, list) or len(owner) != 4:
        return None
    if not all(isinstance(part, str) for part in owner):
        return None
    return task_id, Owner(*owner)


class PgEventBus:
    """Fan-out of local events plus task changes committed by any process on the database."""

    def __init__(
        self,
        database: PostgresDatabase,
        *,
        resolve: Resolver,
        followed: FollowedTasks | None = None,
        liveness_seconds: float = 1.0,
        first_backoff_seconds: float = 0.05,
        max_backoff_seconds: float = 2.0,
        lookups_at_once: int = 8,
        lookup_attempts: int = 4,
        backlog: int = 10_000,
        jitter: Jitter = random.random,
    ) -> None:
        self._db = database
        self._resolve = resolve
        self._followed = followed
        self._liveness = liveness_seconds
        self._first_backoff = first_backoff_seconds
        self._max_backoff = max_backoff_seconds
        self._lookups_at_once = lookups_at_once
        self._lookup_attempts = max(1, lookup_attempts)
        self._backlog = backlog
        self._jitter = jitter
        self._overflowed = False
        """A notification was dropped (backlog full): resync at the next liveness tick."""
        self._listeners: Listeners[[Event]] = Listeners()
        self._resync_hooks: dict[object, Resync] = {}
        self._owed: dict[object, int] = {}
        """Resync hooks owed a successful run, each with the number of the request that owes it (a
        run that started before a newer request does not pay that one)."""
        self._requests = 0
        self._paying = anyio.Lock()
        self._outage = OutageLog(
            logger,
            down="event bus resync failed ({error}); streams are re-read with backoff until it works",
            up="event bus resync done again (last failure: {cause})",
        )
        self._retry_kicks: MemoryObjectSendStream[None] | None = None
        """Wakes the retry of owed hooks (set while `running`)."""
        self._channel_hooks: dict[
            str, tuple[Resync, MemoryObjectSendStream[None], MemoryObjectReceiveStream[None]]
        ] = {}
        self._signals: dict[str, dict[object, Signal]] = {}
        self._connection: psycopg.AsyncConnection[Any] | None = None
        self.ready = anyio.Event()
        """Set once LISTEN is first in place and the first resync was tried (streams opened before
        that still get current state)."""
        self.connects = 0
        """Listener connections made, the first included: `connects - 1` reconnects."""
        self.resyncs = 0
        """Resync rounds completed: every hook owed ran without failing (one after every connect)."""
        self.resync_failures = 0
        """Hook runs that failed and were owed again (each retried with backoff)."""
        self.lookup_failures = 0
        """Lookups of a notified task that failed (each retried; a resync owed if all attempts fail)."""
        self.received = 0

    def publish(self, event: Event) -> None:
        self._listeners.fire(event)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        return self._listeners.add(listener)

    def on_resync(self, hook: Resync) -> Callable[[], None]:
        """Run `hook` after every (re)connect, once LISTEN is in place; returns an idempotent remove."""
        token = object()
        self._resync_hooks[token] = hook

        def remove() -> None:
            self._resync_hooks.pop(token, None)
            self._owed.pop(token, None)

        return remove

    def on_notify(self, channel: str, hook: Resync) -> None:
        """Also LISTEN on `channel` (a full channel name) and run `hook` after a notification on it.

        Registered before `running`. Notifications arriving while `hook` runs coalesce into one
        more run, which starts after them: the hook re-reads state, it is not told what changed.
        """
        send, receive = anyio.create_memory_object_stream[None](1)
        self._channel_hooks[channel] = (hook, send, receive)

    def on_signal(self, channel: str, hook: Signal) -> Callable[[], None]:
        """Call `hook` on every notification of `channel` (this deployment's, as
        `PostgresDatabase.channel` names it), on the same listener connection (no extra connection
        per process). Register before `running()`:
        channels are LISTENed to when the connection is made. Nothing is replayed after a reconnect,
        so pair it with `on_resync` when a missed signal matters. Returns an idempotent remove."""
        hooks = self._signals.setdefault(channel, {})
        token = object()
        hooks[token] = hook

        def remove() -> None:
            hooks.pop(token, None)

        return remove

    @property
    def backend_pid(self) -> int | None:
        """The server process of the current listener connection (for operators and fault tests)."""
        conn = self._connection
        return conn.info.backend_pid if conn is not None and not conn.closed else None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Listen for the app's lifetime; entered once the database is open. Waits (bounded) for the
        first LISTEN so the first streams are followed from the start."""
        send, receive = anyio.create_memory_object_stream[str](self._backlog)
        async with anyio.create_task_group() as group:
            group.start_soon(self._listen_forever, send)
            for _ in range(self._lookups_at_once):
                group.start_soon(self._deliver, receive.clone())
            for hook, _, kicks in self._channel_hooks.values():
                group.start_soon(self._run_on_kick, hook, kicks)
            retry_send, retry_receive = anyio.create_memory_object_stream[None](1)
            self._retry_kicks = retry_send
            group.start_soon(self._retry_owed, retry_receive)
            receive.close()
            with anyio.move_on_after(10):
                await self.ready.wait()
            try:
                yield
            finally:
                group.cancel_scope.cancel()

    async def _listen_forever(self, send: MemoryObjectSendStream[str]) -> None:
        backoff = self._first_backoff
        with send:
            while True:
                connects = self.connects
                try:
                    await self._listen_once(send)
                except (psycopg.Error, OSError) as exc:
                    logger.warning("event bus listener lost its connection (%s); reconnecting", exc)
                if self.connects != connects:  # it had connected: start over with a short wait
                    backoff = self._first_backoff
                await anyio.sleep(backoff)
                backoff = min(self._max_backoff, backoff * 2)

    async def _listen_once(self, send: MemoryObjectSendStream[str]) -> None:
        options = {**self._db.connect_kwargs(), "application_name": listener_name(self._db.schema)}
        async with await psycopg.AsyncConnection.connect(self._db.url, autocommit=True, **options) as conn:
            self._connection = conn
            try:
                await conn.execute(
                    sql.SQL("LISTEN {}").format(sql.Identifier(self._db.channel(TASK_CHANNEL)))
                )
                signals = {self._db.channel(name): hooks for name, hooks in self._signals.items()}
                for channel in [*self._channel_hooks, *signals]:
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                self.connects += 1
                # Whatever the reset killed, the pool's idle connections died with it: the
                # resync's reads (and the next lookups) must not be lent a dead one.
                with contextlib.suppress(psycopg.Error, OSError, RuntimeError):
                    await self._db.pool.check()
                await self._resync()
                self.ready.set()
                while True:
                    async for notify in conn.notifies(timeout=self._liveness):
                        hooks = signals.get(notify.channel)
                        if hooks is not None:
                            _signal(hooks, notify.payload)
                            continue
                        self.received += 1
                        hooked = self._channel_hooks.get(notify.channel)
                        if hooked is not None:
                            with contextlib.suppress(anyio.WouldBlock):
                                hooked[1].send_nowait(None)  # a run already pending covers this one
                            continue
                        try:
                            send.send_nowait(notify.payload)
                        except anyio.WouldBlock:
                            if not self._overflowed:
                                logger.warning("event bus backlog full; streams resync once it drains")
                            self._overflowed = True
                    await conn.execute("SELECT 1")
                    if self._overflowed and send.statistics().current_buffer_used == 0:
                        # What was dropped is lost like a reconnect gap's notifications: re-read.
                        self._overflowed = False
                        await self._resync()
            finally:
                self._connection = None

    def owe_resync(self) -> None:
        """Owe every resync hook a run (what was announced meanwhile may be lost); they are run, and
        retried with backoff, until each has succeeded once since now."""
        self._requests += 1
        for token in self._resync_hooks:
            self._owed[token] = self._requests

    async def _resync(self) -> None:
        """Owe a resync and pay it now; what fails is retried in the background until it succeeds."""
        self.owe_resync()
        if not await self._pay():
            self._kick_retry()

    def _kick_retry(self) -> None:
        if self._retry_kicks is not None:
            with contextlib.suppress(anyio.WouldBlock):
                self._retry_kicks.send_nowait(None)  # a retry already pending covers this one

    async def _pay(self) -> bool:
        """Run every owed hook once; True when nothing is owed any more (a round completed)."""
        async with self._paying:
            if not self._owed:
                return True
            for token, request in list(self._owed.items()):
                hook = self._resync_hooks.get(token)
                if hook is None:
                    self._owed.pop(token, None)
                    continue
                try:
                    await hook()
                except Exception as exc:
                    self.resync_failures += 1
                    # Once per outage, not once per retry; each failure in full at debug level.
                    self._outage.failed(type(exc).__name__, f"{type(exc).__name__}: {exc}")
                    logger.debug("a resync hook failed", exc_info=True)
                    continue
                if self._owed.get(token) == request:
                    del self._owed[token]
            if self._owed:
                return False
            self._outage.recovered()
            self.resyncs += 1
            return True

    def _backoff(self, seconds: float) -> float:
        """`seconds` spread over its second half and first double: retries of many processes after
        one reset do not arrive together."""
        return min(self._max_backoff, seconds * (0.5 + self._jitter()))

    async def _retry_owed(self, kicks: MemoryObjectReceiveStream[None]) -> None:
        """Retries owed resync hooks with jittered exponential backoff until every one succeeded."""
        with kicks:
            async for _ in kicks:
                backoff = self._first_backoff
                while self._owed:
                    await anyio.sleep(self._backoff(backoff))
                    backoff = min(self._max_backoff, backoff * 2)
                    await self._pay()

    async def _run_on_kick(self, hook: Resync, kicks: MemoryObjectReceiveStream[None]) -> None:
        async for _ in kicks:
            try:
                await hook()
            except Exception:
                logger.exception("a notification hook failed")

    async def _deliver(self, receive: MemoryObjectReceiveStream[str]) -> None:
        with receive:
            async for payload in receive:
                if not len(self._listeners):
                    continue  # nobody listens here: no lookup
                parsed = parse_payload(payload)
                if parsed is None or (self._followed is not None and parsed[0] not in self._followed):
                    continue  # malformed, or no stream here follows it: no lookup
                event = await self._look_up(*parsed)
                if event is not None:
                    self._listeners.fire(event)

    async def _look_up(self, task_id: str, owner: Owner) -> Event | None:
        """The notified task's event, the lookup retried with backoff; when every attempt fails, a
        resync is owed (it re-reads every followed task, and is retried until it succeeds), so a
        notification is never simply dropped."""
        backoff = self._first_backoff
        for attempt in range(1, self._lookup_attempts + 1):
            try:
                return await self._resolve(task_id, owner)
            except Exception as exc:
                self.lookup_failures += 1
                if attempt == self._lookup_attempts:
                    logger.warning("could not look up a notified task (%s); a resync is owed", exc)
                    break
            await anyio.sleep(self._backoff(backoff))
            backoff = min(self._max_backoff, backoff * 2)
        self.owe_resync()
        self._kick_retry()
        return None
