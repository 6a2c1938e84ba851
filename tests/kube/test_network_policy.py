"""The chart's egress NetworkPolicies (issue 21, item 3): rendered by the real `helm template`, read back,
and validated by the real API server (`kubectl apply --dry-run=server`).

The process node of the test control plane does not enforce NetworkPolicies (no CNI), so what is tested
is what the policies say, against the labels the operator's own code puts on tool pods and warm workers
(`mcp_tasks.operator.labels`): a policy selecting the wrong pods would select none in a real cluster.
"""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from mcp_tasks.operator.labels import run_labels, warm_labels
from tests.conftest import REPO
from tests.controlplane.cluster import ControlPlane

CHART = REPO / "charts" / "mcp-tasks"
TOOL_RUN = run_labels({"metadata": {"name": "t1", "labels": {}}}, "word_stats", "r")
WARM_WORKER = warm_labels("word-stats", "word_stats", "r")
DNS = {53}
TOOL_ALLOW: dict[str, Any] = {
    "to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}],
    "ports": [{"port": 3128, "protocol": "TCP"}],
}
COMPONENT_ALLOW: dict[str, Any] = {"to": [{"namespaceSelector": {"matchLabels": {"team": "storage"}}}]}
EVERY_OPTION: dict[str, Any] = {
    "auth": {
        "existingSecret": "tokens",
        "resourceUri": "https://mcp.example.com/mcp",
        "oidc": {"enabled": True, "issuers": ["https://idp.example.com", "https://keycloak.idp.svc:8443/realms/x"]},
    },
    "artifacts": {"s3": {"bucket": "artifacts", "endpoint": "http://seaweedfs.storage.svc:8333"}},
    "networkPolicy": {
        "egress": {
            "apiServer": {"cidrs": ["10.0.0.1/32"], "ports": [6443]},
            "toolAllow": [TOOL_ALLOW],
            "perTool": {"word_stats": [{"ports": [{"port": 443, "protocol": "TCP"}]}]},
            "componentAllow": [COMPONENT_ALLOW],
        }
    },
}


def render(plane: ControlPlane, tmp_path: Path, values: dict[str, Any]) -> list[dict[str, Any]]:
    """The chart's documents, rendered with `values` (a values file, as a user would give it)."""
    path = tmp_path / f"values-{secrets.token_hex(3)}.yaml"
    path.write_text(yaml.safe_dump(values))
    out = plane.helm("template", "r", str(CHART), "--namespace", "demo", "-f", str(path))
    return [doc for doc in yaml.safe_load_all(out) if doc]


def egress_policies(documents: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Name → spec of every NetworkPolicy that restricts egress."""
    return {
        doc["metadata"]["name"]: doc["spec"]
        for doc in documents
        if doc["kind"] == "NetworkPolicy" and "Egress" in doc["spec"]["policyTypes"]
    }


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector (matchLabels, matchExpressions In/NotIn/Exists) against a pod's labels."""
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and labels.get(key) in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
    return True


def ports(rule: dict[str, Any]) -> set[int]:
    return {port["port"] for port in rule.get("ports") or []}


def policies_of(policies: dict[str, dict[str, Any]], labels: dict[str, str]) -> list[dict[str, Any]]:
    return [spec for spec in policies.values() if selects(spec["podSelector"], labels)]


def test_tool_pods_and_warm_workers_reach_only_dns_and_the_worker_api_by_default(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    policies = egress_policies(render(control_plane, tmp_path, {"auth": {"existingSecret": "tokens"}}))
    assert set(policies) == {"r-mcp-tasks-tools-egress", "r-mcp-tasks-gateway-egress", "r-mcp-tasks-operator-egress"}
    for labels in (TOOL_RUN, WARM_WORKER):
        (spec,) = policies_of(policies, labels)
        dns, worker_api = spec["egress"]
        assert ports(dns) == DNS and dns["to"] == [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
            }
        ]
        assert ports(worker_api) == {8081}
        (operator_pods,) = worker_api["to"]
        assert selects(operator_pods["podSelector"], {"app.kubernetes.io/name": "mcp-tasks", **operator_labels()})
        assert not selects(operator_pods["podSelector"], gateway_labels()), "tool pods cannot reach the gateways"
    assert not policies_of(policies, {**TOOL_RUN, "app.kubernetes.io/instance": "other"}), "only this release's"


def operator_labels() -> dict[str, str]:
    return {"app.kubernetes.io/instance": "r", "app.kubernetes.io/component": "operator"}


def gateway_labels() -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "mcp-tasks",
        "app.kubernetes.io/instance": "r",
        "app.kubernetes.io/component": "gateway",
    }


