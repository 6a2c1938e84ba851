"""The Helm charts on the real control plane, with the real `helm` (built by tests/controlplane/build.sh).

Static checks (lint, schema, generated templates, docs) and the chart's life end to end: `helm install`
runs the gateway and operator Deployments as pods on the process node (each pod on its own loopback
address), the SEP `hello_world` flow runs through one gateway replica and is read through the other,
`helm upgrade` restarts every pod while a task waits for input, and `helm uninstall` leaves what
docs/kubernetes.md promises.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.conftest import REPO, McpHttp, until
from tests.controlplane.cluster import ControlPlane
from tests.helm import example_tools
from tests.kube.conftest import sep_hello_world
from tests.metrics import scrape
from tests.metrics import value as sample

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


# ------------------------------------------------------------------------------------------ end to end


def gateway_urls(plane: ControlPlane, namespace: str, service: str) -> list[str]:
    """`http://<pod address>:<port>/mcp` of every ready endpoint of the gateway Service."""
    return endpoint_urls(plane, namespace, service, "mcp", "/mcp")


def endpoint_urls(plane: ControlPlane, namespace: str, service: str, port_name: str, path: str) -> list[str]:
    """`http://<pod address>:<port><path>` of every ready endpoint of a Service's port `port_name`.

    Computed as the EndpointSlice controller would (Ready pods matching the selector, the named target
    port), since it refuses the process node's loopback pod addresses.
    """
    spec = json.loads(plane.kubectl("get", "service", service, "-n", namespace, "-o", "json"))["spec"]
    selector = ",".join(f"{key}={value}" for key, value in spec["selector"].items())
    target = next(port["targetPort"] for port in spec["ports"] if port["name"] == port_name)
    pods = json.loads(plane.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json"))["items"]
    urls: list[str] = []
    for pod in pods:
        conditions = (pod.get("status") or {}).get("conditions") or []
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        if not ready or pod["metadata"].get("deletionTimestamp") or not pod["status"].get("podIP"):
            continue
        ports = {p.get("name"): p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
        port = ports[target] if isinstance(target, str) else target
        urls.append(f"http://{pod['status']['podIP']}:{port}{path}")
    return sorted(urls)


async def wait_for_urls(plane: ControlPlane, namespace: str, service: str, count: int) -> list[str]:
    """The gateway URLs once exactly `count` endpoints are ready (a rollout has settled)."""

    def settled() -> list[str] | None:
        urls = gateway_urls(plane, namespace, service)
        return urls if len(urls) == count else None

    return await until(settled, timeout_s=120, interval_s=0.5)


def release_objects(plane: ControlPlane, namespace: str) -> set[str]:
    """`kind/name` of the release's Deployments, Services, Pods, ServiceAccounts, Roles and policies
    (not the tool pods, which carry the release's instance label for its NetworkPolicy)."""
    out = plane.kubectl(
        "get",
        "deployments,services,pods,serviceaccounts,roles,rolebindings,networkpolicies,poddisruptionbudgets",
        "-n",
        namespace,
        "-l",
        "app.kubernetes.io/instance=r,app.kubernetes.io/component!=tool-run",  # tool pods belong to their Jobs
        "-o",
        "name",
    )
    return set(out.split())


@pytest.mark.timeout(900)  # two installs and an upgrade, each allowed INSTALL_TIMEOUT, and their rollouts
async def test_helm_install_upgrade_and_uninstall(control_plane: ControlPlane, tmp_path: Path) -> None:
    plane = control_plane
    namespace = f"helm-{secrets.token_hex(3)}"
    plane.kubectl("create", "namespace", namespace)
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(yaml.safe_dump({"tokens": [{"token": TOKEN, "tenant": "acme", "subject": "alice"}]}))
    plane.kubectl("create", "secret", "generic", "mcp-tasks-tokens", "-n", namespace, f"--from-file={tokens}")
    storage_class = f"rwx-{namespace}"
    plane.kubectl(
        "apply",
        "-f",
        "-",
        input_text=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": f"pv-{namespace}"},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": storage_class,
                    "hostPath": {"path": str(tmp_path / "pv")},
                },
            }
        ),
    )

    # The CRD chart takes over the CRDs the harness applied; then the main chart, waiting for ready pods.
    plane.helm("upgrade", "--install", "mcp-tasks-crds", str(CRD_CHART), "--take-ownership", "--wait")
    common = ["--namespace", namespace, "--timeout", INSTALL_TIMEOUT, "--wait"]
    out = plane.helm(
        "install",
        "r",
        str(CHART),
        *common,
        "--set",
        "auth.existingSecret=mcp-tasks-tokens",
        "--set",
        "examples.enabled=true",
        "--set",
        f"persistence.storageClass={storage_class}",
        "--set",
        "persistence.size=1Gi",
    )
    assert "kubectl -n " + namespace + " get mcptasks" in out, "NOTES.txt tells how to watch tasks"
    urls = await wait_for_urls(plane, namespace, "r-mcp-tasks-gateway", 2)
    assert len({url.split(":")[1] for url in urls}) == 2, "each gateway pod has its own address"

    # The SEP flow through one replica, read through the other.
    task_id = await sep_hello_world(urls[0], token=TOKEN)
    async with aiohttp.ClientSession() as session:
        other = McpHttp(session, urls[1], TOKEN)
        task = (await other.get(task_id)).result
        assert task["status"] == "completed", task
        assert task["result"]["content"][0]["text"] == "Hello, Luca!"
        table = plane.kubectl("get", "mcptasks", "-n", namespace)
        assert task_id in table and "completed" in table

        # Each component serves /metrics on the port the chart names `metrics` (on its Service too).
        async def total(service: str, name: str, **labels: str) -> float:
            urls = endpoint_urls(plane, namespace, service, "metrics", "/metrics")
            assert urls, f"no ready metrics endpoint behind {service}"
            return sum([sample(await scrape(session, url), name, **labels) for url in urls])

        assert await total("r-mcp-tasks-operator", "mcptasks_jobs_created_total") >= 1
        assert await total("r-mcp-tasks-operator", "mcptasks_runs_started_total", tool="hello_world") >= 1
        assert await total("r-mcp-tasks-gateway", "mcptasks_requests_total", method="tools/call", code="ok") >= 1

        # A task waiting for input survives an upgrade that replaces every pod.
        waiting = await McpHttp(session, urls[0], TOKEN).start_task("hello_world")
        await other.wait_status(waiting, "input_required", timeout_s=60)
        plane.helm(
            "upgrade",
            "r",
            str(CHART),
            *common,
            "--reuse-values",
            "--set",
            "gateway.replicas=3",
            "--set",
            "gateway.logLevel=DEBUG",
            "--set",
            "operator.logLevel=DEBUG",
        )
        new_urls = await wait_for_urls(plane, namespace, "r-mcp-tasks-gateway", 3)
        assert not set(new_urls) & set(urls), "the upgrade replaced every gateway pod"
        upgraded = McpHttp(session, new_urls[-1], TOKEN)
        asked = await upgraded.wait_status(waiting, "input_required", timeout_s=30)
        key = next(iter(asked["inputRequests"]))
        answer = {"action": "accept", "content": {"input": "Ada"}}
        assert "result" in (await upgraded.update(waiting, {key: answer})).body
        done = await upgraded.wait_status(waiting, "completed", "failed", timeout_s=90)
        assert done["status"] == "completed", done
        assert done["result"]["content"][0]["text"] == "Hello, Ada!"

    # Uninstall removes the release's workloads and accounts; tasks, their Jobs, the data claim and the
    # CRDs stay (docs/kubernetes.md, "Uninstall").
    assert any(name.startswith("deployment.apps/") for name in release_objects(plane, namespace))
    plane.helm("uninstall", "r", "--namespace", namespace, "--wait", "--timeout", INSTALL_TIMEOUT)
    await until(lambda: not release_objects(plane, namespace), timeout_s=60, interval_s=0.5)
    kept = plane.kubectl("get", "mcptasks,jobs,pvc", "-n", namespace, "-o", "name")
    assert f"mcptask.mcptasks.io/{task_id}" in kept and f"mcptask.mcptasks.io/{waiting}" in kept
    assert f"job.batch/mcptask-{waiting}" in kept
    assert "persistentvolumeclaim/r-mcp-tasks-data" in kept
    assert "mcptasks.mcptasks.io" in plane.kubectl("get", "crds", "-o", "name")
