"""A tool's pod shape on the real control plane (issue 20 item 4): what an McpTool's `spec.container` and the
release's `toolDefaults` put into its Job and warm Deployment, read back from the API server; what the CRD
refuses; a ResourceQuota namespace. Pods run on the process node, which resolves `secretKeyRef` env and
ConfigMap volumes but enforces no limit: the OOM outcome is the real-node tests' (`REAL_NODE_HOOKS`).
"""

from __future__ import annotations

import json
import secrets
import subprocess
from typing import Any

import aiohttp
import pytest
import yaml

from tests.controlplane.cluster import ControlPlane
from tests.kube.conftest import REPO, Gateways, Operators, client, until

WAIT_S = 60.0
DEFAULTS: dict[str, Any] = {
    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
    "nodeSelector": {"pool": "tools"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "tools", "effect": "NoSchedule"}],
    "imagePullSecrets": [{"name": "release-registry"}],
}
REAL_NODE_HOOKS = {
    "oom": "memory_hog with limits.memory below `mebibytes`: the kubelet's OOMKilled (tests/tools/tools.py)",
    "secret_env": "env_echo with a secretKeyRef env var, resolved by the kubelet instead of the process node",
}
"""What the real-node tests (issue 20 items 1-3) assert with the same tools where only a kubelet can."""


def kube_json(plane: ControlPlane, namespace: str, *what: str) -> Any:
    return json.loads(plane.kubectl("get", *what, "-n", namespace, "-o", "json"))


def mcptool(
    name: str, tool: str, container: dict[str, Any], tool_name: str | None = None, **spec: Any
) -> dict[str, Any]:
    """An McpTool running `tests/tools/tools.py <tool>` with the pod shape `container` (tool name `tool_name`,
    default `tool`)."""
    return {
        "apiVersion": "mcptasks.io/v1alpha1",
        "kind": "McpTool",
        "metadata": {"name": name},
        "spec": {
            "name": tool_name or tool,
            "description": f"{tool} with a pod shape",
            "inputSchema": {"type": "object"},
            "execution": {"taskPolicy": "required"},
            "container": {
                "image": "ghcr.io/mcp-tasks/tests:0.1.0",
                "command": ["python", "tools.py", tool],
                "workingDir": str(REPO / "tests" / "tools"),
                **container,
            },
            **spec,
        },
    }


def apply(plane: ControlPlane, namespace: str, *documents: dict[str, Any], strict: bool = True) -> str:
    validate = "--validate=strict" if strict else "--validate=false"
    return plane.kubectl("apply", validate, "-n", namespace, "-f", "-", input_text=yaml.safe_dump_all(documents))


def refusal(plane: ControlPlane, namespace: str, document: dict[str, Any], strict: bool = True) -> str:
    """The API server's refusal of `document` (fails the test when it is admitted)."""
    with pytest.raises(subprocess.CalledProcessError) as refused:
        apply(plane, namespace, document, strict=strict)
    return str(refused.value.stderr)


SHAPED: dict[str, Any] = {
    "resources": {"requests": {"cpu": "200m"}, "limits": {"memory": "256Mi"}},
    "env": [
        {"name": "API_TOKEN", "valueFrom": {"secretKeyRef": {"name": "api-credentials", "key": "token"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "CONFIG_FILE", "value": "/etc/tool-config/region"},
    ],
    "envFrom": [{"configMapRef": {"name": "tool-config"}, "prefix": "CFG_"}],
    "volumes": [{"name": "config", "configMap": {"name": "tool-config"}}],
    "volumeMounts": [{"name": "config", "mountPath": "/etc/tool-config", "readOnly": True}],
    "imagePullSecrets": [{"name": "tool-registry"}],
    "nodeSelector": {"pool": "gpu", "zone": "a"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}
            ]
        }
    },
    "serviceAccountName": "tool-identity",
}


