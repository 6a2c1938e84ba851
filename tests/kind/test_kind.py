"""End to end on a real cluster made with kind: the image, the Helm charts, real pods.

For users' CI with a container engine (Docker), `helm` and `pip install pytest-kind`
(.github/workflows/kind.yml). Skipped, saying why,
where there is none (this project's own CI machines have no container engine; there the same flows
run on the test control plane with the process node, tests/kube).

What it does: builds the image from the Dockerfile, loads it into a kind cluster, `helm install`s the
CRD chart and the main chart (with a ReadWriteOnce volume and one replica each, since kind has no
ReadWriteMany storage, and the example tools in the same image), port-forwards the gateway Service and
runs the SEP's hello_world flow over HTTP.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.conftest import McpHttp, until

REPO = Path(__file__).resolve().parents[2]
IMAGE = "mcp-tasks:kind-test"


def _engine_problem() -> str | None:
    if shutil.which("docker") is None:
        return "no container engine: the docker CLI is not installed"
    if subprocess.run(["docker", "info"], capture_output=True, check=False).returncode != 0:
        return "no container engine: `docker info` fails (is the Docker daemon running?)"
    if shutil.which("helm") is None:
        return "helm is not installed"
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


def test_hello_world_on_kind(cluster: Any, tmp_path: Path) -> None:
    kubectl = cluster.kubectl
    kubeconfig = str(cluster.kubeconfig_path)

    def helm(*args: str) -> None:
        subprocess.run(["helm", "--kubeconfig", kubeconfig, *args], check=True)

    helm("install", "mcp-tasks-crds", str(REPO / "charts" / "mcp-tasks-crds"), "--wait")
    kubectl("create", "namespace", "mcp-tasks")
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("tokens:\n  - {token: kind-token, tenant: kind, subject: tester}\n")
    kubectl("-n", "mcp-tasks", "create", "secret", "generic", "mcp-tasks-tokens", f"--from-file={tokens}")
    # kind has no ReadWriteMany storage: one replica each on a ReadWriteOnce volume
    helm(
        "install", "mcp-tasks", str(REPO / "charts" / "mcp-tasks"), "-n", "mcp-tasks", "--wait", "--timeout", "300s",
        "--set", "auth.existingSecret=mcp-tasks-tokens", "--set", "examples.enabled=true",
        "--set", f"image.repository={IMAGE.split(':', maxsplit=1)[0]}", "--set", f"image.tag={IMAGE.split(':')[1]}",
        "--set", "image.pullPolicy=Never", "--set", "persistence.accessModes={ReadWriteOnce}",
        "--set", "gateway.replicas=1", "--set", "operator.replicas=1",
    )  # fmt: skip

    with cluster.port_forward("service/mcp-tasks-gateway", 80, "-n", "mcp-tasks") as port:

        async def forwarding() -> bool:  # kubectl port-forward says nothing when it listens
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                return False
            writer.close()
            await writer.wait_closed()
            return True

        async def flow() -> str:
            await until(forwarding, timeout_s=30)
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
