"""Only a well-formed W3C `traceparent` in `_meta` yields a trace id for the audit record."""

from __future__ import annotations

from typing import Any

import pytest

from aml_mcp.audit.trace import trace_id_of

GOOD = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_well_formed_traceparent_gives_its_trace_id() -> None:
    assert trace_id_of({"_meta": {"traceparent": GOOD}}) == "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.mark.parametrize(
    "params",
    [
        None,
        {},
        {"_meta": None},
        {"_meta": {"traceparent": 7}},
        {"_meta": {"traceparent": GOOD.upper()}},
        {"_meta": {"traceparent": "00-" + "0" * 32 + "-00f067aa0ba902b7-01"}},
        {"_meta": {"traceparent": GOOD + "\n"}},
        {"_meta": {"traceparent": "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
        {"_meta": {"traceparent": "x" * 10_000}},
    ],
)
def test_anything_else_gives_none(params: Any) -> None:
    assert trace_id_of(params) is None
