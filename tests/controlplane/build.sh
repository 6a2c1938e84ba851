#!/usr/bin/env bash
# Build the test control plane (kube-apiserver, kube-controller-manager, kubectl, etcd) and the chart
# tools (helm, actionlint) from Go modules into a cache outside the repository. A no-op when warm.
#
#   bash tests/controlplane/build.sh                # builds if needed; prints the bin directory last
#   bash tests/controlplane/build.sh --cached-only  # prints the bin directory if built, else exits 3
#
# Environment:
#   MCPTASKS_TESTBIN_DIR  the folder this script builds into, and so where the tests find what it built
#                         (default ~/.cache/mcp-tasks/testbin/<version>-<go.sum hash>); never a user's binaries
# (A user's own binaries are named by KUBEBUILDER_ASSETS, envtest's folder of kube-apiserver, etcd and kubectl,
# MCPTASKS_HELM and MCPTASKS_ACTIONLINT, else found on PATH: tests/binaries.py, which `make controlplane` asks
# first, building only when one is missing.)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
module="$here/testbin"
version="v1.34.4"
minor="34"
stamp="$(cat "$module/go.mod" "$module/go.sum" "$module/cmd/etcd/main.go" "$module/tools.go" | sha256sum | cut -c1-12)"
bin="${MCPTASKS_TESTBIN_DIR:-$HOME/.cache/mcp-tasks/testbin/$version-$stamp}"
binaries=(kube-apiserver kube-controller-manager kubectl etcd)
tools_module="$here/helm"
tools_stamp="$(cat "$tools_module/go.mod" "$tools_module/go.sum" "$tools_module/tools.go" | sha256sum | cut -c1-12)"

# helm and actionlint: their own module (their Kubernetes libraries are newer than the control plane's),
# rebuilt when that module changes, into the same folder.
tools_built() {
    [[ -x "$bin/helm" && -x "$bin/actionlint" && "$(cat "$bin/tools.stamp" 2>/dev/null)" == "$tools_stamp" ]]
}
build_tools() {
    tools_built && return 0
    command -v go >/dev/null || { echo "control plane: Go is required (https://go.dev/dl)" >&2; exit 1; }
    echo "control plane: go build helm, actionlint" >&2
    (
        cd "$tools_module"
        export CGO_ENABLED=0
        go build -trimpath -ldflags "-s -w" -o "$bin/helm.partial" helm.sh/helm/v3/cmd/helm
        go build -trimpath -ldflags "-s -w" -o "$bin/actionlint.partial" github.com/rhysd/actionlint/cmd/actionlint
    )
    mv "$bin/helm.partial" "$bin/helm"
    mv "$bin/actionlint.partial" "$bin/actionlint"
    echo "$tools_stamp" > "$bin/tools.stamp"
}

complete=1
for name in "${binaries[@]}"; do
    [[ -x "$bin/$name" ]] || complete=0
done
if [[ "$complete" == 1 ]]; then
    if [[ "${1:-}" == "--cached-only" ]] && ! tools_built; then
        echo "control plane: helm and actionlint not built in $bin" >&2
        exit 3
    fi
    build_tools
    echo "control plane: cached in $bin" >&2
    echo "$bin"
    exit 0
fi
if [[ "${1:-}" == "--cached-only" ]]; then
    echo "control plane: not built in $bin" >&2
    exit 3
fi

command -v go >/dev/null || { echo "control plane: Go is required (https://go.dev/dl)" >&2; exit 1; }
mkdir -p "$bin.partial"
cd "$module"
export CGO_ENABLED=0
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
started=$(date +%s)
echo "control plane: building Kubernetes $version and etcd into $bin (343 s cold on 2 cores with helm and actionlint, measured 2026-12-04)" >&2
for name in kube-apiserver kube-controller-manager kubectl; do
    echo "control plane: go build $name" >&2
    go build -trimpath -ldflags "$ldflags" -o "$bin.partial/$name" "k8s.io/kubernetes/cmd/$name"
done
echo "control plane: go build etcd" >&2
go build -trimpath -ldflags "-s -w" -o "$bin.partial/etcd" ./cmd/etcd
rm -rf "$bin"
mv "$bin.partial" "$bin"
build_tools
echo "control plane: built in $(( $(date +%s) - started )) s" >&2
echo "$bin"
