"""The task lifecycle as seen by callers: create, get, update, cancel — always for one owner.

Every operation names the caller's `Owner`; the store filters by it in the query itself, so a
task id that belongs to somebody else is, here and everywhere below, simply not found. The
protocol layer (`handlers`) adds negotiation, routing headers, errors and audit on top.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from aml_mcp.catalog.tools import ToolSpec
from aml_mcp.principal import Owner, Principal
from aml_mcp.tasks.clock import Clock
from aml_mcp.tasks.inputs import Answering, take_answers
from aml_mcp.tasks.model import TaskRecord, TaskStatus, new_task_id
from aml_mcp.tasks.settings import TaskSettings
from aml_mcp.tasks.store import Change, TaskStore
from aml_mcp.tasks.transitions import apply_change

CANCELLED_MESSAGE = "Cancelled at the client's request"


class Execution(Protocol):
    """What the service needs from whoever runs task bodies (the in-process runner today)."""

    @property
    def holder(self) -> str:
        """The lease-holder name new tasks are created under."""

    def submit(self, task: TaskRecord) -> None:
        """Start running a freshly created (already committed) task."""

    def cancel_requested(self, task_id: str) -> None:
        """A client asked to cancel: stop the body promptly if it runs here."""

    def answers_arrived(self, task_id: str) -> None:
        """New input responses were stored: wake the body if it waits for them here."""


class UpdateVerdict(StrEnum):
    NOT_FOUND = "not_found"
    ACCEPTED = "accepted"
    INVALID = "invalid_response"


@dataclass(frozen=True, slots=True)
class UpdateOutcome:
    verdict: UpdateVerdict
    accepted: tuple[str, ...] = ()
    invalid_key: str | None = None


class CancelVerdict(StrEnum):
    NOT_FOUND = "not_found"
    ALREADY_TERMINAL = "terminal"
    REQUESTED = "requested"


class TaskService:
    def __init__(self, store: TaskStore, execution: Execution, settings: TaskSettings, clock: Clock) -> None:
        self._store = store
        self._execution = execution
        self._settings = settings
        self._clock = clock

    async def create(
        self,
        tool: ToolSpec,
        arguments: Mapping[str, Any],
        *,
        principal: Principal,
        client_capabilities: Mapping[str, Any],
        answers: Mapping[str, Any],
    ) -> TaskRecord:
        """Store a new `working` task durably, then start it; the record returned is what was committed."""
        now = self._clock.now_ms()
        ttl = self._settings.ttl_for(tool.task_ttl_ms)
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
            lease_holder=self._execution.holder,
            lease_expires_at=now + self._settings.lease_ms,
            attempts=1,
        )
        await self._store.create(task)
        self._execution.submit(task)
        return task

    async def get(self, task_id: str, owner: Owner) -> TaskRecord | None:
        return await self._store.find(task_id, owner, self._clock.now_ms())

    async def scope_of(self, task_id: str, owner: Owner) -> str | None:
        return await self._store.scope_of(task_id, owner, self._clock.now_ms())

    async def update(self, task_id: str, owner: Owner, responses: Mapping[str, Any]) -> UpdateOutcome:
        """Deliver input responses; unknown and already-answered keys are ignored (idempotent)."""
        verdict: list[Answering] = []

        def decide(task: TaskRecord) -> Change | None:
            verdict[:] = [take_answers(task, responses)]
            return verdict[0].change

        applied = await apply_change(self._store, self._clock, task_id, owner, decide)
        if applied is None:
            return UpdateOutcome(UpdateVerdict.NOT_FOUND)
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

        applied = await apply_change(self._store, self._clock, task_id, owner, decide, lease_free=unleased)
        if applied is None:
            return CancelVerdict.NOT_FOUND
        if applied.seen.terminal:
            return CancelVerdict.ALREADY_TERMINAL
        self._execution.cancel_requested(task_id)
        return CancelVerdict.REQUESTED
