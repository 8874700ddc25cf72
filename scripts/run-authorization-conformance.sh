#!/usr/bin/env bash
# The official conformance suite's authorization-server scenarios against the development
# authorization server of a real `aml-mcp serve`, with the browser step (log in, consent) played
# by scripts/authorization_conformance_browser.py.
#
# Usage:  scripts/run-authorization-conformance.sh
#
# Starts `aml-mcp serve` on a free loopback port with a fresh data directory, runs
#   conformance authorization --url <issuer> --client-id aml-mcp-cli --resource <MCP URL> --port <free>
# (both scenarios: authorization-server-metadata-endpoint, authorization-code-grant) as the
# pre-registered public client, whose loopback redirect http://127.0.0.1:<port>/callback the
# suite's callback server listens on, and exits 1 unless both scenarios ran with no failed check.
#
# Environment:
#   PYTHON                   the Python of the project's virtual environment (default .venv/bin/python)
#   CONFORMANCE_VERSION      suite version (default: pinned below)
#   CONFORMANCE_CACHE        install dir (default: ${XDG_CACHE_HOME:-$HOME/.cache}/mcp-conformance)
#   CONFORMANCE_NODE         node binary to use (must be >= 22; else Node 22 is installed from npm)
#   CONFORMANCE_RESULTS_DIR  where checks.json files go (default: a fresh temp dir)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-.venv/bin/python}"
SCENARIOS=(authorization-server-metadata-endpoint authorization-code-grant)

log() { printf '%s\n' "$*" >&2; }

# shellcheck source=scripts/conformance-suite.sh
. scripts/conformance-suite.sh

free_port() { "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port="$(free_port)"
callback_port="$(free_port)"
data_dir="$(mktemp -d -t aml-mcp-authz.XXXXXX)"
RESULTS_DIR="${CONFORMANCE_RESULTS_DIR:-$(mktemp -d -t mcp-authz-conformance.XXXXXX)}"
mkdir -p "$RESULTS_DIR"
server_log="$RESULTS_DIR/server.log"

"$PYTHON" -m aml_mcp serve --port "$port" --data-dir "$data_dir" >"$server_log" 2>&1 &
server_pid=$!
trap 'kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; rm -rf "$data_dir"' EXIT
for _ in $(seq 1 600); do
  curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  kill -0 "$server_pid" 2>/dev/null || { log "aml-mcp serve exited:"; cat "$server_log" >&2; exit 1; }
  sleep 0.2
done
curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null || { log "aml-mcp serve did not come up"; exit 1; }

issuer="http://127.0.0.1:$port/oauth"
log "authorization conformance $CONFORMANCE_VERSION against $issuer (results: $RESULTS_DIR)"
set +e
"$PYTHON" scripts/authorization_conformance_browser.py --user alice -- \
  "$NODE_BIN" "$SUITE_JS" authorization --url "$issuer" --client-id aml-mcp-cli \
  --resource "http://127.0.0.1:$port/mcp" --port "$callback_port" -o "$RESULTS_DIR"
harness_rc=$?
set -e

# Every scenario must have run and have no FAILURE check (the harness's own rule).
failed=0
for name in "${SCENARIOS[@]}"; do
  checks="$(ls -d "$RESULTS_DIR"/authorization-server-"$name"-*/checks.json 2>/dev/null | head -1 || true)"
  if [ -z "$checks" ]; then
    echo "FAIL $name (no result)"; failed=1; continue
  fi
  count="$("$PYTHON" -c 'import json,sys; c=json.load(open(sys.argv[1])); print(sum(x["status"]=="FAILURE" for x in c), sum(x["status"]=="SUCCESS" for x in c))' "$checks")"
  read -r bad good <<<"$count"
  if [ "$bad" -eq 0 ] && [ "$good" -gt 0 ]; then
    echo "PASS $name ($good checks)"
  else
    echo "FAIL $name ($bad failed, $good passed)"; failed=1
  fi
done
if [ "$failed" -ne 0 ] || [ "$harness_rc" -ne 0 ]; then
  echo "authorization conformance: FAILED (harness exit $harness_rc; server log: $server_log)"
  exit 1
fi
echo "authorization conformance: ${#SCENARIOS[@]} scenarios passed"
