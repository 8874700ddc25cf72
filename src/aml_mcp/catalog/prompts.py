"""The prompt registry, shaped like the tool registry."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types

from aml_mcp.catalog.invocation import InvocationContext
from aml_mcp.listeners import Listeners

PromptBody = Callable[[dict[str, str], InvocationContext], Awaitable[types.GetPromptResult]]


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptSpec:
    name: str
    description: str
    body: PromptBody
    title: str | None = None
    arguments: Sequence[types.PromptArgument] = ()
    completions: dict[str, Sequence[str]] = field(default_factory=dict)
    """Candidate values per argument name, offered by completion/complete."""

    @property
    def wire(self) -> types.Prompt:
        return types.Prompt(
            name=self.name,
            title=self.title,
            description=self.description,
            arguments=list(self.arguments) or None,
        )

    def missing_arguments(self, given: dict[str, Any]) -> list[str]:
        return [arg.name for arg in self.arguments if arg.required and arg.name not in given]


class PromptRegistry:
    """Prompts by name, with change notification (`prompts/list` order is registration order)."""

    def __init__(self, prompts: Iterable[PromptSpec] = ()) -> None:
        self._prompts = {prompt.name: prompt for prompt in prompts}
        self.changes: Listeners[[]] = Listeners()

    def add(self, prompt: PromptSpec) -> None:
        self._prompts[prompt.name] = prompt
        self.changes.fire()

    def get(self, name: str) -> PromptSpec | None:
        return self._prompts.get(name)

    def __iter__(self) -> Any:
        return iter(list(self._prompts.values()))
