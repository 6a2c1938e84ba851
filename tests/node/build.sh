#!/usr/bin/env bash
# Build the real-node tier's Go binaries (kubelet, kube-scheduler, kube-proxy v1.34.4 and CoreDNS) from
# Go modules into a cache outside the repository. A no-op when warm. The control plane itself (etcd,
# kube-apiserver, kube-controller-manager, kubectl, helm) comes from tests/controlplane/build.sh; these
# modules are separate so that adding the node does not change the control plane's cache key.
#
#   bash tests/node/build.sh                # builds if needed; prints the bin directory last
#   bash tests/node/build.sh --cached-only  # prints the bin directory if built, else exits 3
#
# Environment:
#   MCPTASKS_NODEBIN_DIR  where binaries go (default ~/.cache/mcp-tasks/node/<version>-<inputs hash>)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="v1.34.4"
minor="34"
stamp="$(cat "$here/nodebin/go.mod" "$here/nodebin/go.sum" "$here/nodebin/tools.go" \
    "$here/coredns/go.mod" "$here/coredns/go.sum" "$here/coredns/main.go" | sha256sum | cut -c1-12)"
bin="${MCPTASKS_NODEBIN_DIR:-$HOME/.cache/mcp-tasks/node/$version-$stamp}"
binaries=(kubelet kube-scheduler kube-proxy coredns)

complete=1
for name in "${binaries[@]}"; do
    [[ -x "$bin/$name" ]] || complete=0
done
if [[ "$complete" == 1 ]]; then
    echo "node: cached in $bin" >&2
    echo "$bin"
    exit 0
fi
if [[ "${1:-}" == "--cached-only" ]]; then
    echo "node: not built in $bin" >&2
    exit 3
fi

command -v go >/dev/null || { echo "node: Go is required (https://go.dev/dl)" >&2; exit 1; }
mkdir -p "$bin.partial"
export CGO_ENABLED=0
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
started=$(date +%s)
echo "node: building kubelet, kube-scheduler, kube-proxy $version and CoreDNS into $bin (89 s cold on 2 cores, measured 2026-12-04)" >&2
# one binary at a time: each link of a Kubernetes command takes a few GiB
for name in kubelet kube-scheduler kube-proxy; do
    [[ -x "$bin.partial/$name" ]] && continue
    echo "node: go build $name" >&2
    (cd "$here/nodebin" && go build -trimpath -ldflags "$ldflags" -o "$bin.partial/$name.tmp" "k8s.io/kubernetes/cmd/$name")
    mv "$bin.partial/$name.tmp" "$bin.partial/$name"
done
if [[ ! -x "$bin.partial/coredns" ]]; then
    echo "node: go build coredns" >&2
    (cd "$here/coredns" && go build -trimpath -ldflags "-s -w" -o "$bin.partial/coredns.tmp" .)
    mv "$bin.partial/coredns.tmp" "$bin.partial/coredns"
fi
rm -rf "$bin"
mv "$bin.partial" "$bin"
echo "node: built in $(( $(date +%s) - started )) s" >&2
echo "$bin"
