"""The tool registry: the single home of everything the server knows about a tool.

A `ToolSpec` holds the wire description (name, title, description, schemas, annotations), the
OAuth scope a caller needs, how the tool runs (`Execution`), and the body itself. `tools/list`,
argument validation, the `Mcp-Param-*` header check, the scope gate and the task runner all
read from here, so no fact about a tool is written twice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import jsonschema_rs
import mcp_types as types

from aml_mcp.catalog.invocation import InvocationContext
from aml_mcp.listeners import Listeners

REQUIRED_SCOPE_META = "aml-mcp/requiredScope"
"""`_meta` key on a `tools/list` entry naming the OAuth scope a `tools/call` of it needs."""

ToolOutcome = types.CallToolResult | dict[str, Any]
ToolBody = Callable[[dict[str, Any], InvocationContext], Awaitable[ToolOutcome]]


class Execution(StrEnum):
    """How a call runs.

    `sync`: answered in the HTTP response. `task`: always a task, so a client that has not declared
    the Tasks extension is refused. `auto`: a task when the client declared the extension, else sync.
    """

    SYNC = "sync"
    TASK = "task"
    AUTO = "auto"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec:
    name: str
    description: str
    input_schema: Mapping[str, Any]
    body: ToolBody
    title: str | None = None
    output_schema: Mapping[str, Any] | None = None
    annotations: types.ToolAnnotations | None = None
    """Behaviour hints (read-only, destructive, open-world). The title and the idempotency hint are
    copied in from `title` and `idempotent`: each is stated once, here, never in the annotations."""
    scope: str | None = None
    """The OAuth scope a caller must hold; `None` for tools open to any authenticated caller."""
    execution: Execution = Execution.SYNC
    idempotent: bool = False
    """Safe to run again from the start after a crash (tasks are re-run instead of failed)."""
    task_ttl_ms: int | None = None
    """How long this tool's tasks are kept after creation; `None` takes the server default."""
    preflight: ToolBody | None = None
    """Runs synchronously before a task is created, to gather inputs by multi round-trip requests.

    Whatever answers it collects are available to the task body's `request_inputs` without a new round.
    """
    _validator: Any = field(init=False, repr=False, compare=False)
    _wire: types.Tool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        annotations = self.annotations
        if annotations is not None:
            if annotations.title is not None or annotations.idempotent_hint is not None:
                raise ValueError(
                    f"{self.name}: state title and idempotency on the ToolSpec, not its annotations"
                )
            annotations = annotations.model_copy(
                update={"title": self.title, "idempotent_hint": self.idempotent}
            )
        schema = dict(self.input_schema)
        # Compiled once; the Rust validator checks arguments in about a microsecond (the pure-Python
        # one took a tenth of a millisecond, on every call). Draft 2020-12 unless `$schema` says otherwise.
        object.__setattr__(self, "_validator", jsonschema_rs.validator_for(schema))
        object.__setattr__(
            self,
            "_wire",
            types.Tool(
                name=self.name,
                title=self.title,
                description=self.description,
                input_schema=schema,
                output_schema=dict(self.output_schema) if self.output_schema is not None else None,
                annotations=annotations,
                # The scope a call needs, so a client can ask for it before calling (step-up consent).
                _meta={REQUIRED_SCOPE_META: self.scope} if self.scope else None,
            ),
        )

    @property
    def wire(self) -> types.Tool:
        """The `tools/list` entry, built once."""
        return self._wire

    def argument_errors(self, arguments: Mapping[str, Any]) -> list[str]:
        """Every way `arguments` breaks the input schema, as short human-readable lines."""
        if self._validator.is_valid(arguments):
            return []
        return [_describe(error) for error in self._validator.iter_errors(arguments)]


def tool_error(text: str) -> types.CallToolResult:
    """A tool execution error (`isError`): the assistant reads `text` and can correct its call."""
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def _describe(error: jsonschema_rs.ValidationError) -> str:
    where = "/".join(str(part) for part in error.instance_path)
    return f"{where or '(arguments)'}: {error.message}"


class ToolRegistry:
    """Tools in registration order (the order `tools/list` shows), with change notification."""

    def __init__(self, tools: Iterable[ToolSpec] = ()) -> None:
        self._tools: dict[str, ToolSpec] = {}
        self.changes: Listeners[[]] = Listeners()
        for tool in tools:
            self._put(tool)

    def _put(self, tool: ToolSpec) -> None:
        if not 1 <= len(tool.name) <= 128:
            raise ValueError(f"tool name length out of range: {tool.name!r}")
        self._tools[tool.name] = tool

    def add(self, tool: ToolSpec) -> None:
        """Register or replace a tool and tell listeners the list changed."""
        self._put(tool)
        self.changes.fire()

    def remove(self, name: str) -> bool:
        removed = self._tools.pop(name, None) is not None
        if removed:
            self.changes.fire()
        return removed

    def get(self, name: str) -> ToolSpec | None:
        return self._tools.get(name)

    def __iter__(self) -> Any:
        return iter(list(self._tools.values()))

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def input_schema(self, name: str) -> Mapping[str, Any] | None:
        """For the SDK's `Mcp-Param-*` header validation, which would otherwise re-run tools/list."""
        tool = self._tools.get(name)
        return tool.input_schema if tool is not None else None

    def scope_needed(self, params: Mapping[str, Any]) -> frozenset[str]:
        """The scope a `tools/call` with these params needs; an unknown tool needs none (it fails later)."""
        name = params.get("name")
        tool = self._tools.get(name) if isinstance(name, str) else None
        return frozenset({tool.scope}) if tool is not None and tool.scope else frozenset()

    @property
    def scopes(self) -> frozenset[str]:
        return frozenset(tool.scope for tool in self._tools.values() if tool.scope is not None)
