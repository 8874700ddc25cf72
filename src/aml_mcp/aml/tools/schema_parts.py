"""JSON Schema fragments the AML tools' output schemas share."""

from __future__ import annotations

from typing import Any

STRING: dict[str, Any] = {"type": "string"}
NUMBER_OR_NULL: dict[str, Any] = {"type": ["number", "null"]}


def _strings() -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string"}}
