"""The Helm release on a real node (issue 20 item 3): real containers of the project's image under a kubelet.

Both charts are installed once for the module with `helm install --wait` into a namespace whose Pod
Security admission enforces `restricted`, with the image `tests/node/images.py` built from the
repository's Dockerfile for the gateway, the operator and the example tools. Every client call goes
through `kubectl port-forward` to the gateway Service (the API server, the kubelet and containerd carry
it), as the chart's NOTES tell a user to.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from mcp_tasks.protocol import constants
from tests.conftest import REPO, McpHttp, until
from tests.controlplane.cluster import ControlPlane
from tests.kube.conftest import sep_hello_world
from tests.metrics import scrape
from tests.metrics import value as sample
from tests.node import images
from tests.node.cluster import NODE_IP, NODE_NAME, RealNode

CHART = REPO / "charts" / "mcp-tasks"
CRD_CHART = REPO / "charts" / "mcp-tasks-crds"
RELEASE = "r"
GATEWAY_SERVICE = f"{RELEASE}-mcp-tasks-gateway"
TOKEN = "real-node-token"
INSTALL_TIMEOUT = "300s"
TASK_WAIT_S = 120.0
"""A tool Job's pod starts in seconds on an idle node; the machine is shared, so allow minutes."""
TOOL_CPU_LIMIT = "2"
"""`toolDefaults.resources.limits.cpu` of the release (the chart sets none; a quota on `limits.cpu` needs one)."""


@dataclass
class Release:
    """The installed release: its namespace and the gateway URL through `kubectl port-forward`."""

    plane: ControlPlane
    namespace: str
    url: str

    def json(self, *args: str) -> Any:
        """`kubectl get ... -o json` in the release's namespace, parsed."""
        return json.loads(self.plane.kubectl("get", *args, "-n", self.namespace, "-o", "json"))

    def job_pods(self, task_id: str) -> list[dict[str, Any]]:
        """The pods of the task's Job (`mcptask-<taskId>`)."""
        items: list[dict[str, Any]] = self.json("pods", "-l", f"job-name=mcptask-{task_id}")["items"]
        return items


def endpoint_urls(release: Release, service: str, port_name: str, path: str) -> list[str]:
    """`http://<address>:<port><path>` of every ready endpoint of `service`'s port `port_name`, from its
    EndpointSlices (written by the real EndpointSlice controller)."""
    slices = release.json("endpointslices", "-l", f"kubernetes.io/service-name={service}")["items"]
    urls: list[str] = []
    for endpoint_slice in slices:
        ports = [p["port"] for p in endpoint_slice.get("ports") or [] if p.get("name") == port_name]
        for endpoint in endpoint_slice.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready"):
                urls += [f"http://{address}:{port}{path}" for address in endpoint["addresses"] for port in ports]
    return sorted(urls)


@contextlib.contextmanager
def port_forward(plane: ControlPlane, namespace: str, target: str, port: int) -> Iterator[int]:
    """`kubectl port-forward <target> :<port>` on 127.0.0.1; yields the local port, stops it at the end.

    Raises:
        RuntimeError: kubectl exited before forwarding (its stderr is quoted).
    """
    process = subprocess.Popen(
        [
            str(plane.bin_dir / "kubectl"),
            "--kubeconfig",
            str(plane.kubeconfig),
            "port-forward",
            "-n",
            namespace,
            target,
            f":{port}",
            "--address",
            "127.0.0.1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        line = process.stdout.readline()  # "Forwarding from 127.0.0.1:<port> -> <target port>", or EOF
        if not line.startswith("Forwarding from 127.0.0.1:"):
            process.kill()
            raise RuntimeError(f"kubectl port-forward failed: {line}{process.stderr.read()}")
        yield int(line.split()[2].rsplit(":", 1)[1])
    finally:
        process.terminate()
        process.wait(timeout=10)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def restricted_namespace(plane: ControlPlane, prefix: str, tokens: list[dict[str, str]], folder: Path) -> str:
    """A new `restricted` namespace `<prefix>-<hex>` holding the token Secret `mcp-tasks-tokens` (`tokens`:
    the static token file's entries) and, for the data claim, a ReadWriteMany PersistentVolume of storage
    class `rwx-<namespace>` on a folder of this one node (under `folder`; the tools' uid 65532 writes it).
    Returns the namespace."""
    namespace = f"{prefix}-{secrets.token_hex(3)}"
    plane.kubectl("create", "namespace", namespace)
    plane.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    token_file = folder / "tokens.yaml"
    token_file.write_text(yaml.safe_dump({"tokens": tokens}))
    plane.kubectl("create", "secret", "generic", "mcp-tasks-tokens", "-n", namespace, f"--from-file={token_file}")
    volume = folder / "pv"
    volume.mkdir()
    volume.chmod(0o777)
    persistent_volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"pv-{namespace}"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteMany"],
            "storageClassName": f"rwx-{namespace}",
            "hostPath": {"path": str(volume)},
        },
    }
    plane.kubectl("apply", "-f", "-", input_text=json.dumps(persistent_volume))
    return namespace


