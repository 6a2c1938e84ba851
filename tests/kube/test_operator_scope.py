"""The operator's reach matches what it owns (issue 21, item 2), on the real control plane after `helm install`.

The chart's ValidatingAdmissionPolicy confines the operator's account to this release's warm workers and
tool runs: every write below is a real request to the real kube-apiserver, impersonating the operator's
ServiceAccount (`kubectl --as`; `kubectl auth can-i` checks RBAC only, not admission policies). The
release is installed once for the module, with no gateway or operator pods (none are needed to judge
requests). The real operator running under the same policy is `tests/kube/test_rbac.py`.

docs/kubernetes.md §3's RBAC table is checked against the chart as `helm template` renders it.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from mcp_tasks.operator.warm import FIELD_MANAGER, build_autoscaler, build_deployment, build_service
from mcp_tasks.store.kubernetes import mapping
from mcp_tasks.store.kubernetes.catalog import BRIDGE_COMMAND, _manifest
from mcp_tasks.store.manifests import load_manifest_file
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.ids import mint_task_id
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.tasks.servers import Discovery, parse_server_manifest, tool_specs
from mcp_tasks.tasks.tools import parse_manifest
from mcp_tasks.worker.warm_auth import WarmCallSigner, new_private_pem
from tests.conftest import REPO
from tests.controlplane.cluster import ControlPlane, local_tool_manifests
from tests.kube.conftest import await_admission_refusal, kubectl_as, until

CHART = REPO / "charts" / "mcp-tasks"
CRD_CHART = REPO / "charts" / "mcp-tasks-crds"
RELEASE = "r"
TOOLS = REPO / "tests" / "tools" / "tools.yaml"
POLICY_DENIED = "ValidatingAdmissionPolicy 'r-mcp-tasks-{namespace}-{policy}'"


class Release:
    """The installed release: its namespace, and requests as the operator's ServiceAccount."""

    def __init__(self, plane: ControlPlane, namespace: str) -> None:
        self.plane = plane
        self.namespace = namespace
        self.operator = f"system:serviceaccount:{namespace}:{RELEASE}-mcp-tasks-operator"

    def as_operator(self, *args: str, input_text: str | None = None) -> subprocess.CompletedProcess[str]:
        """`kubectl --as=<the operator's account>` in the release namespace; the completed process."""
        return kubectl_as(self.plane, self.namespace, self.operator, *args, input_text=input_text)

    def refused_by_policy(self, *args: str, input_text: str | None = None, policy: str = "operator-writes") -> str:
        """Run a request as the operator; assert the admission policy `policy` refused it; return its message."""
        result = self.as_operator(*args, input_text=input_text)
        assert result.returncode != 0, f"allowed: kubectl {' '.join(args)}\n{result.stdout}"
        assert POLICY_DENIED.format(namespace=self.namespace, policy=policy) in result.stderr, result.stderr
        return result.stderr

    def await_policy(self, *args: str, input_text: str | None = None, policy: str = "operator-writes") -> None:
        """Block until the API server enforces `policy` on the operator's `args` (a dry run it refuses)."""
        denied = POLICY_DENIED.format(namespace=self.namespace, policy=policy)
        await_admission_refusal(self.plane, self.namespace, self.operator, denied, *args, input_text=input_text)

    def allowed(self, *args: str, input_text: str | None = None) -> str:
        result = self.as_operator(*args, input_text=input_text)
        assert result.returncode == 0, f"refused: kubectl {' '.join(args)}\n{result.stderr}"
        return result.stdout

    def get(self, *what: str) -> Any:
        return json.loads(self.plane.kubectl("get", *what, "-n", self.namespace, "-o", "json"))


