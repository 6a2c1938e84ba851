#!/usr/bin/env bash
# Build the identity provider the identity tests run against (ory hydra, an OAuth 2.1 / OpenID Connect
# server) from Go modules into a cache outside the repository. A no-op when warm.
#
#   bash tests/identity/build.sh                # builds if needed; prints the binary's path last
#   bash tests/identity/build.sh --cached-only  # prints the binary's path if built, else exits 3
#
# Environment:
#   MCPTASKS_HYDRA_DIR  where the binary goes (default ~/.cache/mcp-tasks/hydra/<version>-<go.sum hash>)
# (MCPTASKS_HYDRA, the path of a hydra a user already has, is read by the tests, tests/binaries.py, and by
# `make identity`, which then skips this script.)
#
# hydra keeps its in-memory database in SQLite, so this build needs cgo (a C compiler) and the
# sqlite build tags hydra's own Makefile uses.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
module="$here/hydra"
version="v2.3.0"
stamp="$(cat "$module/go.mod" "$module/go.sum" "$module/tools.go" | sha256sum | cut -c1-12)"
dir="${MCPTASKS_HYDRA_DIR:-$HOME/.cache/mcp-tasks/hydra/$version-$stamp}"

if [[ -x "$dir/hydra" ]]; then
    echo "identity provider: cached in $dir" >&2
    echo "$dir/hydra"
    exit 0
fi
if [[ "${1:-}" == "--cached-only" ]]; then
    echo "identity provider: hydra not built in $dir" >&2
    exit 3
fi
command -v go >/dev/null || { echo "identity provider: Go is required (https://go.dev/dl)" >&2; exit 1; }
command -v cc >/dev/null || { echo "identity provider: a C compiler is required (hydra's SQLite)" >&2; exit 1; }
mkdir -p "$dir"
started=$(date +%s)
echo "identity provider: building hydra $version into $dir (64 s cold on 2 cores, measured 2026-12-04)" >&2
(
    cd "$module"
    export CGO_ENABLED=1
    go build -trimpath -tags sqlite,sqlite_omit_load_extension \
        -ldflags "-s -w -X github.com/ory/hydra/v2/driver/config.Version=$version" \
        -o "$dir/hydra.partial" github.com/ory/hydra/v2
)
mv "$dir/hydra.partial" "$dir/hydra"
echo "identity provider: built in $(( $(date +%s) - started )) s" >&2
echo "$dir/hydra"
