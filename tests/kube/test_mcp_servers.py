"""McpServer on the real control plane: the CRD (schema, CEL rules, status subresource, printer columns), the
catalog serving its discovered tools from status, the per-call Job's pod shape, and, on the process node,
discovery and calls in per-call and warm pods (docs/mcp-servers.md §6). Under a real kubelet: `tests/node/`.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes_asyncio.client import ApiClient

from mcp_tasks.operator.server_jobs import FIFO_VOLUME, build_server_job
from mcp_tasks.operator.settings import OperatorSettings
from mcp_tasks.store.kubernetes.catalog import KubernetesToolCatalog
from mcp_tasks.tasks.servers import Discovery, ServerToolSpec, parse_server_manifest, tool_specs
from tests.conftest import PLAIN_CAPS
from tests.controlplane.cluster import ControlPlane, free_port
from tests.kube.conftest import Gateways, Operators, client, until
from tests.kube.test_warm_tools import warm_namespace, watch_writes
from tests.mcp_servers import everything_command, time_command

__all__ = ["warm_namespace"]  # the fixture, used by the warm tests below

EVERYTHING: dict[str, Any] = {
    "apiVersion": "mcptasks.io/v1alpha1",
    "kind": "McpServer",
    "metadata": {"name": "everything"},
    "spec": {
        "transport": "stdio",
        "container": {
            "image": "registry.example/mcp/server-everything:2026.8.31",
            "command": ["mcp-server-everything", "stdio"],
        },
        "tools": {"get-env": {"expose": False}},
    },
}


def _apply(plane: ControlPlane, namespace: str, *documents: dict[str, Any]) -> str:
    return plane.kubectl("apply", "-n", namespace, "-f", "-", input_text=yaml.safe_dump_all(documents))


def test_the_crd_refuses_what_the_operator_could_not_run(control_plane: ControlPlane, namespace: str) -> None:
    no_command = json.loads(json.dumps(EVERYTHING))
    no_command["metadata"]["name"] = "no-command"
    del no_command["spec"]["container"]["command"]
    with pytest.raises(subprocess.CalledProcessError) as refused:
        _apply(control_plane, namespace, no_command)
    assert "spec.container.command: Required value" in str(refused.value.stderr)
    http_without_port = {**EVERYTHING, "metadata": {"name": "http"}, "spec": {**EVERYTHING["spec"]}}
    http_without_port["spec"]["transport"] = "streamable-http"
    with pytest.raises(subprocess.CalledProcessError) as refused:
        _apply(control_plane, namespace, http_without_port)
    assert "transport streamable-http needs spec.http" in str(refused.value.stderr)
    no_image = json.loads(json.dumps(EVERYTHING))
    no_image["metadata"]["name"] = "no-image"
    del no_image["spec"]["container"]["image"]
    with pytest.raises(subprocess.CalledProcessError) as refused:
        _apply(control_plane, namespace, no_image)
    assert "image" in str(refused.value.stderr)


def test_status_is_a_subresource_and_kubectl_get_shows_transport_tools_and_ready(
    control_plane: ControlPlane, namespace: str
) -> None:
    _apply(control_plane, namespace, EVERYTHING)
    since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {
        "protocolVersion": "2025-11-25",
        "serverInfo": {"name": "mcp-servers/everything", "version": "2.0.0", "futureField": 1},
        "tools": [{"name": "echo", "inputSchema": {"type": "object"}, "x-vendor": {"kept": True}}],
        "toolCount": 1,
        "servedTools": ["echo"],
        "observedGeneration": 1,
        "conditions": [
            {
                "type": "Discovered",
                "status": "True",
                "reason": "Discovered",
                "lastTransitionTime": since,
            },
            {"type": "Ready", "status": "True", "reason": "Served", "lastTransitionTime": since},
        ],
    }
    control_plane.kubectl(
        "patch", "-n", namespace, "mcpserver/everything", "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}),
    )  # fmt: skip
    read = json.loads(control_plane.kubectl("get", "-n", namespace, "mcpserver/everything", "-o", "json"))
    assert read["status"]["tools"][0]["x-vendor"] == {"kept": True}  # a Tool is kept verbatim
    assert read["status"]["serverInfo"]["futureField"] == 1
    assert read["spec"]["transport"] == "stdio"
    table = control_plane.kubectl("get", "-n", namespace, "mcpservers").splitlines()
    assert table[0].split()[:4] == ["NAME", "TRANSPORT", "TOOLS", "READY"], table
    assert table[1].split()[:4] == ["everything", "stdio", "1", "True"], table
    wide = control_plane.kubectl("get", "-n", namespace, "mcps", "-o", "wide").splitlines()
    assert "2025-11-25" in wide[1] and "mcp-servers/everything" in wide[1], wide
    # a spec change through the main resource never touches status (the subresource is the operator's)
    control_plane.kubectl(
        "patch", "-n", namespace, "mcpserver/everything", "--type=merge", "-p", json.dumps({"status": {"toolCount": 9}})
    )
    read = json.loads(control_plane.kubectl("get", "-n", namespace, "mcpserver/everything", "-o", "json"))
    assert read["status"]["toolCount"] == 1


def _discovered(tools: list[dict[str, Any]], generation: int = 1) -> dict[str, Any]:
    """An McpServer status as the operator's discovery writes it (`operator/server_discovery.py`)."""
    return {
        "protocolVersion": "2025-06-18",
        "serverInfo": {"name": "mcp-time", "version": "1.0.0"},
        "capabilities": {"tools": {"listChanged": True}},
        "tools": tools,
        "observedGeneration": generation,
    }


