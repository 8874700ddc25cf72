"""Our `subscriptions/listen` handler: one listen request is one stream of notifications.

The SDK's own handler has a closed event vocabulary and no notion of who is listening, so this
one is written on the low-level hook. The acknowledgement is always the first message, every
message carries the listen request's JSON-RPC id as its subscription id, and nothing the client
did not ask for is ever sent.
"""

from __future__ import annotations

import logging
from typing import Any, cast

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server.context import ServerRequestContext
from pydantic import BaseModel, ConfigDict

from aml_mcp.protocol.errors import invalid_params
from aml_mcp.subscriptions.bus import EventBus
from aml_mcp.subscriptions.events import Event, ListChanged, ResourceUpdated

logger = logging.getLogger(__name__)

SUBSCRIPTION_ID_KEY = "io.modelcontextprotocol/subscriptionId"

LIST_FILTERS: dict[str, str] = {
    "toolsListChanged": "tools",
    "promptsListChanged": "prompts",
    "resourcesListChanged": "resources",
}
RESOURCE_FILTER = "resourceSubscriptions"


class ListenParams(types.RequestParams):
    """Kept raw: the filter is validated here, where an unknown key is an error rather than ignored."""

    model_config = ConfigDict(extra="allow")
    notifications: Any = None


class _Notification(BaseModel):
    """A wire notification; the SDK's session serialises any model with `method` and `params`."""

    method: str
    params: dict[str, Any]


class ListenHandler:
    """Serves listen streams from an event bus.

    `served` names the list kinds this server actually has (a filter for another kind is dropped
    from the acknowledgement, never echoed as if it could fire).
    """

    def __init__(self, bus: EventBus, *, served: frozenset[str], queue_size: int = 256) -> None:
        self._bus = bus
        self._served = served
        self._queue_size = queue_size
        self._streams: set[MemoryObjectSendStream[Event]] = set()

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    def close_all(self) -> None:
        """Ends every stream gracefully: each sends its final `subscriptions/listen` result and closes."""
        for stream in list(self._streams):
            stream.close()

    def _honored(self, requested: Any) -> dict[str, Any]:
        if not isinstance(requested, dict):
            raise invalid_params("notifications must be an object")
        unknown = sorted(key for key in requested if key not in LIST_FILTERS and key != RESOURCE_FILTER)
        if unknown:
            raise invalid_params(f"Unknown subscription filter: {', '.join(unknown)}")
        honored: dict[str, Any] = {}
        for key, kind in LIST_FILTERS.items():
            value = requested.get(key)
            if value is not None and not isinstance(value, bool):
                raise invalid_params(f"{key} must be a boolean")
            if value and kind in self._served:
                honored[key] = True
        uris = requested.get(RESOURCE_FILTER)
        if uris is not None:
            if not isinstance(uris, list) or not all(isinstance(uri, str) and uri for uri in uris):
                raise invalid_params(f"{RESOURCE_FILTER} must be a list of URIs")
            if uris and "resources" in self._served:
                honored[RESOURCE_FILTER] = list(dict.fromkeys(uris))
        return honored

    async def __call__(self, ctx: ServerRequestContext[Any, Any], params: ListenParams) -> dict[str, Any]:
        subscription_id = ctx.request_id
        if subscription_id is None:
            raise invalid_params("subscriptions/listen must be a request with an id")
        honored = self._honored(params.notifications)
        kinds = {LIST_FILTERS[key] for key in LIST_FILTERS if key in honored}
        uris = frozenset(honored.get(RESOURCE_FILTER, ()))
        meta = {SUBSCRIPTION_ID_KEY: subscription_id}

        send, receive = anyio.create_memory_object_stream[Event](self._queue_size)

        def deliver(event: Event) -> None:
            wanted = (isinstance(event, ListChanged) and event.kind in kinds) or (
                isinstance(event, ResourceUpdated) and event.uri in uris
            )
            if not wanted:
                return
            try:
                send.send_nowait(event)
            except anyio.WouldBlock:
                logger.warning("listen stream %r fell behind; closing it", subscription_id)
                self._streams.discard(send)
                send.close()
            except anyio.ClosedResourceError:
                pass

        async def emit(method: str, body: dict[str, Any]) -> None:
            notification = _Notification(method=method, params={**body, "_meta": meta})
            await ctx.session.send_notification(cast(Any, notification), related_request_id=subscription_id)

        unsubscribe = self._bus.subscribe(deliver)
        self._streams.add(send)
        try:
            await emit("notifications/subscriptions/acknowledged", {"notifications": honored})
            async for event in receive:
                if isinstance(event, ListChanged):
                    await emit(f"notifications/{event.kind}/list_changed", {})
                else:
                    await emit("notifications/resources/updated", {"uri": event.uri})
        finally:
            unsubscribe()
            self._streams.discard(send)
            send.close()
            receive.close()
        return {"resultType": "complete", "_meta": meta}
