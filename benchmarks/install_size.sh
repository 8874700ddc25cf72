#!/usr/bin/env bash
# Install size of the server's environment: a fresh venv, `pip install '.[server]'`, then du (the
# base install, `pip install .`, is the client alone: docs/python-client.md has both sizes).
#
# Why: the server's install must stay small and must not pull in torch (the dense half is
# all-MiniLM-L6-v2 as an int8 ONNX file on onnxruntime, with the static table inside aml_mcp as
# the fallback). Not run by CI; about a minute.
#
#   bash benchmarks/install_size.sh            # installs the repository root
#   bash benchmarks/install_size.sh /path/src  # or another checkout
set -euo pipefail

SRC="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

python3 -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install --quiet --upgrade pip >/dev/null 2>&1
cp -r "$SRC" "$WORK/src"
rm -rf "$WORK/src/.venv" "$WORK/src/benchmarks/results"
"$WORK/venv/bin/pip" install --quiet "$WORK/src[server]" 2>&1 | grep -v '^WARNING: Location' || true

SITE="$("$WORK/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "server install of $SRC"
echo "site-packages total: $(du -sh "$SITE" | cut -f1)" \
     "(without pip and setuptools: $(du -sc "$SITE" --exclude='pip' --exclude='pip-*' --exclude='setuptools*' \
     --exclude='_distutils_hack' --exclude='distutils-precedence.pth' | tail -1 | awk '{printf "%.0fM", $1/1024}'))"
echo "largest distributions:"
du -s "$SITE"/* 2>/dev/null | sort -rn | head -12 | awk '{printf "  %7.1f MB  %s\n", $1/1024, $2}' | sed "s|$SITE/||"
echo "aml_mcp package: $(du -sh "$SITE/aml_mcp" | cut -f1)" \
     "(static embedding table: $(du -sh "$SITE/aml_mcp/aml/search/embedding_table/minilm_l6_static.npz" | cut -f1))"
heavy="$("$WORK/venv/bin/pip" list --format=freeze | grep -iE '^(torch|transformers|tokenizers|sentence-transformers|tensorflow|jax)==' || true)"
if [ -n "$heavy" ]; then
  echo "HEAVY ML PACKAGES PRESENT:"; echo "$heavy"; exit 1
fi
echo "no torch / transformers / tokenizers in the server install"
HF_HUB_OFFLINE=1 "$WORK/venv/bin/python" - <<'PY'
import sys
import time

started = time.perf_counter()
from aml_mcp.aml.search.embeddings import StaticEmbedder

embedder = StaticEmbedder.load()
took = time.perf_counter() - started
print(f"embedder {embedder.name} loads in {took:.2f}s; torch imported: {'torch' in sys.modules}")
try:
    from aml_mcp.aml.search.transformer import TransformerEmbedder
except ImportError:
    print("no transformer dense half in this version")
else:
    started = time.perf_counter()
    model = TransformerEmbedder.load()
    model.encode(["warm"])
    took = time.perf_counter() - started
    print(f"embedder {model.name} loads in {took:.2f}s; torch imported: {'torch' in sys.modules}")
PY
