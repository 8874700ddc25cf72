"""A `ToolSpec` states each fact once: its title and idempotency reach the wire annotations from the
spec itself, and stating them again in the annotations is refused at construction."""

from __future__ import annotations

from typing import Any

import mcp_types as types
import pytest

from aml_mcp.catalog import InvocationContext, ToolRegistry, ToolSpec, tool_error


async def _body(arguments: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
    return tool_error("unused")


def _spec(**overrides: Any) -> ToolSpec:
    values: dict[str, Any] = {
        "name": "probe",
        "description": "a probe",
        "input_schema": {"type": "object"},
        "body": _body,
        **overrides,
    }
    return ToolSpec(**values)


def test_title_and_idempotency_are_copied_into_the_annotations() -> None:
    spec = _spec(title="Probe", idempotent=True, annotations=types.ToolAnnotations(read_only_hint=True))
    wire = spec.wire.model_dump(by_alias=True, exclude_none=True)
    assert wire["title"] == "Probe"
    assert wire["annotations"] == {"title": "Probe", "readOnlyHint": True, "idempotentHint": True}


def test_a_tool_without_annotations_advertises_none() -> None:
    assert _spec(title="Probe").wire.annotations is None


@pytest.mark.parametrize(
    "annotations",
    [types.ToolAnnotations(title="Other title"), types.ToolAnnotations(idempotent_hint=False)],
)
def test_stating_a_fact_twice_is_refused(annotations: types.ToolAnnotations) -> None:
    with pytest.raises(ValueError, match="on the ToolSpec, not its annotations"):
        _spec(title="Probe", annotations=annotations)


def test_the_registry_says_which_scope_a_call_needs() -> None:
    tools = ToolRegistry([_spec(scope="aml:read"), _spec(name="open")])
    assert tools.scope_needed({"name": "probe"}) == {"aml:read"}
    assert tools.scope_needed({"name": "open"}) == frozenset()
    assert tools.scope_needed({"name": "unknown"}) == frozenset()
    assert tools.scope_needed({"name": ["probe"]}) == frozenset()
    assert tools.scopes == {"aml:read"}
