"""The AML component's wiring: the SAR drafter is pluggable by dotted path, and a bad one is refused."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from aml_mcp.aml.sar.draft import TemplateDrafter
from aml_mcp.aml.settings import AmlSettings
from aml_mcp.aml.wiring import load_drafter


def test_the_drafter_is_pluggable_and_a_bad_one_is_refused() -> None:
    assert isinstance(load_drafter(None), TemplateDrafter)
    assert load_drafter("tests.aml.tools.slow_drafter:SlowDrafter").name == "slow"
    with pytest.raises(ValueError, match="not a callable"):
        load_drafter("tests.aml.tools.slow_drafter:DELAY_S")
    with pytest.raises(ValueError, match="did not return a Drafter"):
        load_drafter("builtins:object")
    with pytest.raises(ValidationError):
        AmlSettings(drafter="not a path")
