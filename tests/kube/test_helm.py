"""The Helm charts on the real control plane, with the real `helm` (built by tests/controlplane/build.sh).

Static checks: lint, the values schema, the generated templates, server-side dry runs of the rendered
manifests, the monitoring templates, the docs. The chart's life end to end (`helm install --wait`, the
SEP `hello_world` flow through each replica, metrics, `helm upgrade` while a task waits for input,
`helm uninstall`) runs in real containers on the real node: `tests/node/test_release.py`.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.controlplane.cluster import ControlPlane
from tests.helm import example_tools

CHARTS = REPO / "charts"
CHART = CHARTS / "mcp-tasks"
CRD_CHART = CHARTS / "mcp-tasks-crds"
TOKEN = "helm-test-token"
INSTALL_TIMEOUT = "180s"


def helm_template(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    """`helm template` of the main chart (no cluster needed); the completed process, failed or not."""
    return subprocess.run(
        [str(plane.bin_dir / "helm"), "template", "r", str(CHART), "--namespace", "demo", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def leaf_keys(values: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths of every leaf key of a values tree (maps of free-form content count as leaves)."""
    keys: list[str] = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in ("resources", "requests", "limits"):
            keys.extend(leaf_keys(value, path + "."))
        else:
            keys.append(path)
    return keys


# ---------------------------------------------------------------------------------------- static checks


def test_both_charts_pass_strict_lint(control_plane: ControlPlane) -> None:
    control_plane.helm("lint", "--strict", str(CRD_CHART))
    control_plane.helm("lint", "--strict", str(CHART), "--set", "auth.existingSecret=tokens")


def test_the_examples_template_is_generated_from_examples_tools() -> None:
    assert example_tools.TEMPLATE.read_text() == example_tools.render(), (
        "run `python -m tests.helm.example_tools --write`"
    )


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("gateway.replicas=-1", "at '/gateway/replicas': minimum: got -1, want 0"),
        ("gateway.replicas=two", "at '/gateway/replicas': got string, want integer"),
        ("gateway.replica=2", "at '/gateway': additional properties 'replica' not allowed"),
        ("operator.workerPort=70000", "at '/operator/workerPort': maximum: got 70,000, want 65,535"),
        ("gateway.logLevel=LOUD", "at '/gateway/logLevel'"),
        ("gateway.handoffTools.status=task status", "at '/gateway/handoffTools/status': 'task status' does not match"),
        ("operator.kueue.tenantQueues.a=team a", "at '/operator/kueue/tenantQueues/a': 'team a' does not match"),
        ("operator.maxRunningTasks=-1", "at '/operator/maxRunningTasks': minimum: got -1, want 0"),
    ],
)
def test_a_wrong_value_fails_naming_the_key(control_plane: ControlPlane, setting: str, message: str) -> None:
    result = helm_template(control_plane, "--set", "auth.existingSecret=tokens", "--set", setting)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("setting", "path"),
    [
        ("gateway.resources.limits.memory=lots", "/gateway/resources/limits/memory"),
        ("gateway.resources.requests.cpu=1 core", "/gateway/resources/requests/cpu"),
        ("operator.resources.limits.memory=-512Mi", "/operator/resources/limits/memory"),
        ("operator.resources.requests.memory=128MB", "/operator/resources/requests/memory"),
    ],
)
def test_a_wrong_resource_quantity_fails_the_schema_in_a_short_message(
    control_plane: ControlPlane, setting: str, path: str
) -> None:
    """Our choice (issue 21): a quantity the API server would refuse fails `helm template` (and so
    `helm install` and `helm upgrade`, which validate the same schema) naming the key, in a few lines,
    instead of a failed release revision and a 10 kB error from the API server."""
    result = helm_template(control_plane, "--set", "auth.existingSecret=tokens", "--set", setting)
    assert result.returncode != 0
    assert f"at '{path}'" in result.stderr and len(result.stderr) < 600, result.stderr


def test_every_form_of_resource_quantity_passes_the_schema(control_plane: ControlPlane) -> None:
    """Our choice: the schema takes what the API server takes: suffixes, decimals, exponents, numbers."""
    quantities = {
        "gateway.resources.requests.cpu": "250m",
        "gateway.resources.requests.memory": "1.5Gi",
        "gateway.resources.limits.memory": "1e9",
        "gateway.resources.limits.ephemeral-storage": "2G",
        "operator.resources.requests.cpu": "2",
        "operator.resources.limits.memory": ".5Ti",
    }
    flags = [arg for key, value in quantities.items() for arg in ("--set-string", f"{key}={value}")]
    result = helm_template(
        control_plane, "--set", "auth.existingSecret=tokens", "--set", "operator.resources.limits.cpu=1", *flags
    )
    assert result.returncode == 0, result.stderr