GET_TIME: dict[str, Any] = {
    "name": "get_current_time",
    "description": "Get current time in a specific timezone",
    "inputSchema": {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"timezone": {"type": "string"}},
        "required": ["timezone"],
    },
    "annotations": {"readOnlyHint": True},
    "_meta": {"vendor/x": 1},
}


async def test_the_catalog_serves_discovered_tools_from_status_and_refuses_a_clash_naming_both(
    control_plane: ControlPlane, namespace: str, api_client: ApiClient
) -> None:
    time_server: dict[str, Any] = {
        "apiVersion": "mcptasks.io/v1alpha1",
        "kind": "McpServer",
        "metadata": {"name": "time"},
        "spec": {
            "container": {"image": "registry.example/mcp/time:1", "command": ["mcp-server-time"]},
            "toolNamePrefix": "",
        },
    }
    _apply(control_plane, namespace, time_server)
    catalog = KubernetesToolCatalog(api_client, namespace, watch_timeout_s=30)
    await catalog.open()
    try:
        assert catalog.get_tool("get_current_time") is None  # not discovered yet: nothing served
        verdict = catalog.server_verdicts()["time"]
        assert not verdict.discovered and verdict.served == ()
        clash = {**GET_TIME, "name": "divide"}  # an McpTool of examples/tools declares `divide`
        status = _discovered([GET_TIME, clash])
        control_plane.kubectl(
            "patch", "-n", namespace, "mcpserver/time", "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": status}),
        )  # fmt: skip
        served = await until(lambda: catalog.get_tool("get_current_time"))
        assert isinstance(served, ServerToolSpec)
        assert served.tool.input_schema == GET_TIME["inputSchema"]  # verbatim, in its own dialect
        assert served.listed == GET_TIME and served.execution.idempotent  # readOnlyHint: a re-run is safe
        assert served.server_tool_name == "get_current_time"
        assert "get_current_time" in [tool.name for tool in catalog.list_tools()]
        divide = catalog.get_tool("divide")
        assert divide is not None and not isinstance(divide, ServerToolSpec)  # the McpTool keeps its name
        verdict = catalog.server_verdicts()["time"]
        assert verdict.discovered and verdict.served == ("get_current_time",)
        (refusal,) = verdict.refusals
        assert f"mcpserver/time in namespace {namespace}" in refusal and "'divide'" in refusal
        assert f"mcptool/divide in namespace {namespace}" in refusal  # both sides named
        # spec.warm: each tool is warm, its workers are those the operator wrote into `status.warm.<tool>`
        _apply(control_plane, namespace, {**time_server, "spec": {**time_server["spec"], "warm": {"minWorkers": 1}}})
        await until(lambda: catalog.server_verdicts()["time"].generation == 2)
        warm = catalog.get_tool("get_current_time")
        assert warm is not None and warm.warm is not None and catalog.warm_endpoints("get_current_time") == ()
        ready = {"get_current_time": {"endpoints": ["127.1.0.9:8080"], "readyWorkers": 1, "service": "s:8080"}}
        control_plane.kubectl(
            "patch", "-n", namespace, "mcpserver/time", "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": {"warm": ready}}),
        )  # fmt: skip
        assert await until(lambda: catalog.warm_endpoints("get_current_time")) == ("127.1.0.9:8080",)
        control_plane.kubectl("delete", "-n", namespace, "mcpserver/time")
        await until(lambda: catalog.get_tool("get_current_time") is None)
    finally:
        await catalog.aclose()


