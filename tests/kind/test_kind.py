"""End to end on a real cluster made with kind: the image, the manifests in deploy/kubernetes, real pods.

For users' CI with a container engine (Docker) and `pip install pytest-kind`. Skipped, saying why,
where there is none (this project's own CI machines have no container engine; there the same flows
run on the test control plane with the process node, tests/kube).

What it does: builds the image from the Dockerfile, loads it into a kind cluster, installs the CRDs,
deploy/kubernetes/rbac.yaml and mcp-tasks.yaml (with a ReadWriteOnce volume and one replica each,
since kind has no ReadWriteMany storage), declares the example `hello_world` tool running from the
same image, port-forwards the gateway and runs the SEP's hello_world flow over HTTP.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.conftest import McpHttp

REPO = Path(__file__).resolve().parents[2]
IMAGE = "mcp-tasks:kind-test"


def _engine_problem() -> str | None:
    if shutil.which("docker") is None:
        return "no container engine: the docker CLI is not installed"
    if subprocess.run(["docker", "info"], capture_output=True, check=False).returncode != 0:
        return "no container engine: `docker info` fails (is the Docker daemon running?)"
    if importlib.util.find_spec("pytest_kind") is None:  # optional: only users with a container engine install it
        return "pytest-kind is not installed (`pip install pytest-kind`)"
    return None


pytestmark = pytest.mark.skipif(
    _engine_problem() is not None,
    reason=f"kind end-to-end tests need a container engine: {_engine_problem()}; "
    "the same flows run on the test control plane in tests/kube",
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    kind_cluster = importlib.import_module("pytest_kind").KindCluster

    subprocess.run(["docker", "build", "-t", IMAGE, str(REPO)], check=True)
    kind = kind_cluster("mcp-tasks-e2e")
    kind.create()
    try:
        kind.load_docker_image(IMAGE)
        yield kind
    finally:
        kind.delete()


def _manifests() -> str:
    documents = [d for d in yaml.safe_load_all((REPO / "deploy/kubernetes/mcp-tasks.yaml").read_text()) if d]
    for document in documents:
        if document["kind"] == "PersistentVolumeClaim":
            document["spec"]["accessModes"] = ["ReadWriteOnce"]
        if document["kind"] == "Deployment":
            document["spec"]["replicas"] = 1
            for container in document["spec"]["template"]["spec"]["containers"]:
                container["image"] = IMAGE
                container["imagePullPolicy"] = "Never"
    return yaml.safe_dump_all(documents)


def test_hello_world_on_kind(cluster: Any, tmp_path: Path) -> None:

    kubectl = cluster.kubectl
    kubectl("apply", "--server-side", "-f", str(REPO / "crds"))
    kubectl("create", "namespace", "mcp-tasks")
    kubectl("apply", "-f", str(REPO / "deploy/kubernetes/rbac.yaml"))
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("tokens:\n  - {token: kind-token, tenant: kind, subject: tester}\n")
    kubectl("-n", "mcp-tasks", "create", "secret", "generic", "mcptasks-tokens", f"--from-file={tokens}")
    (tmp_path / "deploy.yaml").write_text(_manifests())
    kubectl("apply", "-f", str(tmp_path / "deploy.yaml"))
    tool = yaml.safe_load((REPO / "examples/tools/hello_world.yaml").read_text())
    tool["spec"]["container"].update({"image": IMAGE, "workingDir": "/app/examples/tools"})
    (tmp_path / "tool.yaml").write_text(yaml.safe_dump(tool))
    kubectl("apply", "-n", "mcp-tasks", "-f", str(tmp_path / "tool.yaml"))
    kubectl("-n", "mcp-tasks", "rollout", "status", "deployment/mcptasks-operator", "--timeout=180s")
    kubectl("-n", "mcp-tasks", "rollout", "status", "deployment/mcptasks-gateway", "--timeout=180s")

    with cluster.port_forward("service/mcptasks-gateway", 80, "-n", "mcp-tasks") as port:
        time.sleep(1)

        async def flow() -> str:
            async with aiohttp.ClientSession() as session:
                mcp = McpHttp(session, f"http://127.0.0.1:{port}/mcp", token="kind-token")
                task_id = await mcp.start_task("hello_world", {})
                asked = await mcp.wait_status(task_id, "input_required", timeout_s=180)
                assert list(asked["inputRequests"]) == ["name"]
                await mcp.update(task_id, {"name": {"action": "accept", "content": {"input": "Kind"}}})
                done = await mcp.wait_status(task_id, "completed", "failed", timeout_s=120)
                return str(done["result"]["content"][0]["text"])

        assert asyncio.run(flow()) == "Hello, Kind!"
    assert "completed" in kubectl("get", "mcptasks", "-n", "mcp-tasks")
