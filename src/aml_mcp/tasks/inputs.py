"""Input during a task, as pure functions of the stored record: asking, and taking answers.

Keys are unique over a task's life: an outstanding key is asked once and answered once; once
answered, asking the same key again returns the stored answer instead of a new request. Answers
for keys that are not outstanding (never asked, already answered) are ignored, which makes
`tasks/update` idempotent; an answer whose shape does not fit its request refuses the whole update,
so a bad request never writes half of itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aml_mcp.catalog.invocation import InputRequest, valid_response
from aml_mcp.tasks.model import TaskRecord, TaskStatus
from aml_mcp.tasks.storage import Change

WAITING_MESSAGE = "Waiting for input"
RESUMED_MESSAGE = "Input received; working"


@dataclass(frozen=True, slots=True)
class Answering:
    """What a `tasks/update` does to a task: `change` to apply, or the first `invalid` key."""

    change: Change | None
    accepted: tuple[str, ...] = ()
    invalid: str | None = None


def take_answers(task: TaskRecord, responses: Mapping[str, Any]) -> Answering:
    """Accept the responses that answer outstanding requests; back to `working` when none remain."""
    if task.terminal:
        return Answering(None)
    fitting = {key: value for key, value in responses.items() if key in task.input_requests}
    for key, value in fitting.items():
        if not valid_response(task.input_requests[key], value):
            return Answering(None, invalid=key)
    if not fitting:
        return Answering(None)
    remaining = {key: request for key, request in task.input_requests.items() if key not in fitting}
    resumed = not remaining and task.status is TaskStatus.INPUT_REQUIRED
    change = Change(
        input_requests=remaining,
        input_responses={**task.input_responses, **fitting},
        status=TaskStatus.WORKING if resumed else None,
        status_message=RESUMED_MESSAGE if resumed else None,
    )
    return Answering(change, accepted=tuple(sorted(fitting)))


def answered(task: TaskRecord, requests: Mapping[str, InputRequest]) -> dict[str, Any]:
    """The stored answers that fit `requests` (a mis-shaped carried-over answer does not count)."""
    return {
        key: task.input_responses[key]
        for key, request in requests.items()
        if key in task.input_responses and valid_response(request, task.input_responses[key])
    }


def ask(task: TaskRecord, missing: Mapping[str, InputRequest]) -> Change | None:
    """Park the task in `input_required` with `missing` outstanding; `None` if it already is."""
    if task.status is TaskStatus.INPUT_REQUIRED and all(key in task.input_requests for key in missing):
        return None
    return Change(
        status=TaskStatus.INPUT_REQUIRED,
        status_message=WAITING_MESSAGE,
        input_requests={**task.input_requests, **missing},
        # A carried-over answer that did not fit is replaced by the new request's answer.
        input_responses={k: v for k, v in task.input_responses.items() if k not in missing},
    )