@pytest.fixture(scope="module")
def release(control_plane: ControlPlane) -> Iterator[Release]:
    """Both charts installed (the CRD chart cluster-wide, the main chart in a fresh namespace, scaled to
    no pods), with the warm McpTool `warm-echo` declared; the namespace is deleted afterwards."""
    namespace = f"scope-{secrets.token_hex(3)}"
    control_plane.kubectl("create", "namespace", namespace)
    control_plane.helm("upgrade", "--install", "mcp-tasks-crds", str(CRD_CHART), "--take-ownership", "--wait")
    values = [
        "auth.existingSecret=tokens",
        "gateway.replicas=0",
        "operator.replicas=0",
        "operator.admissionPolicy.toolServiceAccounts={fetcher}",
    ]
    control_plane.helm(
        "install", RELEASE, str(CHART), "--namespace", namespace, *[a for v in values for a in ("--set", v)]
    )
    tools = [doc for doc in local_tool_manifests([REPO / "tests" / "tools"]) if doc["metadata"]["name"] == "warm-echo"]
    control_plane.kubectl("apply", "-n", namespace, "-f", "-", input_text=yaml.safe_dump_all(tools))
    installed = Release(control_plane, namespace)
    try:
        installed.await_policy(
            "patch", "deployment", f"{RELEASE}-mcp-tasks-gateway", "--type=merge", "-p", '{"spec":{"replicas":5}}'
        )
        yield installed
    finally:
        control_plane.helm("uninstall", RELEASE, "--namespace", namespace)
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false")


def warm_manifests(release: Release) -> list[dict[str, Any]]:
    """The Deployment, Service and HPA the operator's own code builds for `warm-echo` (with autoscaling),
    the Deployment at 0 replicas so that no worker process starts."""
    mcptool = release.get("mcptool", "warm-echo")
    tool = parse_manifest(_manifest(mcptool), source="test")
    assert tool.warm is not None
    deployment = build_deployment(mcptool, tool, RELEASE, WarmCallSigner.from_pem(new_private_pem()).public_pem)
    deployment["spec"]["replicas"] = 0
    hpa = build_autoscaler(mcptool, tool, RELEASE) or {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": deployment["metadata"],
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment["metadata"]["name"]},
            "minReplicas": 1,
            "maxReplicas": 2,
        },
    }
    return [deployment, build_service(mcptool, tool, RELEASE), hpa]


def server_warm_manifests(release: Release) -> list[dict[str, Any]]:
    """The Deployment (at 0 replicas) and Service the operator's own code builds for the tool `get_current_time`
    of a warm McpServer (docs/mcp-servers.md §6): the server as a native sidecar beside the bridge."""
    server = {
        "apiVersion": "mcptasks.io/v1alpha1",
        "kind": "McpServer",
        "metadata": {"name": "time", "namespace": release.namespace, "uid": "0c1d6c1e-0000-4000-8000-000000000001"},
        "spec": {"container": {"image": "registry.example/mcp/time:1", "command": ["mcp-server-time"]}, "warm": {}},
    }
    parsed = parse_server_manifest(_manifest(server), source="test")
    listed = {"name": "get_current_time", "inputSchema": {"type": "object"}}
    (tool,), _ = tool_specs(parsed, Discovery("2025-06-18", {"name": "t"}, (listed,)), BRIDGE_COMMAND)
    key = WarmCallSigner.from_pem(new_private_pem()).public_pem
    deployment = build_deployment(server, tool, RELEASE, key, bridge_image="registry.example/mcp-tasks:1")
    deployment["spec"]["replicas"] = 0
    return [deployment, build_service(server, tool, RELEASE)]


def apply(release: Release, manifest: dict[str, Any], allowed: bool) -> str:
    """Server-side apply `manifest` as the operator does (its field manager, forced)."""
    args = ("apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}", "-f", "-")
    text = json.dumps(manifest)
    return release.allowed(*args, input_text=text) if allowed else release.refused_by_policy(*args, input_text=text)


def held_pod(name: str, labels: dict[str, str]) -> str:
    """A pod nothing schedules (the process node leaves `none*` schedulers alone): it runs nowhere and a
    delete removes it at once."""
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": labels},
            "spec": {"schedulerName": "none-held", "containers": [{"name": "c", "image": "x"}]},
        }
    )


