"""Fixtures on a real control plane (etcd + kube-apiserver + kube-controller-manager built from Go modules,
plus the process node that runs our Jobs' pods as local processes).

Tests here skip with the reason when the binaries are not built, unless `MCPTASKS_REQUIRE_CONTROL_PLANE=1`
(set by `.ci/run`), which turns the skip into a failure so CI cannot pass without running them.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import aiohttp
import httpx2
import pytest
import yaml
from aiohttp import web
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ElicitRequestParams, ElicitResult

from mcp_tasks import gateway
from mcp_tasks.cli.gateway import build_gateway_app
from mcp_tasks.cli.serve import LINGERING_TIME_S
from mcp_tasks.cli.settings import KubernetesSettings, ServeSettings, Settings, validate
from mcp_tasks.client import TasksClientExtension
from mcp_tasks.gateway.context import Services
from mcp_tasks.gateway.transport import SERVICES_KEY
from mcp_tasks.protocol.models import GetTaskResult
from mcp_tasks.runner import RunnerSettings
from mcp_tasks.store.kubernetes import KubernetesTaskStore
from mcp_tasks.store.kubernetes.client import close_api_client
from mcp_tasks.tasks.limits import LimitSettings
from tests.conftest import REPO, TOOL_DIRS, McpHttp
from tests.conftest import until as shared_until
from tests.controlplane.cluster import (
    ControlPlane,
    ControlPlaneUnavailable,
    free_port,
    local_tool_manifests,
    testbin_dir,
    wait_until,
)

KUBE_WAIT_S = 60.0
"""How long the kube tests wait for the cluster to converge (a control plane on a loaded machine)."""


async def until(check: Callable[..., Any], timeout_s: float = KUBE_WAIT_S) -> Any:
    """`tests.conftest.until` with the kube tests' bound, reading every 0.2 s (each read runs kubectl);
    the first truthy value of `check()`."""
    return await shared_until(check, timeout_s=timeout_s, interval_s=0.2)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """One control plane for the whole session (starts in a few seconds)."""
    try:
        bin_dir = testbin_dir()
    except ControlPlaneUnavailable as exc:
        if os.environ.get("MCPTASKS_REQUIRE_CONTROL_PLANE") == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    with ControlPlane(tmp_path_factory.mktemp("control-plane"), bin_dir=bin_dir, process_node=True) as plane:
        yield plane


@pytest.fixture
def namespace(control_plane: ControlPlane) -> str:
    """A fresh namespace with the test, conformance and example McpTools applied (without `spec.warm`:
    `tests/kube/test_warm_tools.py` declares the warm ones it needs)."""
    name = f"t-{secrets.token_hex(4)}"
    control_plane.kubectl("create", "namespace", name)
    control_plane.kubectl(
        "apply", "-n", name, "-f", "-", input_text=yaml.safe_dump_all(local_tool_manifests(list(TOOL_DIRS), warm=False))
    )
    return name


@pytest.fixture
async def api_client(control_plane: ControlPlane) -> AsyncIterator[ApiClient]:
    configuration = Configuration()
    await config.load_kube_config(config_file=str(control_plane.kubeconfig), client_configuration=configuration)
    client = ApiClient(configuration)
    try:
        yield client
    finally:
        await close_api_client(client)


@dataclass
class Gateway:
    """A Kubernetes-mode gateway on a real socket."""

    url: str
    app: web.Application

    @property
    def services(self) -> Services:
        return self.app[SERVICES_KEY]

    @property
    def store(self) -> KubernetesTaskStore:
        store = self.services.store
        assert isinstance(store, KubernetesTaskStore)
        return store


def gateway_settings(plane: ControlPlane, namespace: str, data_dir: Path, **kube: Any) -> Settings:
    """Settings for `mcptasks gateway` against the test control plane."""
    kubernetes = replace(KubernetesSettings(kubeconfig=plane.kubeconfig, namespace=namespace, runner="none"), **kube)
    runner = RunnerSettings(lease_duration_s=3.0, claim_poll_s=0.2, sweep_interval_s=0.2, shutdown_grace_s=1.0)
    serve = ServeSettings(data_dir=data_dir, port=0)
    return validate(Settings(serve=serve, runner=runner, kubernetes=kubernetes), "gateway")


class Gateways:
    """Starts gateways (replicas) sharing one data folder, and stops them all at teardown."""

    def __init__(self, plane: ControlPlane, namespace: str, data_dir: Path) -> None:
        self.plane = plane
        self.namespace = namespace
        self.data_dir = data_dir
        self._runners: list[web.AppRunner] = []

    async def start(self, tokens_file: Path | None = None, limits: LimitSettings | None = None, **kube: Any) -> Gateway:
        settings = gateway_settings(self.plane, self.namespace, self.data_dir, **kube)
        if tokens_file is not None:
            settings = replace(settings, serve=replace(settings.serve, tokens_file=tokens_file))
        if limits is not None:
            settings = replace(settings, limits=limits)
        app = await build_gateway_app(settings)
        web_runner = gateway.create_runner(app, shutdown_timeout_s=2, lingering_time_s=LINGERING_TIME_S)
        await web_runner.setup()
        self._runners.append(web_runner)
        await web.TCPSite(web_runner, "127.0.0.1", 0).start()
        port = web_runner.addresses[0][1]
        return Gateway(f"http://127.0.0.1:{port}/mcp", app)

    async def aclose(self) -> None:
        for web_runner in reversed(self._runners):
            await web_runner.cleanup()


@pytest.fixture
async def gateways(control_plane: ControlPlane, namespace: str, tmp_path: Path) -> AsyncIterator[Gateways]:
    started = Gateways(control_plane, namespace, tmp_path)
    try:
        yield started
    finally:
        await started.aclose()


LEADER_ENV: Final = {
    "MCPTASKS_LEADER_LEASE_DURATION_S": "10",
    "MCPTASKS_LEADER_RENEW_DEADLINE_S": "7",
    "MCPTASKS_LEADER_RETRY_PERIOD_S": "0.5",
}
"""A short leader Lease for the tests (the defaults: 15, 10 and 2 s)."""


class Operators:
    """Starts `mcptasks operator` processes for one namespace (sharing the gateways' data folder)."""

    def __init__(self, plane: ControlPlane, namespace: str, data_dir: Path) -> None:
        self.plane = plane
        self.namespace = namespace
        self.data_dir = data_dir
        self.processes: list[subprocess.Popen[bytes]] = []
        self.port = free_port()

    def start(
        self,
        *flags: str,
        kubeconfig: Path | None = None,
        worker_port: int | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start an operator and wait for its worker API banner (kopf then starts watching).

        Pods reach the worker API at the first port (a Service in a cluster); a second replica running
        at the same time needs its own `worker_port` on this one machine. The leader Lease is short
        (`LEADER_ENV`: a killed leader is replaced within 10 s); `env` adds or overrides variables.
        """
        log = (self.data_dir / f"operator-{len(self.processes)}.log").open("wb")
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mcp_tasks.cli",
                "operator",
                "--kubeconfig",
                str(kubeconfig or self.plane.kubeconfig),
                "--namespace",
                self.namespace,
                "--worker-url",
                f"http://127.0.0.1:{self.port}",
                "--worker-port",
                str(worker_port or self.port),
                "--data-dir",
                str(self.data_dir),
                *flags,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env={**os.environ, "MCPTASKS_OPERATOR_SWEEP_INTERVAL_S": "1", **LEADER_ENV, **(env or {})},
        )
        log.close()
        self.processes.append(process)

        def started() -> bool:
            if b"worker API on" in self.log(process):
                return True
            if process.poll() is not None:
                raise RuntimeError(f"operator exited:\n{self.log(process).decode(errors='replace')}")
            return False

        wait_until(started, 30, lambda: f"operator did not start:\n{self.log(process).decode(errors='replace')}", 0.1)
        return process

    def log(self, process: subprocess.Popen[bytes]) -> bytes:
        return (self.data_dir / f"operator-{self.processes.index(process)}.log").read_bytes()

    def kill(self, process: subprocess.Popen[bytes]) -> None:
        """SIGKILL: the operator dies mid-work without any clean-up."""
        process.kill()
        process.wait()

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


@pytest.fixture
def operators(control_plane: ControlPlane, namespace: str, tmp_path: Path) -> Iterator[Operators]:
    started = Operators(control_plane, namespace, tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


@pytest.fixture
async def http_session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def client(session: aiohttp.ClientSession, gateway: Gateway, token: str | None = None) -> McpHttp:
    """A raw MCP client for `gateway`."""
    return McpHttp(session, gateway.url, token)


async def sep_hello_world(url: str, token: str | None = None) -> str:
    """SEP-2663 Example Message Flow with the official SDK: `hello_world`, answer "Luca", return the taskId.

    With `token`, every request carries `Authorization: Bearer <token>`.

    Asserts the question, the `input_required` step with key `name`, and the final "Hello, Luca!".
    """
    seen: list[GetTaskResult] = []

    async def record(task: GetTaskResult) -> None:
        seen.append(task)

    async def elicit(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        assert params.message == "Please enter your name."
        return ElicitResult(action="accept", content={"input": "Luca"})

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    timeout = httpx2.Timeout(30, read=300)
    async with httpx2.AsyncClient(headers=headers, timeout=timeout, follow_redirects=True) as http_client:
        transport = streamable_http_client(url, http_client=http_client)
        extensions = [TasksClientExtension(on_update=record)]
        async with Client(transport, extensions=extensions, elicitation_callback=elicit, cache=None) as sdk:
            result = await sdk.call_tool("hello_world", {})
    assert result.content[0].text == "Hello, Luca!"  # type: ignore[union-attr]
    statuses = [task.status.value for task in seen]
    assert "input_required" in statuses and statuses[-1] == "completed"
    asked = next(task for task in seen if task.status.value == "input_required")
    assert asked.input_requests is not None and list(asked.input_requests) == ["name"]
    return seen[-1].task_id


def kubectl_as(
    plane: ControlPlane, namespace: str, user: str, *args: str, input_text: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`kubectl --as=<user> -n <namespace> <args>` against `plane`, impersonating `user` (the admin
    kubeconfig may impersonate); the completed process, whatever its exit code (60 s bound)."""
    return subprocess.run(
        [str(plane.bin_dir / "kubectl"), "--kubeconfig", str(plane.kubeconfig), "-n", namespace, f"--as={user}", *args],
        input=input_text,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def await_admission_refusal(
    plane: ControlPlane, namespace: str, user: str, denied: str, *args: str, input_text: str | None = None
) -> None:
    """Block until the API server refuses `kubectl --as=<user> -n <namespace> <args> --dry-run=server` with
    `denied` in its message, re-asking every 0.2 s for up to `KUBE_WAIT_S`: a ValidatingAdmissionPolicy and
    its binding take effect only once the API server's informers have read them (a second or so after they
    are created; longer on a busy machine), and a test of what they refuse must not race that.

    Raises:
        RuntimeError: never refused so within `KUBE_WAIT_S` (the last answer in the message).
    """
    last: list[str] = [""]

    def refused() -> bool:
        result = kubectl_as(plane, namespace, user, *args, "--dry-run=server", input_text=input_text)
        last[0] = result.stderr or result.stdout
        return result.returncode != 0 and denied in result.stderr

    wait_until(refused, KUBE_WAIT_S, lambda: f"not refused with {denied!r}: {last[0]}")


def get_object(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    """The McpTask as the API server stores it (`kubectl get -o yaml`), or `None` when absent."""
    try:
        text = plane.kubectl("get", "mcptask", name, "-n", namespace, "-o", "yaml")
    except subprocess.CalledProcessError as exc:
        if "NotFound" in exc.stderr:
            return None
        raise
    loaded: dict[str, Any] = yaml.safe_load(text)
    return loaded


__all__ = ["REPO", "Gateway", "Gateways", "Operators", "client", "get_object"]