def test_the_api_server_accepts_the_per_call_job_with_its_native_sidecar(
    control_plane: ControlPlane, namespace: str
) -> None:
    """The Job of `operator/server_jobs.py`, validated by the real API server (server-side dry run): the native
    sidecar (`restartPolicy: Always` on an init container), the FIFO volume, the probes and the shapes."""
    task = {
        "apiVersion": "mcptasks.io/v1alpha1",
        "kind": "McpTask",
        "metadata": {"name": "c" * 32, "namespace": namespace, "uid": "u-3", "labels": {}},
    }
    settings = OperatorSettings(worker_url="http://op:8081/", bridge_image="registry.example/mcp-tasks:1")
    for transport, extra in (("stdio", {}), ("streamable-http", {"http": {"port": 3001, "path": "/mcp"}})):
        document = json.loads(json.dumps(EVERYTHING))
        document["spec"] = {**document["spec"], "transport": transport, **extra}
        server = parse_server_manifest(document, "mcpserver/everything")
        listed = {"name": "echo", "inputSchema": {"type": "object"}}
        discovery = Discovery(protocol_version="2025-11-25", server_info={"name": "e"}, tools=(listed,))
        (tool,), _ = tool_specs(server, discovery, ("python", "-m", "mcp_tasks.bridge"))
        job = build_server_job(task, tool, settings)
        created = json.loads(
            control_plane.kubectl(
                "create", "--dry-run=server", "-n", namespace, "-o", "json", "-f", "-", input_text=json.dumps(job)
            )
        )
        pod = created["spec"]["template"]["spec"]
        assert pod["initContainers"][-1]["restartPolicy"] == "Always", transport
        assert [c["name"] for c in pod["containers"]] == ["tool"]


BRIDGE_IMAGE = "localhost/mcp-tasks/mcp-tasks:dev"
"""The project's image, as the process node knows it (`python` is this machine's, with mcp_tasks)."""


def time_manifest(**spec: Any) -> dict[str, Any]:
    """mcp-server-time (stdio) as McpServer `time`, with `spec` added."""
    container = {"image": "registry.example/mcp/time:2026.10.19", "command": time_command()}
    return {
        "apiVersion": "mcptasks.io/v1alpha1",
        "kind": "McpServer",
        "metadata": {"name": "time"},
        "spec": {"transport": "stdio", "container": container, **spec},
    }