def test_the_operator_account_cannot_change_the_gateway(release: Release) -> None:
    gateway = f"{RELEASE}-mcp-tasks-gateway"
    release.refused_by_policy("patch", "deployment", gateway, "--type=merge", "-p", '{"spec":{"replicas":5}}')
    # nor relabel it into its reach, nor take its Service or its pods away
    release.refused_by_policy(
        "label",
        "deployment",
        gateway,
        "app.kubernetes.io/component=warm-worker",
        "app.kubernetes.io/managed-by=mcp-tasks",
        "--overwrite",
    )
    release.refused_by_policy("delete", "service", gateway)
    release.refused_by_policy("delete", "deployment", f"{RELEASE}-mcp-tasks-operator")
    gateway_labels = release.get("deployment", gateway)["spec"]["template"]["metadata"]["labels"]
    release.plane.kubectl("apply", "-n", release.namespace, "-f", "-", input_text=held_pod("gw-pod", gateway_labels))
    release.refused_by_policy("delete", "pod", "gw-pod")
    # RBAC would allow all of the above: the policy is what refuses them
    assert release.as_operator("auth", "can-i", "patch", "deployments").stdout.strip() == "yes"
    assert release.get("deployment", gateway)["spec"]["replicas"] == 0
    assert release.get("deployment", gateway)["metadata"]["labels"]["app.kubernetes.io/component"] == "gateway"


def test_the_operator_account_writes_its_warm_workers(release: Release) -> None:
    deployment, service, hpa = warm_manifests(release)
    for manifest in (deployment, service, hpa):
        apply(release, manifest, allowed=True)
    name = deployment["metadata"]["name"]
    release.allowed("patch", "deployment", name, "--type=merge", "-p", '{"metadata":{"annotations":{"a":"b"}}}')
    assert release.get("deployment", name)["metadata"]["annotations"]["a"] == "b"
    warm_labels = deployment["spec"]["template"]["metadata"]["labels"]
    release.plane.kubectl("apply", "-n", release.namespace, "-f", "-", input_text=held_pod("warm-pod", warm_labels))
    release.allowed("delete", "pod", "warm-pod", "--grace-period=0")
    # a warm object cannot be relabelled out of scope either (it would be the operator's forever)
    release.refused_by_policy("label", "service", name, "app.kubernetes.io/instance=other", "--overwrite")
    for kind in ("horizontalpodautoscaler", "service", "deployment"):
        release.allowed("delete", kind, name)
    # a warm McpServer tool's: the same rights, the same policy (its owner is made up: deleted right away)
    for manifest in server_warm_manifests(release):
        apply(release, manifest, allowed=True)
        release.allowed("delete", manifest["kind"].lower(), manifest["metadata"]["name"], "--ignore-not-found")


def test_the_operator_account_may_drop_a_tasks_field_ownership_and_change_nothing_else(release: Release) -> None:
    """Its one write to an McpTask itself (not its status): `managedFields: [{}]` on a task's first executor write."""
    record = transitions.new_task(
        mint_task_id(),
        Owner("acme", "alice", "static"),
        load_manifest_file(TOOLS)[0],
        {"text": "hi"},
        datetime.now(UTC),
    )
    name = record.task_id
    created = mapping.new_object(record, release.namespace)
    release.plane.kubectl("create", "-n", release.namespace, "-f", "-", input_text=json.dumps(created))

    def stored() -> dict[str, Any]:
        stored_object: dict[str, Any] = release.get("mcptask", name, "--show-managed-fields")
        return stored_object

    assert stored()["metadata"]["managedFields"], "the API server records the creator's fields"
    changes: list[Callable[[dict[str, Any]], None]] = [
        lambda obj: obj["spec"].update(cancelRequestedAt="2026-12-03T00:00:00Z"),  # the client's intent
        lambda obj: obj["metadata"]["labels"].update({"mcptasks.io/tenant": "evil"}),  # whose task it is
        lambda obj: obj["metadata"].update(annotations={"a": "b"}),
        lambda obj: obj["metadata"].update(finalizers=["example.com/hold"]),
    ]
    first = stored()
    changes[0](first)
    release.await_policy("replace", "-f", "-", input_text=json.dumps(first), policy="operator-task-writes")
    for change in changes:
        changed = stored()
        change(changed)
        # an update, as the store's reset is (the Role has no patch on mcptasks)
        release.refused_by_policy("replace", "-f", "-", input_text=json.dumps(changed), policy="operator-task-writes")
    reset = stored()
    reset["metadata"]["managedFields"] = [{}]
    release.allowed("replace", "-f", "-", input_text=json.dumps(reset))
    after = stored()
    assert not after["metadata"].get("managedFields") and after["spec"] == reset["spec"]
    release.allowed("delete", "mcptask", name)  # expiry


