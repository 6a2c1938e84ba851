#!/usr/bin/env bash
# Build the S3-compatible object store the artifact tests run against (SeaweedFS's `weed` binary) from
# Go modules into a cache outside the repository. A no-op when warm.
#
#   bash tests/objectstore/build.sh                # builds if needed; prints the binary's path last
#   bash tests/objectstore/build.sh --cached-only  # prints the binary's path if built, else exits 3
#
# Environment:
#   MCPTASKS_WEED_DIR  where the binary goes (default ~/.cache/mcp-tasks/seaweedfs/<version>-<go.sum hash>)
#
# SeaweedFS publishes no semver tags, so the module pins a commit (pseudo-version) in go.mod.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
module="$here/seaweedfs"
version="$(sed -n 's/^require github.com\/seaweedfs\/seaweedfs \(.*\)$/\1/p' "$module/go.mod")"
stamp="$(cat "$module/go.mod" "$module/go.sum" "$module/tools.go" | sha256sum | cut -c1-12)"
dir="${MCPTASKS_WEED_DIR:-$HOME/.cache/mcp-tasks/seaweedfs/${version##*-}-$stamp}"

if [[ -x "$dir/weed" ]]; then
    echo "object store: cached in $dir" >&2
    echo "$dir/weed"
    exit 0
fi
if [[ "${1:-}" == "--cached-only" ]]; then
    echo "object store: weed not built in $dir (bash tests/objectstore/build.sh)" >&2
    exit 3
fi
command -v go >/dev/null || { echo "object store: Go is required (https://go.dev/dl)" >&2; exit 1; }
mkdir -p "$dir"
started=$(date +%s)
echo "object store: building SeaweedFS $version into $dir (a cold build takes 15-35 min on 2 cores)" >&2
(
    cd "$module"
    export CGO_ENABLED=0
    go build -trimpath -ldflags "-s -w" -o "$dir/weed.partial" github.com/seaweedfs/seaweedfs/weed
)
mv "$dir/weed.partial" "$dir/weed"
echo "object store: built in $(( $(date +%s) - started )) s" >&2
echo "$dir/weed"
