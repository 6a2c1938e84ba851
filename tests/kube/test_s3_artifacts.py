"""Artifacts in S3-compatible object storage on Kubernetes: gateways + operator on the real control plane,
tool pods on the process node, and a real S3 server (SeaweedFS, built by tests/objectstore/build.sh).

Our choice (docs/kubernetes.md §7, "Artifacts in object storage"): the operator writes a result above
the inline cap as one object, the McpTask holds the link, any gateway replica serves it to the owner
only, the operator's expiry deletes it with the McpTask, and while the store is down a read is 503 and
a finishing tool's result write is 503 (its runtime retries), so the result lands when it is back.
No data folder is shared: each gateway and the operator get their own (only the requestState key is
shared by the gateways, as the chart does with a Secret; the operator never holds it).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from mcp_types import jsonrpc

from mcp_tasks import gateway
from mcp_tasks.cli.gateway import build_gateway_app
from mcp_tasks.cli.serve import LINGERING_TIME_S, load_key
from mcp_tasks.store.settings import ArtifactSettings
from tests.conftest import McpHttp, until
from tests.controlplane.cluster import ControlPlane
from tests.kube.conftest import Gateway, Operators, gateway_settings, get_object
from tests.objectstore.server import S3Server, big_result_short_ttl_tool, running

SIZE = 300 * 1024
PREFIX = "kube/"
WAIT_S = 60.0
"""A Job's pod on the process node, a 300 KB result through the worker API, on 2 busy cores."""

TOKENS = {
    "tokens": [
        {"token": "alice", "tenant": "acme", "subject": "alice"},
        {"token": "eve", "tenant": "evil", "subject": "eve"},
    ]
}


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with running(tmp_path_factory.mktemp("s3")) as server:
        yield server


class S3Deployment:
    """Gateways with their own data folders and artifacts in one bucket, plus the operators' environment."""

    def __init__(
        self, plane: ControlPlane, namespace: str, folder: Path, bucket: str, artifacts: ArtifactSettings
    ) -> None:
        self.plane = plane
        self.bucket = bucket
        self.namespace = namespace
        self.folder = folder
        self.artifacts = artifacts
        self.tokens = folder / "tokens.yaml"
        self.tokens.write_text(yaml.safe_dump(TOKENS))
        self._runners: list[web.AppRunner] = []

    async def gateway(self) -> Gateway:
        """A gateway replica with a data folder of its own holding only the shared requestState key."""
        data_dir = self.folder / f"gateway-{len(self._runners)}"
        data_dir.mkdir()
        (data_dir / "request-state.key").write_bytes(load_key(self.folder, "request-state.key"))
        settings = gateway_settings(self.plane, self.namespace, data_dir)
        settings = replace(settings, serve=replace(settings.serve, tokens_file=self.tokens), artifacts=self.artifacts)
        app = await build_gateway_app(settings)
        web_runner = gateway.create_runner(app, shutdown_timeout_s=2, lingering_time_s=LINGERING_TIME_S)
        await web_runner.setup()
        self._runners.append(web_runner)
        await web.TCPSite(web_runner, "127.0.0.1", 0).start()
        return Gateway(f"http://127.0.0.1:{web_runner.addresses[0][1]}/mcp", app)

    async def aclose(self) -> None:
        for web_runner in reversed(self._runners):
            await web_runner.cleanup()


