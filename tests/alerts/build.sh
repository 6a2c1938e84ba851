#!/usr/bin/env bash
# Build the rule tester the alert tests run (Prometheus's `promtool`, `promtool test rules`) from Go
# modules into a cache outside the repository. A no-op when warm.
#
#   bash tests/alerts/build.sh                # builds if needed; prints the binary's path last
#   bash tests/alerts/build.sh --cached-only  # prints the binary's path if built, else exits 3
#
# Environment:
#   MCPTASKS_PROMTOOL_DIR  where the binary goes (default ~/.cache/mcp-tasks/promtool/<version>-<hash>,
#                          the hash over go.mod, go.sum, tools.go and this script)
#
# Prometheus 3.x publishes its Go module as v0.3xx.y (v0.316.0 is Prometheus 3.16.0).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
module="$here/promtool"
version="$(sed -n 's/^require github.com\/prometheus\/prometheus \(.*\)$/\1/p' "$module/go.mod")"
stamp="$(cat "$module/go.mod" "$module/go.sum" "$module/tools.go" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)"
dir="${MCPTASKS_PROMTOOL_DIR:-$HOME/.cache/mcp-tasks/promtool/$version-$stamp}"

if [[ -x "$dir/promtool" ]]; then
    echo "promtool: cached in $dir" >&2
    echo "$dir/promtool"
    exit 0
fi
if [[ "${1:-}" == "--cached-only" ]]; then
    echo "promtool: not built in $dir (bash tests/alerts/build.sh)" >&2
    exit 3
fi
command -v go >/dev/null || { echo "promtool: Go is required (https://go.dev/dl)" >&2; exit 1; }
mkdir -p "$dir"
started=$(date +%s)
echo "promtool: building Prometheus $version's promtool into $dir (a cold build takes several minutes on 2 cores)" >&2
(
    cd "$module"
    export CGO_ENABLED=0
    # remove_all_sd: no service-discovery plugins (rule tests need none); about 2 min cold instead of 5
    go build -tags remove_all_sd -trimpath -ldflags "-s -w" -o "$dir/promtool.partial" github.com/prometheus/prometheus/cmd/promtool
)
mv "$dir/promtool.partial" "$dir/promtool"
echo "promtool: built in $(( $(date +%s) - started )) s" >&2
echo "$dir/promtool"