def test_gateways_and_operators_reach_the_api_server_and_the_warm_workers(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    policies = egress_policies(render(control_plane, tmp_path, {"auth": {"existingSecret": "tokens"}}))
    for labels in (gateway_labels(), {"app.kubernetes.io/name": "mcp-tasks", **operator_labels()}):
        (spec,) = policies_of(policies, labels)
        dns, api_server, warm = spec["egress"]
        assert ports(dns) == DNS
        assert ports(api_server) == {443, 6443} and "to" not in api_server  # no CIDRs given: any address
        assert "ports" not in warm and selects(warm["to"][0]["podSelector"], WARM_WORKER)


def test_every_egress_option_renders_where_it_belongs_and_validates(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    documents = render(control_plane, tmp_path, EVERY_OPTION)
    policies = egress_policies(documents)
    (tools,) = policies_of(policies, {**TOOL_RUN, "mcptasks.io/tool": "other_tool"})
    assert tools["egress"][-1] == TOOL_ALLOW
    # perTool: one more policy, selecting that tool's pods and warm workers (by the label the operator sets)
    for labels in (TOOL_RUN, WARM_WORKER):
        extra = [spec for spec in policies_of(policies, labels) if spec is not tools]
        assert [spec["egress"] for spec in extra] == [[{"ports": [{"port": 443, "protocol": "TCP"}]}]]
    gateway = policies_of(policies, gateway_labels())[0]["egress"]
    operator = policies_of(policies, {"app.kubernetes.io/name": "mcp-tasks", **operator_labels()})[0]["egress"]
    for rules in (gateway, operator):
        assert rules[1] == {"ports": [{"port": 6443, "protocol": "TCP"}], "to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}]}
        assert {"ports": [{"port": 8333, "protocol": "TCP"}]} in rules  # the S3 endpoint's port
        assert COMPONENT_ALLOW in rules
    identity_provider = {"ports": [{"port": 443, "protocol": "TCP"}, {"port": 8443, "protocol": "TCP"}]}
    assert identity_provider in gateway and identity_provider not in operator  # only the gateway checks tokens

    namespace = f"np-{secrets.token_hex(3)}"
    control_plane.kubectl("create", "namespace", namespace)
    try:
        policy_docs = [doc for doc in documents if doc["kind"] == "NetworkPolicy"]
        for doc in policy_docs:
            doc["metadata"]["namespace"] = namespace
        out = control_plane.kubectl(
            "apply", "--dry-run=server", "-n", namespace, "-f", "-", input_text=yaml.safe_dump_all(policy_docs)
        )
        assert out.count("created (server dry run)") == len(policy_docs) == 7, out
    finally:
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false")


def test_egress_policies_can_be_turned_off(control_plane: ControlPlane, tmp_path: Path) -> None:
    values = {"auth": {"existingSecret": "tokens"}, "networkPolicy": {"egress": {"enabled": False}}}
    documents = render(control_plane, tmp_path, values)
    assert not egress_policies(documents)
    assert len([doc for doc in documents if doc["kind"] == "NetworkPolicy"]) == 3, "the ingress policies stay"


def test_a_per_tool_key_that_is_no_label_value_fails_the_schema(control_plane: ControlPlane, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        yaml.safe_dump({"auth": {"existingSecret": "t"}, "networkPolicy": {"egress": {"perTool": {"a b": []}}}})
    )
    with pytest.raises(subprocess.CalledProcessError) as failed:
        control_plane.helm("template", "r", str(CHART), "-f", str(path))
    # helm's schema library names a wrong location for a propertyNames failure, but names the key
    assert "invalid propertyName 'a b'" in failed.value.stderr, failed.value.stderr
