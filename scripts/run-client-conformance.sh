#!/usr/bin/env bash
# The official MCP conformance suite's client scenarios against `aml-mcp conformance-client`, at the
# 2026-07-28 requirement set (32 required scenarios, plus the not-scored ones it also runs).
#
# Usage: scripts/run-client-conformance.sh [extra args for `conformance client`]
#   e.g. scripts/run-client-conformance.sh --scenario auth/scope-step-up --spec-version 2026-07-28
# Prints one line per scenario (PASS/FAIL, then `(not scored)` for the extension ones) and
# `client conformance: N required passed, M required failed`; exits 1 if a required one failed.
# Installs the suite (pinned) and a Node 22 into the shared cache on first use, as the server
# suite's runner does. The harness starts every scenario at once; each client is a Python process
# that needs seconds of CPU to import, so on a small machine the per-scenario timeout is raised.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
# shellcheck source=scripts/conformance-suite.sh
. scripts/conformance-suite.sh

RESULTS_DIR="${CONFORMANCE_RESULTS_DIR:-$(mktemp -d -t mcp-client-conformance.XXXXXX)}"
select=(--requirements 2026-07-28)
for a in "$@"; do case "$a" in --scenario|--scenario=*) select=() ;; esac; done
set +e
"$NODE_BIN" "$SUITE_JS" client --command "$ROOT/.venv/bin/aml-mcp conformance-client" \
  --timeout "${CONFORMANCE_CLIENT_TIMEOUT_MS:-150000}" "${select[@]}" -o "$RESULTS_DIR" "$@" >"$RESULTS_DIR/harness.log" 2>&1
harness_rc=$?
set -e
echo "results: $RESULTS_DIR (harness exit $harness_rc)"
# The harness's own summary: one `✓|✗ name: k passed, n failed` line per scenario, then the
# scenarios it ran but does not score at this revision.
"$NODE_BIN" - "$RESULTS_DIR/harness.log" <<'JS'
const fs = require('fs');
const log = fs.readFileSync(process.argv[2], 'utf8');
const [summary = '', tail = ''] = (log.split('=== SUITE SUMMARY ===')[1] || '').split('Not scored for');
const notScored = new Set([...tail.matchAll(/[✓✗] (\S+) \(/g)].map((m) => m[1]));
let pass = 0, fail = 0;
for (const m of summary.matchAll(/^([✓✗]) (\S+): (.*)$/gm)) {
  const [, mark, name, counts] = m;
  const scored = !notScored.has(name);
  console.log(`${mark === '✓' ? 'PASS' : 'FAIL'} ${name}${scored ? '' : ' (not scored)'}: ${counts}`);
  if (scored) mark === '✓' ? pass++ : fail++;
}
console.log(`client conformance: ${pass} required passed, ${fail} required failed`);
process.exit(fail > 0 || pass === 0 ? 1 : 0);
JS
