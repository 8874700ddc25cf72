"""The machinery of the hostile-string contract (`test_hostile_strings.py`).

Every store is driven through its protocol with strings a caller could send: NUL (which PostgreSQL
`TEXT` cannot hold), a lone surrogate (which neither driver can encode), a 10,000-character string
and SQL-looking text. One rule per kind of method, the same on SQLite and PostgreSQL:

- a *lookup* matches nothing: a value no store can hold equals no stored value, so the answer is
  "not found" / empty, exactly as for an unknown value;
- a *write* of a value the store cannot keep is refused with the store's own error (a
  `ValueError`), before anything is sent; a value it can keep is kept.

Each case names the method and the parameter it puts the hostile string into, and says what both
backends answer. `uncovered` compares the cases with the protocol itself (`inspect`): a method, or
a parameter that can carry text, without a case fails the contract, so a method added later cannot
be forgotten. A method that takes no text at all is declared as such, and that declaration is
checked against its signature too.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from aml_mcp.store.text import storable

HOSTILE: dict[str, str] = {
    "nul": "\x00",
    "nul-inside": "bank-a\x00' OR '1'='1",
    "lone-surrogate": "\ud800",
    "surrogate-inside": "alice\udfff",
    "long": "x" * 10_000,
    "sql": "' OR '1'='1",
}
"""What a hostile caller sends, by name (the test ids)."""


def valid_unicode(value: str) -> bool:
    """No lone surrogate (NUL allowed): what a store keeps in a column that is not `TEXT` on
    PostgreSQL (owners as bytes, JSON documents, which escape NUL)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True)
class Refused:
    """The observation of a call that raised: the exception's exact class."""

    error: type[BaseException]

    def __repr__(self) -> str:
        return f"Refused({self.error.__module__}.{self.error.__qualname__})"


@dataclass(frozen=True)
class Case:
    """One call of `method` with the hostile string in `param`, and what every backend answers."""

    method: str
    param: str
    run: Callable[[Any, str], Any]
    """(the place under test, the hostile string) -> an observation (or an awaitable of one)."""
    expect: Callable[[str], object]
    """The hostile string -> the observation every backend must make."""


def always(value: object) -> Callable[[str], object]:
    return lambda _hostile: value


def refused_unless(
    keeps: Callable[[str], bool], error: type[BaseException], kept: object = None
) -> Callable[[str], object]:
    """A write: `kept` when the store can keep the value, else refused with `error`."""
    return lambda hostile: kept if keeps(hostile) else Refused(error)


def refused_unless_storable(error: type[BaseException], kept: object = None) -> Callable[[str], object]:
    return refused_unless(storable, error, kept)


async def observe(case: Case, place: Any, hostile: str) -> object:
    """What `case` does on `place`: its observation, or `Refused(<exact class>)` if it raised."""
    try:
        observed = case.run(place, hostile)
        if inspect.isawaitable(observed):
            observed = await observed
    except Exception as exc:
        return Refused(type(exc))
    return observed


async def mismatches(cases: Iterable[Case], place: Any, hostile: str) -> list[str]:
    """Run every case in order; one line per case whose observation is not the expected one."""
    wrong = []
    for case in cases:
        expected = case.expect(hostile)
        got = await observe(case, place, hostile)
        if got != expected:
            wrong.append(f"{case.method}({case.param}=<hostile>): expected {expected!r}, got {_short(got)}")
    return wrong


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 300 else text[:300] + "…"


# -- coverage: every method and every parameter that can carry text has a case ----------------------

_TEXT_FREE = re.compile(
    r"^(?:int|float|bool|bytes|None|Sequence|Collection|Callable|tuple|npt\.NDArray|np\.float32"
    r"|TaskQuota|LoginLimits|[\[\]|, ])*$"
)
"""Annotations that cannot carry a caller's text (`TaskQuota` and `LoginLimits` hold numbers only)."""


def text_params(function: Callable[..., Any]) -> list[str]:
    """The parameters of `function` whose annotation could carry text (`str`, or an object)."""
    found = []
    for name, parameter in inspect.signature(function).parameters.items():
        if name == "self":
            continue
        annotation = parameter.annotation
        text = (
            annotation if isinstance(annotation, str) else getattr(annotation, "__name__", repr(annotation))
        )
        if not _TEXT_FREE.fullmatch(text.replace(" ", "")):
            found.append(name)
    return found


def protocol_methods(protocol: type) -> dict[str, Callable[..., Any]]:
    """The public methods and properties a protocol declares (its data attributes are not calls)."""
    members: dict[str, Callable[..., Any]] = {}
    for name, member in vars(protocol).items():
        if name.startswith("_"):
            continue
        if isinstance(member, property) and member.fget is not None:
            members[name] = member.fget
        elif inspect.isfunction(member):
            members[name] = member
    return members


def uncovered(protocol: type, cases: Iterable[Case], text_free: Iterable[str]) -> list[str]:
    """What the contract misses of `protocol`: a method with no case and not declared text-free, a
    text parameter with no case, a case or declaration naming nothing, or a declared text-free
    method that takes text after all."""
    methods = protocol_methods(protocol)
    covered = {(case.method, case.param) for case in cases}
    free = set(text_free)
    problems = []
    for name, function in sorted(methods.items()):
        params = text_params(function)
        if name in free:
            if params:
                problems.append(f"{protocol.__name__}.{name} is declared text-free but takes {params}")
            continue
        if not params:
            problems.append(f"{protocol.__name__}.{name} takes no text: declare it text-free")
        for param in params:
            if (name, param) not in covered:
                problems.append(f"{protocol.__name__}.{name}({param}) has no hostile-string case")
    for method, param in sorted(covered):
        if method not in methods or param not in inspect.signature(methods[method]).parameters:
            problems.append(f"a case names {protocol.__name__}.{method}({param}), which does not exist")
    for name in sorted(free - methods.keys()):
        problems.append(f"{protocol.__name__}.{name} is declared text-free but does not exist")
    return problems


Awaited = Callable[[Any, str], Awaitable[object]]
