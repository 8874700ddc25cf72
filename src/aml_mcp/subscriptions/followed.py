"""Which task ids this process's open listen streams follow, so a cross-process bus can skip the rest.

Every replica hears every task's notification. Looking each one up would cost every replica a
query per status change anywhere; a stream follows a handful of ids, so the bus asks this index
first and looks up only the tasks a stream here follows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection


class FollowedTasks:
    """A multiset of followed task ids (two streams following one task count it twice)."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()

    def follow(self, task_ids: Collection[str]) -> Callable[[], None]:
        """Count `task_ids` as followed; returns an idempotent undo."""
        ids = list(task_ids)
        self._counts.update(ids)
        done = False

        def unfollow() -> None:
            nonlocal done
            if done:
                return
            done = True
            self._counts.subtract(ids)
            for task_id in ids:
                if self._counts[task_id] <= 0:
                    del self._counts[task_id]

        return unfollow

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._counts

    def __len__(self) -> int:
        return len(self._counts)