def test_the_token_secret_is_required_and_the_message_says_how(control_plane: ControlPlane) -> None:
    result = helm_template(control_plane)
    assert result.returncode != 0
    assert "auth.existingSecret is required" in result.stderr
    assert "kubectl create secret generic" in result.stderr


def test_rendered_manifests_are_accepted_by_the_api_server(control_plane: ControlPlane) -> None:
    namespace = f"dry-{secrets.token_hex(3)}"
    control_plane.kubectl("create", "namespace", namespace)
    rendered = helm_template(
        control_plane,
        "--namespace",
        namespace,
        "--set",
        "auth.existingSecret=tokens",
        "--set",
        "examples.enabled=true",
        "--set",
        "gateway.ingress.enabled=true",
        "--set",
        "gateway.ingress.host=mcp.example.com",
    )
    assert rendered.returncode == 0, rendered.stderr
    kinds = {doc["kind"] for doc in yaml.safe_load_all(rendered.stdout) if doc}
    assert {"Deployment", "Service", "Ingress", "PodDisruptionBudget", "NetworkPolicy", "Role", "McpTool"} <= kinds
    out = control_plane.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input_text=rendered.stdout)
    assert "deployment.apps/r-mcp-tasks-gateway created (server dry run)" in out
    crds = control_plane.helm("template", "c", str(CRD_CHART))
    out = control_plane.kubectl("apply", "--server-side", "--dry-run=server", "-f", "-", input_text=crds)
    assert "mcptasks.mcptasks.io" in out


def test_monitoring_templates_render_and_name_only_real_metrics(control_plane: ControlPlane) -> None:
    """ServiceMonitor, PrometheusRule and the Grafana dashboard render, and every `mcptasks_*` series
    their queries read is one the components export (a renamed metric would silently blank an alert)."""
    rendered = helm_template(
        control_plane,
        "--set",
        "auth.existingSecret=tokens",
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.prometheusRule.enabled=true",
        "--set",
        "metrics.grafanaDashboard.enabled=true",
    )
    assert rendered.returncode == 0, rendered.stderr
    docs = {doc["kind"]: doc for doc in yaml.safe_load_all(rendered.stdout) if doc}
    assert docs["ServiceMonitor"]["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s"}]
    alerts = {rule["alert"]: rule["expr"] for rule in docs["PrometheusRule"]["spec"]["groups"][0]["rules"]}
    assert set(alerts) == {
        "McpTasksStuck",
        "McpTasksFailing",
        "McpTasksJobsNotStarting",
        "McpTasksOperatorNotReconciling",
    }
    dashboard = json.loads(docs["ConfigMap"]["data"]["mcp-tasks.json"])
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    exported = exported_series()
    used = set(re.findall(r"mcptasks_[a-z_]+", " ".join([*alerts.values(), *queries])))
    assert used and used <= exported, used - exported
    services = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc and doc["kind"] == "Service"]
    assert all("metrics" in [port["name"] for port in svc["spec"]["ports"]] for svc in services)


def exported_series() -> set[str]:
    """Every series name the mcp-tasks metric families expose (`_total`; `_bucket`, `_sum`, `_count`)."""
    from prometheus_client import CollectorRegistry

    from mcp_tasks.observability import metrics

    registry = CollectorRegistry()
    for collector in metrics.families("gateway", "runner", "operator"):
        registry.register(collector)
    names: set[str] = set()
    for family in registry.collect():
        if not family.name.startswith("mcptasks_"):
            continue
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}.get(family.type, ("",))
        names |= {family.name + suffix for suffix in suffixes}
    return names


def test_every_value_is_documented_in_docs_kubernetes() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    docs = (REPO / "docs" / "kubernetes.md").read_text()
    missing = [key for key in leaf_keys(values) if f"`{key}`" not in docs]
    assert not missing, f"docs/kubernetes.md does not describe: {missing}"


def test_the_users_ci_workflow_passes_actionlint(control_plane: ControlPlane) -> None:
    workflows = sorted((REPO / ".github" / "workflows").glob("*.yml"))
    assert workflows
    result = subprocess.run(
        [str(control_plane.bin_dir / "actionlint"), "-shellcheck=", "-pyflakes=", *map(str, workflows)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