@pytest.fixture
async def deployment(
    control_plane: ControlPlane,
    namespace: str,
    tmp_path: Path,
    s3_server: S3Server,
    operators: Operators,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[S3Deployment]:
    """The operator (its data folder is `tmp_path`: no artifacts) and gateways sharing one requestState key,
    all with their artifacts in a new bucket of `s3_server`."""
    bucket = await s3_server.create_bucket()
    for name, value in s3_server.environment(bucket, PREFIX).items():
        monkeypatch.setenv(name, value)  # the operator process inherits them
    control_plane.kubectl("apply", "-n", namespace, "-f", "-", input_text=yaml.safe_dump(big_result_short_ttl_tool()))
    operators.start()
    started = S3Deployment(control_plane, namespace, tmp_path, bucket, s3_server.settings(bucket, PREFIX))
    try:
        yield started
    finally:
        await started.aclose()


def link_of(task: dict[str, Any]) -> str:
    return str(next(block for block in task["result"]["content"] if block["type"] == "resource_link")["uri"])


async def test_a_300_kb_result_written_by_the_operator_is_read_from_the_bucket_by_its_owner_only(
    deployment: S3Deployment, s3_server: S3Server, tmp_path: Path, http_session: aiohttp.ClientSession
) -> None:
    bucket = deployment.bucket
    first, second = await deployment.gateway(), await deployment.gateway()
    task_id = await McpHttp(http_session, first.url, "alice").start_task("big_result", {"size": SIZE})
    done = await McpHttp(http_session, second.url, "alice").wait_status(
        task_id, "completed", "failed", timeout_s=WAIT_S
    )
    assert done["status"] == "completed", done
    assert len(json.dumps(done)) < 4096, "the McpTask holds a link, not the 300 KB"
    assert await s3_server.keys(bucket) == [f"{PREFIX}{task_id}/result.json"]
    assert not list(tmp_path.glob("**/artifacts")), "no artifact on any local disk"
    uri = link_of(done)
    read = await McpHttp(http_session, second.url, "alice").request("resources/read", {"uri": uri})
    assert json.loads(read.result["contents"][0]["text"])["content"][0]["text"] == "x" * SIZE
    missing = await McpHttp(http_session, first.url, "alice").request(
        "resources/read", {"uri": uri.replace(task_id, "0" * 32)}
    )
    foreign = await McpHttp(http_session, first.url, "eve").request("resources/read", {"uri": uri})
    assert foreign.error["code"] == jsonrpc.INVALID_PARAMS
    assert foreign.error["message"] == missing.error["message"], "a foreign artifact looks like a missing one"


async def test_the_operators_expiry_deletes_the_object_with_the_mcptask(
    deployment: S3Deployment,
    s3_server: S3Server,
    control_plane: ControlPlane,
    namespace: str,
    http_session: aiohttp.ClientSession,
) -> None:
    bucket = deployment.bucket
    alice = McpHttp(http_session, (await deployment.gateway()).url, "alice")
    task_id = await alice.start_task("big_result_short_ttl", {"size": SIZE})
    done = await alice.wait_status(task_id, "completed", "failed", timeout_s=WAIT_S)
    assert done["status"] == "completed", done
    assert await s3_server.keys(bucket) == [f"{PREFIX}{task_id}/result.json"]
    await until(lambda: get_object(control_plane, namespace, task_id) is None, timeout_s=WAIT_S)  # sweep every 1 s

    async def no_objects() -> bool:
        return not await s3_server.keys(bucket)

    await until(no_objects, timeout_s=WAIT_S)


async def test_the_store_down_is_503_and_a_result_finished_meanwhile_lands_when_it_is_back(
    deployment: S3Deployment, s3_server: S3Server, operators: Operators, http_session: aiohttp.ClientSession
) -> None:
    bucket = deployment.bucket
    alice = McpHttp(http_session, (await deployment.gateway()).url, "alice")
    before = await alice.start_task("big_result", {"size": SIZE})
    before_uri = link_of(await alice.wait_status(before, "completed", timeout_s=WAIT_S))
    operator = operators.processes[0]

    await asyncio.to_thread(s3_server.stop)
    try:
        refused = await alice.request("resources/read", {"uri": before_uri})
        assert refused.status == 503 and refused.headers["Retry-After"].isdigit(), refused.body
        assert refused.error["code"] == jsonrpc.INTERNAL_ERROR
        assert "unreachable" in refused.error["message"]
        during = await alice.start_task("big_result", {"size": SIZE})
        # the tool's result write was answered 503 by the operator's worker API (its log says why)
        await until(lambda: b"artifact store" in operators.log(operator), timeout_s=WAIT_S)
        assert (await alice.get(during)).result["status"] == "working", "the result is not dropped, not failed"
    finally:
        await asyncio.to_thread(s3_server.start)

    done = await alice.wait_status(during, "completed", "failed", timeout_s=WAIT_S)  # the runtime's back-off ≤ 5 s
    assert done["status"] == "completed", done
    for task_id, uri in ((before, before_uri), (during, link_of(done))):
        read = await alice.request("resources/read", {"uri": uri})
        assert json.loads(read.result["contents"][0]["text"])["content"][0]["text"] == "x" * SIZE, task_id
    assert await s3_server.keys(bucket) == sorted(f"{PREFIX}{t}/result.json" for t in (before, during))
