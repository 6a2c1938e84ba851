"""Fixtures of the real-node tier: one real node (containerd, kubelet, kube-scheduler, kube-proxy, CoreDNS)
beside its own control plane, for the tests of this folder (`tests/node/cluster.py`): torn down when they
are done, so the rest of the suite does not share the two cores with a kubelet and its pods.

The tier skips with the reason when this machine cannot run it (not Linux, not root, Debian packages or
binaries missing), unless `MCPTASKS_REQUIRE_CONTROL_PLANE=1`, which turns the skip into a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.node.cluster import RealNode, node_bin_dir, unavailable_reason


@pytest.fixture(scope="package")
def real_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealNode]:
    """The started node; `real_node.control_plane` gives kubectl, helm and the kubeconfig.

    Start-up builds the project's image (about 2 min with the base and wheelhouse cached) and waits for
    the node to be Ready without taints.
    """
    reason = unavailable_reason()
    if reason is not None:
        if os.environ.get("MCPTASKS_REQUIRE_CONTROL_PLANE") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    with RealNode(tmp_path_factory.mktemp("real-node"), node_bin=node_bin_dir()) as node:
        yield node