def test_a_warm_object_cannot_reach_beyond_the_warm_workers(release: Release) -> None:
    """Labelled as a warm worker is not enough: its pods, selector, account and scale target stay warm."""
    deployment, service, hpa = warm_manifests(release)
    gateway = f"{RELEASE}-mcp-tasks-gateway"
    gateway_selector = release.get("deployment", gateway)["spec"]["selector"]["matchLabels"]

    behind_gateway = json.loads(json.dumps(deployment))
    behind_gateway["spec"]["selector"]["matchLabels"] = gateway_selector
    behind_gateway["spec"]["template"]["metadata"]["labels"] = gateway_selector
    assert "warm-worker" in apply(release, behind_gateway, allowed=False)

    as_gateway = json.loads(json.dumps(deployment))
    as_gateway["spec"]["template"]["spec"]["serviceAccountName"] = gateway
    assert "tool account" in apply(release, as_gateway, allowed=False)
    as_listed_account = json.loads(json.dumps(deployment))  # operator.admissionPolicy.toolServiceAccounts
    as_listed_account["spec"]["template"]["spec"]["serviceAccountName"] = "fetcher"
    apply(release, as_listed_account, allowed=True)
    release.allowed("delete", "deployment", deployment["metadata"]["name"])

    fronting_gateway = json.loads(json.dumps(service))
    fronting_gateway["spec"]["selector"] = gateway_selector
    assert "select warm workers" in apply(release, fronting_gateway, allowed=False)

    scaling_gateway = json.loads(json.dumps(hpa))
    scaling_gateway["spec"]["scaleTargetRef"]["name"] = gateway
    assert "own name" in apply(release, scaling_gateway, allowed=False)

    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "not-a-run", "labels": deployment["metadata"]["labels"]},  # warm, not tool-run
        "spec": {
            "suspend": True,
            "template": {
                "metadata": {"labels": deployment["metadata"]["labels"]},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]},
            },
        },
    }
    assert "tool runs" in release.refused_by_policy("create", "-f", "-", input_text=json.dumps(job))
    assert not release.plane.kubectl(
        "get", "deployments,services,hpa,jobs", "-n", release.namespace, "-l", "app.kubernetes.io/component=warm-worker"
    ).strip()


def test_the_operator_may_review_tokens_and_nothing_else_cluster_wide(release: Release) -> None:
    assert release.as_operator("auth", "can-i", "create", "tokenreviews").stdout.strip() == "yes"
    assert release.as_operator("auth", "can-i", "create", "subjectaccessreviews").stdout.strip() == "no"
    assert release.as_operator("auth", "can-i", "list", "namespaces").stdout.strip() == "no"
    roles = release.plane.kubectl(
        "get", "clusterrolebindings", "-l", f"app.kubernetes.io/instance={RELEASE}", "-o", "json"
    )
    mine = [b for b in json.loads(roles)["items"] if release.namespace in b["metadata"]["name"]]
    assert [b["roleRef"]["name"] for b in mine] == [f"{RELEASE}-mcp-tasks-{release.namespace}-tokenreview"]


# ------------------------------------------------------------------------- docs/kubernetes.md §3's table


