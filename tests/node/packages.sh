#!/usr/bin/env bash
# The Debian packages the real-node tier needs: an image builder (docker.io, which brings containerd and
# runc), mmdebstrap for the base image, the CNI plugins, and what kubelet and kube-proxy call (iptables,
# conntrack, socat). Installs the missing ones as root with apt-get; otherwise says which are missing
# and how to install them, and exits 2.
#
#   bash tests/node/packages.sh           # install what is missing (root), or say what to install
#   bash tests/node/packages.sh --check   # only say what is missing (exit 2 if anything is)
#
# No service is started: installs run with a policy-rc.d that refuses service starts, because the
# tier starts its own dockerd and containerd with their own state folders.
set -euo pipefail

packages=(docker.io containerd runc mmdebstrap containernetworking-plugins iptables conntrack socat)
missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [[ ${#missing[@]} == 0 ]]; then
    exit 0
fi
command="apt-get install -y --no-install-recommends ${missing[*]}"
if [[ "${1:-}" == "--check" ]] || [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
    echo "real node: missing Debian packages: ${missing[*]}" >&2
    echo "real node: install them with: sudo $command" >&2
    exit 2
fi
echo "real node: installing ${missing[*]}" >&2
policy=/usr/sbin/policy-rc.d
if [[ ! -e "$policy" ]]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy"
    chmod +x "$policy"
    trap 'rm -f "$policy"' EXIT
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends "${missing[@]}" >&2 || {
    apt-get update >&2
    apt-get install -y --no-install-recommends "${missing[@]}" >&2
}