def expected_shape(pod: dict[str, Any], container: dict[str, Any], suffix: str) -> None:
    """The shape `SHAPED` over `DEFAULTS` as the API server holds it, with the restricted profile intact."""
    assert container["resources"] == {
        "requests": {"cpu": "200m", "memory": "128Mi"},  # the tool's cpu, the release's memory
        "limits": {"cpu": "1", "memory": "256Mi"},  # the release's cpu, the tool's memory
    }
    assert {"name": "API_TOKEN", "valueFrom": {"secretKeyRef": {"name": "api-credentials", "key": "token"}}} in (
        container["env"]
    )
    assert container["envFrom"] == [{"configMapRef": {"name": "tool-config"}, "prefix": "CFG_"}]
    assert {"name": "config", "mountPath": "/etc/tool-config", "readOnly": True} in container["volumeMounts"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["nodeSelector"] == {"pool": "gpu", "zone": "a"}
    assert pod["tolerations"] == [*DEFAULTS["tolerations"], *SHAPED["tolerations"]]
    assert pod["imagePullSecrets"] == [{"name": "release-registry"}, {"name": "tool-registry"}]
    assert pod["affinity"] == SHAPED["affinity"]
    assert pod["serviceAccountName"] == "tool-identity" and pod["automountServiceAccountToken"] is False
    assert pod["runtimeClassName"] == f"sandboxed-{suffix}" and pod["priorityClassName"] == f"tools-{suffix}"
    assert {"name": "config", "configMap": {"name": "tool-config", "defaultMode": 420}} in pod["volumes"]


@pytest.fixture
def shape_objects(control_plane: ControlPlane, namespace: str) -> str:
    """The Secret, ConfigMap and ServiceAccount `SHAPED` names, and a RuntimeClass and PriorityClass (cluster
    objects: suffixed) so the pod is admitted; returns the suffix."""
    suffix = secrets.token_hex(3)
    control_plane.kubectl(
        "create", "secret", "generic", "api-credentials", "-n", namespace, "--from-literal=token=s3cr3t-value"
    )
    control_plane.kubectl("create", "configmap", "tool-config", "-n", namespace, "--from-literal=region=eu-west")
    control_plane.kubectl("create", "serviceaccount", "tool-identity", "-n", namespace)
    cluster_objects = [
        {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": f"sandboxed-{suffix}"},
            "handler": "runsc",
        },
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": f"tools-{suffix}"},
            "value": 1000,
        },
    ]
    control_plane.kubectl("apply", "-f", "-", input_text=yaml.safe_dump_all(cluster_objects))
    return suffix


