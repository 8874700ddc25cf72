"""Our `subscriptions/listen` handler: one listen request is one stream of notifications.

The SDK's own handler has a closed event vocabulary and no notion of who is listening, so this
one is written on the low-level hook. The acknowledgement is always the first message; every
message carries the listen request's JSON-RPC id, exactly as sent, as its subscription id;
nothing the client did not ask for is ever sent; and before each event the stream re-checks that
its credential is still good (not expired, not revoked, still holding the scopes the event needs)
and that the event's owner is the stream's owner.

A stream ends gracefully — the `subscriptions/listen` result, with the subscription id, then the
end of the response — on server shutdown, on token expiry (a timer, not only the next event), on
revocation or lost scope, when the client reads too slowly to keep its bounded queue from
overflowing, and when the stream cannot be caught up (`resync_failed`): its tasks' current state
could not be read at connect, or, after the event bus lost notifications, not within
`catch_up_seconds` of retrying. A stream never stays open silently behind: the client reconnects
and its new stream starts with the current state. A client that drops the connection cancels the
handler, which frees everything.
Nothing is ever resumed or replayed: `Last-Event-ID` and `Mcp-Session-Id` are ignored, and a
client that reconnects sends a new listen.

Streams are bounded per caller (issuer and subject) as well as server-wide, and the slot is taken
before any task id is looked up, so one caller can neither lock everybody out of listening nor
make the server do per-id work for streams it may not open. With authentication on, a caller's
listen requests are also rate-limited (`rates.py`: connects, and bytes of current state sent):
past its rate a listen is refused before the gate looks up a single task id, and every stream
charges its caller what its current state weighed.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

import anyio
import mcp_types as types
import pydantic_core
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.context import ServerRequestContext
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from pydantic import BaseModel, ConfigDict

from aml_mcp.principal import Principal
from aml_mcp.protocol.capabilities import declared, declares_tasks
from aml_mcp.protocol.errors import invalid_params
from aml_mcp.protocol.request import request_principal
from aml_mcp.scope_rules import NO_SCOPES, ScopeRule
from aml_mcp.subscriptions.bus import EventBus
from aml_mcp.subscriptions.events import AccessChanged, Event, ListChanged, ResourceUpdated, TaskChanged
from aml_mcp.subscriptions.filters import MAX_TASK_IDS, TASK_FILTER, Accepted, TaskLookup, accept, lookupable
from aml_mcp.subscriptions.followed import FollowedTasks
from aml_mcp.subscriptions.policy import StreamPolicy
from aml_mcp.subscriptions.rates import ListenRates

logger = logging.getLogger(__name__)

CLOSE_REASON_KEY = "aml-mcp/closeReason"
RESYNC_FAILED = "resync_failed"
"""The close reason of a stream whose tasks' current state could not be read in time."""
CONNECT_ATTEMPTS = 3
"""Reads of a task's current state when a stream opens, before the stream is closed instead."""


class CatchUpFailed(Exception):
    """A resync could not re-read every open stream's tasks; the event bus retries it."""


def listen_scope_rule(tasks: TaskLookup, rates: ListenRates | None = None) -> ScopeRule:
    """Following tasks needs, as `tasks/get` does, the scope of each owned task's tool (checked at the
    gate, so a token without it gets a 403 it can step up from); ids the caller does not own need none.

    A caller past its listen rate needs none either: its listen is refused right after the gate
    (`ListenRateAdmission`), so looking its ids up would be work done for a refusal. Should the
    bucket refill in between, the handler still checks each followed task's scope before the
    acknowledgement and closes the stream (`insufficient_scope`) without sending anything."""

    async def rule(params: Mapping[str, Any], principal: Principal) -> frozenset[str]:
        if rates is not None and not rates.would_admit(principal):
            return NO_SCOPES
        notifications = params.get("notifications")
        task_ids = notifications.get(TASK_FILTER) if isinstance(notifications, Mapping) else None
        if not declares_tasks(params) or not isinstance(task_ids, list) or len(task_ids) > MAX_TASK_IDS:
            return NO_SCOPES
        needed: set[str] = set()
        # Anything but a plain id is the handler's to refuse (-32602); the gate only looks up ids.
        for task_id in dict.fromkeys(item for item in task_ids if lookupable(item)):
            needed |= await tasks.scopes_to_follow(task_id, principal)
        return frozenset(needed)

    return rule


