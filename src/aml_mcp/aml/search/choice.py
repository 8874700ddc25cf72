"""Which embedder makes new vectors, and which can still search vectors already stored.

Why two: the transformer is the dense half, but a tenant whose vectors were made by the static
table (a demo loaded in seconds on a first start, a store from before the upgrade, a machine
without onnxruntime) must still be searched densely in *its* space until it is re-embedded.
Vectors of two spaces are never compared: a query is embedded by the embedder whose name the
tenant's stored space carries, or dense search is skipped for that tenant.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from aml_mcp.aml.search.embeddings import Embedder, StaticEmbedder
from aml_mcp.aml.search.transformer import EmbeddingModelUnavailable, TransformerEmbedder

_log = logging.getLogger(__name__)


class EmbedderKind(StrEnum):
    MINILM = "minilm"
    """all-MiniLM-L6-v2 int8 on onnxruntime (the static table if onnxruntime is absent)."""
    STATIC = "static"
    """The static token table only: embeds thousands of notes a second, lower quality."""


@dataclass(frozen=True, slots=True)
class Embedders:
    """`primary` makes every new vector; `others` can only embed queries for spaces still stored."""

    primary: Embedder
    others: Sequence[Embedder] = ()

    def for_space(self, space: str | None) -> Embedder | None:
        """The embedder of `space` (the primary for a tenant with no vectors yet), or None."""
        if space is None or space == self.primary.name:
            return self.primary
        return next((e for e in self.others if e.name == space), None)


def load_embedders(kind: EmbedderKind, threads: int = 1) -> Embedders:
    """The configured embedders; the transformer falls back to the static table, loudly."""
    static = StaticEmbedder.load()
    if kind is EmbedderKind.STATIC:
        return Embedders(static)
    try:
        return Embedders(TransformerEmbedder.load(threads=threads), (static,))
    except EmbeddingModelUnavailable as exc:
        _log.warning("dense search falls back to the static embedding table: %s", exc)
        return Embedders(static)
