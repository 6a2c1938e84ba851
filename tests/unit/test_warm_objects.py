"""What the operator applies for a warm tool (`operator/warm.py`), without a cluster: names, labels, probes."""

from __future__ import annotations

import re
from typing import Any

from mcp_tasks.operator.warm import build_autoscaler, build_deployment, build_service, pod_endpoint, warm_name
from mcp_tasks.tasks.tools import parse_manifest
from mcp_tasks.worker.warm_auth import WarmCallSigner, new_private_pem

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
KEY = WarmCallSigner.from_pem(new_private_pem()).public_pem


def mcptool(name: str, tool: str = "t", **warm: Any) -> tuple[dict[str, Any], Any]:
    obj = {
        "apiVersion": "mcptasks.io/v1alpha1",
        "kind": "McpTool",
        "metadata": {"name": name, "namespace": "ns", "uid": "u1"},
        "spec": {
            "name": tool,
            "description": "d",
            "inputSchema": {"type": "object"},
            "container": {"image": "example.org/t:1", "command": ["python", "t.py"]},
            "warm": warm,
        },
    }
    return obj, parse_manifest({**obj, "metadata": {"name": name}}, source="test")


def test_names_are_dns_labels_and_never_shared() -> None:
    names = [warm_name(n) for n in ("a.b", "a-b", "x" * 70, "x" * 71)]
    assert len(set(names)) == 4
    assert all(len(n) <= 63 and DNS_LABEL.match(n) for n in names)
    assert warm_name("word-stats") == "mcptool-word-stats"


def test_labels_are_valid_for_any_tool_and_mcptool_name() -> None:
    obj, tool = mcptool("m" * 200, tool="_private_tool_" + "y" * 60)
    deployment = build_deployment(obj, tool, instance="rel", call_key=KEY)
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert all(len(value) <= 63 and LABEL_VALUE.match(value) for value in labels.values()), labels
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert build_service(obj, tool, "rel")["spec"]["selector"].items() <= labels.items()


def test_replicas_probe_and_autoscaler() -> None:
    obj, tool = mcptool("w", minWorkers=0, maxWorkers=3, concurrency=2)
    deployment = build_deployment(obj, tool, None, KEY)
    assert deployment["spec"]["replicas"] == 1, "a Deployment scaled to zero would take no calls"
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["MCPTASKS_SERVE_CONCURRENCY"] == "2" and env["MCPTASKS_SERVE_HOST"] == "0.0.0.0"
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "calls"}
    assert env["MCPTASKS_SERVE_CALL_KEY"] == KEY, "the public half of the warm-call key, in the pod template"
    assert build_autoscaler(obj, tool, None) is None
    scaled_obj, scaled = mcptool("w", minWorkers=2, maxWorkers=5, autoscaling={})
    assert "replicas" not in build_deployment(scaled_obj, scaled, None, KEY)["spec"], "left to the HPA"
    hpa = build_autoscaler(scaled_obj, scaled, None)
    assert hpa is not None and (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 5)


def test_only_ready_pods_that_are_not_terminating_take_calls() -> None:
    def pod(ready: str, deleting: bool = False) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": "p"}
        if deleting:
            metadata["deletionTimestamp"] = "2026-12-02T00:00:00Z"
        return {
            "metadata": metadata,
            "spec": {"containers": [{"ports": [{"name": "calls", "containerPort": 8080}]}]},
            "status": {"podIP": "10.0.0.7", "conditions": [{"type": "Ready", "status": ready}]},
        }

    assert pod_endpoint(pod("True")) == "10.0.0.7:8080"
    assert pod_endpoint(pod("False")) is None
    assert pod_endpoint(pod("True", deleting=True)) is None
