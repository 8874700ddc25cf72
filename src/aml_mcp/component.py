"""The one shape every feature has in the composition root's eyes.

A component brings its database schema (`migrations`), its HTTP routes, the scope rules of the
methods it serves, and a `running()` context for whatever must live as long as the app (threads,
clients, open files). `app.py` builds the components, hands each what it needs, and then only
loops over them: migrations in order, `running()` entered in order and left in reverse.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Protocol

from starlette.routing import BaseRoute

from aml_mcp.scope_rules import ScopeRule
from aml_mcp.store.sqlite import Migration


class Component(Protocol):
    """One feature as the composition root sees it (see the module docstring)."""

    @property
    def migrations(self) -> Sequence[Migration]:
        """Schemas in the shared database this component owns, applied before the first request."""
        ...

    @property
    def routes(self) -> Sequence[BaseRoute]:
        """HTTP routes besides `/mcp` (metadata documents, the development issuer's pages)."""
        ...

    @property
    def scope_rules(self) -> Mapping[str, ScopeRule]:
        """What each method this component serves requires of a token (`method -> rule`)."""
        ...

    def running(self) -> AbstractAsyncContextManager[None]:
        """Entered after every migration ran; left when the app stops."""
        ...


@dataclass(frozen=True, slots=True)
class Parts:
    """A component with no state of its own to expose: just its parts (for small features)."""

    migrations: Sequence[Migration] = ()
    routes: Sequence[BaseRoute] = ()
    scope_rules: Mapping[str, ScopeRule] = field(default_factory=dict)
    lifetime: Callable[[], AbstractAsyncContextManager[None]] | None = None
    """Called once per `running()`: a fresh context each time the app starts."""

    def running(self) -> AbstractAsyncContextManager[None]:
        return self.lifetime() if self.lifetime is not None else contextlib.nullcontext()