class ListenParams(types.RequestParams):
    """Kept raw: the filter is validated here, where an unknown key is an error rather than ignored."""

    model_config = ConfigDict(extra="allow")
    notifications: Any = None


class _Notification(BaseModel):
    """A wire notification; the SDK's session serialises any model with `method` and `params`."""

    method: str
    params: dict[str, Any]


class _Stream:
    """One open stream's state, as the handler and the bus listener share it."""

    def __init__(
        self,
        principal: Principal,
        accepted: Accepted,
        queue: MemoryObjectSendStream[Event],
        policy: StreamPolicy,
    ) -> None:
        self.principal = principal
        self.accepted = accepted
        self.queue = queue
        self.policy = policy
        self.close_reason: str | None = None
        self.behind_since: float | None = None
        """When a resync first failed to re-read this stream's tasks (monotonic); `None` when caught up."""
        self.sent_versions: dict[str, int] = {}
        """The last version sent per task: an older or equal one (late, or twice) is not sent again."""

    def fresh(self, event: TaskChanged) -> bool:
        """Whether `event` is newer than what this stream sent for its task; records it if so."""
        if event.version:
            if event.version <= self.sent_versions.get(event.task_id, 0):
                return False
            self.sent_versions[event.task_id] = event.version
        return True

    def close(self, reason: str) -> None:
        if self.close_reason is None:
            self.close_reason = reason
        self.queue.close()

    def recheck(self) -> bool:
        """Close the stream if its credential no longer allows it; returns whether it is still open."""
        if self.close_reason is not None:
            return False
        reason = self.policy.denial(self.principal, self.accepted.needed)
        if reason is not None:
            self.close(reason)
            return False
        return True

    def wants(self, event: Event) -> bool:
        if isinstance(event, ListChanged):
            return event.kind in self.accepted.lists
        if isinstance(event, ResourceUpdated):
            return event.uri in self.accepted.uris
        if isinstance(event, TaskChanged):
            return event.task_id in self.accepted.tasks and event.owner == self.principal.owner
        return isinstance(event, AccessChanged)

    def offer(self, event: Event) -> None:
        if self.close_reason is not None or not self.wants(event):
            return
        if isinstance(event, AccessChanged):
            self.recheck()
            return
        try:
            self.queue.send_nowait(event)
        except anyio.WouldBlock:
            logger.warning("a listen stream fell behind its bounded queue; closing it")
            self.close("slow_consumer")
        except anyio.ClosedResourceError:
            pass


