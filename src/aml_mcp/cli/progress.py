"""How the CLI shows a task's progress on stderr: a live bar on a terminal, plain lines otherwise.

The Tasks extension has no numeric progress, only a status and a message. aml-mcp adds it to the
task's `_meta` (`"aml-mcp/progress": {"done": n, "total": m}`), which drives the bar when present;
from another server, a message that reads `n/m` (`drafted 12/43 cases`) does, and any other shows
as an indeterminate bar.

Everything shown here comes from the server, so it goes through `terminal_text` (controls and
escape sequences shown escaped) and, for the live bar, through rich's markup escaping too: rich
reads `[bold]`, `[link=...]` in a string as markup, which a server must not be able to write.
"""

from __future__ import annotations

import re
from typing import Protocol, TextIO, TypeGuard

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from aml_mcp.client import TaskState
from aml_mcp.client.terminal import terminal_text

_FRACTION = re.compile(r"(\d+)\s*/\s*(\d+)")
PROGRESS_META_KEY = "aml-mcp/progress"


def fraction(state: TaskState) -> tuple[int, int] | None:
    """(done, total) of a task's progress: its structured `_meta` progress when it is a sound pair
    of numbers (the server is not trusted to send one), else an `n/m` in its message, else None."""
    given = (state.meta or {}).get(PROGRESS_META_KEY)
    if isinstance(given, dict):
        done, total = given.get("done"), given.get("total")
        if _count(done) and _count(total) and total > 0 and done <= total:
            return done, total
    found = _FRACTION.search(state.status_message or "")
    return (int(found.group(1)), int(found.group(2))) if found else None


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class Reporter(Protocol):
    def show(self, state: TaskState) -> None: ...

    def note(self, text: str) -> None: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def close(self) -> None: ...


def _line(state: TaskState) -> str:
    message = f" — {terminal_text(state.status_message)}" if state.status_message else ""
    return f"task {terminal_text(state.task_id)}: {terminal_text(state.status)}{message}"


class PlainReporter:
    """One line per change, for logs and pipes."""

    def __init__(self, out: TextIO) -> None:
        self._out = out

    def show(self, state: TaskState) -> None:
        print(_line(state), file=self._out, flush=True)

    def note(self, text: str) -> None:
        print(terminal_text(text), file=self._out, flush=True)

    def pause(self) -> None:
        return None

    def resume(self) -> None:
        return None

    def close(self) -> None:
        return None


class LiveReporter:
    """A rich progress bar with the task's status and message, redrawn in place."""

    def __init__(self, out: TextIO) -> None:
        self._console = Console(file=out, stderr=True)
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.fields[status]}"),
            BarColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=self._console,
            transient=False,
        )
        self._bar: TaskID | None = None
        self._progress.start()

    def show(self, state: TaskState) -> None:
        message = state.status_message or ""
        progress = fraction(state)
        shown, status = escape(terminal_text(message)), escape(terminal_text(state.status))
        done, total = progress if progress is not None else (None, None)
        if state.terminal:
            done, total = (1, 1) if state.status == "completed" else (done, total)
        if self._bar is None:
            self._bar = self._progress.add_task(shown, total=total, status=status)
        self._progress.update(self._bar, description=shown, status=status, total=total, completed=done or 0)

    def note(self, text: str) -> None:
        self._console.print(terminal_text(text), markup=False, highlight=False)

    def pause(self) -> None:
        self._progress.stop()

    def resume(self) -> None:
        self._progress.start()

    def close(self) -> None:
        self._progress.stop()


def reporter_for(out: TextIO) -> Reporter:
    return LiveReporter(out) if out.isatty() else PlainReporter(out)
