"""The Helm chart's least-privilege Roles are enough to run the product, and no more.

The chart's `templates/rbac.yaml` and the operator's admission policy, rendered by the real `helm template`,
are applied to a fresh namespace; the gateway and the operator then run with real ServiceAccount tokens
(TokenRequest) bound to those Roles, the operator's writes (Jobs, warm workers) judged by that policy.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.controlplane.cluster import REPO, ControlPlane
from tests.kube.conftest import KUBE_WAIT_S, Gateways, Operators, client, until
from tests.kube.test_warm_tools import apply_warm, endpoints

CHART = REPO / "charts" / "mcp-tasks"


def account_kubeconfig(plane: ControlPlane, namespace: str, account: str, folder: Path) -> Path:
    token = plane.kubectl("create", "token", account, "-n", namespace, "--duration", "1h").strip()
    path = folder / f"{account}.kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "test", "cluster": {"server": plane.server, "certificate-authority": str(plane.ca_file)}}
                ],
                "users": [{"name": account, "user": {"token": token}}],
                "contexts": [{"name": "test", "context": {"cluster": "test", "user": account, "namespace": namespace}}],
                "current-context": "test",
            }
        )
    )
    return path


def can(plane: ControlPlane, kubeconfig: Path, *action: str) -> bool:
    """`kubectl auth can-i` as the account of `kubeconfig`."""
    result = subprocess.run(
        [str(plane.bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig), "auth", "can-i", *action],
        capture_output=True,
        text=True,
        check=False,
    )
    return result.stdout.strip() == "yes"


async def test_gateway_and_operator_run_with_the_shipped_least_privilege_roles(
    monkeypatch: pytest.MonkeyPatch,
    gateways: Gateways,
    operators: Operators,
    http_session: aiohttp.ClientSession,
    control_plane: ControlPlane,
    namespace: str,
    tmp_path: Path,
) -> None:
    rbac = control_plane.helm(
        "template",
        "r",
        str(CHART),
        "--namespace",
        namespace,
        "--show-only",
        "templates/rbac.yaml",
        "--show-only",
        "templates/operator-admission-policy.yaml",
        "--set",
        "auth.existingSecret=tokens",
    )
    control_plane.kubectl("apply", "-f", "-", input_text=rbac)
    gateway_config = account_kubeconfig(control_plane, namespace, "r-mcp-tasks-gateway", tmp_path)
    operator_config = account_kubeconfig(control_plane, namespace, "r-mcp-tasks-operator", tmp_path)

    assert not can(control_plane, gateway_config, "create", "jobs")
    assert not can(control_plane, gateway_config, "get", "secrets")
    assert not can(control_plane, gateway_config, "update", "mcptasks", "--subresource=status")
    assert can(control_plane, operator_config, "update", "mcptasks", "--subresource=status")
    # update: only to drop a task's field ownership, the admission policy refuses any other change
    # (tests/kube/test_operator_scope.py)
    assert can(control_plane, operator_config, "update", "mcptasks")
    assert not can(control_plane, operator_config, "list", "secrets")
    assert not can(control_plane, operator_config, "get", "mcptasks", "-n", "default")
    for kind in ("deployments", "services", "horizontalpodautoscalers"):  # warm tools, server-side applied
        assert can(control_plane, operator_config, "create", kind) and can(
            control_plane, operator_config, "patch", kind
        )
    assert not can(control_plane, gateway_config, "create", "deployments")
    assert can(control_plane, operator_config, "create", "tokenreviews")
    assert not can(control_plane, operator_config, "create", "subjectaccessreviews")
    assert not can(control_plane, gateway_config, "create", "tokenreviews")  # only with serviceAccountTokens

    monkeypatch.setenv("MCPTASKS_INSTANCE", "r")  # as the chart sets it: the policy admits release "r"'s objects
    operators.start(kubeconfig=operator_config)
    gateway = await gateways.start(kubeconfig=gateway_config)
    mcp = client(http_session, gateway)
    asked = await mcp.start_task("confirm_delete", {"filename": "a.txt"})
    await mcp.wait_status(asked, "input_required", timeout_s=30)
    await mcp.update(asked, {"confirm": {"action": "accept", "content": {"confirm": True}}})
    done = await mcp.wait_status(asked, "completed", "failed", timeout_s=30)
    assert done["result"]["content"][0]["text"] == "Deleted a.txt", done
    # The operator's first write dropped the field ownership the create recorded (its one McpTask update),
    # and no later write brought it back (docs/performance.md, "No field ownership").
    stored = json.loads(
        control_plane.kubectl("get", "mcptask", asked, "-n", namespace, "-o", "json", "--show-managed-fields")
    )
    assert not stored["metadata"].get("managedFields"), stored["metadata"]
    sleeping = await mcp.start_task("sleeper", {"seconds": 60})
    await mcp.wait_status(sleeping, "working")
    await mcp.cancel(sleeping)
    assert (await mcp.wait_status(sleeping, "cancelled", "failed", timeout_s=30))["status"] == "cancelled"

    apply_warm(control_plane, namespace, "warm-echo")  # a warm tool, run with the same least privilege
    try:
        await until(lambda: bool(endpoints(control_plane, namespace, "warm-echo")))
        catalog: Any = gateway.services.catalog
        await until(lambda: bool(catalog.warm_endpoints("warm_echo")))  # the gateway has seen them too
        task_id = await mcp.start_task("warm_echo", {"text": "least"})
        # KUBE_WAIT_S: 30 s once ran out with the rest of the suite beside it (7 s alone; cause not found)
        warm_task = await mcp.wait_status(task_id, "completed", "failed", timeout_s=KUBE_WAIT_S)
        assert warm_task["result"]["content"][0]["text"].startswith("least pid="), warm_task
    finally:
        control_plane.kubectl("delete", "mcptool", "warm-echo", "-n", namespace)
