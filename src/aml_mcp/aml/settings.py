"""The `aml` settings group (`AML_MCP_AML__<NAME>` in the environment).

What the three AML tools and the demo corpus need to know that is not a fact of the data: how
big the demo corpus loaded on a first `serve` is, how a full evaluation slices its work (so a
cancel stops it promptly), how many cases one batch may draft, and which drafter writes SARs.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

from aml_mcp.aml.demo.corpus import DEFAULT_NOTES_PER_TENANT, DEFAULT_SEED, MAX_NOTES_PER_TENANT
from aml_mcp.aml.notes.model import normalise_typology
from aml_mcp.aml.search.choice import EmbedderKind

_IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class AmlSettings(BaseModel):
    """The AML tools and the demo corpus."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    demo_notes_per_tenant: int = Field(default=DEFAULT_NOTES_PER_TENANT, ge=0, le=MAX_NOTES_PER_TENANT)
    """Notes per demo bank that `serve` loads when the notes store holds no bank at all; 0 loads nothing.
    The default takes about ten seconds on a first start (2 cores)."""
    demo_seed: int = DEFAULT_SEED
    """Seed of the synthetic demo corpus: the same seed and size always give the same notes.
    `run_full_eval` regenerates its labelled queries from it, so a seed changed after the demo was
    loaded leaves the demo banks without retrieval figures."""
    embedder: EmbedderKind = EmbedderKind.MINILM
    """The dense half of search: `minilm` (all-MiniLM-L6-v2 int8 on onnxruntime, ~25-30 notes/s at
    ingest on 2 cores; the static table when onnxruntime is not installed) or `static` (the static
    token table: thousands of notes/s, lower quality). Vectors already stored in the other space
    stay searchable until `aml-mcp reembed` moves them."""
    reembed_in_background: bool = True
    """Move banks whose stored vectors another embedder made (the demo corpus, written with the static
    table so a first start is ready in seconds; a store from before an upgrade) to `embedder` in the
    background after start-up, one bank at a time; the log and the metrics show the progress. Off: run
    `aml-mcp reembed` yourself."""
    search_default_top_k: int = Field(default=10, ge=1, le=50)
    """`top_k` of `search_aml_notes` when the call gives none (its input schema advertises it)."""
    search_concurrency_per_tenant: int = Field(default=1, ge=1, le=64)
    """`search_aml_notes` calls one bank runs at once; more wait their turn. Search is CPU work,
    so this is what keeps one bank's burst of worst-case queries from slowing every other bank."""
    eval_slice_ms: int = Field(default=100, ge=10, le=1000)
    """Longest uninterruptible slice of drafting or grading work in a worker thread: bounds how long a
    cancelled `run_full_eval` or `draft_sar_batch` keeps running."""
    draft_max_cases: int = Field(default=200, ge=1, le=10_000)
    """Most case ids one `draft_sar_batch` call accepts (its input schema advertises it)."""
    extra_typology_codes: list[str] = Field(default_factory=list)
    """Typology codes the SAR checks accept besides the 13 built-in ones (a bank's own codes), normalised
    like `Trade-Based Laundering` to `trade_based_laundering`. A JSON list in the environment."""
    drafter: str | None = None
    """`module:factory` of a custom SAR drafter: a zero-argument callable returning a `Drafter`
    (see docs/extending.md). Its drafts are checked like the built-in one's.

    Default: the built-in deterministic template drafter, which needs no model.
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
