"""A tool's input schema generated from the pydantic model its body validates with: one definition.

The JSON Schema is what an assistant reads and what every call is checked against first (fast,
compiled); the model then adds what JSON Schema cannot say (date parsing, cross-field rules) and
hands the body typed values. Generating one from the other means the two can never drift.

The schema is shaped for tool calls rather than for pydantic round trips: an optional field is
simply omitted (never `null`), no `title` noise, and the field descriptions are the contract.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema


class _ToolArguments(GenerateJsonSchema):
    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        """`X | None` means "may be left out": the wire type stays `X`, and `null` is refused."""
        return self.generate_inner(schema["schema"])

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        inner = super().default_schema(schema)
        if inner.get("default", ...) is None:
            inner.pop("default")
        return inner

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def arguments_schema(model: type[BaseModel], **defaults: Any) -> dict[str, Any]:
    """The 2020-12 input schema of `model`; `defaults` override per-field defaults known only at run
    time (a setting, say), so what the schema advertises is what the body will use."""
    schema = model.model_json_schema(schema_generator=_ToolArguments)
    schema.pop("title", None)
    schema.pop("description", None)
    for name, value in defaults.items():
        schema["properties"][name]["default"] = value
    return schema
