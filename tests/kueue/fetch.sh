#!/usr/bin/env bash
# Kueue's CRDs (kueue.x-k8s.io: ClusterQueue, LocalQueue, ResourceFlavor, Workload, ...), from Kueue's own Go module
# at a pinned version through the Go module proxy (checked against the Go checksum database and the hash below),
# into a cache outside the repository. The Kubernetes tests apply them to the test control plane
# (tests/kube/test_operator_admission.py). Under 2 s cold (a 4.7 MB module zip), a no-op when cached.
#
#   bash tests/kueue/fetch.sh                # fetches if needed; prints the CRD folder last
#   bash tests/kueue/fetch.sh --cached-only  # prints the CRD folder if fetched, else exits 3
#
# Environment:
#   MCPTASKS_KUEUE_DIR  the folder this script fills (default ~/.cache/mcp-tasks/kueue/<version>)
set -euo pipefail

version="v0.17.0"
sum="h1:7hzb38M4eKGzYW+CFv2s1L+swzzacUCHOCXxZmAV90I="
dir="${MCPTASKS_KUEUE_DIR:-$HOME/.cache/mcp-tasks/kueue/$version}"

if [[ -f "$dir/crds/.complete" ]]; then
    echo "kueue: CRDs of $version cached in $dir/crds" >&2
    echo "$dir/crds"
    exit 0
fi
if [[ "${1:-}" == "--cached-only" ]]; then
    echo "kueue: CRDs of $version not fetched into $dir (bash tests/kueue/fetch.sh)" >&2
    exit 3
fi
command -v go >/dev/null || { echo "kueue: Go is required to fetch Kueue's CRDs (https://go.dev/dl)" >&2; exit 1; }
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
echo "kueue: go mod download sigs.k8s.io/kueue@$version" >&2
json="$(cd "$scratch" && go mod download -json "sigs.k8s.io/kueue@$version")"
read -r module_dir module_sum < <(python3 -c 'import json,sys; m=json.loads(sys.stdin.read()); print(m["Dir"], m["Sum"])' <<<"$json")
if [[ "$module_sum" != "$sum" ]]; then
    echo "kueue: sigs.k8s.io/kueue@$version has hash $module_sum, expected $sum" >&2
    exit 1
fi
rm -rf "$dir/crds.partial"
mkdir -p "$dir/crds.partial"
cp "$module_dir"/config/components/crd/bases/*.yaml "$dir/crds.partial/"
chmod u+w "$dir/crds.partial"/*.yaml
touch "$dir/crds.partial/.complete"
rm -rf "$dir/crds"
mv "$dir/crds.partial" "$dir/crds"
echo "$dir/crds"