@pytest.fixture(scope="module")
def release(real_node: RealNode, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    """Both charts installed in a `restricted` namespace, the gateway reached through a port-forward."""
    plane = real_node.control_plane
    entries = [{"token": TOKEN, "tenant": "acme", "subject": "alice"}]
    namespace = restricted_namespace(plane, "mcp", entries, tmp_path_factory.mktemp("release"))
    storage_class = f"rwx-{namespace}"
    plane.helm("upgrade", "--install", "mcp-tasks-crds", str(CRD_CHART), "--take-ownership", "--wait")
    repository, tag = images.IMAGE.split(":")
    plane.helm(
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        namespace,
        "--wait",
        "--timeout",
        INSTALL_TIMEOUT,
        *("--set", f"image.repository={repository}", "--set", f"image.tag={tag}"),
        *("--set", "auth.existingSecret=mcp-tasks-tokens", "--set", "examples.enabled=true"),
        *("--set", f"persistence.storageClass={storage_class}", "--set", "persistence.size=1Gi"),
        # with the chart's requests and memory limit, every resource a cpu/memory ResourceQuota names
        *("--set", f"toolDefaults.resources.limits.cpu={TOOL_CPU_LIMIT}"),
        timeout_s=600,
    )
    with port_forward(plane, namespace, f"service/{GATEWAY_SERVICE}", 80) as port:
        yield Release(plane, namespace, f"http://127.0.0.1:{port}/mcp")


@pytest.fixture
async def mcp(release: Release) -> AsyncIterator[McpHttp]:
    """A raw MCP client on the port-forwarded gateway, with the release's token."""
    async with aiohttp.ClientSession() as session:
        yield McpHttp(session, release.url, TOKEN)


@pytest.mark.timeout(1200)  # the first test pays for the node's start-up (image build) and the install
async def test_hello_world_runs_as_a_container_under_the_kubelet(release: Release) -> None:
    task_id = await sep_hello_world(release.url, token=TOKEN)
    task = release.json("mcptask", task_id)
    assert task["status"]["taskStatus"] == "completed", task["status"]

    def terminated() -> dict[str, Any] | None:  # the tool posts its result, then its process exits
        (pod,) = release.job_pods(task_id)
        (container,) = pod["status"].get("containerStatuses") or [{}]
        return pod if "terminated" in (container.get("state") or {}) else None

    pod = await until(terminated, timeout_s=60, interval_s=0.5)
    assert pod["spec"]["nodeName"] == NODE_NAME
    (container,) = pod["status"]["containerStatuses"]
    assert container["state"]["terminated"]["exitCode"] == 0, container
    assert container["imageID"], "containerd ran the imported image"
    # the kubelet serves the container's log to the API server (authenticated as the API server's client)
    release.plane.kubectl("logs", "-n", release.namespace, pod["metadata"]["name"])

    # Any replica answers any task: read it through each gateway pod (the node reaches pod addresses).
    urls = await until(lambda: endpoint_urls(release, GATEWAY_SERVICE, "mcp", "/mcp"), timeout_s=60, interval_s=0.5)
    assert len(urls) == 2, urls
    async with aiohttp.ClientSession() as session:
        for url in urls:
            read = (await McpHttp(session, url, TOKEN).get(task_id)).result
            assert read["status"] == "completed" and read["result"]["content"][0]["text"] == "Hello, Luca!"

        # Each component serves /metrics on the port the chart names `metrics`, behind its Service.
        async def total(service: str, name: str, **labels: str) -> float:
            found = endpoint_urls(release, service, "metrics", "/metrics")
            assert found, f"no ready metrics endpoint behind {service}"
            return sum([sample(await scrape(session, url), name, **labels) for url in found])

        operator = f"{RELEASE}-mcp-tasks-operator"
        assert await total(operator, "mcptasks_jobs_created_total") >= 1
        assert await total(operator, "mcptasks_runs_started_total", tool="hello_world") >= 1
        assert await total(GATEWAY_SERVICE, "mcptasks_requests_total", method="tools/call", code="ok") >= 1


async def test_the_gateway_and_operator_run_restricted_as_uid_65532(release: Release) -> None:
    """Pod Security `restricted` admitted them, and the kubelet runs them as the image's user."""
    pods = release.json("pods", "-l", f"app.kubernetes.io/instance={RELEASE}")["items"]
    components = {pod["metadata"]["labels"].get("app.kubernetes.io/component") for pod in pods}
    assert {"gateway", "operator"} <= components, components
    gateway = next(p for p in pods if p["metadata"]["labels"].get("app.kubernetes.io/component") == "gateway")
    out = release.plane.kubectl("exec", "-n", release.namespace, gateway["metadata"]["name"], "--", "id", "-u")
    assert out.strip() == "65532"
    with pytest.raises(subprocess.CalledProcessError) as refused:
        release.plane.kubectl(
            "exec", "-n", release.namespace, gateway["metadata"]["name"], "--", "touch", "/app/written"
        )
    assert "Read-only file system" in refused.value.stderr


async def test_a_synchronous_call_runs_on_the_warm_word_stats_deployment(release: Release, mcp: McpHttp) -> None:
    async def warm_ready() -> bool:
        deployments = release.json("deployments")["items"]
        warm = [d for d in deployments if "word" in d["metadata"]["name"]]
        return bool(warm) and all((d.get("status") or {}).get("readyReplicas", 0) >= 1 for d in warm)

    await until(warm_ready, timeout_s=TASK_WAIT_S, interval_s=1.0)
    jobs_before = {job["metadata"]["name"] for job in release.json("jobs")["items"]}
    reply = await mcp.call_tool("word_stats", {"text": "the cat and the hat"})
    result = reply.result
    assert "task" not in result and result.get("resultType") != "task", result
    stats = result["structuredContent"]
    assert stats["words"] == 5 and stats["mostCommon"][0] == {"word": "the", "count": 2}, stats
    jobs_after = {job["metadata"]["name"] for job in release.json("jobs")["items"]}
    assert jobs_after == jobs_before, "a warm call starts no Job"


async def test_cancel_stops_the_tool_container(release: Release, mcp: McpHttp) -> None:
    task_id = await mcp.start_task("count_primes", {"limit": 10_000_000_000})

    def running() -> bool:
        pods = release.job_pods(task_id)
        return any("running" in (s.get("state") or {}) for p in pods for s in p["status"].get("containerStatuses", []))

    await until(running, timeout_s=TASK_WAIT_S, interval_s=1.0)
    assert "result" in (await mcp.cancel(task_id)).body
    cancelled = await mcp.wait_status(task_id, "cancelled", "completed", "failed", timeout_s=60)
    assert cancelled["status"] == "cancelled", cancelled

    def stopped() -> bool:
        pods = release.job_pods(task_id)
        return all(
            "running" not in (s.get("state") or {}) for p in pods for s in p["status"].get("containerStatuses", [])
        )

    await until(stopped, timeout_s=60, interval_s=1.0)


MEMORY_HOG = {
    "apiVersion": "mcptasks.io/v1alpha1",
    "kind": "McpTool",
    "metadata": {"name": "memory-hog"},
    "spec": {
        "name": "memory_hog",
        "description": "Fills 256 MiB under a 64 MiB limit.",
        "inputSchema": {"type": "object", "properties": {}, "additionalProperties": False},
        "execution": {"taskPolicy": "optional"},
        "container": {
            "image": images.IMAGE,
            "command": ["python", "-c", "filled = b'x' * (256 << 20)"],  # touches every page
            "resources": {"requests": {"memory": "64Mi"}, "limits": {"memory": "64Mi"}},
        },
    },
}


async def test_a_tool_past_its_memory_limit_is_oom_killed_and_the_task_says_so(release: Release, mcp: McpHttp) -> None:
    """The limit set in the McpTool is the container's: the kernel kills the tool, the kubelet says
    `OOMKilled`, and the task ends as docs/tool-runtime.md §6 says, naming it."""
    release.plane.kubectl("apply", "-n", release.namespace, "-f", "-", input_text=json.dumps(MEMORY_HOG))

    async def listed() -> bool:
        tools = (await mcp.request(constants.METHOD_TOOLS_LIST, {})).result["tools"]
        return any(tool["name"] == "memory_hog" for tool in tools)

    await until(listed, timeout_s=60, interval_s=0.5)
    task_id = await mcp.start_task("memory_hog")
    done = await mcp.wait_status(task_id, "completed", "failed", timeout_s=TASK_WAIT_S)
    assert done["status"] == "completed", done
    assert done["result"]["isError"] is True
    assert "exited with code 137" in done["result"]["content"][0]["text"]
    assert "OOMKilled" in done["result"]["content"][0]["text"]
    (pod,) = release.job_pods(task_id)
    (container,) = pod["status"]["containerStatuses"]
    assert container["state"]["terminated"]["reason"] == "OOMKilled", container
    assert pod["spec"]["containers"][0]["resources"]["limits"]["memory"] == "64Mi"

    def described() -> str | None:
        text = release.plane.kubectl("describe", "mcptask", task_id, "-n", release.namespace)
        events = text.split("Events:", 1)[-1]
        return text if "OOMKilled" in events else None  # the task's Event (ToolError) names it too

    text = await until(described, timeout_s=30, interval_s=0.5)
    assert "ToolError" in text


async def test_the_task_completes_with_one_job_when_the_operator_pods_are_deleted_mid_run(
    release: Release, mcp: McpHttp
) -> None:
    task_id = await mcp.start_task("hello_world")
    asked = await mcp.wait_status(task_id, "input_required", timeout_s=TASK_WAIT_S)
    operators = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=operator"
    before = {pod["metadata"]["name"] for pod in release.json("pods", "-l", operators)["items"]}
    release.plane.kubectl("delete", "pods", "-n", release.namespace, "-l", operators, "--wait=false")

    def replaced() -> bool:
        pods = release.json("pods", "-l", operators)["items"]
        ready = [
            pod
            for pod in pods
            if pod["metadata"]["name"] not in before
            and any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))
        ]
        return len(ready) >= 1

    await until(replaced, timeout_s=TASK_WAIT_S, interval_s=1.0)
    key = next(iter(asked["inputRequests"]))
    assert "result" in (await mcp.update(task_id, {key: {"action": "accept", "content": {"input": "Ada"}}})).body
    done = await mcp.wait_status(task_id, "completed", "failed", timeout_s=TASK_WAIT_S)
    assert done["status"] == "completed", done
    assert done["result"]["content"][0]["text"] == "Hello, Ada!"
    jobs = [job["metadata"]["name"] for job in release.json("jobs")["items"] if task_id in job["metadata"]["name"]]
    assert jobs == [f"mcptask-{task_id}"]
    assert len(release.job_pods(task_id)) == 1, "the run was not started again"


