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
# (MCPTASKS_PROMTOOL, the path of a promtool a user already has, is read by the tests, tests/binaries.py, and
# by `make promtool`, which then skips this script.)
#
# Prometheus 3.x publishes its Go module as v0.3xx.y (v0.316.0 is Prometheus 3.16.0).
#
# Why a build and not Debian's `prometheus` package (checked 2026-12-07, `apt-cache policy prometheus`): Debian 12
# ships Prometheus 2.42.0 (2023). Its `promtool test rules` runs the McpTasksFailing test of
# tests/kube/test_alerts.py (checked: it passes, and fails on a "0%" summary), but it evaluates rules as
# Prometheus 2 does, and Prometheus 3 changed what the alerts read: range selectors are left-open (a
# `rate(...[15m])` at a step boundary sees one sample fewer), so a rule that passes on 2.42 may not fire, or
# fire later, on the Prometheus 3 that runs it in a cluster today. The package also exists only on Debian and
# Ubuntu, and brings the Prometheus server with it. The build takes 124 s cold on 2 cores (measured 2026-12-04,
# `-tags remove_all_sd`); tests/binaries.py refuses a promtool older than 3.0 wherever it comes from.
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
number="${version#v0.}" && number="${number%%.*}"  # v0.316.0 is Prometheus 3.16.0
release="$(( number / 100 )).$(( number % 100 )).${version##*.}"
echo "promtool: building Prometheus $release's promtool into $dir (124 s cold on 2 cores, measured 2026-12-04)" >&2
(
    cd "$module"
    export CGO_ENABLED=0
    # remove_all_sd: no service-discovery plugins (rule tests need none); 124 s cold instead of 314 s (2026-12-04).
    # The version is stamped as Prometheus' own release does, so `promtool --version` says what it is.
    go build -tags remove_all_sd -trimpath \
        -ldflags "-s -w -X github.com/prometheus/common/version.Version=$release" \
        -o "$dir/promtool.partial" github.com/prometheus/prometheus/cmd/promtool
)
mv "$dir/promtool.partial" "$dir/promtool"
echo "promtool: built in $(( $(date +%s) - started )) s" >&2
echo "$dir/promtool"
