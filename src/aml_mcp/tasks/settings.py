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
    max_concurrent_per_tenant: int = Field(default=16, gt=0)
    """Task bodies of one tenant (bank) running at once, within `max_concurrent`. Below it, a
    tenant with a long queue can never take every slot: another bank's task finds one free and
    starts at once. When slots are short, a freed slot goes to the tenant running the fewest."""
    max_concurrent_per_principal: int = Field(default=8, gt=0)
    """Task bodies of one principal (issuer, tenant, subject) running at once, within the tenant's
    share: a colleague's task is not held up behind one analyst's queue."""
    max_active_per_principal: int = Field(default=256, gt=0)
    """Unfinished (`working` or `input_required`) tasks one principal may have; a create beyond it
    is refused with a retryable JSON-RPC error (-32011) until one finishes or is cancelled."""
    max_active_per_tenant: int = Field(default=1024, gt=0)
    """Unfinished tasks one tenant may have across all its principals; beyond it, as above."""
    max_created_per_principal_per_window: int = Field(default=120, gt=0)
    """Tasks one principal may create within `create_window_seconds`, finished or not: the caps on
    unfinished tasks do not stop a flood of tasks that complete at once, each kept for its TTL. A
    create beyond it is refused with the same retryable error (-32011), whose `retryAfterMs` says
    when the oldest of those creates leaves the window. The default (an average of two a second,
    in bursts of up to 120) is far above what an analyst or a script working a case load sends (a
    batch tool takes many cases in one task), and bounds what one principal can store in an hour."""
    create_window_seconds: int = Field(default=60, gt=0, le=3600)
    """The sliding window of `max_created_per_principal_per_window`, counted from the tasks' own
    `createdAt` (the database's clock on PostgreSQL, so it holds across replicas). An expired task
    still in the window stays stored (invisible) until it leaves it, so a short TTL erases no
    evidence; hence at most an hour."""
    coalesce_identical_runs: bool = True
    """Tasks of one owner with the same idempotent tool, arguments and answers, created while an
    identical one is queued or running, take that run's result instead of running again (forty
    identical evaluations cost one run; the result reflects the data when that run started). If
    the shared run fails, is cancelled or asks for input, the waiting tasks run themselves."""
    progress_interval_ms: int = Field(default=250, ge=10, le=60_000)
    """Most often a running task's progress is written (at most one write per task per interval): a body
    may report progress at any rate, the latest report wins and is written when the interval since
    the last write has passed; each write is pushed to listen streams (`notifications/tasks`) and
    shown by `tasks/get`. A report still waiting when the body ends is kept with the task's outcome."""
    max_input_responses_bytes: int = Field(default=65_536, gt=0)
    """Most bytes (as stored JSON) of the answers kept with one task, whether gathered before it
    was created or delivered by `tasks/update`; more is refused with -32602."""

    @model_validator(mode="after")
    def _consistent(self) -> TaskSettings:
        if self.heartbeat_ms >= self.lease_ms:
            raise ValueError("tasks.heartbeat_ms must be shorter than tasks.lease_ms")
        if self.default_ttl_ms > self.max_ttl_ms:
            raise ValueError("tasks.default_ttl_ms must not exceed tasks.max_ttl_ms")
        return self

    @property
    def create_window_ms(self) -> int:
        return self.create_window_seconds * 1000

    def ttl_for(self, requested_ms: int | None) -> int:
        """A tool's own TTL (or the default), capped by the server maximum."""
        return min(requested_ms if requested_ms is not None else self.default_ttl_ms, self.max_ttl_ms)