QUOTA = {
    "apiVersion": "v1",
    "kind": "ResourceQuota",
    "metadata": {"name": "tools"},
    "spec": {"hard": {"requests.cpu": "8", "requests.memory": "8Gi", "limits.cpu": "16", "limits.memory": "16Gi"}},
}


def _restricted_pod(name: str) -> dict[str, Any]:
    """A pod that Pod Security `restricted` admits, with no requests or limits."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "main",
                    "image": images.IMAGE,
                    "command": ["true"],
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                }
            ],
        },
    }


async def test_a_namespace_with_a_cpu_and_memory_quota_admits_tool_pods_shaped_by_tool_defaults(
    release: Release, mcp: McpHttp
) -> None:
    """Issue 20 item 4: a ResourceQuota on requests and limits of cpu and memory refuses a pod without
    them; the chart's `toolDefaults.resources` give every tool pod all four, so a task's Job pod is
    admitted and the task completes (the resourcequota controller computes the quota's usage, without
    which its admission refuses every pod)."""
    plane, namespace = release.plane, release.namespace
    plane.kubectl("apply", "-n", namespace, "-f", "-", input_text=json.dumps(QUOTA))
    try:

        def computed() -> bool:
            used = (release.json("resourcequota", "tools").get("status") or {}).get("used") or {}
            return set(QUOTA["spec"]["hard"]) <= set(used)  # type: ignore[index]

        await until(computed, timeout_s=60, interval_s=0.5)
        bare = f"no-limits-{secrets.token_hex(3)}"
        with pytest.raises(subprocess.CalledProcessError) as refused:
            plane.kubectl("create", "-n", namespace, "-f", "-", input_text=json.dumps(_restricted_pod(bare)))
        assert "must specify" in refused.value.stderr and "limits.cpu" in refused.value.stderr, refused.value.stderr

        task_id = await mcp.start_task("divide", {"dividend": 6, "divisor": 3})
        done = await mcp.wait_status(task_id, "completed", "failed", timeout_s=TASK_WAIT_S)
        assert done["status"] == "completed", done
        assert done["result"]["content"][0]["text"] == "6 / 3 = 2.0"
        (pod,) = release.job_pods(task_id)
        resources = pod["spec"]["containers"][0]["resources"]
        assert resources["requests"] == {"cpu": "100m", "memory": "128Mi"}, resources
        assert resources["limits"] == {"cpu": TOOL_CPU_LIMIT, "memory": "1Gi"}, resources
    finally:
        plane.kubectl("delete", "resourcequota", "tools", "-n", namespace, "--ignore-not-found")


async def test_an_env_var_from_a_secret_reaches_the_tool_and_not_the_job_spec(release: Release, mcp: McpHttp) -> None:
    """Issue 20 item 4: `container.env[].valueFrom.secretKeyRef` becomes the pod's own reference (the
    operator never reads the value); the kubelet resolves it and the tool sees the value."""
    plane, namespace = release.plane, release.namespace
    value = f"s3cr3t-{secrets.token_hex(8)}"
    plane.kubectl("create", "secret", "generic", "tool-credential", "-n", namespace, f"--from-literal=token={value}")
    tool = {
        "apiVersion": "mcptasks.io/v1alpha1",
        "kind": "McpTool",
        "metadata": {"name": "show-credential"},
        "spec": {
            "name": "show_credential",
            "description": "Answers the credential its Secret gave it (a test tool).",
            "inputSchema": {"type": "object", "properties": {}, "additionalProperties": False},
            "execution": {"taskPolicy": "optional"},
            "container": {
                "image": images.IMAGE,
                "command": [
                    "python",
                    "-c",
                    "import os; from mcp_tasks.runtime import run; "
                    "run(lambda ctx: 'credential=' + os.environ['TOOL_CREDENTIAL'])",
                ],
                "env": [
                    {
                        "name": "TOOL_CREDENTIAL",
                        "valueFrom": {"secretKeyRef": {"name": "tool-credential", "key": "token"}},
                    }
                ],
            },
        },
    }
    plane.kubectl("apply", "-n", namespace, "-f", "-", input_text=json.dumps(tool))
    try:

        async def listed() -> bool:
            tools = (await mcp.request(constants.METHOD_TOOLS_LIST, {})).result["tools"]
            return any(t["name"] == "show_credential" for t in tools)

        await until(listed, timeout_s=60, interval_s=0.5)
        task_id = await mcp.start_task("show_credential")
        done = await mcp.wait_status(task_id, "completed", "failed", timeout_s=TASK_WAIT_S)
        assert done["status"] == "completed", done
        assert done["result"]["content"][0]["text"] == f"credential={value}"
        job = release.json("job", f"mcptask-{task_id}")
        assert value not in json.dumps(job), "the Job holds the reference, not the value"
        (env,) = [e for e in job["spec"]["template"]["spec"]["containers"][0]["env"] if e["name"] == "TOOL_CREDENTIAL"]
        assert env["valueFrom"] == {"secretKeyRef": {"name": "tool-credential", "key": "token"}}, env
    finally:
        plane.kubectl("delete", "mcptool", "show-credential", "-n", namespace, "--ignore-not-found")
        plane.kubectl("delete", "secret", "tool-credential", "-n", namespace, "--ignore-not-found")


def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


@pytest.mark.timeout(600)
async def test_a_gateway_pod_cut_off_from_the_api_server_leaves_its_service_unrestarted_and_comes_back(
    release: Release,
) -> None:
    """Issue 20 item 3, the probes for real: with every packet between one gateway pod and the API server
    dropped (host iptables rules on the pod's address and the API server's port, which `kubernetes.default`
    leads to), its watches fail, `/readyz` answers 503, the kubelet marks the pod not Ready and the
    EndpointSlice controller takes it out of the gateway Service; `/healthz` stays 200, so the kubelet
    does not restart it. Without the rules it is Ready and back behind the Service."""
    plane = release.plane
    selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=gateway"
    pods = [p for p in release.json("pods", "-l", selector)["items"] if _ready(p)]
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
    pod = pods[0]
    name, address = pod["metadata"]["name"], pod["status"]["podIP"]
    restarts = pod["status"]["containerStatuses"][0]["restartCount"]
    port = str(plane.api_port)
    rules = [
        ["INPUT", "-s", address, "-d", NODE_IP, "-p", "tcp", "--dport", port, "-j", "DROP"],
        ["OUTPUT", "-s", NODE_IP, "-d", address, "-p", "tcp", "--sport", port, "-j", "DROP"],
    ]
    own_url = f"http://{address}:"

    def serving(url: str) -> bool:
        return url.startswith(own_url)

    try:
        for rule in rules:
            subprocess.run(["iptables", "-I", *rule], check=True, timeout=30)

        def unready() -> dict[str, Any] | None:
            current = release.json("pod", name)
            out_of_service = not any(serving(u) for u in endpoint_urls(release, GATEWAY_SERVICE, "mcp", "/mcp"))
            return current if not _ready(current) and out_of_service else None

        current = await until(unready, timeout_s=180, interval_s=1.0)
        (container,) = current["status"]["containerStatuses"]
        assert container["restartCount"] == restarts and "running" in container["state"], container
        # the reason `/readyz` gives, read inside the pod (exec goes through the API server and the kubelet)
        reason = plane.kubectl(
            "exec",
            "-n",
            release.namespace,
            name,
            "--",
            "python",
            "-c",
            "import urllib.request as u, urllib.error as e\n"
            "try: u.urlopen('http://127.0.0.1:8000/readyz')\nexcept e.HTTPError as x: print(x.code, x.read().decode())",
        )
        assert reason.startswith("503") and "API server unreachable" in reason, reason
    finally:
        for rule in rules:
            subprocess.run(["iptables", "-D", *rule], check=False, timeout=30)

    def back() -> bool:
        current = release.json("pod", name)
        in_service = any(serving(u) for u in endpoint_urls(release, GATEWAY_SERVICE, "mcp", "/mcp"))
        return _ready(current) and in_service

    await until(back, timeout_s=180, interval_s=1.0)
    (container,) = release.json("pod", name)["status"]["containerStatuses"]
    assert container["restartCount"] == restarts, "a lost API server does not restart the gateway"


# The last two change the release itself: the module's port-forward goes to a pod the upgrade replaces.


def _gateway_pods(release: Release) -> dict[str, bool]:
    """Gateway pod name → Ready, of the pods not being deleted."""
    selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=gateway"
    pods = release.json("pods", "-l", selector)["items"]
    return {
        pod["metadata"]["name"]: any(
            c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", [])
        )
        for pod in pods
        if not pod["metadata"].get("deletionTimestamp")
    }


@pytest.mark.timeout(900)
async def test_a_task_waiting_for_input_survives_a_helm_upgrade_that_replaces_every_pod(
    release: Release, mcp: McpHttp
) -> None:
    task_id = await mcp.start_task("hello_world")
    await mcp.wait_status(task_id, "input_required", timeout_s=TASK_WAIT_S)
    before = set(_gateway_pods(release))
    release.plane.helm(
        "upgrade",
        RELEASE,
        str(CHART),
        *("--namespace", release.namespace, "--wait", "--timeout", INSTALL_TIMEOUT, "--reuse-values"),
        *("--set", "gateway.logLevel=DEBUG", "--set", "operator.logLevel=DEBUG"),
        timeout_s=600,
    )

    def replaced() -> bool:
        pods = _gateway_pods(release)
        return bool(pods) and not set(pods) & before and all(pods.values())

    await until(replaced, timeout_s=TASK_WAIT_S, interval_s=1.0)
    with port_forward(release.plane, release.namespace, f"service/{GATEWAY_SERVICE}", 80) as port:
        async with aiohttp.ClientSession() as session:
            upgraded = McpHttp(session, f"http://127.0.0.1:{port}/mcp", TOKEN)
            asked = await upgraded.wait_status(task_id, "input_required", timeout_s=60)
            key = next(iter(asked["inputRequests"]))
            answer = {key: {"action": "accept", "content": {"input": "Ada"}}}
            assert "result" in (await upgraded.update(task_id, answer)).body
            done = await upgraded.wait_status(task_id, "completed", "failed", timeout_s=TASK_WAIT_S)
    assert done["status"] == "completed", done
    assert done["result"]["content"][0]["text"] == "Hello, Ada!"


async def test_helm_uninstall_leaves_the_tasks_the_data_claim_and_the_crds(release: Release) -> None:
    """docs/kubernetes.md, "Upgrade and uninstall": workloads and accounts go; tasks, claim and CRDs stay."""
    tasks = set(release.plane.kubectl("get", "mcptasks", "-n", release.namespace, "-o", "name").split())
    assert tasks
    release.plane.helm("uninstall", RELEASE, "--namespace", release.namespace, "--wait", "--timeout", INSTALL_TIMEOUT)

    def gone() -> bool:
        out = release.plane.kubectl(
            "get",
            "deployments,services,serviceaccounts,roles,rolebindings",
            *("-n", release.namespace, "-l", f"app.kubernetes.io/instance={RELEASE}", "-o", "name"),
        )
        return not out.split() and not _gateway_pods(release)

    await until(gone, timeout_s=TASK_WAIT_S, interval_s=1.0)
    kept = release.plane.kubectl("get", "mcptasks,pvc", "-n", release.namespace, "-o", "name").split()
    assert tasks <= set(kept)
    assert f"persistentvolumeclaim/{RELEASE}-mcp-tasks-data" in kept
    assert "mcptasks.mcptasks.io" in release.plane.kubectl("get", "crds", "-o", "name")
    tools = release.plane.kubectl("get", "mcptools", "-n", release.namespace, "-o", "name").split()
    assert tools == ["mcptool.mcptasks.io/memory-hog"], "the examples go with the release, a user's McpTool stays"
