"""Input decisions as pure functions of the record."""

from __future__ import annotations

from aml_mcp.catalog.invocation import elicit_form
from aml_mcp.tasks.inputs import RESUMED_MESSAGE, WAITING_MESSAGE, answered, ask, take_answers
from aml_mcp.tasks.model import TaskStatus
from tests.tasks.factories import owner, record

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}}
REQUEST = elicit_form("Name?", SCHEMA)
YES = {"action": "accept", "content": {"name": "n"}}


def test_asking_parks_the_task_and_asking_again_changes_nothing() -> None:
    task = record(owner(), now=0)
    change = ask(task, {"k": REQUEST})
    assert change is not None and change.status is TaskStatus.INPUT_REQUIRED
    assert change.input_requests == {"k": REQUEST} and change.status_message == WAITING_MESSAGE
    parked = record(owner(), now=0, status=TaskStatus.INPUT_REQUIRED, input_requests={"k": REQUEST})
    assert ask(parked, {"k": REQUEST}) is None


def test_answers_are_taken_for_outstanding_keys_only() -> None:
    parked = record(
        owner(), now=0, status=TaskStatus.INPUT_REQUIRED, input_requests={"a": REQUEST, "b": REQUEST}
    )
    partial = take_answers(parked, {"a": YES, "never-asked": YES})
    assert partial.accepted == ("a",) and partial.change is not None
    assert partial.change.status is None and partial.change.input_requests == {"b": REQUEST}
    assert take_answers(parked, {"never-asked": YES}).change is None
    full = take_answers(parked, {"a": YES, "b": YES})
    assert full.change is not None and full.change.status is TaskStatus.WORKING
    assert full.change.status_message == RESUMED_MESSAGE


def test_a_misshapen_answer_refuses_the_whole_update() -> None:
    parked = record(
        owner(), now=0, status=TaskStatus.INPUT_REQUIRED, input_requests={"a": REQUEST, "b": REQUEST}
    )
    for bad in (12345, None, "yes", {"action": "maybe"}, []):
        verdict = take_answers(parked, {"a": YES, "b": bad})
        assert verdict.change is None and verdict.invalid == "b"


def test_terminal_tasks_take_no_answers() -> None:
    done = record(
        owner(), now=0, status=TaskStatus.COMPLETED, result={"content": []}, input_requests={"a": REQUEST}
    )
    assert take_answers(done, {"a": YES}).change is None


def test_stored_answers_count_only_when_they_fit_the_request() -> None:
    task = record(owner(), now=0, input_responses={"a": YES, "b": 5})
    assert answered(task, {"a": REQUEST, "b": REQUEST, "c": REQUEST}) == {"a": YES}
    change = ask(task, {"b": REQUEST})
    assert change is not None and change.input_responses == {"a": YES}
