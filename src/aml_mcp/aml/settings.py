"""The `aml` settings group (`AML_MCP_AML__<NAME>` in the environment).

What the three AML tools and the demo corpus need to know that is not a fact of the data: how
big the demo corpus loaded on a first `serve` is, how a full evaluation slices its work (so a
cancel stops it promptly), how many cases one batch may draft, and which drafter writes SARs.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

from aml_mcp.aml.demo.corpus import DEFAULT_NOTES_PER_TENANT, DEFAULT_SEED, MAX_NOTES_PER_TENANT
from aml_mcp.aml.notes import normalise_typology

_IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class AmlSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    demo_notes_per_tenant: int = Field(default=DEFAULT_NOTES_PER_TENANT, ge=0, le=MAX_NOTES_PER_TENANT)
    """Notes per demo bank that `serve` loads when the notes store is empty; 0 loads nothing.

    The default keeps a first start to seconds; the labelled query set used by `run_full_eval`
    is regenerated from this size and `demo_seed`.
    """
    demo_seed: int = DEFAULT_SEED
    """Seed of the synthetic demo corpus (the same seed and size always give the same notes)."""
    search_default_top_k: int = Field(default=10, ge=1, le=50)
    """`top_k` of `search_aml_notes` when the caller gives none (the schema advertises it)."""
    eval_slice_ms: int = Field(default=100, ge=10, le=1000)
    """CPU time one worker-thread slice of `run_full_eval` may use before it checks for a cancel.

    A slice cannot be interrupted, so this bounds how long a cancelled evaluation keeps running.
    """
    draft_max_cases: int = Field(default=200, ge=1, le=10_000)
    """Most case ids one `draft_sar_batch` call accepts."""
    extra_typology_codes: list[str] = Field(default_factory=list)
    """Typology codes accepted by the SAR checks besides the built-in catalogue (a bank's own codes)."""
    drafter: str | None = None
    """`module:factory` of a custom SAR drafter (a zero-argument callable returning a `Drafter`).

    Unset (the default): the built-in deterministic template drafter, which needs no model.
    """

    @field_validator("extra_typology_codes")
    @classmethod
    def _codes(cls, values: list[str]) -> list[str]:
        codes = [normalise_typology(v) for v in values]
        if any(not c for c in codes):
            raise ValueError("typology codes must contain a letter or digit")
        return codes

    @field_validator("drafter")
    @classmethod
    def _import_path(cls, value: str | None) -> str | None:
        if value is not None and not _IMPORT_PATH.fullmatch(value):
            raise ValueError("drafter must look like 'package.module:factory'")
        return value
