"""The int8 ONNX dense half against the fp32 original, its tokenizer, batching and load checks."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from aml_mcp.aml.search.transformer import (
    DIMS,
    MAX_TOKENS,
    EmbeddingModelUnavailable,
    TransformerEmbedder,
    load_vocabulary,
)

REFERENCE = Path(__file__).with_name("minilm_reference.json")


@pytest.fixture(scope="module")
def embedder() -> TransformerEmbedder:
    return TransformerEmbedder.load()


def test_int8_vectors_match_the_fp32_model(embedder: TransformerEmbedder) -> None:
    """Vectors of scripts/minilm_reference_vectors.py (fp32 weights, numpy forward pass)."""
    samples = json.loads(REFERENCE.read_text("utf-8"))["samples"]
    vectors = embedder.encode([s["text"] for s in samples])
    cosines = [float(np.dot(v, s["vector"])) for v, s in zip(vectors, samples, strict=True)]
    assert min(cosines) >= 0.98, cosines
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors.shape == (len(samples), DIMS)


def test_meaning_beats_shared_words(embedder: TransformerEmbedder) -> None:
    query, paraphrase, unrelated = embedder.encode(
        [
            "cash deposits kept under the reporting threshold",
            "customer split cash into several lodgements each just below the CTR limit",
            "the reporting team deposits its threshold review in the shared drive",
        ]
    )
    assert float(query @ paraphrase) > float(query @ unrelated)


def test_batched_rows_equal_single_rows(embedder: TransformerEmbedder) -> None:
    texts = ["short", "a somewhat longer note about wire transfers to a shell company", "kyc refresh"]
    together = embedder.encode(texts)
    alone = np.stack([embedder.encode([t])[0] for t in texts])
    assert np.all(np.sum(together * alone, axis=1) > 0.995)


def test_tokens_are_bert_uncased_with_unknowns_and_a_cut(embedder: TransformerEmbedder) -> None:
    vocab = load_vocabulary()
    ids = embedder.token_ids("Hello, 😀 World")
    assert [vocab[i] for i in ids] == ["[CLS]", "hello", ",", "[UNK]", "world", "[SEP]"]
    long = embedder.token_ids("word " * 1000)
    assert len(long) == MAX_TOKENS
    assert vocab[long[0]] == "[CLS]" and vocab[long[-1]] == "[SEP]"


def test_empty_input_gives_no_rows(embedder: TransformerEmbedder) -> None:
    assert embedder.encode([]).shape == (0, DIMS)


def test_a_model_file_other_than_the_pinned_one_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "model.onnx"
    fake.write_bytes(b"not the model")
    with pytest.raises(EmbeddingModelUnavailable, match="pinned"):
        TransformerEmbedder.load(fake)
    with pytest.raises(EmbeddingModelUnavailable, match="cannot read"):
        TransformerEmbedder.load(tmp_path / "missing.onnx")
