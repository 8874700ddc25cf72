"""Dense text embeddings from the static token table shipped inside `aml_mcp` (numpy only).

Why static: queries must embed in well under a millisecond and whole corpora at ingest without
torch, a GPU or a model hub. The table (`embedding_table/minilm_l6_static.npz`) is distilled from
all-MiniLM-L6-v2 by `scripts/build_embedding_table.py`; see that file for the recipe and licence. A text's
vector is the L2-normalised mean of its WordPiece tokens' rows, so equal text always gives the
same vector, bit for bit.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from aml_mcp.aml.search.wordpiece import WordPiece

DEFAULT_TABLE = "minilm_l6_static.npz"
_CHUNK = 256
"""Texts embedded per numpy pass: bounds the gathered token rows to a few MB."""


class Embedder(Protocol):
    """Anything that turns texts into L2-normalised float32 rows of a fixed width."""

    @property
    def dims(self) -> int: ...

    @property
    def name(self) -> str:
        """Identifies the vector space: vectors made under one name are comparable only with it."""
        ...

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]: ...


class EmbeddingTableError(RuntimeError):
    """The static table is missing or malformed (a broken install, never bad user input)."""


class StaticEmbedder:
    """Mean of static token vectors, normalised; the default `Embedder`."""

    def __init__(
        self, vocab: Sequence[str], table: npt.NDArray[np.float32], header: dict[str, Any], digest: str = ""
    ) -> None:
        if table.ndim != 2 or len(vocab) != table.shape[0]:
            raise EmbeddingTableError("vocabulary and table do not match")
        self._digest = digest
        self._table = np.ascontiguousarray(table, dtype=np.float32)
        self._tokenizer = WordPiece({tok: i for i, tok in enumerate(vocab)})
        self.header = header

    @property
    def dims(self) -> int:
        return int(self._table.shape[1])

    @property
    def name(self) -> str:
        """Teacher, width and a digest of the table file: a rebuilt table is a different space."""
        return f"static:{self.header.get('teacher', 'unknown')}:{self.dims}:{self._digest}"

    @classmethod
    def load(cls, path: Path | None = None) -> StaticEmbedder:
        """Load a table file; by default the one shipped in this package (no network, ever)."""
        try:
            if path is None:
                ref = resources.files("aml_mcp.aml.search.embedding_table").joinpath(DEFAULT_TABLE)
                with resources.as_file(ref) as local:
                    return cls._from_file(local)
            return cls._from_file(path)
        except (OSError, KeyError, ValueError) as exc:
            raise EmbeddingTableError(f"cannot load the embedding table: {exc}") from exc

    @classmethod
    def _from_file(cls, path: Path) -> StaticEmbedder:
        raw = path.read_bytes()
        with np.load(io.BytesIO(raw), allow_pickle=False) as data:
            vocab = data["vocab"].tobytes().decode("utf-8").split("\n")
            header = json.loads(data["header"].tobytes().decode("utf-8"))
            table = data["vectors"].astype(np.float32) * data["scales"].astype(np.float32)[:, None]
        return cls(vocab, table, header, hashlib.sha256(raw).hexdigest()[:12])

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """One normalised row per text; a text with no known token gets a zero row."""
        if len(texts) <= _CHUNK:
            return self._encode_chunk(texts)
        return np.concatenate(
            [self._encode_chunk(texts[i : i + _CHUNK]) for i in range(0, len(texts), _CHUNK)]
        )

    def _encode_chunk(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        ids_per_text = [self._tokenizer.ids(t) for t in texts]
        lengths = np.fromiter((len(i) for i in ids_per_text), np.int64, len(texts))
        nonempty = np.flatnonzero(lengths)
        if len(nonempty) == 0:
            return out
        flat = np.fromiter((i for k in nonempty for i in ids_per_text[k]), np.int64, int(lengths.sum()))
        starts = np.concatenate(([0], np.cumsum(lengths[nonempty])[:-1]))
        sums = np.add.reduceat(self._table[flat], starts, axis=0)
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        out[nonempty] = sums / norms
        return out
