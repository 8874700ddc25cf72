"""The one shape every feature has in the composition root's eyes.

A component brings its HTTP routes, the scope rules of the methods it serves, and a `running()`
context for whatever must live as long as the app (threads, clients, open files). Its state is not
its own to open: the persistence object (`aml_mcp/persistence.py`) hands it its stores and applies
their schemas. `app.py` builds the components, hands each what it needs, and then only loops over
them: `running()` entered in order and left in reverse.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Protocol

from starlette.routing import BaseRoute

from aml_mcp.scope_rules import ScopeRule


class Component(Protocol):
    """One feature as the composition root sees it (see the module docstring)."""

    @property
    def routes(self) -> Sequence[BaseRoute]:
        """HTTP routes besides `/mcp` (metadata documents, the development issuer's pages)."""
        ...

    @property
    def scope_rules(self) -> Mapping[str, ScopeRule]:
        """What each method this component serves requires of a token (`method -> rule`)."""
        ...

    def running(self) -> AbstractAsyncContextManager[None]:
        """Entered once the persistence object is open (every schema applied); left when the app stops."""
        ...


@dataclass(frozen=True, slots=True)
class Parts:
    """A component with no state of its own to expose: just its parts (for small features)."""

    routes: Sequence[BaseRoute] = ()
    scope_rules: Mapping[str, ScopeRule] = field(default_factory=dict)
    lifetime: Callable[[], AbstractAsyncContextManager[None]] | None = None
    """Called once per `running()`: a fresh context each time the app starts."""

    def running(self) -> AbstractAsyncContextManager[None]:
        return self.lifetime() if self.lifetime is not None else contextlib.nullcontext()
