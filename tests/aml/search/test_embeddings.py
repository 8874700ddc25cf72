"""The shipped static table loads offline, without torch, and embeds deterministically."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np

from aml_mcp.aml.search.embeddings import StaticEmbedder
from aml_mcp.aml.search.wordpiece import basic_words


def test_embeddings_are_deterministic_and_normalised(embedder: StaticEmbedder) -> None:
    texts = ["Cash deposits just below the reporting threshold.", "Bitcoin routed through a mixer", ""]
    first = embedder.encode(texts)
    again = StaticEmbedder.load().encode(texts)
    assert first.dtype == np.float32 and first.shape == (3, embedder.dims)
    assert np.array_equal(first, again)
    assert np.allclose(np.linalg.norm(first[:2], axis=1), 1.0, atol=1e-5)
    assert not first[2].any()
    batched = embedder.encode([texts[0]] * 300)
    assert np.array_equal(batched[299], first[0])


def test_meaning_beats_unrelated_text(embedder: StaticEmbedder) -> None:
    a, b, c = embedder.encode(
        [
            "elderly customer's savings drained by her caregiver",
            "financial abuse of a senior by the person looking after her",
            "container ship cargo invoice",
        ]
    )
    assert float(a @ b) > float(a @ c)


def test_basic_tokenizer_matches_bert_rules() -> None:
    assert basic_words("Héllo, WORLD!  ACC-0012") == ["hello", ",", "world", "!", "acc", "-", "0012"]


def test_shipped_table_loads_offline_without_torch_or_network() -> None:
    """In a fresh interpreter with the hub offline and sockets disabled, the table still loads."""
    script = textwrap.dedent(
        """
        import socket, sys

        def refuse(*args, **kwargs):
            raise OSError("network disabled in this test")

        socket.socket.connect = refuse
        socket.create_connection = refuse
        from aml_mcp.aml.search.embeddings import StaticEmbedder

        embedder = StaticEmbedder.load()
        vector = embedder.encode(["structuring below the threshold"])[0]
        assert vector.shape == (embedder.dims,)
        assert "torch" not in sys.modules and "transformers" not in sys.modules
        print(embedder.name)
        """
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "all-MiniLM-L6-v2" in done.stdout
