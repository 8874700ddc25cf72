"""The `tasks` settings group (`AML_MCP_TASKS__<NAME>` in the environment)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

HOUR_MS = 3_600_000


class TaskSettings(BaseModel):
    """How long tasks live, how clients should poll, and how the runner executes and recovers them."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    poll_interval_ms: int = Field(default=1000, gt=0)
    """`pollIntervalMs` suggested to clients on every task."""
    default_ttl_ms: int = Field(default=HOUR_MS, gt=0)
    """Retention of a task from its creation (polls never extend it), for tools that set none; at most
    `max_ttl_ms`."""
    max_ttl_ms: int = Field(default=24 * HOUR_MS, gt=0)
    """Upper bound on any task's retention, whatever its tool asks for."""
    max_concurrent: int = Field(default=32, gt=0)
    """Task bodies running at once in this process; more wait their turn (still `working`). A body waiting
    for input holds no slot."""
    lease_ms: int = Field(default=15_000, gt=0)
    """How long a runner's claim on a task lasts without a heartbeat; after a crash, the delay
    before another runner takes the task over."""
    heartbeat_ms: int = Field(default=5_000, gt=0)
    """How often a runner renews its leases (shorter than `lease_ms`); also how soon it notices
    cancellations and answers stored by another process."""
    claim_interval_ms: int = Field(default=5_000, gt=0)
    """How often a runner looks for tasks whose lease lapsed."""
    max_attempts: int = Field(default=3, gt=0)
    """Runs an idempotent tool's task may get in all (the first one included) across crashes. A task of a
    tool not declared idempotent is never run twice: it fails instead."""
    sweep_interval_ms: int = Field(default=60_000, gt=0)
    """How often expired tasks are deleted (they are invisible from the moment they expire)."""

    @model_validator(mode="after")
    def _consistent(self) -> TaskSettings:
        if self.heartbeat_ms >= self.lease_ms:
            raise ValueError("tasks.heartbeat_ms must be shorter than tasks.lease_ms")
        if self.default_ttl_ms > self.max_ttl_ms:
            raise ValueError("tasks.default_ttl_ms must not exceed tasks.max_ttl_ms")
        return self

    def ttl_for(self, requested_ms: int | None) -> int:
        """A tool's own TTL (or the default), capped by the server maximum."""
        return min(requested_ms if requested_ms is not None else self.default_ttl_ms, self.max_ttl_ms)