async def test_a_tools_pod_shape_over_the_release_defaults_reaches_its_job_and_warm_deployment(
    gateways: Gateways,
    operators: Operators,
    http_session: aiohttp.ClientSession,
    control_plane: ControlPlane,
    namespace: str,
    shape_objects: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Our own choice (issue 20 item 4): the McpTool's fields pass through to the pod template as Kubernetes
    fields, over `toolDefaults` (the tool's value wins), for Jobs and warm Deployments alike; the Secret's value
    reaches the tool (resolved by the process node here, the kubelet on a real node) and never the operator."""
    shaped = {**SHAPED, "runtimeClassName": f"sandboxed-{shape_objects}", "priorityClassName": f"tools-{shape_objects}"}
    apply(
        control_plane,
        namespace,
        mcptool("shaped-echo", "env_echo", shaped),
        mcptool("shaped-warm", "warm_echo", shaped, tool_name="shaped_warm", warm={"minWorkers": 1}),
    )
    monkeypatch.setenv("MCPTASKS_TOOL_DEFAULTS", json.dumps(DEFAULTS))
    operators.start()
    mcp = client(http_session, await gateways.start())

    async def listed() -> bool:
        return "env_echo" in [t["name"] for t in (await mcp.request("tools/list")).result["tools"]]

    await until(listed, timeout_s=20)
    task_id = await mcp.start_task("env_echo", {"names": ["API_TOKEN", "POD_NAMESPACE"]})
    jobs: list[dict[str, Any]] = []

    def job_created() -> bool:
        jobs[:] = kube_json(control_plane, namespace, "jobs", "-l", f"mcptasks.io/task-id={task_id}")["items"]
        return bool(jobs)

    await until(job_created)
    pod = jobs[0]["spec"]["template"]["spec"]
    expected_shape(pod, pod["containers"][0], shape_objects)
    assert any(v["name"] == "worker-token" and "projected" in v for v in pod["volumes"])  # still ours
    done = await mcp.wait_status(task_id, "completed", "failed", timeout_s=WAIT_S)
    assert done["status"] == "completed", done
    text = done["result"]["content"][0]["text"]
    assert text == f"API_TOKEN=s3cr3t-value POD_NAMESPACE={namespace} file=eu-west", text
    # envFrom is in the pod spec (above); the process node does not expand it, a kubelet does

    deployments: list[dict[str, Any]] = []

    def deployed() -> bool:
        deployments[:] = kube_json(control_plane, namespace, "deployments")["items"]
        return bool(deployments)

    await until(deployed)
    template = deployments[0]["spec"]["template"]["spec"]
    expected_shape(template, template["containers"][0], shape_objects)


def test_the_crd_refuses_every_field_that_would_weaken_the_restricted_profile(
    control_plane: ControlPlane, namespace: str
) -> None:
    """Our own choice (issue 20 item 4; Pod Security Standards `restricted`): no McpTool field reaches a
    `securityContext`, a hostPath, a host namespace or the operator's own volumes; `kubectl apply` refuses them,
    and without strict validation a hostPath volume is pruned to nothing and refused by the CEL rule."""

    def tool(**container: Any) -> dict[str, Any]:
        return mcptool(f"weak-{secrets.token_hex(3)}", "env_echo", container)

    host_path = {"volumes": [{"name": "host", "hostPath": {"path": "/"}}]}
    assert 'unknown field "spec.container.volumes[0].hostPath"' in refusal(control_plane, namespace, tool(**host_path))
    pruned = refusal(control_plane, namespace, tool(**host_path), strict=False)
    assert "exactly one of configMap, secret, persistentVolumeClaim" in pruned
    privileged = tool(securityContext={"privileged": True})
    assert 'unknown field "spec.container.securityContext"' in refusal(control_plane, namespace, privileged)
    host_network = tool(hostNetwork=True)
    assert 'unknown field "spec.container.hostNetwork"' in refusal(control_plane, namespace, host_network)
    over_tmp = tool(
        volumes=[{"name": "cfg", "configMap": {"name": "x"}}], volumeMounts=[{"name": "cfg", "mountPath": "/tmp/x"}]
    )
    assert "where the operator mounts its own volumes" in refusal(control_plane, namespace, over_tmp)
    ours = tool(volumes=[{"name": "worker-token", "secret": {"secretName": "x"}}])
    assert "this name is the operator's own" in refusal(control_plane, namespace, ours)
    dangling = tool(volumeMounts=[{"name": "nowhere", "mountPath": "/data"}])
    assert "each must name one of volumes" in refusal(control_plane, namespace, dangling)
    both = tool(env=[{"name": "X", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}])
    assert "exactly one of value and valueFrom" in refusal(control_plane, namespace, both)
    greedy = tool(resources={"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}})
    assert "a request may not exceed its limit" in refusal(control_plane, namespace, greedy)
    not_a_quantity = tool(resources={"limits": {"memory": "lots"}})
    assert "spec.container.resources.limits.memory" in refusal(control_plane, namespace, not_a_quantity)
    assert "created" in apply(control_plane, namespace, tool(resources={"limits": {"cpu": 2, "memory": "1.5Gi"}}))


QUOTA = {
    "apiVersion": "v1",
    "kind": "ResourceQuota",
    "metadata": {"name": "compute"},
    "spec": {"hard": {"requests.cpu": "2", "requests.memory": "2Gi", "limits.cpu": "4", "limits.memory": "4Gi"}},
}


async def test_a_resource_quota_namespace_admits_tool_pods_with_the_release_defaults_and_refuses_them_without(
    gateways: Gateways,
    operators: Operators,
    http_session: aiohttp.ClientSession,
    control_plane: ControlPlane,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kubernetes ResourceQuota semantics (a quota on cpu/memory requires every pod to declare them): without
    `toolDefaults` a tool pod is refused (the Job's `FailedCreate` Event says why, the task fails at the start
    deadline); with them the same tool runs."""
    control_plane.kubectl("apply", "-n", namespace, "-f", "-", input_text=yaml.safe_dump(QUOTA))
    apply(control_plane, namespace, mcptool("plain-echo", "env_echo", {}))
    bare = operators.start("--start-deadline", "5")
    mcp = client(http_session, await gateways.start())

    async def listed() -> bool:
        return "env_echo" in [t["name"] for t in (await mcp.request("tools/list")).result["tools"]]

    await until(listed, timeout_s=20)
    refused = await mcp.start_task("env_echo", {"names": []})
    done = await mcp.wait_status(refused, "completed", "failed", timeout_s=WAIT_S)
    assert done["status"] == "failed" and done["error"]["data"]["reason"] == "StartTimeout", done

    def quota_event() -> bool:
        events = kube_json(control_plane, namespace, "events")["items"]
        return any(e["reason"] == "FailedCreate" and "quota" in e["message"] for e in events)

    await until(quota_event)
    operators.kill(bare)
    monkeypatch.setenv("MCPTASKS_TOOL_DEFAULTS", json.dumps({"resources": DEFAULTS["resources"]}))
    operators.start()
    admitted = await mcp.start_task("env_echo", {"names": []})
    done = await mcp.wait_status(admitted, "completed", "failed", timeout_s=WAIT_S)
    assert done["status"] == "completed" and not done["result"].get("isError"), done
    used = kube_json(control_plane, namespace, "resourcequota", "compute")["status"]["hard"]
    assert used["limits.memory"] == "4Gi"
