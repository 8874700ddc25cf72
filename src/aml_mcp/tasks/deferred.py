"""The `Execution` of a process that answers requests but runs no task bodies (`role = "api"`).

Its tasks are created with no lease holder, so the first worker that claims them runs them (the
claim counts that run as the first attempt). Cancellation and answers are already stored by the
service: the worker holding the task sees them on its next heartbeat, so nothing is signalled here.
"""

from __future__ import annotations

from aml_mcp.tasks.model import TaskRecord


class DeferredExecution:
    """Leaves every task to whichever worker claims it."""

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
