"""The `listen` settings group (`AML_MCP_LISTEN__<NAME>` in the environment): what one caller's
listen (re)connects may cost the server, and how long a stream may stay behind after a resync fails.

A listen (re)connect is not free: it is authorized, its task ids are looked up, and the stream
starts with the current state of every task it follows, complete results included (the Tasks
extension says a `notifications/tasks` carries what `tasks/get` would answer). A client that
reconnects in a loop would have the server re-read and re-send those states without end, so each
caller (issuer and subject, whatever client or bank it uses) has two token buckets: one for
connects, one for the bytes of current state its connects were sent. A connect is refused (HTTP
429, JSON-RPC -32012, `Retry-After`) while either is empty; refusing costs no task lookup.
The stream cap per caller is `max_listen_streams_per_principal`, at the top level.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

KIB = 1024
MIB = 1024 * KIB


class ListenSettings(BaseModel):
    """Per-caller limits on `subscriptions/listen` (re)connects, and catching streams up."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    connects_burst: int = Field(default=20, ge=1, le=100_000)
    """Listen requests one caller (issuer and subject) may make back to back; beyond it they are
    refused (429, -32012, `Retry-After`) until the bucket refills at `connects_per_second`."""
    connects_per_second: float = Field(default=2.0, gt=0, le=10_000)
    """How fast a caller's connect bucket refills: its sustained rate of listen requests."""
    state_bytes_burst: int = Field(default=8 * MIB, ge=64 * KIB)
    """Bytes of current task state (the tasks' complete results included) a caller's new streams may
    be sent back to back. A connect is admitted while the bucket is not empty, then charged what its
    current state weighed, so one large reconnect leaves the bucket in debt and the next waits."""
    state_bytes_per_second: int = Field(default=256 * KIB, gt=0)
    """How fast a caller's state-bytes bucket refills: the sustained rate at which reconnects may
    re-send current state (256 KiB/s: one 1.5 MB result about every 6 s)."""
    catch_up_seconds: float = Field(default=15.0, gt=0, le=3600)
    """How long an open stream may stay behind once a resync (after the event bus lost notifications)
    failed to re-read its tasks; still behind then, it is closed with `resync_failed`, and the
    client's new stream starts with the current state. Resyncs are retried until they succeed."""
