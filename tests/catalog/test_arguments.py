"""A tool's input schema and the model its body validates with are one definition: they cannot drift.

`search_aml_notes` advertises the schema generated from `SearchRequest`; every argument set below
is judged by both the compiled JSON Schema (what runs first on a call) and the model (what the
body runs), and wherever JSON Schema can express the rule the two must agree.
"""

from __future__ import annotations

from typing import Any

import jsonschema_rs
import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aml_mcp.aml.search.engine import MAX_TOP_K, SearchRequest
from aml_mcp.catalog.arguments import arguments_schema

ARGUMENT_SETS: list[dict[str, Any]] = [
    {"query": "cash deposits"},
    {"query": "cash", "top_k": 1},
    {"query": "cash", "top_k": MAX_TOP_K},
    {"query": "cash", "top_k": 0},
    {"query": "cash", "top_k": MAX_TOP_K + 1},
    {"query": "cash", "top_k": "ten"},
    {"query": ""},
    {"query": "x" * 1000},
    {"query": "x" * 1001},
    {},
    {"query": "cash", "tenant": "other-bank"},
    {"query": "cash", "date_from": "2025-01-01", "date_to": "2025-12-31"},
    {"query": "cash", "date_from": "2" * 41},
    {"query": "cash", "date_to": None},
    {"query": "cash", "typology": ""},
    {"query": "cash", "typology": "structuring"},
    {"query": "cash", "typology": "t" * 101},
    {"query": "cash", "case_id": ""},
    {"query": "cash", "case_id": "CASE-1"},
    {"query": "cash", "case_id": "c" * 129},
    {"query": 5},
]


def _model_accepts(arguments: dict[str, Any]) -> bool:
    try:
        SearchRequest.model_validate(arguments)
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize("arguments", ARGUMENT_SETS)
def test_schema_and_model_agree(arguments: dict[str, Any]) -> None:
    validator = jsonschema_rs.validator_for(arguments_schema(SearchRequest))
    assert validator.is_valid(arguments) == _model_accepts(arguments), arguments


def test_the_generated_schema_is_the_published_contract() -> None:
    schema = arguments_schema(SearchRequest, top_k=7)
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["query"]
    assert schema["properties"]["top_k"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": MAX_TOP_K,
        "default": 7,
        "description": f"How many notes to return (1-{MAX_TOP_K}).",
    }
    # An optional field is left out, never sent as null, and carries no pydantic noise.
    assert schema["properties"]["case_id"] == {
        "type": "string",
        "minLength": 1,
        "maxLength": 128,
        "description": "Only notes of this case.",
    }
    assert all("title" not in field for field in schema["properties"].values())
    assert "title" not in schema and "description" not in schema


def test_any_model_gets_the_same_treatment() -> None:
    class Arguments(BaseModel):
        """Not part of the schema: the tool's description says what it does."""

        model_config = ConfigDict(extra="forbid")
        name: str = Field(min_length=1, description="Who.")
        limit: int | None = Field(default=None, ge=1)

    schema = arguments_schema(Arguments)
    assert schema == {
        "type": "object",
        "additionalProperties": False,
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "minLength": 1, "description": "Who."},
            "limit": {"type": "integer", "minimum": 1},
        },
    }