class ListenHandler:
    """Serves listen streams from an event bus, re-authorizing every event.

    `served` names the list kinds this server has (a filter for another kind is left out of the
    acknowledgement, never echoed as if it could fire).
    """

    def __init__(
        self,
        bus: EventBus,
        *,
        served: frozenset[str],
        policy: StreamPolicy,
        tasks: TaskLookup | None = None,
        resource_exists: Callable[[str], Awaitable[bool]] | None = None,
        queue_size: int = 256,
        max_streams: int = 10_000,
        max_streams_per_principal: int = 16,
        clock: Callable[[], float] = time.time,
        followed: FollowedTasks | None = None,
        catch_up_seconds: float = 15.0,
        monotonic: Callable[[], float] = time.monotonic,
        rates: ListenRates | None = None,
    ) -> None:
        self._bus = bus
        self._followed = followed
        self._served = served
        self._policy = policy
        self._tasks = tasks
        self._resource_exists = resource_exists
        self._queue_size = queue_size
        self._max_streams = max_streams
        self._max_per_caller = max_streams_per_principal
        self._clock = clock
        self._catch_up_seconds = catch_up_seconds
        self._monotonic = monotonic
        self._rates = rates
        self._streams: set[_Stream] = set()
        self._slots: dict[tuple[str, str], int] = {}
        """Streams held (or being opened) per caller."""
        self._held = 0
        """Their total, checked against `max_streams`."""

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    def close_all(self, reason: str = "shutdown") -> None:
        """Ends every stream gracefully: each sends its final `subscriptions/listen` result and closes."""
        for stream in list(self._streams):
            stream.close(reason)

    async def __call__(self, ctx: ServerRequestContext[Any, Any], params: ListenParams) -> dict[str, Any]:
        subscription_id = ctx.request_id
        if subscription_id is None:
            raise invalid_params("subscriptions/listen must be a request with an id")
        principal = request_principal(ctx)
        caller = (principal.issuer, principal.subject)
        self._take_slot(caller)
        try:
            return await self._serve(ctx, subscription_id, principal, params)
        finally:
            self._give_back_slot(caller)

    def _take_slot(self, caller: tuple[str, str]) -> None:
        """Counted synchronously, before any await, so concurrent listens cannot all slip past."""
        held = self._slots.get(caller, 0)
        if held >= self._max_per_caller:
            raise invalid_params(
                f"Too many open subscriptions for this caller (at most {self._max_per_caller}); "
                "close one before opening another"
            )
        if self._held >= self._max_streams:
            raise invalid_params("Too many open subscriptions on this server; try again later")
        self._slots[caller] = held + 1
        self._held += 1

    def _give_back_slot(self, caller: tuple[str, str]) -> None:
        self._held -= 1
        held = self._slots.get(caller, 0) - 1
        if held > 0:
            self._slots[caller] = held
        else:
            self._slots.pop(caller, None)

    async def _serve(
        self,
        ctx: ServerRequestContext[Any, Any],
        subscription_id: Any,
        principal: Principal,
        params: ListenParams,
    ) -> dict[str, Any]:
        accepted, acknowledged = await accept(
            params.notifications,
            principal=principal,
            capabilities=declared(ctx),
            served=self._served,
            resource_exists=self._resource_exists,
            tasks=self._tasks,
        )
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: subscription_id}

        async def emit(method: str, body: Mapping[str, Any]) -> None:
            notification = _Notification(method=method, params={**body, "_meta": _with_meta(body, meta)})
            await ctx.session.send_notification(cast(Any, notification), related_request_id=subscription_id)

        send, receive = anyio.create_memory_object_stream[Event](self._queue_size)
        stream = _Stream(principal, accepted, send, self._policy)
        # Subscribe before acknowledging, so nothing published meanwhile is lost; the acknowledgement
        # is still first, because only this task writes the stream and it drains the queue after.
        unsubscribe = self._bus.subscribe(stream.offer)
        unfollow = self._followed.follow(accepted.tasks) if self._followed is not None else None
        self._streams.add(stream)
        try:
            if stream.recheck():
                await emit("notifications/subscriptions/acknowledged", {"notifications": acknowledged})
                await self._send_current_task_states(stream, emit)
                await self._pump(stream, receive, emit)
        finally:
            unsubscribe()
            if unfollow is not None:
                unfollow()
            self._streams.discard(stream)
            send.close()
            receive.close()
        if stream.close_reason is not None:
            meta = {**meta, CLOSE_REASON_KEY: stream.close_reason}
        return {"resultType": "complete", "_meta": meta}

    async def _send_current_task_states(
        self, stream: _Stream, emit: Callable[[str, Mapping[str, Any]], Awaitable[None]]
    ) -> None:
        """A task may have changed between its creation and this listen: start from its current state.

        What that weighed is charged to the caller's listen rate, so reconnecting in a loop cannot
        make the server re-send large results without bound."""
        if self._tasks is None:
            return
        sent = 0
        try:
            for task_id in stream.accepted.tasks:
                current = await self._connect_snapshot(stream, task_id)
                if stream.close_reason is not None:
                    return
                if current is not None and stream.recheck() and stream.fresh(current):
                    params = _task_params(current.state)
                    if self._rates is not None:
                        sent += len(pydantic_core.to_json(params))
                    await emit("notifications/tasks", params)
        finally:
            if self._rates is not None:
                self._rates.charge(stream.principal, sent)

    async def _connect_snapshot(self, stream: _Stream, task_id: str) -> TaskChanged | None:
        """A followed task's current state, read up to `CONNECT_ATTEMPTS` times (a pooled connection
        may have died with a reset); when no read works the stream is closed (`resync_failed`): the
        client reconnects rather than waiting on a stream that missed its start."""
        assert self._tasks is not None
        for attempt in range(CONNECT_ATTEMPTS):
            try:
                return await self._tasks.snapshot(task_id, stream.principal)
            except Exception as exc:
                if attempt + 1 == CONNECT_ATTEMPTS:
                    logger.warning("a listen stream's current state could not be read (%s); closing it", exc)
                    stream.close(RESYNC_FAILED)
                    return None
            await anyio.sleep(0.1 * 2**attempt)
        return None

    async def resync(self) -> None:
        """Offer every open stream its tasks' current state again (after a cross-process bus lost
        its connection, and with it whatever was announced meanwhile). A stream sends only what is
        newer than what it sent, so a state it already has is not repeated.

        A read that fails stops the pass and raises `CatchUpFailed`, so the bus retries the whole
        resync; the streams not re-read are behind from then on, and one still behind
        `catch_up_seconds` later is closed (`resync_failed`) at the next pass instead of waiting
        silently for a final state it may have missed."""
        if self._tasks is None:
            return
        now = self._monotonic()
        streams = [stream for stream in self._streams if stream.close_reason is None]
        for stream in streams:
            if stream.behind_since is not None and now - stream.behind_since >= self._catch_up_seconds:
                logger.warning("a listen stream could not be caught up in time; closing it")
                stream.close(RESYNC_FAILED)
        streams = [stream for stream in streams if stream.close_reason is None]
        for index, stream in enumerate(streams):
            try:
                await self._catch_up(stream)
            except Exception as exc:
                for behind in streams[index:]:
                    if behind.behind_since is None:
                        behind.behind_since = now
                raise CatchUpFailed(f"{len(streams) - index} listen streams not caught up: {exc}") from exc
            stream.behind_since = None

    async def _catch_up(self, stream: _Stream) -> None:
        assert self._tasks is not None
        for task_id in stream.accepted.tasks:
            if stream.close_reason is not None:
                return
            current = await self._tasks.snapshot(task_id, stream.principal)
            if current is not None:
                stream.offer(current)

    async def _pump(
        self,
        stream: _Stream,
        receive: MemoryObjectReceiveStream[Event],
        emit: Callable[[str, Mapping[str, Any]], Awaitable[None]],
    ) -> None:
        expires_at = stream.principal.expires_at
        deadline = math.inf if expires_at is None else max(0.0, expires_at - self._clock())
        with anyio.move_on_after(deadline):
            async for event in receive:
                if not stream.recheck():
                    break
                if isinstance(event, ListChanged):
                    await emit(f"notifications/{event.kind}/list_changed", {})
                elif isinstance(event, ResourceUpdated):
                    await emit("notifications/resources/updated", {"uri": event.uri})
                elif isinstance(event, TaskChanged) and stream.fresh(event):
                    await emit("notifications/tasks", _task_params(event.state))
            return
        stream.close("token_expired")


def _task_params(state: Mapping[str, Any]) -> dict[str, Any]:
    """`notifications/tasks` carries the detailed task; `resultType` belongs to results, not notifications.

    The task's own `_meta` (its structured progress, `aml-mcp/progress`) is kept: `emit` adds the
    stream's subscription id beside it."""
    return {key: value for key, value in state.items() if key != "resultType"}


def _with_meta(body: Mapping[str, Any], stream_meta: Mapping[str, Any]) -> dict[str, Any]:
    """The `_meta` of a notification: what the body carries (a task's progress), then the stream's
    own keys, which always win (a task can never name another subscription)."""
    own = body.get("_meta")
    return {**(own if isinstance(own, Mapping) else {}), **stream_meta}