def server_status(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(plane.kubectl("get", "-n", namespace, f"mcpserver/{name}", "-o", "json"))
    return found.get("status") or {}


def condition(status: dict[str, Any], kind: str) -> str | None:
    return next((c["status"] for c in status.get("conditions") or [] if c.get("type") == kind), None)


async def test_a_stdio_server_is_discovered_in_a_pod_and_its_tool_runs_per_call_as_a_job(
    control_plane: ControlPlane,
    namespace: str,
    operators: Operators,
    gateways: Gateways,
    http_session: aiohttp.ClientSession,
) -> None:
    """mcp-server-time (PyPI, stdio, nobody here wrote it): discovery runs in a Job of the call's shape (the
    server as a native sidecar behind FIFOs, the bridge reporting to the worker API with its pod's token), the
    status shows what it listed, and `get_current_time` runs as a task in a Job of its own."""
    operators.start(env={"MCPTASKS_BRIDGE_IMAGE": BRIDGE_IMAGE})
    time_server = time_manifest()
    _apply(control_plane, namespace, time_server)
    status = await until(
        lambda: (s := server_status(control_plane, namespace, "time")) and condition(s, "Ready") == "True" and s,
        timeout_s=90,
    )
    assert condition(status, "Discovered") == "True" and status["observedGeneration"] == 1
    assert status["serverInfo"]["name"] == "mcp-time" and status["protocolVersion"]
    assert {tool["name"] for tool in status["tools"]} >= {"get_current_time", "convert_time"}
    assert status["toolCount"] == len(status["tools"]) and "lastError" not in status
    table = control_plane.kubectl("get", "-n", namespace, "mcpservers").splitlines()
    assert table[1].split()[:4] == ["time", "stdio", str(status["toolCount"]), "True"], table
    mcp = client(http_session, await gateways.start())
    task_id = await mcp.start_task("get_current_time", {"timezone": "Europe/Paris"})
    done = await mcp.wait_status(task_id, "completed", "failed", timeout_s=90)
    assert done["status"] == "completed" and not done["result"].get("isError"), done
    assert "Europe/Paris" in done["result"]["content"][0]["text"]
    jobs = json.loads(
        control_plane.kubectl("get", "-n", namespace, "jobs", "-l", f"mcptasks.io/task-id={task_id}", "-o", "json")
    )["items"]
    (job,) = jobs
    pod = job["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["fifos", "server"]
    assert pod["initContainers"][1]["image"] == "registry.example/mcp/time:2026.10.19"


async def test_server_everything_long_operation_elicitation_cancel_and_an_operator_kill_on_kubernetes(
    control_plane: ControlPlane,
    namespace: str,
    operators: Operators,
    gateways: Gateways,
    http_session: aiohttp.ClientSession,
) -> None:
    """@modelcontextprotocol/server-everything (npm, stdio) per call: the long-running operation shows its
    progress in `tasks/get` and completes with the server's text although the operator is killed (SIGKILL)
    mid-operation and another starts; the elicitation goes `input_required` and completes after `tasks/update`;
    a cancelled long operation ends `cancelled` and its Job and pod go."""
    first = operators.start(env={"MCPTASKS_BRIDGE_IMAGE": BRIDGE_IMAGE})
    everything = {
        "apiVersion": "mcptasks.io/v1alpha1",
        "kind": "McpServer",
        "metadata": {"name": "everything"},
        "spec": {
            "transport": "stdio",
            "container": {"image": "registry.example/mcp/everything:2026.8.31", "command": everything_command()},
            "toolDefaults": {"execution": {"cancelGraceSeconds": 2}},
        },
    }
    _apply(control_plane, namespace, everything)
    await until(lambda: condition(server_status(control_plane, namespace, "everything"), "Ready") == "True", 90)
    mcp = client(http_session, await gateways.start())

    long = await mcp.start_task("trigger-long-running-operation", {"duration": 8, "steps": 8})
    running = await mcp.wait_task(long, lambda t: "of 8" in t.get("statusMessage", ""), timeout_s=60)
    assert running["status"] == "working"  # the server's notifications/progress, through the bridge
    operators.kill(first)
    operators.start(env={"MCPTASKS_BRIDGE_IMAGE": BRIDGE_IMAGE})
    done = await mcp.wait_status(long, "completed", "failed", timeout_s=60)
    assert done["status"] == "completed", done
    assert done["result"]["content"] == [
        {"type": "text", "text": "Long running operation completed. Duration: 8 seconds, Steps: 8."}
    ]
    jobs = control_plane.kubectl("get", "-n", namespace, "jobs", "-l", f"mcptasks.io/task-id={long}", "-o", "name")
    assert len(jobs.split()) == 1, jobs  # the new operator adopted the run: no second Job

    asking = await mcp.start_task("trigger-elicitation-request", {})
    asked = await mcp.wait_status(asking, "input_required", timeout_s=60)
    ((key, request),) = asked["inputRequests"].items()
    assert request["method"] == "elicitation/create"
    await mcp.update(asking, {key: {"action": "accept", "content": {"name": "Ada Lovelace", "check": True}}})
    answered = await mcp.wait_status(asking, "completed", "failed", timeout_s=60)
    assert "Name: Ada Lovelace" in "".join(block["text"] for block in answered["result"]["content"]), answered

    cancelled = await mcp.start_task("trigger-long-running-operation", {"duration": 60, "steps": 60})
    await mcp.wait_task(cancelled, lambda t: "of 60" in t.get("statusMessage", ""), timeout_s=60)
    await mcp.cancel(cancelled)
    ended = await mcp.wait_status(cancelled, "cancelled", "completed", "failed", timeout_s=60)
    assert ended["status"] == "cancelled", ended
    selector = f"mcptasks.io/task-id={cancelled}"
    await until(lambda: not control_plane.kubectl("get", "-n", namespace, "pods", "-l", selector, "-o", "name"))


async def test_a_streamable_http_server_is_reached_on_the_pods_loopback(
    control_plane: ControlPlane,
    namespace: str,
    operators: Operators,
    gateways: Gateways,
    http_session: aiohttp.ClientSession,
) -> None:
    """server-everything over Streamable HTTP: the sidecar listens on `http.port`, its startup probe holds the
    bridge back until it does, and discovery and a call reach it at 127.0.0.1 inside the pod."""
    port = free_port()
    operators.start(env={"MCPTASKS_BRIDGE_IMAGE": BRIDGE_IMAGE})
    everything = {
        "apiVersion": "mcptasks.io/v1alpha1",
        "kind": "McpServer",
        "metadata": {"name": "everything-http"},
        "spec": {
            "transport": "streamable-http",
            "http": {"port": port, "path": "/mcp"},
            "toolNamePrefix": "http-",
            "container": {
                "image": "registry.example/mcp/everything:2026.8.31",
                "command": everything_command("streamableHttp"),
                "env": [{"name": "PORT", "value": str(port)}],
            },
        },
    }
    _apply(control_plane, namespace, everything)
    status = await until(
        lambda: (s := server_status(control_plane, namespace, "everything-http")) and condition(s, "Ready") == "True"
        and s,
        timeout_s=90,
    )  # fmt: skip
    assert "http-get-sum" in status["servedTools"]
    mcp = client(http_session, await gateways.start())
    summed = await mcp.wait_status(await mcp.start_task("http-get-sum", {"a": 1, "b": 41}), "completed", "failed")
    assert summed["result"]["content"][0]["text"] == "The sum of 1 and 41 is 42.", summed


async def test_a_server_that_cannot_start_says_why_and_a_fixed_spec_is_discovered_again(
    control_plane: ControlPlane,
    namespace: str,
    operators: Operators,
    http_session: aiohttp.ClientSession,
) -> None:
    """A server whose command fails: `Discovered` False with the bridge's reason in `lastError`, `Ready` False,
    no tool served. The spec fixed (generation 2): discovered again without waiting for the retry interval.
    A report without a discovery pod's token is refused like an unknown path."""
    operator = operators.start(env={"MCPTASKS_BRIDGE_IMAGE": BRIDGE_IMAGE})
    container: dict[str, Any] = {"image": "registry.example/mcp/time:1", "command": ["/nonexistent/mcp-server-time"]}
    broken: dict[str, Any] = {
        "apiVersion": "mcptasks.io/v1alpha1",
        "kind": "McpServer",
        "metadata": {"name": "time"},
        "spec": {"container": container},
    }
    _apply(control_plane, namespace, broken)
    status = await until(lambda: (s := server_status(control_plane, namespace, "time")).get("lastError") and s, 90)
    assert condition(status, "Discovered") == "False" and condition(status, "Ready") == "False"
    assert "discovery exited with code" in status["lastError"], status["lastError"]
    assert status.get("toolCount", 0) == 0
    report = {"result": {"content": [], "structuredContent": {"protocolVersion": "x", "serverInfo": {}, "tools": []}}}
    url = f"http://127.0.0.1:{operators.port}/v1/discoveries/time/result"
    for headers in ({}, {"Authorization": "Bearer not-a-pod-token"}):
        async with http_session.post(url, json=report, headers=headers) as refused:
            assert refused.status == 404
    fixed = {**broken, "spec": {"container": {**container, "command": time_command()}}}
    _apply(control_plane, namespace, fixed)
    status = await until(
        lambda: (s := server_status(control_plane, namespace, "time")) and condition(s, "Ready") == "True" and s, 90
    )
    assert status["observedGeneration"] == 2 and "lastError" not in status and status["toolCount"] >= 2
    assert operator.poll() is None


def warm_pods(plane: ControlPlane, namespace: str, server: str, tool: str) -> list[dict[str, Any]]:
    selector = f"app.kubernetes.io/component=warm-worker,mcptasks.io/mcp-server={server},mcptasks.io/tool={tool}"
    listed = json.loads(plane.kubectl("get", "-n", namespace, "pods", "-l", selector, "-o", "json"))
    return [pod for pod in listed["items"] if not pod["metadata"].get("deletionTimestamp")]


def servers_of(pod: str, binary: str) -> list[int]:
    """pids of the local processes running `binary` that hold the stdio FIFOs of pod `pod` open (the process node
    runs a pod's containers as local processes, its `emptyDir` a folder named after the pod): the pod's server,
    once its `sh` opened the FIFOs (when the bridge first connected) and became it. (The SDK's stdio server
    moves its stdin and stdout to other descriptors, so every descriptor is looked at.)"""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode().split("\0")
            links = [os.readlink(fd) for fd in (entry / "fd").iterdir()] if binary in argv else []
        except OSError:
            continue
        if any(f"/{pod}-" in link and link.endswith(f"/{FIFO_VOLUME}/in") for link in links):
            found.append(int(entry.name))
    return found


def no_jobs_of(plane: ControlPlane, namespace: str, task_id: str) -> bool:
    return not plane.kubectl("get", "-n", namespace, "jobs", "-l", f"mcptasks.io/task-id={task_id}", "-o", "name")


async def test_a_warm_stdio_server_serves_synchronous_calls_and_tasks_from_its_warm_pod(
    control_plane: ControlPlane,
    warm_namespace: str,
    operators: Operators,
    gateways: Gateways,
    api_client: ApiClient,
    http_session: aiohttp.ClientSession,
) -> None:
    """mcp-server-time with `spec.warm` (docs/mcp-servers.md §6, issue 32's "per call and warm"): each tool gets a
    Deployment of the per-call pod's shape (FIFOs, the server as a native sidecar, the bridge serving warm calls),
    owned by the McpServer, its ready pods in `status.warm.<tool>`. A synchronous `get_current_time` goes straight
    to the warm pod (no McpTask, no Job: nothing written to the API) and a task runs there under the operator's
    lease with no Job; both are answered by the same server process, the one reading that pod's FIFO."""
    namespace = warm_namespace
    operators.start(env={"MCPTASKS_BRIDGE_IMAGE": BRIDGE_IMAGE})
    time_server = time_manifest(warm={"minWorkers": 1, "concurrency": 2})
    _apply(control_plane, namespace, time_server)
    gateway = await gateways.start()
    catalog: Any = gateway.services.catalog
    await until(lambda: catalog.warm_endpoints("get_current_time") and catalog.warm_endpoints("convert_time"), 120)
    status = server_status(control_plane, namespace, "time")
    assert status["warm"]["get_current_time"]["readyWorkers"] == 1, status["warm"]
    (pod,) = warm_pods(control_plane, namespace, "time", "get_current_time")
    assert [c["name"] for c in pod["spec"]["initContainers"]] == ["fifos", "server"]
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
    (owner,) = json.loads(
        control_plane.kubectl("get", "-n", namespace, "deployments", "-l", "mcptasks.io/tool=get_current_time", "-o",
                              "json")
    )["items"][0]["metadata"]["ownerReferences"]  # fmt: skip
    assert (owner["kind"], owner["name"]) == ("McpServer", "time")
    name = pod["metadata"]["name"]
    binary = time_command()[0]
    assert servers_of(name, binary) == [], "the server starts on the first call (its sh waits for the bridge's FIFO)"

    mcp = client(http_session, gateway)
    seen: list[str] = []
    started = asyncio.Event()
    watcher = asyncio.create_task(watch_writes(api_client, namespace, seen, started))
    try:
        await asyncio.wait_for(started.wait(), 10)
        reply = (await mcp.call_tool("get_current_time", {"timezone": "Europe/Paris"}, caps=PLAIN_CAPS)).result
        # Stays: no event says "no write is coming"; a second lets any write the call made reach the watch.
        await asyncio.sleep(1.0)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    assert not reply.get("isError") and "Europe/Paris" in reply["content"][0]["text"], reply
    assert seen == [], f"a synchronous call to a warm server wrote to the API: {seen}"
    (server_pid,) = servers_of(name, binary)  # the warm pod's server process took the call

    task_id = await mcp.start_task("get_current_time", {"timezone": "Asia/Tokyo"})
    done = await mcp.wait_status(task_id, "completed", "failed", timeout_s=60)
    assert done["status"] == "completed" and "Asia/Tokyo" in done["result"]["content"][0]["text"], done
    assert no_jobs_of(control_plane, namespace, task_id)  # no per-call Job: the warm pod ran it
    assert servers_of(name, binary) == [server_pid]  # over the same connection, to the same server process
    task = json.loads(control_plane.kubectl("get", "-n", namespace, "mcptask", task_id, "-o", "json"))
    assert task["status"]["attempt"] == 1

    # No longer warm: its Deployments go, and so do its `status.warm` entries (a tool warm again later must not
    # offer these workers' addresses); its calls run per call again.
    control_plane.kubectl("patch", "-n", namespace, "mcpserver/time", "--type=json",
                          "-p", '[{"op": "remove", "path": "/spec/warm"}]')  # fmt: skip
    await until(lambda: not server_status(control_plane, namespace, "time").get("warm"), 60)
    await until(lambda: not catalog.warm_endpoints("get_current_time"))
    deployments = control_plane.kubectl("get", "-n", namespace, "deployments", "-l", "mcptasks.io/mcp-server=time")
    assert "get_current_time" not in deployments and "mcpserver-time" not in deployments, deployments


async def test_a_warm_servers_long_operation_runs_as_a_task_on_its_warm_pod_with_progress(
    control_plane: ControlPlane,
    warm_namespace: str,
    operators: Operators,
    gateways: Gateways,
    http_session: aiohttp.ClientSession,
) -> None:
    """server-everything made warm once discovered (its other tools hidden, so one pool runs): the long-running
    operation as a task runs on the warm pod (the lease's call names that pod's endpoint; no Job), shows the
    server's progress in `tasks/get` while it runs and completes with the server's text."""
    namespace = warm_namespace
    operators.start(env={"MCPTASKS_BRIDGE_IMAGE": BRIDGE_IMAGE})
    long_op = "trigger-long-running-operation"
    everything = json.loads(json.dumps(EVERYTHING))
    everything["spec"] = {
        "transport": "stdio",
        "container": {**EVERYTHING["spec"]["container"], "command": everything_command()},
    }
    _apply(control_plane, namespace, everything)
    status = await until(
        lambda: (s := server_status(control_plane, namespace, "everything")) and condition(s, "Ready") == "True" and s,
        timeout_s=90,
    )
    hidden = {tool["name"]: {"expose": False} for tool in status["tools"] if tool["name"] != long_op}
    everything["spec"] = {**everything["spec"], "tools": hidden, "warm": {"minWorkers": 1}}
    _apply(control_plane, namespace, everything)
    gateway = await gateways.start()
    catalog: Any = gateway.services.catalog
    endpoints = await until(lambda: catalog.warm_endpoints(long_op), 120)
    assert [tool.name for tool in catalog.list_tools() if tool.warm is not None] == [long_op]
    mcp = client(http_session, gateway)

    task_id = await mcp.start_task(long_op, {"duration": 4, "steps": 4})
    running = await mcp.wait_task(task_id, lambda t: "of 4" in t.get("statusMessage", ""), timeout_s=60)
    assert running["status"] == "working"  # the server's notifications/progress, through the warm bridge
    lease = json.loads(control_plane.kubectl("get", "-n", namespace, "mcptask", task_id, "-o", "json"))["status"]
    assert lease["lease"]["call"]["endpoint"] in endpoints, lease  # the warm pod runs it
    done = await mcp.wait_status(task_id, "completed", "failed", timeout_s=60)
    assert done["status"] == "completed", done
    assert done["result"]["content"] == [
        {"type": "text", "text": "Long running operation completed. Duration: 4 seconds, Steps: 4."}
    ]
    assert no_jobs_of(control_plane, namespace, task_id)