def rendered_rights(plane: ControlPlane) -> dict[str, dict[str, set[str]]]:
    """account ("gateway", "operator") → resource → verbs, from every Role and ClusterRole the chart binds
    (rendered with every optional grant on); cluster-scoped resources are keyed `<resource>*`."""
    rendered = plane.helm(
        "template",
        RELEASE,
        str(CHART),
        "--namespace",
        "demo",
        "--set",
        "auth.existingSecret=tokens",
        "--set",
        "auth.serviceAccountTokens.enabled=true",
    )
    docs = [doc for doc in yaml.safe_load_all(rendered) if doc]
    roles = {
        (doc["kind"], doc["metadata"]["name"]): doc["rules"] for doc in docs if doc["kind"] in ("Role", "ClusterRole")
    }
    rights: dict[str, dict[str, set[str]]] = {"gateway": {}, "operator": {}}
    for binding in (doc for doc in docs if doc["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        ref = binding["roleRef"]
        for subject in binding["subjects"]:
            account = subject["name"].removeprefix(f"{RELEASE}-mcp-tasks-")
            for rule in roles[(ref["kind"], ref["name"])]:
                for resource in rule["resources"]:
                    key = resource + ("*" if ref["kind"] == "ClusterRole" else "")
                    rights[account].setdefault(key, set()).update(rule["verbs"])
    return rights


def documented_rights() -> dict[str, dict[str, set[str]]]:
    """The same, read from the table of docs/kubernetes.md §3: a row per resource (its first backticked
    word; `cluster-scoped` in the first cell marks a cluster-scoped one), each cell the verbs before any
    parenthesis, `—` for none."""
    text = (REPO / "docs" / "kubernetes.md").read_text()
    section = text.split("## 3. Accounts and permissions", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert rows, "no RBAC table in docs/kubernetes.md §3"
    rights: dict[str, dict[str, set[str]]] = {"gateway": {}, "operator": {}}
    for row in rows:
        first, gateway, operator = (cell.strip() for cell in row.strip("|").split("|"))
        match = re.match(r"`([a-z/]+)`", first)
        assert match, row
        key = match.group(1) + ("*" if "cluster-scoped" in first else "")
        for account, cell in (("gateway", gateway), ("operator", operator)):
            verbs = cell.split(" (", 1)[0].strip()
            if verbs != "—":
                rights[account][key] = {verb.strip() for verb in verbs.split(",")}
    return rights


def test_the_rbac_table_in_docs_matches_the_rendered_chart(control_plane: ControlPlane) -> None:
    """Our choice (issue 21): the table is hand-written for its explanations and checked here, right by right."""
    assert documented_rights() == rendered_rights(control_plane)


# ------------------------------------------------------------------------------ after helm uninstall


async def test_warm_workers_of_a_users_mcptool_outlive_the_release(control_plane: ControlPlane) -> None:
    """What docs/kubernetes.md ("Upgrade and uninstall") and the chart's notes say: the warm objects belong
    to their McpTool (owner reference), not to the release, so `helm uninstall` leaves them (and removes the
    NetworkPolicy that guarded them); deleting the McpTool lets the garbage collector remove them."""
    namespace = f"gone-{secrets.token_hex(3)}"
    control_plane.kubectl("create", "namespace", namespace)
    try:
        values = ["auth.existingSecret=tokens", "gateway.replicas=0", "operator.replicas=0"]
        notes = control_plane.helm(
            "install", RELEASE, str(CHART), "--namespace", namespace, *[a for v in values for a in ("--set", v)]
        )
        assert "delete deploy,svc,hpa -l app.kubernetes.io/component=warm-worker" in notes
        tools = [d for d in local_tool_manifests([REPO / "tests" / "tools"]) if d["metadata"]["name"] == "warm-echo"]
        control_plane.kubectl("apply", "-n", namespace, "-f", "-", input_text=yaml.safe_dump_all(tools))
        release = Release(control_plane, namespace)
        deployment, service, _hpa = warm_manifests(release)
        for manifest in (deployment, service):  # as the operator applies them
            apply(release, manifest, allowed=True)
        name = deployment["metadata"]["name"]

        control_plane.helm("uninstall", RELEASE, "--namespace", namespace, "--wait")
        assert not control_plane.kubectl("get", "networkpolicies", "-n", namespace, "-o", "name").strip()
        kept = release.get("deployment", name)
        assert [(ref["kind"], ref["name"]) for ref in kept["metadata"]["ownerReferences"]] == [("McpTool", "warm-echo")]
        assert release.get("service", name)["metadata"]["name"] == name

        control_plane.kubectl("delete", "mcptool", "warm-echo", "-n", namespace)

        def collected() -> bool:
            out = control_plane.kubectl("get", "deploy,svc", "-n", namespace, "-l", "mcptasks.io/mcptool=warm-echo")
            return not out.strip()

        await until(collected)
    finally:
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false")
