"""The task lifecycle as seen by callers: create, get, update, cancel — always for one owner.

Every operation names the caller's `Owner`; the store filters by it in the query itself, so a
task id that belongs to somebody else is, here and everywhere below, simply not found. The
protocol layer (`handlers`) adds negotiation, routing headers, errors and audit on top.

Two refusals are decided here because they need the store's numbers: a create beyond the
caller's or its tenant's cap on unfinished tasks, or beyond the caller's creates allowed within the
create window (retryable -32011 either way), and answers bigger than `max_input_responses_bytes`
(-32602). A storage failure becomes one retryable error (-32010),
whatever the operation, instead of a generic internal error.

A create may carry the caller's idempotency key: the same owner sending the same key again is
answered with the task the first create made (while it is retained), never a second one.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from aml_mcp.catalog.tools import ToolSpec
from aml_mcp.principal import Owner, Principal
from aml_mcp.protocol.errors import invalid_params, storage_unavailable, too_many_creates, too_many_tasks
from aml_mcp.tasks.clock import Clock
from aml_mcp.tasks.inputs import Answering, take_answers
from aml_mcp.tasks.model import TaskRecord, TaskStatus, new_task_id
from aml_mcp.tasks.settings import TaskSettings
from aml_mcp.tasks.storage import (
    Change,
    CreateRateExceeded,
    QuotaExceeded,
    StorageUnavailable,
    TaskQuota,
    TaskStore,
)
from aml_mcp.tasks.transitions import apply_change

CANCELLED_MESSAGE = "Cancelled at the client's request"
KEY_REUSED = "idempotency key reused with other arguments"
"""The refusal of a create whose idempotency key names a task of another tool or arguments."""


@dataclass(frozen=True, slots=True)
class Created:
    """What a create stands for: the task, and whether an earlier create with the same idempotency
    key had already made it (`repeated`: nothing was stored or started this time)."""

    task: TaskRecord
    repeated: bool


class Execution(Protocol):
    """What the service needs from whoever runs task bodies (the in-process runner today)."""

    @property
    def holder(self) -> str | None:
        """The lease-holder name new tasks are created under; `None` leaves them for any runner to claim."""

    def submit(self, task: TaskRecord) -> None:
        """Start running a freshly created (already committed) task."""

    def cancel_requested(self, task_id: str) -> None:
        """A client asked to cancel: stop the body promptly if it runs here."""

    def answers_arrived(self, task_id: str) -> None:
        """New input responses were stored: wake the body if it waits for them here."""


class DeferredExecution:
    """The `Execution` of a process that answers requests but runs no bodies (`role = "api"`).

    Its tasks are created with no lease holder, so the first worker that claims them runs them
    (that claim counts as the first attempt). Cancellation and answers are stored by the service
    and reach the holding worker with its next heartbeat, so nothing is signalled here.
    """

    @property
    def holder(self) -> None:
        """No holder: the task is claimable from the moment it commits."""
        return None

    def submit(self, task: TaskRecord) -> None:
        """Nothing to start here: a worker claims the committed row."""

    def cancel_requested(self, task_id: str) -> None:
        """The stored request reaches the holding worker with its next heartbeat."""

    def answers_arrived(self, task_id: str) -> None:
        """The stored answers reach the holding worker with its next heartbeat."""


class UpdateVerdict(StrEnum):
    NOT_FOUND = "not_found"
    ACCEPTED = "accepted"
    INVALID = "invalid_response"
    TOO_LARGE = "too_large"


@dataclass(frozen=True, slots=True)
class UpdateOutcome:
    verdict: UpdateVerdict
    accepted: tuple[str, ...] = ()
    invalid_key: str | None = None


class CancelVerdict(StrEnum):
    NOT_FOUND = "not_found"
    ALREADY_TERMINAL = "terminal"
    REQUESTED = "requested"


def stored_size(answers: Mapping[str, Any]) -> int:
    """Bytes `answers` take as the store keeps them (compact JSON, UTF-8)."""
    text = json.dumps(answers, separators=(",", ":"), ensure_ascii=False)
    return len(text.encode("utf-8", "surrogatepass"))


def answers_too_large(limit: int) -> str:
    return f"inputResponses too large: the answers kept with one task may take at most {limit} bytes"


@contextlib.contextmanager
def storage_errors() -> Iterator[None]:
    """A storage failure reaches the client as the one retryable storage error, never as -32603."""
    try:
        yield
    except StorageUnavailable as exc:
        raise storage_unavailable(exc.cause) from exc


class TaskService:
    def __init__(self, store: TaskStore, execution: Execution, settings: TaskSettings, clock: Clock) -> None:
        self._store = store
        self._execution = execution
        self._settings = settings
        self._clock = clock
        self._quota = TaskQuota(
            active_per_principal=settings.max_active_per_principal,
            active_per_tenant=settings.max_active_per_tenant,
            created_per_principal=settings.max_created_per_principal_per_window,
            window_ms=settings.create_window_ms,
        )

    @property
    def max_input_responses_bytes(self) -> int:
        return self._settings.max_input_responses_bytes

    async def create(
        self,
        tool: ToolSpec,
        arguments: Mapping[str, Any],
        *,
        principal: Principal,
        client_capabilities: Mapping[str, Any],
        answers: Mapping[str, Any],
        idempotency_key: str | None = None,
    ) -> Created:
        """Store a new `working` task durably, then start it; the record returned is what was committed.

        `answers` are those the call's preflight asked for (never unsolicited ones); over
        `max_input_responses_bytes` the call is refused. So is a create beyond the owner's caps on
        unfinished tasks or on creates within the window, with a retryable error that says how to
        get below them.

        With `idempotency_key`, a create the same owner already made with that key (and not yet
        expired) is answered with that task, whatever its state, and nothing new is stored, counted
        or started: a client that lost the answer to a create retries it safely. The key names one
        call: a repeat for another tool or with other arguments is refused (-32602) rather than
        answered with a task that does not do what it asks. Answers and capabilities of a repeat
        are not compared: the first create's are the task's.
        """
        if stored_size(answers) > self._settings.max_input_responses_bytes:
            raise invalid_params(answers_too_large(self._settings.max_input_responses_bytes))
        now = self._clock.now_ms()
        ttl = self._settings.ttl_for(tool.task_ttl_ms)
        holder = self._execution.holder
        task = TaskRecord(
            task_id=new_task_id(),
            owner=principal.owner,
            tool=tool.name,
            scope=tool.scope,
            arguments=dict(arguments),
            client_capabilities=dict(client_capabilities),
            status=TaskStatus.WORKING,
            input_responses=dict(answers),
            created_at=now,
            updated_at=now,
            ttl_ms=ttl,
            expires_at=now + ttl,
            lease_holder=holder,
            lease_expires_at=None if holder is None else now + self._settings.lease_ms,
            attempts=0 if holder is None else 1,  # a claim counts the first run
        )
        with storage_errors():
            try:
                held = await self._store.create(task, self._quota, idempotency_key=idempotency_key)
            except CreateRateExceeded as exc:
                window_seconds = self._settings.create_window_seconds
                raise too_many_creates(exc.limit, window_seconds, exc.retry_after_ms) from None
            except QuotaExceeded as exc:
                holder = "you" if exc.per == "principal" else "your institution"
                raise too_many_tasks(holder, exc.limit, self._settings.poll_interval_ms) from None
        if held.task_id != task.task_id:
            if held.tool != tool.name or held.arguments != task.arguments:
                raise invalid_params(KEY_REUSED)
            return Created(held, repeated=True)
        self._execution.submit(task)
        return Created(task, repeated=False)

    async def get(self, task_id: str, owner: Owner) -> TaskRecord | None:
        with storage_errors():
            return await self._store.find(task_id, owner, self._clock.now_ms())

    async def scope_of(self, task_id: str, owner: Owner) -> str | None:
        with storage_errors():
            return await self._store.scope_of(task_id, owner, self._clock.now_ms())

    async def update(self, task_id: str, owner: Owner, responses: Mapping[str, Any]) -> UpdateOutcome:
        """Deliver input responses; unknown and already-answered keys are ignored (idempotent).

        Answers that would take the task's stored answers over `max_input_responses_bytes` are
        refused whole (`TOO_LARGE`), like a misshapen one: nothing of the update is kept.
        """
        verdict: list[Answering] = []
        limit = self._settings.max_input_responses_bytes
        too_large: list[bool] = [False]

        def decide(task: TaskRecord) -> Change | None:
            answering = take_answers(task, responses)
            change = answering.change
            too_large[0] = (
                change is not None
                and change.input_responses is not None
                and stored_size(change.input_responses) > limit
            )
            verdict[:] = [answering]
            return None if too_large[0] else change

        with storage_errors():
            applied = await apply_change(self._store, self._clock, task_id, owner, decide)
        if applied is None:
            return UpdateOutcome(UpdateVerdict.NOT_FOUND)
        if too_large[0]:
            return UpdateOutcome(UpdateVerdict.TOO_LARGE)
        answering = verdict[0] if verdict else Answering(None)
        if answering.invalid is not None:
            return UpdateOutcome(UpdateVerdict.INVALID, invalid_key=answering.invalid)
        if applied.changed:
            self._execution.answers_arrived(task_id)
        return UpdateOutcome(UpdateVerdict.ACCEPTED, accepted=answering.accepted if applied.changed else ())

    async def cancel(self, task_id: str, owner: Owner) -> CancelVerdict:
        """Record the intent to cancel; a task nobody is running is cancelled on the spot.

        A terminal task is acknowledged and left exactly as it is.
        """
        now = self._clock.now_ms

        def unleased(task: TaskRecord) -> bool:
            return task.lease_holder is None or (task.lease_expires_at or 0) <= now()

        def decide(task: TaskRecord) -> Change | None:
            if unleased(task):
                return Change(
                    status=TaskStatus.CANCELLED, status_message=CANCELLED_MESSAGE, cancel_requested=True
                )
            if task.cancel_requested:
                return None
            return Change(cancel_requested=True, touch=False)

        with storage_errors():
            applied = await apply_change(
                self._store, self._clock, task_id, owner, decide, lease_free=unleased
            )
        if applied is None:
            return CancelVerdict.NOT_FOUND
        if applied.seen.terminal:
            return CancelVerdict.ALREADY_TERMINAL
        self._execution.cancel_requested(task_id)
        return CancelVerdict.REQUESTED
